"""Shared fixtures: a real PostgreSQL server for the store tests that run on both back ends.

The server (Debian's ``postgresql``, started by :class:`bench.postgres.TempPostgres` as the
``postgres`` user in a temporary directory on a free loopback port) is started once per
session when a test asks for it and stopped at the end.  Without PostgreSQL the PostgreSQL
half is skipped and the summary says so; under CI (``CI=true``) that is a failure.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `bench` for the helpers

_PG: dict = {"server": None, "error": None, "skipped": 0}
BACKENDS = ["sqlite", "postgresql"]


def _on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def postgres_server():
    from bench.postgres import PostgresUnavailable, TempPostgres

    if _PG["server"] is None and _PG["error"] is None:
        try:
            _PG["server"] = TempPostgres().start()
            _PG["port"] = _PG["server"].port
        except PostgresUnavailable as exc:
            _PG["error"] = str(exc)
    if _PG["server"] is None:
        if _on_ci():
            pytest.fail(f"PostgreSQL is required under CI: {_PG['error']}")
        _PG["skipped"] += 1
        pytest.skip(f"PostgreSQL half skipped: {_PG['error']}")
    _PG["used"] = True
    yield _PG["server"]


def pytest_sessionfinish(session, exitstatus):
    server = _PG.get("server")
    if server is not None:
        server.stop()
        _PG["server"] = None
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: tell the controller for its summary
        workeroutput["gpsl_pg"] = {k: _PG.get(k) for k in ("error", "skipped", "used", "port")}


def pytest_testnodedown(node, error):
    """pytest-xdist (``make test`` runs 2 workers): gather the workers' PostgreSQL states."""
    pg = getattr(node, "workeroutput", {}).get("gpsl_pg")
    if not pg:
        return
    if pg["error"] is not None:
        _PG["error"] = pg["error"]
        _PG["skipped"] += pg["skipped"] or 0
    if pg["used"]:
        _PG["used"] = True
        _PG.setdefault("ports", []).append(pg["port"])


@pytest.fixture
def pg_url(postgres_server):
    """The URL of a new empty PostgreSQL database."""
    return postgres_server.new_database()


@pytest.fixture(params=BACKENDS)
def store_target(request, tmp_path):
    """A new store on each back end: a SQLite file path, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "data" / "gpsl.sqlite3")
    server = request.getfixturevalue("postgres_server")
    return server.new_database()


@pytest.fixture
def store(store_target):
    """A new store on SQLite and on PostgreSQL (a test using it runs on both)."""
    from gpsl.annotation import Store

    s = Store(store_target)
    yield s
    s.close()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _PG["error"] is not None:
        terminalreporter.write_sep(
            "!", f"PostgreSQL half SKIPPED ({_PG['skipped']} tests): {_PG['error']}",
            red=True, bold=True)
    elif _PG.get("used"):
        ports = ", ".join(str(p) for p in _PG.get("ports", [_PG.get("port")]))
        terminalreporter.write_line(f"PostgreSQL half ran on a temporary server (port {ports}).")
