"""The app's training worker (gpsl.training): background process, busy check, kills."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from _support import BP, OUT, tiny_store

from gpsl import training
from gpsl.errors import InputError
from gpsl.model import GPSL
from gpsl.store import Store

TINY = training.TrainConfig(offsets=(-1, 1), max_iter=3, learn_hyper=False)


def wait_until(predicate, timeout: float = 120.0, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"condition not met within {timeout} s")


def kill_worker(vid: int) -> None:
    """SIGKILL a worker this test started (by its Popen) and reap it."""
    proc = training._WORKERS.get(vid)
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.mark.timeout(180)
def test_worker_runs_in_a_subprocess_end_to_end(tmp_path):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    vid = training.start_training(store, pid, TINY)
    first = store.get_model_version(vid)
    assert first["settings"]["pid"] != os.getpid()  # a separate process
    assert first["status"] in ("running", "done")
    wait_until(lambda: store.get_model_version(vid)["status"] != "running")

    version = store.get_model_version(vid)
    assert version["status"] == "done", version["error"]
    assert version["active"]
    root = tmp_path / "models"
    assert Path(version["path"]) == training.model_dir(root, pid, vid)
    model = GPSL.load(version["path"])
    assert model.classes_ == version["classes"]
    all_ids = store.sentence_ids(pid)
    preds = store.get_predictions(vid)
    assert sorted(preds) == sorted(all_ids)  # every sentence, train and held-out
    for sid, arr in preds.items():
        assert arr.shape == (len(store.get_sentence(sid)["tokens"]), len(model.classes_))
    # labeled tokens are clamped: confidence 1 on the fully labeled first sentence
    assert preds[all_ids[0]].max(axis=1).min() > 0.99
    assert version["metrics"]["heldout_tokens"] == 5
    assert 0.0 <= version["metrics"]["heldout_accuracy"] <= 1.0
    assert len(version["bound_trace"]) >= 3
    rounds = store.list_query_rounds(pid)
    assert rounds and rounds[-1]["model_version_id"] == vid
    progress = training.read_progress(root, pid, vid)
    assert progress["phase"] == "done" and progress["iteration"] == 3
    assert training.running_version(store, pid) is None


def test_train_now_records_errors(tmp_path):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    store.update_project(pid, template="this is not a template")
    version = training.train_now(store, pid, TINY, raise_errors=False)
    assert version["status"] == "failed"
    assert "\n" not in version["error"] and "template" in version["error"]
    assert store.active_model(pid) is None
    with pytest.raises(InputError):
        training.train_now(store, pid, TINY)


def test_start_refuses_a_project_without_labels(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    pid = store.create_project("empty", [BP, OUT])
    store.add_sentences(pid, [{"tokens": ["a", "b"]}])
    with pytest.raises(InputError, match="no labeled tokens"):
        training.start_training(store, pid, TINY)
    assert store.list_model_versions(pid) == []


@pytest.mark.timeout(240)
def test_second_start_refused_and_sigkill_keeps_previous_model(tmp_path, monkeypatch):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    root = tmp_path / "models"
    first = training.train_now(store, pid, TINY)
    assert first["status"] == "done" and store.active_model(pid)["id"] == first["id"]

    # the worker stops after saving the model into its staging dir, before the rename
    monkeypatch.setenv(training.TEST_HOOK_ENV, "pause-after-staging")
    vid = training.start_training(store, pid, TINY)
    try:
        wait_until(lambda: (training.read_progress(root, pid, vid) or {}).get("phase")
                   == "paused")
        staging = root / str(pid) / f".staging-{vid}"
        assert (staging / "model.json").is_file()  # a complete but not yet renamed model
        assert store.get_model_version(vid)["status"] == "running"
        with pytest.raises(training.TrainingBusyError):
            training.start_training(store, pid, TINY)
        with pytest.raises(training.TrainingBusyError):
            training.train_now(store, pid, TINY)
    finally:
        kill_worker(vid)

    assert store.mark_stale_running_failed(pid) == [vid]
    killed = store.get_model_version(vid)
    assert killed["status"] in ("failed", "killed") and killed["path"] is None
    assert not killed["active"]
    assert store.active_model(pid)["id"] == first["id"]
    assert not training.model_dir(root, pid, vid).exists()
    assert store.get_predictions(vid) == {}
    with pytest.raises(InputError):  # a failed version can never become active
        store.set_active_model(pid, vid)
    assert training.cleanup_staging(store, pid, root) == [staging]
    assert training.running_version(store, pid) is None


@pytest.mark.timeout(180)
def test_stop_training_marks_killed_and_ends_the_worker(tmp_path, monkeypatch):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    root = tmp_path / "models"
    monkeypatch.setenv(training.TEST_HOOK_ENV, "pause-after-staging")
    vid = training.start_training(store, pid, TINY)
    try:
        wait_until(lambda: (training.read_progress(root, pid, vid) or {}).get("phase")
                   == "paused")
        assert training.stop_training(store, vid)
        proc = training._WORKERS.get(vid)
        if proc is not None:
            assert proc.wait(timeout=30) == -signal.SIGTERM
    finally:
        kill_worker(vid)
    version = store.get_model_version(vid)
    assert version["status"] == "killed" and version["error"] == "stopped by the user"
    assert store.active_model(pid) is None
    assert not training.stop_training(store, vid)  # not running any more


def test_recover_cleans_what_killed_workers_leave(tmp_path):
    """An app start (``recover``) fails versions whose worker is gone and removes their
    staging, temporary and orphaned model directories; done and running ones stay."""
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    root = tmp_path / "models"
    done = training.train_now(store, pid, TINY, root)
    dead = store.start_model_version(pid, TINY.to_settings(), pid=2 ** 22 + 12345)
    alive = store.start_model_version(pid, TINY.to_settings())  # this process: alive
    base = root / str(pid)
    leftovers = [base / f".staging-{dead}", base / f"..staging-{dead}.tmp-abc",
                 base / str(dead)]
    kept = [base / f".staging-{alive}", base / "notes"]
    for p in leftovers + kept:
        p.mkdir(parents=True, exist_ok=True)
        (p / "model.json").write_text("{}")
    kept.append(Path(done["path"]))

    out = training.recover(store, root)
    assert out["failed"] == [dead]
    assert sorted(out["removed"]) == sorted(leftovers)
    assert all(not p.exists() for p in leftovers) and all(p.exists() for p in kept)
    assert store.get_model_version(dead)["status"] == "failed"
    assert store.get_model_version(alive)["status"] == "running"
    assert store.active_model(pid)["id"] == done["id"]
    assert GPSL.load(done["path"]).classes_ == done["classes"]
