"""Writing annotations out: CoNLL columns and JSONL (the store's own formats), predictions
of a model version, the formats of other tools (Label Studio JSON, doccano JSONL, Prodigy
JSONL, CoNLL-2003), and a model folder as a zip, only after it loads cleanly."""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path

from gpsl.errors import InputError
from gpsl.io import Sentence, format_conll, format_jsonl
from gpsl.metrics import chunks
from gpsl.model import GPSL
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


def format_sentences(sentences: Sequence[Sentence], fmt: str) -> str:
    if fmt == "conll":
        return format_conll(sentences, source="CoNLL export")
    if fmt == "jsonl":
        return format_jsonl(sentences)
    writers = {"conll2003": to_conll2003, "labelstudio": to_labelstudio,
               "doccano": to_doccano, "prodigy": to_prodigy}
    if fmt in writers:
        return writers[fmt](sentences)
    raise InputError(f"unknown export format {fmt!r}", source="<export>")


def export_annotations(store, project_id: int, fmt: str = "conll",
                       split: str | None = "train") -> str:
    """The current (derived) labels of a project in ``fmt``.  A token with whitespace
    cannot be a CoNLL column: CoNLL export then raises InputError naming the sentence."""
    return format_sentences(store.export_sentences(project_id, split=split), fmt)


def preview_text(sentences: Sequence[dict], fmt: str = "conll") -> str:
    """Export text of a few sentence dicts (for a preview)."""
    return format_sentences([Sentence(s["tokens"], s["labels"], s["line"] or 1)
                             for s in sentences], fmt)


def export_predictions(store, project_id: int, version: dict, fmt: str = "conll",
                       split: str | None = "train") -> str:
    """Predictions of a model version.  CoNLL: token columns, current label (``_``),
    predicted label, its probability.  JSONL: tokens, labels, predicted, confidence and
    per-token marginals ``{label: p}``."""
    classes = version.get("classes") or []
    preds = store.get_predictions(version["id"])
    sents = store.get_sentences(project_id, split=split)
    if fmt == "conll":
        plain, extra = [], []
        for s in sents:
            p = preds.get(s["id"])
            if p is None:
                continue
            plain.append(Sentence(s["tokens"], s["labels"], s["line"] or 1))
            extra.append([[classes[int(r.argmax())], f"{float(r.max()):.4f}"] for r in p])
        return format_conll(plain, extra_columns=extra, source="CoNLL export")
    if fmt == "jsonl":
        out = io.StringIO()
        for s in sents:
            p = preds.get(s["id"])
            if p is None:
                continue
            toks = [t[0] if len(t) == 1 else list(t) for t in s["tokens"]]
            out.write(json.dumps({
                "id": s["id"], "tokens": toks, "labels": s["labels"],
                "predicted": [classes[int(r.argmax())] for r in p],
                "confidence": [round(float(r.max()), 6) for r in p],
                "marginals": [{c: round(float(x), 6) for c, x in zip(classes, r)} for r in p],
            }, ensure_ascii=False))
            out.write("\n")
        return out.getvalue()
    raise InputError(f"unknown export format {fmt!r}", source="<export>")


def check_model(path: str | os.PathLike) -> None:
    """Raise :class:`gpsl.errors.ModelFormatError` (one line) unless the saved model at
    ``path`` loads cleanly (checksums, array headers, description)."""
    path = Path(path)
    if not path.is_dir():
        raise InputError("the model directory is missing", source=str(path))
    GPSL.load(path)


def model_zip(path: str | os.PathLike) -> bytes:
    """A zip archive (in memory) of a saved model's folder, only after :func:`check_model`
    passed: a damaged model is never handed out."""
    path = Path(path)
    check_model(path)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in sorted(path.rglob("*")):
            if f.is_file():
                zf.write(f, Path(path.name) / f.relative_to(path))
    return buf.getvalue()


def safe_filename(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "project"
