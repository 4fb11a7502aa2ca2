"""SQLite annotation project store (standard-library ``sqlite3`` only, no Streamlit).

One :class:`Store` wraps one database file.  It holds no connection: every public
method opens a fresh connection (context manager), runs, and closes it, so one ``Store``
may be shared by Streamlit's script threads and several processes may use the same file.

* WAL journal, a busy timeout (30 s by default) plus retries with backoff for the few
  cases SQLite reports busy at once, foreign keys on; lock contention never surfaces as
  "database is locked" (after the timeout: :class:`StoreBusyError`).
* Every write runs in one ``BEGIN IMMEDIATE`` transaction, committed at the end and
  rolled back on any exception: a method either writes everything or nothing.
* The schema is versioned with ``PRAGMA user_version`` and created on open.
* Concurrent edits of the same token: last write wins; both writes stay in the history.
* Each ``Store`` keeps one idle "anchor" connection that is never queried, so closing the
  per-operation connections does not checkpoint and delete the WAL every time.

Storage formats
---------------
* ``projects.labels``/``offsets``/``settings``, ``sentences.tokens`` (a list of column
  lists), ``model_versions.settings``/``bound_trace``/``metrics``/``classes`` and
  ``query_rounds.items`` are JSON text.
* ``predictions.marginals`` is an NPY blob: ``np.save(BytesIO, float32 (L, J) array,
  allow_pickle=False)``; it is read back with ``allow_pickle=False``, so float32 input
  round-trips bit-exactly (other dtypes are converted to float32).
  ``predictions.confidence`` is the raw little-endian float32 vector of per-token
  confidences (the largest marginal of each token); ``min_unlabeled_confidence`` (the
  lowest confidence among the sentence's *unlabeled* tokens, NULL when all are labeled)
  is kept current by every label write and orders :meth:`Store.queue`.
* Times are ISO-8601 UTC strings (``2024-05-01T12:00:00.000+00:00``).

Unknown ids raise :class:`NotFoundError`; bad user data (labels outside the project's
label set, duplicate project names, token indices out of range ...) raise
:class:`gpsl.errors.InputError` with a one-line message.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np

from gpsl.errors import GpslError, InputError
from gpsl.io import Sentence, read_conll

__all__ = [
    "SCHEMA_VERSION",
    "SAMPLE_PROJECT_NAME",
    "NotFoundError",
    "Store",
    "StoreBusyError",
    "default_db_path",
    "sort_labels",
]

SCHEMA_VERSION = 1
SAMPLE_PROJECT_NAME = "Sample (news entities)"
SPLITS = ("train", "heldout")
SOURCES = ("human", "accepted")
STATUSES = ("running", "done", "failed", "killed")
_INHERITED: list = []  # anchor connections inherited through fork(): kept, never closed
_PROJECT_FIELDS = ("name", "labels", "template", "offsets", "kernel", "settings")

_SCHEMA = """
CREATE TABLE projects (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    labels TEXT NOT NULL,
    template TEXT NOT NULL DEFAULT '',
    offsets TEXT NOT NULL DEFAULT '[-1,1]',
    kernel TEXT NOT NULL DEFAULT 'linear',
    created_at TEXT NOT NULL,
    settings TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE sentences (
    id INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    doc TEXT,
    line INTEGER,
    split TEXT NOT NULL DEFAULT 'train' CHECK (split IN ('train', 'heldout')),
    tokens TEXT NOT NULL,
    n_tokens INTEGER NOT NULL CHECK (n_tokens > 0),
    n_labeled INTEGER NOT NULL DEFAULT 0,
    UNIQUE (project_id, position)
);
CREATE INDEX sentences_by_split
    ON sentences(project_id, split, position, n_tokens, n_labeled);
CREATE TABLE annotations (
    sentence_id INTEGER NOT NULL REFERENCES sentences(id) ON DELETE CASCADE,
    token_index INTEGER NOT NULL,
    label TEXT NOT NULL,
    annotator TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT 'human' CHECK (source IN ('human', 'accepted')),
    PRIMARY KEY (sentence_id, token_index)
) WITHOUT ROWID;
CREATE TABLE annotation_history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    sentence_id INTEGER NOT NULL REFERENCES sentences(id) ON DELETE CASCADE,
    token_index INTEGER NOT NULL,
    old_label TEXT,
    new_label TEXT,
    source TEXT,
    annotator TEXT NOT NULL,
    at TEXT NOT NULL,
    action TEXT NOT NULL CHECK (action IN ('set', 'clear', 'undo', 'import')),
    batch TEXT,
    undone_by INTEGER
);
CREATE INDEX history_by_project ON annotation_history(project_id, id);
CREATE INDEX history_by_token ON annotation_history(sentence_id, token_index, id);
CREATE INDEX history_by_batch ON annotation_history(batch) WHERE batch IS NOT NULL;
CREATE INDEX history_undoable ON annotation_history(project_id, id)
    WHERE undone_by IS NULL AND action IN ('set', 'clear');
CREATE INDEX history_undoable_by ON annotation_history(project_id, annotator, id)
    WHERE undone_by IS NULL AND action IN ('set', 'clear');
CREATE TABLE gold_labels (
    sentence_id INTEGER NOT NULL REFERENCES sentences(id) ON DELETE CASCADE,
    token_index INTEGER NOT NULL,
    label TEXT NOT NULL,
    PRIMARY KEY (sentence_id, token_index)
) WITHOUT ROWID;
CREATE TABLE model_versions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    created_at TEXT NOT NULL,
    finished_at TEXT,
    settings TEXT NOT NULL DEFAULT '{}',
    classes TEXT,
    bound_trace TEXT,
    metrics TEXT,
    path TEXT,
    n_labeled_tokens INTEGER,
    status TEXT NOT NULL DEFAULT 'running'
        CHECK (status IN ('running', 'done', 'failed', 'killed')),
    active INTEGER NOT NULL DEFAULT 0 CHECK (active IN (0, 1)),
    error TEXT
);
CREATE INDEX model_versions_by_project ON model_versions(project_id, id);
CREATE UNIQUE INDEX one_active_model ON model_versions(project_id) WHERE active = 1;
CREATE TABLE predictions (
    model_version_id INTEGER NOT NULL REFERENCES model_versions(id) ON DELETE CASCADE,
    sentence_id INTEGER NOT NULL REFERENCES sentences(id) ON DELETE CASCADE,
    marginals BLOB NOT NULL,
    confidence BLOB NOT NULL,
    min_confidence REAL NOT NULL,
    min_unlabeled_confidence REAL,
    PRIMARY KEY (model_version_id, sentence_id)
);
CREATE INDEX predictions_by_sentence ON predictions(sentence_id);
CREATE INDEX predictions_queue
    ON predictions(model_version_id, sentence_id, min_unlabeled_confidence);
CREATE TABLE query_rounds (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    model_version_id INTEGER REFERENCES model_versions(id) ON DELETE SET NULL,
    created_at TEXT NOT NULL,
    strategy TEXT NOT NULL,
    items TEXT NOT NULL
);
CREATE INDEX query_rounds_by_project ON query_rounds(project_id, id);
CREATE INDEX query_rounds_by_version ON query_rounds(model_version_id);
CREATE TABLE skips (
    sentence_id INTEGER NOT NULL REFERENCES sentences(id) ON DELETE CASCADE,
    annotator TEXT NOT NULL,
    at TEXT NOT NULL,
    PRIMARY KEY (sentence_id, annotator)
) WITHOUT ROWID
"""


class NotFoundError(GpslError, LookupError):
    """A project, sentence or model version id that is not in the store."""


class StoreBusyError(GpslError):
    """Another process kept the store locked for longer than the store's timeout."""


