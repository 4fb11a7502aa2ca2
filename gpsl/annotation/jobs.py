"""Training workers: start, stop and recover them (psutil for process identity and control).

Two runners, chosen by the environment: a local subprocess (the default, below) or, when
``GPSL_DASK_SCHEDULER`` names a Dask scheduler, a job on that cluster
(:mod:`gpsl.annotation.dask_jobs`); progress, stop, failure and the model folder work the same
way with either.

A worker is ``python -m gpsl.annotation.worker --version ID --models-root DIR`` in its own
session (one BLAS thread, ``nice`` 5, :mod:`gpsl.annotation.worker`); the store it works on is
passed in its environment (``GPSL_DB``), never on the command line (a PostgreSQL URL may hold
a password).
A version records its worker's pid *and the process's start time*
(:mod:`gpsl.annotation.processes`): a process is only taken for that worker when both match
(a reused pid is another process), and Stop only ever signals a process that passes this
check and is a gpsl worker of that version.  A worker that dies records why: itself when it
can, else the app process that started it (its exit status), else the next recovery (the last
line of its log).

The functions take the store (:class:`gpsl.annotation.Store`, or anything with its methods)
as their first argument; they never open one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil

from gpsl.annotation import dask_jobs, pipeline, projects, versions
from gpsl.annotation.pipeline import TrainConfig
from gpsl.annotation.processes import is_worker_of, process_of, process_started, worker_alive
from gpsl.annotation.store_errors import TrainingBusyError, one_line
from gpsl.constraints import Interval
from gpsl.errors import GpslError, InputError
from gpsl.params import Param

_WORKERS: dict[int, tuple[subprocess.Popen, object]] = {}  # version -> (process, store)
_LEFTOVER = re.compile(r"^\.{1,2}staging-(\d+)(?:\.(?:tmp|old)-.*)?$")
# exit statuses of a worker that could not record its failure (pipeline.UnrecordedFailure)
_EXIT_REASONS = {errno.ENOSPC: "out of disk space (ENOSPC)",
                 errno.EROFS: "read-only file system (EROFS)", errno.EIO: "I/O error (EIO)",
                 errno.ENOMEM: "out of memory (ENOMEM)"}


def _gone_reason(models_root: Path, version: dict) -> str:
    pid = version["settings"].get("pid")
    if version["settings"].get("runner") == "dask":
        return (f"the Dask worker running it (pid {pid} on {version['settings'].get('host')}) "
                "is gone (killed or out of memory?)")
    tail = pipeline.worker_log(models_root, version["project_id"], version["id"], 400).strip()
    last = tail.splitlines()[-1].strip() if tail else ""
    why = f"; its last output: {last}" if last else "; it left no output (killed, out of " \
        "memory or out of disk space?)"
    return f"worker process {pid} is gone{why}"


def reap_workers() -> None:
    """Collect the workers this process started; a worker that exited without recording
    its end gets its exit status recorded as the reason (kept until the store can be
    written, e.g. once there is disk space again). Dask jobs: :func:`dask_jobs.reap`."""
    dask_jobs.reap()
    for vid, (proc, store) in list(_WORKERS.items()):
        code = proc.poll()
        if code is None:
            continue
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            reason = f"worker process {proc.pid} was killed by {name}"
        elif code in _EXIT_REASONS:
            reason = f"worker process {proc.pid} failed: {_EXIT_REASONS[code]}"
        else:
            reason = f"worker process {proc.pid} exited with status {code} without finishing"
        try:
            store.fail_model_version(vid, reason)
        except GpslError:  # the store cannot be written now (full disk ...): next time
            continue
        _WORKERS.pop(vid, None)


def mark_stale(store, models_root, project_id: int | None = None) -> list[int]:
    """Mark ``'failed'`` the running versions whose worker is gone (pid + start time)."""
    reap_workers()
    root = store.own_root(models_root)
    return store.mark_stale_running_failed(
        project_id, alive=worker_alive, reason=lambda v: _gone_reason(root, v))


def running_version(store, project_id: int, models_root=None) -> dict | None:
    """The project's running version whose worker is alive, or None (versions whose worker
    died are marked failed first)."""
    mark_stale(store, models_root, project_id)
    for v in reversed(store.list_model_versions(project_id)):
        if v["status"] == "running":
            return v
    return None


@contextlib.contextmanager
def start_lock(models_root, project_id: int) -> Iterator[None]:
    """An exclusive lock per project so that two starts cannot both pass the busy check."""
    path = Path(models_root) / str(int(project_id)) / ".train.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def cleanup_staging(store, project_id: int, models_root) -> list[Path]:
    """Delete what killed workers leave behind (staging and temporary folders of versions
    that are not running; complete folders of versions that ended failed or killed)."""
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


def recover(store, models_root=None) -> dict:
    """After a crash: mark versions whose worker is gone ``'failed'`` and clean leftovers.
    Returns ``{"failed": [version ids], "removed": [paths]}``."""
    root = store.own_root(models_root)
    failed = mark_stale(store, root)
    removed: list[Path] = []
    for project in store.list_projects():
        if (root / str(int(project["id"]))).is_dir():
            with start_lock(root, project["id"]):
                removed += cleanup_staging(store, project["id"], root)
    return {"failed": failed, "removed": removed}


def _worker_env(store) -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    env["PYTHONUNBUFFERED"] = "1"
    env["GPSL_DB"] = store.target
    return env


def start_training(store, project_id: int, config: TrainConfig, models_root=None, *,
                   pause_at: str | None = None, started_by: str | None = None) -> int:
    """Start a background worker for a project; returns the new version id.
    :class:`TrainingBusyError` while a run of the project is going, InputError when there is
    nothing to train on.  ``pause_at`` (tests, demonstrations): the run waits there
    (:data:`gpsl.annotation.pipeline.PAUSES`) until it is stopped or killed.
    ``started_by``: recorded in the version's settings (``"keep training"``; else a click)."""
    if pause_at is not None and pause_at not in pipeline.PAUSES:
        raise ValueError(f"pause_at must be one of {', '.join(pipeline.PAUSES)}")
    root = store.own_root(models_root)
    if store.get_project(project_id) is None:
        raise InputError(f"no project with id {project_id}", source="<train>")
    with start_lock(root, project_id):
        busy = running_version(store, project_id, root)
        if busy is not None:
            raise TrainingBusyError(
                f"model version {busy['id']} is still training (worker pid "
                f"{busy['settings'].get('pid')}); wait for it or stop it first")
        if store.progress(project_id, split="train", detail=False)["labeled_tokens"] == 0:
            raise InputError("no labeled tokens yet: label some tokens before training",
                             source="<train>")
        cleanup_staging(store, project_id, root)
        address = dask_jobs.scheduler_address()
        settings = {**config.to_settings(), "started_by": started_by or "click"}
        if address:
            return _start_dask(store, project_id, settings, root, address, pause_at)
        vid = store.start_model_version(project_id, settings)
        log = pipeline.log_file(root, project_id, vid)
        cmd = [sys.executable, "-m", "gpsl.annotation.worker", "--version", str(vid),
               "--models-root", str(root)]
        cmd += ["--pause-at", pause_at] if pause_at else []
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "wb") as out:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=subprocess.STDOUT, env=_worker_env(store),
                                        start_new_session=True, close_fds=True)
        except OSError as exc:
            store.fail_model_version(vid, one_line(exc, "could not start the training worker"))
            raise InputError(one_line(exc, "could not start the training worker"),
                             source="<train>") from exc
        store.set_model_worker(vid, proc.pid, process_started(proc.pid))
        _WORKERS[vid] = (proc, store)
    return vid


