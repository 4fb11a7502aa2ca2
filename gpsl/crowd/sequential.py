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

The crowd's confusion matrix as the target (``target="pooled"``)
-------------------------------------------------------------------
The one-coin target says an annotator who errs picks a wrong label at random. Crowd workers
do not: they miss entities (an entity labeled ``O``), mistake one type for a close one
(``ORG`` for ``LOC``), start a span late; every worker in the same ways, more or less often.
``target="pooled"`` shrinks each centre towards one matrix ``g`` shared by the crowd, learned
with the rest (a point estimate, the hierarchical prior of "community" Dawid-Skene models,
Venanzi et al. 2014, with one community):

.. math::

   c_a[y, :] \sim \mathrm{Dir}(1 + \kappa_1 g[y, :]),\qquad
   g[y, :] \sim \mathrm{Dir}(\beta_y)                                          \qquad (P3)

(``beta_y`` the fixed prior P0; no skills ``s_a``). An annotator's own rows still follow
their own votes; a row seen in few votes (a rare true label) follows the crowd's. Every
parameter of ``Dir(1 + kappa_1 g)`` is at least 1 and every ``beta_yl > 1``, so the MAP of
``(c, g)`` is not degenerate. (J1) gains ``sum_y log Dir(g[y]; beta_y)`` and the centres'
prior is ``1 + kappa_1 g`` in place of ``1 + kappa_1 m(s_a)``; the M-step's third block,
``g`` given the centres, is concave (:func:`update_pooled`, eq. G). On the CoNLL crowd it
predicts held-out votes better than the one-coin target and raises (J1), but the inferred
labels gain little (80.70 against 80.55 span F1) and fall where the held-out votes and (J1)
lead (weaker ``kappa``, stronger ``shrink``; docs/real-crowd.md): not the default.

The annotator terms of (J1) are ``sum_{a,y,p} -KL(q(pi_a[y,p]) || Dir(kappa c_a[y]))
+ sum_{a,y} log Dir(c_a[y]; 1 + kappa_1 m(s_a)[y]) + sum_a log Beta(s_a)``. With ``r`` fixed
they and the vote term depend on annotator ``a`` through the expected counts
``N_a[y, p, l] = sum_{v: a_v = a, p_v = p, l_v = l} r_{t_v}(y)``, and the M-step alternates
two exact block maximisations, so it never lowers (J1):

* ``(q, c)`` given ``s``: for fixed ``c`` the best ``q`` is conjugate,
  ``alpha_a[y, p, l] = N_a[y, p, l] + kappa c_a[y, l]`` (eq. Q-VB), and at that ``q``
  ``max_q E_q[sum_l N_l log pi_l] - KL(q || Dir(kappa c)) = log B(N + kappa c) - log
  B(kappa c)`` (``B`` the multivariate Beta function; the Dirichlet-multinomial evidence of
  the soft counts). So each row ``c = c_a[y, :]`` maximises

  .. math::  G(c) = \sum_p \sum_l [\log\Gamma(N_{pl} + \kappa c_l)
                                   - \log\Gamma(\kappa c_l)]
                    + \sum_l (\beta_l - 1) \log c_l                             \qquad (C)

  over the simplex (``beta = 1 + kappa_1 m(s)``; ``log Gamma(sum_l N_pl + kappa)`` does not
  depend on ``c``), and then ``q`` follows by (Q-VB). ``G`` is a sum of concave functions
  of single ``c_l`` (``psi(N + x) - psi(x)`` decreases in ``x``): the stationarity
  conditions ``g_l(c_l) = kappa sum_p [psi(N_pl + kappa c_l) - psi(kappa c_l)] + (beta_l -
  1)/c_l = lambda`` have one root ``c_l(lambda)`` each (``g_l`` decreases from ``+inf``), and
  ``sum_l c_l(lambda)`` decreases in ``lambda``: a Newton iteration on ``lambda`` with the
  bracket ``[min_l g_l(1/J), max_l g_l(1/J)]`` (at either end every ``c_l`` is on one side of
  ``1/J``), safeguarded Newton steps for each ``c_l``. A row is kept only if ``G`` did not
  decrease. Maximising ``c`` at the optimal ``q`` in one step instead of alternating ``q``
  and ``c`` matters: that alternation converges slowly on rows seen in few votes (each
  round moves ``c`` by a fraction ``N / (N + kappa)`` of the way), and the joint fit then
  kept gaining on the M-step alone (a 4-document slice of the CoNLL crowd: 30 sweeps
  without converging);
