"""The set-up works: pinned requirements, the app renders, `streamlit run app.py` serves it.

The one real-browser test of the app is in tests/test_browser.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _support import free_port
from _support import http_status as get

from gpsl.io import read_conll

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["requirements.txt", "requirements-dev.txt"])
def test_requirements_are_pinned(name):
    lines = [ln.strip() for ln in (ROOT / name).read_text().splitlines()]
    specs = [ln for ln in lines if ln and not ln.startswith(("#", "-r "))]
    assert specs
    for spec in specs:
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][0-9A-Za-z.\-+]*", spec), spec


def test_app_opens_on_the_sample_project(tmp_path, monkeypatch):
    """Smoke test of app.py; the pages are tested in tests/test_app.py."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("GPSL_DB", str(tmp_path / "gpsl.sqlite3"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    assert not at.exception
    assert at.title[0].value == "Project"
    sentences = read_conll(ROOT / "sample_data" / "sample.conll")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Sentences"] == f"{len(sentences):,}"
    assert metrics["Labeled tokens"] == f"{sum(len(s) - s.n_missing for s in sentences):,}"


@pytest.fixture(scope="module")
def served_app(tmp_path_factory):
    """``streamlit run app.py`` on a free loopback port; yields the URL once it answers 200."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("streamlit") / "server.log"
    cmd = [
        sys.executable, "-m", "streamlit", "run", "app.py",
        "--server.address", "127.0.0.1",
        "--server.port", str(port),
        "--server.headless", "true",
        "--browser.gatherUsageStats", "false",
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1",
                 "GPSL_DB": str(log_path.parent / "gpsl.sqlite3")},
        )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while get(url) != 200:
            if proc.poll() is not None:
                pytest.fail(f"streamlit exited with {proc.returncode}:\n{log_path.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"no HTTP 200 from {url} within 60 s:\n{log_path.read_text()}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.timeout(120)
def test_streamlit_run_serves_app_on_localhost(served_app):
    assert get(served_app) == 200
    assert get(served_app + "_stcore/health") == 200
