"""Tests for gpsl.io: CRF++/CoNLL column files, JSONL and plain text."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpsl.errors import InputError
from gpsl.io import (
    Sentence,
    format_conll,
    format_jsonl,
    read_any,
    read_conll,
    read_jsonl,
    read_text,
    write_conll,
    write_jsonl,
)

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "crfpp"

SIMPLE = "He PRP B-NP\nsaid VBD B-VP\n\nIt PRP _\nrains VBZ B-VP\n. . O\n"


def write(tmp_path: Path, text: str | bytes, name: str = "f.data") -> Path:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_bytes(text.encode("utf-8"))
    return p


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(InputError) as info:
        fn(*args, **kwargs)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


# --------------------------------------------------------------------------- read_conll


def test_read_conll_basic(tmp_path):
    sents = read_conll(write(tmp_path, SIMPLE))
    assert len(sents) == 2
    assert sents[0].tokens == [("He", "PRP"), ("said", "VBD")]
    assert sents[0].labels == ["B-NP", "B-VP"]
    assert sents[0].line == 1
    assert sents[1].tokens == [("It", "PRP"), ("rains", "VBZ"), (".", ".")]
    assert sents[1].labels == [None, "B-VP", "O"]
    assert sents[1].line == 4
    assert sents[1].n_missing == 1


def test_read_conll_crlf_bom_no_final_newline_multiple_blanks_tabs():
    messy = ("\ufeff\r\n\r\nHe\tPRP  B-NP\r\nsaid VBD\tB-VP \r\n \t\r\n\r\n\r\n"
             "It PRP _\r\nrains VBZ B-VP\r\n. . O")
    sents = read_conll(messy.encode("utf-8"))
    clean = read_conll(SIMPLE.encode("utf-8"))
    assert [(s.tokens, s.labels) for s in sents] == [(s.tokens, s.labels) for s in clean]
    assert [s.line for s in sents] == [3, 8]


def test_read_conll_splits_only_on_space_and_tab():
    # CRF++'s Japanese data uses U+3000 (ideographic space) as a token
    sents = read_conll("\u3000\tk\tB\n日\tk\tI\n".encode())
    assert sents[0].tokens == [("\u3000", "k"), ("日", "k")]


def test_read_conll_source_types(tmp_path):
    p = write(tmp_path, SIMPLE)
    expected = read_conll(p)
    assert read_conll(str(p)) == expected
    assert read_conll(SIMPLE.encode()) == expected
    assert read_conll(io.StringIO(SIMPLE)) == expected
    assert read_conll(io.BytesIO(SIMPLE.encode())) == expected
    with open(p, encoding="utf-8") as fh:
        assert read_conll(fh) == expected


def test_read_conll_missing_marker_and_unlabeled():
    sents = read_conll(b"a x NONE\nb y L\n", missing="NONE")
    assert sents[0].labels == [None, "L"]
    sents = read_conll(b"a x NONE\nb y L\n", labeled=False)
    assert sents[0].tokens == [("a", "x", "NONE"), ("b", "y", "L")]
    assert sents[0].labels == [None, None]
    # one column is fine when unlabeled
    assert read_conll(b"a\nb\n\nc\n", labeled=False)[1].tokens == [("c",)]


def test_read_conll_other_encoding():
    data = "caf\u00e9 N O\n".encode("latin-1")
    assert read_conll(data, encoding="latin-1")[0].tokens == [("caf\u00e9", "N")]


def test_error_ragged_columns(tmp_path):
    p = write(tmp_path, "a b c\nd e f\n\ng h\n")
    msg = error_of(read_conll, p)
    assert msg.startswith(f"{p}:4: expected 3 columns, found 2")


def test_error_undecodable_bytes(tmp_path):
    p = write(tmp_path, b"a b\nc d\n\n\xe9t\xe9 N\n")
    msg = error_of(read_conll, p)
    assert msg.startswith(f"{p}:4: ")
    assert "utf-8" in msg and "0xe9" in msg


def test_error_undecodable_after_crlf_counts_lines():
    msg = error_of(read_conll, b"a b\r\nc d\r\n\xff e\r\n", name="up.data")
    assert msg.startswith("up.data:3: ")


def test_error_nul_byte(tmp_path):
    p = write(tmp_path, b"a b\nc\x00 d\n")
    assert error_of(read_conll, p).startswith(f"{p}:2: NUL byte")


@pytest.mark.parametrize("text", [b"", b"\n\n  \n", b"\xef\xbb\xbf\r\n"])
def test_error_empty(text):
    assert error_of(read_conll, text, name="e.data") == "e.data: no sentences found"


def test_error_one_column_labeled():
    msg = error_of(read_conll, b"\nword\nother\n", name="one.data")
    assert msg.startswith("one.data:2: only one column")


def test_error_file_not_found_and_directory(tmp_path):
    missing = tmp_path / "nope.data"
    assert error_of(read_conll, missing).startswith(f"{missing}: cannot read file")
    assert error_of(read_conll, tmp_path).startswith(f"{tmp_path}: is a directory")


def test_error_unknown_encoding():
    assert "unknown encoding" in error_of(read_conll, b"a b\n", encoding="nope-42")


# --------------------------------------------------------------------------- write_conll


def test_format_conll_exact():
    sents = [Sentence([("a", "x"), ("b", "y")], ["L", None], 1), Sentence([("c", "z")], ["M"])]
    assert format_conll(sents) == "a\tx\tL\nb\ty\t_\n\nc\tz\tM\n\n"
    assert format_conll(sents, missing="?", label=False) == "a\tx\nb\ty\n\nc\tz\n\n"
    extra = [[["P", "0.5"], ["Q", "0.25"]], [["R", "1"]]]
    assert format_conll(sents, extra_columns=extra) == (
        "a\tx\tL\tP\t0.5\nb\ty\t_\tQ\t0.25\n\nc\tz\tM\tR\t1\n\n"
    )


def test_write_conll_round_trip(tmp_path):
    sents = read_conll(SIMPLE.encode())
    out = tmp_path / "out.data"
    write_conll(sents, out)
    again = read_conll(out)
    assert again == sents
    buf = io.StringIO()
    write_conll(sents, buf)
    assert read_conll(buf.getvalue().encode()) == sents
    bbuf = io.BytesIO()
    write_conll(sents, bbuf)
    assert read_conll(bbuf.getvalue()) == sents


def test_write_conll_rejects_whitespace_and_bad_extra():
    with pytest.raises(InputError, match="whitespace"):
        format_conll([Sentence([("a b",)], ["L"])])
    with pytest.raises(ValueError, match="extra_columns"):
        format_conll([Sentence([("a",)], ["L"])], extra_columns=[])


_field = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")),
    min_size=1,
    max_size=5,
).filter(lambda s: s != "_" and "\ufeff" not in s and "\x85" not in s)


@st.composite
def _corpora(draw):
    n_cols = draw(st.integers(1, 3))
    n_sents = draw(st.integers(1, 4))
    sents = []
    for _ in range(n_sents):
        n = draw(st.integers(1, 4))
        toks = [tuple(draw(_field) for _ in range(n_cols)) for _ in range(n)]
        labs = [draw(st.one_of(st.none(), _field)) for _ in range(n)]
        sents.append((toks, labs))
    return sents


@settings(max_examples=60, deadline=None)
@given(_corpora())
def test_conll_and_jsonl_round_trip_property(corpus):
    sents = [Sentence(t, lab) for t, lab in corpus]
    back = read_conll(format_conll(sents).encode())
    assert [(s.tokens, s.labels) for s in back] == corpus
    back = read_jsonl(format_jsonl(sents).encode())
    assert [(s.tokens, s.labels) for s in back] == corpus


# --------------------------------------------------------------------------- JSONL


def test_read_jsonl_and_round_trip(tmp_path):
    text = (
        '{"tokens": ["He", "said"], "labels": ["B", null]}\n'
        "\n"
        '{"tokens": [["It", "PRP"]], "labels": ["_"]}\n'
    )
    # mixing one column and two columns is an error; first check each kind alone
    with pytest.raises(InputError, match=r"^j:3: token 1: expected 1 columns, found 2"):
        read_jsonl(text.encode(), name="j")
    sents = read_jsonl(b'{"tokens": ["He", "said"], "labels": ["B", null]}\n\n'
                       b'{"tokens": ["x"]}\n')
    assert sents[0].tokens == [("He",), ("said",)]
    assert sents[0].labels == ["B", None]
    assert sents[1].labels == [None] and sents[1].line == 3
    p = tmp_path / "o.jsonl"
    write_jsonl(sents, p)
    assert read_jsonl(p) == [Sentence(s.tokens, s.labels, i) for s, i in zip(sents, (1, 2))]
    multi = read_jsonl(b'{"tokens": [["It", "PRP"], ["is", "VBZ"]], "labels": ["_", "V"]}')
    assert multi[0].tokens == [("It", "PRP"), ("is", "VBZ")]
    assert multi[0].labels == [None, "V"]
    assert '"tokens": [["It", "PRP"], ["is", "VBZ"]]' in format_jsonl(multi)


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"tokens": ["a"]}\n{"tokens": ["a",}\n', "j:2: invalid JSON"),
        ('["a"]\n', "j:1: expected a JSON object, found a list"),
        ('{"labels": ["a"]}\n', 'j:1: missing "tokens"'),
        ('{"tokens": []}\n', 'j:1: "tokens" must be a non-empty list'),
        ('{"tokens": "abc"}\n', 'j:1: "tokens" must be a non-empty list'),
        ('{"tokens": ["a", 3]}\n', "j:1: token 2 must be a string"),
        ('{"tokens": ["a", "b"], "labels": ["L"]}\n', "j:1: 2 tokens but 1 labels"),
        ('{"tokens": ["a"], "labels": "L"}\n', 'j:1: "labels" must be a list'),
        ('{"tokens": ["a"], "labels": [1]}\n', "j:1: label 1 must be a string or null"),
        ("\n\n", "j: no sentences found"),
    ],
)
def test_read_jsonl_errors(text, expected):
    assert error_of(read_jsonl, text.encode(), name="j").startswith(expected)


# --------------------------------------------------------------------------- text, dispatch


def test_read_text():
    sents = read_text(b"He said  hello .\n\n  \nBye\r\n", name="t")
    assert [s.tokens for s in sents] == [[("He",), ("said",), ("hello",), (".",)], [("Bye",)]]
    assert [s.line for s in sents] == [1, 4]
    assert all(lab is None for s in sents for lab in s.labels)
    assert error_of(read_text, b" \n", name="t") == "t: no sentences found"


def test_read_any(tmp_path):
    assert read_any(SIMPLE.encode(), "conll") == read_conll(SIMPLE.encode())
    assert read_any(b'{"tokens": ["a"]}', "jsonl")[0].tokens == [("a",)]
    assert read_any(b"a b", "text")[0].tokens == [("a",), ("b",)]
    assert read_any(b"a x\n", "conll", labeled=False)[0].tokens == [("a", "x")]
    assert error_of(read_any, b"a", "xml", name="u").startswith("u: unknown format 'xml'")


def test_sentence_checks_lengths():
    with pytest.raises(ValueError):
        Sentence([("a",), ("b",)], ["L"])
    assert Sentence([["a", "b"]]).tokens == [("a", "b")]
    assert Sentence([("a",)]).labels == [None]


# --------------------------------------------------------------------------- shared data


SHARED = {
    # name: (train sentences, train tokens, test sentences, test tokens, feature columns)
    "basenp": (77, 1896, 823, 19172, 2),
    "chunking": (77, 1896, 823, 19172, 2),
    "seg": (36, 965, 19, 981, 2),
    "JapaneseNE": (216, 4772, 500, 12678, 3),
}


@pytest.mark.parametrize("name", sorted(SHARED))
def test_read_shared_data_sets(name):
    folder = DATA / name
    if not folder.is_dir():
        pytest.skip(f"shared data set {folder} not present")
    n_tr_s, n_tr_t, n_te_s, n_te_t, n_cols = SHARED[name]
    for fname, n_s, n_t in (("train.data", n_tr_s, n_tr_t), ("test.data", n_te_s, n_te_t)):
        sents = read_conll(folder / fname)
        assert len(sents) == n_s
        assert sum(len(s) for s in sents) == n_t
        assert {len(t) for s in sents for t in s.tokens} == {n_cols}
        assert all(lab is not None for s in sents for lab in s.labels)