* ``s`` given ``c``: ``log Beta(s) + sum_y log Dir(c_a[y]; 1 + kappa_1 m(s)[y])`` is concave
  in ``s`` (``-log Gamma`` of an affine function), maximised by safeguarded Newton steps
  (eq. S of :mod:`gpsl.crowd` with ``log c`` for ``E log pi`` and ``Gamma(1 + .)``).
  With the pooled target (P3) this block is ``g`` given the centres instead (eq. G).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import digamma, gammaln

from gpsl.crowd.confusion import (
    DEFAULT_SHRINK,
    LOG_FLOOR,
    beta_matrix,
    kl_dirichlet_rows,
    log_beta_pdf,
    shrink_betas,
    trigamma,
    update_skills,
)
from gpsl.crowd.vote_matrix import Votes

__all__ = ["DEFAULT_KAPPA", "TARGETS", "SequentialModel", "previous_labels",
           "sequential_m_step", "update_pooled"]

#: the centres' shrinkage targets (eq. P2 and P3)
TARGETS = ("one-coin", "pooled")

#: default ``kappa``: pseudo-votes of the annotator's plain confusion row in each of the
#: sequential rows (eq. P2). A fixed prior, not chosen by the bound: on the CoNLL crowd (J1)
#: rises as ``kappa`` falls and as ``shrink`` grows while the inferred labels' span F1 falls
#: (``bench/results/crowd_real_priors.md``, docs/real-crowd.md)
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
    pooled: np.ndarray | None = None

    @property
    def target(self) -> str:
        """The centres' shrinkage target: ``"one-coin"`` (``m(s_a)``) or ``"pooled"`` (the
        crowd's confusion matrix ``g``, eq. P3)."""
        return "pooled" if self.pooled is not None else "one-coin"

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
        if self.shrink > 0 and self.pooled is not None:
            return np.broadcast_to(1.0 + self.shrink * self.pooled, (A, J, J))
        if self.shrink > 0:
            return 1.0 + shrink_betas(J, np.asarray(self.skill_, dtype=float), self.shrink)
        return np.broadcast_to(beta_matrix(J, self.prior_diag, self.prior_off), (A, J, J))

    def evidence(self, votes: Votes, prev: np.ndarray) -> np.ndarray:
        """``e_t(y) = sum_{v on t} E_q log pi_{a_v}[y, p_v, l_v]``, shape (n, J)."""
        if votes.token.size == 0:
            return np.zeros((votes.n, votes.J))
        return votes.token_sum(self.elog[votes.annotator, :, prev, votes.label])

    def log_prior(self) -> float:
        """The annotator terms of (J1): ``sum -KL(q || Dir(kappa c)) + sum log Dir(c; beta)``
        (``+ sum log Beta(s_a)`` with shrinkage to the one-coin matrix, ``+ sum_y log
        Dir(g[y]; beta_y)`` with the pooled target, eq. P3)."""
        A, J = self.centre.shape[:2]
        beta = self.centre_prior()
        lognorm = gammaln(beta.sum(axis=2)) - gammaln(beta).sum(axis=2)  # (A, J)
        total = float(lognorm.sum() + np.sum((beta - 1.0) * np.log(self.centre)))
        for a in range(A):
            for y in range(J):
                prior = np.broadcast_to(self.kappa * self.centre[a, y], (J + 1, J))
                total -= kl_dirichlet_rows(self.alpha[a, y], prior)
            if self.shrink > 0 and self.pooled is None:
                total += log_beta_pdf(float(self.skill_[a]), self.prior_diag, self.prior_off)
        if self.shrink > 0 and self.pooled is not None:  # log Dir(g[y]; beta_y), eq. P3
            b0 = beta_matrix(J, self.prior_diag, self.prior_off)
            total += float(np.sum(gammaln(b0.sum(axis=1)) - gammaln(b0).sum(axis=1))
                           + np.sum((b0 - 1.0) * np.log(np.maximum(self.pooled, 1e-300))))
        return total


