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
    rows = rep["datasets"]["basenp"]["rows"]
    assert [r["complete"] for r in rows] == [False, True]  # token round, sentence round
    for r in rows:
        assert set(r["fits"]) == set(W.VARIANTS)
    # with missing labels the library's warm start is the cold fit with the same theta
    token_round = rows[0]["fits"]
    assert token_round["library"]["bound"] == token_round["cold"]["bound"]
    assert token_round["library"]["accuracy"] == token_round["cold"]["accuracy"]
    summary = rep["datasets"]["basenp"]["summary"]
    assert set(summary) == {"complete", "missing"}
    assert summary["missing"]["cold"]["time_to_cold"] == pytest.approx(1.0)
    md = (out / "warm_start.md").read_text(encoding="utf-8")
    assert "missing training labels (token strategies)" in md
    assert W.main(["--strategies", "nonsense", "--out", str(out), "-q"]) == 2
