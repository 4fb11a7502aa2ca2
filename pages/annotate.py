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

from gpsl.annotation import SentenceView, accept_candidates, queue_strategy
from pages import _keys, _panels, _ui, _widget
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
from pages._text import hidden_caption, queue_caption

ORDERS = {"uncertainty": "Most uncertain first", "sequential": "In file order"}


ADVANCE = ("after a label the cursor moves to the next token you have not labeled, to the "
           "right (else the first from the left); when every token is labeled it stays put, "
           "so no key overwrites a label by surprise")


def shortcuts(scheme: str | None) -> list[tuple[str, str]]:
    """The keys of the page: with a span scheme the digits are the entity types (each key
    shown once, on its type's button), otherwise the labels (shown on the label buttons)."""
    digits = [("1 … 9", "the entity type shown on its button: the selected token becomes a "
                        "one-token entity (B-…), a selected span one entity (B-/I- in one "
                        "step); " + ADVANCE),
              ("0", "`O` (outside) for the selected token or span")] if scheme else [
        ("1 … 9", "set the selected token's label (the key is shown on each label button); "
                  + ADVANCE),
        ("0", "set `O` (outside)")]
    return digits + [
        ("/", "type-ahead: type part of any label (or entity type), ↑/↓ to choose, Enter to "
              "set; every label is reached this way (e.g. `I-PER` on one token)"),
        ("← / →", "select the previous / next token: always exactly one step from the "
                  "outlined token"),
        ("Shift + ← / →, Shift + click", "select a span of tokens"),
        ("Esc", "back to a single token"),
        ("X", "clear: withdraw your own label of the selected token (or span); other "
              "people's labels are theirs"),
        ("A", "accept the suggestions above the confidence threshold"),
        ("N / P", "next / previous sentence"),
        ("S", "skip this sentence (it goes to the end of your queue)"),
        ("U", "undo your last key press (a span or an accept is one)"),
        ("The cursor", "the outlined token (one at a time; a span outlines each of its "
                       "tokens). A new sentence opens on ★, the unlabeled token the queue's "
                       "score ranks first (the run's query score, e.g. BALD, else least "
                       "confidence)"),
        ("The shading", "the model's confidence in its best label for unlabeled tokens "
                        "(darker = less sure). With BALD the ★ token need not be the darkest: "
                        "BALD asks where a label teaches the model most, not where its best "
                        "guess is weakest"),
    ]



store, project = _ui.setup()
project = _ui.require_project(project)
page = Labeling(store, project, _ui.annotator())
pid, state, labels, scheme = page.pid, page.state, page.labels, page.scheme
types, choices, hints = page.types, page.choices, page.hints
st.session_state.setdefault("queue_order", "uncertainty")
st.session_state.setdefault("accept_thr", 0.9)


def span_help(kind: str) -> str:
    """The tooltip of an entity type's button (Markdown: every label in it escaped)."""
    if kind == "O":
        return "Label every selected token O."
    labs = " ".join(md_escape(lab) for lab in page.span_scheme.span(kind, 2))
    return f"Label the selection as one {md_escape(kind)} entity ({labs} …) in one step."


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
# the buttons' keyboard: it steps aside once the widget has loaded (drawn on every run all
# the same, so the page's elements keep their places and the widget is never drawn anew)
_keys.render(exact=["tok_prev", "tok_next", *CLICK_ACTIONS], prefixes=["tok_", "lab_", "span_"])


def opened() -> SentenceView | None:
    """The current sentence, or the queue's first one when there is none (or it is gone)."""
    view = page.view(state["current"]) if state["current"] is not None else None
    if view is None or view.project_id != pid:
        state.update(current=None, back=[], fwd=[], anchor=None)
        first = store.next_to_annotate(pid, page.annotator, page.order(), None, state["seen"],
                                       team=page.team)
        if first is not None:
            page.go_to(first)
            view = page.view(first)
    return view


