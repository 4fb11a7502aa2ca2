"""The Annotate page's keyboard and click queue for its plain buttons, until the labelling
widget (:mod:`pages._widget`) has loaded: a bidirectional Streamlit component made from the
local folder ``pages/keyboard`` (one HTML file, no build step, no network).

The browser side captures key presses and clicks on the buttons named in :func:`render`,
numbers them and sends every event the server has not acknowledged yet, each time one is
added; :func:`new_events` returns the events of that list not applied before (the page
applies them in order) and :func:`render` sends back the number of the last one applied,
so the browser can forget them.  Without JavaScript (or before the component has loaded)
the buttons work as plain Streamlit buttons.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import streamlit as st
import streamlit.components.v1 as components

KEY = "annotate_keys"
ACK = "annotate_keys_ack"  # {"epoch", "seq"}: the last event applied, for the whole session
_component = components.declare_component(
    "keyboard", path=str(Path(__file__).resolve().parent / "keyboard"))


def _ack() -> dict:
    return st.session_state.setdefault(ACK, {"epoch": "", "seq": 0})


def new_events() -> list[dict]:
    """The events of the component's current value not applied yet (in order); marks
    them applied.  The mark is one per session (not per project): the value the browser
    sent last stays in the session after a project switch and must not be applied again."""
    value = st.session_state.get(KEY)
    if not isinstance(value, dict) or not isinstance(value.get("events"), list):
        return []
    ack = _ack()
    epoch = str(value.get("epoch") or "")
    if epoch != ack["epoch"]:  # a new page load: its numbers start again
        ack["epoch"], ack["seq"] = epoch, 0
    done = int(ack["seq"] or 0)
    fresh = [e for e in value["events"]
             if isinstance(e, dict) and isinstance(e.get("n"), int) and e["n"] > done]
    fresh.sort(key=lambda e: e["n"])
    if fresh:
        ack["seq"] = fresh[-1]["n"]
    return fresh


def render(exact: Sequence[str], prefixes: Sequence[str]) -> None:
    """Draw the (invisible) component: clicks on the buttons whose keys are in ``exact`` or
    start with one of ``prefixes`` go through the queue (the type-ahead is the labelling
    widget's, :mod:`pages._widget`)."""
    ack = _ack()
    _component(ack=int(ack["seq"] or 0), epoch=ack["epoch"], clicks=list(exact),
               prefixes=list(prefixes), key=KEY, default=None)
