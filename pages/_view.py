"""The app's view code without Streamlit calls: escaping, formatting, HTML/CSS of the token
chips, view models of the Annotate page, dashboard tables and the one plotly template.

Everything that renders user text as HTML goes through :func:`esc`; widget labels (which
Streamlit renders as Markdown) go through :func:`md_escape`.  The data comes from
:mod:`gpsl.annotation` (the store facade, imports, exports, the held-out evaluation).
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpsl.annotation import Store
from gpsl.annotation.imports import FORMATS, UPLOAD_TYPES, guess_format  # noqa: F401
from gpsl.errors import InputError
from gpsl.model import PRESETS  # noqa: F401 (the pages use sup.PRESETS)
from gpsl.tags import entity_type, valid_decode, violations

PRESET_HELP = {
    "GPSL1": "previous label (-1)",
    "GPSL2": "previous and next label (-1, 1)",
    "GPSL4": "two labels either side (-2, -1, 1, 2)",
}
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
    from gpsl.annotation.pipeline import preset_of as _preset

    name = _preset(offsets)
    return "Custom" if name == "custom" else name


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


def default_template_text(n_columns: int) -> str:
    from gpsl.features import default_template

    return default_template(max(1, int(n_columns))).text


def check_template(text: str, n_columns: int) -> None:
    """Parse and validate template text against the data's column count (InputError)."""
    from gpsl.annotation import validate

    validate.template(text, n_columns)


# ----------------------------------------------------------------------------- overview


def version_name(version: dict) -> str:
    """"v3": the version's number within its project."""
    return f"v{version.get('number') or version['id']}"


def version_names(versions: Sequence[dict]) -> dict[int, str]:
    """Version id -> "v<number>" (for selectors that hold ids)."""
    return {v["id"]: version_name(v) for v in versions}


def is_import_credit(annotator: str | None) -> bool:
    """Labels credited to an imported file (``import`` or ``import:<file>``), not a person."""
    a = annotator or ""
    return a == "import" or a.startswith("import:")


def model_summary(version: dict | None) -> str:
    """"v3 · GPSL2 linear · 91.2% held-out" or "no model yet"."""
    if not version:
        return "no model yet"
    s = version.get("settings") or {}
    parts = [version_name(version), f"{preset_of(s.get('offsets', [-1, 1]))} "
                                  f"{s.get('kernel', 'linear')}"]
    acc = (version.get("metrics") or {}).get("heldout_accuracy")
    if acc is not None:
        parts.append(f"{fmt_pct(acc)} held-out accuracy")
    return " · ".join(parts)


def status_line(progress: dict, version: dict | None) -> str:
    return (f"{fmt_int(progress['labeled_tokens'])} / {fmt_int(progress['tokens'])} training "
            f"tokens labeled ({progress['pct_complete']:.1f}%) · model: "
            + (version_name(version) if version else "none"))


def versions_table(versions: Sequence[dict]) -> list[dict]:
    """Rows for the model-version table, newest first."""
    rows = []
    for v in reversed(list(versions)):
        s, m = v.get("settings") or {}, v.get("metrics") or {}
        offs = s.get("offsets", [])
        rows.append({
            "version": v.get("number") or v["id"],
            "active": "★" if v["active"] else "",
            "status": v["status"],
            "started": fmt_time(v["created_at"]),
            "dependencies": f"{preset_of(offs)} ({offsets_text(offs)})",
            "kernel": s.get("kernel", ""),
            "hyper": "learned" if s.get("learn_hyper") else "fixed",
            "inference": m.get("inference") or s.get("inference") or "full",
            "iterations": m.get("n_iter"),
            "labeled tokens": v.get("n_labeled_tokens"),
            "missing-label weight": m.get("missing_weight"),
            "accuracy": m.get("heldout_accuracy"),
            "ECE": m.get("heldout_ece"),
            "calibration": calibration_short(m.get("calibration")),
            "seconds": round(m["fit_seconds"], 1) if m.get("fit_seconds") is not None else None,
            "note": v.get("error") or "",
        })
    return rows