def _start_dask(store, project_id: int, settings: dict, root: Path, address,
                pause_at: str | None) -> int:
    """The Dask runner's start: the version (its worker identity is this process until the
    job claims it) and its job on the scheduler."""
    dask_jobs.client(address)  # an unreachable scheduler: one line, no version recorded
    # until the job claims it, the version's process is this one, on this host (another app
    # server sharing the store cannot check it and leaves it alone)
    vid = store.start_model_version(project_id, {**settings, "scheduler": address,
                                                 "host": socket.gethostname()})
    try:
        dask_jobs.submit(store, vid, root, address, pause_at=pause_at)
    except Exception as exc:
        store.fail_model_version(vid, one_line(exc, "could not submit the training job"))
        raise InputError(one_line(exc, f"could not submit the training job to {address}"),
                         source="<train>") from exc
    return vid


def stop_training(store, version_id: int) -> bool:
    """Stop a running job: mark it ``'killed'`` and SIGTERM its worker, only when that
    process is the version's own worker (pid, start time and command line).  False when it
    was not running."""
    v = store.get_model_version(version_id)
    if v is None or v["status"] != "running":
        return False
    ok = store.fail_model_version(version_id, "stopped by the user", status="killed")
    if v["settings"].get("scheduler") or v["settings"].get("runner") == "dask":
        dask_jobs.cancel(version_id)  # the job ends itself at its next sweep (should_stop)
        reap_workers()
        return ok
    proc = process_of(v["settings"])
    if proc is not None and proc.pid != os.getpid() and is_worker_of(proc, version_id):
        with contextlib.suppress(psutil.Error):
            proc.terminate()  # psutil checks the pid was not reused since _process()
    reap_workers()
    return ok


