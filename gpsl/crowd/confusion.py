"""Annotator confusion models of Dawid and Skene: the parameters, their priors and the
M-step (eqs. VB, S, M, M1 of :mod:`gpsl.crowd`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import digamma, gammaln

from gpsl.crowd.vote_matrix import Votes

__all__ = ["DEFAULT_SHRINK", "LOG_FLOOR", "CrowdModel", "expected_counts", "m_step"]

#: floor of ``log pi`` (``pi = 1e-304``): a zero in ``pi`` (possible only with ``prior_off = 0``)
#: would make the evidence ``-inf`` and the engine's bound before its first ``r`` update
#: ``-inf``; with the floor every term stays finite and the change of the bound is < 1e-290.
LOG_FLOOR = -700.0
#: default strength ``kappa`` of the shrinkage of a confusion matrix towards the annotator's
#: one-coin matrix (pseudo-counts per row)
DEFAULT_SHRINK = 10.0


@dataclass
class CrowdModel:
    """Annotator parameters: ``log_pi`` (A, J, J; ``E_q[log pi]`` for a variational annotator),
    which annotators use one skill, the skills ``s_a`` (the one-coin skill, or the centre of
    the shrinkage prior of a full matrix)."""

    log_pi: np.ndarray
    one_coin: np.ndarray  # (A,) bool
    prior_diag: float
    prior_off: float
    shrink: float = 0.0
    skill: np.ndarray | None = None  # (A,)
    #: Dirichlet parameters of ``q(pi_a[y, :])`` of the annotators with a variational posterior
    #: (full matrices with shrinkage, eq. VB); NaN for the others. ``log_pi`` then holds
    #: ``E_q[log pi]``.
    alpha: np.ndarray | None = None

    @property
    def pi(self) -> np.ndarray:
        """Point estimates of the confusion matrices (posterior means where ``q`` is used)."""
        out = np.exp(self.log_pi)
        if self.alpha is not None:
            vb = ~np.isnan(self.alpha[:, 0, 0])
            out[vb] = self.alpha[vb] / self.alpha[vb].sum(axis=2, keepdims=True)
        return out

    def evidence(self, votes: Votes, M=None) -> np.ndarray:
        """``e_t(y) = sum_{v: t_v = t} log pi_{a_v}[y, l_v]``, shape (n, J) (0 without votes);
        ``log pi`` is floored at :data:`LOG_FLOOR` (see there)."""
        if votes.token.size == 0:
            return np.zeros((votes.n, votes.J))
        # log pi_a[y, l] for every vote: (V, J)
        return votes.token_sum(self.log_pi[votes.annotator, :, votes.label])

    def log_prior(self) -> float:
        """The annotator terms of (J1): ``log p(pi_a)`` for a MAP annotator (P0 or P1, normalised
        densities), ``log p(s_a) - KL(q(pi_a) || Dir(kappa m(s_a)))`` for a variational one."""
        A, J = self.log_pi.shape[:2]
        if J == 1:
            return 0.0
        total = 0.0
        for a in range(A):
            if self.one_coin[a]:
                s = float(np.exp(self.log_pi[a, 0, 0]))
                total += log_beta_pdf(s, self.prior_diag, self.prior_off)
            elif self.shrink > 0:
                s = float(self.skill[a])
                total += log_beta_pdf(s, self.prior_diag, self.prior_off) \
                    - kl_dirichlet_rows(self.alpha[a], _shrink_beta(J, s, self.shrink))
            else:
                total += _log_dirichlet_rows(self.log_pi[a],
                                             beta_matrix(J, self.prior_diag, self.prior_off))
        return float(total)


def log_beta_pdf(s: float, prior_diag: float, prior_off: float) -> float:
    """``log Beta(s; 1 + prior_diag, 1 + prior_off)``."""
    b1, b0 = 1.0 + prior_diag, 1.0 + prior_off
    log_s = np.log(s) if s > 0 else -np.inf
    log_1ms = np.log1p(-s) if s < 1.0 else -np.inf
    return float(gammaln(b1 + b0) - gammaln(b1) - gammaln(b0)
                 + xlogy(b1 - 1.0, log_s) + xlogy(b0 - 1.0, log_1ms))


def _log_dirichlet_rows(log_pi: np.ndarray, beta: np.ndarray) -> float:
    """``sum_y log Dir(pi[y, :]; beta[y, :])``."""
    lognorm = gammaln(beta.sum(axis=1)) - gammaln(beta).sum(axis=1)
    return float(lognorm.sum() + np.sum(xlogy(beta - 1.0, log_pi)))


def kl_dirichlet_rows(alpha: np.ndarray, beta: np.ndarray) -> float:
    """``sum_y KL(Dir(alpha[y]) || Dir(beta[y]))``."""
    a0 = alpha.sum(axis=1)
    return float(np.sum(gammaln(a0) - gammaln(alpha).sum(axis=1) - gammaln(beta.sum(axis=1))
                        + gammaln(beta).sum(axis=1))
                 + np.sum((alpha - beta) * (digamma(alpha) - digamma(a0)[:, None])))


def _dirichlet_elog(alpha: np.ndarray) -> np.ndarray:
    """``E[log pi]`` under ``Dir(alpha)`` row by row: ``psi(alpha) - psi(sum alpha)``."""
    return digamma(alpha) - digamma(alpha.sum(axis=1, keepdims=True))


def xlogy(c, logx):
    """``c * logx`` with ``0 * -inf = 0`` (elementwise)."""
    c = np.asarray(c, dtype=float)
    logx = np.asarray(logx, dtype=float)
    with np.errstate(invalid="ignore"):
        out = c * logx
    return np.where(c == 0, 0.0, out)


def beta_matrix(J: int, prior_diag: float, prior_off: float) -> np.ndarray:
    """Dirichlet parameters of the confusion rows without shrinkage (eq. P0):
    ``1 + prior_off + prior_diag [l = y]``."""
    return np.full((J, J), 1.0 + prior_off) + prior_diag * np.eye(J)


def _shrink_beta(J: int, s: float, shrink: float) -> np.ndarray:
    """Dirichlet parameters of the shrinkage prior (eq. PS): ``kappa m(s)`` with the
    one-coin matrix ``m(s)`` (``s`` on the diagonal, ``(1 - s) / (J - 1)`` elsewhere)."""
    B = np.full((J, J), shrink * (1.0 - s) / max(J - 1, 1))  # J = 1: no off-diagonal cell
    np.fill_diagonal(B, shrink * s)
    return B


def shrink_betas(J: int, s: np.ndarray, shrink: float) -> np.ndarray:
    """:func:`_shrink_beta` for a vector of skills, shape (len(s), J, J)."""
    B = np.broadcast_to((shrink * (1.0 - s) / max(J - 1, 1))[:, None, None],
                        (s.size, J, J)).copy()
    B[:, np.arange(J), np.arange(J)] = (shrink * s)[:, None]
    return B


def _dirichlet_elog_batch(alpha: np.ndarray) -> np.ndarray:
    """``E[log pi]`` under ``Dir(alpha)`` along the last axis."""
    return digamma(alpha) - digamma(alpha.sum(axis=-1, keepdims=True))


def expected_counts(votes: Votes, r: np.ndarray, M=None) -> np.ndarray:
    """``N_a[y, l] = sum_{v: a_v = a, l_v = l} r_{t_v}(y)``, shape (A, J, J)."""
    M = votes.design() if M is None else M
    N = np.asarray(M @ r).reshape(votes.A, votes.J, votes.J)  # [a, l, y]
    return N.transpose(0, 2, 1)


def _dirichlet_map(W: np.ndarray) -> np.ndarray:
    """Row-wise ``log(W / sum W)`` (eq. M), uniform for an all-zero row."""
    J = W.shape[1]
    tot = W.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        P = np.where(tot > 0, W / np.where(tot > 0, tot, 1.0), 1.0 / J)
        return np.log(P)


def _skill_objective(s: float, log_pi: np.ndarray, shrink: float, prior_diag: float,
                     prior_off: float) -> float:
    """The part of (J1) that depends on the shrinkage centre ``s`` (eq. S): concave in ``s``."""
    J = log_pi.shape[0]
    return log_beta_pdf(s, prior_diag, prior_off) + _log_dirichlet_rows(
        log_pi, _shrink_beta(J, s, shrink))


def trigamma(x: np.ndarray) -> np.ndarray:
    """``psi'(x)`` for ``x > 0``: the recurrence ``psi'(x) = psi'(x + 6) + sum_{k<6} 1/(x +
    k)^2`` and the asymptotic series at ``x + 6`` (absolute error < 1e-11); ten times faster
    than ``scipy.special.polygamma(1, x)``, which goes through the Hurwitz zeta function."""
    x = np.asarray(x, dtype=float)
    acc = np.zeros_like(x)
    for k in range(6):
        acc += 1.0 / (x + k) ** 2
    z = x + 6.0
    iz = 1.0 / z
    iz2 = iz * iz
    series = iz + 0.5 * iz2 + iz * iz2 * (1.0 / 6.0 - iz2 * (1.0 / 30.0 - iz2 * (
        1.0 / 42.0 - iz2 / 30.0)))
    return acc + series


def _skill_terms(s, D, Off, J, shrink, prior_diag, prior_off, offset=0.0):
    """Eq. (S) for arrays of skills ``s`` given ``D = sum_y log pi[y, y]`` and ``Off = sum of
    the off-diagonal log pi`` (``E_q`` of them for a variational matrix; constants dropped):
    with ``u = kappa (1 - s) / (J - 1)`` and ``o = offset``, ``(b1 - 1) log s + (b0 - 1)
    log(1 - s) - J log Gamma(o + kappa s) - J (J - 1) log Gamma(o + u) + kappa s D + u Off``,
    and its first two derivatives in ``s`` (concave: ``f'' < 0``). ``offset`` 0 is the
    shrinkage prior ``Dir(kappa m(s))`` of eq. (S), 1 the prior ``Dir(1 + kappa m(s))`` of
    the sequential model's centres (:mod:`gpsl.crowd.sequential`)."""
    b1, b0 = prior_diag, prior_off  # (1 + prior) - 1
    k, o = shrink, offset
    u = k * (1.0 - s) / (J - 1)
    f = (b1 * np.log(s) + b0 * np.log1p(-s) - J * gammaln(o + k * s)
         - J * (J - 1) * gammaln(o + u) + k * s * D + u * Off)
    d1 = (b1 / s - b0 / (1.0 - s) - J * k * digamma(o + k * s) + J * k * digamma(o + u)
          + k * D - k * Off / (J - 1))
    d2 = (-b1 / s ** 2 - b0 / (1.0 - s) ** 2 - J * k * k * trigamma(o + k * s)
          - J * k * k * trigamma(o + u) / (J - 1))
    return f, d1, d2


