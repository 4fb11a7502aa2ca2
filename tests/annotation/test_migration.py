"""A store written by the schema-1 code (one label per token, PRAGMA user_version 1) is
migrated on open: every label becomes its annotator's vote and the token's training label,
every history row stays, and the rest (gold, versions, predictions, skips) is kept.  A store
of schema 3 gets the queue's query scores (schema 4): NULL for what it holds, whose queue
keeps the old rule (SQLite and PostgreSQL)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import text

from gpsl.active import sentence_scores
from gpsl.annotation import SCHEMA_VERSION, Store

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "store_v1.sqlite3"


def _old(path, sql):
    con = sqlite3.connect(path)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_a_schema_1_store_is_migrated_on_open(tmp_path):
    path = tmp_path / "old.sqlite3"
    shutil.copy(FIXTURE, path)
    assert _old(path, "PRAGMA user_version") == [(1,)]
    labels = _old(path, "SELECT sentence_id, token_index, label, annotator, source"
                        " FROM annotations ORDER BY 1, 2")
    history = _old(path, "SELECT * FROM annotation_history ORDER BY id")
    gold = _old(path, "SELECT * FROM gold_labels ORDER BY 1, 2")
    skips = _old(path, "SELECT * FROM skips")
    assert len(labels) == 10 and len(history) == 17  # what the fixture holds

    store = Store(path)
    # every label: the annotator's vote and the token's training label
    votes = [(sid, v["token_index"], v["label"], v["annotator"]) for sid in store.sentence_ids(1)
             for v in store.votes(sid)]
    assert sorted(votes) == sorted(r[:4] for r in labels)
    for sid, t, lab, who, source in labels:
        sentence = store.get_sentence(sid)
        assert sentence["votes"][t] == {who: lab}
        assert sentence["labels"][t] == lab and sentence["sources"][t] == source
        assert sentence["annotators"][t] == who
    derived = sum(lab is not None for sid in store.sentence_ids(1)
                  for lab in store.get_sentence(sid)["labels"])
    assert derived == len(labels) == store.progress(1)["labeled_tokens"]
    # every history row, unchanged
    rows = sorted(store.history(project_id=1, limit=None), key=lambda h: h["id"])
    assert [(h["id"], h["sentence_id"], h["token_index"], h["old_label"], h["new_label"],
             h["annotator"], h["action"], h["undone_by"]) for h in rows] == \
        [(r[0], r[2], r[3], r[4], r[5], r[7], r[9], r[11]) for r in history]
    # gold, skips, the active version and its predictions (with queue scores)
    assert _old(path, "SELECT * FROM gold_labels ORDER BY 1, 2") == gold
    assert _old(path, "SELECT * FROM skips") == skips
    version = store.active_model(1)
    assert version is not None and version["n_labeled_tokens"] == 9
    assert len(store.get_predictions(version["id"])) == 4
    assert store.get_query_scores(version["id"]) == {}  # schema 4's scores: NULL
    assert version["query_strategy"] is None and store.queue_strategy(1) == "least_confidence"
    assert store.queue(1) and set(store.queue(1)) <= set(store.sentence_ids(1, "train"))
    assert len(store.list_query_rounds(1)) == 1
    assert _old(path, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    assert _old(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert not _old(path, "SELECT name FROM sqlite_master WHERE name = 'annotations'")
    store.close()

    # reopening is a no-op; the migrated store works as a new one: votes per annotator
    store = Store(path)
    sid = store.sentence_ids(1, "train")[1]
    store.set_label(sid, 1, "O", "carol")  # bob said B-LOC: a tie, left missing
    assert store.get_sentence(sid)["labels"][1] is None
    assert store.undo(1, "carol")["changes"][0]["label"] == "B-LOC"
    # an imported label yields to a human vote
    first = store.sentence_ids(1, "train")[0]
    store.set_label(first, 2, "B-LOC", "dave")
    assert store.get_sentence(first)["labels"][2] == "B-LOC"
    assert _old(path, "SELECT COUNT(*) FROM schema_version") == [(1,)]


def test_a_schema_3_store_keeps_its_predictions_and_the_old_queue_rule(store_target):
    labels = ["B", "I", "O"]
    store = Store(store_target)
    pid = store.create_project("p3", labels, "", [-1, 1])
    store.add_sentences(pid, [{"tokens": [(f"w{i}",) for i in range(3)]} for _ in range(3)])
    ids = store.sentence_ids(pid)
    rng = np.random.default_rng(3)
    preds = {sid: rng.dirichlet(np.ones(3), 3).astype(np.float32) for sid in ids}
    vid = store.start_model_version(pid, {})
    store.save_predictions(vid, preds)  # what the schema-3 code wrote: no query scores
    store.finish_model_version(vid, None, [0.0], {}, 0, classes=labels, activate=True)
    order = store.queue(pid)

    def back_to_schema_3(conn):
        conn.execute(text("ALTER TABLE predictions DROP COLUMN query_scores"))
        conn.execute(text("ALTER TABLE model_versions DROP COLUMN query_strategy"))
        conn.execute(text("UPDATE schema_version SET version = 3"))
        if store.dialect == "sqlite":
            conn.exec_driver_sql("PRAGMA user_version = 3")

    store.db.write(back_to_schema_3)
    store.close()
    store = Store(store_target)
    assert store.db.read(lambda c: c.execute(text("SELECT MAX(version) FROM schema_version"))
                         .scalar_one()) == SCHEMA_VERSION
    # every prediction kept, its query scores NULL; the version names no strategy
    assert store.db.read(lambda c: c.execute(text(
        "SELECT COUNT(*) FROM predictions WHERE query_scores IS NULL")).scalar_one()) == 3
    got = store.get_predictions(vid)
    assert set(got) == set(preds)  # packed by schema 6: within its read-back error
    assert all(np.abs(got[k] - preds[k]).max() < 1 / 65535 for k in preds)
    assert store.get_query_scores(vid) == {}
    assert store.get_model_version(vid)["query_strategy"] is None
    assert store.queue_strategy(pid) == "least_confidence"
    # the queue keeps the old rule, also after a label changes (refreshed from the marginals)
    assert store.queue(pid) == order
    store.set_labels(ids[0], {0: "O", 1: "O"}, "a")
    labeled = [np.array([True, True, False]), np.zeros(3, bool), np.zeros(3, bool)]
    old = sentence_scores([preds[s] for s in ids], labeled, "sentence_least_confidence")
    assert store.queue(pid) == [ids[i] for i in np.argsort(-old, kind="stable")]
    assert [r["score"] for r in store.ranked_queue(pid, 3)] == \
        pytest.approx(sorted(old, reverse=True), abs=2e-5)  # the packing: below 1 / 65535
    # a new version stores its query scores in the migrated tables
    new = store.start_model_version(pid, {})
    store.save_predictions(new, preds, {sid: np.array([0.0, 0.0, 0.1 * k], np.float32)
                                        for k, sid in enumerate(ids)})
    store.finish_model_version(new, None, [0.0], {}, 0, classes=labels, activate=True,
                               query_strategy="entropy")
    assert store.queue(pid) == [ids[2], ids[1], ids[0]]
    assert store.queue_strategy(pid) == "entropy"
    store.close()
