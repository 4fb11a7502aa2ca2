"""The lexical features of ``ner`` (gpsl.lexicon): Brown cluster prefixes and frequency
buckets on hand-made words, casing, words the table lacks, and languages without a table."""

from __future__ import annotations

import lzma
import subprocess
import sys

import pytest

from gpsl import lexicon
from gpsl.errors import InputError
from gpsl.features import FeatureExtractor, NerFeatures, Template


def feats(sentence, i, tmpl="ner"):
    return {x.partition("=")[0]: x.partition("=")[2]
            for x in Template.parse(tmpl).expand(sentence, i)}


def test_the_table_is_read_as_the_script_wrote_it():
    lex = lexicon.lexicon("en")
    raw = lzma.decompress((lexicon.DATA / "lexicon-en.tsv.xz").read_bytes()).decode()
    word, cluster, bucket = raw.splitlines()[1000].split("\t")
    assert lex.table[word] == (int(cluster), bucket)
    assert len(lex.table) == raw.count("\n") > 100_000


def test_cluster_prefixes_are_the_low_bits_of_the_path():
    lex = lexicon.lexicon("en")
    c = lex.table["London"][0]
    for k in lexicon.CLUSTER_LENGTHS:
        assert lex.clusters(["London"], k) == [format(c & ((1 << k) - 1), "x")]
    # two cities share a cluster; a city and a weekday part somewhere on the path
    assert lex.clusters(["London"], 20) == lex.clusters(["Paris"], 20)
    assert lex.clusters(["London"], 20) != lex.clusters(["Monday"], 20)
    # a shorter prefix is a coarser partition: equal long prefixes imply equal short ones
    for a, b in (("London", "Germany"), ("Monday", "Tuesday")):
        for k, k2 in zip(lexicon.CLUSTER_LENGTHS, lexicon.CLUSTER_LENGTHS[1:]):
            if lex.clusters([a], k2) == lex.clusters([b], k2):
                assert lex.clusters([a], k) == lex.clusters([b], k)


def test_casing_falls_back_to_lower_then_title_case():
    lex = lexicon.lexicon("en")
    assert "london" not in lex.table and "LONDON" in lex.table
    # lower case, absent itself, reads the title-cased entry; all caps has its own
    assert lex.entry("london") == lex.entry("London")
    assert lex.entry("LONDON") == lex.table["LONDON"] != lex.entry("London")
    # an all-caps word without its own entry reads the lowercased one
    assert "THE" not in lex.table or lex.table["THE"] == lex.entry("THE")
    assert lex.entry("tHe") == lex.table["the"]


def test_a_word_the_table_lacks_reads_none_everywhere():
    sent = [("Zqxjvbw",), ("met",), ("Wqzxkp",)]
    f0, f1, f2 = (feats(sent, i, "ner:en:cluster,freq") for i in range(3))
    assert all(f0[f"bc{k}"] == "none" for k in lexicon.CLUSTER_LENGTHS)
    assert f0["fq"] == f2["fq"] == "none" and f0["bc4"] == f2["bc4"]
    assert f1["bc4-1"] == "none" and f1["bc4+1"] == "none" and f1["fq"] != "none"
    assert f0["bc6-1"] == "_B-1" and f2["bc6+1"] == "_B+1"  # CRF++'s markers


def test_frequency_buckets_order_words_by_frequency():
    lex = lexicon.lexicon("en")
    the, london, rare = (int(b) for b in lex.buckets(["the", "London", "Reuters"]))
    assert the < london <= rare
    assert the == int(lex.table["the"][1])


def test_groups_and_languages_by_name():
    assert Template.parse("ner").slots == NerFeatures().slots
    none = Template.parse("ner:en:none")
    assert none.slots == NerFeatures.SLOTS and none.text == "ner:en:none"
    assert Template.parse("ner:en:cluster").slots == NerFeatures.SLOTS + NerFeatures.CLUSTER_SLOTS
    assert Template.parse("ner:en:freq").slots == NerFeatures.SLOTS + ("fq",)
    assert Template.parse("ner:en:cluster").text == "ner"  # the clusters alone by default
    assert Template.parse("ner:en:freq,cluster").text == "ner:en:cluster,freq"
    assert "fq" not in Template.parse("ner").slots
    de = Template.parse("ner:de")
    assert de.text == "ner:de" and de.lang == "de"
    assert feats([("Berlin",)], 0, "ner:de")["bc20"] != "none"
    # a saved model keeps the language
    ex = FeatureExtractor("ner:de").fit([[("Berlin",), ("ist",)]])
    assert FeatureExtractor.from_dict(ex.to_dict()).template.lang == "de"


def test_a_language_without_a_table_is_refused_in_one_line():
    assert "fr" not in lexicon.languages() and {"en", "de", "es"} <= set(lexicon.languages())
    for bad in ("ner:fr", "ner:", "ner:../en"):
        with pytest.raises(InputError, match="no word-cluster table") as e:
            Template.parse(bad)
        assert "\n" not in str(e.value)
    with pytest.raises(InputError, match="unknown lexical groups"):
        Template.parse("ner:en:gazetteer")


def test_the_cli_refuses_a_language_without_a_table(tmp_path):
    data = tmp_path / "train.txt"
    data.write_text("London B-LOC\nis O\n\nParis B-LOC\n", encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "gpsl", "train", "-t", "ner:fr", str(data),
                          str(tmp_path / "m")], capture_output=True, text=True)
    assert out.returncode == 2
    line = out.stderr.strip()
    assert "\n" not in line and "no word-cluster table for language 'fr'" in line
