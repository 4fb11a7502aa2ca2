"""Helpers of the Streamlit app that need no Streamlit: escaping, formatting, uploads,
view models of the Annotate page, dashboard tables and exports.

Everything that renders user text as HTML goes through :func:`esc`; widget labels (which
Streamlit renders as Markdown) go through :func:`md_escape`.
"""

from __future__ import annotations

import html
import io
import json
import os
import re
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpsl.errors import InputError
from gpsl.io import Sentence, format_conll, format_jsonl, read_any, read_conll
from gpsl.store import Store, sort_labels

PRESETS = {"GPSL1": (-1,), "GPSL2": (-1, 1), "GPSL4": (-2, -1, 1, 2)}
PRESET_HELP = {
    "GPSL1": "previous label (-1)",
    "GPSL2": "previous and next label (-1, 1)",
    "GPSL4": "two labels either side (-2, -1, 1, 2)",
}
FORMATS = {"conll": "CoNLL / CRF++ columns", "text": "Plain text", "jsonl": "JSONL"}
_EXT_FORMAT = {
    ".conll": "conll", ".conllu": "conll", ".data": "conll", ".tsv": "conll", ".iob": "conll",
    ".bio": "conll", ".crf": "conll", ".col": "conll", ".jsonl": "jsonl", ".json": "jsonl",
    ".ndjson": "jsonl", ".txt": "text", ".text": "text",
}
UPLOAD_TYPES = sorted({ext.lstrip(".") for ext in _EXT_FORMAT})
PALETTE = ["#2563eb", "#16a34a", "#9333ea", "#db2777", "#ea580c", "#0891b2", "#ca8a04",
           "#4f46e5", "#dc2626", "#0d9488", "#7c3aed", "#65a30d"]
OUTSIDE_COLOR = "#64748b"
UNCERTAIN_RGB = (245, 158, 11)  # amber: background of uncertain tokens

# ----------------------------------------------------------------------------- escaping

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~:$^=])")


def esc(text) -> str:
    """HTML-escape any text (quotes included) for use in element content or attributes."""
    return html.escape(str(text), quote=True)


def md_escape(text) -> str:
    """Escape text for a Streamlit Markdown context (widget labels, st.markdown): Markdown
    punctuation is backslash-escaped and ``< > &`` become entities, so the text shows
    literally and can never become markup."""
    text = _MD_SPECIAL.sub(r"\\\1", str(text))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("\n", " ")


# ----------------------------------------------------------------------------- formatting


def fmt_int(n) -> str:
    return f"{int(n):,}"


def fmt_pct(x, digits: int = 1) -> str:
    return "–" if x is None or (isinstance(x, float) and np.isnan(x)) else \
        f"{100 * float(x):.{digits}f}%"


def fmt_time(iso: str | None) -> str:
    """``2024-05-01T12:00:00.000+00:00`` -> ``2024-05-01 12:00`` (UTC)."""
    return "" if not iso else iso[:16].replace("T", " ")


def offsets_text(offsets: Sequence[int]) -> str:
    return ", ".join(str(int(o)) for o in offsets)


def preset_of(offsets: Sequence[int]) -> str:
    """"GPSL1" / "GPSL2" / "GPSL4" or "Custom"."""
    offs = tuple(int(o) for o in offsets)
    for name, value in PRESETS.items():
        if value == offs:
            return name
    return "Custom"


def parse_offsets(text_or_preset) -> tuple[int, ...]:
    """A preset name or ``"-1, 1"`` -> offsets tuple (InputError on bad input)."""
    from gpsl.model import parse_offsets as _parse

    return _parse(text_or_preset)


def parse_label_text(text: str) -> list[str]:
    """Labels typed by a user: separated by spaces or commas, duplicates dropped."""
    out: list[str] = []
    for lab in re.split(r"[\s,]+", text or ""):
        if lab and lab not in out:
            out.append(lab)
    if not out:
        raise InputError("the label set is empty", source="<labels>")
    return out


