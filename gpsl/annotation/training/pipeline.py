"""The training pipeline of one model version: fit → calibrate → evaluate → save → predict.

Runs in a worker process (:mod:`gpsl.annotation.training.jobs`,
:mod:`gpsl.annotation.training.dask_jobs`) or in the caller
(:func:`gpsl.annotation.training.jobs.train_now`); :func:`run` calls the steps in order:

1. :func:`_load`: every ``'train'`` sentence with at least one labeled token (no cap unless the
   run's :class:`TrainConfig` sets ``max_sentences``); the labels are read when the run
   starts, so a label made before the run is counted in its labeled-token figure.
2. :func:`_fit`: :class:`~gpsl.model.GPSL` with the run's settings; after every sweep the
   progress file gets the iteration, bound and seconds (the Train page shows an ETA). By the
   ``joint`` rule (a crowd project's) the joint crowd model is fitted first (phase
   ``"joint"``, :mod:`gpsl.annotation.training.joint_labels`, as ``gpsl train --crowd``) and the
   tagger learns from its posterior ``q(y)``; its decoded labels are the calibration data.
3. :func:`calibrate`: a calibrator fitted on the project's held-out gold when it has at
   least 50 gold tokens, otherwise on out-of-fold predictions of folds of the labeled
   sentences (:func:`gpsl.calibration.calibrate_model`, the rule of ``gpsl train``). When the
   held-out gold is the calibration data, the held-out sentences' marginals (figures and
   stored predictions) are calibrated by a calibrator fitted on the *other* half of the
   held-out sentences, so no held-out figure is in-sample.
4. :func:`_evaluate`: the held-out figures (:func:`gpsl.annotation.training.evaluation.heldout`, the
one
   held-out evaluation: the Confidence page uses it too).
5. :func:`_save`: the model is saved to ``.staging-<version>`` and renamed to
   ``<root>/<project>/<version>`` (:mod:`gpsl.annotation.training.runs`).
6. :func:`_predict`: predictions for every sentence in chunks (progress written per chunk),
   stored with the annotation queue's per-token query scores (:func:`query_scores`, the run's
   ``query`` strategy, recorded on the version);
7. :func:`_finish`: the version is marked ``'done'`` and becomes the active model in one
   transaction.  Any exception marks the version ``'failed'`` with a one-line reason.

A run killed at any point leaves the previously active model active.  ``pause_at`` makes a
run wait at one of :data:`PAUSES` until it is stopped (tests and demonstrations kill a worker
there); it is passed explicitly, never read from the environment.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from gpsl import active, params
from gpsl.annotation.corpus import predictions, projects, sentences
from gpsl.annotation.labeling import scoring, team
from gpsl.annotation.store.store_errors import one_line
from gpsl.annotation.training import joint_labels, summaries, versions
from gpsl.annotation.training.evaluation import heldout
from gpsl.annotation.training.pool import (  # noqa: F401 (predict_chunk: named here for callers)
    PREDICT_CHUNK_TOKENS,
    PoolJob,
    chunks,
    predict_chunk,
    predict_pool,
)
from gpsl.annotation.training.refit import calibrate, previous_model, warm_model
from gpsl.annotation.training.runs import (  # noqa: F401 (the run's files, named here for callers)
    Progress,
    eta_seconds,
    log_file,
    model_dir,
    progress_file,
    read_progress,
    staging_dir,
    worker_log,
)
from gpsl.errors import InputError
from gpsl.model import GPSL

log = logging.getLogger(__name__)

#: where a run can be made to wait (``pause_at``): after saving the model into its staging
#: folder, before the rename; in the fit, after the first sweep; in the predictions, after
#: the first chunk was stored
PAUSES = ("after-staging", "in-fit", "in-predict")
PAUSE_SECONDS = 600.0  # a paused run waits at most this long
#: the versions before the active one whose predictions a run keeps (the Confidence and Data
#: pages' choice of version; older versions keep their row, metrics and model folder)
KEEP_PREVIOUS = 1

#: the settings of a run that are parameters of :mod:`gpsl.params` (constraints, defaults
#: where the app starts a fit, labels and help of the Train page's widgets)
TRAIN_PARAMS = {name: params.param(name) for name in (
    "offsets", "kernel", "learn_hyper", "max_iter", "tol", "inference", "max_sentences")}
_APP = params.defaults("app", TRAIN_PARAMS)
INFERENCE_MODES = TRAIN_PARAMS["inference"].options
KERNELS = TRAIN_PARAMS["kernel"].options


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one training run (stored in the version's ``settings``): the parameters
    of :data:`TRAIN_PARAMS`, checked against :mod:`gpsl.params` (their defaults are the
    table's for a fit started in the app), and the queue's ``query`` strategy."""

    offsets: tuple[int, ...] = _APP["offsets"]
    kernel: str = _APP["kernel"]
    learn_hyper: bool = _APP["learn_hyper"]
    max_iter: int = _APP["max_iter"]
    tol: float = _APP["tol"]
    inference: str = _APP["inference"]  # GPSL(inference=...): "auto", "full" or "sparse"
    max_sentences: int | None = _APP["max_sentences"]  # a cap (the most labeled first)
    #: the query score that orders the annotation queue (a key of
    #: :data:`gpsl.active.QUERY_SCORES`; its name is recorded on the version)
    query: str = active.DEFAULT_QUERY

    def __post_init__(self):
        for name in TRAIN_PARAMS:
            object.__setattr__(self, name, params.check(name, getattr(self, name), "<train>"))
        if self.query not in active.QUERY_SCORES:
            raise InputError(f"query must be one of {', '.join(active.QUERY_SCORES)}, got "
                             f"{self.query!r}", source="<train>")

    @property
    def preset(self) -> str:
        return params.preset_of(self.offsets)

    def to_settings(self) -> dict:
        d = asdict(self)
        d["offsets"] = list(self.offsets)
        d["preset"] = self.preset
        return d

    @classmethod
    def from_settings(cls, settings: dict) -> TrainConfig:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in settings.items() if k in names})


