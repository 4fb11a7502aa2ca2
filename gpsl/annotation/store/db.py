"""The only place that opens database connections: engine, transactions, retries, errors,
schema creation and migrations.

One :class:`Database` wraps one SQLAlchemy engine, on SQLite (a file path, the default) or
PostgreSQL (``postgresql+psycopg://user@host:port/db``, psycopg 3).  The SQL of the other
modules is plain SQL text (SQLAlchemy Core ``text()``), written to run on both.

* :meth:`Database.write` runs a function in one write transaction (SQLite: ``BEGIN
  IMMEDIATE``, so the lock is taken before anything is read; PostgreSQL: READ COMMITTED with
  row locks taken by the writers), committed at the end and rolled back on any exception.
  :meth:`Database.read` runs one reading (SQLite: one read transaction, one snapshot;
  PostgreSQL: autocommit, each statement its own snapshot as under READ COMMITTED).
* Lock contention, serialisation failures, deadlocks and a dropped server connection are
  retried by tenacity (jittered exponential back-off) for up to ``timeout`` seconds; then
  :class:`StoreBusyError` / :class:`StoreUnavailableError`, one line each.  A full disk, a
  read-only database file or an unreachable server also become one-line
  :class:`StoreUnavailableError`; "database is locked" never reaches a user.
* The schema is created on first open and migrated on open: ``schema_version`` records the
  applied version; stores of schema 1 (``PRAGMA user_version = 1``, one label per token)
  are migrated to votes per annotator, stores of schema 2 get the team tables, the project
  guidelines and per-project model version numbers, stores of schema 3 get the per-token
  query scores of the queue, all in one transaction (:mod:`gpsl.annotation.store.migrations`,
  each migration frozen with its own code).
"""

from __future__ import annotations

import json
import os
import sqlite3
import weakref
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import numpy as np
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from tenacity import Retrying as _Retrying
from tenacity import (
    retry_if_exception,
    stop_after_delay,
    wait_random_exponential,
)

from gpsl.annotation.store import migrations, schema
from gpsl.annotation.store.store_errors import NotFoundError, StoreBusyError, StoreUnavailableError
from gpsl.errors import GpslError, InputError

__all__ = [
    "Database",
    "NotFoundError",
    "StoreBusyError",
    "StoreUnavailableError",
    "default_db_url",
    "dumps",
    "loads",
    "now",
]

T = TypeVar("T")
SERVER_RETRY_SECONDS = 3.0  # how long a call waits for a database server that went away
_DATABASES: weakref.WeakSet = weakref.WeakSet()


# ----------------------------------------------------------------------------- helpers


def now() -> str:
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


def dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=_json_default)


def loads(value, default=None):
    return default if value is None else json.loads(value)


def default_db_url(app_dir: str | os.PathLike) -> str:
    """``$GPSL_DB`` if set (a file path or a ``postgresql+psycopg://`` URL), else the
    SQLite file ``<app_dir>/data/gpsl.sqlite3``."""
    env = os.environ.get("GPSL_DB", "").strip()
    if env:
        return env
    return str(Path(app_dir) / "data" / "gpsl.sqlite3")


def _is_url(target: str) -> bool:
    return "://" in target


def _sqlite_error_kind(text_: str) -> str | None:
    t = text_.lower()
    if "locked" in t or "busy" in t:
        return "busy"
    if "disk is full" in t or "database or disk is full" in t:
        return "the disk is full"
    if "readonly" in t or "read-only" in t:
        return "the database is read-only"
    if "disk i/o error" in t:
        return "disk I/O error"
    if "unable to open" in t:
        return "the database file cannot be opened"
    return None


_PG_RETRY = {"40001", "40P01", "55P03"}  # serialization failure, deadlock, lock not available


def _pg_sqlstate(exc: BaseException) -> str | None:
    orig = getattr(exc, "orig", None)
    return getattr(orig, "sqlstate", None) or getattr(getattr(orig, "diag", None),
                                                       "sqlstate", None)


# ----------------------------------------------------------------------------- database