def _centre_objective(c, N, kappa, b1):
    """Eq. (C) per row: ``sum_p sum_l [log Gamma(N_pl + kappa c_l) - log Gamma(kappa c_l)]
    + sum_l (beta_l - 1) log c_l`` (constants dropped); ``c``, ``b1`` (R, J), ``N``
    (R, P, J)."""
    kc = kappa * c[:, None, :]
    return ((gammaln(N + kc) - gammaln(kc)).sum(axis=(1, 2))
            + (b1 * np.log(c)).sum(axis=1))


def _g(c, N, kappa, b1):
    """``dG/dc_l`` of eq. (C) and its derivative in ``c_l`` (negative: ``G`` is a sum of
    concave functions of one ``c_l`` each)."""
    kc = kappa * c[:, None, :]
    g = kappa * (digamma(N + kc) - digamma(kc)).sum(axis=1) + b1 / c
    dg = kappa * kappa * (trigamma(N + kc) - trigamma(kc)).sum(axis=1) - b1 / (c * c)
    return g, dg


def _solve_c(lam, N, kappa, b1, c0, iters=60):
    """The root ``c`` of ``g(c) = lam`` for every entry, by Newton steps in ``c`` from
    ``c0``. ``g`` is convex and decreasing (``psi(N + x) - psi(x)`` and ``1/c`` are), so a
    Newton step from the right of the root lands left of it (or at a non-positive value,
    replaced by a tenth of the point) and from the left it converges monotonically."""
    c = np.clip(np.array(c0, dtype=float), 1e-300, None)
    return _decreasing_roots(lambda x: _g(x, N, kappa, b1), lam, c, iters)


def _decreasing_roots(fun, lam, x, iters):
    """The root of ``fun(x)[0] = lam`` (per row of ``x``) for every entry of ``x``, by Newton
    steps from ``x``; ``fun`` gives the function and its derivative, convex and decreasing in
    each entry, so a step from the right of a root lands left of it (or at a non-positive
    value, replaced by a tenth of the point) and from the left it converges monotonically.
    Ends when no entry moves by more than 1e-12 of itself, or after ``iters`` steps."""
    lam = lam[:, None]
    for _ in range(iters):
        v, dv = fun(x)
        new = x - (v - lam) / dv
        new = np.where(new > 0, new, 0.1 * x)
        done = np.max(np.abs(new - x) / x) < 1e-12
        x = new
        if done:
            break
    return x


def _pooled_objective(g, logc_sum, A, shrink, b1):
    """Eq. (G) per row: ``sum_l [shrink g_l S_l - A log Gamma(1 + shrink g_l)
    + (beta_l - 1) log g_l]``."""
    return (shrink * g * logc_sum - A * gammaln(1.0 + shrink * g)
            + b1 * np.log(np.maximum(g, 1e-300))).sum(axis=-1)