class Stopped(Exception):
    """The run's version is no longer running (stopped by the user): :func:`run` ends it."""


class UnrecordedFailure(Exception):
    """A run failed and its reason could not be written to the store (e.g. the disk is
    full): the worker exits with ``exit_code`` (the errno when there is one) so that the
    process that started it can record why."""

    def __init__(self, reason: str, exit_code: int):
        super().__init__(reason)
        self.exit_code = exit_code


# --------------------------------------------------------------------------- helpers


def pick_sentences(ids, X, y, max_sentences, *more):
    """All sentences, or at most ``max_sentences``: the most labeled first, kept in
    position order; ``more`` (lists beside ``X``, e.g. the evidence) are picked alike."""
    if max_sentences is None or len(X) <= max_sentences:
        return (ids, X, y, *more)
    counts = [sum(lab is not None for lab in labs) for labs in y]
    order = sorted(range(len(X)), key=lambda i: (-counts[i], i))[:int(max_sentences)]
    order.sort()
    return tuple([seq[i] for i in order] for seq in (ids, X, y, *more))


def predict(model, X, y=None, on_chunk=None, **kw) -> list[np.ndarray]:
    """Marginals of every sentence, in chunks of :data:`PREDICT_CHUNK_TOKENS` tokens;
    ``on_chunk(done, total)`` after each chunk; ``kw`` go to ``predict_marginals``."""
    out: list[np.ndarray] = []
    for a, b in chunks([len(s) for s in X], PREDICT_CHUNK_TOKENS):
        out.extend(model.predict_marginals(X[a:b], y=None if y is None else y[a:b], **kw))
        if on_chunk is not None:
            on_chunk(b, len(X))
    return out


def query_scores(model, X, y, marginals, strategy: str, seed: int = 0) -> list[np.ndarray]:
    """The annotation queue's query score of every token of ``X`` (one ``(L,)`` array per
    sentence): :func:`gpsl.active.score_tokens` with ``strategy`` (a key of
    :data:`gpsl.active.QUERY_SCORES`) on Algorithm 2's inputs under q
    (:meth:`~gpsl.model.GPSL.calibration_scores` with the predictive variances), the known
    labels ``y`` clamped, and ``marginals`` (the stored ones) for the scores that read
    marginals; known tokens score 0.  ``bald`` draws with ``seed``."""
    sc = model.calibration_scores(X, with_variance=True)
    idx = model.gold_index(y) if y is not None else []
    clamp = np.concatenate(idx) if idx else None
    P = np.concatenate([np.asarray(m, dtype=float) for m in marginals])
    out = active.score_tokens(sc, strategy, clamp, seed=seed, marginals=P)
    return np.split(out, np.cumsum(sc.lengths)[:-1])


# --------------------------------------------------------------------------- the steps


