r"""Post-hoc calibration of per-token marginals: its inputs and the scalings' objectives.

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


Here (beside Algorithm 2's inputs of some sentences, :class:`gpsl.predict.Scores`, which this
module re-exports): those objectives
(:func:`nll_and_grad`, :func:`temperature_nll`), the stacking weights of the ensemble
(:func:`stacking_weights`, derived in :mod:`gpsl.calibration.calibrator`), the folds a
calibration is fitted on (:func:`calibration_folds`, :func:`fold_indices`) and the
constants. :class:`gpsl.calibration.calibrator.Calibrator` fits and applies the scalings.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Algorithm 2's inputs and the marginals' names live with Algorithm 2 (the estimator reads
# them there); every name is still importable from here and from gpsl.calibration
from gpsl.predict import MARGINALS, Scores

#: marginals a calibrator can be fitted on (:data:`gpsl.predict.MARGINALS`)
METHODS = MARGINALS

KINDS = ("temperature", "vector", "structured", "structured+vector", "step", "step+vector",
         "ensemble", "kept")
#: kinds that rerun Algorithm 2 with the structured temperatures (need :meth:`Calibrator.apply`)
STRUCTURED_KINDS = ("structured", "structured+vector")
#: candidates :meth:`Calibrator.select` (and so :func:`gpsl.calibration.calibrate`) considers:
#: the temperature and the step at the fixed point (:mod:`gpsl.calibration.step`), fitted on
#: one run of Algorithm 2 per group of calibration tokens; the structured kinds (their search
#: reruns it a few hundred times) were the default before issue 36
DEFAULT_KINDS = ("temperature", "step", "step+vector")
#: the marginals the default candidates read (``calibrate(model, X, y, method="auto")``: both)
DEFAULT_METHODS = ("mean",)
#: groups a single held-out set is split into to cross-validate the choice of calibrator
SELECT_GROUPS = 3
#: what :meth:`Calibrator.select` can choose by (cross-validated): NLL, Brier score, ECE
SELECT_CRITERIA = ("nll", "brier", "ece")
#: how the candidates' ensemble weighs them (:mod:`gpsl.calibration.calibrator`); ``None`` =
#: no ensemble
ENSEMBLES = ("uniform", "stack")
ENSEMBLE = "stack"
#: a stacked member with a smaller weight is dropped (the rest renormalised)
STACK_MIN_WEIGHT = 1e-3
_LOG_FLOOR = 1e-300
_T_BOUNDS = (1e-2, 1e2)
_LOG_T_STRUCTURED = (np.log(0.05), np.log(1e3))  # beyond 1e3 a part is simply switched off
#: tokens the structured temperature is fitted on at most (a random subset of sentences above)
STRUCTURED_MAX_TOKENS = 20_000



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


def stacking_weights(Q: np.ndarray, *, max_iter: int = 5000, tol: float = 1e-12,
                     history: list | None = None) -> np.ndarray:
    """Stacking weights (:mod:`gpsl.calibration.calibrator`): ``pi`` on the simplex maximising
    ``(1/N) sum_t log sum_k pi_k Q_tk``, where ``Q`` is ``(N, K)``: the held-out probability
    each of K candidates gave token t's gold label. EM for mixture weights from the uniform
    start, ``pi_k <- (1/N) sum_t pi_k Q_tk / sum_j pi_j Q_tj``, until a step gains less than
    ``tol``. ``history`` (a list) receives the objective after every step; it never decreases
    (EM for the weights of a mixture with fixed components)."""
    Q = np.clip(np.asarray(Q, dtype=float), _LOG_FLOOR, None)
    if Q.ndim != 2 or Q.shape[0] == 0 or Q.shape[1] == 0:
        raise ValueError(f"stacking needs an (N, K) array with N, K >= 1, not {Q.shape}")
    N, K = Q.shape
    w = np.full(K, 1.0 / K)
    mix = Q @ w  # sum_j pi_j Q_tj, the denominator of the next step and the objective's
    prev = float(np.mean(np.log(mix)))
    for _ in range(int(max_iter)):
        # the step as two products with Q (pi_k mean_t Q_tk / mix_t), no (N, K) temporaries:
        # the same iterates as dividing the responsibilities Q_tk pi_k by their row sums
        np.reciprocal(mix, out=mix)
        w = w * (mix @ Q) / N
        w /= w.sum()
        np.matmul(Q, w, out=mix)
        val = float(np.mean(np.log(mix)))
        if history is not None:
            history.append(val)
        if val - prev < tol:
            break
        prev = val
    return w


def temperature_nll(T: float, L: np.ndarray, g: np.ndarray) -> float:
    """Mean NLL of the tokens ``(L, g)`` after temperature ``T`` (:func:`nll_and_grad`'s
    value at ``w = 1/T``, ``c = 0``, without its gradient)."""
    Z = L / float(T)
    Zm = Z.max(axis=1)
    lse = Zm + np.log(np.exp(Z - Zm[:, None]).sum(axis=1))
    return float(-np.mean(Z[np.arange(Z.shape[0]), g] - lse))


# --------------------------------------------------------------------------- K-fold


#: folds for calibrating on the training sentences themselves (:func:`calibration_folds`)
FOLDS_SMALL, FOLDS_LARGE = 5, 2
#: sentences up to which :func:`calibration_folds` gives :data:`FOLDS_SMALL` folds
FOLDS_SMALL_MAX_SENTENCES = 250
#: out-of-fold tokens a calibration scores at most (:func:`gpsl.calibration.out_of_fold_scores`
#: predicts a seeded subset of each held-out fold's sentences above it): the calibrator's
#: choice then costs the same at any size
OUT_OF_FOLD_MAX_TOKENS = 40_000


def calibration_folds(n_sentences: int) -> int | None:
    """How many folds to calibrate on when the training sentences are the calibration data.

    The fold models see ``(K-1)/K`` of the sentences and are less sure than the model fitted on
    all of them, so a calibration fitted on their out-of-fold marginals leaves that model a
    little over-confident; the gap is largest where the learning curve is steepest (few
    sentences) and shrinks as K grows. Five folds (scikit-learn's default ``cv``) up to
    :data:`FOLDS_SMALL_MAX_SENTENCES` sentences, where a fit is cheap (on seg's 20 training
    sentences: GPSL2's ECE15 0.0437 at 3 folds, 0.0398 at 5; ``python -m bench.calibration``),
    two above it: K folds cost K - 1 fits of (K-1)/K of the data, and two keep the
    calibration within one fit of the model's own (issue 36: five folds made ``gpsl train``
    on 800 chunking sentences cost 32 times CRFsuite's CPU; ``python -m bench.cli_cost``);
    fewer than two sentences per fold: three folds from six to nine sentences, else ``None``
    (too few to calibrate)."""
    n = int(n_sentences)
    if FOLDS_SMALL * 2 <= n <= FOLDS_SMALL_MAX_SENTENCES:
        return FOLDS_SMALL
    if n > FOLDS_SMALL_MAX_SENTENCES:
        return FOLDS_LARGE
    return 3 if n >= 6 else None


def fold_indices(n: int, folds: int, seed: int = 0) -> list[np.ndarray]:
    """``folds`` disjoint index sets covering ``range(n)`` (a seeded permutation, split)."""
    folds = int(folds)
    if folds < 2 or n < folds:
        raise ValueError(f"need at least 2 folds and one sentence per fold (n={n}, "
                         f"folds={folds})")
    order = np.random.default_rng(seed).permutation(n)
    return [np.sort(part) for part in np.array_split(order, folds)]


def leave_out_groups(scores: Sequence[Scores], gold: Sequence[np.ndarray], seed: int = 0):
    """The groups :meth:`Calibrator.select` leaves out one at a time: the given ``Scores``
    when there are two or more (the fold models' held-out folds), else :data:`SELECT_GROUPS`
    groups of the one ``Scores``' sentences; ``[]`` when there are not two groups with
    labels."""
    if len(scores) == 1:
        sc, g = scores[0], gold[0]
        n = int(sc.lengths.size)
        if n < 2:
            return []
        parts = [sorted(part.tolist()) for part in fold_indices(n, min(SELECT_GROUPS, n),
                                                                seed)]
        groups = [(sc.take(part), g[sc.rows(part)]) for part in parts]
    else:
        groups = list(zip(scores, gold))
    if sum(bool((g >= 0).any()) for _, g in groups) < 2:
        return []
    return groups


def nll_before_after(cal, scores: Sequence[Scores],
                     gold: Sequence[np.ndarray]) -> tuple[float, float]:
    """Mean NLL of the labeled tokens of ``(scores, gold)`` under the mean-only RNS and
    under the :class:`~gpsl.calibration.Calibrator` ``cal`` (the mean-only run is the one
    ``cal``'s members share when they read it)."""
    before = after = 0.0
    n = 0
    for sc, g in zip(scores, gold):
        keep = np.flatnonzero(g >= 0)
        if not keep.size:
            continue
        runs = sc.runs  # Algorithm 2's runs the selection made already
        P_after = cal.apply(sc, None, runs)
        P_before = runs[("mean", 1.0, 1.0)] if ("mean", 1.0, 1.0) in runs \
            else sc.marginals("mean")
        before -= np.log(np.clip(P_before[keep, g[keep]], _LOG_FLOOR, None)).sum()
        after -= np.log(np.clip(P_after[keep, g[keep]], _LOG_FLOOR, None)).sum()
        n += keep.size
    return float(before / max(n, 1)), float(after / max(n, 1))