def calibration_short(cal: dict | None) -> str:
    """"T_U 0.87 · T_S 0.27 (held-out gold)", "T_U 0.87 · T_S 0.27 + vector (3-fold
    labels)", "T 1.20 (3-fold labels)" or "none"."""
    if not cal:
        return "none"
    if cal.get("summary"):  # Calibrator.describe() (versions trained since the ensemble)
        return f"{cal['summary']} ({cal.get('source')})"
    if str(cal.get("kind")).startswith("structured"):
        how = f"T_U {cal['t_unary']:.2f} · T_S {cal['t_pair']:.2f}"
        if cal.get("kind") == "structured+vector":
            how += " + vector"
    else:
        how = f"T {cal['temperature']:.2f}"
    return f"{how} ({cal.get('source')})"


def versions_with_predictions(store: Store, project_id: int, versions: Sequence[dict]) -> list[int]:
    """Ids of the done versions that still have stored predictions (old ones are pruned)."""
    return [v["id"] for v in versions if v["status"] == "done" and store.has_predictions(v["id"])]


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
    votes: dict = field(default_factory=dict)  # annotator -> label (None: cleared)
    suggestion_p: float | None = None  # the model's marginal of ``suggestion``
    query: float | None = None  # the queue's query score (None: none stored)

    @property
    def uncertainty(self) -> float:
        return 0.0 if self.confidence is None else max(0.0, 1.0 - self.confidence)


def sentence_view(sentence: dict, marginals: np.ndarray | None,
                  classes: Sequence[str] | None, scheme: str | None = None,
                  query_scores: np.ndarray | None = None) -> list[TokenView]:
    """Per-token view model of one sentence (:meth:`Store.get_sentence` or
    :meth:`Store.sentence_view` dict) with the active model's marginals (columns in
    ``classes`` order) and the queue's query scores (one per token) when there are any;
    no suggestion and no query score on the view's ``hidden`` tokens.
    With a span ``scheme`` (BIO, BILOU) the suggestions are the most probable scheme-valid
    sequence given the labels already set (:func:`gpsl.tags.valid_decode`; hidden tokens
    count as uninformative there), not each token's argmax; ``confidence`` stays the
    token's largest marginal."""
    views = []
    use = marginals is not None and classes is not None and \
        marginals.shape == (len(sentence["tokens"]), len(classes))
    hidden = set(sentence.get("hidden") or ())  # blind view: no suggestion from others' votes
    scored = query_scores is not None and np.shape(query_scores) == (len(sentence["tokens"]),)
    valid = None
    if use and scheme is not None:
        m = marginals
        if hidden:
            m = np.array(marginals, dtype=float)
            m[sorted(hidden)] = 1.0 / len(classes)
        valid = valid_decode(m, classes, scheme, fixed=sentence["labels"])
    for t, tok in enumerate(sentence["tokens"]):
        sug, conf, top, sug_p = None, None, [], None
        if use and t not in hidden:
            row = marginals[t]
            order = np.argsort(-row)[:3]
            top = [(classes[j], float(row[j])) for j in order]
            sug, conf = top[0][0], top[0][1]
            if valid is not None and valid[t] in classes:
                sug = valid[t]
            sug_p = float(row[list(classes).index(sug)])
        votes = sentence["votes"][t] if sentence.get("votes") else {}
        query = float(query_scores[t]) if scored and t not in hidden else None
        views.append(TokenView(t, tok[0], tuple(tok), sentence["labels"][t],
                               sentence["sources"][t], sentence["annotators"][t], sug, conf,
                               top, votes, sug_p, query))
    return views


def accept_candidates(views: Sequence[TokenView], threshold: float,
                      label_set: Sequence[str]) -> dict[int, str]:
    """Unlabeled tokens whose suggestion has probability >= ``threshold`` -> that label."""
    ok = set(label_set)
    return {v.index: v.suggestion for v in views
            if v.label is None and v.suggestion in ok and v.suggestion_p is not None
            and v.suggestion_p >= threshold}


