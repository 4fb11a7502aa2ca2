"""The training pipeline of one model version: fit → evaluate → save → predict.

Runs in a worker process (:mod:`gpsl.annotation.jobs`) or in the caller (:func:`train_now`).

1. Every ``'train'`` sentence with at least one labeled token is used (no cap unless the
   run's :class:`TrainConfig` sets ``max_sentences``); the labels are read when the run
   starts, so a label made before the run is counted in its labeled-token figure.
2. :class:`~gpsl.model.GPSL` is fitted with the run's ``inference`` mode; after every sweep
   the progress file gets the iteration, bound and seconds (the Train page shows an ETA).
3. It is calibrated (:func:`calibrate`: a temperature fitted on the project's held-out gold
   when it has at least :data:`MIN_CALIBRATION_TOKENS` gold tokens, otherwise on out-of-fold
   predictions of folds of the labeled sentences, :func:`gpsl.calibration.calibration_folds`),
   evaluated on the
   held-out gold labels (:func:`evaluate`, the one held-out evaluation: the Confidence page uses
   it too), saved to ``.staging-<version>`` and renamed to ``<root>/<project>/<version>``.
   When the held-out gold is the calibration data, the held-out sentences' marginals (figures
   and stored predictions) are calibrated by a temperature fitted on the *other* half of the
   held-out sentences, so no held-out figure is in-sample.
4. Predictions for every sentence are made in chunks (progress written per chunk) and
   stored with the annotation queue's per-token query scores (:func:`query_scores`, the
   strategy :data:`gpsl.active.DEFAULT_QUERY`, recorded on the version); then the version
   is marked ``'done'`` and becomes the active model in one transaction.  Any exception
   marks the version ``'failed'`` with a one-line reason.

A run killed at any point leaves the previously active model active.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from gpsl.errors import InputError

PREDICT_CHUNK_TOKENS = 4000  # tokens per predict_marginals call (bounds the kernel block)
# "pause-after-staging" / "pause-in-fit" (after the first sweep): tests kill a worker there
TEST_HOOK_ENV = "GPSL_TRAINING_TEST_HOOK"
INFERENCE_MODES = ("auto", "full", "sparse")
KERNELS = ("linear", "rbf")


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one training run (stored in the version's ``settings``)."""

    offsets: tuple[int, ...] = (-1, 1)
    kernel: str = "linear"
    learn_hyper: bool = False
    max_iter: int = 50
    tol: float = 1e-3  # the library default
    inference: str = "auto"  # GPSL(inference=...): "auto", "full" or "sparse"
    max_sentences: int | None = None  # optional cap (the most labeled sentences first)
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        from gpsl.model import parse_offsets

        object.__setattr__(self, "offsets", tuple(parse_offsets(self.offsets)))
        if self.kernel not in KERNELS:
            raise InputError(f"kernel must be linear or rbf, got {self.kernel!r}",
                             source="<train>")
        if self.inference not in INFERENCE_MODES:
            raise InputError(f"inference must be auto, full or sparse, got {self.inference!r}",
                             source="<train>")
        if int(self.max_iter) < 1:
            raise InputError("max iterations must be at least 1", source="<train>")
        object.__setattr__(self, "max_iter", int(self.max_iter))
        if self.max_sentences is not None and int(self.max_sentences) < 1:
            raise InputError("max sentences must be at least 1", source="<train>")

    @property
    def preset(self) -> str:
        return preset_of(self.offsets)

    def to_settings(self) -> dict:
        d = asdict(self)
        d["offsets"] = list(self.offsets)
        d["preset"] = self.preset
        return d

    @classmethod
    def from_settings(cls, settings: dict) -> TrainConfig:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in settings.items() if k in names})


def preset_of(offsets: Sequence[int]) -> str:
    """``"GPSL1"``/``"GPSL2"``/``"GPSL4"`` (the presets of :mod:`gpsl.model`) or ``"custom"``."""
    from gpsl.model import PRESETS

    offs = tuple(int(o) for o in offsets)
    for name, value in PRESETS.items():
        if tuple(value) == offs:
            return name
    return "custom"


# --------------------------------------------------------------------------- model folders


