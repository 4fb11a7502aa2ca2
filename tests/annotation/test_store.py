"""Tests for gpsl.annotation (through its Store facade), on SQLite and on PostgreSQL."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy.exc

from gpsl.annotation import (
    SAMPLE_PROJECT_NAME,
    SCHEMA_VERSION,
    NotFoundError,
    Store,
    default_db_url,
)
from gpsl.annotation.corpus.predictions import quantise
from gpsl.errors import GpslError, InputError
from gpsl.io import Sentence, read_conll
from gpsl.tags import sort_labels
from tests.support.limits import limit

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_data"
LABELS = ["B", "I", "O"]



# tests that look into the SQLite file itself
SQLITE_ONLY = pytest.mark.parametrize("store_target", ["sqlite"], indirect=True)


def words(n, prefix="w"):
    return [(f"{prefix}{i}", "NN") for i in range(n)]


def small_project(store, name="p"):
    """3 train sentences (complete, partial, unlabeled) + 1 held-out one with gold."""
    pid = store.create_project(name, LABELS, "U00:%x[0,0]\n", [-1, 1])
    store.add_sentences(pid, [
        Sentence(words(3), ["B", "I", "O"], line=1),
        {"tokens": words(2), "labels": [None, "O"]},
        {"tokens": words(4)},
    ], doc="a.conll")
    store.add_sentences(pid, [{"tokens": words(2), "labels": ["O", "O"]}], split="heldout",
                        gold=[["B", "O"]])
    return pid, store.sentence_ids(pid)


def today():
    return datetime.now(UTC).date().isoformat()


# ----------------------------------------------------------------------------- basics


def test_default_db_url(monkeypatch, tmp_path):
    monkeypatch.delenv("GPSL_DB", raising=False)
    assert default_db_url(tmp_path) == str(tmp_path / "data" / "gpsl.sqlite3")
    monkeypatch.setenv("GPSL_DB", str(tmp_path / "other.db"))
    assert default_db_url(tmp_path) == str(tmp_path / "other.db")


@SQLITE_ONLY
def test_schema_wal_and_version(store, tmp_path):
    con = sqlite3.connect(store.path)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    con.close()
    Store(store.path)  # reopening an existing store is fine
    newer = tmp_path / "newer.db"
    con = sqlite3.connect(newer)
    con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    con.close()
    with pytest.raises(GpslError, match="newer"):
        Store(newer)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(InputError, match="not a gpsl database"):
        Store(junk)


def test_listed_sentence_counts_are_the_kept_counts(store):
    """``list_projects``' n_sentences (summed from project_progress, not counted) is every
    sentence of the project, both splits, per project, also after a project is removed."""
    a = store.create_project("a", ["O", "B-PER"])
    b = store.create_project("b", ["O"])
    store.add_sentences(a, [{"tokens": words(3), "labels": ["O", None, "B-PER"]}] * 4)
    store.add_sentences(a, [{"tokens": words(2)}] * 3, split="heldout")
    store.add_sentences(b, [{"tokens": words(1)}] * 2)
    listed = {q["id"]: q["n_sentences"] for q in store.list_projects()}
    assert listed == {a: 7, b: 2} == {p: store.sentence_count(p) for p in (a, b)}
    store.delete_project(a)
    assert [(q["id"], q["n_sentences"]) for q in store.list_projects()] == [(b, 2)]


def test_project_crud(store):
    pid = store.create_project("news", ["B-PER", "I-PER", "O"], "U00:%x[0,0]\n", [-1, 1],
                               settings={"a": 1})
    p = store.get_project(pid)
    assert p["name"] == "news" and p["labels"] == ["B-PER", "I-PER", "O"]
    assert p["offsets"] == [-1, 1] and p["kernel"] == "linear" and p["settings"] == {"a": 1}
    assert p["template"] == "U00:%x[0,0]\n"
    with pytest.raises(InputError, match="already exists"):
        store.create_project("news", ["O"], "", [-1, 1])
    with pytest.raises(InputError, match="duplicate"):
        store.create_project("x", ["O", "O"], "", [-1, 1])
    pid2 = store.create_project("other", ["O"], "", [-2, -1, 1, 2], kernel="rbf")
    assert [(q["id"], q["n_sentences"]) for q in store.list_projects()] == [(pid, 0), (pid2, 0)]
    store.add_sentences(pid, [{"tokens": words(2), "labels": ["B-PER", None]}])
    with pytest.raises(InputError, match="B-PER"):
        store.update_project(pid, labels=["O"])  # B-PER is still in use
    with pytest.raises(InputError, match="already exists"):
        store.update_project(pid, name="other")
    p = store.update_project(pid, name="renamed", labels=["B-PER", "I-PER", "O", "B-LOC"],
                             kernel="rbf", settings={"b": 2})
    assert p["name"] == "renamed" and p["labels"][-1] == "B-LOC" and p["settings"] == {"b": 2}
    assert store.delete_project(pid) is True
    assert store.get_project(pid) is None and store.delete_project(pid) is False
    assert [q["id"] for q in store.list_projects()] == [pid2]
    for table in ("sentences", "votes", "annotation_history"):  # cascades
        assert store.db.read(lambda c, t=table: c.exec_driver_sql(
            f"SELECT COUNT(*) FROM {t}").scalar()) == 0


def test_sort_labels():
    assert sort_labels(["O", "I-PER", "B-ORG", "B-PER", "I-ORG"]) == [
        "B-ORG", "I-ORG", "B-PER", "I-PER", "O"]


# -------------------------------------------------------------------------- sentences


def test_add_sentences_with_labels_and_none(store):
    pid, (s1, s2, s3, s4) = small_project(store)
    assert store.sentence_count(pid) == 4 and store.sentence_count(pid, "heldout") == 1
    a = store.get_sentence(s1)
    assert a["tokens"] == [("w0", "NN"), ("w1", "NN"), ("w2", "NN")]
    assert a["labels"] == ["B", "I", "O"] and a["sources"] == ["human"] * 3
    assert a["split"] == "train" and a["position"] == 0 and a["doc"] == "a.conll"
    assert a["line"] == 1 and a["gold"] is None
    b = store.get_sentence(s2)
    assert b["labels"] == [None, "O"] and b["sources"] == [None, "human"]
    assert store.get_sentence(s3)["labels"] == [None] * 4
    d = store.get_sentence(s4)
    assert d["split"] == "heldout" and d["gold"] == ["B", "O"] and d["position"] == 3
    hist = store.history(project_id=pid)
    assert len(hist) == 6 and {h["action"] for h in hist} == {"import"}
    assert {h["annotator"] for h in hist} == {"import"}
    assert store.get_sentence(10**6) is None
    # paging: one query, same dicts
    page = store.get_sentences(pid, offset=1, limit=2)
    assert [s["id"] for s in page] == [s2, s3] and page[0]["labels"] == [None, "O"]
    assert [s["id"] for s in store.get_sentences(pid, split="heldout")] == [s4]
    assert store.neighbours(s1) == (None, s2) and store.neighbours(s3) == (s2, None)
    assert store.neighbours(s4) == (None, None)  # held-out split is its own sequence
    ids, toks, gold = store.gold_data(pid)
    assert ids == [s4] and gold == [["B", "O"]] and toks[0][0] == ("w0", "NN")
    exported = store.export_sentences(pid, split="train")
    assert all(isinstance(s, Sentence) for s in exported)
    assert [s.labels for s in exported] == [["B", "I", "O"], [None, "O"], [None] * 4]


def test_out_of_set_label_raises_and_writes_nothing(store):
    pid = store.create_project("p", LABELS, "", [-1, 1])
    store.add_sentences(pid, [{"tokens": words(2), "labels": ["O", "O"]}])
    before = store.history(project_id=pid)
    bad = [Sentence(words(3), ["B", "I", "O"], line=1),
           Sentence(words(3), ["O", "O", "X-BAD"], line=5)]
    with pytest.raises(InputError) as err:
        store.add_sentences(pid, bad, doc="data.conll")
    msg = str(err.value)
    assert msg.startswith("data.conll:7: ") and "sentence 2, token 3" in msg
    assert "X-BAD" in msg and "\n" not in msg
    assert store.sentence_count(pid) == 1 and store.history(project_id=pid) == before
    with pytest.raises(InputError, match="2 labels for 3 tokens"):
        store.add_sentences(pid, [{"tokens": words(3), "labels": ["O", "O"]}])
    with pytest.raises(InputError, match="columns"):
        store.add_sentences(pid, [{"tokens": [("a",), ("b",)]}])
    with pytest.raises(InputError, match="gold label"):
        store.add_sentences(pid, [{"tokens": words(1)}], gold=[["Q"]])
    assert store.sentence_count(pid) == 1


def _fail_sentence_insert(path, position=1):
    """A trigger that aborts the insert of the sentence at ``position``: a failure in the
    middle of a write, after the project row and earlier sentences are inserted."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TRIGGER boom BEFORE INSERT ON sentences WHEN NEW.position = "
                     f"{int(position)} BEGIN SELECT RAISE(ABORT, 'injected failure'); END")