def next_unlabeled(labels: Sequence[str | None], after: int) -> int:
    """The next unlabeled token after ``after`` (wrapping); ``after + 1`` when all are
    labeled (clamped to the last token)."""
    n = len(labels)
    for k in range(1, n + 1):
        t = (after + k) % n
        if labels[t] is None:
            return t
    return min(after + 1, n - 1)


def opening_token(views: Sequence[TokenView]) -> int:
    """Where the cursor opens: the unlabeled token with the highest query score of the queue
    when the active model stored them, else the least sure unlabeled token under the stored
    marginals (the first one on a tie, either way), else the first unlabeled token, else the
    first token."""
    free = [v for v in views if v.label is None]
    queried = [v for v in free if v.query is not None]
    if queried:
        return min(queried, key=lambda v: (-v.query, v.index)).index
    scored = [v for v in free if v.confidence is not None]
    if scored:
        return min(scored, key=lambda v: (v.confidence, v.index)).index
    return free[0].index if free else 0


#: how the pages name a query score of :data:`gpsl.active.QUERY_SCORES` (others: the name
#: with spaces)
QUERY_NAMES = {"bald": "BALD", "lookahead": "look-ahead"}


def query_name(strategy: str) -> str:
    """A query score's name as the pages show it: ``"bald"`` -> ``"BALD"``,
    ``"least_confidence"`` -> ``"least confidence"``."""
    return QUERY_NAMES.get(strategy, str(strategy).replace("_", " "))


def queue_strategy(version: dict | None) -> str | None:
    """The query score that orders the queue under an active ``version``: the one its run
    stored, else the old rule's (:data:`gpsl.annotation.queue.FALLBACK_QUERY`); None
    without a version."""
    from gpsl.annotation.queue import FALLBACK_QUERY

    if version is None:
        return None
    return version.get("query_strategy") or FALLBACK_QUERY


def queue_caption(strategy: str | None) -> str:
    """One line on what orders the uncertainty queue: ``"Queue: BALD — tokens whose label
    would teach the model most (...)"`` (the description of
    :data:`gpsl.active.QUERY_SCORES`); empty without a strategy (no active model)."""
    from gpsl.active import QUERY_SCORES

    if not strategy:
        return ""
    about = QUERY_SCORES.get(strategy)
    return f"Queue: {query_name(strategy)}" + (f" — {about}" if about else "")


def flagged_tokens(views: Sequence[TokenView], scheme: str | None) -> dict[int, str]:
    """Tokens whose label breaks the span scheme (``I-ORG`` after ``B-LOC`` or ``O``) ->
    why; empty without a scheme."""
    return violations([v.label for v in views], scheme) if scheme else {}


def key_hints(labels: Sequence[str]) -> dict[str, str]:
    """Label -> its key: ``1`` … ``9`` for the first nine labels, ``0`` for ``O`` (which
    thus always has a key).  Every label is also reachable by the type-ahead (``/``)."""
    hints = {lab: str(i + 1) for i, lab in enumerate(labels[:9])}
    if "O" in labels:
        hints["O"] = "0"
    return hints


def span_choices(types: Sequence[str]) -> list[tuple[str, str | None]]:
    """The entity types offered for a span with their keys: ``1`` … ``9``, then none;
    ``O`` (outside) last with ``0``."""
    out = [(kind, str(i + 1) if i < 9 else None) for i, kind in enumerate(types)]
    return out + [("O", "0")]


def safe_markdown(text: str) -> str:
    """Markdown written by a user, made text-safe for ``st.markdown``: ``< > &`` become
    entities (raw HTML shows as text) and images become plain text (nothing is loaded)."""
    text = str(text or "").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("![", "!\\[")


def history_lines(rows: Sequence[dict]) -> list[str]:
    """One Markdown line per history row (escaped), newest first; undone changes struck
    through."""
    out = []
    for h in rows:
        new = code_span(h["new_label"]) if h["new_label"] else "no label"
        old = code_span(h["old_label"]) if h["old_label"] else "none"
        what = {"set": f"set {new} (was {old})", "clear": f"cleared (was {old})",
                "undo": f"undid: back to {new}", "import": f"imported {new}"}.get(
            h["action"], md_escape(h["action"]))
        if h.get("source") == "accepted" and h["action"] == "set":
            what += " · accepted suggestion"
        line = f"{fmt_time(h['at'])} · **{md_escape(h['annotator'])}** · {what}"
        out.append(f"~~{line}~~ (undone)" if h.get("undone") else line)
    return out


