"""Bayesian and batch-diverse queries (gpsl.active): BALD, the look-ahead gain, the
determinantal batch, GPSL.latent_embedding, and the bound the scalable fit uses with
missing labels."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpsl import active as A
from gpsl.calibration import Scores
from gpsl.model import GPSL
from gpsl.predict import rns_marginals
from gpsl.synthetic import make_chain_task

RNS = {"tol": 1e-10, "max_iter": 500, "schedule": "jacobi", "damping": 0.5}


def _scores(seed=0, lengths=(4, 6, 3), J=3, var=0.5, pair=1.0):
    rng = np.random.default_rng(seed)
    n = int(sum(lengths))
    offsets = (-1, 1)
    mean = rng.normal(0, 1.5, (n, J))
    m_S = rng.normal(0, pair, (len(offsets), J, J))
    v_S = np.full_like(m_S, 0.1)
    return Scores(mean, np.full((n, J), var), m_S, v_S, np.asarray(lengths, dtype=np.int64),
                  offsets, dict(RNS))


# --------------------------------------------------------------------------- BALD


def test_mutual_information_exact_cases():
    p = np.array([[0.2, 0.5, 0.3], [1.0, 0.0, 0.0]])
    same = np.stack([p, p, p])
    assert np.allclose(A.mutual_information(same), 0.0)
    # two confident samples that disagree: the label is all epistemic, I = log 2
    s = np.array([[[1.0, 0.0]], [[0.0, 1.0]]])
    assert A.mutual_information(s)[0] == pytest.approx(math.log(2))
    rng = np.random.default_rng(1)
    r = rng.dirichlet(np.ones(4), size=(7, 20))
    mi = A.mutual_information(r)
    assert (mi >= 0).all() and (mi <= math.log(4) + 1e-12).all()
    with pytest.raises(ValueError):
        A.mutual_information(p)


def test_sample_marginals_without_variance_is_algorithm_2():
    sc = _scores(var=0.0)
    sc.v_S = np.zeros_like(sc.v_S)
    clamp = np.full(sc.n_tokens, -1)
    clamp[[0, 5]] = [2, 1]
    S = A.sample_marginals(sc, 4, seed=3, clamp=clamp)
    P = sc.marginals("mean", clamp=clamp)
    assert S.shape == (4, sc.n_tokens, 3)
    assert np.allclose(S, P[None], atol=1e-9)
    assert np.allclose(A.mutual_information(S), 0.0, atol=1e-9)


def test_sample_marginals_is_seeded_antithetic_and_clamped():
    sc = _scores(var=2.0)
    clamp = np.full(sc.n_tokens, -1)
    clamp[2] = 0
    a = A.sample_marginals(sc, 6, seed=7, clamp=clamp)
    b = A.sample_marginals(sc, 6, seed=7, clamp=clamp)
    assert np.array_equal(a, b)
    assert a.shape[0] == 6 and np.allclose(a.sum(axis=2), 1.0)
    assert np.allclose(a[:, 2], [1.0, 0.0, 0.0])
    # a draw and its reflection are different functions: the samples are not all equal
    assert not np.allclose(a[0], a[1])
    # more posterior variance -> more mutual information on average
    low = A.mutual_information(A.sample_marginals(_scores(var=0.05), 40, seed=1))
    high = A.mutual_information(A.sample_marginals(_scores(var=4.0), 40, seed=1))
    assert high.mean() > 3 * low.mean()


# --------------------------------------------------------------------------- look-ahead


def _brute_gain(sc, clamp, i, t):
    sub = sc.take([i])
    start = int(np.r_[0, np.cumsum(sc.lengths)][i])
    L = int(sc.lengths[i])
    c0 = clamp[start:start + L].copy()
    P0 = sub.marginals("mean", clamp=c0)
    H0 = A.entropy(P0)
    free = c0 < 0
    free[t] = False
    w = P0[t].copy()
    keep = w >= 0.02
    w = np.where(keep, w, 0.0)
    w /= w.sum()
    exp = 0.0
    for j in np.flatnonzero(keep):
        c = c0.copy()
        c[t] = j
        exp += w[j] * A.entropy(sub.marginals("mean", clamp=c))[free].sum()
    return H0[t] + H0[free].sum() - exp


def test_lookahead_gain_equals_the_sentence_by_sentence_definition():
    sc = _scores(seed=4, lengths=(5, 1, 4))
    clamp = np.full(sc.n_tokens, -1)
    clamp[1] = 2
    cands = [(0, 0), (0, 3), (2, 1), (1, 0), (0, 4)]
    got = A.lookahead_gain(sc, clamp, cands)
    want = [_brute_gain(sc, clamp, i, t) for i, t in cands]
    assert np.allclose(got, want, atol=1e-6)
    # a one-token sentence has no neighbour to inform: its gain is its own entropy
    P1 = sc.take([1]).marginals("mean")
    assert got[3] == pytest.approx(A.entropy(P1)[0], abs=1e-9)


def test_lookahead_gain_without_pair_functions_is_the_token_entropy():
    sc = _scores(seed=5, lengths=(6,), pair=0.0)
    sc.m_S = np.zeros_like(sc.m_S)
    sc.v_S = np.zeros_like(sc.v_S)
    cands = [(0, t) for t in range(6)]
    got = A.lookahead_gain(sc, None, cands, min_p=0.0)
    assert np.allclose(got, A.entropy(sc.marginals("mean")), atol=1e-8)
    assert A.lookahead_gain(sc, None, []).size == 0


# --------------------------------------------------------------------------- diverse batch


def test_diverse_batch_skips_a_duplicate_question():
    # candidates 0 and 1 are the same token type (identical features); 2 is different
    Z = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    q = np.array([0.9, 0.85, 0.5])
    assert A.diverse_batch(q, Z, np.full(3, 1e-6), 2) == [0, 2]
    # orthogonal candidates: the determinant adds nothing, the order is the scores'
    Z = np.eye(4)
    q = np.array([0.3, 0.9, 0.1, 0.5])
    assert A.diverse_batch(q, Z, np.zeros(4), 3) == [1, 3, 0]
    # the group cap holds, and the batch is filled by score when only duplicates are left
    Z = np.ones((4, 1))
    got = A.diverse_batch(np.array([0.9, 0.8, 0.7, 0.6]), Z, np.full(4, 1e-9), 3,
                          groups=np.array([0, 0, 1, 1]), max_per_group=1)
    assert got[0] == 0 and sorted(got) == [0, 2]
    assert A.diverse_batch(np.array([0.9, 0.8, 0.7]), Z[:3], np.full(3, 1e-9), 3) == [0, 1, 2]


def test_diverse_batch_is_greedy_log_determinant():
    """Each step takes the candidate that raises log det(L_S) the most (Chen et al. 2018)."""
    rng = np.random.default_rng(2)
    Z = rng.normal(size=(12, 4))
    e = np.full(12, 0.3)
    q = rng.uniform(0.2, 1.0, 12)
    got = A.diverse_batch(q, Z, e, 5)
    G = Z @ Z.T + np.diag(e)
    d = np.sqrt(np.diag(G))
    L = (q[:, None] * G / d[:, None] / d[None, :]) * q[None, :]
    chosen: list[int] = []
    for _ in range(5):
        best = max((c for c in range(12) if c not in chosen),
                   key=lambda c: np.linalg.slogdet(L[np.ix_(chosen + [c], chosen + [c])])[1])
        chosen.append(best)
    assert got == chosen


# --------------------------------------------------------------------------- the model


@pytest.fixture(scope="module")
def sparse_fit():
    X, y = make_chain_task(40, seed=3)
    rng = np.random.default_rng(0)
    part = [[lab if rng.random() < 0.4 else None for lab in s] for s in y]
    m = GPSL(offsets=(-1, 1), inference="sparse", max_iter=10).fit(X, part)
    return m, X, y, part


def test_latent_embedding_gives_the_predictive_variance(sparse_fit):
    m, X, _, _ = sparse_fit
    Z, e = m.latent_embedding(X[:5])
    _, var, _ = m._latent(X[:5])
    diag = np.asarray(Z.multiply(Z).sum(axis=1)).ravel() + e
    assert np.allclose(diag, var.mean(axis=1), rtol=1e-8)


def test_the_sparse_mode_uses_bohnings_bound_with_or_without_missing_labels(sparse_fit):
    """gpsl.auto: Boehning's bound in the scalable mode whether labels are missing or not
    (the labeled-tokens start made it as accurate there); Jensen's when asked for."""
    m, X, y, _ = sparse_fit
    assert m.lse_bound_ == "bohning"
    full = GPSL(offsets=(-1, 1), inference="sparse", max_iter=3).fit(X, y)
    assert full.lse_bound_ == "bohning"
    assert GPSL(offsets=(-1, 1), inference="sparse", max_iter=3,
                lse_bound="jensen").fit(X[:10], sparse_fit[3][:10]).lse_bound_ == "jensen"