class Database:
    """An engine on SQLite or PostgreSQL with transactions, retries and the schema.

    ``target`` is a file path (SQLite) or a SQLAlchemy URL.  ``timeout`` is how long a
    transaction waits for locks (and is retried) before :class:`StoreBusyError`."""

    def __init__(self, target: str | os.PathLike, *, timeout: float = 30.0):
        target = os.fspath(target)
        if not target or target == ":memory:":
            raise ValueError("the store needs a file path or a database URL")
        self.target = target  # as given (a URL may hold a password: never in a message)
        self.timeout = float(timeout)
        given_url = _is_url(target)
        if given_url:
            self.url = make_url(target)
            if self.url.get_backend_name() == "sqlite":
                name = self.url.database or ""
                name = name[5:] if name.startswith("file:") else name  # uri=true form
                self.path: Path | None = Path(name).expanduser()
            else:
                self.path = None
        else:
            self.path = Path(target).expanduser()
        self.dialect = "sqlite" if self.path is not None else self.url.get_backend_name()
        if self.dialect not in ("sqlite", "postgresql"):
            raise InputError(f"unsupported database {self.dialect!r} (use a SQLite file or "
                             "postgresql+psycopg://)", source="GPSL_DB")
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not given_url:
                self.url = make_url(f"sqlite:///{self.path}")
            self.engine = self._sqlite_engine()
        else:
            # no pre-ping (a round trip per transaction): a pooled connection the server
            # dropped fails its first statement, before anything is written, and the
            # transaction is retried on a new one (_retryable)
            self.engine = create_engine(self.url, pool_size=5,
                                        max_overflow=20, isolation_level="READ COMMITTED",
                                        connect_args={"connect_timeout": 10})
        _DATABASES.add(self)
        self.migrate()

    @property
    def where(self) -> str:
        """The store for messages: the file path, or the server without a password."""
        if self.path is not None:
            return str(self.path)
        return self.url.render_as_string(hide_password=True)

    def _sqlite_engine(self) -> Engine:
        engine = create_engine(self.url, pool_size=8, max_overflow=24, pool_timeout=self.timeout)
        busy_ms = int(self.timeout * 1000)

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn, _record):
            dbapi_conn.isolation_level = None  # transactions are begun explicitly below
            cur = dbapi_conn.cursor()
            cur.execute(f"PRAGMA busy_timeout = {busy_ms}")
            cur.execute("PRAGMA foreign_keys = ON")
            cur.execute("PRAGMA synchronous = NORMAL")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn):
            options = conn.get_execution_options()
            if options.get("gpsl_single", False):
                return  # one statement: atomic by itself, no transaction (Database.read)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get("gpsl_write") else "BEGIN")

        return engine

    def dispose(self) -> None:
        self.engine.dispose()

    close = dispose

    # -- transactions ------------------------------------------------------------------

    def _retryable(self, exc: BaseException) -> bool:
        if not isinstance(exc, DBAPIError):
            return False
        if self.dialect == "sqlite":
            return _sqlite_error_kind(str(exc.orig)) == "busy"
        if exc.connection_invalidated:
            return True
        if _pg_sqlstate(exc) in _PG_RETRY:
            return True
        return _pg_connection_problem(exc)

    def _translate(self, exc: DBAPIError) -> Exception | None:
        message = " ".join(str(exc.orig).split())
        if isinstance(exc, DataError):  # a value the database cannot keep: the input's fault
            first = (str(exc.orig).strip().splitlines() or [""])[0]
            return InputError(f"the annotation store cannot keep a value: "
                              f"{' '.join(first.split())[:200]}", source=self.where)
        if self.dialect == "sqlite":
            if "not a database" in message or "file is encrypted" in message:
                return InputError(f"not a gpsl database ({message})", source=self.where)
            kind = _sqlite_error_kind(message)
            if kind == "busy":
                return StoreBusyError(
                    f"{self.where}: the annotation store stayed busy for {self.timeout:g} s "
                    "(another process holds its write lock); try again")
            if kind is not None:
                return StoreUnavailableError(f"{self.where}: the annotation store cannot be "
                                             f"used: {kind}")
            if isinstance(exc, OperationalError):
                return StoreUnavailableError(f"{self.where}: the annotation store failed: "
                                             f"{message}")
            return None
        state = _pg_sqlstate(exc)
        if state in _PG_RETRY:
            return StoreBusyError(f"{self.where}: the annotation store stayed busy for "
                                  f"{self.timeout:g} s (conflicting writes); try again")
        if exc.connection_invalidated or _pg_connection_problem(exc):
            return StoreUnavailableError(f"{self.where}: the database server is not "
                                         "reachable; try again when it is back")
        if state in ("53100", "25006"):  # disk full, read-only transaction
            return StoreUnavailableError(f"{self.where}: the annotation store cannot be "
                                         f"written: {message}")
        if isinstance(exc, OperationalError):
            return StoreUnavailableError(f"{self.where}: the annotation store failed: "
                                         f"{message}")
        return None

    def _stop(self, state) -> bool:
        """Stop retrying after ``timeout`` seconds, or after :data:`SERVER_RETRY_SECONDS`
        while the database server is not reachable (a click must not hang for long)."""
        limit = max(self.timeout, 0.05)
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, DBAPIError) and self.dialect != "sqlite" and (
                exc.connection_invalidated or _pg_connection_problem(exc)):
            limit = min(limit, SERVER_RETRY_SECONDS)
        return state.seconds_since_start >= limit

    def _run(self, fn: Callable[[Connection], T], write: bool, single: bool = False) -> T:
        retrying = _Retrying(stop=self._stop,
                             wait=wait_random_exponential(multiplier=0.005, max=0.25),
                             retry=retry_if_exception(self._retryable), reraise=True)
        try:
            for attempt in retrying:
                with attempt:
                    with self.engine.connect() as conn:
                        if write:
                            conn.execution_options(gpsl_write=True)
                        elif self.dialect == "postgresql":
                            # READ COMMITTED: every statement reads its own snapshot, in a
                            # transaction or not; without one, no BEGIN and COMMIT round
                            # trips (a read takes no lock)
                            conn.execution_options(isolation_level="AUTOCOMMIT")
                            return fn(conn)
                        elif single:  # SQLite: the statement's own implicit transaction
                            conn.execution_options(gpsl_single=True)
                            return fn(conn)
                        with conn.begin():
                            return fn(conn)
        except DBAPIError as exc:
            mapped = self._translate(exc)
            if mapped is None:
                raise
            raise mapped from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def write(self, fn: Callable[[Connection], T]) -> T:
        """``fn(conn)`` in one write transaction, retried as a whole on lock contention."""
        return self._run(fn, True)

    def read(self, fn: Callable[[Connection], T], *, single: bool = False) -> T:
        """``fn(conn)`` reading: on SQLite in one read transaction (one consistent
        snapshot); on PostgreSQL (READ COMMITTED, where each statement reads its own
        snapshot anyway) in autocommit mode, which spares the BEGIN and COMMIT round
        trips.  ``single``: ``fn`` runs one statement, which SQLite runs in a transaction
        of its own: no BEGIN on SQLite either (the reads of every page run)."""
        return self._run(fn, False, single)

    def analyze(self) -> None:
        """After a bulk write: PostgreSQL's ``ANALYZE`` of the store's tables, so the planner
        sees the rows just written. Autovacuum would, within about a minute; until then a
        table that grew from a few rows to thousands is planned as if still small (a 10k
        project's click and Next paid 20-40 ms of SQL for it right after its votes were
        written, against 6-8 ms analysed: ``bench.app_scale``). SQLite: nothing (its planner
        reads no statistics that a bulk write leaves stale)."""
        if self.dialect != "postgresql":
            return
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("ANALYZE")

    def for_update(self) -> str:
        """`` FOR UPDATE`` on PostgreSQL (row lock); SQLite's write lock covers the file."""
        return " FOR UPDATE" if self.dialect == "postgresql" else ""

    def lock(self, conn: Connection, key: int) -> None:
        """A transaction-scoped lock on ``key`` (PostgreSQL advisory lock; SQLite's
        ``BEGIN IMMEDIATE`` already serialises writers)."""
        if self.dialect == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": int(key)})

    # -- schema -------------------------------------------------------------------------

    def migrate(self) -> int:
        """Create the schema, or migrate an older one, in one transaction; returns the
        schema version.  A newer schema than this gpsl knows raises :class:`GpslError`."""
        if self.dialect == "sqlite":
            self._sqlite_wal()
        return self.write(self._migrate)

    def _sqlite_wal(self) -> None:
        """Switch the file to WAL (persistent in the file), outside any transaction, on the
        raw autocommit connection.  A new file being switched by another process answers
        SQLITE_BUSY at once (no busy handler): retried like every lock."""

        def busy(exc: BaseException) -> bool:
            if isinstance(exc, DBAPIError):
                return self._retryable(exc)
            return isinstance(exc, sqlite3.OperationalError) and \
                _sqlite_error_kind(str(exc)) == "busy"

        def to_wal():
            raw = self.engine.raw_connection()
            try:
                cur = raw.driver_connection.execute("PRAGMA journal_mode")
                if str(cur.fetchone()[0]).lower() != "wal":
                    raw.driver_connection.execute("PRAGMA journal_mode = WAL").fetchall()
            finally:
                raw.close()

        try:
            for attempt in _Retrying(stop=stop_after_delay(max(self.timeout, 0.05)),
                                     wait=wait_random_exponential(multiplier=0.005, max=0.25),
                                     retry=retry_if_exception(busy), reraise=True):
                with attempt:
                    to_wal()
        except DBAPIError as exc:
            mapped = self._translate(exc)
            if mapped is None:
                raise
            raise mapped from exc
        except sqlite3.DatabaseError as exc:
            text_ = " ".join(str(exc).split())
            if "not a database" in text_ or "encrypted" in text_:
                raise InputError(f"not a gpsl database ({text_})", source=self.where) from exc
            kind = _sqlite_error_kind(text_)
            if kind == "busy":
                raise StoreBusyError(f"{self.where}: the annotation store stayed busy for "
                                     f"{self.timeout:g} s; try again") from exc
            raise StoreUnavailableError(f"{self.where}: the annotation store cannot be used: "
                                        f"{kind or text_}") from exc

    def _migrate(self, conn: Connection) -> int:
        self.lock(conn, 0x6770736C)
        version = self._current_version(conn)
        if version > schema.SCHEMA_VERSION:
            raise GpslError(f"{self.where}: database schema version {version} is newer than "
                            f"this gpsl supports ({schema.SCHEMA_VERSION}); upgrade gpsl")
        if version == schema.SCHEMA_VERSION:
            return version
        migrations.run(conn, version)
        conn.execute(text("INSERT INTO schema_version (version, applied_at) VALUES (:v, :at)"),
                     {"v": schema.SCHEMA_VERSION, "at": now()})
        if self.dialect == "sqlite":
            conn.exec_driver_sql(f"PRAGMA user_version = {schema.SCHEMA_VERSION}")
        return schema.SCHEMA_VERSION

    def _current_version(self, conn: Connection) -> int:
        if self.dialect == "sqlite":
            has = conn.exec_driver_sql(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
            ).first()
            if not has:  # schema 1 kept its version in PRAGMA user_version
                return int(conn.exec_driver_sql("PRAGMA user_version").scalar() or 0)
        else:
            has = conn.execute(text("SELECT to_regclass('schema_version')")).scalar()
            if not has:
                return 0
        return int(conn.execute(text("SELECT COALESCE(MAX(version), 0) FROM schema_version"))
                   .scalar())


def _pg_connection_problem(exc: DBAPIError) -> bool:
    state = _pg_sqlstate(exc) or ""
    if state.startswith("08") or state in ("57P01", "57P02", "57P03"):
        return True
    t = str(exc.orig).lower()
    return any(s in t for s in ("connection refused", "server closed the connection",
                                "terminating connection", "could not connect",
                                "connection failed", "the database system is"))


def run_in_child_after_fork() -> None:
    """Forget the parent's pooled connections in a forked child (never close them)."""
    for db in list(_DATABASES):
        db.engine.dispose(close=False)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=run_in_child_after_fork)

