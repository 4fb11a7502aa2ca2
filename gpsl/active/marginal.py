"""Active-learning query strategies over a fitted model's per-token marginals.

Inputs
------
``marginals``
    ``list[np.ndarray]``, one ``(L_i, J)`` array per sentence whose rows sum to 1 (e.g. the RNS
    marginals of ``GPSL.predict_marginals``).
``labeled``
    ``list`` of boolean arrays of length ``L_i``; ``True`` where the token already has a label.
    Labeled tokens are never queried and do not enter sentence scores. ``None`` = nothing labeled.

Token uncertainty scores (higher = more uncertain = queried first)
-----------------------------------------------------------------
* ``least_confidence``: ``1 - max_j p_j``
* ``margin``: ``1 - (p_(1) - p_(2))`` (the two largest probabilities)
* ``entropy``: ``-sum_j p_j log p_j``, optionally divided by ``log J``
* ``random``: a seeded uniform draw

Sentence-level strategies aggregate a token score over the sentence's *unlabeled* tokens by
``max``, ``mean`` or ``sum``; ``random_sentence`` draws sentences uniformly.

:func:`query` ranks candidates best-first. Ties (equal scores up to 1e-12) are broken by a
permutation drawn from ``seed``, so the result is deterministic for a seed but not biased
towards low indices. See :data:`STRATEGIES` for the names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "AGGREGATES",
    "STRATEGIES",
    "QueryItem",
    "Strategy",
    "default_max_per_sentence",
    "entropy",
    "least_confidence",
    "margin",
    "query",
    "sentence_scores",
    "token_scores",
]


class QueryItem(NamedTuple):
    """One queried unit: a token (``token`` = its index) or a whole sentence (``token`` None)."""

    sentence: Any  # the sentence id (its index unless ``sentence_ids`` were given)
    token: int | None
    score: float


# --------------------------------------------------------------------------- token scores


def least_confidence(p: np.ndarray) -> np.ndarray:
    """``1 - max_j p_j`` for each row of an ``(L, J)`` array."""
    p = np.asarray(p, dtype=float)
    if p.shape[0] == 0:
        return np.zeros(0)
    return 1.0 - p.max(axis=1)


def margin(p: np.ndarray) -> np.ndarray:
    """``1 - (p_(1) - p_(2))`` for each row; with a single class the margin score is 0."""
    p = np.asarray(p, dtype=float)
    if p.shape[0] == 0:
        return np.zeros(0)
    if p.shape[1] < 2:
        return np.zeros(p.shape[0])
    top2 = np.partition(p, p.shape[1] - 2, axis=1)[:, -2:]
    return 1.0 - (top2[:, 1] - top2[:, 0])


def entropy(p: np.ndarray, normalize: bool = False) -> np.ndarray:
    """Row entropy ``-sum_j p_j log p_j`` (natural log, ``0 log 0 = 0``).

    With ``normalize=True`` it is divided by ``log J`` so it lies in ``[0, 1]`` (0 when J == 1).
    """
    p = np.asarray(p, dtype=float)
    if p.shape[0] == 0:
        return np.zeros(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    h = np.maximum(-terms.sum(axis=1), 0.0)
    if normalize:
        j = p.shape[1]
        h = h / math.log(j) if j > 1 else np.zeros_like(h)
    return h


@dataclass(frozen=True)
class Strategy:
    """A registered query strategy."""

    name: str
    level: str  # "token" or "sentence"
    score: str  # "least_confidence", "margin", "entropy" or "random"
    description: str


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in [
        Strategy("least_confidence", "token", "least_confidence", "tokens with the lowest max p"),
        Strategy("margin", "token", "margin", "tokens with the smallest top-2 margin"),
        Strategy("entropy", "token", "entropy", "tokens with the highest entropy"),
        Strategy("random", "token", "random", "uniformly random tokens"),
        Strategy(
            "sentence_least_confidence",
            "sentence",
            "least_confidence",
            "sentences by aggregated least confidence",
        ),
        Strategy("sentence_margin", "sentence", "margin", "sentences by aggregated margin"),
        Strategy("sentence_entropy", "sentence", "entropy", "sentences by aggregated entropy"),
        Strategy("random_sentence", "sentence", "random", "uniformly random sentences"),
    ]
}
"""Strategy names -> :class:`Strategy`. Token level: ``least_confidence``, ``margin``,
``entropy``, ``random``; sentence level: ``sentence_least_confidence``, ``sentence_margin``,
``sentence_entropy``, ``random_sentence``."""

_SCORERS: dict[str, Callable[..., np.ndarray]] = {
    "least_confidence": least_confidence,
    "margin": margin,
    "entropy": entropy,
}

AGGREGATES: dict[str, Callable[[np.ndarray], float]] = {
    "max": lambda s: float(np.max(s)),
    "mean": lambda s: float(np.mean(s)),
    "sum": lambda s: float(np.sum(s)),
}
"""Sentence aggregation functions over the unlabeled tokens' scores."""