def _drop_trigger(path):
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TRIGGER boom")


@SQLITE_ONLY
def test_create_project_with_sentences_is_one_transaction(store):
    train = [Sentence(words(2), ["B", "O"], line=1), {"tokens": words(3)}]
    held = [{"tokens": words(2)}]
    pid = store.create_project("p", LABELS, "U00:%x[0,0]\n", [-1, 1], sentences=train,
                               heldout=held, heldout_gold=[["B", "I"]], doc="a.conll",
                               annotator="ann")
    assert store.sentence_count(pid, "train") == 2 and store.sentence_count(pid, "heldout") == 1
    assert store.get_sentence(store.sentence_ids(pid, "train")[0])["annotators"] == \
        ["ann", "ann"]
    assert store.gold_data(pid)[2] == [["B", "I"]]
    assert store.get_sentence(store.sentence_ids(pid)[0])["doc"] == "a.conll"

    # a label error in the last held-out sentence: no project row at all
    with pytest.raises(InputError, match="gold label 'Q'"):
        store.create_project("q", LABELS, sentences=train, heldout=held, heldout_gold=[["Q", None]])
    with pytest.raises(InputError, match="sentence 2, token 1"):
        store.create_project("q", LABELS, sentences=[train[0], {"tokens": words(1),
                                                                "labels": ["X"]}])
    # an SQL failure after the project row and the first sentence are inserted
    _fail_sentence_insert(store.path)
    with pytest.raises(sqlalchemy.exc.IntegrityError, match="injected failure"):
        store.create_project("q", LABELS, sentences=train)
    _drop_trigger(store.path)
    assert [p["name"] for p in store.list_projects()] == ["p"]
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM sentences").fetchone()[0] == 3
        assert conn.execute("SELECT COUNT(*) FROM annotation_history").fetchone()[0] == 2
    # the old signature still works and creates an empty project
    assert store.sentence_count(store.create_project("q", LABELS, "", [-1])) == 0


