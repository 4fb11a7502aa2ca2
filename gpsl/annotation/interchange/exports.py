"""Writing annotations out: CoNLL columns and JSONL (the store's own formats), predictions
of a model version, the formats of other tools (Label Studio JSON, doccano JSONL, Prodigy
JSONL, CoNLL-2003), tables as CSV with formula cells neutralised, and a model folder as a
zip, only after it loads cleanly."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import tempfile
import threading
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from gpsl.annotation.corpus import predictions, sentences
from gpsl.errors import InputError
from gpsl.io import Sentence, format_conll, format_jsonl
from gpsl.metrics import chunks
from gpsl.model import GPSL
from gpsl.persist import MODEL_FILES, read_file
from gpsl.tags import is_prefixed

EXPORT_FORMATS = {"conll": "CoNLL columns", "jsonl": "JSONL",
                  "conll2003": "CoNLL-2003 columns", "labelstudio": "Label Studio JSON",
                  "doccano": "doccano JSONL", "prodigy": "Prodigy JSONL"}


def text_and_spans(sentence: Sentence) -> tuple[str, list[tuple[int, int]], list]:
    """The sentence as text (tokens joined by single spaces), the tokens' character
    offsets, and its labeled chunks as character spans ``(start, end, type)`` (BIO/IOB
    labels; missing labels count as outside)."""
    words = [t[0] for t in sentence.tokens]
    offsets, pos = [], 0
    for w in words:
        offsets.append((pos, pos + len(w)))
        pos += len(w) + 1
    labels = [lab if lab is not None and (lab == "O" or is_prefixed(lab)) else "O"
              for lab in sentence.labels]
    spans = [(offsets[a][0], offsets[b - 1][1], kind) for a, b, kind in chunks(labels)]
    return " ".join(words), offsets, spans


def to_doccano(sentences: Sequence[Sentence]) -> str:
    out = []
    for s in sentences:
        text, _, spans = text_and_spans(s)
        out.append(json.dumps({"text": text, "label": [list(sp) for sp in spans]},
                              ensure_ascii=False))
    return "".join(line + "\n" for line in out)


def to_prodigy(sentences: Sequence[Sentence]) -> str:
    out = []
    for s in sentences:
        text, offsets, spans = text_and_spans(s)
        out.append(json.dumps({
            "text": text,
            "tokens": [{"text": text[a:b], "start": a, "end": b, "id": i}
                       for i, (a, b) in enumerate(offsets)],
            "spans": [{"start": a, "end": b, "label": kind} for a, b, kind in spans],
            "answer": "accept"}, ensure_ascii=False))
    return "".join(line + "\n" for line in out)


def to_labelstudio(sentences: Sequence[Sentence]) -> str:
    tasks = []
    for k, s in enumerate(sentences, 1):
        text, _, spans = text_and_spans(s)
        result = [{"from_name": "label", "to_name": "text", "type": "labels",
                   "value": {"start": a, "end": b, "text": text[a:b], "labels": [kind]}}
                  for a, b, kind in spans]
        tasks.append({"id": k, "data": {"text": text}, "annotations": [{"result": result}]})
    return json.dumps(tasks, ensure_ascii=False, indent=1) + "\n"


def to_conll2003(sentences: Sequence[Sentence]) -> str:
    """``-DOCSTART-`` then ``word ... label`` lines (``O`` for a missing label)."""
    fixed = [Sentence(s.tokens, [lab if lab is not None else "O" for lab in s.labels], s.line)
             for s in sentences]
    return "-DOCSTART- -X- -X- O\n\n" + format_conll(fixed, source="CoNLL-2003 export")


def format_sentences(sentences: Sequence[Sentence], fmt: str, first: int = 1) -> str:
    """``sentences`` in ``fmt`` (``first``: the number of the first one, in errors)."""
    if fmt == "conll":
        return format_conll(sentences, source="CoNLL export", first=first)
    if fmt == "jsonl":
        return format_jsonl(sentences)
    writers = {"conll2003": to_conll2003, "labelstudio": to_labelstudio,
               "doccano": to_doccano, "prodigy": to_prodigy}
    if fmt in writers:
        return writers[fmt](sentences)
    raise InputError(f"unknown export format {fmt!r}", source="<export>")


#: sentences read and written at a time by the streamed exports
PAGE = 2000
#: formats written sentence by sentence (the others are one document)
STREAMED = ("conll", "jsonl", "doccano", "prodigy", "conll2003")


def _pages(db, project_id: int, split: str | None) -> Iterator[list[dict]]:
    offset = 0
    while page := sentences.page(db, project_id, split, offset, PAGE):
        yield page
        offset += len(page)


def _sentence(s: dict) -> Sentence:
    return Sentence(s["tokens"], s["labels"], s["line"] or 1)


def iter_annotations(db, project_id: int, fmt: str = "conll",
                     split: str | None = "train") -> Iterator[str]:
    """The current (derived) labels of a project in ``fmt``, as parts of the text written
    :data:`PAGE` sentences at a time (one document at once for Label Studio).  A token with
    whitespace cannot be a CoNLL column: CoNLL export then raises InputError naming the
    sentence."""
    if fmt not in STREAMED:
        yield format_sentences([_sentence(s) for s in sentences.page(db, project_id, split)],
                               fmt)
        return
    done = 0
    if fmt == "conll2003":
        yield "-DOCSTART- -X- -X- O\n\n"
    for page in _pages(db, project_id, split):
        if fmt == "conll2003":
            yield format_conll([Sentence(s["tokens"], [lab if lab is not None else "O"
                                                       for lab in s["labels"]], s["line"] or 1)
                                for s in page], source="CoNLL-2003 export", first=done + 1)
        else:
            yield format_sentences([_sentence(s) for s in page], fmt, done + 1)
        done += len(page)


def export_annotations(db, project_id: int, fmt: str = "conll",
                       split: str | None = "train") -> str:
    """The current (derived) labels of a project in ``fmt`` (:func:`iter_annotations`)."""
    return "".join(iter_annotations(db, project_id, fmt, split))


def preview_text(sentences: Sequence[dict], fmt: str = "conll") -> str:
    """Export text of a few sentence dicts (for a preview)."""
    return format_sentences([_sentence(s) for s in sentences], fmt)


def iter_predictions(db, project_id: int, version: dict, fmt: str = "conll",
                     split: str | None = "train") -> Iterator[str]:
    """Predictions of a model version, :data:`PAGE` sentences at a time.  CoNLL: token
    columns, current label (``_``), predicted label, its probability.  JSONL: tokens,
    labels, predicted, confidence and per-token marginals ``{label: p}``."""
    if fmt not in ("conll", "jsonl"):
        raise InputError(f"unknown export format {fmt!r}", source="<export>")
    classes = version.get("classes") or []
    done = 0
    for page in _pages(db, project_id, split):
        preds = predictions.get(db, version["id"], [s["id"] for s in page])
        have = [(s, preds[s["id"]]) for s in page if s["id"] in preds]
        if fmt == "conll":
            extra = [[[classes[int(r.argmax())], f"{float(r.max()):.4f}"] for r in p]
                     for _, p in have]
            yield format_conll([_sentence(s) for s, _ in have], extra_columns=extra,
                               source="CoNLL export", first=done + 1)
        else:
            out = io.StringIO()
            for s, p in have:
                toks = [t[0] if len(t) == 1 else list(t) for t in s["tokens"]]
                out.write(json.dumps({
                    "id": s["id"], "tokens": toks, "labels": s["labels"],
                    "predicted": [classes[int(r.argmax())] for r in p],
                    "confidence": [round(float(r.max()), 6) for r in p],
                    "marginals": [{c: round(float(x), 6) for c, x in zip(classes, r)}
                                  for r in p],
                }, ensure_ascii=False))
                out.write("\n")
            yield out.getvalue()
        done += len(have)


def export_predictions(db, project_id: int, version: dict, fmt: str = "conll",
                       split: str | None = "train") -> str:
    """Predictions of a model version in ``fmt`` (:func:`iter_predictions`)."""
    return "".join(iter_predictions(db, project_id, version, fmt, split))


def spooled(parts: Iterable[str]):
    """The text of ``parts`` (UTF-8) in a temporary file, rewound: in memory up to 16 MB,
    then on disk, so an export is never held twice as Python strings."""
    out = tempfile.SpooledTemporaryFile(max_size=16 << 20)
    for part in parts:
        out.write(part.encode("utf-8"))
    out.seek(0)
    return out


#: the models that loaded cleanly, by folder and the stamp of their files (at most
#: :data:`_CHECKED_MAX`, oldest dropped first): the Data page asks on every rerun
_CHECKED: dict[tuple, None] = {}
_CHECKED_MAX = 64
_CHECKED_LOCK = threading.Lock()  # the app's sessions run in threads


def files_stamp(path: Path) -> tuple | None:
    """The folder and, per model file, its inode, size and modification and change times
    in ns (None: a file is missing or unreadable): any write, replacement or removal of a
    file changes it; reading a label or a page never does."""
    try:
        return (str(path.resolve()),) + tuple(
            (s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns)
            for s in (os.stat(path / name) for name in MODEL_FILES))
    except OSError:
        return None


def check_model(path: str | os.PathLike) -> None:
    """Raise :class:`gpsl.errors.ModelFormatError` (one line) unless the saved model at
    ``path`` loads cleanly (checksums, array headers, description).  A model whose files
    are unchanged since it last loaded cleanly here (:func:`files_stamp`) is not loaded
    again (0.5 CPU s at 100,000 sentences); a damaged one is loaded, and refused, every
    time."""
    path = Path(path)
    if not path.is_dir():
        raise InputError("the model directory is missing", source=str(path))
    stamp = files_stamp(path)
    with _CHECKED_LOCK:
        if stamp is not None and stamp in _CHECKED:
            return
    GPSL.load(path)
    if stamp is not None and stamp == files_stamp(path):  # unchanged while it loaded
        with _CHECKED_LOCK:
            _CHECKED[stamp] = None
            while len(_CHECKED) > _CHECKED_MAX:
                del _CHECKED[next(iter(_CHECKED))]


def model_zip(path: str | os.PathLike) -> bytes:
    """A zip archive (in memory) of a saved model's files (:data:`gpsl.persist.MODEL_FILES`:
    nothing else the folder may hold), only after :func:`check_model` passed: a damaged
    model is never handed out, and no symbolic link is followed (the folder and its files
    are refused when one is a link)."""
    path = Path(path)
    if path.is_symlink():
        raise InputError("the model directory is a symbolic link; refused", source=str(path))
    check_model(path)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in MODEL_FILES:
            zf.writestr(f"{path.name}/{name}", read_file(path / name, 1 << 34))
    return buf.getvalue()


#: what a spreadsheet may take for the start of a formula (OWASP's list, with the
#: full-width forms some spreadsheets also read)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d",
                 "\uff20")


def csv_cell(value) -> str:
    """One CSV cell that no spreadsheet evaluates: text starting like a formula (``=``,
    ``+``, ``-``, ``@``, tab, CR, line feed, after any leading spaces) gets a leading ``'``,
    which spreadsheets show as text; numbers stay numbers."""
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value) if isinstance(value, float) else str(value)
    text = str(value)
    if text.lstrip(" ").startswith(FORMULA_START):
        return "'" + text
    return text


def to_csv(rows: Sequence[dict], columns: Sequence[str] | None = None) -> str:
    """Rows (dicts) as CSV text (RFC 4180 quoting) with :func:`csv_cell` applied to every
    cell, the header included."""
    columns = list(columns if columns is not None else (rows[0] if rows else []))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow([csv_cell(c) for c in columns])
    for row in rows:
        writer.writerow([csv_cell(row.get(c)) for c in columns])
    return buf.getvalue()


def safe_filename(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "project"
