"""Issue 30, the app's refit: "keep training" (a run starts by itself after every N new
labels, from the back end's label writes, never a second one while one runs), on SQLite and
PostgreSQL; the refit's warm start and calibration reuse; the progress records the worker
writes and the facade's typed records the Train page reads."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import numpy as np
import pytest

from gpsl.annotation import InputError, KeepTraining, Store, TrainingProgress
from gpsl.annotation.training import jobs, pipeline
from gpsl.annotation.training import runs as runs_mod
from gpsl.model import GPSL
from tests.support.helpers import BL, BP, IP, OUT, tiny_store, wait_until
from tests.support.limits import limit

TINY = pipeline.TrainConfig(offsets=(-1, 1), max_iter=3, learn_hyper=False)
NAMES = [f"Name{k} Surname{k} went to City{k} .".split() for k in range(12)]
GOLD = [BP, IP, OUT, OUT, BL, OUT]


def _project(store) -> tuple[int, list[int]]:
    pid = store.create_project("keep", [BP, IP, BL, OUT])
    store.add_sentences(pid, [{"tokens": t} for t in NAMES])
    return pid, store.sentence_ids(pid, split="train")


def _versions(store, pid):
    return store.list_model_versions(pid)


def _settle(store, pid) -> None:
    """Wait for every run of the project to end (no worker left behind)."""
    wait_until(lambda: all(v["status"] != "running" for v in _versions(store, pid)),
               timeout=180)


def _kill(vid: int) -> None:
    proc = (jobs._WORKERS.get(vid) or (None,))[0]
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=limit(30))
    jobs.reap_workers()


@pytest.mark.timeout(400)
def test_n_new_labels_start_exactly_one_run_and_fewer_do_not(store_target, tmp_path):
    store = Store(store_target, models_root=tmp_path / "models")
    try:
        pid, ids = _project(store)
        keep = store.set_keep_training(pid, True, 5)
        assert keep == {"on": True, "every": 5, "new_labels": 0, "error": None}
        # four labels by two annotators: no run
        store.set_labels(ids[0], {0: BP, 1: IP}, "alice")
        store.set_labels(ids[1], {0: BP}, "bob")
        store.set_label(ids[1], 1, IP, "bob")
        assert _versions(store, pid) == []
        assert store.keep_training(pid)["new_labels"] == 4
        # a cleared label is not a new one
        store.clear_label(ids[1], 1, "bob")
        store.set_label(ids[1], 1, IP, "bob")  # ... setting it again is (4 + 1 = 5)
        first = _versions(store, pid)
        assert len(first) == 1 and first[0]["settings"]["started_by"] == "keep training"
        assert first[0]["settings"]["history_mark"] > 0
        # fewer than N more: still one run (whether it ended or not)
        for t in range(4):
            store.set_label(ids[2], t, GOLD[t], "alice")
        assert len(_versions(store, pid)) == 1
        _settle(store, pid)
        assert len(_versions(store, pid)) == 1
        assert _versions(store, pid)[0]["status"] == "done", _versions(store, pid)[0]["error"]
        # a run started by a click (paused in its fit) blocks keep training too
        vid = jobs.start_training(store.home, pid, TINY, pause_at="in-fit")
        assert store.get_model_version(vid)["settings"]["started_by"] == "click"
        try:
            before = len(_versions(store, pid))
            for k in range(5):
                store.set_label(ids[4 + k], 0, BP, "bob")
            assert len(_versions(store, pid)) == before
            assert store.keep_training(pid)["new_labels"] == 5
        finally:
            _kill(vid)
        assert store.get_model_version(vid)["status"] == "failed"
        # the click's run counted from its start: one more label makes N since it began
        store.set_label(ids[9], 0, BP, "bob")
        after = _versions(store, pid)
        assert len(after) == before + 1 and after[-1]["settings"]["started_by"] == "keep training"
        _settle(store, pid)
        # off: no run, however many labels
        store.set_keep_training(pid, False)
        for k in range(6):
            store.set_label(ids[k], 5, OUT, "carol")
        assert len(_versions(store, pid)) == before + 1
    finally:
        for v in _versions(store, pid):
            if v["status"] == "running":
                _kill(v["id"])
        store.close()


@pytest.mark.timeout(300)
def test_annotators_writing_at_once_start_one_run(store_target, tmp_path):
    store = Store(store_target, models_root=tmp_path / "models")
    try:
        pid, ids = _project(store)
        store.set_keep_training(pid, True, 5)
        errors = []

        def annotate(name, rows):
            try:
                writer = Store(store_target, models_root=tmp_path / "models")
                for sid in rows:
                    writer.set_labels(sid, {0: BP, 1: IP, 4: BL}, name)
                writer.close()
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=annotate, args=(n, ids[k::3][:3]))
                   for k, n in enumerate(("alice", "bob", "carol"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(limit(120))
        assert not errors, errors
        # 27 labels, several writers past N at once: exactly one run while it runs
        started = _versions(store, pid)
        assert len(started) == 1, started
        _settle(store, pid)
    finally:
        store.close()


def test_keep_training_settings_are_checked(tmp_path):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    assert store.keep_training(pid) == {"on": False, "every": jobs.KEEP_EVERY.default,
                                        "new_labels": 0, "error": None}  # imports: not new
    for bad in (0, 4, 100_001, "ten", 5.5):
        with pytest.raises(InputError, match="keep_training_every|must be"):
            store.set_keep_training(pid, True, bad)
    with pytest.raises(InputError):
        store.set_keep_training(pid, "yes", 10)
    assert store.keep_training(pid)["on"] is False
    rec = store.reports.keep_training(pid)
    assert isinstance(rec, KeepTraining) and not rec.on and rec.every_min == 5
    assert rec.label == jobs.KEEP_EVERY.label
    # the lead's setting: an annotator may not change it (the access table)
    from gpsl.annotation import AccessDenied

    store.create_account("lea", "lead", password="correct horse battery")
    store.create_account("ann", "annotator", password="correct horse battery")
    who = store.verify_password("ann", "correct horse battery")
    with pytest.raises(AccessDenied):
        store.acting(who).set_keep_training(pid, True, 5)


def test_a_refit_starts_warm_and_keeps_the_calibration_between_selections(tmp_path,
                                                                           monkeypatch):
    """Folds (no held-out gold): the first run selects the calibrator on 5 folds and reports
    each fold fit (fold i of K, then the selection); the refit after a few labels starts
    from the first version's state and reuses its calibrator; once the labeled tokens grew
    by a quarter the calibrator is selected again."""
    from gpsl.annotation.training import refit

    store, pid = tiny_store(tmp_path / "s.sqlite3", extra=[
        {"tokens": t, "labels": GOLD if k < 8 else None} for k, t in enumerate(NAMES)])
    steps = []
    real = runs_mod.Progress.step

    def record(self, done, total, what=""):
        steps.append((self.data["phase"], done, total, what))
        real(self, done, total, what)

    monkeypatch.setattr(runs_mod.Progress, "step", record)
    first = jobs.train_now(store.home, pid, TINY)
    cal = first["metrics"]["calibration"]
    assert cal["source"] == "5-fold labels" and cal["how"] == "selected"
    assert first["metrics"]["warm_start"] is None
    assert [s[1:] for s in steps] == [(0, 6, "fold"), *[(k, 6, "fold") for k in range(1, 6)],
                                      (5, 6, "selection"), (6, 6, "")]
    assert {s[0] for s in steps} == {"calibrating"}
    prog = runs_mod.read_progress(store.models_root, pid, first["id"])
    names = [p["name"] for p in prog["phases"]]
    assert names == ["loading", "fitting", "calibrating", "evaluating", "saving",
                     "predicting", "storing"]
    assert all(p["wall"] >= 0 and p["cpu"] >= 0 for p in prog["phases"])
    assert prog["parts"]["store"]["wall"] > 0 and prog["startup_cpu"] > 0
    # a few more labels: warm, calibrator reused as it was
    ids = store.sentence_ids(pid, split="train")
    store.set_labels(ids[3], {0: BP, 1: IP}, "alice")
    second = jobs.train_now(store.home, pid, TINY)
    m = second["metrics"]
    assert m["warm_start"] == "version 1" and m["inference"] == "sparse"
    assert m["calibration"]["how"] == "reused"
    assert m["calibration"]["selected_at_tokens"] == cal["selected_at_tokens"]
    saved = GPSL.load(second["path"])
    assert saved.calibrator_.to_dict() == GPSL.load(first["path"]).calibrator_.to_dict()
    assert saved.calibration_run_.source == "folds" and saved.calibration_run_.folds == 5
    assert saved.calibration_run_.reason.startswith("reused between selections")
    # the labeled tokens grew by RESELECT_GROWTH: selected again
    grow = int(np.ceil(refit.RESELECT_GROWTH * cal["selected_at_tokens"]))
    k = 0
    for sid in ids[4:]:
        view = store.sentence_view(sid, "alice")["labels"]
        free = {t: GOLD[t] if len(view) == 6 else OUT for t, lab in enumerate(view)
                if lab is None}
        store.set_labels(sid, dict(list(free.items())[:grow - k]), "alice")
        k += min(len(free), grow - k)
        if k >= grow:
            break
    third = jobs.train_now(store.home, pid, TINY)
    assert third["metrics"]["calibration"]["how"] == "selected"
    assert third["metrics"]["warm_start"] == "version 2"


@pytest.mark.timeout(300)
def test_held_out_gold_is_refitted_not_reselected_and_stays_out_of_sample(tmp_path):
    """The sample project (held-out gold): the refit refits the first run's choice on the
    new scores, its held-out marginals are cross-calibrated on the other half (never the
    in-sample calibration), its figures stay close to the full selection's, and its
    stored predictions are the saved model's (predict_chunk = predict_marginals)."""
    store = Store(tmp_path / "s.sqlite3")
    pid = store.ensure_sample_project(Path(__file__).resolve().parents[2] / "sample_data")
    first = jobs.train_now(store.home, pid, pipeline.TrainConfig(), tmp_path / "models")
    assert first["metrics"]["calibration"]["how"] == "selected"
    tids, tX, ty = store.training_data(pid, "train", with_ids=True)
    free = [(sid, t) for sid, lab in zip(tids, ty) for t, v in enumerate(lab) if v is None]
    for sid, t in free[:20]:
        store.set_label(sid, t, "O", "alice")
    second = jobs.train_now(store.home, pid, pipeline.TrainConfig(), tmp_path / "models")
    m1, m2 = first["metrics"], second["metrics"]
    assert m2["warm_start"] == "version 1"
    assert m2["calibration"]["how"] == "refitted"
    run = GPSL.load(second["path"]).calibration_run_
    assert run.source == "held-out" and run.reason.startswith("refitted between selections")
    assert m2["calibration"]["kind"] == m1["calibration"]["kind"]
    assert abs(m2["heldout_accuracy"] - m1["heldout_accuracy"]) <= 0.02
    assert abs(m2["heldout_mean_confidence"] - m2["heldout_accuracy"]) <= 0.03
    model = GPSL.load(second["path"])
    ids, Xg, _ = store.gold_data(pid)
    stored = store.get_predictions(second["id"], ids[:5])
    assert any(not np.allclose(stored[i], p) for i, p in
               zip(ids[:5], model.predict_marginals(Xg[:5])))
    tids, tX, ty = store.training_data(pid, "train", with_ids=True)
    stored = store.get_predictions(second["id"], tids[:8])
    P, Q = pipeline.predict_chunk(model, tX[:8], ty[:8], "bald", seed=second["id"])
    for i, p, e in zip(tids[:8], model.predict_marginals(tX[:8], y=ty[:8]), P):
        np.testing.assert_allclose(stored[i], p, rtol=0, atol=1 / 65535)  # packed: one level
        np.testing.assert_allclose(e, p, atol=1e-12)
    assert [q.shape for q in Q] == [(len(x),) for x in tX[:8]]


