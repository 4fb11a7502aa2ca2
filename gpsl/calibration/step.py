r"""The step at the fixed point: the structured temperature's idea on cached quantities
(``kind="step"`` and ``"step+vector"``; not in the paper; issue 36).

Algorithm 2 ends at a fixed point ``P = F(P)`` of

.. math::

   F(P)_l = \operatorname{softmax}\big(b_l + M_l(P)\big), \qquad
   M_l(P)_y = \sum_d \sum_{y'} P_{l+d}(y')\, g_d(y', y),

with the local scores ``b`` (``m``, or ``m + v/2`` with ``rns_variance``) and the pair scores
``g = m_S + v_S/2``. The structured temperature (:mod:`gpsl.calibration.structured`) divides
``b`` by ``T_U`` and ``g`` by ``T_S`` *inside* the fixed point, so each of the few hundred NLL
evaluations of its search reruns Algorithm 2. The step keeps the fixed point and re-weighs the
two parts of its last step. At the fixed point ``ell_l = log P_l = b_l + M_l - log Z_l``, and a
per-token constant does not matter to a softmax, so the two cached channels ``(ell, b)`` of a
token carry its pair messages too (``M = ell - b`` up to that constant):

.. math::

   \tilde p_{ly} = \operatorname{softmax}_y\big(w_y\, \ell_{ly} + u_y\, b_{ly} + c_y\big)
   \;=\; \operatorname{softmax}_y\big((w_y + u_y)\, b_{ly} + w_y\, M_{ly} + c_y\big).

So ``w = 1/T_S, u = 1/T_U - 1/T_S, c = 0`` is one Jacobi step of the structured
temperature's Algorithm 2 started from the uncalibrated fixed point (exact up to Algorithm 2's
stop rule; tested), ``u = 0, c = 0, w = 1/T`` is temperature scaling, and **``w = 1, u = c =
0`` returns the uncalibrated marginals exactly** (``softmax(log P) = P``). ``kind="step"``
fits the two scalars (``w, u`` shared by the labels, ``c = 0``), ``kind="step+vector"`` all
three per label (``3J`` parameters) with the ridge ``(lambda/2)(||w - 1||^2 + ||u||^2 +
||c||^2)`` centred on the uncalibrated marginals. (A third channel ``M`` would add nothing but
a flat direction: ``ell``, ``b`` and ``M`` are linearly dependent up to per-token constants.)

The logits are linear in the parameters, so the mean NLL over the calibration tokens,

.. math::

   \mathrm{NLL} = -\frac1N \sum_t \Big[z_{t y_t} - \log \sum_y e^{z_{ty}}\Big],
   \qquad \frac{\partial\, \mathrm{NLL}}{\partial w_y} = \frac1N \sum_t
   (\tilde p_{ty} - [y = y_t])\, \ell_{ty}

(likewise ``u`` with ``b``, ``c`` with 1; the shared scalars sum these over ``y``), is
**convex**, like a multinomial logistic regression on two fixed features: one optimum, found
by L-BFGS with the exact gradient (:func:`step_nll_and_grad`, checked against finite
differences in the tests), from the identity. Nothing in the fit reruns Algorithm 2: a
selection costs one run per group of calibration tokens (:meth:`Scores.fixed_point`, cached),
and applying the calibrator to new sentences costs nothing after their Algorithm 2. Unlike a
temperature, ``u`` and ``c`` can move the argmax; whether they may is
:mod:`gpsl.calibration.decisions`'s test, as for the structured kinds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpsl._optimize import minimize
from gpsl.calibration.scores import _LOG_FLOOR, Scores, _softmax
from gpsl.errors import InputError

#: the kinds of this module (need Algorithm 2's inputs: :meth:`Calibrator.apply`)
STEP_KINDS = ("step", "step+vector")
#: the ridge of ``"step"`` (two shared parameters) and of ``"step+vector"``
STEP_RIDGE, STEP_VECTOR_RIDGE = 1e-4, 1e-2
#: labeled tokens a step is fitted on at most (a seeded random subset above: ``3J`` parameters
#: need far fewer, and each L-BFGS evaluation reads every token)
STEP_MAX_TOKENS = 8_000


def channels(scores: Scores, P: np.ndarray) -> np.ndarray:
    """``(2, n_tokens, J)``: ``log P`` and the local scores ``b`` (module docstring) of
    ``scores`` at marginals ``P`` (the mean method's fixed point)."""
    b = scores.mean + 0.5 * scores.var if scores.rns_variance else scores.mean
    return np.stack([np.log(np.clip(P, _LOG_FLOOR, None)), np.asarray(b, dtype=float)])


def _unpack(params: np.ndarray, J: int, per_label: bool):
    """``(w, u, c)`` as ``(J,)`` arrays from the flat parameters."""
    if per_label:
        w, u, c = params.reshape(3, J)
        return w, u, c
    w, u = (np.full(J, v) for v in params)
    return w, u, np.zeros(J)


def identity(J: int, per_label: bool) -> np.ndarray:
    """The parameters of the uncalibrated marginals (``w = 1``, the rest 0)."""
    return np.r_[np.ones(J), np.zeros(2 * J)] if per_label else np.array([1.0, 0.0])


def logits(F: np.ndarray, w, u, c) -> np.ndarray:
    """``w l + u b + c`` of the channels ``F`` (:func:`channels`)."""
    return F[0] * w + F[1] * u + c


def step_nll_and_grad(params: np.ndarray, F: np.ndarray, g: np.ndarray, ridge: float = 0.0,
                      per_label: bool = False):
    """Mean NLL of the gold indices ``g`` (``(N,)``) under the step's marginals of channels
    ``F`` (``(2, N, J)``), plus the ridge towards :func:`identity`; ``(value, gradient)``
    (module docstring)."""
    N, J = F.shape[1], F.shape[2]
    w, u, c = _unpack(params, J, per_label)
    Z = logits(F, w, u, c)
    Zm = Z.max(axis=1, keepdims=True)
    E = np.exp(Z - Zm)
    S = E.sum(axis=1, keepdims=True)
    rows = np.arange(N)
    value = -np.mean(Z[rows, g] - (Zm[:, 0] + np.log(S[:, 0])))
    Rr = E / S
    Rr[rows, g] -= 1.0  # p~ - onehot
    x0 = identity(J, per_label)
    if per_label:
        grad = np.concatenate([(Rr * F[0]).sum(axis=0), (Rr * F[1]).sum(axis=0),
                               Rr.sum(axis=0)]) / N
    else:
        grad = np.array([np.vdot(Rr, F[0]), np.vdot(Rr, F[1])]) / N
    value += 0.5 * ridge * float(np.sum((params - x0) ** 2))
    return float(value), grad + ridge * (params - x0)


def _labeled(scores: Sequence[Scores], gold: Sequence[np.ndarray]):
    """The channels and gold indices of the labeled tokens of every ``Scores``."""
    Fs, gs = [], []
    for sc, g in zip(scores, gold):
        g = np.asarray(g, dtype=np.int64)
        keep = g >= 0
        if keep.any():
            if "step channels" not in sc.runs:  # once per Scores, as its fixed point
                sc.runs["step channels"] = channels(sc, sc.fixed_point("mean"))
            Fs.append(sc.runs["step channels"][:, keep])
            gs.append(g[keep])
    if not gs:
        return None, None
    F, g = np.concatenate(Fs, axis=1), np.concatenate(gs)
    if g.size > STEP_MAX_TOKENS:
        rows = np.sort(np.random.default_rng(g.size).choice(g.size, STEP_MAX_TOKENS,
                                                             replace=False))
        F, g = F[:, rows], g[rows]
    return F, g


def fit_step(cls, scores: Sequence[Scores], gold: Sequence[np.ndarray], *,
             vector: bool = False, ridge: float | None = None, source: str = "",
             start=None):
    """The step (``vector=False``: ``kind="step"``) or the step with per-label parameters
    (``kind="step+vector"``) fitted on ``scores`` with their flat gold indices (``< 0`` =
    none; above :data:`STEP_MAX_TOKENS` labeled tokens a seeded random subset of them): L-BFGS
    on the convex NLL from the identity, or from ``start`` (a fitted step:
    the per-label fit from the shared one; the optimum is the same, the path shorter)
    (module docstring). Algorithm 2 runs once per ``Scores`` (its fixed point is cached
    there). :class:`InputError` without a labeled token."""
    F, g = _labeled(scores, gold)
    if g is None:
        raise InputError("no labeled token to calibrate on", source=source or "calibration")
    J = F.shape[2]
    ridge = (STEP_VECTOR_RIDGE if vector else STEP_RIDGE) if ridge is None else float(ridge)
    x0 = identity(J, vector)
    xs = x0 if start is None else (np.concatenate([start.w, start.u, start.c]) if vector
                                   else np.array([start.w[0], start.u[0]]))
    out = minimize(step_nll_and_grad, xs, args=(F, g, ridge, vector), jac=True,
                   method="L-BFGS-B")
    w, u, c = _unpack(out.x, J, vector)
    before = step_nll_and_grad(x0, F, g, 0.0, vector)[0]
    after = step_nll_and_grad(out.x, F, g, 0.0, vector)[0]
    return cls(method="mean", kind="step+vector" if vector else "step", temperature=1.0, w=w,
               c=c, u=u, n_tokens=int(g.size), nll_before=float(before),
               nll_after=float(after), source=source)


def apply_step(cal, scores: Scores, P: np.ndarray, clamp=None) -> np.ndarray:
    """The step's marginals of ``scores`` from their fixed point ``P`` (clamped tokens, known
    labels ``>= 0`` in ``clamp``, stay one-hot)."""
    if P.size == 0:
        return P.copy()
    out = _softmax(logits(channels(scores, P), cal.w, cal.u, cal.c))
    if clamp is not None:
        rows = np.flatnonzero(np.asarray(clamp) >= 0)
        out[rows] = 0.0
        out[rows, np.asarray(clamp)[rows]] = 1.0
    return out


__all__ = ["STEP_KINDS", "channels", "identity", "logits", "step_nll_and_grad", "fit_step",
           "apply_step"]
