"""Concurrent annotators: several processes or threads writing labels to one store (SQLite
file or PostgreSQL database).

:func:`run_concurrency_trial` creates a project in a fresh store, starts ``writers`` real
processes (``multiprocessing``, spawn) or threads that all wait on one barrier and then call
:meth:`gpsl.annotation.Store.set_label` / :meth:`~gpsl.annotation.Store.set_labels` as fast as they
can on the same file.  Every writer records what each call returned (the history ids), so
afterwards the store can be checked write by write:

* **writes attempted**: token writes the writers asked for; **writes found**: those whose
  history row is in the store with the same sentence, token, label and annotator;
  ``lost_writes`` = attempted - found.
* **final votes**: every (token, annotator) vote equals the ``new_label`` of that
  annotator's newest history row for the token, and each writer's exclusive tokens carry
  that writer's last write as their training label; ``n_labeled`` of every sentence equals
  its number of labeled tokens.
* **same-token races**: two annotators released by one barrier set the same token to
  different labels; both writes are in the history and both votes are kept (read right
  after both wrote).
* **errors**: any exception a writer saw (``"database is locked"`` counted separately); the
  store must absorb lock contention itself, so this must be zero.
* ``PRAGMA integrity_check`` of a SQLite file afterwards must be ``"ok"`` (PostgreSQL: no
  vote, label or history row without its sentence).

Each writer owns some tokens (its labels alternate between two labels of its own, so every
write changes the token and leaves exactly one history row) and shares others with every
writer (labels of one writer never equal another's, so a shared write always changes the
token too).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import sqlite3
import threading
import time
import traceback
from pathlib import Path

from gpsl.annotation import Store

TOKENS_PER_SENTENCE = 8
SHARED_SENTENCES = 2  # sentences whose tokens every writer writes to


def _writer_labels(w: int) -> tuple[str, str]:
    return f"W{w}a", f"W{w}b"


def _plan(writers: int, labels_per_writer: int) -> int:
    """Exclusive sentences per writer: about 4 writes per exclusive token."""
    return max(1, labels_per_writer // (4 * TOKENS_PER_SENTENCE))


def _setup(store_path, writers: int, labels_per_writer: int) -> dict:
    store = Store(store_path)
    labels = [lab for w in range(writers) for lab in _writer_labels(w)] + ["O"]
    pid = store.create_project("concurrency", labels)
    per = _plan(writers, labels_per_writer)
    sents = [{"tokens": [f"t{k}_{i}" for i in range(TOKENS_PER_SENTENCE)]}
             for k in range(writers * per + SHARED_SENTENCES + 1)]
    store.add_sentences(pid, sents)
    ids = store.sentence_ids(pid)
    store.close()
    return {"project_id": pid, "labels": labels,
            "exclusive": {w: ids[w * per:(w + 1) * per] for w in range(writers)},
            "shared": ids[writers * per:writers * per + SHARED_SENTENCES],
            "race": ids[-1]}


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]


def _write_loop(store: Store, w: int, n_writes: int, exclusive: list[int], shared: list[int],
                seed: int, barrier, out_path: str | None) -> dict:
    """One annotator: ``n_writes`` token writes (singles, small batches, clears of its own
    tokens, writes to shared tokens).  Returns (and writes to ``out_path``) the log."""
    rng = random.Random(seed * 1000 + w)
    name = f"writer-{w}"
    la, lb = _writer_labels(w)
    mine: dict[tuple[int, int], str | None] = {}  # its exclusive tokens: last label written
    own_shared: dict[tuple[int, int], str] = {}  # its last write to each shared token
    log: list[list] = []  # [sentence, token, label, history id or None]
    errors: list[str] = []
    attempted = 0

    def flip(key):
        return lb if mine.get(key) == la else la

    barrier.wait()
    started = time.perf_counter()
    while attempted < n_writes:
        r = rng.random()
        try:
            if r < 0.2 and shared:  # a token every writer writes to
                sid, t = rng.choice(shared), rng.randrange(TOKENS_PER_SENTENCE)
                lab = lb if own_shared.get((sid, t)) == la else la  # never a no-op
                attempted += 1
                hid = store.set_label(sid, t, lab, name)
                log.append([sid, t, lab, hid])
                own_shared[(sid, t)] = lab
            elif r < 0.3:  # a small batch on one of its own sentences: one transaction
                sid = rng.choice(exclusive)
                k = min(rng.randint(2, 4), n_writes - attempted)
                toks = rng.sample(range(TOKENS_PER_SENTENCE), k)
                changes = {t: flip((sid, t)) for t in toks}
                attempted += len(changes)
                hids = store.set_labels(sid, changes, name)
                if len(hids) != len(changes):
                    errors.append(f"set_labels returned {len(hids)} ids for {len(changes)} "
                                  "changes")
                for (t, lab), hid in zip(changes.items(), hids + [None] * len(changes)):
                    log.append([sid, t, lab, hid])
                    mine[(sid, t)] = lab
            elif r < 0.35 and any(v is not None for v in mine.values()):  # clear its own
                sid, t = rng.choice(sorted(k for k, v in mine.items() if v is not None))
                attempted += 1
                hid = store.set_label(sid, t, None, name)
                log.append([sid, t, None, hid])
                mine[(sid, t)] = None
            else:
                sid, t = rng.choice(exclusive), rng.randrange(TOKENS_PER_SENTENCE)
                lab = flip((sid, t))
                attempted += 1
                hid = store.set_label(sid, t, lab, name)
                log.append([sid, t, lab, hid])
                mine[(sid, t)] = lab
        except Exception as exc:  # recorded, never raised: the trial counts them
            errors.append(_error_text(exc))
    result = {"writer": w, "annotator": name, "attempted": attempted, "log": log,
              "errors": errors, "seconds": time.perf_counter() - started,
              "final_exclusive": [[s, t, lab] for (s, t), lab in mine.items()]}
    if out_path is not None:
        tmp = out_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(result, f)
        os.replace(tmp, out_path)
    return result


def _process_writer(db: str, w: int, n_writes: int, exclusive, shared, seed: int, barrier,
                    out_path: str) -> None:
    try:
        store = Store(db)
        _write_loop(store, w, n_writes, exclusive, shared, seed, barrier, out_path)
    except BaseException:
        with open(out_path + ".crash", "w", encoding="utf-8") as f:
            f.write(traceback.format_exc())
        raise


def _race_writer(db: str, w: int, sid: int, rounds: int, barrier, out_path: str | None,
                 store: Store | None = None) -> dict:
    """One of the two annotators of the same-token race: per round, wait on the barrier,
    then set token ``round % n`` of the race sentence to its own label."""
    store = store or Store(db)
    name = f"racer-{w}"
    log, errors = [], []
    for k in range(rounds):
        t = k % TOKENS_PER_SENTENCE
        lab = _writer_labels(w)[(k // TOKENS_PER_SENTENCE) % 2]  # never its own last label
        barrier.wait()
        try:
            hid = store.set_label(sid, t, lab, name)
        except Exception as exc:
            errors.append(_error_text(exc))
            hid = None
        barrier.wait()  # both wrote; the next round waits for this read
        seen = None
        if w == 0:
            try:
                seen = store.get_sentence(sid)["votes"][t]
            except Exception as exc:
                errors.append(_error_text(exc))
        log.append([k, lab, hid, seen])
    result = {"writer": w, "annotator": name, "log": log, "errors": errors}
    if out_path is not None:
        with open(out_path, "w", encoding="utf-8") as f:
            json.dump(result, f)
    return result


def integrity_check(target) -> str:
    """SQLite: ``PRAGMA integrity_check`` and ``foreign_key_check`` of the file ("ok" when
    sound).  PostgreSQL: "ok" when no vote, derived label or history row lost its sentence."""
    target = str(target)
    if "://" not in target:
        conn = sqlite3.connect(target, timeout=30)
        try:
            rows = conn.execute("PRAGMA integrity_check").fetchall()
            fk = conn.execute("PRAGMA foreign_key_check").fetchall()
        finally:
            conn.close()
        text = "; ".join(str(r[0]) for r in rows)
        return text if not fk else f"{text}; foreign key violations: {len(fk)}"
    store = Store(target)
    try:
        orphans = store.db.read(lambda c: sum(c.exec_driver_sql(
            f"SELECT COUNT(*) FROM {t} x WHERE NOT EXISTS (SELECT 1 FROM sentences s"
            " WHERE s.id = x.sentence_id)").scalar() for t in
            ("votes", "derived_labels", "annotation_history")))
    finally:
        store.close()
    return "ok" if orphans == 0 else f"rows without their sentence: {orphans}"


def _history_rows(target) -> dict[int, tuple]:
    store = Store(target)
    try:
        return store.db.read(lambda c: {r[0]: tuple(r[1:]) for r in c.exec_driver_sql(
            "SELECT id, sentence_id, token_index, new_label, annotator, at, action"
            " FROM annotation_history")})
    finally:
        store.close()


def _final_state(target):
    store = Store(target)
    try:
        def read(c):
            votes = {(s, t, a): lab for s, t, a, lab in c.exec_driver_sql(
                "SELECT sentence_id, token_index, annotator, label FROM votes")}
            derived = {(s, t): lab for s, t, lab in c.exec_driver_sql(
                "SELECT sentence_id, token_index, label FROM derived_labels")}
            counts = {sid: (n, m) for sid, n, m in c.exec_driver_sql(
                "SELECT s.id, s.n_labeled, (SELECT COUNT(*) FROM derived_labels d"
                " WHERE d.sentence_id = s.id) FROM sentences s")}
            return votes, derived, counts
        return store.db.read(read)
    finally:
        store.close()


def _is_locked(text: str) -> bool:
    low = text.lower()
    return "database is locked" in low or "database is busy" in low


def verify(store_path, results: list[dict], race_results: list[dict] | None = None,
           race_sentence: int | None = None) -> dict:
    """Check the store against what the writers recorded (see the module docstring)."""
    hist = _history_rows(store_path)
    votes, ann, counts = _final_state(store_path)
    attempted = sum(r["attempted"] for r in results)
    found, mismatched, missing_ids = 0, 0, 0
    for r in results:
        for sid, t, lab, hid in r["log"]:
            row = hist.get(hid) if hid is not None else None
            if row is None:
                missing_ids += 1
            elif row[0] == sid and row[1] == t and row[2] == lab and row[3] == r["annotator"]:
                found += 1
            else:
                mismatched += 1
    # every annotator's vote on a token is the newest history row of that annotator there
    newest: dict[tuple[int, int, str], tuple[int, str | None]] = {}
    for hid, (sid, t, lab, who, _at, _action) in hist.items():
        key = (sid, t, who)
        if key not in newest or hid > newest[key][0]:
            newest[key] = (hid, lab)
    final_mismatch = sum(votes.get(key) != lab for key, (_hid, lab) in newest.items())
    final_mismatch += sum(key not in newest for key in votes)
    exclusive_mismatch = sum(ann.get((s, t)) != lab for r in results
                             for s, t, lab in r["final_exclusive"])
    count_mismatch = sum(n != m for n, m in counts.values())
    # within a sentence the history order is commit order: timestamps never go backwards
    # along the ids (writers of one sentence are serialised: SQLite's write lock, a row
    # lock on PostgreSQL, where ids of different sentences may interleave)
    order_violations = 0
    last_at: dict[int, str] = {}
    for hid in sorted(hist):
        sid, at = hist[hid][0], hist[hid][4]
        if at < last_at.get(sid, ""):
            order_violations += 1
        last_at[sid] = max(last_at.get(sid, ""), at)
    errors = [e for r in results + list(race_results or []) for e in r["errors"]]
    out = {
        "writes_attempted": attempted,
        "writes_found": found,
        "lost_writes": attempted - found,
        "history_rows_missing": missing_ids,
        "history_rows_mismatched": mismatched,
        "final_label_mismatches": final_mismatch,
        "exclusive_token_mismatches": exclusive_mismatch,
        "n_labeled_mismatches": count_mismatch,
        "history_order_violations": order_violations,
        "errors": len(errors),
        "locked_errors": sum(_is_locked(e) for e in errors),
        "error_examples": sorted(set(errors))[:5],
    }
    if race_results is not None:
        out.update(_verify_race(hist, votes, race_results, race_sentence))
    return out


def _verify_race(hist, votes, race_results, sid) -> dict:
    """Per round both writes must be in the history, and right after both wrote the token
    must carry both annotators' votes (nothing overwritten)."""
    rounds = min(len(r["log"]) for r in race_results) if race_results else 0
    by_round: dict[int, list] = {}
    seen_after: dict[int, dict] = {}  # the token's votes read right after both wrote
    for r in race_results:
        for k, lab, hid, seen in r["log"]:
            by_round.setdefault(k, []).append((hid, lab, r["annotator"]))
            if seen is not None:
                seen_after[k] = seen
    both_kept, votes_kept, checked = 0, 0, 0
    last_round_of_token = {}
    for k in sorted(by_round):
        last_round_of_token[k % TOKENS_PER_SENTENCE] = k
    for k, writes in sorted(by_round.items()):
        if len(writes) != 2:
            continue
        checked += 1
        t = k % TOKENS_PER_SENTENCE
        rows = [hist.get(hid) for hid, _lab, _who in writes]
        if all(row is not None and row[0] == sid and row[1] == t
               and row[2] == lab and row[3] == who
               for row, (_h, lab, who) in zip(rows, writes)):
            both_kept += 1
        expected = {who: lab for _h, lab, who in writes}
        ok_seen = seen_after.get(k) == expected
        ok_final = last_round_of_token[t] != k or all(
            votes.get((sid, t, who)) == lab for who, lab in expected.items())
        votes_kept += bool(ok_seen and ok_final)
    return {"race_rounds": rounds, "race_rounds_checked": checked,
            "race_both_in_history": both_kept, "race_both_votes_kept": votes_kept}