def marked_text(tokens: Sequence[str], marks: Sequence[int], limit: int = 40) -> str:
    """A sentence as escaped Markdown with the ``marks`` tokens in bold (at most ``limit``
    tokens around the first mark)."""
    marks = set(marks)
    first = min(marks) if marks else 0
    lo = max(0, min(first - 5, len(tokens) - limit))
    shown = tokens[lo:lo + limit]
    words = [f"**{md_escape(tok)}**" if lo + i in marks else md_escape(tok)
             for i, tok in enumerate(shown)]
    return ("… " if lo else "") + " ".join(words) + (" …" if lo + limit < len(tokens) else "")


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
    if len(v.votes) > 1:
        parts.append("votes: " + ", ".join(f"{md_escape(who)} {md_escape(lab or '(none)')}"
                                           for who, lab in v.votes.items()))
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
             prefix: str = "tok_", span: tuple[int, int] | None = None,
             flagged: Sequence[int] = ()) -> str:
    """CSS for the token chips (buttons with keys ``prefix + index``): human labels solid
    borders in the label's color, suggestions dashed and italic, background by
    uncertainty, the selected token outlined (every token of a selected ``span``
    (first, last) too), tokens that break the span scheme underlined in red with a ``!``.
    Contains no token text."""
    r, g, b = UNCERTAIN_RGB
    rules = [
        f"[class*='st-key-{prefix}'] button {{ min-height: 2.4rem; padding: 0.15rem 0.6rem;"
        " border-radius: 0.5rem; }",
        f"[class*='st-key-{prefix}'] button code {{ font-size: 0.78em; padding: 0.05em 0.35em;"
        " border-radius: 0.3em; color: #fff; }",
        f"[class*='st-key-{prefix}'] button em {{ color: #334155; font-size: 0.85em; }}",
    ]
    lo, hi = span if span else (selected, selected)
    bad = set(flagged)
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
        if lo is not None and lo <= v.index <= hi:
            decl.append("outline: 3px solid #4f46e5; outline-offset: 2px;")
            if span:
                decl.append("box-shadow: 0 0 0 6px rgba(79,70,229,0.18);")
        if v.index in bad:
            decl.append("text-decoration: underline wavy #dc2626;")
            rules.append(f"{sel}::after {{ content: '!'; color: #fff; background: #dc2626;"
                         " border-radius: 999px; padding: 0 0.4em; margin-left: 0.3em;"
                         " font-weight: 700; font-size: 0.75em; }")
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
                  current: int | None, seen: set[int], *, lease: bool = False) -> int | None:
    """The next sentence to annotate: the first one of the queue not yet seen in this
    session (then the first that is not ``current``); None when the queue is empty.
    ``lease`` (a team member): the store's routing, which leases it
    (:meth:`Store.next_sentence`)."""
    if lease:
        return store.next_sentence(project_id, annotator, order, current, seen)
    limit = len(seen) + 5
    ids = store.queue(project_id, order=order, annotator=annotator, limit=limit)
    for sid in ids:
        if sid not in seen and sid != current:
            return sid
    for sid in ids:
        if sid != current:
            return sid
    return ids[0] if ids else None


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
    accuracy, ece, ece_mass, ece_floor and ece_mass_floor (what a perfectly calibrated model
    would show on these tokens, :func:`gpsl.metrics.ece_noise_floor`), mean_confidence, tokens,
    selective (pandas), thresholds (pandas), bands (pandas))``, or None without
    gold/predictions (numbers from
    :func:`gpsl.annotation.pipeline.evaluate`, the one held-out evaluation)."""
    import pandas as pd

    from gpsl import metrics
    from gpsl.annotation.pipeline import evaluate

    ids, _, gold = store.gold_data(project_id)
    if not ids:
        return None
    preds = store.get_predictions(version["id"], ids)
    res = evaluate(version.get("classes") or [], [preds.get(sid) for sid in ids], gold)
    if not res:
        return None
    conf, correct = np.asarray(res["confidence"]), np.asarray(res["correct"], dtype=bool)
    table = pd.DataFrame(metrics.reliability_table(conf, correct, n_bins, consistency=True))
    selective = pd.DataFrame(metrics.selective_accuracy(conf, correct))
    thresholds = pd.DataFrame(metrics.threshold_table(conf, correct))
    _, train_y = store.training_data(project_id, "train", only_labeled=True)
    band_of = metrics.frequency_bands(res["gold_label"], train_y)
    bands = [{"labels": r["band"], "tokens": r["tokens"], "accuracy": r["accuracy"],
              "mean confidence": r["mean_confidence"], "ECE (15 equal-mass bins)": r["ece_mass"],
              "which": ", ".join(r["labels"])}
             for r in metrics.calibration_by_band(conf, correct, res["gold_label"], band_of)]
    return {"table": table, "accuracy": res["heldout_accuracy"],
            "ece": float(metrics.expected_calibration_error(conf, correct, n_bins)),
            "ece_floor": metrics.ece_noise_floor(conf, n_bins, binning="width"),
            "ece_mass_floor": metrics.ece_noise_floor(conf, 15, binning="mass"),
            "ece_mass": res["heldout_ece_mass"], "mean_confidence": res[
                "heldout_mean_confidence"], "nll": res["heldout_nll"],
            "tokens": res["heldout_tokens"], "selective": selective, "thresholds": thresholds,
            "bands": pd.DataFrame(bands)}


def noise_floor_note(calib: dict) -> str:
    """One line reading the ECE against its noise floor on the held-out tokens."""
    ece, floor = calib["ece"], calib["ece_floor"]
    mass, mass_floor = calib["ece_mass"], calib["ece_mass_floor"]
    within = ece <= floor and mass <= mass_floor
    verdict = ("both are within what chance alone gives: as calibrated as these tokens can "
               "show" if within else "more than chance alone gives: the reliability chart "
               "shows where")
    return (f"On {fmt_int(calib['tokens'])} held-out tokens a perfectly calibrated model would "
            f"still show an ECE of about {floor:.3f} (equal-width) and {mass_floor:.3f} "
            f"(equal-mass) by chance; this version's {ece:.3f} and {mass:.3f} are {verdict}.")


def calibration_plain(version: dict) -> str:
    """One line for a project lead: what the version's confidences were calibrated on and
    what a confidence then means (the technical account: :func:`calibration_note`)."""
    cal = (version.get("metrics") or {}).get("calibration")
    if not cal:
        return ("Not calibrated yet: too few labeled tokens and no held-out gold, so the "
                "confidences are the model's raw ones and usually too high.")
    tokens = fmt_int(cal.get("tokens") or 0)
    source = str(cal.get("source") or "")
    if source == "held-out gold":
        where = (f"on {tokens} held-out gold tokens (each held-out half on the other, so the "
                 "figures below are not in-sample)")
    elif source.endswith("-fold labels"):
        where = (f"on {tokens} labeled tokens, each predicted by a model trained without its "
                 f"sentence ({source.split('-')[0]} folds)")
    else:
        where = f"on {tokens} tokens ({source})" if source else f"on {tokens} tokens"
    return (f"Confidences are calibrated {where}: a token shown at 0.90 should be right about "
            "9 times in 10.")


def calibration_note(version: dict) -> str:
    """One line on how the version's marginals were calibrated (from its metrics)."""
    cal = (version.get("metrics") or {}).get("calibration")
    if not cal:
        return ("Not calibrated: too few labeled tokens and no held-out gold (the raw "
                "Algorithm 2 marginals are shown).")
    method = {"mean": "Algorithm 2 on the means", "probit": "uncertainty-aware RNS"}.get(
        cal.get("method"), cal.get("method"))
    if cal.get("kind") == "ensemble":
        method = "a mixture of calibrators weighted by their cross-validated log score"
        how = str(cal.get("summary", ""))
    elif str(cal.get("kind")).startswith("structured"):
        how = (f"temperatures {cal['t_unary']:.2f} (own score) and {cal['t_pair']:.2f} "
               "(neighbour scores) inside Algorithm 2")
        if cal.get("kind") == "structured+vector":
            how += " then a per-label scale and shift"
    else:
        how = f"temperature {cal['temperature']:.2f}"
    return (f"Calibrated marginals: {method}, {how}, fitted on "
            f"{fmt_int(cal.get('tokens') or 0)} tokens ({cal.get('source')}); held-out "
            "figures are never in-sample (with held-out calibration, each half is calibrated "
            "on the other).")