def entity_type(label: str) -> str:
    head, sep, kind = label.partition("-")
    return kind if sep and len(head) == 1 and kind else label


def label_colors(labels: Sequence[str]) -> dict[str, str]:
    """One color per entity type (``B-ORG`` and ``I-ORG`` share); ``O`` is slate."""
    colors: dict[str, str] = {}
    types: dict[str, str] = {}
    for lab in labels:
        kind = entity_type(lab)
        if lab == "O":
            colors[lab] = OUTSIDE_COLOR
            continue
        if kind not in types:
            types[kind] = PALETTE[len(types) % len(PALETTE)]
        colors[lab] = types[kind]
    return colors


# ----------------------------------------------------------------------------- uploads


def guess_format(filename: str) -> str:
    """Format from a file name's extension (default: CoNLL columns)."""
    return _EXT_FORMAT.get(Path(filename or "").suffix.lower(), "conll")


def parse_upload(data: bytes, filename: str, fmt: str | None = None, *,
                 max_bytes: int | None = None, max_tokens: int | None = None) -> list[Sentence]:
    """Read uploaded bytes as ``fmt`` ("conll", "jsonl", "text"; None: by extension).

    Refused with a one-line :class:`InputError` naming the file (and line): an upload larger
    than ``max_bytes`` (default :func:`gpsl.limits.max_upload_bytes`, ``GPSL_MAX_UPLOAD_MB``,
    20 MB), a sentence longer than ``max_tokens`` (``GPSL_MAX_TOKENS``, 1000), and every
    problem the readers of :mod:`gpsl.io` detect. Nothing is stored here."""
    from gpsl import limits

    source = filename or "<upload>"
    if data is None:
        raise InputError("no file data", source=source)
    limits.check_upload_size(len(data), limits.max_upload_bytes(max_bytes), source)
    fmt = fmt or guess_format(filename)
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}", source=source)
    return read_any(bytes(data), fmt, name=source, max_tokens=max_tokens)


def upload_limits_text() -> str:
    """"At most 20 MB per file and 1,000 tokens per sentence." (the configured limits)."""
    from gpsl import limits

    try:
        size, tokens = limits.max_upload_bytes(), limits.max_tokens()
    except InputError as exc:
        return str(exc)
    parts = [f"at most {size / limits.MB:g} MB per file" if size else "no size limit",
             f"{tokens:,} tokens per sentence" if tokens else "no sentence length limit"]
    return ("Limits: " + ", ".join(parts) + f" (set {limits.ENV_MAX_UPLOAD_MB}, "
            f"{limits.ENV_MAX_TOKENS}).")


def check_sentences(sentences: Sequence[Sentence], labels: Sequence[str], *,
                    n_columns: int | None = None, source: str | None = None) -> None:
    """Check sentences against a project before anything is written: every token has the
    same number of columns (``n_columns`` when the project already has sentences) and every
    label is in ``labels``.  :class:`InputError` names the file, line, sentence and token."""
    src = source or "<upload>"
    known = set(labels)
    for k, s in enumerate(sentences):
        if not s.tokens:
            raise InputError(f"sentence {k + 1} has no tokens", source=src, line=s.line)
        for t, tok in enumerate(s.tokens):
            if n_columns is None:
                n_columns = len(tok)
            if len(tok) != n_columns:
                raise InputError(f"sentence {k + 1}, token {t + 1}: {len(tok)} column"
                                 f"{'s' if len(tok) != 1 else ''}, but the project's tokens "
                                 f"have {n_columns}", source=src, line=s.line)
        for t, lab in enumerate(s.labels):
            if lab is not None and lab not in known:
                raise InputError(f"sentence {k + 1}, token {t + 1} ({s.tokens[t][0]!r}): label "
                                 f"{lab!r} is not in the project's label set", source=src,
                                 line=s.line)


@dataclass
class UploadSummary:
    sentences: int
    tokens: int
    labeled: int
    n_columns: int
    labels: list[str]


