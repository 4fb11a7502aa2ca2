"""Label names: the one place that parses ``B-``/``I-`` style prefixes.

``split_tag("B-PER") == ("B", "PER")``, ``split_tag("O") == ("O", "")``; used by the chunk
metrics, the label ordering of the store and the label colours of the app.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["entity_type", "is_prefixed", "sort_labels", "split_tag"]

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
