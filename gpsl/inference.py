r"""Variational Gaussian inference for GPSL (paper section 4, eq. lb2, Algorithm 1).

Notation (paper's symbols, 0-based arrays):

* ``n`` training tokens (the paper's NL), ``J`` labels, ``R = |S|`` dependencies
  with offsets ``o_d`` (GPSL1: ``(-1,)``, GPSL2: ``(-1, 1)``, GPSL4: ``(-2,-1,1,2)``).
* ``nb[t, d]`` - index of token ``t``'s ``d``-th neighbour ``t + o_d`` inside the
  same sentence, or ``-1`` when it falls outside (then the dependent term is absent).
* ``q(f^Uj) = N(m_Uj, V_Uj)`` with ``m_Uj = K_j alpha_j`` and the Khan et al. (2012)
  form ``V_Uj = (K_j^{-1} + diag(lambda_j))^{-1}``: O(n) parameters per label.
* ``q(f^Sd) = N(m_Sd, diag(v_Sd))`` over the ``J x J`` label pairs
  ``(y^d, y)`` (neighbour label first), prior ``N(0, I)``.
* ``r[t]`` - a categorical distribution over token ``t``'s label: one-hot for an
  observed label, a free variational distribution for a missing one.

The bound
---------
With ``g_d = m_Sd + v_Sd / 2`` and ``b_tq = m_tq + V_tq / 2`` (``V_tq`` the
diagonal of ``V_Uq``), define for every token

.. math::

   c_{tdq} = \log \sum_p r_{nb(t,d)}(p) \exp g_d[p, q], \qquad
   a_{tq} = b_{tq} + \sum_d c_{tdq}, \qquad \pi_t = \mathrm{softmax}(a_t).

The bound is

.. math::

   \mathcal{L} = \sum_j \tfrac12\big(\log|V_j K_j^{-1}| - \mathrm{tr}(K_j^{-1}V_j)
                 - m_j^\top K_j^{-1} m_j + n\big)
               + \sum_d \tfrac12 \sum_{pq}\big(\log v_{Sd} - v_{Sd} - m_{Sd}^2 + 1\big)
               + \sum_t \Big(\sum_q r_{tq} m_{tq}
                 + \sum_d \sum_{pq} r_{nb(t,d)}(p)\, r_{tq}\, m_{Sd}[p,q]
                 - \log\sum_q e^{a_{tq}}\Big)
               + \sum_{t\ \mathrm{missing}} H(r_t).

When every label is observed, ``r`` is one-hot, ``c_{tdq} = g_d[y_{nb}, q]`` and
this is exactly the paper's eq. (lb2) (the Jensen bound on the expected
log-partition function) plus the constants ``+n`` and ``+1`` that make the KL
terms exact, so ``L <= log p(Y|X)`` holds with equality at the true posterior
when the likelihood is Gaussian.

Missing labels (derivation)
---------------------------
A missing label ``y_t`` is a latent variable with a uniform prior; the
variational family is ``q(f) prod_{t missing} r_t(y_t)``. The expected
log pseudo-likelihood factor of token ``t`` is

.. math::

   E_{q,r}[f^{U}_{t y_t}] + \sum_d E[f^{Sd}(y_{nb}, y_t)]
   - E_{q,r}\big[\log\sum_q \exp(f^U_{tq} + \sum_d f^{Sd}(y_{nb(t,d)}, q))\big].

The first two terms are linear in ``r`` (mean field: the neighbour's and the
token's own label are independent under ``r``). For the third, Jensen's
inequality over ``f`` (independent Gaussians) and then over the neighbours'
labels (independent categoricals, distinct tokens for distinct offsets) gives

.. math::

   E[\log\textstyle\sum_q \cdots] \le
   \log\sum_q \exp\big(b_{tq} + \sum_d \log E_{r_{nb}}[e^{g_d(y_{nb}, q)}]\big)
   = \log\sum_q e^{a_{tq}},

an upper bound, so ``L`` stays a lower bound. For an observed neighbour it is
the paper's term exactly. Note that putting the expectation *inside* the
exponent (as the RNS of Algorithm 2 does at prediction time) would bound the
log-partition from below and break the bound, so training uses ``log E exp``.
Tokens with missing labels are never dropped and never filled with a hard guess:
their factor enters with ``r_t`` and they also inform their neighbours.

Coordinate ascent (Algorithm 1)
-------------------------------
Every update below never decreases ``L`` (they are exact block maximisations,
minorise-maximise steps, or steps accepted only when ``L`` does not drop):

* ``m_U``: the Hessian of the log-sum-exp is bounded by ``W = I/2`` (Boehning),
  so ``m_new = (K^{-1} + W)^{-1}(W m + r - pi)``, i.e.
  ``alpha_new = (I + K/2)^{-1}(m/2 + r - pi)``, maximises a global minoriser
  (one Cholesky of ``I + K/2`` per label serves all iterations until ``K``
  changes); an extrapolated step is kept when it is better.
* ``V_U``: the stationary point of ``L`` in ``V_j`` is ``V_j^{-1} = K_j^{-1} +
  diag(pi_j)`` (``dL/dV_tt = -pi_tj / 2``), so the Khan fixed point is
  ``lambda_j <- pi_j``; ``diag V`` is refreshed after each update and a damped
  step is used when the undamped one would lower ``L``. With
  ``B_j = I + Lambda^{1/2} K_j Lambda^{1/2} = L_j L_j^T``:
  ``log|K_j| - log|V_j| = 2 sum log diag L_j``,
  ``tr(K_j^{-1} V_j) = n - sum_t lambda_t V_tt``,
  ``diag V_j = diag K_j - colsum((L_j^{-1} Lambda^{1/2} K_j)^2)``: no inverse.
  Entries of ``lambda`` below ``lambda_floor`` are set to 0 (the bound remains
  exact for the ``q`` actually used) so tokens that cannot take label ``j``
  drop out of that label's Cholesky.
* ``m_S, v_S``: ``L`` is concave in them; maximised with L-BFGS-B on the exact
  gradient (``v_S`` through ``log v_S``).
* ``r``: for a missing token the objective is linear + entropy + terms
  ``-log(sum_p r_t(p) Z_s(p))`` from the neighbours' log-partitions, which are
  convex in ``r_t``; replacing them by their tangent gives a minoriser whose
  maximiser is a softmax (MM). Tokens are updated in colour classes
  ``t mod (2 max|o_d| + 1)`` so no two tokens of one class share a factor.
* ``theta`` (variational EM, outer loop): with ``q`` held fixed,
  ``dL/dtheta = 1/2 sum_j [alpha_j' dK alpha_j - tr(R_j dK)]``,
  ``R_j = Lambda^{1/2} B_j^{-1} Lambda^{1/2}``. For the linear kernel the
  maximiser over ``sigma_j^2`` is closed-form:
  ``sigma^2_new = sigma^2_old (n - sum_t lambda_t V_tt + alpha'm) / n``.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from scipy.linalg import cho_solve, lapack, solve_triangular
from scipy.optimize import minimize
from scipy.special import logsumexp

# --------------------------------------------------------------------------- problem


def neighbour_index(lengths, offsets) -> np.ndarray:
    """``nb[t, d]`` = index of token ``t + offsets[d]`` in the same sentence, else -1."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = int(lengths.sum())
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    pos = np.arange(n) - starts
    L = np.repeat(lengths, lengths)
    nb = np.full((n, len(offsets)), -1, dtype=np.int64)
    for d, o in enumerate(offsets):
        ok = (pos + o >= 0) & (pos + o < L)
        nb[ok, d] = np.arange(n)[ok] + o
    return nb