@SQLITE_ONLY
def test_add_sentences_with_new_labels_is_one_transaction(store):
    pid = store.create_project("p", ["O"], sentences=[{"tokens": words(1), "labels": ["O"]}])
    before = (store.get_project(pid), store.history(project_id=pid), store.progress(pid))
    # a label the import does not add, in the last sentence: labels unchanged
    bad = [{"tokens": words(2), "labels": ["B-X", "O"]}, {"tokens": words(1), "labels": ["Q"]}]
    with pytest.raises(InputError, match="sentence 2, token 1.*'Q' is not in"):
        store.add_sentences(pid, bad, add_labels=["B-X"])
    # an SQL failure after the label update and the first sentence
    _fail_sentence_insert(store.path, position=2)
    with pytest.raises(sqlalchemy.exc.IntegrityError, match="injected failure"):
        store.add_sentences(pid, bad[:1] * 2, add_labels=["B-X", "I-X"])
    _drop_trigger(store.path)
    with pytest.raises(InputError, match="invalid label"):
        store.add_sentences(pid, bad[:1], add_labels=["B X"])
    assert (store.get_project(pid), store.history(project_id=pid), store.progress(pid)) == \
        before
    # success: new labels appended in order (known ones and repeats ignored), then sentences
    assert store.add_sentences(pid, bad[:1], add_labels=["O", "B-X", "I-X", "B-X"]) == 1
    assert store.get_project(pid)["labels"] == ["O", "B-X", "I-X"]
    assert store.sentence_count(pid) == 2
    assert store.add_sentences(pid, [{"tokens": words(1)}], split="heldout", gold=[["I-X"]],
                               add_labels=()) == 1


# ----------------------------------------------------------------------------- labels


def test_set_clear_undo_round_trip(store):
    pid, (s1, s2, s3, _) = small_project(store)
    h1 = store.set_label(s3, 0, "B", "alice")
    h2 = store.set_label(s3, 0, "I", "alice")
    assert store.set_label(s3, 0, "I", "alice") is None  # no change, no history
    # Clear withdraws alice's own vote: she has none on the imported O, so nothing changes
    assert store.clear_label(s1, 2, "alice") is None
    assert store.get_sentence(s1)["labels"] == ["B", "I", "O"]
    h3 = store.set_label(s1, 2, "I", "alice")
    h4 = store.clear_label(s1, 2, "alice")  # her vote goes: the imported O counts again
    s = store.get_sentence(s1)
    assert s["labels"] == ["B", "I", "O"] and s["votes"][2] == {"import": "O"}
    hist = store.history(project_id=pid, annotator="alice")
    assert [h["id"] for h in hist] == [h4, h3, h2, h1]
    assert [(h["action"], h["old_label"], h["new_label"]) for h in hist] == [
        ("clear", "I", None), ("set", None, "I"), ("set", "B", "I"), ("set", None, "B")]

    u = store.undo(pid, "alice")  # undo the clear: her I is back
    assert u["sentence_id"] == s1 and u["changes"] == [
        {"token_index": 2, "label": "I", "previous": "O"}] and u["undone"] == [h4]
    u = store.undo(pid, "alice")  # undo the set: the importer's O again
    assert u["changes"] == [{"token_index": 2, "label": "O", "previous": "I"}]
    s = store.get_sentence(s1)
    assert s["labels"] == ["B", "I", "O"] and s["annotators"][2] == "import"
    assert store.undo(pid, "alice")["changes"][0]["label"] == "B"
    assert store.get_sentence(s3)["labels"][0] == "B"
    assert store.undo(pid, "alice")["changes"][0]["label"] is None
    assert store.get_sentence(s3)["labels"][0] is None
    assert store.undo(pid, "alice") is None  # imports are not undone
    hist = store.history(sentence_id=s3)
    assert [h["action"] for h in hist] == ["undo", "undo", "set", "set"]
    assert all(h["undone"] for h in hist if h["action"] == "set")
    assert store.progress(pid, "train")["labeled_tokens"] == 4  # n_labeled kept in step
    with pytest.raises(InputError, match="out of range"):
        store.set_label(s3, 4, "O", "alice")
    with pytest.raises(InputError, match="not in the project's label set"):
        store.set_label(s3, 0, "Z", "alice")
    with pytest.raises(InputError, match="annotator"):
        store.set_label(s3, 0, "O", " ")
    with pytest.raises(NotFoundError):
        store.set_label(10**6, 0, "O", "alice")