@dataclass
class _Run:
    """One run's context: its store's home (:class:`~gpsl.annotation.store.owned.Home`), version,
    config, folders, progress and how it may be stopped or paused."""

    home: object
    version_id: int
    project_id: int
    root: Path
    config: TrainConfig
    should_stop: Callable[[], bool] | None
    pause_at: str | None
    progress: Progress | None = None
    labels: dict | None = None  # the training-label rule and soft labels (:func:`_load`)
    previous: GPSL | None = None  # the active version's model when the run began (warm start)
    prev_version: dict | None = None  # ... and its row

    @property
    def staging(self) -> Path:
        return staging_dir(self.root, self.project_id, self.version_id)

    @property
    def final(self) -> Path:
        return model_dir(self.root, self.project_id, self.version_id)

    def check_stop(self) -> None:
        if self.should_stop is not None and self.should_stop():
            raise Stopped()

    def pause(self, where: str) -> None:
        """Wait here when the run was asked to (``pause_at``), until stopped."""
        if self.pause_at != where:
            return
        if where == "after-staging":
            self.progress.phase("paused")
        deadline = time.monotonic() + PAUSE_SECONDS
        while time.monotonic() < deadline:
            time.sleep(0.1)
            self.check_stop()


def _load(run: _Run):
    """Step 1: the labeled training sentences (at most ``max_sentences``) by the project's
    training-label rule (:func:`gpsl.annotation.labeling.team.training_set`: hard labels, or soft
    labels as evidence on missing ones), the rule recorded in ``run.labels``."""
    data = team.training_set(run.home.db, run.project_id)
    if not data["X"]:
        raise InputError("no labeled tokens yet: label some tokens before training",
                         source="<train>")
    evidence = data["evidence"] or [None] * len(data["X"])
    annotations = data.get("annotations") or [{}] * len(data["X"])
    ids, X, y, evidence, annotations = pick_sentences(
        data["ids"], data["X"], data["y"], run.config.max_sentences, evidence, annotations)
    run.labels = {"rule": data["rule"], "resolve": data["resolve"], "soft": data["soft"],
                  "joint": bool(data.get("joint")), "classes": data["classes"],
                  "evidence": evidence if data["evidence"] is not None else None,
                  "soft_tokens": sum(int(np.any(e != 0, axis=1).sum()) for e in evidence
                                     if e is not None)}
    if run.labels["joint"]:
        run.labels["votes"] = joint_labels.votes_of(X, y, annotations, data["classes"])
    return ids, X, y


def _fit_joint(run: _Run, X, params_: dict, on_sweep) -> tuple[list, GPSL]:
    """Step 2 by the ``joint`` rule: the joint crowd model (:mod:`gpsl.annotation.
    joint_labels`) with the tagger's settings ``params_``; its posterior becomes the soft
    labels in ``run.labels``. Returns the tagger's targets ``y`` and the joint fit's tagger,
    whose features the tagger's fit takes over (the same sentences, template and
    ``min_freq``: :meth:`gpsl.model.GPSL.fit`'s ``features``)."""
    votes = run.labels.pop("votes")
    run.progress.phase("joint", sentences=len(X), labeled_tokens=int(votes.voted().sum()))
    joint = joint_labels.fit_joint(X, votes, params_, callback=on_sweep)
    y, evidence, inferred = joint_labels.soft_labels(joint, votes)
    run.labels.update(evidence=evidence, classes=list(joint.classes_), inferred=inferred,
                      soft_tokens=sum(int(np.any(np.isfinite(e) & (e != 0), axis=1).sum())
                                      for e in evidence or ()),
                      joint_sweeps=len(joint.joint_trace_) // 2,
                      joint_seconds=float(joint.fit_seconds_))
    run.progress.phase("fitting", sentences=len(X), bounds=[], seconds=[], iteration=0,
                       labeled_tokens=sum(lab is not None for labs in y for lab in labs))
    return y, joint.joint_model_


def _fit(run: _Run, X, y) -> GPSL:
    """Step 2: the model, with the progress file written after every sweep (soft labels:
    their evidence and classes, ``run.labels``)."""
    config = run.config
    project = projects.get(run.home.db, run.project_id)
    model = GPSL(offsets=config.offsets, kernel=config.kernel,
                 template=project["template"] or None, max_iter=config.max_iter,
                 tol=config.tol, learn_hyper=config.learn_hyper, inference=config.inference)
    previous, run.prev_version = previous_model(run.home, run.project_id)
    before = None if previous is None else _Previous(
        list(previous.classes_), previous.calibrator_, previous.inference_,
        tuple(previous.offsets_), previous.kernel_.name)
    cold = model.get_params()

    def on_sweep(info):
        run.progress.sweep(info)
        run.check_stop()
        run.pause("in-fit")

    model = warm_model(model, previous)  # the previous state, carried by name
    shared = None  # a fitted GPSL whose features are those of this fit
    if (run.labels or {}).get("joint"):
        y, shared = _fit_joint(run, X, cold, on_sweep)
    else:
        run.progress.phase("fitting", sentences=len(X),
                           labeled_tokens=sum(lab is not None for labs in y for lab in labs))
    soft = run.labels or {}
    model.fit(X, y, callback=on_sweep, evidence=soft.get("evidence"),
              classes=soft.get("classes"), features=shared)
    run.previous = before  # the fit refitted the previous model's object itself
    return model


