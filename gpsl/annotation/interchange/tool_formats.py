"""The readers of uploads (:mod:`.imports` reads, checks and writes with them): CoNLL/CRF++
columns, JSONL, plain text (:mod:`gpsl.io`) and the formats
of the tools annotators come from: Label Studio JSON (NER spans on text), doccano JSONL
(``text`` + ``label: [[start, end, tag]]``), Prodigy JSONL (``text``, ``tokens``,
``spans``) and CoNLL-2003 columns (``-DOCSTART-`` lines skipped, the last column is the
label).  Character spans become BIO labels of tokens; a span that does not start and end on
token boundaries is refused with one line naming the file, the line and the span."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from gpsl import limits
from gpsl.annotation.store import validate
from gpsl.errors import InputError
from gpsl.io import Sentence, read_any

FORMATS = {"conll": "CoNLL / CRF++ columns", "text": "Plain text", "jsonl": "JSONL",
           "conll2003": "CoNLL-2003 columns", "labelstudio": "Label Studio JSON",
           "doccano": "doccano JSONL", "prodigy": "Prodigy JSONL"}
_EXT_FORMAT = {
    ".conll": "conll", ".conllu": "conll", ".data": "conll", ".tsv": "conll", ".iob": "conll",
    ".bio": "conll", ".crf": "conll", ".col": "conll", ".jsonl": "jsonl", ".json": "jsonl",
    ".ndjson": "jsonl", ".txt": "text", ".text": "text",
}
UPLOAD_TYPES = sorted({ext.lstrip(".") for ext in _EXT_FORMAT})
#: a word (zero-width characters inside it stay part of it: U+200B-U+200D, U+2060, U+FEFF,
#: the soft hyphen), or one other character that is neither space nor zero-width
_ZW = "\u00ad\u200b\u200c\u200d\u2060\ufeff"
_TOKEN_RE = re.compile(rf"[\w{_ZW}]*\w[\w{_ZW}]*(?:[-'.][\w{_ZW}]*\w[\w{_ZW}]*)*"
                       rf"|[^\w\s{_ZW}]")
#: a span type that is a token label already (``B-PER``, ``I-LOC``, ``S-X`` ...)
_PREFIXED = re.compile(r"^[BIESLU]-")


def guess_format(filename: str) -> str:
    """Format from a file name's extension (default: CoNLL columns)."""
    return _EXT_FORMAT.get(Path(filename or "").suffix.lower(), "conll")


def tokenize(text: str) -> list[tuple[int, int]]:
    """Character spans ``(start, end)`` of the tokens of ``text`` (words and punctuation)."""
    return [(m.start(), m.end()) for m in _TOKEN_RE.finditer(text)]


def spans_to_labels(text: str, offsets: Sequence[tuple[int, int]],
                    spans: Iterable[tuple[int, int, str]], *, source: str,
                    line: int | None) -> list[str]:
    """BIO labels of the tokens at ``offsets`` for character ``spans`` (start, end, tag);
    :class:`InputError` when a span does not fall on token boundaries or spans overlap."""
    labels = ["O"] * len(offsets)
    spans = list(spans)
    for start, end, tag in spans:
        if tag in ("O", "_") or _PREFIXED.match(str(tag)):
            raise InputError(f"span [{start}, {end}) has type {_show(str(tag))}, which is a "
                             "token label, not an entity type (a span's type is e.g. 'PER': "
                             "its tokens become B-PER, I-PER)", source=source, line=line)
    starts = {s: i for i, (s, _) in enumerate(offsets)}
    ends = {e: i for i, (_, e) in enumerate(offsets)}
    for start, end, tag in sorted(spans):
        # spans often include surrounding whitespace: trim it
        while start < end and text[start:start + 1].isspace():
            start += 1
        while end > start and text[end - 1:end].isspace():
            end -= 1
        if start not in starts or end not in ends or ends[end] < starts[start]:
            raise InputError(f"span [{start}, {end}) {_show(text[start:end])} ({tag}) crosses "
                             "a token boundary", source=source, line=line)
        a, b = starts[start], ends[end]
        if any(lab != "O" for lab in labels[a:b + 1]):
            raise InputError(f"span [{start}, {end}) {_show(text[start:end])} ({tag}) overlaps "
                             "another span", source=source, line=line)
        labels[a] = f"B-{tag}"
        for i in range(a + 1, b + 1):
            labels[i] = f"I-{tag}"
    return labels


