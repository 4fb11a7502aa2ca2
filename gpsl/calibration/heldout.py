"""Honest calibrated marginals of held-out data that is also the calibration data
(:func:`cross_calibrate`: the app's confidence dashboards), and a previous calibrator's choice
refitted on new data (:func:`refit_like`, :func:`cross_refit`: the app's refit between
selections, :mod:`gpsl.annotation.training.refit`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from gpsl.calibration.calibrator import Calibrator
from gpsl.calibration.decisions import keep_decisions
from gpsl.calibration.scores import STRUCTURED_KINDS, Scores, fold_indices
from gpsl.calibration.step import STEP_KINDS
from gpsl.errors import InputError


def cross_calibrate(scores: Scores, gold: Sequence[np.ndarray], folds: int = 2, seed: int = 0,
                    **select_kw) -> list[np.ndarray]:
    """Honest calibrated marginals of held-out data that is also the calibration data.

    ``scores`` holds Algorithm 2's inputs of the sentences and ``gold`` one array of gold
    indices per sentence. The sentences are split into ``folds``; each fold is calibrated by
    :meth:`Calibrator.select` fitted on the *other* folds, so figures computed from the result
    are not in-sample. A fold whose complement has no labeled token keeps the uncalibrated
    mean-only marginals. Returns one ``(L, J)`` array per sentence."""
    return _cross(scores, gold, folds, seed, lambda sc, g: Calibrator.select(sc, g, **select_kw))


def cross_refit(previous: Calibrator, scores: Scores,
                gold: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Held-out marginals that are also the calibration data, each half calibrated by
    :func:`refit_like` on the other half (as :func:`cross_calibrate`, two folds, seed 0)."""
    return _cross(scores, gold, 2, 0, lambda sc, g: refit_like(previous, sc, g))


def _cross(scores: Scores, gold: Sequence[np.ndarray], folds: int, seed: int,
           fit: Callable[[list, list], Calibrator]) -> list[np.ndarray]:
    """Each of ``folds`` folds of the sentences calibrated by ``fit([scores], [gold])`` of
    the other folds (the mean-only marginals where that fit has no labeled token, or for
    fewer than two sentences)."""
    n = len(gold)
    out: list = [None] * n
    cuts = np.cumsum(scores.lengths)[:-1]
    if n < 2:
        return np.split(scores.marginals("mean"), cuts)
    for held in fold_indices(n, min(int(folds), n), seed):
        held_set = set(held.tolist())
        rest = [i for i in range(n) if i not in held_set]
        try:
            cal = fit([scores.take(rest)], [np.concatenate([gold[i] for i in rest])])
        except InputError:
            cal = None
        part = scores.take(list(held))
        P = part.marginals("mean") if cal is None else cal.apply(part)
        for i, p in zip(held, np.split(P, np.cumsum(part.lengths)[:-1])):
            out[i] = p
    return out


def refit_like(previous: Calibrator, scores, gold, source: str = "") -> Calibrator:
    """``previous``'s choice refitted on ``scores`` (a list of
    :class:`gpsl.calibration.Scores`) with their flat gold indices ``gold`` (one array per
    Scores, ``< 0`` none): the same kind and method; a structured kind's temperatures
    searched from the previous ones; an ensemble's members refitted alike under the previous
    stacking weights."""
    cache: dict = {}
    flat = np.concatenate([np.asarray(g, dtype=np.int64) for g in gold])

    def one(c: Calibrator) -> Calibrator:
        if c.kind in STRUCTURED_KINDS:
            if c.method not in cache:
                cache[c.method] = Calibrator.fit_structured(
                    scores, gold, method=c.method, start=(c.t_unary, c.t_pair), source=source)
            st = cache[c.method]
            return st.with_vector(scores, gold) if c.kind == "structured+vector" else st
        if c.kind in STEP_KINDS:  # gpsl.calibration.step: fitted on the cached fixed point
            return Calibrator.fit_step(scores, gold, vector=c.kind == "step+vector",
                                       source=source)
        P = np.concatenate([sc.marginals(c.method) for sc in scores])
        return Calibrator.fit(P, flat, method=c.method, kind=c.kind, source=source)

    if previous.kind == "ensemble":
        return Calibrator.stacked([one(m) for m in previous.members], previous.weights,
                                  source=source)
    if previous.kind == "kept":  # gpsl.calibration.decisions: both members refitted alike
        return keep_decisions(refit_like(previous.members[0], scores, gold, source),
                              one(previous.members[1]), source=source)
    return one(previous)


__all__ = ["cross_calibrate", "cross_refit", "refit_like"]