def update_skills(s0: np.ndarray, elog: np.ndarray, shrink: float, prior_diag: float,
                   prior_off: float, offset: float = 0.0) -> np.ndarray:
    """Maximise eq. (S) over ``s`` in ``[1e-9, 1 - 1e-9]`` for every annotator at once (the
    root of the decreasing ``f'`` by Newton steps inside a bisection bracket); an annotator
    keeps ``s0`` where the new value is not better. ``elog`` (A, J, J): ``E log pi`` (or
    ``log c``), ``offset`` as :func:`_skill_terms`. One label (``J = 1``): every confusion
    matrix is ``[[1]]`` and the skill enters nothing, so it stays ``s0``."""
    J = elog.shape[1]
    if J == 1:
        return np.array(s0, dtype=float, copy=True)
    lp = np.maximum(elog, LOG_FLOOR)
    D = np.trace(lp, axis1=1, axis2=2)
    Off = lp.sum(axis=(1, 2)) - D
    args = (D, Off, J, shrink, prior_diag, prior_off, offset)
    s = _newton_root(s0, lambda idx, x: _skill_terms(x, D[idx], Off[idx], *args[2:])[1:])
    f_new = _skill_terms(s, *args)[0]
    f_old = _skill_terms(np.clip(s0, 1e-9, 1.0 - 1e-9), *args)[0]
    return np.where(f_new >= f_old, s, s0)