def test_the_page_reads_typed_progress_records(tmp_path):
    """The worker's progress file as the Train page reads it through the facade: the fit's
    ETA from the stop rule, the calibration's fold i of K with its ETA, the prediction
    chunks, the phases' seconds."""
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    vid = store.start_model_version(pid, TINY.to_settings())
    try:
        path = runs_mod.progress_file(store.models_root, pid, vid)
        prog = runs_mod.Progress(path, 30, "auto", tol=1e-3)
        version = store.reports.version(vid)
        rec = store.reports.training_progress(version)
        assert isinstance(rec, TrainingProgress) and rec.phase == "loading"
        prog.phase("fitting")
        prog.sweep({"iteration": 1, "bound": -1000.0, "seconds": 1.0})
        prog.sweep({"iteration": 2, "bound": -500.0, "seconds": 2.0})
        rec = store.reports.training_progress(version)
        assert rec.iteration == 2 and rec.max_iter == 30
        assert 0 < rec.eta_seconds < 28.0  # the stop rule's sweeps, not 28 to the cap
        prog.sweep({"iteration": 3, "bound": -499.9, "seconds": 3.0})
        assert store.reports.training_progress(version).eta_seconds == 0.0  # converged
        prog.phase("calibrating")
        prog.step(0, 6, "fold")
        prog.data["step_started"] -= 4.0  # two folds in 4 s
        prog.step(2, 6, "fold")
        rec = store.reports.training_progress(version)
        assert (rec.phase, rec.step, rec.steps, rec.step_name) == ("calibrating", 2, 6, "fold")
        assert rec.eta_seconds == pytest.approx(8.0, abs=1.0)
        prog.phase("predicting", done=0, total=10)
        prog.chunk(5, 10)
        rec = store.reports.training_progress(version)
        assert (rec.done, rec.total, rec.step, rec.steps) == (5, 10, 0, 0)
        assert rec.eta_seconds is not None
        assert [p[0] for p in rec.phases] == ["loading", "fitting", "calibrating"]
        assert all(w >= 0 and c >= 0 for _, w, c in rec.phases)
    finally:
        store.fail_model_version(vid, "test over")


