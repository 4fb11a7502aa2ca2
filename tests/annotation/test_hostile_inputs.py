"""Hostile sizes and silently wrong imports (issue 42): a label set past MAX_LABELS and a
file with 100k distinct labels are refused in one line (no quadratic count), a team of
thousands keeps bounded kappa matrices and the same mean kappa as the dense computation,
span types that are token labels are refused, a zero-width space stays inside its word,
stacked byte-order marks are read, "Ann" and "Ann " are one person, and a tab-separated
column holding a space is refused instead of being cut in two; a bad scheduler address, a
template of 20,000 lines, a named pipe without a writer, a crowd zip with a 300-byte name or
a 2,000-deep path and a 4,000-digit offset each end in one short line."""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from bench.robustness.issue42 import zip_of
from gpsl import agreement
from gpsl.annotation import InputError, read_crowd_upload
from gpsl.annotation.interchange.imports import parse_upload
from gpsl.annotation.labeling import team
from gpsl.annotation.store import validate
from gpsl.cli.main import main
from gpsl.distributed import connect
from gpsl.features import Template
from gpsl.io import read_conll

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"


def one_line(info) -> str:
    text = str(info.value)
    assert "\n" not in text and len(text) < 300
    return text


def test_a_label_set_past_the_limit_is_refused_unread():
    with pytest.raises(InputError, match="at most 1,000") as info:
        validate.label_set([f"L{i}" for i in range(100_000)])
    one_line(info)
    assert validate.label_set(["B-X", "O"]) == ["B-X", "O"]
    with pytest.raises(InputError, match="duplicate labels: O"):
        validate.label_set(["O", "B-X", "O"])


@pytest.mark.parametrize("fmt, body", [
    ("conll", lambda n: "".join(f"w{i} L{i}\n\n" for i in range(n))),
    ("jsonl", lambda n: "\n".join(json.dumps({"tokens": [f"w{i}"], "labels": [f"L{i}"]})
                                  for i in range(n))),
    ("doccano", lambda n: "\n".join(json.dumps({"text": f"w{i} x",
                                                 "label": [[0, len(f"w{i}"), f"T{i}"]]})
                                    for i in range(n))),
])
def test_a_file_with_100k_distinct_labels_is_refused_in_one_line(fmt, body):
    with pytest.raises(InputError, match="distinct labels") as info:
        parse_upload(body(100_000).encode(), f"x.{'conll' if fmt == 'conll' else 'jsonl'}",
                     fmt)
    assert "line" in one_line(info) or ":" in str(info.value)


def test_mean_kappa_over_all_pairs_equals_the_dense_matrices():
    rng = np.random.default_rng(3)
    items = {}
    for t in range(400):
        who = rng.choice(30, size=3, replace=False)
        items[t] = {f"a{int(a)}": ["X", "Y", "O"][int(rng.integers(3))] for a in who}
    counts, pairs = agreement.pair_kappas(items)
    names, kappa, shared = agreement.pairwise_kappa(items)
    means = agreement.mean_kappa(counts, pairs)
    for i, a in enumerate(names):
        w = shared[i].astype(float).copy()
        w[i] = 0.0
        ok = (w > 0) & np.isfinite(kappa[i])
        dense = float(np.sum(w[ok] * kappa[i][ok]) / np.sum(w[ok])) if ok.any() else None
        assert means[a] == pytest.approx(dense, abs=1e-12) if dense is not None \
            else means[a] is None
        assert shared[i, i] == counts[a]


def test_a_large_team_keeps_bounded_matrices(store):
    n_people = team.MAX_MATRIX + 50
    labels = ["B-PER", "I-PER", "O"]
    pid = store.create_project("crowd", labels)
    rng = np.random.default_rng(0)
    lines = []
    for s in range(n_people):
        who = [s, (s + 1) % n_people, (s + 7) % n_people]
        lines.append(json.dumps({"tokens": ["a", "b", "c"], "annotations": [
            {"annotator": f"w{a:04d}", "labels": [labels[int(x)] for x in rng.integers(0, 3, 3)]}
            for a in who]}))
    store.import_votes(pid, "\n".join(lines), "crowd")
    figures = store.reports.team(pid)
    assert len(figures.people) == n_people
    assert len(figures.annotators) == team.MAX_MATRIX
    assert np.asarray(figures.kappa).shape == (team.MAX_MATRIX, team.MAX_MATRIX)
    assert sum(r.kappa is not None for r in figures.people) == n_people


@pytest.mark.parametrize("tag", ["O", "B-PER", "I-LOC", "_"])
def test_a_span_typed_as_a_token_label_is_refused(tag):
    for fmt, rec in (("doccano", {"text": "Ann ran", "label": [[0, 3, tag]]}),
                     ("prodigy", {"text": "Ann ran", "spans": [{"start": 0, "end": 3,
                                                                 "label": tag}]})):
        with pytest.raises(InputError, match="not an entity type") as info:
            parse_upload(json.dumps(rec).encode(), "x.jsonl", fmt)
        one_line(info)
    got = parse_upload(json.dumps({"text": "Ann ran", "label": [[0, 3, "PER"]]}).encode(),
                       "x.jsonl", "doccano")
    assert got[0].labels == ["B-PER", "O"]


