"""A store written by the schema-1 code (one label per token, PRAGMA user_version 1) is
migrated on open: every label becomes its annotator's vote and the token's training label,
every history row stays, and the rest (gold, versions, predictions, skips) is kept."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from gpsl.annotation import SCHEMA_VERSION, Store

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "store_v1.sqlite3"


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