@dataclass
class Problem:
    """Fixed training data: label indices (-1 = missing) and neighbour structure."""

    y: np.ndarray  # (n,) int, -1 for a missing label
    nb: np.ndarray  # (n, R) neighbour index or -1
    J: int
    offsets: tuple
    #: optional ``(n, J)`` log-potentials ``e_t(y)`` on the labels of tokens whose label is
    #: missing (ignored where ``y >= 0``): extra evidence about a latent label, e.g. the
    #: crowd model's ``sum_a log pi_a[y, l_ta]``. The bound gains ``sum_t sum_y r_t(y) e_t(y)``
    #: and the ``r`` update adds ``e_t`` to its softmax argument.
    evidence: np.ndarray | None = None

    @classmethod
    def build(cls, lengths, y, offsets, J, evidence=None) -> Problem:
        y = np.asarray(y, dtype=np.int64)
        prob = cls(y=y, nb=neighbour_index(lengths, offsets), J=int(J), offsets=tuple(offsets))
        prob.set_evidence(evidence)
        return prob

    def set_evidence(self, evidence) -> None:
        """Replace the evidence array (``None`` for none); checked against ``(n, J)``."""
        if evidence is None:
            self.evidence = None
            return
        e = np.asarray(evidence, dtype=float)
        if e.shape != (self.n, self.J):
            raise ValueError(f"evidence must have shape {(self.n, self.J)}, not {e.shape}")
        if np.isnan(e).any() or np.isposinf(e).any():
            raise ValueError("evidence must not contain NaN or +inf")
        self.evidence = e

    def evidence_term(self, r) -> float:
        """``sum_{t missing} sum_y r_t(y) e_t(y)`` (0 without evidence; 0 * -inf = 0)."""
        if self.evidence is None:
            return 0.0
        m = self.missing
        rm, em = r[m], self.evidence[m]
        pos = rm > 0
        return float(np.sum(rm[pos] * em[pos]))

    @property
    def n(self) -> int:
        return int(self.y.shape[0])

    @property
    def R(self) -> int:
        return len(self.offsets)

    @property
    def missing(self) -> np.ndarray:
        return self.y < 0

    def colours(self) -> list[np.ndarray]:
        """Colour classes of the missing tokens (no two share a factor)."""
        span = 2 * max((abs(o) for o in self.offsets), default=0) + 1
        idx = np.flatnonzero(self.missing)
        return [c for c in (idx[idx % span == k] for k in range(span)) if c.size]


# --------------------------------------------------------------------------- state


@dataclass
class VariationalState:
    """Variational parameters gamma and hyper-parameters theta (the learned state)."""

    theta: np.ndarray  # (J, n_params) log kernel parameters per label
    alpha: np.ndarray  # (J, n)  m_Uj = K_j alpha_j
    lam: np.ndarray  # (J, n)  Khan parameters, V_Uj = (K_j^-1 + diag lam_j)^-1
    m_S: np.ndarray  # (R, J, J) means of f^Sd, [neighbour label, own label]
    v_S: np.ndarray  # (R, J, J) diagonal of V_Sd
    r: np.ndarray  # (n, J) label distributions (one-hot where observed)

    def copy(self) -> VariationalState:
        return VariationalState(*(np.array(getattr(self, k)) for k in self.__dataclass_fields__))


