"""Training workers: start, stop and recover them (psutil for process identity and control).

Two runners, chosen by the environment: a local subprocess (the default, below) or, when
``GPSL_DASK_SCHEDULER`` names a Dask scheduler, a job on that cluster
(:mod:`gpsl.annotation.training.dask_jobs`); progress, stop, failure and the model folder work the
same way with either.

A worker is ``python -m gpsl.annotation.worker --version ID --models-root DIR`` in its own
session (one BLAS thread, ``nice`` 5, :mod:`gpsl.annotation.worker`); the store it works on is
passed in its environment (``GPSL_DB``), never on the command line (a PostgreSQL URL may hold
a password).
A version records its worker's pid *and the process's start time*
(:mod:`gpsl.annotation.store.processes`): a process is only taken for that worker when both match
(a reused pid is another process), and Stop only ever signals a process that passes this
check and is a gpsl worker of that version.  A worker that dies records why: itself when it
can, else the app process that started it (its exit status), else the next recovery (the last
line of its log).

The functions take the store's :class:`~gpsl.annotation.store.owned.Home` (its database and its
own folder of files) as their first argument, never the facade; they never open one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
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

from gpsl.annotation.corpus import projects, stats
from gpsl.annotation.store.db import now
from gpsl.annotation.store.processes import is_worker_of, process_of, process_started, worker_alive
from gpsl.annotation.store.store_errors import TrainingBusyError, one_line
from gpsl.annotation.training import dask_jobs, pipeline, spares, versions
from gpsl.annotation.training.pipeline import TrainConfig
from gpsl.constraints import Interval
from gpsl.errors import GpslError, InputError
from gpsl.params import Param

log = logging.getLogger(__name__)
_WORKERS: dict[int, tuple[subprocess.Popen, object]] = {}  # version -> (process, home)
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
    for vid, (proc, home) in list(_WORKERS.items()):
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
            versions.fail(home.db, vid, reason)
        except GpslError as exc:  # the store cannot be written now (full disk ...): next time
            log.warning("version %s: %s; not recorded yet: %s", vid, reason, exc)
            continue
        _WORKERS.pop(vid, None)


def mark_stale(home, models_root, project_id: int | None = None) -> list[int]:
    """Mark ``'failed'`` the running versions whose worker is gone (pid + start time)."""
    reap_workers()
    root = home.own_root(models_root)
    return versions.mark_stale_failed(home.db, worker_alive, lambda v: _gone_reason(root, v),
                                      project_id)


def running_version(home, project_id: int, models_root=None) -> dict | None:
    """The project's running version whose worker is alive, or None (versions whose worker
    died are marked failed first)."""
    mark_stale(home, models_root, project_id)
    for v in reversed(versions.list_all(home.db, project_id)):
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


def cleanup_staging(home, project_id: int, models_root) -> list[Path]:
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
            v = versions.get(home.db, int(match.group(1)))
            stale = v is None or v["status"] != "running"
        elif path.name.isdigit():
            v = versions.get(home.db, int(path.name))
            stale = v is not None and v["project_id"] == int(project_id) and \
                v["status"] in ("failed", "killed")
        else:
            continue
        if stale:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def recover(home, models_root=None) -> dict:
    """After a crash: mark versions whose worker is gone ``'failed'`` and clean leftovers.
    Returns ``{"failed": [version ids], "removed": [paths]}``."""
    root = home.own_root(models_root)
    failed = mark_stale(home, root)
    removed: list[Path] = []
    for project in projects.list_all(home.db):
        if (root / str(int(project["id"]))).is_dir():
            with start_lock(root, project["id"]):
                removed += cleanup_staging(home, project["id"], root)
    return {"failed": failed, "removed": removed}


def _worker_env(home) -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    env["PYTHONUNBUFFERED"] = "1"
    env["GPSL_DB"] = home.target
    return env


def start_training(home, project_id: int, config: TrainConfig, models_root=None, *,
                   pause_at: str | None = None, started_by: str | None = None) -> int:
    """Start a background worker for a project; returns the new version id.
    :class:`TrainingBusyError` while a run of the project is going, InputError when there is
    nothing to train on.  ``pause_at`` (tests, demonstrations): the run waits there
    (:data:`gpsl.annotation.training.pipeline.PAUSES`) until it is stopped or killed.
    ``started_by``: recorded in the version's settings (``"keep training"``; else a click)."""
    if pause_at is not None and pause_at not in pipeline.PAUSES:
        raise ValueError(f"pause_at must be one of {', '.join(pipeline.PAUSES)}")
    root = home.own_root(models_root)
    if projects.get(home.db, project_id) is None:
        raise InputError(f"no project with id {project_id}", source="<train>")
    with start_lock(root, project_id):
        busy = running_version(home, project_id, root)
        if busy is not None:
            raise TrainingBusyError(
                f"model version {busy['id']} is still training (worker pid "
                f"{busy['settings'].get('pid')}); wait for it or stop it first")
        if stats.progress(home.db, project_id, "train", detail=False)["labeled_tokens"] == 0:
            raise InputError("no labeled tokens yet: label some tokens before training",
                             source="<train>")
        cleanup_staging(home, project_id, root)
        address = dask_jobs.scheduler_address()
        settings = {**config.to_settings(), "started_by": started_by or "click"}
        if address:
            return _start_dask(home, project_id, settings, root, address, pause_at)
        vid = versions.start(home.db, project_id, settings)
        log = pipeline.log_file(root, project_id, vid)
        cmd = [sys.executable, "-m", "gpsl.annotation.worker", "--version", str(vid),
               "--models-root", str(root)]
        cmd += ["--pause-at", pause_at] if pause_at else []
        env = _worker_env(home)
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            proc = spares.take(env)
            if proc is None or not spares.hand_over(proc, vid, root, log, pause_at=pause_at):
                with open(log, "wb") as out:
                    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True, close_fds=True)
        except OSError as exc:
            versions.fail(home.db, vid, one_line(exc, "could not start the training worker"))
            raise InputError(one_line(exc, "could not start the training worker"),
                             source="<train>") from exc
        versions.set_worker(home.db, vid, proc.pid, process_started(proc.pid), {})
        _WORKERS[vid] = (proc, home)
    spares.ensure(env)  # the next click's worker, started now (gpsl.annotation.training.spares)
    return vid


