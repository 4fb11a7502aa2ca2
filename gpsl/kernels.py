"""Covariance functions for the local latent functions f^Uj (paper section 2, eq. 1).

Token features are sparse binary rows (``scipy.sparse.csr_matrix``). A kernel is
split in two steps so that the expensive part is shared by all labels and all
hyper-parameter values:

* ``base(X, Y)`` - a dense matrix that does not depend on the hyper-parameters
  (inner products ``X Y'`` for the linear kernel, squared distances for the
  squared exponential kernel);
* ``matrix(params, base)`` - the covariance matrix ``K`` for one label's
  hyper-parameters ``theta_j`` (log-scale parameters).

Each label ``j`` has its own ``theta_j`` as in the paper ("per-label
hyper-parameters"), stored as a row of a ``(J, n_params)`` array.

Callers never branch on a kernel's name: what differs between kernels is a method or a
capability attribute here (``scale_only``, ``jitter``, ``default_params``, ``weights``,
``weight_space``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.linalg import solve_triangular


def _dense_inner(X, Y=None) -> np.ndarray:
    """``X Y'`` as a dense float64 array (X, Y sparse or dense)."""
    Y = X if Y is None else Y
    P = X @ Y.T
    if sp.issparse(P):
        P = P.toarray()
    return np.asarray(P, dtype=np.float64)


def _row_sq_norms(X) -> np.ndarray:
    if sp.issparse(X):
        return np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    X = np.asarray(X, dtype=np.float64)
    return np.einsum("ij,ij->i", X, X)


class LinearKernel:
    """Linear kernel ``k(x, x') = sigma^2 x'x`` with ``theta = (log sigma^2,)``.

    The paper's experiments use this kernel (section 6). On sparse binary
    features ``x'x`` counts the features two tokens share.
    """

    name = "linear"
    param_names = ("log_variance",)
    #: ``K_j = exp(theta_j0) * base``: every label's covariance is a multiple of one matrix
    #: (one Cholesky factor serves all labels; the variance M-step is closed-form)
    scale_only = True
    #: prior variance of each feature weight when the user gives none (docs/model.md,
    #: "Hyper-parameters": chosen on GPSL2, partitions 0-2 of the paper's data sets)
    default_variance = 4.0

    def jitter(self, base_diag) -> float:
        """Jitter relative to the kernel's scale (``K = X X'`` is rank-deficient whenever
        tokens outnumber features or share feature vectors; GPflow and GPML use the same)."""
        return 1e-6 * max(float(np.mean(base_diag)) if np.size(base_diag) else 1.0, 1e-12)

    def base(self, X, Y=None) -> np.ndarray:
        return _dense_inner(X, Y)

    def base_diag(self, X) -> np.ndarray:
        return _row_sq_norms(X)

    def matrix(self, params, base: np.ndarray) -> np.ndarray:
        return np.exp(params[0]) * base

    def diag(self, params, base_diag: np.ndarray) -> np.ndarray:
        return np.exp(params[0]) * base_diag

    def grads(self, params, base: np.ndarray, K: np.ndarray | None = None) -> list[np.ndarray]:
        """dK/d(log sigma^2) = K."""
        return [self.matrix(params, base) if K is None else K]

    def weight_space(self, X, theta, inducing=None, Z_idx=None, exact=True):
        """The weight-space feature map, exact or with the jitter part at its prior (see
        :class:`LinearFeatures`); ``inducing`` and ``Z_idx`` are not used."""
        return LinearFeatures(X, self.jitter(self.base_diag(X)), exact=exact)

    def weights(self, theta, X_train, alpha) -> np.ndarray:
        """``(D, J)`` weights with ``m_j(x) = x' w_j``: ``w_j = sigma_j^2 X' alpha_j``, so the
        full mode's predictive mean costs one sparse product, independent of ``n``."""
        X = sp.csr_matrix(X_train, dtype=np.float64)
        return np.asarray(X.T @ (np.asarray(alpha).T * np.exp(np.asarray(theta)[:, 0])))

    def initial_params(self, X) -> np.ndarray:
        """Initial hyper-parameters for training tokens ``X`` (they do not depend on it)."""
        return self.default_params(None)

    def default_params(self, base_diag: np.ndarray, base=None) -> np.ndarray:
        # prior variance 1 for every feature weight (f = w'x, w ~ N(0, sigma^2 I)),
        # the counterpart of a CRF's L2 prior with sigma^2 = 1
        return np.array([0.0])


