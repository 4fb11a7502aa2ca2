r"""The structured temperature of :class:`gpsl.calibration.Calibrator` (the kinds
``"structured"`` and ``"structured+vector"``; :meth:`Calibrator.fit_structured` and
:meth:`Calibrator.with_vector` are the functions here). Since issue 36 they are no longer
among the default candidates (:data:`gpsl.calibration.DEFAULT_KINDS`): every NLL evaluation of
their search reruns Algorithm 2, hundreds of times a selection; the default's structured
candidate is the step at the fixed point (:mod:`gpsl.calibration.step`), fitted on cached
quantities.

**Structured temperature** (``kind="structured"``; not in the paper). Algorithm 2 combines a
token's own score ``b = m`` with its neighbours' pair scores ``g = m_S + v_S/2``; on the paper's
data sets the pair scores, learned through the pseudo-likelihood with the neighbours' labels
*observed*, are too strong once the neighbours are themselves predicted. Two temperatures,
one per part, are fitted inside the fixed point,

.. math::

   RNS_l(y) \propto \exp\Big(b_{ly}/T_U + \sum_d \sum_{y'} RNS_{l+d}(y')\, g_d(y', y)/T_S\Big),

by minimising the same held-out NLL over ``(log T_U, log T_S)`` (Nelder-Mead: every evaluation
reruns Algorithm 2 on the calibration sentences). ``T_U = T_S = 1`` is Algorithm 2; ``T_U =
T_S = T`` is not a plain temperature (the fixed point moves), which is why both are fitted.
Unlike a temperature this can change the argmax.

**Structured temperature with vector scaling** (``kind="structured+vector"``; not in the
paper). The structured marginals ``q_t`` above followed by a per-label vector scaling,

.. math::

   \tilde p_{ty} = \operatorname{softmax}_y\big(w_y \log q_{ty}(T_U, T_S) + c_y\big),

fitted in two stages on the same tokens: ``(T_U, T_S)`` as above, then ``w, c`` by the
vector-scaling NLL on ``log q`` with the ridge centred on the identity (``w = 1, c = 0``, the
structured marginals themselves). The pair scores and the own scores miscalibrate differently
per label (a label that mostly begins a chunk leans on its neighbours more than one inside it);
a per-label scale and shift after the fixed point corrects what two global temperatures
cannot. ``w = 1, c = 0`` is the structured temperature.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpsl._optimize import minimize
from gpsl.calibration.scores import (
    _LOG_FLOOR,
    _LOG_T_STRUCTURED,
    STRUCTURED_MAX_TOKENS,
    Scores,
    _logits,
    nll_and_grad,
    stack,
)
from gpsl.errors import InputError


def fit_structured(cls, scores: Sequence[Scores], gold: Sequence[np.ndarray], *,
                   method: str = "mean", vector: bool = False, ridge: float = 1e-2,
                   source: str = "", max_tokens: int = STRUCTURED_MAX_TOKENS,
                   seed: int = 0, start: tuple[float, float] | None = None):
    """Fit ``(T_U, T_S)`` (module docstring) on one or more :class:`Scores` with their
    flat gold indices (``< 0`` = no gold). Every NLL evaluation reruns Algorithm 2, so
    above ``max_tokens`` a seeded random subset of the sentences (that many tokens) is
    used for the fit. ``vector=True``: then the vector scaling of the structured
    marginals (``kind="structured+vector"``, :meth:`with_vector`) on all the tokens.
    ``start``: ``(T_U, T_S)`` to start the search from (one start instead of two; the
    cross-validation of :meth:`select` starts from the fit on all the tokens)."""
    gold = [np.asarray(g, dtype=np.int64) for g in gold]
    all_scores, all_gold = list(scores), gold
    total = sum(sc.n_tokens for sc in scores)
    if total > max_tokens:
        rng = np.random.default_rng(seed)
        frac = max_tokens / total
        sub_scores, sub_gold = [], []
        for sc, g in zip(scores, gold):
            keep = np.flatnonzero(rng.random(sc.lengths.size) < frac).tolist()
            if keep:
                sub_scores.append(sc.take(keep))
                sub_gold.append(g[sc.rows(keep)])
        if sub_scores:
            scores, gold = sub_scores, sub_gold
    n = sum(int((g >= 0).sum()) for g in gold)
    if n == 0:
        raise InputError("no labeled token to calibrate on", source=source or "calibration")

    def nll(x):
        tu, tp = np.exp(np.clip(x, *_LOG_T_STRUCTURED))
        total = 0.0
        for sc, g in zip(scores, gold):
            keep = g >= 0
            if keep.any():
                P = sc.marginals(method, tu, tp)
                total -= np.log(np.clip(P[keep, g[keep]], _LOG_FLOOR, None)).sum()
        return total / n

    before = nll(np.zeros(2))
    best_x, best = np.zeros(2), before
    starts = ((np.zeros(2), np.array([np.log(2.0), np.log(10.0)])) if start is None
              else (np.clip(np.log(np.asarray(start, dtype=float)), *_LOG_T_STRUCTURED),))
    for x0 in starts:
        res = minimize(nll, x0, method="Nelder-Mead",
                       options={"xatol": 1e-3, "fatol": 1e-6, "maxiter": 200})
        if res.fun < best:
            best_x, best = np.clip(res.x, *_LOG_T_STRUCTURED), float(res.fun)
    tu, tp = (float(v) for v in np.exp(best_x))
    J = scores[0].mean.shape[1]
    cal = cls(method=method, kind="structured", temperature=1.0, w=np.ones(J),
              c=np.zeros(J), t_unary=tu, t_pair=tp, n_tokens=n, nll_before=float(before),
              nll_after=float(best), source=source)
    return cal.with_vector(all_scores, all_gold, ridge=ridge) if vector else cal

def with_vector(self, scores: Sequence[Scores], gold: Sequence[np.ndarray], *,
                ridge: float = 1e-2):
    """This structured calibrator followed by a per-label vector scaling of its marginals
    (``kind="structured+vector"``): ``w, c`` minimise the vector-scaling NLL
    (:func:`nll_and_grad`) of the structured marginals of ``scores`` against ``gold``
    (flat, ``< 0`` = none), with the ridge ``(ridge/2)(||w - 1||^2 + ||c||^2)`` centred
    on the structured marginals themselves; started there, solved by L-BFGS."""
    if self.kind != "structured":
        raise ValueError(f"with_vector needs a structured calibrator, not {self.kind!r}")
    P = np.concatenate([sc.marginals(self.method, self.t_unary, self.t_pair)
                        for sc in scores])
    P, g = stack(P, np.concatenate([np.asarray(v, dtype=np.int64) for v in gold]))
    if g.size == 0:
        raise InputError("no labeled token to calibrate on",
                         source=self.source or "calibration")
    L = _logits(P)
    J = L.shape[1]
    x0 = np.r_[np.ones(J), np.zeros(J)]
    out = minimize(nll_and_grad, x0, args=(L, g, ridge), jac=True, method="L-BFGS-B")
    w, c = out.x[:J], out.x[J:]
    return type(self)(method=self.method, kind="structured+vector", temperature=1.0, w=w,
                      c=c, t_unary=self.t_unary, t_pair=self.t_pair, n_tokens=int(g.size),
                      nll_before=self.nll_before,
                      nll_after=float(nll_and_grad(np.r_[w, c], L, g)[0]),
                      source=self.source)


__all__ = ["fit_structured", "with_vector"]
