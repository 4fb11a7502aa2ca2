"""Typed records: what the store hands out, as immutable values.

Rows of the rules (:class:`Vote`, :class:`Derived`) and what the pages show (built by
:mod:`gpsl.annotation.reports`). A record holds values only; the rules that make them live in
:mod:`gpsl.annotation.rules`.
"""

from __future__ import annotations

from typing import NamedTuple


class Vote(NamedTuple):
    """One annotator's vote on a token, as the rules read it."""

    annotator: str
    label: str | None  # None: the annotator cleared the token ("no label")
    source: str  # 'human', 'accepted' or 'import'
    at: str


class Derived(NamedTuple):
    """A token's training label and whom it is credited to."""

    label: str
    source: str
    annotator: str