class RBFKernel:
    """Squared exponential kernel, paper eq. (1):
    ``k(x, x') = sigma_f^2 exp(-kappa/2 ||x - x'||^2)`` with
    ``theta = (log sigma_f^2, log kappa)``.

    ``base`` holds the squared distances ``||x||^2 + ||x'||^2 - 2 x'x'``.
    """

    name = "rbf"
    param_names = ("log_variance", "log_kappa")
    scale_only = False
    default_variance = None  # sigma_f^2 = 1 from default_params

    def jitter(self, base_diag) -> float:
        return 1e-6

    def base(self, X, Y=None) -> np.ndarray:
        nx = _row_sq_norms(X)
        ny = nx if Y is None else _row_sq_norms(Y)
        D2 = nx[:, None] + ny[None, :] - 2.0 * _dense_inner(X, Y)
        np.maximum(D2, 0.0, out=D2)
        return D2

    def base_diag(self, X) -> np.ndarray:
        return np.zeros(X.shape[0])

    def matrix(self, params, base: np.ndarray) -> np.ndarray:
        return np.exp(params[0]) * np.exp(-0.5 * np.exp(params[1]) * base)

    def diag(self, params, base_diag: np.ndarray) -> np.ndarray:
        return np.full(base_diag.shape, np.exp(params[0]))

    def grads(self, params, base: np.ndarray, K: np.ndarray | None = None) -> list[np.ndarray]:
        """dK/d(log sigma^2) = K,  dK/d(log kappa) = -kappa/2 * D2 * K."""
        K = self.matrix(params, base) if K is None else K
        return [K, -0.5 * np.exp(params[1]) * base * K]

    def weight_space(self, X, theta, inducing=500, Z_idx=None, exact=True):
        """Nystrom features on ``inducing`` tokens chosen by a pivoted Cholesky of ``K``
        (or on the training rows ``Z_idx`` when given)."""
        theta = np.atleast_2d(theta)
        if Z_idx is None:
            Z_idx = pivoted_cholesky_rows(self, theta[0], X, int(inducing))
        return NystromFeatures(self, X, theta, Z_idx, self.jitter(None))

    def weights(self, theta, X_train, alpha):
        return None  # no finite weight space: predict through k(X_train, x)

    def initial_params(self, X, sample: int = 2000) -> np.ndarray:
        """Initial hyper-parameters for training tokens ``X``: the length-scale from the
        squared distances of at most ``sample`` evenly spaced tokens (the full ``n x n`` matrix
        is not formed for a large training set)."""
        if X.shape[0] > sample:
            X = X[np.linspace(0, X.shape[0] - 1, sample).astype(np.int64)]
        return self.default_params(self.base_diag(X), self.base(X))

    def default_params(self, base_diag: np.ndarray, base: np.ndarray | None = None) -> np.ndarray:
        # length-scale from the median squared distance between distinct tokens
        if base is not None and base.size > 1:
            off = base[np.triu_indices_from(base, k=1)]
            off = off[off > 0]
            med = float(np.median(off)) if off.size else 1.0
        else:
            med = 1.0
        return np.array([0.0, np.log(1.0 / max(med, 1e-12))])


KERNELS = {"linear": LinearKernel, "rbf": RBFKernel, "se": RBFKernel}


def make_kernel(name: str):
    """Kernel object from its name: ``"linear"`` or ``"rbf"`` (alias ``"se"``)."""
    try:
        return KERNELS[str(name).lower()]()
    except KeyError:
        raise ValueError(f"unknown kernel {name!r}; expected 'linear' or 'rbf'") from None


# --------------------------------------------------------------------------- weight space
# Feature maps ``phi_j`` with ``Phi_j Phi_j' ~= K_j`` for the scalable mode (gpsl.sparse).
# Every map offers, for ``W`` of shape (D, J) and per-token arrays of shape (J, n):
#   times(theta, W) -> (J, n)     m_tj = phi_j(x_t)' W[:, j]
#   rtimes(theta, G) -> (D, J)    column j = Phi_j' G[j]
#   sq_times(theta, S) -> (J, n)  sum_k phi_jtk^2 S[k, j]
#   sq_rtimes(theta, P) -> (D, J) column j = (Phi_j^2)' P[j]
#   resid(theta) -> (J, n) or None  prior variance the features do not carry
#   dense(theta, j) -> (n, D)     Phi_j as a dense array (Khan family, small D only)
#   test(X_test)                  the same map at new tokens (D the same)


