"""Training jobs for the annotation app: a GPSL fit in a background worker process.

No Streamlit here.  A job is one row of ``model_versions`` in the :class:`~gpsl.store.Store`:

1. :func:`start_training` (in the app process) refuses to start when the project already has a
   running version whose worker is alive (:meth:`Store.mark_stale_running_failed` first turns
   dead workers into ``'failed'``), records a ``'running'`` version and spawns
   ``python -m gpsl.training --db DB --version ID --models-root DIR`` as a new process (its
   own session, one BLAS thread, ``nice`` 5) and stores the worker's pid in the version.
2. The worker (:func:`run_training_job`) reads the project's labeled training sentences, fits
   :class:`~gpsl.model.GPSL` and writes progress (phase, iteration, bound, seconds) to a small
   JSON file (:func:`read_progress`) after every sweep.  It evaluates on the held-out gold
   labels, saves the model to a staging directory ``<root>/<project>/.staging-<version>`` and
   renames it to ``<root>/<project>/<version>``, stores predictions for every sentence
   (``predict_marginals`` with the current labels clamped), then marks the version ``'done'``,
   makes it the active model, records a query round and prunes old predictions.  Any
   exception marks the version ``'failed'`` with a one-line message.
3. A worker killed at any point leaves the previously active model active: a version only
   becomes active after ``finish_model_version`` succeeded, and only a fully saved,
   renamed directory is ever recorded as a version's path.

:func:`train_now` runs the same job in the calling process (tests, scripts).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from gpsl.errors import GpslError, InputError
from gpsl.store import Store

__all__ = [
    "TrainConfig",
    "TrainingBusyError",
    "cleanup_staging",
    "model_dir",
    "models_root_for",
    "read_progress",
    "reap_workers",
    "recover",
    "run_training_job",
    "running_version",
    "start_training",
    "stop_training",
    "train_now",
]

PRESETS = {"GPSL1": (-1,), "GPSL2": (-1, 1), "GPSL4": (-2, -1, 1, 2)}
QUERY_STRATEGY = "sentence_least_confidence"
PREDICT_CHUNK_TOKENS = 4000  # tokens per predict_marginals call (bounds the kernel block)
TEST_HOOK_ENV = "GPSL_TRAINING_TEST_HOOK"  # "pause-after-staging": tests kill a worker there

_WORKERS: dict[int, subprocess.Popen] = {}  # version id -> worker started by this process


class TrainingBusyError(GpslError):
    """A training job of the project is still running."""


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one training run (stored in the version's ``settings``)."""

    offsets: tuple[int, ...] = (-1, 1)
    kernel: str = "linear"
    learn_hyper: bool = False
    max_iter: int = 50
    tol: float = 1e-3  # the library default
    max_sentences: int | None = None  # train on at most this many labeled sentences
    query_batch: int = 20  # sentences in the recorded active-learning query round
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        from gpsl.model import parse_offsets

        object.__setattr__(self, "offsets", tuple(parse_offsets(self.offsets)))
        if self.kernel not in ("linear", "rbf"):
            raise InputError(f"kernel must be linear or rbf, got {self.kernel!r}",
                             source="<train>")
        if int(self.max_iter) < 1:
            raise InputError("max iterations must be at least 1", source="<train>")
        object.__setattr__(self, "max_iter", int(self.max_iter))
        if self.max_sentences is not None and int(self.max_sentences) < 1:
            raise InputError("max sentences must be at least 1", source="<train>")

    @property
    def preset(self) -> str:
        for name, offs in PRESETS.items():
            if offs == self.offsets:
                return name
        return "custom"

    def to_settings(self) -> dict:
        d = asdict(self)
        d["offsets"] = list(self.offsets)
        d["preset"] = self.preset
        return d

    @classmethod
    def from_settings(cls, settings: dict) -> TrainConfig:
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in settings.items() if k in names})


# --------------------------------------------------------------------------- paths


def models_root_for(db_path: str | os.PathLike) -> Path:
    """Where the models of a store live: ``<directory of the database>/models``."""
    return Path(db_path).expanduser().resolve().parent / "models"


def model_dir(models_root: str | os.PathLike, project_id: int, version_id: int) -> Path:
    return Path(models_root) / str(int(project_id)) / str(int(version_id))


def _staging_dir(models_root, project_id, version_id) -> Path:
    return Path(models_root) / str(int(project_id)) / f".staging-{int(version_id)}"


def _progress_file(models_root, project_id, version_id) -> Path:
    return Path(models_root) / str(int(project_id)) / f".progress-{int(version_id)}.json"


def _log_file(models_root, project_id, version_id) -> Path:
    return Path(models_root) / str(int(project_id)) / f".worker-{int(version_id)}.log"