def test_set_labels_batch_is_one_undo_step(store):
    pid, (_, _, s3, _) = small_project(store)
    ids = store.set_labels(s3, {0: "B", 1: "I", 2: "O", 3: "O"}, "bob", source="accepted")
    assert len(ids) == 4
    s = store.get_sentence(s3)
    assert s["labels"] == ["B", "I", "O", "O"] and s["sources"] == ["accepted"] * 4
    store.set_label(s3, 1, "I", "bob")  # confirming turns 'accepted' into 'human'
    assert store.get_sentence(s3)["sources"][1] == "human"
    store.undo(pid, "bob")
    assert store.get_sentence(s3)["sources"][1] == "accepted"
    u = store.undo(pid, "bob")
    assert sorted(c["token_index"] for c in u["changes"]) == [0, 1, 2, 3]
    assert store.get_sentence(s3)["labels"] == [None] * 4


def test_two_annotators_keep_two_votes_and_undo_only_their_own(store):
    pid, (_, _, s3, _) = small_project(store)
    store.set_label(s3, 1, "B", "alice")
    store.set_label(s3, 1, "O", "bob")
    s = store.get_sentence(s3)
    assert s["votes"][1] == {"alice": "B", "bob": "O"}
    assert s["labels"][1] is None  # a tie is left missing
    assert store.progress(pid)["disputed_tokens"] == 1
    hist = store.history(sentence_id=s3)
    assert [(h["annotator"], h["old_label"], h["new_label"]) for h in hist] == [
        ("bob", None, "O"), ("alice", None, "B")]
    store.set_label(s3, 1, "O", "carol")  # a majority decides
    assert store.get_sentence(s3)["labels"][1] == "O"
    store.adjudicate(s3, 1, "B", "lead")  # the lead's decision wins over the votes
    assert store.get_sentence(s3)["labels"][1] == "B"
    store.adjudicate(s3, 1, None, "lead")
    # alice's undo removes her vote and nothing else
    u = store.undo(pid, "alice")
    assert u["annotator"] == "alice"
    s = store.get_sentence(s3)
    assert s["votes"][1] == {"bob": "O", "carol": "O"} and s["labels"][1] == "O"
    assert store.undo(pid, "alice") is None
    assert len(store.history(sentence_id=s3)) == 4
    # bob's undo leaves carol's vote
    store.undo(pid, "bob")
    assert store.get_sentence(s3)["votes"][1] == {"carol": "O"}


def test_derive_labels_policy():
    from gpsl.annotation.labeling.rules import Vote, derive_labels

    v = Vote
    got = derive_labels({0: [v("a", "B", "human", "1")],
                         1: [v("a", "B", "human", "1"), v("b", "O", "human", "2")],
                         2: [v("a", "B", "human", "1"), v("b", "O", "human", "2"),
                             v("c", "O", "accepted", "3")],
                         3: [v("a", "B", "human", "1"), v("b", "O", "human", "2")],
                         4: [v("import", "O", "import", "0"), v("a", "B", "human", "1")],
                         5: [v("import", "O", "import", "0")],
                         6: [v("a", None, "human", "1"), v("import", "O", "import", "0")]},
                        {3: "I"})
    assert {t: (d.label if d else None) for t, d in got.items()} == {
        0: "B", 1: None, 2: "O", 3: "I", 4: "B", 5: "O", 6: None}
    # the hook a crowd model plugs into decides disputed tokens
    crowd = derive_labels({1: [v("a", "B", "human", "1"), v("b", "O", "human", "2")]}, {},
                          posterior=lambda t, votes: "B")
    assert crowd[1].label == "B" and crowd[1].annotator == "a"


def test_failed_write_leaves_nothing_behind(store, monkeypatch):
    pid, (s1, _, s3, _) = small_project(store)
    before = (store.history(project_id=pid), store.progress(pid))
    with pytest.raises(InputError, match="BAD"):  # token 0 is written before 1 fails
        store.set_labels(s3, {0: "O", 1: "BAD"}, "alice")
    assert store.get_sentence(s3)["labels"] == [None] * 4
    assert (store.history(project_id=pid), store.progress(pid)) == before

    def boom(*args):
        raise RuntimeError("disk on fire")

    from gpsl.annotation.labeling import scoring

    monkeypatch.setattr(scoring, "refresh_scores", boom)
    with pytest.raises(RuntimeError):
        store.set_labels(s1, {0: "O", 1: None}, "alice")
    assert store.get_sentence(s1)["labels"] == ["B", "I", "O"]
    assert (store.history(project_id=pid), store.progress(pid)) == before


# ---------------------------------------------------------------- training data, progress


def test_training_data_none_for_missing(store):
    pid, (s1, s2, s3, s4) = small_project(store)
    toks, labels = store.training_data(pid)
    assert labels == [["B", "I", "O"], [None, "O"], [None] * 4]
    assert toks[1] == [("w0", "NN"), ("w1", "NN")]
    ids, _, labels = store.training_data(pid, only_labeled=True, with_ids=True)
    assert ids == [s1, s2] and len(labels) == 2
    # the labeled ones are chosen by the store: a newly labeled sentence joins
    store.set_labels(s3, {3: "O"}, "alice")
    every = store.training_data(pid, with_ids=True)
    ids, toks, labels = store.training_data(pid, only_labeled=True, with_ids=True)
    assert ids == [s1, s2, s3] and labels[2] == [None, None, None, "O"]
    assert (ids, toks, labels) == tuple(list(x) for x in zip(*[
        r for r in zip(*every) if any(lab is not None for lab in r[2])]))
    assert store.training_data(pid, "heldout")[1] == [["O", "O"]]


