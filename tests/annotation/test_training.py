"""Training jobs (gpsl.annotation.training.jobs / pipeline): background process, busy check, kills."""  # noqa: E501

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from gpsl.annotation import Store
from gpsl.annotation.training import jobs, pipeline
from gpsl.errors import InputError
from gpsl.model import GPSL
from tests.support.helpers import BL, BP, IP, OUT, tiny_store, wait_until
from tests.support.limits import limit

TINY = pipeline.TrainConfig(offsets=(-1, 1), max_iter=3, learn_hyper=False)



def kill_worker(vid: int) -> None:
    """SIGKILL a worker this test started (by its Popen) and reap it."""
    proc = (jobs._WORKERS.get(vid) or (None,))[0]
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=limit(30))


@pytest.mark.timeout(180)
def test_worker_runs_in_a_subprocess_end_to_end(tmp_path):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    vid = jobs.start_training(store.home, pid, TINY)
    first = store.get_model_version(vid)
    assert first["settings"]["pid"] != os.getpid()  # a separate process
    assert first["status"] in ("running", "done")
    wait_until(lambda: store.get_model_version(vid)["status"] != "running")

    version = store.get_model_version(vid)
    assert version["status"] == "done", version["error"]
    assert version["active"]
    root = store.own_root(tmp_path / "models")
    assert Path(version["path"]) == pipeline.model_dir(root, pid, vid)
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
    progress = pipeline.read_progress(root, pid, vid)
    assert progress["phase"] == "done" and progress["iteration"] == 3
    # the prediction phase reported its progress per chunk, up to every sentence
    assert progress["total"] == len(all_ids) and progress["done"] == len(all_ids)
    assert progress["inference"] == "auto" and version["metrics"]["inference"] in ("full", "sparse")
    assert jobs.running_version(store.home, pid) is None


def test_train_now_records_errors(tmp_path):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    store.update_project(pid, template="this is not a template")
    version = jobs.train_now(store.home, pid, TINY, raise_errors=False)
    assert version["status"] == "failed"
    assert "\n" not in version["error"] and "template" in version["error"]
    assert store.active_model(pid) is None
    with pytest.raises(InputError):
        jobs.train_now(store.home, pid, TINY)


