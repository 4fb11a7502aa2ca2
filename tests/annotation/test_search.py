"""gpsl.annotation.corpus.search (read-only search, filters, numbers, token history) on SQLite and
on PostgreSQL (the ``store_target`` fixture of conftest.py)."""

from __future__ import annotations

import pytest

LABELS = ["B-PER", "I-PER", "B-LOC", "O"]



def project(store):
    pid = store.create_project("search", LABELS)
    store.add_sentences(pid, [
        {"tokens": "Anna Smith went to Paris .".split(),
         "labels": ["B-PER", "I-PER", "O", "O", "B-LOC", "O"]},            # 1: complete
        {"tokens": "New York is big_city 100% .".split()},                    # 2: unlabeled
        {"tokens": "Zoë met Ana in new york".split(), "labels": [None] * 6},   # 3
        {"tokens": "Bob went home".split(), "labels": [None, "O", None]},     # 4: partial
    ])
    store.add_sentences(pid, [{"tokens": "Anna flew to Rome".split()}], split="heldout",
                        gold=[["B-PER", "O", "O", "B-LOC"]])
    return pid, store.sentence_ids(pid)


def numbers(result):
    return [h["number"] for h in result["hits"]]


def test_text_search_status_and_paging(store):
    pid, ids = project(store)
    assert numbers(store.find_sentences(pid)) == [1, 2, 3, 4]  # train split, position order
    hit = store.find_sentences(pid, text_query="new YORK")
    assert numbers(hit) == [2, 3] and hit["total"] == 2
    assert [h["marks"] for h in hit["hits"]] == [[0, 1], [4, 5]]
    assert hit["hits"][0]["tokens"][:2] == ["New", "York"]
    assert numbers(store.find_sentences(pid, text_query="york is")) == [2]
    assert numbers(store.find_sentences(pid, text_query="ZOË")) == [3]  # non-ASCII folds
    assert numbers(store.find_sentences(pid, text_query="%")) == [2]    # LIKE wildcards
    assert numbers(store.find_sentences(pid, text_query="_")) == [2]    # are literal
    assert numbers(store.find_sentences(pid, text_query="Rome")) == []  # held out: not here
    assert numbers(store.find_sentences(pid, text_query="Rome", split=None)) == [5]
    assert numbers(store.find_sentences(pid, status="complete")) == [1]
    assert numbers(store.find_sentences(pid, status="partial")) == [4]
    assert numbers(store.find_sentences(pid, status="unlabeled")) == [2, 3]
    page = store.find_sentences(pid, offset=1, limit=2)
    assert numbers(page) == [2, 3] and page["total"] == 4
    page = store.find_sentences(pid, text_query="n", offset=1, limit=1)
    assert page["total"] == 4 and numbers(page) == [2]
    with pytest.raises(ValueError):
        store.find_sentences(pid, status="done")


def test_label_annotator_and_conflict_filters(store):
    pid, ids = project(store)
    store.set_labels(ids[2], {0: "B-PER", 2: "B-PER"}, "alice")
    store.set_labels(ids[2], {0: "B-PER", 2: "B-LOC"}, "bob")   # token 2 disputed
    store.set_labels(ids[3], {0: "B-PER"}, "bob")
    store.set_labels(ids[3], {1: "B-LOC"}, "alice")               # against the imported O
    assert store.annotators(pid) == ["alice", "bob", "import"]
    hit = store.find_sentences(pid, label="B-PER")
    assert numbers(hit) == [1, 3, 4]
    assert [h["marks"] for h in hit["hits"]] == [[0], [0], [0]]  # token 2 of 3 is a tie
    assert numbers(store.find_sentences(pid, annotator="bob")) == [3, 4]
    assert store.find_sentences(pid, annotator="alice")["hits"][1]["marks"] == [1]
    conflict = store.find_sentences(pid, conflicts=True)
    assert numbers(conflict) == [3] and conflict["hits"][0]["marks"] == [2]
    # a person's vote against another's is a conflict; against an import never
    store.set_labels(ids[3], {1: "O"}, "bob")
    assert numbers(store.find_sentences(pid, conflicts=True)) == [3, 4]
    both = store.find_sentences(pid, conflicts=True, annotator="alice", text_query="bob")
    assert numbers(both) == [4] and both["hits"][0]["marks"] == [0, 1]
    assert numbers(store.find_sentences(pid, label="B-LOC", status="complete")) == [1]


def test_numbers_and_token_history(store):
    pid, ids = project(store)
    assert store.sentence_numbers(pid) == (1, 5, 5)
    assert store.sentence_numbers(pid, "train") == (1, 4, 4)
    assert store.sentence_by_number(pid, 5) == {"sentence_id": ids[4], "split": "heldout"}
    assert store.sentence_by_number(pid, 2)["sentence_id"] == ids[1]
    assert store.sentence_by_number(pid, 6) is None
    assert store.sentence_by_number(pid, 0) is None
    assert store.sentence_numbers(store.create_project("empty", LABELS)) == (0, 0, 0)

    store.set_label(ids[3], 0, "B-PER", "alice")
    store.set_label(ids[3], 0, "B-LOC", "bob")
    store.undo(pid, "bob")
    hist = store.token_history(ids[3], 0)
    assert [(h["annotator"], h["action"], h["old_label"], h["new_label"], h["undone"])
            for h in hist] == [("bob", "undo", "B-LOC", None, False),
                               ("bob", "set", None, "B-LOC", True),
                               ("alice", "set", None, "B-PER", False)]
    assert all(h["at"] for h in hist)
    assert [h["action"] for h in store.token_history(ids[3], 1)] == ["import"]
    assert store.token_history(ids[3], 0, limit=1)[0]["action"] == "undo"