def initial_state(problem: Problem, theta0: np.ndarray) -> VariationalState:
    n, J, R = problem.n, problem.J, problem.R
    r = np.full((n, J), 1.0 / J)
    obs = ~problem.missing
    r[obs] = 0.0
    r[obs, problem.y[obs]] = 1.0
    return VariationalState(
        theta=np.tile(np.asarray(theta0, dtype=float), (J, 1)),
        alpha=np.zeros((J, n)),
        lam=np.full((J, n), 1.0 / J),
        m_S=np.zeros((R, J, J)),
        v_S=np.ones((R, J, J)),
        r=r,
    )


# --------------------------------------------------------------------------- the model


@dataclass
class _Cache:
    M: np.ndarray | None = None  # (J, n) m_U
    Vd: np.ndarray | None = None  # (J, n) diag V_U
    logdetB: np.ndarray | None = None  # (J,)
    sumlamV: np.ndarray | None = None  # (J,) sum_t lambda_t V_tt
    chol_mean: list = field(default_factory=list)  # Cholesky factor(s) of I + W K
    chol_mean_key: tuple | None = None
    K_list: list = field(default_factory=list)  # per-label K_j (non-linear kernels)
    K_theta: np.ndarray | None = None


class GPSLInference:
    """Algorithm 1 on one training set.

    Parameters
    ----------
    problem: the labels and neighbour structure.
    kernel: a kernel from :mod:`gpsl.kernels`.
    base, base_diag: ``kernel.base(X)`` and ``kernel.base_diag(X)`` for the training tokens.
    state: the variational state to start from (warm start) or ``None``.
    """

    def __init__(self, problem, kernel, base, base_diag, state=None, *, lambda_floor=1e-8,
                 mean_steps=15, n_threads=None):
        self.p = problem
        #: threads that refresh the labels' ``diag V_j`` side by side in :meth:`update_cov_U`
        #: (the Cholesky factors release the GIL); ``None``: :func:`default_threads`.
        #: The result does not depend on it, only the time.
        self.n_threads = default_threads() if n_threads is None else max(1, int(n_threads))
        self.kernel = kernel
        self.base = base
        self.base_diag = base_diag
        self.lambda_floor = float(lambda_floor)
        self.jitter = jitter_for(kernel, base_diag)
        self._rho = np.ones(problem.J)  # per-label damping of the Khan step
        self.rho_growth = 1.25  # growth of rho after a step accepted at the first try
        self.mean_steps = int(mean_steps)
        if state is None:
            if kernel.name == "rbf":
                theta0 = kernel.default_params(base_diag, base)
            else:
                theta0 = kernel.default_params(base_diag)
            state = initial_state(problem, theta0)
        self.s = state
        self.c = _Cache()
        self.refresh()

    # ----------------------------------------------------------------- pieces

    def K(self, j: int) -> np.ndarray:
        if self.kernel.name == "linear":
            return train_matrix(self.kernel, self.s.theta[j], self.base, self.jitter)
        if self.c.K_theta is None or not np.array_equal(self.c.K_theta, self.s.theta):
            self.c.K_list = [train_matrix(self.kernel, th, self.base, self.jitter)
                             for th in self.s.theta]
            self.c.K_theta = self.s.theta.copy()
        return self.c.K_list[j]

    def K_times(self, A: np.ndarray) -> np.ndarray:
        """Stacked ``[K_j A_j]_j`` for ``A`` of shape ``(J, n)``."""
        if self.kernel.name == "linear":
            s = np.exp(self.s.theta[:, 0])[:, None]
            return s * (A @ self.base) + (s * self.jitter) * A
        return np.stack([self.K(j) @ A[j] for j in range(self.p.J)])

    def Kdiag(self, j: int) -> np.ndarray:
        return self.kernel.diag(self.s.theta[j], self.base_diag) \
            + self.jitter * np.exp(self.s.theta[j, 0])

    def refresh(self):
        """Recompute m_U and diag V_U from (theta, alpha, lambda)."""
        J, n = self.p.J, self.p.n
        self.c.M = np.empty((J, n))
        self.c.Vd = np.empty((J, n))
        self.c.logdetB = np.empty(J)
        self.c.sumlamV = np.empty(J)
        self.c.M = self.K_times(self.s.alpha)
        for j in range(J):
            self._refresh_V(j)

    def _refresh_V(self, j: int, K: np.ndarray | None = None):
        K = self.K(j) if K is None else K
        lam = self.s.lam[j]
        lam[lam < self.lambda_floor] = 0.0
        vd, logdet = posterior_diag(K, self.Kdiag(j), lam)
        self.c.Vd[j] = vd
        self.c.logdetB[j] = logdet
        self.c.sumlamV[j] = float(lam @ vd)

    def gS(self) -> np.ndarray:
        return self.s.m_S + 0.5 * self.s.v_S

    def _c_terms(self, gS: np.ndarray, r: np.ndarray) -> np.ndarray:
        """c[d] (n, J): log E_{r_nb}[exp g_d(y_nb, q)], zero where no neighbour."""
        n, J, R = self.p.n, self.p.J, self.p.R
        c = np.zeros((R, n, J))
        for d in range(R):
            nbd = self.p.nb[:, d]
            has = nbd >= 0
            if not has.any():
                continue
            shift = gS[d].max(axis=0)
            E = np.exp(gS[d] - shift)
            with np.errstate(divide="ignore"):
                c[d][has] = np.log(r[nbd[has]] @ E) + shift
        return c

    def terms(self, M=None, Vd=None, gS=None, r=None) -> dict:
        M = self.c.M if M is None else M
        Vd = self.c.Vd if Vd is None else Vd
        gS = self.gS() if gS is None else gS
        r = self.s.r if r is None else r
        c = self._c_terms(gS, r)
        a = M.T + 0.5 * Vd.T + c.sum(axis=0)
        lse = logsumexp(a, axis=1)
        pi = np.exp(a - lse[:, None])
        return {"a": a, "lse": lse, "pi": pi, "c": c}

    def pair_counts(self, r=None) -> np.ndarray:
        """Expected label-pair counts N_d[p, q] = sum_t r_nb(t,d)(p) r_t(q), shape (R, J, J)."""
        r = self.s.r if r is None else r
        return np.stack([r[nb[nb >= 0]].T @ r[nb >= 0] for nb in self.p.nb.T])

    def _pair_term(self, m_S, r) -> float:
        tot = 0.0
        for d in range(self.p.R):
            nbd = self.p.nb[:, d]
            has = nbd >= 0
            tot += float(np.sum((r[nbd[has]] @ m_S[d]) * r[has]))
        return tot

    # ----------------------------------------------------------------- the bound

    def kl_U(self) -> float:
        """sum_j -KL(q(f_Uj) || p(f_Uj)) = 1/2 sum_j (-log|B_j| + sum lam V - alpha'm)."""
        return 0.5 * float(np.sum(-self.c.logdetB + self.c.sumlamV
                                  - np.einsum("jn,jn->j", self.s.alpha, self.c.M)))

    def kl_S(self, m_S=None, v_S=None) -> float:
        m_S = self.s.m_S if m_S is None else m_S
        v_S = self.s.v_S if v_S is None else v_S
        return 0.5 * float(np.sum(np.log(v_S) - v_S - m_S ** 2 + 1.0))

    def entropy(self, r=None) -> float:
        r = self.s.r if r is None else r
        rm = r[self.p.missing]
        with np.errstate(divide="ignore", invalid="ignore"):
            return float(-np.sum(np.where(rm > 0, rm * np.log(rm), 0.0)))

    def data_term(self, T=None, M=None, r=None, m_S=None) -> float:
        T = self.terms() if T is None else T
        M = self.c.M if M is None else M
        r = self.s.r if r is None else r
        m_S = self.s.m_S if m_S is None else m_S
        return float(np.sum(r * M.T)) + self._pair_term(m_S, r) - float(T["lse"].sum())

    def elbo(self) -> float:
        """The variational lower bound (eq. lb2, extended to missing labels)."""
        return (self.kl_U() + self.kl_S() + self.data_term() + self.entropy()
                + self.p.evidence_term(self.s.r))

    def gradients(self) -> dict:
        """Analytic gradients of the bound (used by the finite-difference tests).

        * ``m_U`` (J, n): dL/dm_Uj = r_j - pi_j - K_j^{-1} m_j = r_j - pi_j - alpha_j
        * ``m_S``, ``v_S`` (R, J, J): see :meth:`_S_objective`
        * ``theta`` (J, n_params): dL/dtheta_j with q = (m, V) held fixed
        """
        T = self.terms()
        R, J = self.p.R, self.p.J
        out = {"m_U": (self.s.r - T["pi"]).T - self.s.alpha}
        if R:
            x = np.concatenate([self.s.m_S.ravel(), np.log(self.s.v_S).ravel()])
            base_a = self.c.M.T + 0.5 * self.c.Vd.T
            g = -self._S_objective(x, base_a, self.pair_counts())[1]
            out["m_S"] = g[: R * J * J].reshape(R, J, J)
            out["v_S"] = g[R * J * J:].reshape(R, J, J) / self.s.v_S
        out["theta"] = np.stack([
            theta_gradient(self.kernel, self.s.theta[j], self.base, self.s.alpha[j],
                           self.s.lam[j], self.jitter) for j in range(J)])
        return out

    # ----------------------------------------------------------------- updates

    def _mean_curvature(self) -> np.ndarray:
        """Per-label Boehning curvatures w_j >= 1/2 (the LSE Hessian is <= I/2).

        For the linear kernel ``K_j = s_j (G + eps I)``; choosing ``w_j = c / s_j`` with
        ``c = max_j s_j / 2`` makes every ``I + w_j K_j`` the same matrix, so one Cholesky
        factor and one multi-right-hand-side solve serve all labels.
        """
        if self.kernel.name == "linear":
            s = np.exp(self.s.theta[:, 0])
            return (0.5 * s.max()) / s
        return np.full(self.p.J, 0.5)

    def _mean_factors(self):
        w = self._mean_curvature()
        key = (self.s.theta.tobytes(), w.tobytes())
        if self.c.chol_mean_key != key:
            if self.kernel.name == "linear":
                A = (w[0] * np.exp(self.s.theta[0, 0])) * self.base
                A[np.diag_indices_from(A)] += 1.0 + w[0] * np.exp(self.s.theta[0, 0]) \
                    * self.jitter
                self.c.chol_mean = [np.linalg.cholesky(A)]
            else:
                self.c.chol_mean = []
                for j in range(self.p.J):
                    A = w[j] * self.K(j)
                    A[np.diag_indices_from(A)] += 1.0
                    self.c.chol_mean.append(np.linalg.cholesky(A))
            self.c.chol_mean_key = key
        return self.c.chol_mean

    def _solve_mean(self, rhs: np.ndarray) -> np.ndarray:
        """alpha_j = (I + w_j K_j)^-1 rhs_j for all labels."""
        chols = self._mean_factors()
        if len(chols) == 1:
            return cho_solve((chols[0], True), rhs.T, check_finite=False).T
        return np.stack([cho_solve((chols[j], True), rhs[j], check_finite=False)
                         for j in range(self.p.J)])

    def _mean_objective(self, alpha, M, T):
        """Parts of L that depend on m_U (V, S, r fixed)."""
        return (float(np.sum(self.s.r * M.T)) - float(T["lse"].sum())
                - 0.5 * float(np.einsum("jn,jn->", alpha, M)))

    def update_mean_U(self, steps=None, track_r=True):
        """Boehning minorise-maximise steps on all m_Uj (with extrapolation).

        With missing labels, the own factor of a missing token pulls ``m`` towards its
        ``r_t`` (gradient ``r_t - pi_t``); an ``r_t`` left at its old value while ``m``
        moves turns every unlabeled token into a stale training target (uniform at the
        start), which on many-label tasks drags the local functions toward flat
        predictions. With ``track_r`` the r-block is updated after every accepted
        mean step (block coordinate ascent, still monotone), so ``r_t`` follows the
        model and a missing token's own factor contributes no spurious pull.
        """
        track_r = track_r and bool(self.p.missing.any())
        w = self._mean_curvature()[:, None]
        gS = self.gS()
        Vd = self.c.Vd
        T = self.terms(gS=gS)
        f_old = self._mean_objective(self.s.alpha, self.c.M, T)
        steps = self.mean_steps if steps is None else steps
        for _ in range(steps):
            # MM step: m_new = (K^-1 + W)^-1 (W m + r - pi)  <=>  alpha_new = (I + W K)^-1 (...)
            alpha_new = self._solve_mean(w * self.c.M + (self.s.r - T["pi"]).T)
            M_new = self.K_times(alpha_new)
            dA = alpha_new - self.s.alpha
            dM = M_new - self.c.M
            best = None
            step = 1.0
            while step <= 64.0:
                A_try = self.s.alpha + step * dA
                M_try = self.c.M + step * dM
                T_try = self.terms(M=M_try, Vd=Vd, gS=gS)
                f_try = self._mean_objective(A_try, M_try, T_try)
                if best is not None and f_try <= best[0]:
                    break
                if best is None or f_try > best[0]:
                    best = (f_try, A_try, M_try, T_try)
                step *= 2.0
            # recompute m = K alpha exactly: an extrapolated M + s dM multiplies any
            # round-off already in M by (1 - s), which compounds over iterations
            A_new = best[1]
            M_new = self.K_times(A_new)
            T_new = self.terms(M=M_new, Vd=Vd, gS=gS)
            f_new = self._mean_objective(A_new, M_new, T_new)
            if f_new < f_old:  # fall back to the plain MM step (a true minoriser)
                A_new = alpha_new
                M_new = self.K_times(A_new)
                T_new = self.terms(M=M_new, Vd=Vd, gS=gS)
                f_new = self._mean_objective(A_new, M_new, T_new)
                if f_new < f_old:
                    break
            self.s.alpha, self.c.M, T = A_new, M_new, T_new
            gain = f_new - f_old
            f_old = f_new
            if track_r:
                # keep the missing tokens' r in step with the model (see docstring)
                self.update_r(rounds=1)
                T = self.terms(gS=gS)
                f_old = self._mean_objective(self.s.alpha, self.c.M, T)
            if gain <= 1e-9 * max(1.0, abs(f_new)):
                break

    def update_cov_U(self, max_tries=4, skip_tol=1e-2):
        """Khan et al. fixed point ``lambda_j <- pi_j`` for all labels at once (block Jacobi).

        Every label whose ``lambda_j`` is more than ``skip_tol`` from ``pi_j`` takes the
        damped step ``lambda_j <- lambda_j + rho_j (pi_j - lambda_j)`` from the same ``pi``;
        the labels' ``diag V_j`` are refreshed side by side in ``n_threads`` threads (one
        Cholesky factor of ``B_j`` each, independent across labels). The joint step is
        accepted if the bound does not decrease; otherwise every ``rho_j`` is halved and
        the step retried. ``rho_j`` grows by 1.25 (up to 1) after a first-try success.
        If no joint step is accepted after ``max_tries``, the sweep falls back to
        :meth:`update_cov_U_sequential` (Algorithm 1's label-by-label order), so the
        update is monotone either way. Measured on chunking (GPSL2, 12 labels, one BLAS
        thread per Cholesky): 11.5 s per fit with two threads against 18.5 s label by label.
        """
        before = self.elbo()
        target = self._lam_target(self.terms()["pi"].T)  # (J, n)
        todo = [j for j in range(self.p.J)
                if np.max(np.abs(target[j] - self.s.lam[j])) > skip_tol]
        if not todo:
            return
        lam_old = self.s.lam.copy()
        old = (self.c.Vd.copy(), self.c.logdetB.copy(), self.c.sumlamV.copy())
        rho = self._rho.copy()
        if self.kernel.name != "linear":
            self.K(todo[0])  # build the cached K_j list before the threads read it
        for attempt in range(max_tries):
            for j in todo:
                self.s.lam[j] = lam_old[j] + rho[j] * (target[j] - lam_old[j])
            self._refresh_many(todo)
            after = self.elbo()
            if after >= before - 1e-10 * abs(before):
                self._rho[todo] = np.minimum(1.0, self.rho_growth * rho[todo]) \
                    if attempt == 0 else rho[todo]
                return
            rho[todo] *= 0.5
        self.s.lam[:] = lam_old
        self.c.Vd, self.c.logdetB, self.c.sumlamV = old
        self._rho[todo] = rho[todo]
        self.update_cov_U_sequential(max_tries, skip_tol)

    def _lam_target(self, pi: np.ndarray) -> np.ndarray:
        """The Khan fixed-point target ``pi`` with values below ``lambda_floor`` set to 0."""
        target = pi.copy()
        target[target < self.lambda_floor] = 0.0
        return target

    def _refresh_many(self, labels) -> None:
        """:meth:`_refresh_V` for several labels, in ``n_threads`` threads."""
        if self.n_threads <= 1 or len(labels) <= 1:
            for j in labels:
                self._refresh_V(j)
            return
        with ThreadPoolExecutor(min(self.n_threads, len(labels))) as pool:
            list(pool.map(self._refresh_V, labels))

    def update_cov_U_sequential(self, max_tries=4, skip_tol=1e-2):
        """Khan et al. fixed point ``lambda_j <- pi_j``, label by label as in Algorithm 1.

        For each label the step ``lambda_j <- lambda_j + rho_j (pi_j - lambda_j)`` (with
        ``pi`` from the refreshed ``diag V`` of the labels updated before it) is accepted
        only if the bound does not decrease; ``rho_j`` is halved on failure and grows
        by 1.25 (up to 1) after a step accepted at the first try. A label whose ``lambda_j``
        is within ``skip_tol`` of ``pi_j`` everywhere is at its fixed point and skipped.
        """
        before = self.elbo()
        for j in range(self.p.J):
            target = self._lam_target(self.terms()["pi"][:, j])
            lam_old = self.s.lam[j].copy()
            if np.max(np.abs(target - lam_old)) <= skip_tol:
                continue
            old = (self.c.Vd[j].copy(), self.c.logdetB[j], self.c.sumlamV[j])
            rho = self._rho[j]
            for attempt in range(max_tries):
                self.s.lam[j] = lam_old + rho * (target - lam_old)
                self._refresh_V(j)
                after = self.elbo()
                if after >= before - 1e-10 * abs(before):
                    before = after
                    # grow the step again only after a first-try success
                    self._rho[j] = min(1.0, 1.25 * rho) if attempt == 0 else rho
                    break
                rho *= 0.5
            else:
                self.s.lam[j] = lam_old
                self.c.Vd[j], self.c.logdetB[j], self.c.sumlamV[j] = old
                self._rho[j] = rho

    def _S_objective(self, x, base_a, counts):
        """-L and its gradient in x = (m_S, log v_S), everything else fixed.

        dL/dm_S[d,p,q] = N_d[p,q] - s_d[p,q] - m_S[d,p,q],
        dL/dv_S[d,p,q] = 1/2 (1/v - 1) - 1/2 s_d[p,q],
        with expected pair counts N_d = sum_t r_nb(t) r_t' and
        s_d[p,q] = sum_t pi_tq r_nb(p) e^{g[p,q]} / e^{c[t,d,q]}.
        """
        R, J = self.p.R, self.p.J
        m_S = x[: R * J * J].reshape(R, J, J)
        v_S = np.exp(x[R * J * J:].reshape(R, J, J))
        gS = m_S + 0.5 * v_S
        r = self.s.r
        c = self._c_terms(gS, r)
        a = base_a + c.sum(axis=0)
        lse = logsumexp(a, axis=1)
        pi = np.exp(a - lse[:, None])
        f = self._pair_term(m_S, r) - float(lse.sum()) + self.kl_S(m_S, v_S)
        soft = np.empty((R, J, J))
        for d in range(R):
            nbd = self.p.nb[:, d]
            has = nbd >= 0
            shift = gS[d].max(axis=0)
            E = np.exp(gS[d] - shift)
            with np.errstate(over="ignore"):
                ratio = pi[has] * np.exp(shift - c[d][has])
            soft[d] = E * (r[nbd[has]].T @ ratio)
        grad_m = counts - soft - m_S
        grad_logv = v_S * (0.5 * (1.0 / v_S - 1.0) - 0.5 * soft)
        return -f, -np.concatenate([grad_m.ravel(), grad_logv.ravel()])

    def update_S(self, maxiter=50):
        """Maximise L over (m_S, v_S) with L-BFGS-B on the exact gradient."""
        if self.p.R == 0:
            return
        R, J = self.p.R, self.p.J
        counts = self.pair_counts()
        base_a = self.c.M.T + 0.5 * self.c.Vd.T
        x0 = np.concatenate([self.s.m_S.ravel(), np.log(self.s.v_S).ravel()])
        f0 = self._S_objective(x0, base_a, counts)[0]
        bounds = [(None, None)] * (R * J * J) + [(-30.0, 5.0)] * (R * J * J)
        res = minimize(self._S_objective, x0, args=(base_a, counts), jac=True, method="L-BFGS-B",
                       bounds=bounds, options={"maxiter": maxiter})
        if res.fun <= f0:
            self.s.m_S = res.x[: R * J * J].reshape(R, J, J).copy()
            self.s.v_S = np.exp(res.x[R * J * J:]).reshape(R, J, J).copy()

    def update_r(self, rounds=2):
        """Minorise-maximise update of the label distributions of missing tokens."""
        classes = self.p.colours()
        if not classes:
            return
        R = self.p.R
        for _ in range(rounds):
            for cls in classes:
                gS = self.gS()
                T = self.terms(gS=gS)
                G = self.c.M.T.copy()  # own local term, (n, J)
                for d in range(R):
                    nbd = self.p.nb[:, d]
                    has = nbd >= 0
                    # own factor: sum_p r_nb(p) m_S[p, q]
                    G[has] += self.s.r[nbd[has]] @ self.s.m_S[d]
                    # as the d-th neighbour of s: sum_q r_s(q) m_S[p,q]
                    #   - sum_q pi_sq exp(g[p,q] - c[s,d,q])  (tangent of -lse_s)
                    s_idx = np.flatnonzero(has)
                    contrib = self.s.r[s_idx] @ self.s.m_S[d].T
                    shift = gS[d].max(axis=0)
                    E = np.exp(gS[d] - shift)
                    with np.errstate(over="ignore"):
                        ratio = T["pi"][s_idx] * np.exp(shift - T["c"][d][s_idx])
                    contrib -= ratio @ E.T
                    np.add.at(G, nbd[s_idx], contrib)
                Gc = G[cls]
                if self.p.evidence is not None:
                    Gc = Gc + self.p.evidence[cls]
                Gc -= Gc.max(axis=1, keepdims=True)
                rc = np.exp(Gc)
                rc /= rc.sum(axis=1, keepdims=True)
                self.s.r[cls] = rc

    def update_theta(self):
        """M-step of variational EM: maximise L over theta with q = (m, V) held fixed."""
        n = self.p.n
        if self.kernel.name == "linear":
            for j in range(self.p.J):
                am = float(self.s.alpha[j] @ self.c.M[j])
                ratio = (n - self.c.sumlamV[j] + am) / n
                ratio = float(np.clip(ratio, 1e-3, 1e3))
                self.s.theta[j, 0] += np.log(ratio)
                self.s.alpha[j] /= ratio  # keeps m = K alpha fixed
        else:
            for j in range(self.p.J):
                self._m_step_dense(j)
        self.refresh()

    def _m_step_dense(self, j: int, maxiter: int = 30):
        """Maximise -KL(q(f_Uj) || N(0, K_theta)) over theta_j with q = (m, V) fixed.

        ``V`` is formed once from the current Khan parameters; each evaluation costs one
        Cholesky of ``K_theta`` and two solves with ``n`` right-hand sides (no inverse).
        Afterwards ``alpha = K_new^{-1} m`` keeps the mean unchanged; ``lambda`` is kept.
        """
        m = self.c.M[j].copy()
        K_old = self.K(j)
        act, sl, Lb = B_factor(K_old, self.s.lam[j])
        V = K_old.copy()
        if act.size:
            C = solve_triangular(Lb, sl[:, None] * K_old[act, :], lower=True, check_finite=False)
            V -= C.T @ C
        logdet_V = 2.0 * float(np.sum(np.log(np.diag(np.linalg.cholesky(K_old))))) \
            - self.c.logdetB[j]
        th0 = self.s.theta[j].copy()

        def objective(th):
            f, g = neg_kl_and_grad(self.kernel, th, self.base, self.jitter, m, V, logdet_V)
            return -f, -g

        f0 = objective(th0)[0]
        res = minimize(objective, th0, jac=True, method="L-BFGS-B",
                       bounds=[(-10.0, 10.0)] * th0.size, options={"maxiter": maxiter})
        if res.fun <= f0:
            self.s.theta[j] = res.x  # the K_j cache is keyed on theta
            K_new = self.K(j)
            self.s.alpha[j] = cho_solve((np.linalg.cholesky(K_new), True), m,
                                        check_finite=False)

    # ----------------------------------------------------------------- Algorithm 1

    def sweep(self):
        self.update_r()
        self.update_mean_U()
        self.update_cov_U()
        self.update_S()
        self.update_r()
        return self.elbo()

    def fit(self, max_iter=100, tol=1e-4, learn_hyper=True, callback=None, inner_max=20,
            on_sweep=None):
        """Variational EM (Algorithm 1); returns the bound trace (one value per sweep).

        ``on_sweep(engine)`` (optional) runs after every sweep, before the stop rule; it may
        change the problem's evidence (:meth:`Problem.set_evidence`), e.g. the crowd model's
        M-step, and returns the bound after its change (or ``None`` to keep the sweep's).
        """
        t0 = time.perf_counter()
        trace = [self.elbo()]
        it = 0
        outer_prev = trace[0]
        if not learn_hyper:
            inner_max = max_iter
        while it < max_iter:
            # inner loop: coordinate ascent for fixed theta
            for _ in range(inner_max):
                it += 1
                trace.append(self.sweep())
                if on_sweep is not None:
                    extra = on_sweep(self)
                    if extra is not None:
                        trace[-1] = float(extra)
                if callback is not None:
                    callback({"iteration": it, "bound": trace[-1],
                              "seconds": time.perf_counter() - t0})
                if _converged(trace[-2], trace[-1], tol) or it >= max_iter:
                    break
            if not learn_hyper or it >= max_iter:
                break
            if _converged(outer_prev, trace[-1], tol) and len(trace) > 2:
                break
            outer_prev = trace[-1]
            self.update_theta()
        self.n_iter = it
        return trace