def test_progress_exact(store):
    pid, (s1, s2, s3, s4) = small_project(store)
    p = store.progress(pid)
    assert (p["sentences"], p["tokens"], p["labeled_tokens"]) == (4, 11, 6)
    quick = store.progress(pid, detail=False)  # the sidebar's counts only
    assert {k: quick[k] for k in ("sentences", "tokens", "labeled_tokens", "pct_complete")} == \
        {k: p[k] for k in ("sentences", "tokens", "labeled_tokens", "pct_complete")}
    assert (p["complete_sentences"], p["partial_sentences"], p["unlabeled_sentences"]) == (2, 1, 1)
    assert p["pct_complete"] == pytest.approx(600 / 11)
    store.set_label(s3, 0, "B", "alice")
    store.set_labels(s2, {0: "B"}, "bob", source="accepted")
    store.skip(s3, "alice")
    p = store.progress(pid, "train")
    assert (p["sentences"], p["tokens"], p["labeled_tokens"]) == (3, 9, 6)
    assert (p["complete_sentences"], p["partial_sentences"], p["unlabeled_sentences"]) == (2, 1, 0)
    assert p["pct_complete"] == pytest.approx(100 * 6 / 9)
    assert p["pct_sentences_complete"] == pytest.approx(100 * 2 / 3)
    assert p["annotators"] == {"import": 4, "alice": 1, "bob": 1}
    assert p["sources"] == {"human": 5, "accepted": 1}
    assert p["label_counts"] == {"B": 3, "I": 1, "O": 2}
    assert p["labels_per_day"] == {today(): 2}
    assert p["skipped_sentences"] == 1


# ------------------------------------------------------------------ sample project


@pytest.mark.skipif(not all((SAMPLE / f).is_file()
                            for f in ("sample.conll", "sample_gold.conll", "template")),
                    reason="sample_data not written yet")
def test_ensure_sample_project(store, tmp_path):
    pid = store.ensure_sample_project(SAMPLE)
    assert store.ensure_sample_project(SAMPLE) == pid  # idempotent
    p = store.get_project(pid)
    sents, gold = read_conll(SAMPLE / "sample.conll"), read_conll(SAMPLE / "sample_gold.conll")
    assert p["name"] == SAMPLE_PROJECT_NAME and p["offsets"] == [-1, 1]
    assert p["template"] == (SAMPLE / "template").read_text(encoding="utf-8")
    assert p["labels"][-1] == "O" and p["labels"] == sort_labels(p["labels"])
    assert set(p["labels"]) == {lab for s in sents + gold for lab in s.labels if lab}
    n_held = round(0.2 * len(sents))
    assert store.sentence_count(pid) == len(sents)
    assert store.sentence_count(pid, "heldout") == n_held
    assert store.training_data(pid)[1] == [s.labels for s in sents[:-n_held]]
    ids, toks, glabels = store.gold_data(pid)
    assert glabels == [g.labels for g in gold[-n_held:]]
    assert toks == [g.tokens for g in gold[-n_held:]]
    assert store.progress(pid)["labeled_tokens"] == sum(len(s) - s.n_missing for s in sents)
    other = Store(tmp_path / "other.db")  # a store that already has a project
    first = other.create_project("mine", LABELS, "", [-1, 1])
    assert other.ensure_sample_project(SAMPLE) == first
    assert len(other.list_projects()) == 1


# ------------------------------------------------------------------ predictions, queue


def marg(conf):
    """An (L, 3) float32 array whose row maxima are ``conf``."""
    c = np.asarray(conf, dtype=np.float32)
    rest = (1 - c) / 2
    return np.stack([c, rest, rest], axis=1).astype(np.float32)


def done_version(store, pid, **kw):
    vid = store.start_model_version(pid, {"iters": 5})
    store.finish_model_version(vid, "/models/x", [1.0, 2.0], {"acc": 0.5}, 7, **kw)
    return vid