# --------------------------------------------------------------------------- validation


def _rng(seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


def _validate(
    marginals: Sequence[np.ndarray],
    labeled: Sequence[np.ndarray] | None,
    sentence_ids: Sequence[Any] | None,
) -> tuple[list[np.ndarray], list[np.ndarray], list[Any]]:
    margs = []
    n_classes = None
    for i, m in enumerate(marginals):
        m = np.asarray(m, dtype=float)
        if m.ndim != 2:
            raise ValueError(f"sentence {i}: marginals must be 2-D (L, J), got shape {m.shape}")
        if n_classes is None:
            n_classes = m.shape[1]
        elif m.shape[1] != n_classes:
            raise ValueError(f"sentence {i}: {m.shape[1]} classes, expected {n_classes}")
        if m.size and (
            not np.all(np.isfinite(m))
            or m.min() < -1e-9
            or not np.allclose(m.sum(axis=1), 1.0, atol=1e-6)
        ):
            raise ValueError(f"sentence {i}: marginal rows must be probabilities summing to 1")
        margs.append(m)
    if labeled is None:
        labs = [np.zeros(m.shape[0], dtype=bool) for m in margs]
    else:
        if len(labeled) != len(margs):
            raise ValueError(f"{len(margs)} marginal arrays but {len(labeled)} labeled masks")
        labs = []
        for i, (m, lab) in enumerate(zip(margs, labeled)):
            lab = np.asarray(lab, dtype=bool)
            if lab.shape != (m.shape[0],):
                raise ValueError(
                    f"sentence {i}: labeled mask shape {lab.shape} does not match "
                    f"{m.shape[0]} tokens"
                )
            labs.append(lab)
    if sentence_ids is None:
        ids = list(range(len(margs)))
    else:
        ids = list(sentence_ids)
        if len(ids) != len(margs):
            raise ValueError(f"{len(margs)} marginal arrays but {len(ids)} sentence ids")
    return margs, labs, ids


def _resolve(strategy: str, level: str | None) -> tuple[str, str]:
    """Return ``(score_name, level)`` for a strategy name and an optional level override."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")
    s = STRATEGIES[strategy]
    if level is None:
        return s.score, s.level
    if level not in ("token", "sentence"):
        raise ValueError(f"level must be 'token' or 'sentence', got {level!r}")
    if s.level == "sentence" and level == "token":
        raise ValueError(f"strategy {strategy!r} is sentence-level; it cannot rank tokens")
    return s.score, level


# --------------------------------------------------------------------------- scores


def token_scores(
    marginals: Sequence[np.ndarray],
    strategy: str = "least_confidence",
    normalize_entropy: bool = False,
    seed=0,
) -> list[np.ndarray]:
    """Per-token scores (one ``(L_i,)`` array per sentence) for a strategy name.

    Sentence-level names use their underlying token score (``sentence_margin`` -> ``margin``).
    ``random`` / ``random_sentence`` give seeded uniform draws.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")
    name = STRATEGIES[strategy].score
    margs = [np.asarray(m, dtype=float) for m in marginals]
    if name == "random":
        rng = _rng(seed)
        return [rng.random(m.shape[0]) for m in margs]
    if name == "entropy":
        return [entropy(m, normalize=normalize_entropy) for m in margs]
    return [_SCORERS[name](m) for m in margs]


def sentence_scores(
    marginals: Sequence[np.ndarray],
    labeled: Sequence[np.ndarray] | None = None,
    strategy: str = "sentence_least_confidence",
    aggregate: str = "max",
    normalize_entropy: bool = False,
    seed=0,
) -> np.ndarray:
    """One score per sentence: the token score aggregated over its unlabeled tokens.

    Sentences without unlabeled tokens get ``nan`` (they are never queried). For the random
    strategies each candidate sentence gets one uniform draw.
    """
    if aggregate not in AGGREGATES:
        raise ValueError(f"unknown aggregate {aggregate!r}; choose from {', '.join(AGGREGATES)}")
    margs, labs, _ = _validate(marginals, labeled, None)
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")
    out = np.full(len(margs), np.nan)
    if STRATEGIES[strategy].score == "random":
        draws = _rng(seed).random(len(margs))
        for i, lab in enumerate(labs):
            if (~lab).any():
                out[i] = draws[i]
        return out
    scores = token_scores(margs, strategy, normalize_entropy=normalize_entropy)
    agg = AGGREGATES[aggregate]
    for i, (s, lab) in enumerate(zip(scores, labs)):
        free = s[~lab]
        if free.size:
            out[i] = agg(free)
    return out


def default_max_per_sentence(batch_size: int) -> int:
    """Default batch guard: at most ``ceil(batch_size / 4)`` tokens from one sentence (>= 1)."""
    return max(1, math.ceil(batch_size / 4))


def _rank(scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``scores`` best-first; ties (to 1e-12) in a random order drawn from ``rng``."""
    perm = rng.permutation(scores.size)
    key = np.round(scores[perm], 12)
    return perm[np.argsort(-key, kind="stable")]


def query(
    marginals: Sequence[np.ndarray],
    labeled: Sequence[np.ndarray] | None = None,
    strategy: str = "least_confidence",
    level: str | None = None,
    batch_size: int = 10,
    aggregate: str = "max",
    max_per_sentence: int | None = None,
    seed=0,
    sentence_ids: Sequence[Any] | None = None,
    normalize_entropy: bool = False,
) -> list[QueryItem]:
    """Pick up to ``batch_size`` unlabeled tokens (or sentences) to label next, best first.

    Parameters
    ----------
    marginals, labeled:
        See the module docstring. Shape mismatches raise :class:`ValueError`.
    strategy:
        A key of :data:`STRATEGIES`.
    level:
        ``None`` (default) uses the strategy's own level. ``"sentence"`` with a token strategy
        ranks sentences by that token score aggregated with ``aggregate`` (``"least_confidence"``
        + ``level="sentence"`` equals ``"sentence_least_confidence"``). A sentence strategy with
        ``level="token"`` is an error.
    batch_size:
        Number of items wanted. Fewer are returned when there are not enough candidates.
    aggregate:
        ``"max"``, ``"mean"`` or ``"sum"`` over a sentence's unlabeled tokens (sentence level).
    max_per_sentence:
        Token level only: at most this many tokens from one sentence in the batch; the rest of the
        batch comes from other sentences, and if the cap leaves too few candidates the batch is
        shorter. ``None`` = :func:`default_max_per_sentence` (``ceil(batch_size / 4)``); pass
        ``batch_size`` to disable the guard.
    seed:
        Integer, ``None`` or ``numpy.random.Generator``; drives tie-breaking and random strategies.
    sentence_ids:
        Optional ids reported in :attr:`QueryItem.sentence` instead of the sentence indices.
    normalize_entropy:
        Divide entropy scores by ``log J``.

    Returns
    -------
    list[QueryItem]
        Ranked best-first; ``token`` is ``None`` for sentence-level items.
    """
    if int(batch_size) != batch_size or batch_size < 0:
        raise ValueError(f"batch_size must be a non-negative integer, got {batch_size!r}")
    batch_size = int(batch_size)
    if aggregate not in AGGREGATES:
        raise ValueError(f"unknown aggregate {aggregate!r}; choose from {', '.join(AGGREGATES)}")
    score_name, lvl = _resolve(strategy, level)
    margs, labs, ids = _validate(marginals, labeled, sentence_ids)
    rng = _rng(seed)
    if batch_size == 0:
        return []

    if lvl == "sentence":
        name = "random_sentence" if score_name == "random" else f"sentence_{score_name}"
        s = sentence_scores(
            margs, labs, name, aggregate, normalize_entropy=normalize_entropy, seed=rng
        )
        cand = np.flatnonzero(~np.isnan(s))
        order = cand[_rank(s[cand], rng)][:batch_size]
        return [QueryItem(ids[i], None, float(s[i])) for i in order]

    if max_per_sentence is None:
        max_per_sentence = default_max_per_sentence(batch_size)
    if int(max_per_sentence) != max_per_sentence or max_per_sentence < 1:
        raise ValueError(f"max_per_sentence must be a positive integer, got {max_per_sentence!r}")

    per_sent = token_scores(margs, score_name, normalize_entropy=normalize_entropy, seed=rng)
    sent_idx, tok_idx, scores = [], [], []
    for i, (s, lab) in enumerate(zip(per_sent, labs)):
        free = np.flatnonzero(~lab)
        sent_idx.append(np.full(free.size, i, dtype=int))
        tok_idx.append(free)
        scores.append(s[free])
    if not scores:
        return []
    sent_idx = np.concatenate(sent_idx)
    tok_idx = np.concatenate(tok_idx)
    scores = np.concatenate(scores)
    taken: dict[int, int] = {}
    out: list[QueryItem] = []
    for k in _rank(scores, rng):
        i = int(sent_idx[k])
        if taken.get(i, 0) >= max_per_sentence:
            continue
        taken[i] = taken.get(i, 0) + 1
        out.append(QueryItem(ids[i], int(tok_idx[k]), float(scores[k])))
        if len(out) == batch_size:
            break
    return out