def summarize(sentences: Sequence[Sentence]) -> UploadSummary:
    labels = sort_labels({lab for s in sentences for lab in s.labels if lab is not None})
    return UploadSummary(
        sentences=len(sentences),
        tokens=sum(len(s) for s in sentences),
        labeled=sum(len(s) - s.n_missing for s in sentences),
        n_columns=len(sentences[0].tokens[0]) if sentences and sentences[0].tokens else 0,
        labels=labels,
    )


def default_template_text(n_columns: int) -> str:
    from gpsl.features import default_template

    return default_template(max(1, int(n_columns))).text


def check_template(text: str, n_columns: int) -> None:
    """Parse and validate template text against the data's column count (InputError)."""
    from gpsl.features import Template

    Template.parse(text, source="<template>").validate(int(n_columns))


def _split_heldout(sentences: list[Sentence], fraction: float):
    n_held = int(round(float(fraction) * len(sentences))) if len(sentences) > 1 else 0
    n_held = min(n_held, len(sentences) - 1) if n_held else 0
    return sentences[:len(sentences) - n_held], sentences[len(sentences) - n_held:]


def create_project(store: Store, name: str, sentences: Sequence[Sentence], labels: Sequence[str],
                   template: str, offsets: Sequence[int], kernel: str = "linear", *,
                   heldout_fraction: float = 0.0, doc: str | None = None,
                   annotator: str = "import", settings: dict | None = None) -> int:
    """Create a project with its sentences; all or nothing (one store transaction: the
    project row and every sentence, or nothing).  The template, columns and labels are
    checked first for precise messages.  The last ``heldout_fraction`` of the sentences
    become held-out sentences whose file labels are gold labels."""
    sentences = list(sentences)
    if not sentences:
        raise InputError("no sentences", source=doc or "<upload>")
    n_cols = len(sentences[0].tokens[0])
    if template and template.strip():
        check_template(template, n_cols)
    check_sentences(sentences, labels, source=doc)
    train, held = _split_heldout(sentences, heldout_fraction)
    return store.create_project(
        name, list(labels), template or "", list(offsets), kernel, settings or {},
        sentences=train, heldout=[Sentence(s.tokens, None, s.line) for s in held],
        heldout_gold=[s.labels for s in held], doc=doc, annotator=annotator)


def create_sample_copy(store: Store, name: str, sample_dir: str | os.PathLike) -> int:
    """A new project from the bundled sample (its labels, template; last 20 % held out with
    the gold labels), as :meth:`Store.ensure_sample_project` builds it; one transaction."""
    sample_dir = Path(sample_dir)
    sentences = read_conll(sample_dir / "sample.conll")
    gold = read_conll(sample_dir / "sample_gold.conll")
    template = (sample_dir / "template").read_text(encoding="utf-8")
    labels = sort_labels({lab for s in sentences + gold for lab in s.labels if lab is not None})
    by_tokens = {tuple(map(tuple, g.tokens)): g.labels for g in gold}
    train, held = _split_heldout(sentences, 0.2)
    return store.create_project(
        name, labels, template, [-1, 1], "linear", {"sample": True}, sentences=train,
        heldout=held, heldout_gold=[by_tokens.get(tuple(map(tuple, s.tokens))) for s in held],
        doc="sample.conll")


def import_sentences(store: Store, project_id: int, sentences: Sequence[Sentence], *,
                     split: str = "train", doc: str | None = None,
                     annotator: str = "import", add_labels: Sequence[str] = ()) -> int:
    """Append sentences to a project; all or nothing.  Into ``'heldout'`` the file's labels
    go as gold.  ``add_labels`` are new labels added to the project's label set in the same
    store transaction as the sentences (both or neither).  Columns and labels are checked
    first for precise messages."""
    sentences = list(sentences)
    project = store.get_project(project_id)
    if project is None:
        raise InputError(f"no project with id {project_id}", source="<import>")
    old_labels = list(project["labels"])
    labels = old_labels + [lab for lab in add_labels if lab not in old_labels]
    first = store.get_sentences(project_id, limit=1)
    check_sentences(sentences, labels, source=doc,
                    n_columns=len(first[0]["tokens"][0]) if first else None)
    new_labels = labels[len(old_labels):]
    if split == "heldout":
        return store.add_sentences(project_id, [Sentence(s.tokens, None, s.line)
                                                for s in sentences], split="heldout",
                                   doc=doc, annotator=annotator,
                                   gold=[s.labels for s in sentences], add_labels=new_labels)
    return store.add_sentences(project_id, sentences, split=split, doc=doc,
                               annotator=annotator, add_labels=new_labels)


