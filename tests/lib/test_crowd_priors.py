"""The held-out-vote rule for the sequential model's priors (gpsl.crowd.priors): the fold,
the score against brute force, and a choice that never reads the gold."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np

from gpsl import cli
from gpsl.crowd import CrowdGPSL, Votes
from gpsl.crowd.joint import fit_soft
from gpsl.crowd.priors import (
    GRID,
    REFIT_FACTORS,
    _allowed,
    _vote_subset,
    choose_priors,
    choose_refit_variance,
    edge_steps,
    heldout_score,
    sentence_folds,
    split_votes,
)
from gpsl.crowd.sequential import previous_labels
from gpsl.model import GPSL
from gpsl.synthetic import UNIGRAM_TEMPLATE
from tests.lib.test_crowd_seq import BIO, random_votes, sticky_crowd


def test_the_fold_leaves_out_whole_sentence_annotator_pairs():
    votes, _ = random_votes(n_sent=200)
    kept, held = split_votes(votes)
    assert kept.token.size + held.token.size == votes.token.size
    sent = np.repeat(np.arange(votes.lengths.size), votes.lengths)
    pairs = lambda v: set(zip(sent[v.token].tolist(), v.annotator.tolist()))  # noqa: E731
    assert not pairs(kept) & pairs(held)
    assert 0.12 < held.token.size / votes.token.size < 0.28
    # a left-out vote's previous label is the same as in all the votes
    full = dict(zip(zip(votes.token.tolist(), votes.annotator.tolist()),
                    previous_labels(votes).tolist()))
    assert all(full[(t, a)] == p for t, a, p in zip(held.token.tolist(),
                                                     held.annotator.tolist(),
                                                     previous_labels(held).tolist()))


def test_the_score_is_the_log_predictive_probability_by_brute_force():
    votes, r = random_votes(n_sent=6, J=3, A=4)
    rng = np.random.default_rng(1)
    pi = rng.dirichlet(np.ones(3), size=(4, 3, 4))  # [a, y, p, l], p = J for none
    _, held = split_votes(votes, fold=2)
    prev = previous_labels(held)
    want = 0.0
    for t in set(held.token.tolist()):
        vs = np.flatnonzero(held.token == t)
        want += np.log(sum(r[t, y] * np.prod([pi[held.annotator[v], y, prev[v],
                                                  held.label[v]] for v in vs])
                           for y in range(3)))
    got = heldout_score(r, SimpleNamespace(pi=pi), held)
    assert np.isclose(got, want, rtol=1e-12)
    conf = SimpleNamespace(pi=pi[:, :, 0, :])  # the confusion model: no previous label
    want_c = sum(np.log(sum(r[t, y] * np.prod([pi[held.annotator[v], y, 0, held.label[v]]
                                                 for v in np.flatnonzero(held.token == t)])
                            for y in range(3))) for t in set(held.token.tolist()))
    assert np.isclose(heldout_score(r, conf, held), want_c, rtol=1e-12)


def test_the_rule_prefers_the_model_that_made_the_votes():
    """Votes from annotators with very different confusion rows: a weak pull to the one-coin
    matrix (small shrink) predicts held-out votes better than a strong one."""
    X, _, sents = sticky_crowd(n_sent=60)
    votes = Votes.from_sentences([s.__class__(s.tokens, None, 1, None,
                                              annotations=s.annotations) for s in sents],
                                 classes=BIO)
    grid = ((3.0, 1.0), (3.0, 1e5))

    def make(kappa, shrink):
        return CrowdGPSL(GPSL(template=UNIGRAM_TEMPLATE, max_iter=10), refit=False,
                         kappa=kappa, shrink=shrink)

    choice = choose_priors(X, votes, make, grid=grid, edge_rounds=0)
    assert [s[:2] for s in choice.scores] == list(grid)
    assert (choice.kappa, choice.shrink) == (3.0, 1.0)
    assert choice.scores[0][2] > choice.scores[1][2]


def _write_crowd(path, sents, with_gold: bool):
    """``sents`` as a crowd JSONL file (every annotator's labels; the gold only if asked)."""
    with open(path, "w", encoding="utf-8") as fh:
        for k, s in enumerate(sents):
            obj = {"id": k, "tokens": [t[0] for t in s.tokens],
                   "annotations": [{"annotator": a, "labels": v}
                                   for a, v in s.annotations.items()]}
            if with_gold:
                obj["labels"] = s.labels
            fh.write(json.dumps(obj) + "\n")
    return path


def test_the_rule_runs_without_gold_and_chooses_the_same_with_it(tmp_path, capsys):
    _, _, sents = sticky_crowd(n_sent=30)
    reports = []
    for with_gold in (True, False):
        path = _write_crowd(tmp_path / f"crowd{with_gold}.jsonl", sents, with_gold)
        rep = tmp_path / f"r{with_gold}.json"
        assert cli.main(["aggregate", "--model", "joint", "--prior-rule", "heldout",
                         "--max-iter", "8", "-q", "--labels", ",".join(BIO), str(path),
                         "-o", str(tmp_path / f"o{with_gold}.txt"), "--report",
                         str(rep)]) == 0
        reports.append(json.loads(rep.read_text()))
    with_gold, without = reports
    assert with_gold["gold_span_f1"] is not None and without["gold_span_f1"] is None
    assert with_gold["priors"] == without["priors"]
    scored = [(c["kappa"], c["shrink"]) for c in without["priors"]["scores"]]
    assert scored[:len(GRID)] == [tuple(g) for g in GRID]  # the grid, then past its edge
    assert (without["priors"]["kappa"], without["priors"]["shrink"]) in scored


# --------------------------------------------------------------------------- the refit's prior


def _crowd_votes(sents):
    return Votes.from_sentences([s.__class__(s.tokens, None, 1, None,
                                             annotations=s.annotations) for s in sents],
                                classes=BIO)


def test_a_folds_votes_keep_their_tokens_and_previous_labels():
    votes, _ = random_votes(n_sent=30)
    block = sentence_folds(30, 3)[1]
    sub, tok = _vote_subset(votes, block)
    assert sub.n == tok.size == int(np.asarray(votes.lengths)[block].sum())
    sent = np.repeat(np.arange(30), votes.lengths)
    mine = np.isin(sent[votes.token], block)
    assert sub.token.size == int(mine.sum())
    np.testing.assert_array_equal(tok[sub.token], votes.token[mine])
    np.testing.assert_array_equal(sub.label, votes.label[mine])
    np.testing.assert_array_equal(previous_labels(sub), previous_labels(votes)[mine])
    assert [b.tolist() for b in sentence_folds(7, 3)] == [[0, 1, 2], [3, 4], [5, 6]]


def test_the_refit_rule_prefers_a_tagger_that_predicts_the_votes():
    """A prior variance so small that the tagger learns nothing predicts the held-out folds'
    votes worse than GPSL's own."""
    X, _, sents = sticky_crowd(n_sent=45)
    votes = _crowd_votes(sents)
    joint = CrowdGPSL(GPSL(template=UNIGRAM_TEMPLATE, max_iter=10), refit=False).fit(X, votes)
    keep = votes.voted()

    def make(v, *data):
        return fit_soft(GPSL(template=UNIGRAM_TEMPLATE, max_iter=10, variance=v), *data)

    choice = choose_refit_variance(X, joint.probas_, keep, votes, joint.crowd_, make,
                                   [1e-6, 4.0], edge_rounds=0)
    assert choice.folds == 3 and [v for v, _ in choice.scores] == [1e-6, 4.0]
    assert choice.variance == 4.0
    assert choice.scores[1][1] > choice.scores[0][1]
    # too few sentences for the folds: the first candidate, unscored
    small = choose_refit_variance(X[:1], joint.probas_[:len(X[0])], keep[:len(X[0])],
                                  _crowd_votes(sents[:1]), joint.crowd_, make, [1e-6, 4.0])
    assert (small.variance, small.scores, small.folds) == (1e-6, [], 0)


def test_the_refit_rule_is_the_default_and_its_tagger_is_the_refit_at_the_choice():
    X, _, sents = sticky_crowd(n_sent=30)
    votes = _crowd_votes(sents)
    joint = CrowdGPSL(GPSL(template=UNIGRAM_TEMPLATE, max_iter=8)).fit(X, votes)
    c = joint.refit_choice_
    assert c is not None and len(c.scores) >= len(REFIT_FACTORS)
    assert [v for v, _ in c.scores][:3] == [4.0 * f for f in REFIT_FACTORS]
    assert c.variance == max(c.scores, key=lambda s: s[1])[0]
    assert joint.model_.variance == c.variance
    keep = votes.voted()
    again = fit_soft(GPSL(template=UNIGRAM_TEMPLATE, max_iter=8, variance=c.variance), X,
                     joint.probas_, keep, joint.classes_, votes.split)
    np.testing.assert_allclose(again.predict_marginals(X[:3])[0],
                               joint.predict_marginals(X[:3])[0], rtol=1e-9, atol=1e-12)
    fixed = CrowdGPSL(GPSL(template=UNIGRAM_TEMPLATE, max_iter=8),
                      refit_prior="model").fit(X, votes)
    assert fixed.refit_choice_ is None and fixed.model_.variance is None


def test_the_refit_rule_runs_without_gold_and_chooses_the_same_with_it(tmp_path, capsys):
    _, _, sents = sticky_crowd(n_sent=30)
    reports = []
    for with_gold in (True, False):
        path = _write_crowd(tmp_path / f"crowd{with_gold}.jsonl", sents, with_gold)
        rep = tmp_path / f"r{with_gold}.json"
        assert cli.main(["train", "--crowd", "--max-iter", "8", "--no-calibrate",
                         "--labels", ",".join(BIO), str(path), str(tmp_path / f"m{with_gold}"),
                         "--report", str(rep)]) == 0
        reports.append(json.loads(rep.read_text()))
        assert "the tagger's prior variance by the votes of 3 held-out folds" in \
            capsys.readouterr().err
    with_gold, without = reports
    assert with_gold["gold_span_f1"] is not None and without["gold_span_f1"] is None
    assert with_gold["refit_prior"] == without["refit_prior"]
    scored = [c["variance"] for c in without["refit_prior"]["scores"]]
    assert scored[:len(REFIT_FACTORS)] == [4.0 * f for f in REFIT_FACTORS]
    assert GPSL.load(tmp_path / "mFalse").variance == without["refit_prior"]["variance"]
    assert cli.main(["aggregate", "--model", "joint", "--refit-prior", "model",
                     str(tmp_path / "crowdFalse.jsonl")]) == 2
    assert "--refit-prior needs train --crowd" in capsys.readouterr().err


def test_edge_steps_go_past_the_edges_the_best_sits_on():
    grid = [(3.0, 10.0), (30.0, 10.0), (3.0, 100.0), (30.0, 100.0)]
    allowed = (_allowed("kappa"), _allowed("shrink"))
    assert edge_steps((3.0, 10.0), grid, (10.0, 10.0), allowed) == [(0.3, 10.0), (3.0, 1.0)]
    assert edge_steps((30.0, 100.0), grid, (10.0, 10.0), allowed) == [(300.0, 100.0),
                                                                      (30.0, 1000.0)]
    inside = grid + [(0.3, 10.0), (300.0, 10.0), (3.0, 1.0), (3.0, 1000.0)]
    assert edge_steps((3.0, 10.0), inside, (10.0, 10.0), allowed) == []
    # a step the parameter's range refuses (kappa >= 1e-3), and an axis without spacing
    assert edge_steps((1e-3, 10.0), [(1e-3, 10.0), (1e-2, 10.0)], (10.0, None),
                      allowed) == []
    assert edge_steps((2.0,), [(2.0,), (0.5,)], (4.0,), (_allowed("variance"),)) == [(8.0,)]


def _peaked(gold, J, w):
    """Marginals that put weight ``w`` on the gold and the rest uniformly."""
    r = np.full((len(gold), J), (1.0 - w) / J)
    r[np.arange(len(gold)), gold] += w
    return r


def test_the_prior_rule_walks_past_the_grids_edge_until_the_best_is_inside():
    """A held-out score that peaks at shrink = 0.1, below the grid: the rule steps 10 -> 1 ->
    0.1 -> 0.01, finds 0.01 worse and keeps 0.1; kappa has one value, so no step along it."""
    X, y, sents = sticky_crowd(n_sent=40)
    votes = _crowd_votes(sents)
    gold = np.array([BIO.index(v) for lab in y for v in lab])
    J = len(BIO)
    crowd = SimpleNamespace(pi=np.tile(0.3 / (J - 1) + (0.7 - 0.3 / (J - 1)) * np.eye(J),
                                       (votes.A, 1, 1)))

    def make(kappa, shrink):
        w = float(np.exp(-(np.log10(shrink) + 1.0) ** 2))
        return SimpleNamespace(fit=lambda X, v: SimpleNamespace(
            probas_=_peaked(gold, J, w), crowd_=crowd))

    choice = choose_priors(X, votes, make, grid=((3.0, 10.0), (3.0, 100.0)))
    assert [s[:2] for s in choice.scores] == [(3.0, 10.0), (3.0, 100.0), (3.0, 1.0),
                                              (3.0, 0.1), (3.0, 0.01)]
    assert (choice.kappa, choice.shrink) == (3.0, 0.1)
    got = [s[2] for s in choice.scores]
    assert got[3] == max(got) and got[2] > got[0] > got[1] and got[4] < got[3]
    # with no rounds, the grid's own best
    fixed = choose_priors(X, votes, make, grid=((3.0, 10.0), (3.0, 100.0)), edge_rounds=0)
    assert (fixed.kappa, fixed.shrink, len(fixed.scores)) == (3.0, 10.0, 2)


def test_the_refit_rule_walks_past_its_largest_candidate():
    """A tagger whose held-out marginals are best at variance 16: from the candidates 1 and 4
    the rule steps to 16, then 64 (worse), and keeps 16."""
    X, y, sents = sticky_crowd(n_sent=45)
    votes = _crowd_votes(sents)
    gold = {id(x): np.array([BIO.index(v) for v in lab]) for x, lab in zip(X, y)}
    J = len(BIO)
    crowd = SimpleNamespace(pi=np.tile(0.3 / (J - 1) + (0.7 - 0.3 / (J - 1)) * np.eye(J),
                                       (votes.A, 1, 1)))

    def fit_tagger(v, *data):
        w = float(np.exp(-(np.log(v / 16.0) / np.log(4.0)) ** 2))
        return SimpleNamespace(predict_marginals=lambda Xb: [_peaked(gold[id(x)], J, w)
                                                             for x in Xb])

    keep = votes.voted()
    q = np.full((votes.n, J), 1.0 / J)
    choice = choose_refit_variance(X, q, keep, votes, crowd, fit_tagger, [1.0, 4.0])
    assert [v for v, _ in choice.scores] == [1.0, 4.0, 16.0, 64.0]
    assert choice.variance == 16.0 and choice.folds == 3
