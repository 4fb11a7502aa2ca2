"""Every vote can leave the app: crowd JSONL, Label Studio, doccano and Prodigy exports of
every annotator's labels, the training labels and the leads' decisions, read back into a
new project without losing one (on SQLite and PostgreSQL); the crowd file through
``python -m gpsl aggregate``; a file another tool changed; bad files as one line."""

from __future__ import annotations

import json

import pytest

from gpsl.annotation import Store
from gpsl.annotation.interchange.vote_files import VOTE_FORMATS, collect, read_votes
from gpsl.cli import main as cli_main
from gpsl.errors import InputError

LABELS = ["B-PER", "I-PER", "B-LOC", "I-LOC", "O"]


def team_project(store: Store) -> int:
    """Votes of three people and an imported file, partial labels (an I- without its B-,
    an O vote beside no vote), an accepted suggestion, a tie, a lead's decision, a
    two-column token set, a held-out sentence with gold."""
    pid = store.create_project("team", LABELS)
    store.add_sentences(pid, [
        {"tokens": [["Ada", "NNP"], ["Lovelace", "NNP"], ["met", "VBD"], ["Charles", "NNP"],
                    ["in", "IN"], ["London", "NNP"]],
         "labels": [None, None, "O", None, None, None]},
        {"tokens": [["Grace", "NNP"], ["Hopper", "NNP"], ["slept", "VBD"]]},
        {"tokens": [["No", "DT"], ["votes", "NNS"]]},
    ], doc="f.conll", annotator="import:f.conll")
    store.add_sentences(pid, [{"tokens": [["Alan", "NNP"], ["ran", "VBD"]]}],
                        split="heldout", gold=[["B-PER", "O"]])
    s1, s2, _ = store.sentence_ids(pid, "train")
    store.set_labels(s1, {0: "B-PER", 1: "I-PER", 5: "B-LOC"}, "Ann")
    store.set_labels(s1, {0: "B-LOC", 1: "I-PER", 4: "O"}, "Bob")
    store.set_labels(s1, {3: "B-PER"}, "Cy", source="accepted")
    store.set_labels(s2, {1: "I-PER"}, "Ann")  # an I- without its B-: kept as given
    store.set_labels(s2, {1: "O", 2: "O"}, "Bob")
    store.adjudicate(s1, 0, "B-PER", "Lea")
    return pid


@pytest.mark.parametrize("fmt", list(VOTE_FORMATS))
def test_every_vote_round_trips(store, fmt):
    pid = team_project(store)
    before = collect(store.db, pid, None)
    assert {a for item in before for a in item.votes} == {"Ann", "Bob", "Cy", "import:f.conll"}
    text = store.export_votes(pid, fmt, None)
    copy = store.create_project(f"copy {fmt}", LABELS)
    assert store.import_votes(copy, text.encode("utf-8"), fmt, doc=f"votes.{fmt}") == 4
    after = collect(store.db, copy, None)
    assert [x.comparable() for x in after] == [x.comparable() for x in before]
    # the copy's votes are people's votes: the same agreement, conflicts and decisions
    def conflicts(p):
        return [{k: v for k, v in c.items() if k != "sentence_id"} for c in store.conflicts(p)]

    assert conflicts(copy) == conflicts(pid) and len(conflicts(pid)) == 2
    assert store.get_sentence(store.sentence_ids(copy)[0])["labels"][0] == "B-PER"
    history = store.adjudication_history(project_id=copy)
    assert [(h["new_label"], h["annotator"]) for h in history] == [("B-PER", "Lea")]
    sid = store.sentence_ids(copy)[0]
    assert {v["annotator"]: v["source"] for v in store.votes(sid) if v["token_index"] == 3} \
        == {"Cy": "accepted"}
    assert store.gold_data(copy)[2] == [["B-PER", "O"]]


def test_each_format_names_every_annotator(store):
    pid = team_project(store)
    crowd = [json.loads(line) for line in store.export_votes(pid, "crowd").splitlines()]
    first = crowd[0]
    assert [a["annotator"] for a in first["annotations"]] == ["Ann", "Bob", "Cy",
                                                              "import:f.conll"]
    assert first["derived"][0] == "B-PER" and first["derived"][1] == "I-PER"
    assert first["adjudications"] == [{"token": 0, "label": "B-PER", "lead": "Lea"}]
    assert first["annotations"][2]["accepted"] == [3]
    tasks = json.loads(store.export_votes(pid, "labelstudio"))
    anns = tasks[0]["annotations"]
    names = tasks[0]["data"]["gpsl"]["annotators"]
    assert sorted(names[str(a["completed_by"])] for a in anns) == [
        "Ann", "Bob", "Cy", "import:f.conll"]
    ann = next(a for a in anns if names[str(a["completed_by"])] == "Ann")
    assert [(r["value"]["text"], r["value"]["labels"]) for r in ann["result"]] == [
        ("Ada Lovelace", ["PER"]), ("London", ["LOC"])]
    assert tasks[0]["predictions"][0]["model_version"] == "gpsl training label"
    doccano = [json.loads(x) for x in store.export_votes(pid, "doccano").splitlines()]
    assert [r.get("annotator") for r in doccano[:5]] == [None, "Ann", "Bob", "Cy",
                                                          "import:f.conll"]
    prodigy = [json.loads(x) for x in store.export_votes(pid, "prodigy").splitlines()]
    assert [r.get("_annotator_id") for r in prodigy[:5]] == [None, "Ann", "Bob", "Cy",
                                                              "import:f.conll"]
    assert prodigy[1]["spans"][0] == {"start": 0, "end": 12, "token_start": 0,
                                      "token_end": 1, "label": "PER"}


