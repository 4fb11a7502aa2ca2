"""The Annotate page's keyboard and click queue: a bidirectional Streamlit component made
from the local folder ``pages/keyboard`` (one HTML file, no build step, no network).

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
_component = components.declare_component(
    "keyboard", path=str(Path(__file__).resolve().parent / "keyboard"))


def new_events(state: dict) -> list[dict]:
    """The events of the component's current value not applied yet (in order); marks
    them applied in ``state`` (the page's session dict: ``keys_epoch``, ``keys_seq``)."""
    value = st.session_state.get(KEY)
    if not isinstance(value, dict) or not isinstance(value.get("events"), list):
        return []
    epoch = str(value.get("epoch") or "")
    if epoch != state.get("keys_epoch"):  # a new page load: its numbers start again
        state["keys_epoch"], state["keys_seq"] = epoch, 0
    done = int(state.get("keys_seq") or 0)
    fresh = []
    for event in value["events"]:
        if isinstance(event, dict) and isinstance(event.get("n"), int) and event["n"] > done:
            fresh.append(event)
    fresh.sort(key=lambda e: e["n"])
    if fresh:
        state["keys_seq"] = fresh[-1]["n"]
    return fresh


def render(state: dict, options: Sequence[dict], exact: Sequence[str],
           prefixes: Sequence[str]) -> None:
    """Draw the (invisible) component: ``options`` are the type-ahead's choices
    (``{"value", "kind": "label"|"type", "text"}``); clicks on the buttons whose keys are
    in ``exact`` or start with one of ``prefixes`` go through the queue."""
    _component(ack=int(state.get("keys_seq") or 0), epoch=state.get("keys_epoch") or "",
               options=list(options), clicks=list(exact), prefixes=list(prefixes), key=KEY,
               default=None)
