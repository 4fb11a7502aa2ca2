"""Bayesian and batch-diverse queries under the posterior q (BALD, the look-ahead gain,
determinantal batches) and the model-level query (:func:`query_model`).

The marginal scores (:mod:`gpsl.active.marginal`) read one set of marginals; these read
Algorithm 2's inputs under q (:class:`gpsl.calibration.Scores`).
"""

from __future__ import annotations

import math

import numpy as np

from gpsl.active.marginal import (
    _SCORERS,
    QueryItem,
    _rank,
    _rng,
    default_max_per_sentence,
)

# --------------------------------------------------------------------------- Bayesian queries
#
# The scores above read one set of marginals. A GP posterior says more: how much of a
# token's uncertainty is the model's own (epistemic) and would shrink with a label, how
# much a label would tell about the token's neighbours, and which candidates ask the same
# question twice. The functions below take Algorithm 2's inputs under q
# (:class:`gpsl.calibration.Scores`, from :meth:`gpsl.model.GPSL.calibration_scores`).


def _entropy_rows(P: np.ndarray) -> np.ndarray:
    """Entropy over the last axis of an array of probabilities (any leading shape)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(P > 0, P * np.log(np.where(P > 0, P, 1.0)), 0.0)
    return np.maximum(-t.sum(axis=-1), 0.0)


def mutual_information(samples: np.ndarray) -> np.ndarray:
    """BALD (Houlsby et al. 2011, eq. 2) from ``(S, N, J)`` sampled label distributions:

    ``I[y_t; f | D] = H[E_q p(y_t | f)] - E_q H[p(y_t | f)]``, both expectations replaced by
    the mean over the ``S`` samples. The first term is the total uncertainty of the token's
    label, the second the part that stays when ``f`` is known (aleatoric); their difference is
    the expected drop of the label's entropy if the latent functions were learned, which is
    what a label of this token can teach. Returns ``(N,)``, clipped at 0."""
    P = np.asarray(samples, dtype=float)
    if P.ndim != 3:
        raise ValueError(f"samples must be (S, N, J), got shape {P.shape}")
    return np.maximum(_entropy_rows(P.mean(axis=0)) - _entropy_rows(P).mean(axis=0), 0.0)


def sample_marginals(scores, n_samples: int = 10, seed=0, clamp=None) -> np.ndarray:
    """``(S, N, J)`` Algorithm 2 marginals at ``S`` draws of the latent functions from q.

    Each draw takes ``f^U_t ~ N(m_t, v_t)`` independently per token and label (the predictive
    marginals of q) and ``f^S ~ N(m_S, v_S)``, and runs Algorithm 2 (RNS, the mean-only local
    scores) on the draw with the known labels ``clamp`` fixed. Draws come in antithetic pairs
    (``f`` and its reflection about the mean), which halves the Monte Carlo noise of the
    first moment for the same cost; ``S`` is rounded up to an even number. Seeded."""
    from gpsl.predict import rns_marginals

    if scores.var is None:
        raise ValueError("sample_marginals needs the predictive variances (with_variance=True)")
    rng = _rng(seed)
    half = max(1, math.ceil(int(n_samples) / 2))
    sd_u = np.sqrt(np.maximum(scores.var, 0.0))
    sd_s = np.sqrt(np.maximum(scores.v_S, 0.0))
    out = np.empty((2 * half, scores.n_tokens, scores.mean.shape[1]))
    zeros_s = np.zeros_like(scores.m_S)
    k = 0
    for _ in range(half):
        e_u = rng.standard_normal(scores.mean.shape) * sd_u
        e_s = rng.standard_normal(scores.m_S.shape) * sd_s
        for sign in (1.0, -1.0):
            out[k], _ = rns_marginals(scores.mean + sign * e_u, None, scores.m_S + sign * e_s,
                                      zeros_s, scores.lengths, scores.offsets, method="mean",
                                      clamp=clamp, **scores.rns)
            k += 1
    return out


def lookahead_gain(scores, clamp, candidates, min_p: float = 0.02) -> np.ndarray:
    """Expected drop of a sentence's label entropy when one of its tokens gets a label.

    For a candidate token ``t`` of sentence ``i`` with marginal ``p_t`` (Algorithm 2 on the
    predictive means, as the paper's RNS, with the known labels ``clamp`` fixed), every
    label ``j`` with ``p_tj >= min_p`` is tried: ``t`` is clamped to ``j`` and Algorithm 2 is
    run again on the sentence, which propagates the label
    to the neighbours through the pair functions. The gain is the expected error reduction of
    Roy and McCallum (2001) with entropy as the loss, restricted to the sentence and without a
    refit (a one-step look-ahead):

    ``gain_t = H(p_t) + sum_{u != t} H(p_u) - sum_j p_tj sum_{u != t} H(p_u | y_t = j)``

    over the sentence's unlabeled tokens ``u``, with ``p_tj`` renormalised over the tried
    labels. All variants of all candidates run as one batch of sentences through Algorithm 2.
    ``candidates`` is a list of ``(sentence index, token index)``; ``clamp`` holds a label
    index per token of ``scores`` (-1 = unknown) or is None. Returns one gain per candidate.
    """
    from gpsl.predict import rns_marginals

    cands = list(candidates)
    if not cands:
        return np.zeros(0)
    N = scores.n_tokens
    clamp = np.full(N, -1, dtype=np.int64) if clamp is None else np.asarray(clamp, np.int64)
    starts = np.r_[0, np.cumsum(scores.lengths)[:-1]]
    sents = sorted({i for i, _ in cands})
    base = scores.take(sents)
    rows = scores.rows(sents)
    P0, _ = rns_marginals(base.mean, base.var, base.m_S, base.v_S, base.lengths, base.offsets,
                          method="mean", rns_variance=base.rns_variance, clamp=clamp[rows],
                          **base.rns)
    local_start = dict(zip(sents, np.r_[0, np.cumsum(base.lengths)[:-1]], strict=True))
    H0 = _entropy_rows(P0)
    free0 = clamp[rows] < 0
    # one variant = (candidate k, label j): the sentence with t clamped to j
    var_rows, var_clamp, var_len, owner, weight = [], [], [], [], []
    for k, (i, t) in enumerate(cands):
        L = int(scores.lengths[i])
        a = int(local_start[i])
        p = P0[a + t]
        labels = np.flatnonzero(p >= min_p)
        if labels.size == 0:
            labels = np.array([int(np.argmax(p))])
        w = p[labels] / p[labels].sum()
        for j, wj in zip(labels, w, strict=True):
            c = clamp[starts[i]: starts[i] + L].copy()
            c[t] = j
            var_rows.append(np.arange(starts[i], starts[i] + L))
            var_clamp.append(c)
            var_len.append(L)
            owner.append(k)
            weight.append(wj)
    R = np.concatenate(var_rows)
    Pv, _ = rns_marginals(scores.mean[R], None if scores.var is None else scores.var[R],
                          scores.m_S, scores.v_S, np.asarray(var_len, dtype=np.int64),
                          scores.offsets, method="mean", rns_variance=scores.rns_variance,
                          clamp=np.concatenate(var_clamp), **scores.rns)
    Hv = _entropy_rows(Pv)
    gains = np.zeros(len(cands))
    expected = np.zeros(len(cands))
    pos = 0
    for k, L, wj in zip(owner, var_len, weight, strict=True):
        i, t = cands[k]
        a = int(local_start[i])
        free = free0[a: a + L].copy()
        free[t] = False
        expected[k] += wj * float(Hv[pos: pos + L][free].sum())
        pos += L
    for k, (i, t) in enumerate(cands):
        a = int(local_start[i])
        L = int(scores.lengths[i])
        free = free0[a: a + L].copy()
        free[t] = False
        gains[k] = H0[a + t] + float(H0[a: a + L][free].sum()) - expected[k]
    return np.maximum(gains, 0.0)


def diverse_batch(quality, embedding, residual, batch_size: int, groups=None,
                  max_per_group: int | None = None) -> list[int]:
    """A batch of candidates that are uncertain and do not ask the same question twice.

    Greedy MAP of a determinantal point process (Chen, Zhang and Zhou 2018) with the kernel
    ``L_ab = q_a C_ab q_b``: ``q`` is the candidates' score and ``C`` the correlation of their
    latent functions under the model, ``C = D^-1/2 (Z Z' + diag(e)) D^-1/2`` with ``Z`` the
    rows of ``embedding`` (``z_a . z_b`` = the posterior covariance of ``f^U`` at tokens
    ``a`` and ``b``, :meth:`gpsl.model.GPSL.latent_embedding`) and ``e`` the independent
    ``residual`` variance. Each step takes the candidate with the largest
    ``q_c^2 (1 - C_c,S C_S,S^-1 C_S,c)``: its score times the share of its latent variance
    not already explained by the chosen ones (the incremental Cholesky factor of ``C_S,S``),
    so two tokens of one word in one context are not both asked while one suffices.
    ``groups`` (e.g. the sentence of each candidate) with ``max_per_group`` caps how many
    come from one group. When the determinant leaves no variance the rest of the batch
    follows the scores. Returns indices into the candidates, in the order chosen.
    """
    import scipy.sparse as sp

    q = np.maximum(np.asarray(quality, dtype=float), 0.0)
    M = q.size
    k = min(int(batch_size), M)
    if k <= 0:
        return []
    Z = sp.csr_matrix(embedding) if sp.issparse(embedding) else np.asarray(embedding, float)
    G = Z @ Z.T
    G = G.toarray() if sp.issparse(G) else np.asarray(G)
    G = G + np.diag(np.asarray(residual, dtype=float))
    d = np.sqrt(np.maximum(np.diag(G), 1e-300))
    C = G / d[:, None] / d[None, :]
    groups = np.zeros(M, dtype=np.int64) if groups is None else np.asarray(groups)
    cap = M if max_per_group is None else int(max_per_group)
    taken: dict = {}
    chosen: list[int] = []
    V = np.zeros((k, M))  # rows: the incremental Cholesky factor's columns
    d2 = q ** 2 * np.diag(C)
    alive = np.ones(M, dtype=bool)
    while len(chosen) < k:
        cand = np.flatnonzero(alive)
        if cand.size == 0:
            break
        j = int(cand[np.argmax(d2[cand])])
        if d2[j] <= 1e-12 * max(1.0, float(q.max()) ** 2):
            break
        n = len(chosen)
        e = (q[j] * C[j] * q - V[:n, j] @ V[:n]) / math.sqrt(d2[j])
        V[n] = e
        d2 = d2 - e ** 2
        chosen.append(j)
        alive[j] = False
        g = groups[j]
        taken[g] = taken.get(g, 0) + 1
        if taken[g] >= cap:
            alive &= groups != g
    if len(chosen) < k:  # fill by score where the determinant had nothing left to add
        rest = [int(i) for i in np.argsort(-q, kind="stable") if i not in set(chosen)]
        for i in rest:
            if len(chosen) == k:
                break
            g = groups[i]
            if taken.get(g, 0) < cap:
                chosen.append(i)
                taken[g] = taken.get(g, 0) + 1
    return chosen


#: Token query scores computed from a fitted model (:func:`score_tokens`): the names the
#: app's queue and ``bench.active_learning_pool`` accept, with what each asks for.
QUERY_SCORES: dict[str, str] = {
    "least_confidence": "tokens with the lowest top probability",
    "margin": "tokens with the smallest gap between their two best labels",
    "entropy": "tokens with the most uncertain label (entropy of the marginal)",
    "bald": "tokens whose label would teach the model most (mutual information between "
            "the label and the latent functions)",
    "lookahead": "tokens whose label would settle most of their sentence (expected entropy "
                 "reduction after propagating the label)",
}

#: The query score the app's queue uses by default: the best token strategy of
#: ``python -m bench.active_learning_pool`` (see docs/active-learning.md).
DEFAULT_QUERY = "bald"

#: Monte Carlo draws of :func:`sample_marginals` behind the ``bald`` score.
BALD_SAMPLES = 10


def score_tokens(scores, strategy: str, clamp=None, seed=0, *, marginals=None,
                 n_samples: int = BALD_SAMPLES) -> np.ndarray:
    """One query score per token of ``scores`` (higher: ask first; known tokens get 0).

    ``least_confidence`` / ``margin`` / ``entropy`` read ``marginals`` (e.g. the model's
    calibrated ones) or else Algorithm 2 on ``scores`` with ``clamp``; ``bald`` is
    :func:`mutual_information` over :func:`sample_marginals`; ``lookahead`` is
    :func:`lookahead_gain` of every unknown token; ``random`` a seeded uniform draw."""
    n = scores.n_tokens
    known = np.zeros(n, dtype=bool) if clamp is None else np.asarray(clamp) >= 0
    if strategy == "random":
        out = _rng(seed).random(n)
    elif strategy == "bald":
        out = mutual_information(sample_marginals(scores, n_samples, seed, clamp))
    elif strategy == "lookahead":
        out = np.zeros(n)
        starts = np.r_[0, np.cumsum(scores.lengths)[:-1]]
        sent = np.repeat(np.arange(len(scores.lengths)), scores.lengths)
        free = np.flatnonzero(~known)
        if free.size:
            cands = list(zip(sent[free].tolist(), (free - starts[sent[free]]).tolist(),
                             strict=True))
            out[free] = lookahead_gain(scores, clamp, cands)
    elif strategy in ("least_confidence", "margin", "entropy"):
        P = marginals if marginals is not None else scores.marginals("mean", clamp=clamp)
        out = _SCORERS[strategy](np.asarray(P, dtype=float))
    else:
        raise ValueError(f"unknown query score {strategy!r}; choose from "
                         f"{', '.join([*QUERY_SCORES, 'random'])}")
    out = np.asarray(out, dtype=float).copy()
    out[known] = 0.0
    return out


def query_model(model, X, y=None, strategy: str = DEFAULT_QUERY, batch_size: int = 50, *,
                diverse: bool = False, max_per_sentence: int | None = None,
                seed=0) -> list[QueryItem]:
    """The next ``batch_size`` tokens to label in sentences ``X`` under a fitted GPSL model.

    ``y`` holds the labels already known (``None`` where unlabeled; ``y=None``: nothing
    known); known tokens are clamped in Algorithm 2 and never asked. Tokens are ranked by
    :func:`score_tokens` with ``strategy`` (a key of :data:`QUERY_SCORES` or ``"random"``);
    the entropy-family scores read the model's (calibrated) marginals. ``diverse=True``
    chooses the batch by :func:`diverse_batch` over a short-list of the ``3 * batch_size``
    best tokens, with the model's :meth:`~gpsl.model.GPSL.latent_embedding`. At most
    ``max_per_sentence`` tokens come from one sentence (default
    :func:`default_max_per_sentence`). Returns items best first (``sentence`` = index in X).
    """
    if strategy not in QUERY_SCORES and strategy != "random":
        raise ValueError(f"unknown query strategy {strategy!r}; choose from "
                         f"{', '.join([*QUERY_SCORES, 'random'])}")
    if int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    batch_size = int(batch_size)
    cap = default_max_per_sentence(batch_size) if max_per_sentence is None \
        else int(max_per_sentence)
    if cap < 1:
        raise ValueError(f"max_per_sentence must be a positive integer, got {max_per_sentence!r}")
    sc = model.calibration_scores(X, with_variance=strategy == "bald")
    clamp = None if y is None else model._clamp(y, sc.lengths)
    marg = None
    if strategy in _SCORERS:
        marg = np.concatenate(model.predict_marginals(X, y=y)) if len(X) else None
    score = score_tokens(sc, strategy, clamp, seed, marginals=marg)
    starts = np.r_[0, np.cumsum(sc.lengths)[:-1]]
    sent = np.repeat(np.arange(len(sc.lengths)), sc.lengths)
    free = np.flatnonzero(np.ones(sc.n_tokens, bool) if clamp is None else clamp < 0)
    if free.size == 0:
        return []
    order = free[_rank(score[free], _rng(seed))]
    if diverse:
        short = order[: 3 * batch_size]
        Z, e = model.latent_embedding(X)
        pick = [short[i] for i in diverse_batch(score[short], Z[short], e[short], batch_size,
                                                groups=sent[short], max_per_group=cap)]
    else:
        pick, taken = [], {}
        for t in order:
            s = int(sent[t])
            if taken.get(s, 0) < cap:
                taken[s] = taken.get(s, 0) + 1
                pick.append(t)
                if len(pick) == batch_size:
                    break
    return [QueryItem(int(sent[t]), int(t - starts[sent[t]]), float(score[t])) for t in pick]
