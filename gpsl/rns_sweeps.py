r"""The passes of Algorithm 2 over many sentences at once, and the adaptive schedule.

One pass of Algorithm 2 (paper, section 5, eq. rns) computes for every token ``l``

.. math::

   RNS^t_l = \operatorname{softmax}_y\Big(b_{ly} + \sum_d \sum_{y'} RNS^{t-1}_{l+d}(y')\,
             g_d(y', y)\Big),

and the damped form takes ``RNS^t = (1 - eta) RNS^{t-1} + eta F(RNS^{t-1})`` (same fixed
points). Here the tokens of all sentences are laid out one after another with ``max |d|``
rows of zeros after each sentence, so the neighbour at offset ``d`` of row ``r`` is row
``r + d`` for every token: a zero row contributes nothing, as a missing neighbour does in
eq. (rns), and each offset's term is a shifted slice of ``RNS^{t-1} [g_1 ... g_R]`` (one
matrix product a pass, no index gathers). A sentence whose largest change falls below ``tol``
is finished: its RNS is recorded then, and the rows of finished sentences are dropped from
the layout once they are a quarter of it (they never influence another sentence).

**Why Algorithm 2 ran to its pass cap.** Undamped, the Jacobi form converges in a few passes
on most sentences (median 4 on chunking) but on a few it falls into two-cycles,
``RNS^t = RNS^{t-2} != RNS^{t-1}``, and never stops; the damped form (``eta = 1/2``, the
default since the two-cycles were found) converges everywhere but needs three times the
passes (median 12) and still a hundred or more on a sentence with a slow mode.

**The adaptive schedule** (:func:`rns_adaptive`) runs the undamped passes on every sentence
for at most ``switch`` passes; a sentence still moving then restarts from ``RNS^0`` on the
damped passes, the path of the damped Jacobi schedule, so that it reaches the same fixed
point as that schedule. A sentence the undamped passes finish has met the same stop rule at a
fixed point of the same map ``F``.

**Why the damped passes still hit their cap** (1 sentence in 100 on chunking): a mode with a
positive eigenvalue near 1 (``lambda = 0.95`` undamped, ``0.5 + 0.5 lambda = 0.97`` damped)
shrinks by 3% a pass, so the stop rule needs 151 passes. There the damped passes are sped up
by Aitken's extrapolation along that mode (:class:`_Aitken`): the fixed point of the path to
``1e-11`` on every sentence of chunking, NER, basenp, JapaneseNE and 450 random strongly
coupled ones, in half the passes, with no sentence at the cap.
"""

from __future__ import annotations

import contextlib

import numpy as np

#: undamped passes before a sentence still moving restarts on the damped ones
SWITCH = 20
#: the finished sentences leave the layout once the moving ones' columns are this share of it
DROP = 0.75


def single_threaded_blas():
    """A context that limits BLAS to one thread (no-op without threadpoolctl). The libraries
    are looked up once (a ``threadpool_limits`` of its own read the process's map of loaded
    libraries each time: 3.5 ms, a third of Algorithm 2 on 100 chunking sentences)."""
    global _BLAS
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - threadpoolctl is in requirements.txt
        return contextlib.nullcontext()
    if _BLAS is None:
        _BLAS = ThreadpoolController()
    return _BLAS.limit(limits=1, user_api="blas")


_BLAS = None


def _softmax_rows(a: np.ndarray) -> np.ndarray:
    """Row-wise softmax in place (the exponentials of ``a - max``)."""
    a -= a.max(axis=1, keepdims=True)
    np.exp(a, out=a)
    a /= a.sum(axis=1, keepdims=True)
    return a


def _softmax_columns(a: np.ndarray) -> np.ndarray:
    """Column-wise softmax in place (labels along the first axis: the label reductions are
    then ``J`` element-wise operations over all tokens, not ``n`` short ones)."""
    a -= a.max(axis=0)
    np.exp(a, out=a)
    a /= a.sum(axis=0)
    return a


