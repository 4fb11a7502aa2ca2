"""Reading annotations in: uploads (CoNLL/CRF++ columns, JSONL, plain text) and the formats
of the tools annotators come from: Label Studio JSON (NER spans on text), doccano JSONL
(``text`` + ``label: [[start, end, tag]]``), Prodigy JSONL (``text``, ``tokens``,
``spans``) and CoNLL-2003 columns (``-DOCSTART-`` lines skipped, the last column is the
label).  Character spans become BIO labels of tokens; a span that does not start and end on
token boundaries is refused with one line naming the file, the line and the span."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpsl import limits
from gpsl.annotation import validate
from gpsl.errors import InputError
from gpsl.io import Sentence, read_any
from gpsl.tags import sort_labels

FORMATS = {"conll": "CoNLL / CRF++ columns", "text": "Plain text", "jsonl": "JSONL",
           "conll2003": "CoNLL-2003 columns", "labelstudio": "Label Studio JSON",
           "doccano": "doccano JSONL", "prodigy": "Prodigy JSONL"}
_EXT_FORMAT = {
    ".conll": "conll", ".conllu": "conll", ".data": "conll", ".tsv": "conll", ".iob": "conll",
    ".bio": "conll", ".crf": "conll", ".col": "conll", ".jsonl": "jsonl", ".json": "jsonl",
    ".ndjson": "jsonl", ".txt": "text", ".text": "text",
}
UPLOAD_TYPES = sorted({ext.lstrip(".") for ext in _EXT_FORMAT})
_TOKEN_RE = re.compile(r"\w+(?:[-'.]\w+)*|[^\w\s]")


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
    starts = {s: i for i, (s, _) in enumerate(offsets)}
    ends = {e: i for i, (_, e) in enumerate(offsets)}
    for start, end, tag in sorted(spans):
        start, end = int(start), int(end)
        # spans often include surrounding whitespace: trim it
        while start < end and text[start:start + 1].isspace():
            start += 1
        while end > start and text[end - 1:end].isspace():
            end -= 1
        if start not in starts or end not in ends or ends[end] < starts[start]:
            raise InputError(f"span [{start}, {end}) {text[start:end]!r} ({tag}) crosses a "
                             "token boundary", source=source, line=line)
        a, b = starts[start], ends[end]
        if any(lab != "O" for lab in labels[a:b + 1]):
            raise InputError(f"span [{start}, {end}) {text[start:end]!r} ({tag}) overlaps "
                             "another span", source=source, line=line)
        labels[a] = f"B-{tag}"
        for i in range(a + 1, b + 1):
            labels[i] = f"I-{tag}"
    return labels


def _sentence(text: str, spans, source: str, line: int, offsets=None) -> Sentence:
    if not isinstance(text, str) or not text.strip():
        raise InputError("the record has no text", source=source, line=line)
    offsets = offsets if offsets is not None else tokenize(text)
    if not offsets:
        raise InputError("the text has no tokens", source=source, line=line)
    labels = spans_to_labels(text, offsets, spans, source=source, line=line)
    return Sentence([(text[s:e],) for s, e in offsets], labels, line)


def _json_lines(text: str, source: str):
    for k, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON ({exc.msg})", source=source, line=k) from None
        if not isinstance(rec, dict):
            raise InputError("each line must be a JSON object", source=source, line=k)
        yield k, rec


def _span_triple(sp, source, line, what):
    try:
        return int(sp[0]), int(sp[1]), str(sp[2])
    except (TypeError, ValueError, IndexError, KeyError):
        raise InputError(f"bad {what} {sp!r}: expected [start, end, tag]", source=source,
                         line=line) from None


def read_doccano(text: str, source: str) -> list[Sentence]:
    """doccano JSONL: ``{"text": ..., "label": [[start, end, tag], ...]}`` per line."""
    out = []
    for k, rec in _json_lines(text, source):
        spans = [_span_triple(sp, source, k, "label")
                 for sp in rec.get("label", rec.get("labels", [])) or []]
        out.append(_sentence(rec.get("text"), spans, source, k))
    return out


def read_prodigy(text: str, source: str) -> list[Sentence]:
    """Prodigy JSONL: ``text``, optional ``tokens`` (``start``/``end``) and ``spans``
    (``start``, ``end``, ``label``); records with ``"answer"`` other than accept are
    skipped."""
    out = []
    for k, rec in _json_lines(text, source):
        if rec.get("answer", "accept") != "accept":
            continue
        offsets = None
        if rec.get("tokens"):
            try:
                offsets = [(int(t["start"]), int(t["end"])) for t in rec["tokens"]]
            except (TypeError, KeyError, ValueError):
                raise InputError("bad tokens: each needs start and end", source=source,
                                 line=k) from None
        spans = []
        for sp in rec.get("spans") or []:
            if not isinstance(sp, dict):
                raise InputError(f"bad span {sp!r}", source=source, line=k)
            spans.append(_span_triple((sp.get("start"), sp.get("end"), sp.get("label")),
                                      source, k, "span"))
        out.append(_sentence(rec.get("text"), spans, source, k, offsets))
    return out


def read_labelstudio(text: str, source: str) -> list[Sentence]:
    """Label Studio JSON export: a list of tasks ``{"data": {"text": ...}, "annotations":
    [{"result": [{"value": {"start", "end", "labels": [tag]}}]}]}`` (the first annotation
    of each task)."""
    try:
        tasks = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg})", source=source, line=exc.lineno) \
            from None
    if not isinstance(tasks, list):
        raise InputError("a Label Studio export is a JSON list of tasks", source=source)
    out = []
    for k, task in enumerate(tasks, 1):
        where = f"{source} (task {k})"
        if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
            raise InputError("task without data", source=where)
        results = []
        anns = task.get("annotations") or task.get("completions") or []
        if anns:
            results = anns[0].get("result") or []
        spans = []
        for r in results:
            v = r.get("value") if isinstance(r, dict) else None
            if not isinstance(v, dict) or "start" not in v:
                continue
            tags = v.get("labels") or []
            if not tags:
                continue
            spans.append(_span_triple((v.get("start"), v.get("end"), tags[0]), where, None,
                                      "result"))
        out.append(_sentence(task["data"].get("text"), spans, where, k))
    return out


def read_conll2003(text: str, source: str) -> list[Sentence]:
    """CoNLL-2003: ``word POS chunk NER`` columns; ``-DOCSTART-`` lines are skipped."""
    kept = "\n".join("" if ln.startswith("-DOCSTART-") else ln for ln in text.splitlines())
    return read_any(kept.encode("utf-8"), "conll", name=source)


_SPAN_READERS = {"doccano": read_doccano, "prodigy": read_prodigy,
                 "labelstudio": read_labelstudio, "conll2003": read_conll2003}


def parse_upload(data: bytes, filename: str, fmt: str | None = None, *,
                 max_bytes: int | None = None, max_tokens: int | None = None) -> list[Sentence]:
    """Read uploaded bytes as ``fmt`` (None: by extension).  Refused with one InputError
    line naming the file (and line): too large (:func:`gpsl.limits.max_upload_bytes`), a
    sentence too long (``max_tokens``), and every problem of the readers."""
    source = filename or "<upload>"
    if data is None:
        raise InputError("no file data", source=source)
    limits.check_upload_size(len(data), limits.max_upload_bytes(max_bytes), source)
    fmt = fmt or guess_format(filename)
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}", source=source)
    if fmt in _SPAN_READERS:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 text (byte {exc.start})", source=source) from None
        sentences = _SPAN_READERS[fmt](text, source)
        cap = limits.max_tokens(max_tokens)
        for s in sentences:
            if cap and len(s.tokens) > cap:
                raise InputError(f"sentence of {len(s.tokens)} tokens (the limit is {cap})",
                                 source=source, line=s.line)
        return sentences
    return read_any(bytes(data), fmt, name=source, max_tokens=max_tokens)


def upload_limits() -> tuple[float | None, int | None]:
    """``(megabytes per upload, tokens per sentence)`` as configured (None: no limit;
    :mod:`gpsl.limits`, set by :data:`LIMIT_SETTINGS`); a bad setting raises InputError."""
    size = limits.max_upload_bytes()
    return (size / limits.MB if size else None), limits.max_tokens() or None


#: the environment variables that set the upload limits (megabytes, tokens per sentence)
LIMIT_SETTINGS = (limits.ENV_MAX_UPLOAD_MB, limits.ENV_MAX_TOKENS)


@dataclass(frozen=True)
class UploadSummary:
    sentences: int
    tokens: int
    labeled: int
    n_columns: int
    labels: list[str]


def summarize(sentences: Sequence[Sentence]) -> UploadSummary:
    return UploadSummary(
        sentences=len(sentences), tokens=sum(len(s) for s in sentences),
        labeled=sum(len(s) - s.n_missing for s in sentences),
        n_columns=len(sentences[0].tokens[0]) if sentences and sentences[0].tokens else 0,
        labels=sort_labels({lab for s in sentences for lab in s.labels if lab is not None}))


def unknown_labels(sentences: Iterable[Sentence], labels: Sequence[str]) -> list[str]:
    known = set(labels)
    return sort_labels({lab for s in sentences for lab in s.labels
                        if lab is not None and lab not in known})


def import_sentences(store, project_id: int, sentences: Sequence[Sentence], *,
                     split: str = "train", doc: str | None = None, annotator: str = "import",
                     add_labels: Sequence[str] = ()) -> int:
    """Append sentences to a project, all or nothing; into ``'heldout'`` the file's labels
    go as gold labels.  ``add_labels`` join the label set in the same transaction."""
    sentences = list(sentences)
    project = store.get_project(project_id)
    if project is None:
        raise InputError(f"no project with id {project_id}", source="<import>")
    first = store.get_sentences(project_id, limit=1)
    labels = list(project["labels"]) + [x for x in add_labels if x not in project["labels"]]
    validate.sentences(sentences, labels, source=doc or "<upload>",  # precise messages first
                       n_columns=len(first[0]["tokens"][0]) if first else None)
    if split == "heldout":
        return store.add_sentences(project_id, [Sentence(s.tokens, None, s.line)
                                                for s in sentences], split="heldout",
                                   doc=doc, annotator=annotator,
                                   gold=[s.labels for s in sentences], add_labels=add_labels)
    return store.add_sentences(project_id, sentences, split=split, doc=doc,
                               annotator=annotator, add_labels=add_labels)