def uncertain_sentences(store: Store, project_id: int, tokens, n: int = 10):
    """The first ``n`` sentences of the annotation queue (the one ranking,
    :mod:`gpsl.annotation.queue`) with their unlabeled tokens' confidences, their queue
    score and the query score that gave it (``strategy``) (pandas)."""
    import pandas as pd

    ranked = store.ranked_queue(project_id, n)
    free = tokens[(~tokens["labeled"]) & (tokens["split"] == "train")]
    rows = []
    for r in ranked:
        conf = free.loc[free["sentence_id"] == r["sentence_id"], "confidence"]
        if conf.empty:
            continue
        rows.append({"sentence_id": r["sentence_id"], "min_confidence": float(conf.min()),
                     "mean_confidence": float(conf.mean()), "unlabeled": int(conf.size),
                     "position": r["position"], "score": r["score"],
                     "strategy": r["strategy"]})
    return pd.DataFrame(rows, columns=["sentence_id", "min_confidence", "mean_confidence",
                                       "unlabeled", "position", "score", "strategy"])


def least_sure_caption(row) -> str:
    """The line above a sentence of "Where the model is least sure": its number, its queue
    score named after the query score that gave it, its lowest confidence and how many
    tokens are unlabeled (``row``: a row of :func:`uncertain_sentences`)."""
    score = "–" if row.score is None or np.isnan(row.score) else f"{row.score:.3f}"
    return (f"Sentence {int(row.position) + 1} · {query_name(row.strategy)} score {score} · "
            f"lowest confidence {row.min_confidence:.2f} · {int(row.unlabeled)} unlabeled "
            "tokens")


