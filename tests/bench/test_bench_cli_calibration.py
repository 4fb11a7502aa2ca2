"""bench.cli_calibration: reading `gpsl test --marginals`, the figures, the acceptance, and a
tiny end-to-end run on seg (subprocesses of the command line beside CRFsuite);
bench.crowd_calibration: a tiny run on the real crowd."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import cli_calibration as B
from bench import crowd_calibration as C
from bench.common import DATA_DIR

HAVE_DATA = (DATA_DIR / "seg" / "train.data").is_file()


def test_the_marginals_output_is_read_per_token():
    out = "a\tX\tB\tB/0.900000\nb\tY\tI\tO/0.600000\n\nc\tZ\tB/I\tB/I/0.500000\n\n"
    conf, right = B._marginals_output(out, ["B", "I", "B/I"])
    assert conf.tolist() == [0.9, 0.6, 0.5] and right.tolist() == [True, False, True]
    with pytest.raises(RuntimeError, match="2 token lines for 3 tokens"):
        B._marginals_output("a\tB/0.9\n\nb\tI/0.8\n", ["B", "I", "O"])


def test_figures_by_hand():
    conf = np.array([0.95, 0.95, 0.55, 0.55])
    right = np.array([True, False, True, True])
    f = B._figures(conf, right)
    # bins [0.9, 1.0): confidence 0.95, accuracy 0.5; [0.5, 0.6): 0.55 against 1.0
    assert f["ece"] == pytest.approx(0.5 * 0.45 + 0.5 * 0.45)
    assert f["loss"] == pytest.approx(25.0) and f["mean_confidence"] == pytest.approx(0.75)
    assert 0.0 < f["ece_floor"] < 0.5 and f["tokens"] == 4


def test_acceptance_needs_ece_and_loss_against_both_decodings():
    def row(ece, loss):
        return {"ece": (ece, 0.0), "loss": (loss, 0.0)}

    summ = {"chunking": {"gpsl default": row(0.01, 9.0), "CRFsuite": row(0.02, 9.5),
                         "CRFsuite Viterbi": row(0.02, 9.0)},
            "basenp": {"gpsl default": row(0.005, 4.7), "CRFsuite": row(0.008, 4.5),
                       "CRFsuite Viterbi": row(0.009, 4.8)}}
    acc = B.acceptance(summ)
    assert acc["chunking"]["CRFsuite Viterbi"] == {"ece": True, "loss": True}
    assert acc["basenp"]["CRFsuite"] == {"ece": True, "loss": False}
    assert acc["met"] is False
    summ["basenp"]["gpsl default"] = row(0.005, 4.5)
    assert B.acceptance(summ)["met"] is True
    assert B.acceptance({})["met"] is None


def test_missing_data_is_one_line_exit_2(tmp_path, capsys):
    assert B.main(["--data-dir", str(tmp_path / "absent"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bench.cli_calibration:") and err.count("\n") == 1


@pytest.mark.skipif(not HAVE_DATA, reason="../shared/data/crfpp is not beside the checkout")
def test_end_to_end_on_a_small_seg_partition(tmp_path, capsys):
    out = tmp_path / "out"
    assert B.main(["--datasets", "seg", "--partitions", "1", "--sizes", "seg=6/4",
                   "--out", str(out), "--name", "tiny"]) == 0
    rep = json.loads((out / "tiny.json").read_text())
    (rec,) = rep["results"]["seg"]
    d = rec["gpsl default"]
    # the default calibrated on 3 folds of the 6 training sentences, as the model recorded
    assert d["calibration"]["source"] == "folds" and d["calibration"]["folds"] == 3
    assert d["calibration_s"] > 0 and "calibrated on 3 folds" in d["summary_line"]
    raw = rec["gpsl --no-calibrate"]
    assert raw["calibration"]["source"] == "none" and raw["calibration_s"] == 0.0
    n = d["tokens"]
    for m in B.METHODS:  # every method scored on the same test tokens
        assert rec[m]["tokens"] == n and 0.0 <= rec[m]["ece"] <= 1.0
        assert 0.0 <= rec[m]["loss"] <= 100.0
    assert rep["acceptance"]["met"] is None  # neither chunking nor basenp in this run
    md = (out / "tiny.md").read_text()
    assert "python -m bench.cli_calibration --datasets seg" in md
    assert "| seg (6/4) |" in md and "## Acceptance (issue 31)" in md
    assert "Met: not measured" in md
    assert "| seg (6/4) |" in capsys.readouterr().out  # the table is printed too


# --------------------------------------------------------------------------- train --crowd

HAVE_CROWD = all((C.CROWD_DIR / f).is_file() for f in C.FILES)


def test_crowd_bench_without_its_data_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(C, "CROWD_DIR", tmp_path / "absent")
    assert C.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bench.crowd_calibration: shared data absent") and err.count("\n") == 1


@pytest.mark.skipif(not HAVE_CROWD, reason="../shared/data/crowd-ner is not beside the checkout")
def test_crowd_bench_end_to_end_on_a_small_partition(tmp_path):
    out = tmp_path / "out"
    assert C.main(["--partitions", "1", "--train", "12", "--held-out", "6", "--test", "6",
                   "--inference", "sparse", "--out", str(out), "--name", "tiny"]) == 0
    rep = json.loads((out / "tiny.json").read_text())
    (r,) = rep["results"]
    assert r["folds of inferred labels"]["calibration"]["source"] == "folds"
    assert r["held-out gold"]["calibration"]["source"] == "held-out"
    n = r["none"]["tokens"]
    for v in C.VARIANTS:  # the same tagger scored on the same gold tokens
        assert r[v]["tokens"] == n and 0.0 <= r[v]["ece"] <= 1.0
    md = (out / "tiny.md").read_text()
    assert "| folds of inferred labels |" in md and "python -m bench.crowd_calibration" in md
