r"""Cross-fitted taggers as the prior of the crowd's posterior (beyond the paper).

The joint model (:mod:`gpsl.crowd.joint`) learns its tagger from the posteriors of the same
sentences whose votes it weighs: a tagger free to fit them would echo the votes back, so its
prior variance is held at the echo prior and it says little about each sentence. A tagger
that never saw a sentence cannot echo it. Cut the sentences into ``K`` contiguous folds
(:func:`gpsl.crowd.priors.sentence_folds`); for fold ``k``, fit the tagger on the other
folds' posteriors as soft labels (:func:`gpsl.crowd.joint.fit_soft`, at GPSL's own prior
variance) and read the fold's sentences through it as the linear chain its
pseudo-likelihood factors estimate (:func:`gpsl.predict.chain_decode`): node scores
``u_l(y)`` (the predictive means of ``f^U``) and transitions ``T`` (:func:`gpsl.predict.
chain_transitions`), a prior over whole labelings

.. math:: p_k(Y \mid x) = \exp\big(\sum_l u_l(y_l) + \sum_l T(y_{l-1}, y_l)\big) / Z(u)

Each vote ``v`` of the sentence is an observation of its token's label through the annotator
model, ``p(l_v | y, p_v) = pi_{a_v}[y, p_v, l_v]``, so the posterior of the labeling given the
votes is the same chain with the evidence ``e_l(y) = sum_{v on l} E log pi_{a_v}[y, p_v, l_v]``
(:meth:`gpsl.crowd.sequential.SequentialModel.evidence`) added to its node scores,

.. math:: q(Y) \propto p_k(Y \mid x) \prod_l \exp e_l(y_l)                       \qquad (X1)

whose marginals ``q_l(y)`` forward-backward gives exactly (:func:`chain_posteriors`), and
whose normaliser gives the fold's votes their probability under a tagger that never saw them,
``log p(votes | x) = log Z(u + e) - log Z(u)`` (X2, the held-out vote score of
:mod:`gpsl.crowd.priors` with the chain's joint prior in place of per-token marginals).

A round refits the ``K`` taggers on the posteriors of the round before (the joint model's to
start), takes the posteriors (X1) of every fold, then the annotator model's M-step on them
(the joint fit's own, so its priors are the fit's). The rounds stop when the posteriors move
less than ``tol`` per token (``sum_l |q_l - q_l^{old}|_1 / n``), or after ``max_rounds``.
Nothing reads a gold label.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import logsumexp

from gpsl.crowd.priors import sentence_folds

__all__ = ["CrossFit", "chain_posteriors", "crossfit_posteriors"]


@dataclass
class CrossFit:
    """The posteriors after the rounds, with each round's trace: the held-out vote score
    (X2, nats, summed over the folds) and how far the posteriors moved per token."""

    r: np.ndarray
    model: object  # the annotator model after the last round's M-step
    rounds: list = field(default_factory=list)  # [{"heldout": ..., "moved": ...}]


def chain_posteriors(b: np.ndarray, T: np.ndarray, lengths) -> tuple[np.ndarray, np.ndarray]:
    r"""Marginals ``q_l(y)`` (n, J) and log normalisers ``log Z`` (one per sentence) of the
    linear chains ``p(Y) ∝ exp(sum_l b_l(y_l) + sum_l T(y_{l-1}, y_l))`` of a concatenated
    batch (node scores ``b`` (n, J) in sentence order): forward-backward in log space, all
    sentences at once (padded to the longest).

    ``alpha_l(y) = b_l(y) + log sum_a exp(alpha_{l-1}(a) + T(a, y))``, ``alpha_1 = b_1``;
    ``beta_l(y) = log sum_c exp(T(y, c) + b_{l+1}(c) + beta_{l+1}(c))``, ``beta_L = 0``;
    ``log Z = log sum_y exp alpha_L(y)`` and ``q_l(y) = exp(alpha_l(y) + beta_l(y) - log Z)``.
    """
    b = np.asarray(b, dtype=float)
    T = np.asarray(T, dtype=float)
    lengths = np.asarray(lengths, dtype=np.int64)
    S, J = lengths.size, b.shape[1]
    if S == 0:
        return np.zeros((0, J)), np.zeros(0)
    L = int(lengths.max())
    starts = np.cumsum(lengths) - lengths
    pos = np.arange(b.shape[0]) - np.repeat(starts, lengths)
    sent = np.repeat(np.arange(S), lengths)
    B = np.zeros((L, S, J))
    B[pos, sent] = b
    alpha = np.empty((L, S, J))
    alpha[0] = B[0]
    for t in range(1, L):
        step = B[t] + logsumexp(alpha[t - 1][:, :, None] + T[None], axis=1)
        alpha[t] = np.where((t < lengths)[:, None], step, alpha[t - 1])
    beta = np.zeros((L, S, J))
    for t in range(L - 2, -1, -1):
        step = logsumexp(T[None] + (B[t + 1] + beta[t + 1])[:, None, :], axis=2)
        beta[t] = np.where((t + 1 < lengths)[:, None], step, 0.0)
    log_z = logsumexp(alpha[-1], axis=1)
    g = alpha[pos, sent] + beta[pos, sent] - log_z[sent][:, None]
    q = np.exp(g)
    q /= q.sum(axis=1, keepdims=True)
    return q, log_z


def crossfit_posteriors(X, r: np.ndarray, keep: np.ndarray, votes, evidence: np.ndarray,
                        fit_tagger, folds: int = 3) -> tuple[np.ndarray, float]:
    """One round's posteriors (X1) of every fold and the held-out vote score (X2), summed.

    ``fit_tagger(k, X, q, keep, classes, split)`` fits the tagger that reads fold ``k`` on
    the other folds' soft labels (the caller's :func:`gpsl.crowd.joint.fit_soft`; passed in,
    so this module does not import the joint model that calls it); ``evidence`` (n, J) is
    the annotator model's ``e_l(y)``. With fewer than two folds, or a fold whose other
    folds have no kept token, ``r`` is returned unchanged with a score of ``nan``."""
    from gpsl.predict import chain_transitions

    n_s = len(X)
    lengths = np.asarray(votes.lengths, dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    classes = list(votes.classes)
    blocks = sentence_folds(n_s, folds)
    per_sent = np.add.reduceat(np.asarray(keep, dtype=np.int64), starts) if n_s else []

    def tokens(sents):
        return np.concatenate([np.arange(starts[i], starts[i] + lengths[i]) for i in sents])

    if len(blocks) < 2 or any(per_sent[np.setdiff1d(np.arange(n_s), b)].sum() == 0
                              for b in blocks):
        return np.array(r, dtype=float), float("nan")
    out = np.array(r, dtype=float)
    score = 0.0
    for k, block in enumerate(blocks):
        train = np.setdiff1d(np.arange(n_s), block)
        tok = tokens(train)
        cuts = np.cumsum(lengths[train])[:-1]

        def split(flat, cuts=cuts):
            return np.split(np.asarray(flat), cuts)

        tagger = fit_tagger(k, [X[i] for i in train], r[tok], keep[tok], classes, split)
        u, lens = tagger.local_scores([X[i] for i in block])
        T = chain_transitions(tagger.state_.m_S, tagger.offsets_)
        held = tokens(block)
        q, log_z = chain_posteriors(u + evidence[held], T, lens)
        _, log_z0 = chain_posteriors(u, T, lens)
        out[held] = q
        score += float(np.sum(log_z - log_z0))
    return out, score


def crossfit(X, r: np.ndarray, keep: np.ndarray, votes, model, m_step, evidence, fit_tagger,
             folds: int = 3, max_rounds: int = 5, tol: float = 2e-3) -> CrossFit:
    """The rounds of the module docstring from the joint fit's posteriors ``r`` and annotator
    model ``model``: ``evidence(model) -> (n, J)`` and ``m_step(r, model) -> model`` are the
    joint fit's own (:meth:`gpsl.crowd.joint.CrowdGPSL._annotators`)."""
    trace = []
    r = np.array(r, dtype=float)
    n = max(r.shape[0], 1)
    for _ in range(int(max_rounds)):
        new, score = crossfit_posteriors(X, r, keep, votes, evidence(model), fit_tagger, folds)
        if not np.isfinite(score):
            break
        moved = float(np.abs(new - r).sum()) / n
        r = new
        model = m_step(r, model)
        trace.append({"heldout": score, "moved": moved})
        if moved < tol:
            break
    return CrossFit(r, model, trace)
