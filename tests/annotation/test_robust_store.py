"""Robustness of the store and the training worker (issue #7): concurrent annotators and
SIGKILLed processes, through the functions that produce ``bench/results/robustness.*``.

The default variants are small (a few seconds each).  The full sizes of the report
(4 writers x 500 labels per mode, 20 + 20 crash trials) run with ``GPSL_LONG_TESTS=1``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from bench.robustness.concurrency import run_concurrency_trial
from bench.robustness.crashes import run_crash_trials, run_label_crash_trials

ROOT = Path(__file__).resolve().parents[2]
LONG = os.environ.get("GPSL_LONG_TESTS") == "1"
long_only = pytest.mark.skipif(not LONG, reason="long variant: set GPSL_LONG_TESTS=1")


def assert_no_lost_writes(report: dict) -> None:
    assert report["writes_attempted"] == report["writers"] * report["labels_per_writer"]
    assert report["writes_found"] == report["writes_attempted"], report
    assert report["lost_writes"] == 0
    assert report["errors"] == 0 and report["locked_errors"] == 0, report["error_examples"]
    assert report["tracebacks"] == 0, report["crash_examples"]
    for key in ("final_label_mismatches", "exclusive_token_mismatches",
                "n_labeled_mismatches", "history_order_violations", "history_rows_mismatched"):
        assert report[key] == 0, (key, report)
    assert report["race_rounds_checked"] == report["race_rounds"] > 0
    assert report["race_both_in_history"] == report["race_rounds"]
    assert report["race_both_votes_kept"] == report["race_rounds"]
    assert report["integrity_check"] == "ok"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["process", "thread"])
def test_concurrent_writers_lose_nothing(tmp_path, mode):
    report = run_concurrency_trial(tmp_path / "c.sqlite3", writers=4, labels_per_writer=50,
                                   mode=mode, race_rounds=8)
    assert_no_lost_writes(report)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["process", "thread"])
def test_concurrent_writers_lose_nothing_on_postgresql(tmp_path, pg_url, mode):
    report = run_concurrency_trial(pg_url, writers=4, labels_per_writer=50, mode=mode,
                                   race_rounds=8, workdir=tmp_path)
    assert_no_lost_writes(report)


@pytest.mark.timeout(180)
def test_sigkilled_writers_lose_nothing_committed_on_postgresql(tmp_path, postgres_server):
    report = run_label_crash_trials(2, tmp_path, seed=3,
                                    new_store=lambda k: postgres_server.new_database())
    assert report["trials"] == report["intact"] == 2, report["failures"]
    assert report["lost_labels"] == 0 and report["corrupted"] == 0
    assert report["writes_reported"] > 0


@pytest.mark.timeout(180)
def test_killed_workers_and_writers_leave_the_store_intact(tmp_path):
    report = run_crash_trials(2, seed=0, workdir=tmp_path)
    assert report["trials"] == 4
    assert report["intact"] == 4, report["training"]["failures"] + report["labels"]["failures"]
    assert report["corrupted"] == 0 and report["lost_labels"] == 0
    assert report["tracebacks"] == 0
    assert report["labels"]["writes_reported"] > 0


@long_only
@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", ["process", "thread"])
def test_long_concurrent_writers_4x500(tmp_path, mode):
    report = run_concurrency_trial(tmp_path / "c.sqlite3", writers=4, labels_per_writer=500,
                                   mode=mode, race_rounds=40)
    assert_no_lost_writes(report)


@long_only
@pytest.mark.timeout(1800)
def test_long_crash_trials(tmp_path):
    report = run_crash_trials(20, seed=1, workdir=tmp_path)
    assert report["trials"] == 40 and report["intact"] == 40
    assert report["corrupted"] == 0 and report["lost_labels"] == 0


# ------------------------------------------------------------------ configuration


def test_app_listens_on_localhost_with_xsrf_protection():
    import tomllib

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    server = config["server"]
    assert server["address"] in ("localhost", "127.0.0.1")
    assert server["enableXsrfProtection"] is True
    assert server.get("enableCORS", True) is True
    makefile = (ROOT / "Makefile").read_text()
    assert "--server.address 127.0.0.1" in makefile


def _sources():
    for top in ("gpsl", "pages", "bench"):
        yield from (ROOT / top).rglob("*.py")
    yield ROOT / "app.py"


def test_no_pickle_anywhere():
    """Models are JSON + NPZ, marginals NPY, all loaded with allow_pickle=False."""
    imports = re.compile(r"^\s*(import|from)\s+(c?pickle|dill|joblib|shelve)\b", re.M)
    unsafe = re.compile(r"allow_pickle\s*=\s*True|pickle\.loads?\(|np\.load\([^)]*\)\.item")
    found = []
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        if imports.search(text) or unsafe.search(text):
            found.append(str(path.relative_to(ROOT)))
    assert found == []
    loads = [path for path in _sources()
             if "np.load(" in path.read_text(encoding="utf-8")]
    for path in loads:  # every np.load passes allow_pickle=False explicitly
        text = path.read_text(encoding="utf-8")
        for start in [m.end() for m in re.finditer(r"np\.load\(", text)]:
            depth, end = 1, start
            while depth:
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                end += 1
            assert "allow_pickle=False" in text[start:end], (path, text[start:end])


@pytest.mark.timeout(180)
def test_report_command_writes_json_and_markdown(tmp_path, monkeypatch):
    from bench.robustness import __main__ as report_main

    monkeypatch.setitem(report_main.SIZES, "default", {
        "inputs_per_kind": 3, "concurrency": [(2, 20, 0)], "race_rounds": 4, "crash_training": 1,
        "crash_labels": 1, "postgres_concurrency": [(2, 20, 0)], "postgres_crash_labels": 1})
    status = report_main.main(["--out", str(tmp_path)])
    report = json.loads((tmp_path / "robustness.json").read_text())
    s = report["summary"]
    assert s["writes_attempted"] == 2 * 2 * 20 and s["lost_writes"] == 0
    assert s["crash_trials"] == s["crash_trials_intact"] == 2
    assert s["crash_stores_corrupted"] == 0 and s["concurrency_stores_corrupted"] == 0
    assert s["tracebacks"] == s["input_tracebacks"]  # none from concurrency or crashes
    md = (tmp_path / "robustness.md").read_text()
    assert "python -m bench.robustness --out" in md and "| lost writes | 0 |" in md
    assert "| figure | SQLite | PostgreSQL |" in md
    pg = s["postgresql"]
    if pg is None:  # no PostgreSQL here: the report says so (and CI must have it)
        assert "PostgreSQL not run" in md and os.environ.get("CI", "") != "true"
    else:
        assert pg["writes_attempted"] == 2 * 2 * 20 and pg["lost_writes"] == 0
        assert pg["locked_errors"] == 0 and pg["lost_labels_after_kill"] == 0
        assert pg["label_crash_trials"] == pg["label_crash_trials_intact"] == 1
    if report["inputs"].get("available"):  # bench.robustness.inputs (its own tests check it)
        assert s["inputs_tried"] > 0
        assert s["inputs_tried"] == (s["inputs_accepted"] + s["inputs_rejected_cleanly"]
                                     + s["input_tracebacks"])
        assert status == (0 if s["input_tracebacks"] == 0 else 1)
