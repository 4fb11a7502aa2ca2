"""Evaluation metrics: Hamming loss, accuracy, calibration, paired t-test, chunk F1, and
the agreement of aggregated crowd labels with a crowd file's gold.

numpy and scipy; chunks by seqeval's rules (:func:`gpsl.tags.entities`). Conventions:

* Label sequences are ``list[list[str | None]]`` (one list per sentence). A gold label ``None`` is a
  missing label: the token is excluded from token metrics and counted separately (see
  :func:`token_counts`).
* :func:`hamming_loss` is a percentage (the paper's "% of tokens wrong"); :func:`token_accuracy`
  and :func:`chunk_f1` are fractions in ``[0, 1]``.
* Marginals are ``list[np.ndarray]`` of ``(L, J)`` arrays (or one ``(N, J)`` array); gold indices
  are the matching ``list`` of integer sequences, with ``None`` or a negative index for a missing
  label.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from gpsl.tags import entities, scheme_of, split_tag

__all__ = [
    "TokenCounts", "brier_score", "calibration_by_band", "calibration_summary", "chunk_f1",
    "chunk_scores", "chunk_scores_by_type", "chunks", "conlleval_report", "ece_equal_mass",
    "equal_mass_reliability", "expected_calibration_error", "flatten", "frequency_bands",
    "gold_accuracy", "gold_span_f1", "hamming_loss", "is_chunk_label_set",
    "negative_log_likelihood", "paired_t_test", "reliability_table", "selective_accuracy",
    "threshold_table", "token_accuracy", "token_counts",
]


class TokenCounts(NamedTuple):
    """Token tallies of a prediction against gold labels."""

    wrong: int  # scored tokens whose prediction differs from the gold label
    scored: int  # tokens with a gold label
    missing: int  # tokens whose gold label is None (not scored)


def flatten(seqs: Iterable[Iterable[Any]]) -> list:
    """Concatenate a list of sequences into one flat list."""
    return [item for seq in seqs for item in seq]


def _check_paired(y_true: Sequence[Sequence[Any]], y_pred: Sequence[Sequence[Any]]) -> None:
    if len(y_true) != len(y_pred):
        raise ValueError(f"{len(y_true)} gold sentences but {len(y_pred)} predicted sentences")
    for i, (t, p) in enumerate(zip(y_true, y_pred)):
        if len(t) != len(p):
            raise ValueError(f"sentence {i}: {len(t)} gold labels but {len(p)} predicted labels")


def token_counts(y_true: Sequence[Sequence[Any]], y_pred: Sequence[Sequence[Any]]) -> TokenCounts:
    """Count wrong, scored and missing-gold tokens over a list of sentences."""
    _check_paired(y_true, y_pred)
    wrong = scored = missing = 0
    for t_seq, p_seq in zip(y_true, y_pred):
        for t, p in zip(t_seq, p_seq):
            if t is None:
                missing += 1
                continue
            scored += 1
            wrong += t != p
    return TokenCounts(int(wrong), int(scored), int(missing))


def hamming_loss(y_true: Sequence[Sequence[Any]], y_pred: Sequence[Sequence[Any]]) -> float:
    """Percentage of tokens wrong over all tokens with a gold label (``nan`` if there are none).

    Tokens whose gold label is ``None`` are excluded; :func:`token_counts` reports how many.
    """
    c = token_counts(y_true, y_pred)
    return 100.0 * c.wrong / c.scored if c.scored else float("nan")


def token_accuracy(y_true: Sequence[Sequence[Any]], y_pred: Sequence[Sequence[Any]]) -> float:
    """Fraction of tokens with a gold label that are predicted right (``nan`` if none)."""
    c = token_counts(y_true, y_pred)
    return (c.scored - c.wrong) / c.scored if c.scored else float("nan")


# --------------------------------------------------------------------------- calibration


def _confidences(confidences, n_bins: int = 1) -> np.ndarray:
    """The confidences as a flat float array, checked to lie in ``[0, 1]`` (and ``n_bins`` to
    be a positive integer)."""
    conf = np.asarray(confidences, dtype=float).ravel()
    if int(n_bins) != n_bins or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    if conf.size and (np.any(~np.isfinite(conf)) or conf.min() < 0.0 or conf.max() > 1.0):
        raise ValueError("confidences must lie in [0, 1]")
    return conf


def _calibration_inputs(confidences, correct, n_bins: int) -> tuple[np.ndarray, np.ndarray]:
    conf = np.asarray(confidences, dtype=float).ravel()
    corr = np.asarray(correct, dtype=float).ravel()
    if conf.shape != corr.shape:
        raise ValueError(f"{conf.size} confidences but {corr.size} correctness values")
    return _confidences(conf, n_bins), corr


def _bin_index(conf: np.ndarray, n_bins: int) -> np.ndarray:
    # equal-width bins [k/n, (k+1)/n), the last one closed so that 1.0 falls into it
    return np.minimum((conf * n_bins).astype(int), n_bins - 1)


def reliability_table(confidences, correct, n_bins: int = 10, *,
                      consistency: bool = False) -> list[dict]:
    """Per-bin reliability statistics over ``n_bins`` equal-width confidence bins.

    Returns one dict per bin, in order: ``bin_lo``, ``bin_hi``, ``count``, ``mean_confidence`` and
    ``accuracy`` (the last two are ``None`` for an empty bin); with ``consistency=True`` also
    ``band_lo``/``band_hi``, the 95% :func:`consistency_band` of the bin's tokens (the
    accuracies a perfectly calibrated tagger would show there; ``None`` for an empty bin).
    Bins are ``[lo, hi)`` except the last, which includes 1.0.
    """
    conf, corr = _calibration_inputs(confidences, correct, n_bins)
    idx = _bin_index(conf, n_bins)
    rows = []
    for k in range(n_bins):
        mask = idx == k
        count = int(mask.sum())
        row = {
            "bin_lo": k / n_bins,
            "bin_hi": (k + 1) / n_bins,
            "count": count,
            "mean_confidence": float(conf[mask].mean()) if count else None,
            "accuracy": float(corr[mask].mean()) if count else None,
        }
        if consistency:
            row["band_lo"], row["band_hi"] = (consistency_band(conf[mask]) if count
                                              else (None, None))
        rows.append(row)
    return rows


def expected_calibration_error(confidences, correct, n_bins: int = 10) -> float:
    """Expected calibration error: ``sum_k (n_k / n) |accuracy_k - mean_confidence_k|``.

    ``confidences`` are predicted-label probabilities in ``[0, 1]``; ``correct`` are booleans (or
    0/1) saying whether each prediction was right. Equal-width bins; ``nan`` for empty input.
    """
    conf, corr = _calibration_inputs(confidences, correct, n_bins)
    if conf.size == 0:
        return float("nan")
    ece = 0.0
    for row in reliability_table(conf, corr, n_bins):
        if row["count"]:
            ece += row["count"] * abs(row["accuracy"] - row["mean_confidence"])
    return float(ece / conf.size)


def _equal_mass_bins(conf: np.ndarray, n_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """``(order, bins)``: the tokens sorted by confidence and the equal-mass bin of each sorted
    position (ties share the lower bin; :func:`equal_mass_reliability`)."""
    n = conf.size
    order = np.argsort(conf, kind="stable")
    cs = conf[order]
    bins = (np.arange(n) * n_bins) // n
    first = np.r_[0, np.flatnonzero(cs[1:] != cs[:-1]) + 1]  # first position of each value
    group = np.cumsum(np.r_[0, (cs[1:] != cs[:-1]).astype(int)])
    return order, bins[first][group]


def equal_mass_reliability(confidences, correct, n_bins: int = 15) -> list[dict]:
    """Reliability over ``n_bins`` equal-mass bins: the tokens sorted by confidence and cut into
    bins of (almost) equal counts, except that tokens of equal confidence always share a bin
    (a tie across a cut joins the lower bin). Same row keys as :func:`reliability_table`, with
    ``bin_lo``/``bin_hi`` the smallest and largest confidence of the bin; empty bins are left
    out."""
    conf, corr = _calibration_inputs(confidences, correct, n_bins)
    if conf.size == 0:
        return []
    order, bins = _equal_mass_bins(conf, n_bins)
    rows = []
    for k in np.unique(bins):
        part = order[bins == k]
        rows.append({"bin_lo": float(conf[part].min()), "bin_hi": float(conf[part].max()),
                     "count": int(part.size), "mean_confidence": float(conf[part].mean()),
                     "accuracy": float(corr[part].mean())})
    return rows


def ece_equal_mass(confidences, correct, n_bins: int = 15) -> float:
    """ECE over ``n_bins`` equal-mass bins (:func:`equal_mass_reliability`); ``nan`` if empty.

    Equal-mass bins put as many tokens in each bin, so the crowded top bin of a tagger (most
    tokens near confidence 1) is split and the error there is not averaged away."""
    conf, corr = _calibration_inputs(confidences, correct, n_bins)
    if conf.size == 0:
        return float("nan")
    rows = equal_mass_reliability(conf, corr, n_bins)
    return float(sum(r["count"] * abs(r["accuracy"] - r["mean_confidence"]) for r in rows)
                 / conf.size)


#: bins up to this many tokens get the exact Poisson-binomial law in :func:`ece_noise_floor`
#: and :func:`consistency_band` (the normal approximation above)
FLOOR_EXACT_MAX = 2000


def _poisson_binomial(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The law of ``S``, the number of successes of independent Bernoulli(p_t) trials (a
    Poisson-binomial variable): ``(values, probabilities)``, by convolving the trials' laws one
    at a time, ``P_{k+1}(s) = (1 - p) P_k(s) + p P_k(s-1)`` (a sure trial only shifts ``S``)."""
    law = np.ones(1)
    for q in p[(p > 0.0) & (p < 1.0)]:
        nxt = np.empty(law.size + 1)
        nxt[:-1] = law * (1.0 - q)
        nxt[-1] = 0.0
        nxt[1:] += law * q
        law = nxt
    return np.arange(law.size) + float(np.sum(p >= 1.0)), law


