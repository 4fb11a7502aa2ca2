"""Label names: the one place that parses ``B-``/``I-`` style prefixes.

``split_tag("B-PER") == ("B", "PER")``, ``split_tag("O") == ("O", "")``; used by the chunk
metrics, the label ordering of the store and the label colours of the app.  Span schemes
(BIO, BILOU/IOBES): the labels of one entity, the transitions a scheme allows, the tokens
that break it and the most probable valid sequence under per-token marginals (the Annotate
page's span labeling, flags and suggestions).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence

__all__ = ["SCHEMES", "allowed", "entities", "entity_type", "entity_types", "is_prefixed",
           "scheme_of", "sort_labels", "span_labels", "split_tag", "valid_decode", "violations"]

_TAG_RE = re.compile(r"^([^-]*)-(.*)$")
_PREFIX_RANK = {"B": 0, "I": 1, "E": 2, "L": 2, "S": 3, "U": 3}


def split_tag(label: str) -> tuple[str, str]:
    """``'B-NP'`` -> ``('B', 'NP')``; ``'O'`` -> ``('O', '')``; ``'B'`` -> ``('B', '')``."""
    m = _TAG_RE.match(label)
    return (m.group(1), m.group(2)) if m else (label, "")


def is_prefixed(label: str) -> bool:
    """True for a one-letter prefix and a type (``B-PER``, ``I-NP``, ``S-LOC``)."""
    head, kind = split_tag(label)
    return len(head) == 1 and bool(kind)


def entity_type(label: str) -> str:
    """``'B-PER'`` -> ``'PER'``; labels without a one-letter prefix are their own type."""
    return split_tag(label)[1] if is_prefixed(label) else label


def sort_labels(labels: Iterable[str]) -> list[str]:
    """Sort a label set: by entity type, ``B-`` before ``I-`` (then other prefixes), plain
    labels such as ``O`` last."""

    def key(label: str):
        if is_prefixed(label):
            head, kind = split_tag(label)
            return (0, kind, _PREFIX_RANK.get(head.upper(), 9), head)
        return (1, label, 0, "")

    return sorted(set(labels), key=key)


# ----------------------------------------------------------------------------- span schemes
#
# A *span scheme* says how a label set writes entities: ``BIO`` (IOB2: ``B-X`` begins an
# entity, ``I-X`` continues it, ``O`` is outside), ``BILOU`` (``L-X`` ends a multi-token
# entity, ``U-X`` is a one-token entity) and its synonym ``IOBES`` (``E-X``, ``S-X``).

SCHEMES = ("BIO", "BILOU", "IOBES")
_LAST = {"BILOU": "L", "IOBES": "E"}
_UNIT = {"BILOU": "U", "IOBES": "S"}


def scheme_of(labels: Iterable[str]) -> str | None:
    """The span scheme of a label set: ``"BIO"``, ``"BILOU"``, ``"IOBES"``, or None when the
    set is not a span labeling (a label without a one-letter prefix other than ``O``, an
    unknown prefix, or no prefixed label at all)."""
    heads = set()
    for lab in labels:
        if lab == "O":
            continue
        if not is_prefixed(lab):
            return None
        heads.add(split_tag(lab)[0].upper())
    if not heads or not heads <= set("BILUES"):
        return None
    if heads & {"L", "U"}:
        return "BILOU" if not heads & {"E", "S"} else None
    if heads & {"E", "S"}:
        return "IOBES"
    return "BIO"


def entity_types(labels: Iterable[str]) -> list[str]:
    """The entity types of a label set in order of first appearance (``O`` excluded)."""
    out: list[str] = []
    for lab in labels:
        if lab != "O" and is_prefixed(lab):
            kind = split_tag(lab)[1]
            if kind not in out:
                out.append(kind)
    return out


def span_labels(kind: str, length: int, scheme: str = "BIO") -> list[str]:
    """The labels of one entity of type ``kind`` over ``length`` tokens: ``B-X I-X ...``
    (BIO), ``U-X`` or ``B-X I-X ... L-X`` (BILOU; ``S``/``E`` for IOBES).  ``kind == "O"``
    gives ``O`` on every token (the span is outside any entity)."""
    if length < 1:
        raise ValueError("a span has at least one token")
    if scheme not in SCHEMES:
        raise ValueError(f"unknown span scheme {scheme!r}")
    if kind == "O":
        return ["O"] * length
    if scheme == "BIO":
        return [f"B-{kind}"] + [f"I-{kind}"] * (length - 1)
    if length == 1:
        return [f"{_UNIT[scheme]}-{kind}"]
    return [f"B-{kind}"] + [f"I-{kind}"] * (length - 2) + [f"{_LAST[scheme]}-{kind}"]


def _role(label: str | None, scheme: str) -> tuple[str, str]:
    """(role, type) of a label: role ``B`` begin, ``I`` inside, ``L`` last, ``U`` unit,
    ``O`` outside (IOBES letters mapped onto BILOU)."""
    if label is None or label == "O" or not is_prefixed(label):
        return "O", ""
    head, kind = split_tag(label)
    head = {"E": "L", "S": "U"}.get(head.upper(), head.upper())
    return head, kind


def allowed(prev: str | None, label: str | None, scheme: str = "BIO") -> bool:
    """May ``label`` follow ``prev`` (``prev=None``: ``label`` starts the sentence;
    ``label=None``: ``prev`` ends it)?  BIO: ``I-X`` only after ``B-X`` or ``I-X``.  BILOU:
    after ``B-X``/``I-X`` only ``I-X`` or ``L-X``; ``I-X``/``L-X`` only after them; the
    sentence may not end inside an entity."""
    p_role, p_kind = _role(prev, scheme) if prev is not None else ("O", "")
    c_role, c_kind = _role(label, scheme) if label is not None else ("O", "")
    if scheme == "BIO":
        if c_role == "I":
            return p_role in ("B", "I") and p_kind == c_kind
        return True
    inside = p_role in ("B", "I")
    if c_role in ("I", "L"):
        return inside and p_kind == c_kind
    return not inside


def violations(labels: Sequence[str | None], scheme: str = "BIO") -> dict[int, str]:
    """Tokens whose label breaks the scheme given the previous token's label: ``{index:
    reason}``.  Unknown labels (None) are not judged, nor are the tokens next to them."""
    out: dict[int, str] = {}
    n = len(labels)
    for t, lab in enumerate(labels):
        if lab is None:
            continue
        prev = labels[t - 1] if t > 0 else None
        judged = t == 0 or prev is not None
        if judged and not allowed(prev, lab, scheme):
            out[t] = f"{lab} follows {prev}" if prev is not None else f"{lab} starts the sentence"
        if scheme != "BIO" and t == n - 1 and not allowed(lab, None, scheme):
            out.setdefault(t, f"{lab} ends the sentence inside an entity")
    return out


@functools.lru_cache(maxsize=64)
def _allowed_tables(states: tuple[str, ...], scheme: str):
    """:func:`allowed` as boolean arrays over ``states``: (transitions [from, to], start,
    end); cached, a label set's tables are the same for every sentence."""
    import numpy as np

    trans = np.array([[allowed(a, b, scheme) for b in states] for a in states], dtype=bool)
    start = np.array([allowed(None, b, scheme) for b in states], dtype=bool)
    end = np.array([allowed(a, None, scheme) for a in states], dtype=bool)
    for arr in (trans, start, end):
        arr.setflags(write=False)
    return trans, start, end


