"""Annotate page: one sentence at a time, token chips, label buttons, keyboard, spans.

A rerun loads only the current sentence and its prediction under the active model.  Keys
and clicks on the page's buttons go through a client-side queue (:mod:`pages._keys`) and
are applied at the start of the run in the order they happened, several per rerun when
they come faster than reruns (:class:`pages._labeling.Batch`: label keys that arrive
together are one transaction).  Without the queue (before it has loaded, or in AppTest)
the buttons' callbacks apply the same events.  The actions live in
:mod:`pages._labeling`; this file is the layout.
"""

from __future__ import annotations

import streamlit as st

from gpsl.annotation import accept_candidates, queue_strategy
from pages import _keys, _panels, _ui
from pages._chips import (
    chip_css,
    label_button_css,
    label_colors,
    legend_html,
    token_button_label,
    token_help,
)
from pages._format import code_span, md_escape, safe_markdown
from pages._labeling import CLICK_ACTIONS, Labeling
from pages._text import queue_caption

ORDERS = {"uncertainty": "Most uncertain first", "sequential": "In file order"}
SHORTCUTS = [
    ("1 … 9", "set the selected token's label (the key is shown on each label button)"),
    ("0", "set `O` (outside)"),
    ("/", "type-ahead: type part of any label (or entity type), ↑/↓ to choose, Enter to set"),
    ("← / →", "select the previous / next token"),
    ("Shift + ← / →, Shift + click", "select a span of tokens; then 1 … 9 (or a type "
                                      "button) picks its entity type: B-/I- in one step"),
    ("Esc", "back to a single token"),
    ("X", "clear the selected token's (or span's) label"),
    ("A", "accept the suggestions above the confidence threshold"),
    ("N / P", "next / previous sentence"),
    ("S", "skip this sentence (it goes to the end of your queue)"),
    ("U", "undo your last change (a span, or keys typed together, is one change)"),
]

store, project = _ui.setup()
project = _ui.require_project(project)
page = Labeling(store, project, _ui.annotator())
pid, state, labels, scheme = page.pid, page.state, page.labels, page.scheme
types, choices, hints = page.types, page.choices, page.hints
st.session_state.setdefault("queue_order", "uncertainty")
st.session_state.setdefault("accept_thr", 0.9)


def click(key: str) -> tuple[list[dict]]:
    """The callback arguments of a button: the event its click is in the keyboard queue
    (without the queue - before it has loaded, or in AppTest - the callback applies it)."""
    return ([{"k": "click", "key": key}],)


# ----------------------------------------------------------------------------- state

goto = st.session_state.pop("goto_sentence", None)  # from the Confidence page
if goto is not None:
    page.go_to(int(goto))
queued = _keys.new_events()
if queued and state["current"] is not None:
    page.apply_events(queued)
# first on the page (it keeps its place), after the events it acknowledges are applied
typeahead = [{"value": lab, "kind": "label",
              "text": lab + (f"  ({hints[lab]})" if lab in hints else "")} for lab in labels]
typeahead += [{"value": kind, "kind": "type", "text": f"{kind}: entity (span)"}
              for kind in types]
_keys.render(typeahead, exact=["tok_prev", "tok_next", *CLICK_ACTIONS],
             prefixes=["tok_", "lab_", "span_"])
sentence = page.view(state["current"]) if state["current"] is not None else None
if sentence is None or sentence.project_id != pid:
    state.update(current=None, back=[], fwd=[], anchor=None)
    first = store.next_to_annotate(pid, page.annotator, page.order(), None, state["seen"],
                                   team=page.team)
    if first is not None:
        page.go_to(first)
        sentence = page.view(first)

_ui.header("Annotate", "Pick a token, then its label. Unlabeled tokens may stay unlabeled: "
                       "the model learns from partial annotation.", project)
_ui.show_flash()

if sentence is None:
    st.success("No sentence is waiting for you: the others are labeled or held by enough "
               "people." if page.team else "Every training sentence is fully labeled.",
               icon=":material/task_alt:")
    if page.lead:
        st.page_link(_ui.PAGES["train"], label="Train a model", icon=":material/model_training:")
        st.page_link(_ui.PAGES["data"], label="Export the annotations",
                     icon=":material/download:")
    st.stop()

sid = sentence.id
version = sentence.version
views = sentence.tokens
if state["sel_sid"] != sid or state["sel"] is None or state["sel"] >= len(views):
    state["sel"], state["sel_sid"], state["anchor"] = sentence.opening, sid, None
sel = state["sel"]
anchor = state["anchor"] if state["anchor"] is not None and state["anchor"] < len(views) else None
span = (min(anchor, sel), max(anchor, sel)) if anchor is not None and anchor != sel else None
colors = label_colors(labels)
n_labeled = sentence.n_labeled
flags = sentence.flagged

# ----------------------------------------------------------------------------- layout