@dataclass
class _Previous:
    """What the steps after the fit read of the previous model (the fit reuses its object):
    its labels and calibrator (:func:`gpsl.annotation.training.refit.calibrate`), and whether its
    state could start the fit (:func:`_warm_used`)."""

    classes_: list
    calibrator_: object
    inference_: str
    offsets_: tuple
    kernel: str


def _warm_used(run: _Run, model: GPSL) -> str | None:
    """"version N" when the fit started from the active version's state (the scalable mode
    after a scalable fit with the same offsets and kernel, :mod:`gpsl.warm`), else None."""
    p = run.previous
    if p is None or not (p.inference_ == model.inference_ == "sparse") \
            or p.offsets_ != tuple(model.offsets_) or p.kernel != model.kernel_.name:
        return None
    return f"version {run.prev_version['number']}"


def _evaluate(run: _Run, model: GPSL, X, y) -> tuple[dict, dict]:
    """Steps 3 and 4: calibrate, then the held-out figures; returns ``(the version's
    metrics, the held-out sentences' cross-calibrated marginals)``."""
    mode = getattr(model, "inference_", run.config.inference)
    run.progress.phase("calibrating", inference_used=mode)
    cal_info, held = calibrate(model, run.home.db, run.project_id, X, y,
                               previous=run.previous, prev_version=run.prev_version,
                               on_step=run.progress.step)
    run.progress.phase("evaluating", inference_used=mode)
    ids, Xg, gold = sentences.gold_data(run.home.db, run.project_id, "heldout")
    figures = {}
    if ids:
        P = [held[i] for i in ids] if held else predict(model, Xg)
        result = heldout(model.classes_, P, gold)
        figures = result.figures() if result is not None else {}
    figures.update(cal_info)
    figures.update({"train_sentences": len(X),
                    "train_labeled_tokens": sum(lab is not None for labs in y for lab in labs),
                    "n_iter": int(model.n_iter_), "fit_seconds": float(model.fit_seconds_),
                    "inference": mode, "train_missing_labels": int(model.n_missing_),
                    "missing_weight": float(model.missing_weight_),
                    "warm_start": _warm_used(run, model),
                    "training_labels": {k: (run.labels or {}).get(k) for k in
                                        ("rule", "resolve", "soft", "soft_tokens",
                                         "joint", "joint_sweeps", "joint_seconds")}})
    return figures, held


def _save(run: _Run, model: GPSL) -> None:
    """Step 5: the model saved to the staging folder, then renamed into place."""
    run.progress.phase("saving")
    if run.staging.exists():
        shutil.rmtree(run.staging)
    model.save(run.staging)
    run.pause("after-staging")
    if run.final.exists():
        # left by another store that used this models folder (e.g. a deleted database
        # file): never this store's (version ids are unique), kept aside, never deleted
        os.rename(run.final, run.final.with_name(f".orphan-{run.final.name}-{time.time_ns()}"))
    os.rename(run.staging, run.final)


def _predict(run: _Run, model: GPSL, held: dict) -> None:
    """Step 6: every sentence's marginals (the current labels clamped; a held-out sentence
    without labels: its cross-calibrated marginals) and, for the training sentences (the
    only ones the queue offers), query scores: chunk after chunk on every core
    (:func:`gpsl.annotation.training.pool.predict_pool`), each chunk read from the store where it is
    predicted (the worker holds the sentences' ids and lengths only) and stored in its own
    transaction."""
    ids, lengths = sentences.lengths(run.home.db, run.project_id)
    train = set(sentences.ids(run.home.db, run.project_id, "train"))
    run.progress.phase("predicting", done=0, total=len(ids), query_strategy=run.config.query)
    job = PoolJob(model, ids, None, None, train, held, run.config.query, run.version_id,
                  read=functools.partial(sentences.of_ids, run.home.db), lengths=lengths)
    stream = predict_pool(job)
    try:
        for done, marg, query in stream:
            with run.progress.part("store"):
                scoring.save_predictions(run.home.db, run.version_id, marg, query)
            run.progress.chunk(done, len(ids))
            run.check_stop()
            if done < len(ids):
                run.pause("in-predict")
    finally:
        stream.close()