def _is_busy(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "database is locked" in text or "database is busy" in text or \
        "database table is locked" in text


# ----------------------------------------------------------------------------- helpers


def default_db_path(app_dir: str | os.PathLike) -> Path:
    """``$GPSL_DB`` if set and non-empty, else ``<app_dir>/data/gpsl.sqlite3``."""
    env = os.environ.get("GPSL_DB", "").strip()
    if env:
        return Path(env).expanduser()
    return Path(app_dir) / "data" / "gpsl.sqlite3"


def sort_labels(labels) -> list[str]:
    """Sort a label set sensibly: by entity type, ``B-`` before ``I-`` (then other
    prefixes), plain labels such as ``O`` last."""
    prefix_rank = {"B": 0, "I": 1, "E": 2, "S": 3, "L": 2, "U": 3}

    def key(label: str):
        head, sep, kind = label.partition("-")
        if sep and len(head) == 1 and kind:
            return (0, kind, prefix_rank.get(head.upper(), 9), head)
        return (1, label, 0, "")

    return sorted(set(labels), key=key)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (Path, os.PathLike)):
        return os.fspath(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def _dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=_json_default)


def _loads(text, default=None):
    return default if text is None else json.loads(text)


def _encode_marginals(arr: np.ndarray) -> bytes:
    buf = BytesIO()
    np.save(buf, np.ascontiguousarray(arr, dtype=np.float32), allow_pickle=False)
    return buf.getvalue()


def _decode_marginals(blob: bytes) -> np.ndarray:
    return np.load(BytesIO(blob), allow_pickle=False)


def _min_unlabeled(confidence: np.ndarray, labeled) -> float | None:
    mask = np.ones(confidence.shape[0], dtype=bool)
    idx = [t for t in labeled if 0 <= t < confidence.shape[0]]
    if idx:
        mask[idx] = False
    return float(confidence[mask].min()) if mask.any() else None


def _check_annotator(annotator) -> str:
    name = str(annotator).strip() if annotator is not None else ""
    if not name:
        raise InputError("annotator name is empty", source="<annotator>")
    return name


def _check_labels(labels) -> list[str]:
    if isinstance(labels, str) or not isinstance(labels, Sequence):
        raise InputError("labels must be a list of strings", source="<project>")
    out = [str(x) for x in labels]
    if not out:
        raise InputError("the label set is empty", source="<project>")
    for lab in out:
        if not lab or lab != lab.strip() or len(lab.split()) != 1 or lab == "_":
            raise InputError(f"invalid label {lab!r} (empty, '_' or contains whitespace)",
                             source="<project>")
    dup = sorted({x for x in out if out.count(x) > 1})
    if dup:
        raise InputError(f"duplicate labels: {', '.join(dup)}", source="<project>")
    return out


def _check_offsets(offsets) -> list[int]:
    try:
        out = [int(x) for x in offsets]
        ok = all(float(x) == int(x) for x in offsets)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise InputError(f"offsets must be a list of integers, got {offsets!r}", source="<project>")
    return out


def _check_name(name) -> str:
    text = str(name).strip() if name is not None else ""
    if not text:
        raise InputError("project name is empty", source="<project>")
    return text


def _check_split(split) -> str:
    if split not in SPLITS:
        raise InputError(f"split must be 'train' or 'heldout', got {split!r}", source="<import>")
    return split


def _token(tok) -> tuple[str, ...]:
    if isinstance(tok, str):
        return (tok,)
    return tuple(str(c) for c in tok)


def _sentence_parts(obj):
    """(tokens, labels, line, doc) of a gpsl.io.Sentence-like object or a dict."""
    if isinstance(obj, Mapping):
        return obj.get("tokens"), obj.get("labels"), obj.get("line"), obj.get("doc")
    return (getattr(obj, "tokens", None), getattr(obj, "labels", None),
            getattr(obj, "line", None), None)


def _gold_labels(obj):
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get("labels")
    if hasattr(obj, "labels"):
        return obj.labels
    return obj


def _pid_alive(pid) -> bool | None:
    """True/False when the process is known alive/gone, None when it cannot be told."""
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return None
    if pid <= 0 or os.name == "nt":  # os.kill(pid, 0) would *terminate* it on Windows
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: exists but belongs to someone else
        return True
    try:  # an unreaped child is a zombie: os.kill succeeds but it is dead
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return False
    except (OSError, IndexError):
        pass
    return True


def _project_dict(row) -> dict:
    d = {
        "id": row["id"],
        "name": row["name"],
        "labels": json.loads(row["labels"]),
        "template": row["template"],
        "offsets": json.loads(row["offsets"]),
        "kernel": row["kernel"],
        "created_at": row["created_at"],
        "settings": json.loads(row["settings"]),
    }
    if "n_sentences" in row.keys():
        d["n_sentences"] = row["n_sentences"]
    return d


def _version_dict(row) -> dict:
    return {
        "id": row["id"],
        "project_id": row["project_id"],
        "created_at": row["created_at"],
        "finished_at": row["finished_at"],
        "settings": _loads(row["settings"], {}),
        "classes": _loads(row["classes"]),
        "bound_trace": _loads(row["bound_trace"]),
        "metrics": _loads(row["metrics"]),
        "path": row["path"],
        "n_labeled_tokens": row["n_labeled_tokens"],
        "status": row["status"],
        "active": bool(row["active"]),
        "error": row["error"],
    }


def _history_dict(row) -> dict:
    return {
        "id": row["id"],
        "project_id": row["project_id"],
        "sentence_id": row["sentence_id"],
        "position": row["position"],
        "token_index": row["token_index"],
        "old_label": row["old_label"],
        "new_label": row["new_label"],
        "source": row["source"],
        "annotator": row["annotator"],
        "at": row["at"],
        "action": row["action"],
        "undone": row["undone_by"] is not None,
        "undone_by": row["undone_by"],
    }


# ------------------------------------------------------------------------------- store