def probit_scale(s2) -> np.ndarray:
    r"""``kappa(s^2) = (1 + pi s^2 / 8)^{-1/2}``: the probit (MacKay) factor of the
    uncertainty-aware scores (:func:`gpsl.predict.rns`)."""
    return 1.0 / np.sqrt(1.0 + (np.pi / 8.0) * s2)


class _Layout:
    """Columns of some sentences' tokens, each sentence followed by ``pad`` zero columns."""

    def __init__(self, which: np.ndarray, starts: np.ndarray, lengths: np.ndarray, pad: int):
        L = lengths[which]
        self.seg_len = L + pad
        ends = np.cumsum(self.seg_len)
        self.seg = ends - self.seg_len  # first column of each sentence's segment
        self.n = int(ends[-1]) if ends.size else 0
        within = np.arange(int(L.sum())) - np.repeat(np.cumsum(L) - L, L)
        self.cols = np.repeat(self.seg, L) + within  # the token columns
        self.orig = np.repeat(starts[which], L) + within  # their tokens (original order)

    def spread(self, values: np.ndarray) -> np.ndarray:
        """``(J, n_columns)`` array with ``values`` (``(n, J)``, original order) at the token
        columns and zeros at the pads."""
        out = np.zeros((values.shape[1], self.n))
        out[:, self.cols] = values[self.orig].T
        return out


#: passes before a sentence's steps are read for Aitken's extrapolation
AITKEN_FROM = 6


class _Aitken:
    """Aitken's extrapolation of each sentence's passes along a slow mode.

    Near a fixed point ``x*`` the passes are linear, ``x_{t+1} - x* = A (x_t - x*)``; once one
    eigenvalue ``lambda`` of ``A`` dominates, every step is ``lambda`` times the one before,
    ``s_{t+1} = lambda s_t``, and ``x* = x_{t+1} + sum_k lambda^k s_{t+1} = x_{t+1} +
    lambda / (1 - lambda) s_{t+1}``. A sentence whose last steps point the same way
    (cosine above ``COS``) and shrink by the same ``lambda`` in ``[LO, 1)`` twice in a row
    (to ``STABLE`` of ``1 - lambda``) jumps there, if every RNS stays in ``[0, 1]``; the
    passes then go on as before and the stop rule decides, so the result is a fixed point of
    ``F`` all the same, the one the passes were creeping towards. Oscillating modes
    (``lambda < 0``, the damping's business) are left alone.
    """

    COS, LO, STABLE = 0.99, 0.5, 0.1

    def __init__(self, n_sentences: int):
        self.prev = None
        self.lam = np.full(n_sentences, np.nan)

    def keep(self, moving: np.ndarray, cols: np.ndarray) -> None:
        """Keep the state of the sentences ``moving`` (their layout columns ``cols``) when the
        layout drops the others: a sentence's jumps then depend on its own passes only, not
        on when the sentences beside it finished (a fresh state here made a sentence's
        marginals depend on the chunk it was tagged in, by up to 2.3e-4)."""
        self.lam = self.lam[moving]
        if self.prev is not None:
            self.prev = self.prev[:, cols]

    def jump(self, Pa: np.ndarray, step: np.ndarray, eta: float, lay: _Layout,
             moving: np.ndarray) -> None:
        """Extrapolate the ``moving`` sentences of ``Pa`` (after a pass whose change was
        ``eta * step``) where their steps allow it."""
        prev, self.prev = self.prev, step
        if prev is None:
            return
        dot = np.add.reduceat(np.einsum("jc,jc->c", step, prev), lay.seg)
        nn0 = np.add.reduceat(np.einsum("jc,jc->c", prev, prev), lay.seg)
        nn1 = np.add.reduceat(np.einsum("jc,jc->c", step, step), lay.seg)
        with np.errstate(divide="ignore", invalid="ignore"):
            lam = dot / nn0
            cos = dot / np.sqrt(nn0 * nn1)
        ok = (moving & (cos > self.COS) & (lam >= self.LO) & (lam < 1.0)
              & (np.abs(lam - self.lam) <= self.STABLE * (1.0 - lam)))
        self.lam = lam
        if not ok.any():
            return
        coef = np.where(ok, lam / np.where(ok, 1.0 - lam, 1.0), 0.0)
        cand = Pa + np.repeat(coef * eta, lay.seg_len) * step
        inside = ((np.minimum.reduceat(cand.min(axis=0), lay.seg) >= 0.0)
                  & (np.maximum.reduceat(cand.max(axis=0), lay.seg) <= 1.0))
        ok &= inside
        cols = np.repeat(ok, lay.seg_len)
        Pa[:, cols] = cand[:, cols]
        self.lam[ok] = np.nan  # two fresh steps before the next jump


