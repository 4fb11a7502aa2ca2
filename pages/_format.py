"""Escaping and formatting of text for the pages: no Streamlit calls, no numerics.

Everything that renders user text as HTML goes through :func:`esc`; widget labels and
``st.markdown`` text (which Streamlit renders as Markdown) go through :func:`md_escape`.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence

from gpsl.annotation import HistoryEntry, InputError

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~:$^=])")
#: how the pages name a query score of :data:`gpsl.active.QUERY_SCORES` (others: the name
#: with spaces)
QUERY_NAMES = {"bald": "BALD", "lookahead": "look-ahead"}


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


def code_span(text) -> str:
    """A Markdown code span showing ``text`` literally (code spans parse no markup)."""
    text = str(text).replace("\n", " ")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def safe_markdown(text: str) -> str:
    """Markdown written by a user, made text-safe for ``st.markdown``: ``< > &`` become
    entities (raw HTML shows as text) and images become plain text (nothing is loaded)."""
    text = str(text or "").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("![", "!\\[")


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def fmt_int(n) -> str:
    return f"{int(n):,}"


def fmt_pct(x, digits: int = 1) -> str:
    return "–" if _missing(x) else f"{100 * float(x):.{digits}f}%"


def fmt_num(x, digits: int = 2) -> str:
    """A float, or "–" for None / NaN."""
    return "–" if _missing(x) else f"{x:.{digits}f}"


def fmt_time(iso: str | None) -> str:
    """``2024-05-01T12:00:00.000+00:00`` -> ``2024-05-01 12:00`` (UTC)."""
    return "" if not iso else iso[:16].replace("T", " ")


def fmt_eta(seconds) -> str:
    """`` · about 2 min 5 s left`` (empty without an estimate)."""
    if seconds is None:
        return ""
    seconds = int(round(float(seconds)))
    return f" · about {seconds // 60} min {seconds % 60} s left" if seconds >= 60 else \
        f" · about {seconds} s left"


def offsets_text(offsets: Sequence[int]) -> str:
    return ", ".join(str(int(o)) for o in offsets)


def parse_label_text(text: str) -> list[str]:
    """Labels typed by a user: separated by spaces or commas, duplicates dropped."""
    out: list[str] = []
    for lab in re.split(r"[\s,]+", text or ""):
        if lab and lab not in out:
            out.append(lab)
    if not out:
        raise InputError("the label set is empty", source="<labels>")
    return out


def query_name(strategy: str) -> str:
    """A query score's name as the pages show it: ``"bald"`` -> ``"BALD"``,
    ``"least_confidence"`` -> ``"least confidence"``."""
    return QUERY_NAMES.get(strategy, str(strategy).replace("_", " "))


def history_lines(rows: Sequence[HistoryEntry]) -> list[str]:
    """One Markdown line per history entry (escaped), newest first; undone changes struck
    through."""
    out = []
    for h in rows:
        new = code_span(h.new_label) if h.new_label else "no label"
        old = code_span(h.old_label) if h.old_label else "none"
        what = {"set": f"set {new} (was {old})", "clear": f"cleared (was {old})",
                "undo": f"undid: back to {new}", "import": f"imported {new}"}.get(
            h.action, md_escape(h.action))
        if h.source == "accepted" and h.action == "set":
            what += " · accepted suggestion"
        line = f"{fmt_time(h.at)} · **{md_escape(h.annotator)}** · {what}"
        out.append(f"~~{line}~~ (undone)" if h.undone else line)
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