def unknown_labels(sentences: Iterable[Sentence], labels: Sequence[str]) -> list[str]:
    known = set(labels)
    return sort_labels({lab for s in sentences for lab in s.labels
                        if lab is not None and lab not in known})


# ----------------------------------------------------------------------------- overview


def model_summary(version: dict | None) -> str:
    """"v3 · GPSL2 linear · 91.2% held-out" or "no model yet"."""
    if not version:
        return "no model yet"
    s = version.get("settings") or {}
    parts = [f"v{version['id']}", f"{preset_of(s.get('offsets', [-1, 1]))} "
                                  f"{s.get('kernel', 'linear')}"]
    acc = (version.get("metrics") or {}).get("heldout_accuracy")
    if acc is not None:
        parts.append(f"{fmt_pct(acc)} held-out accuracy")
    return " · ".join(parts)


def status_line(progress: dict, version: dict | None) -> str:
    return (f"{fmt_int(progress['labeled_tokens'])} / {fmt_int(progress['tokens'])} training "
            f"tokens labeled ({progress['pct_complete']:.1f}%) · model: "
            + (f"v{version['id']}" if version else "none"))


def versions_table(versions: Sequence[dict]) -> list[dict]:
    """Rows for the model-version table, newest first."""
    rows = []
    for v in reversed(list(versions)):
        s, m = v.get("settings") or {}, v.get("metrics") or {}
        offs = s.get("offsets", [])
        rows.append({
            "version": v["id"],
            "active": "★" if v["active"] else "",
            "status": v["status"],
            "started": fmt_time(v["created_at"]),
            "dependencies": f"{preset_of(offs)} ({offsets_text(offs)})",
            "kernel": s.get("kernel", ""),
            "hyper": "learned" if s.get("learn_hyper") else "fixed",
            "iterations": m.get("n_iter"),
            "labeled tokens": v.get("n_labeled_tokens"),
            "accuracy": m.get("heldout_accuracy"),
            "ECE": m.get("heldout_ece"),
            "seconds": round(m["fit_seconds"], 1) if m.get("fit_seconds") is not None else None,
            "note": v.get("error") or "",
        })
    return rows


def versions_with_predictions(store: Store, project_id: int, versions: Sequence[dict]) -> list[int]:
    """Ids of the done versions that still have stored predictions (old ones are pruned)."""
    first = store.get_sentences(project_id, limit=1)
    if not first:
        return []
    sid = first[0]["id"]
    return [v["id"] for v in versions
            if v["status"] == "done" and store.get_predictions(v["id"], [sid])]


# ----------------------------------------------------------------------------- annotate


@dataclass
class TokenView:
    index: int
    text: str
    columns: tuple[str, ...]
    label: str | None  # current label (None: unlabeled)
    source: str | None  # 'human' / 'accepted' / None
    annotator: str | None
    suggestion: str | None  # model's argmax (None without predictions)
    confidence: float | None  # model's max marginal
    top: list[tuple[str, float]]  # best three (label, p)

    @property
    def uncertainty(self) -> float:
        return 0.0 if self.confidence is None else max(0.0, 1.0 - self.confidence)


