"""Hostile input everywhere a user hands gpsl data (issue #7): generated malformed and extreme
files, JSONL, templates, model directories, command lines and uploads.  Each is either accepted
with a consistent result or refused with one line naming the source; the command line exits 2
with one stderr line; the app shows the message; a refused import writes nothing.

``GPSL_LONG_TESTS=1`` runs the property tests with 2,000 examples each instead of 60.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy.exc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.limits import limit

ROOT = Path(__file__).resolve().parents[2]

from gpsl import limits  # noqa: E402
from gpsl.annotation import Store  # noqa: E402
from gpsl.annotation.interchange import exports as exp  # noqa: E402
from gpsl.annotation.interchange import imports as imp  # noqa: E402
from gpsl.errors import InputError, ModelFormatError  # noqa: E402
from gpsl.features import FeatureExtractor, Template  # noqa: E402
from gpsl.io import (  # noqa: E402
    Sentence,
    format_conll,
    format_jsonl,
    read_conll,
    read_jsonl,
    read_text,
)
from gpsl.model import GPSL  # noqa: E402

load_model = GPSL.load

LONG = os.environ.get("GPSL_LONG_TESTS") == "1"
PROPERTY = settings(max_examples=2000 if LONG else 60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


def clean_or_consistent(fn, source: str):
    """Run ``fn``: a clean one-line InputError naming ``source`` (returns None) or a result."""
    try:
        return fn()
    except InputError as exc:
        text = str(exc)
        assert "\n" not in text and "\r" not in text, text
        assert text.startswith(source), text
        return None


def check_sentences(sents) -> None:
    assert sents
    widths = {len(tok) for s in sents for tok in s.tokens}
    assert len(widths) == 1
    for s in sents:
        assert s.tokens and len(s.tokens) == len(s.labels)
        for tok in s.tokens:
            for c in tok:
                assert c and "\n" not in c and "\r" not in c and "\x00" not in c
        for lab in s.labels:
            assert lab is None or (lab and lab != "_" and not any(ch.isspace() for ch in lab))


# --------------------------------------------------------------------------- generators

_cell = st.sampled_from(["the", "dog", "Anna", "_", "O", "B-PER", "ü", "東京", "\u3000", "\x0b",
                         "a\u2028b", "%x[0,0]", "1", "\ufeff"])
_glue = st.sampled_from([" ", "\t", "  ", " \t"])
_eol = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def column_files(draw) -> bytes:
    """Mostly well-formed column files, then damaged: ragged rows, blank-only, BOM, CRLF, NUL,
    invalid UTF-8, huge lines, truncation."""
    n_cols = draw(st.integers(1, 4))
    rows = []
    for _ in range(draw(st.integers(0, 5))):
        for _ in range(draw(st.integers(1, 5))):
            width = n_cols if draw(st.integers(0, 9)) else draw(st.integers(1, 5))
            rows.append(draw(_glue).join(draw(_cell) for _ in range(width)))
        rows.extend([""] * draw(st.integers(1, 2)))
    text = draw(_eol).join(rows)
    data = text.encode("utf-8")
    damage = draw(st.sampled_from(["none", "none", "bom", "nul", "utf8", "huge", "trunc",
                                   "blank", "bytes"]))
    if damage == "bom":
        data = b"\xef\xbb\xbf" + data
    elif damage == "nul":
        pos = draw(st.integers(0, len(data)))
        data = data[:pos] + b"\x00" + data[pos:]
    elif damage == "utf8":
        pos = draw(st.integers(0, len(data)))
        data = data[:pos] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"])) + \
            data[pos:]
    elif damage == "huge":
        data += b"\n" + b"w" * (limits.DEFAULT_MAX_LINE_CHARS + 1) + b" X\n"
    elif damage == "trunc":
        data = data[:draw(st.integers(0, len(data)))]
    elif damage == "blank":
        data = b"\n \t\r\n" * draw(st.integers(0, 20))
    elif damage == "bytes":
        data = draw(st.binary(max_size=300))
    return data


_json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30),
                         st.floats(allow_nan=False), st.text(max_size=5))
_json_any = st.recursive(_json_scalar, lambda c: st.one_of(
    st.lists(c, max_size=4), st.dictionaries(st.text(max_size=3), c, max_size=3)), max_leaves=10)


@st.composite
def jsonl_files(draw) -> bytes:
    lines = []
    for _ in range(draw(st.integers(0, 5))):
        n = draw(st.integers(0, 5))
        obj = {}
        if draw(st.integers(0, 9)):
            obj["tokens"] = draw(st.one_of(
                st.lists(_cell, min_size=n, max_size=n),
                st.lists(st.lists(_cell, min_size=2, max_size=2), min_size=n, max_size=n),
                _json_any))
        if draw(st.booleans()):
            obj["labels"] = draw(st.one_of(
                st.lists(st.sampled_from(["O", "B-PER", None, "_", "a b", ""]), min_size=n,
                         max_size=n), _json_any))
        if draw(st.booleans()):
            obj["id"] = draw(st.one_of(st.sampled_from([0, 1, "a", "b"]), _json_any))
        lines.append(json.dumps(obj, ensure_ascii=draw(st.booleans())))
    if draw(st.integers(0, 9)) == 0:
        lines.append(draw(st.sampled_from(["[" * 3000, '{"tokens": [' + "9" * 5000 + "]}",
                                           '{"tokens": ["\\ud800"]}', '{"tokens": ["\\u0000"]}',
                                           "{", "[]", "null"])))
    return "\n".join(lines).encode()


@st.composite
def templates(draw) -> str:
    lines = []
    for k in range(draw(st.integers(0, 5))):
        head = draw(st.sampled_from(["U", "U", "B", "#", "", "X", " U", "%"]))
        body = f"{head}{k:02d}:"
        for _ in range(draw(st.integers(0, 3))):
            row = draw(st.one_of(st.integers(-9, 9), st.integers(-10**40, 10**40)))
            col = draw(st.one_of(st.integers(0, 2), st.integers(-5, 10**40)))
            body += draw(st.sampled_from([f"%x[{row},{col}]", f"%x[{row},{col}]",
                                          f"%x[{row}]", f"%x[{row},{col}", "%"]))
            body += draw(st.sampled_from(["", "/", " "]))
        lines.append(body)
    return draw(_eol).join(lines)


# --------------------------------------------------------------------------- readers


@PROPERTY
@given(column_files(), st.booleans())
def test_conll_property(data, labeled):
    sents = clean_or_consistent(lambda: read_conll(data, name="f.data", labeled=labeled),
                                "f.data")
    if sents is not None:
        check_sentences(sents)
        if labeled and not sents[0].tokens[0][0].startswith("\ufeff"):
            again = read_conll(format_conll(sents).encode(), name="again")
            assert [(s.tokens, s.labels) for s in again] == [(s.tokens, s.labels)
                                                             for s in sents]


@PROPERTY
@given(st.binary(max_size=500), st.sampled_from(["conll", "jsonl", "text"]))
def test_arbitrary_bytes_every_format(data, fmt):
    sents = clean_or_consistent(lambda: imp.parse_upload(data, "up.bin", fmt), "up.bin")
    if sents is not None:
        check_sentences(sents)


@PROPERTY
@given(jsonl_files())
def test_jsonl_property(data):
    sents = clean_or_consistent(lambda: read_jsonl(data, name="f.jsonl"), "f.jsonl")
    if sents is not None:
        check_sentences(sents)
        ids = [s.id for s in sents if s.id is not None]
        assert len(ids) == len(set(ids))
        again = read_jsonl(format_jsonl(sents).encode(), name="again")
        assert [(s.tokens, s.labels, s.id) for s in again] == \
            [(s.tokens, s.labels, s.id) for s in sents]


@PROPERTY
@given(column_files())
def test_text_property(data):
    sents = clean_or_consistent(lambda: read_text(data, name="f.txt"), "f.txt")
    if sents is not None:
        check_sentences(sents)


@PROPERTY
@given(templates())
def test_template_property(text):
    sents = [[("Anna", "NNP"), ("went", "VBD")], [("Hi", "UH")]]

    def run():
        tpl = Template.parse(text, source="f.template")
        tpl.validate(2)
        return FeatureExtractor(tpl).fit_transform(sents)

    X = clean_or_consistent(run, "f.template")
    assert X is None or X.shape[0] == 3


@pytest.mark.parametrize("text, needle", [
    ("U00:%x[99999999,0]\n", "f.template:1: macro %x[99999999,0] is out of range"),
    ("U00:%x[0,-1]\n", "f.template:1: bad macro '%x[0,-1]'"),
    ("# only\n\nB\n", "f.template: template has no U"),
    ("U:%x[0," + "9" * 5000 + "]\n", "f.template:1: macro"),
    ("U00:%x[9,0]\n", "f.template:1: row offset 9"),
])
def test_template_messages(text, needle):
    with pytest.raises(InputError) as e:
        Template.parse(text, source="f.template")
    assert str(e.value).startswith(needle)


@pytest.mark.parametrize("data, needle", [
    (b"", "f: no sentences found"),
    (b"\n \n\t\n\r\n", "f: no sentences found"),
    (b"a X\n\xff b\n", "f:2: byte 0xff cannot be decoded"),
    (b"a X\nb\x00 Y\n", "f:2: NUL byte"),
    (b"a X\nb Y Z\n", "f:2: expected 2 columns, found 3"),
    (b"a X\nb B\xe3\x80\x80-PER\n", "f:2: label 'B\\u3000-PER' contains a whitespace"),
    (b"w" * 1_000_001 + b" X\n", "f:1: line has 1,000,003 characters; the limit is 1,000,000"),
])
def test_conll_messages(data, needle):
    with pytest.raises(InputError) as e:
        read_conll(data, name="f")
    assert str(e.value).startswith(needle), str(e.value)


@pytest.mark.parametrize("line, needle", [
    ('{"id": 1, "tokens": ["a"]}\n{"id": 1, "tokens": ["b"]}', "f:2: duplicate sentence id 1 "
                                                                "(first on line 1)"),
    ('{"tokens": ["a"], "id": true}', 'f:1: "id" must be a string or an integer'),
    ('[' * 100000, "f:1: invalid JSON"),
    ('{"tokens": [' + "9" * 5000 + "]}", "f:1: invalid JSON"),
    ('{"tokens": ["\\ud800"]}', "f:1: token 1 contains an unpaired surrogate"),
    ('{"tokens": ["a\\u0000"]}', "f:1: token 1 contains a NUL character"),
    ('{"tokens": [""]}', "f:1: token 1 is an empty string"),
    ('{"tokens": ["a"], "labels": ["B PER"]}', "f:1: label 1 'B PER' contains whitespace"),
    ('{"tokens": {"a": 1}}', 'f:1: "tokens" must be a non-empty list, found an object'),
])
def test_jsonl_messages(line, needle):
    with pytest.raises(InputError) as e:
        read_jsonl(line.encode(), name="f")
    assert str(e.value).startswith(needle), str(e.value)


def test_jsonl_ids_are_kept_and_written():
    sents = read_jsonl(b'{"id": "s1", "tokens": ["a"]}\n{"tokens": ["b"]}\n')
    assert [s.id for s in sents] == ["s1", None]
    assert format_jsonl(sents).startswith('{"id": "s1", "tokens": ["a"]')


def test_million_token_sentence_is_refused_quickly(monkeypatch):
    monkeypatch.delenv(limits.ENV_MAX_TOKENS, raising=False)
    big = b"w X\n" * 1_000_000
    with pytest.raises(InputError) as e:
        read_conll(big, name="big.data")
    assert str(e.value) == ("big.data:1: sentence has 1,000,000 tokens; the limit is 1,000 "
                            "(set --max-tokens / GPSL_MAX_TOKENS)")
    with pytest.raises(InputError, match="big.txt:1: sentence has 1,000,000 tokens"):
        read_text(b"w " * 1_000_000, name="big.txt", max_line_chars=0)
    line = json.dumps({"tokens": ["w"] * 1_000_000}).encode()
    with pytest.raises(InputError, match="big.jsonl:1: sentence has 1,000,000 tokens"):
        read_jsonl(line, name="big.jsonl", max_line_chars=0)


def test_token_limit_configuration(monkeypatch):
    data = b"a X\nb X\nc X\n"
    assert len(read_conll(data, max_tokens=3)[0]) == 3
    with pytest.raises(InputError, match="the limit is 2"):
        read_conll(data, max_tokens=2)
    monkeypatch.setenv("GPSL_MAX_TOKENS", "2")
    with pytest.raises(InputError, match="the limit is 2"):
        read_conll(data)
    assert len(read_conll(data, max_tokens=0)[0]) == 3  # 0: no limit
    monkeypatch.setenv("GPSL_MAX_TOKENS", "0")
    assert len(read_conll(data)[0]) == 3
    monkeypatch.setenv("GPSL_MAX_TOKENS", "lots")
    with pytest.raises(InputError, match="^GPSL_MAX_TOKENS: expected a non-negative number"):
        read_conll(data)


def test_sources_that_are_not_files(tmp_path):
    for path, needle in [(tmp_path, "is a directory"), (tmp_path / "nope", "cannot read file"),
                         ("/dev/zero", "not a regular file"), ("a\x00b", "bad file name")]:
        with pytest.raises(InputError, match=needle):
            read_conll(path)
    with pytest.raises(InputError, match="'rot13' is not a text encoding"):
        read_conll(b"a X\n", encoding="rot13")


def test_conll_export_of_a_token_with_a_space_names_it():
    sents = [Sentence([("ok",)], ["O"], 1), Sentence([("a",), ("New York",)], ["O", None], 7)]
    with pytest.raises(InputError) as e:
        format_conll(sents, source="CoNLL export")
    assert str(e.value) == ("CoNLL export: sentence 2 (line 7), token 2: column 'New York' "
                            "contains whitespace, which a CoNLL column cannot hold (export as "
                            "JSONL instead)")
    assert "New York" in format_jsonl(sents)


# --------------------------------------------------------------------------- model directories


@pytest.fixture(scope="module")
def small_model(tmp_path_factory) -> Path:
    X = [[("Anna",), ("went",), ("home",)], [("Bob",), ("ran",)]]
    y = [["B-PER", "O", "O"], ["B-PER", None]]
    path = tmp_path_factory.mktemp("model") / "m"
    GPSL(max_iter=3, inference="full").fit(X, y).save(path)  # tampered below: alpha, lam
    return path


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _rewrite_arrays(d: Path, **changes) -> None:
    """Replace arrays and recompute every checksum, as a tamperer knowing the format would."""
    from gpsl.persist import _meta_digest, _sha256

    with np.load(d / "arrays.npz", allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays.update(changes)
    np.savez(d / "arrays.npz", **arrays)
    meta = json.loads((d / "model.json").read_text())
    meta["sha256"]["arrays.npz"] = _sha256(d / "arrays.npz")
    meta["sha256"]["model.json"] = _meta_digest(meta)
    (d / "model.json").write_text(json.dumps(meta))


def test_model_refuses_object_arrays_even_with_matching_checksums(small_model, tmp_path):
    d = _copy(small_model, tmp_path / "m")
    _rewrite_arrays(d, theta=np.array([{"evil": 1}], dtype=object))
    with pytest.raises(ModelFormatError, match="array theta holds Python objects; refused"):
        load_model(d)


def test_model_refuses_truncated_and_tampered_arrays(small_model, tmp_path):
    d = _copy(small_model, tmp_path / "m")
    raw = (d / "arrays.npz").read_bytes()
    (d / "arrays.npz").write_bytes(raw[:len(raw) // 2])
    with pytest.raises(ModelFormatError, match="arrays.npz: checksum mismatch"):
        load_model(d)
    d2 = _copy(small_model, tmp_path / "m2")
    with np.load(d2 / "arrays.npz") as z:
        alpha = z["alpha"] + 1.0
    _rewrite_arrays(d2, alpha=alpha)  # consistent: loads (tampering undetectable by design)
    load_model(d2)
    d3 = _copy(small_model, tmp_path / "m3")
    _rewrite_arrays(d3, X_indices=np.array([10**6] * 3, dtype=np.int32))
    with pytest.raises(ModelFormatError, match="training features"):
        load_model(d3)
    d4 = _copy(small_model, tmp_path / "m4")
    _rewrite_arrays(d4, lam=np.full((2, 5), np.nan))
    with pytest.raises(ModelFormatError, match="lam contains NaN"):
        load_model(d4)


def test_model_refuses_tampered_description(small_model, tmp_path):
    d = _copy(small_model, tmp_path / "m")
    meta = json.loads((d / "model.json").read_text())
    meta["classes"] = ["B-PER", "EVIL"]
    (d / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ModelFormatError, match="model.json: checksum mismatch"):
        load_model(d)


def test_model_refuses_huge_declared_shapes(small_model, tmp_path):
    d = _copy(small_model, tmp_path / "m")
    header = b"{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999, 99999), }"
    header += b" " * (63 - (len(header) + 10) % 64) + b"\n"
    with zipfile.ZipFile(d / "arrays.npz") as zf:
        members = {n: zf.read(n) for n in zf.namelist() if n != "theta.npy"}
    members["theta.npy"] = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header
    with zipfile.ZipFile(d / "arrays.npz", "w") as zf:
        for n, b in members.items():
            zf.writestr(n, b)
    from gpsl.persist import _meta_digest, _sha256

    meta = json.loads((d / "model.json").read_text())
    meta["sha256"]["arrays.npz"] = _sha256(d / "arrays.npz")
    meta["sha256"]["model.json"] = _meta_digest(meta)
    (d / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ModelFormatError, match="theta declares shape"):
        load_model(d)


HOSTILE_VALUES = [None, 0, -1, "x", [], {}, [0], ["a", "a"], True, 1e308, float("nan")]


def test_model_description_fields_with_hostile_values_are_one_line(small_model, tmp_path):
    """Every field of model.json and of its config set to values of the wrong type or range,
    the checksums recomputed (a tamperer who knows the format): the model either loads or is
    refused with one ModelFormatError line naming the file, never another exception (a list
    as the inference mode once raised TypeError)."""
    from gpsl.persist import _meta_digest

    d = _copy(small_model, tmp_path / "m")
    original = json.loads((d / "model.json").read_text())
    trials = [(key, None) for key in sorted(original) if key != "sha256"]
    trials += [("config", key) for key in sorted(original["config"])]
    refused = 0
    for field, sub in trials:
        for value in HOSTILE_VALUES:
            meta = json.loads(json.dumps(original))
            if sub is None:
                meta[field] = value
            else:
                meta["config"][sub] = value
            meta["sha256"]["model.json"] = _meta_digest(meta)
            (d / "model.json").write_text(json.dumps(meta))
            try:
                load_model(d)
            except ModelFormatError as e:
                refused += 1
                assert str(e).startswith(str(d)) and "\n" not in str(e), (field, sub, value)
    assert refused > len(trials)  # most of them are refused, not silently accepted


@pytest.mark.parametrize("content", [b"", b"[" * 100000, b"\xff\xfe", b"null", b'{"format": 1}'])
def test_model_refuses_unreadable_json(small_model, tmp_path, content):
    d = _copy(small_model, tmp_path / "m")
    (d / "model.json").write_bytes(content)
    with pytest.raises(ModelFormatError) as e:
        load_model(d)
    assert str(e.value).startswith(str(d)) and "\n" not in str(e.value)


def test_saving_never_replaces_a_non_model(small_model, tmp_path):
    model = load_model(small_model)
    other = tmp_path / "docs"
    other.mkdir()
    (other / "keep.txt").write_text("keep")
    with pytest.raises(ModelFormatError, match="not a gpsl model directory; refusing"):
        model.save(other)
    assert (other / "keep.txt").read_text() == "keep"
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ModelFormatError, match="is a file; refusing"):
        model.save(f)
    model.save(small_model)  # a model directory is replaced
    load_model(small_model)


def test_no_pickle_anywhere():
    offenders = []
    for path in [*ROOT.glob("gpsl/*.py"), *ROOT.glob("pages/*.py"), ROOT / "app.py",
                 *ROOT.glob("bench/**/*.py")]:
        text = path.read_text(encoding="utf-8")
        for needle in ("import pickle", "from pickle", "allow_pickle=True", "pickle.load",
                       "cPickle", "import dill", "joblib.load"):
            if needle in text:
                offenders.append(f"{path.relative_to(ROOT)}: {needle}")
        if "np.load(" in text or "numpy.load(" in text:
            for line in text.splitlines():
                if ("np.load(" in line or "numpy.load(" in line) and \
                        "allow_pickle=False" not in line:
                    offenders.append(f"{path.relative_to(ROOT)}: {line.strip()}")
    assert not offenders, offenders


# --------------------------------------------------------------------------- command line


def run_cli(*args, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    full_env.pop("GPSL_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "gpsl", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=limit(120))


def assert_one_line_exit_2(proc, needle: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpsl: error: "), proc.stderr
    assert needle in lines[0], lines[0]


def test_cli_bad_inputs_exit_2_with_one_line(tmp_path, small_model):
    (tmp_path / "bad.data").write_bytes(b"a X\n\xff Y\n")
    assert_one_line_exit_2(run_cli("train", "bad.data", "m", cwd=tmp_path),
                           "bad.data:2: byte 0xff cannot be decoded")
    (tmp_path / "big.data").write_bytes(b"w X\n" * 5000)
    assert_one_line_exit_2(run_cli("train", "big.data", "m", cwd=tmp_path),
                           "big.data:1: sentence has 5,000 tokens; the limit is 1,000")
    assert_one_line_exit_2(run_cli("train", "--max-tokens", "10", "big.data", "m", cwd=tmp_path),
                           "the limit is 10 (set --max-tokens")
    assert_one_line_exit_2(run_cli("test", "-m", str(small_model), "big.data", cwd=tmp_path,
                                   env={"GPSL_MAX_TOKENS": "100"}), "the limit is 100")
    (tmp_path / "t.tpl").write_text("U00:%x[0,-1]\n")
    (tmp_path / "ok.data").write_text("a X\n")
    assert_one_line_exit_2(run_cli("train", "-t", "t.tpl", "ok.data", "m", cwd=tmp_path),
                           "t.tpl:1: bad macro")


def test_cli_refuses_tampered_model_and_foreign_model_dir(tmp_path, small_model):
    d = _copy(small_model, tmp_path / "m")
    _rewrite_arrays(d, theta=np.array([{"evil": 1}], dtype=object))
    (tmp_path / "ok.data").write_text("Anna\nwent\n")
    assert_one_line_exit_2(run_cli("test", "-m", "m", "ok.data", cwd=tmp_path),
                           "holds Python objects; refused")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "keep.txt").write_text("keep")
    (tmp_path / "train.data").write_text("Anna B\nwent O\n")
    assert_one_line_exit_2(run_cli("train", "train.data", "docs", cwd=tmp_path),
                           "docs: already exists and is not a gpsl model directory")
    assert (docs / "keep.txt").read_text() == "keep"


# --------------------------------------------------------------------------- uploads and the app


def test_upload_size_limit(monkeypatch):
    data = b"a X\n" * 100
    with pytest.raises(InputError) as e:
        imp.parse_upload(data, "big.conll", max_bytes=100)
    assert str(e.value) == ("big.conll: the file is 400 bytes; the upload limit is 100 bytes "
                            "(set GPSL_MAX_UPLOAD_MB)")
    monkeypatch.setenv("GPSL_MAX_UPLOAD_MB", "0.0001")
    with pytest.raises(InputError, match="upload limit is 104 bytes"):
        imp.parse_upload(data, "big.conll")
    monkeypatch.delenv("GPSL_MAX_UPLOAD_MB")
    assert limits.max_upload_bytes() == 20 * 2**20
    assert len(imp.parse_upload(data, "big.conll")) == 1


def test_refused_imports_write_nothing(tmp_path):
    store = Store(tmp_path / "db.sqlite3")
    sents = imp.parse_upload(b"Anna B-PER\nwent O\n\nRome B-LOC\n", "f.conll")
    with pytest.raises(InputError) as e:
        store.create_project_from_sentences("p", sents, ["B-PER", "O"], "", (-1, 1), doc="f.conll")
    assert str(e.value).startswith("f.conll:4: sentence 2, token 1 ('Rome'): label 'B-LOC'")
    assert store.list_projects() == []
    with pytest.raises(InputError, match="template"):
        store.create_project_from_sentences("p", sents, ["B-PER", "O", "B-LOC"], "U:%x[0,5]",
                                            (-1, 1))
    assert store.list_projects() == []
    pid = store.create_project_from_sentences("p", sents[:1], ["B-PER", "O"], "", (-1, 1))
    bad = sents[1:] + [Sentence([("x", "y")], None, 9)]
    with pytest.raises(InputError, match="2 columns, but the project's tokens have 1"):
        imp.import_sentences(store.db, pid, bad, doc="g.conll", add_labels=["B-LOC"])
    assert store.get_project(pid)["labels"] == ["B-PER", "O"]
    assert store.sentence_count(pid) == 1
    assert imp.import_sentences(store.db, pid, sents[1:], add_labels=["B-LOC"]) == 1
    assert "B-LOC" in store.get_project(pid)["labels"]


def test_imports_interrupted_mid_write_leave_nothing(tmp_path, monkeypatch):
    """A failure inside the store write, after the project row / new labels and the first
    sentence are inserted, leaves no project and an unchanged label set: each import is one
    transaction, with no compensating delete or label restore to run (or to be skipped by a
    crash)."""
    import sqlite3

    store = Store(tmp_path / "db.sqlite3")

    def no_compensation(*args, **kwargs):
        raise AssertionError("an import must not need to undo a partial write")

    monkeypatch.setattr(Store, "delete_project", no_compensation)
    monkeypatch.setattr(Store, "update_project", no_compensation)

    def fail_sentence(position):
        with sqlite3.connect(store.path) as conn:
            conn.execute("DROP TRIGGER IF EXISTS boom")
            conn.execute(f"CREATE TRIGGER boom BEFORE INSERT ON sentences WHEN NEW.position = "
                         f"{position} BEGIN SELECT RAISE(ABORT, 'injected failure'); END")

    sents = imp.parse_upload(b"Anna B-PER\nwent O\n\nRome B-LOC\n\nBob B-PER\n", "f.conll")
    fail_sentence(1)  # the second sentence: the first is already inserted
    with pytest.raises(sqlalchemy.exc.IntegrityError):
        store.create_project_from_sentences("p", sents, ["B-PER", "O", "B-LOC"], "", (-1, 1),
                           heldout_fraction=0.34, doc="f.conll")
    fail_sentence(2)  # the held-out sentence, after both training sentences
    with pytest.raises(sqlalchemy.exc.IntegrityError):
        store.create_project_from_sentences("p", sents, ["B-PER", "O", "B-LOC"], "", (-1, 1),
                           heldout_fraction=0.34, doc="f.conll")
    fail_sentence(100)  # the sample copy's held-out part (sentence 321 of 400)
    with pytest.raises(sqlalchemy.exc.IntegrityError):
        store.create_sample_copy("copy", ROOT / "sample_data")
    assert store.list_projects() == []

    fail_sentence(2)  # the second imported sentence
    pid = store.create_project_from_sentences("p", sents[:1], ["B-PER", "O"], "", (-1, 1))
    for split in ("train", "heldout"):
        with pytest.raises(sqlalchemy.exc.IntegrityError):
            imp.import_sentences(store.db, pid, sents[1:], split=split, add_labels=["B-LOC"])
        assert store.get_project(pid)["labels"] == ["B-PER", "O"]
        assert store.sentence_count(pid) == 1 and len(store.history(project_id=pid)) == 2
    fail_sentence(-1)  # off
    assert imp.import_sentences(store.db, pid, sents[1:], split="heldout",
                                add_labels=["B-LOC"]) == 2
    assert store.get_project(pid)["labels"] == ["B-PER", "O", "B-LOC"]
    assert store.gold_data(pid)[2] == [["B-LOC"], ["B-PER"]]
    copy = store.create_sample_copy("copy", ROOT / "sample_data")
    assert store.sentence_count(copy, "train") == 320
    assert store.sentence_count(copy, "heldout") == 80


def _apptest(page: str):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(30)).run()
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, at.exception
    return at


def test_app_upload_errors_are_one_readable_line(tmp_path, monkeypatch):
    monkeypatch.setenv("GPSL_DB", str(tmp_path / "db.sqlite3"))
    monkeypatch.setenv("GPSL_ANNOTATOR", "tester")
    at = _apptest("project")
    n_projects = len(Store(tmp_path / "db.sqlite3").list_projects())
    for name, data, needle in [
        ("bad.conll", b"a X\n\xff\x00 Y\n", "bad.conll:2:"),
        ("bad.jsonl", b'{"id": 1, "tokens": ["a"]}\n{"id": 1, "tokens": ["b"]}\n',
         "bad.jsonl:2: duplicate sentence id 1"),
        ("big.txt", b"w " * 2000, "big.txt:1: sentence has 2,000 tokens; the limit is 1,000"),
    ]:
        at.file_uploader(key="new_file").set_value((name, data, "text/plain")).run()
        assert not at.exception, at.exception
        assert [e.value for e in at.error] and needle in at.error[0].value, \
            [e.value for e in at.error]
        assert "\n" not in at.error[0].value
    monkeypatch.setenv("GPSL_MAX_UPLOAD_MB", "0.00001")
    # larger than any export of this store could be (those always read back)
    at.file_uploader(key="new_file").set_value(("ok.conll", b"a X\n" * 10 ** 6,
                                                "text/plain")).run()
    assert "ok.conll: the file is 3.8 MB; the upload limit is 10 bytes" in at.error[0].value
    assert len(Store(tmp_path / "db.sqlite3").list_projects()) == n_projects


def test_app_conll_export_of_a_spaced_token_shows_the_problem(tmp_path, monkeypatch):
    db = tmp_path / "db.sqlite3"
    monkeypatch.setenv("GPSL_DB", str(db))
    monkeypatch.setenv("GPSL_ANNOTATOR", "tester")
    store = Store(db)
    sents = read_jsonl(b'{"tokens": ["in", "New York"], "labels": ["O", "B-LOC"]}\n')
    pid = store.create_project_from_sentences("spaced", sents, ["O", "B-LOC"], "", (-1, 1))
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(30))
    at.session_state["project_id"] = pid
    at.run()
    at.switch_page("pages/data.py").run()
    assert not at.exception, at.exception
    errors = [e.value for e in at.error]
    assert any("sentence 1 (line 1), token 2: column 'New York' contains whitespace" in e
               and "export as JSONL instead" in e for e in errors), errors
    assert "New York" in exp.export_annotations(store.db, pid, "jsonl")


# --------------------------------------------------------------------------- the benchmark


def test_run_input_trials_finds_no_tracebacks():
    from bench.robustness.inputs import KINDS, run_input_trials

    result = run_input_trials(n_examples=25, seed=1)
    assert set(result) == set(KINDS)
    for kind, t in result.items():
        assert t["tried"] == t["accepted"] + t["rejected_cleanly"] + t["tracebacks"], kind
        assert t["tracebacks"] == 0, (kind, t["examples_of_failures"])
    assert result["cli_args"]["tried"] == 3