def test_predictions_round_trip_and_uncertainty_queue(store):
    pid = store.create_project("q", LABELS, "", [-1, 1])
    store.add_sentences(pid, [{"tokens": words(3), "labels": ["O", None, None]}]
                        + [{"tokens": words(3)} for _ in range(3)])
    s0, s1, s2, s3 = store.sentence_ids(pid)
    store.set_labels(s3, {0: "O", 1: "O", 2: "O"}, "a")  # complete: never queued
    assert store.queue(pid) == [s0, s1, s2]  # no model: sequential
    vid = done_version(store, pid, classes=LABELS)
    rng = np.random.default_rng(1)
    preds = {s0: marg([0.1, 0.9, 0.8]),  # the 0.1 token is labeled
             s1: marg([0.7, 0.95, 0.9]), s2: marg([0.99, 0.6, 0.99]),
             s3: rng.dirichlet(np.ones(3), 3).astype(np.float32)}
    assert store.save_predictions(vid, preds) == 4
    got = store.get_predictions(vid)
    assert set(got) == set(preds)
    for sid, arr in preds.items():  # packed (schema 6): within one 16-bit level
        assert got[sid].dtype == np.float32 and np.array_equal(got[sid], quantise(arr))
        assert np.abs(got[sid] - arr).max() < 1 / 65535
    assert list(store.get_predictions(vid, [s1])) == [s1]
    assert store.queue(pid) == [s0, s1, s2]  # model not active yet
    store.set_active_model(pid, vid)
    assert store.active_model(pid)["id"] == vid
    assert store.queue(pid) == [s2, s1, s0]  # 0.6 < 0.7 < 0.8 (labeled 0.1 ignored)
    store.set_label(s2, 1, "B", "a")  # s2's least confident token is labeled now
    assert store.queue(pid) == [s1, s0, s2]
    store.undo(pid, "a")
    assert store.queue(pid) == [s2, s1, s0]
    assert store.queue(pid, order="sequential") == [s0, s1, s2]
    assert store.queue(pid, limit=1) == [s2]
    store.add_sentences(pid, [{"tokens": words(2)}])  # no prediction yet: after the others
    assert store.queue(pid)[-1] == store.sentence_ids(pid)[-1]
    with pytest.raises(ValueError, match="shape"):
        store.save_predictions(vid, {s0: marg([0.5, 0.5])})
    with pytest.raises(NotFoundError):
        store.save_predictions(vid, {10**6: marg([0.5])})
    assert np.array_equal(store.get_predictions(vid)[s0], quantise(preds[s0]))
    # the queue's order is gpsl.active's sentence score over the unlabeled tokens
    from gpsl.active import sentence_scores

    labeled = [np.array([True, False, False]), np.zeros(3, bool), np.zeros(3, bool)]
    scores = sentence_scores([preds[s0], preds[s1], preds[s2]], labeled,
                             strategy="sentence_least_confidence")
    assert [[s0, s1, s2][i] for i in np.argsort(-scores)] == store.queue(pid)[:3]
    assert [r["sentence_id"] for r in store.ranked_queue(pid, 3)] == store.queue(pid)[:3]
    assert store.prune_predictions(pid, keep=0) == 0  # the active version is kept
    assert store.delete_predictions(vid) == 4 and store.get_predictions(vid) == {}


def test_query_scores_order_the_queue_and_a_label_drops_its_token(store):
    pid = store.create_project("qs", LABELS, "", [-1, 1])
    store.add_sentences(pid, [{"tokens": words(3)} for _ in range(3)])
    s0, s1, s2 = store.sentence_ids(pid)
    assert store.queue_strategy(pid) is None  # no model: file order
    vid = done_version(store, pid, classes=LABELS, query_strategy="bald")
    # least confidence alone would ask s0 first (0.4), then s1, then s2
    preds = {s0: marg([0.4, 0.9, 0.9]), s1: marg([0.5, 0.9, 0.9]), s2: marg([0.6, 0.9, 0.9])}
    scores = {s0: np.array([0.10, 0.05, 0.0], np.float32),
              s1: np.array([0.02, 0.30, 0.20], np.float32),
              s2: np.array([0.25, 0.0, 0.01], np.float32)}
    assert store.save_predictions(vid, preds, scores) == 3
    store.set_active_model(pid, vid)
    got = store.get_query_scores(vid)
    assert {k: v.tobytes() for k, v in got.items()} == \
        {k: v.tobytes() for k, v in scores.items()}
    assert list(store.get_query_scores(vid, [s2])) == [s2]
    assert store.queue(pid) == [s1, s2, s0]  # the largest query score: 0.30 > 0.25 > 0.10
    ranked = store.ranked_queue(pid, 3)
    assert [r["score"] for r in ranked] == pytest.approx([0.30, 0.25, 0.10])
    assert {r["strategy"] for r in ranked} == {"bald"} == {store.queue_strategy(pid)}
    store.set_label(s1, 1, "B", "a")  # s1's top token is labeled: its 0.30 counts no more
    assert store.ranked_queue(pid, 3)[1]["score"] == pytest.approx(0.20)
    assert store.queue(pid) == [s2, s1, s0]
    store.set_labels(s2, {0: "O", 2: "O"}, "a")  # left: a token scored 0
    assert [r["score"] for r in store.ranked_queue(pid, 3)] == pytest.approx([0.2, 0.1, 0.0])
    store.undo(pid, "a")
    store.undo(pid, "a")
    assert store.queue(pid) == [s1, s2, s0]
    store.set_labels(s0, {0: "O", 1: "O", 2: "O"}, "a")  # complete: out of the queue
    assert store.queue(pid) == [s1, s2]
    # scores must match the sentence and be finite; none without marginals
    with pytest.raises(ValueError, match="query scores"):
        store.save_predictions(vid, {s0: preds[s0]}, {s0: np.zeros(2)})
    with pytest.raises(ValueError, match="query scores"):
        store.save_predictions(vid, {s0: preds[s0]}, {s0: np.array([0.0, np.nan, 0.0])})
    with pytest.raises(ValueError, match="without marginals"):
        store.save_predictions(vid, {s0: preds[s0]}, {s1: scores[s1]})
    assert store.get_query_scores(vid)[s0].tobytes() == scores[s0].tobytes()
    # a version without query scores (trained before schema 4): the old rule, named so
    old = done_version(store, pid, classes=LABELS)
    store.save_predictions(old, preds)
    store.set_active_model(pid, old)
    assert store.get_query_scores(old) == {}
    assert store.queue_strategy(pid) == "least_confidence"
    assert store.queue(pid) == [s1, s2]  # 1 - 0.5 > 1 - 0.6
    assert store.ranked_queue(pid, 1)[0] == {"sentence_id": s1, "position": 1, "unlabeled": 3,
                                             "score": pytest.approx(0.5, abs=1 / 65535),
                                             "strategy": "least_confidence"}


