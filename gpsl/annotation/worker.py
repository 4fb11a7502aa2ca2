"""A training worker of the annotation app: one model version's pipeline in its own process.

::

    python -m gpsl.annotation.worker --version ID [--models-root DIR]
    python -m gpsl.annotation.worker --spare


:func:`gpsl.annotation.training.jobs.start_training` starts it (in its own session, one BLAS
thread); the store is named by ``GPSL_DB`` in its environment, never on the command line (a
PostgreSQL URL may hold a password). A store that does not exist is refused before anything is
opened (a SQLite path is never created here: the app creates its store). Errors are one line
``gpsl worker: error: ...`` with exit status 2; the run's own failure is recorded on the
version by :func:`gpsl.annotation.training.pipeline.run` (exit status 1, or the errno of a failure
it could not record, :class:`~gpsl.annotation.training.pipeline.UnrecordedFailure`).

``--spare`` (:mod:`gpsl.annotation.training.spares`): the worker is started ahead of the click; it
imports what a run needs, then reads its version from standard input as one JSON line
(``version``, ``models_root``, ``log``, ``pause_at``), sends its output to that log and runs
it as above. End of input before a line: it exits 0, having done nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import make_url

from gpsl.annotation.store.db import Database
from gpsl.annotation.store.owned import Home
from gpsl.annotation.training import pipeline
from gpsl.errors import GpslError, InputError


def _sqlite_file(target: str) -> Path | None:
    """The file of a SQLite store (a path, or a ``sqlite://`` URL), None for a server."""
    if "://" not in target:
        return Path(target).expanduser()
    url = make_url(target)
    if url.get_backend_name() != "sqlite":
        return None
    name = url.database or ""
    return Path(name[5:] if name.startswith("file:") else name).expanduser()


def check_store(target: str) -> None:
    """Refuse a store that is not there (before opening it would create an empty one)."""
    if not target:
        raise InputError("no store given (GPSL_DB is not set)", source="worker")
    path = _sqlite_file(target)
    if path is not None and not path.is_file():
        what = "is not a file" if path.exists() else "does not exist"
        raise InputError(f"the store {what}", source=str(path))


def run(version_id: int, models_root: str | None, db: str | None = None, *,
        pause_at: str | None = None, nice: bool = True) -> int:
    """Run one version's pipeline; the exit status (0 done, 1 failed).  ``pause_at``: where
    the run waits until it is killed (tests; :data:`gpsl.annotation.training.pipeline.PAUSES`)."""
    target = db or os.environ.get("GPSL_DB", "")
    check_store(target)
    if nice:  # a spare was started at nice 5 (gpsl.annotation.training.spares)
        with contextlib.suppress(OSError, AttributeError):
            os.nice(5)
    home = Home(Database(target), models_root)
    try:
        version = pipeline.run(home, version_id, home.models_root, pause_at=pause_at)
    except pipeline.UnrecordedFailure as exc:
        return exc.exit_code
    print(f"version {version_id}: {version['status']}"
          + (f" ({version['error']})" if version.get("error") else ""), flush=True)
    return 0 if version["status"] == "done" else 1


#: what a run imports on first use, loaded by a spare while it waits (gpsl._optimize's
#: scipy.optimize, the predictions' process pool)
PRELOAD = ("scipy.optimize", "multiprocessing.pool")


def spare() -> int:
    """A spare's life: import the rest of a run, wait for the version, run it."""
    for name in PRELOAD:
        importlib.import_module(name)
    line = sys.stdin.buffer.readline()
    if not line.strip():
        return 0
    job = json.loads(line)
    fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return run(int(job["version"]), job["models_root"], pause_at=job.get("pause_at"),
               nice=False)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise InputError(message, source="arguments")


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING,  # to its log file: a failure's traceback
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    p = _Parser(prog="python -m gpsl.annotation.worker",
                description="Run the training pipeline of one model version of the "
                            "annotation store named by GPSL_DB (started by the app).")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--version", dest="model_version", type=int, metavar="ID",
                     help="model version id")
    who.add_argument("--spare", action="store_true",
                     help="start ahead: read the version from standard input (the app)")
    p.add_argument("--models-root", default=None, metavar="DIR",
                   help="directory of saved models")
    p.add_argument("--pause-at", default=None, choices=pipeline.PAUSES,
                   help=argparse.SUPPRESS)  # tests: the run waits there until it is killed
    try:
        args = p.parse_args(argv)
        if args.spare:
            return spare()
        if args.model_version < 1:
            raise InputError(f"--version must be a positive id, not {args.model_version}",
                             source="arguments")
        return run(args.model_version, args.models_root, pause_at=args.pause_at)
    except (GpslError, OSError, ValueError) as exc:
        print(f"gpsl worker: error: {' '.join(str(exc).split())}", file=sys.stderr,
              flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
