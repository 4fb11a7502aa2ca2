"""The one held-out evaluation of the app: a model version's predictions against the project's
held-out gold labels.

:func:`heldout` computes every figure once, with the library's
:func:`gpsl.metrics.calibration_summary`; the training run stores :meth:`HeldOut.figures` in
the version's metrics (:mod:`gpsl.annotation.training.pipeline`) and the Confidence page's report is
built from the same record (:mod:`gpsl.annotation.reports`).

A gold label the model never saw in training has probability 0 under it: such a token counts
as wrong in the accuracy and the ECEs (it is one the model cannot get right) and is left out
of the NLL and the Brier score (its log probability is minus infinity).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpsl import metrics

__all__ = ["HeldOut", "heldout"]


@dataclass(frozen=True)
class HeldOut:
    """Held-out figures of a version: ``accuracy``, ``ece`` (10 equal-width bins),
    ``ece_mass`` (15 equal-mass bins), ``mean_confidence``, ``nll`` and ``brier`` (tokens whose
    gold label the model knows), ``chunk_f1`` (complete BIO gold only, else None), and per
    gold token its ``confidence``, whether it is ``correct`` and its ``gold_label``."""

    sentences: int
    tokens: int
    accuracy: float
    ece: float
    ece_mass: float
    mean_confidence: float
    nll: float
    brier: float
    chunk_f1: float | None
    confidence: np.ndarray
    correct: np.ndarray
    gold_label: tuple[str, ...]

    def figures(self) -> dict:
        """The figures a version's metrics keep (``heldout_*``)."""
        out = {"heldout_sentences": self.sentences, "heldout_tokens": self.tokens,
               "heldout_accuracy": self.accuracy, "heldout_ece": self.ece,
               "heldout_ece_mass": self.ece_mass,
               "heldout_mean_confidence": self.mean_confidence, "heldout_nll": self.nll,
               "heldout_brier": self.brier}
        if self.chunk_f1 is not None:
            out["heldout_chunk_f1"] = self.chunk_f1
        return out


def heldout(classes: Sequence[str], marginals: Sequence[np.ndarray | None],
            gold: Sequence[Sequence[str | None]]) -> HeldOut | None:
    """Predictions (per sentence ``(L, J)`` marginals, columns in ``classes`` order; None or a
    wrong shape: the sentence is left out) against gold labels (None: no gold for that
    token); None without a gold token."""
    classes = list(classes)
    index = {c: j for j, c in enumerate(classes)}
    rows, gold_idx, gold_lab, y_true, y_pred = [], [], [], [], []
    for p, g in zip(marginals, gold):
        if p is None or p.shape != (len(g), len(classes)):
            continue
        y_true.append(list(g))
        y_pred.append([classes[j] for j in p.argmax(axis=1)])
        for t, lab in enumerate(g):
            if lab is not None:
                rows.append(p[t])
                gold_idx.append(index.get(lab, -1))
                gold_lab.append(lab)
    if not rows:
        return None
    P = np.asarray(rows, dtype=float)
    idx = np.asarray(gold_idx)
    seen = idx >= 0
    unseen = sorted({lab for lab, i in zip(gold_lab, gold_idx) if i < 0})
    # an unseen gold label is a class of probability 0: counted, and never right
    padded = np.hstack([P, np.zeros((P.shape[0], len(unseen)))])
    idx_all = np.where(seen, idx, [len(classes) + unseen.index(lab) if i < 0 else 0
                                   for lab, i in zip(gold_lab, gold_idx)])
    s = metrics.calibration_summary(padded, idx_all)
    chunk = None
    if all(lab is not None for g in y_true for lab in g) and \
            metrics.is_chunk_label_set(lab for g in y_true for lab in g):
        with contextlib.suppress(ValueError):
            chunk = float(metrics.chunk_f1(y_true, y_pred))
    return HeldOut(
        sentences=len(y_true), tokens=int(s["n"]), accuracy=float(s["accuracy"]),
        ece=float(s["ece_width"]), ece_mass=float(s["ece_mass"]),
        mean_confidence=float(s["mean_confidence"]),
        nll=metrics.negative_log_likelihood(P[seen], idx[seen]) if seen.any() else float("nan"),
        brier=metrics.brier_score(P[seen], idx[seen]) if seen.any() else float("nan"),
        chunk_f1=chunk, confidence=np.asarray(s["conf"]),
        correct=np.asarray(s["correct"], dtype=bool), gold_label=tuple(gold_lab))
