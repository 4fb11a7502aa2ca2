"""bench.missing_weight: the two layouts of a label budget and a tiny end-to-end run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import missing_weight as MW
from bench.active_learning import DEFAULT_DATA

HAVE_DATA = (DEFAULT_DATA / "basenp" / "train.data").is_file()


def test_layouts_give_the_budget():
    lengths = np.array([5, 3, 8, 4, 6])
    masks = MW.token_layout(lengths, 7, np.random.default_rng(0))
    assert [m.size for m in masks] == lengths.tolist()
    assert sum(int(m.sum()) for m in masks) == 7
    sents = MW.sentence_layout(lengths, 10, np.random.default_rng(0))
    assert len(set(sents)) == len(sents)
    got = lengths[sents].sum()
    assert got >= 10 and got - lengths[sents[-1]] < 10  # stops at the first sentence past it


def test_bad_fraction_is_one_line_exit_2(capsys):
    assert MW.main(["--fractions", "1.5"]) == 2
    err = capsys.readouterr().err
    assert "--fractions" in err and err.count("\n") == 1


@pytest.mark.skipif(not HAVE_DATA, reason=f"{DEFAULT_DATA} absent")
def test_tiny_run(tmp_path):
    assert MW.main(["--datasets", "basenp", "--seeds", "1", "--pool", "30", "--test", "10",
                    "--fractions", "0.2", "--max-iter", "3", "--out", str(tmp_path)]) == 0
    rep = json.loads((tmp_path / "missing_weight.json").read_text())
    per = rep["results"]["basenp"]["fractions"]["0.2"]
    assert set(per) == set(MW.VARIANTS)
    plain, auto = per[MW.VARIANTS[0]]["runs"][0], per[MW.VARIANTS[1]]["runs"][0]
    assert plain["tokens"] == auto["tokens"] and plain["missing_weight"] == 1.0
    assert 0 < auto["missing_weight"] < 1  # a fifth of the tokens labeled: lambda < 1
    assert per[MW.VARIANTS[2]]["runs"][0]["tokens"] >= auto["tokens"]
    assert all(0 <= per[v]["runs"][0]["accuracy"] <= 1 for v in MW.VARIANTS)
    md = (tmp_path / "missing_weight.md").read_text()
    assert "python -m bench.missing_weight" in md and "| 20% (" in md
