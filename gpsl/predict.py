r"""Prediction in GPSL (paper section 5, Algorithm 2) and Viterbi decoding.

Predictive distribution of the local latent functions for a test token
``x_*`` (paper, after eq. pred), with ``Omega = K^{-1}`` never formed:

.. math::

   m^{Uj}_* = k_{j*}^\top K_j^{-1} m_j = k_{j*}^\top \alpha_j, \qquad
   v^{Uj}_* = k_{j**} - k_{j*}^\top (K_j^{-1} - K_j^{-1} V_j K_j^{-1}) k_{j*}
            = k_{j**} - \| L_j^{-1} \Lambda_j^{1/2} k_{j*} \|^2 ,

because ``K^{-1} - K^{-1} V K^{-1} = (K + Lambda^{-1})^{-1} =
Lambda^{1/2} B^{-1} Lambda^{1/2}`` with ``B = I + Lambda^{1/2} K Lambda^{1/2} = L L^T``.

The refined normalised score (eq. rns) of label ``y`` at token ``l`` is the
softmax over labels of ``m + v/2 + sum_d E_{y^d}[g_d(y^d, y)]`` with
``g_d = m_Sd + v_Sd/2`` and the expectation taken under the neighbours' RNS
from the previous iteration (Algorithm 2, a Jacobi fixed-point iteration).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_triangular
from scipy.special import softmax

from gpsl.inference import B_factor, jitter_for, neighbour_index, train_matrix


class LatentPredictor:
    """Predictive mean and variance of f^U for new tokens (Cholesky factors cached)."""

    def __init__(self, kernel, X_train, theta, alpha, lam, batch_size=4096):
        self.kernel = kernel
        self.X_train = X_train
        self.theta = np.asarray(theta)
        self.alpha = np.asarray(alpha)
        self.lam = np.asarray(lam)
        self.batch_size = int(batch_size)
        self._factors = None

    def _get_factors(self):
        if self._factors is None:
            base = self.kernel.base(self.X_train)
            jitter = jitter_for(self.kernel, self.kernel.base_diag(self.X_train))
            self._factors = []
            for j in range(self.alpha.shape[0]):
                K = train_matrix(self.kernel, self.theta[j], base, jitter)
                self._factors.append(B_factor(K, self.lam[j]))
        return self._factors

    def __call__(self, X_test, with_variance=True):
        """(mean, variance), each ``(n_test, J)``."""
        J = self.alpha.shape[0]
        n_test = X_test.shape[0]
        mean = np.empty((n_test, J))
        var = np.empty((n_test, J))
        factors = self._get_factors() if with_variance else None
        for lo in range(0, n_test, self.batch_size):
            hi = min(lo + self.batch_size, n_test)
            Xb = X_test[lo:hi]
            base = self.kernel.base(self.X_train, Xb)  # (n, b)
            bdiag = self.kernel.base_diag(Xb)
            for j in range(J):
                Ks = self.kernel.matrix(self.theta[j], base)
                mean[lo:hi, j] = Ks.T @ self.alpha[j]
                if with_variance:
                    act, sl, Lc = factors[j]
                    kss = self.kernel.diag(self.theta[j], bdiag)
                    if act.size:
                        C = solve_triangular(Lc, sl[:, None] * Ks[act], lower=True,
                                             check_finite=False)
                        kss = kss - np.einsum("ij,ij->j", C, C)
                    var[lo:hi, j] = np.maximum(kss, 0.0)
        if not with_variance:
            var[:] = 0.0
        return mean, var


def rns(b, g, lengths, offsets, *, tol=1e-4, max_iter=100, clamp=None, schedule="jacobi"):
    """Algorithm 2: iterate the refined normalised scores to a fixed point.

    Parameters
    ----------
    b: ``(n, J)`` array ``m + v/2`` of the test tokens.
    g: ``(R, J, J)`` array ``m_S + v_S/2`` (``[d, neighbour label, own label]``).
    lengths: sentence lengths (tokens of all sentences are concatenated in ``b``).
    offsets: the dependency set as offsets.
    tol, max_iter: stop when no RNS value changes by more than ``tol``, or after
        ``max_iter`` passes.
    clamp: optional ``(n,)`` int array of known labels (-1 = unknown); known
        tokens keep a one-hot RNS, so they inform their neighbours exactly.
    schedule: ``"jacobi"`` computes every ``RNS^t`` from ``RNS^{t-1}`` exactly as
        Algorithm 2 is written; ``"sequential"`` sweeps positions left to right and
        uses the newest values (Gauss-Seidel), which avoids the two-cycles the Jacobi
        form can fall into between strongly coupled neighbours.

    Returns
    -------
    (marginals ``(n, J)``, number of passes)
    """
    if schedule not in ("jacobi", "sequential"):
        raise ValueError(f"schedule must be 'jacobi' or 'sequential', not {schedule!r}")
    b = np.asarray(b, dtype=float)
    lengths = np.asarray(lengths, dtype=np.int64)
    nb = neighbour_index(lengths, offsets)
    R = len(offsets)
    known = None
    if clamp is not None:
        clamp = np.asarray(clamp)
        known = clamp >= 0
        if not known.any():
            known = None

    def fix(P, idx=None):
        """Clamp known tokens (all of P, or the rows P[k] of tokens idx[k]) to one-hot."""
        if known is not None:
            rows = np.flatnonzero(known if idx is None else known[idx])
            P[rows] = 0.0
            P[rows, clamp[rows if idx is None else idx[rows]]] = 1.0
        return P

    P = fix(softmax(b, axis=1))  # RNS^0
    if R == 0 or b.shape[0] == 0:
        return P, 0
    has = [nb[:, d] >= 0 for d in range(R)]
    if schedule == "sequential":
        starts = np.cumsum(lengths) - lengths
        by_pos = [starts[lengths > p] + p for p in range(int(lengths.max()))]
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007
        if schedule == "jacobi":
            a = b.copy()
            for d in range(R):
                a[has[d]] += P[nb[has[d], d]] @ g[d]
            P_new = fix(softmax(a, axis=1))
            delta = float(np.max(np.abs(P_new - P)))
            P = P_new
        else:
            delta = 0.0
            for idx in by_pos:
                a = b[idx].copy()
                for d in range(R):
                    nbi = nb[idx, d]
                    ok = nbi >= 0
                    a[ok] += P[nbi[ok]] @ g[d]
                new = fix(softmax(a, axis=1), idx)
                delta = max(delta, float(np.max(np.abs(new - P[idx]))))
                P[idx] = new
        if delta < tol:
            break
    return P, it


def viterbi(b, g, lengths, offsets):
    """Most probable labelling of each sentence under the chain with node scores
    ``b`` and pair scores ``g`` (GPSL1: offsets ``(-1,)`` or ``(1,)``).

    Maximises ``sum_l b[l, y_l] + sum_l g(y_{l-1}, y_l)``: the decoding the paper
    compares with Algorithm 2 in Table 3 (UGM's Viterbi on node potentials
    ``exp(m + v/2)`` and edge potentials ``exp(m_S + v_S/2)``).
    """
    offsets = tuple(offsets)
    if offsets not in ((-1,), (1,)):
        raise ValueError("Viterbi decoding needs a single dependency on the previous "
                         "(offsets=(-1,)) or next (offsets=(1,)) label")
    # trans[p, q] = score of (label p at l-1, label q at l)
    trans = g[0] if offsets == (-1,) else g[0].T
    out = np.empty(b.shape[0], dtype=np.int64)
    start = 0
    for L in np.asarray(lengths, dtype=np.int64):
        out[start:start + L] = _viterbi_chain(b[start:start + L], trans)
        start += L
    return out


def _viterbi_chain(b, trans):
    L, J = b.shape
    if L == 0:
        return np.empty(0, dtype=np.int64)
    delta = b[0].copy()
    back = np.zeros((L, J), dtype=np.int64)
    for t in range(1, L):
        s = delta[:, None] + trans
        back[t] = np.argmax(s, axis=0)
        delta = s[back[t], np.arange(J)] + b[t]
    y = np.empty(L, dtype=np.int64)
    y[-1] = int(np.argmax(delta))
    for t in range(L - 1, 0, -1):
        y[t - 1] = back[t, y[t]]
    return y
