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

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.linalg import solve_triangular
from scipy.special import logsumexp, softmax

from gpsl.likelihood import neighbour_index
from gpsl.linalg import B_factor, train_matrix
from gpsl.rns_sweeps import SWITCH, _softmax_rows, probit_scale, rns_adaptive
from gpsl.sparse import khan_factors, predictive_variance


class LatentPredictor:
    """Predictive mean and variance of f^U for new tokens in the full mode.

    The mean of a kernel with a finite weight space (the linear kernel) is ``X_* W`` with
    ``W = kernel.weights(...)`` computed once: one sparse product per call, independent of the
    training size. The variance needs the Cholesky factors of ``B_j`` (computed on first use and
    cached) and is computed only when asked for (``with_variance=True``).
    """

    def __init__(self, kernel, X_train, theta, alpha, lam, batch_size=4096):
        self.kernel = kernel
        self.X_train = X_train
        self.theta = np.asarray(theta)
        self.alpha = np.asarray(alpha)
        self.lam = np.asarray(lam)
        self.batch_size = int(batch_size)
        self._factors = None
        self._weights = kernel.weights(self.theta, X_train, self.alpha)

    def _get_factors(self):
        if self._factors is None:
            base = self.kernel.base(self.X_train)
            jitter = self.kernel.jitter(self.kernel.base_diag(self.X_train))
            self._factors = []
            for j in range(self.alpha.shape[0]):
                K = train_matrix(self.kernel, self.theta[j], base, jitter)
                self._factors.append(B_factor(K, self.lam[j]))
        return self._factors

    def __call__(self, X_test, with_variance=True):
        """(mean, variance), each ``(n_test, J)``; the variance is zeros unless asked for."""
        J = self.alpha.shape[0]
        n_test = X_test.shape[0]
        var = np.zeros((n_test, J))
        if self._weights is not None and not with_variance:
            return np.asarray(X_test @ self._weights), var
        mean = np.empty((n_test, J))
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
        return mean, var


class SparsePredictor:
    """Predictive mean and variance of f^U in the scalable mode (:mod:`gpsl.sparse`):
    ``m_* = phi(x_*)' mu``, ``v_* = phi(x_*)' Sigma phi(x_*) + e_*``."""

    def __init__(self, features, state):
        self.features = features
        self.s = state
        self._chol = None

    def __call__(self, X_test, with_variance=True):
        test = self.features.test(X_test)
        mean = np.ascontiguousarray(test.times(self.s.theta, self.s.W).T)
        if not with_variance:
            return mean, np.zeros_like(mean)
        if self.s.family == "khan" and self._chol is None:
            self._chol = khan_factors(self.features, self.s.theta, self.s.cov)
        var = predictive_variance(self.features, self.s.theta, self.s.cov, self.s.family, test,
                                  self._chol)
        return mean, np.maximum(var.T, 0.0)


SCHEDULES = ("adaptive", "jacobi", "sequential")


