"""Crash trials: SIGKILL a training worker or a label writer mid-run, then reopen the store.

:func:`run_crash_trials` runs two kinds of trials on small synthetic projects.

**Training worker** (``kind="training"``).  A project with an active model (trained once
in-process) starts the real background worker (start_training`, a
separate ``python -m gpsl.annotation.worker`` process) and kills it with ``SIGKILL`` after a random
delay drawn over the worker's whole run (start-up, fitting, saving, predicting, finishing);
one trial in four instead stops the worker at a fixed point right after the model was
written to its staging directory (``start_training(pause_at="after-staging")``) and kills it
there.  Then a new :class:`~gpsl.annotation.Store` is opened on the file, as a restarted app
does, and the trial is *intact* when

* ``PRAGMA integrity_check`` is ``ok`` (no foreign key violations);
* the killed version is ``failed`` after recover` (which calls
  :meth:`~gpsl.annotation.Store.mark_stale_running_failed`), or it had finished before the kill
  (``done``);
* the active model is the previous one (or the killed version when it had finished), its
  directory loads with :meth:`gpsl.model.GPSL.load` and its predictions cover every
  sentence;
* no version that is not ``done`` has a model path, and after recover`
  (run by the app when it starts) no staging, temporary or orphaned model directory is
  left;
* the store takes a new label and a new training run afterwards.

**Label writer** (``kind="labels"``).  A process sets labels in a loop and reports each
write only after :meth:`~gpsl.annotation.Store.set_label` returned (one ``O_APPEND`` line per
write); it is killed at a random moment.  The trial is intact when every reported write is
in the history with its label, every token's label is that of its newest history row, and
the integrity check passes.  ``lost_labels`` counts reported writes that are missing.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import random
import signal
import time
import traceback
from pathlib import Path

from bench.robustness.concurrency import _final_state, _history_rows, integrity_check
from gpsl.annotation import Store
from gpsl.annotation.training import jobs, pipeline
from gpsl.synthetic import UNIGRAM_TEMPLATE, hide_labels, make_chain_task

CONFIG = pipeline.TrainConfig(offsets=(-1, 1), max_iter=12, learn_hyper=False)


# ----------------------------------------------------------------------------- training


def _training_project(path: Path, seed: int) -> tuple[Store, int]:
    X, y = make_chain_task(48, n_labels=3, seed=seed, min_len=5, max_len=10)
    store = Store(path)
    labels = sorted({lab for seq in y for lab in seq})
    pid = store.create_project("crash", labels, template=UNIGRAM_TEMPLATE)
    y_partial = hide_labels(y[:38], 0.4, seed=seed)
    y_partial[-12:] = [[None] * len(s) for s in y[26:38]]  # some unlabeled sentences
    store.add_sentences(pid, [{"tokens": x, "labels": lab} for x, lab in zip(X[:38],
                                                                           y_partial)])
    store.add_sentences(pid, [{"tokens": x} for x in X[38:]], split="heldout", gold=y[38:])
    return store, pid


def _leftovers(root: Path, pid: int, store: Store) -> list[str]:
    """Staging or temporary directories under the project's model folder, and model
    directories of versions that are not done."""
    base = root / str(pid)
    out = []
    if not base.is_dir():
        return out
    for p in base.iterdir():
        if not p.is_dir():
            continue
        if p.name.startswith("."):
            out.append(p.name)
            continue
        with contextlib.suppress(ValueError):
            v = store.get_model_version(int(p.name))
            if v is None or v["status"] != "done":
                out.append(p.name)
    return out


def _check_after_kill(path: Path, root: Path, pid: int, vid: int, before: dict) -> dict:
    """Reopen the store like a restarted app and check it (see the module docstring)."""
    from gpsl.model import GPSL

    problems: list[str] = []
    integrity = integrity_check(path)
    if integrity != "ok":
        problems.append(f"integrity_check: {integrity}")
    store = Store(path)  # a fresh Store, as after an app restart
    try:
        before_cleanup = _leftovers(root, pid, store)
        jobs.recover(store.home, root)  # what the app does on start: dead workers failed,
        killed = store.get_model_version(vid)
        outcome = killed["status"]
        if outcome not in ("failed", "done"):
            problems.append(f"killed version is {outcome!r} after recovery")
        active = store.active_model(pid)
        expected = vid if outcome == "done" else before["id"]
        if active is None or active["id"] != expected:
            problems.append(f"active model is {active and active['id']}, expected {expected}")
        if active is not None:
            try:
                model = GPSL.load(active["path"])
                if list(model.classes_) != list(active["classes"]):
                    problems.append("active model classes differ from the store's")
            except Exception as exc:
                problems.append(f"active model does not load: {exc}")
            n_pred = len(store.get_predictions(active["id"]))
            if n_pred != store.sentence_count(pid):
                problems.append(f"active model has predictions for {n_pred} sentences")
        for v in store.list_model_versions(pid):
            if v["status"] != "done" and v["path"] is not None:
                problems.append(f"version {v['id']} is {v['status']} but has a path")
            if v["status"] == "done" and not (Path(v["path"]) / "model.json").is_file():
                problems.append(f"version {v['id']} is done but its directory is incomplete")
        left = _leftovers(root, pid, store)  # their leftovers removed
        if left:
            problems.append(f"left after cleanup: {left}")
        # the store is usable: a new label reads back
        sid = store.sentence_ids(pid, "train")[-1]
        lab = store.get_project(pid)["labels"][vid % 3]
        store.set_label(sid, 0, lab, "after-crash")
        if store.get_sentence(sid)["labels"][0] != lab:
            problems.append("a label written after the crash did not read back")
    finally:
        store.close()
    return {"outcome": outcome, "problems": problems, "leftovers_before_cleanup":
            before_cleanup, "integrity_check": integrity}


def _wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def _kill(vid: int) -> bool:
    """SIGKILL the worker of ``vid`` started by this process; True when it was alive."""
    proc = (jobs._WORKERS.get(vid) or (None,))[0]
    if proc is None:
        return False
    alive = proc.poll() is None
    if alive:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    jobs.reap_workers()
    return alive


def run_training_crash_trials(n_trials: int, workdir, seed: int = 0) -> dict:
    """``n_trials`` killed training workers on one project (see the module docstring)."""
    rng = random.Random(seed)
    workdir = Path(workdir)
    path = workdir / "train-crash.sqlite3"
    root = workdir / "models"
    store, pid = _training_project(path, seed)
    first = jobs.train_now(store.home, pid, CONFIG, root)
    if first["status"] != "done":
        raise RuntimeError(f"the first training run failed: {first['error']}")
    # one uninterrupted worker run measures how long a run takes
    t0 = time.monotonic()
    vid = jobs.start_training(store.home, pid, CONFIG, root)
    _wait(lambda: store.get_model_version(vid)["status"] != "running", 300)
    run_seconds = time.monotonic() - t0
    jobs.reap_workers()
    trials, phases = [], {}
    for k in range(n_trials):
        before = store.active_model(pid)
        paused = k % 4 == 3
        vid = jobs.start_training(store.home, pid, CONFIG, root,
                                  pause_at="after-staging" if paused else None)
        started = time.monotonic()
        if paused:
            _wait(lambda v=vid: (pipeline.read_progress(root, pid, v) or {}).get("phase")
                  == "paused", 300)
            delay = time.monotonic() - started
        else:
            delay = rng.uniform(0.05, 1.1 * run_seconds)
            time.sleep(delay)
        phase = (pipeline.read_progress(root, pid, vid) or {}).get("phase", "starting")
        alive = _kill(vid)
        phase = phase if alive else "finished"
        phases[phase] = phases.get(phase, 0) + 1
        try:
            check = _check_after_kill(path, root, pid, vid, before)
        except Exception:
            check = {"outcome": "error", "problems": [traceback.format_exc()[-600:]],
                     "integrity_check": "unknown", "traceback": True}
        trials.append({"trial": k, "version": vid, "kill_after_s": round(delay, 2),
                       "phase_at_kill": phase, "worker_alive_at_kill": alive,
                       "paused_after_staging": paused, **check})
    store.close()
    return {
        "trials": len(trials),
        "intact": sum(not t["problems"] for t in trials),
        "corrupted": sum(t["integrity_check"] != "ok" for t in trials),
        "tracebacks": sum(bool(t.get("traceback")) for t in trials),
        "previous_model_kept": sum(t["outcome"] == "failed" and not t["problems"]
                                   for t in trials),
        "finished_before_kill": sum(t["outcome"] == "done" for t in trials),
        "phases_at_kill": phases,
        "worker_run_seconds": round(run_seconds, 2),
        "failures": [t for t in trials if t["problems"]][:5],
        "details": trials,
    }


# ----------------------------------------------------------------------------- labels


def _label_writer(db: str, report: str, seed: int) -> None:
    """Set labels in a loop; after each call returns, append ``sid t label hid`` to
    ``report`` (one write(2) per line on an O_APPEND file, so a line is whole or absent)."""
    rng = random.Random(seed)
    store = Store(db)
    pid = store.list_projects()[0]["id"]
    labels = store.get_project(pid)["labels"]
    ids = store.sentence_ids(pid, "train")
    current: dict[tuple[int, int], str | None] = {}  # so that every write is a change
    sizes = {}
    for sid in ids:
        sentence = store.get_sentence(sid)
        sizes[sid] = len(sentence["tokens"])
        current.update({(sid, t): lab for t, lab in enumerate(sentence["labels"])})
    fd = os.open(report, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, b"ready\n")
    while True:
        sid = rng.choice(ids)
        if rng.random() < 0.2:  # a batch: several tokens in one transaction
            toks = rng.sample(range(sizes[sid]), min(3, sizes[sid]))
            changes = {t: rng.choice([x for x in labels if x != current.get((sid, t))])
                       for t in toks}
            hids = store.set_labels(sid, changes, "writer")
            lines = "".join(f"{sid} {t} {lab} {h}\n" for (t, lab), h in zip(changes.items(),
                                                                               hids))
            current.update({(sid, t): lab for t, lab in changes.items()})
        else:
            t = rng.randrange(sizes[sid])
            lab = rng.choice([x for x in labels if x != current.get((sid, t))])
            h = store.set_label(sid, t, lab, "writer")
            lines = f"{sid} {t} {lab} {h}\n"
            current[(sid, t)] = lab
        os.write(fd, lines.encode())


def run_label_crash_trials(n_trials: int, workdir, seed: int = 0, new_store=None) -> dict:
    """``n_trials`` label writers killed at random moments (see the module docstring).
    ``new_store(k)`` gives the target of trial ``k``'s new store (default: a SQLite file in
    ``workdir``; a PostgreSQL URL for that back end)."""
    rng = random.Random(seed + 1)
    workdir = Path(workdir)
    ctx = mp.get_context("spawn")
    trials = []
    for k in range(n_trials):
        path = new_store(k) if new_store is not None else \
            workdir / f"labels-crash-{k}.sqlite3"
        X, _ = make_chain_task(30, n_labels=3, seed=seed + k)
        store = Store(path)
        pid = store.create_project("labels", ["L0", "L1", "L2", "O"])
        store.add_sentences(pid, [{"tokens": x} for x in X])
        store.close()
        report = workdir / f"labels-crash-{k}.log"
        proc = ctx.Process(target=_label_writer, args=(str(path), str(report), seed + k),
                           daemon=True)
        proc.start()
        _wait(lambda r=report: r.exists() and r.read_bytes().startswith(b"ready"), 120)
        delay = rng.uniform(0.05, 1.0)
        time.sleep(delay)
        proc.kill()  # SIGKILL
        proc.join(60)
        problems: list[str] = []
        reported = []
        for line in report.read_text().splitlines()[1:]:
            sid, t, lab, hid = line.split()
            reported.append((int(sid), int(t), lab, int(hid)))
        integrity = integrity_check(path)
        if integrity != "ok":
            problems.append(f"integrity_check: {integrity}")
        Store(path).close()  # reopen as a restarted app does (recovers the WAL)
        hist = _history_rows(path)
        votes, _derived, counts = _final_state(path)
        lost = sum(hist.get(h) is None or hist[h][:3] != (s, t, lab)
                   for s, t, lab, h in reported)
        newest: dict = {}  # (sentence, token, annotator) -> newest history row
        for h, row in hist.items():
            key = (row[0], row[1], row[3])
            if key not in newest or h > newest[key][0]:
                newest[key] = (h, row[2])
        mismatch = sum(votes.get(key) != lab for key, (_h, lab) in newest.items()
                       if key[2] != "import")
        mismatch += sum(n != m for n, m in counts.values())
        if lost:
            problems.append(f"{lost} reported writes are missing")
        if mismatch:
            problems.append(f"{mismatch} tokens or counts disagree with the history")
        unreported = len(hist) - len(reported)  # committed but killed before reporting
        trials.append({"trial": k, "kill_after_s": round(delay, 2),
                       "writes_reported": len(reported), "lost_labels": lost,
                       "committed_unreported": unreported, "integrity_check": integrity,
                       "problems": problems, "exit_signal": -proc.exitcode
                       if proc.exitcode and proc.exitcode < 0 else proc.exitcode})
    return {
        "trials": len(trials),
        "intact": sum(not t["problems"] for t in trials),
        "corrupted": sum(t["integrity_check"] != "ok" for t in trials),
        "tracebacks": 0,
        "writes_reported": sum(t["writes_reported"] for t in trials),
        "lost_labels": sum(t["lost_labels"] for t in trials),
        "failures": [t for t in trials if t["problems"]][:5],
        "details": trials,
    }


def run_crash_trials(n_trials: int, seed: int = 0, workdir=None,
                     label_trials: int | None = None) -> dict:
    """``n_trials`` killed training workers and ``label_trials`` (default ``n_trials``)
    killed label writers; returns ``{"trials", "intact", "corrupted", "lost_labels",
    "training": {...}, "labels": {...}}``."""
    import tempfile

    label_trials = n_trials if label_trials is None else label_trials
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="gpsl-crash-"))
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        train = run_training_crash_trials(n_trials, workdir, seed)
        labels = run_label_crash_trials(label_trials, workdir, seed)
    return {
        "trials": train["trials"] + labels["trials"],
        "intact": train["intact"] + labels["intact"],
        "corrupted": train["corrupted"] + labels["corrupted"],
        "lost_labels": labels["lost_labels"],
        "tracebacks": train["tracebacks"] + labels["tracebacks"],
        "training": train,
        "labels": labels,
    }


if __name__ == "__main__":  # pragma: no cover - manual runs
    import json
    import sys

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    out = run_crash_trials(n)
    for part in ("training", "labels"):
        out[part].pop("details")
    print(json.dumps(out, indent=1))
