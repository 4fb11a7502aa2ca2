"""The store's side of the labelling widget's queue (pages/_widget.py): a label step or an
undo sent with its event id (history batch ``w:<client>:<seq>``) is written exactly once,
however often the browser sends it again (a reload, a dropped connection), on SQLite and
on PostgreSQL (the ``store`` fixture runs both)."""

from __future__ import annotations

import pytest

from gpsl.annotation import InputError


def _setup(store):
    pid = store.create_project("events", ["B-PER", "I-PER", "O"])
    store.add_sentences(pid, [{"tokens": "a b c d".split()}])
    return pid, store.sentence_ids(pid)[0]


def test_a_step_sent_again_is_written_once(store):
    pid, sid = _setup(store)
    steps = [{0: "B-PER"}, {1: "I-PER"}, {2: "O"}]
    ids = store.set_label_steps(sid, steps[:2], "ann", batches=["w:c1:1", "w:c1:2"])
    assert len(ids) == 2
    # the same two again, with the third: only the third is new
    ids = store.set_label_steps(sid, steps, "ann", batches=["w:c1:1", "w:c1:2", "w:c1:3"])
    assert len(ids) == 1
    rows = [(h["token_index"], h["new_label"]) for h in store.history(sid, limit=None)]
    assert sorted(rows) == [(0, "B-PER"), (1, "I-PER"), (2, "O")]
    # another annotator's queue may use the same ids: their steps are theirs
    assert len(store.set_label_steps(sid, [{3: "O"}], "bob", batches=["w:c1:1"])) == 1
    assert store.get_sentence(sid)["votes"][3] == {"bob": "O"}


def test_an_undo_sent_again_reverts_one_step(store):
    pid, sid = _setup(store)
    store.set_label_steps(sid, [{0: "B-PER"}, {1: "I-PER", 2: "I-PER"}], "ann",
                          batches=["w:c:1", "w:c:2"])
    first = store.undo(pid, "ann", batch="w:c:3")
    assert sorted(c["token_index"] for c in first["changes"]) == [1, 2]
    assert store.undo(pid, "ann", batch="w:c:3") is None  # sent again: done already
    assert store.get_sentence(sid)["labels"] == ["B-PER", None, None, None]
    store.undo(pid, "ann", batch="w:c:4")  # a new undo: the step before
    assert store.get_sentence(sid)["labels"] == [None] * 4


def test_a_bad_step_writes_nothing_and_mismatched_batches_are_refused(store):
    pid, sid = _setup(store)
    with pytest.raises(InputError):
        store.set_label_steps(sid, [{0: "O"}, {1: "B-NOPE"}], "ann", batches=["w:x:1", "w:x:2"])
    assert store.get_sentence(sid)["labels"] == [None] * 4
    # the event ids of a failed write are free: the same events may be sent again
    assert len(store.set_label_steps(sid, [{0: "O"}], "ann", batches=["w:x:1"])) == 1
    with pytest.raises(ValueError):
        store.set_label_steps(sid, [{0: "O"}], "ann", batches=["a", "b"])