# ----------------------------------------------------------------------------- the tools'
# formats: every value is checked for its type and range before it is used, so a wrong type
# is refused with one line and never coerced into a label ([0, 5, null] is not B-None, a
# label "PER" is not a list of one-letter labels, an offset 0.5 is not 0)


def _show(value, n: int = 40) -> str:
    """A short, one-line ``repr`` of a value for a message."""
    text = repr(value)
    return text if len(text) <= n else text[:n - 3] + "..."


def _kind(value) -> str:
    """What a JSON value is, with the value itself when that helps (``a number 0.5``)."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else f"a boolean ({str(value).lower()})"
    kind = {int: "a number", float: "a number", str: "text", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)
    return f"{kind} {_show(value)}" if isinstance(value, (int, float, str)) else kind


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _json_problem(exc: ValueError) -> str:
    text = " ".join(str(exc).split())
    if "digits" in text:
        return "not valid JSON (a number of thousands of digits)"
    return f"not valid JSON ({text[:120]})"


def _loads(raw: str, source: str, line: int | None):
    """One JSON value: :class:`InputError` (one line) for invalid JSON, nesting deeper than
    the parser's recursion limit, integers of thousands of digits and NaN/Infinity."""
    try:
        return json.loads(raw, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg}, column {exc.colno})", source=source,
                         line=line if line is not None else exc.lineno) from None
    except RecursionError:
        raise InputError("not valid JSON (nested too deeply)", source=source,
                         line=line) from None
    except ValueError as exc:
        raise InputError(_json_problem(exc), source=source, line=line) from None


def _offset(value, what: str, text: str, source: str, line: int | None) -> int:
    """A character offset into ``text``: a whole number (not a boolean, not 0.5) in
    ``0 .. len(text)``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{what} must be a whole number, found {_kind(value)}",
                         source=source, line=line)
    if not 0 <= value <= len(text):
        raise InputError(f"{what} {_show(value, 24)} is outside the text (0 to {len(text)} "
                         "characters)",
                         source=source, line=line)
    return value


def _tag(value, what: str, source: str, line: int | None) -> str:
    """An entity type: non-empty text without whitespace or control characters."""
    if not isinstance(value, str):
        raise InputError(f"{what} must be text, found {_kind(value)}",
                         source=source, line=line)
    validate.text(value, what, source, line=line, one_line=True)
    if not value or any(ch.isspace() for ch in value) or len(value) > 100:
        raise InputError(f"{what} {_show(value)} must be one word (no spaces, at most 100 "
                         "characters)", source=source, line=line)
    return value


def _span(start, end, tag, what: str, text: str, source: str, line: int | None):
    start = _offset(start, f"{what} start", text, source, line)
    end = _offset(end, f"{what} end", text, source, line)
    if end <= start:
        raise InputError(f"{what} [{start}, {end}) is empty or reversed", source=source,
                         line=line)
    return start, end, _tag(tag, f"{what} label", source, line)


def _list(value, what: str, source: str, line: int | None) -> list:
    if not isinstance(value, list):
        raise InputError(f"{what} must be a list, found {_kind(value)}",
                         source=source, line=line)
    return value


def _text(rec: dict, key: str, source: str, line: int | None, what: str = "text") -> str:
    value = rec.get(key)
    if not isinstance(value, str):
        raise InputError(f"the record has no {what} ({key!r} is {_kind(value)})",
                         source=source, line=line)
    validate.text(value, what, source, line=line)
    if not value.strip():
        raise InputError(f"the record's {what} is empty", source=source, line=line)
    return value


def _sentence(text: str, spans, source: str, line: int, offsets=None) -> Sentence:
    """``spans`` None: the record carries no annotation (labels missing); a list (maybe
    empty): every token outside the spans is ``O``."""
    offsets = offsets if offsets is not None else tokenize(text)
    if not offsets:
        raise InputError("the text has no tokens", source=source, line=line)
    if spans is not None and len(spans) > len(offsets):
        raise InputError(f"{len(spans):,} spans for {len(offsets):,} tokens", source=source,
                         line=line)
    labels = None if spans is None else spans_to_labels(text, offsets, spans, source=source,
                                                        line=line)
    return Sentence([(text[s:e],) for s, e in offsets], labels, line)


def split_lines(text: str) -> list[str]:
    """The lines of a text (ending at LF, CRLF or CR only: U+2028 may stand inside a JSON
    string)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _json_lines(lines: Iterable[str], source: str):
    """``(line number, object)`` of each non-blank line (:func:`split_lines`)."""
    cap = limits.max_line_chars()
    for k, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        limits.check_line_length(len(raw), cap, source, k)
        rec = _loads(raw, source, k)
        if not isinstance(rec, dict):
            raise InputError(f"each line must be a JSON object, found {_kind(rec)}",
                             source=source, line=k)
        yield k, rec