def update_pooled(log_c: np.ndarray, shrink: float, g0: np.ndarray | None = None,
                  prior_diag: float = 2.0, prior_off: float = 0.1,
                  iters: int = 100) -> np.ndarray:
    r"""The crowd's confusion matrix ``g`` (J, J) of eq. (P3) given the centres (``log_c``
    (A, J, J)): each row maximises

    .. math:: \log \mathrm{Dir}(g[y]; \beta_y)
              + \sum_a \log \mathrm{Dir}(c_a[y]; 1 + \kappa_1 g[y])
              = \mathrm{const} + \sum_l [\kappa_1 g_l S_l - A \log\Gamma(1 + \kappa_1 g_l)
              + (\beta_{yl} - 1) \log g_l]                                   \qquad (G)

    (``S_l = sum_a log c_a[y, l]``; ``sum_l (1 + kappa_1 g_l) = J + kappa_1`` is fixed;
    ``beta_y`` the fixed prior P0), a sum of concave functions of one ``g_l`` each on the
    simplex. Its stationarity conditions ``h_l(g_l) = kappa_1 S_l - A kappa_1 psi(1 +
    kappa_1 g_l) + (beta_l - 1) / g_l = lambda`` have one root each (``h_l`` decreases from
    ``+inf``: every ``beta_l > 1``, so no ``g_l`` reaches 0 and every centre's prior
    parameter stays above 1), and ``sum_l g_l(lambda)`` decreases in ``lambda``: bisection
    on ``lambda`` between ``min_l h_l(1/J)`` and ``max_l h_l(1/J)`` with Newton steps inside
    it, safeguarded Newton steps for each root (as the centres', eq. C). A row is kept
    from ``g0`` where (G) would decrease."""
    A, J, _ = log_c.shape
    S = np.maximum(log_c, LOG_FLOOR).sum(axis=0)  # (J, J)
    b1 = beta_matrix(J, prior_diag, prior_off) - 1.0
    if np.any(b1 <= 0):
        raise ValueError("the pooled target needs prior_off > 0")

    def h(g):
        return (shrink * S - A * shrink * digamma(1.0 + shrink * g) + b1 / g,
                -A * shrink * shrink * trigamma(1.0 + shrink * g) - b1 / (g * g))

    def roots(lam, g):  # h is convex and decreasing in each entry (as _solve_c's g)
        return _decreasing_roots(h, lam, g, 100)

    g = np.full((J, J), 1.0 / J) if g0 is None else np.maximum(np.array(g0, float), 1e-300)
    at, _ = h(np.full((J, J), 1.0 / J))
    lam_lo, lam_hi = at.min(axis=1), at.max(axis=1)  # sum g >= 1 at lam_lo, <= 1 at lam_hi
    v0, _ = h(g)
    lam = np.clip((g * v0).sum(axis=1), lam_lo, lam_hi)
    g = roots(lam, g)
    for _ in range(iters):
        F = g.sum(axis=1) - 1.0
        if np.max(np.abs(F)) < 1e-12:
            break
        lam_lo = np.where(F > 0, lam, lam_lo)
        lam_hi = np.where(F > 0, lam_hi, lam)
        _, dv = h(g)
        step = lam - F / (1.0 / dv).sum(axis=1)  # dg/dlambda = 1 / h'(g)
        inside = (step > lam_lo) & (step < lam_hi)
        lam = np.where(inside, step, 0.5 * (lam_lo + lam_hi))
        g = roots(lam, g)
    g = g / g.sum(axis=1, keepdims=True)
    if g0 is not None:
        better = (_pooled_objective(g, S, A, shrink, b1)
                  >= _pooled_objective(g0, S, A, shrink, b1))
        g = np.where(better[:, None], g, g0)
    return g


def update_centres(N: np.ndarray, kappa: float, beta: np.ndarray, c0: np.ndarray,
                   iters: int = 30) -> np.ndarray:
    """Maximise eq. (C) for every row (``N`` (R, P, J) the counts of its ``P`` previous-label
    rows, ``beta`` (R, J) the prior of ``c``) on the simplex; a row is replaced only where
    ``G`` does not decrease from ``c0``."""
    R, _, J = N.shape
    b1 = np.broadcast_to(beta - 1.0, (R, J))
    at, _ = _g(np.full((R, J), 1.0 / J), N, kappa, b1)
    lam_lo, lam_hi = at.min(axis=1), at.max(axis=1)  # sum c >= 1 at lam_lo, <= 1 at lam_hi
    g0, _ = _g(c0, N, kappa, b1)
    lam = np.clip((c0 * g0).sum(axis=1), lam_lo, lam_hi)  # exact at the optimum
    c = _solve_c(lam, N, kappa, b1, c0)
    act = np.arange(R)  # rows still moving: the others are left alone
    for _ in range(iters):
        F = c[act].sum(axis=1) - 1.0
        keep = np.abs(F) >= 1e-10
        act, F = act[keep], F[keep]
        if act.size == 0:
            break
        lam_lo[act] = np.where(F > 0, lam[act], lam_lo[act])
        lam_hi[act] = np.where(F > 0, lam_hi[act], lam[act])
        _, dg = _g(c[act], N[act], kappa, b1[act])
        step = lam[act] - F / (1.0 / dg).sum(axis=1)  # dc/dlambda = 1 / g'(c)
        inside = (step > lam_lo[act]) & (step < lam_hi[act])
        lam[act] = np.where(inside, step, 0.5 * (lam_lo[act] + lam_hi[act]))
        c[act] = _solve_c(lam[act], N[act], kappa, b1[act], c[act])
    c = c / c.sum(axis=1, keepdims=True)
    better = _centre_objective(c, N, kappa, b1) >= _centre_objective(c0, N, kappa, b1)
    return np.where(better[:, None], c, c0)


