"""bench.active_learning_pool: annotator actions, strategy names, a tiny end-to-end run and
the merge of runs made in parallel processes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import active_learning_pool as P
from bench.active_learning import DEFAULT_DATA

HAVE_DATA = (DEFAULT_DATA / "chunking" / "train.data").is_file()


def test_segments_of_bio_labels():
    labs = ["B-NP", "I-NP", "O", "O", "B-VP", "B-NP", "I-NP", "I-VP", "O"]
    assert P.segments(labs).tolist() == [0, 0, 1, 1, 2, 3, 3, 4, 5]
    assert P.segments(["B", "I", "I", "O", "B", "B", "I"]).tolist() == [0, 0, 0, 1, 2, 3, 3]
    assert P.segments(["I-NP", "O", "I-NP", "I-NP"]).tolist() == [0, 1, 2, 2]


def test_actions_count_a_span_once():
    labs = ["B-NP", "I-NP", "I-NP", "O", "O", "B-VP"]
    every = np.ones(6, dtype=bool)
    assert P.actions(labs, every) == 3  # NP chunk, the O run, the VP chunk
    assert P.actions(labs, np.array([1, 0, 1, 0, 0, 0], bool)) == 2  # not adjacent
    assert P.actions(labs, np.array([0, 1, 1, 1, 0, 0], bool)) == 2  # crosses a span edge
    assert P.actions(labs, np.zeros(6, bool)) == 0


def test_strategy_names():
    assert P.parse_spec("bald+diverse+propagate") == ("bald", {"diverse", "propagate"})
    assert P.parse_spec("entropy") == ("entropy", set())
    for bad in ("nope", "entropy+fast", "sentence_entropy+diverse", "random_sentence+propagate"):
        with pytest.raises(ValueError):
            P.parse_spec(bad)
    assert P.main(["--strategies", "nope"]) == 2


@pytest.mark.skipif(not HAVE_DATA, reason=f"{DEFAULT_DATA} absent")
def test_tiny_run_and_merge(tmp_path):
    common = ["--datasets", "chunking", "--seeds", "1", "--pool", "40", "--test", "15",
              "--round-fraction", "0.05", "--max-fraction", "0.45", "--max-iter", "2",
              "--out", str(tmp_path)]
    assert P.main([*common, "--strategies", "bald+diverse+propagate", "lookahead",
                   "--no-peer", "--stem", "a"]) == 0
    assert P.main([*common, "--strategies", "sentence_entropy", "--stem", "b"]) == 0
    a = json.loads((tmp_path / "a.json").read_text())
    res = a["datasets"]["chunking"]
    n_tok = res["seeds"][0]["pool_tokens"]
    batch = res["seeds"][0]["token_batch"]
    for spec in ("bald+diverse+propagate", "lookahead"):
        run = res["strategies"][spec]["runs"][0]
        toks = run["labeled_tokens"]
        # every round reveals one batch of new tokens until 45% of the pool (or 99%)
        assert all(b - a_ == batch for a_, b in zip(toks[:-1], toks[1:]))
        assert toks[-2] < 0.45 * n_tok
        acts = run["actions"]
        assert all(0 < b - a_ <= batch for a_, b in zip(acts[:-1], acts[1:]))
    assert P.main(["--merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"),
                   "--out", str(tmp_path), "--stem", "m"]) == 0
    m = json.loads((tmp_path / "m.json").read_text())
    assert set(m["datasets"]["chunking"]["strategies"]) == {
        "bald+diverse+propagate", "lookahead", "sentence_entropy", P.PEER}
    md = (tmp_path / "m.md").read_text()
    assert "| bald+diverse+propagate |" in md and P.PEER in md
    assert (tmp_path / "m_chunking.html").is_file()
    # runs on other pools do not merge
    other = json.loads((tmp_path / "b.json").read_text())
    other["datasets"]["chunking"]["seeds"][0]["full_accuracy"] += 0.01
    (tmp_path / "c.json").write_text(json.dumps(other))
    assert P.main(["--merge", str(tmp_path / "a.json"), str(tmp_path / "c.json"),
                   "--out", str(tmp_path), "--stem", "x"]) == 2