def sweep_sentences(P0, b, g, lengths, offsets, *, tol, max_iter, eta, clamp=None,
                    b_var=None, g_var=None, which=None, extrapolate=False):
    """Damped (``eta < 1``) or undamped Jacobi passes of Algorithm 2 on the sentences
    ``which`` (default all) from ``P0`` (``(n, J)``, original token order).

    Returns ``(P, passes, converged)``: ``P`` holds the final RNS of the sentences ``which``
    (other rows as in ``P0``), ``passes`` and ``converged`` are per sentence of ``which``.
    Each sentence follows the path of :func:`gpsl.predict._rns_jacobi` (the reference) to
    rounding: the same passes, the same stop rule. ``extrapolate``: from pass
    :data:`AITKEN_FROM` on, a sentence creeping along a slow mode jumps ahead on it
    (:class:`_Aitken`): the same fixed point in fewer passes, no longer the same path.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    which = np.arange(lengths.size) if which is None else np.asarray(which, dtype=np.int64)
    P = np.array(P0, dtype=float, copy=True)
    passes = np.zeros(which.size, dtype=np.int64)
    converged = lengths[which] == 0
    sub = np.flatnonzero(~converged)  # indices into which
    if sub.size == 0 or max_iter < 1:
        return P, passes, converged
    offsets = tuple(int(d) for d in offsets)
    pad = max(abs(d) for d in offsets)
    J = b.shape[1]
    GT = np.ascontiguousarray(np.concatenate(list(g), axis=1).T)  # (R J, J)
    GVT = None if g_var is None else np.ascontiguousarray(np.concatenate(list(g_var),
                                                                         axis=1).T)
    known = None if clamp is None else np.asarray(clamp)

    def build(sub):
        lay = _Layout(which[sub], starts, lengths, pad)
        va = None if b_var is None else lay.spread(b_var)
        kc = kl = None
        if known is not None:
            k = known[lay.orig] >= 0
            kc, kl = lay.cols[k], known[lay.orig[k]]
        pads = np.ones(lay.n, dtype=bool)  # the pad columns, zero after every pass
        pads[lay.cols] = False
        return lay, lay.spread(b), va, kc, kl, np.flatnonzero(pads)

    lay, ba, va, kc, kl, pads = build(sub)
    Pa = lay.spread(P)
    moving = np.ones(sub.size, dtype=bool)
    a, diff = np.empty_like(Pa), np.empty_like(Pa)
    aitken = _Aitken(sub.size) if extrapolate else None
    with single_threaded_blas():  # two BLAS threads made these thin products 15x slower
        for it in range(1, max_iter + 1):
            np.copyto(a, ba)
            PG = GT @ Pa  # block k, column c: g_k' RNS_c
            PV = s2 = None
            if va is not None:
                s2 = va.copy()
                PV = GVT @ (Pa * Pa)
            for k, d in enumerate(offsets):
                blk = slice(k * J, (k + 1) * J)
                # column c gets g_d' RNS_{c+d}: targets max(0,-d)..; sources shifted by d
                lo, hi = max(0, -d), lay.n - max(0, d)
                a[:, lo:hi] += PG[blk, lo + d:hi + d]
                if PV is not None:
                    s2[:, lo:hi] += PV[blk, lo + d:hi + d]
            if s2 is not None:
                a *= probit_scale(s2)
            Pn = _softmax_columns(a)
            Pn[:, pads] = 0.0
            if kc is not None and kc.size:
                Pn[:, kc] = 0.0
                Pn[kl, kc] = 1.0
            np.subtract(Pn, Pa, out=diff)
            step = diff.copy() if aitken is not None and it >= AITKEN_FROM else None
            np.abs(diff, out=diff)
            dsent = np.maximum.reduceat(diff.max(axis=0), lay.seg)
            if eta == 1.0:
                Pa, a = Pn, Pa  # the old RNS's array holds the next pass's scores
            else:
                Pa *= 1.0 - eta
                np.multiply(Pn, eta, out=diff)
                Pa += diff
            done = moving & (dsent < tol)
            if step is not None:
                aitken.jump(Pa, step, eta, lay, moving & ~done)
            if not done.any():
                continue
            tok = np.repeat(done, lay.seg_len)[lay.cols]
            P[lay.orig[tok]] = Pa[:, lay.cols[tok]].T
            passes[sub[done]] = it
            converged[sub[done]] = True
            moving &= ~done
            if not moving.any():
                return P, passes, converged
            if lay.seg_len[moving].sum() <= DROP * lay.n:  # drop the finished sentences
                cols = np.repeat(moving, lay.seg_len)
                Pa = Pa[:, cols]
                if aitken is not None:  # the moving sentences keep their own history
                    aitken.keep(moving, cols)
                sub = sub[moving]
                lay, ba, va, kc, kl, pads = build(sub)
                moving = np.ones(sub.size, dtype=bool)
                a, diff = np.empty_like(Pa), np.empty_like(Pa)
    tok = np.repeat(moving, lay.seg_len)[lay.cols]
    P[lay.orig[tok]] = Pa[:, lay.cols[tok]].T
    passes[sub[moving]] = max_iter
    return P, passes, converged


def rns_adaptive(P0, b, g, lengths, offsets, *, tol, max_iter, damping, switch=SWITCH,
                 clamp=None, b_var=None, g_var=None, extrapolate=True):
    """The adaptive schedule: undamped passes for at most ``switch`` passes, then the
    sentences still moving restart from ``P0`` (``RNS^0``) on the damped passes
    (``damping``, at most ``max_iter`` passes). ``switch=0`` is the damped Jacobi schedule.

    Returns ``(P, passes per sentence, converged per sentence)``; a restarted sentence's
    passes count both phases.
    """
    kw = {"tol": tol, "clamp": clamp, "b_var": b_var, "g_var": g_var}
    lengths = np.asarray(lengths, dtype=np.int64)
    first = min(int(switch), int(max_iter))
    if first > 0 and float(damping) < 1.0:
        P, passes, conv = sweep_sentences(P0, b, g, lengths, offsets, max_iter=first,
                                          eta=1.0, **kw)
        again = np.flatnonzero(~conv)
    else:
        P = np.array(P0, dtype=float, copy=True)
        passes = np.zeros(lengths.size, dtype=np.int64)
        conv = lengths == 0
        again = np.flatnonzero(~conv)
        first = 0
    if again.size:
        P2, p2, c2 = sweep_sentences(P0, b, g, lengths, offsets, max_iter=int(max_iter),
                                     eta=float(damping), which=again, extrapolate=extrapolate,
                                     **kw)
        tok = np.isin(np.repeat(np.arange(lengths.size), lengths), again)
        P[tok] = P2[tok]
        passes[again] = first + p2
        conv[again] = c2
    return P, passes, conv
