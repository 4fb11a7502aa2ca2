"""bench.crowd_real on a hand-made crowd folder: the rows, the isolated runs, the acceptance
lines and the written Markdown + JSON (the real data's run is the bench itself)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench import crowd_real as cr

BOEHNING = "gpsl joint: sequential + ner, Boehning's bound"


def fake_crowd(root: Path, n_docs=6, seed=0) -> Path:
    """crowd-ner/raw/val with ``n_docs`` documents, three workers (one good, one that misses
    entities, one noisy) and the gold."""
    rng = np.random.default_rng(seed)
    names = ["Anna", "Paul", "Rome", "Oslo", "IBM", "the", "saw", "in", "and", "went"]
    kinds = ["B-PER", "B-PER", "B-LOC", "B-LOC", "B-ORG", "O", "O", "O", "O", "O"]
    split = root / "raw" / "val"
    for d in range(n_docs):
        sents = []
        for _ in range(3):
            idx = rng.integers(0, len(names), size=int(rng.integers(4, 8)))
            sents.append([(names[i], kinds[i]) for i in idx])
        docs = {"gold": sents}
        docs["good"] = sents
        docs["lazy"] = [[(t, "O" if rng.random() < 0.6 else lab) for t, lab in s]
                        for s in sents]
        docs["noisy"] = [[(t, str(rng.choice(kinds)) if rng.random() < 0.3 else lab)
                          for t, lab in s] for s in sents]
        for who, ss in docs.items():
            folder = split / ("ground_truth" if who == "gold" else f"mturk_train_data/{who}")
            folder.mkdir(parents=True, exist_ok=True)
            text = "\n\n".join("\n".join(f"{t} {lab}" for t, lab in s) for s in ss)
            (folder / f"doc{d}.txt").write_text(text + "\n", encoding="utf-8")
    return root


def test_bench_rows_acceptance_and_outputs(tmp_path):
    data_dir = fake_crowd(tmp_path / "crowd-ner")
    cfg = cr.Config(data_dir=str(data_dir), out_dir=str(tmp_path / "out"), max_iter=8,
                    verbose=False, taggers=False,
                    methods=["crowd-kit majority vote", "crowd-kit Dawid-Skene",
                             "gpsl Dawid-Skene", cr.JOINT, BOEHNING])
    report = cr.run(cfg, command="python -m bench.crowd_real --test")
    rows = {r["method"]: r for r in report["aggregation"]}
    assert set(rows) == set(cfg.methods)
    for r in rows.values():
        assert "error" not in r, r
        assert 0.0 <= r["f1"] <= 100.0 and r["cpu_s"] >= 0.0 and r["peak_mb"] >= 0.0
    assert rows[cr.JOINT]["sweeps"] <= 8 and "f1_argmax" in rows[cr.JOINT]
    assert rows[cr.JOINT]["min_bound_step"] >= -1e-6 * abs(rows[cr.JOINT]["bound"])
    assert rows[cr.JOINT]["lse_bound"] == "jensen" and rows[BOEHNING]["lse_bound"] == "bohning"
    assert report["alignment"]["workers"] == 3
    acc = report["acceptance"]
    assert acc["best_crowdkit"]["method"] in ("crowd-kit majority vote", "crowd-kit Dawid-Skene")
    assert acc["margin"] == rows[cr.JOINT]["f1"] - acc["best_crowdkit"]["f1"]
    cr.write_outputs(report, Path(cfg.out_dir), cr.stem_of(cfg))
    md = (tmp_path / "out" / "crowd_real_partial.md").read_text(encoding="utf-8")
    assert "python -m bench.crowd_real --test" in md and "published: BSC-seq" in md
    assert "## Acceptance (issue 27)" in md
    # the levers' shares: the default row against the rows without the lever
    gain = rows[cr.JOINT]["f1"] - rows[BOEHNING]["f1"]
    assert f"| Jensen's bound in the joint fit | {BOEHNING} | {rows[BOEHNING]['f1']:.2f} | " \
        f"{gain:+.2f} | {rows[cr.JOINT]['bound'] - rows[BOEHNING]['bound']:+.0f} |" in md
    assert "| the tagger (joint fit) and the sequential model together | gpsl Dawid-Skene |" in md
    assert "the sequential annotator model" not in md  # its row was not run
    saved = json.loads((tmp_path / "out" / "crowd_real_partial.json").read_text())
    assert saved["aggregation"][0]["method"] == "crowd-kit majority vote"


def test_split_documents_holds_out_every_fifth_document():
    docs = [f"d{k // 3}" for k in range(30)]  # 10 documents of 3 sentences
    train, test = cr.split_documents(docs)
    assert sorted(train + test) == list(range(30))
    held = {docs[i] for i in test}
    assert held == {"d0", "d5"} and not held & {docs[i] for i in train}


def test_isolated_reports_errors_in_one_line():
    out = cr.isolated(cr.gpsl_ds_labels, None)
    assert "error" in out and "\n" not in out["error"]


def test_missing_data_is_one_line(tmp_path, capsys):
    assert cr.main(["--data-dir", str(tmp_path / "absent"), "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "shared data absent" in err
    for bad in ("3", "3:x", "0:10", "1:2:3", "3:10:crowd", "3:10:pooled:x"):
        assert cr.main(["--data-dir", str(tmp_path / "absent"), "--priors", bad]) == 2
        assert capsys.readouterr().err == ("bench.crowd_real: --priors takes "
                                           "KAPPA:SHRINK[:pooled] with positive numbers\n")


def test_prior_rows_fit_the_joint_model_at_each_pair(tmp_path):
    data_dir = fake_crowd(tmp_path / "crowd-ner")
    cfg = cr.Config(data_dir=str(data_dir), out_dir=str(tmp_path / "out"), max_iter=8,
                    verbose=False, taggers=False, methods=[cr.JOINT],
                    priors=[(30.0, 10.0), (3.0, 30.0)])
    report = cr.run(cfg)
    rows = report["aggregation"]
    assert [r["method"] for r in rows] == [
        cr.JOINT, "gpsl joint: sequential + ner, kappa = 30, shrink = 10",
        "gpsl joint: sequential + ner, kappa = 3, shrink = 30"]
    assert all("error" not in r for r in rows)
    # the defaults (kappa 30, shrink 10) again: the same fit
    assert rows[1]["bound"] == rows[0]["bound"] and rows[1]["f1"] == rows[0]["f1"]
    assert rows[2]["kappa"] == 3.0 and rows[2]["bound"] != rows[0]["bound"]
    assert cr.stem_of(cfg) == "crowd_real_priors"


def test_pooled_rows_and_their_heldout_scores(tmp_path):
    """``--priors 30:10:pooled --heldout``: the pooled target's row, and each row's
    held-out-vote score, the rule's own (gpsl.crowd.priors) for that setting."""
    from gpsl.crowd import CrowdGPSL
    from gpsl.crowd.priors import heldout_score, split_votes
    from gpsl.model import GPSL

    data_dir = fake_crowd(tmp_path / "crowd-ner")
    cfg = cr.Config(data_dir=str(data_dir), out_dir=str(tmp_path / "out"), max_iter=8,
                    verbose=False, taggers=False, methods=["gpsl Dawid-Skene"],
                    priors=[(30.0, 10.0, "pooled")], heldout=True)
    report = cr.run(cfg)
    row = report["aggregation"][1]
    assert row["method"] == ("gpsl joint: sequential + ner, kappa = 30, shrink = 10, "
                             "pooled target")
    assert row["centre_target"] == "pooled" and "error" not in row
    data = cr.load(data_dir, "raw")
    votes = cr.votes_of(data.sents)
    kept, held = split_votes(votes)
    joint = CrowdGPSL(GPSL(template="ner", max_iter=8), refit=False,
                      centre_target="pooled").fit([s.tokens for s in data.sents], kept)
    assert row["heldout_log_lik"] == heldout_score(joint.probas_, joint.crowd_, held)
    assert cr.stem_of(cfg) == "crowd_real_priors_heldout"
    cr.write_outputs(report, tmp_path / "out", cr.stem_of(cfg))
    assert "held-out log-lik" in (tmp_path / "out" / "crowd_real_priors_heldout.md").read_text()