main, side = st.columns([4, 1.25], gap="medium")
with main:
    top = st.columns([3, 2], vertical_alignment="bottom")
    with top[0]:
        where = f"Sentence {sentence.position + 1}"
        if sentence.doc:
            where += f" · {md_escape(sentence.doc)}"
            if sentence.line:
                where += f" line {sentence.line}"
        model_note = (f"suggestions from model {version.name}" if version
                      else "no model yet: suggestions appear after training")
        st.markdown(f"**{where}** · {n_labeled} of {len(views)} tokens labeled · "
                    f"{model_note}")
    with top[1]:
        with st.container(horizontal=True, vertical_alignment="bottom", gap="small"):
            with st.popover("Guidelines", icon=":material/menu_book:"):
                guidelines = project.guidelines.strip()
                if guidelines:
                    st.markdown(safe_markdown(guidelines))
                else:
                    st.caption("No guidelines yet.")
            st.segmented_control("Queue", list(ORDERS), format_func=ORDERS.get,
                                 key="queue_order", required=True,
                                 help="Which sentence Next brings: the one whose unlabeled "
                                      "token has the highest query score under the active "
                                      "model, or file order.",
                                 label_visibility="collapsed", width="stretch")
    if version and page.order() == "uncertainty":
        st.caption(queue_caption(queue_strategy(version)))

    st.html(chip_css(views, colors, sel, span=span, flagged=flags)
            + label_button_css(labels, colors))
    with st.container(horizontal=True, gap="small", key="chips"):
        for v in views:
            st.button(token_button_label(v), key=f"tok_{v.index}",
                      help=token_help(v), on_click=page.apply_events,
                      args=click(f"tok_{v.index}"))
    st.html(legend_html())
    if flags:
        st.caption(":red[**Breaks " + scheme + ":**] " + " · ".join(
            f"token {t + 1}: {md_escape(why)}" for t, why in sorted(flags.items())))

    current = views[sel]
    if span:
        text = " ".join(v.text for v in views[span[0]:span[1] + 1])
        detail = (f"**{md_escape(text)}** · tokens {span[0] + 1}–{span[1] + 1} of "
                  f"{len(views)} · " + ("pick the entity type below (keys 1 … 9, 0 = O)"
                                        if scheme else "pick a label for every token"))
    else:
        detail = f"**{md_escape(current.text)}** · token {sel + 1} of {len(views)}"
        if current.label is not None:
            who = "accepted suggestion" if current.source == "accepted" else "labeled"
            detail += f" · {who} {code_span(current.label)}"
        elif not current.top:
            detail += " · unlabeled"
        if current.top:
            detail += " · model: " + ", ".join(f"{md_escape(lab)} {p:.2f}"
                                               for lab, p in current.top)
    with st.container(horizontal=True, gap="small", vertical_alignment="center",
                      key="selection"):
        st.button("", icon=":material/chevron_left:", on_click=page.apply_events,
                  args=click("tok_prev"), key="tok_prev",
                  help="Select the previous token.", disabled=sel == 0 and not span)
        st.button("", icon=":material/chevron_right:", on_click=page.apply_events,
                  args=click("tok_next"), key="tok_next", help="Select the next token.",
                  disabled=sel == len(views) - 1 and not span)
        st.markdown(detail)

    if scheme:
        with st.container(horizontal=True, gap="small", vertical_alignment="center",
                          key="spans"):
            st.caption("Entity" if not span else "Span as", width="content")
            for k, (kind, key) in enumerate(choices):
                name = "O (outside)" if kind == "O" else md_escape(kind)
                st.button(f"{name} :gray[{key}]" if key else name, key=f"span_{k}",
                          on_click=page.apply_events, args=click(f"span_{k}"),
                          help=f"Label the selection as one {kind} entity "
                               f"({' '.join(page.span_scheme.span(kind, 2))} …) in one step."
                          if kind != "O" else "Label every selected token O.")

    with st.container(horizontal=True, gap="small", key="labels"):
        for i, lab in enumerate(labels):
            key = hints.get(lab)
            st.button(f"{md_escape(lab)} :gray[{key}]" if key else md_escape(lab),
                      key=f"lab_{i}", on_click=page.apply_events, args=click(f"lab_{i}"),
                      help=None if key else "Type / and part of the label to set it "
                                            "from the keyboard.",
                      type="primary" if lab == current.label and not span else "secondary")
        st.button("Clear label", key="clear", icon=":material/backspace:",
                  on_click=page.apply_events, args=click("clear"),
                  disabled=current.label is None and not span)

    st.space("xsmall")
    with st.container(horizontal=True, gap="small", vertical_alignment="bottom",
                      key="actions"):
        st.button("Previous", icon=":material/arrow_back:", on_click=page.apply_events,
                  args=click("prev"), key="prev")
        st.button("Next", icon=":material/arrow_forward:", on_click=page.apply_events,
                  args=click("next"), key="next", type="primary")
        st.button("Skip", icon=":material/redo:", on_click=page.apply_events,
                  args=click("skip"), key="skip",
                  help="Move this sentence to the end of your queue.")
        st.button("Undo", icon=":material/undo:", on_click=page.apply_events,
                  args=click("undo"), key="undo",
                  help="Revert your last change (a whole accept or span is one change).")
        st.space("stretch")
        st.slider("Accept threshold", 0.5, 1.0, step=0.01, key="accept_thr", width=220,
                  help="Suggestions at or above this confidence are accepted by the button.",
                  disabled=version is None)
        n_acc = len(accept_candidates(views, float(st.session_state["accept_thr"]), labels))
        st.button(f"Accept {n_acc} suggestion{'s' if n_acc != 1 else ''}", key="accept",
                  icon=":material/done_all:", on_click=page.apply_events,
                  args=click("accept"), disabled=version is None or n_acc == 0,
                  help="Label the unlabeled tokens whose suggestion reaches the threshold "
                       "(stored as “accepted”, not as your own label)"
                       + ("; the suggestions are BIO-valid." if scheme else "."))

    # lazy expanders: their content runs only while they are open
    _panels.shortcuts(SHORTCUTS)
    _panels.go_to(page, sentence.position + 1)
    _panels.find(page)

with side:
    _panels.history(page, sid, current)
