"""How a model is calibrated, written once: the one owner of calibration, a wrapper the
estimator knows nothing about (as scikit-learn's ``CalibratedClassifierCV``).
:func:`calibrate` fits the fold models, chooses the calibrator
(:meth:`~gpsl.calibration.Calibrator.select`, where the uncalibrated marginals stay a
candidate) and attaches it to the model; :func:`calibrate_model` chooses the data first (the
app's training run and ``gpsl train`` both call it). The estimator is only called (its
``fit``, ``get_params``, ``calibration_scores``, ``gold_index`` and fitted attributes) and
never calls back: ``gpsl.model`` imports nothing of this package (``tests/meta/test_structure.py``).

**The rule** (:func:`plan`). Held-out gold labels when there are enough of them
(:data:`MIN_TOKENS` labeled tokens in at least two sentences), else K folds of the labeled
training sentences (:func:`gpsl.calibration.calibration_folds`: 5 up to 250 sentences, 2
above; or the K asked for), else none: fewer than :data:`MIN_TOKENS` labeled training tokens,
or too few sentences for two per fold. The calibrator itself is chosen from the candidates by
cross-validated NLL (:meth:`gpsl.calibration.Calibrator.select`), whichever the data.

**What it costs.** Held-out data costs the calibrator's selection only. Folds cost K more fits,
each on ``(K-1)/K`` of the sentences with the model's own settings: they run in parallel
processes (:func:`out_of_fold_scores`; ``jobs``, by default ``min(K, CPUs)`` when the model's
fit took :data:`PROCESS_MIN_FIT_SECONDS` or more, else here), each process with its share of
the CPUs as ``n_jobs`` threads (unless ``n_jobs`` was set). The candidates' selection that
follows (:meth:`~gpsl.calibration.Calibrator.select`) runs Algorithm 2 once per fold's
scored sentences (at most :data:`~gpsl.calibration.OUT_OF_FOLD_MAX_TOKENS` tokens in all) and
fits the default candidates on those cached marginals (:mod:`gpsl.calibration.step`); before
issue 36 it reran Algorithm 2 a few hundred times and cost more than the fold fits.

A fold fit is never warm-started from the model being calibrated: that model has seen the
fold's labels, so a state carried from it would make the out-of-fold marginals partly
in-sample (the point of the folds); with the fixed hyper-parameters of the default
(``learn_hyper=False``) the only thing a warm start could carry without that leak, ``theta``,
is the same in every fit anyway.

**The record** (:class:`CalibrationRun`): where the calibration came from (``"held-out"``,
``"folds"`` or ``"none"`` with the reason), K, the tokens and sentences, the processes and the
seconds it took; kept as ``model.calibration_run_`` and saved with the model
(:mod:`gpsl.persist`).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass

import numpy as np

from gpsl.calibration.calibrator import Calibrator
from gpsl.calibration.scores import (
    DEFAULT_KINDS,
    ENSEMBLE,
    METHODS,
    OUT_OF_FOLD_MAX_TOKENS,
    calibration_folds,
    fold_indices,
)
from gpsl.errors import GpslError, InputError
from gpsl.rns_sweeps import single_threaded_blas

#: labeled tokens needed to calibrate at all (held-out gold: in at least two sentences)
MIN_TOKENS = 50
#: where a calibration came from
SOURCES = ("held-out", "folds", "none")


@dataclass(frozen=True)
class Plan:
    """The rule's answer: ``source`` (:data:`SOURCES`), ``folds`` (K for ``"folds"``) and why
    (``reason``: one clause, for a summary line)."""

    source: str
    folds: int | None
    reason: str


def plan(*, labeled_sentences: int, labeled_tokens: int, held_out_sentences: int = 0,
         held_out_tokens: int = 0, folds: int | None = None) -> Plan:
    """The calibration rule (module docstring) on counts: the labeled training sentences and
    tokens, the held-out sentences and their labeled tokens, ``folds`` a K asked for (else
    :func:`calibration_folds`)."""
    if held_out_sentences >= 2 and held_out_tokens >= MIN_TOKENS:
        return Plan("held-out", None, f"{held_out_tokens} held-out labeled tokens")
    k = calibration_folds(labeled_sentences) if folds is None else int(folds)
    held = (f"{held_out_tokens} held-out labeled tokens in {held_out_sentences} sentences "
            f"(needs {MIN_TOKENS} in two); " if held_out_sentences else "")
    if labeled_tokens < MIN_TOKENS:
        return Plan("none", None, f"{held}{labeled_tokens} labeled training tokens are too "
                                  f"few to calibrate on (at least {MIN_TOKENS})")
    if k is None or labeled_sentences < 2 * k:
        need = 2 * (k or 3)
        return Plan("none", None, f"{held}{labeled_sentences} labeled training sentences are "
                                  f"too few for {k or 3} calibration folds (at least {need})")
    return Plan("folds", k, f"{held}{labeled_sentences} labeled training sentences")


@dataclass
class CalibrationRun:
    """How a model was calibrated: ``source`` (:data:`SOURCES`), ``folds`` (K), the labeled
    ``tokens`` and ``sentences`` the calibrator was fitted on, the fold fits' ``processes``,
    the wall-clock ``seconds`` of the whole step (fold fits and selection) and ``reason`` (why
    that source, or why none)."""

    source: str
    folds: int | None = None
    tokens: int = 0
    sentences: int = 0
    processes: int = 0
    seconds: float = 0.0
    reason: str = ""

    def summary(self) -> str:
        """One clause for a summary line."""
        if self.source == "none":
            return f"not calibrated: {self.reason}"
        where = (f"{self.folds} folds of the training sentences" if self.source == "folds"
                 else "held-out labels")
        procs = f" in {self.processes} processes" if self.processes > 1 else ""
        return f"calibrated on {where} ({self.tokens} tokens, {self.seconds:.2f} s{procs})"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d) -> CalibrationRun:
        """The record saved by :meth:`to_dict`; ``ValueError`` on a damaged one."""
        if not isinstance(d, dict) or d.get("source") not in SOURCES:
            raise ValueError("calibration run record has no valid source")
        folds = d.get("folds")
        ints = [d.get(k, 0) for k in ("tokens", "sentences", "processes")]
        seconds = d.get("seconds", 0.0)
        if (folds is not None and not _is_int(folds)) or not all(_is_int(v) and v >= 0
                                                                 for v in ints):
            raise ValueError("calibration run record's counts are not integers")
        if d["source"] == "folds" and (folds is None or folds < 2):
            raise ValueError("calibration run record on folds has no number of folds")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
                or not np.isfinite(seconds) or seconds < 0:
            raise ValueError("calibration run record's seconds are not a duration")
        if not isinstance(d.get("reason", ""), str):
            raise ValueError("calibration run record's reason is not text")
        return cls(source=d["source"], folds=folds, tokens=ints[0], sentences=ints[1],
                   processes=ints[2], seconds=float(seconds), reason=d.get("reason", ""))


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _labels(y) -> list[list]:
    return [list(getattr(lab, "labels", lab)) for lab in y]


def calibrate(model, X, y, *, folds: int | None = None, method: str = "mean",
              kinds: Sequence[str] = DEFAULT_KINDS, seed: int = 0, source: str = "",
              criterion: str = "nll", ensemble: str | None = ENSEMBLE, jobs: int | None = 1,
              on_fold=None):
    """Calibrate the fitted GPSL ``model`` on ``(X, y)``: fit the post-hoc calibration
    (:class:`~gpsl.calibration.Calibrator`), keep it in ``model.calibrator_`` (saved with the
    model, applied by its ``predict_marginals``) and return the model. The wrapper of the
    estimator, as scikit-learn's ``CalibratedClassifierCV``: the estimator knows nothing of it.

    ``folds=None``: ``(X, y)`` is held-out labeled data for *this* model. ``folds=K``:
    ``(X, y)`` are the training sentences; K models with this model's parameters are fitted
    on K-1 folds each and give Algorithm 2's inputs for the remaining fold (out-of-fold,
    :func:`out_of_fold_scores`), as ``CalibratedClassifierCV(ensemble=False)``. Candidates
    (:data:`~gpsl.calibration.DEFAULT_KINDS`): a temperature of the mean-only marginals
    (``method="auto"``: of the uncertainty-aware ones too, whose variances cost the fold models
    more) and the step at Algorithm 2's fixed point with shared or per-label weights
    (:mod:`gpsl.calibration.step`; the structured temperature, ``kinds=("structured", ...)``,
    reruns Algorithm 2 a few hundred times); the lowest cross-validated NLL on the calibration
    data wins, never worse on the left-out tokens than the uncalibrated marginals
    (:meth:`~gpsl.calibration.Calibrator.select`; ``kinds`` narrows the choice, ``criterion``
    chooses by the cross-validated ``"brier"`` score or ``"ece"`` instead). ``ensemble``: how
    the candidates' ensemble, itself a candidate, weighs them (``"uniform"`` or ``"stack"``,
    :mod:`gpsl.calibration`); ``None``: no ensemble. ``jobs``: processes of the fold fits
    (default 1: here; ``None``: :func:`fold_processes`; ``on_fold(done, K)`` after each fold
    fit). ``model.calibration_run_`` records the data and the seconds
    (:class:`CalibrationRun`). ``fit`` itself never calibrates (scikit-learn's convention;
    ``gpsl train`` and the app do, by :func:`calibrate_model`)."""
    t0 = time.perf_counter()
    model._check_fitted()
    methods = list(METHODS) if method == "auto" else [method]
    if any(m not in METHODS for m in methods):
        raise ValueError(f"method must be 'auto', 'mean' or 'probit', not {method!r}")
    X, labels = list(X), _labels(y)
    need_var = "probit" in methods
    with single_threaded_blas():  # small products: BLAS threads only spin (CPU x2)
        if folds is None:
            scores = [model.calibration_scores(X, with_variance=need_var)]
            gold = [np.concatenate(model.gold_index(labels))] if labels else []
            source = source or "held-out"
        else:
            scores, gold = out_of_fold_scores(model, X, labels, int(folds), seed=seed,
                                              jobs=jobs, on_fold=on_fold,
                                              with_variance=need_var)
            source = source or f"{int(folds)}-fold"
        model.calibrator_ = Calibrator.select(scores, gold, methods=methods, kinds=kinds,
                                              source=source, criterion=criterion,
                                              ensemble=ensemble)
    model.calibration_run_ = CalibrationRun(
        source="held-out" if folds is None else "folds",
        folds=None if folds is None else int(folds), tokens=int(model.calibrator_.n_tokens),
        sentences=len(X), seconds=time.perf_counter() - t0, reason=model.calibrator_.source)
    return model


def calibrate_model(model, X, y, *, held_out=None, folds: int | None = None,
                    required: str | None = None, jobs: int | None = None, seed: int = 0,
                    held_out_source: str = "held-out",
                    folds_source: str = "{folds}-fold", on_fold=None) -> CalibrationRun:
    """Calibrate the fitted ``model`` by the rule (module docstring) and record how.

    ``(X, y)`` are its training sentences (``None`` = a missing label); ``held_out`` an
    optional ``(X, y)`` of held-out gold sentences; ``folds`` a K asked for. ``required``
    (``"held-out"`` or ``"folds"``: what the user asked for explicitly) makes the rule's
    choosing anything else a one-line :class:`InputError` instead of a fallback.
    ``held_out_source``/``folds_source`` name the data in the calibrator's ``source``;
    ``on_fold(done, K)`` is called as the fold fits end (progress displays). Sets
    ``model.calibrator_`` (``None`` when not calibrated) and ``model.calibration_run_``, and
    returns the latter."""
    t0 = time.perf_counter()
    labels = _labels(y)
    labeled = [i for i, lab in enumerate(labels) if any(v is not None for v in lab)]
    n_labeled = sum(v is not None for lab in labels for v in lab)
    Xh, gold = ([], []) if held_out is None else (list(held_out[0]), _labels(held_out[1]))
    gold_idx = model.gold_index(gold) if Xh else []
    n_gold = sum(int((g >= 0).sum()) for g in gold_idx)
    p = plan(labeled_sentences=len(labeled), labeled_tokens=n_labeled,
             held_out_sentences=len(Xh), held_out_tokens=n_gold, folds=folds)
    if required is not None and p.source != required:
        what = "--calibrate FILE" if required == "held-out" else f"{folds} calibration folds"
        raise InputError(f"cannot calibrate on {what}: {p.reason}",
                         source=held_out_source if required == "held-out" else "training data")
    model.calibrator_ = None
    run = CalibrationRun(source=p.source, folds=p.folds, reason=p.reason)
    if p.source == "held-out":
        calibrate(model, Xh, gold, source=held_out_source)
        run.sentences = len(Xh)
    elif p.source == "folds":
        Xl, yl = [X[i] for i in labeled], [labels[i] for i in labeled]
        run.processes = fold_processes(p.folds, jobs, model)
        calibrate(model, Xl, yl, folds=p.folds, seed=seed, jobs=run.processes,
                  source=folds_source.format(folds=p.folds), on_fold=on_fold)
        run.sentences = len(labeled)
    if model.calibrator_ is not None:
        run.tokens = int(model.calibrator_.n_tokens)
    run.seconds = time.perf_counter() - t0
    model.calibration_run_ = run
    return run


def not_calibrated(model, reason: str) -> CalibrationRun:
    """Record that ``model`` is left uncalibrated on purpose (``--no-calibrate``, no gold)."""
    model.calibrator_ = None
    model.calibration_run_ = CalibrationRun(source="none", reason=reason)
    return model.calibration_run_


# --------------------------------------------------------------------------- the fold fits


def cpu_count() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


#: ``jobs=None`` runs the fold fits in processes only when the model's own fit took at least
#: this long: below it the fits are over before processes pay. Five fold fits of the scalable
#: mode at the paper's sizes take 0.4-0.9 s each (chunking 100 and basenp 150 sentences); on
#: this shared 2-core machine (load average 8) two processes made them slower, not faster:
#: 6.1 s against 4.5 s forked, 9.1 s against 5.9 s spawned (chunking).
PROCESS_MIN_FIT_SECONDS = 2.0


def fold_processes(folds: int, jobs: int | None = None, model=None) -> int:
    """Processes for ``folds`` fold fits: ``jobs`` when given, else ``min(K, CPUs)`` when the
    model's fit took :data:`PROCESS_MIN_FIT_SECONDS` or more, else one (here). One as well
    when the model fits on a Dask cluster (its fits are distributed already, and a client does
    not travel to another process) or when a new process could not start this program
    (``__main__`` read from stdin: :func:`_spawn_safe`)."""
    if model is not None and getattr(model, "cluster", None) is not None:
        return 1
    if not _spawn_safe():
        return 1
    if jobs is None and model is not None \
            and getattr(model, "fit_seconds_", PROCESS_MIN_FIT_SECONDS) < PROCESS_MIN_FIT_SECONDS:
        return 1
    n = int(jobs) if jobs is not None else cpu_count()
    return max(1, min(int(folds), n))


def _spawn_safe() -> bool:
    """Whether a ``spawn`` process can start: it imports the caller's ``__main__`` again,
    which must then be a file (not ``python - < script`` or ``-c``). A script that calls
    this must keep its work under ``if __name__ == "__main__":`` (Python's rule for every
    process pool)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return path is None or os.path.isfile(path)


