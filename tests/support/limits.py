"""Wall-clock limits of the tests, scaled by how fast this machine runs *now*.

A fixed limit in seconds holds on an idle machine and fails on a loaded one (the machines
this project runs on are shared: two cores, other jobs beside the suite).  So every limit a
test sets on elapsed time (a ``pytest.mark.timeout``, a polling deadline, a Playwright or
AppTest timeout, an upper bound on how long something took) is written as its value on an
idle machine and passed through :func:`limit` (seconds) or :func:`ms` (milliseconds):

    limit(s) = s * factor(),   factor = max(1, wall time of WORKLOAD / REFERENCE_SECONDS,
                                            1-minute load average / cores)

``WORKLOAD`` is a fixed small piece of CPU work (a Python loop and numpy element-wise
arithmetic, about 12 ms of CPU on the reference machine); its wall time, the median of
five runs, grows with a slower core and with the share of a core other processes take.  The
load average covers load that comes and goes between two samples.  The factor is measured
again when it is older than ``MAX_AGE`` seconds, so a limit follows the load during a long
run.  It never goes below 1 (a fast machine keeps the written limits) and is capped at
``MAX_FACTOR``.

``conftest.py`` applies it to every ``pytest.mark.timeout`` (and the ini ``timeout``) at the
start of each test and prints the factor in the report header.
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

#: the workload's wall time on an idle core of the 2-core development machine (its CPU time
#: there, minimum over runs, rounded up)
REFERENCE_SECONDS = 0.012
#: a measurement older than this (seconds) is taken again
MAX_AGE = 30.0
#: the largest factor applied (a machine 20 times slower than the reference is broken)
MAX_FACTOR = 20.0

_CACHE: dict = {"at": -1e9, "factor": 1.0, "wall": 0.0, "load": 0.0}


def workload() -> int:
    """A fixed piece of CPU work: a pure-Python loop and numpy element-wise arithmetic."""
    total = 0
    for i in range(200_000):
        total += i * i % 7
    a = np.arange(100_000, dtype=float)
    for _ in range(20):
        a = np.sqrt(a * a + 1.0)
    return total + int(a[-1] > 0)


def sample(runs: int = 5) -> tuple[float, float]:
    """The median wall time and the median CPU time (seconds) of ``runs`` runs of the
    workload."""
    walls, cpus = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        workload()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus)


def load_per_core() -> float:
    """The 1-minute load average divided by the number of cores (0 where unknown)."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # pragma: no cover - platforms without a load average
        return 0.0


def factor(max_age: float = MAX_AGE) -> float:
    """How many times longer than on the idle reference machine things take now (>= 1)."""
    now = time.monotonic()
    if now - _CACHE["at"] > max_age:
        wall, _ = sample()
        load = load_per_core()
        _CACHE.update(at=now, wall=wall, load=load,
                      factor=min(MAX_FACTOR, max(1.0, wall / REFERENCE_SECONDS, load)))
    return _CACHE["factor"]


def describe() -> str:
    """One line for the report header: the factor and what it was measured from."""
    f = factor()
    return (f"time limits x{f:.2f} (workload {1000 * _CACHE['wall']:.0f} ms against "
            f"{1000 * REFERENCE_SECONDS:.0f} ms idle; load {_CACHE['load']:.2f} per core)")


def limit(seconds: float) -> float:
    """A limit of ``seconds`` on an idle machine, scaled to this machine now."""
    return seconds * factor()


def ms(seconds: float) -> int:
    """:func:`limit` in whole milliseconds (Playwright's timeouts)."""
    return int(round(1000 * limit(seconds)))