def test_bayesian_scores_from_a_fitted_model(sparse_fit):
    m, X, _, part = sparse_fit
    sc = m.calibration_scores(X)
    clamp = m._clamp(part, sc.lengths)
    mi = A.mutual_information(A.sample_marginals(sc, 8, seed=0, clamp=clamp))
    assert mi.shape == (sc.n_tokens,)
    assert np.allclose(mi[clamp >= 0], 0.0)  # a known label has nothing left to learn
    assert (mi[clamp < 0] > 0).any()
    P, _ = rns_marginals(sc.mean, sc.var, sc.m_S, sc.v_S, sc.lengths, sc.offsets,
                         clamp=clamp, **sc.rns)
    assert np.allclose(P.sum(axis=1), 1.0)


def test_score_tokens_dispatches_and_zeroes_known_tokens():
    sc = _scores(seed=8)
    clamp = np.full(sc.n_tokens, -1)
    clamp[[1, 6]] = [0, 2]
    P = sc.marginals("mean", clamp=clamp)
    ent = A.score_tokens(sc, "entropy", clamp)
    want = A.entropy(P)
    want[[1, 6]] = 0.0
    assert np.allclose(ent, want)
    look = A.score_tokens(sc, "lookahead", clamp)
    free = np.flatnonzero(clamp < 0)
    starts = np.r_[0, np.cumsum(sc.lengths)[:-1]]
    sent = np.repeat(np.arange(3), sc.lengths)
    cands = [(int(sent[t]), int(t - starts[sent[t]])) for t in free]
    assert np.allclose(look[free], A.lookahead_gain(sc, clamp, cands))
    assert look[1] == 0 and look[6] == 0
    bald = A.score_tokens(sc, "bald", clamp, seed=1)
    assert np.array_equal(bald, A.score_tokens(sc, "bald", clamp, seed=1))
    assert bald[1] == 0 and (bald[free] >= 0).all()
    with pytest.raises(ValueError, match="unknown query score"):
        A.score_tokens(sc, "nope")