class LinearFeatures:
    """``phi_j(x_t) = sigma_j [x_t, sqrt(eps) e_t]``: the sparse token features plus one jitter
    feature per training token, so ``Phi_j Phi_j' = sigma_j^2 (X X' + eps I)`` is exactly the
    full mode's ``K_j`` (see :func:`gpsl.linalg.train_matrix`).

    With ``exact=False`` the jitter part ``eta_t ~ N(0, sigma_j^2 eps)`` is not a weight of
    ``q`` but stays at its prior: it adds ``sigma_j^2 eps`` to every ``V_tj`` (the residual
    variance) and nothing to the KL, still a valid bound. The mean-field family uses this: one
    weight per token would double the weights (and the optimiser's memory traffic) for a
    variance of about 1e-5 of the kernel's scale.
    """

    scale_only = True

    def __init__(self, X, jitter: float, exact: bool = True):
        X = sp.csr_matrix(X, dtype=np.float64)
        self.n, self.D0 = X.shape
        self.jitter = float(jitter)
        self.exact = bool(exact)
        if self.exact:
            eye = sp.identity(self.n, format="csr", dtype=np.float64) * np.sqrt(self.jitter)
            self.Phi = sp.hstack([X, eye], format="csr")
        else:
            self.Phi = X
        self.D = self.Phi.shape[1]
        # One stored matrix serves both products. A sparse-times-dense product is fast when
        # the dense array it reads or writes at random rows is the smaller one: for
        # Phi W (n x J out, W of D x J) the CSC form writes the output at random rows, the
        # CSR form reads W at random rows; for Phi' G the other way round. So with more
        # features than tokens (a CRF++ template on text: chunking, 800 sentences, 62k
        # features for 18.7k tokens) Phi is kept as CSC, whose transpose is CSR; with
        # fewer (the synthetic corpus: 2.6k features, 200k tokens) as CSR. Measured 2.6x
        # (Phi W) and 4.5x (Phi' G) faster than the wrong form.
        if self.D >= self.n:
            self.Phi = self.Phi.tocsc()
        self.PhiT = self.Phi.T  # a view in the other format, no copy
        binary = bool(np.all(self.Phi.data == 1.0))
        self.Phi2 = self.Phi if binary else self.Phi.multiply(self.Phi).asformat(
            self.Phi.format)
        self.Phi2T = self.Phi2.T

    @staticmethod
    def scales(theta) -> np.ndarray:
        return np.exp(0.5 * np.asarray(theta)[:, 0])

    # the products scale their result in place: a (D, J) temporary costs as much as the
    # sparse product itself (gpsl.sparse.mean_data)
    def times(self, theta, W):
        out = self.Phi @ W
        out *= self.scales(theta)
        return out.T

    def rtimes(self, theta, G):
        out = self.PhiT @ np.ascontiguousarray(G.T)
        out *= self.scales(theta)
        return out

    def sq_times(self, theta, S):
        out = self.Phi2 @ S
        out *= self.scales(theta) ** 2
        return out.T

    def sq_rtimes(self, theta, P):
        out = self.Phi2T @ np.ascontiguousarray(P.T)
        out *= self.scales(theta) ** 2
        return out

    def resid(self, theta):
        if self.exact:
            return None
        return np.repeat((self.scales(theta) ** 2 * self.jitter)[:, None], self.n, axis=1)

    def dense(self, theta, j):
        return self.Phi.toarray() * self.scales(theta)[j]

    def test(self, X_test):
        return _LinearTestFeatures(X_test, self)


class _LinearTestFeatures:
    """The linear map at new tokens: their own jitter features are new weights (prior N(0, 1)),
    so they add ``sigma_j^2 eps`` to the variance and nothing to the mean."""

    def __init__(self, X_test, train: LinearFeatures):
        self.X = sp.csr_matrix(X_test, dtype=np.float64)
        self.X2 = self.X.multiply(self.X).tocsr()
        self.n = self.X.shape[0]
        self.train = train

    def times(self, theta, W):
        return (self.X @ W[: self.train.D0] * self.train.scales(theta)).T

    def sq_times(self, theta, S):
        return (self.X2 @ S[: self.train.D0] * self.train.scales(theta) ** 2).T

    def resid(self, theta):
        sc2 = self.train.scales(theta) ** 2
        return np.repeat((sc2 * self.train.jitter)[:, None], self.n, axis=1)

    def dense(self, theta, j):
        pad = sp.csr_matrix((self.n, self.train.D - self.train.D0))
        return sp.hstack([self.X, pad], format="csr").toarray() * self.train.scales(theta)[j]