def read_doccano(text: str, source: str) -> list[Sentence]:
    """doccano JSONL: ``{"text": ..., "label": [[start, end, tag], ...]}`` per line (also
    ``"labels"``, or ``"entities": [{"start_offset", "end_offset", "label"}]``).  A record
    without any of them is unlabeled; an empty list means "no entity" (every token O)."""
    return list(iter_doccano(split_lines(text), source))


def iter_doccano(lines: Iterable[str], source: str):
    """:func:`read_doccano`'s sentences one at a time, from the file's lines."""
    for k, rec in _json_lines(lines, source):
        body = _text(rec, "text", source, k)
        spans = None
        for key in ("label", "labels", "entities"):
            if key not in rec:
                continue
            spans = []
            for sp in _list(rec[key], f'"{key}"', source, k):
                if isinstance(sp, dict):
                    spans.append(_span(sp.get("start_offset"), sp.get("end_offset"),
                                       sp.get("label"), "entity", body, source, k))
                elif isinstance(sp, list) and len(sp) == 3:
                    spans.append(_span(*sp, "span", body, source, k))
                else:
                    raise InputError(f"bad span {_show(sp)}: expected [start, end, label]",
                                     source=source, line=k)
            break
        yield _sentence(body, spans, source, k)


def _prodigy_tokens(rec: dict, body: str, source: str, k: int):
    if "tokens" not in rec or rec["tokens"] is None:
        return None
    offsets = []
    for j, tok in enumerate(_list(rec["tokens"], '"tokens"', source, k), 1):
        if not isinstance(tok, dict):
            raise InputError(f"token {j} must be an object with start and end, found "
                             f"{_kind(tok)}", source=source, line=k)
        a = _offset(tok.get("start"), f"token {j} start", body, source, k)
        b = _offset(tok.get("end"), f"token {j} end", body, source, k)
        if b <= a or not body[a:b].strip():
            raise InputError(f"token {j} [{a}, {b}) is empty (its offsets miss the text)",
                             source=source, line=k)
        if offsets and a < offsets[-1][1]:
            raise InputError(f"token {j} [{a}, {b}) overlaps or precedes the token before it",
                             source=source, line=k)
        if "text" in tok and tok["text"] != body[a:b]:
            raise InputError(f"token {j}: its text {_show(tok['text'])} is not the text at "
                             f"[{a}, {b}) {_show(body[a:b])}", source=source, line=k)
        offsets.append((a, b))
    return offsets or None


def read_prodigy(text: str, source: str) -> list[Sentence]:
    """Prodigy JSONL: ``text``, optional ``tokens`` (``start``/``end``) and ``spans``
    (``start``, ``end``, ``label``); records with ``"answer"`` other than accept are
    skipped; a record without ``spans`` is unlabeled."""
    return list(iter_prodigy(split_lines(text), source))


def iter_prodigy(lines: Iterable[str], source: str):
    """:func:`read_prodigy`'s sentences one at a time, from the file's lines."""
    for k, rec in _json_lines(lines, source):
        answer = rec.get("answer", "accept")
        if not isinstance(answer, str):
            raise InputError(f'"answer" must be text, found {_kind(answer)}', source=source,
                             line=k)
        if answer != "accept":
            continue
        body = _text(rec, "text", source, k)
        offsets = _prodigy_tokens(rec, body, source, k)
        spans = None
        if rec.get("spans") is not None:
            spans = []
            for sp in _list(rec["spans"], '"spans"', source, k):
                if not isinstance(sp, dict):
                    raise InputError(f"bad span {_show(sp)}: expected an object with start, "
                                     "end and label", source=source, line=k)
                spans.append(_span(sp.get("start"), sp.get("end"), sp.get("label"), "span",
                                   body, source, k))
        yield _sentence(body, spans, source, k, offsets)