def _newton_root(s0: np.ndarray, derivs) -> np.ndarray:
    """The root in ``[1e-9, 1 - 1e-9]`` of a decreasing ``f'`` (a concave objective's
    maximiser) for every entry of ``s0`` at once: Newton steps kept inside a bisection bracket
    that each step's sign of ``f'`` narrows, until no entry moves by 1e-12 (at most 100
    rounds). ``derivs(idx, s)`` returns ``(f', f'')`` at ``s`` for the entries ``idx``."""
    lo = np.full(s0.shape, 1e-9)
    hi = np.full(s0.shape, 1.0 - 1e-9)
    s = np.clip(np.array(s0, dtype=float), lo, hi)
    act = np.arange(s.size)  # entries still moving
    for _ in range(100):
        d1, d2 = derivs(act, s[act])
        lo[act] = np.where(d1 > 0, s[act], lo[act])
        hi[act] = np.where(d1 > 0, hi[act], s[act])
        step = s[act] - d1 / d2
        new = np.where((step > lo[act]) & (step < hi[act]), step,
                       0.5 * (lo[act] + hi[act]))
        moving = np.abs(new - s[act]) >= 1e-12
        s[act] = new
        act = act[moving]
        if act.size == 0:
            break
    return s


def _collapsed_terms(s, N, shrink, prior_diag, prior_off):
    """Eq. (S) at the optimal ``q`` (eq. VB) for arrays of skills ``s`` (A,) and counts ``N``
    (A, J, J): ``log Beta(s) + sum_y [log B(N_y + kappa m(s)_y) - log B(kappa m(s)_y)]``
    (constants dropped) and its first two derivatives in ``s``."""
    J = N.shape[1]
    k = shrink
    eye = np.eye(J, dtype=bool)
    m = np.where(eye, s[:, None, None], ((1.0 - s) / (J - 1))[:, None, None])  # (A, J, J)
    dm = np.where(eye, 1.0, -1.0 / (J - 1))  # dm/ds
    km = k * m
    f = (prior_diag * np.log(s) + prior_off * np.log1p(-s)
         + (gammaln(N + km) - gammaln(km)).sum(axis=(1, 2)))
    d1 = (prior_diag / s - prior_off / (1.0 - s)
          + k * (dm * (digamma(N + km) - digamma(km))).sum(axis=(1, 2)))
    d2 = (-prior_diag / s ** 2 - prior_off / (1.0 - s) ** 2
          + k * k * (dm * dm * (trigamma(N + km) - trigamma(km))).sum(axis=(1, 2)))
    return f, d1, d2


