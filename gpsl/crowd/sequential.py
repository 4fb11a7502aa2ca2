r"""The sequential annotator model: an annotator's confusion depends on their previous label.

Why the annotator's own previous label
--------------------------------------
Crowd workers label spans, not tokens: one who starts an entity continues it (``B-PER`` then
``I-PER``), one who missed its first token writes ``B-`` on its second, one who is not
labeling a sentence carries on with ``O``. BSC-seq (Simpson and Gurevych 2019, "A Bayesian
approach for sequence tagging with crowds") models this with confusion matrices conditioned
on the annotator's previous label ``p``:

.. math::  p(l_{a,t} = l \mid y_t = y, l_{a,t-1} = p) = \pi_a[y, p, l]          \qquad (Q)

with ``p = J`` ("none") at a sentence start or when the annotator did not vote on the
previous token. An annotator's votes are then a chain given the true labels,
``p(L_a | Y) = prod_t pi_a[y_t, l_{a,t-1}, l_{a,t}]``, and their log-likelihood is still a
sum of *per-token* terms in ``y_t``: ``e_t(y) = sum_{v on t} log pi_{a_v}[y, p_v, l_v]`` is
the evidence of :class:`gpsl.likelihood.Problem` exactly as the plain confusion matrices'
is, so the joint bound (J1 of :mod:`gpsl.crowd`) and its engine hook stay as they are.
Conditioning on the previous *true* label instead (``pi_a[y_{t-1}, y_t, l]``) would make
the evidence a function of label pairs, bilinear in ``r_{t-1}`` and ``r_t``: the engine's
``r`` update and bound would need a pairwise evidence term. The previous true label is the
neighbour the tagger's pair functions already see; the annotator's own previous label is
what carries their span habits, and it is observed.

Priors (nested Dawid-Skene)
---------------------------
A worker's ``(y, p)`` row is seen in few votes (``J (J + 1) = 90`` rows per worker for the
9 BIO labels of CoNLL). Each row is shrunk towards the annotator's own plain confusion row
``c_a[y, :]``, and that row, seen in few votes for a rare true label, towards the
annotator's one-coin matrix ``m(s_a)`` (``s_a`` on the diagonal, ``(1 - s_a)/(J - 1)``
elsewhere), as Dawid-Skene's shrinkage does (:mod:`gpsl.crowd`, eq. PS):

.. math::

   \pi_a[y, p, :] \sim \mathrm{Dir}(\kappa\, c_a[y, :]),\qquad
   c_a[y, :] \sim \mathrm{Dir}(1 + \kappa_1 m(s_a)[y, :]),\qquad
   s_a \sim \mathrm{Beta}(1 + \mathrm{prior\_diag}, 1 + \mathrm{prior\_off})   \qquad (P2)

``q(pi_a[y, p, :]) = Dir(alpha_a[y, p, :])`` is variational, ``c_a`` and ``s_a`` point
estimates (MAP). Every parameter of ``Dir(1 + kappa_1 m(s))`` is at least 1, so its density
is bounded whatever ``s``: unlike ``Dir(kappa_1 m(s))`` with a point ``c`` (whose density at
its own mode grows without bound as ``s -> 1``) the MAP is not degenerate. With
``kappa_1 = shrink = 0`` the centres get the fixed prior (P0) of :mod:`gpsl.crowd` instead,
``c_a[y, :] ~ Dir(beta_y)``, ``beta_y[l] = 1 + prior_off + prior_diag [l = y]``. As ``kappa
-> infinity`` every row equals ``c_a``: the previous label no longer matters, and with
``shrink = 0`` the model is Dawid-Skene with MAP confusion matrices under (P0),
``DawidSkene(shrink=0)`` (tested).

The annotator terms of (J1) are ``sum_{a,y,p} -KL(q(pi_a[y,p]) || Dir(kappa c_a[y]))
+ sum_{a,y} log Dir(c_a[y]; 1 + kappa_1 m(s_a)[y]) + sum_a log Beta(s_a)`` and the M-step
with ``r`` fixed cycles through three exact block maximisations, so it never lowers (J1):

* ``q`` given ``c`` (conjugacy): ``alpha_a[y, p, l] = N_a[y, p, l] + kappa c_a[y, l]`` with
  the expected counts ``N_a[y, p, l] = sum_{v: a_v = a, p_v = p, l_v = l} r_{t_v}(y)``
  (eq. Q-VB);
* ``c`` given ``q`` and ``s``: each row maximises

  .. math::  f(c) = -P \sum_l \log\Gamma(\kappa c_l) + \kappa \sum_l c_l S_l
                    + \sum_l (\beta_l - 1) \log c_l,
             \qquad S_l = \sum_p E_q \log \pi[p, l]                              \qquad (C)

  over the simplex (``P = J + 1``, ``beta = 1 + kappa_1 m(s)``; constants dropped). ``f`` is
  a sum of concave functions of single ``c_l`` (``log Gamma`` is convex): the stationarity
  conditions ``g_l(c_l) = -P kappa psi(kappa c_l) + kappa S_l + (beta_l - 1)/c_l = lambda``
  have one root ``c_l(lambda)`` each (``g_l`` decreases from ``+inf``), and ``sum_l
  c_l(lambda)`` decreases in ``lambda``: a Newton iteration on ``lambda`` with the bracket
  ``[min_l g_l(1/J), max_l g_l(1/J)]`` (at either end every ``c_l`` is on one side of
  ``1/J``), safeguarded Newton iterations for each ``c_l``. The new row is kept only if
  ``f`` did not decrease;
* ``s`` given ``c``: ``log Beta(s) + sum_y log Dir(c_a[y]; 1 + kappa_1 m(s)[y])`` is concave
  in ``s`` (``-log Gamma`` of an affine function), maximised by safeguarded Newton steps
  (eq. S of :mod:`gpsl.crowd` with ``log c`` for ``E log pi`` and ``Gamma(1 + .)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import digamma, gammaln

from gpsl.crowd.confusion import (
    DEFAULT_SHRINK,
    LOG_FLOOR,
    _beta_matrix,
    _kl_dirichlet_rows,
    _log_beta_pdf,
    _shrink_betas,
    _update_skills,
    trigamma,
)
from gpsl.crowd.votes import Votes

__all__ = ["DEFAULT_KAPPA", "SequentialModel", "previous_labels", "sequential_m_step"]

#: default ``kappa``: pseudo-votes of the annotator's plain confusion row in each of the
#: sequential rows (eq. P2)
DEFAULT_KAPPA = 30.0


def previous_labels(votes: Votes) -> np.ndarray:
    """``p_v`` for every vote: the label the same annotator gave the previous token of the
    same sentence, ``J`` (none) at a sentence start or without such a vote. Shape (V,)."""
    J, A = votes.J, max(votes.A, 1)
    if votes.token.size == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(np.cumsum(votes.lengths) - votes.lengths, votes.lengths)
    key = votes.token * A + votes.annotator
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    want = (votes.token - 1) * A + votes.annotator
    pos = np.searchsorted(sorted_key, want)
    pos_c = np.minimum(pos, sorted_key.size - 1)
    found = (sorted_key[pos_c] == want) & (votes.token > starts[votes.token])
    out = np.full(votes.token.size, J, dtype=np.int64)
    out[found] = votes.label[order[pos_c[found]]]
    return out


def sequential_counts(votes: Votes, r: np.ndarray, prev: np.ndarray) -> np.ndarray:
    """``N_a[y, p, l] = sum_{v: a_v = a, p_v = p, l_v = l} r_{t_v}(y)``, shape (A, J, J+1, J)."""
    A, J = votes.A, votes.J
    cell = (votes.annotator * (J + 1) + prev) * J + votes.label  # [a, p, l]
    rv = np.asarray(r)[votes.token]
    N = np.stack([np.bincount(cell, weights=rv[:, y], minlength=A * (J + 1) * J)
                  for y in range(J)], axis=-1).reshape(A, J + 1, J, J)  # [a, p, l, y]
    return N.transpose(0, 3, 1, 2)


@dataclass
class SequentialModel:
    """Parameters of (Q, P2): ``alpha`` (A, J, J+1, J) of ``q(pi_a[y, p, :])``, the centres
    ``centre`` (A, J, J) (each annotator's plain confusion matrix ``c_a``), the skills
    ``skill_`` (A,) (``s_a``; unused with ``shrink = 0``), ``kappa``, ``shrink``
    (``kappa_1``) and the prior pseudo-counts."""

    alpha: np.ndarray
    centre: np.ndarray
    kappa: float
    prior_diag: float
    prior_off: float
    shrink: float = 0.0
    skill_: np.ndarray | None = None

    @property
    def elog(self) -> np.ndarray:
        """``E_q[log pi_a[y, p, l]]`` (floored at :data:`LOG_FLOOR`), shape (A, J, J+1, J)."""
        a = self.alpha
        return np.maximum(digamma(a) - digamma(a.sum(axis=-1, keepdims=True)), LOG_FLOOR)

    @property
    def pi(self) -> np.ndarray:
        """Posterior means of the sequential rows, (A, J, J+1, J)."""
        return self.alpha / self.alpha.sum(axis=-1, keepdims=True)

    @property
    def confusion(self) -> np.ndarray:
        """Each annotator's plain confusion matrix, the centres ``c_a`` (A, J, J)."""
        return self.centre

    @property
    def skill(self) -> np.ndarray | None:
        """``s_a`` (A,), or None with ``shrink = 0``."""
        return self.skill_ if self.shrink > 0 else None

    def centre_prior(self) -> np.ndarray:
        """Dirichlet parameters of the centres' prior, (A, J, J): ``1 + kappa_1 m(s_a)``, or
        (P0) with ``shrink = 0``."""
        A, J = self.centre.shape[:2]
        if self.shrink > 0:
            return 1.0 + _shrink_betas(J, np.asarray(self.skill_, dtype=float), self.shrink)
        return np.broadcast_to(_beta_matrix(J, self.prior_diag, self.prior_off), (A, J, J))

    def evidence(self, votes: Votes, prev: np.ndarray) -> np.ndarray:
        """``e_t(y) = sum_{v on t} E_q log pi_{a_v}[y, p_v, l_v]``, shape (n, J)."""
        if votes.token.size == 0:
            return np.zeros((votes.n, votes.J))
        return votes.token_sum(self.elog[votes.annotator, :, prev, votes.label])

    def log_prior(self) -> float:
        """The annotator terms of (J1): ``sum -KL(q || Dir(kappa c)) + sum log Dir(c; beta)``
        (``+ sum log Beta(s_a)`` with shrinkage)."""
        A, J = self.centre.shape[:2]
        beta = self.centre_prior()
        lognorm = gammaln(beta.sum(axis=2)) - gammaln(beta).sum(axis=2)  # (A, J)
        total = float(lognorm.sum() + np.sum((beta - 1.0) * np.log(self.centre)))
        for a in range(A):
            for y in range(J):
                prior = np.broadcast_to(self.kappa * self.centre[a, y], (J + 1, J))
                total -= _kl_dirichlet_rows(self.alpha[a, y], prior)
            if self.shrink > 0:
                total += _log_beta_pdf(float(self.skill_[a]), self.prior_diag, self.prior_off)
        return total


def _centre_objective(c, S, kappa, P, b1):
    """Eq. (C) per row (constants dropped); ``c``, ``S``, ``b1`` of shape (R, J)."""
    return (-P * gammaln(kappa * c) + kappa * c * S + b1 * np.log(c)).sum(axis=1)


def _solve_c(lam, S, kappa, P, b1, iters=40):
    """The root ``c`` of ``g(c) = lam`` for every entry (``g`` decreasing), by Newton steps in
    ``v = log c`` kept inside a shrinking bisection bracket."""
    lo = np.full(S.shape, -60.0)
    hi = np.full(S.shape, 5.0)
    v = np.full(S.shape, np.log(1.0 / S.shape[1]))
    lam = lam[:, None]
    for _ in range(iters):
        c = np.exp(v)
        h = -P * kappa * digamma(kappa * c) + kappa * S + b1 / c - lam
        dh = -P * kappa * kappa * c * trigamma(kappa * c) - b1 / c  # dh/dv < 0
        lo = np.where(h > 0, v, lo)
        hi = np.where(h > 0, hi, v)
        step = v - h / dh
        inside = (step > lo) & (step < hi)
        v_new = np.where(inside, step, 0.5 * (lo + hi))
        if np.max(np.abs(v_new - v)) < 1e-13:
            v = v_new
            break
        v = v_new
    return np.exp(v)


def _dc_dlam(c, kappa, P, b1):
    """``dc/dlambda = 1 / g'(c)`` with ``g'(c) = -P kappa^2 psi'(kappa c) - (beta - 1)/c^2``."""
    return 1.0 / (-P * kappa * kappa * trigamma(kappa * c) - b1 / (c * c))


def update_centres(S: np.ndarray, kappa: float, beta: np.ndarray, c0: np.ndarray,
                   iters: int = 30) -> np.ndarray:
    """Maximise eq. (C) for every row of ``S`` (R, J) on the simplex; a row is replaced only
    where ``f`` does not decrease from ``c0``."""
    R, J = S.shape
    P = J + 1
    b1 = np.broadcast_to(beta - 1.0, S.shape)

    def g(c):
        return -P * kappa * digamma(kappa * c) + kappa * S + b1 / c

    at = g(np.full(S.shape, 1.0 / J))
    lam_lo, lam_hi = at.min(axis=1), at.max(axis=1)  # sum c >= 1 at lam_lo, <= 1 at lam_hi
    lam = 0.5 * (lam_lo + lam_hi)
    c = _solve_c(lam, S, kappa, P, b1)
    for _ in range(iters):
        F = c.sum(axis=1) - 1.0
        if np.max(np.abs(F)) < 1e-12:
            break
        lam_lo = np.where(F > 0, lam, lam_lo)
        lam_hi = np.where(F > 0, lam_hi, lam)
        step = lam - F / _dc_dlam(c, kappa, P, b1).sum(axis=1)
        inside = (step > lam_lo) & (step < lam_hi)
        lam = np.where(inside, step, 0.5 * (lam_lo + lam_hi))
        c = _solve_c(lam, S, kappa, P, b1)
    c = c / c.sum(axis=1, keepdims=True)
    better = _centre_objective(c, S, kappa, P, b1) >= _centre_objective(c0, S, kappa, P, b1)
    return np.where(better[:, None], c, c0)


def sequential_m_step(votes: Votes, r: np.ndarray, prev: np.ndarray, *,
                      kappa: float = DEFAULT_KAPPA, shrink: float = DEFAULT_SHRINK,
                      prior_diag: float = 2.0, prior_off: float = 0.1,
                      centre: np.ndarray | None = None, skill: np.ndarray | None = None,
                      inner: int = 5) -> SequentialModel:
    """Maximise (J1) over the sequential annotator model with ``r`` fixed: ``inner`` rounds
    of eq. (Q-VB), eq. (C) and the skill step from ``centre`` and ``skill`` (default: the MAP
    confusion matrices of the counts summed over ``p``, eq. M of :mod:`gpsl.crowd`, and the
    one-coin skills, eq. M1). Each round is three exact block maximisations, so the result is
    never worse than the starting point."""
    if kappa <= 0 or shrink < 0 or prior_diag < 0 or prior_off < 0:
        raise ValueError("kappa must be > 0, shrink and the prior pseudo-counts >= 0")
    A, J = votes.A, votes.J
    N = sequential_counts(votes, r, prev)
    N2 = N.sum(axis=2)  # (A, J, J): the plain confusion counts
    beta0 = _beta_matrix(J, prior_diag, prior_off)
    if centre is None:
        W = N2 + beta0 - 1.0
        centre = W / W.sum(axis=2, keepdims=True)
    c = np.maximum(np.array(centre, dtype=float), 1e-300)
    c /= c.sum(axis=2, keepdims=True)
    if skill is None or shrink == 0:
        n_a = N2.sum(axis=(1, 2))
        C_a = np.trace(N2, axis1=1, axis2=2)
        skill = (C_a + prior_diag) / np.maximum(n_a + prior_diag + prior_off, 1e-300)
    s = np.clip(np.array(skill, dtype=float), 1e-9, 1.0 - 1e-9)
    model = SequentialModel(alpha=N + kappa * c[:, :, None, :], centre=c, kappa=float(kappa),
                            prior_diag=float(prior_diag), prior_off=float(prior_off),
                            shrink=float(shrink), skill_=s)
    for _ in range(max(1, int(inner)) if A else 0):
        alpha = N + kappa * c[:, :, None, :]  # eq. Q-VB
        elog = digamma(alpha) - digamma(alpha.sum(axis=-1, keepdims=True))
        S = elog.sum(axis=2).reshape(A * J, J)
        beta = model.centre_prior().reshape(A * J, J)
        c_new = update_centres(S, kappa, beta, c.reshape(A * J, J)).reshape(A, J, J)
        if shrink > 0:  # the skills given the centres
            s = _update_skills(model.skill_, np.log(c_new), shrink, prior_diag, prior_off,
                               offset=1.0)
        done = np.max(np.abs(c_new - c)) < 1e-9 and np.max(np.abs(s - model.skill_)) < 1e-9
        c = c_new
        model.centre, model.skill_ = c, s
        if done:
            break
    model.alpha = N + kappa * c[:, :, None, :]
    return model