def sentence_view(sentence: dict, marginals: np.ndarray | None,
                  classes: Sequence[str] | None) -> list[TokenView]:
    """Per-token view model of one sentence (:meth:`Store.get_sentence` dict) with the
    active model's marginals (columns in ``classes`` order) when there are any."""
    views = []
    use = marginals is not None and classes is not None and \
        marginals.shape == (len(sentence["tokens"]), len(classes))
    for t, tok in enumerate(sentence["tokens"]):
        sug, conf, top = None, None, []
        if use:
            row = marginals[t]
            order = np.argsort(-row)[:3]
            top = [(classes[j], float(row[j])) for j in order]
            sug, conf = top[0][0], top[0][1]
        views.append(TokenView(t, tok[0], tuple(tok), sentence["labels"][t],
                               sentence["sources"][t], sentence["annotators"][t], sug, conf,
                               top))
    return views


def accept_candidates(views: Sequence[TokenView], threshold: float,
                      label_set: Sequence[str]) -> dict[int, str]:
    """Unlabeled tokens whose suggestion has confidence >= ``threshold`` -> that label."""
    ok = set(label_set)
    return {v.index: v.suggestion for v in views
            if v.label is None and v.suggestion in ok and v.confidence is not None
            and v.confidence >= threshold}


def next_unlabeled(views: Sequence[TokenView], after: int) -> int:
    """The next unlabeled token after ``after`` (wrapping); ``after + 1`` when all are
    labeled (clamped to the last token)."""
    n = len(views)
    for k in range(1, n + 1):
        t = (after + k) % n
        if views[t].label is None:
            return t
    return min(after + 1, n - 1)


def first_unlabeled(views: Sequence[TokenView]) -> int:
    for v in views:
        if v.label is None:
            return v.index
    return 0


def code_span(text) -> str:
    """A Markdown code span showing ``text`` literally (code spans parse no markup)."""
    text = str(text).replace("\n", " ")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def token_button_label(v: TokenView) -> str:
    """Markdown label of a token chip: the token, then its label (code) or the model's
    suggestion (italic)."""
    text = md_escape(v.text)
    if v.label is not None:
        mark = " ✓" if v.source == "accepted" else ""
        return f"{text} {code_span(v.label)}{mark}"
    if v.suggestion is not None:
        return f"{text} *{md_escape(v.suggestion)}?*"
    return text


def token_help(v: TokenView) -> str:
    """Tooltip of a token chip (Markdown, escaped)."""
    parts = [f"**{md_escape(v.text)}**"]
    if len(v.columns) > 1:
        parts.append("columns: " + " · ".join(md_escape(c) for c in v.columns[1:]))
    if v.label is not None:
        how = "accepted suggestion" if v.source == "accepted" else "labeled"
        parts.append(f"{how}: {md_escape(v.label)} by {md_escape(v.annotator or '?')}")
    if v.top:
        parts.append("model: " + ", ".join(f"{md_escape(lab)} {p:.2f}" for lab, p in v.top))
    return "  \n".join(parts)


def _rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha:.2f})"


def uncertainty_alpha(confidence: float | None) -> float:
    """Background opacity of a token: 0 when sure, up to 0.85 when the model is unsure."""
    if confidence is None:
        return 0.0
    return round(min(0.85, 1.2 * max(0.0, 1.0 - float(confidence))), 2)


def chip_css(views: Sequence[TokenView], colors: dict[str, str], selected: int | None,
             prefix: str = "tok_") -> str:
    """CSS for the token chips (buttons with keys ``prefix + index``): human labels solid
    borders in the label's color, suggestions dashed and italic, background by
    uncertainty, the selected token outlined.  Contains no token text."""
    r, g, b = UNCERTAIN_RGB
    rules = [
        f"[class*='st-key-{prefix}'] button {{ min-height: 2.4rem; padding: 0.15rem 0.6rem;"
        " border-radius: 0.5rem; }",
        f"[class*='st-key-{prefix}'] button code {{ font-size: 0.78em; padding: 0.05em 0.35em;"
        " border-radius: 0.3em; color: #fff; }",
        f"[class*='st-key-{prefix}'] button em {{ color: #334155; font-size: 0.85em; }}",
    ]
    for v in views:
        sel = f".st-key-{prefix}{v.index} button"
        decl = []
        if v.label is not None:
            color = colors.get(v.label, OUTSIDE_COLOR)
            decl.append(f"border: 2px solid {color};")
            rules.append(f"{sel} code {{ background: {color}; }}")
        elif v.suggestion is not None:
            decl.append("border: 2px dashed #94a3b8;")
        else:
            decl.append("border: 1px dotted #94a3b8;")
        alpha = uncertainty_alpha(v.confidence) if v.label is None else 0.0
        if alpha > 0:
            decl.append(f"background: rgba({r},{g},{b},{alpha:.2f});")
        if v.index == selected:
            decl.append("outline: 3px solid #4f46e5; outline-offset: 2px;")
        rules.append(f"{sel} {{ {' '.join(decl)} }}")
    return "<style>\n" + "\n".join(rules) + "\n</style>"


