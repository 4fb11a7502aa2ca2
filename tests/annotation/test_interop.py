"""Annotations in and out of the tools annotators come from: Label Studio JSON, doccano
JSONL, Prodigy JSONL and CoNLL-2003 columns, with round trips through the store."""

from __future__ import annotations

import json

import pytest

from gpsl.annotation import Store
from gpsl.annotation.interchange import exports as exp
from gpsl.annotation.interchange import imports as imp
from gpsl.errors import InputError
from gpsl.io import Sentence
from tests.support.limits import limit

TEXT = "Anna Smith lives in New York, says Bob."
SPANS = [(0, 10, "PER"), (20, 28, "LOC"), (35, 38, "PER")]
TOKENS = ["Anna", "Smith", "lives", "in", "New", "York", ",", "says", "Bob", "."]
LABELS = ["B-PER", "I-PER", "O", "O", "B-LOC", "I-LOC", "O", "O", "B-PER", "O"]


def _check(sentences):
    assert len(sentences) == 1
    s = sentences[0]
    assert [t[0] for t in s.tokens] == TOKENS and s.labels == LABELS


def test_doccano_jsonl_spans_become_bio_tokens():
    line = json.dumps({"text": TEXT, "label": [list(sp) for sp in SPANS]})
    _check(imp.parse_upload((line + "\n").encode(), "d.jsonl", "doccano"))


def test_prodigy_jsonl_with_and_without_tokens():
    rec = {"text": TEXT, "spans": [{"start": a, "end": b, "label": t} for a, b, t in SPANS]}
    _check(imp.parse_upload(json.dumps(rec).encode(), "p.jsonl", "prodigy"))
    rejected = dict(rec, answer="reject")
    got = imp.parse_upload((json.dumps(rec) + "\n" + json.dumps(rejected) + "\n").encode(),
                           "p.jsonl", "prodigy")
    _check(got)  # rejected answers are not annotations


def test_label_studio_json_tasks():
    task = {"data": {"text": TEXT}, "annotations": [{"result": [
        {"from_name": "label", "to_name": "text", "type": "labels",
         "value": {"start": a, "end": b, "text": TEXT[a:b], "labels": [t]}}
        for a, b, t in SPANS]}]}
    _check(imp.parse_upload(json.dumps([task]).encode(), "ls.json", "labelstudio"))


def test_conll2003_columns_skip_docstart():
    text = ("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n"
            "German JJ B-NP B-MISC\n\nPeter NNP B-NP B-PER\n")
    got = imp.parse_upload(text.encode(), "eng.train", "conll2003")
    assert [[t[0] for t in s.tokens] for s in got] == [["EU", "rejects", "German"], ["Peter"]]
    assert got[0].labels == ["B-ORG", "O", "B-MISC"] and got[0].tokens[0] == ("EU", "NNP",
                                                                                "B-NP")


def test_a_span_across_a_token_boundary_is_one_clear_line():
    line = json.dumps({"text": TEXT, "label": [[0, 3, "PER"]]})  # "Ann" of "Anna"
    with pytest.raises(InputError) as info:
        imp.parse_upload(("\n" + line + "\n").encode(), "d.jsonl", "doccano")
    text = str(info.value)
    assert text == "d.jsonl:2: span [0, 3) 'Ann' (PER) crosses a token boundary"
    bad = json.dumps({"text": TEXT, "label": [[0, 10, "PER"], [5, 16, "X"]]})
    with pytest.raises(InputError, match="overlaps another span"):
        imp.parse_upload(bad.encode(), "d.jsonl", "doccano")
    with pytest.raises(InputError, match=r"^ls.json: a Label Studio export is a JSON list"):
        imp.parse_upload(b"{}", "ls.json", "labelstudio")
    with pytest.raises(InputError, match=r"^p.jsonl:1: not valid JSON"):
        imp.parse_upload(b"{nope\n", "p.jsonl", "prodigy")


SENTENCES = [Sentence([(w,) for w in TOKENS], LABELS),
             Sentence([("Rome",), ("is",), ("old",)], ["B-LOC", "O", "O"]),
             Sentence([("no",), ("entities",)], ["O", "O"])]


@pytest.mark.parametrize("fmt, name", [("doccano", "x.jsonl"), ("prodigy", "x.jsonl"),
                                       ("labelstudio", "x.json"), ("conll2003", "x.txt")])
def test_round_trips(fmt, name):
    text = exp.format_sentences(SENTENCES, fmt)
    back = imp.parse_upload(text.encode(), name, fmt)
    assert [[t[0] for t in s.tokens] for s in back] == [[t[0] for t in s.tokens]
                                                         for s in SENTENCES]
    assert [s.labels for s in back] == [s.labels for s in SENTENCES]
    assert exp.format_sentences(back, fmt) == text  # and back out the same


def test_through_the_store(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    line = json.dumps({"text": TEXT, "label": [list(sp) for sp in SPANS]})
    sents = imp.parse_upload(line.encode(), "d.jsonl", "doccano")
    labels = imp.summarize(sents).labels
    pid = store.create_project_from_sentences("spans", sents, labels, "", (-1, 1),
                                              doc="d.jsonl")
    out = exp.export_annotations(store.db, pid, "doccano")
    assert json.loads(out) == {"text": " ".join(TOKENS),
                               "label": [[0, 10, "PER"], [20, 28, "LOC"], [36, 39, "PER"]]}
    ls = json.loads(exp.export_annotations(store.db, pid, "labelstudio"))
    assert ls[0]["annotations"][0]["result"][1]["value"]["labels"] == ["LOC"]


def test_the_data_page_offers_the_other_tools_formats(tmp_path, monkeypatch):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("GPSL_DB", str(tmp_path / "gpsl.sqlite3"))
    at = AppTest.from_file(str(root / "app.py"), default_timeout=limit(60)).run()
    at.switch_page("pages/data.py").run()
    assert not at.exception, at.exception
    box = at.selectbox(key="exp_tool_fmt")
    assert box.options == ["Label Studio JSON", "doccano JSONL", "Prodigy JSONL",
                           "CoNLL-2003 columns"]
    box.set_value("doccano").run()
    assert not at.exception and not at.error
