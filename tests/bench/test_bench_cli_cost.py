"""bench.cli_cost: the commands' CPU and memory, the phases of the default `gpsl train`, and a
tiny end-to-end run on synthetic sentences beside CRFsuite."""

from __future__ import annotations

import json
import sys

import pytest

from bench import cli_cost as B


def test_a_commands_cpu_and_memory_are_its_own():
    burn = "import numpy as np; a = np.ones(30_000_000); s = 0\nfor _ in range(3): s += a.sum()"
    rec = B.run_command([sys.executable, "-c", burn])
    assert rec["cpu_s"] > 0.02 and rec["peak_mib"] > 200  # 240 MB of ones
    small = B.run_command([sys.executable, "-c", "print('hi')"])
    assert small["stdout"].strip() == "hi" and small["peak_mib"] < rec["peak_mib"]
    with pytest.raises(RuntimeError, match="exit 3"):
        B.run_command([sys.executable, "-c", "import sys; sys.exit(3)"])


def test_a_tiny_run_writes_the_table_and_the_phases(tmp_path):
    pytest.importorskip("sklearn_crfsuite")
    out = tmp_path / "results"
    assert B.main(["--sentences", "60", "--out", str(out), "--name", "tiny"]) == 0
    report = json.loads((out / "tiny.json").read_text(encoding="utf-8"))
    point, = report["points"]
    d, raw, crf = point["default"], point["--no-calibrate"], point["CRFsuite"]
    assert point["train_sentences"] == 60 and crf["fit_cpu_s"] > 0
    assert d["calibration_run"]["source"] == "folds" and raw["calibrator"] is None
    p = d["phases"]
    assert all(p[k] >= 0 for k in B.PHASES) and p["fit"] > 0 and p["fold fits"] > 0
    # the phases add up to the timed run (the rest: start, imports, the summary line)
    assert sum(p[k] for k in B.PHASES) + p["rest"] == pytest.approx(p["total"])
    assert d["ratio"] == pytest.approx(d["train_cpu_s"] / crf["fit_cpu_s"])
    assert 0 <= d["loss"] <= 100 and 0 <= d["ece"] <= 1
    md = (out / "tiny.md").read_text(encoding="utf-8")
    assert "synthetic 60" in md and "calibrator choice" in md and "CRFsuite fit" in md


def test_the_sample_grammar_point_is_issue_36s_data(tmp_path):
    """``--generator sample``: the sample project's sentences with every label and its
    template, the test sentences after the training ones and none of them shared."""
    point = B.sample_point(tmp_path, 50, n_test=20)
    assert point["train_sentences"] == 50 and point["name"] == "sample grammar 50"
    train = (tmp_path / "train.data").read_text(encoding="utf-8").strip().split("\n\n")
    test = (tmp_path / "test.data").read_text(encoding="utf-8").strip().split("\n\n")
    assert len(train) == 50 and len(test) == 20 and not set(train) & set(test)
    assert all(len(line.split()) == 3 and line.split()[2] != "_"
               for s in train for line in s.splitlines())
    assert len(point["gold"]) == point["test_tokens"] == sum(len(s.splitlines()) for s in test)
    assert "%x[0,0]" in (tmp_path / "template").read_text(encoding="utf-8")