class NystromFeatures:
    """``phi_j(x) = L_j^{-1} k_j(Z, x)`` on inducing tokens ``Z`` (rows ``Z_idx`` of the
    training features), ``K_j(Z, Z) + jitter = L_j L_j'``; residual variance
    ``k_j(x, x) - |phi_j(x)|^2`` (the whitened sparse variational GP). The map depends on
    ``theta``, which is fixed at construction."""

    scale_only = False

    def __init__(self, kernel, X, theta, Z_idx, jitter: float):
        self.kernel = kernel
        self.X = sp.csr_matrix(X, dtype=np.float64)
        self.n = self.X.shape[0]
        self.theta = np.array(theta, dtype=float)
        self.Z_idx = np.asarray(Z_idx, dtype=np.int64)
        self.Z = self.X[self.Z_idx]
        self.D = int(self.Z_idx.size)
        self.jitter = float(jitter)
        base_zz = kernel.base(self.Z)
        base_xz = kernel.base(self.X, self.Z)
        bdiag = kernel.base_diag(self.X)
        self.L, self.Phi, self.res = [], [], []
        for th in self.theta:
            jit = self.jitter * np.exp(th[0])
            Kzz = kernel.matrix(th, base_zz)
            Kzz[np.diag_indices_from(Kzz)] += jit
            L = np.linalg.cholesky(Kzz)
            Kxz = kernel.matrix(th, base_xz)
            Kxz[self.Z_idx, np.arange(self.D)] += jit
            Phi = solve_triangular(L, Kxz.T, lower=True, check_finite=False).T
            self.L.append(L)
            self.Phi.append(np.ascontiguousarray(Phi))
            res = kernel.diag(th, bdiag) + jit - np.einsum("nd,nd->n", Phi, Phi)
            self.res.append(np.maximum(res, 0.0))
        self.res = np.array(self.res)

    def times(self, theta, W):
        return np.stack([P @ W[:, j] for j, P in enumerate(self.Phi)])

    def rtimes(self, theta, G):
        return np.stack([P.T @ G[j] for j, P in enumerate(self.Phi)], axis=1)

    def sq_times(self, theta, S):
        return np.stack([(P * P) @ S[:, j] for j, P in enumerate(self.Phi)])

    def sq_rtimes(self, theta, Pm):
        return np.stack([(P * P).T @ Pm[j] for j, P in enumerate(self.Phi)], axis=1)

    def resid(self, theta):
        return self.res

    def dense(self, theta, j):
        return self.Phi[j]

    def test(self, X_test):
        return _NystromTestFeatures(X_test, self)


class _NystromTestFeatures(NystromFeatures):
    def __init__(self, X_test, train: NystromFeatures):
        k = train.kernel
        self.X = sp.csr_matrix(X_test, dtype=np.float64)
        self.n = self.X.shape[0]
        self.D = train.D
        base_xz = k.base(self.X, train.Z)
        bdiag = k.base_diag(self.X)
        self.Phi, res = [], []
        for th, L in zip(train.theta, train.L):
            Phi = solve_triangular(L, k.matrix(th, base_xz).T, lower=True,
                                   check_finite=False).T
            self.Phi.append(np.ascontiguousarray(Phi))
            res.append(np.maximum(k.diag(th, bdiag) - np.einsum("nd,nd->n", Phi, Phi), 0.0))
        self.res = np.array(res)


def pivoted_cholesky_rows(kernel, theta, X, M: int, tol: float = 1e-8) -> np.ndarray:
    """Indices of up to ``M`` tokens chosen greedily by a pivoted Cholesky of ``K(X, X)``
    (each pick has the largest variance left unexplained by the picks before it)."""
    X = sp.csr_matrix(X, dtype=np.float64)
    n = X.shape[0]
    M = int(min(M, n))
    d = kernel.diag(theta, kernel.base_diag(X)).astype(float)
    top = float(d.max()) if n else 0.0
    rows = np.zeros((M, n))
    piv: list[int] = []
    for m in range(M):
        i = int(np.argmax(d))
        if d[i] <= tol * max(top, 1e-300):
            break
        col = kernel.matrix(theta, kernel.base(X, X[i])).ravel()
        rows[m] = (col - rows[:m].T @ rows[:m, i]) / np.sqrt(d[i])
        d -= rows[m] ** 2
        piv.append(i)
        d[piv] = -np.inf
    return np.array(piv, dtype=np.int64)