def read_progress(models_root, project_id: int, version_id: int) -> dict | None:
    """The worker's progress: ``dict(phase, iteration, max_iter, bounds, seconds, updated)``,
    or None before the first write.  ``phase`` is one of loading, fitting, evaluating,
    saving, predicting, done, failed."""
    path = _progress_file(models_root, project_id, version_id)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def worker_log(models_root, project_id: int, version_id: int, tail: int = 4000) -> str:
    """The last ``tail`` characters of a worker's stdout/stderr log ("" when none)."""
    try:
        return _log_file(models_root, project_id, version_id).read_text(
            encoding="utf-8", errors="replace")[-tail:]
    except OSError:
        return ""


class _Progress:
    """Atomically rewritten JSON progress file (write to a temp file, then rename)."""

    def __init__(self, path: Path, max_iter: int):
        self.path = path
        self.data = {"phase": "loading", "iteration": 0, "max_iter": int(max_iter),
                     "bounds": [], "seconds": [], "updated": time.time()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.write()

    def write(self) -> None:
        self.data["updated"] = time.time()
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
        self.data.update(extra)
        self.write()

    def sweep(self, info: dict) -> None:
        self.data["iteration"] = int(info.get("iteration", 0))
        self.data["bounds"].append(float(info.get("bound", float("nan"))))
        self.data["seconds"].append(float(info.get("seconds", 0.0)))
        self.write()


# --------------------------------------------------------------------------- job control


def reap_workers() -> None:
    """Collect finished worker processes started by this process (no zombies)."""
    for vid, proc in list(_WORKERS.items()):
        if proc.poll() is not None:
            _WORKERS.pop(vid, None)


def running_version(store: Store, project_id: int) -> dict | None:
    """The project's running version whose worker is alive, or None.  Versions whose worker
    died are marked failed first."""
    reap_workers()
    store.mark_stale_running_failed(project_id)
    for v in reversed(store.list_model_versions(project_id)):
        if v["status"] == "running":
            return v
    return None


@contextlib.contextmanager
def _start_lock(models_root: Path, project_id: int) -> Iterator[None]:
    """An exclusive lock per project so that two starts cannot both pass the busy check."""
    path = Path(models_root) / str(int(project_id)) / ".train.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            yield
            return
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


_LEFTOVER = re.compile(r"^\.{1,2}staging-(\d+)(?:\.(?:tmp|old)-.*)?$")


def cleanup_staging(store: Store, project_id: int, models_root) -> list[Path]:
    """Delete what killed workers leave behind in the project's model folder; returns
    the paths removed.

    * staging directories ``.staging-<version>`` and the temporary directories of a model
      save that was cut short (``..staging-<version>.tmp-*``, ``.old-*``) of versions that
      are not running;
    * complete model directories ``<version>`` of versions that ended ``'failed'`` or
      ``'killed'`` (renamed into place, but the worker died before the version was
      recorded as done: nothing refers to them, and they are never loaded).
    """
    base = Path(models_root) / str(int(project_id))
    removed: list[Path] = []
    if not base.is_dir():
        return removed
    for path in sorted(base.iterdir()):
        if not path.is_dir():
            continue
        match = _LEFTOVER.match(path.name)
        if match:
            v = store.get_model_version(int(match.group(1)))
            stale = v is None or v["status"] != "running"
        elif path.name.isdigit():
            v = store.get_model_version(int(path.name))
            stale = v is not None and v["project_id"] == int(project_id) and \
                v["status"] in ("failed", "killed")
        else:
            continue
        if stale:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def recover(store: Store, models_root: str | os.PathLike | None = None) -> dict:
    """What an app start does after a crash: mark versions whose worker is gone as
    ``'failed'`` and clean their leftovers (:func:`cleanup_staging`) in every project.
    Returns ``{"failed": [version ids], "removed": [paths]}``."""
    root = Path(models_root) if models_root is not None else models_root_for(store.path)
    failed = store.mark_stale_running_failed()
    removed: list[Path] = []
    for project in store.list_projects():
        if (root / str(int(project["id"]))).is_dir():
            with _start_lock(root, project["id"]):
                removed += cleanup_staging(store, project["id"], root)
    return {"failed": failed, "removed": removed}


def _worker_env() -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def start_training(store: Store, project_id: int, config: TrainConfig,
                   models_root: str | os.PathLike | None = None) -> int:
    """Start a background training worker for a project; returns the new version id.

    Raises :class:`TrainingBusyError` when a run of the project is still going and
    :class:`InputError` when there is nothing to train on.
    """
    root = Path(models_root) if models_root is not None else models_root_for(store.path)
    if store.get_project(project_id) is None:
        raise InputError(f"no project with id {project_id}", source="<train>")
    with _start_lock(root, project_id):
        busy = running_version(store, project_id)
        if busy is not None:
            raise TrainingBusyError(
                f"model version {busy['id']} is still training (worker pid "
                f"{busy['settings'].get('pid')}); wait for it or stop it first")
        if store.progress(project_id, split="train")["labeled_tokens"] == 0:
            raise InputError("no labeled tokens yet: label some tokens before training",
                             source="<train>")
        cleanup_staging(store, project_id, root)
        vid = store.start_model_version(project_id, config.to_settings())
        log = _log_file(root, project_id, vid)
        log.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "gpsl.training", "--db", str(store.path),
               "--version", str(vid), "--models-root", str(root)]
        try:
            with open(log, "wb") as out:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=subprocess.STDOUT, env=_worker_env(),
                                        start_new_session=True, close_fds=True)
        except OSError as exc:
            store.fail_model_version(vid, f"could not start the training worker: {exc}")
            raise
        store.set_model_pid(vid, proc.pid)
        _WORKERS[vid] = proc
    return vid