def _collapsed_skills(s0, N, shrink, prior_diag, prior_off):
    """Maximise eq. (S) over ``s`` jointly with ``q`` (at ``q``'s optimum, eq. VB, the
    objective is ``log B(N + kappa m(s)) - log B(kappa m(s))`` per row plus ``log p(s)``,
    concave in ``s``: ``log Gamma(N + x) - log Gamma(x)`` is concave in ``x``) for every
    annotator at once, by safeguarded Newton steps; an annotator keeps ``s0`` where the new
    value is not better. One exact solve instead of alternating eqs. (VB) and (S), which
    converges slowly."""
    s = _newton_root(s0, lambda idx, x: _collapsed_terms(x, N[idx], shrink, prior_diag,
                                                         prior_off)[1:])
    s0c = np.clip(np.array(s0, dtype=float), 1e-9, 1.0 - 1e-9)
    better = (_collapsed_terms(s, N, shrink, prior_diag, prior_off)[0]
              >= _collapsed_terms(s0c, N, shrink, prior_diag, prior_off)[0])
    return np.where(better, s, s0c)


def m_step(votes: Votes, r: np.ndarray, one_coin: np.ndarray, prior_diag: float,
           prior_off: float, M=None, *, shrink: float = 0.0, skill=None,
           inner: int | None = None) -> CrowdModel:
    """Maximise (J1) over the annotator parameters with ``r`` fixed.

    * one-coin annotators: eq. (M1), closed form;
    * full matrices without shrinkage (``shrink = 0``): eq. (M) with the prior (P0);
    * full matrices with shrinkage: ``q(pi_a)`` and ``s_a`` at once. For fixed ``s_a`` the
      best ``q`` is eq. (VB), ``Dir(N_a[y] + kappa m(s_a)[y])``, and there the annotator's
      terms are ``log p(s_a) + sum_y [log B(N_a[y] + kappa m(s_a)[y]) - log B(kappa
      m(s_a)[y])]`` (``B`` the multivariate Beta function), concave in ``s_a``: maximised
      by safeguarded Newton steps from ``skill`` (or the one-coin estimate), kept only if
      not worse, then ``q`` by (VB). (Alternating (VB) and (S) reaches the same point
      slowly; ``inner`` is accepted for compatibility and unused.)
    """
    if prior_diag < 0 or prior_off < 0 or shrink < 0:
        raise ValueError("prior pseudo-counts must be >= 0")
    A, J = votes.A, votes.J
    N = expected_counts(votes, r, M)
    log_pi = np.empty((A, J, J))
    alpha = np.full((A, J, J), np.nan)
    skills = np.full(A, np.nan)
    full: list[int] = []  # annotators with a shrunk full matrix: all at once below
    for a in range(A):
        n_a = float(N[a].sum())
        C_a = float(np.trace(N[a]))
        s1 = (C_a + prior_diag) / (n_a + prior_diag + prior_off) \
            if n_a + prior_diag + prior_off > 0 else 1.0 / J
        if J == 1:
            log_pi[a] = 0.0
            skills[a] = 1.0
        elif one_coin[a]:
            with np.errstate(divide="ignore"):
                log_pi[a] = np.log((1.0 - s1) / (J - 1)) if s1 < 1.0 else -np.inf
                np.fill_diagonal(log_pi[a], np.log(s1) if s1 > 0 else -np.inf)
            skills[a] = s1
        elif shrink > 0:
            s = s1 if skill is None or not np.isfinite(skill[a]) else skill[a]
            skills[a] = float(np.clip(s, 1e-9, 1.0 - 1e-9))
            full.append(a)
        else:
            log_pi[a] = _dirichlet_map(N[a] + beta_matrix(J, prior_diag, prior_off) - 1.0)
            skills[a] = s1
    if full:
        idx = np.array(full)
        s = _collapsed_skills(skills[idx], N[idx], shrink, prior_diag, prior_off)  # eq. S
        alpha[idx] = N[idx] + shrink_betas(J, s, shrink)  # eq. VB
        log_pi[idx] = _dirichlet_elog_batch(alpha[idx])
        skills[idx] = s
    np.maximum(log_pi, LOG_FLOOR, out=log_pi)
    return CrowdModel(log_pi=log_pi, one_coin=np.asarray(one_coin, dtype=bool).copy(),
                      prior_diag=float(prior_diag), prior_off=float(prior_off),
                      shrink=float(shrink), skill=skills, alpha=alpha)

