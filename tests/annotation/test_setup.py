"""The set-up works: pinned requirements, the app renders, `streamlit run app.py` serves it.

The one real-browser test of the app is in tests/app/browser/test_browser.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpsl.io import read_conll
from tests.support.helpers import http_status as get
from tests.support.helpers import serve_app
from tests.support.limits import limit

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["requirements.txt", "requirements-dev.txt",
                                  "requirements-bench.txt"])
def test_requirements_are_pinned(name):
    lines = [ln.strip() for ln in (ROOT / name).read_text().splitlines()]
    specs = [ln for ln in lines if ln and not ln.startswith(("#", "-r "))]
    assert specs
    for spec in specs:
        pinned = r"[A-Za-z0-9_.\-]+(\[[A-Za-z0-9_,\-]+\])?==[0-9][0-9A-Za-z.\-+]*"
        assert re.fullmatch(pinned, spec), spec


def test_app_opens_on_the_sample_project(tmp_path, monkeypatch):
    """Smoke test of app.py; the pages are tested in tests/app/test_app.py."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("GPSL_DB", str(tmp_path / "gpsl.sqlite3"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(60)).run()
    assert not at.exception
    assert at.title[0].value == "Project"
    sentences = read_conll(ROOT / "sample_data" / "sample.conll")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Sentences"] == f"{len(sentences):,}"
    assert metrics["Labeled tokens"] == f"{sum(len(s) - s.n_missing for s in sentences):,}"


@pytest.fixture(scope="module")
def served_app(tmp_path_factory):
    """``streamlit run app.py`` on a free loopback port; yields the URL once it answers 200."""
    log_path = tmp_path_factory.mktemp("streamlit") / "server.log"
    with serve_app(log_path, {"GPSL_DB": str(log_path.parent / "gpsl.sqlite3")},
                   ready_path="") as url:
        yield url


@pytest.mark.timeout(120)
def test_streamlit_run_serves_app_on_localhost(served_app):
    assert get(served_app) == 200
    assert get(served_app + "_stcore/health") == 200


def test_the_library_has_no_streamlit_and_no_html():
    """View code lives in pages/: gpsl/ imports no Streamlit and writes no HTML markup."""
    imports = re.compile(r"^\s*(import|from)\s+streamlit\b", re.M)
    markup = re.compile(r"<\s*(div|span|style|sup|br|table|code|html)\b[^>]*>", re.I)
    for path in (ROOT / "gpsl").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not imports.search(text), path
        assert not markup.search(text), (path, markup.search(text))


def test_annotation_modules_are_small():
    """One job per module in gpsl/annotation (no module over about 600 lines)."""
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines())
             for p in (ROOT / "gpsl" / "annotation").rglob("*.py")}
    assert {"db.py", "validate.py", "projects.py", "sentences.py", "label_writes.py",
            "versions.py", "predictions.py", "queue.py", "imports.py", "exports.py",
            "pipeline.py", "jobs.py", "facade.py"} <= set(sizes)
    assert max(sizes.values()) <= 600, sizes
