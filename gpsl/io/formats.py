"""Reading and writing sequence-labeling data: CRF++/CoNLL column files, JSONL and plain text.

Every reader returns the whole file as a list of :class:`Sentence` or raises
:class:`gpsl.errors.InputError` whose message is one line ``file:line: problem``; a reader never
returns a silent partial result.

CRF++ column files (``read_conll``) have one token per line, columns separated by spaces or tabs
(only those two: an ideographic space ``U+3000`` is a token, as in CRF++'s Japanese data), the
label in the last column, and blank lines between sentences. All lines of a file must have the
same number of columns.

Every reader enforces the limits of :mod:`gpsl.limits` (tokens per sentence, characters per line)
and refuses empty input, undecodable bytes, NUL characters and unpaired surrogates, naming the
file and line; JSONL sentence ids must be unique within a file.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gpsl import limits
from gpsl.errors import InputError
from gpsl.io.source import (
    SURROGATE,
    Source,
    iter_lines,
    read_source,
    source_name,
    text_lines,
)

__all__ = [
    "FORMATS",
    "Sentence",
    "format_conll",
    "format_jsonl",
    "iter_conll",
    "iter_jsonl",
    "iter_text",
    "read_any",
    "read_conll",
    "read_jsonl",
    "read_text",
    "write_conll",
    "write_jsonl",
]

FORMATS = ("conll", "jsonl", "text")

_COLUMN_SEP = re.compile(r"[ \t]+")


def _refuse_mixed_separators(line: str, name: str, lineno: int) -> None:
    """A line of a tab-separated file with a space inside a column
    (``a<TAB>+cmd|'/c calc'!A0``): columns are split at spaces and tabs alike, so reading
    it would cut that column in two and silently change a label; refused with one line
    instead."""
    for k, col in enumerate(line.split("\t"), start=1):
        if " " in col.strip(" "):
            shown = col.strip(" ")
            shown = shown if len(shown) <= 40 else shown[:40] + "…"
            raise InputError(f"column {k} of a tab-separated line holds a space ({shown!r}):"
                             " a column (token or label) never holds spaces",
                             source=name, line=lineno)
SPACE = re.compile(r"\s")


@dataclass
class Sentence:
    """One sentence: feature columns per token, labels (``None`` = missing), source line and,
    for JSONL input with an ``"id"`` field, that id (unique within its file)."""

    tokens: list[tuple[str, ...]]
    labels: list[str | None] = field(default_factory=list)
    line: int = 1
    id: str | int | None = None

    def __post_init__(self) -> None:
        self.tokens = [tuple(t) for t in self.tokens]
        if not self.labels:
            self.labels = [None] * len(self.tokens)
        else:
            self.labels = list(self.labels)
        if len(self.labels) != len(self.tokens):
            raise ValueError(
                f"sentence has {len(self.tokens)} tokens but {len(self.labels)} labels"
            )

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def n_missing(self) -> int:
        """Number of tokens whose label is missing."""
        return sum(1 for lab in self.labels if lab is None)


# --------------------------------------------------------------------------- CoNLL / CRF++


def read_conll(
    source: Source,
    *,
    encoding: str = "utf-8",
    missing: str = "_",
    labeled: bool = True,
    name: str | None = None,
    max_tokens: int | None = None,
    max_line_chars: int | None = None,
) -> list[Sentence]:
    """Read a CRF++/CoNLL column file.

    Parameters
    ----------
    source:
        A path, a text or binary file object, or bytes.
    encoding:
        Used when the input is bytes (a UTF-8 BOM is always tolerated).
    missing:
        A label equal to this string becomes ``None`` (missing).
    labeled:
        When true the last column is the label; otherwise every column is a feature and every
        label is ``None``.
    name:
        Name used in error messages (defaults to the path or the file object's name).
    max_tokens, max_line_chars:
        Limits (see :mod:`gpsl.limits`): ``None`` uses the configured value (environment or
        default), ``0`` means no limit. A longer sentence or line is an :class:`InputError`.
    """
    name = source_name(source, name)
    lines = text_lines(read_source(source, encoding, name))
    return list(conll_sentences(lines, name, missing, labeled, max_tokens, max_line_chars,
                                tabbed=tab_separated(lines)))


def iter_conll(
    source: Source,
    *,
    encoding: str = "utf-8",
    missing: str = "_",
    labeled: bool = True,
    name: str | None = None,
    max_tokens: int | None = None,
    max_line_chars: int | None = None,
) -> Iterator[Sentence]:
    """:func:`read_conll` one sentence at a time, the file read a block at a time
    (:func:`gpsl.io.source.iter_lines`): the memory held does not grow with the file. The same
    checks, each raised when its line is reached (sentences before it have been yielded)."""
    name = source_name(source, name)
    tabbed = False  # a stream is read once: the whole-file test needs a file to read twice
    if isinstance(source, (bytes, bytearray)) or (
            isinstance(source, (str, os.PathLike)) and not Path(source).is_fifo()):
        tabbed = tab_separated(iter_lines(source, encoding, name))
    yield from conll_sentences(iter_lines(source, encoding, name), name, missing, labeled,
                               max_tokens, max_line_chars, tabbed=tabbed)


def tab_separated(lines: Iterable[str]) -> bool:
    """Whether every non-blank line has the same number (one or more) of tabs between its
    columns: a tab-separated file, whose columns are the tab-separated fields."""
    counts: set[int] = set()
    for ln in lines:
        if ln.strip(" \t"):
            counts.add(ln.strip(" \t").count("\t"))
            if len(counts) > 1 or 0 in counts:
                return False
    return bool(counts)


def conll_sentences(lines: Iterable[str], name: str, missing: str, labeled: bool,
                    max_tokens: int | None, max_line_chars: int | None, *,
                    tabbed: bool = False) -> Iterator[Sentence]:
    """The sentences of CRF++ column lines (the readers above); InputError naming the line."""
    token_limit = limits.max_tokens(max_tokens)
    line_limit = limits.max_line_chars(max_line_chars)
    found = False
    n_cols = 0
    first_line = 0
    tokens: list[tuple[str, ...]] = []
    labels: list[str | None] = []
    start = 0
    n_in_sentence = 0
    good_labels: set[str] = set()
    split = _COLUMN_SEP.split

    for lineno, raw in enumerate(lines, start=1):
        limits.check_line_length(len(raw), line_limit, name, lineno)
        stripped = raw.strip(" \t")
        if not stripped:
            if n_in_sentence:
                limits.check_sentence_length(n_in_sentence, token_limit, name, start)
                yield Sentence(tokens, labels, start)
                found = True
                tokens, labels, n_in_sentence = [], [], 0
            continue
        cols = split(stripped)
        if tabbed and " " in stripped:
            _refuse_mixed_separators(stripped, name, lineno)
        if n_cols == 0:
            n_cols = len(cols)
            first_line = lineno
            if labeled and n_cols < 2:
                raise InputError(
                    "only one column: a labeled file needs feature column(s) and a label column",
                    source=name,
                    line=lineno,
                )
        elif len(cols) != n_cols:
            raise InputError(
                f"expected {n_cols} columns, found {len(cols)}"
                f" (line {first_line} has {n_cols})",
                source=name,
                line=lineno,
            )
        if not n_in_sentence:
            start = lineno
        n_in_sentence += 1
        if token_limit is not None and n_in_sentence > token_limit:
            continue  # only count the rest; the sentence is refused at its end
        if labeled:
            lab = cols.pop()
            if lab not in good_labels:
                if SPACE.search(lab):
                    raise InputError(f"label {shorten(lab)} contains a whitespace character",
                                     source=name, line=lineno)
                good_labels.add(lab)
            labels.append(None if lab == missing else lab)
        else:
            labels.append(None)
        tokens.append(tuple(cols))
    if n_in_sentence:
        limits.check_sentence_length(n_in_sentence, token_limit, name, start)
        yield Sentence(tokens, labels, start)
    elif not found:
        raise InputError("no sentences found", source=name)


def _check_field(value: Any, what: str, where: str, source: str) -> str:
    """``value`` if it can be one CoNLL column, else InputError naming sentence and token."""
    if not isinstance(value, str):
        raise InputError(f"{where}: {what} is {type(value).__name__}, not a string",
                         source=source)
    if value == "":
        raise InputError(f"{where}: {what} is empty; a CoNLL column cannot be empty"
                         " (export as JSONL instead)", source=source)
    if any(ch in value for ch in " \t\r\n"):
        raise InputError(
            f"{where}: {what} {shorten(value)} contains whitespace, which a CoNLL column cannot"
            " hold (export as JSONL instead)",
            source=source,
        )
    return value


def shorten(value: str, n: int = 40) -> str:
    return repr(value if len(value) <= n else value[:n] + "...")


def format_conll(
    sentences: Iterable[Sentence],
    *,
    missing: str = "_",
    extra_columns: Sequence[Sequence[Sequence[str]]] | None = None,
    sep: str = "\t",
    label: bool = True,
    source: str = "<output>",
    first: int = 1,
) -> str:
    """Return sentences as CRF++ column text (tab-separated, blank line after each sentence).
    ``first``: the number of the first sentence in error messages (a part of a longer
    output).

    ``extra_columns[i][j]`` is a list of strings appended after the label of token ``j`` of
    sentence ``i``. ``label=False`` omits the label column.

    CoNLL columns are separated by whitespace, so a token (or label) that is empty or contains a
    space, tab or line break cannot be written: that is an :class:`InputError` naming the
    sentence (number and source line), the token and ``source``, and suggesting JSONL, which
    holds any token. Nothing is replaced silently (CRF++ would read ``New York`` as two columns).
    A label equal to the ``missing`` marker is refused too (it would read back as missing).
    """
    out: list[str] = []
    sentences = list(sentences)
    if extra_columns is not None and len(extra_columns) != len(sentences):
        raise ValueError(
            f"extra_columns has {len(extra_columns)} entries for {len(sentences)} sentences"
        )
    for i, sent in enumerate(sentences):
        extra = extra_columns[i] if extra_columns is not None else None
        if extra is not None and len(extra) != len(sent.tokens):
            raise ValueError(
                f"extra_columns[{i}] has {len(extra)} entries for {len(sent.tokens)} tokens"
            )
        for j, tok in enumerate(sent.tokens):
            where = f"sentence {i + first} (line {sent.line}), token {j + 1}"
            cols = [_check_field(c, "column", where, source) for c in tok]
            if label:
                lab = sent.labels[j]
                if lab is not None and lab == missing:
                    raise InputError(f"{where}: label {lab!r} is the missing-label marker",
                                     source=source)
                cols.append(missing if lab is None else _check_field(lab, "label", where,
                                                                     source))
            if extra is not None:
                cols.extend(_check_field(str(c), "extra column", where, source)
                            for c in extra[j])
            out.append(sep.join(cols))
            out.append("\n")
        out.append("\n")
    return "".join(out)


def _write_text(text: str, dest: Any, encoding: str) -> None:
    if isinstance(dest, (str, os.PathLike)):
        with open(dest, "w", encoding=encoding, newline="\n") as fh:
            fh.write(text)
    elif isinstance(dest, io.TextIOBase):
        dest.write(text)
    elif isinstance(dest, (io.RawIOBase, io.BufferedIOBase)):
        dest.write(text.encode(encoding))
    else:
        try:
            dest.write(text)
        except TypeError:
            dest.write(text.encode(encoding))


def write_conll(
    sentences: Iterable[Sentence],
    dest: str | os.PathLike | IO[str] | IO[bytes],
    *,
    missing: str = "_",
    extra_columns: Sequence[Sequence[Sequence[str]]] | None = None,
    encoding: str = "utf-8",
) -> None:
    """Write sentences to a path or file object in CRF++ column format (see format_conll)."""
    _write_text(format_conll(sentences, missing=missing, extra_columns=extra_columns), dest,
                encoding)


# --------------------------------------------------------------------------- JSONL


def json_string(value: Any, what: str, bad) -> str:
    """``value`` as a token/label string: a non-empty str without NUL or line breaks."""
    if not isinstance(value, str):
        raise bad(f"{what} must be a string, found {json_type(value)}")
    if value == "":
        raise bad(f"{what} is an empty string")
    if "\x00" in value:
        raise bad(f"{what} contains a NUL character")
    if "\n" in value or "\r" in value:
        raise bad(f"{what} contains a line break")
    if SURROGATE.search(value):
        raise bad(f"{what} contains an unpaired surrogate (not valid Unicode)")
    return value


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def read_jsonl(
    source: Source,
    *,
    name: str | None = None,
    encoding: str = "utf-8",
    missing: str = "_",
    max_tokens: int | None = None,
    max_line_chars: int | None = None,
) -> list[Sentence]:
    """Read one JSON object per line: ``{"tokens": [...], "labels": [...], "id": ...}``.

    ``tokens`` is a list of strings (one column) or a list of lists of strings (columns; the same
    number for every token of the file). ``labels`` is optional; ``null`` or ``missing`` (``"_"``)
    is a missing label; a label is a non-empty string without whitespace. ``id`` is optional (a
    string or an integer, unique within the file). Tokens are non-empty strings without NUL or
    line breaks (spaces are allowed: such tokens can be exported as JSONL but not as CoNLL).
    Blank lines are skipped. Limits as :func:`read_conll`.
    """
    name = source_name(source, name)
    return list(_jsonl_sentences(text_lines(read_source(source, encoding, name)), name, missing,
                                 max_tokens, max_line_chars))


def iter_jsonl(source: Source, *, name: str | None = None, encoding: str = "utf-8",
               missing: str = "_", max_tokens: int | None = None,
               max_line_chars: int | None = None) -> Iterator[Sentence]:
    """:func:`read_jsonl` one sentence at a time, the input read a block at a time (as
    :func:`iter_conll`)."""
    name = source_name(source, name)
    yield from _jsonl_sentences(iter_lines(source, encoding, name), name, missing, max_tokens,
                                max_line_chars)


def _jsonl_sentences(lines: Iterable[str], name: str, missing: str, max_tokens: int | None,
                     max_line_chars: int | None) -> Iterator[Sentence]:
    token_limit = limits.max_tokens(max_tokens)
    line_limit = limits.max_line_chars(max_line_chars)
    found = False
    seen_ids: dict[Any, int] = {}
    n_cols = 0
    for lineno, raw in enumerate(lines, start=1):
        limits.check_line_length(len(raw), line_limit, name, lineno)
        if not raw.strip():
            continue

        def bad(msg: str, lineno: int = lineno) -> InputError:
            return InputError(msg, source=name, line=lineno)

        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise bad(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
        except RecursionError:
            raise bad("invalid JSON: nested too deeply") from None
        except ValueError as exc:  # e.g. an integer with too many digits
            raise bad(f"invalid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise bad(f"expected a JSON object, found {json_type(obj)}")
        if "tokens" not in obj:
            raise bad('missing "tokens"')
        sid = obj.get("id")
        if sid is not None:
            if isinstance(sid, bool) or not isinstance(sid, (str, int)):
                raise bad(f'"id" must be a string or an integer, found {json_type(sid)}')
            if sid in seen_ids:
                raise bad(f"duplicate sentence id {sid!r} (first on line {seen_ids[sid]})")
            seen_ids[sid] = lineno
        raw_tokens = obj["tokens"]
        if not isinstance(raw_tokens, list) or not raw_tokens:
            found = "" if isinstance(raw_tokens, list) else f", found {json_type(raw_tokens)}"
            raise bad(f'"tokens" must be a non-empty list{found}')
        limits.check_sentence_length(len(raw_tokens), token_limit, name, lineno)
        tokens: list[tuple[str, ...]] = []
        for j, tok in enumerate(raw_tokens):
            if isinstance(tok, str):
                cols: tuple = (json_string(tok, f"token {j + 1}", bad),)
            elif isinstance(tok, list) and tok:
                cols = tuple(json_string(c, f"token {j + 1}, column {k + 1}", bad)
                             for k, c in enumerate(tok))
            else:
                raise bad(f"token {j + 1} must be a string or a non-empty list of strings")
            if n_cols == 0:
                n_cols = len(cols)
            elif len(cols) != n_cols:
                raise bad(f"token {j + 1}: expected {n_cols} columns, found {len(cols)}")
            tokens.append(cols)
        raw_labels = obj.get("labels")
        if raw_labels is None:
            labels: list[str | None] = [None] * len(tokens)
        else:
            if not isinstance(raw_labels, list):
                raise bad(f'"labels" must be a list, found {json_type(raw_labels)}')
            if len(raw_labels) != len(tokens):
                raise bad(f"{len(tokens)} tokens but {len(raw_labels)} labels")
            labels = []
            for j, lab in enumerate(raw_labels):
                if lab is None or lab == missing:
                    labels.append(None)
                elif isinstance(lab, str):
                    json_string(lab, f"label {j + 1}", bad)
                    if SPACE.search(lab):
                        raise bad(f"label {j + 1} {lab!r} contains whitespace")
                    labels.append(lab)
                else:
                    raise bad(f"label {j + 1} must be a string or null, found {json_type(lab)}")
        yield Sentence(tokens, labels, lineno, sid)
        found = True
    if not found:
        raise InputError("no sentences found", source=name)


def format_jsonl(sentences: Iterable[Sentence]) -> str:
    """Return sentences as JSONL text (see :func:`read_jsonl`)."""
    out = []
    for sent in sentences:
        if all(len(t) == 1 for t in sent.tokens):
            toks: list = [t[0] for t in sent.tokens]
        else:
            toks = [list(t) for t in sent.tokens]
        obj: dict[str, Any] = {"tokens": toks, "labels": list(sent.labels)}
        if sent.id is not None:
            obj = {"id": sent.id, **obj}
        out.append(json.dumps(obj, ensure_ascii=False))
        out.append("\n")
    return "".join(out)


def write_jsonl(
    sentences: Iterable[Sentence],
    dest: str | os.PathLike | IO[str] | IO[bytes],
    *,
    encoding: str = "utf-8",
) -> None:
    """Write sentences as JSONL to a path or file object."""
    _write_text(format_jsonl(sentences), dest, encoding)


# --------------------------------------------------------------------------- plain text


def read_text(
    source: Source,
    *,
    name: str | None = None,
    encoding: str = "utf-8",
    max_tokens: int | None = None,
    max_line_chars: int | None = None,
) -> list[Sentence]:
    """Read plain text: one sentence per line, whitespace-tokenised; blank lines skipped.
    Limits as :func:`read_conll`."""
    name = source_name(source, name)
    return list(_text_sentences(text_lines(read_source(source, encoding, name)), name,
                                max_tokens, max_line_chars))


def iter_text(source: Source, *, name: str | None = None, encoding: str = "utf-8",
              max_tokens: int | None = None,
              max_line_chars: int | None = None) -> Iterator[Sentence]:
    """:func:`read_text` one sentence at a time, the input read a block at a time."""
    name = source_name(source, name)
    yield from _text_sentences(iter_lines(source, encoding, name), name, max_tokens,
                               max_line_chars)


def _text_sentences(lines: Iterable[str], name: str, max_tokens: int | None,
                    max_line_chars: int | None) -> Iterator[Sentence]:
    token_limit = limits.max_tokens(max_tokens)
    line_limit = limits.max_line_chars(max_line_chars)
    found = False
    for lineno, raw in enumerate(lines, start=1):
        limits.check_line_length(len(raw), line_limit, name, lineno)
        words = raw.split()
        if words:
            limits.check_sentence_length(len(words), token_limit, name, lineno)
            yield Sentence([(w,) for w in words], None, lineno)
            found = True
    if not found:
        raise InputError("no sentences found", source=name)


# --------------------------------------------------------------------------- dispatch


def read_any(
    source: Source,
    fmt: str = "conll",
    *,
    name: str | None = None,
    encoding: str = "utf-8",
    missing: str = "_",
    labeled: bool = True,
    max_tokens: int | None = None,
    max_line_chars: int | None = None,
) -> list[Sentence]:
    """Read ``source`` in format ``fmt`` ("conll", "jsonl" or "text").

    ``missing`` applies to conll and jsonl, ``labeled`` to conll only (JSONL labels are optional
    per line, plain text is never labeled); the limits to all (see :func:`read_conll`).
    """
    lim = {"max_tokens": max_tokens, "max_line_chars": max_line_chars}
    if fmt == "conll":
        return read_conll(source, name=name, encoding=encoding, missing=missing, labeled=labeled,
                          **lim)
    if fmt == "jsonl":
        return read_jsonl(source, name=name, encoding=encoding, missing=missing, **lim)
    if fmt == "text":
        return read_text(source, name=name, encoding=encoding, **lim)
    raise InputError(
        f"unknown format {fmt!r} (expected conll, jsonl or text)", source=source_name(source, name)
    )
