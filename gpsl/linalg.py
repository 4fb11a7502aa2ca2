"""Dense linear algebra of the full GP (Cholesky factors, no inverses), shared by inference
and prediction."""

from __future__ import annotations

import os

import numpy as np
from scipy.linalg import cho_solve, lapack, solve_triangular


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
    """Jitter added to the training covariance's diagonal (see ``kernel.jitter``)."""
    return kernel.jitter(base_diag)


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