def _mean_abs_deviation(p: np.ndarray, exact_max: int = FLOOR_EXACT_MAX) -> float:
    """``E|S - sum(p)|`` for ``S`` Poisson-binomial (:func:`_poisson_binomial`). Exact up to
    ``exact_max`` trials; above it the normal approximation ``sigma sqrt(2/pi)``,
    ``sigma^2 = sum p(1-p)`` (the central limit theorem, good once ``sigma`` is a few units)."""
    p = np.asarray(p, dtype=float)
    mu = float(p.sum())
    var = float(np.sum(p * (1.0 - p)))
    if var == 0.0:
        return 0.0
    if p.size > exact_max:
        return float(np.sqrt(var) * np.sqrt(2.0 / np.pi))
    s, law = _poisson_binomial(p)
    return float(np.sum(law * np.abs(s - mu)))


def consistency_band(confidences, level: float = 0.95,
                     exact_max: int = FLOOR_EXACT_MAX) -> tuple[float, float]:
    """The range of accuracies a perfectly calibrated tagger shows on these tokens with
    probability ``level`` (a consistency bar of the reliability diagram, Bröcker and Smith
    2007): the ``(1-level)/2`` and ``(1+level)/2`` quantiles of ``S/n`` for ``S`` the number of
    tokens right when each is right with its confidence (Poisson-binomial; exact up to
    ``exact_max`` tokens, the normal approximation above, clipped to ``[0, 1]``). A bin whose
    accuracy lies outside it is miscalibrated beyond chance. ``(nan, nan)`` for no tokens."""
    conf = _confidences(confidences)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), not {level!r}")
    n = conf.size
    if n == 0:
        return float("nan"), float("nan")
    lo_q, hi_q = (1.0 - level) / 2.0, (1.0 + level) / 2.0
    if n > exact_max:
        from scipy.stats import norm

        mu, sd = float(conf.mean()), float(np.sqrt(np.sum(conf * (1.0 - conf)))) / n
        return (float(np.clip(mu + norm.ppf(lo_q) * sd, 0.0, 1.0)),
                float(np.clip(mu + norm.ppf(hi_q) * sd, 0.0, 1.0)))
    s, law = _poisson_binomial(conf)
    cdf = np.cumsum(law)
    lo = s[min(int(np.searchsorted(cdf, lo_q - 1e-12)), s.size - 1)]
    hi = s[min(int(np.searchsorted(cdf, hi_q - 1e-12)), s.size - 1)]
    return float(lo / n), float(hi / n)