def sequential_m_step(votes: Votes, r: np.ndarray, prev: np.ndarray, *,
                      kappa: float = DEFAULT_KAPPA, shrink: float = DEFAULT_SHRINK,
                      prior_diag: float = 2.0, prior_off: float = 0.1,
                      centre: np.ndarray | None = None, skill: np.ndarray | None = None,
                      inner: int = 10, target: str = "one-coin",
                      pooled: np.ndarray | None = None) -> SequentialModel:
    """Maximise (J1) over the sequential annotator model with ``r`` fixed: the centres and
    the rows' posteriors at once (eq. C, then eq. Q-VB), alternating with the skills (eq. S)
    for up to ``inner`` rounds, from ``centre`` and ``skill`` (default: the MAP confusion
    matrices of the counts summed over ``p``, eq. M of :mod:`gpsl.crowd`, and the one-coin
    skills, eq. M1). Every step is an exact block maximisation, so the result is never
    worse than the starting point."""
    if kappa <= 0 or shrink < 0 or prior_diag < 0 or prior_off < 0:
        raise ValueError("kappa must be > 0, shrink and the prior pseudo-counts >= 0")
    A, J = votes.A, votes.J
    N = sequential_counts(votes, r, prev)
    N2 = N.sum(axis=2)  # (A, J, J): the plain confusion counts
    beta0 = beta_matrix(J, prior_diag, prior_off)
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
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, not {target!r}")
    g = None
    if target == "pooled" and shrink > 0:
        g = (update_pooled(np.log(c), shrink, None, prior_diag, prior_off) if pooled is None
             else np.array(pooled, dtype=float))
    model = SequentialModel(alpha=N + kappa * c[:, :, None, :], centre=c, kappa=float(kappa),
                            prior_diag=float(prior_diag), prior_off=float(prior_off),
                            shrink=float(shrink), skill_=s, pooled=g)
    rows = N.reshape(A * J, J + 1, J)
    for _ in range(max(1, int(inner)) if A else 0):
        beta = model.centre_prior().reshape(A * J, J)
        c_new = update_centres(rows, kappa, beta, c.reshape(A * J, J)).reshape(A, J, J)
        s_new, g_new = s, g
        if shrink > 0 and g is None:  # the skills given the centres
            s_new = update_skills(s, np.log(c_new), shrink, prior_diag, prior_off,
                                   offset=1.0)
        elif shrink > 0:  # the crowd's matrix given the centres (eq. G)
            g_new = update_pooled(np.log(c_new), shrink, g, prior_diag, prior_off)
        done = (np.max(np.abs(c_new - c)) < 1e-10 and np.max(np.abs(s_new - s)) < 1e-10
                and (g is None or np.max(np.abs(g_new - g)) < 1e-10))
        c, s, g = c_new, s_new, g_new
        model.centre, model.skill_, model.pooled = c, s, g
        if done or shrink == 0:
            break
    model.alpha = N + kappa * c[:, :, None, :]  # eq. Q-VB
    return model
