"""Post-hoc calibration of the marginals (:func:`calibrate`): temperature and
vector scaling, the step at Algorithm 2's fixed point (:mod:`~gpsl.calibration.step`, the
default's), the structured temperature inside Algorithm 2 (:mod:`~gpsl.calibration.structured`),
their stacked ensemble, chosen by cross-validated NLL, never worse than none.
:mod:`~gpsl.calibration.scores`: Algorithm 2's inputs, the scalings'
objectives, the folds; :mod:`~gpsl.calibration.calibrator`: the :class:`Calibrator`;
:mod:`~gpsl.calibration.decisions`: which candidates may change the decisions;
:mod:`~gpsl.calibration.heldout`: :func:`cross_calibrate`, :func:`refit_like`, :func:`cross_refit`;
:mod:`~gpsl.calibration.rule`: the wrapper of the estimator (:func:`calibrate`: the fold fits
in parallel processes, the choice of calibrator), which data a model is calibrated on (the one
rule of the app and ``gpsl train``: :func:`calibrate_model`), the record of it
(:class:`CalibrationRun`). The estimator (:mod:`gpsl.model`) never imports this package."""

from gpsl.calibration.calibrator import Calibrator
from gpsl.calibration.heldout import cross_calibrate, cross_refit, refit_like
from gpsl.calibration.rule import (
    MIN_TOKENS,
    SOURCES,
    CalibrationRun,
    Plan,
    calibrate,
    calibrate_model,
    fold_processes,
    not_calibrated,
    out_of_fold_scores,
    plan,
)
from gpsl.calibration.scores import (
    DEFAULT_KINDS,
    DEFAULT_METHODS,
    ENSEMBLE,
    ENSEMBLES,
    FOLDS_LARGE,
    FOLDS_SMALL,
    FOLDS_SMALL_MAX_SENTENCES,
    KINDS,
    METHODS,
    OUT_OF_FOLD_MAX_TOKENS,
    SELECT_CRITERIA,
    SELECT_GROUPS,
    STACK_MIN_WEIGHT,
    STRUCTURED_KINDS,
    STRUCTURED_MAX_TOKENS,
    Scores,
    calibration_folds,
    fold_indices,
    nll_and_grad,
    stack,
    stacking_weights,
    temperature_nll,
)
from gpsl.calibration.step import STEP_KINDS

__all__ = ["Calibrator", "Scores", "cross_calibrate", "cross_refit", "refit_like",
           "calibration_folds", "fold_indices",
           "nll_and_grad", "stack", "stacking_weights", "temperature_nll", "METHODS", "KINDS",
           "STRUCTURED_KINDS", "DEFAULT_KINDS", "DEFAULT_METHODS", "STEP_KINDS",
           "OUT_OF_FOLD_MAX_TOKENS", "SELECT_GROUPS", "SELECT_CRITERIA", "ENSEMBLES",
           "ENSEMBLE", "STACK_MIN_WEIGHT", "STRUCTURED_MAX_TOKENS", "FOLDS_SMALL",
           "FOLDS_LARGE", "FOLDS_SMALL_MAX_SENTENCES", "MIN_TOKENS", "SOURCES", "Plan", "plan",
           "CalibrationRun", "calibrate", "calibrate_model", "not_calibrated", "out_of_fold_scores",
           "fold_processes"]