def test_a_zero_width_space_stays_inside_its_word():
    got = parse_upload(json.dumps({"text": "An\u200bn ran.", "label": []}).encode(),
                       "x.jsonl", "doccano")
    assert [t[0] for t in got[0].tokens] == ["An\u200bn", "ran", "."]


def test_stacked_byte_order_marks_are_read():
    data = "\ufeff\ufeff-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\n".encode()
    got = parse_upload(data, "x.txt", "conll2003")
    assert [s.tokens for s in got] == [[("EU", "NNP", "B-NP")]]
    assert got[0].labels == ["B-ORG"]


def test_a_name_that_differs_only_in_spaces_is_refused_never_dropped(store):
    pid = store.create_project("p", ["B-PER", "I-PER", "O"])
    rec = {"tokens": ["Ann", "ran"], "annotations": [
        {"annotator": "Ann", "labels": ["B-PER", "O"]},
        {"annotator": "Ann ", "labels": ["O", "O"]}]}
    with pytest.raises(InputError, match="duplicate annotator 'Ann '") as info:
        store.import_votes(pid, json.dumps(rec), "crowd")
    one_line(info)
    assert store.team_votes(pid) == []


def test_a_tab_separated_column_with_a_space_is_refused_not_cut():
    data = b"a\t+cmd|'/c calc'!A0\n"
    with pytest.raises(InputError, match="column 2 of a tab-separated line holds a space") \
            as info:
        parse_upload(data, "x.conll", "conll")
    one_line(info)
    assert parse_upload(b"a\tB-X\nb  O\n", "x.conll", "conll")[0].labels == ["B-X", "O"]


# ----------------------------------------------------------------------------- hangs, messages


def run_cli(argv) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


@pytest.mark.parametrize("address", ["inproc://x", "file:///etc/passwd", "tcp://[::1",
                                     "tcp://host", "tcp://h:1/path", "x" * 5000])
def test_a_bad_scheduler_address_is_refused_before_anything_connects(tmp_path, address):
    code, err = run_cli(["train", "--scheduler", address, str(SAMPLE / "sample.conll"),
                         str(tmp_path / "m")])
    assert code == 2 and err.count("\n") == 1 and len(err) < 400, err
    assert "--scheduler" in err
    with pytest.raises(InputError) as info:
        connect(address)
    one_line(info)


def test_a_template_of_20000_lines_is_refused_in_one_line(tmp_path):
    text = "\n".join(f"U{i:05d}:%x[0,0]" for i in range(20_000))
    with pytest.raises(InputError, match="characters|feature lines") as info:
        Template.parse(text)
    one_line(info)
    short = "\n".join(f"U{i:04d}:%x[0,0]" for i in range(1200))  # under the characters
    with pytest.raises(InputError, match="more than 1,000 feature lines"):
        Template.parse(short)
    assert len(Template.parse("U00:%x[0,0]\nB\n").unigrams) == 1


def test_a_named_pipe_without_a_writer_is_refused_after_the_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv("GPSL_PIPE_TIMEOUT", "0.5")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, err = run_cli(["train", "-t", str(fifo), str(SAMPLE / "sample.conll"),
                         str(tmp_path / "m")])
    assert code == 2 and "named pipe that sent nothing" in err and err.count("\n") == 1
    code, err = run_cli(["test", str(SAMPLE / "no-model"), str(fifo)])
    assert code == 2 and err.count("\n") == 1

    def write():
        with open(fifo, "w", encoding="utf-8") as f:
            f.write("Anna B-PER\nran O\n\n")

    monkeypatch.setenv("GPSL_PIPE_TIMEOUT", "30")
    writer = threading.Thread(target=write)
    writer.start()
    got = read_conll(fifo)
    writer.join(10)
    assert [s.labels for s in got] == [["B-PER", "O"]]


@pytest.mark.parametrize("path, match", [
    ("val/mturk_train_data/" + "w" * 300 + "/d1.txt", "name of 300 bytes"),
    ("val/mturk_train_data/w/" + "d/" * 2000 + "d1.txt", "2,004 folders deep"),
])
def test_a_crowd_zip_with_a_long_name_or_a_deep_path_is_one_clear_line(path, match):
    data = zip_of({"val/ground_truth/d1.txt": "Ann B-PER\n", path: "Ann B-PER\n"})
    with pytest.raises(InputError, match=match) as info:
        read_crowd_upload([("x.zip", data)])
    one_line(info)


def test_a_4000_digit_offset_is_not_echoed_whole():
    big = int("9" * 4000)
    rec = {"text": "Ann ran", "label": [[big, big + 1, "PER"]]}
    with pytest.raises(InputError, match="outside the text") as info:
        parse_upload(json.dumps(rec).encode(), "x.jsonl", "doccano")
    assert len(one_line(info)) < 200


def test_a_message_carries_no_internal_placeholder_prefix():
    assert str(InputError("that name is taken", source="<account>")) == "that name is taken"
    assert str(InputError("bad line", source="<upload>", line=3)) == "<upload>:3: bad line"
    assert str(InputError("bad line", source="data.conll")) == "data.conll: bad line"