def ece_noise_floor(confidences, n_bins: int = 15, binning: str = "mass",
                    exact_max: int = FLOOR_EXACT_MAX) -> float:
    r"""The ECE a *perfectly calibrated* tagger is expected to show on these tokens.

    A binned ECE is never zero on finite data: even when each token is right with exactly
    its confidence ``c_t`` (``correct_t ~ Bernoulli(c_t)``, independently), a bin's accuracy
    scatters around its mean confidence. The bins depend on the confidences only, so the
    expected ECE of such a tagger is

    .. math::

       \mathrm{floor} = \frac1n \sum_k \mathbb E\Big|S_k - \sum_{t \in k} c_t\Big|,
       \qquad S_k = \sum_{t \in k} \mathrm{correct}_t,

    with ``S_k`` Poisson-binomial (:func:`_mean_abs_deviation`: exact up to ``exact_max``
    tokens per bin, the normal approximation above). ``binning``: ``"mass"`` the bins of
    :func:`ece_equal_mass`, ``"width"`` those of :func:`expected_calibration_error`. An ECE
    at or below the floor cannot be told from perfect calibration on this many tokens; it
    shrinks like ``1/sqrt(n)`` and is lower for a sharper tagger (confidences near 0 or 1
    scatter less). ``nan`` for no tokens."""
    if binning not in ("mass", "width"):
        raise ValueError(f"binning must be 'mass' or 'width', not {binning!r}")
    conf = _confidences(confidences, n_bins)
    if conf.size == 0:
        return float("nan")
    if binning == "mass":
        order, bins = _equal_mass_bins(conf, n_bins)
        conf = conf[order]
    else:
        bins = _bin_index(conf, n_bins)
    total = sum(_mean_abs_deviation(conf[bins == k], exact_max) for k in np.unique(bins))
    return float(total / conf.size)


