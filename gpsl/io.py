"""Reading and writing sequence-labeling data: CRF++/CoNLL column files, JSONL and plain text.

Every reader returns the whole file as a list of :class:`Sentence` or raises
:class:`gpsl.errors.InputError` whose message is one line ``file:line: problem``; a reader never
returns a silent partial result.

CRF++ column files (``read_conll``) have one token per line, columns separated by spaces or tabs
(only those two: an ideographic space ``U+3000`` is a token, as in CRF++'s Japanese data), the
label in the last column, and blank lines between sentences. All lines of a file must have the
same number of columns.
"""

from __future__ import annotations

import codecs
import io
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gpsl.errors import InputError

__all__ = [
    "FORMATS",
    "Sentence",
    "format_conll",
    "format_jsonl",
    "read_any",
    "read_conll",
    "read_jsonl",
    "read_text",
    "write_conll",
    "write_jsonl",
]

Source = str | os.PathLike | bytes | bytearray | IO[str] | IO[bytes]

FORMATS = ("conll", "jsonl", "text")

_COLUMN_SEP = re.compile(r"[ \t]+")
_BOM = "\ufeff"


@dataclass
class Sentence:
    """One sentence: feature columns per token, labels (``None`` = missing), source line."""

    tokens: list[tuple[str, ...]]
    labels: list[str | None] = field(default_factory=list)
    line: int = 1

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


# --------------------------------------------------------------------------- decoding


def _source_name(source: Any, name: str | None) -> str:
    if name is not None:
        return str(name)
    if isinstance(source, (str, os.PathLike)):
        return str(source)
    if isinstance(source, (bytes, bytearray)):
        return "<input>"
    fname = getattr(source, "name", None)
    if isinstance(fname, str) and fname:
        return fname
    return "<input>"


def _line_of(data: bytes | str, offset: int) -> int:
    """1-based line number of ``offset`` (counting LF, CRLF and lone CR as line ends)."""
    head = data[:offset]
    if isinstance(head, str):
        head = head.replace("\r\n", "\n").replace("\r", "\n")
        return head.count("\n") + 1
    head = head.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return head.count(b"\n") + 1


def _read_source(source: Source, encoding: str, name: str) -> str:
    """Read ``source`` entirely and return its text with a BOM removed; InputError on failure."""
    try:
        codec = codecs.lookup(encoding)
    except LookupError:
        raise InputError(f"unknown encoding {encoding!r}", source=name) from None
    data: bytes | str
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            if path.is_dir():
                raise InputError("is a directory, not a file", source=name)
            data = path.read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read file: {exc.strerror or exc}", source=name) from None
    elif isinstance(source, (bytes, bytearray)):
        data = bytes(source)
    elif hasattr(source, "read"):
        try:
            data = source.read()
        except UnicodeDecodeError as exc:
            raise InputError(
                f"cannot decode the input with encoding {exc.encoding}: {exc.reason}", source=name
            ) from None
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror or exc}", source=name) from None
        if not isinstance(data, (str, bytes, bytearray)):
            raise InputError("the file object returned neither text nor bytes", source=name)
    else:
        raise TypeError(f"cannot read from {type(source).__name__}")

    if isinstance(data, (bytes, bytearray)):
        data = bytes(data)
        if codec.name.startswith("utf-8") and data.startswith(codecs.BOM_UTF8):
            data = data[len(codecs.BOM_UTF8):]
        try:
            text = data.decode(codec.name)
        except UnicodeDecodeError as exc:
            bad = data[exc.start:exc.start + 1]
            raise InputError(
                f"byte 0x{bad.hex()} cannot be decoded with encoding {encoding}"
                " (wrong encoding?)",
                source=name,
                line=_line_of(data, exc.start),
            ) from None
    else:
        text = data
    if text.startswith(_BOM):
        text = text[1:]
    nul = text.find("\x00")
    if nul >= 0:
        raise InputError("NUL byte in input (binary file?)", source=name, line=_line_of(text, nul))
    return text


def _lines(text: str) -> list[str]:
    """Split on LF, CRLF or lone CR (and nothing else, unlike ``str.splitlines``)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


# --------------------------------------------------------------------------- CoNLL / CRF++


def read_conll(
    source: Source,
    *,
    encoding: str = "utf-8",
    missing: str = "_",
    labeled: bool = True,
    name: str | None = None,
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
    """
    name = _source_name(source, name)
    text = _read_source(source, encoding, name)
    sentences: list[Sentence] = []
    n_cols = 0
    first_line = 0
    tokens: list[tuple[str, ...]] = []
    labels: list[str | None] = []
    start = 0
    split = _COLUMN_SEP.split
    for lineno, raw in enumerate(_lines(text), start=1):
        stripped = raw.strip(" \t")
        if not stripped:
            if tokens:
                sentences.append(Sentence(tokens, labels, start))
                tokens, labels = [], []
            continue
        cols = split(stripped)
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
        if not tokens:
            start = lineno
        if labeled:
            lab = cols.pop()
            labels.append(None if lab == missing else lab)
        else:
            labels.append(None)
        tokens.append(tuple(cols))
    if tokens:
        sentences.append(Sentence(tokens, labels, start))
    if not sentences:
        raise InputError("no sentences found", source=name)
    return sentences


