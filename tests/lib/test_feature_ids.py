"""The id expansion of CRF++ templates (gpsl.feature_ids) against the string expansion, the
reference: the same CSR matrix (indices, indptr, data, dtypes) for any template and data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpsl.feature_ids import (
    group,
    ner_columns,
    rows_csr,
    shifted,
    template_columns,
    vocabulary_by_ids,
    vocabulary_matrix,
)
from gpsl.features import FeatureExtractor, NerFeatures, Template
from gpsl.io import read_conll
from gpsl.model import GPSL, _as_tokens, _token_list

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "crfpp"
SETTINGS = dict(deadline=None, derandomize=True, database=None, max_examples=150,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def same_csr(A, B) -> None:
    """Identical CSR matrices, not only equal values."""
    assert A.shape == B.shape and A.dtype == B.dtype
    assert A.indices.dtype == B.indices.dtype and A.indptr.dtype == B.indptr.dtype
    assert np.array_equal(A.indptr, B.indptr) and np.array_equal(A.indices, B.indices)
    assert np.array_equal(A.data, B.data) and A.has_sorted_indices and B.has_sorted_indices


# values that meet the template's own text: separators, CRF++'s markers, empty, non-ASCII
VALUES = st.sampled_from(["a", "b", "ab", "/", ":", "|", "_B-1", "_B+1", "_B-2", "", "é", "a/b",
                          "U00:", " ", "%x", "B"])
LITERAL = st.text(alphabet="ab/:|_B+-1 é", max_size=4)


@st.composite
def templates(draw, n_columns):
    lines = []
    for k in range(draw(st.integers(1, 6))):
        macros = draw(st.lists(st.tuples(st.integers(-8, 8), st.integers(0, n_columns - 1)),
                               max_size=4))
        text = draw(st.sampled_from(["U", f"U{k:02d}:", "U:"])) + draw(LITERAL)
        for row, col in macros:
            text += f"%x[{row},{col}]" + draw(LITERAL)
        lines.append(text.strip() or "U")
    lines += draw(st.sampled_from([[], ["B"]]))
    return Template.parse("\n".join(lines))


@st.composite
def corpora(draw, n_columns):
    token = st.tuples(*[VALUES] * n_columns)
    return draw(st.lists(st.lists(token, max_size=7), max_size=6))


@settings(**SETTINGS)
@given(data=st.data(), n_columns=st.integers(1, 3))
def test_id_expansion_equals_the_string_expansion(data, n_columns):
    template = data.draw(templates(n_columns))
    train = data.draw(corpora(n_columns))
    test = data.draw(corpora(n_columns))
    fe = FeatureExtractor(template, min_freq=data.draw(st.integers(1, 2)))
    if not any(train):
        return
    fe.fit(train)
    for sents in (train, test, train + test):
        same_csr(fe.transform(sents), fe.transform_strings(sents))


def same_fit(fe: FeatureExtractor, train) -> None:
    """The fit by the id expansion equals the one from every token's feature strings: the
    same vocabulary, in order, and the same training matrix."""
    X = fe._fit(train)
    names, ref = vocabulary_matrix(*fe._expand_all(train), fe.min_freq)
    assert fe.feature_names_ == names
    same_csr(X, ref)
    tokens = [t for s in train for t in s]
    lengths = fe.lengths(train)
    by_ids = vocabulary_by_ids(lambda lookup: fe._columns(tokens, lengths, lookup),
                               len(tokens), fe.min_freq)
    assert by_ids is not None  # the fit above took the id path
    assert by_ids[0] == names
    same_csr(by_ids[1], ref)


@settings(**SETTINGS)
@given(data=st.data(), n_columns=st.integers(1, 3))
def test_the_fit_by_ids_equals_the_fit_by_strings(data, n_columns):
    template = data.draw(templates(n_columns))
    train = data.draw(corpora(n_columns))
    if not any(train):
        return
    same_fit(FeatureExtractor(template, min_freq=data.draw(st.integers(1, 3))), train)


def test_lines_without_macros_three_macros_and_unseen_values():
    t = Template.parse("U\nU01:fixed\nU02:%x[-1,0]/%x[0,0]/%x[1,1]\nU03:%x[-8,1]%x[8,0]\n"
                       "U04:%x[0,0]/%x[0,0]/%x[0,1]/%x[-1,1]\nU05:%x[0,0]\nU05:%x[0,0]\n")
    train = [[("He", "PRP"), ("said", "VBD")], [("_B-1", "x")]]
    fe = FeatureExtractor(t).fit(train)
    test = train + [[("new", "NN"), ("He", "PRP"), ("_B-1", "_B+1")], [], [("said", "VBD")]]
    X = fe.transform(test)
    same_csr(X, fe.transform_strings(test))
    # the duplicate line U05 counts once; "U", "U01:fixed" are on every token
    assert X[0].nnz == 6 and X.shape[0] == 7


def test_values_that_spell_the_markers_meet_the_markers():
    # ("_B-1" as a value) and the marker before the sentence give one feature string
    t = Template.parse("U00:%x[-1,0]\n")
    fe = FeatureExtractor(t).fit([[("_B-1",), ("x",)]])
    X = fe.transform([[("y",)]])
    assert X.nnz == 1 and fe.feature_names_[X.indices[0]] == "U00:_B-1"
    same_csr(X, fe.transform_strings([[("y",)]]))


def test_values_that_are_not_strings_go_the_reference_way():
    fe = FeatureExtractor(Template.parse("U00:%x[0,0]\n")).fit([[("1",)]])
    assert template_columns(fe.template.unigrams, [(1,)], np.array([1]), fe._lookup) is None
    with pytest.raises(TypeError):  # what the string expansion does with an int
        fe.transform([[(1,)]])


def test_shifted_ids_and_markers():
    ids = np.array([0, 1, 2, 3, 4])  # sentences of 3 and 2 tokens
    lengths = np.array([3, 2])
    pos = np.array([0, 1, 2, 0, 1])
    length = np.repeat(lengths, lengths)
    # V = 5 values; _B-k is 5 + k - 1, _B+k is 5 + 8 + k - 1
    assert shifted(ids, 5, -1, pos, length, 8).tolist() == [5, 0, 1, 5, 3]
    assert shifted(ids, 5, 2, pos, length, 8).tolist() == [2, 13, 14, 13, 14]
    assert shifted(ids, 5, 0, pos, length, 8) is ids


def test_group_gives_first_and_inverse():
    key = np.array([7, 3, 7, 9, 3, 3])
    first, inverse = group(key)
    assert np.array_equal(key[first[inverse]], key)
    assert key[first].tolist() == [3, 7, 9]


def test_rows_csr_drops_unseen_and_repeats():
    C = np.array([[3, -1, 3, 0], [-1, -1, -1, -1], [2, 1, 0, 1]])
    X = rows_csr(C, 4)
    assert X.toarray().tolist() == [[1, 0, 0, 1], [0, 0, 0, 0], [1, 1, 1, 0]]
    assert rows_csr(np.full((2, 1), -1), 4).nnz == 0
    assert rows_csr(np.zeros((0, 3), dtype=np.int64), 4).shape == (0, 4)


@pytest.mark.parametrize("name", ["basenp", "chunking", "seg", "JapaneseNE"])
def test_shared_templates_equal_the_reference(name):
    folder = DATA / name
    if not folder.is_dir():
        pytest.skip(f"shared data set {folder} not present")
    t = Template.from_file(folder / "template")
    train = [s.tokens for s in read_conll(folder / "train.data")][:300]
    test = [s.tokens for s in read_conll(folder / "test.data")]
    fe = FeatureExtractor(t).fit(train)
    same_csr(fe.transform(test), fe.transform_strings(test))
    same_fit(FeatureExtractor(t, min_freq=2), train)


WORDS = st.sampled_from(["Mark", "mark", "MARK", "McDonald", "the", "The", "12-34", "1990", "a1",
                         "-", "--", "x-ray", "_B-1", "_B+2", "|", "=", "w=", "é", "Ünïcode",
                         "O'Neil", "", "U.S.", "iPhone", "1", "london", "London", "bc4"])


@settings(**SETTINGS)
@given(data=st.data(), width=st.integers(1, 3),
       spec=st.sampled_from(["ner", "ner:en:none", "ner:en:cluster", "ner:en:freq"]))
def test_ner_ids_equal_the_string_expansion(data, width, spec):
    token = st.tuples(WORDS, *[VALUES] * (width - 1))
    corpus = st.lists(st.lists(token, max_size=7), max_size=6)
    train, test = data.draw(corpus), data.draw(corpus)
    if not any(train):
        return
    fe = FeatureExtractor(Template.parse(spec)).fit(train)
    for sents in (train, test, train + test):
        same_csr(fe.transform(sents), fe.transform_strings(sents))
    same_fit(FeatureExtractor(Template.parse(spec)), train)


def test_ner_ids_leave_mixed_widths_and_other_values_to_the_strings():
    fe = FeatureExtractor(Template.parse("ner")).fit([[("Mark", "NNP"), ("said", "VBD")]])
    mixed = [[("Mark", "NNP"), ("said", "VBD")], [("so",)]]  # windows per sentence's width
    tokens = [t for s in mixed for t in s]
    assert ner_columns(fe.template, tokens, np.array([2, 1]), fe._lookup) is None
    same_csr(fe.transform(mixed), fe.transform_strings(mixed))
    assert ner_columns(fe.template, [(1, "x")], np.array([1]), fe._lookup) is None


def test_ner_model_on_the_crowd_data_equals_the_reference():
    path = DATA.parent / "crowd-ner" / "val.gold.conll"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    sents = [s.tokens for s in read_conll(path)]
    fe = FeatureExtractor(NerFeatures()).fit(sents[:300])
    same_csr(fe.transform(sents[300:900]), fe.transform_strings(sents[300:900]))
    same_fit(FeatureExtractor(NerFeatures()), sents[:300])


class Sent:
    def __init__(self, tokens):
        self.tokens = tokens


def test_model_features_of_every_token_form_equal_the_reference():
    X = [[("He", "PRP"), ("said", "VBD")], [("so", "RB")]]
    y = [["B", "O"], ["O"]]
    m = GPSL(template="U00:%x[0,0]\nU01:%x[-1,0]/%x[0,1]\n", max_iter=3).fit(X, y)
    forms = [
        X,
        [[list(t) for t in s] for s in X],  # lists
        [Sent(s) for s in X],  # objects with .tokens
        [[("He", "PRP"), [np.str_("said"), "VBD"]], [(1, 2.5)]],  # not str: str() of each
    ]
    for form in forms:
        got, lengths = m._features(form)
        ref = m.extractor_.transform_strings([_as_tokens(s) for s in form])
        same_csr(got, ref)
        assert lengths.tolist() == [2, 1]
    one = GPSL(template="U00:%x[0,0]\n", max_iter=3).fit([["a", "b"]], [["B", "O"]])
    tokens, lengths = _token_list([["a", "b"], "cd"])  # a str token is one column
    assert tokens == [("a",), ("b",), ("c",), ("d",)] and lengths.tolist() == [2, 2]
    same_csr(one._features([["a", "b"]])[0],
             one.extractor_.transform_strings([[("a",), ("b",)]]))


def test_model_names_the_sentence_of_a_token_with_other_columns():
    m = GPSL(template="U00:%x[0,0]\n", max_iter=3).fit([[("a", "b")]], [["O"]])
    with pytest.raises(Exception, match="sentence 3 has a token with 1 columns"):
        m._features([[("a", "b")], [], [("a", "b"), ("c",)]])