def test_the_prior_rule_row_and_the_learning_curve(tmp_path, monkeypatch):
    from bench import crowd_lexicon

    data_dir = fake_crowd(tmp_path / "crowd-ner")
    cfg = cr.Config(data_dir=str(data_dir), out_dir=str(tmp_path / "out"), max_iter=6,
                    verbose=False, taggers=False, methods=[cr.RULE])
    report = cr.run(cfg, command="python -m bench.crowd_real --test")
    row, = report["aggregation"]
    assert "error" not in row, row
    assert (row["kappa"], row["shrink"]) in {(k, s) for k, s, _ in row["rule_scores"]}
    assert max(v for *_, v in row["rule_scores"]) == next(
        v for k, s, v in row["rule_scores"] if (k, s) == (row["kappa"], row["shrink"]))
    monkeypatch.setattr(crowd_lexicon, "SIZES", (4, None))
    monkeypatch.setattr(crowd_lexicon, "VARIANTS", (("none", "ner:en:none"),
                                                    ("cluster", "ner")))
    curve = cr.Config(data_dir=str(data_dir), out_dir=str(tmp_path / "out"), verbose=False,
                      curve_only=True)
    rep = cr.run(curve, command="python -m bench.crowd_real --curve")
    assert len(rep["curve"]) == 2 * 2 * 2 and all("f1" in r for r in rep["curve"])
    assert sorted({r["n"] for r in rep["curve"]})[0] == 4
    assert rep["install"]["total_bytes"] == sum(rep["install"]["files"].values()) > 10**6
    cr.write_outputs(rep, tmp_path / "out", cr.stem_of(curve))
    md = (tmp_path / "out" / "crowd_real_curve.md").read_text()
    assert "## 4. Lexical features" in md and "to the install" in md