def label_button_css(labels: Sequence[str], colors: dict[str, str],
                     prefix: str = "lab_") -> str:
    rules = [f".st-key-{prefix}{i} button {{ border-left: 6px solid "
             f"{colors.get(lab, OUTSIDE_COLOR)}; }}" for i, lab in enumerate(labels)]
    return "<style>\n" + "\n".join(rules) + "\n</style>"


def label_chips_html(labels: Sequence[str], colors: dict[str, str]) -> str:
    """The label set as colored chips (escaped)."""
    return "<div style='display:flex;flex-wrap:wrap;gap:6px'>" + "".join(
        f"<span style='background:{_rgba(colors.get(lab, OUTSIDE_COLOR), 0.12)};"
        f"border:1px solid {colors.get(lab, OUTSIDE_COLOR)};color:#0f172a;border-radius:6px;"
        f"padding:1px 8px;font-size:0.85rem;white-space:nowrap'>{esc(lab)}</span>"
        for lab in labels) + "</div>"


def legend_html() -> str:
    """Legend of the chip styles and the uncertainty scale (static HTML)."""
    r, g, b = UNCERTAIN_RGB
    steps = "".join(
        f"<span style='display:inline-block;width:22px;height:14px;"
        f"background:rgba({r},{g},{b},{uncertainty_alpha(c):.2f});border:1px solid #e2e8f0'"
        f" title='confidence {c:.1f}'></span>" for c in (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4))
    chip = ("display:inline-block;padding:1px 8px;border-radius:6px;margin-right:6px;"
            "font-size:0.8rem;")
    return (
        "<div style='font-size:0.8rem;color:#475569;display:flex;flex-wrap:wrap;gap:14px;"
        "align-items:center'>"
        f"<span><span style='{chip}border:2px solid #2563eb'>token <code>LABEL</code></span>"
        "your label (✓ = accepted suggestion)</span>"
        f"<span><span style='{chip}border:2px dashed #94a3b8'>token <em>LABEL?</em></span>"
        "model suggestion</span>"
        f"<span><span style='{chip}border:1px dotted #94a3b8'>token</span>unlabeled</span>"
        f"<span>confidence 1.0 {steps} 0.4 (darker = less sure)</span>"
        "</div>")


