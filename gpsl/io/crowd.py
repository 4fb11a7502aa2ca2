"""Crowd annotation files: several annotators' labels per token, as JSONL annotations
(``read_crowd_jsonl``) or CoNLL columns, one per annotator (``read_crowd_conll``).

The same rules as every reader of :mod:`gpsl.io.formats`: the whole file or one
:class:`gpsl.errors.InputError` line ``file:line: problem``. The one-folder-per-annotator
layout is :mod:`gpsl.io.crowd_raw`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gpsl.errors import InputError
from gpsl.io.formats import (
    SPACE,
    Sentence,
    json_string,
    json_type,
    read_conll,
    read_jsonl,
    shorten,
)
from gpsl.io.source import Source, read_source, source_name, text_lines

__all__ = ["CrowdSentence", "read_crowd", "read_crowd_conll", "read_crowd_jsonl"]


# --------------------------------------------------------------------------- crowd annotations


@dataclass
class CrowdSentence(Sentence):
    """A sentence with crowd votes: ``annotations`` maps an annotator's name to one label per
    token (``None`` where that annotator gave no label); ``labels`` is the optional gold."""

    annotations: dict[str, list[str | None]] = field(default_factory=dict)


def _check_label(lab: str, known: set[str] | None, what: str, bad) -> str:
    if SPACE.search(lab):
        raise bad(f"{what} {shorten(lab)} contains whitespace")
    if known is not None and lab not in known:
        raise bad(f"{what} {shorten(lab)} is not a known label ({', '.join(sorted(known)[:8])}"
                  f"{', ...' if len(known) > 8 else ''})")
    return lab


def read_crowd_jsonl(
    source: Source,
    *,
    name: str | None = None,
    encoding: str = "utf-8",
    missing: str = "_",
    labels: Iterable[str] | None = None,
    max_tokens: int | None = None,
    max_line_chars: int | None = None,
) -> list[CrowdSentence]:
    """Read crowd votes, one JSON object per line::

        {"tokens": [...], "annotations": [{"annotator": "a1", "labels": [..., null, ...]}, ...],
         "labels": [...optional gold...], "id": ...}

    ``tokens``, ``labels`` and ``id`` as :func:`read_jsonl`. Each annotation names its annotator
    (a non-empty string, once per sentence) and gives one label or ``null`` (or ``missing``)
    per token. ``labels`` (the argument) fixes the label set: any other label is an error.
    Every problem is an :class:`InputError` ``file:line: problem``.
    """
    name = source_name(source, name)
    known = None if labels is None else {str(v) for v in labels}
    text = read_source(source, encoding, name)
    base = read_jsonl(io.StringIO(text), name=name, missing=missing, max_tokens=max_tokens,
                      max_line_chars=max_line_chars)
    lines = text_lines(text)
    out: list[CrowdSentence] = []
    for sent in base:
        lineno = sent.line

        def bad(msg: str, lineno: int = lineno) -> InputError:
            return InputError(msg, source=name, line=lineno)

        obj = json.loads(lines[lineno - 1])
        L = len(sent.tokens)
        for j, lab in enumerate(sent.labels):
            if lab is not None:
                _check_label(lab, known, f"gold label {j + 1}", bad)
        raw = obj.get("annotations", [])
        if not isinstance(raw, list):
            raise bad(f'"annotations" must be a list, found {json_type(raw)}')
        annotations: dict[str, list[str | None]] = {}
        for k, ann in enumerate(raw, start=1):
            if not isinstance(ann, dict):
                raise bad(f"annotation {k} must be an object, found {json_type(ann)}")
            who = ann.get("annotator")
            if not isinstance(who, str) or not who.strip():
                raise bad(f'annotation {k}: "annotator" must be a non-empty string')
            json_string(who, f"annotation {k}: annotator", bad)
            same = [a for a in annotations if " ".join(a.split()) == " ".join(who.split())]
            if same:
                raise bad(f"duplicate annotator {who!r} in one sentence" + (
                    f" (the same name as {same[0]!r} but for spaces)" if same[0] != who
                    else ""))
            labs = ann.get("labels")
            if not isinstance(labs, list):
                raise bad(f'annotator {who!r}: "labels" must be a list, found {json_type(labs)}')
            if len(labs) != L:
                raise bad(f"annotator {who!r} has {len(labs)} labels for {L} tokens")
            row: list[str | None] = []
            for j, lab in enumerate(labs):
                if lab is None or lab == missing:
                    row.append(None)
                elif isinstance(lab, str):
                    json_string(lab, f"annotator {who!r}, label {j + 1}", bad)
                    row.append(_check_label(lab, known, f"annotator {who!r}, label {j + 1}",
                                            bad))
                else:
                    raise bad(f"annotator {who!r}, label {j + 1} must be a string or null, "
                              f"found {json_type(lab)}")
            annotations[who] = row
        out.append(CrowdSentence(sent.tokens, sent.labels, sent.line, sent.id,
                                 annotations=annotations))
    return out


def read_crowd_conll(
    source: Source,
    n_annotators: int,
    *,
    annotators: Sequence[str] | None = None,
    name: str | None = None,
    encoding: str = "utf-8",
    missing: str = "_",
    labels: Iterable[str] | None = None,
    max_tokens: int | None = None,
    max_line_chars: int | None = None,
) -> list[CrowdSentence]:
    """Read a CRF++ column file whose last ``n_annotators`` columns are one label column per
    annotator (``missing``, default ``_``: no label from that annotator).

    Annotators are named ``annotators`` (default ``a1 .. aN``; names must be distinct).
    ``labels`` fixes the label set as in :func:`read_crowd_jsonl`. No gold column.
    """
    name = source_name(source, name)
    if int(n_annotators) < 1:
        raise InputError(f"--annotators must be at least 1, not {n_annotators}", source=name)
    n_annotators = int(n_annotators)
    if annotators is None:
        annotators = [f"a{k + 1}" for k in range(n_annotators)]
    annotators = [str(a) for a in annotators]
    if len(annotators) != n_annotators:
        raise InputError(f"{len(annotators)} annotator names for {n_annotators} annotator "
                         "columns", source=name)
    dup = sorted({a for a in annotators if annotators.count(a) > 1})
    if dup:
        raise InputError(f"duplicate annotator {dup[0]!r}", source=name)
    known = None if labels is None else {str(v) for v in labels}
    base = read_conll(source, encoding=encoding, labeled=False, name=name,
                      max_tokens=max_tokens, max_line_chars=max_line_chars)
    width = len(base[0].tokens[0])
    if width < n_annotators + 1:
        raise InputError(f"{width} columns: expected feature column(s) and {n_annotators} "
                         "annotator columns", source=name, line=base[0].line)
    out: list[CrowdSentence] = []
    for sent in base:
        rows: dict[str, list[str | None]] = {a: [] for a in annotators}
        feats = []
        for j, tok in enumerate(sent.tokens):
            lineno = sent.line + j

            def bad(msg: str, lineno: int = lineno) -> InputError:
                return InputError(msg, source=name, line=lineno)

            feats.append(tok[: width - n_annotators])
            for a, lab in zip(annotators, tok[width - n_annotators:]):
                rows[a].append(None if lab == missing else
                               _check_label(lab, known, f"annotator {a!r}", bad))
        out.append(CrowdSentence(feats, None, sent.line, None, annotations=rows))
    return out


def read_crowd(source: Source, fmt: str | None = None, *, n_annotators: int | None = None,
               **kw) -> list[CrowdSentence]:
    """Crowd votes from JSONL or CoNLL (``fmt`` None: by the file name's ``.jsonl``/``.json``).

    CoNLL needs ``n_annotators``.
    """
    if fmt is None:
        fmt = "jsonl" if str(source).lower().endswith((".jsonl", ".json")) else "conll"
    if fmt == "jsonl":
        kw.pop("annotators", None)
        return read_crowd_jsonl(source, **kw)
    if fmt == "conll":
        if n_annotators is None:
            raise InputError("a CoNLL crowd file needs the number of annotator columns "
                             "(--annotators N)", source=source_name(source, kw.get("name")))
        return read_crowd_conll(source, n_annotators, **kw)
    raise InputError(f"unknown crowd format {fmt!r} (expected jsonl or conll)",
                     source=source_name(source, kw.get("name")))