def _is_worker(pid: int) -> bool:
    try:
        cmd = Path(f"/proc/{int(pid)}/cmdline").read_bytes()
    except OSError:
        return False
    return b"gpsl.training" in cmd


def stop_training(store: Store, version_id: int) -> bool:
    """Stop a running job: mark it ``'killed'`` and send SIGTERM to its worker (only when the
    pid is a gpsl training worker).  Returns False when it was not running."""
    v = store.get_model_version(version_id)
    if v is None or v["status"] != "running":
        return False
    ok = store.fail_model_version(version_id, "stopped by the user", status="killed")
    pid = v["settings"].get("pid")
    if pid and int(pid) != os.getpid() and _is_worker(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(pid), signal.SIGTERM)
    reap_workers()
    return ok


# --------------------------------------------------------------------------- the job


def _pick_sentences(ids, X, y, max_sentences):
    """At most ``max_sentences`` sentences, the most labeled first, kept in position order."""
    if max_sentences is None or len(X) <= max_sentences:
        return ids, X, y
    counts = [sum(lab is not None for lab in labs) for labs in y]
    order = sorted(range(len(X)), key=lambda i: (-counts[i], i))[:int(max_sentences)]
    order.sort()
    return [ids[i] for i in order], [X[i] for i in order], [y[i] for i in order]


def _chunks(n_tokens: list[int], budget: int) -> Iterator[tuple[int, int]]:
    start, acc = 0, 0
    for i, n in enumerate(n_tokens):
        if acc and acc + n > budget:
            yield start, i
            start, acc = i, 0
        acc += n
    if start < len(n_tokens):
        yield start, len(n_tokens)


def _predict(model, X, y=None) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    for a, b in _chunks([len(s) for s in X], PREDICT_CHUNK_TOKENS):
        out.extend(model.predict_marginals(X[a:b], y=None if y is None else y[a:b]))
    return out


def evaluate_heldout(model, store: Store, project_id: int) -> dict:
    """Token accuracy, ECE and (for BIO labels) chunk F1 on the held-out gold labels."""
    from gpsl import metrics

    ids, X, gold = store.gold_data(project_id)
    if not ids:
        return {}
    P = _predict(model, X)
    classes = list(model.classes_)
    conf, correct, y_true, y_pred = [], [], [], []
    for p, g in zip(P, gold):
        pred = [classes[j] for j in p.argmax(axis=1)]
        y_pred.append(pred)
        y_true.append(g)
        for t, lab in enumerate(g):
            if lab is not None:
                conf.append(float(p[t].max()))
                correct.append(pred[t] == lab)
    if not conf:
        return {}
    out = {
        "heldout_sentences": len(ids),
        "heldout_tokens": len(conf),
        "heldout_accuracy": float(np.mean(correct)),
        "heldout_ece": float(metrics.expected_calibration_error(conf, correct)),
    }
    if all(lab is not None for g in gold for lab in g):
        with contextlib.suppress(Exception):
            out["heldout_chunk_f1"] = float(metrics.chunk_f1(y_true, y_pred))
    return out