def selective_accuracy(confidences, correct, coverages=None) -> list[dict]:
    """Accuracy of the ``k%`` most confident tokens, for each coverage ``k`` in ``coverages``
    (fractions; default 5%, 10%, ..., 100%): rows ``coverage``, ``count``, ``accuracy``,
    ``min_confidence`` (the confidence of the least sure token kept)."""
    conf, corr = _calibration_inputs(confidences, correct, 1)
    if coverages is None:
        coverages = np.round(np.arange(0.05, 1.0001, 0.05), 2)
    order = np.argsort(-conf, kind="stable")
    rows = []
    for k in coverages:
        n = int(round(float(k) * conf.size))
        if n == 0:
            continue
        keep = order[:n]
        rows.append({"coverage": float(k), "count": n, "accuracy": float(corr[keep].mean()),
                     "min_confidence": float(conf[keep].min())})
    return rows


def threshold_table(confidences, correct, thresholds=(0.5, 0.7, 0.8, 0.9, 0.95, 0.99)) -> \
        list[dict]:
    """For each accept threshold: the share of tokens at or above it and their accuracy (what
    "accept suggestions >= threshold" would accept and how often it would be right)."""
    conf, corr = _calibration_inputs(confidences, correct, 1)
    rows = []
    for t in thresholds:
        keep = conf >= t
        n = int(keep.sum())
        rows.append({"threshold": float(t), "count": n,
                     "share": float(n / conf.size) if conf.size else float("nan"),
                     "accuracy": float(corr[keep].mean()) if n else None})
    return rows