def valid_decode(marginals, classes: Sequence[str], scheme: str = "BIO",
                 fixed: Sequence[str | None] | None = None) -> list[str]:
    """The most probable scheme-valid label sequence under per-token marginals.

    Constrained Viterbi over the factorised marginals (each token's RNS marginal taken as
    independent): ``y* = argmax_y  sum_t log m_t(y_t) - M * V(y)`` where ``V(y)`` counts the
    transitions (sentence start and, for BILOU, end included) that :func:`allowed` forbids
    and ``M = 30 (n + 1)`` exceeds any difference of the log-probability sums (marginals are
    floored at 1e-12, so one token's log terms differ by < 27.7): the result has the fewest
    violations possible and, among those, the largest probability.  ``fixed[t]`` (a label,
    or None) clamps token ``t`` (human labels); a clamped label missing from ``classes`` is
    added as a state.  Returns one label per token."""
    import numpy as np

    m = np.asarray(marginals, dtype=float)
    n = m.shape[0]
    if n == 0:
        return []
    if m.ndim != 2 or m.shape[1] != len(classes):
        raise ValueError(f"marginals of shape {m.shape} for {len(classes)} classes")
    states = list(classes)
    for lab in fixed or ():
        if lab is not None and lab not in states:
            states.append(lab)
    J = len(states)
    emit = np.full((n, J), np.log(1e-12))
    emit[:, :len(classes)] = np.log(np.clip(m, 1e-12, 1.0))
    for t, lab in enumerate(fixed or ()):
        if lab is not None and t < n:
            emit[t] = -np.inf
            emit[t, states.index(lab)] = 0.0
    big = 30.0 * (n + 1)
    ok_trans, ok_start, ok_end = _allowed_tables(tuple(states), scheme)
    trans = np.where(ok_trans, 0.0, -big)
    start = np.where(ok_start, 0.0, -big)
    end = np.where(ok_end, 0.0, -big)
    score = start + emit[0]
    back = np.zeros((n, J), dtype=int)
    for t in range(1, n):
        cand = score[:, None] + trans  # cand[i, j]: from state i to state j
        back[t] = np.argmax(cand, axis=0)
        score = cand[back[t], np.arange(J)] + emit[t]
    path = [int(np.argmax(score + end))]
    for t in range(n - 1, 0, -1):
        path.append(int(back[t, path[-1]]))
    return [states[j] for j in reversed(path)]


