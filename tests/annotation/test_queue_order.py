"""Schema 8: the queue walks an index in parts (:func:`gpsl.annotation.labeling.queue._segments`)
and the progress counts are stored (``project_progress``, kept by triggers).  Both must give what
the schema-7 code computed: the queue's order is compared with schema 7's one query (frozen
here, verbatim) on random stores with tied scores, sentences without a score, skips at the
same instant, leases, k annotators a sentence and file order; the counts with the sums over
``sentences`` after every kind of write (SQLite and PostgreSQL)."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import bindparam, text

from gpsl.annotation import Store
from gpsl.annotation.corpus.stats import progress
from gpsl.annotation.labeling import queue
from gpsl.annotation.store.db import loads, now

LABELS = ["B", "I", "O"]


def _old_order_by(score, holders=None):
    """Schema 7's ``queue._order_by``, verbatim."""
    terms = ["k.at IS NOT NULL", "k.at"]
    if score:
        terms += [f"{score} IS NULL", f"{score} DESC"]
    if holders:
        terms.append(f"{holders} DESC")
    return " ORDER BY " + ", ".join(terms + ["s.position"])


def old_queue(store, pid, order, annotator, limit):
    """Schema 7's ``queue.queue``: one query sorting every unlabeled training sentence."""
    def tx(conn):
        version = queue._active_version(conn, pid) if order == "uncertainty" else None
        args = {"a": annotator, "p": pid, "limit": 2 ** 62 if limit is None else limit}
        base = ("SELECT s.id FROM sentences s LEFT JOIN skips k ON k.sentence_id = s.id"
                " AND k.annotator = :a")
        if version is not None:
            args["v"] = version
            base += (" LEFT JOIN predictions p ON p.sentence_id = s.id AND"
                     " p.model_version_id = :v")
        sql = (base + " WHERE s.project_id = :p AND s.split = 'train' AND"
               " s.n_labeled < s.n_tokens"
               + _old_order_by("p.queue_score" if version is not None else None)
               + " LIMIT :limit")
        return [r[0] for r in conn.execute(text(sql), args)]
    return store.db.read(tx)


def old_pick(store, pid, annotator, order, exclude):
    """Schema 7's choice in ``queue.route`` for an annotator holding no lease."""
    def tx(conn):
        k = max(1, int(loads(conn.execute(text("SELECT settings FROM projects WHERE id = :p"),
                                          {"p": pid}).scalar_one(), {}).get("overlap", 1) or 1))
        version = queue._active_version(conn, pid) if order == "uncertainty" else None
        holders = queue._holders_sql(store.db)
        if k == 1:
            need = "s.n_labeled < s.n_tokens"
        else:
            need = ("NOT EXISTS (SELECT 1 FROM votes m WHERE m.sentence_id = s.id AND"
                    " m.annotator = :a AND m.source <> 'import') AND (s.n_labeled < s.n_tokens"
                    " OR EXISTS (SELECT 1 FROM votes o WHERE o.sentence_id = s.id AND"
                    " o.annotator <> :a AND o.source <> 'import'))")
        join = ""
        args = {"a": annotator, "p": pid, "now": now(), "k": k}
        if version is not None:
            join = (" LEFT JOIN predictions pr ON pr.sentence_id = s.id AND"
                    " pr.model_version_id = :v")
            args["v"] = version
        base = ("SELECT s.id FROM sentences s LEFT JOIN skips k ON k.sentence_id = s.id AND"
                f" k.annotator = :a{join} WHERE s.project_id = :p AND s.split = 'train' AND"
                f" {need} AND {holders} < :k")
        tail = _old_order_by("pr.queue_score" if version is not None else None,
                             holders if k > 1 else None) + " LIMIT 1"
        pick = None
        if exclude:
            pick = conn.execute(text(base + " AND s.id NOT IN :ex" + tail).bindparams(
                bindparam("ex", expanding=True)), {**args, "ex": sorted(exclude)}).first()
        if pick is None:
            pick = conn.execute(text(base + tail), args).first()
        return None if pick is None else pick[0]
    return store.db.read(tx)