def uncertain_tokens(tokens, n: int = 20):
    import pandas as pd

    free = tokens[(~tokens["labeled"]) & (tokens["split"] == "train")]
    top = free.sort_values(["confidence", "position"]).head(n)
    return pd.DataFrame({"sentence": top["position"] + 1, "token #": top["token_index"] + 1,
                         "token": top["token"], "predicted": top["predicted"],
                         "confidence": top["confidence"]})


def learning_curve(versions: Sequence[dict]):
    """Every done version in training order: labeled tokens, held-out accuracy, mean
    confidence and ECE (None where the project has no held-out gold) (pandas)."""
    import pandas as pd

    rows = []
    for v in versions:
        if v["status"] != "done":
            continue
        m = v.get("metrics") or {}
        rows.append({"version": version_name(v), "id": v["id"],
                     "labeled tokens": v.get("n_labeled_tokens") or 0,
                     "accuracy": m.get("heldout_accuracy"),
                     "mean confidence": m.get("heldout_mean_confidence"),
                     "ECE": m.get("heldout_ece"),
                     "finished": fmt_time(v.get("finished_at"))})
    rows.sort(key=lambda r: r["id"])
    return pd.DataFrame(rows, columns=["version", "id", "labeled tokens", "accuracy",
                                       "mean confidence", "ECE", "finished"])


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


# ----------------------------------------------------------------------------- plots

PLOT_TEMPLATE = "gpsl"