def test_skip_order(store):
    pid = store.create_project("s", LABELS, "", [-1, 1])
    store.add_sentences(pid, [{"tokens": words(2)} for _ in range(4)])
    s0, s1, s2, s3 = store.sentence_ids(pid)
    store.skip(s0, "a")
    time.sleep(0.01)
    store.skip(s1, "a")
    assert store.queue(pid, annotator="a") == [s2, s3, s0, s1]
    assert store.queue(pid, annotator="b") == [s0, s1, s2, s3]
    assert store.queue(pid) == [s0, s1, s2, s3]
    time.sleep(0.01)
    store.skip(s0, "a")  # skipped again: least recently skipped first
    assert store.queue(pid, annotator="a") == [s2, s3, s1, s0]


# ------------------------------------------------------------------- model versions


def test_model_version_lifecycle(store):
    pid = store.create_project("m", LABELS, "", [-1, 1])
    v1 = store.start_model_version(pid, {"kernel": "linear"})
    v = store.get_model_version(v1)
    assert v["status"] == "running" and v["settings"]["pid"] == os.getpid()
    assert store.finish_model_version(v1, "/m/1", np.array([1.0, 2.5]),
                                      {"acc": np.float64(0.75)}, 42, classes=LABELS)
    v = store.get_model_version(v1)
    assert (v["status"], v["path"], v["bound_trace"], v["metrics"], v["n_labeled_tokens"],
            v["classes"], v["active"]) == ("done", "/m/1", [1.0, 2.5], {"acc": 0.75}, 42,
                                           LABELS, False)
    store.set_active_model(pid, v1)
    assert store.active_model(pid)["id"] == v1
    v2 = store.start_model_version(pid, {})
    assert store.fail_model_version(v2, "diverged") is True
    assert store.finish_model_version(v2, "/m/2", [], {}, 0) is False  # not running
    assert store.get_model_version(v2)["status"] == "failed"
    with pytest.raises(InputError, match="failed"):
        store.set_active_model(pid, v2)

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    v3 = store.start_model_version(pid, {}, pid=dead.pid)
    v4 = store.start_model_version(pid, {})  # this process: alive
    zombie_v = None
    if Path("/proc").is_dir():  # an exited, unreaped child is a zombie: gone too
        zombie = subprocess.Popen([sys.executable, "-c", "pass"])
        stat = Path(f"/proc/{zombie.pid}/stat")
        for _ in range(500):
            if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break
            time.sleep(0.01)
        zombie_v = store.start_model_version(pid, {"pid": zombie.pid})
    stale = store.mark_stale_running_failed(pid)
    if zombie_v is not None:
        zombie.wait()
    assert stale == [v3] + ([zombie_v] if zombie_v else [])
    v = store.get_model_version(v3)
    assert v["status"] == "failed" and str(dead.pid) in v["error"]
    assert store.get_model_version(v4)["status"] == "running"
    assert store.fail_model_version(v4, "stopped by user", status="killed")
    store.set_active_model(pid, None)
    assert store.active_model(pid) is None
    assert [x["id"] for x in store.list_model_versions(pid)] == sorted(
        [v1, v2, v3, v4] + ([zombie_v] if zombie_v else []))


# ---------------------------------------------------------------------- concurrency


def _process_writer(target, sentence_ids, annotator, err_dir=None):
    try:
        st = Store(target)
        for sid in sentence_ids:
            for t in range(20):
                st.set_label(sid, t, LABELS[t % 3], annotator)
        st.close()
    except BaseException:  # report the child's error to the parent test, then fail
        import traceback

        if err_dir is not None:
            (Path(err_dir) / f"{annotator}.err").write_text(traceback.format_exc())
        raise


def _concurrency_project(store, n_sentences):
    pid = store.create_project("c", LABELS, "", [-1, 1])
    store.add_sentences(pid, [{"tokens": words(20)} for _ in range(n_sentences)])
    return pid, store.sentence_ids(pid)