def prepare_worker(home) -> None:
    """Have a spare worker ready for the store's next run (:mod:`gpsl.annotation.training.spares`;
    the Train page calls it, so the first click does not wait for a worker's start-up)."""
    if not dask_jobs.scheduler_address():
        spares.ensure(_worker_env(home))


def _start_dask(home, project_id: int, settings: dict, root: Path, address,
                pause_at: str | None) -> int:
    """The Dask runner's start: the version (its worker identity is this process until the
    job claims it) and its job on the scheduler."""
    dask_jobs.client(address)  # an unreachable scheduler: one line, no version recorded
    # until the job claims it, the version's process is this one, on this host (another app
    # server sharing the store cannot check it and leaves it alone)
    vid = versions.start(home.db, project_id, {**settings, "scheduler": address,
                                               "host": socket.gethostname()})
    try:
        dask_jobs.submit(home, vid, root, address, pause_at=pause_at)
    except Exception as exc:
        versions.fail(home.db, vid, one_line(exc, "could not submit the training job"))
        raise InputError(one_line(exc, f"could not submit the training job to {address}"),
                         source="<train>") from exc
    return vid


def stop_training(home, version_id: int) -> bool:
    """Stop a running job: mark it ``'killed'`` and SIGTERM its worker, only when that
    process is the version's own worker (pid, start time and command line).  False when it
    was not running."""
    v = versions.get(home.db, version_id)
    if v is None or v["status"] != "running":
        return False
    ok = versions.fail(home.db, version_id, "stopped by the user", "killed")
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


def train_now(home, project_id: int, config: TrainConfig, models_root=None, *,
              raise_errors: bool = True) -> dict:
    """Run a training job in this process (tests, scripts); returns the version dict."""
    root = home.own_root(models_root)
    with start_lock(root, project_id):
        busy = running_version(home, project_id, root)
        if busy is not None:
            raise TrainingBusyError(f"model version {busy['id']} is still training")
        vid = versions.start(home.db, project_id, config.to_settings())
    return pipeline.run(home, vid, root, raise_errors=raise_errors)



# --------------------------------------------------------------------------- keep training

#: "Keep training": a project setting (the lead's, on the Train page) that refits in the
#: background after every N new labels, without a click. N's constraint, written once (the
#: Train page's widget reads its label, help and bounds here).
KEEP_EVERY = Param(
    "keep_training_every", 50, (Interval(int, 5, 100_000),), group="app", persisted=False,
    label="Refit after every N new labels",
    help="with keep training on, a run starts by itself once this many labels were set "
         "since the last run began (by anyone in the project); never while one is running")


def keep_training(db, project_id: int) -> dict:
    """The project's keep-training setting and where it stands: ``on``, ``every`` (N),
    ``new_labels`` (labels set since the last run began), ``error`` (why the last automatic
    run could not start, ``{"message", "at"}``, or None: :func:`after_write`)."""
    keep = db.read(lambda conn: projects.settings_of(conn, project_id)) \
        .get("keep_training") or {}
    every = int(keep.get("every", KEEP_EVERY.default))
    return {"on": bool(keep.get("on")), "every": every,
            "new_labels": versions.new_labels(db, project_id, keep),
            "error": keep.get("error")}