def test_the_train_page_turns_keep_training_on_and_names_the_run(tmp_path, monkeypatch):

    from streamlit.testing.v1 import AppTest

    from tests.support.helpers import ROOT, app_store_env

    db = app_store_env(tmp_path, monkeypatch)
    store, pid = tiny_store(db)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(30)).run()
    at.switch_page("pages/train.py").run()
    assert not at.exception, at.exception
    assert at.toggle(key="train_keep").value is False
    at.number_input(key="train_keep_every").set_value(5).run()
    at.toggle(key="train_keep").set_value(True).run()
    assert not at.exception and not at.error
    assert store.keep_training(pid) == {"on": True, "every": 5, "new_labels": 0, "error": None}
    assert any("0 of 5 new labels since the last run began" in c.value for c in at.caption)
    ids = store.sentence_ids(pid, split="train")
    for t in range(5):
        store.set_label(ids[3], t, OUT, "alice")  # the 5th starts a run, from the back end
    versions = store.list_model_versions(pid)
    assert len(versions) == 1
    wait_until(lambda: store.get_model_version(versions[0]["id"])["status"] != "running",
               timeout=180)
    at.run()
    assert not at.exception
    last = [c.value for c in at.caption if c.value.startswith("started by")]
    assert last and "started by keep training" in last[0] and "s in the worker (load" in last[0]
    assert "calibration" in last[0] and "predictions" in last[0]