def _converged(old, new, tol) -> bool:
    """Relative improvement of the bound below ``tol``."""
    return abs(new - old) <= tol * max(1.0, abs(old))


# --------------------------------------------------------------------------- linear algebra


def default_threads() -> int:
    """Threads for per-label linear algebra: one more than the usable CPUs, at most 4.

    One extra thread keeps both cores busy when the number of labels to refresh is odd
    (basenp, 3 labels on 2 cores: 54 s per fit with 3 threads, 60 s with 2).
    """
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    return max(1, min(4, n + 1))


def jitter_for(kernel, base_diag) -> float:
    """Jitter added to the training covariance's diagonal, relative to its scale.

    ``K = X X'`` is rank-deficient whenever tokens outnumber features or share
    feature vectors; without jitter, components of ``alpha`` in the null space of
    ``K`` are invisible to the bound and an extrapolated mean step can inflate them
    until round-off dominates ``alpha' K alpha``. GPflow and GPML use the same fix.
    """
    if kernel.name == "linear":
        return 1e-6 * max(float(np.mean(base_diag)) if base_diag.size else 1.0, 1e-12)
    return 1e-6


def train_matrix(kernel, params, base, jitter) -> np.ndarray:
    """The training covariance ``K_j`` including jitter (scaled by the kernel variance)."""
    K = kernel.matrix(params, base)
    K[np.diag_indices_from(K)] += jitter * np.exp(params[0])
    return K