def train_now(store, project_id: int, config: TrainConfig, models_root=None, *,
              raise_errors: bool = True) -> dict:
    """Run a training job in this process (tests, scripts); returns the version dict."""
    root = store.own_root(models_root)
    with start_lock(root, project_id):
        busy = running_version(store, project_id, root)
        if busy is not None:
            raise TrainingBusyError(f"model version {busy['id']} is still training")
        vid = store.start_model_version(project_id, config.to_settings())
    return pipeline.run(store, vid, root, raise_errors=raise_errors)



# --------------------------------------------------------------------------- keep training

#: "Keep training": a project setting (the lead's, on the Train page) that refits in the
#: background after every N new labels, without a click. N's constraint, written once (the
#: Train page's widget reads its label, help and bounds here).
KEEP_EVERY = Param(
    "keep_training_every", 50, (Interval(int, 5, 100_000),), group="app", persisted=False,
    label="Refit after every N new labels",
    help="with keep training on, a run starts by itself once this many labels were set "
         "since the last run began (by anyone in the project); never while one is running")


def keep_training(store, project_id: int) -> dict:
    """The project's keep-training setting and where it stands: ``on``, ``every`` (N),
    ``new_labels`` (labels set since the last run began)."""
    keep = store.db.read(lambda conn: projects.settings_of(conn, project_id)) \
        .get("keep_training") or {}
    every = int(keep.get("every", KEEP_EVERY.default))
    return {"on": bool(keep.get("on")), "every": every,
            "new_labels": versions.new_labels(store.db, project_id, keep)}


def set_keep_training(store, project_id: int, on: bool, every: int | None = None) -> dict:
    """Turn keep training on or off (``every``: N, checked by :data:`KEEP_EVERY`); one
    transaction. Returns :func:`keep_training`. Turning it on starts counting from the last
    run's start (labels made since then count)."""
    if every is not None:
        every = KEEP_EVERY.check(every, "<project>")
    if not isinstance(on, bool):
        raise InputError(f"keep training must be on or off, got {on!r}", source="<project>")
    db = store.db

    def tx(conn):
        settings = projects.settings_of(conn, project_id, db.for_update())
        keep = dict(settings.get("keep_training") or {})
        keep["on"] = on
        keep["every"] = int(every if every is not None else keep.get("every",
                                                                      KEEP_EVERY.default))
        settings["keep_training"] = keep
        projects.write_settings(conn, project_id, settings)

    db.write(tx)
    return keep_training(store, project_id)


def _keep_config(store, project_id: int) -> TrainConfig:
    """The settings of an automatic run: the newest run's (the lead's last choice), else the
    app's defaults with the project's dependency set and kernel."""
    for v in reversed(store.list_model_versions(project_id)):
        if v["status"] == "done":
            return TrainConfig.from_settings(v["settings"])
    project = store.get_project(project_id) or {}
    return TrainConfig(offsets=tuple(project.get("offsets") or TrainConfig().offsets),
                       kernel=project.get("kernel") or TrainConfig().kernel)


def after_labels(store, project_id: int | None) -> int | None:
    """The keep-training service, called by the store after every label write (any
    annotator, any page or script): when the project keeps training, N labels or more were
    set since the last run began and none is running, start one (the worker, as Start
    training does); returns its version id, else None. Exactly one writer starts it
    (:func:`gpsl.annotation.versions.claim_keep_training` moves the mark under the project's
    row lock). A run that cannot start is never the label write's failure: the labels are
    kept, the reason is in the worker's version when there is one."""
    if project_id is None:
        return None
    keep = store.db.read(lambda conn: projects.settings_of(conn, project_id)) \
        .get("keep_training") or {}
    every = int(keep.get("every", KEEP_EVERY.default))
    if not keep.get("on") or versions.new_labels(store.db, project_id, keep) < every:
        return None
    root = store.models_root
    with start_lock(root, project_id):
        mark_stale(store, root, project_id)  # a dead worker's run no longer blocks
        if versions.claim_keep_training(store.db, project_id, every) is None:
            return None
    try:
        return start_training(store, project_id, _keep_config(store, project_id),
                              started_by="keep training")
    except (TrainingBusyError, InputError):
        return None
