"""Shared fixtures and the suite's hygiene.

- A real PostgreSQL server for the store tests that run on both back ends (Debian's
  ``postgresql``, started by :class:`bench.postgres.TempPostgres` as the ``postgres`` user in
  a temporary directory on a free loopback port), started once per session when a test asks
  for it and stopped at the end.  Without PostgreSQL the PostgreSQL half is skipped and the
  summary says so; under CI (``CI=true``) that is a failure.
- No test writes into the checkout: the run fails with the list of files created, modified
  or deleted in it (``support/checkout.py``; tool caches aside).  Hypothesis keeps its example
  database in the temporary directory, and ``sys.modules["__main__"]`` is put back after
  every test (an AppTest run leaves ``app.py`` there, and a process that multiprocessing
  spawns later, e.g. a Dask worker, would run the app again, creating its default store in
  the checkout).
- Wall-clock limits follow the machine's speed and load (``support/limits.py``): every
  ``pytest.mark.timeout`` (and the ini ``timeout``) is scaled at the start of its test.
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

from hypothesis.configuration import set_hypothesis_home_dir  # noqa: E402

from tests.support import checkout as _checkout  # noqa: E402
from tests.support import limits as _limits  # noqa: E402

set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "gpsl-hypothesis")
_MAIN = sys.modules["__main__"]
_CHECKOUT: dict = {"before": None, "changes": []}


def _is_controller(config) -> bool:
    """True in the process that runs the session (not in a pytest-xdist worker)."""
    return not hasattr(config, "workerinput")


def pytest_sessionstart(session):
    if _is_controller(session.config):
        _CHECKOUT["before"] = _checkout.snapshot(ROOT)


def pytest_report_header(config):
    return _limits.describe()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Scale the test's timeout (its marker, else the ini ``timeout``) by the machine's
    current factor; pytest-timeout reads the closest marker after this."""
    marker = item.get_closest_marker("timeout")
    kwargs = dict(marker.kwargs) if marker is not None else {}
    if marker is not None and marker.args:
        seconds = marker.args[0]
    else:  # --timeout, $PYTEST_TIMEOUT or the ini value, as pytest-timeout resolved them
        seconds = kwargs.pop("timeout", getattr(item.config, "_env_timeout", None))
    if seconds:
        item.add_marker(pytest.mark.timeout(_limits.limit(float(seconds)), **kwargs),
                        append=False)
    yield


@pytest.fixture(autouse=True)
def _main_module_restored():
    """Put ``sys.modules["__main__"]`` back after the test (AppTest replaces it), and the
    objects an app run froze (``gc.freeze``, app.py) back into the collector's reach, so that
    one test's app run never keeps another's cyclic garbage alive."""
    yield
    if sys.modules.get("__main__") is not _MAIN:
        sys.modules["__main__"] = _MAIN
    gc.unfreeze()

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
    if _is_controller(session.config) and _CHECKOUT["before"] is not None:
        _CHECKOUT["changes"] = _checkout.changes(_CHECKOUT["before"], _checkout.snapshot(ROOT))
        if _CHECKOUT["changes"]:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
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
    if _CHECKOUT["changes"]:
        terminalreporter.write_sep(
            "!", f"the run wrote into the checkout {ROOT} (no test may; files edited by hand "
            "during the run show here too)", red=True, bold=True)
        for line in _CHECKOUT["changes"]:
            terminalreporter.write_line(f"  {line}", red=True)
    if _PG["error"] is not None:
        terminalreporter.write_sep(
            "!", f"PostgreSQL half SKIPPED ({_PG['skipped']} tests): {_PG['error']}",
            red=True, bold=True)
    elif _PG.get("used"):
        ports = ", ".join(str(p) for p in _PG.get("ports", [_PG.get("port")]))
        terminalreporter.write_line(f"PostgreSQL half ran on a temporary server (port {ports}).")


#: markers by folder (registered in pyproject.toml); ``postgres`` marks what runs on PostgreSQL
FOLDER_MARKERS = {("app", "browser"): "browser", ("bench",): "bench"}


def pytest_collection_modifyitems(config, items):
    """Mark each test by its folder (``browser``, ``bench``), and the PostgreSQL half
    (``postgres``: a test on the PostgreSQL store, or asking for the server itself), so that
    ``-m "not browser and not postgres"`` runs what needs neither."""
    here = Path(__file__).resolve().parent
    for item in items:
        try:
            parts = Path(item.path).resolve().relative_to(here).parts
        except ValueError:
            continue
        for folder, name in FOLDER_MARKERS.items():
            if parts[:len(folder)] == folder:
                item.add_marker(name)
        params = getattr(getattr(item, "callspec", None), "params", {})
        if params.get("store_target") == "postgresql" or \
                {"pg_url", "postgres_server"} & set(getattr(item, "fixturenames", ())):
            item.add_marker("postgres")
