"""Helpers shared by several test modules (a plain module, imported as ``_support``)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gpsl.annotation import Store
from tests.support.limits import limit

BP, IP, BL, OUT = "B-PER", "I-PER", "B-LOC", "O"


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_status(url: str) -> int | None:
    """The HTTP status of ``url``, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


ROOT = Path(__file__).resolve().parents[2]
#: Debian's Chromium, driven by Playwright in the browser tests (skipped when it is missing)
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
#: where the browser tests put their screenshots: outside the checkout (no test writes into
#: it), ``$GPSL_TEST_ARTIFACTS`` or ``<temporary directory>/gpsl-test-artifacts``
ARTIFACTS = Path(os.environ.get("GPSL_TEST_ARTIFACTS")
                 or Path(tempfile.gettempdir()) / "gpsl-test-artifacts")


def wait_until(predicate, timeout: float = 120.0, step: float = 0.1, what: str = "condition"):
    """Poll ``predicate`` until it returns a true value (returned); fail after ``timeout`` s,
    naming ``what`` was waited for."""
    deadline = time.monotonic() + limit(timeout)
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"{what} not met within {limit(timeout):.0f} s")


WIDGET = "[data-testid='gpslWidget']"


@pytest.fixture(scope="module", name="browser")
def chromium_browser():
    """Fixture ``browser``: Debian's Chromium through Playwright, one for a test module
    (import ``chromium_browser`` there)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                               args=CHROMIUM_ARGS)
        yield b
        b.close()


@contextlib.contextmanager
def server_paused(url: str):
    """The server of ``url`` (:func:`serve_app`) stopped (SIGSTOP) inside the block."""
    import signal

    pid = SERVED[url].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def token_chip(page, t: int):
    """The Annotate page's chip of token ``t`` (the labelling widget, pages/labeler)."""
    return page.locator(f"{WIDGET} .gw-chip[data-t='{t}']").first


def widget_button(page, act: str, arg: str | None = None):
    """A button of the labelling widget: ``act`` "label" / "type" with the label or entity
    type ``arg``, or "clear", "undo", "next", "prev", "skip", "accept"."""
    sel = f"{WIDGET} [data-act='{act}']" + ("" if arg is None else f"[data-arg='{arg}']")
    return page.locator(sel).first


def widget_shows(page, text: str, part: str = "Detail", timeout: float = 30.0) -> None:
    """Wait until the widget's line ``part`` ("Detail": the selected token, "Head": the
    sentence and its counts, "Reason", "Sync") contains ``text``."""
    from tests.support.limits import ms
    page.get_by_test_id(f"gpslWidget{part}").filter(has_text=text).wait_for(
        timeout=ms(timeout))


def widget_ready(page, timeout: float = 60.0) -> None:
    """Wait until the labelling widget has drawn a sentence and holds the keys."""
    from tests.support.limits import ms
    page.wait_for_function("() => { const w = window.__gpslWidget; return !!(w && w.root &&"
                           " w.root.isConnected && w.data && w.data.sid); }",
                           timeout=ms(timeout))


def app_store_env(tmp_path: Path, monkeypatch) -> Path:
    """The app's store for an AppTest run: a new SQLite file in ``tmp_path`` named by
    ``GPSL_DB``, annotator "tester"; returns its path."""
    path = tmp_path / "gpsl.sqlite3"
    monkeypatch.setenv("GPSL_DB", str(path))
    monkeypatch.setenv("GPSL_ANNOTATOR", "tester")
    return path


#: the server process of each URL :func:`serve_app` serves (a test may pause it)
SERVED: dict[str, subprocess.Popen] = {}


@contextlib.contextmanager
def serve_app(log_path: Path, env: dict, ready_path: str = "_stcore/health",
              port: int | None = None):
    """``streamlit run app.py`` on a free loopback port (or ``port``) with ``env`` added to
    the environment; yields the URL once ``URL + ready_path`` answers 200 (fails the test
    after 60 s or if the server exits), and stops the server afterwards."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
           "--server.address", "127.0.0.1", "--server.headless", "true",
           "--browser.gatherUsageStats", "false"]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", **env})
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + limit(60)
        while http_status(url + ready_path) != 200:
            if proc.poll() is not None:
                pytest.fail(f"streamlit exited with {proc.returncode}:\n{log_path.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"no HTTP 200 from {url + ready_path} within 60 s:\n"
                            f"{log_path.read_text()}")
            time.sleep(0.3)
        SERVED[url] = proc
        yield url
    finally:
        SERVED.pop(url, None)
        proc.terminate()
        try:
            proc.wait(timeout=limit(15))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def random_task(seed=0, n_sent=5, J=3, P=15, missing=0.0, max_len=7):
    """A small random sequence-labeling task for the engines' numerical tests: sentence lengths
    in [3, max_len), a sparse binary feature matrix, labels with a ``missing`` share hidden
    (-1) and at least one observed. Returns (lengths, X, y, J)."""
    import numpy as np
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, max_len, size=n_sent)
    n = int(lengths.sum())
    X = sp.random(n, P, density=0.3, random_state=seed, format="csr")
    X.data[:] = 1.0
    y = rng.integers(0, J, size=n)
    y[rng.random(n) < missing] = -1
    if (y >= 0).sum() == 0:
        y[0] = 0
    return lengths, X, y, J


def tiny_store(path: Path, extra=()) -> tuple[Store, int]:
    """A small person/location project: labeled, partial, unlabeled and held-out sentences."""
    store = Store(path)
    pid = store.create_project("tiny", [BP, IP, BL, OUT])
    store.add_sentences(pid, [
        {"tokens": "Anna Smith went to Paris .".split(), "labels": [BP, IP, OUT, OUT, BL, OUT]},
        {"tokens": "Bob Jones flew to Rome .".split(), "labels": [BP, IP, OUT, OUT, BL, OUT]},
        {"tokens": "Anna went to Rome .".split(), "labels": [BP, None, None, BL, None]},
        {"tokens": "Bob Smith went to Paris .".split()},
        {"tokens": "Zork Quuxly blorped fnord Xyzzy !".split()},
        {"tokens": "Carl went to Oslo .".split()},
        *extra,
    ])
    store.add_sentences(pid, [{"tokens": "Anna flew to Paris .".split()}], split="heldout",
                        gold=[[BP, OUT, OUT, BL, OUT]])
    return store, pid