def _record_query_round(store, project_id, version_id, ids, marginals, labels, batch) -> None:
    from gpsl.active import query

    labeled = [np.array([lab is not None for lab in labs], dtype=bool) for labs in labels]
    if not ids:
        return
    items = query(marginals, labeled, strategy=QUERY_STRATEGY, batch_size=int(batch),
                  sentence_ids=ids)
    store.record_query_round(project_id, version_id, QUERY_STRATEGY,
                             [(it.sentence, it.token, it.score) for it in items])


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, InputError):
        return str(exc)
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def run_training_job(db_path: str | os.PathLike, version_id: int,
                     models_root: str | os.PathLike | None = None, *,
                     raise_errors: bool = False) -> dict:
    """Run the job of a ``'running'`` model version to the end (see the module docstring);
    returns the version dict.  Errors are recorded in the version (and re-raised when
    ``raise_errors``)."""
    from gpsl.model import GPSL

    store = Store(db_path)
    version = store.get_model_version(version_id)
    if version is None:
        raise InputError(f"no model version {version_id}", source=str(db_path))
    if version["status"] != "running":
        return version
    project_id = version["project_id"]
    root = Path(models_root) if models_root is not None else models_root_for(store.path)
    config = TrainConfig.from_settings(version["settings"])
    progress = _Progress(_progress_file(root, project_id, version_id), config.max_iter)
    staging = _staging_dir(root, project_id, version_id)
    final = model_dir(root, project_id, version_id)
    try:
        project = store.get_project(project_id)
        ids, X, y = store.training_data(project_id, "train", only_labeled=True, with_ids=True)
        if not X:
            raise InputError("no labeled tokens yet: label some tokens before training",
                             source="<train>")
        ids, X, y = _pick_sentences(ids, X, y, config.max_sentences)
        n_labeled = sum(lab is not None for labs in y for lab in labs)
        progress.phase("fitting", sentences=len(X), labeled_tokens=n_labeled)
        model = GPSL(offsets=config.offsets, kernel=config.kernel,
                     template=project["template"] or None, max_iter=config.max_iter,
                     tol=config.tol, learn_hyper=config.learn_hyper)
        model.fit(X, y, callback=progress.sweep)
        progress.phase("evaluating")
        metrics = evaluate_heldout(model, store, project_id)
        metrics.update({"train_sentences": len(X), "train_labeled_tokens": n_labeled,
                        "n_iter": int(model.n_iter_), "fit_seconds": float(model.fit_seconds_)})
        progress.phase("saving")
        if staging.exists():
            shutil.rmtree(staging)
        model.save(staging)
        if os.environ.get(TEST_HOOK_ENV) == "pause-after-staging":
            progress.phase("paused")
            time.sleep(600)
        os.rename(staging, final)
        progress.phase("predicting")
        all_ids, all_X, all_y = store.training_data(project_id, split=None, with_ids=True)
        all_P = _predict(model, all_X, all_y)
        for a, b in _chunks([1] * len(all_ids), 500):
            store.save_predictions(version_id, dict(zip(all_ids[a:b], all_P[a:b])))
        done = store.finish_model_version(version_id, final, model.bound_trace_, metrics,
                                          n_labeled, classes=model.classes_, activate=True)
        if not done:  # stopped meanwhile: keep nothing of it active
            store.delete_predictions(version_id)
            progress.phase("stopped")
            return store.get_model_version(version_id)
        train_ids = set(store.sentence_ids(project_id, split="train"))
        keep = [i for i, sid in enumerate(all_ids) if sid in train_ids]
        _record_query_round(store, project_id, version_id, [all_ids[i] for i in keep],
                            [all_P[i] for i in keep], [all_y[i] for i in keep],
                            config.query_batch)
        store.prune_predictions(project_id, keep=2)
        progress.phase("done")
    except BaseException as exc:
        with contextlib.suppress(Exception):
            store.fail_model_version(version_id, _one_line(exc))
            progress.phase("failed", error=_one_line(exc))
        shutil.rmtree(staging, ignore_errors=True)
        if raise_errors or not isinstance(exc, Exception):
            raise
    return store.get_model_version(version_id)


def train_now(store: Store, project_id: int, config: TrainConfig,
              models_root: str | os.PathLike | None = None, *,
              raise_errors: bool = True) -> dict:
    """Run a training job synchronously in this process (tests, scripts); returns the
    finished version dict."""
    root = Path(models_root) if models_root is not None else models_root_for(store.path)
    with _start_lock(root, project_id):
        busy = running_version(store, project_id)
        if busy is not None:
            raise TrainingBusyError(f"model version {busy['id']} is still training")
        vid = store.start_model_version(project_id, config.to_settings())
    return run_training_job(store.path, vid, root, raise_errors=raise_errors)


# --------------------------------------------------------------------------- worker entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpsl.training",
                                     description="Run one gpsl training job (app worker).")
    parser.add_argument("--db", required=True, help="the SQLite store")
    parser.add_argument("--version", type=int, required=True, help="model version id")
    parser.add_argument("--models-root", default=None, help="directory of saved models")
    args = parser.parse_args(argv)
    with contextlib.suppress(OSError, AttributeError):
        os.nice(5)
    version = run_training_job(args.db, args.version, args.models_root)
    print(f"version {args.version}: {version['status']}"
          + (f" ({version['error']})" if version.get("error") else ""), flush=True)
    return 0 if version["status"] == "done" else 1


if __name__ == "__main__":
    sys.exit(main())