def frequency_bands(gold_labels: Sequence, train_labels: Sequence, rare_share: float = 0.05) \
        -> dict[str, str]:
    """``{label: "frequent" | "rare"}``: a label is rare when it is less than ``rare_share`` of
    the labeled training tokens (``train_labels``: flat or per sentence; ``None`` skipped).
    Labels of ``gold_labels`` never seen in training are rare."""
    flat = [v for seq in train_labels for v in (seq if isinstance(seq, (list, tuple))
                                                   else [seq]) if v is not None]
    total = len(flat)
    counts: dict = {}
    for v in flat:
        counts[v] = counts.get(v, 0) + 1
    labels = set(counts) | {v for v in gold_labels if v is not None}
    return {lab: ("frequent" if total and counts.get(lab, 0) / total >= rare_share else "rare")
            for lab in sorted(labels, key=str)}


def calibration_by_band(confidences, correct, gold_labels: Sequence, bands: dict) -> list[dict]:
    """Accuracy, mean confidence and equal-mass ECE of the tokens of each frequency band
    (``bands``: :func:`frequency_bands`), rows ``band, tokens, accuracy, mean_confidence,
    ece_mass, labels`` (bands without tokens left out)."""
    conf, corr = _calibration_inputs(confidences, correct, 1)
    rows = []
    for band in ("frequent", "rare"):
        sel = np.array([bands.get(g) == band for g in gold_labels], dtype=bool)
        if sel.any():
            rows.append({"band": band, "tokens": int(sel.sum()),
                         "accuracy": float(corr[sel].mean()),
                         "mean_confidence": float(conf[sel].mean()),
                         "ece_mass": ece_equal_mass(conf[sel], corr[sel]),
                         "labels": sorted({g for g, k in zip(gold_labels, sel) if k}, key=str)})
    return rows


def calibration_summary(marginals, gold, *, n_bins_mass: int = 15, n_bins_width: int = 10) \
        -> dict:
    """Every per-token calibration figure of marginals against gold indices (missing gold
    skipped): ``n``, ``accuracy``, ``mean_confidence``, ``ece_mass`` (15 equal-mass bins),
    ``ece_width`` (10 equal-width bins), ``nll``, ``brier``, plus ``conf``/``correct`` arrays."""
    probs, idx = _probs_and_gold(marginals, gold)
    conf = probs.max(axis=1) if probs.size else np.zeros(0)
    conf = np.clip(conf, 0.0, 1.0)
    correct = probs.argmax(axis=1) == idx if probs.size else np.zeros(0, dtype=bool)
    n = int(idx.size)
    return {
        "n": n,
        "accuracy": float(correct.mean()) if n else float("nan"),
        "mean_confidence": float(conf.mean()) if n else float("nan"),
        "ece_mass": ece_equal_mass(conf, correct, n_bins_mass),
        "ece_width": expected_calibration_error(conf, correct, n_bins_width),
        "nll": negative_log_likelihood(probs, idx) if n else float("nan"),
        "brier": brier_score(probs, idx) if n else float("nan"),
        "conf": conf,
        "correct": correct,
    }


# --------------------------------------------------------------------------- significance


def paired_t_test(a, b) -> tuple[float, float]:
    """Paired t-test (``scipy.stats.ttest_rel``) of ``a`` against ``b``; returns ``(t, p)``.

    Degenerate cases never return ``nan`` for two or more pairs: identical samples give
    ``(0.0, 1.0)``; a constant non-zero difference gives ``(+-inf, 0.0)``. Fewer than two pairs
    give ``(nan, nan)``.
    """
    from scipy import stats

    a = np.asarray(a, dtype=float).ravel()
    b = np.asarray(b, dtype=float).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.size} and {b.size}")
    if a.size < 2:
        return float("nan"), float("nan")
    d = a - b
    if np.all(d == 0):
        return 0.0, 1.0
    if np.ptp(d) == 0:
        return math.copysign(math.inf, float(d[0])), 0.0
    t, p = stats.ttest_rel(a, b)
    return float(t), float(p)


# --------------------------------------------------------------------------- probabilistic


