"""The token chips and label colors of the pages: CSS of the Annotate page's chips and label
buttons, the chips' Markdown labels and tooltips, read-only sentence HTML, the legend; the keys
of the labels.  No Streamlit calls; every user text is escaped (:mod:`pages._format`).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpsl.annotation import TokenView, entity_type
from pages._format import code_span, esc, md_escape

PALETTE = ["#2563eb", "#16a34a", "#9333ea", "#db2777", "#ea580c", "#0891b2", "#ca8a04",
           "#4f46e5", "#dc2626", "#0d9488", "#7c3aed", "#65a30d"]
OUTSIDE_COLOR = "#64748b"
UNCERTAIN_RGB = (245, 158, 11)  # amber: background of uncertain tokens


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


def key_hints(labels: Sequence[str]) -> dict[str, str]:
    """Label -> its key, one key per label and one label per key: ``1`` … ``9`` for the
    first nine labels other than ``O``, ``0`` for ``O``.  Every label is also reachable by
    the type-ahead (``/``).  (With a span scheme the digits are the entity types',
    :func:`span_choices`, and the labels have none.)"""
    hints = {lab: str(i + 1) for i, lab in enumerate([x for x in labels if x != "O"][:9])}
    if "O" in labels:
        hints["O"] = "0"
    return hints


def span_choices(types: Sequence[str]) -> list[tuple[str, str | None]]:
    """The entity types offered for a span with their keys: ``1`` … ``9``, then none;
    ``O`` (outside) last with ``0``."""
    out = [(kind, str(i + 1) if i < 9 else None) for i, kind in enumerate(types)]
    return out + [("O", "0")]


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
        f"<span>shading, the model's certainty: confidence 1.0 {steps} 0.4 "
        "(darker = less sure of its best label)</span>"
        "<span>★ where the cursor opens: the unlabeled token the queue's score ranks first "
        "(the training run's query score, e.g. BALD; else least confidence)</span>"
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
