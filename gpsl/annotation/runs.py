"""The files of a training run under the models root: the model folder of a version (written
to a staging folder first and renamed into place), its progress file (JSON, rewritten
atomically after every sweep and prediction chunk; the Train page reads it) and its worker's
log.

``<root>/<project>/<version>/`` the saved model, ``.staging-<version>/`` while it is written,
``.progress-<version>.json``, ``.worker-<version>.log``.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from pathlib import Path


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
