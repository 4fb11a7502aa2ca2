"""The line grammar of CRF++ templates: a ``U``/``B`` line's macros ``%x[row,col]`` and the
literal text around them (:class:`UnigramTemplate`), parsed with one-line errors. The
template as a whole is :class:`gpsl.features.Template`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from gpsl.errors import InputError

__all__ = ["MAX_OFFSET", "Token", "UnigramTemplate"]

MAX_OFFSET = 8  # CRF++'s BOS/EOS table size
_MACRO = re.compile(r"%x\[(-?\d+),(\d+)\]")

Token = Sequence[str]


class UnigramTemplate(NamedTuple):
    """One ``U`` (or ``B``) template line, parsed.

    ``name`` is the text before the first ``:`` (``"U05"``; the whole literal for a line without
    ``:``), ``macros`` the ``(row, col)`` pairs in order, ``pieces`` the ``len(macros) + 1``
    literal texts around them (the feature is ``pieces[0] + v0 + pieces[1] + ... + pieces[-1]``),
    ``line`` the 1-based line in the template file and ``text`` the stripped line.
    """

    name: str
    macros: tuple[tuple[int, int], ...]
    pieces: tuple[str, ...]
    line: int
    text: str

    def expand(self, tokens: Sequence[Token], position: int) -> str:
        """The feature string of this template for ``tokens[position]``."""
        out = [self.pieces[0]]
        n = len(tokens)
        for (row, col), piece in zip(self.macros, self.pieces[1:]):
            out.append(_value(tokens, position + row, col, n))
            out.append(piece)
        return "".join(out)


def _value(tokens: Sequence[Token], idx: int, col: int, n: int) -> str:
    if idx < 0:
        return f"_B-{-idx}"
    if idx >= n:
        return f"_B+{idx - n + 1}"
    return tokens[idx][col]


def _parse_line(text: str, lineno: int, source: str) -> UnigramTemplate:
    macros: list[tuple[int, int]] = []
    pieces: list[str] = []
    pos = 0
    for m in _MACRO.finditer(text):
        literal = text[pos:m.start()]
        if "%" in literal:
            _bad_macro(literal[literal.index("%"):], lineno, source)
        if len(m.group(1).lstrip("-")) > 6 or len(m.group(2)) > 6:
            raise InputError(
                f"macro {_clip(m.group(0))} is out of range: rows are -{MAX_OFFSET}..{MAX_OFFSET}"
                " and columns must exist in the data",
                source=source,
                line=lineno,
            )
        row, col = int(m.group(1)), int(m.group(2))
        if abs(row) > MAX_OFFSET:
            raise InputError(
                f"row offset {row} in {m.group(0)} is out of range"
                f" -{MAX_OFFSET}..{MAX_OFFSET} (as in CRF++)",
                source=source,
                line=lineno,
            )
        pieces.append(literal)
        macros.append((row, col))
        pos = m.end()
    tail = text[pos:]
    if "%" in tail:
        _bad_macro(tail[tail.index("%"):], lineno, source)
    pieces.append(tail)
    head = pieces[0]
    name = head.split(":", 1)[0] if ":" in head else head
    return UnigramTemplate(name, tuple(macros), tuple(pieces), lineno, text)


def _clip(text: str, n: int = 30) -> str:
    return text if len(text) <= n else text[:n] + "..."


def _bad_macro(fragment: str, lineno: int, source: str) -> None:
    shown = fragment.split()[0] if fragment.split() else fragment
    if len(shown) > 30:
        shown = shown[:30] + "..."
    raise InputError(
        f"bad macro {shown!r}: expected %x[row,col] with integer row and non-negative column",
        source=source,
        line=lineno,
    )
