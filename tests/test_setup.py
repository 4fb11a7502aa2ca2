"""The set-up works: pinned requirements, the app renders, `streamlit run app.py` serves it."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from gpsl.io import read_conll

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
TITLE = "gpsl — sequence labeling with Gaussian processes"


def expected_overview() -> dict[str, str]:
    sentences = read_conll(ROOT / "sample_data" / "sample.conll")
    n_tokens = sum(len(s) for s in sentences)
    n_labeled = sum(len(s) - s.n_missing for s in sentences)
    return {
        "Sentences": f"{len(sentences):,}",
        "Tokens": f"{n_tokens:,}",
        "Labeled tokens": f"{n_labeled:,}",
        "Complete": f"{100 * n_labeled / n_tokens:.1f}%",
    }


@pytest.mark.parametrize("name", ["requirements.txt", "requirements-dev.txt"])
def test_requirements_are_pinned(name):
    lines = [ln.strip() for ln in (ROOT / name).read_text().splitlines()]
    specs = [ln for ln in lines if ln and not ln.startswith(("#", "-r "))]
    assert specs
    for spec in specs:
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][0-9A-Za-z.\-+]*", spec), spec


def test_app_renders_overview_of_sample_project():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    assert not at.exception
    assert at.title[0].value == TITLE
    assert {m.label: m.value for m in at.metric} == expected_overview()

    sentences = read_conll(ROOT / "sample_data" / "sample.conll")
    statuses = Counter(
        "full" if s.n_missing == 0 else "none" if s.n_missing == len(s) else "partial"
        for s in sentences
    )
    summary = at.markdown[0].value
    assert f"Fully labeled: **{statuses['full']}**" in summary
    assert f"Partially labeled: **{statuses['partial']}**" in summary
    assert f"Unlabeled: **{statuses['none']}**" in summary

    # the token table follows the chosen sentence
    at.number_input[0].set_value(len(sentences)).run()
    assert not at.exception
    last = sentences[-1]
    table = at.dataframe[-1].value
    assert list(table["token"]) == [tok[0] for tok in last.tokens]
    assert set(table["label"]) == {"_"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


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
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
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


@pytest.mark.timeout(180)
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian Chromium (/usr/bin/chromium) missing")
def test_app_in_browser(served_app):
    from playwright.sync_api import sync_playwright

    expected = expected_overview()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--disable-dev-shm-usage"]
        )
        try:
            page = browser.new_page()
            page.goto(served_app)
            page.get_by_role("heading", name=TITLE).wait_for(timeout=60_000)
            values = page.get_by_test_id("stMetricValue")
            values.first.wait_for(timeout=30_000)
            assert values.all_inner_texts() == list(expected.values())
        finally:
            browser.close()
