"""Training jobs on a Dask cluster: the runner :mod:`gpsl.annotation.training.jobs` uses when
``GPSL_DASK_SCHEDULER`` names a scheduler (``tcp://host:8786``).

The job is :func:`run_job`, submitted to the scheduler; it runs :func:`pipeline.run` in a Dask
worker, against the same store (``GPSL_DB``, passed with the job) and the same models root, so
progress, the model folder, predictions and failures are written exactly as by the local
subprocess runner. On one machine those are the same paths; on several machines the store must
be a PostgreSQL server every worker reaches and the models root shared storage mounted at the
same path on every worker (the model bytes are not stored in the database).

* **Identity**: when the job starts it records its worker's pid, process start time and host
  in the version (as the local runner records its subprocess), plus ``runner: dask``. On the
  app's host, :func:`jobs.worker_alive` checks that process like a local worker; on another
  host it cannot, and the job's future in the app process tells instead (:func:`reap`).
* **A killed worker**: Dask would run the task again on another worker. The job is not run
  twice: a job that finds its version already claimed by an earlier attempt marks it
  ``'failed'`` (the earlier worker died) and returns. Labels are never written by a job, so
  none is lost; a new run (Train again) starts a new version.
* **Stop**: the version is marked ``'killed'`` and the future cancelled; a job already running
  sees the status after its current sweep or prediction chunk and ends (``should_stop`` of
  :func:`pipeline.run`), since Dask cannot interrupt a running task.

Dask (an optional dependency, ``dask[distributed]``) is imported only here, and only when a
client is opened: the variable is set.  The job gets the store's
:class:`~gpsl.annotation.store.owned.Home` (it pickles as the database's address, timeout and the
models base, and opens again in the worker), so this module never opens one.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from pathlib import Path

from gpsl.annotation.store.processes import process_started
from gpsl.annotation.store.store_errors import one_line
from gpsl.annotation.training import pipeline, versions
from gpsl.errors import InputError

SCHEDULER_ENV = "GPSL_DASK_SCHEDULER"
log = logging.getLogger(__name__)

_CLIENTS: dict[str, object] = {}  # scheduler address -> Client of this process
_FUTURES: dict[int, tuple[object, object]] = {}  # version id -> (future, home)


def scheduler_address() -> str | None:
    """The scheduler named by ``GPSL_DASK_SCHEDULER`` (None: the local subprocess runner)."""
    address = os.environ.get(SCHEDULER_ENV, "").strip()
    return address or None


def client(address: str):
    """This process's client of the scheduler at ``address`` (opened on first use)."""
    c = _CLIENTS.get(address)
    if c is not None and getattr(c, "status", "") in ("running", "connecting"):
        return c
    try:
        from distributed import Client
    except ImportError:
        raise InputError(f"{SCHEDULER_ENV} is set but dask[distributed] is not installed",
                         source="<train>") from None
    timeout = float(os.environ.get("GPSL_DASK_TIMEOUT", "10"))
    try:
        c = Client(address, timeout=timeout, set_as_default=False)
    except Exception as exc:  # noqa: BLE001 - any failure to connect is one line
        raise InputError(one_line(exc, f"cannot reach the Dask scheduler at {address} "
                                       f"({SCHEDULER_ENV})"), source="<train>") from None
    _CLIENTS[address] = c
    return c


def submit(home, version_id: int, models_root, address: str, *,
           pause_at: str | None = None) -> None:
    """Submit the job of a ``'running'`` version to the scheduler at ``address``
    (``pause_at``: where the run waits, :data:`gpsl.annotation.training.pipeline.PAUSES`)."""
    c = client(address)
    fut = c.submit(run_job, int(version_id), home, str(models_root), pause_at, pure=False,
                   key=f"gpsl-train-{int(version_id)}-{uuid.uuid4().hex[:8]}")
    _FUTURES[int(version_id)] = (fut, home)
    log = pipeline.log_file(models_root, versions.get(home.db, version_id)["project_id"],
                            version_id)
    _append(log, f"version {version_id}: submitted to the Dask scheduler {address} "
                 f"as {fut.key}")


def cancel(version_id: int) -> None:
    """Cancel the version's future (a queued job never starts; a running one stops itself)."""
    entry = _FUTURES.get(int(version_id))
    if entry is not None:
        try:
            entry[0].cancel()
        except Exception as exc:  # noqa: BLE001 - the scheduler may be gone; the status decides
            log.warning("version %s: the Dask job could not be cancelled: %s", version_id, exc)


def reap() -> None:
    """Record why a job whose future ended without finishing its version failed (its
    worker died for good, the scheduler lost it, it raised outside the pipeline)."""
    for vid, (fut, home) in list(_FUTURES.items()):
        status = getattr(fut, "status", "pending")
        if status in ("pending",):
            continue
        reason = None
        if status == "error":
            try:
                exc = fut.exception(timeout=1)
            except Exception as err:  # noqa: BLE001
                exc = err
            reason = one_line(exc, "the Dask job failed") if exc is not None \
                else "the Dask job failed"
        elif status in ("cancelled", "lost"):
            reason = f"the Dask job was {status}"
        if reason is not None:
            try:
                versions.fail(home.db, vid, reason)
            except Exception as exc:  # noqa: BLE001 - the store cannot be written now: next time
                log.warning("version %s: %s; not recorded yet: %s", vid, reason, exc)
                continue
        _FUTURES.pop(vid, None)


def run_job(version_id: int, home, models_root: str, pause_at: str | None = None) -> str:
    """The job, in a Dask worker: claim the version, run its pipeline; returns the status.
    ``home`` arrives pickled (its address) and is opened here; it is closed at the end."""
    try:
        v = versions.get(home.db, version_id)
        if v is None or v["status"] != "running":
            return "gone" if v is None else v["status"]
        log = pipeline.log_file(models_root, v["project_id"], version_id)
        settings = v["settings"]
        if settings.get("runner") == "dask":  # an earlier attempt claimed it: its worker died
            reason = (f"the Dask worker running it (pid {settings.get('pid')} on "
                      f"{settings.get('host')}) died; the job is not run twice")
            versions.fail(home.db, version_id, reason)
            _append(log, f"version {version_id}: failed: {reason}")
            return "failed"
        pid = os.getpid()
        address = _worker_address()
        versions.set_worker(home.db, version_id, pid, process_started(pid),
                            {"runner": "dask", "host": socket.gethostname(),
                             "dask_worker": address})
        _append(log, f"version {version_id}: started on Dask worker {address} (pid {pid})")

        def stopped() -> bool:
            cur = versions.get(home.db, version_id)
            return cur is None or cur["status"] != "running"

        try:
            out = pipeline.run(home, version_id, Path(models_root), should_stop=stopped,
                               pause_at=pause_at)
        except pipeline.UnrecordedFailure as exc:
            _append(log, f"version {version_id}: failed: {exc}")
            raise
        _append(log, f"version {version_id}: {out['status']}"
                     + (f" ({out['error']})" if out.get("error") else ""))
        return out["status"]
    finally:
        home.close()


def _worker_address() -> str:
    try:
        from distributed import get_worker  # the optional dependency: only in a Dask worker

        return get_worker().address
    except Exception:  # noqa: BLE001 - called outside a worker (tests)
        return "-"


def _append(path: Path, line: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line.rstrip("\n") + "\n")
    except OSError:
        pass


__all__ = ["SCHEDULER_ENV", "cancel", "client", "reap", "run_job", "scheduler_address",
           "submit"]
