"""Dawid-Skene aggregation alone (eqs. E, VB/S, M, M1 of :mod:`gpsl.crowd`)."""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from gpsl.crowd.base import Aggregator
from gpsl.crowd.confusion import DEFAULT_SHRINK, CrowdModel, m_step, xlogy
from gpsl.crowd.vote_matrix import Votes, majority_posteriors

__all__ = ["DawidSkene", "e_step"]


def e_step(model: CrowdModel, votes: Votes, log_rho: np.ndarray) -> np.ndarray:
    """Eq. (E): ``r_t(y) = rho(y) e^{e_t(y)} / sum_y' rho(y') e^{e_t(y')}`` for every token
    (``rho`` alone for a token without votes), ``e_t`` the votes' evidence under ``model``."""
    a = model.evidence(votes) + np.asarray(log_rho, dtype=float)
    return np.exp(a - logsumexp(a, axis=1, keepdims=True))


class DawidSkene(Aggregator):
    """Dawid-Skene aggregation alone (eqs. E, VB/S, M, M1) with diagonal-favouring priors.

    Parameters
    ----------
    prior_diag, prior_off: prior pseudo-counts (see the module docstring).
    min_votes: annotators with fewer votes get the one-coin skill model.
    shrink: ``kappa``, the strength of the shrinkage of a confusion matrix towards the
        annotator's one-coin matrix (variational); ``0``: MAP matrices with the fixed prior.
    max_iter, tol: EM iterations and the relative-improvement stop on the bound.

    Attributes after ``fit``: ``probas_`` (n, J) posteriors, ``labels_`` (crowd-kit style
    mapping task -> label; ``labels_array_`` per token, ``None`` without votes or on a tie,
    :func:`decide`), ``confusions_`` (A, J, J), ``skills_`` / ``accuracy_`` (eq. A),
    ``one_coin_``, ``class_prior_``, ``bound_trace_``.
    """

    def __init__(self, prior_diag=2.0, prior_off=0.1, min_votes=30, max_iter=200, tol=1e-8,
                 shrink=DEFAULT_SHRINK):
        self.prior_diag = prior_diag
        self.prior_off = prior_off
        self.shrink = shrink
        self.min_votes = min_votes
        self.max_iter = max_iter
        self.tol = tol

    def fit_votes(self, votes: Votes) -> DawidSkene:
        if votes.token.size == 0 and not np.any(votes.observed >= 0):
            raise ValueError("no votes to aggregate")
        M = votes.design()
        one_coin = votes.n_votes() < self.min_votes
        r = majority_posteriors(votes)
        free = (votes.observed < 0) & votes.voted()
        trace = []
        model = None
        for _ in range(self.max_iter):
            model = m_step(votes, r, one_coin, self.prior_diag, self.prior_off, M,
                           shrink=self.shrink, skill=None if model is None else model.skill)
            rho = r[free | (votes.observed >= 0)].sum(axis=0)
            rho = rho / rho.sum()
            log_rho = np.log(np.maximum(rho, 1e-300))
            E = model.evidence(votes, M)
            a = E + log_rho
            lse = logsumexp(a, axis=1, keepdims=True)
            r_new = r.copy()
            r_new[free] = np.exp(a[free] - lse[free])
            r = r_new
            bound = self._bound(votes, r, E, log_rho, model, free)
            trace.append(bound)
            if len(trace) > 1 and abs(trace[-1] - trace[-2]) <= self.tol * max(1.0,
                                                                                abs(trace[-2])):
                break
        self.model_ = model
        self.confusions_ = model.pi
        self.one_coin_ = one_coin
        self.class_prior_ = rho
        self.bound_trace_ = trace
        self._finish(votes, r)
        return self

    @staticmethod
    def _bound(votes, r, E, log_rho, model, free) -> float:
        """(J1) with the class prior in place of ``L_GPSL`` on the voted/observed tokens."""
        keep = free | (votes.observed >= 0)
        rk = r[keep]
        lin = float(np.sum(xlogy(rk, E[keep] + log_rho)))
        with np.errstate(divide="ignore", invalid="ignore"):
            ent = -float(np.sum(np.where(r[free] > 0, r[free] * np.log(r[free]), 0.0)))
        return lin + ent + model.log_prior()
