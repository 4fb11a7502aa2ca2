"""bench/warm_start.py on a tiny slice of basenp (skipped without ../shared/data/crfpp)."""

from __future__ import annotations

import json

import pytest

from bench import active_learning as AL
from bench import warm_start as W

pytestmark = pytest.mark.skipif(
    not (AL.DEFAULT_DATA / "basenp" / "train.data").is_file(), reason="shared data absent"
)


def test_warm_start_bench_compares_every_start_with_the_cold_fit(tmp_path):
    out = tmp_path / "res"
    rc = W.main(["--quick", "--dataset", "basenp", "--pool", "8", "--rounds", "1",
                 "--strategies", "entropy,random_sentence", "--out", str(out), "-q"])
    assert rc == 0
    rep = json.loads((out / "warm_start.json").read_text(encoding="utf-8"))
    assert rep["config"]["inference"] == "sparse"
    rows = rep["datasets"]["basenp"]["rows"]
    assert [r["complete"] for r in rows] == [False, True]  # token round, sentence round
    assert all(r["warm_possible"] for r in rows)  # B, I and O are in the seed sentences
    for r in rows:
        assert set(r["fits"]) == set(W.VARIANTS["sparse"])
    # the scalable warm start starts elsewhere than the cold fit (its bound differs)
    token_round = rows[0]["fits"]
    assert token_round["library"]["bound"] != token_round["cold"]["bound"]
    summary = rep["datasets"]["basenp"]["summary"]
    assert set(summary) == {"complete", "missing"}
    assert summary["missing"]["cold"]["time_to_cold"] == pytest.approx(1.0)
    md = (out / "warm_start.md").read_text(encoding="utf-8")
    assert "missing training labels (token strategies)" in md and "library+r" in md
    assert W.main(["--strategies", "nonsense", "--out", str(out), "-q"]) == 2


def test_the_full_gp_variant_keeps_theta_only_with_missing_labels(tmp_path):
    out = tmp_path / "full"
    rc = W.main(["--quick", "--dataset", "basenp", "--pool", "6", "--rounds", "1",
                 "--strategies", "entropy", "--inference", "full", "--out", str(out), "-q"])
    assert rc == 0
    rep = json.loads((out / "warm_start_full.json").read_text(encoding="utf-8"))
    (row,) = rep["datasets"]["basenp"]["rows"]
    assert set(row["fits"]) == set(W.VARIANTS["full"])
    # with missing labels the full GP's warm start is the cold fit with the same theta
    assert row["fits"]["library"]["bound"] == row["fits"]["cold"]["bound"]
    assert row["fits"]["library"]["accuracy"] == row["fits"]["cold"]["accuracy"]


def test_rounds_with_a_new_label_are_left_out_of_the_summary():
    fit = {"seconds": 1.0, "sweeps": 10, "bound": -5.0, "accuracy": 0.5}
    faster = {"seconds": 0.5, "sweeps": 5, "bound": -5.0, "accuracy": 0.5}
    variants = W.VARIANTS["full"]
    rows = [{"complete": True, "warm_possible": True,
             "fits": {v: (fit if v in ("cold", "alpha") else faster) for v in variants}},
            {"complete": True, "warm_possible": False, "fits": {v: fit for v in variants}}]
    s = W.summarise(rows, "full")["complete"]
    assert s["rounds"] == 1 and s["rounds_new_labels"] == 1
    assert s["library"]["time_to_cold"] == 0.5 and s["alpha"]["time_to_cold"] == 1.0