def _run_collect(procs, outs, timeout: float) -> list:
    """Start ``procs``, join them within ``timeout`` seconds in all (killing any still
    running), and return the JSON each wrote to its ``outs`` file (``None`` if it wrote none)."""
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(1.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    got = []
    for path in outs:
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                got.append(json.load(f))
        else:
            got.append(None)
    return got


def run_concurrency_trial(store_path, writers: int = 4, labels_per_writer: int = 500,
                          mode: str = "process", seed: int = 0, race_rounds: int = 20,
                          timeout: float = 600.0, workdir=None) -> dict:
    """Run one trial (see the module docstring) on a new store at ``store_path`` (a new
    SQLite file, or the URL of an empty PostgreSQL database with ``workdir`` for the
    writers' logs) and return the counts: ``writes_attempted``, ``writes_found``, ``lost_writes``,
    ``errors``, ``locked_errors``, ``integrity_check`` and the race figures."""
    if mode not in ("process", "thread"):
        raise ValueError(f"mode must be 'process' or 'thread', got {mode!r}")
    url = "://" in str(store_path)
    if not url:
        store_path = Path(store_path)
        if store_path.exists():
            raise FileExistsError(f"{store_path} exists: a trial needs a new store")
    plan = _setup(store_path, writers, labels_per_writer)
    work = (Path(workdir) if workdir is not None else store_path.parent) / \
        f"{'pg' if url else store_path.stem}-writers"
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    crashed: list[str] = []
    if mode == "process":
        ctx = mp.get_context("spawn")
        barrier = ctx.Barrier(writers)
        outs = [str(work / f"writer-{w}.json") for w in range(writers)]
        procs = [ctx.Process(target=_process_writer, daemon=True,
                             args=(str(store_path), w, labels_per_writer,
                                   plan["exclusive"][w], plan["shared"], seed, barrier,
                                   outs[w])) for w in range(writers)]
        results = []
        for w, got in enumerate(_run_collect(procs, outs, timeout)):
            if got is not None:
                results.append(got)
            else:
                crash = Path(outs[w] + ".crash")
                crashed.append(crash.read_text()[-500:] if crash.exists()
                               else f"writer {w} exited with {procs[w].exitcode}")
                results.append({"writer": w, "annotator": f"writer-{w}",
                                "attempted": labels_per_writer, "log": [], "errors": [],
                                "final_exclusive": []})
        race_barrier = ctx.Barrier(2)
        race_outs = [str(work / f"racer-{w}.json") for w in range(2)]
        racers = [ctx.Process(target=_race_writer, daemon=True,
                              args=(str(store_path), w, plan["race"], race_rounds,
                                    race_barrier, race_outs[w])) for w in range(2)]
        race_results = []
        for w, got in enumerate(_run_collect(racers, race_outs, timeout)):
            if got is not None:
                race_results.append(got)
            else:
                crashed.append(f"racer {w} exited with {racers[w].exitcode}")
    else:
        store = Store(store_path)  # one Store shared by the threads, as in the app
        barrier = threading.Barrier(writers)
        results = [None] * writers

        def run(w):
            try:
                results[w] = _write_loop(store, w, labels_per_writer, plan["exclusive"][w],
                                         plan["shared"], seed, barrier, None)
            except BaseException:
                crashed.append(traceback.format_exc()[-500:])

        threads = [threading.Thread(target=run, args=(w,), daemon=True)
                   for w in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
        results = [r if r is not None else {"writer": w, "annotator": f"writer-{w}",
                                            "attempted": labels_per_writer, "log": [],
                                            "errors": [], "final_exclusive": []}
                   for w, r in enumerate(results)]
        race_barrier = threading.Barrier(2)
        race_results = [None, None]

        def race(w):
            race_results[w] = _race_writer(str(store_path), w, plan["race"], race_rounds,
                                           race_barrier, None, store)

        threads = [threading.Thread(target=race, args=(w,), daemon=True) for w in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
        race_results = [r for r in race_results if r is not None]
        store.close()
    seconds = time.perf_counter() - started
    report = {"mode": mode, "writers": writers, "labels_per_writer": labels_per_writer,
              "seed": seed, "seconds": round(seconds, 2)}
    report.update(verify(store_path, results, race_results, plan["race"]))
    report["crashed_writers"] = len(crashed)
    report["crash_examples"] = crashed[:3]
    report["tracebacks"] = len(crashed)
    report["integrity_check"] = integrity_check(store_path)
    report["writes_per_second"] = round(report["writes_attempted"] / seconds, 1) \
        if seconds > 0 else None
    return report


if __name__ == "__main__":  # pragma: no cover - manual runs
    import sys
    import tempfile

    mode = sys.argv[1] if len(sys.argv) > 1 else "process"
    with tempfile.TemporaryDirectory() as d:
        print(json.dumps(run_concurrency_trial(Path(d) / "c.sqlite3", mode=mode), indent=1))