def _json_array(text: str, source: str):
    """``(line, element)`` of a JSON array, parsed element by element so that each one is
    named by the line it starts on."""
    dec = json.JSONDecoder(parse_constant=_refuse_constant)
    ws = re.compile(r"[ \t\n\r]*")
    pos = ws.match(text, 0).end()
    if text[pos:pos + 1] != "[":
        value = _loads(text, source, None)  # a clear line for invalid JSON
        raise InputError(f"a Label Studio export is a JSON list of tasks, found {_kind(value)}",
                         source=source)
    pos = ws.match(text, pos + 1).end()
    if text[pos:pos + 1] == "]":
        return
    while True:
        line = text.count("\n", 0, pos) + 1
        try:
            value, pos = dec.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON ({exc.msg})", source=source,
                             line=exc.lineno) from None
        except RecursionError:
            raise InputError("not valid JSON (nested too deeply)", source=source,
                             line=line) from None
        except ValueError as exc:
            raise InputError(_json_problem(exc), source=source, line=line) from None
        yield line, value
        pos = ws.match(text, pos).end()
        sep = text[pos:pos + 1]
        if sep == "]":
            if text[ws.match(text, pos + 1).end():]:
                raise InputError("not valid JSON (extra data after the list)", source=source,
                                 line=text.count("\n", 0, pos) + 1)
            return
        if sep != ",":
            raise InputError("not valid JSON (expected ',' or ']' after a task)",
                             source=source, line=text.count("\n", 0, pos) + 1)
        pos = ws.match(text, pos + 1).end()


def _labelstudio_spans(task: dict, body: str, source: str, line: int):
    """The spans of a task's first annotation that was not cancelled (None: no annotation,
    the task is unlabeled); results of other kinds (choices, text areas, relations) are
    left out, a ``labels`` result is checked whole."""
    key = "annotations" if task.get("annotations") is not None else "completions"
    anns = [a for a in _list(task.get(key) or [], f'"{key}"', source, line)]
    for j, ann in enumerate(anns, 1):
        if not isinstance(ann, dict):
            raise InputError(f"annotation {j} must be an object, found {_kind(ann)}",
                             source=source, line=line)
    anns = [a for a in anns if not a.get("was_cancelled")]
    if not anns:
        return None
    spans = []
    for r in _list(anns[0].get("result", []), '"result"', source, line):
        if not isinstance(r, dict):
            raise InputError(f"a result must be an object, found {_kind(r)}", source=source,
                             line=line)
        v = r.get("value")
        if r.get("type", "labels") != "labels" and not (isinstance(v, dict) and "labels" in v):
            continue
        if not isinstance(v, dict):
            raise InputError(f"a labels result's value must be an object, found {_kind(v)}",
                             source=source, line=line)
        tags = _list(v.get("labels"), "a result's labels", source, line)
        if len(tags) != 1:
            raise InputError(f"a result must carry one label, found {len(tags)} "
                             f"{_show(tags)}", source=source, line=line)
        a, b, tag = _span(v.get("start"), v.get("end"), tags[0], "result", body, source,
                          line)
        if "text" in v and v["text"] != body[a:b]:
            raise InputError(f"result [{a}, {b}): its text {_show(v['text'])} is not the "
                             f"task's text there {_show(body[a:b])}", source=source, line=line)
        spans.append((a, b, tag))
    return spans


def read_labelstudio(text: str, source: str) -> list[Sentence]:
    """Label Studio JSON export: a list of tasks ``{"data": {"text": ...}, "annotations":
    [{"result": [{"type": "labels", "value": {"start", "end", "labels": [tag]}}]}]}`` (the
    first annotation of each task that was not cancelled; a task without one is
    unlabeled)."""
    out = []
    for line, task in _json_array(text, source):
        if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
            raise InputError("a task must be an object with \"data\"", source=source,
                             line=line)
        body = _text(task["data"], "text", source, line, "data.text")
        out.append(_sentence(body, _labelstudio_spans(task, body, source, line), source,
                             line))
    if not out:
        raise InputError("no tasks in the file", source=source)
    return out


def read_conll2003(text: str, source: str) -> list[Sentence]:
    """CoNLL-2003: ``word POS chunk NER`` columns; ``-DOCSTART-`` lines are skipped (left
    blank, so every line keeps its number)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    kept = "\n".join("" if ln.lstrip("\ufeff").startswith("-DOCSTART-") else ln
                     for ln in lines)
    return read_any(kept.encode("utf-8", errors="surrogatepass"), "conll", name=source)


_SPAN_READERS = {"doccano": read_doccano, "prodigy": read_prodigy,
                 "labelstudio": read_labelstudio, "conll2003": read_conll2003}
