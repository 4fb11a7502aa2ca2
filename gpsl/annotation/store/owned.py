"""A store owns its files: the folder of its model files, progress files, worker logs and
training locks is ``<models base>/store-<store id>/``, where the store id is the store's own
random id kept in its database (``store_info.store_id``, schema 7).  Two stores in one
folder (two SQLite files beside each other, or two PostgreSQL databases served from one
working directory) share the base but never a file: their project and version ids may be
equal, their store ids are not.

A saved model is loaded only through :func:`model_path`, which refuses, with one line, a
version without a model folder, a missing folder, and a folder of another store; a folder
recorded before schema 7 (``<base>/<project>/<version>``, possibly written by another store
with the same ids) loads only when the saved model's bound trace is the one the version
recorded."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from sqlalchemy import text

from gpsl.annotation.store.db import Database
from gpsl.errors import InputError

#: the name of a store's folder under the models base
PREFIX = "store-"
_STORE_FOLDER = re.compile(r"^store-[0-9a-f]{32}$")


def default_models_root(db) -> Path:
    """``$GPSL_MODELS`` if set, else ``models/`` next to a SQLite file, else
    ``data/models`` under the working directory (PostgreSQL)."""
    env = os.environ.get("GPSL_MODELS", "").strip()
    if env:
        return Path(env).expanduser()
    if db.path is not None:
        return db.path.expanduser().resolve().parent / "models"
    return Path.cwd() / "data" / "models"


def store_id(db) -> str:
    """The store's own id (32 hex digits), written when the store was created or migrated."""
    value = db.read(lambda c: c.execute(text(
        "SELECT value FROM store_info WHERE key = 'store_id'")).scalar())
    if not value:
        raise InputError("the store has no store id (store_info.store_id); open it with this "
                         "gpsl to migrate it", source=db.where)
    return str(value)


def own_root(base, sid: str) -> Path:
    """The store ``sid``'s folder under the models ``base`` (``base`` itself when it is
    already that folder, e.g. a worker handed its store's folder)."""
    base = Path(base)
    name = PREFIX + sid
    return base if base.name == name else base / name


class Home:
    """What the services take (training jobs, the pipeline, the reports): the store's
    database and its own folder of files under ``models_base`` (default:
    :func:`default_models_root`), never the facade.  It pickles as the database's address,
    timeout and the models base, and opens the database again where it is unpickled (a Dask
    job)."""

    def __init__(self, db: Database, models_base: str | os.PathLike | None = None):
        self.db = db
        self.models_base = Path(models_base) if models_base else default_models_root(db)
        self._own: Path | None = None

    @property
    def target(self) -> str:
        """The database's address (a file path or URL; it may hold a password)."""
        return self.db.target

    @property
    def models_root(self) -> Path:
        """``<models base>/store-<store id>`` (:func:`own_root`), read once."""
        if self._own is None:
            self._own = own_root(self.models_base, store_id(self.db))
        return self._own

    def own_root(self, base=None) -> Path:
        """This store's own folder under ``base`` (default: the models base)."""
        return self.models_root if base is None else own_root(base, store_id(self.db))

    def close(self) -> None:
        self.db.dispose()

    def __getstate__(self) -> dict:
        return {"target": self.db.target, "timeout": self.db.timeout,
                "models_base": str(self.models_base)}

    def __setstate__(self, state) -> None:
        self.__init__(Database(state["target"], timeout=state["timeout"]),
                      state["models_base"])


def _trace_matches(path: Path, recorded) -> bool:
    """True when the saved model at ``path`` has the bound trace ``recorded`` (exactly: the
    same numbers written by the same fit)."""
    try:
        with open(path / "model.json", encoding="utf-8") as fh:
            meta = json.loads(fh.read(1 << 26))
    except (OSError, ValueError):
        return False
    trace = meta.get("bound_trace") if isinstance(meta, dict) else None
    if not isinstance(trace, list) or recorded is None:
        return False
    try:
        return [float(v) for v in trace] == [float(v) for v in recorded]
    except (TypeError, ValueError):
        return False


def model_path(root, version: dict) -> Path:
    """The model folder of ``version`` (a version dict of the store whose own folder is
    ``root``), or :class:`InputError` (one line) when it has none, when it is missing, or
    when it is another store's: under ``root``'s base but in another ``store-*`` folder, or
    (a folder recorded before schema 7) a saved model whose bound trace is not the version's.
    """
    root = Path(root)
    number = version.get("number", version.get("id"))
    where = f"model version {number}"
    if not version.get("path"):
        raise InputError(f"{where} has no saved model (status {version.get('status')})",
                         source=where)
    path = Path(version["path"])
    if not path.is_dir():
        raise InputError(f"the model folder of {where} is missing: {path}", source=where)
    mine = root / str(int(version["project_id"])) / str(int(version["id"]))
    if path.resolve() == mine.resolve():
        return path
    if any(_STORE_FOLDER.match(part) for part in path.parts) or \
            not _trace_matches(path, version.get("bound_trace")):
        raise InputError(f"the model folder {path} belongs to another store, not to {where} "
                         "of this one; refused", source=where)
    return path
