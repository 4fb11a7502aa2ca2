"""``bench.crowd``'s simulated crowd: annotator kinds (expert, novice, spammer, label-swapper),
their confusion matrices, and the votes drawn on a share of the training tokens."""

from __future__ import annotations

import numpy as np

# --------------------------------------------------------------------------- simulation


def similar_label(label: str, classes) -> str | None:
    """The label a novice confuses ``label`` with: B-X <-> I-X (B <-> I), else None."""
    for a, b in (("B-", "I-"), ("I-", "B-")):
        if label.startswith(a) and b + label[len(a):] in classes:
            return b + label[len(a):]
    if label in ("B", "I"):
        other = "I" if label == "B" else "B"
        return other if other in classes else None
    return None


def swap_permutation(classes) -> np.ndarray:
    """A derangement of the label indices: B-X <-> I-X swaps, the remaining labels paired in
    sorted order (an odd one out joins the last pair as a 3-cycle)."""
    J = len(classes)
    perm = -np.ones(J, dtype=np.int64)
    index = {c: i for i, c in enumerate(classes)}
    for i, c in enumerate(classes):
        s = similar_label(c, classes)
        if s is not None and perm[i] < 0 and perm[index[s]] < 0:
            perm[i], perm[index[s]] = index[s], i
    rest = [i for i in range(J) if perm[i] < 0]
    for k in range(0, len(rest) - 1, 2):
        perm[rest[k]], perm[rest[k + 1]] = rest[k + 1], rest[k]
    if len(rest) % 2 == 1:
        odd = rest[-1]
        if J == 1:
            perm[odd] = odd
        else:
            a = rest[-3] if len(rest) >= 3 else int(np.flatnonzero(np.arange(J) != odd)[0])
            b = perm[a]
            perm[a], perm[b], perm[odd] = b, odd, a  # a -> b -> odd -> a
    return perm


def annotator_matrix(kind: str, classes, rng=None) -> np.ndarray:
    """The simulated confusion matrix ``P[y, l]`` of one annotator of ``kind``."""
    J = len(classes)
    if J == 1:
        return np.ones((1, 1))
    P = np.zeros((J, J))
    if kind == "expert":
        P[:] = 0.05 / (J - 1)
        np.fill_diagonal(P, 0.95)
    elif kind == "novice":
        for y, c in enumerate(classes):
            s = similar_label(c, classes)
            if s is None or J == 2:
                P[y] = 0.30 / (J - 1)
            else:
                P[y] = 0.30 * 0.2 / max(J - 2, 1)
                P[y, classes.index(s)] = 0.30 * 0.8
            P[y, y] = 0.70
    elif kind == "spammer":
        P[:] = 1.0 / J
    elif kind == "swapper":
        perm = swap_permutation(classes)
        P[:] = 0.10 / (J - 1)
        for y in range(J):
            P[y, perm[y]] = 0.90
    else:
        raise ValueError(f"unknown annotator kind {kind!r}")
    return P / P.sum(axis=1, keepdims=True)


def pool_kinds(n_annotators: int, spam: float) -> list[str]:
    """Annotator kinds: ``round(spam * n)`` spammers, one swapper, the rest experts/novices."""
    n_spam = int(round(spam * n_annotators))
    rest = n_annotators - n_spam - 1
    if rest < 0:
        raise ValueError("too few annotators for the spammer fraction and one swapper")
    n_exp = (rest + 1) // 2
    return ["expert"] * n_exp + ["novice"] * (rest - n_exp) + ["spammer"] * n_spam + ["swapper"]


def parse_votes(spec) -> tuple[int, int]:
    text = str(spec)
    lo, _, hi = text.partition("-")
    lo_i, hi_i = int(lo), int(hi or lo)
    if not 1 <= lo_i <= hi_i:
        raise ValueError(f"bad votes per token {spec!r}")
    return lo_i, hi_i


def simulate(y_true: np.ndarray, classes, n_annotators: int, votes, coverage: float,
             spam: float, rng: np.random.Generator) -> dict:
    """Draw the annotators and their votes on the flat true labels ``y_true`` (indices).

    Returns ``{"kinds", "token", "annotator", "label", "realised"}`` (realised accuracy per
    annotator: fraction of their votes equal to the true label).
    """
    lo, hi = parse_votes(votes)
    if hi > n_annotators:
        raise ValueError(f"{hi} votes per token need at least {hi} annotators")
    if not 0.0 < coverage <= 1.0:
        raise ValueError("coverage must lie in (0, 1]")
    kinds = pool_kinds(n_annotators, spam)
    mats = [annotator_matrix(k, list(classes)) for k in kinds]
    n = y_true.size
    covered = np.sort(rng.permutation(n)[: int(round(coverage * n))])
    tok, ann = [], []
    for t in covered:
        k = int(rng.integers(lo, hi + 1))
        who = rng.choice(n_annotators, size=k, replace=False)
        tok.extend([t] * k)
        ann.extend(int(a) for a in who)
    tok = np.array(tok, dtype=np.int64)
    ann = np.array(ann, dtype=np.int64)
    J = len(classes)
    cum = np.cumsum(np.stack(mats)[ann, y_true[tok]], axis=1)
    u = rng.random(tok.size)[:, None]
    lab = np.minimum((u > cum).sum(axis=1), J - 1)
    right = np.bincount(ann, weights=(lab == y_true[tok]).astype(float), minlength=n_annotators)
    cnt = np.bincount(ann, minlength=n_annotators)
    realised = np.where(cnt > 0, right / np.maximum(cnt, 1), np.nan)
    return {"kinds": kinds, "token": tok, "annotator": ann, "label": lab,
            "realised": realised, "covered": covered}