def set_keep_training(db, project_id: int, on: bool, every: int | None = None) -> dict:
    """Turn keep training on or off (``every``: N, checked by :data:`KEEP_EVERY`); one
    transaction. Returns :func:`keep_training`. Turning it on starts counting from the last
    run's start (labels made since then count); the last failure's record is cleared."""
    if every is not None:
        every = KEEP_EVERY.check(every, "<project>")
    if not isinstance(on, bool):
        raise InputError(f"keep training must be on or off, got {on!r}", source="<project>")
    def tx(conn):
        settings = projects.settings_of(conn, project_id, db.for_update())
        keep = dict(settings.get("keep_training") or {})
        keep["on"] = on
        keep["every"] = int(every if every is not None else keep.get("every",
                                                                      KEEP_EVERY.default))
        keep.pop("error", None)
        settings["keep_training"] = keep
        projects.write_settings(conn, project_id, settings)

    db.write(tx)
    return keep_training(db, project_id)


def _keep_config(db, project_id: int) -> TrainConfig:
    """The settings of an automatic run: the newest run's (the lead's last choice), else the
    app's defaults with the project's dependency set and kernel."""
    for v in reversed(versions.list_all(db, project_id)):
        if v["status"] == "done":
            return TrainConfig.from_settings(v["settings"])
    project = projects.get(db, project_id) or {}
    return TrainConfig(offsets=tuple(project.get("offsets") or TrainConfig().offsets),
                       kernel=project.get("kernel") or TrainConfig().kernel)


def after_labels(home, project_id: int | None, keep: dict | None = None) -> int | None:
    """The keep-training service, called by the store after every label write (any
    annotator, any page or script): when the project keeps training, N labels or more were
    set since the last run began and none is running, start one (the worker, as Start
    training does); returns its version id, else None. Exactly one writer starts it
    (:func:`gpsl.annotation.training.versions.claim_keep_training` moves the mark under the
    project's row lock). A run that cannot start is never the label write's failure: the labels are
    kept, the reason is in the worker's version when there is one.  ``keep``: the project's
    keep-training setting when the write read it already (:class:`labels.Written`)."""
    if project_id is None:
        return None
    if keep is None:
        keep = home.db.read(lambda conn: projects.settings_of(conn, project_id)) \
            .get("keep_training") or {}
    every = int(keep.get("every", KEEP_EVERY.default))
    if not keep.get("on") or versions.new_labels(home.db, project_id, keep) < every:
        return None
    root = home.models_root
    with start_lock(root, project_id):
        mark_stale(home, root, project_id)  # a dead worker's run no longer blocks
        if versions.claim_keep_training(home.db, project_id, every) is None:
            return None
    try:
        return start_training(home, project_id, _keep_config(home.db, project_id),
                              started_by="keep training")
    except TrainingBusyError:
        return None
    except InputError as exc:  # nothing to train on, or the worker could not start
        log.warning("keep training (project %s) started no run: %s", project_id, exc)
        return None


def after_write(home, project_id: int | None, keep: dict | None = None) -> int | None:
    """The step after a label write's commit (the store calls it with what the write
    returned): :func:`after_labels`, never the write's failure.  When it fails, the failure
    is logged (ERROR, with its traceback) and kept on the project for the lead
    (:func:`keep_training`'s ``error``, shown on the Train page) until an automatic run
    starts or the lead changes the setting."""
    try:
        vid = after_labels(home, project_id, keep)
    except Exception as exc:  # noqa: BLE001 - the labels are committed: logged and kept
        reason = one_line(exc)
        log.error("keep training (project %s) could not start a run: %s", project_id, reason,
                  exc_info=True)
        _keep_error(home.db, project_id, {"message": reason, "at": now()})
        return None
    if vid is not None and (keep is None or keep.get("error")):
        _keep_error(home.db, project_id, None)
    return vid


def _keep_error(db, project_id: int, error: dict | None) -> None:
    """Record (None: clear) why keep training could not start a run; a failure to write it
    is logged, never raised (the labels are committed)."""

    def tx(conn):
        settings = projects.settings_of(conn, project_id, db.for_update())
        keep = dict(settings.get("keep_training") or {})
        if keep.get("error") == error:
            return
        if error is None:
            keep.pop("error", None)
        else:
            keep["error"] = error
        settings["keep_training"] = keep
        projects.write_settings(conn, project_id, settings)

    try:
        db.write(tx)
    except Exception:  # noqa: BLE001 - e.g. the store busy or full: the log has it
        log.exception("keep training (project %s): its failure could not be recorded",
                      project_id)