sentence = opened()
if sentence is not None and _widget.apply(page):  # the widget's events, once each
    sentence = opened()

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
n_labeled = sentence.n_labeled  # in this person's own copy
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
        n_file = n_labeled - sentence.n_mine
        whose = " by you" if not n_file else f" ({sentence.n_mine} by you, {n_file} by the file)"
        others = f" · {sentence.n_others} labeled by others" if sentence.n_others else ""
        counts = "" if _widget.live() else \
            f" · {n_labeled} of {len(views)} tokens labeled{whose}"  # else in the widget
        where = "" if _widget.live() else f"**{where}**"  # else the widget's first line
        st.markdown(f"{where}{counts}{others} · {model_note}".lstrip(" ·"))
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
    if sentence.blind:
        st.caption(":material/visibility_off: " + hidden_caption(sentence.overlap))

    current = views[sel]
    threshold = float(st.session_state["accept_thr"])
    n_acc = len(accept_candidates(views, threshold, labels))
    _widget.render(page, sentence, threshold)
    st.html(legend_html())
    if flags:
        st.caption(":red[**Breaks " + scheme + ":**] " + " · ".join(
            f"token {t + 1}: {md_escape(why)}" for t, why in sorted(flags.items())))
    if not _widget.live():  # plain buttons until the widget has loaded (hidden by it then)
        with st.container(key="fallback"):
            st.html(chip_css(views, colors, sel, span=span, flagged=flags)
                    + label_button_css(labels, colors))
            with st.container(horizontal=True, gap="small", key="chips"):
                for v in views:
                    st.button(token_button_label(v), key=f"tok_{v.index}",
                              help=token_help(v), on_click=page.apply_events,
                              args=click(f"tok_{v.index}"))

            if span:
                text = " ".join(v.text for v in views[span[0]:span[1] + 1])
                detail = (f"**{md_escape(text)}** · tokens {span[0] + 1}–{span[1] + 1} of "
                          f"{len(views)} · " + ("pick the entity type below (keys 1 … 9, 0 = O)"
                                                if scheme else "pick a label for every token"))
            else:
                detail = f"**{md_escape(current.text)}** · token {sel + 1} of {len(views)}"
                if current.own is not None:
                    who = ("your accepted suggestion" if current.source == "accepted" else
                           "your label" if current.mine is not None else "the file's label")
                    detail += f" · {who} {code_span(current.own)}"
                elif current.label is not None:
                    detail += f" · {md_escape(current.annotator or 'someone')}'s label " \
                              f"{code_span(current.label)}"
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
                                  help=span_help(kind))

            with st.container(horizontal=True, gap="small", key="labels"):
                for i, lab in enumerate(labels):
                    key = hints.get(lab)
                    st.button(f"{md_escape(lab)} :gray[{key}]" if key else md_escape(lab),
                              key=f"lab_{i}", on_click=page.apply_events, args=click(f"lab_{i}"),
                              help=None if key else "Type / and part of the label to set it "
                                                    "from the keyboard.",
                              type="primary" if lab == current.own and not span else "secondary")
                st.button("Clear my label", key="clear", icon=":material/backspace:",
                          on_click=page.apply_events, args=click("clear"),
                          help="Withdraw your own label (X); it is not a vote for “no label”.",
                          disabled=not any(v.mine is not None for v in
                                           (views[span[0]:span[1] + 1] if span else [current])))

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
                          help="Revert your last key press (a whole accept or span is one).")
                st.space("stretch")
                st.button(f"Accept {n_acc} suggestion{'s' if n_acc != 1 else ''}", key="accept",
                          icon=":material/done_all:", on_click=page.apply_events,
                          args=click("accept"), disabled=version is None or n_acc == 0,
                          help="Label the unlabeled tokens whose suggestion reaches the threshold "
                               "(stored as “accepted”, not as your own label)"
                               + ("; the suggestions are BIO-valid." if scheme else "."))

    st.slider("Accept threshold", 0.5, 1.0, step=0.01, key="accept_thr", width=220,
              help="Suggestions at or above this confidence are accepted (A, or the Accept "
                   "button).", disabled=version is None)

    # lazy expanders: their content runs only while they are open
    _panels.shortcuts(shortcuts(scheme))
    _panels.go_to(page, sentence.position + 1)
    _panels.find(page)

with side:
    _panels.history(page, sid, current)
