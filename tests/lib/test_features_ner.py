"""The built-in feature set ``ner`` (gpsl.features.NerFeatures): each feature on hand-made
tokens, its use wherever a template is, and CRF++ templates unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from gpsl import cli
from gpsl.errors import InputError
from gpsl.features import (
    FEATURE_SETS,
    FeatureExtractor,
    NerFeatures,
    Template,
    capitalisation,
    short_shape,
    word_shape,
)
from gpsl.model import GPSL

SENT = [("Mr.",), ("McDonald",), ("of",), ("U.S.",), ("12-34",), ("IBM",)]


def feats(tokens, i):
    """The feature strings of token ``i`` as ``{slot: value}``."""
    out = {}
    for f in NerFeatures().expand(tokens, i):
        key, _, value = f.partition("=")
        out[key] = value
    return out


@pytest.mark.parametrize("word, shape, short", [
    ("Mark", "Xxxx", "Xx"), ("12-34", "dd-dd", "d-d"), ("U.S.", "X.X.", "X.X."),
    ("McDonald", "XxXxxxxx", "XxXx"), ("iPhone", "xXxxxx", "xXx"), ("1996", "dddd", "d"),
    ("Zürich", "Xxxxxx", "Xx"), ("--", "--", "-"),
])
def test_word_shape_and_short_shape(word, shape, short):
    assert word_shape(word) == shape
    assert short_shape(word_shape(word)) == short


@pytest.mark.parametrize("word, cap", [
    ("Mark", "init"), ("IBM", "all"), ("McDonald", "mixed"), ("iPhone", "mixed"),
    ("of", "lower"), ("12-34", "none"), ("A", "init"), ("U.S.", "all"), ("X-ray", "init"),
])
def test_capitalisation(word, cap):
    assert capitalisation(word) == cap


def test_each_feature_of_a_token():
    f = feats(SENT, 1)  # McDonald
    assert f["w"] == "mcdonald"
    assert (f["w-2"], f["w-1"], f["w+1"], f["w+2"]) == ("_B-1", "mr.", "of", "u.s.")
    assert f["w-1|w"] == "mr.|mcdonald" and f["w|w+1"] == "mcdonald|of"
    assert f["sh"] == "XxXxxxxx" and f["ss"] == "XxXx"
    assert (f["ss-1"], f["ss+1"], f["ss-2"], f["ss+2"]) == ("Xx.", "x", "_B-1", "X.X.")
    assert f["ss-1|ss"] == "Xx.|XxXx" and f["ss|ss+1"] == "XxXx|x"
    assert f["w-1|ss"] == "mr.|XxXx" and f["ss|w+1"] == "XxXx|of"
    assert [f[f"p{k}"] for k in range(1, 5)] == ["m", "mc", "mcd", "mcdo"]
    assert [f[f"s{k}"] for k in range(1, 5)] == ["d", "ld", "ald", "nald"]
    assert f["cap"] == "mixed" and f["cap-1"] == "init" and f["cap+1"] == "lower"
    assert f["cap-1|cap"] == "init|mixed" and f["cap|cap+1"] == "mixed|lower"
    assert (f["dig"], f["hyp"], f["pos"]) == ("none", "0", "mid")
    assert "bias" in NerFeatures().expand(SENT, 1)


def test_flags_at_the_edges_and_short_words():
    first, last = feats(SENT, 0), feats(SENT, 5)
    assert first["pos"] == "first" and last["pos"] == "last"
    assert first["w-1"] == "_B-1" and first["w-2"] == "_B-2" and first["cap-1"] == "_B-1"
    assert last["w+1"] == "_B+1" and last["w+2"] == "_B+2" and last["ss|w+1"] == "X|_B+1"
    assert last["cap"] == "all" and last["sh"] == "XXX" and last["ss"] == "X"
    num = feats(SENT, 4)
    assert (num["dig"], num["hyp"], num["sh"], num["ss"]) == ("some", "1", "dd-dd", "d-d")
    assert feats([("1996",)], 0)["dig"] == "all" and feats([("1996",)], 0)["pos"] == "only"
    of = feats(SENT, 2)  # shorter than the affixes: the whole word
    assert of["p3"] == of["p4"] == of["s3"] == of["s4"] == "of"


def test_one_feature_per_slot_and_windows_on_other_columns():
    ner = NerFeatures()
    blocks = ner.expand_sentence(SENT)
    assert len(blocks) == len(NerFeatures().slots) and all(len(b) == len(SENT) for b in blocks)
    two = [(w, pos) for (w,), pos in zip(SENT, ["NNP", "NNP", "IN", "NNP", "CD", "NNP"])]
    f = {x.partition("=")[0]: x.partition("=")[2] for x in ner.expand(two, 2)}
    assert (f["c1-2"], f["c1-1"], f["c1+0"], f["c1+1"], f["c1+2"]) == \
        ("NNP", "NNP", "IN", "NNP", "CD")
    assert f["c1-1|c1"] == "NNP|IN" and f["c1|c1+1"] == "IN|NNP"
    assert len(ner.expand_sentence(two)) == len(NerFeatures().slots) + 7
    assert ner.expand_sentence([]) == [[] for _ in NerFeatures().slots]
    with pytest.raises(InputError, match="word column"):
        ner.validate(0)


def test_the_name_works_wherever_a_template_does(tmp_path):
    assert isinstance(Template.parse("ner"), NerFeatures) and "ner" in FEATURE_SETS
    assert Template.parse("ner") == Template.parse(" ner\n")
    ex = FeatureExtractor("ner").fit([SENT])
    X = ex.transform([SENT])
    assert X.shape[0] == len(SENT)
    np.testing.assert_array_equal(np.asarray((X != 0).sum(axis=1)).ravel(),
                                  len(NerFeatures().slots))
    back = FeatureExtractor.from_dict(ex.to_dict())
    assert isinstance(back.template, NerFeatures)
    assert (back.transform([SENT]) != X).nnz == 0
    # a file named like the feature set is read as ./ner
    (tmp_path / "ner").write_text("U00:%x[0,0]\n", encoding="utf-8")
    assert isinstance(Template.from_spec("ner"), NerFeatures)
    assert Template.from_spec(tmp_path / "ner").text == "U00:%x[0,0]\n"


def test_crfpp_templates_are_unchanged():
    text = "# x\nU00:%x[0,0]\nU01:%x[-1,0]/%x[0,0]\nB\n"
    t = Template.parse(text)
    assert type(t) is Template and t.text == text and len(t.unigrams) == 2
    assert t.expand([("a",), ("b",)], 1) == ["U00:b", "U01:a/b"]
    with pytest.raises(InputError, match="unknown template line"):
        Template.parse("ner2")


def test_gpsl_with_ner_fits_saves_and_loads(tmp_path):
    X = [[("John",), ("lives",), ("in",), ("Paris",)], [("Mary",), ("saw",), ("Rome",)],
         [("Anna",), ("left",), ("Berlin",), (".",)]]
    y = [["B-PER", "O", "O", "B-LOC"], ["B-PER", "O", "B-LOC"], ["B-PER", "O", "B-LOC", "O"]]
    m = GPSL(template="ner", max_iter=20).fit(X, y)
    assert isinstance(m.template_, NerFeatures)
    test = [[("Paul",), ("visited",), ("Madrid",)]]
    pred = m.predict(test)
    m.save(tmp_path / "model")
    back = GPSL.load(tmp_path / "model")
    assert isinstance(back.template_, NerFeatures)
    assert back.predict(test) == pred
    np.testing.assert_allclose(np.concatenate(back.predict_marginals(test)),
                               np.concatenate(m.predict_marginals(test)), atol=1e-12)


def test_cli_train_and_test_with_t_ner(tmp_path, capsys):
    data = tmp_path / "train.txt"
    data.write_text("John B-PER\nlives O\nin O\nParis B-LOC\n\nMary B-PER\nsaw O\nRome B-LOC"
                    "\n", encoding="utf-8")
    assert cli.main(["train", "-t", "ner", "--max-iter", "10", "-q", str(data),
                     str(tmp_path / "m")]) == 0
    assert cli.main(["test", "-m", str(tmp_path / "m"), str(data)]) == 0
    out = capsys.readouterr().out.strip().split("\n")
    assert out[0].split("\t")[0] == "John" and len(out[0].split("\t")) == 3
    assert cli.main(["train", "-t", str(tmp_path / "missing"), str(data),
                     str(tmp_path / "m2")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    # a misspelt feature set: one line that names the sets
    assert cli.main(["train", "-t", "nre", str(data), str(tmp_path / "m3")]) == 2
    err = capsys.readouterr().err
    assert err == ("gpsl: error: nre: no such template file, and not a built-in feature set "
                   "(ner)\n")
    assert not (tmp_path / "m3").exists()
