"""Which operating-system process runs a training job (psutil).

A model version records its worker's pid *and the process's start time*: a process is taken for
that worker only when both match (a reused pid is another process). The versions record it
(:mod:`gpsl.annotation.training.versions`), the job runners check and signal it
(:mod:`gpsl.annotation.training.jobs`, :mod:`gpsl.annotation.training.dask_jobs`).
"""

from __future__ import annotations

import socket

import psutil

START_SLACK = 0.05  # seconds: psutil's create_time is rounded to the clock tick


def process_started(pid: int) -> float | None:
    """The start time of process ``pid`` (None when there is no such process)."""
    try:
        return psutil.Process(int(pid)).create_time()
    except (psutil.Error, ValueError, TypeError):
        return None


def process_of(settings: dict) -> psutil.Process | None:
    """The version's worker process (``settings``: its ``pid`` and ``pid_started``) if it is
    alive and is the same process, else None."""
    try:
        proc = psutil.Process(int(settings.get("pid")))
    except (psutil.Error, ValueError, TypeError):
        return None
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        started = settings.get("pid_started")
        if started is None or abs(proc.create_time() - float(started)) > START_SLACK:
            return None
    except psutil.Error:
        return None
    return proc


def worker_alive(settings: dict) -> bool | None:
    """True when the recorded worker (pid + start time) is alive, False when it is gone,
    None when the version records no pid or runs on another host (a Dask job there: this
    host cannot tell)."""
    if not settings.get("pid"):
        return None
    host = settings.get("host")
    if host and host != socket.gethostname():
        return None
    return process_of(settings) is not None


def is_worker_of(proc: psutil.Process, version_id: int) -> bool:
    """Whether ``proc``'s command line is a gpsl training worker of ``version_id``
    (``python -m gpsl.annotation.worker --version ID``, or a spare handed that version:
    ``--spare``, whose identity rests on the pid and start time the caller checked)."""
    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return False
    if "gpsl.annotation.worker" not in cmd:
        return False
    if "--spare" in cmd:  # started ahead (gpsl.annotation.training.spares): the version came on its
        return True       # standard input; its pid and start time were recorded for it
    return "--version" in cmd and \
        cmd[cmd.index("--version") + 1:cmd.index("--version") + 2] == [str(int(version_id))]
