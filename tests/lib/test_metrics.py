"""Tests of gpsl.metrics with hand-computed numbers."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpsl import metrics as M
from gpsl.tags import entities

# --------------------------------------------------------------------------- token metrics


def test_flatten():
    assert M.flatten([[1, 2], [], [3]]) == [1, 2, 3]
    assert M.flatten([]) == []


def test_hamming_and_accuracy_hand_computed():
    y_true = [["B", "I", "O"], ["O", "B"]]
    y_pred = [["B", "O", "O"], ["B", "B"]]
    # 2 wrong out of 5
    assert M.token_counts(y_true, y_pred) == (2, 5, 0)
    assert M.hamming_loss(y_true, y_pred) == pytest.approx(40.0)
    assert M.token_accuracy(y_true, y_pred) == pytest.approx(0.6)


def test_missing_gold_excluded_and_counted():
    y_true = [["B", None, "O"], [None, "B"]]
    y_pred = [["B", "O", "I"], ["B", "O"]]
    c = M.token_counts(y_true, y_pred)
    assert (c.wrong, c.scored, c.missing) == (2, 3, 2)
    assert M.hamming_loss(y_true, y_pred) == pytest.approx(200.0 / 3)
    assert M.token_accuracy(y_true, y_pred) == pytest.approx(1.0 / 3)


def test_no_scored_tokens_is_nan():
    assert math.isnan(M.hamming_loss([[None]], [["B"]]))
    assert math.isnan(M.token_accuracy([], []))


def test_length_mismatch_raises():
    with pytest.raises(ValueError):
        M.hamming_loss([["B"]], [["B"], ["O"]])
    with pytest.raises(ValueError):
        M.token_accuracy([["B", "O"]], [["B"]])


# --------------------------------------------------------------------------- calibration


def test_ece_hand_computed():
    conf = [0.05, 0.15, 0.95, 0.95, 1.0]
    correct = [0, 1, 1, 0, 1]
    # bins (n=10): [0,.1): conf .05 acc 0 -> |0-.05| = .05, weight 1/5
    #              [.1,.2): conf .15 acc 1 -> .85, weight 1/5
    #              [.9,1]: conf (.95+.95+1)/3 = .9666.., acc 2/3 -> .3, weight 3/5
    expected = (0.05 + 0.85 + 3 * 0.3) / 5
    assert M.expected_calibration_error(conf, correct) == pytest.approx(expected)


def test_ece_perfect_and_two_bins():
    assert M.expected_calibration_error([1.0, 1.0], [True, True]) == pytest.approx(0.0)
    # n_bins=2: [0,.5): conf .2,.4 mean .3 acc .5 -> .2 (w .5); [.5,1]: conf .6,.8 mean .7 acc 1
    ece = M.expected_calibration_error([0.2, 0.4, 0.6, 0.8], [1, 0, 1, 1], n_bins=2)
    assert ece == pytest.approx(0.5 * 0.2 + 0.5 * 0.3)
    assert math.isnan(M.expected_calibration_error([], []))


def test_reliability_table():
    rows = M.reliability_table([0.2, 0.4, 0.6, 0.8, 1.0], [1, 0, 1, 1, 0], n_bins=2)
    assert len(rows) == 2
    assert rows[0] == {
        "bin_lo": 0.0,
        "bin_hi": 0.5,
        "count": 2,
        "mean_confidence": pytest.approx(0.3),
        "accuracy": pytest.approx(0.5),
    }
    assert rows[1]["count"] == 3
    assert rows[1]["mean_confidence"] == pytest.approx(0.8)
    assert rows[1]["accuracy"] == pytest.approx(2 / 3)
    empty = M.reliability_table([0.95], [1], n_bins=4)
    assert [r["count"] for r in empty] == [0, 0, 0, 1]
    assert empty[0]["accuracy"] is None and empty[0]["mean_confidence"] is None
    assert sum(r["count"] for r in M.reliability_table(np.linspace(0, 1, 11), [1] * 11)) == 11


def test_calibration_bad_input():
    with pytest.raises(ValueError):
        M.expected_calibration_error([0.5, 1.2], [1, 0])
    with pytest.raises(ValueError):
        M.expected_calibration_error([0.5], [1, 0])
    with pytest.raises(ValueError):
        M.reliability_table([0.5], [1], n_bins=0)


# --------------------------------------------------------------------------- t-test


def test_paired_t_test_hand_computed():
    a = [1.0, 2.0, 3.0, 4.0]
    b = [0.0, 2.0, 2.0, 2.0]
    # d = [1, 0, 1, 2]: mean 1, sd sqrt(2/3), t = 1 / (sqrt(2/3) / 2) = sqrt(6)
    t, p = M.paired_t_test(a, b)
    assert t == pytest.approx(math.sqrt(6))
    from scipy import stats

    assert p == pytest.approx(2 * stats.t.sf(math.sqrt(6), df=3))


def test_paired_t_test_degenerate():
    assert M.paired_t_test([1, 2, 3], [1, 2, 3]) == (0.0, 1.0)
    assert M.paired_t_test([2, 3, 4], [1, 2, 3]) == (math.inf, 0.0)
    assert M.paired_t_test([0, 1], [1, 2]) == (-math.inf, 0.0)
    t, p = M.paired_t_test([1.0], [2.0])
    assert math.isnan(t) and math.isnan(p)
    with pytest.raises(ValueError):
        M.paired_t_test([1, 2], [1, 2, 3])


# --------------------------------------------------------------------------- probabilistic


def test_brier_and_nll_hand_computed():
    marg = [np.array([[0.7, 0.2, 0.1], [0.5, 0.5, 0.0]]), np.array([[0.0, 0.0, 1.0]])]
    gold = [[0, 1], [2]]
    # brier rows: (.3^2 + .2^2 + .1^2) = .14; (.5^2 + .5^2) = .5; 0 -> mean .64/3
    assert M.brier_score(marg, gold) == pytest.approx(0.64 / 3)
    # nll: -(log .7 + log .5 + log 1) / 3
    assert M.negative_log_likelihood(marg, gold) == pytest.approx(
        -(math.log(0.7) + math.log(0.5)) / 3
    )


def test_brier_nll_missing_gold_and_flat_input():
    marg = [np.array([[0.7, 0.3], [0.4, 0.6]])]
    assert M.brier_score(marg, [[None, 1]]) == pytest.approx(0.32)
    assert M.brier_score(marg, [[-1, 1]]) == pytest.approx(0.32)
    assert M.negative_log_likelihood(marg[0], [None, 1]) == pytest.approx(-math.log(0.6))
    assert math.isnan(M.brier_score(marg, [[None, None]]))
    # probability 0 of the gold label is clipped, not infinite
    assert math.isfinite(M.negative_log_likelihood([np.array([[1.0, 0.0]])], [[1]]))


def test_brier_shape_errors():
    with pytest.raises(ValueError):
        M.brier_score([np.ones((2, 2)) / 2], [[0]])
    with pytest.raises(ValueError):
        M.brier_score([np.ones((1, 2)) / 2], [[2]])
    with pytest.raises(ValueError):
        M.negative_log_likelihood([np.ones((1, 2)) / 2, np.ones((1, 3)) / 3], [[0], [0]])


# --------------------------------------------------------------------------- chunks


def test_chunks_typed_and_untyped():
    assert M.chunks(["B-NP", "I-NP", "B-VP", "O", "B-NP"]) == [
        (0, 2, "NP"),
        (2, 3, "VP"),
        (4, 5, "NP"),
    ]
    assert M.chunks(["B", "I", "O", "B", "B", "I"]) == [(0, 2, ""), (3, 4, ""), (4, 6, "")]
    # IOB1: an I after O starts a chunk; a type change ends one
    assert M.chunks(["I-NP", "I-NP", "I-VP", "O", "I-PP"]) == [
        (0, 2, "NP"),
        (2, 3, "VP"),
        (4, 5, "PP"),
    ]
    assert M.chunks(["O", "O"]) == []


def test_chunk_f1_hand_computed():
    y_true = [["B-NP", "I-NP", "B-VP", "O", "B-NP"], ["B", "I", "O"]]
    y_pred = [["B-NP", "I-NP", "B-NP", "O", "B-NP"], ["B", "O", "O"]]
    # gold chunks: NP(0,2) VP(2,3) NP(4,5) | (0,2)  -> 4
    # pred chunks: NP(0,2) NP(2,3) NP(4,5) | (0,1)  -> 4; correct NP(0,2), NP(4,5) -> 2
    s = M.chunk_scores(y_true, y_pred)
    assert (s["n_true"], s["n_pred"], s["n_correct"]) == (4, 4, 2)
    assert s["precision"] == pytest.approx(0.5)
    assert s["recall"] == pytest.approx(0.5)
    assert M.chunk_f1(y_true, y_pred) == pytest.approx(0.5)


def test_gold_accuracy_and_span_f1_of_crowd_labels_hand_computed():
    gold = [["B-PER", "I-PER", "O"], ["O", "B-LOC"]]
    pred = [["B-PER", "O", None], ["O", "B-LOC"]]  # None: a token without votes
    assert M.gold_accuracy(gold, pred) == pytest.approx(100.0 * 3 / 4)  # None not scored
    # spans: gold PER(0-2), LOC; predicted PER(0-1) (wrong end), LOC; None read as O
    assert M.gold_span_f1(gold, pred) == pytest.approx(100.0 * 0.5)
    assert M.gold_accuracy([[None, "O"]], [["O", None]]) is None  # no scored token
    assert M.gold_accuracy([[None, "O"]], [["O", "O"]]) == 100.0
    assert M.gold_span_f1([[None, "O"]], [["O", "O"]]) is None  # gold incomplete
    assert M.gold_span_f1([["NN", "VB"]], [["NN", "VB"]]) is None  # no span scheme
    assert M.gold_span_f1([], []) is None


def test_chunk_f1_unequal_precision_recall_and_edge_cases():
    y_true = [["B", "I", "I", "O", "B"]]  # (0,3) (4,5)
    y_pred = [["B", "I", "I", "O", "O"]]  # (0,3)
    s = M.chunk_scores(y_true, y_pred)
    assert s["precision"] == 1.0 and s["recall"] == 0.5
    assert s["f1"] == pytest.approx(2 / 3)
    assert M.chunk_f1([["O"]], [["O"]]) == 0.0
    assert M.chunk_f1([["B-NP"]], [["B-NP"]]) == 1.0
    with pytest.raises(ValueError):
        M.chunk_f1([["B", None]], [["B", "I"]])
    with pytest.raises(ValueError):
        M.chunk_f1([["B"]], [["B", "I"]])


# ------------------------------------------- seqeval agrees with the former hand-written code


def _conlleval_chunks(labels):
    """The hand-written conlleval chunker gpsl used before seqeval (kept as the reference)."""
    def split(label):
        head, sep, kind = label.partition("-")
        return (head, kind) if sep else (label, "")

    def end_of_chunk(prev_tag, tag, prev_type, type_):
        if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
            return True
        if prev_tag in ("E", "S"):
            return True
        return prev_tag not in ("O", ".") and prev_type != type_

    def start_of_chunk(prev_tag, tag, prev_type, type_):
        if tag in ("B", "S"):
            return True
        if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
            return True
        return tag not in ("O", ".") and prev_type != type_

    out, prev_tag, prev_type, start = [], "O", "", None
    for i, label in enumerate(list(labels) + ["O"]):
        tag, type_ = split(label)
        if start is not None and end_of_chunk(prev_tag, tag, prev_type, type_):
            out.append((start, i, prev_type))
            start = None
        if start_of_chunk(prev_tag, tag, prev_type, type_):
            start = i
        prev_tag, prev_type = tag, type_
    return out


def _reference_scores(y_true, y_pred):
    n_true = n_pred = n_correct = 0
    for t, p in zip(y_true, y_pred):
        ct, cp = set(_conlleval_chunks(t)), set(_conlleval_chunks(p))
        n_true, n_pred, n_correct = n_true + len(ct), n_pred + len(cp), n_correct + len(ct & cp)
    return n_true, n_pred, n_correct


def _fixture():
    """The sample project's gold labels (BIO, five entity types) against corrupted copies,
    plus random IOB1, IOBES and untyped sequences."""
    from gpsl.io import read_conll

    gold = [s.labels for s in read_conll(Path(__file__).resolve().parents[2] / "sample_data"
                                         / "sample_gold.conll")]
    rng = np.random.default_rng(7)
    label_set = sorted({lab for g in gold for lab in g})
    pred = [[lab if rng.random() > 0.15 else label_set[rng.integers(len(label_set))]
             for lab in g] for g in gold]
    sets = {"iob1": ["I-NP", "I-VP", "B-NP", "O"], "iobes": ["B-X", "I-X", "E-X", "S-X",
                                                             "S-Y", "B-Y", "E-Y", "O"],
            "untyped": ["B", "I", "O"]}
    for labels in sets.values():
        for _ in range(200):
            n = int(rng.integers(1, 12))
            gold.append([labels[k] for k in rng.integers(len(labels), size=n)])
            pred.append([labels[k] for k in rng.integers(len(labels), size=n)])
    return gold, pred


def test_seqeval_chunk_scores_agree_with_the_hand_written_conlleval():
    gold, pred = _fixture()
    assert len(gold) > 900
    s = M.chunk_scores(gold, pred)
    assert (s["n_true"], s["n_pred"], s["n_correct"]) == _reference_scores(gold, pred)
    for g in gold:
        assert M.chunks(g) == _conlleval_chunks(g)


_ODD_LABELS = ["B-X", "I-X", "E-X", "S-X", "B-Y", "I-Y", "E-Y", "S-Y", "O", "B", "I", "E",
               "S", ".", "NP", "B-", "I-A-B", "B-A-B", "x-X", "O-X", "._"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_ODD_LABELS), max_size=14))
def test_chunks_are_seqevals_entities(labels):
    """The port (gpsl.metrics.entities) gives seqeval's get_entities on any label sequence:
    prefixed and untyped tags, IOBES, odd labels (no prefix, an empty or two-part type)."""
    import warnings

    from seqeval.metrics.sequence_labeling import get_entities

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = get_entities(list(labels))
    assert entities(labels) == want


def test_chunks_on_the_fixture_are_seqevals():
    import warnings

    from seqeval.metrics.sequence_labeling import get_entities

    gold, pred = _fixture()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for g in gold + pred:
            assert entities(g) == get_entities(list(g))


def test_conlleval_report_per_type():
    y_true = [["B-PER", "I-PER", "O", "B-LOC"], ["B-LOC", "O"]]
    y_pred = [["B-PER", "I-PER", "O", "O"], ["B-LOC", "B-PER"]]
    text = M.conlleval_report(y_true, y_pred)
    lines = text.splitlines()
    assert lines[0] == "processed 6 tokens with 3 phrases; found: 3 phrases; correct: 2."
    assert lines[1].startswith("accuracy:  66.67%; precision:  66.67%; recall:  66.67%")
    assert lines[2].strip() == "LOC: precision: 100.00%; recall:  50.00%; FB1:  66.67  1"
    assert lines[3].strip() == "PER: precision:  50.00%; recall: 100.00%; FB1:  66.67  2"
    assert M.is_chunk_label_set(["B-PER", "I-PER", "O"]) and not M.is_chunk_label_set(["N", "V"])


# --------------------------------------------------------------------------- ECE noise floor


def test_noise_floor_is_zero_for_sure_tokens():
    conf = np.r_[np.ones(50), np.zeros(10)]
    assert M.ece_noise_floor(conf, 15) == 0.0
    assert M.ece_noise_floor(conf, 10, binning="width") == 0.0
    assert math.isnan(M.ece_noise_floor([], 15))


def test_noise_floor_one_bin_equals_the_binomial_mean_absolute_deviation():
    from scipy.stats import binom

    n, p = 21, 0.5
    s = np.arange(n + 1)
    exact = float(np.sum(binom.pmf(s, n, p) * np.abs(s - n * p))) / n
    assert M.ece_noise_floor(np.full(n, p), 1) == pytest.approx(exact, rel=1e-12)
    assert M.ece_noise_floor(np.full(n, p), 1, binning="width") == pytest.approx(exact, rel=1e-12)
    # a sure token in the bin shifts the count but not the deviation: n counts it, though
    assert M.ece_noise_floor(np.r_[np.full(n, p), 1.0], 1) == pytest.approx(exact * n / (n + 1))


def test_noise_floor_matches_monte_carlo_for_both_binnings():
    rng = np.random.default_rng(3)
    conf = np.clip(1.0 - rng.beta(0.5, 6.0, size=600), 0.34, 1.0)
    draws = 2000
    for binning, n_bins, ece in (("mass", 15, M.ece_equal_mass),
                                 ("width", 10, M.expected_calibration_error)):
        sims = np.array([ece(conf, rng.random(conf.size) < conf, n_bins) for _ in range(draws)])
        floor = M.ece_noise_floor(conf, n_bins, binning=binning)
        assert abs(floor - sims.mean()) < 4 * sims.std() / np.sqrt(draws)


def test_noise_floor_normal_approximation_is_close_for_large_bins():
    rng = np.random.default_rng(5)
    conf = rng.uniform(0.6, 0.95, size=3000)
    exact = M.ece_noise_floor(conf, 3, exact_max=10_000)
    approx = M.ece_noise_floor(conf, 3, exact_max=100)
    assert approx == pytest.approx(exact, rel=0.01)


def test_noise_floor_shrinks_with_more_tokens_and_rejects_bad_binning():
    rng = np.random.default_rng(7)
    small = M.ece_noise_floor(rng.uniform(0.5, 1.0, 400))
    large = M.ece_noise_floor(rng.uniform(0.5, 1.0, 1600))
    assert large == pytest.approx(small / 2, rel=0.15)  # 1/sqrt(n)
    with pytest.raises(ValueError):
        M.ece_noise_floor([0.5], binning="quantile")


def test_consistency_band_is_the_binomial_quantiles():
    from scipy.stats import binom

    n, p = 40, 0.8
    lo, hi = M.consistency_band(np.full(n, p))
    assert lo == binom.ppf(0.025, n, p) / n and hi == binom.ppf(0.975, n, p) / n
    assert M.consistency_band(np.ones(7)) == (1.0, 1.0)  # sure tokens: no room at all
    # covers about 95% of simulated perfectly calibrated accuracies (discreteness: at least)
    rng = np.random.default_rng(11)
    conf = rng.uniform(0.6, 1.0, size=200)
    lo, hi = M.consistency_band(conf)
    acc = (rng.random((4000, conf.size)) < conf).mean(axis=1)
    inside = np.mean((acc >= lo - 1e-12) & (acc <= hi + 1e-12))
    assert 0.94 <= inside <= 0.99
    # the normal approximation for large bins is close to the exact quantiles
    big = rng.uniform(0.7, 0.99, size=3000)
    exact, approx = M.consistency_band(big, exact_max=5000), M.consistency_band(big, exact_max=10)
    assert np.allclose(exact, approx, atol=2.0 / big.size)
    with pytest.raises(ValueError):
        M.consistency_band(conf, level=1.0)


def test_reliability_table_with_consistency_bands():
    conf = [0.95, 0.92, 0.55, 0.6, 0.05]
    rows = M.reliability_table(conf, [1, 1, 0, 1, 0], 10, consistency=True)
    top = rows[9]
    assert (top["band_lo"], top["band_hi"]) == M.consistency_band([0.95, 0.92])
    assert rows[3]["band_lo"] is None and rows[3]["count"] == 0
    assert "band_lo" not in M.reliability_table(conf, [1, 1, 0, 1, 0], 10)[9]