def _probs_and_gold(marginals, gold) -> tuple[np.ndarray, np.ndarray]:
    """Stack marginals into ``(N, J)`` and gold into ``(N,)``; drop tokens with missing gold."""
    if isinstance(marginals, np.ndarray) and marginals.ndim == 2:
        probs = np.asarray(marginals, dtype=float)
        gold_flat = list(np.asarray(gold, dtype=object).ravel()) if len(gold) else []
    else:
        if len(marginals) != len(gold):
            raise ValueError(f"{len(marginals)} marginal arrays but {len(gold)} gold sequences")
        arrays = []
        for i, (m, g) in enumerate(zip(marginals, gold)):
            m = np.asarray(m, dtype=float)
            if m.ndim != 2 or m.shape[0] != len(g):
                raise ValueError(f"sentence {i}: marginals {m.shape} do not match {len(g)} labels")
            arrays.append(m)
        if not arrays:
            return np.zeros((0, 0)), np.zeros(0, dtype=int)
        widths = {a.shape[1] for a in arrays}
        if len(widths) != 1:
            raise ValueError(f"marginals have different numbers of classes: {sorted(widths)}")
        probs = np.concatenate(arrays, axis=0)
        gold_flat = flatten(gold)
    if probs.shape[0] != len(gold_flat):
        raise ValueError(f"{probs.shape[0]} marginal rows but {len(gold_flat)} gold labels")
    keep = np.array([g is not None and int(g) >= 0 for g in gold_flat], dtype=bool)
    idx = np.array([int(g) if k else -1 for g, k in zip(gold_flat, keep)], dtype=int)
    if np.any(idx[keep] >= probs.shape[1]):
        raise ValueError(f"gold index out of range for {probs.shape[1]} classes")
    return probs[keep], idx[keep]


def brier_score(marginals, gold) -> float:
    """Multi-class Brier score: mean over tokens of ``sum_j (p_j - [j == gold])^2``.

    Ranges over ``[0, 2]``; tokens with missing gold (``None`` or negative) are skipped; ``nan``
    if no token is left.
    """
    probs, idx = _probs_and_gold(marginals, gold)
    if idx.size == 0:
        return float("nan")
    onehot = np.zeros_like(probs)
    onehot[np.arange(idx.size), idx] = 1.0
    return float(np.mean(np.sum((probs - onehot) ** 2, axis=1)))


def negative_log_likelihood(marginals, gold, eps: float = 1e-12) -> float:
    """Mean negative log probability of the gold label (probabilities clipped below at ``eps``).

    Tokens with missing gold are skipped; ``nan`` if no token is left.
    """
    probs, idx = _probs_and_gold(marginals, gold)
    if idx.size == 0:
        return float("nan")
    p = np.clip(probs[np.arange(idx.size), idx], eps, 1.0)
    return float(-np.mean(np.log(p)))


# --------------------------------------------------------------------------- chunks
#
# Chunks are found by seqeval's rules (conlleval's start/end-of-chunk rules for IOB1, IOB2/BIO,
# IOBES and untyped B/I/O), ported: :func:`gpsl.tags.entities`.

def _complete(labels: Sequence) -> list[str]:
    out = list(labels)
    if any(lab is None for lab in out):
        raise ValueError("chunk metrics need complete labels (found None)")
    return [str(lab) for lab in out]


def chunks(labels: Sequence[str]) -> list[tuple[int, int, str]]:
    """Chunks of one labeled sentence as ``(start, end_exclusive, type)`` (untyped ``B``/``I``
    chunks have type ``""``), by :func:`entities` (seqeval's ``get_entities``)."""
    labels = _complete(labels)
    out = []
    for kind, start, end in entities(labels):
        untyped = kind == "_" and not any(split_tag(lab)[1] == "_" for lab in labels)
        out.append((start, end + 1, "" if untyped else kind))
    return out


def _chunk_sets(y_true, y_pred):
    _check_paired(y_true, y_pred)
    for t, p in zip(y_true, y_pred):
        yield set(chunks(t)), set(chunks(p))


def chunk_scores(y_true: Sequence[Sequence[str]], y_pred: Sequence[Sequence[str]]) -> dict:
    """conlleval-style exact-match chunk precision, recall and F1 (fractions, 0 when undefined).

    Returns ``precision``, ``recall``, ``f1``, ``n_true``, ``n_pred``, ``n_correct``. A chunk is
    correct when its start, end and type all match. Gold labels must be complete (no ``None``).
    """
    n_true = n_pred = n_correct = 0
    for ct, cp in _chunk_sets(y_true, y_pred):
        n_true += len(ct)
        n_pred += len(cp)
        n_correct += len(ct & cp)
    return _prf(n_true, n_pred, n_correct)


