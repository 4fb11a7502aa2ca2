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
import resource
import tempfile
import time
from pathlib import Path

from gpsl.progress import fit_eta, remaining_sweeps


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


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that ended (the calibration's fold
    fits run in child processes), user and system."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _left(per: float, since: float, after: float) -> float:
    """Seconds left of a step of measured mean length ``per`` that began ``since`` seconds
    ago, plus ``after`` seconds of the work behind it: the step in progress counts down from
    the mean at one second a second and stops at zero (it is late, not longer), so the
    estimate never rises between two records."""
    return max(per - max(since, 0.0), 0.0) + max(after, 0.0)


def eta_seconds(progress: dict | None, now: float | None = None) -> float | None:
    """Seconds left in the current phase by the progress so far, at time ``now`` (default:
    the clock).

    Each phase is a run of steps: the fit's sweeps, the calibration's steps (``step`` of
    ``steps``: the fold fits, the selection), the prediction's chunks (``done`` of ``total``
    sentences). A finished step's cost is measured; the step in progress is taken to cost
    the mean of the finished ones and counts down from the last record (``step_at``,
    ``sweep_at``: when the last step ended) at one second a second, to zero when it runs
    late (:func:`_left`). So between two records the estimate only falls; the elapsed time
    of a running step is never divided by the steps finished before it (which made "about
    16 s left" become "about 31 s left" while the last fold ran).

    * fitting: :func:`gpsl.progress.fit_eta`, the sweeps the stop rule still needs (from
      the bounds so far and the run's ``tol``) at the measured cost of a sweep, never the
      sweeps up to the cap ``max_iter``;
    * calibrating: the mean step so far for the step in progress and each step after it;
    * predicting: the mean seconds a sentence so far for the sentences left, less the time
      since the last chunk was recorded.

    None when nothing has been measured yet in the phase."""
    if not progress:
        return None
    now = time.time() if now is None else float(now)
    phase = progress.get("phase")
    if phase == "fitting":
        bounds, secs = progress.get("bounds") or [], progress.get("seconds") or []
        if not secs or len(secs) != len(bounds):
            return None
        tol = progress.get("tol")
        max_iter = int(progress.get("max_iter", len(secs)) or len(secs))
        total = fit_eta(bounds, secs, tol=float(1e-3 if tol is None else tol),
                        max_iter=max_iter)
        left = remaining_sweeps(bounds, tol=float(1e-3 if tol is None else tol),
                                max_iter=max_iter)
        if not left:
            return 0.0
        per = total / left
        return _left(per, now - _last(progress, "sweep_at", now), (left - 1) * per)
    if phase in ("calibrating", "predicting"):
        key = ("step", "steps") if phase == "calibrating" else ("done", "total")
        done, total = progress.get(key[0], 0) or 0, progress.get(key[1], 0) or 0
        started = progress.get("step_started") or progress.get("phase_started")
        if not (done and total and started):
            return None
        at = _last(progress, "step_at", now)
        per = max(at - float(started), 0.0) / done
        if phase == "calibrating":
            return _left(per, now - at, (total - done - 1) * per)
        return max(per * (total - done) - max(now - at, 0.0), 0.0)
    return None


def _last(progress: dict, key: str, now: float) -> float:
    """When the phase's last step ended (a record without it: when it was written)."""
    return float(progress.get(key) or progress.get("updated") or now)


class Progress:
    """Atomically rewritten JSON progress file (temp file, then rename).

    Besides the current ``phase`` it keeps ``phases``: one ``{"name", "wall", "cpu"}`` per
    finished phase (seconds; CPU of the worker and its ended children), and ``startup_cpu``:
    the worker's CPU seconds before the run began (interpreter, imports, opening the store;
    a run in the caller's process counts the caller's too)."""

    def __init__(self, path: Path, max_iter: int, inference: str, tol: float | None = None):
        self.path = path
        now = time.time()
        self._wall, self._cpu = time.perf_counter(), cpu_seconds()
        self.data = {"phase": "loading", "iteration": 0, "max_iter": int(max_iter),
                     "tol": None if tol is None else float(tol), "bounds": [], "seconds": [],
                     "inference": inference, "updated": now, "phase_started": now,
                     "started": now, "startup_cpu": self._cpu, "phases": []}
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

    def _close_phase(self) -> None:
        wall, cpu = time.perf_counter(), cpu_seconds()
        self.data["phases"].append({"name": self.data["phase"],
                                    "wall": round(wall - self._wall, 4),
                                    "cpu": round(cpu - self._cpu, 4)})
        self._wall, self._cpu = wall, cpu

    def phase(self, name: str, **extra) -> None:
        """A new phase (the one before is closed into ``phases``); ``extra`` are kept."""
        self._close_phase()
        self.data["phase"] = name
        self.data["phase_started"] = self.data["step_started"] = time.time()
        for key in ("step", "steps", "step_at", "sweep_at"):
            self.data.pop(key, None)
        self.data.update(extra)
        self.write()

    def sweep(self, info: dict) -> None:
        self.data["iteration"] = int(info.get("iteration", 0))
        self.data["bounds"].append(float(info.get("bound", float("nan"))))
        self.data["seconds"].append(float(info.get("seconds", 0.0)))
        self.data["sweep_at"] = time.time()
        self.write()

    def step(self, done: int, total: int, what: str = "") -> None:
        """``done`` of ``total`` steps of the phase are over (the calibration's fold fits);
        ``what`` names them for the page (e.g. "fold")."""
        now = time.time()
        if done == 0:
            self.data["step_started"] = now
        self.data["step_at"] = now
        self.data["step"], self.data["steps"], self.data["step_name"] = int(done), int(total), what
        self.write()

    @contextlib.contextmanager
    def part(self, name: str):
        """Time a part of a phase (e.g. the store's writes inside the prediction phase):
        its wall and CPU seconds are added up in ``parts[name]``."""
        wall, cpu = time.perf_counter(), cpu_seconds()
        try:
            yield
        finally:
            acc = self.data.setdefault("parts", {}).setdefault(name, {"wall": 0.0, "cpu": 0.0})
            acc["wall"] = round(acc["wall"] + time.perf_counter() - wall, 4)
            acc["cpu"] = round(acc["cpu"] + cpu_seconds() - cpu, 4)

    def chunk(self, done: int, total: int) -> None:
        self.data["done"], self.data["total"] = int(done), int(total)
        self.data["step_at"] = time.time()
        self.write()