def posterior_diag(K: np.ndarray, Kdiag: np.ndarray, lam: np.ndarray):
    """diag of V = (K^-1 + diag(lam))^-1 and log|B|, B = I + L^1/2 K L^1/2.

    Only tokens with ``lam > 0`` (the active set A) enter the Cholesky factor
    ``B_A = L L'``. For an active token, ``V_tt = (1 - (B^-1)_tt) / lam_t``
    (expand ``V = K - K_{:A} Lam^1/2 B^-1 Lam^1/2 K_{A:}`` using
    ``Lam^1/2 K_{At} = (B - I) e_t / sqrt(lam_t)``), and ``diag(B^-1)`` is the column
    sums of squares of ``L^-1`` (one triangular inverse, n^3/3 flop, instead of a
    triangular solve with n right-hand sides). It loses relative precision when
    ``lam_t K_tt`` is tiny, so those tokens and the inactive ones use
    ``V_tt = K_tt - ||L^-1 Lam^1/2 K_{At}||^2``. Returns ``(diag V, log|B|)``.
    """
    act, sl, Lc = B_factor(K, lam)
    if act.size == 0:
        return Kdiag.copy(), 0.0
    Linv, info = lapack.dtrtri(Lc, lower=1)
    if info != 0:  # pragma: no cover - B is positive definite
        raise np.linalg.LinAlgError("triangular inverse failed")
    vd = Kdiag.copy()
    stable = lam[act] * Kdiag[act] >= 1e-4
    dBinv = np.einsum("ij,ij->j", Linv, Linv)
    vd[act[stable]] = (1.0 - dBinv[stable]) / lam[act[stable]]
    rest = np.setdiff1d(np.arange(lam.size), act[stable], assume_unique=True)
    if rest.size:
        C = Linv @ (sl[:, None] * K[np.ix_(act, rest)])
        vd[rest] = Kdiag[rest] - np.einsum("ij,ij->j", C, C)
    np.maximum(vd, 1e-12 * np.maximum(Kdiag, 1e-300), out=vd)
    return vd, 2.0 * float(np.sum(np.log(np.diag(Lc))))