def _prf(n_true: int, n_pred: int, n_correct: int) -> dict:
    precision = n_correct / n_pred if n_pred else 0.0
    recall = n_correct / n_true if n_true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "n_true": n_true,
            "n_pred": n_pred, "n_correct": n_correct}


def chunk_f1(y_true: Sequence[Sequence[str]], y_pred: Sequence[Sequence[str]]) -> float:
    """conlleval-style chunk F1 as a fraction (see :func:`chunk_scores`)."""
    return chunk_scores(y_true, y_pred)["f1"]


def chunk_scores_by_type(y_true, y_pred) -> dict[str, dict]:
    """:func:`chunk_scores` per chunk type (sorted by type)."""
    counts: dict[str, list[int]] = {}
    for ct, cp in _chunk_sets(y_true, y_pred):
        for _a, _b, kind in ct:
            counts.setdefault(kind, [0, 0, 0])[0] += 1
        for _a, _b, kind in cp:
            counts.setdefault(kind, [0, 0, 0])[1] += 1
        for _a, _b, kind in ct & cp:
            counts[kind][2] += 1
    return {kind: _prf(*counts[kind]) for kind in sorted(counts)}


def is_chunk_label_set(labels: Iterable[str]) -> bool:
    """True when every label is ``O`` or has a one-letter IOB/IOBES prefix (``B-NP``, ``I``)."""
    labels = [lab for lab in labels if lab is not None]
    return bool(labels) and all(
        lab == "O" or split_tag(lab)[0] in ("B", "I", "E", "S") for lab in labels) and \
        any(lab != "O" for lab in labels)


def gold_accuracy(y_true, y_pred) -> float | None:
    """Accuracy (%) of ``y_pred`` on the tokens that have both a gold and a predicted label
    (``None`` marks either missing); ``None`` without such a token (crowd labels against a
    crowd file's gold: ``gpsl aggregate``'s line and report)."""
    pairs = [(g, p) for t, q in zip(y_true, y_pred) for g, p in zip(t, q)
             if g is not None and p is not None]
    return 100.0 * sum(g == p for g, p in pairs) / len(pairs) if pairs else None


def gold_span_f1(y_true, y_pred) -> float | None:
    """Span F1 (%, :func:`chunk_scores`: exact match, conlleval rules) of ``y_pred`` (a
    ``None`` read as ``O``) when every gold label is given and the gold labels form a span
    scheme (:func:`gpsl.tags.scheme_of`); else ``None``."""
    if not y_true or any(g is None for t in y_true for g in t) or \
            scheme_of({g for t in y_true for g in t}) is None:
        return None
    pred = [["O" if p is None else p for p in q] for q in y_pred]
    return 100.0 * chunk_scores([list(t) for t in y_true], pred)["f1"]


def conlleval_report(y_true, y_pred) -> str:
    """The conlleval summary: tokens, phrases, accuracy and overall and per-type precision,
    recall and FB1 (percentages), one line per chunk type."""
    n_tokens = sum(len(s) for s in y_true)
    right = sum(a == b for t, p in zip(y_true, y_pred) for a, b in zip(t, p))
    total = chunk_scores(y_true, y_pred)
    lines = [
        f"processed {n_tokens} tokens with {total['n_true']} phrases; found: "
        f"{total['n_pred']} phrases; correct: {total['n_correct']}.",
        f"accuracy: {100.0 * right / max(1, n_tokens):6.2f}%; precision: "
        f"{100 * total['precision']:6.2f}%; recall: {100 * total['recall']:6.2f}%; "
        f"FB1: {100 * total['f1']:6.2f}",
    ]
    for kind, s in chunk_scores_by_type(y_true, y_pred).items():
        lines.append(f"{kind or '(untyped)':>17}: precision: {100 * s['precision']:6.2f}%; "
                     f"recall: {100 * s['recall']:6.2f}%; FB1: {100 * s['f1']:6.2f}  "
                     f"{s['n_pred']}")
    return "\n".join(lines)