def computed_counts(store, pid, split=None):
    """The counts as schema 7 summed them over ``sentences``."""
    where = "project_id = :p" + (" AND split = :s" if split else "")
    r = store.db.read(lambda c: c.execute(text(
        "SELECT COUNT(*), COALESCE(SUM(n_tokens), 0), COALESCE(SUM(n_labeled), 0),"
        " COALESCE(SUM(CASE WHEN n_labeled = n_tokens THEN 1 ELSE 0 END), 0),"
        " COALESCE(SUM(CASE WHEN n_labeled > 0 AND n_labeled < n_tokens THEN 1 ELSE 0 END),"
        f" 0), COALESCE(SUM(CASE WHEN n_labeled = 0 THEN 1 ELSE 0 END), 0) FROM sentences"
        f" WHERE {where}"), {"p": pid, "s": split}).first())
    return tuple(int(x) for x in r)


def stored_counts(store, pid, split=None):
    p = progress(store.db, pid, split, detail=False)
    return (p["sentences"], p["tokens"], p["labeled_tokens"], p["complete_sentences"],
            p["partial_sentences"], p["unlabeled_sentences"])


def check_counts(store, pid):
    for split in (None, "train", "heldout"):
        assert stored_counts(store, pid, split) == computed_counts(store, pid, split), split


def random_project(store, rng, name="q", n=40):
    """Sentences of 1-4 tokens (some held out), an active version whose queue scores take 3
    values (ties) or none, some sentences without a prediction, labels, skips at one
    instant."""
    pid = store.create_project(name, LABELS, "", [-1, 1])
    lengths = rng.integers(1, 5, size=n)
    store.add_sentences(pid, [{"tokens": [f"w{i}_{t}" for t in range(m)]}
                              for i, m in enumerate(lengths)])
    store.add_sentences(pid, [{"tokens": ["h", "x"]} for _ in range(4)], split="heldout")
    ids = store.sentence_ids(pid, "train")
    for sid, m in zip(ids, lengths):
        r = rng.random()
        if r < 0.2:  # complete
            store.set_labels(sid, {t: LABELS[t % 3] for t in range(m)}, "lead")
        elif r < 0.35:
            store.set_labels(sid, {0: "O"}, "lead")
    vid = store.start_model_version(pid, {})
    with_pred = [sid for sid in store.sentence_ids(pid) if rng.random() < 0.8]
    store.save_predictions(vid, {sid: rng.dirichlet(np.ones(3), len(
        store.get_sentence(sid)["tokens"])) for sid in with_pred})
    store.finish_model_version(vid, None, [0.0], {}, 0, classes=LABELS, activate=True)
    scores = {sid: [None, 0.25, 0.5, 0.75][int(rng.integers(4))] for sid in with_pred}
    store.db.write(lambda c: c.execute(text(
        "UPDATE predictions SET queue_score = :q WHERE model_version_id = :v AND"
        " sentence_id = :s"), [{"q": q, "v": vid, "s": s} for s, q in scores.items()]))
    at = [now(), "2020-01-01T00:00:00.000+00:00"]
    rows = [{"s": sid, "a": who, "at": at[int(rng.integers(2))]}
            for sid in ids for who in ("ann", "bob") if rng.random() < 0.15]
    if rows:
        store.db.write(lambda c: c.execute(text(
            "INSERT INTO skips (sentence_id, annotator, at) VALUES (:s, :a, :at)"), rows))
    return pid


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_queue_keeps_schema_7s_order(store_target, seed):
    rng = np.random.default_rng(seed)
    store = Store(store_target)
    pid = random_project(store, rng)
    for order in ("uncertainty", "sequential"):
        for who in (None, "ann", "bob", "nobody"):
            for limit in (None, 1, 3, 17):
                assert store.queue(pid, order, who, limit) == \
                    old_queue(store, pid, order, who, limit), (order, who, limit)
    ranked = store.ranked_queue(pid, 8)
    assert [r["sentence_id"] for r in ranked] == old_queue(store, pid, "uncertainty", None, 8)
    check_counts(store, pid)
    store.close()


@pytest.mark.parametrize("overlap", [1, 2, 3])
def test_routing_keeps_schema_7s_choice(store_target, overlap):
    rng = np.random.default_rng(10 + overlap)
    store = Store(store_target)
    pid = random_project(store, rng, n=30)
    store.set_team_settings(pid, overlap=overlap)
    people = ["ann", "bob", "cat", "dan"]
    ids = store.sentence_ids(pid, "train")
    for sid in ids[:8]:  # others' votes: sentences waiting for their k-th annotator
        store.set_labels(sid, {0: "B"}, people[int(rng.integers(4))])
    seen: dict[str, set] = {p: set() for p in people}
    for step in range(40):
        who = people[int(rng.integers(4))]
        order = "sequential" if step % 5 == 4 else "uncertainty"
        queue.release(store.db, who)
        exclude = set(seen[who]) if step % 3 else set()
        expected = old_pick(store, pid, who, order, exclude)
        got = store.next_sentence(pid, who, order, None, exclude)
        assert got == expected, (step, who, order)
        if got is not None:
            seen[who].add(got)
            if rng.random() < 0.5:  # a vote on it: a holder for the others
                store.set_labels(got, {0: "I"}, who)
    check_counts(store, pid)
    store.close()


