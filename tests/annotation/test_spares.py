"""The spare training worker (:mod:`gpsl.annotation.training.spares`): started ahead of the click,
it runs the next version exactly as a freshly started worker does; a dead spare is never handed
a version; closing the store ends it; Stop reaches a version run by a spare."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from gpsl.annotation.training import jobs, pipeline, runs, spares
from tests.support.helpers import tiny_store, wait_until
from tests.support.limits import limit


def _done(store, vid):
    v = wait_until(lambda: (lambda v: v if v["status"] != "running" else None)(
        store.get_model_version(vid)), 180, what=f"version {vid} to end")
    return v


def _spare_pid():
    proc = spares._SPARE.get("proc")
    return None if proc is None or proc.poll() is not None else proc.pid


@pytest.fixture(name="project")
def _project(tmp_path):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    yield store, pid, store.own_root(tmp_path / "models")
    store.close()


def test_the_next_click_runs_on_the_spare_and_gets_the_same_result(project):
    store, pid, root = project
    config = pipeline.TrainConfig(max_iter=3)
    first = jobs.start_training(store, pid, config, root)
    spare = _spare_pid()
    assert spare is not None, "a spare is started after a click"
    # ``nice`` sets the priority, then execs Python: until the exec the command line is
    # nice's (or, mid-exec, empty), so wait for the spare's own
    wait_until(lambda: "--spare" in psutil.Process(spare).cmdline(), 30,
               what="the spare's command line")
    # at a worker's priority from its start
    wait_until(lambda: psutil.Process(spare).nice() >= 5, 30, what="the spare's priority")
    v1 = _done(store, first)
    assert v1["status"] == "done", v1["error"]
    second = jobs.start_training(store, pid, config, root)
    assert store.get_model_version(second)["settings"]["pid"] == spare  # the spare took it
    proc = psutil.Process(spare)
    v2 = _done(store, second)
    assert v2["status"] == "done", v2["error"]
    assert _spare_pid() not in (None, spare)  # and another waits for the next click
    # the spare's run is the worker's run: its output in the version's log, the same model
    proc.wait(timeout=limit(60))  # it prints its last line after the status
    log = pipeline.log_file(root, pid, second).read_text()
    assert f"version {second}: done" in log
    assert v2["metrics"]["train_labeled_tokens"] == v1["metrics"]["train_labeled_tokens"]
    assert v2["metrics"]["heldout_accuracy"] == pytest.approx(
        v1["metrics"]["heldout_accuracy"], abs=0.2)


def test_a_dead_spare_is_never_handed_a_version(project):
    store, pid, root = project
    config = pipeline.TrainConfig(max_iter=3)
    _done(store, jobs.start_training(store, pid, config, root))
    spare = _spare_pid()
    psutil.Process(spare).kill()
    wait_until(lambda: spares._SPARE["proc"].poll() is not None, 30, what="the spare to die")
    vid = jobs.start_training(store, pid, config, root)
    assert store.get_model_version(vid)["settings"]["pid"] != spare
    assert _done(store, vid)["status"] == "done"


def test_stop_reaches_a_run_on_a_spare(project):
    store, pid, root = project
    config = pipeline.TrainConfig(max_iter=3)
    _done(store, jobs.start_training(store, pid, config, root))
    spare = _spare_pid()
    vid = jobs.start_training(store, pid, config, root, pause_at="after-staging")
    assert store.get_model_version(vid)["settings"]["pid"] == spare
    wait_until(lambda: (runs.read_progress(root, pid, vid) or {}).get("phase") == "paused",
               120, what="the run to pause")
    proc = psutil.Process(spare)
    assert jobs.stop_training(store, vid)
    proc.wait(timeout=limit(30))  # ended (Stop may already have reaped it)
    assert store.get_model_version(vid)["status"] == "killed"


def test_closing_the_store_ends_its_spare(tmp_path):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    _done(store, jobs.start_training(store, pid, pipeline.TrainConfig(max_iter=3),
                                     tmp_path / "models"))
    spare = psutil.Process(_spare_pid())
    store.close()
    spare.wait(timeout=limit(30))
    assert not spares._SPARE


def test_a_spare_without_a_version_exits_quietly(tmp_path):
    env = {**os.environ, "GPSL_DB": str(tmp_path / "none.sqlite3")}
    proc = subprocess.run(spares.command(), input=b"", env=env, capture_output=True,
                          timeout=limit(120))
    assert proc.returncode == 0 and proc.stdout == b"" and proc.stderr == b""
    assert sys.executable in spares.command()