def test_a_tie_is_exported_with_its_votes(store):
    """A tied token has no training label: the export keeps the votes beside it."""
    pid = team_project(store)
    s2 = store.sentence_ids(pid, "train")[1]
    assert store.get_sentence(s2)["labels"][1] is None  # Ann I-PER against Bob O
    line = json.loads(store.export_votes(pid, "crowd").splitlines()[1])
    assert line["derived"][1] is None
    assert {a["annotator"]: a["labels"][1] for a in line["annotations"]} == {
        "Ann": "I-PER", "Bob": "O"}


def test_the_crowd_export_is_the_input_of_aggregate(store, tmp_path, capsys):
    pid = team_project(store)
    path = tmp_path / "votes.jsonl"
    path.write_text(store.export_votes(pid, "crowd", None), encoding="utf-8")
    out = tmp_path / "agg.jsonl"
    report = tmp_path / "report.json"
    assert cli_main(["aggregate", "--method", "majority", "--output-format", "jsonl", "-o",
                     str(out), "--report", str(report), str(path)]) == 0
    rows = {r["annotator"]: r["votes"] for r in json.loads(report.read_text())["annotators"]}
    assert rows == {"Ann": 4, "Bob": 5, "Cy": 1, "import:f.conll": 1}  # every vote
    agg = [json.loads(x) for x in out.read_text().splitlines()]
    assert agg[0]["labels"][1] == "I-PER" and agg[1]["labels"][2] == "O"


def test_spans_changed_in_another_tool_win_over_the_exact_labels(store):
    pid = team_project(store)
    tasks = json.loads(store.export_votes(pid, "labelstudio"))
    names = tasks[0]["data"]["gpsl"]["annotators"]
    ann = next(a for a in tasks[0]["annotations"] if names[str(a["completed_by"])] == "Bob")
    ann["result"] = [{"value": {"start": 13, "end": 16, "labels": ["LOC"]}}]  # "met"
    items = read_votes(json.dumps(tasks), "labelstudio", "edited.json")
    assert items[0].votes["Bob"] == ["O", "O", "B-LOC", "O", "O", "O"]  # the spans, BIO
    assert items[0].votes["Ann"] == ["B-PER", "I-PER", None, None, None, "B-LOC"]  # exact
    # a doccano file of another tool: one record per sentence, annotator numbers
    items = read_votes('{"text": "Ada met Bob", "label": [[0, 3, "PER"]], "annotator": 7}\n',
                       "doccano", "theirs.jsonl")
    assert items[0].votes == {"user 7": ["B-PER", "O", "O"]}


@pytest.mark.parametrize("fmt, data, problem", [
    ("crowd", '{"tokens": ["a"], "annotations": [{"annotator": "x", "labels": ["B", "C"]}]}',
     "bad.jsonl:1: annotator 'x' has 2 labels for 1 tokens"),
    ("crowd", '{"tokens": ["a"], "annotations": [], "adjudications": [{"token": 5}]}',
     "bad.jsonl:1: adjudication of token 5: no such token"),
    ("labelstudio", '{"data": {}}', "bad.jsonl: a Label Studio export is a JSON list of tasks"),
    ("doccano", '{"text": "ab c", "label": [[0, 1, "X"]]}',
     "bad.jsonl:1: span [0, 1) 'a' (X) crosses a token boundary"),
    ("prodigy", '{"text": "a", "spans": [{"start": 0}]}', "bad.jsonl:1: bad span"),
    ("doccano", '{"text": "a", "annotator": "x"}\n{"text": "a", "annotator": "x", '
                '"gpsl": {"sentence": 1}}\n[1]', "bad.jsonl:3: each line must be a JSON object"),
])
def test_a_bad_vote_file_is_one_line(fmt, data, problem):
    with pytest.raises(InputError) as err:
        read_votes(data.encode("utf-8"), fmt, "bad.jsonl")
    assert str(err.value).startswith(problem) and "\n" not in str(err.value)


def test_an_import_with_an_unknown_label_writes_nothing(store):
    pid = team_project(store)
    text = store.export_votes(pid, "crowd").replace('"I-PER"', '"I-XYZ"')
    copy = store.create_project("copy", LABELS)
    with pytest.raises(InputError, match="'I-XYZ' is not in the project's label set"):
        store.import_votes(copy, text, "crowd", doc="v.jsonl")
    assert store.sentence_count(copy) == 0
    assert store.import_votes(copy, text, "crowd", doc="v.jsonl", add_labels=["I-XYZ"]) == 3
