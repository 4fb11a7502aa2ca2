"""The streamed upload (issue 37): imports.Upload reads the same sentences as the whole-file
readers, refuses with the same first line, and imports chunk by chunk in one transaction."""

import json

import pytest

from gpsl.annotation import Store
from gpsl.annotation.interchange import imports as imp
from gpsl.errors import InputError

CONLL = b"Anna B-PER\nwent O\n\nRome B-LOC\nis O\nbig O\n\nBob B-PER\n\nx _\ny O\n"


def _files():
    doccano = "\n".join(json.dumps({"text": t, "label": lab}) for t, lab in [
        ("Ann ran home", [[0, 3, "PER"]]), ("Rome is big", [[0, 4, "LOC"]]),
        ("No label here", None), ("Bob ran", [])]).replace("null", "[]") + "\n"
    prodigy = "\r\n".join(json.dumps(r) for r in [
        {"text": "Ann ran", "spans": [{"start": 0, "end": 3, "label": "PER"}]},
        {"text": "skip me", "answer": "reject"}, {"text": "Bob sat"}]) + "\r\n"
    jsonl = "\n".join(json.dumps(r) for r in [
        {"tokens": ["a", "b"], "labels": ["B-X", "O"]}, {"tokens": ["c"]},
        {"id": 3, "tokens": [["d", "D"]], "labels": None}]).replace('[["d", "D"]]', '["d"]')
    ls = json.dumps([{"data": {"text": "Ann ran"}, "annotations": [{"result": [
        {"type": "labels", "value": {"start": 0, "end": 3, "labels": ["PER"]}}]}]},
        {"data": {"text": "Bob sat"}}], indent=1)
    return [("f.conll", "conll", CONLL), ("f.conll", "conll", b"a\tB-X\nb\tO\n\r\nc\tO\n"),
            ("f.txt", "text", b"\xef\xbb\xbfone two\n\n three  four five \n"),
            ("f.jsonl", "jsonl", jsonl.encode()),
            ("d.jsonl", "doccano", b"\xef\xbb\xbf\xef\xbb\xbf" + doccano.encode()),
            ("p.jsonl", "prodigy", prodigy.encode()), ("ls.json", "labelstudio", ls.encode()),
            ("eng.train", "conll2003", b"-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\n"
             b"rejects VBZ B-VP O\n\nPeter NNP B-NP B-PER\n")]


def _as_tuples(sentences):
    return [(list(map(tuple, s.tokens)), list(s.labels), s.line) for s in sentences]


@pytest.mark.parametrize("name,fmt,data", _files(), ids=lambda v: v if isinstance(v, str)
                         else None)