def sentence_html(tokens: Sequence[str], labels: Sequence[str | None],
                  confidences: Sequence[float | None] | None = None,
                  predicted: Sequence[str | None] | None = None,
                  colors: dict[str, str] | None = None) -> str:
    """Read-only HTML of a sentence: escaped tokens with their label or the model's
    prediction as a small tag, background by uncertainty."""
    r, g, b = UNCERTAIN_RGB
    colors = colors or {}
    out = []
    for t, tok in enumerate(tokens):
        lab = labels[t] if t < len(labels) else None
        lab = lab if isinstance(lab, str) else None  # pandas gives NaN for a missing label
        conf = confidences[t] if confidences is not None else None
        pred = predicted[t] if predicted is not None else None
        pred = pred if isinstance(pred, str) else None
        alpha = uncertainty_alpha(conf) if lab is None else 0.0
        style = (f"background:rgba({r},{g},{b},{alpha:.2f});" if alpha else "")
        if lab is not None:
            tag = (f"<sup style='color:{colors.get(lab, OUTSIDE_COLOR)};font-weight:600'>"
                   f"{esc(lab)}</sup>")
            style += f"border-bottom:2px solid {colors.get(lab, OUTSIDE_COLOR)};"
        elif pred is not None:
            tag = f"<sup style='color:#64748b;font-style:italic'>{esc(pred)}?</sup>"
            style += "border-bottom:2px dashed #94a3b8;"
        else:
            tag = ""
        title = f" title='confidence {conf:.2f}'" if conf is not None else ""
        out.append(f"<span style='{style}padding:0 2px;border-radius:3px;white-space:nowrap'"
                   f"{title}>"
                   f"{esc(tok)}{tag}</span>")
    return "<div style='line-height:2.0'>" + " ".join(out) + "</div>"


# ----------------------------------------------------------------------------- navigation


def next_sentence(store: Store, project_id: int, order: str, annotator: str,
                  current: int | None, seen: set[int]) -> int | None:
    """The next sentence to annotate: the first one of the queue not yet seen in this
    session (then the first that is not ``current``); None when the queue is empty."""
    limit = len(seen) + 5
    ids = store.queue(project_id, order=order, annotator=annotator, limit=limit)
    for sid in ids:
        if sid not in seen and sid != current:
            return sid
    for sid in ids:
        if sid != current:
            return sid
    return ids[0] if ids else None


def sentence_at(store: Store, project_id: int, position: int, split: str = "train") -> int | None:
    """Id of the ``position``-th (1-based) sentence of a split."""
    rows = store.get_sentences(project_id, split=split, offset=max(0, int(position) - 1),
                               limit=1)
    return rows[0]["id"] if rows else None


# ----------------------------------------------------------------------------- dashboards


def token_table(store: Store, project_id: int, version: dict, split: str | None = None):
    """One row per token with the version's prediction: ``sentence_id, position, split,
    token_index, token, label, source, predicted, confidence, labeled`` (pandas)."""
    import pandas as pd

    classes = version.get("classes") or []
    preds = store.get_predictions(version["id"])
    rows = []
    for s in store.get_sentences(project_id, split=split):
        p = preds.get(s["id"])
        if p is None or p.shape[0] != len(s["tokens"]) or p.shape[1] != len(classes):
            continue
        arg = p.argmax(axis=1)
        conf = p.max(axis=1)
        for t, tok in enumerate(s["tokens"]):
            rows.append((s["id"], s["position"], s["split"], t, tok[0], s["labels"][t],
                         s["sources"][t], classes[arg[t]], float(conf[t]),
                         s["labels"][t] is not None))
    return pd.DataFrame(rows, columns=["sentence_id", "position", "split", "token_index",
                                       "token", "label", "source", "predicted", "confidence",
                                       "labeled"])


def calibration(store: Store, project_id: int, version: dict, n_bins: int = 10) -> dict | None:
    """Reliability of the version on the held-out gold labels: ``dict(table (pandas),
    accuracy, ece, tokens)``, or None without gold/predictions."""
    import pandas as pd

    from gpsl import metrics

    ids, _, gold = store.gold_data(project_id)
    if not ids:
        return None
    classes = version.get("classes") or []
    preds = store.get_predictions(version["id"], ids)
    conf, correct = [], []
    for sid, g in zip(ids, gold):
        p = preds.get(sid)
        if p is None or p.shape != (len(g), len(classes)):
            continue
        for t, lab in enumerate(g):
            if lab is not None:
                conf.append(float(p[t].max()))
                correct.append(classes[int(p[t].argmax())] == lab)
    if not conf:
        return None
    table = pd.DataFrame(metrics.reliability_table(conf, correct, n_bins))
    return {"table": table, "accuracy": float(np.mean(correct)),
            "ece": float(metrics.expected_calibration_error(conf, correct, n_bins)),
            "tokens": len(conf)}


