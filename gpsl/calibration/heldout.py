"""Honest calibrated marginals of held-out data that is also the calibration data
(:func:`cross_calibrate`: the app's confidence dashboards)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpsl.calibration.calibrator import Calibrator
from gpsl.calibration.scores import Scores, fold_indices
from gpsl.errors import InputError


def cross_calibrate(scores: Scores, gold: Sequence[np.ndarray], folds: int = 2, seed: int = 0,
                    **select_kw) -> list[np.ndarray]:
    """Honest calibrated marginals of held-out data that is also the calibration data.

    ``scores`` holds Algorithm 2's inputs of the sentences and ``gold`` one array of gold
    indices per sentence. The sentences are split into ``folds``; each fold is calibrated by
    :meth:`Calibrator.select` fitted on the *other* folds, so figures computed from the result
    are not in-sample. A fold whose complement has no labeled token keeps the uncalibrated
    mean-only marginals. Returns one ``(L, J)`` array per sentence."""
    n = len(gold)
    out: list = [None] * n
    cuts = np.cumsum(scores.lengths)[:-1]
    if n < 2:
        return np.split(scores.marginals("mean"), cuts)
    for held in fold_indices(n, min(int(folds), n), seed):
        held_set = set(held.tolist())
        rest = [i for i in range(n) if i not in held_set]
        try:
            cal = Calibrator.select([scores.take(rest)],
                                    [np.concatenate([gold[i] for i in rest])], **select_kw)
        except InputError:
            cal = None
        part = scores.take(list(held))
        P = part.marginals("mean") if cal is None else cal.apply(part)
        for i, p in zip(held, np.split(P, np.cumsum(part.lengths)[:-1])):
            out[i] = p
    return out


__all__ = ["cross_calibrate"]