class Store:
    """The annotation project store in the SQLite file ``path``.

    Holds only the path and the timeout, so one instance is safe to share between
    threads (e.g. cached with ``st.cache_resource``) and several processes may open the
    same file.  The parent directory and the schema are created when missing.

    Parameters
    ----------
    path:
        Database file (``":memory:"`` is not supported: each call opens a new
        connection).  See :func:`default_db_path`.
    timeout:
        Seconds to wait for another writer's lock (SQLite's busy timeout, then retries
        with backoff) before :class:`StoreBusyError`; "database is locked" never
        reaches the caller.
    """

    def __init__(self, path: str | os.PathLike, *, timeout: float = 30.0):
        if str(path) == ":memory:" or not str(path):
            raise ValueError("Store needs a file path (a new connection is opened per call)")
        self.path = Path(path).expanduser()
        self.timeout = float(timeout)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._anchor: sqlite3.Connection | None = None
        self._anchor_pid = 0
        try:
            self._init_schema()
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as exc:
            raise InputError(f"not a gpsl database ({exc})", source=str(self.path)) from exc
        self._open_anchor()

    def _open_anchor(self) -> None:
        """Keep one idle connection open for the life of the Store.

        It is never used for queries (each operation still gets its own connection); it
        only stops every per-operation close from being the *last* connection, which makes
        SQLite checkpoint and delete the WAL each time (~20x slower writes).
        """
        anchor = sqlite3.connect(self.path, timeout=self.timeout, check_same_thread=False)
        try:  # maps the WAL index
            self._retry(lambda: anchor.execute("SELECT 1 FROM projects LIMIT 1").fetchall())
        except BaseException:
            anchor.close()
            raise
        self._anchor, self._anchor_pid = anchor, os.getpid()

    def close(self) -> None:
        """Close the idle anchor connection (optional; also done when garbage-collected)."""
        anchor, self._anchor = self._anchor, None
        if anchor is not None:
            if self._anchor_pid == os.getpid():
                anchor.close()
            else:
                _INHERITED.append(anchor)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self) -> dict:  # picklable (e.g. for multiprocessing): path + timeout
        return {"path": self.path, "timeout": self.timeout}

    def __setstate__(self, state) -> None:
        self.path, self.timeout = state["path"], state["timeout"]
        self._anchor, self._anchor_pid = None, 0
        self._open_anchor()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    # -- connections ---------------------------------------------------------------------

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        if self._anchor is not None and self._anchor_pid != os.getpid():
            _INHERITED.append(self._anchor)  # forked: never touch the parent's connection
            self._open_anchor()
        conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA synchronous = NORMAL")
            yield conn
        finally:
            conn.close()

    def _retry(self, fn):
        """``fn()``, retried with jittered exponential backoff while SQLite reports the
        database locked or busy, for up to ``timeout`` seconds in all; then
        :class:`StoreBusyError`.  SQLite's busy handler covers most waits; a few cases
        return ``SQLITE_BUSY`` at once (switching a new file to WAL while another process
        opens it, WAL recovery), and those must not reach the user either."""
        deadline = time.monotonic() + max(self.timeout, 0.1)
        delay = 0.002
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise StoreBusyError(
                        f"{self.path}: the annotation store stayed busy for "
                        f"{self.timeout:g} s (another process holds its write lock); "
                        "try again") from exc
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.2)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A connection inside ``BEGIN IMMEDIATE``; commit on success, rollback on error.
        Waiting for the write lock (busy timeout, then backoff) happens at ``BEGIN``,
        before anything is read, so the transaction body always runs exactly once."""
        with self._connect() as conn:
            self._retry(lambda: conn.execute("BEGIN IMMEDIATE"))
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A connection inside a read transaction (one consistent snapshot, taken at the
        start with the same busy handling as writes)."""
        with self._connect() as conn:

            def begin():
                conn.execute("BEGIN")
                try:
                    conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise

            self._retry(begin)
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")

    def _init_schema(self) -> None:
        self._retry(self._init_schema_once)

    def _init_schema_once(self) -> None:
        with self._connect() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                conn.execute("PRAGMA journal_mode = WAL")  # persistent in the file
                conn.execute("BEGIN IMMEDIATE")
                try:
                    if conn.execute("PRAGMA user_version").fetchone()[0] == 0:
                        for stmt in _SCHEMA.split(";"):
                            if stmt.strip():
                                conn.execute(stmt)
                        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                version = SCHEMA_VERSION
            if version > SCHEMA_VERSION:
                raise GpslError(
                    f"{self.path}: database schema version {version} is newer than this "
                    f"gpsl supports ({SCHEMA_VERSION}); upgrade gpsl")

    # -- internal lookups ----------------------------------------------------------------

    @staticmethod
    def _project_row(conn, project_id):
        row = conn.execute("SELECT * FROM projects WHERE id = ?", (project_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no project with id {project_id}")
        return row

    @staticmethod
    def _sentence_info(conn, sentence_id):
        row = conn.execute(
            "SELECT s.id, s.project_id, s.n_tokens, s.split, s.tokens, p.labels"
            " FROM sentences s JOIN projects p ON p.id = s.project_id WHERE s.id = ?",
            (sentence_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no sentence with id {sentence_id}")
        return row

    @staticmethod
    def _version_row(conn, version_id):
        row = conn.execute("SELECT * FROM model_versions WHERE id = ?",
                           (version_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no model version with id {version_id}")
        return row

    # -- projects ------------------------------------------------------------------------

    def create_project(self, name: str, labels: Sequence[str], template: str = "",
                       offsets: Sequence[int] = (-1, 1), kernel: str = "linear",
                       settings: Mapping | None = None, *, sentences=None, heldout=None,
                       heldout_gold=None, doc: str | None = None,
                       annotator: str = "import") -> int:
        """Create a project (with its first sentences) and return its id.

        ``labels`` is the ordered label set (unique, no whitespace, not ``_``);
        ``template`` CRF++ template text; ``offsets`` e.g. ``[-1, 1]``; ``settings`` any
        JSON-able dict.  A duplicate name raises :class:`InputError`.

        ``sentences`` (split ``'train'``) and ``heldout`` (split ``'heldout'``, with the
        optional parallel ``heldout_gold`` label lists) are added as by
        :meth:`add_sentences` (``doc``, ``annotator`` as there) in the *same*
        transaction: any problem with any sentence raises and nothing is written, not
        even the project row.
        """
        annotator = _check_annotator(annotator)
        with self._write() as conn:
            pid = self._create_project(conn, name, labels, template, offsets, kernel, settings)
            if sentences is not None:
                self._add_sentences(conn, pid, list(sentences), "train", doc, annotator, None)
            if heldout:
                self._add_sentences(conn, pid, list(heldout), "heldout", doc, annotator,
                                    heldout_gold)
            return pid

    def _create_project(self, conn, name, labels, template, offsets, kernel, settings) -> int:
        name = _check_name(name)
        labels = _check_labels(labels)
        offsets = _check_offsets(offsets)
        if conn.execute("SELECT 1 FROM projects WHERE name = ?", (name,)).fetchone():
            raise InputError(f"a project named {name!r} already exists", source="<project>")
        cur = conn.execute(
            "INSERT INTO projects (name, labels, template, offsets, kernel, created_at, settings)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (name, _dumps(labels), str(template or ""), _dumps(offsets), str(kernel), _now(),
             _dumps(dict(settings or {}))))
        return cur.lastrowid

    def list_projects(self) -> list[dict]:
        """All projects (dicts as :meth:`get_project`, plus ``n_sentences``), by id."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT p.*, (SELECT COUNT(*) FROM sentences s WHERE s.project_id = p.id)"
                " AS n_sentences FROM projects p ORDER BY p.id").fetchall()
        return [_project_dict(r) for r in rows]

    def get_project(self, project_id: int) -> dict | None:
        """``dict(id, name, labels, template, offsets, kernel, created_at, settings)`` or
        None when there is no such project."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM projects WHERE id = ?", (project_id,)).fetchone()
        return None if row is None else _project_dict(row)

    def update_project(self, project_id: int, **fields) -> dict:
        """Change ``name``, ``labels``, ``template``, ``offsets``, ``kernel`` or
        ``settings`` (replaced whole); returns the updated project.  Removing a label that
        is still used by an annotation or gold label raises :class:`InputError`."""
        unknown = set(fields) - set(_PROJECT_FIELDS)
        if unknown:
            raise TypeError(f"update_project: unknown field(s) {', '.join(sorted(unknown))}")
        with self._write() as conn:
            self._project_row(conn, project_id)
            values: dict[str, Any] = {}
            if "name" in fields:
                name = _check_name(fields["name"])
                if conn.execute("SELECT 1 FROM projects WHERE name = ? AND id != ?",
                                (name, project_id)).fetchone():
                    raise InputError(f"a project named {name!r} already exists",
                                     source="<project>")
                values["name"] = name
            if "labels" in fields:
                labels = _check_labels(fields["labels"])
                used = {r[0] for r in conn.execute(
                    "SELECT DISTINCT a.label FROM annotations a JOIN sentences s"
                    " ON s.id = a.sentence_id WHERE s.project_id = ? UNION"
                    " SELECT DISTINCT g.label FROM gold_labels g JOIN sentences s"
                    " ON s.id = g.sentence_id WHERE s.project_id = ?",
                    (project_id, project_id))}
                missing = sorted(used - set(labels))
                if missing:
                    raise InputError("labels still in use cannot be removed: "
                                     + ", ".join(missing), source="<project>")
                values["labels"] = _dumps(labels)
            if "template" in fields:
                values["template"] = str(fields["template"] or "")
            if "offsets" in fields:
                values["offsets"] = _dumps(_check_offsets(fields["offsets"]))
            if "kernel" in fields:
                values["kernel"] = str(fields["kernel"])
            if "settings" in fields:
                values["settings"] = _dumps(dict(fields["settings"] or {}))
            if values:
                cols = ", ".join(f"{k} = ?" for k in values)
                conn.execute(f"UPDATE projects SET {cols} WHERE id = ?",
                             (*values.values(), project_id))
            row = self._project_row(conn, project_id)
        return _project_dict(row)

    def delete_project(self, project_id: int) -> bool:
        """Delete a project and everything in it (sentences, annotations, history, model
        versions, predictions ...).  Saved model directories on disk are left alone.
        Returns False when there was no such project."""
        with self._write() as conn:
            cur = conn.execute("DELETE FROM projects WHERE id = ?", (project_id,))
            return cur.rowcount > 0

    # -- sentences -----------------------------------------------------------------------

    def add_sentences(self, project_id: int, sentences, *, split: str = "train",
                      doc: str | None = None, annotator: str = "import", gold=None,
                      add_labels: Sequence[str] = ()) -> int:
        """Append sentences to a project, in one transaction; returns how many.

        ``sentences`` are :class:`gpsl.io.Sentence` objects (``.tokens``, ``.labels``,
        ``.line``) or dicts with ``tokens`` and optional ``labels``/``line``/``doc``.  A
        token is a tuple of string columns (a bare string is one column).  Existing labels
        become annotations (source ``'human'``, history action ``'import'``).  ``gold``
        is an optional list, parallel to ``sentences``, of label lists (or Sentences) for
        held-out evaluation.  A label outside the project's label set, a length mismatch
        or a column-count mismatch raises :class:`InputError` naming the sentence and
        token, and nothing is written.

        ``add_labels`` are appended to the project's label set (those not in it yet, in
        order) in the same transaction, so an import that brings new labels either adds
        the labels and the sentences, or neither.
        """
        split = _check_split(split)
        annotator = _check_annotator(annotator)
        if isinstance(add_labels, str):
            raise InputError("add_labels must be a list of strings", source=doc or "<import>")
        add_labels = [str(x) for x in add_labels]
        with self._write() as conn:
            if add_labels:
                self._extend_labels(conn, project_id, add_labels)
            return self._add_sentences(conn, project_id, list(sentences), split, doc,
                                       annotator, gold)

    def _extend_labels(self, conn, project_id, add_labels) -> None:
        labels = json.loads(self._project_row(conn, project_id)["labels"])
        extended = _check_labels(labels + [x for x in dict.fromkeys(add_labels)
                                           if x not in labels])
        if extended != labels:
            conn.execute("UPDATE projects SET labels = ? WHERE id = ?",
                         (_dumps(extended), project_id))

    def _add_sentences(self, conn, project_id, sentences, split, doc, annotator, gold) -> int:
        project = self._project_row(conn, project_id)
        label_set = set(json.loads(project["labels"]))
        first = conn.execute("SELECT tokens FROM sentences WHERE project_id = ? LIMIT 1",
                             (project_id,)).fetchone()
        n_cols = len(json.loads(first[0])[0]) if first else None
        if gold is not None:
            gold = list(gold)
            if len(gold) != len(sentences):
                raise InputError(f"{len(gold)} gold sentences for {len(sentences)} sentences",
                                 source=doc or "<import>")
        start = conn.execute("SELECT COALESCE(MAX(position), -1) + 1 FROM sentences"
                             " WHERE project_id = ?", (project_id,)).fetchone()[0]
        now = _now()
        sent_rows, label_rows, gold_rows = [], [], []

        def check_label(lab, k, t, tokens, src, line, what="label"):
            if lab is None or lab == "_":
                return None
            lab = str(lab)
            if lab not in label_set:
                raise InputError(
                    f"sentence {k + 1}, token {t + 1} ({tokens[t][0]!r}): {what} {lab!r} is "
                    f"not in the project's label set", source=src,
                    line=line + t if line else None)
            return lab

        for k, obj in enumerate(sentences):
            tokens, labels, line, sdoc = _sentence_parts(obj)
            src = sdoc or doc or "<import>"
            line = int(line) if line else None
            if not tokens:
                raise InputError(f"sentence {k + 1} has no tokens", source=src, line=line)
            tokens = [_token(tok) for tok in tokens]
            for t, tok in enumerate(tokens):
                if n_cols is None:
                    n_cols = len(tok)
                if len(tok) != n_cols or n_cols == 0:
                    raise InputError(f"sentence {k + 1}, token {t + 1}: expected {n_cols} "
                                     f"columns, found {len(tok)}", source=src,
                                     line=line + t if line else None)
            labels = [None] * len(tokens) if labels is None else list(labels)
            if len(labels) != len(tokens):
                raise InputError(f"sentence {k + 1}: {len(labels)} labels for {len(tokens)} "
                                 "tokens", source=src, line=line)
            labels = [check_label(lab, k, t, tokens, src, line) for t, lab in enumerate(labels)]
            for t, lab in enumerate(labels):
                if lab is not None:
                    label_rows.append((k, t, lab))
            if gold is not None and gold[k] is not None:
                glabels = list(_gold_labels(gold[k]))
                if len(glabels) != len(tokens):
                    raise InputError(f"sentence {k + 1}: {len(glabels)} gold labels for "
                                     f"{len(tokens)} tokens", source=src, line=line)
                for t, lab in enumerate(glabels):
                    lab = check_label(lab, k, t, tokens, src, line, "gold label")
                    if lab is not None:
                        gold_rows.append((k, t, lab))
            n_labeled = sum(lab is not None for lab in labels)
            sent_rows.append((project_id, start + k, sdoc or doc, line, split,
                              _dumps([list(tok) for tok in tokens]), len(tokens), n_labeled))
        conn.executemany(
            "INSERT INTO sentences (project_id, position, doc, line, split, tokens, n_tokens,"
            " n_labeled) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", sent_rows)
        ids = [r[0] for r in conn.execute(
            "SELECT id FROM sentences WHERE project_id = ? AND position >= ? ORDER BY position",
            (project_id, start))]
        conn.executemany(
            "INSERT INTO annotations (sentence_id, token_index, label, annotator, updated_at,"
            " source) VALUES (?, ?, ?, ?, ?, 'human')",
            ((ids[k], t, lab, annotator, now) for k, t, lab in label_rows))
        conn.executemany(
            "INSERT INTO annotation_history (project_id, sentence_id, token_index, old_label,"
            " new_label, source, annotator, at, action) VALUES (?, ?, ?, NULL, ?, 'human', ?,"
            " ?, 'import')",
            ((project_id, ids[k], t, lab, annotator, now) for k, t, lab in label_rows))
        conn.executemany(
            "INSERT INTO gold_labels (sentence_id, token_index, label) VALUES (?, ?, ?)",
            ((ids[k], t, lab) for k, t, lab in gold_rows))
        return len(sent_rows)

    def set_gold(self, sentence_id: int, labels: Sequence[str | None]) -> None:
        """Replace the gold labels of one sentence (``None`` = no gold for that token)."""
        with self._write() as conn:
            info = self._sentence_info(conn, sentence_id)
            label_set = set(json.loads(info["labels"]))
            labels = list(labels)
            if len(labels) != info["n_tokens"]:
                raise InputError(f"{len(labels)} gold labels for {info['n_tokens']} tokens",
                                 source=f"sentence {sentence_id}")
            for t, lab in enumerate(labels):
                if lab is not None and lab not in label_set:
                    raise InputError(f"token {t + 1}: gold label {lab!r} is not in the "
                                     "project's label set", source=f"sentence {sentence_id}")
            conn.execute("DELETE FROM gold_labels WHERE sentence_id = ?", (sentence_id,))
            conn.executemany(
                "INSERT INTO gold_labels (sentence_id, token_index, label) VALUES (?, ?, ?)",
                [(sentence_id, t, lab) for t, lab in enumerate(labels) if lab is not None])

    def ensure_sample_project(self, sample_dir: str | os.PathLike) -> int:
        """Create the sample project when the store has no project at all.

        Reads ``sample_dir/sample.conll`` (labels: the file's label set, sorted with
        :func:`sort_labels`), ``sample_dir/template`` and ``sample_dir/sample_gold.conll``;
        the last 20 % of the sentences become split ``'heldout'`` with gold labels from the
        gold file (matched by tokens).  Returns the sample project's id, or, when other
        projects exist and the sample does not, the oldest project's id.  Safe when
        several processes call it at once (one transaction).
        """
        sample_dir = Path(sample_dir)
        with self._read() as conn:  # fast path: nothing to read from disk
            found = self._existing_default(conn)
        if found is not None:
            return found
        conll, gold_file = sample_dir / "sample.conll", sample_dir / "sample_gold.conll"
        template_file = sample_dir / "template"
        for f in (conll, gold_file, template_file):
            if not f.is_file():
                raise InputError("sample file is missing", source=str(f))
        sentences = read_conll(conll)
        gold_sentences = read_conll(gold_file)
        template = template_file.read_text(encoding="utf-8")
        labels = {lab for s in sentences + gold_sentences for lab in s.labels if lab is not None}
        if not sentences or not labels:
            raise InputError("no labeled sentences", source=str(conll))
        gold_by_tokens: dict = {}
        for g in gold_sentences:
            gold_by_tokens.setdefault(tuple(map(tuple, g.tokens)), g.labels)
        n_held = int(round(0.2 * len(sentences))) if len(sentences) > 1 else 0
        train, held = sentences[:len(sentences) - n_held], sentences[len(sentences) - n_held:]
        held_gold = [gold_by_tokens.get(tuple(map(tuple, s.tokens))) for s in held]
        with self._write() as conn:
            found = self._existing_default(conn)
            if found is not None:
                return found
            pid = self._create_project(conn, SAMPLE_PROJECT_NAME, sort_labels(labels),
                                       template, [-1, 1], "linear", {"sample": True})
            self._add_sentences(conn, pid, train, "train", conll.name, "import", None)
            if held:
                self._add_sentences(conn, pid, held, "heldout", conll.name, "import",
                                    held_gold)
            return pid

    @staticmethod
    def _existing_default(conn) -> int | None:
        row = conn.execute("SELECT id FROM projects WHERE name = ?",
                           (SAMPLE_PROJECT_NAME,)).fetchone()
        if row is None:
            row = conn.execute("SELECT id FROM projects ORDER BY id LIMIT 1").fetchone()
        return None if row is None else row[0]

    def sentence_count(self, project_id: int, split: str | None = None) -> int:
        """Number of sentences of a project (of one split when given)."""
        sql, args = "SELECT COUNT(*) FROM sentences WHERE project_id = ?", [project_id]
        if split is not None:
            sql += " AND split = ?"
            args.append(split)
        with self._read() as conn:
            return conn.execute(sql, args).fetchone()[0]

    def sentence_ids(self, project_id: int, split: str | None = None) -> list[int]:
        """Sentence ids of a project in position order (of one split when given)."""
        sql, args = "SELECT id FROM sentences WHERE project_id = ?", [project_id]
        if split is not None:
            sql += " AND split = ?"
            args.append(split)
        with self._read() as conn:
            return [r[0] for r in conn.execute(sql + " ORDER BY position", args)]

    def get_sentence(self, sentence_id: int) -> dict | None:
        """One sentence, or None: ``dict(id, project_id, position, doc, line, split,
        tokens (list of tuples), labels (current, None when missing), sources ('human' /
        'accepted' / None), annotators, gold (list or None when the sentence has none))``."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM sentences WHERE id = ?", (sentence_id,)).fetchone()
            if row is None:
                return None
            ann = conn.execute("SELECT token_index, label, source, annotator FROM annotations"
                               " WHERE sentence_id = ?", (sentence_id,)).fetchall()
            gold = conn.execute("SELECT token_index, label FROM gold_labels"
                                " WHERE sentence_id = ?", (sentence_id,)).fetchall()
        d = self._sentence_dict(row, ann)
        if gold:
            g: list[str | None] = [None] * row["n_tokens"]
            for t, lab in gold:
                g[t] = lab
            d["gold"] = g
        else:
            d["gold"] = None
        return d

    @staticmethod
    def _sentence_dict(row, ann) -> dict:
        n = row["n_tokens"]
        labels: list[str | None] = [None] * n
        sources: list[str | None] = [None] * n
        annotators: list[str | None] = [None] * n
        for a in ann:
            t = a[0]
            labels[t], sources[t], annotators[t] = a[1], a[2], a[3]
        return {
            "id": row["id"],
            "project_id": row["project_id"],
            "position": row["position"],
            "doc": row["doc"],
            "line": row["line"],
            "split": row["split"],
            "tokens": [tuple(tok) for tok in json.loads(row["tokens"])],
            "labels": labels,
            "sources": sources,
            "annotators": annotators,
        }

    def get_sentences(self, project_id: int, split: str | None = None, offset: int = 0,
                      limit: int | None = None) -> list[dict]:
        """Sentences in position order as :meth:`get_sentence` dicts (without ``gold``),
        paged by ``offset``/``limit``; one query."""
        rows = self._page(project_id, split, offset, limit)
        return self._page_dicts(rows)

    def _page(self, project_id, split, offset=0, limit=None):
        where, args = "project_id = ?", [project_id]
        if split is not None:
            where += " AND split = ?"
            args.append(split)
        args += [-1 if limit is None else int(limit), int(offset)]
        with self._read() as conn:
            return conn.execute(
                "SELECT id, project_id, position, doc, line, split, tokens, n_tokens,"
                " (SELECT json_group_array(json_array(a.token_index, a.label, a.source,"
                " a.annotator)) FROM annotations a WHERE a.sentence_id = s.id) AS ann"
                f" FROM sentences s WHERE {where} ORDER BY position LIMIT ? OFFSET ?",
                args).fetchall()

    def _page_dicts(self, rows) -> list[dict]:
        return [self._sentence_dict(r, json.loads(r["ann"])) for r in rows]

    def neighbours(self, sentence_id: int) -> tuple[int | None, int | None]:
        """(previous, next) sentence ids by position in the same project and split."""
        with self._read() as conn:
            row = conn.execute("SELECT project_id, split, position FROM sentences WHERE id = ?",
                               (sentence_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"no sentence with id {sentence_id}")
            prev = conn.execute(
                "SELECT id FROM sentences WHERE project_id = ? AND split = ? AND position < ?"
                " ORDER BY position DESC LIMIT 1", tuple(row)).fetchone()
            nxt = conn.execute(
                "SELECT id FROM sentences WHERE project_id = ? AND split = ? AND position > ?"
                " ORDER BY position LIMIT 1", tuple(row)).fetchone()
        return (prev[0] if prev else None, nxt[0] if nxt else None)

    # -- labels --------------------------------------------------------------------------

    def set_label(self, sentence_id: int, token_index: int, label: str | None,
                  annotator: str, source: str = "human") -> int | None:
        """Set (``label=None``: clear) one token's label; returns the history id, or None
        when nothing changed (same label and source).  Last write wins."""
        ids = self.set_labels(sentence_id, {token_index: label}, annotator, source=source)
        return ids[0] if ids else None

    def clear_label(self, sentence_id: int, token_index: int, annotator: str) -> int | None:
        """Remove one token's label; returns the history id or None if it had none."""
        return self.set_label(sentence_id, token_index, None, annotator)

    def set_labels(self, sentence_id: int, labels: Mapping[int, str | None], annotator: str,
                   source: str = "human") -> list[int]:
        """Set several labels of one sentence (``None`` clears) in one transaction; one
        undo step.  ``source`` is ``'human'`` or ``'accepted'`` (an accepted model
        suggestion).  Any bad label or index raises :class:`InputError` and nothing is
        written.  Returns the new history ids."""
        annotator = _check_annotator(annotator)
        if source not in SOURCES:
            raise InputError(f"source must be 'human' or 'accepted', got {source!r}",
                             source="<label>")
        with self._write() as conn:
            return self._apply(conn, sentence_id, dict(labels), annotator, source)

    def _apply(self, conn, sentence_id, changes, annotator, source) -> list[int]:
        info = self._sentence_info(conn, sentence_id)
        label_set = json.loads(info["labels"])
        n = info["n_tokens"]
        current = {r[0]: (r[1], r[2]) for r in conn.execute(
            "SELECT token_index, label, source FROM annotations WHERE sentence_id = ?",
            (sentence_id,))}
        now, batch, delta, ids = _now(), uuid.uuid4().hex, 0, []
        where = f"sentence {sentence_id}"
        for t, lab in changes.items():
            try:
                t = int(t)
            except (TypeError, ValueError):
                raise InputError(f"bad token index {t!r}", source=where) from None
            if not 0 <= t < n:
                raise InputError(f"token index {t} out of range (the sentence has {n} "
                                 "tokens)", source=where)
            lab = None if lab is None else str(lab)
            if lab is not None and lab not in label_set:
                raise InputError(f"token {t}: label {lab!r} is not in the project's label "
                                 f"set ({' '.join(label_set)})", source=where)
            old, old_source = current.get(t, (None, None))
            if lab == old and (lab is None or old_source == source):
                continue
            if lab is None:
                conn.execute("DELETE FROM annotations WHERE sentence_id = ? AND token_index = ?",
                             (sentence_id, t))
                delta -= 1
            else:
                conn.execute(
                    "INSERT INTO annotations (sentence_id, token_index, label, annotator,"
                    " updated_at, source) VALUES (?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (sentence_id, token_index) DO UPDATE SET label = excluded.label,"
                    " annotator = excluded.annotator, updated_at = excluded.updated_at,"
                    " source = excluded.source", (sentence_id, t, lab, annotator, now, source))
                delta += old is None
            cur = conn.execute(
                "INSERT INTO annotation_history (project_id, sentence_id, token_index,"
                " old_label, new_label, source, annotator, at, action, batch)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (info["project_id"], sentence_id, t, old, lab,
                 None if lab is None else source, annotator, now,
                 "clear" if lab is None else "set", batch))
            ids.append(cur.lastrowid)
            current[t] = (lab, source)
        if delta:
            conn.execute("UPDATE sentences SET n_labeled = n_labeled + ? WHERE id = ?",
                         (delta, sentence_id))
        if ids:
            self._refresh_scores(conn, sentence_id)
        return ids

    @staticmethod
    def _refresh_scores(conn, sentence_id) -> None:
        """Recompute ``min_unlabeled_confidence`` of every prediction of one sentence."""
        preds = conn.execute("SELECT model_version_id, confidence FROM predictions"
                             " WHERE sentence_id = ?", (sentence_id,)).fetchall()
        if not preds:
            return
        labeled = [r[0] for r in conn.execute(
            "SELECT token_index FROM annotations WHERE sentence_id = ?", (sentence_id,))]
        conn.executemany(
            "UPDATE predictions SET min_unlabeled_confidence = ?"
            " WHERE model_version_id = ? AND sentence_id = ?",
            [(_min_unlabeled(np.frombuffer(blob, dtype="<f4"), labeled), vid, sentence_id)
             for vid, blob in preds])

    def undo(self, project_id: int, annotator: str | None = None) -> dict | None:
        """Revert the latest not-yet-undone ``set``/``clear`` change in the project (by
        ``annotator`` when given; a :meth:`set_labels` batch is one change).  Imports are
        not undone this way.  The revert is recorded as action ``'undo'`` and the
        original entries are marked undone, so repeated calls walk further back.  The
        token gets its previous label back even if someone changed it since (last write
        wins).  Returns ``dict(sentence_id, changes=[{token_index, label, previous}],
        undone=[history ids], history_ids=[new ids])`` or None when there is nothing."""
        with self._write() as conn:
            sql = ("SELECT * FROM annotation_history WHERE project_id = ? AND undone_by IS NULL"
                   " AND action IN ('set', 'clear')")
            args: list = [project_id]
            if annotator is not None:
                sql += " AND annotator = ?"
                args.append(annotator)
            last = conn.execute(sql + " ORDER BY id DESC LIMIT 1", args).fetchone()
            if last is None:
                return None
            entries = conn.execute(
                "SELECT * FROM annotation_history WHERE batch = ? AND undone_by IS NULL"
                " AND action IN ('set', 'clear') ORDER BY id DESC", (last["batch"],)).fetchall()
            who = annotator if annotator is not None else last["annotator"]
            sid = last["sentence_id"]
            now, batch = _now(), uuid.uuid4().hex
            changes, new_ids, delta = [], [], 0
            for e in entries:
                t = e["token_index"]
                cur = conn.execute("SELECT label FROM annotations WHERE sentence_id = ? AND"
                                   " token_index = ?", (sid, t)).fetchone()
                current = cur[0] if cur else None
                target = e["old_label"]
                src = None
                if target is None:
                    conn.execute("DELETE FROM annotations WHERE sentence_id = ? AND"
                                 " token_index = ?", (sid, t))
                    delta -= current is not None
                else:  # who set the previous label, and how
                    prev = conn.execute(
                        "SELECT annotator, source, at FROM annotation_history WHERE"
                        " sentence_id = ? AND token_index = ? AND id < ? AND new_label = ?"
                        " ORDER BY id DESC LIMIT 1", (sid, t, e["id"], target)).fetchone()
                    prev_ann, src, at = prev if prev else (who, "human", now)
                    src = src or "human"
                    conn.execute(
                        "INSERT INTO annotations (sentence_id, token_index, label, annotator,"
                        " updated_at, source) VALUES (?, ?, ?, ?, ?, ?)"
                        " ON CONFLICT (sentence_id, token_index) DO UPDATE SET"
                        " label = excluded.label, annotator = excluded.annotator,"
                        " updated_at = excluded.updated_at, source = excluded.source",
                        (sid, t, target, prev_ann, at, src))
                    delta += current is None
                hid = conn.execute(
                    "INSERT INTO annotation_history (project_id, sentence_id, token_index,"
                    " old_label, new_label, source, annotator, at, action, batch)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'undo', ?)",
                    (project_id, sid, t, current, target, src, who, now, batch)).lastrowid
                conn.execute("UPDATE annotation_history SET undone_by = ? WHERE id = ?",
                             (hid, e["id"]))
                new_ids.append(hid)
                changes.append({"token_index": t, "label": target, "previous": current})
            if delta:
                conn.execute("UPDATE sentences SET n_labeled = n_labeled + ? WHERE id = ?",
                             (delta, sid))
            self._refresh_scores(conn, sid)
        return {"sentence_id": sid, "changes": changes, "undone": [e["id"] for e in entries],
                "history_ids": new_ids}

    def history(self, sentence_id: int | None = None, project_id: int | None = None,
                annotator: str | None = None, limit: int | None = 100) -> list[dict]:
        """Label changes, newest first: dicts ``(id, project_id, sentence_id, position,
        token_index, old_label, new_label, source, annotator, at, action, undone,
        undone_by)``, filtered by sentence / project / annotator."""
        where, args = [], []
        for col, val in (("h.sentence_id", sentence_id), ("h.project_id", project_id),
                         ("h.annotator", annotator)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        sql = ("SELECT h.*, s.position FROM annotation_history h"
               " LEFT JOIN sentences s ON s.id = h.sentence_id")
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY h.id DESC LIMIT ?"
        args.append(-1 if limit is None else int(limit))
        with self._read() as conn:
            return [_history_dict(r) for r in conn.execute(sql, args)]

    def skip(self, sentence_id: int, annotator: str) -> None:
        """Record that ``annotator`` skipped a sentence (it goes last in their queue,
        least recently skipped first)."""
        annotator = _check_annotator(annotator)
        with self._write() as conn:
            self._sentence_info(conn, sentence_id)
            conn.execute("INSERT INTO skips (sentence_id, annotator, at) VALUES (?, ?, ?)"
                         " ON CONFLICT (sentence_id, annotator) DO UPDATE SET at = excluded.at",
                         (sentence_id, annotator, _now()))

    # -- training data and progress ------------------------------------------------------

    def training_data(self, project_id: int, split: str = "train", *,
                      only_labeled: bool = False, with_ids: bool = False):
        """``(tokens, labels)`` of a split in position order: ``tokens`` a list of
        sentences (lists of column tuples), ``labels`` the current labels with None for
        missing.  ``only_labeled`` drops sentences without any label; ``with_ids``
        returns ``(ids, tokens, labels)``."""
        sents = self._page_dicts(self._page(project_id, split))
        if only_labeled:
            sents = [s for s in sents if any(lab is not None for lab in s["labels"])]
        tokens = [s["tokens"] for s in sents]
        labels = [s["labels"] for s in sents]
        if with_ids:
            return [s["id"] for s in sents], tokens, labels
        return tokens, labels

    def gold_data(self, project_id: int, split: str | None = "heldout"):
        """``(ids, tokens, gold_labels)`` of the sentences of ``split`` (all when None)
        that have gold labels; None marks a token without gold."""
        where, args = "s.project_id = ?", [project_id]
        if split is not None:
            where += " AND s.split = ?"
            args.append(split)
        with self._read() as conn:
            rows = conn.execute(
                "SELECT s.id, s.tokens, s.n_tokens, g.token_index, g.label FROM sentences s"
                f" JOIN gold_labels g ON g.sentence_id = s.id WHERE {where}"
                " ORDER BY s.position, g.token_index", args).fetchall()
        ids, tokens, labels = [], [], []
        for sid, toks, n, t, lab in rows:
            if not ids or ids[-1] != sid:
                ids.append(sid)
                tokens.append([tuple(tok) for tok in json.loads(toks)])
                labels.append([None] * n)
            labels[-1][t] = lab
        return ids, tokens, labels

    def progress(self, project_id: int, split: str | None = None) -> dict:
        """Annotation progress of the whole project, or of one split (``'train'``)::

            sentences, tokens, labeled_tokens, complete_sentences, partial_sentences,
            unlabeled_sentences, pct_complete (% of tokens labeled), pct_sentences_complete,
            annotators {name: current labels}, sources {'human'|'accepted': n},
            label_counts {label: n}, labels_per_day {'YYYY-MM-DD': n 'set' actions},
            skipped_sentences
        """
        where, args = "s.project_id = ?", [project_id]
        if split is not None:
            where += " AND s.split = ?"
            args.append(split)
        with self._read() as conn:
            self._project_row(conn, project_id)
            counts = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(n_tokens), 0), COALESCE(SUM(n_labeled), 0),"
                " COALESCE(SUM(n_labeled = n_tokens), 0),"
                " COALESCE(SUM(n_labeled > 0 AND n_labeled < n_tokens), 0),"
                f" COALESCE(SUM(n_labeled = 0), 0) FROM sentences s WHERE {where}",
                args).fetchone()

            def grouped(sql):
                return {r[0]: r[1] for r in conn.execute(sql, args)}

            join = f"JOIN sentences s ON s.id = a.sentence_id WHERE {where}"
            annotators = grouped(f"SELECT a.annotator, COUNT(*) FROM annotations a {join}"
                                 " GROUP BY a.annotator ORDER BY COUNT(*) DESC")
            sources = grouped(f"SELECT a.source, COUNT(*) FROM annotations a {join}"
                              " GROUP BY a.source")
            label_counts = grouped(f"SELECT a.label, COUNT(*) FROM annotations a {join}"
                                   " GROUP BY a.label")
            per_day = grouped(
                "SELECT substr(a.at, 1, 10), COUNT(*) FROM annotation_history a"
                f" {join} AND a.action = 'set' GROUP BY 1 ORDER BY 1")
            skipped = conn.execute(f"SELECT COUNT(DISTINCT a.sentence_id) FROM skips a {join}",
                                   args).fetchone()[0]
        n_sent, n_tok, n_lab, complete, partial, unlabeled = counts
        return {
            "sentences": n_sent,
            "tokens": n_tok,
            "labeled_tokens": n_lab,
            "complete_sentences": complete,
            "partial_sentences": partial,
            "unlabeled_sentences": unlabeled,
            "pct_complete": 100.0 * n_lab / n_tok if n_tok else 0.0,
            "pct_sentences_complete": 100.0 * complete / n_sent if n_sent else 0.0,
            "annotators": annotators,
            "sources": sources,
            "label_counts": label_counts,
            "labels_per_day": per_day,
            "skipped_sentences": skipped,
        }

    # -- model versions ------------------------------------------------------------------

    def start_model_version(self, project_id: int, settings: Mapping | None = None, *,
                            pid: int | None = None) -> int:
        """Record a training run (status ``'running'``); returns its id.  ``settings`` gets
        ``pid`` (``pid`` argument, else ``settings['pid']``, else this process) so
        :meth:`mark_stale_running_failed` can tell a dead worker."""
        settings = dict(settings or {})
        settings["pid"] = int(pid if pid is not None else settings.get("pid") or os.getpid())
        with self._write() as conn:
            self._project_row(conn, project_id)
            cur = conn.execute(
                "INSERT INTO model_versions (project_id, created_at, settings, status)"
                " VALUES (?, ?, ?, 'running')", (project_id, _now(), _dumps(settings)))
            return cur.lastrowid

    def set_model_pid(self, version_id: int, pid: int) -> None:
        """Store the worker's pid in a version's settings (when it is spawned later)."""
        with self._write() as conn:
            row = self._version_row(conn, version_id)
            settings = _loads(row["settings"], {})
            settings["pid"] = int(pid)
            conn.execute("UPDATE model_versions SET settings = ? WHERE id = ?",
                         (_dumps(settings), version_id))

    def finish_model_version(self, version_id: int, path: str | os.PathLike | None,
                             bound_trace: Sequence[float] | None = None,
                             metrics: Mapping | None = None,
                             n_labeled_tokens: int | None = None, *,
                             classes: Sequence[str] | None = None,
                             activate: bool = False) -> bool:
        """Mark a running version ``'done'`` with its saved model dir, bound trace, metrics,
        label count and (optionally) the model's ``classes_`` (the marginal columns).
        With ``activate`` it also becomes the project's active version in the same
        transaction, so no reader ever sees a finished version that is not yet active.
        Returns False (and changes nothing) when the version is no longer running
        (killed or failed meanwhile)."""
        with self._write() as conn:
            row = self._version_row(conn, version_id)
            cur = conn.execute(
                "UPDATE model_versions SET status = 'done', finished_at = ?, path = ?,"
                " bound_trace = ?, metrics = ?, n_labeled_tokens = ?, classes = ?, error = NULL"
                " WHERE id = ? AND status = 'running'",
                (_now(), None if path is None else os.fspath(path),
                 _dumps(list(bound_trace) if bound_trace is not None else None),
                 _dumps(metrics), None if n_labeled_tokens is None else int(n_labeled_tokens),
                 None if classes is None else _dumps(list(classes)), version_id))
            if cur.rowcount and activate:
                conn.execute("UPDATE model_versions SET active = 0 WHERE project_id = ? AND"
                             " active = 1", (row["project_id"],))
                conn.execute("UPDATE model_versions SET active = 1 WHERE id = ?", (version_id,))
            return cur.rowcount > 0

    def fail_model_version(self, version_id: int, error: str,
                           status: str = "failed") -> bool:
        """Mark a running version ``'failed'`` (or ``'killed'``) with an error text.
        Returns False when it was not running."""
        if status not in ("failed", "killed"):
            raise ValueError(f"status must be 'failed' or 'killed', got {status!r}")
        with self._write() as conn:
            self._version_row(conn, version_id)
            cur = conn.execute(
                "UPDATE model_versions SET status = ?, error = ?, finished_at = ?"
                " WHERE id = ? AND status = 'running'", (status, str(error), _now(), version_id))
            return cur.rowcount > 0

    def mark_stale_running_failed(self, project_id: int | None = None) -> list[int]:
        """Mark ``'failed'`` every running version (of a project, or all) whose worker pid
        (``settings['pid']``) no longer exists (``os.kill(pid, 0)``; zombies count as
        gone).  Versions without a usable pid are left alone.  Returns the ids marked."""
        sql, args = "SELECT id, settings FROM model_versions WHERE status = 'running'", []
        if project_id is not None:
            sql += " AND project_id = ?"
            args.append(project_id)
        with self._write() as conn:
            stale = []
            for vid, settings in conn.execute(sql, args).fetchall():
                pid = _loads(settings, {}).get("pid")
                if _pid_alive(pid) is False:
                    stale.append(vid)
                    conn.execute(
                        "UPDATE model_versions SET status = 'failed', finished_at = ?,"
                        " error = ? WHERE id = ?",
                        (_now(), f"worker process {pid} is gone (killed or crashed)", vid))
            return stale

    def set_active_model(self, project_id: int, version_id: int | None) -> None:
        """Make a ``'done'`` version of the project the active one (None: no active
        model).  Exactly one version is active at a time."""
        with self._write() as conn:
            if version_id is not None:
                row = self._version_row(conn, version_id)
                if row["project_id"] != project_id:
                    raise InputError(f"model version {version_id} belongs to another project",
                                     source="<model>")
                if row["status"] != "done":
                    raise InputError(f"model version {version_id} is {row['status']}, not done",
                                     source="<model>")
            conn.execute("UPDATE model_versions SET active = 0 WHERE project_id = ? AND"
                         " active = 1", (project_id,))
            if version_id is not None:
                conn.execute("UPDATE model_versions SET active = 1 WHERE id = ?", (version_id,))

    def active_model(self, project_id: int) -> dict | None:
        """The active version as a :meth:`get_model_version` dict, or None."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM model_versions WHERE project_id = ? AND"
                               " active = 1", (project_id,)).fetchone()
        return None if row is None else _version_dict(row)

    def get_model_version(self, version_id: int) -> dict | None:
        """``dict(id, project_id, created_at, finished_at, settings, classes, bound_trace,
        metrics, path, n_labeled_tokens, status, active, error)`` or None."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM model_versions WHERE id = ?",
                               (version_id,)).fetchone()
        return None if row is None else _version_dict(row)

    def list_model_versions(self, project_id: int) -> list[dict]:
        """All versions of a project, oldest first."""
        with self._read() as conn:
            rows = conn.execute("SELECT * FROM model_versions WHERE project_id = ?"
                                " ORDER BY id", (project_id,)).fetchall()
        return [_version_dict(r) for r in rows]

    # -- predictions and queue -----------------------------------------------------------

    def save_predictions(self, version_id: int, marginals: Mapping[int, np.ndarray]) -> int:
        """Store per-sentence marginals ``{sentence_id: (L, J) array}`` of a version in one
        transaction (replacing earlier ones of the same sentence); returns the count.
        Arrays are stored as float32 NPY; the per-token confidence (largest marginal) and
        its minimum over unlabeled tokens are stored alongside for :meth:`queue`."""
        items = [(int(sid), np.asarray(m, dtype=np.float32)) for sid, m in marginals.items()]
        with self._write() as conn:
            project_id = self._version_row(conn, version_id)["project_id"]
            ids_json = _dumps([sid for sid, _ in items])
            info = {r[0]: (r[1], r[2]) for r in conn.execute(
                "SELECT id, project_id, n_tokens FROM sentences WHERE id IN"
                " (SELECT value FROM json_each(?))", (ids_json,))}
            labeled: dict[int, list[int]] = {}
            for sid, t in conn.execute("SELECT sentence_id, token_index FROM annotations"
                                       " WHERE sentence_id IN (SELECT value FROM json_each(?))",
                                       (ids_json,)):
                labeled.setdefault(sid, []).append(t)
            rows = []
            for sid, arr in items:
                if sid not in info or info[sid][0] != project_id:
                    raise NotFoundError(f"no sentence {sid} in the project of model version "
                                        f"{version_id}")
                n = info[sid][1]
                if arr.ndim != 2 or arr.shape[0] != n or arr.shape[1] == 0:
                    raise ValueError(f"sentence {sid}: marginals of shape {arr.shape}, "
                                     f"expected ({n}, n_classes)")
                if not np.all(np.isfinite(arr)):
                    raise ValueError(f"sentence {sid}: marginals are not finite")
                conf = arr.max(axis=1).astype("<f4")
                rows.append((version_id, sid, _encode_marginals(arr), conf.tobytes(),
                             float(conf.min()), _min_unlabeled(conf, labeled.get(sid, ()))))
            conn.executemany(
                "INSERT OR REPLACE INTO predictions (model_version_id, sentence_id, marginals,"
                " confidence, min_confidence, min_unlabeled_confidence)"
                " VALUES (?, ?, ?, ?, ?, ?)", rows)
            return len(rows)

    def get_predictions(self, version_id: int,
                        sentence_ids: Sequence[int] | None = None) -> dict[int, np.ndarray]:
        """``{sentence_id: float32 (L, J) array}`` of a version (all or the given ids;
        ids without predictions are absent)."""
        sql, args = "SELECT sentence_id, marginals FROM predictions WHERE model_version_id = ?", \
            [version_id]
        if sentence_ids is not None:
            sql += " AND sentence_id IN (SELECT value FROM json_each(?))"
            args.append(_dumps([int(s) for s in sentence_ids]))
        with self._read() as conn:
            rows = conn.execute(sql, args).fetchall()
        return {sid: _decode_marginals(blob) for sid, blob in rows}

    def delete_predictions(self, version_id: int) -> int:
        """Drop the stored predictions of a version; returns how many rows."""
        with self._write() as conn:
            return conn.execute("DELETE FROM predictions WHERE model_version_id = ?",
                                (version_id,)).rowcount

    def prune_predictions(self, project_id: int, keep: int = 2) -> int:
        """Keep predictions only for the active version and the ``keep`` newest versions
        of a project (they take room: L x J float32 per sentence); returns rows deleted."""
        with self._write() as conn:
            keep_ids = [r[0] for r in conn.execute(
                "SELECT id FROM model_versions WHERE project_id = ? ORDER BY active DESC, id DESC"
                " LIMIT ?", (project_id, int(keep) + 1))]
            return conn.execute(
                "DELETE FROM predictions WHERE model_version_id IN (SELECT id FROM"
                " model_versions WHERE project_id = ? AND id NOT IN"
                " (SELECT value FROM json_each(?)))", (project_id, _dumps(keep_ids))).rowcount

    def queue(self, project_id: int, order: str = "uncertainty", annotator: str | None = None,
              limit: int | None = 100) -> list[int]:
        """Ids of ``'train'`` sentences with at least one unlabeled token, in annotation
        order.  ``'uncertainty'``: lowest confidence among the sentence's *unlabeled*
        tokens under the active model first (sentences without a prediction follow in
        position order; with no active model this is ``'sequential'``).
        ``'sequential'``: position order.  Sentences skipped by ``annotator`` come last,
        least recently skipped first."""
        if order not in ("uncertainty", "sequential"):
            raise ValueError(f"order must be 'uncertainty' or 'sequential', got {order!r}")
        with self._read() as conn:
            version = None
            if order == "uncertainty":
                row = conn.execute("SELECT id FROM model_versions WHERE project_id = ? AND"
                                   " active = 1", (project_id,)).fetchone()
                version = row[0] if row else None
            if version is None:
                sql = ("SELECT s.id FROM sentences s LEFT JOIN skips k ON k.sentence_id = s.id"
                       " AND k.annotator = ? WHERE s.project_id = ? AND s.split = 'train' AND"
                       " s.n_labeled < s.n_tokens ORDER BY k.at IS NOT NULL, k.at, s.position"
                       " LIMIT ?")
                args = (annotator, project_id, -1 if limit is None else int(limit))
            else:
                sql = ("SELECT s.id FROM sentences s LEFT JOIN skips k ON k.sentence_id = s.id"
                       " AND k.annotator = ? LEFT JOIN predictions p INDEXED BY predictions_queue"
                       " ON p.sentence_id = s.id"
                       " AND p.model_version_id = ? WHERE s.project_id = ? AND"
                       " s.split = 'train' AND s.n_labeled < s.n_tokens"
                       " ORDER BY k.at IS NOT NULL, k.at, p.min_unlabeled_confidence IS NULL,"
                       " p.min_unlabeled_confidence, s.position LIMIT ?")
                args = (annotator, version, project_id, -1 if limit is None else int(limit))
            return [r[0] for r in conn.execute(sql, args)]

    # -- query rounds --------------------------------------------------------------------

    def record_query_round(self, project_id: int, version_id: int | None, strategy: str,
                           items: Sequence[Sequence]) -> int:
        """Record an active-learning query: ``items`` are ``[sentence_id, token_index
        (None for a whole sentence), score]``; returns the round id."""
        norm = [[int(it[0]), None if it[1] is None else int(it[1]), float(it[2])]
                for it in items]
        with self._write() as conn:
            self._project_row(conn, project_id)
            if version_id is not None:
                self._version_row(conn, version_id)
            return conn.execute(
                "INSERT INTO query_rounds (project_id, model_version_id, created_at, strategy,"
                " items) VALUES (?, ?, ?, ?, ?)",
                (project_id, version_id, _now(), str(strategy), _dumps(norm))).lastrowid

    def list_query_rounds(self, project_id: int) -> list[dict]:
        """``dict(id, project_id, model_version_id, created_at, strategy, items)``, oldest
        first."""
        with self._read() as conn:
            rows = conn.execute("SELECT * FROM query_rounds WHERE project_id = ? ORDER BY id",
                                (project_id,)).fetchall()
        return [{"id": r["id"], "project_id": r["project_id"],
                 "model_version_id": r["model_version_id"], "created_at": r["created_at"],
                 "strategy": r["strategy"], "items": json.loads(r["items"])} for r in rows]

    # -- export --------------------------------------------------------------------------

    def export_sentences(self, project_id: int, split: str | None = None) -> list:
        """The current annotations as :class:`gpsl.io.Sentence` objects (tokens, labels
        with None for missing, line = source line or 1), in position order."""
        return [Sentence(tokens=s["tokens"], labels=s["labels"], line=s["line"] or 1)
                for s in self.get_sentences(project_id, split=split)]
