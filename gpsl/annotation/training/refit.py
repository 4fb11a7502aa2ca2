"""What a training run reuses from the project's active model version: the app's refit after
a batch of new labels (docs/speed.md, "The app's refit").

* **The warm start** (:func:`previous_model`): the active version's saved model, when it
  loads, is the start of the new fit (``GPSL(warm_start=True)``): the scalable mode carries
  its weights, their precisions, ``q(f^S)`` and ``theta`` by feature and label name into
  the new vocabulary (:func:`gpsl.warm.carry_sparse_state`), with or without missing labels,
  and ends at the cold fit's optimum (``tests/lib/test_warm.py``). A model that does not load
  (deleted, damaged) means a cold fit, never a failed run.
* **The calibration** (:func:`calibrate`), by the rule of ``gpsl train``
  (:func:`gpsl.calibration.calibrate_model`: held-out gold when there is enough, else folds
  of the labeled sentences, else none), done one of three ways, recorded as ``how`` in the
  version's ``calibration`` figures:

  - ``"selected"``: every candidate fitted and the best chosen by cross-validated NLL
    (:meth:`gpsl.calibration.Calibrator.select`), and on held-out gold the held-out
    sentences' marginals cross-calibrated on the other half
    (:func:`gpsl.calibration.cross_calibrate`). Always on a first run, when the source or
    the labels changed, and once the labeled tokens grew by :data:`RESELECT_GROWTH` or
    more since the last selection;
  - ``"refitted"`` (held-out gold, between selections): the previous choice (its kind,
    method and, for the stacked ensemble, its members and weights) refitted on the new
    model's held-out scores (:func:`gpsl.calibration.refit_like`: the structured search
    started at the previous temperatures, one start instead of two, no cross-validation); the
    held-out marginals are cross-calibrated the same way on the other half
    (:func:`gpsl.calibration.cross_refit`). Measured on the 20k-token
    project of ``bench.app_refit``: 0.6 CPU s against 3.7;
  - ``"reused"`` (folds, between selections): the previous calibrator as it is. A fresh
    one needs K fold fits (K times the fit); the labeled tokens changed by less than
    :data:`RESELECT_GROWTH`, and the next selection comes when they have.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from gpsl.annotation.corpus import sentences
from gpsl.annotation.store import owned
from gpsl.annotation.training import versions
from gpsl.calibration import (
    CalibrationRun,
    calibrate_model,
    cross_calibrate,
    cross_refit,
    refit_like,
)
from gpsl.calibration.rule import plan
from gpsl.errors import GpslError
from gpsl.model import GPSL

#: a refit selects its calibrator afresh once the labeled training tokens grew by this share
#: since the last selection (between selections it refits or reuses the previous choice)
RESELECT_GROWTH = 0.25
#: how a version's calibrator was made (module docstring)
HOW = ("selected", "refitted", "reused")


def previous_model(home, project_id: int) -> tuple[GPSL | None, dict | None]:
    """The project's active version and its saved model (None, None without one; the model
    is None when its folder does not load, or is not this store's: the fit then starts
    afresh)."""
    version = versions.active(home.db, project_id)
    if version is None or not version.get("path"):
        return None, version
    try:
        return GPSL.load(owned.model_path(home.models_root, version)), version
    except (GpslError, OSError, ValueError, KeyError):
        return None, version


def warm_model(model: GPSL, previous: GPSL | None) -> GPSL:
    """``model``'s settings on ``previous``'s fitted state with ``warm_start=True`` (the fit
    then starts from it, :mod:`gpsl.warm`), or ``model`` itself without a previous one."""
    if previous is None:
        return model
    settings = model.get_params()
    settings["warm_start"] = True
    return previous.set_params(**settings)


def _source_name(source: str, folds: int | None) -> str:
    return "held-out gold" if source == "held-out" else f"{folds}-fold labels"


def _how(model: GPSL, previous: GPSL | None, prev_version: dict | None, source: str,
         folds: int | None, labeled: int) -> str:
    """``"selected"``, or ``"refitted"``/``"reused"`` between selections (module docstring)."""
    cal = getattr(previous, "calibrator_", None)
    info = ((prev_version or {}).get("metrics") or {}).get("calibration") or {}
    at = info.get("selected_at_tokens")
    if (cal is None or at is None or info.get("source") != _source_name(source, folds)
            or list(previous.classes_) != list(model.classes_)
            or labeled >= (1.0 + RESELECT_GROWTH) * max(int(at), 1)):
        return "selected"
    return "refitted" if source == "held-out" else "reused"


def calibrate(model, db, project_id: int, X, y, *, previous: GPSL | None = None,
              prev_version: dict | None = None,
              on_step: Callable[[int, int, str], None] | None = None) -> tuple[dict, dict]:
    """Fit ``model.calibrator_`` for the app by the rule ``gpsl train`` uses too (module
    docstring; ``previous``/``prev_version``: the active version's model and row, whose
    choice a refit between selections keeps). On held-out gold the held-out sentences'
    marginals returned (``{sentence id: marginals}``) are each calibrated on the other half,
    so no held-out figure is in-sample. ``on_step(done, total, what)`` reports the steps (the
    fold fits, the selection, the halves). Returns ``(figures for the version's metrics,
    marginals)``."""
    t0 = time.perf_counter()
    step = on_step or (lambda done, total, what: None)
    ids, Xg, gold = sentences.gold_data(db, project_id, "heldout")
    labeled = sum(v is not None for lab in y for v in lab)
    gold_idx = model.gold_index(gold) if ids else []
    p = plan(labeled_sentences=sum(any(v is not None for v in lab) for lab in y),
             labeled_tokens=labeled, held_out_sentences=len(ids),
             held_out_tokens=sum(int((g >= 0).sum()) for g in gold_idx))
    how = "selected" if p.source == "none" else _how(model, previous, prev_version, p.source,
                                                      p.folds, labeled)
    held: dict = {}
    if how == "selected":
        total = (p.folds or 0) + 1 if p.source == "folds" else 2
        step(0, total, "fold" if p.source == "folds" else "selection")
        run = calibrate_model(model, X, y, held_out=(Xg, gold) if ids else None,
                              held_out_source="held-out gold",
                              folds_source="{folds}-fold labels",
                              on_fold=lambda done, k: step(done, k + 1, "fold"))
        if run.source == "none":
            return {"calibration": None}, {}
        step(total - 1, total, "held-out halves" if run.source == "held-out" else "selection")
        if run.source == "held-out":
            held = dict(zip(ids, cross_calibrate(model.calibration_scores(Xg), gold_idx,
                                                 folds=2)))
        step(total, total, "")
        selected_at = labeled
    else:
        info = prev_version["metrics"]["calibration"]
        selected_at = int(info["selected_at_tokens"])
        if how == "refitted":
            step(0, 2, "refit")
            scores = model.calibration_scores(Xg)
            model.calibrator_ = refit_like(previous.calibrator_, [scores],
                                           [np.concatenate(gold_idx)], source="held-out gold")
            step(1, 2, "held-out halves")
            held = dict(zip(ids, cross_refit(previous.calibrator_, scores, gold_idx)))
            step(2, 2, "")
        else:
            model.calibrator_ = previous.calibrator_
        model.calibration_run_ = CalibrationRun(
            source=p.source, folds=p.folds, tokens=int(model.calibrator_.n_tokens),
            sentences=len(ids) if p.source == "held-out" else 0,
            seconds=time.perf_counter() - t0,
            reason=f"{how} between selections (chosen at {selected_at} labeled tokens)")
    cal = model.calibrator_
    return {"calibration": {"source": cal.source, "method": cal.method, "kind": cal.kind,
                            "temperature": cal.temperature, "t_unary": cal.t_unary,
                            "t_pair": cal.t_pair, "tokens": cal.n_tokens,
                            "nll_before": cal.nll_before, "nll_after": cal.nll_after,
                            "summary": cal.describe(), "how": how,
                            "selected_at_tokens": selected_at}}, held
