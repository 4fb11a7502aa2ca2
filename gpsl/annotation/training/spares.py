"""A spare training worker: a worker process started ahead of the click, its imports done.

A worker's start-up (the interpreter, numpy, scipy, SQLAlchemy and gpsl imported) cost 0.7 s
of a 20k-token refit's 5 s on a quiet machine (``python -m bench.app_refit``): the user waited
for it on every click. So after every start (and when the Train page opens,
:func:`ensure`) one spare is started for the store::

    python -m gpsl.annotation.worker --spare

It imports everything and blocks on its standard input. A click hands it the version as one
JSON line (:func:`hand_over`); it then sends its output to the version's log and runs the
version's pipeline exactly as a freshly started worker does (:func:`gpsl.annotation.worker.
run`). A spare that has died, or belongs to another store, is never handed a version: the
click starts a worker as before (:func:`take` returns None).

At most one spare lives per app process. It is started with the worker's environment
(``GPSL_DB`` names its store, one BLAS thread) in its own session; it ends when it is
dropped (:func:`drop`: the store is closed, another store's spare replaces it, the app
process exits) and, with its standard input closed, when the process that started it dies.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import shutil
import subprocess
import sys
import threading

_LOCK = threading.Lock()
_SPARE: dict = {}  # "key" -> the store's worker environment key, "proc" -> the Popen


def _key(env: dict) -> tuple:
    return (env.get("GPSL_DB"), env.get("PYTHONPATH"), sys.executable)


def command() -> list[str]:
    """The spare's command: at nice 5 from its first import on (``nice`` execs Python, so
    the process's command line is the worker's), as a worker sets itself."""
    nice = shutil.which("nice")
    return ([nice, "-n", "5"] if nice else []) + [sys.executable, "-m", "gpsl.annotation.worker",
                                                  "--spare"]


def ensure(env: dict) -> None:
    """Start a spare for the store of ``env`` (the worker's environment) unless one lives."""
    key = _key(env)
    with _LOCK:
        proc = _SPARE.get("proc")
        if proc is not None and proc.poll() is None and _SPARE.get("key") == key:
            return
        _stop(proc)
        try:
            proc = subprocess.Popen(command(), stdin=subprocess.PIPE,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    env=env, start_new_session=True, close_fds=True)
        except OSError:
            _SPARE.clear()  # no spare: the next click starts its worker itself
            return
        _SPARE.update(key=key, proc=proc)


def take(env: dict) -> subprocess.Popen | None:
    """The live spare of the store of ``env``, removed from the slot (None if there is none)."""
    with _LOCK:
        proc = _SPARE.get("proc")
        if proc is None or _SPARE.get("key") != _key(env):
            return None
        _SPARE.clear()
        if proc.poll() is not None:
            return None
        return proc


def hand_over(proc: subprocess.Popen, version_id: int, models_root, log, *,
              pause_at: str | None = None) -> bool:
    """Give ``proc`` (from :func:`take`) its version; False if it could not take it (it died
    meanwhile: it is reaped, and the caller starts a worker itself)."""
    job = {"version": int(version_id), "models_root": str(models_root), "log": str(log),
           "pause_at": pause_at}
    try:
        proc.stdin.write((json.dumps(job) + "\n").encode())
        proc.stdin.close()
    except (OSError, ValueError):
        _stop(proc)
        return False
    return True


def drop(target: str | None = None) -> None:
    """End the spare (only the one of the store ``target``, if given)."""
    with _LOCK:
        if target is not None and (_SPARE.get("key") or (None,))[0] != target:
            return
        _stop(_SPARE.get("proc"))
        _SPARE.clear()


def _stop(proc) -> None:
    if proc is None:
        return
    with contextlib.suppress(OSError, ValueError):
        proc.stdin.close()  # an idle spare ends by itself at end of input
    with contextlib.suppress(OSError):
        proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired, OSError):
        proc.wait(timeout=5)


atexit.register(drop)