def _check_all_written(store, pid, ids, names):
    for k, sid in enumerate(ids):
        s = store.get_sentence(sid)
        assert s["labels"] == [LABELS[t % 3] for t in range(20)]
        assert set(s["annotators"]) == {names[k // 10]}
    hist = store.history(project_id=pid, limit=None)
    assert len(hist) == 20 * len(ids) and {h["action"] for h in hist} == {"set"}
    assert store.progress(pid)["labeled_tokens"] == 20 * len(ids)


def test_threads_share_one_store(store):
    pid, ids = _concurrency_project(store, 40)
    names = [f"t{k}" for k in range(4)]
    errors = []

    def work(k):
        try:
            _process_writer(store.target, [], names[k])  # a second Store on the same store
            for sid in ids[10 * k:10 * k + 10]:
                for t in range(20):
                    store.set_label(sid, t, LABELS[t % 3], names[k])
                    store.get_sentence(sid)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    _check_all_written(store, pid, ids, names)


def test_processes_share_one_store(store, tmp_path):
    pid, ids = _concurrency_project(store, 20)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_process_writer, args=(store.target, ids[10 * k:10 * k + 10],
                                                       f"p{k}", str(tmp_path)))
             for k in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(limit(60))
    errors = [tmp_path / f"p{k}.err" for k in range(2)]
    assert [p.exitcode for p in procs] == [0, 0], [e.read_text() for e in errors if e.exists()]
    _check_all_written(store, pid, ids, ["p0", "p1"])


# ---------------------------------------------------------------------- performance


def test_performance_5000_sentences(store):
    """Catches pathologies only (missing index, a query per sentence), not a benchmark."""
    pid = store.create_project("big", LABELS, "", [-1, 1])
    rng = np.random.default_rng(0)
    choice = rng.integers(0, 6, size=(5000, 25))
    sents = [{"tokens": [(f"w{i}", "NN") for i in range(25)],
              "labels": [LABELS[c] if c < 3 else None for c in row]} for row in choice]
    t0 = time.perf_counter()
    assert store.add_sentences(pid, sents) == 5000
    assert time.perf_counter() - t0 < limit(30)
    ids = store.sentence_ids(pid)
    vid = done_version(store, pid)
    conf = rng.uniform(0.4, 1.0, size=(5000, 25))  # > 1/3: the row maximum
    store.save_predictions(vid, {sid: marg(conf[k]) for k, sid in enumerate(ids)})
    store.set_active_model(pid, vid)
    sid = ids[2500]

    def timed(fn):
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    assert timed(lambda: store.get_sentence(sid)) < limit(0.5)
    assert timed(lambda: store.set_label(sid, 3, "O", "a")) < limit(0.5)
    assert timed(lambda: store.queue(pid, annotator="a", limit=20)) < limit(0.5)
    assert timed(lambda: store.get_sentences(pid, offset=2000, limit=50)) < limit(0.5)
    expected = min(range(5000), key=lambda k: min(
        c for c, lab in zip(conf[k], choice[k]) if lab >= 3) if (choice[k] >= 3).any() else 9)
    assert store.queue(pid, limit=1) == [ids[expected]]


def test_finish_model_version_can_activate_in_the_same_transaction(store):
    pid = store.create_project("act", LABELS, "", [-1, 1])
    v1 = store.start_model_version(pid, {})
    assert store.finish_model_version(v1, "m1", activate=True)
    v2 = store.start_model_version(pid, {})
    assert store.active_model(pid)["id"] == v1  # still the old one while v2 runs
    assert store.finish_model_version(v2, "m2", activate=True)
    assert store.active_model(pid)["id"] == v2
    assert [v["active"] for v in sorted(store.list_model_versions(pid), key=lambda v: v["id"])] \
        == [False, True]
    v3 = store.start_model_version(pid, {})
    store.fail_model_version(v3, "boom")
    assert not store.finish_model_version(v3, "m3", activate=True)  # not running: no change
    assert store.active_model(pid)["id"] == v2


# ---------------------------------------------------------------------- lock contention


def _open_new_store(path, barrier, out):
    barrier.wait()
    try:
        Store(path).list_projects()
        Path(out).write_text("ok")
    except Exception as exc:  # pragma: no cover - reported by the test
        Path(out).write_text(f"{type(exc).__name__}: {exc}")


def test_processes_opening_a_new_file_at_once_never_see_locked(tmp_path):
    """Switching a new file to WAL returns SQLITE_BUSY at once (no busy handler) to the
    other openers; the store retries instead of raising "database is locked"."""
    ctx = multiprocessing.get_context("fork")
    for trial in range(6):
        path = tmp_path / f"new{trial}.sqlite3"
        barrier = ctx.Barrier(4)
        outs = [tmp_path / f"new{trial}.{k}.out" for k in range(4)]
        procs = [ctx.Process(target=_open_new_store, args=(str(path), barrier, str(o)))
                 for o in outs]
        for p in procs:
            p.start()
        for p in procs:
            p.join(limit(60))
        assert [o.read_text() for o in outs] == ["ok"] * 4


def test_a_lock_held_past_the_timeout_is_a_clear_error(tmp_path):
    from gpsl.annotation import StoreBusyError

    store = Store(tmp_path / "s.sqlite3", timeout=0.3)
    pid = store.create_project("p", LABELS)
    store.add_sentences(pid, [{"tokens": words(3)}])
    sid = store.sentence_ids(pid)[0]
    holder = sqlite3.connect(store.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with pytest.raises(StoreBusyError) as info:
            store.set_label(sid, 0, "B", "ann")
        assert time.monotonic() - started < limit(5)
        assert "database is locked" not in str(info.value) and "busy" in str(info.value)
        assert isinstance(info.value, GpslError)
        assert store.get_sentence(sid)["labels"] == [None] * 3  # readers are not blocked
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    store.set_label(sid, 0, "B", "ann")  # the lock is gone: works again
    assert store.get_sentence(sid)["labels"][0] == "B"
