"""Panels of the Annotate page drawn from a module (compiled once, not on every rerun):
the keyboard help, "Go to a sentence", "Find sentences" and the selected token's history.
In a blind project they show nothing of other people's votes: the history keeps one's own
changes and the imported labels, the search is by text only.

The three expanders are lazy (``on_change="rerun"``): their widgets and queries run only
while they are open.
"""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from gpsl.annotation import SEARCH_STATUSES, SearchResult, TokenView
from pages import _ui
from pages._format import code_span, history_lines, marked_text, md_escape
from pages._labeling import Labeling


def shortcuts(keys: Sequence[tuple[str, str]]) -> None:
    box = st.expander("Keyboard shortcuts", icon=":material/keyboard:", key="help_keys",
                      on_change="rerun")
    if box.open:
        box.markdown("\n".join(f"- **{key}** — {what}" for key, what in keys))
        box.caption("Keys work while the focus is not in a text field; keys pressed faster "
                    "than the page updates are queued and applied in order.")


def go_to(page: Labeling, example: int) -> None:
    box = st.expander("Go to a sentence", icon=":material/pin_drop:", key="goto_open",
                      on_change="rerun")
    if box.open:
        with box, st.container(horizontal=True, vertical_alignment="bottom"):
            st.text_input("Sentence number (as shown above the tokens)", key="jump_to",
                          width=280, placeholder=f"e.g. {example}")
            st.button("Open", on_click=page.jump, key="jump")


def find(page: Labeling) -> None:
    box = st.expander("Find sentences", icon=":material/search:", key="find_open",
                      on_change="rerun")
    if not box.open:
        return
    store, pid = page.store, page.pid
    if page.blind:  # the other filters and the counts would show other people's labels
        with box, _ui.guard("Cannot search"):
            query = st.text_input("Text", key="find_text", placeholder="words of the sentence")
            st.caption("Blind annotation: search by text only.")
            if query.strip():
                found = store.reports.search(pid, text_query=query, limit=15)
                _hits(page, found, counts=False)
        return
    with box, _ui.guard("Cannot search"):
        cols = st.columns([3, 2, 2, 2])
        query = cols[0].text_input("Text", key="find_text", placeholder="words of the sentence")
        label = cols[1].selectbox("Label", page.labels, index=None, key="find_label",
                                  placeholder="any label")
        who = cols[2].selectbox("Annotator", store.annotators(pid), index=None, key="find_who",
                                placeholder="anyone")
        status = cols[3].selectbox("Status", SEARCH_STATUSES, index=None,
                                   key="find_status", placeholder="any status")
        conflicts = st.toggle("Only sentences with conflicting votes", key="find_conflicts",
                              help="A token whose votes from different annotators disagree.")
        if not (query.strip() or label or who or status or conflicts):
            return
        found = store.reports.search(pid, text_query=query, label=label, annotator=who,
                                     status=status, conflicts=conflicts, limit=15)
        _hits(page, found, counts=True)


def _hits(page: Labeling, found: SearchResult, counts: bool) -> None:
    st.caption(f"{found.total:,} sentence{'s' if found.total != 1 else ''}"
               + (" (the first 15)" if found.total > 15 else ""))
    for hit in found.hits:
        with st.container(horizontal=True, vertical_alignment="center", gap="small"):
            st.button(f"Sentence {hit.number}", key=f"find_open_{hit.sentence_id}",
                      on_click=page.go_to, args=(hit.sentence_id,), type="tertiary")
            st.markdown((f"{hit.n_labeled}/{hit.n_tokens} · " if counts else "")
                        + marked_text(hit.tokens, hit.marks))


def history(page: Labeling, sid: int, current: TokenView) -> None:
    """The selected token's votes now and every change of them (who, what, when)."""
    with _ui.guard("Cannot read the history"):
        panel = [f"**Token history** · {md_escape(current.text)}", ""]
        if current.votes:
            panel += ["Votes now: " + ", ".join(
                f"{md_escape(who)} {code_span(lab) if lab else 'no label'}"
                for who, lab in current.votes.items()), ""]
        # a blind view: only one's own votes and the imported labels
        rows = page.store.reports.token_history(
            sid, current.index, limit=20, only=page.annotator if page.blind else None)
        panel += [f"- {line}" for line in history_lines(rows)] or [
            ":gray[No change recorded for this token.]"]
        st.markdown("\n".join(panel))