def rns(b, g, lengths, offsets, *, tol=1e-4, max_iter=100, clamp=None, schedule="jacobi",
        damping=1.0, b_var=None, g_var=None, switch=SWITCH, per_sentence=False,
        extrapolate=True):
    r"""Algorithm 2: iterate the refined normalised scores to a fixed point.

    **Uncertainty-aware scores** (``b_var``/``g_var`` given; not in the paper). Under ``q`` the
    score of label ``y`` at token ``l`` given the neighbours' RNS is Gaussian,

    .. math::

       \eta_{ly} = f^U_y(x_l) + \sum_d \sum_{y'} RNS_{l+d}(y') f^S_d(y', y), \qquad
       \mu_{ly} = b_{ly} + \sum_d \sum_{y'} RNS_{l+d}(y')\, g_d(y', y), \qquad
       s^2_{ly} = v_{ly} + \sum_d \sum_{y'} RNS_{l+d}(y')^2\, v^S_d(y', y)

    (the mean-field treats the neighbours' labels as independent of the functions, so the
    pair-function terms add their variances with weights ``RNS^2``). The predictive marginal
    ``E_q[softmax(eta)]`` has no closed form; the probit (MacKay 1992) approximation of each
    logistic factor, ``E[sigma(eta)] ~ sigma(kappa(s^2) mu)`` with
    ``kappa(s^2) = (1 + pi s^2/8)^{-1/2}``, applied per label (the "mean-field softmax" of
    Lu, Ie and Sha 2020) gives ``RNS_l ~ softmax_y(kappa(s^2_{ly}) mu_{ly})``, which replaces
    the softmax of Algorithm 2 in every iteration. With ``b_var = g_var = 0`` every
    ``kappa = 1`` and this is Algorithm 2 exactly; larger variances flatten the scores. The
    per-label factor under-flattens (two labels with variance ``v`` each: the difference has
    variance ``2v``, the exact probit is ``sigma(kappa(2v) dm)``); a temperature fitted after it
    (:mod:`gpsl.calibration`) absorbs such a common factor.

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
        form can fall into between strongly coupled neighbours. ``"adaptive"``
        (:func:`gpsl.rns_sweeps.rns_adaptive`): the undamped Jacobi passes for at most
        ``switch`` passes, then the sentences still moving restart from ``RNS^0`` on the
        damped Jacobi passes (``damping``), the path of ``"jacobi"`` with that damping
        sped up by Aitken's extrapolation along a slow mode (``extrapolate``,
        :class:`gpsl.rns_sweeps._Aitken`); same fixed points and stop rule, a third of the
        passes on most sentences.
    b_var, g_var: optional ``(n, J)`` and ``(R, J, J)`` variances of ``b`` and ``g`` (both or
        neither): the uncertainty-aware scores above (``g`` is then the pair functions' mean).
    damping: ``eta`` in ``RNS^t = (1 - eta) RNS^{t-1} + eta F(RNS^{t-1})``, where ``F`` is
        the update of Algorithm 2. ``1`` is Algorithm 2 exactly as written. The fixed points
        are the same for every ``eta`` (``RNS = F(RNS)``); ``eta < 1`` only changes the path,
        and turns the two-cycles of the undamped iteration (RNS^t = RNS^{t-2} != RNS^{t-1},
        whose last iterate depends on the parity of ``max_iter``) into convergence. The stop
        rule uses the residual ``max |F(RNS) - RNS|``.

    per_sentence: return the passes per sentence (``"adaptive"`` only; a restarted sentence
        counts both phases) and whether each sentence met the stop rule.

    Returns
    -------
    (marginals ``(n, J)``, number of passes of the slowest sentence); with ``per_sentence``
    (marginals, passes per sentence, converged per sentence).
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, not {schedule!r}")
    if per_sentence and schedule != "adaptive":
        raise ValueError("per_sentence pass counts come from the adaptive schedule only")
    eta = float(damping)
    if not 0.0 < eta <= 1.0:
        raise ValueError(f"damping must be in (0, 1], not {damping!r}")
    b = np.asarray(b, dtype=float)
    lengths = np.asarray(lengths, dtype=np.int64)
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

    if (b_var is None) != (g_var is None):
        raise ValueError("give both b_var and g_var, or neither")
    if b_var is not None:
        b_var = np.asarray(b_var, dtype=float)
        g_var = np.asarray(g_var, dtype=float)
        if b_var.shape != b.shape:
            raise ValueError(f"b_var has shape {b_var.shape}, b has {b.shape}")
        P = fix(softmax(b * probit_scale(b_var), axis=1))  # RNS^0
    else:
        P = fix(softmax(b, axis=1))  # RNS^0
    if schedule == "adaptive":
        if R == 0 or b.shape[0] == 0:
            passes = np.zeros(lengths.size, dtype=np.int64)
            return (P, passes, np.ones(lengths.size, dtype=bool)) if per_sentence else (P, 0)
        P, passes, conv = rns_adaptive(P, b, g, lengths, offsets, tol=tol, max_iter=max_iter,
                                       damping=eta, switch=switch, clamp=clamp, b_var=b_var,
                                       g_var=g_var, extrapolate=extrapolate)
        if per_sentence:
            return P, passes, conv
        return P, int(passes.max()) if passes.size else 0
    if R == 0 or b.shape[0] == 0:
        return P, 0
    nb = neighbour_index(lengths, offsets)
    if schedule == "jacobi":
        return _rns_jacobi(P, b, g, lengths, nb, tol, max_iter, eta, known, clamp, b_var, g_var)
    starts = np.cumsum(lengths) - lengths
    by_pos = [starts[lengths > p] + p for p in range(int(lengths.max()))]
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007
        delta = 0.0
        for idx in by_pos:
            a = b[idx].copy()
            s2 = None if b_var is None else b_var[idx].copy()
            for d in range(R):
                nbi = nb[idx, d]
                ok = nbi >= 0
                a[ok] += P[nbi[ok]] @ g[d]
                if s2 is not None:
                    s2[ok] += (P[nbi[ok]] ** 2) @ g_var[d]
            if s2 is not None:
                a *= probit_scale(s2)
            new = fix(softmax(a, axis=1), idx)
            delta = max(delta, float(np.max(np.abs(new - P[idx]))))
            P[idx] = new if eta == 1.0 else (1.0 - eta) * P[idx] + eta * new
        if delta < tol:
            break
    return P, it


def _rns_jacobi(P, b, g, lengths, nb, tol, max_iter, eta, known, clamp, b_var=None,
                g_var=None):
    """The Jacobi schedule of :func:`rns`, vectorised over all tokens of all sentences.

    Sentences do not interact, so a sentence whose largest change falls below ``tol`` is done
    and leaves the iteration (its RNS is final); the passes continue on the others only. The
    pass count returned is that of the slowest sentence.
    """
    n = b.shape[0]
    R = nb.shape[1]
    sent = np.repeat(np.arange(lengths.size), lengths)
    active = np.ones(lengths.size, dtype=bool)
    active[lengths == 0] = False

    def build():
        tok = np.flatnonzero(active[sent])
        pos = np.full(n, -1, dtype=np.int64)
        pos[tok] = np.arange(tok.size)
        rows, srcs = [], []
        for d in range(R):
            r = np.flatnonzero(nb[tok, d] >= 0)
            rows.append(r)
            srcs.append(pos[nb[tok[r], d]])
        st = sent[tok]
        seg = np.flatnonzero(np.r_[True, st[1:] != st[:-1]]) if tok.size else tok
        kr = None
        if known is not None:
            kr = np.flatnonzero(known[tok])
        return tok, rows, srcs, seg, st[seg] if tok.size else seg, kr

    tok, rows, srcs, seg, seg_sent, kr = build()
    Pa, ba = P[tok], b[tok]
    va = None if b_var is None else b_var[tok]
    J = b.shape[1]
    G = np.concatenate(list(g), axis=1)  # (J, R J): one product for every offset
    GV = None if g_var is None else np.concatenate(list(g_var), axis=1)
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007
        a = ba.copy()
        PG = Pa @ G  # row t, block d = RNS_t' g_d; gathered below (P[src] g = (P g)[src])
        for d in range(R):
            a[rows[d]] += PG[srcs[d], d * J:(d + 1) * J]
        if va is not None:
            s2 = va.copy()
            PV = (Pa * Pa) @ GV
            for d in range(R):
                s2[rows[d]] += PV[srcs[d], d * J:(d + 1) * J]
            a *= probit_scale(s2)
        Pn = _softmax_rows(a)
        if kr is not None and kr.size:
            Pn[kr] = 0.0
            Pn[kr, clamp[tok[kr]]] = 1.0
        dsent = np.maximum.reduceat(np.abs(Pn - Pa), seg, axis=0).max(axis=1)
        Pa = Pn if eta == 1.0 else (1.0 - eta) * Pa + eta * Pn
        done = dsent < tol
        if done.any():
            P[tok] = Pa
            active[seg_sent[done]] = False
            if not active.any():
                return P, it
            tok, rows, srcs, seg, seg_sent, kr = build()
            Pa, ba = P[tok], b[tok]
            va = None if b_var is None else b_var[tok]
    P[tok] = Pa
    return P, it


def rns_marginals(mean, var, m_S, v_S, lengths, offsets, *, method="mean", rns_variance=False,
                  t_unary=1.0, t_pair=1.0, **rns_kw):
    """The per-token marginals of a fitted model from its predictive moments.

    ``method="mean"``: Algorithm 2 with local scores ``m`` (``m + v/2`` with ``rns_variance``)
    and pair scores ``m_S + v_S/2`` (eq. rns). ``method="probit"``: the uncertainty-aware RNS
    of :func:`rns` with means ``m``, ``m_S`` and variances ``v``, ``v_S``. ``var`` may be
    ``None`` for the mean method without ``rns_variance``. ``t_unary``/``t_pair`` divide the
    local and the pair scores (the structured temperature of :mod:`gpsl.calibration`; 1 =
    Algorithm 2). Returns ``(P, passes)``.
    """
    su, sp_ = 1.0 / float(t_unary), 1.0 / float(t_pair)
    if method == "mean":
        b = mean + 0.5 * var if rns_variance else mean
        return rns(b * su if su != 1.0 else b, (m_S + 0.5 * v_S) * sp_, lengths, offsets,
                   **rns_kw)
    if method == "probit":
        return rns(mean * su, m_S * sp_, lengths, offsets, b_var=var * su * su,
                   g_var=v_S * sp_ * sp_, **rns_kw)
    raise ValueError(f"method must be 'mean' or 'probit', not {method!r}")


#: the per-token marginals Algorithm 2 gives (:func:`rns_marginals`'s ``method``): the
#: mean-only RNS and the uncertainty-aware one
MARGINALS = ("mean", "probit")


@dataclass
class Scores:
    """Algorithm 2's inputs for some sentences under one fitted model: predictive means and
    variances of ``f^U`` (``var`` may be ``None`` for the mean method), the pair functions'
    ``m_S``, ``v_S``, sentence lengths, offsets, the RNS settings and ``rns_variance``."""

    mean: np.ndarray
    var: np.ndarray | None
    m_S: np.ndarray
    v_S: np.ndarray
    lengths: np.ndarray
    offsets: tuple
    rns: dict = field(default_factory=dict)
    rns_variance: bool = False
    passes: int = 0  # Algorithm 2's passes in the last call of marginals()
    #: Algorithm 2's unclamped runs, by ``(method, t_unary, t_pair)`` (:meth:`fixed_point`,
    #: :meth:`gpsl.calibration.Calibrator.apply`): a calibration runs it once per input
    runs: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_tokens(self) -> int:
        return int(self.mean.shape[0])

    def marginals(self, method: str = "mean", t_unary: float = 1.0, t_pair: float = 1.0,
                  clamp=None) -> np.ndarray:
        """``(n_tokens, J)`` RNS marginals (:func:`rns_marginals`)."""
        P, self.passes = rns_marginals(self.mean, self.var, self.m_S, self.v_S, self.lengths,
                                       self.offsets, method=method,
                                       rns_variance=self.rns_variance, t_unary=t_unary,
                                       t_pair=t_pair, clamp=clamp, **self.rns)
        return P

    def fixed_point(self, method: str = "mean") -> np.ndarray:
        """Algorithm 2's marginals of ``method`` (no clamp, temperatures 1), computed once and
        kept in :attr:`runs` (read them, do not write: they are shared)."""
        key = (method, 1.0, 1.0)
        if key not in self.runs:
            self.runs[key] = self.marginals(method)
        return self.runs[key]

    def rows(self, sentences: Sequence[int]) -> np.ndarray:
        """The token rows of the given sentences (indices into ``lengths``), in that order."""
        starts = np.r_[0, np.cumsum(self.lengths)[:-1]]
        if not len(sentences):
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.arange(starts[i], starts[i] + self.lengths[i])
                               for i in sentences])

    def take(self, sentences: Sequence[int]) -> Scores:
        """The scores of the given sentences (indices into ``lengths``), in that order."""
        rows = self.rows(sentences)
        return Scores(self.mean[rows], None if self.var is None else self.var[rows], self.m_S,
                      self.v_S, self.lengths[list(sentences)], self.offsets, self.rns,
                      self.rns_variance)


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
    return _viterbi_sentences(b, trans, lengths)


def _viterbi_sentences(b, trans, lengths) -> np.ndarray:
    """:func:`_viterbi_chain` on each sentence of ``b`` (``lengths`` tokens each) with the
    transition scores ``trans[p, q]`` (label ``p`` then ``q``)."""
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



# --------------------------------------------------------------------------- the chain decoder


def chain_transitions(m_S, offsets) -> np.ndarray:
    r"""The transition scores ``T[a, q]`` (label ``a`` at ``l - 1``, ``q`` at ``l``) of the
    linear chain whose pseudo-likelihood factors are the model's (:func:`chain_decode`): the
    mean of the estimates of ``T`` the pair functions give, ``m_S[-1]`` and ``m_S[+1]^T``
    (either alone when the dependency set has only one of them)."""
    offsets = tuple(int(o) for o in offsets)
    if not offsets or not set(offsets) <= {-1, 1}:
        raise ValueError(f"chain decoding handles offsets within (-1, 1), got {offsets}")
    m_S = np.asarray(m_S, dtype=float)
    parts = [m_S[offsets.index(-1)]] if -1 in offsets else []
    if 1 in offsets:
        parts.append(m_S[offsets.index(1)].T)
    return sum(parts) / len(parts)


def chain_decode(b, m_S, lengths, offsets) -> np.ndarray:
    r"""Most probable labelling of each sentence under the linear chain the model's
    pseudo-likelihood factors estimate (label indices of a concatenated batch). Beyond the
    paper.

    A linear-chain CRF with node scores ``u_l(y)`` and transition scores ``T(a, q)`` has the
    conditionals (Besag's pseudo-likelihood factors)

    .. math::

       p(y_l \mid y_{l-1}, y_{l+1}, x) \propto
       \exp\big(u_l(y_l) + T(y_{l-1}, y_l) + T(y_l, y_{l+1})\big),

    which is GPSL2's factor (eq. 4) with ``f^U = u``, ``f^{S,-1}(a, q) = T(a, q)`` and
    ``f^{S,+1}(c, q) = T(q, c)``: the model is Besag's pseudo-likelihood of that chain, with
    the two pair functions as two (untied) estimates of ``T``. Its most probable labelling
    is the Viterbi path of ``sum_l u_l(y_l) + sum_l T(y_{l-1}, y_l)``, with ``u`` the
    predictive means ``b`` and ``T`` the mean of the two estimates
    (:func:`chain_transitions`; GPSL1 has one). The pair functions enter with their means
    ``m_S``, as the local functions do (``rns_variance=False``): ``v_S / 2`` is largest for
    the label pairs never seen in training and would favour them.

    Algorithm 2 instead iterates the factors as a mean field, and ``decoder="exact"``
    maximises the product of the factors including their normalisers
    ``Z_l(y_{l-1}, y_{l+1})``, which is not a distribution over labelings (with strong pair
    functions it rewards neighbour labels that make a normaliser small: with pair variance 16
    and all crowd-ner training sentences it fell 3-4 points below Algorithm 2). On the
    crowd-ner data (gold labels, 5 document folds of the training sentences,
    ``bench.ner_cv``) this decoder was 0.5-4 points above Algorithm 2 at pair variances 1
    and 4 and tied with ``"exact"`` at the best settings (75.90 mean span F1 both).
    """
    return _viterbi_sentences(np.asarray(b, dtype=float), chain_transitions(m_S, offsets),
                              lengths)


# --------------------------------------------------------------------------- exact PL decoding
# The product of the pseudo-likelihood factors (eq. 4) is itself a score over whole labelings;
# for dependencies within (-1, +1) its exact maximiser is a Viterbi over label pairs. It is
# not in the paper: it is a check on Algorithm 2 (bench/paper.py, "exact decoding").


def _pl_parts(g, offsets, J):
    """The pair-score matrices of the previous (-1) and next (+1) neighbour (zeros if absent)."""
    offsets = tuple(int(o) for o in offsets)
    if not offsets or not set(offsets) <= {-1, 1}:
        raise ValueError(f"exact PL decoding handles offsets within (-1, 1), got {offsets}")
    g = np.asarray(g, dtype=float)
    zero = np.zeros((J, J))
    gp = g[offsets.index(-1)] if -1 in offsets else zero
    gn = g[offsets.index(1)] if 1 in offsets else zero
    return gp, gn


def pl_factors(b, g, offsets=(-1, 1)) -> np.ndarray:
    """Log pseudo-likelihood factors ``phi[l, a, q, c]`` of one sentence.

    ``phi[l, a, q, c] = log softmax_q(b[l, q] + gp[a, q] + gn[c, q])[q]`` where ``a`` is the
    previous label, ``c`` the next one, ``gp``/``gn`` the pair scores ``g[d]`` (indexed
    ``[neighbour label, own label]``) of offsets -1 and +1; terms absent at the sentence ends are
    left out (``phi`` is then constant along that axis).
    """
    b = np.asarray(b, dtype=float)
    L, J = b.shape
    gp, gn = _pl_parts(g, offsets, J)
    has_prev = (np.arange(L) > 0)[:, None, None, None]
    has_next = (np.arange(L) < L - 1)[:, None, None, None]
    # s[l, a, c, q]
    s = (b[:, None, None, :] + has_prev * gp[None, :, None, :]
         + has_next * gn[None, None, :, :])
    logp = s - logsumexp(s, axis=3, keepdims=True)
    return np.transpose(logp, (0, 1, 3, 2))  # -> [l, a, q, c]


def pl_log_score(b, g, offsets, y) -> float:
    """Log of the pseudo-likelihood product of labelling ``y`` (label indices)."""
    phi = pl_factors(b, g, offsets)
    L = len(y)
    total = 0.0
    for t in range(L):
        a = y[t - 1] if t > 0 else 0
        c = y[t + 1] if t < L - 1 else 0
        total += phi[t, a, y[t], c]
    return float(total)


def pl_exact_decode(b, g, offsets=(-1, 1)) -> tuple[np.ndarray, float]:
    """Exact maximiser of the product of the pseudo-likelihood factors of one sentence.

    Each log factor touches ``(y_{l-1}, y_l, y_{l+1})``, so a Viterbi over the label pairs
    ``(y_{l-1}, y_l)`` is exact in ``O(L J^3)``. Returns ``(labels, log score)``.
    """
    b = np.asarray(b, dtype=float)
    L, J = b.shape
    if L == 0:
        return np.empty(0, dtype=np.int64), 0.0
    phi = pl_factors(b, g, offsets)
    if L == 1:
        q = int(np.argmax(phi[0, 0, :, 0]))
        return np.array([q], dtype=np.int64), float(phi[0, 0, q, 0])
    V = phi[0, 0].copy()  # V[y0, y1]: factor 0 has no previous label
    back = np.zeros((L, J, J), dtype=np.int64)
    for t in range(1, L - 1):
        # cand[a, q, c] = V[a, q] + phi[t, a, q, c]; maximise over a = y_{t-1}
        cand = V[:, :, None] + phi[t]
        back[t] = np.argmax(cand, axis=0)
        V = np.take_along_axis(cand, back[t][None], axis=0)[0]
    V = V + phi[L - 1, :, :, 0]  # the last factor has no next label
    flat = int(np.argmax(V))
    y = np.empty(L, dtype=np.int64)
    y[L - 2], y[L - 1] = divmod(flat, J)
    for t in range(L - 2, 0, -1):
        y[t - 1] = back[t, y[t], y[t + 1]]
    return y, float(V.flat[flat])


def pl_decode(b, g, lengths, offsets):
    """:func:`pl_exact_decode` on every sentence of a concatenated batch (label indices)."""
    out, start = [], 0
    for L in np.asarray(lengths, dtype=np.int64):
        out.append(pl_exact_decode(b[start:start + L], g, offsets)[0])
        start += L
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)
