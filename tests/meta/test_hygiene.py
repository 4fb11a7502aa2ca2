"""The suite's hygiene: no test writes into the checkout, time limits follow the machine's
load, the benchmark peers run from the lean install, and `make run` reuses `make test`'s."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support import checkout as _checkout
from tests.support import limits as _limits

ROOT = Path(__file__).resolve().parents[2]


def test_a_snapshot_lists_created_modified_and_deleted_files_but_not_tool_caches(tmp_path):
    (tmp_path / "kept.txt").write_text("a")
    (tmp_path / "changed.txt").write_text("a")
    (tmp_path / "gone.txt").write_text("a")
    before = _checkout.snapshot(tmp_path)
    assert set(before) == {"kept.txt", "changed.txt", "gone.txt"}
    (tmp_path / "changed.txt").write_text("ab")
    (tmp_path / "gone.txt").unlink()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "gpsl.sqlite3").write_bytes(b"x")
    for cache in ("__pycache__", ".pytest_cache", ".venv", "gpsl.egg-info"):
        (tmp_path / cache).mkdir()
        (tmp_path / cache / "f").write_text("x")
    assert _checkout.changes(before, _checkout.snapshot(tmp_path)) == [
        "modified changed.txt", "created data/gpsl.sqlite3", "deleted gone.txt"]


def _mini_suite(tmp_path: Path, tests: str) -> subprocess.CompletedProcess:
    """Run ``tests`` as a test module of a checkout made of this suite's conftest (its
    hygiene checks) in ``tmp_path``."""
    (tmp_path / "tests" / "support").mkdir(parents=True)
    for name in ("__init__.py", "conftest.py", "support/__init__.py",
                 "support/checkout.py", "support/limits.py"):
        shutil.copy(ROOT / "tests" / name, tmp_path / "tests" / name)
    (tmp_path / "tests" / "test_mini.py").write_text(textwrap.dedent(tests))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=_limits.limit(120),
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def test_a_run_that_writes_into_the_checkout_fails_with_the_list(tmp_path):
    out = _mini_suite(tmp_path, """
        from pathlib import Path

        def test_writes():
            (Path(__file__).parents[1] / "oops.txt").write_text("x")

        def test_clean(tmp_path):
            (tmp_path / "fine.txt").write_text("x")
    """)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "2 passed" in out.stdout
    assert "the run wrote into the checkout" in out.stdout and "created oops.txt" in out.stdout


def test_a_process_spawned_after_an_apptest_does_not_rerun_the_app(tmp_path):
    """The cause of the stray ``data/gpsl.sqlite3``: AppTest leaves the app script as
    ``sys.modules["__main__"]``, and multiprocessing's spawn (Dask's worker processes) runs
    ``__main__``'s file again in the child.  The suite puts ``__main__`` back after every
    test, so the child never runs the script (which here would write into the checkout)."""
    (tmp_path / "fake_app.py").write_text(
        "from pathlib import Path\n"
        "(Path(__file__).parent / 'data').mkdir(exist_ok=True)\n"
        "(Path(__file__).parent / 'data' / 'gpsl.sqlite3').write_text('x')\n")
    out = _mini_suite(tmp_path, """
        import multiprocessing
        import os
        import sys
        import types
        from pathlib import Path

        def test_a_script_becomes_main():  # what an AppTest run does
            module = types.ModuleType("__main__")
            module.__file__ = str(Path(__file__).parents[1] / "fake_app.py")
            sys.modules["__main__"] = module

        def test_a_spawned_process():
            p = multiprocessing.get_context("spawn").Process(target=os.getpid)
            p.start()
            p.join(60)
            assert p.exitcode == 0
    """)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed" in out.stdout
    assert not (tmp_path / "data").exists()


def test_time_limits_grow_with_the_load_and_never_shrink():
    """Three busy loops on this process's core leave it a quarter of a core: the workload's
    wall time is then several times its CPU time, and the factor follows."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this platform")
    mine = os.sched_getaffinity(0)
    cpu = min(mine)
    busy = [subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu}}})"
                              "\nwhile True: pass"]) for _ in range(3)]
    try:
        os.sched_setaffinity(0, {cpu})
        time.sleep(0.5)
        wall, cpu_seconds = _limits.sample()
        f = _limits.factor(max_age=0)
    finally:
        os.sched_setaffinity(0, mine)
        for p in busy:
            p.kill()
            p.wait()
    assert wall >= 2 * cpu_seconds  # about 4x
    # at least twice what this machine's own speed alone would give
    assert f >= min(_limits.MAX_FACTOR, 2 * cpu_seconds / _limits.REFERENCE_SECONDS)
    assert f >= 1 and _limits.factor() == f  # cached for MAX_AGE seconds
    assert _limits.limit(2.0) == pytest.approx(2.0 * f)
    assert _limits.ms(1.5) == round(1500 * f)


def test_timeout_markers_are_scaled(request):
    """conftest.py put the ini timeout (900 s), times the factor, on this test."""
    marker = request.node.get_closest_marker("timeout")
    assert marker is not None and marker.args[0] >= 900


def test_crowd_kit_aggregators_run_without_transformers():
    """crowd-kit is installed without its declared dependencies (requirements-bench.txt):
    the aggregators bench.crowd compares with import and run on what is pinned, and nothing
    imports transformers or torch."""
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import pandas as pd
        from crowdkit.aggregation import GLAD, MACE, DawidSkene, MajorityVote
        rng = np.random.default_rng(0)
        truth = rng.integers(0, 3, 200)
        rows = [(t, w, truth[t] if rng.random() < 0.8 else rng.integers(0, 3))
                for t in range(200) for w in range(4)]
        df = pd.DataFrame(rows, columns=["task", "worker", "label"])
        for agg in (MajorityVote(), DawidSkene(n_iter=20), GLAD(n_iter=20, silent=True),
                    MACE(n_iter=20, random_state=0)):
            P = agg.fit(df).probas_
            assert np.allclose(P.sum(axis=1), 1)
            assert (P.idxmax(axis=1).sort_index().to_numpy() == truth).mean() > 0.9
        import sklearn_crfsuite  # the CRFsuite peer
        print(sorted(m for m in ("transformers", "torch") if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=_limits.limit(120))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_make_run_after_make_test_installs_nothing(tmp_path):
    """The dev install implies the runtime one (``make run`` after ``make test`` used to
    install everything again); a changed requirements file still reinstalls."""
    if shutil.which("make") is None:
        pytest.skip("make is missing")
    for name in ("Makefile", "requirements.txt", "requirements-dev.txt",
                 "requirements-bench.txt", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    fake = tmp_path / ".venv" / "bin" / "python"  # records what make would run
    fake.write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path / 'calls.log'}\n")
    fake.chmod(0o755)

    def make(*args):
        return subprocess.run(["make", *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=_limits.limit(60))

    assert make("install-dev").returncode == 0
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls == ["-m pip install -r requirements-dev.txt",
                     "-m pip install --no-deps -r requirements-bench.txt",
                     "-m pip install --no-deps -e ."]
    assert make("-q", "install").returncode == 0  # `make run`'s install is up to date
    assert make("install").returncode == 0
    assert (tmp_path / "calls.log").read_text().splitlines() == calls  # nothing ran
    later = time.time() + 10
    os.utime(tmp_path / "requirements.txt", (later, later))
    assert make("-q", "install").returncode == 1  # a changed requirement: install again