def uncertain_sentences(tokens, n: int = 10):
    """The ``n`` train sentences whose least confident *unlabeled* token is least confident."""
    free = tokens[(~tokens["labeled"]) & (tokens["split"] == "train")]
    if free.empty:
        return free.iloc[0:0]
    agg = free.groupby("sentence_id").agg(min_confidence=("confidence", "min"),
                                          mean_confidence=("confidence", "mean"),
                                          unlabeled=("token", "size"),
                                          position=("position", "first"))
    return agg.sort_values(["min_confidence", "position"]).head(n).reset_index()


def uncertain_tokens(tokens, n: int = 20):
    import pandas as pd

    free = tokens[(~tokens["labeled"]) & (tokens["split"] == "train")]
    top = free.sort_values(["confidence", "position"]).head(n)
    return pd.DataFrame({"sentence": top["position"] + 1, "token #": top["token_index"] + 1,
                         "token": top["token"], "predicted": top["predicted"],
                         "confidence": top["confidence"]})


def learning_curve(versions: Sequence[dict]):
    """Done versions: labeled tokens vs held-out accuracy / ECE (pandas)."""
    import pandas as pd

    rows = [{"version": f"v{v['id']}", "labeled tokens": v.get("n_labeled_tokens") or 0,
             "accuracy": (v.get("metrics") or {}).get("heldout_accuracy"),
             "ECE": (v.get("metrics") or {}).get("heldout_ece"),
             "finished": fmt_time(v.get("finished_at"))}
            for v in versions if v["status"] == "done"]
    rows.sort(key=lambda r: r["labeled tokens"])
    return pd.DataFrame(rows, columns=["version", "labeled tokens", "accuracy", "ECE",
                                       "finished"])


def annotator_activity(store: Store, project_id: int):
    """Labels set per annotator per day (history action 'set', not undone) as pandas
    ``day, annotator, labels``."""
    import pandas as pd

    counts: dict[tuple[str, str], int] = {}
    for h in store.history(project_id=project_id, limit=None):
        if h["action"] == "set" and not h["undone"]:
            key = (h["at"][:10], h["annotator"])
            counts[key] = counts.get(key, 0) + 1
    rows = [{"day": d, "annotator": a, "labels": c} for (d, a), c in sorted(counts.items())]
    return pd.DataFrame(rows, columns=["day", "annotator", "labels"])


# ----------------------------------------------------------------------------- export


def export_annotations(store: Store, project_id: int, fmt: str = "conll",
                       split: str | None = "train") -> str:
    """The current annotations as CoNLL (``_`` for a missing label) or JSONL (null).

    A token with whitespace (possible from JSONL uploads) cannot be a CoNLL column: CoNLL export
    then raises :class:`InputError` naming the sentence, its source line and the token, and
    suggests JSONL; tokens are never rewritten silently."""
    sents = store.export_sentences(project_id, split=split)
    if fmt == "conll":
        return format_conll(sents, source="CoNLL export")
    if fmt == "jsonl":
        return format_jsonl(sents)
    raise InputError(f"unknown export format {fmt!r}", source="<export>")


def preview_text(sentences: Sequence[dict], fmt: str = "conll") -> str:
    """Export text of a few :meth:`Store.get_sentences` dicts (for a preview)."""
    sents = [Sentence(s["tokens"], s["labels"], s["line"] or 1) for s in sentences]
    return format_conll(sents, source="CoNLL export") if fmt == "conll" else format_jsonl(sents)


def export_predictions(store: Store, project_id: int, version: dict, fmt: str = "conll",
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


def zip_directory(path: str | os.PathLike) -> bytes:
    """A zip archive (in memory) of a directory's files, under the directory's name."""
    path = Path(path)
    if not path.is_dir():
        raise InputError("the model directory is missing", source=str(path))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in sorted(path.rglob("*")):
            if f.is_file():
                zf.write(f, Path(path.name) / f.relative_to(path))
    return buf.getvalue()


def safe_filename(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "project"