def _finish(run: _Run, model: GPSL, figures: dict) -> None:
    """Step 7: done and active in one transaction (or, stopped meanwhile, nothing kept)."""
    run.progress.phase("storing")
    done = versions.finish(
        run.home.db, run.version_id, run.final, model.bound_trace_, figures,
        figures["train_labeled_tokens"], classes=model.classes_, activate=True,
        query_strategy=run.config.query)
    if not done:  # stopped meanwhile: keep nothing of it active
        raise Stopped()
    predictions.prune(run.home.db, run.project_id, KEEP_PREVIOUS)
    run.home.db.analyze()  # the planner sees the predictions just written (PostgreSQL)
    run.progress.phase("done")


def _stopped(run: _Run) -> None:
    with contextlib.suppress(Exception):
        predictions.delete(run.home.db, run.version_id)
    if run.progress is not None:
        with contextlib.suppress(Exception):
            run.progress.phase("stopped")
    shutil.rmtree(run.staging, ignore_errors=True)


def _failed(run: _Run, exc: BaseException, raise_errors: bool) -> None:
    """Record why the run failed (or, when the store cannot be written, raise
    :class:`UnrecordedFailure` for the worker's exit status)."""
    reason = one_line(exc) if isinstance(exc, Exception) else \
        f"worker interrupted ({type(exc).__name__})"
    recorded = False
    with contextlib.suppress(Exception):  # with its traceback (the worker's log file)
        log.error("version %s failed: %s", run.version_id, reason, exc_info=exc)
    with contextlib.suppress(Exception):
        versions.fail(run.home.db, run.version_id, reason)
        recorded = True
    if run.progress is not None:
        with contextlib.suppress(Exception):
            run.progress.phase("failed", error=reason)
    if not recorded:  # e.g. the disk is full: the parent records the exit status
        with contextlib.suppress(Exception):
            print(f"gpsl worker: version {run.version_id} failed: {reason}", flush=True)
    shutil.rmtree(run.staging, ignore_errors=True)
    if raise_errors or not isinstance(exc, Exception):
        raise exc
    if not recorded:
        code = getattr(exc, "errno", None)  # an exit status is 1 ... 125
        raise UnrecordedFailure(reason, code if isinstance(code, int) and code in range(1, 126)
                                else 1) from exc


def run(home, version_id: int, models_root, *, raise_errors: bool = False,
        should_stop: Callable[[], bool] | None = None, pause_at: str | None = None) -> dict:
    """Run the ``'running'`` model version ``version_id`` to the end (module docstring);
    returns the version dict.  Errors are recorded in the version (and re-raised when
    ``raise_errors``).  ``should_stop()`` (optional) is asked after every sweep and every
    prediction chunk; when it says so the run ends as ``'stopped'`` (a runner that cannot
    signal its worker, e.g. a Dask job, stops it this way).  ``pause_at``: one of
    :data:`PAUSES`, where the run waits until it is stopped."""
    if pause_at is not None and pause_at not in PAUSES:
        raise ValueError(f"pause_at must be one of {', '.join(PAUSES)}, got {pause_at!r}")
    version = versions.get(home.db, version_id)
    if version is None:
        raise InputError(f"no model version {version_id}", source=home.db.where)
    if version["status"] != "running":
        return version
    r = _Run(home, version_id, version["project_id"], home.own_root(models_root),
             TrainConfig.from_settings(version["settings"]), should_stop, pause_at)
    try:
        r.progress = Progress(progress_file(r.root, r.project_id, version_id),
                              r.config.max_iter, r.config.inference, r.config.tol)
        _, X, y = _load(r)
        model = _fit(r, X, y)
        y = r.labels.get("inferred") or y  # by the joint rule: its decoded labels
        figures, held = _evaluate(r, model, X, y)
        _save(r, model)
        _predict(r, model, held)
        summaries.store_summary(home.db, version_id, model.classes_)  # what pages show, once
        _finish(r, model, figures)
    except Stopped:
        _stopped(r)
    except BaseException as exc:  # noqa: BLE001 - every failure is recorded (or re-raised)
        _failed(r, exc, raise_errors)
    return versions.get(home.db, version_id)