def test_start_refuses_a_project_without_labels(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    pid = store.create_project("empty", [BP, OUT])
    store.add_sentences(pid, [{"tokens": ["a", "b"]}])
    with pytest.raises(InputError, match="no labeled tokens"):
        jobs.start_training(store.home, pid, TINY)
    assert store.list_model_versions(pid) == []


@pytest.mark.timeout(240)
def test_second_start_refused_and_sigkill_keeps_previous_model(tmp_path, monkeypatch):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    root = store.own_root(tmp_path / "models")
    first = jobs.train_now(store.home, pid, TINY)
    assert first["status"] == "done" and store.active_model(pid)["id"] == first["id"]

    # the worker stops after saving the model into its staging dir, before the rename
    vid = jobs.start_training(store.home, pid, TINY, pause_at="after-staging")
    try:
        wait_until(lambda: (pipeline.read_progress(root, pid, vid) or {}).get("phase")
                   == "paused")
        staging = root / str(pid) / f".staging-{vid}"
        assert (staging / "model.json").is_file()  # a complete but not yet renamed model
        assert store.get_model_version(vid)["status"] == "running"
        with pytest.raises(jobs.TrainingBusyError):
            jobs.start_training(store.home, pid, TINY)
        with pytest.raises(jobs.TrainingBusyError):
            jobs.train_now(store.home, pid, TINY)
    finally:
        kill_worker(vid)

    assert store.mark_stale_running_failed(pid) == [vid]
    killed = store.get_model_version(vid)
    assert killed["status"] in ("failed", "killed") and killed["path"] is None
    assert not killed["active"]
    assert store.active_model(pid)["id"] == first["id"]
    assert not pipeline.model_dir(root, pid, vid).exists()
    assert store.get_predictions(vid) == {}
    with pytest.raises(InputError):  # a failed version can never become active
        store.set_active_model(pid, vid)
    assert jobs.cleanup_staging(store.home, pid, root) == [staging]
    assert jobs.running_version(store.home, pid) is None


@pytest.mark.timeout(180)
def test_stop_training_marks_killed_and_ends_the_worker(tmp_path, monkeypatch):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    root = store.own_root(tmp_path / "models")
    vid = jobs.start_training(store.home, pid, TINY, pause_at="after-staging")
    try:
        wait_until(lambda: (pipeline.read_progress(root, pid, vid) or {}).get("phase")
                   == "paused")
        assert jobs.stop_training(store.home, vid)
        proc = (jobs._WORKERS.get(vid) or (None,))[0]
        if proc is not None:
            assert proc.wait(timeout=limit(30)) == -signal.SIGTERM
    finally:
        kill_worker(vid)
    version = store.get_model_version(vid)
    assert version["status"] == "killed" and version["error"] == "stopped by the user"
    assert store.active_model(pid) is None
    assert not jobs.stop_training(store.home, vid)  # not running any more


def test_recover_cleans_what_killed_workers_leave(tmp_path):
    """An app start (``recover``) fails versions whose worker is gone and removes their
    staging, temporary and orphaned model directories; done and running ones stay."""
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    root = store.own_root(tmp_path / "models")
    done = jobs.train_now(store.home, pid, TINY, root)
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

    out = jobs.recover(store.home, root)
    assert out["failed"] == [dead]
    assert sorted(out["removed"]) == sorted(leftovers)
    assert all(not p.exists() for p in leftovers) and all(p.exists() for p in kept)
    assert store.get_model_version(dead)["status"] == "failed"
    assert store.get_model_version(alive)["status"] == "running"
    assert store.active_model(pid)["id"] == done["id"]
    assert GPSL.load(done["path"]).classes_ == done["classes"]


def test_trains_on_every_labeled_sentence_and_counts_a_label_made_before_the_run(tmp_path):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    before = store.progress(pid, "train")["labeled_tokens"]
    unlabeled = store.sentence_ids(pid, "train")[3]  # "Bob Smith went to Paris ."
    store.set_label(unlabeled, 4, "B-LOC", "alice")  # the only label of that sentence
    version = jobs.train_now(store.home, pid, TINY)
    assert version["status"] == "done", version["error"]
    assert version["n_labeled_tokens"] == before + 1
    assert version["metrics"]["train_labeled_tokens"] == before + 1
    with_labels = [s for s in store.get_sentences(pid, "train")
                   if any(lab is not None for lab in s["labels"])]
    assert version["metrics"]["train_sentences"] == len(with_labels) == 4
    # the missing labels of those sentences and the weight of their factors (EM-lambda)
    missing = sum(lab is None for s in with_labels for lab in s["labels"])
    assert version["metrics"]["train_missing_labels"] == missing > 0
    assert version["metrics"]["missing_weight"] == min(1.0, (before + 1) / missing)
    # the optional cap still works: the most labeled sentences first
    capped = jobs.train_now(store.home, pid, pipeline.TrainConfig(max_iter=2, max_sentences=2))
    assert capped["metrics"]["train_sentences"] == 2


def test_train_config_offers_the_inference_modes():
    assert pipeline.TrainConfig().inference == "auto"
    assert pipeline.TrainConfig(inference="full").to_settings()["inference"] == "full"
    with pytest.raises(InputError, match="inference"):
        pipeline.TrainConfig(inference="magic")
    assert pipeline.TrainConfig().max_sentences is None  # no cap by default


def test_eta_from_the_progress_callback():
    """Issue 30: the fit's ETA is the stop rule's sweeps left times the measured sweep
    (gpsl.progress.fit_eta), never the sweeps up to the cap."""
    from gpsl.progress import fit_eta

    row = {"phase": "fitting", "bounds": [-1000.0, -500.0], "seconds": [2.0, 4.0],
           "iteration": 2, "max_iter": 10, "tol": 1e-3}
    eta = pipeline.eta_seconds(row)
    assert eta == pytest.approx(fit_eta([-1000.0, -500.0], [2.0, 4.0], tol=1e-3, max_iter=10))
    assert 0 < eta < 16.0  # (max_iter - 2) x 2 s was the old, cap-bound figure
    # converged by the stop rule: nothing left, whatever the cap
    assert pipeline.eta_seconds({**row, "bounds": [-1000.0, -999.9]}) == 0.0
    # a looser tol stops sooner
    assert pipeline.eta_seconds({**row, "tol": 0.1}) < eta
    assert pipeline.eta_seconds({"phase": "fitting", "seconds": []}) is None
    assert pipeline.eta_seconds({"phase": "calibrating"}) is None
    t0 = time.time() - 6
    assert pipeline.eta_seconds({"phase": "calibrating", "step": 2, "steps": 6,
                                 "step_started": t0}) == pytest.approx(12.0, abs=1.0)
    t0 = time.time() - 10
    eta = pipeline.eta_seconds({"phase": "predicting", "done": 50, "total": 100,
                                "phase_started": t0})
    assert eta == pytest.approx(10.0, abs=1.0)


def test_a_reused_pid_is_not_taken_for_a_live_worker_and_is_never_signalled(tmp_path):
    import subprocess
    import sys

    store, pid = tiny_store(tmp_path / "s.sqlite3")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = jobs.process_started(other.pid)
        # a version whose worker had this pid before: its start time differs
        vid = store.start_model_version(pid, TINY.to_settings(), pid=other.pid)
        store.set_model_worker(vid, other.pid, started - 100.0)
        assert jobs.worker_alive(store.get_model_version(vid)["settings"]) is False
        assert jobs.stop_training(store.home, vid)  # marks it killed ...
        time.sleep(0.3)
        assert other.poll() is None  # ... and never signals the other process
        # the same pid with the right start time but not a gpsl worker of this version
        vid2 = store.start_model_version(pid, TINY.to_settings(), pid=other.pid)
        store.set_model_worker(vid2, other.pid, started)
        assert jobs.worker_alive(store.get_model_version(vid2)["settings"]) is True
        assert jobs.stop_training(store.home, vid2)
        time.sleep(0.3)
        assert other.poll() is None
        # a running version whose pid was reused is marked failed, with a reason
        vid3 = store.start_model_version(pid, TINY.to_settings(), pid=other.pid)
        store.set_model_worker(vid3, other.pid, started - 100.0)
        assert jobs.running_version(store.home, pid) is None
        v3 = store.get_model_version(vid3)
        assert v3["status"] == "failed" and f"worker process {other.pid} is gone" in v3["error"]
    finally:
        other.kill()
        other.wait()


@pytest.mark.timeout(180)
def test_a_dying_worker_records_why(tmp_path, monkeypatch):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    root = store.own_root(tmp_path / "models")
    vid = jobs.start_training(store.home, pid, TINY, pause_at="after-staging")
    try:
        wait_until(lambda: (pipeline.read_progress(root, pid, vid) or {}).get("phase")
                   == "paused")
    finally:
        kill_worker(vid)
    jobs.reap_workers()
    v = store.get_model_version(vid)
    assert v["status"] == "failed" and "killed by SIGKILL" in v["error"]


def test_a_damaged_model_is_never_offered_for_download(tmp_path):
    from gpsl.annotation.interchange import exports
    from gpsl.errors import ModelFormatError

    store, pid = tiny_store(tmp_path / "s.sqlite3")
    version = jobs.train_now(store.home, pid, TINY)
    blob = exports.model_zip(version["path"])
    assert blob[:2] == b"PK"
    arrays = Path(version["path"]) / "arrays.npz"
    arrays.write_bytes(arrays.read_bytes()[: arrays.stat().st_size // 2])  # truncated
    with pytest.raises(ModelFormatError, match="arrays"):
        exports.check_model(version["path"])
    with pytest.raises(ModelFormatError):
        exports.model_zip(version["path"])


def test_the_parent_records_why_a_worker_could_not(tmp_path):
    """A worker whose failure could not be written (the disk full) exits with the errno;
    the app process that started it records the reason."""
    import errno
    import subprocess
    import sys

    store, pid = tiny_store(tmp_path / "s.sqlite3")
    proc = subprocess.Popen([sys.executable, "-c", f"import sys; sys.exit({errno.ENOSPC})"])
    vid = store.start_model_version(pid, TINY.to_settings(), pid=proc.pid)
    jobs._WORKERS[vid] = (proc, store)
    proc.wait()
    jobs.reap_workers()
    v = store.get_model_version(vid)
    assert v["status"] == "failed" and "out of disk space" in v["error"]


def test_a_model_folder_left_by_a_deleted_store_is_kept_aside_not_a_failure(tmp_path):
    """Deleting the database file but keeping models/ (starting over) used to fail the next
    run with 'Directory not empty': the old folder is moved aside, and kept."""
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    root = store.own_root(tmp_path / "models")
    old = root / str(pid) / "1"
    old.mkdir(parents=True)
    (old / "model.json").write_text("{}")
    version = jobs.train_now(store.home, pid, TINY, root)
    assert version["status"] == "done" and version["id"] == 1
    assert GPSL.load(version["path"]).classes_ == version["classes"]
    aside = list((root / str(pid)).glob(".orphan-1-*"))
    assert len(aside) == 1 and (aside[0] / "model.json").read_text() == "{}"


def test_the_sample_project_is_calibrated_on_its_held_out_gold(tmp_path):
    """Issue 14's acceptance on the sample: held-out mean confidence within 0.02 of held-out
    accuracy after a default run; the held-out figures are never in-sample."""
    from gpsl.annotation.training.pipeline import calibrate

    store = Store(tmp_path / "s.sqlite3")
    pid = store.ensure_sample_project(Path(__file__).resolve().parents[2] / "sample_data")
    version = jobs.train_now(store.home, pid, pipeline.TrainConfig(), tmp_path / "models")
    m = version["metrics"]
    assert m["calibration"]["source"] == "held-out gold"
    assert abs(m["heldout_mean_confidence"] - m["heldout_accuracy"]) <= 0.02
    model = GPSL.load(version["path"])
    assert model.calibrator_.temperature == m["calibration"]["temperature"]
    assert m["calibration"]["summary"] == model.calibrator_.describe()
    assert m["calibration"]["kind"] == model.calibrator_.kind
    ids, X, gold = store.gold_data(pid)
    stored = store.get_predictions(version["id"], ids[:5])
    in_sample = model.predict_marginals(X[:5])
    # held-out sentences carry the other half's calibration, not the in-sample one
    assert any(not np.allclose(stored[i], p) for i, p in zip(ids[:5], in_sample))
    # training sentences carry the saved model's calibrated marginals (labels clamped)
    tids, tX, ty = store.training_data(pid, "train", with_ids=True)
    stored = store.get_predictions(version["id"], tids[:5])
    for i, p in zip(tids[:5], model.predict_marginals(tX[:5], y=ty[:5])):
        assert np.allclose(stored[i], p, atol=1e-6)
    # without enough held-out gold the labeled sentences' folds are used
    store2, pid2 = tiny_store(tmp_path / "t.sqlite3", extra=[
        {"tokens": f"Name{k} Surname{k} went to City{k} .".split(),
         "labels": [BP, IP, OUT, OUT, BL, OUT]} for k in range(10)])
    _, X2, y2 = store2.training_data(pid2, "train", only_labeled=True, with_ids=True)
    small = GPSL(max_iter=3).fit(X2, y2)
    info, held = calibrate(small, store2.db, pid2, X2, y2)
    assert info["calibration"]["source"] == "5-fold labels" and held == {}  # 13 sentences
    store3, pid3 = tiny_store(tmp_path / "u.sqlite3")
    _, X3, y3 = store3.training_data(pid3, "train", only_labeled=True, with_ids=True)
    info, held = calibrate(GPSL(max_iter=3).fit(X3, y3), store3.db, pid3, X3, y3)
    assert info == {"calibration": None} and held == {}


def test_the_run_stores_the_query_scores_of_its_saved_model(tmp_path, monkeypatch):
    """Issue 17: the queue's per-token scores are ``gpsl.active.score_tokens`` of the saved
    model (strategy ``DEFAULT_QUERY``, seeded by the version id), labeled tokens score 0, a
    sentence's queue score is its unlabeled tokens' largest, and a new label drops its
    token's score from it; every name of ``QUERY_SCORES`` works in the pipeline."""
    from gpsl import active

    store, pid = tiny_store(tmp_path / "s.sqlite3")
    version = jobs.train_now(store.home, pid, TINY)
    assert version["status"] == "done", version["error"]
    assert version["query_strategy"] == active.DEFAULT_QUERY == store.queue_strategy(pid)
    ids, X, y = store.training_data(pid, split=None, with_ids=True)
    assert sum(map(len, X)) <= pipeline.PREDICT_CHUNK_TOKENS  # one chunk, as recomputed here
    stored = store.get_query_scores(version["id"])
    # query scores for the sentences the queue offers (training), none for held-out ones
    held_ids = store.sentence_ids(pid, split="heldout")
    assert held_ids and set(store.get_predictions(version["id"])) == set(ids)
    ids, X, y = store.training_data(pid, split="train", with_ids=True)
    assert set(stored) == set(ids)
    model = GPSL.load(version["path"])
    P = store.get_predictions(version["id"], ids)
    clamp = np.concatenate(model.gold_index(y))
    expected = active.score_tokens(model.calibration_scores(X), version["query_strategy"],
                                   clamp, seed=version["id"],
                                   marginals=np.concatenate([P[i] for i in ids]))
    expected = np.split(expected, np.cumsum([len(s) for s in X])[:-1])
    for sid, e in zip(ids, expected, strict=True):
        assert stored[sid].dtype == np.float32
        np.testing.assert_allclose(stored[sid], e, rtol=1e-4, atol=1e-5)
    got = np.concatenate([stored[i] for i in ids])
    assert np.all(got[clamp >= 0] == 0) and got.max() > 0 and np.isfinite(got).all()
    # the queue: each sentence by its unlabeled tokens' largest score
    ranked = store.ranked_queue(pid, 10)
    for r in ranked:
        free = [t for t, lab in enumerate(y[ids.index(r["sentence_id"])]) if lab is None]
        assert r["score"] == pytest.approx(float(stored[r["sentence_id"]][free].max()))
        assert r["strategy"] == version["query_strategy"]
    top = ranked[0]["sentence_id"]
    t = int(np.argmax(stored[top]))
    store.set_label(top, t, OUT, "alice")
    rest = np.delete(stored[top], [t] + [k for k, lab in enumerate(y[ids.index(top)]) if lab])
    now = {r["sentence_id"]: r["score"] for r in store.ranked_queue(pid, 10)}
    assert now[top] == pytest.approx(float(rest.max())) and now[top] < ranked[0]["score"]
    # every query score the library offers runs on the pipeline's inputs
    marg = [P[i] for i in ids]
    for name in active.QUERY_SCORES:
        scores = pipeline.query_scores(model, X, y, marg, name, seed=1)
        assert [s.shape for s in scores] == [(len(s),) for s in X], name
        flat = np.concatenate(scores)
        assert np.isfinite(flat).all() and flat.min() >= 0 and flat.max() > 0, name
        assert np.all(flat[clamp >= 0] == 0), name
    # the strategy is the run's config value (TrainConfig.query), recorded on the version
    assert TINY.query == active.DEFAULT_QUERY
    second = jobs.train_now(store.home, pid, dataclasses.replace(TINY, query="entropy"))
    assert second["query_strategy"] == "entropy" == store.queue_strategy(pid)
    ids, X, y = store.training_data(pid, split="train", with_ids=True)
    P2 = store.get_predictions(second["id"], ids)
    Q2 = store.get_query_scores(second["id"], ids)
    clamp = np.concatenate(GPSL.load(second["path"]).gold_index(y))
    for k, sid in enumerate(ids):
        known = clamp[sum(map(len, X[:k])): sum(map(len, X[:k + 1]))] >= 0
        # the scores come from the marginals before they were packed to 16-bit levels (each
        # within 1/65535): the entropy moves by at most J (1 + ln 65535) / 65535 = 7.4e-4
        np.testing.assert_allclose(Q2[sid], np.where(known, 0.0, active.entropy(P2[sid])),
                                   rtol=0, atol=7.4e-4)


def test_the_eta_never_rises_while_a_step_runs():
    """Issue 36: the ETA is read again and again while one step runs (a fold fit, a sweep,
    a prediction chunk); it must count down, never up. Fed a sequence of progress records
    of steps of uneven length (the last fold three times the others, as a fold with more
    labels), at a simulated clock, the estimate never rises between two records, and at
    each record it is the mean finished step times the steps left."""
    t0 = 1000.0
    ends = [t0 + 4.0, t0 + 8.0, t0 + 20.0]  # three folds: 4 s, 4 s, then 12 s
    rec = {"phase": "calibrating", "step": 0, "steps": 4, "step_started": t0,
           "phase_started": t0, "updated": t0}
    for k, end in enumerate(ends, start=1):
        begun = rec.get("step_at", t0)
        seen = [pipeline.eta_seconds(rec, now=t) for t in np.arange(begun, end, 0.5)]
        if k > 1:  # nothing measured before the first step ends
            assert all(b <= a + 1e-9 for a, b in zip(seen, seen[1:])), seen
            assert seen[-1] >= 0.0
        rec = {**rec, "step": k, "step_at": end, "updated": end}
        per = (end - t0) / k
        assert pipeline.eta_seconds(rec, now=end) == pytest.approx(per * (4 - k))
    # the case: 2 of 3 folds in 16 s ("about 8 s left"); 15 s later the old rule
    # (elapsed / finished x left) said about 15.5 s; now the late fold has nothing left
    rec = {"phase": "calibrating", "step": 2, "steps": 3, "step_started": t0,
           "step_at": t0 + 16.0}
    assert pipeline.eta_seconds(rec, now=t0 + 16.0) == pytest.approx(8.0)
    assert pipeline.eta_seconds(rec, now=t0 + 31.0) == 0.0
    # the fit: sweeps of 2 s, the stop rule wants more; counts down within a sweep
    fit = {"phase": "fitting", "bounds": [-1000.0, -500.0], "seconds": [2.0, 4.0],
           "max_iter": 10, "tol": 1e-3, "sweep_at": t0}
    seen = [pipeline.eta_seconds(fit, now=t0 + s) for s in np.arange(0.0, 6.0, 0.25)]
    assert all(b <= a + 1e-9 for a, b in zip(seen, seen[1:])) and seen[0] > seen[-1] > 0
    # the prediction: 50 of 100 sentences in 10 s; counts down to zero, never below
    pred = {"phase": "predicting", "done": 50, "total": 100, "phase_started": t0,
            "step_at": t0 + 10.0}
    seen = [pipeline.eta_seconds(pred, now=t0 + 10.0 + s) for s in range(15)]
    assert seen[0] == pytest.approx(10.0) and seen[-1] == 0.0
    assert all(b <= a for a, b in zip(seen, seen[1:]))