# --------------------------------------------------------------------------- query_model / CLI


def test_query_model_asks_unknown_tokens_best_first(sparse_fit):
    m, X, _, part = sparse_fit
    for strategy in ("entropy", "bald", "lookahead", "random"):
        items = A.query_model(m, X, part, strategy, 12, max_per_sentence=2, seed=4)
        assert len(items) == 12
        assert all(part[it.sentence][it.token] is None for it in items)
        assert max(sum(1 for it in items if it.sentence == s) for s in range(len(X))) <= 2
        scores = [it.score for it in items]
        assert scores == sorted(scores, reverse=True)
    div = A.query_model(m, X, part, "bald", 12, diverse=True, seed=4)
    assert len({(it.sentence, it.token) for it in div}) == 12
    assert all(part[it.sentence][it.token] is None for it in div)
    # nothing known: every token is a candidate; everything known: nothing to ask
    assert len(A.query_model(m, X[:2], None, "entropy", 5)) == 4  # 2 a sentence (default cap)
    assert len(A.query_model(m, X[:2], None, "entropy", 5, max_per_sentence=5)) == 5
    assert A.query_model(m, X[:2], sparse_fit[2][:2], "entropy", 5) == []
    with pytest.raises(ValueError, match="unknown query strategy"):
        A.query_model(m, X, part, "nope")


