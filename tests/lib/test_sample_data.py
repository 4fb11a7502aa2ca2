"""The bundled sample project: reproducible, split as documented, well-formed BIO labels."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gpsl.io import read_conll

SAMPLE_DIR = Path(__file__).resolve().parents[2] / "sample_data"
GENERATED = ("sample.conll", "sample_gold.conll", "template")
ENTITY_TYPES = {"PER", "ORG", "LOC", "DATE", "MONEY"}


@pytest.fixture(scope="module")
def sample():
    return read_conll(SAMPLE_DIR / "sample.conll")


@pytest.fixture(scope="module")
def gold():
    return read_conll(SAMPLE_DIR / "sample_gold.conll")


def status(sentence) -> str:
    missing = sentence.n_missing
    if missing == 0:
        return "full"
    return "unlabeled" if missing == len(sentence) else "partial"


def test_regenerating_gives_identical_bytes(tmp_path):
    subprocess.run(
        [sys.executable, str(SAMPLE_DIR / "make_sample.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    for name in GENERATED:
        assert (tmp_path / name).read_bytes() == (SAMPLE_DIR / name).read_bytes(), name


def test_same_sentences_in_same_order(sample, gold):
    assert len(sample) == len(gold) >= 300
    for s, g in zip(sample, gold):
        assert s.tokens == g.tokens
        assert all(len(tok) == 2 for tok in g.tokens)  # token and tag


def test_split_into_full_partial_unlabeled_blocks(sample):
    statuses = [status(s) for s in sample]
    n = len(statuses)
    counts = Counter(statuses)
    assert 0.25 * n <= counts["full"] <= 0.35 * n
    assert 0.25 * n <= counts["partial"] <= 0.35 * n
    assert counts["unlabeled"] >= 0.30 * n
    # in that order: a block of full, then partial, then unlabeled sentences
    order = {"full": 0, "partial": 1, "unlabeled": 2}
    assert [order[s] for s in statuses] == sorted(order[s] for s in statuses)


def test_partial_sentences_hide_30_to_60_percent(sample):
    for s in sample:
        if status(s) == "partial":
            assert 0.3 <= s.n_missing / len(s) <= 0.6, s.line


def test_lengths_and_vocabulary(gold):
    lengths = [len(s) for s in gold]
    assert min(lengths) >= 5 and max(lengths) <= 40
    assert sum(n < 12 for n in lengths) >= 40  # spread, not all of one length
    assert sum(n > 30 for n in lengths) >= 40
    words = {tok[0] for s in gold for tok in s.tokens}
    assert len(words) >= 500
    tags = {tok[1] for s in gold for tok in s.tokens}
    assert {"NNP", "NN", "VBD", "IN", "DT", "CD", "JJ", "PUNCT"} <= tags


def test_sample_agrees_with_gold_where_labeled(sample, gold):
    for s, g in zip(sample, gold):
        for shown, true in zip(s.labels, g.labels):
            assert shown is None or shown == true, s.line


def test_gold_is_complete_and_covers_every_entity_type(gold):
    labels = Counter(lab for s in gold for lab in s.labels)
    assert None not in labels
    types = {lab[2:] for lab in labels if lab != "O"}
    assert types == ENTITY_TYPES
    for etype in ENTITY_TYPES:
        assert labels["B-" + etype] >= 20, etype


def test_gold_bio_is_well_formed(gold):
    for s in gold:
        previous = "O"
        for lab in s.labels:
            assert lab == "O" or lab[:2] in ("B-", "I-"), (s.line, lab)
            if lab.startswith("I-"):
                assert previous[2:] == lab[2:], (s.line, previous, lab)
            previous = lab


def test_template_lines_are_crfpp(gold):
    lines = (SAMPLE_DIR / "template").read_text().splitlines()
    features = [ln for ln in lines if ln and not ln.startswith("#")]
    assert features[-1] == "B"
    assert all(ln[0] in "UB" for ln in features)
    n_columns = len(gold[0].tokens[0])
    for ln in features:
        columns = [int(col) for col in re.findall(r"%x\[-?\d+,(\d+)\]", ln)]
        assert columns or ln == "B", ln
        assert all(0 <= col < n_columns for col in columns), ln
