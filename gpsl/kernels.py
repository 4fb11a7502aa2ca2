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
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


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

    def default_params(self, base_diag: np.ndarray) -> np.ndarray:
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
