"""Hostile input for every import format and every command, driven by hypothesis: each input
is accepted (and what was accepted is storable) or refused with one line naming the file;
never an uncaught exception, a message of several lines, a partial import or a hang.

The generators are the benchmark's (:mod:`bench.robustness.hostile`); hypothesis hands them
its own ``Random``, so it chooses (and shrinks) every value.  Each trial's wall-clock limit
is :func:`_limits.limit` (the machine's load counted); the examples are bounded.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.robustness import hostile
from gpsl.annotation.interchange import imports
from gpsl.errors import InputError
from tests.support.limits import limit

TRIAL = 60.0  # seconds a trial may take on an idle machine before it is a hang
NAMES = ["up.json", "up.jsonl", "", "a\nb.json", "évil\x00.txt", "x\ud800.conll"]
SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])


def _base(store):
    pid = store.create_project("base", ["B-PER", "I-PER", "O"])
    store.add_sentences(pid, [{"tokens": [["Anna"], ["went"]], "labels": ["B-PER", "O"]}])
    return pid


def _check_uploads(store, examples: int):
    base = _base(store)

    @settings(max_examples=examples, **SETTINGS)
    @given(fmt=st.sampled_from(sorted(hostile.UPLOADS)), rng=st.randoms(use_true_random=False),
           name=st.sampled_from(NAMES))
    def trial(fmt, rng, name):
        data = hostile.UPLOADS[fmt](rng)
        outcome, detail = hostile.upload_trial(store, base, data, fmt, name, rng,
                                               limit(TRIAL))
        assert outcome in ("accepted", "rejected_cleanly"), (outcome, detail, data[:300])

    trial()


def test_every_import_format_on_sqlite(tmp_path):
    from gpsl.annotation import Store

    with Store(tmp_path / "fuzz.sqlite3") as store:
        _check_uploads(store, 210)


def test_every_import_format_on_postgresql(postgres_server):
    """NUL and lone surrogates never reach the server: refused at parse."""
    from gpsl.annotation import Store

    with Store(postgres_server.new_database()) as store:
        _check_uploads(store, 70)


@pytest.fixture(scope="module")
def cli_files(tmp_path_factory):
    import random

    work = tmp_path_factory.mktemp("cli")
    return work, hostile.cli_files(work, random.Random(0))


@settings(max_examples=140, **SETTINGS)
@given(command=st.sampled_from(hostile.COMMANDS), rng=st.randoms(use_true_random=False),
       k=st.integers(0, 10**6))
def test_every_command(cli_files, command, rng, k):
    work, files = cli_files
    argv = hostile.cli_args(rng, command, hostile.fresh_files(files, work, rng, k))
    outcome, detail = hostile.cli_trial(argv, limit(TRIAL))
    assert outcome in ("accepted", "rejected_cleanly"), (outcome, detail)
    assert (work / "not_a_model" / "keep.txt").exists()  # nothing else is ever replaced


# ----------------------------------------------------------------------------- the issue's


TEXT = "Anna Smith lives in Paris ."


@pytest.mark.parametrize("fmt, record, why", [
    ("doccano", {"text": TEXT, "label": [[0, 4, None]]}, "span label must be text"),
    ("doccano", {"text": TEXT, "label": [[0.5, 4, "PER"]]}, "whole number, found a number 0.5"),
    ("doccano", {"text": TEXT, "label": [[0, 4, True]]}, "must be text, found a boolean"),
    ("doccano", {"text": 5, "label": []}, "has no text"),
    ("doccano", {"text": TEXT, "label": "PER"}, '"label" must be a list'),
    ("doccano", {"text": TEXT, "label": [[0, 99, "PER"]]}, "outside the text"),
    ("doccano", {"text": "a\ud800b", "label": []}, "unpaired surrogate"),
    ("doccano", {"text": "a\x00b", "label": []}, "NUL"),
    ("prodigy", {"text": TEXT, "tokens": [{"start": 0, "end": 4},
                                          {"start": 40, "end": 44}]}, "outside the text"),
    ("prodigy", {"text": TEXT, "tokens": [{"start": 4, "end": 4}]}, "is empty"),
    ("prodigy", {"text": TEXT, "spans": [{"start": 0, "end": 4, "label": ["PER"]}]},
     "must be text, found a list"),
    ("prodigy", {"text": TEXT, "answer": 3}, '"answer" must be text'),
    ("labelstudio", [{"data": {"text": TEXT}, "annotations": 5}],
     '"annotations" must be a list'),
    ("labelstudio", [{"data": {"text": TEXT}, "annotations": [{"result": {"value": {}}}]}],
     '"result" must be a list'),
    ("labelstudio", [{"data": {"text": TEXT}, "annotations": [{"result": [
        {"type": "labels", "value": {"start": 0, "end": 4, "labels": "PER"}}]}]}],
     "labels must be a list, found text 'PER'"),
    ("labelstudio", [{"data": {"text": TEXT}, "annotations": [{"result": [
        {"type": "labels", "value": {"start": 0, "end": 4, "labels": ["PER", "LOC"]}}]}]}],
     "one label"),
])
def test_a_wrong_type_is_refused_never_coerced_into_a_label(fmt, record, why):
    name = "x.json" if fmt == "labelstudio" else "x.jsonl"
    with pytest.raises(InputError) as info:
        imports.parse_upload(json.dumps(record).encode("utf-8", "surrogatepass"), name, fmt)
    line = str(info.value)
    assert line.startswith(f"{name}:") and "\n" not in line and why in line, line


def test_records_without_annotations_stay_unlabeled():
    """A doccano record without ``label``, a Prodigy record without ``spans`` and a Label
    Studio task without an annotation are unlabeled text: never every token ``O``."""
    for fmt, record in (("doccano", {"text": TEXT}), ("prodigy", {"text": TEXT}),
                        ("labelstudio", [{"data": {"text": TEXT}}])):
        (s,) = imports.parse_upload(json.dumps(record).encode(), "x.json", fmt)
        assert s.labels == [None] * len(s.tokens), fmt
    (s,) = imports.parse_upload(json.dumps({"text": TEXT, "label": []}).encode(), "x.jsonl",
                                "doccano")
    assert s.labels == ["O"] * len(s.tokens)  # an annotation that found no entity


def test_deep_nesting_and_huge_numbers_are_one_line_at_once():
    for data in (b"[" * 200_000, b'{"text": "' + b"9" * 10 + b'", "label": [[' + b"9" * 9000
                 + b', 1, "X"]]}', b'{"text": NaN}', b"[{}] trailing"):
        for fmt in ("doccano", "prodigy", "labelstudio"):
            with pytest.raises(InputError) as info:
                imports.parse_upload(data, "deep.json", fmt)
            assert "\n" not in str(info.value) and str(info.value).startswith("deep.json")
