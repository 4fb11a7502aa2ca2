r"""Post-hoc calibration of per-token marginals: temperature (and vector) scaling.

A fitted tagger's marginals ``p_t`` (rows summing to one) are turned into calibrated ones by
treating ``log p_t`` as logits (they are, up to a per-token constant, which a softmax ignores):

.. math::

   \tilde p_{ty} = \operatorname{softmax}_y\big(w_y \log p_{ty} + c_y\big),

with ``w_y = 1/T, c_y = 0`` for **temperature scaling** (Guo et al. 2017; one parameter, the
argmax never changes) and a free per-label ``w, c`` for **vector scaling**. The parameters
minimise the mean negative log-likelihood of held-out labeled tokens,

.. math::

   \mathrm{NLL}(w, c) = -\frac1N \sum_t \Big[w_{y_t} \ell_{t y_t} + c_{y_t}
                        - \log \sum_y e^{w_y \ell_{ty} + c_y}\Big], \qquad \ell = \log p,

whose gradient is ``d/dw_y = -(1/N) sum_t ([y = y_t] - p~_ty) l_ty`` and
``d/dc_y = -(1/N) sum_t ([y = y_t] - p~_ty)``. Temperature scaling is a one-dimensional
problem in ``log T`` (bounded Brent search); vector scaling adds a small ridge
``(lambda/2)(||w - 1||^2 + ||c||^2)`` so that rare labels stay near the identity, and is solved by
L-BFGS with the exact gradient.

Where the held-out data comes from is the caller's choice: a held-out gold set, or predictions of
models fitted on K-1 folds of the training sentences (:func:`cross_fitted`), as
``sklearn.calibration.CalibratedClassifierCV`` does with ``ensemble=False``.

The :class:`Calibrator` also records *which* marginals it was fitted on (``method``: the
mean-only RNS of Algorithm 2 or the uncertainty-aware one of :func:`gpsl.predict.rns`): with
``method="auto"`` both are fitted and the one with the lower held-out NLL is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize, minimize_scalar

from gpsl.errors import InputError

#: marginals a calibrator can be fitted on (see :meth:`gpsl.model.GPSL.predict_marginals`)
METHODS = ("mean", "probit")
_LOG_FLOOR = 1e-300
_T_BOUNDS = (1e-2, 1e2)


def _logits(P: np.ndarray) -> np.ndarray:
    return np.log(np.clip(np.asarray(P, dtype=float), _LOG_FLOOR, None))


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def stack(marginals, gold) -> tuple[np.ndarray, np.ndarray]:
    """``(N, J)`` marginals and ``(N,)`` gold indices of the labeled tokens (gold ``< 0`` or
    ``None`` = missing, dropped)."""
    if isinstance(marginals, np.ndarray) and marginals.ndim == 2:
        P = marginals
        g = np.asarray([-1 if v is None else v for v in gold], dtype=np.int64)
    else:
        P = np.concatenate([np.asarray(m, dtype=float) for m in marginals], axis=0) \
            if len(marginals) else np.zeros((0, 0))
        g = np.asarray([-1 if v is None else v for seq in gold for v in seq], dtype=np.int64)
    if P.shape[0] != g.size:
        raise ValueError(f"{P.shape[0]} marginal rows but {g.size} gold labels")
    keep = g >= 0
    return P[keep], g[keep]


def nll_and_grad(params: np.ndarray, L: np.ndarray, g: np.ndarray, ridge: float = 0.0):
    """Mean NLL of vector scaling ``params = [w (J), c (J)]`` on logits ``L`` and gold ``g``,
    plus the ridge ``(ridge/2)(||w - 1||^2 + ||c||^2)``; returns ``(value, gradient)``."""
    N, J = L.shape
    w, c = params[:J], params[J:]
    Z = L * w + c
    Zm = Z.max(axis=1, keepdims=True)
    E = np.exp(Z - Zm)
    S = E.sum(axis=1, keepdims=True)
    P = E / S
    rows = np.arange(N)
    value = -np.mean(Z[rows, g] - (Zm[:, 0] + np.log(S[:, 0])))
    R = P.copy()
    R[rows, g] -= 1.0  # p~ - onehot
    gw = (R * L).sum(axis=0) / N
    gc = R.sum(axis=0) / N
    value += 0.5 * ridge * (np.sum((w - 1.0) ** 2) + np.sum(c ** 2))
    gw += ridge * (w - 1.0)
    gc += ridge * c
    return float(value), np.concatenate([gw, gc])


def temperature_nll(T: float, L: np.ndarray, g: np.ndarray) -> float:
    """Mean NLL of the tokens ``(L, g)`` after temperature ``T``."""
    J = L.shape[1]
    return nll_and_grad(np.r_[np.full(J, 1.0 / T), np.zeros(J)], L, g)[0]


@dataclass
class Calibrator:
    """Temperature or vector scaling of marginals (see the module docstring).

    ``method`` names the marginals it applies to; ``kind`` is ``"temperature"`` or
    ``"vector"``; ``w``/``c`` are the per-label scale and shift (``w = 1/T``, ``c = 0`` for a
    temperature); ``n_tokens``, ``nll_before``/``nll_after`` and ``source`` describe the fit.
    """

    method: str = "mean"
    kind: str = "temperature"
    temperature: float = 1.0
    w: np.ndarray | None = None
    c: np.ndarray | None = None
    n_tokens: int = 0
    nll_before: float | None = None
    nll_after: float | None = None
    source: str = ""
    candidates: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ fitting

    @classmethod
    def fit(cls, marginals, gold, *, method: str = "mean", kind: str = "temperature",
            ridge: float = 1e-2, source: str = "") -> Calibrator:
        """Fit on held-out ``marginals`` (list of ``(L, J)`` or one ``(N, J)``) and gold
        indices. Raises :class:`InputError` when there is no labeled token."""
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, not {method!r}")
        if kind not in ("temperature", "vector"):
            raise ValueError(f"kind must be 'temperature' or 'vector', not {kind!r}")
        P, g = stack(marginals, gold)
        if g.size == 0:
            raise InputError("no labeled token to calibrate on", source=source or "calibration")
        L = _logits(P)
        J = L.shape[1]
        before = temperature_nll(1.0, L, g)
        lo, hi = np.log(_T_BOUNDS[0]), np.log(_T_BOUNDS[1])
        res = minimize_scalar(lambda lt: temperature_nll(float(np.exp(lt)), L, g),
                              bounds=(lo, hi), method="bounded", options={"xatol": 1e-6})
        T = float(np.exp(res.x))
        w, c = np.full(J, 1.0 / T), np.zeros(J)
        if kind == "vector":
            out = minimize(nll_and_grad, np.r_[w, c], args=(L, g, ridge), jac=True,
                           method="L-BFGS-B")
            w, c = out.x[:J], out.x[J:]
        cal = cls(method=method, kind=kind, temperature=T, w=w, c=c, n_tokens=int(g.size),
                  nll_before=float(before), source=source)
        cal.nll_after = float(nll_and_grad(np.r_[w, c], L, g)[0])
        return cal

    @classmethod
    def select(cls, by_method: dict, gold, *, kind: str = "temperature",
               source: str = "") -> Calibrator:
        """Fit one calibrator per method (``{method: marginals}`` on the same tokens) and keep
        the one with the lowest held-out NLL after scaling; the others' figures are kept in
        ``candidates``."""
        fits = {m: cls.fit(P, gold, method=m, kind=kind, source=source)
                for m, P in by_method.items()}
        best = min(fits.values(), key=lambda c: c.nll_after)
        best.candidates = {m: {"temperature": c.temperature, "nll_before": c.nll_before,
                               "nll_after": c.nll_after} for m, c in fits.items()}
        return best

    # ------------------------------------------------------------------ use

    def transform(self, marginals):
        """Calibrated marginals, in the shape given (a list of arrays or one array)."""
        if isinstance(marginals, np.ndarray):
            return self._apply(marginals)
        return [self._apply(m) for m in marginals]

    def _apply(self, P: np.ndarray) -> np.ndarray:
        P = np.asarray(P, dtype=float)
        if P.size == 0:
            return P.copy()
        if self.w is None or self.w.size != P.shape[1]:
            raise ValueError(f"calibrator for {0 if self.w is None else self.w.size} labels "
                             f"applied to {P.shape[1]}")
        return _softmax(_logits(P) * self.w + self.c)

    # ------------------------------------------------------------------ persistence

    def to_dict(self) -> dict:
        return {"method": self.method, "kind": self.kind, "temperature": self.temperature,
                "w": [float(v) for v in self.w], "c": [float(v) for v in self.c],
                "n_tokens": self.n_tokens, "nll_before": self.nll_before,
                "nll_after": self.nll_after, "source": self.source,
                "candidates": self.candidates}

    @classmethod
    def from_dict(cls, d: dict, n_labels: int) -> Calibrator:
        """The calibrator saved by :meth:`to_dict`; ``ValueError`` on a damaged record."""
        if not isinstance(d, dict) or d.get("method") not in METHODS \
                or d.get("kind") not in ("temperature", "vector"):
            raise ValueError("calibration record has no valid method/kind")
        w = np.asarray(d.get("w"), dtype=float)
        c = np.asarray(d.get("c"), dtype=float)
        T = float(d.get("temperature", 1.0))
        if w.shape != (n_labels,) or c.shape != (n_labels,) or not np.all(np.isfinite(w)) \
                or not np.all(np.isfinite(c)) or not (np.isfinite(T) and T > 0):
            raise ValueError("calibration record's parameters do not match the labels")
        return cls(method=d["method"], kind=d["kind"], temperature=T, w=w, c=c,
                   n_tokens=int(d.get("n_tokens", 0)), nll_before=d.get("nll_before"),
                   nll_after=d.get("nll_after"), source=str(d.get("source", "")),
                   candidates=dict(d.get("candidates") or {}))


# --------------------------------------------------------------------------- K-fold


def fold_indices(n: int, folds: int, seed: int = 0) -> list[np.ndarray]:
    """``folds`` disjoint index sets covering ``range(n)`` (a seeded permutation, split)."""
    folds = int(folds)
    if folds < 2 or n < folds:
        raise ValueError(f"need at least 2 folds and one sentence per fold (n={n}, "
                         f"folds={folds})")
    order = np.random.default_rng(seed).permutation(n)
    return [np.sort(part) for part in np.array_split(order, folds)]


def cross_fitted(fit: Callable[[list, list], object], predict: Callable[[object, list], dict],
                 X: Sequence, y: Sequence, folds: int = 3, seed: int = 0):
    """Out-of-fold predictions: for each fold, ``fit`` on the other folds and ``predict`` the
    fold. ``predict(model, X_fold)`` returns ``{method: list of (L, J) marginals}`` already in
    the final label order. Returns ``({method: marginals in X's order}, gold labels in X's
    order)`` (the gold labels are ``y`` itself)."""
    n = len(X)
    parts = fold_indices(n, folds, seed)
    out: dict[str, list] = {}
    for held in parts:
        held_set = set(held.tolist())
        tr = [i for i in range(n) if i not in held_set]
        model = fit([X[i] for i in tr], [y[i] for i in tr])
        preds = predict(model, [X[i] for i in held])
        for m, P in preds.items():
            slot = out.setdefault(m, [None] * n)
            for i, p in zip(held, P):
                slot[i] = p
    return out, list(y)


def cross_calibrate(by_method: dict, gold, folds: int = 2, seed: int = 0,
                    kind: str = "temperature") -> list:
    """Honest calibrated marginals of held-out data that is also the calibration data: each
    fold's sentences are transformed by a calibrator selected and fitted on the *other*
    folds (:meth:`Calibrator.select`), so that figures computed from them are not in-sample.
    ``by_method``: ``{method: list of (L, J) marginals}`` of the same sentences; ``gold``:
    their gold indices. A fold whose complement has no labeled token keeps the uncalibrated
    mean-only marginals (first method given)."""
    n = len(gold)
    first = next(iter(by_method))
    if n < 2:
        return list(by_method[first])
    parts = fold_indices(n, min(int(folds), n), seed)
    out: list = [None] * n
    for held in parts:
        held_set = set(held.tolist())
        rest = [i for i in range(n) if i not in held_set]
        try:
            cal = Calibrator.select({m: [P[i] for i in rest] for m, P in by_method.items()},
                                    [gold[i] for i in rest], kind=kind)
        except InputError:
            for i in held:
                out[i] = by_method[first][i]
            continue
        for i in held:
            out[i] = cal.transform(by_method[cal.method][i])
    return out