def _register_plot_template() -> None:
    """One plotly template for every figure of the app (margins, fonts, colours), instead
    of a layout dict repeated per figure."""
    import plotly.graph_objects as go
    import plotly.io as pio

    if PLOT_TEMPLATE in pio.templates:
        return
    base = pio.templates["plotly_white"]
    tmpl = go.layout.Template(base)
    tmpl.layout.update(margin=dict(l=10, r=10, t=30, b=10), height=300,
                       font=dict(size=12), colorway=PALETTE,
                       legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))
    pio.templates[PLOT_TEMPLATE] = tmpl


def figure(**layout):
    """A plotly figure with the app's template (and any extra layout)."""
    import plotly.graph_objects as go

    _register_plot_template()
    return go.Figure(layout={"template": PLOT_TEMPLATE, **layout})


def styled(fig, **layout):
    """Apply the app's template (and extra layout) to a plotly express figure."""
    _register_plot_template()
    fig.update_layout(template=PLOT_TEMPLATE, **layout)
    return fig


# ----------------------------------------------------------------------------- team


def heatmap(matrix, x: Sequence[str], y: Sequence[str], title: str, *, zmin: float = 0.0,
            zmax: float = 1.0, digits: int = 2, height: int | None = None,
            x_title: str | None = None, y_title: str | None = None):
    """A plotly heatmap with the app's template and the values written in the cells (an
    empty cell where the value is NaN)."""
    import numpy as np

    z = np.asarray(matrix, dtype=float)
    cells = [["" if not np.isfinite(v) else f"{v:.{digits}f}" for v in row] for row in z]
    fig = figure(title=title, height=height or max(260, 60 + 38 * len(y)),
                 xaxis_title=x_title, yaxis_title=y_title)
    fig.add_heatmap(z=z, x=list(x), y=list(y), zmin=zmin, zmax=zmax, text=cells,
                    texttemplate="%{text}", colorscale="Blues", hoverongaps=False,
                    colorbar={"thickness": 12})
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category", side="bottom")
    return fig


CONFLICT_STATUS = {"open": "open (tie, no decision)", "resolved": "resolved by the rule",
                   "adjudicated": "decided by a lead"}


def filter_conflicts(conflicts: Sequence[dict], status: Sequence[str] = (),
                     labels: Sequence[str] = (), annotators: Sequence[str] = (),
                     text: str = "") -> list[dict]:
    """The conflicts with one of ``status``, a vote for one of ``labels``, a vote by one
    of ``annotators`` and ``text`` in the token (case-insensitive); empty filters pass."""
    text = (text or "").strip().lower()
    out = []
    for c in conflicts:
        if status and c["status"] not in status:
            continue
        if labels and not set(labels) & {lab for lab in c["votes"].values() if lab}:
            continue
        if annotators and not set(annotators) & set(c["votes"]):
            continue
        if text and text not in str(c["token"]).lower():
            continue
        out.append(c)
    return out


def conflict_rows(conflicts: Sequence[dict]) -> list[dict]:
    """Table rows of conflicts (sentence numbers as the pages show them, 1-based)."""
    return [{"sentence": c["position"] + 1, "token #": c["token_index"] + 1,
             "token": c["token"],
             "votes": " · ".join(f"{who}: {lab or '(no label)'}"
                                 for who, lab in c["votes"].items()),
             "training label": c["derived"] or "—",
             "status": CONFLICT_STATUS.get(c["status"], c["status"])}
            for c in conflicts]


def annotator_rows(stats: Sequence[dict]) -> list[dict]:
    """Table rows of :meth:`Store.annotator_stats`."""
    return [{"annotator": r["annotator"], "labels": r["votes"], "sentences": r["sentences"],
             "changes": r["changes"], "active min": round(r["active_minutes"], 1),
             "labels / hour": None if r["labels_per_hour"] is None
             else round(r["labels_per_hour"]),
             "median s / label": None if r["median_seconds"] is None
             else round(r["median_seconds"], 1),
             "mean κ": r["kappa"], "last label": fmt_time(r["last"])} for r in stats]


def fmt_num(x, digits: int = 2) -> str:
    """A float, or "–" for None / NaN."""
    import math

    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}"