def _fold_task(task):
    """One fold fit (in a worker process or here): the fold model's Algorithm 2 inputs of the
    held-out sentences (their predictive variances only when ``with_variance``)."""
    from threadpoolctl import threadpool_limits

    cls, settings, X_train, y_train, X_held, classes, with_variance = task
    fm = cls(**settings).fit(X_train, y_train, classes=classes)
    with threadpool_limits(limits=1, user_api="blas"):  # as the fit: BLAS threads only spin
        return fm.calibration_scores(X_held, with_variance=with_variance)


def _init_worker(parent: int) -> None:
    """A fold-fit process: Ctrl-C is the parent's to handle, and the process ends with its
    parent (Linux: ``PR_SET_PDEATHSIG``), so a stopped training run leaves no fit behind."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # pragma: no cover - no prctl
            pass
    if os.getppid() != parent:  # the parent ended before prctl
        os._exit(1)


def out_of_fold_scores(model, X: Sequence, y: Sequence, folds: int, *, seed: int = 0,
                       jobs: int | None = None, on_fold=None, with_variance: bool = True,
                       max_tokens: int | None = OUT_OF_FOLD_MAX_TOKENS):
    """Algorithm 2's inputs of the sentences of ``(X, y)`` under a model fitted without them:
    K models with ``model``'s parameters (``warm_start`` off), each fitted on K-1 folds
    (:func:`fold_indices`) and scoring the remaining one, as
    ``CalibratedClassifierCV(ensemble=False)``. Returns ``(scores, gold)``: one
    :class:`~gpsl.calibration.Scores` and one array of gold indices (model's classes) per fold.
    Each fold model is fitted on all its K-1 folds; when the sentences hold more than
    ``max_tokens`` tokens, it scores a seeded random subset of its held-out fold's sentences
    (about ``max_tokens / K`` tokens a fold; ``None``: all), so that the calibrator's choice
    after it costs the same at any size. ``with_variance``: the predictive variances too
    (only the uncertainty-aware marginals read them).

    The fits run in :func:`fold_processes` processes (``spawn``: safe in a threaded caller
    such as the app); one process runs them here. ``on_fold(done, K)`` after each fit ends."""
    X, labels = list(X), _labels(y)
    settings = model.get_params()
    settings.update(warm_start=False, callback=None, verbose=False)
    parts = fold_indices(len(X), int(folds), seed)
    scored = _scored(parts, [len(x) for x in X], max_tokens, seed)
    n_proc = fold_processes(len(parts), jobs, model)
    if n_proc > 1 and settings.get("n_jobs") is None:
        settings["n_jobs"] = max(1, cpu_count() // n_proc)  # no oversubscription
    tasks = []
    for held, score in zip(parts, scored):
        held_set = set(held.tolist())
        tr = [i for i in range(len(X)) if i not in held_set]
        tasks.append((type(model), settings, [X[i] for i in tr], [labels[i] for i in tr],
                      [X[i] for i in score], list(model.classes_), bool(with_variance)))
    scores = _run(tasks, n_proc, on_fold)
    gold = [np.concatenate(model.gold_index([labels[i] for i in score])) for score in scored]
    return scores, gold


def _scored(parts: list, lengths: list[int], max_tokens: int | None, seed: int) -> list:
    """The sentences each fold model scores: its whole held-out fold, or, when all the
    sentences hold more than ``max_tokens`` tokens, each fold's sentences in a seeded random
    order until the fold's share (``max_tokens / K``) is reached, in their order."""
    if max_tokens is None or sum(lengths) <= max_tokens:
        return parts
    rng = np.random.default_rng([int(seed), 36])
    share = max_tokens / len(parts)
    out = []
    for held in parts:
        order = rng.permutation(held)
        cum = np.cumsum([lengths[i] for i in order])
        out.append(np.sort(order[:max(1, int(np.searchsorted(cum, share, side="right")))]))
    return out


def _context():
    """``fork`` when this process runs one thread on Linux (the command line: a forked process
    starts in milliseconds with the data already there), else ``spawn`` (a threaded caller,
    such as the app, must not fork: another thread may hold a lock the child inherits)."""
    if sys.platform.startswith("linux") and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _run(tasks: list, n_proc: int, on_fold=None) -> list:
    def done(k: int) -> None:
        if on_fold is not None:
            on_fold(k, len(tasks))

    if n_proc <= 1:
        out = []
        for t in tasks:
            out.append(_fold_task(t))
            done(len(out))
        return out
    pool = ProcessPoolExecutor(n_proc, mp_context=_context(), initializer=_init_worker,
                               initargs=(os.getpid(),))
    try:
        out = []
        for res in pool.map(_fold_task, tasks):  # in order: a fold is done when it is here
            out.append(res)
            done(len(out))
    except BrokenProcessPool:
        _stop(pool)
        raise GpslError("a calibration fold fit's process ended abruptly (out of memory? "
                        "try --jobs 1 or --no-calibrate)") from None
    except BaseException:  # Ctrl-C or a fit's error: no fit left running
        _stop(pool)
        raise
    pool.shutdown()
    return out


def _stop(pool: ProcessPoolExecutor) -> None:
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        proc.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


__all__ = ["MIN_TOKENS", "SOURCES", "PROCESS_MIN_FIT_SECONDS", "Plan", "plan", "CalibrationRun",
           "calibrate", "calibrate_model", "not_calibrated", "out_of_fold_scores", "fold_processes",
           "cpu_count"]