def _check_field(value: str, what: str, where: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{what} is {type(value).__name__}, not a string", source=where)
    if value == "" or any(ch in value for ch in " \t\r\n"):
        raise InputError(
            f"{what} {value!r} is empty or contains whitespace; it cannot be written as a column",
            source=where,
        )
    return value


def format_conll(
    sentences: Iterable[Sentence],
    *,
    missing: str = "_",
    extra_columns: Sequence[Sequence[Sequence[str]]] | None = None,
    sep: str = "\t",
    label: bool = True,
) -> str:
    """Return sentences as CRF++ column text (tab-separated, blank line after each sentence).

    ``extra_columns[i][j]`` is a list of strings appended after the label of token ``j`` of
    sentence ``i``. ``label=False`` omits the label column.
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
            where = f"<output>: sentence {i + 1}, token {j + 1}"
            cols = [_check_field(c, "column", where) for c in tok]
            if label:
                lab = sent.labels[j]
                cols.append(missing if lab is None else _check_field(lab, "label", where))
            if extra is not None:
                cols.extend(_check_field(str(c), "extra column", where) for c in extra[j])
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


def read_jsonl(
    source: Source, *, name: str | None = None, encoding: str = "utf-8", missing: str = "_"
) -> list[Sentence]:
    """Read one JSON object per line: ``{"tokens": [...], "labels": [...]}``.

    ``tokens`` is a list of strings (one column) or a list of lists of strings (columns; the same
    number for every token of the file). ``labels`` is optional; ``null`` or ``missing`` (``"_"``)
    is a missing label. Blank lines are skipped.
    """
    name = _source_name(source, name)
    text = _read_source(source, encoding, name)
    sentences: list[Sentence] = []
    n_cols = 0
    for lineno, raw in enumerate(_lines(text), start=1):
        if not raw.strip():
            continue

        def bad(msg: str, lineno: int = lineno) -> InputError:
            return InputError(msg, source=name, line=lineno)

        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise bad(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise bad(f"expected a JSON object, found {type(obj).__name__}")
        if "tokens" not in obj:
            raise bad('missing "tokens"')
        raw_tokens = obj["tokens"]
        if not isinstance(raw_tokens, list) or not raw_tokens:
            raise bad('"tokens" must be a non-empty list')
        tokens: list[tuple[str, ...]] = []
        for j, tok in enumerate(raw_tokens):
            if isinstance(tok, str):
                cols: tuple = (tok,)
            elif isinstance(tok, list) and tok and all(isinstance(c, str) for c in tok):
                cols = tuple(tok)
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
                raise bad('"labels" must be a list')
            if len(raw_labels) != len(tokens):
                raise bad(f"{len(tokens)} tokens but {len(raw_labels)} labels")
            labels = []
            for j, lab in enumerate(raw_labels):
                if lab is None or lab == missing:
                    labels.append(None)
                elif isinstance(lab, str):
                    labels.append(lab)
                else:
                    raise bad(f"label {j + 1} must be a string or null")
        sentences.append(Sentence(tokens, labels, lineno))
    if not sentences:
        raise InputError("no sentences found", source=name)
    return sentences


def format_jsonl(sentences: Iterable[Sentence]) -> str:
    """Return sentences as JSONL text (see :func:`read_jsonl`)."""
    out = []
    for sent in sentences:
        if all(len(t) == 1 for t in sent.tokens):
            toks: list = [t[0] for t in sent.tokens]
        else:
            toks = [list(t) for t in sent.tokens]
        out.append(json.dumps({"tokens": toks, "labels": list(sent.labels)}, ensure_ascii=False))
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
    source: Source, *, name: str | None = None, encoding: str = "utf-8"
) -> list[Sentence]:
    """Read plain text: one sentence per line, whitespace-tokenised; blank lines skipped."""
    name = _source_name(source, name)
    text = _read_source(source, encoding, name)
    sentences = [
        Sentence([(w,) for w in raw.split()], None, lineno)
        for lineno, raw in enumerate(_lines(text), start=1)
        if raw.strip()
    ]
    if not sentences:
        raise InputError("no sentences found", source=name)
    return sentences


# --------------------------------------------------------------------------- dispatch


def read_any(
    source: Source,
    fmt: str = "conll",
    *,
    name: str | None = None,
    encoding: str = "utf-8",
    missing: str = "_",
    labeled: bool = True,
) -> list[Sentence]:
    """Read ``source`` in format ``fmt`` ("conll", "jsonl" or "text").

    ``missing`` applies to conll and jsonl, ``labeled`` to conll only (JSONL labels are optional
    per line, plain text is never labeled).
    """
    if fmt == "conll":
        return read_conll(source, name=name, encoding=encoding, missing=missing, labeled=labeled)
    if fmt == "jsonl":
        return read_jsonl(source, name=name, encoding=encoding, missing=missing)
    if fmt == "text":
        return read_text(source, name=name, encoding=encoding)
    raise InputError(
        f"unknown format {fmt!r} (expected conll, jsonl or text)", source=_source_name(source, name)
    )