def test_the_stream_reads_what_parse_upload_reads(name, fmt, data):
    whole = imp.parse_upload(data, name, fmt)
    up = imp.Upload(data, name, fmt)
    assert up.summary() == imp.summarize(whole)
    assert up.unknown_labels(["O"]) == imp.unknown_labels(whole, ["O"])
    assert len(up) == len(whole) > 0
    first, again = _as_tuples(up), _as_tuples(up)  # iterable more than once
    assert first == again == _as_tuples(whole)
    assert [len(c) for c in up.chunks(2)] == [2] * (len(whole) // 2) + [1] * (len(whole) % 2)


@pytest.mark.parametrize("name,fmt,data,message", [
    # the reader's problem (line 7) before an earlier bad label (line 1): parse_upload's order
    ("f.conll", "conll", b"a B\x07X\nb O\n\nc O\nd O\n\ne f O\n", ":7: expected 2 columns"),
    # a sentence too long (line 3) before an earlier bad label (line 1), span formats
    ("e.train", "conll2003", b"a B\x07X\n\nb O\nc O\nd O\ne O\n",
     ":3: sentence of 4 tokens (the limit is 3)"),
    # UTF-8 checked before JSON (the bad JSON is on line 1, the bad byte on line 2)
    ("d.jsonl", "doccano", b"{nope\n\"\xff\"\n", ":2: not UTF-8 text (byte 7)"),
    ("d.jsonl", "doccano", b"{nope\n\"\x00\"\n", ":2: NUL byte in input"),
    ("d.jsonl", "doccano", b"\n\n", "no sentences found"),
])
def test_the_first_pass_refuses_as_parse_upload_did(name, fmt, data, message):
    with pytest.raises(InputError) as whole:
        imp.parse_upload(data, name, fmt, max_tokens=3)
    up = imp.Upload(data, name, fmt, max_tokens=3)
    with pytest.raises(InputError) as streamed:
        up.summary()
    assert str(streamed.value) == str(whole.value)
    assert message in str(streamed.value) and str(streamed.value).startswith(name)
    with pytest.raises(InputError):
        list(up)  # nothing is handed out of a refused file


def _file(n: int, bad_at: int | None = None) -> bytes:
    """``n`` sentences of two tokens; sentence ``bad_at`` (1-based) labeled B-LOC."""
    return b"".join(b"w%d B-PER\nv O\n\n" % k if k + 1 != bad_at else b"Rome B-LOC\nv O\n\n"
                    for k in range(n))


def test_an_import_is_one_transaction_across_chunks(store, monkeypatch):
    """A bad sentence in the last chunk, after earlier chunks were written inside the
    transaction: nothing stored (nor the new labels); the message as the list import's."""
    monkeypatch.setattr(imp, "CHUNK", 3)
    pid = store.create_project("p", ["B-PER", "O"], "", (-1, 1))
    store.add_sentences(pid, [{"tokens": [["a"]], "labels": ["O"]}])
    data = _file(8, bad_at=8)
    with pytest.raises(InputError) as listed:
        store.import_sentences(pid, imp.parse_upload(data, "g.conll"), doc="g.conll",
                               add_labels=["B-MISC"])
    for split in ("train", "heldout"):
        with pytest.raises(InputError) as streamed:
            store.import_sentences(pid, store.open_upload(data, "g.conll"), doc="g.conll",
                                   split=split, add_labels=["B-MISC"])
        assert str(streamed.value) == str(listed.value)
        assert str(streamed.value).startswith("g.conll:22: sentence 8, token 1 ('Rome')")
        assert store.sentence_count(pid) == 1
        assert store.get_project(pid)["labels"] == ["B-PER", "O"]
    assert len(store.history(project_id=pid)) == 1

    up = store.open_upload(data, "g.conll")
    assert up.unknown_labels(["B-PER", "O"]) == ["B-LOC"]
    assert store.import_sentences(pid, up, doc="g.conll", annotator="import:g.conll",
                                  add_labels=up.unknown_labels(["B-PER", "O"])) == 8
    assert store.sentence_count(pid) == 9
    rows = store.get_sentences(pid)
    assert [r["position"] for r in rows] == list(range(9))
    assert rows[8]["tokens"] == [("Rome",), ("v",)] and rows[8]["line"] == 22
    assert rows[8]["labels"] == ["B-LOC", "O"] and rows[1]["labels"] == ["B-PER", "O"]
    held = store.import_sentences(pid, store.open_upload(_file(4), "h.conll"),
                                  split="heldout", doc="h.conll")
    assert held == 4 and store.sentence_count(pid, "heldout") == 4
    assert store.gold_data(pid)[2] == [["B-PER", "O"]] * 4


def test_a_project_from_an_upload_is_the_project_from_its_list(store, monkeypatch):
    monkeypatch.setattr(imp, "CHUNK", 4)
    data = _file(11, bad_at=3)
    labels = ["B-PER", "B-LOC", "O"]
    kw = {"heldout_fraction": 0.3, "doc": "f.conll", "annotator": "import:f.conll"}
    a = store.create_project_from_sentences("list", imp.parse_upload(data, "f.conll"), labels,
                                            None, (-1, 1), **kw)
    b = store.create_project_from_sentences("stream", store.open_upload(data, "f.conll"),
                                            labels, None, (-1, 1), **kw)
    pa, pb = store.get_project(a), store.get_project(b)
    assert (pa["labels"], pa["template"]) == (pb["labels"], pb["template"])

    def rows(pid):
        return [(r["split"], r["tokens"], r["labels"], r["line"], r["doc"])
                for r in store.get_sentences(pid)]

    assert rows(a) == rows(b) and store.sentence_count(b, "heldout") == 3
    assert store.gold_data(a)[1:] == store.gold_data(b)[1:]  # all but the ids
    assert [h["annotator"] for h in store.history(project_id=b)][:1] == ["import:f.conll"]

    # refused whole: a label outside the set (named as before), a bad sentence in the
    # held-out part after the training part was written, a taken name
    with pytest.raises(InputError) as listed:
        store.create_project_from_sentences("x", imp.parse_upload(data, "f.conll"),
                                            ["B-PER", "O"], None, (-1, 1), **kw)
    with pytest.raises(InputError) as streamed:
        store.create_project_from_sentences("x", store.open_upload(data, "f.conll"),
                                            ["B-PER", "O"], None, (-1, 1), **kw)
    assert str(streamed.value) == str(listed.value)
    assert "sentence 3, token 1 ('Rome')" in str(streamed.value)
    bad = _file(10) + b"a b O\n"  # three columns in the last (held-out) sentence
    with pytest.raises(InputError, match="expected 2 columns"):
        store.open_upload(bad, "f.conll").summary()
    with pytest.raises(InputError, match="already exists"):
        store.create_project_from_sentences("stream", store.open_upload(data, "f.conll"),
                                            labels, None, (-1, 1))
    assert [p["name"] for p in store.list_projects()] == ["list", "stream"]


def test_a_failure_in_the_held_out_part_leaves_no_project(tmp_path, monkeypatch):
    """The held-out sentences are written after the training ones, in the same
    transaction: a failure there leaves no project and no sentence."""
    import sqlite3

    import sqlalchemy

    monkeypatch.setattr(imp, "CHUNK", 2)
    store = Store(tmp_path / "db.sqlite3")
    with sqlite3.connect(store.path) as conn:
        conn.execute("CREATE TRIGGER boom BEFORE INSERT ON sentences WHEN NEW.split = "
                     "'heldout' BEGIN SELECT RAISE(ABORT, 'injected failure'); END")
    with pytest.raises(sqlalchemy.exc.IntegrityError):
        store.create_project_from_sentences("p", store.open_upload(_file(9), "f.conll"),
                                            ["B-PER", "O"], "", (-1, 1), heldout_fraction=0.2)
    assert store.list_projects() == []
    store.close()


def test_an_import_leaves_the_planner_statistics_fresh(store):
    """After a bulk import the store's tables are analysed (PostgreSQL's ``ANALYZE``: the
    planner sees the rows just written, not an empty table); on SQLite nothing is needed."""
    from sqlalchemy import text

    data = _file(11)
    pid = store.create_project_from_sentences(
        "fresh", store.open_upload(data, "f.conll"), ["B-PER", "B-LOC", "O"], None, (-1, 1),
        doc="f.conll", annotator="import:f.conll")
    assert store.sentence_count(pid) == 11
    if store.db.dialect != "postgresql":
        store.db.analyze()  # a no-op there, never an error
        return
    seen = store.db.read(lambda c: dict(c.execute(text(
        "SELECT relname, reltuples FROM pg_class WHERE relname IN ('sentences', 'votes')"))
        .all()))
    assert seen["sentences"] == 11  # counted by ANALYZE (an unanalysed table has -1)
    assert seen["votes"] > 0