#: the (previous tag, tag) pairs that end a chunk at the previous token / start one here,
#: besides a change of type (seqeval's ``end_of_chunk`` and ``start_of_chunk``)
_ENDS = {("B", "B"), ("B", "S"), ("B", "O"), ("I", "B"), ("I", "S"), ("I", "O")}
_STARTS = {("E", "E"), ("E", "I"), ("S", "E"), ("S", "I"), ("O", "E"), ("O", "I")}


def entities(labels: Sequence[str]) -> list[tuple[str, int, int]]:
    """``(type, first, last)`` chunks of one label sequence (``last`` inclusive; an untyped
    chunk has type ``"_"``): :func:`seqeval.metrics.sequence_labeling.get_entities` in its
    default (prefix) mode (conlleval's rules), without its warnings. A label's tag is its first
    character and its type what follows the first ``-`` after it (``"_"`` when empty). Ported
    because importing seqeval imports scikit-learn, 0.6 CPU s of a training worker that
    computes one held-out chunk F1 (tests/lib/test_metrics.py checks the port against seqeval)."""
    out = []
    prev_tag, prev_type, begin = "O", "", 0
    for i, label in enumerate([*labels, "O"]):
        tag = label[0]
        type_ = label[1:].split("-", maxsplit=1)[-1] or "_"
        if (prev_tag in ("E", "S") or (prev_tag, tag) in _ENDS
                or (prev_tag not in ("O", ".") and prev_type != type_)):
            out.append((prev_type, begin, i - 1))
        if (tag in ("B", "S") or (prev_tag, tag) in _STARTS
                or (tag not in ("O", ".") and prev_type != type_)):
            begin = i
        prev_tag, prev_type = tag, type_
    return out
