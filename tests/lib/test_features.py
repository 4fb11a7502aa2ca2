"""Tests for gpsl.features: CRF++ templates and sparse feature extraction."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from gpsl.errors import InputError, ModelFormatError
from gpsl.features import FeatureExtractor, Template, default_template
from gpsl.io import read_conll
from tests.support.limits import limit

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "crfpp"

SENT = [("He", "PRP"), ("said", "VBD"), ("so", "RB")]


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(InputError) as info:
        fn(*args, **kwargs)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


# --------------------------------------------------------------------------- Template.parse


def test_parse_structure():
    text = "# Unigram\nU00:%x[-1,0]\n\nU05:%x[-1,0]/%x[0,1]\nU\nU01:fixed\n# Bigram\nB\n"
    t = Template.parse(text)
    assert t.text == text
    assert t.has_bigram
    assert [u.name for u in t.unigrams] == ["U00", "U05", "U", "U01"]
    name, macros = t.unigrams[1][:2]
    assert name == "U05" and macros == ((-1, 0), (0, 1))
    assert t.unigrams[1].pieces == ("U05:", "/", "")
    assert t.unigrams[1].line == 4
    assert t.unigrams[2].macros == () and t.unigrams[2].pieces == ("U",)
    assert t.max_column == 1 and t.max_offset == 1
    assert not Template.parse("U00:%x[0,0]").has_bigram


def test_parse_crlf_bom_and_whitespace():
    t = Template.parse("\ufeff# c\r\nU00:%x[0,0]  \r\n\r\n  B\r\n")
    assert [u.text for u in t.unigrams] == ["U00:%x[0,0]"]
    assert t.unigrams[0].line == 2 and t.has_bigram


@pytest.mark.parametrize(
    "text, expected",
    [
        ("U00:%x[0,0]\nX01:%x[0,0]\n", "tpl:2: unknown template line 'X01:%x[0,0]'"),
        ("# c\nU00:%x[a,0]\n", "tpl:2: bad macro '%x[a,0]'"),
        ("U00:%x[0,b]\n", "tpl:1: bad macro"),
        ("U00:%x[0,-1]\n", "tpl:1: bad macro"),
        ("U00:%y[0,0]\n", "tpl:1: bad macro '%y[0,0]'"),
        ("U00:%x[0,0]/%\n", "tpl:1: bad macro '%'"),
        ("U00:%x[0 ,0]\n", "tpl:1: bad macro"),
        ("U00:%x[0,0]\nB01:%x[1,q]\n", "tpl:2: bad macro"),
        ("U00:%x[-9,0]\n", "tpl:1: row offset -9"),
        ("# only comments\nB\n", "tpl: template has no U (unigram) lines"),
        ("", "tpl: template has no U (unigram) lines"),
    ],
)
def test_parse_errors(text, expected):
    assert error_of(Template.parse, text, source="tpl").startswith(expected)


def test_validate_names_template_line(tmp_path):
    p = tmp_path / "template"
    p.write_text("# x\nU00:%x[0,0]\n\nU10:%x[-1,2]\nB\n", encoding="utf-8")
    t = Template.from_file(p)
    assert t.source == str(p)
    t.validate(3)
    msg = error_of(t.validate, 2)
    assert msg.startswith(f"{p}:4: %x[-1,2] uses column 2 but the data has only 2 feature columns")


def test_from_file_errors(tmp_path):
    p = tmp_path / "template"
    p.write_bytes(b"U00:%x[0,0]\nU01:\xff\n")
    assert error_of(Template.from_file, p).startswith(f"{p}:2: ")
    assert error_of(Template.from_file, tmp_path / "none").startswith(f"{tmp_path / 'none'}:")
    p.write_text("U00:%x[0,0]\nZ\n")
    assert error_of(Template.from_file, p).startswith(f"{p}:2: unknown template line")


# --------------------------------------------------------------------------- expand


def test_expand_boundaries_exactly_as_crf_learn():
    t = Template.parse("U00:%x[-2,0]\nU01:%x[-1,0]\nU02:%x[0,0]\nU03:%x[1,0]\nU04:%x[2,0]\n")
    assert t.expand(SENT, 0) == ["U00:_B-2", "U01:_B-1", "U02:He", "U03:said", "U04:so"]
    assert t.expand(SENT, 2) == ["U00:He", "U01:said", "U02:so", "U03:_B+1", "U04:_B+2"]
    one = [("x",)]
    assert t.expand(one, 0) == ["U00:_B-2", "U01:_B-1", "U02:x", "U03:_B+1", "U04:_B+2"]
    with pytest.raises(IndexError):
        t.expand(SENT, 3)


def test_expand_multi_macro_literal_text_and_bias():
    t = Template.parse("U05:%x[-1,0]/%x[0,0]/%x[1,1]=end\nU06:pre%x[0,1]mid%x[3,0]post\nU\nU9:c\n")
    assert t.expand(SENT, 0) == ["U05:_B-1/He/VBD=end", "U06:prePRPmid_B+1post", "U", "U9:c"]
    assert t.expand(SENT, 1) == ["U05:He/said/RB=end", "U06:preVBDmid_B+2post", "U", "U9:c"]
    assert t.expand(SENT, 2)[0] == "U05:said/so/_B+1=end"


def test_expand_sentence_matches_expand():
    t = Template.parse(
        "U0:%x[-3,0]\nU1:%x[0,0]/%x[1,1]\nU2:%x[-1,0]/%x[0,0]/%x[1,0]\n"
        "U3:%x[-2,0]/%x[-1,1]/%x[0,0]/%x[2,1]\nU4\n"
    )
    blocks = t.expand_sentence(SENT)
    for i in range(len(SENT)):
        assert [b[i] for b in blocks] == t.expand(SENT, i)
    assert t.expand_sentence([]) == [[], [], [], [], []]


def test_default_template():
    t = default_template(1)
    assert t.max_column == 0 and t.has_bigram
    assert t.expand([("a",), ("b",)], 0) == [
        "U00:_B-2", "U01:_B-1", "U02:a", "U03:b", "U04:_B+1", "U05:_B-1/a", "U06:a/b",
    ]
    t3 = default_template(3)
    assert t3.max_column == 2 and len(t3.unigrams) == 21
    with pytest.raises(ValueError):
        default_template(0)


# --------------------------------------------------------------------------- FeatureExtractor


CORPUS = [
    [("the", "DT"), ("dog", "NN")],
    [("a", "DT"), ("dog", "NN"), ("barks", "VBZ")],
    [("the", "DT")],
]


def test_fit_transform_matches_expand():
    t = Template.parse("U00:%x[0,0]\nU01:%x[-1,1]/%x[0,1]\nU02:%x[1,0]\nB\n")
    fe = FeatureExtractor(t)
    X = fe.fit_transform(CORPUS)
    assert isinstance(X, sp.csr_matrix) and X.dtype == np.float64
    assert X.shape == (6, fe.n_features_)
    assert fe.feature_names_ == sorted(fe.feature_names_)
    assert fe.vocabulary_ == {f: i for i, f in enumerate(fe.feature_names_)}
    assert "U01:_B-1/DT" in fe.vocabulary_ and "U02:_B+1" in fe.vocabulary_
    row = 0
    for sent in CORPUS:
        for i in range(len(sent)):
            want = sorted(fe.vocabulary_[f] for f in t.expand(sent, i))
            assert X[row].indices.tolist() == want
            assert X[row].data.tolist() == [1.0] * len(want)
            row += 1
    assert (fe.transform(CORPUS) != X).nnz == 0
    assert fe.lengths(CORPUS).tolist() == [2, 3, 1]
    assert fe.lengths(CORPUS).dtype == np.int64


def test_duplicate_feature_counts_once():
    fe = FeatureExtractor("U00:%x[0,0]\nU00:%x[0,0]\nU\n")
    X = fe.fit_transform([[("a",), ("a",)]])
    assert fe.feature_names_ == ["U", "U00:a"]
    assert X.toarray().tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_min_freq_filters_like_crf_learn_f():
    t = "U00:%x[0,0]\n"
    sents = [[("a",), ("b",), ("a",)], [("c",), ("a",)], [("b",)]]
    assert FeatureExtractor(t).fit(sents).feature_names_ == ["U00:a", "U00:b", "U00:c"]
    assert FeatureExtractor(t, min_freq=2).fit(sents).feature_names_ == ["U00:a", "U00:b"]
    fe = FeatureExtractor(t, min_freq=3).fit(sents)
    assert fe.feature_names_ == ["U00:a"]
    assert fe.transform(sents).toarray().ravel().tolist() == [1, 0, 1, 0, 1, 0]
    assert FeatureExtractor(t, min_freq=4).fit(sents).transform(sents).shape == (6, 0)
    with pytest.raises(ValueError):
        FeatureExtractor(t, min_freq=0)


def test_unseen_features_ignored_and_empty_inputs():
    fe = FeatureExtractor("U00:%x[0,0]\nU01:%x[-1,0]\n").fit([[("a",), ("b",)]])
    X = fe.transform([[("z",), ("a",)], [], [("b",)]])
    assert X.shape == (3, fe.n_features_)
    names = fe.feature_names_
    got = [[names[j] for j in X[r].indices] for r in range(3)]
    assert got == [["U01:_B-1"], ["U00:a"], ["U00:b", "U01:_B-1"]]
    assert fe.transform([]).shape == (0, fe.n_features_)


def test_transform_checks_columns_and_fit_state():
    fe = FeatureExtractor(Template.parse("U00:%x[0,1]\n", source="tpl"))
    with pytest.raises(RuntimeError):
        fe.transform(CORPUS)
    fe.fit(CORPUS)
    assert error_of(fe.transform, [[("only-one-column",)]]).startswith(
        "tpl:1: %x[0,1] uses column 1 but the data has only 1 feature column"
    )


def test_default_template_when_none():
    fe = FeatureExtractor(None).fit(CORPUS)
    assert fe.template.max_column == 1
    assert "U02:dog" in fe.vocabulary_ and "U12:VBZ" in fe.vocabulary_


def test_to_dict_from_dict_round_trip():
    fe = FeatureExtractor("U00:%x[0,0]\nU01:%x[-1,0]/%x[0,1]\nB\n", min_freq=1).fit(CORPUS)
    d = json.loads(json.dumps(fe.to_dict()))
    assert d["vocabulary"] == fe.feature_names_ and d["min_freq"] == 1
    fe2 = FeatureExtractor.from_dict(d)
    assert fe2.template.text == fe.template.text
    assert fe2.vocabulary_ == fe.vocabulary_
    test = CORPUS + [[("unseen", "XX"), ("dog", "NN")]]
    assert (fe2.transform(test) != fe.transform(test)).nnz == 0


@pytest.mark.parametrize(
    "change",
    [
        {"template": 3},
        {"template": "Z\n"},
        {"vocabulary": ["a", 1]},
        {"vocabulary": ["a", "a"]},
        {"min_freq": 0},
        {"n_columns": "2"},
    ],
)
def test_from_dict_rejects_damage(change):
    d = FeatureExtractor("U00:%x[0,0]\n").fit(CORPUS).to_dict()
    d.update(change)
    with pytest.raises(ModelFormatError):
        FeatureExtractor.from_dict(d)


# --------------------------------------------------------------------------- shared data


@pytest.mark.parametrize("name", ["basenp", "chunking", "seg", "JapaneseNE"])
def test_shared_templates_and_data(name):
    folder = DATA / name
    if not folder.is_dir():
        pytest.skip(f"shared data set {folder} not present")
    t = Template.from_file(folder / "template")
    assert t.has_bigram
    train = [s.tokens for s in read_conll(folder / "train.data")]
    t.validate(len(train[0][0]))
    fe = FeatureExtractor(t)
    X = fe.fit_transform(train)
    n_tokens = sum(map(len, train))
    assert X.shape == (n_tokens, len(fe.vocabulary_))
    # every U line has its own name, so each token has exactly one feature per U line
    assert X.nnz == n_tokens * len(t.unigrams)
    assert np.all(X.sum(axis=1) == len(t.unigrams))


def test_chunking_speed():
    path = DATA / "chunking" / "test.data"
    if not path.is_file():
        pytest.skip(f"shared data set {path} not present")
    sents = [s.tokens for s in read_conll(path)]
    t = Template.from_file(DATA / "chunking" / "template")
    start = time.perf_counter()
    fe = FeatureExtractor(t)
    X = fe.fit_transform(sents)
    Y = fe.transform(sents)
    elapsed = time.perf_counter() - start
    assert X.shape[0] == 19172 and (X != Y).nnz == 0
    assert elapsed < limit(5.0), f"fit_transform + transform of 19k tokens took {elapsed:.2f}s"