def test_the_stored_counts_follow_every_write(store_target):
    rng = np.random.default_rng(5)
    store = Store(store_target)
    pid = random_project(store, rng, n=20)
    other = random_project(store, rng, name="other", n=5)
    check_counts(store, pid)
    ids = store.sentence_ids(pid, "train")
    store.set_label(ids[0], 0, "B", "ann")
    check_counts(store, pid)
    store.clear_label(ids[0], 0, "ann")
    check_counts(store, pid)
    store.set_labels(ids[1], {0: "B", 1: "I"}, "ann")
    store.undo(pid, "ann")
    check_counts(store, pid)
    store.set_label(ids[2], 0, "B", "ann")
    store.set_label(ids[2], 0, "I", "bob")  # a tie: no training label ...
    check_counts(store, pid)
    store.adjudicate(ids[2], 0, "I", "lead")  # ... until the lead decides
    check_counts(store, pid)
    store.adjudicate(ids[2], 0, None, "lead")
    check_counts(store, pid)
    n = store.import_sentences(pid, [{"tokens": ["a", "b", "c"], "labels": ["B", None, "O"]},
                                     {"tokens": ["d"], "labels": ["O"]}])
    assert n == 2
    check_counts(store, pid)
    store.add_sentences(pid, [{"tokens": ["g", "h"]}], split="heldout")
    check_counts(store, pid)
    store.db.write(lambda c: c.execute(text("DELETE FROM sentences WHERE id = :s"),
                                       {"s": ids[3]}))  # a sentence removed
    check_counts(store, pid)
    before = computed_counts(store, pid)
    assert store.delete_project(other)
    check_counts(store, pid)
    assert computed_counts(store, pid) == before
    assert store.db.read(lambda c: c.execute(text(
        "SELECT COUNT(*) FROM project_progress WHERE project_id = :p"),
        {"p": other}).scalar_one()) == 0
    vid = store.start_model_version(pid, {})  # a training run's writes
    store.save_predictions(vid, {sid: rng.dirichlet(np.ones(3), len(
        store.get_sentence(sid)["tokens"])) for sid in store.sentence_ids(pid)})
    store.finish_model_version(vid, None, [0.0], {}, 0, classes=LABELS, activate=True)
    check_counts(store, pid)
    assert stored_counts(store, pid) != (0, 0, 0, 0, 0, 0)
    store.close()


def test_a_schema_7_store_gets_the_counts_and_the_same_queue(store_target):
    rng = np.random.default_rng(7)
    store = Store(store_target)
    pid = random_project(store, rng, n=30)
    sqlite = store.dialect == "sqlite"

    def back_to_schema_7(conn):
        for name in ("insert", "delete", "update"):
            conn.execute(text(f"DROP TRIGGER progress_on_{name}"
                              + ("" if sqlite else " ON sentences")))
        conn.execute(text("DROP TABLE project_progress"))
        conn.execute(text("DROP INDEX predictions_by_queue"))
        conn.execute(text("UPDATE schema_version SET version = 7"))
        if sqlite:
            conn.exec_driver_sql("PRAGMA user_version = 7")

    store.db.write(back_to_schema_7)
    store.set_labels(store.sentence_ids(pid, "train")[0], {0: "B"}, "ann")  # schema 7's write
    counts = {s: computed_counts(store, pid, s) for s in (None, "train", "heldout")}
    orders = {(o, who): old_queue(store, pid, o, who, None)
              for o in ("uncertainty", "sequential") for who in (None, "ann", "bob")}
    store.close()

    store = Store(store_target)  # migrated on open
    assert store.db.read(lambda c: c.execute(text("SELECT MAX(version) FROM schema_version"))
                         .scalar_one()) == 8
    assert {s: stored_counts(store, pid, s) for s in counts} == counts
    assert {key: store.queue(pid, key[0], key[1], None) for key in orders} == orders
    # the triggers are there: the counts follow a write after the migration
    store.set_labels(store.sentence_ids(pid, "train")[1], {0: "O"}, "ann")
    check_counts(store, pid)
    store.close()