def B_factor(K: np.ndarray, lam: np.ndarray):
    """(active indices, sqrt(lam_active), lower Cholesky of B on the active set)."""
    act = np.flatnonzero(lam > 0)
    sl = np.sqrt(lam[act])
    if act.size == 0:
        return act, sl, np.zeros((0, 0))
    B = (K if act.size == lam.size else K[np.ix_(act, act)]) * sl[:, None]
    B *= sl[None, :]
    B[np.diag_indices_from(B)] += 1.0
    return act, sl, np.linalg.cholesky(B)


def neg_kl_and_grad(kernel, params, base, jitter, m, V, logdet_V):
    """-KL(N(m, V) || N(0, K_theta)) and its gradient in theta (q held fixed).

    ``-KL = 1/2 (log|V| - log|K| - tr(K^-1 V) - m'K^-1 m + n)`` and
    ``d(-KL)/dtheta = 1/2 [a' dK a - tr(W dK)]`` with ``a = K^-1 m`` and
    ``W = K^-1 (K - V) K^-1``, all through the Cholesky factor of ``K``.
    """
    K = train_matrix(kernel, params, base, jitter)
    L = np.linalg.cholesky(K)
    n = K.shape[0]
    a = cho_solve((L, True), m, check_finite=False)
    KinvV = cho_solve((L, True), V, check_finite=False)
    logdet_K = 2.0 * float(np.sum(np.log(np.diag(L))))
    f = 0.5 * (logdet_V - logdet_K - float(np.trace(KinvV)) - float(m @ a) + n)
    W = cho_solve((L, True), (np.eye(n) - KinvV).T, check_finite=False)  # K^-1 (K - V) K^-1
    grad = np.array([0.5 * (float(a @ dK @ a) - float(np.sum(W * dK)))
                     for dK in kernel.grads(params, base, K)])
    return f, grad


def theta_gradient(kernel, params, base, alpha, lam, jitter=0.0) -> np.ndarray:
    """dL/dtheta_j with q held fixed: 1/2 [alpha' dK alpha - tr(R dK)] (R = L^1/2 B^-1 L^1/2)."""
    K = train_matrix(kernel, params, base, jitter)
    act, sl, Lc = B_factor(K, lam)
    n = K.shape[0]
    R = np.zeros((n, n))
    if act.size:
        Linv = solve_triangular(Lc, np.diag(sl), lower=True, check_finite=False)
        R[np.ix_(act, act)] = Linv.T @ Linv
    out = []
    for dK in kernel.grads(params, base, K):
        out.append(0.5 * (float(alpha @ dK @ alpha) - float(np.sum(R * dK))))
    return np.array(out)