def test_cli_query(tmp_path, sparse_fit, capsys):
    from gpsl import cli

    m, X, y, part = sparse_fit
    m.save(tmp_path / "model")
    pool = tmp_path / "pool.data"
    lines = []
    for s, labs in zip(X[:6], part[:6], strict=True):
        lines += [f"{tok[0]} {'_' if lab is None else lab}" for tok, lab in zip(s, labs)]
        lines.append("")
    pool.write_text("\n".join(lines) + "\n")
    code = cli.main(["query", "-m", str(tmp_path / "model"), "--batch", "4", "--strategy",
                     "entropy", str(pool)])
    out, err = capsys.readouterr()
    assert code == 0 and "4 tokens by entropy" in err
    rows = [r.split("\t") for r in out.strip().splitlines()]
    assert rows[0][:4] == ["rank", "sentence", "token", "line"]
    want = A.query_model(m, X[:6], part[:6], "entropy", 4)
    assert [(int(r[1]) - 1, int(r[2]) - 1) for r in rows[1:]] == \
        [(it.sentence, it.token) for it in want]
    for r in rows[1:]:  # the line column points at the token's line of the file
        assert lines[int(r[3]) - 1].split()[0] == r[4]
    bad = tmp_path / "bad.data"
    bad.write_text("w0_0 NOPE\n\n")
    assert cli.main(["query", "-m", str(tmp_path / "model"), str(bad)]) == 2
    assert "bad.data:1: label 'NOPE'" in capsys.readouterr().err


# --------------------------------------------------------------------------- missing_start


def test_supervised_start_is_the_fit_of_the_complete_sentences():
    X, y = make_chain_task(30, seed=5)
    rng = np.random.default_rng(1)
    part = [list(s) if i < 6 else [lab if rng.random() < 0.2 else None for lab in s]
            for i, s in enumerate(y)]
    kw = {"offsets": (-1, 1), "inference": "sparse", "max_iter": 6}
    # no missing label: the option changes nothing
    a = GPSL(**kw).fit(X, y)
    b = GPSL(missing_start="supervised", **kw).fit(X, y)
    assert a.bound_trace_ == b.bound_trace_
    # with missing labels the start is the fit of the 6 complete sentences alone
    sup = GPSL(missing_start="supervised", **kw).fit(X, part)
    Xf, lengths = sup._features(X)
    y_idx = np.concatenate(sup.gold_index(part))
    from gpsl.likelihood import Problem

    prob = Problem.build(lengths, y_idx, sup.offsets_, len(sup.classes_))
    from gpsl.engines import SparseEngine
    from gpsl.params import check_params

    engine = SparseEngine(sup.kernel_, check_params(sup.get_params()))
    start = engine.supervised_start(Xf, lengths, prob, sup.state_.theta[0])
    alone = GPSL(**kw).fit(X[:6], part[:6])
    rows = np.arange(int(np.sum(lengths[:6])))
    mean_start = (Xf[rows] @ start.W) * np.exp(0.5 * start.theta[:, 0])
    mean_alone, _, _ = alone._latent(X[:6])
    assert np.allclose(mean_start, mean_alone, atol=1e-6)
    assert np.allclose(start.m_S, alone.state_.m_S, atol=1e-8)
    assert sup.bound_trace_ != GPSL(**kw).fit(X, part).bound_trace_
    with pytest.raises(ValueError, match="missing_start"):
        GPSL(missing_start="nope", **kw).fit(X, part)