def model_dir(models_root, project_id: int, version_id: int) -> Path:
    return Path(models_root) / str(int(project_id)) / str(int(version_id))


def staging_dir(models_root, project_id, version_id) -> Path:
    return Path(models_root) / str(int(project_id)) / f".staging-{int(version_id)}"


def progress_file(models_root, project_id, version_id) -> Path:
    return Path(models_root) / str(int(project_id)) / f".progress-{int(version_id)}.json"


def log_file(models_root, project_id, version_id) -> Path:
    return Path(models_root) / str(int(project_id)) / f".worker-{int(version_id)}.log"


def read_progress(models_root, project_id: int, version_id: int) -> dict | None:
    """The run's progress: ``dict(phase, iteration, max_iter, bounds, seconds, updated,
    inference, eta_seconds, done, total, ...)`` or None before the first write.  ``phase``
    is loading, fitting, evaluating, saving, predicting, done, failed or stopped."""
    try:
        return json.loads(progress_file(models_root, project_id, version_id)
                          .read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def worker_log(models_root, project_id: int, version_id: int, tail: int = 4000) -> str:
    try:
        return log_file(models_root, project_id, version_id).read_text(
            encoding="utf-8", errors="replace")[-tail:]
    except OSError:
        return ""


def eta_seconds(progress: dict | None) -> float | None:
    """Seconds left by the progress so far: the mean sweep time times the sweeps left while
    fitting (an upper bound: the fit may converge earlier), the chunks left while
    predicting."""
    if not progress:
        return None
    phase = progress.get("phase")
    if phase == "fitting":
        secs = progress.get("seconds") or []
        if not secs:
            return None
        per = float(secs[-1]) / max(1, len(secs))
        return per * max(0, int(progress.get("max_iter", 0)) - int(progress.get("iteration", 0)))
    if phase == "predicting":
        done, total = progress.get("done", 0), progress.get("total", 0)
        started = progress.get("phase_started")
        if done and total and started:
            return (time.time() - float(started)) / done * (total - done)
    return None


class Progress:
    """Atomically rewritten JSON progress file (temp file, then rename)."""

    def __init__(self, path: Path, max_iter: int, inference: str):
        self.path = path
        self.data = {"phase": "loading", "iteration": 0, "max_iter": int(max_iter),
                     "bounds": [], "seconds": [], "inference": inference,
                     "updated": time.time(), "phase_started": time.time()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.write()

    def write(self) -> None:
        self.data["updated"] = time.time()
        self.data["eta_seconds"] = eta_seconds(self.data)
        fd, tmp = tempfile.mkstemp(prefix=".progress-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self.data, f)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def phase(self, name: str, **extra) -> None:
        self.data["phase"] = name
        self.data["phase_started"] = time.time()
        self.data.update(extra)
        self.write()

    def sweep(self, info: dict) -> None:
        self.data["iteration"] = int(info.get("iteration", 0))
        self.data["bounds"].append(float(info.get("bound", float("nan"))))
        self.data["seconds"].append(float(info.get("seconds", 0.0)))
        self.write()

    def chunk(self, done: int, total: int) -> None:
        self.data["done"], self.data["total"] = int(done), int(total)
        self.write()


# --------------------------------------------------------------------------- the steps


def pick_sentences(ids, X, y, max_sentences):
    """All sentences, or at most ``max_sentences``: the most labeled first, kept in
    position order."""
    if max_sentences is None or len(X) <= max_sentences:
        return ids, X, y
    counts = [sum(lab is not None for lab in labs) for labs in y]
    order = sorted(range(len(X)), key=lambda i: (-counts[i], i))[:int(max_sentences)]
    order.sort()
    return [ids[i] for i in order], [X[i] for i in order], [y[i] for i in order]


def chunks(n_tokens: list[int], budget: int) -> Iterator[tuple[int, int]]:
    start, acc = 0, 0
    for i, n in enumerate(n_tokens):
        if acc and acc + n > budget:
            yield start, i
            start, acc = i, 0
        acc += n
    if start < len(n_tokens):
        yield start, len(n_tokens)


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
    from gpsl import active

    sc = model.calibration_scores(X, with_variance=True)
    idx = model.gold_index(y) if y is not None else []
    clamp = np.concatenate(idx) if idx else None
    P = np.concatenate([np.asarray(m, dtype=float) for m in marginals])
    out = active.score_tokens(sc, strategy, clamp, seed=seed, marginals=P)
    return np.split(out, np.cumsum(sc.lengths)[:-1])


def evaluate(classes: Sequence[str], marginals: Sequence[np.ndarray],
             gold: Sequence[Sequence[str | None]]) -> dict:
    """Held-out figures of predictions against gold labels (None: no gold for that token):
    ``heldout_tokens, heldout_accuracy, heldout_ece`` (10 equal-width bins),
    ``heldout_ece_mass`` (15 equal-mass bins), ``heldout_mean_confidence``, ``heldout_nll``,
    ``heldout_brier`` (+ ``heldout_chunk_f1`` for complete BIO gold), and ``confidence``,
    ``correct`` and ``gold_label`` per gold token; {} without gold."""
    from gpsl import metrics

    classes = list(classes)
    index = {c: j for j, c in enumerate(classes)}
    conf, correct, y_true, y_pred, rows, gold_idx, gold_lab = [], [], [], [], [], [], []
    for p, g in zip(marginals, gold):
        if p is None or p.shape != (len(g), len(classes)):
            continue
        pred = [classes[j] for j in p.argmax(axis=1)]
        y_pred.append(pred)
        y_true.append(list(g))
        for t, lab in enumerate(g):
            if lab is not None:
                conf.append(float(p[t].max()))
                correct.append(pred[t] == lab)
                rows.append(p[t])
                gold_idx.append(index.get(lab, -1))
                gold_lab.append(lab)
    if not conf:
        return {}
    P = np.asarray(rows, dtype=float)
    seen = np.asarray(gold_idx) >= 0  # a gold label the model never saw has probability 0
    nll = (metrics.negative_log_likelihood(P[seen], np.asarray(gold_idx)[seen])
           if seen.any() else float("nan"))
    out = {"heldout_sentences": len(y_true), "heldout_tokens": len(conf),
           "heldout_accuracy": float(np.mean(correct)),
           "heldout_ece": float(metrics.expected_calibration_error(conf, correct)),
           "heldout_ece_mass": float(metrics.ece_equal_mass(conf, correct)),
           "heldout_mean_confidence": float(np.mean(conf)),
           "heldout_nll": float(nll),
           "heldout_brier": (float(metrics.brier_score(P[seen], np.asarray(gold_idx)[seen]))
                             if seen.any() else float("nan")),
           "confidence": conf, "correct": correct, "gold_label": gold_lab}
    if all(lab is not None for g in y_true for lab in g) and \
            metrics.is_chunk_label_set(lab for g in y_true for lab in g):
        with contextlib.suppress(ValueError):
            out["heldout_chunk_f1"] = float(metrics.chunk_f1(y_true, y_pred))
    return out


def evaluate_heldout(model, store, project_id: int, marginals: dict | None = None) -> dict:
    """:func:`evaluate` of a fitted model on the project's held-out gold labels
    (``marginals``: the held-out sentences' marginals by sentence id, when already made)."""
    ids, X, gold = store.gold_data(project_id)
    if not ids:
        return {}
    P = [marginals[i] for i in ids] if marginals else predict(model, X)
    out = evaluate(model.classes_, P, gold)
    for key in ("confidence", "correct", "gold_label"):
        out.pop(key, None)
    return out


#: held-out gold tokens needed to calibrate on the held-out gold (else: folds of the labels)
MIN_CALIBRATION_TOKENS = 50


def calibrate(model, store, project_id: int, X, y) -> tuple[dict, dict]:
    """Fit ``model.calibrator_`` (:meth:`gpsl.model.GPSL.calibrate`) for the app.

    On the held-out gold when it has :data:`MIN_CALIBRATION_TOKENS` tokens or more (and two
    sentences): the calibrator kept is fitted on all of it, and the held-out sentences'
    marginals returned (``{sentence id: marginals}``) are each calibrated on the other half
    (:func:`gpsl.calibration.cross_calibrate`). Otherwise by folds of the labeled training
    sentences ``(X, y)`` (:func:`gpsl.calibration.calibration_folds`: 5 up to 1,000 labeled
    sentences, 3 above; no marginals returned). With neither, the
    model stays uncalibrated. Returns ``(figures for the version's metrics, marginals)``.
    """
    from gpsl.calibration import Calibrator, calibration_folds, cross_calibrate

    ids, Xg, gold = store.gold_data(project_id)
    gold_idx = model.gold_index(gold) if ids else []
    n_gold = sum(int((g >= 0).sum()) for g in gold_idx)
    held: dict = {}
    if len(ids) >= 2 and n_gold >= MIN_CALIBRATION_TOKENS:
        scores = model.calibration_scores(Xg)
        model.calibrator_ = Calibrator.select([scores], [np.concatenate(gold_idx)],
                                              source="held-out gold")
        held = dict(zip(ids, cross_calibrate(scores, gold_idx, folds=2)))
    else:
        n_labeled = sum(v is not None for lab in y for v in lab)
        labeled = [i for i, lab in enumerate(y) if any(v is not None for v in lab)]
        folds = calibration_folds(len(labeled))
        if folds is None or n_labeled < MIN_CALIBRATION_TOKENS:
            return {"calibration": None}, {}
        model.calibrate([X[i] for i in labeled], [y[i] for i in labeled],
                        folds=folds, source=f"{folds}-fold labels")
    cal = model.calibrator_
    return {"calibration": {"source": cal.source, "method": cal.method, "kind": cal.kind,
                            "temperature": cal.temperature, "t_unary": cal.t_unary,
                            "t_pair": cal.t_pair, "tokens": cal.n_tokens,
                            "nll_before": cal.nll_before, "nll_after": cal.nll_after,
                            "summary": cal.describe()}}, held


class Stopped(Exception):
    """The run's version is no longer running (stopped by the user): :func:`run` ends it."""


class UnrecordedFailure(Exception):
    """A run failed and its reason could not be written to the store (e.g. the disk is
    full): the worker exits with ``exit_code`` (the errno when there is one) so that the
    process that started it can record why."""

    def __init__(self, reason: str, exit_code: int):
        super().__init__(reason)
        self.exit_code = exit_code


def one_line(exc: BaseException) -> str:
    if isinstance(exc, InputError):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno is not None:
        text = f"{os.strerror(exc.errno)}" + (f": {exc.filename}" if exc.filename else "")
        return f"{type(exc).__name__}: {text}"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def run(store, version_id: int, models_root, *, raise_errors: bool = False,
        should_stop=None) -> dict:
    """Run the ``'running'`` model version ``version_id`` to the end (module docstring);
    returns the version dict.  Errors are recorded in the version (and re-raised when
    ``raise_errors``).  ``should_stop()`` (optional) is asked after every sweep and every
    prediction chunk; when it says so the run ends as ``'stopped'`` (a runner that cannot
    signal its worker, e.g. a Dask job, stops it this way)."""

    def check_stop():
        if should_stop is not None and should_stop():
            raise Stopped()

    def on_sweep(info):
        progress.sweep(info)
        check_stop()
        if os.environ.get(TEST_HOOK_ENV) == "pause-in-fit":
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                time.sleep(0.1)
                check_stop()

    from gpsl import active
    from gpsl.model import GPSL

    version = store.get_model_version(version_id)
    if version is None:
        raise InputError(f"no model version {version_id}", source=store.where)
    if version["status"] != "running":
        return version
    project_id = version["project_id"]
    root = Path(models_root)
    config = TrainConfig.from_settings(version["settings"])
    staging = staging_dir(root, project_id, version_id)
    final = model_dir(root, project_id, version_id)
    progress = None
    try:
        progress = Progress(progress_file(root, project_id, version_id), config.max_iter,
                            config.inference)
        project = store.get_project(project_id)
        ids, X, y = store.training_data(project_id, "train", only_labeled=True, with_ids=True)
        if not X:
            raise InputError("no labeled tokens yet: label some tokens before training",
                             source="<train>")
        ids, X, y = pick_sentences(ids, X, y, config.max_sentences)
        n_labeled = sum(lab is not None for labs in y for lab in labs)
        model = GPSL(offsets=config.offsets, kernel=config.kernel,
                     template=project["template"] or None, max_iter=config.max_iter,
                     tol=config.tol, learn_hyper=config.learn_hyper,
                     inference=config.inference)
        progress.phase("fitting", sentences=len(X), labeled_tokens=n_labeled)
        model.fit(X, y, callback=on_sweep)
        mode = getattr(model, "inference_", config.inference)
        progress.phase("calibrating", inference_used=mode)
        cal_info, held = calibrate(model, store, project_id, X, y)
        progress.phase("evaluating", inference_used=mode)
        metrics = evaluate_heldout(model, store, project_id, held)
        metrics.update(cal_info)
        metrics.update({"train_sentences": len(X), "train_labeled_tokens": n_labeled,
                        "n_iter": int(model.n_iter_), "fit_seconds": float(model.fit_seconds_),
                        "inference": mode, "train_missing_labels": int(model.n_missing_),
                        "missing_weight": float(model.missing_weight_)})
        progress.phase("saving")
        if staging.exists():
            shutil.rmtree(staging)
        model.save(staging)
        if os.environ.get(TEST_HOOK_ENV) == "pause-after-staging":
            progress.phase("paused")
            time.sleep(600)
        if final.exists():
            # left by another store that used this models folder (e.g. a deleted database
            # file): never this store's (version ids are unique), kept aside, never deleted
            os.rename(final, final.with_name(f".orphan-{final.name}-{time.time_ns()}"))
        os.rename(staging, final)
        all_ids, all_X, all_y = store.training_data(project_id, split=None, with_ids=True)
        strategy = active.DEFAULT_QUERY  # read now: the lead may change the default
        progress.phase("predicting", done=0, total=len(all_ids), query_strategy=strategy)
        for a, b in chunks([len(s) for s in all_X], PREDICT_CHUNK_TOKENS):
            P = model.predict_marginals(all_X[a:b], y=all_y[a:b])
            for k, sid in enumerate(all_ids[a:b]):
                if sid in held and not any(v is not None for v in all_y[a + k]):
                    P[k] = held[sid]  # held-out: calibrated on the other half (step 3)
            Q = query_scores(model, all_X[a:b], all_y[a:b], P, strategy, seed=version_id)
            store.save_predictions(version_id, dict(zip(all_ids[a:b], P)),
                                   dict(zip(all_ids[a:b], Q)))
            progress.chunk(b, len(all_ids))
            check_stop()
        done = store.finish_model_version(version_id, final, model.bound_trace_, metrics,
                                          n_labeled, classes=model.classes_, activate=True,
                                          query_strategy=strategy)
        if not done:  # stopped meanwhile: keep nothing of it active
            store.delete_predictions(version_id)
            progress.phase("stopped")
            return store.get_model_version(version_id)
        store.prune_predictions(project_id, keep=2)
        progress.phase("done")
    except Stopped:
        with contextlib.suppress(Exception):
            store.delete_predictions(version_id)
        with contextlib.suppress(Exception):
            progress.phase("stopped")
        shutil.rmtree(staging, ignore_errors=True)
        return store.get_model_version(version_id)
    except BaseException as exc:
        reason = one_line(exc) if isinstance(exc, Exception) else \
            f"worker interrupted ({type(exc).__name__})"
        recorded = False
        with contextlib.suppress(Exception):
            store.fail_model_version(version_id, reason)
            recorded = True
        if progress is not None:
            with contextlib.suppress(Exception):
                progress.phase("failed", error=reason)
        if not recorded:  # e.g. the disk is full: the parent records the exit status
            with contextlib.suppress(Exception):
                print(f"gpsl worker: version {version_id} failed: {reason}", flush=True)
        shutil.rmtree(staging, ignore_errors=True)
        if raise_errors or not isinstance(exc, Exception):
            raise
        if not recorded:
            code = getattr(exc, "errno", None)
            raise UnrecordedFailure(reason, code if isinstance(code, int) and 0 < code < 126
                                    else 1) from exc
    return store.get_model_version(version_id)
