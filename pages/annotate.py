"""Annotate page: one sentence at a time, token chips, label buttons, keyboard shortcuts.

A rerun loads only the current sentence and its prediction under the active model.
Every change is written to the store at once (in the button callbacks).
"""

from __future__ import annotations

import streamlit as st

from gpsl.errors import GpslError
from pages import _ui
from pages import _view as sup

ORDERS = {"uncertainty": "Most uncertain first", "sequential": "In file order"}
SHORTCUTS = [
    ("1 … 9", "set the selected token's label (the label buttons' order)"),
    ("X", "clear the selected token's label"),
    ("← / →", "select the previous / next token"),
    ("A", "accept the suggestions above the confidence threshold"),
    ("N / P", "next / previous sentence"),
    ("S", "skip this sentence (it goes to the end of your queue)"),
    ("U", "undo your last change"),
]

store, project = _ui.setup()
project = _ui.require_project(project)
pid = project["id"]
annotator = _ui.annotator()
team = not _ui.identity().local  # a team member: routed and leased sentences, blind views
labels = project["labels"]
st.session_state.setdefault("queue_order", "uncertainty")
st.session_state.setdefault("accept_thr", 0.9)
state = st.session_state.setdefault(f"annotate_{pid}", {
    "current": None, "back": [], "fwd": [], "seen": set(), "sel": None, "sel_sid": None})


# ----------------------------------------------------------------------------- actions


def _order() -> str:
    return st.session_state.get("queue_order") or "uncertainty"


def go_to(sid: int | None) -> None:
    if sid is None or sid == state["current"]:
        return
    if state["current"] is not None:
        state["back"].append(state["current"])
    state["fwd"].clear()
    state["current"] = sid
    state["seen"].add(sid)


@_ui.callback("Cannot open the next sentence")
def next_sentence() -> None:
    if state["fwd"]:
        state["back"].append(state["current"])
        state["current"] = state["fwd"].pop()
        return
    sid = sup.next_sentence(store, pid, _order(), annotator, state["current"], state["seen"],
                            lease=team)
    if sid is None or sid == state["current"]:
        _ui.flash("info", "No other sentence left in the queue.")
        return
    go_to(sid)


@_ui.callback("Cannot go back")
def previous_sentence() -> None:
    if not state["back"]:
        _ui.flash("info", "This is the first sentence of this session.")
        return
    state["fwd"].append(state["current"])
    state["current"] = state["back"].pop()


@_ui.callback("Sentence not skipped")
def skip() -> None:
    if state["current"] is not None:
        store.skip(state["current"], annotator)
        state["seen"].add(state["current"])
    next_sentence()


def select_token(t: int) -> None:
    state["sel"], state["sel_sid"] = t, state["current"]


@_ui.callback("Cannot move the selection")
def move_selection(step: int) -> None:
    sentence = store.get_sentence(state["current"])
    if sentence is None:
        return
    n = len(sentence["tokens"])
    state["sel"] = min(max(0, (state["sel"] or 0) + step), n - 1)
    state["sel_sid"] = state["current"]


@_ui.callback("Label not saved")
def set_label(label: str | None) -> None:
    sid, t = state["current"], state["sel"]
    if sid is None or t is None:
        return
    try:
        store.set_label(sid, t, label, annotator)
    except GpslError as exc:  # a bad label, or the store busy for longer than its timeout
        _ui.flash("error", str(exc))
        return
    if label is not None:  # move on to the next unlabeled token
        sentence = store.sentence_view(sid, annotator)
        state["sel"] = sup.next_unlabeled(sup.sentence_view(sentence, None, None), t)
        state["sel_sid"] = sid


@_ui.callback("Suggestions not accepted")
def accept_suggestions() -> None:
    sid = state["current"]
    version = store.active_model(pid)
    if sid is None or version is None:
        _ui.flash("warning", "No model suggestions yet: train a model on the Train page.")
        return
    preds = store.get_predictions(version["id"], [sid]).get(sid)
    views = sup.sentence_view(store.sentence_view(sid, annotator), preds, version["classes"])
    threshold = float(st.session_state.get("accept_thr", 0.9))
    changes = sup.accept_candidates(views, threshold, labels)
    if not changes:
        _ui.flash("info", f"No unlabeled token has a suggestion with confidence ≥ {threshold:.2f}.")
        return
    try:
        store.set_labels(sid, changes, annotator, source="accepted")
    except GpslError as exc:
        _ui.flash("error", str(exc))
        return
    _ui.flash("info", f"Accepted {len(changes)} suggestion{'s' if len(changes) > 1 else ''} "
                      f"(confidence ≥ {threshold:.2f}).")


@_ui.callback("Nothing undone")
def undo() -> None:
    try:
        result = store.undo(pid, annotator)
    except GpslError as exc:
        _ui.flash("error", str(exc))
        return
    if result is None:
        _ui.flash("info", "Nothing to undo.")
        return
    go_to(result["sentence_id"])
    if result["changes"]:
        state["sel"], state["sel_sid"] = result["changes"][0]["token_index"], state["current"]
    n = len(result["changes"])
    _ui.flash("info", f"Undid the last change ({n} token{'s' if n > 1 else ''}).")


@_ui.callback("Cannot open the sentence")
def jump() -> None:
    position = st.session_state.get("jump_to")
    sid = sup.sentence_at(store, pid, int(position or 1))
    if sid is None:
        _ui.flash("warning", f"There is no training sentence {position}.")
        return
    go_to(sid)


# ----------------------------------------------------------------------------- state

goto = st.session_state.pop("goto_sentence", None)  # from the Confidence page
if goto is not None:
    go_to(int(goto))
sentence = store.sentence_view(state["current"], annotator) \
    if state["current"] is not None else None
if sentence is None or sentence["project_id"] != pid:
    state.update(current=None, back=[], fwd=[])
    first = sup.next_sentence(store, pid, _order(), annotator, None, state["seen"], lease=team)
    if first is not None:
        go_to(first)
        sentence = store.sentence_view(first, annotator)

_ui.header("Annotate", "Pick a token, then its label. Unlabeled tokens may stay unlabeled: "
                       "the model learns from partial annotation.", project)
_ui.show_flash()

if sentence is None:
    st.success("No sentence is waiting for you: the others are labeled or held by enough "
               "people." if team else "Every training sentence is fully labeled.",
               icon=":material/task_alt:")
    if _ui.identity().is_lead:
        st.page_link(_ui.PAGES["train"], label="Train a model", icon=":material/model_training:")
        st.page_link(_ui.PAGES["data"], label="Export the annotations",
                     icon=":material/download:")
    st.stop()

sid = sentence["id"]
version = store.active_model(pid)
marginals = store.get_predictions(version["id"], [sid]).get(sid) if version else None
views = sup.sentence_view(sentence, marginals, version["classes"] if version else None)
if state["sel_sid"] != sid or state["sel"] is None or state["sel"] >= len(views):
    state["sel"], state["sel_sid"] = sup.first_unlabeled(views), sid
sel = state["sel"]
colors = sup.label_colors(labels)
n_labeled = sum(v.label is not None for v in views)

# ----------------------------------------------------------------------------- layout

top = st.columns([3, 2], vertical_alignment="bottom")
with top[0]:
    where = f"Sentence {sentence['position'] + 1}"
    if sentence.get("doc"):
        where += f" · {sup.md_escape(sentence['doc'])}"
        if sentence.get("line"):
            where += f" line {sentence['line']}"
    model_note = (f"suggestions from model {sup.version_name(version)}" if version
                  else "no model yet: suggestions appear after training")
    st.markdown(f"**{where}** · {n_labeled} of {len(views)} tokens labeled · "
                f"{model_note}")
with top[1]:
    st.segmented_control("Queue", list(ORDERS), format_func=ORDERS.get, key="queue_order",
                         required=True,
                         help="Which sentence Next brings: the one with the least confident "
                              "unlabeled token under the active model, or file order.",
                         label_visibility="collapsed", width="stretch")

st.html(sup.chip_css(views, colors, sel) + sup.label_button_css(labels, colors))
with st.container(horizontal=True, gap="small", key="chips"):
    for v in views:
        st.button(sup.token_button_label(v), key=f"tok_{v.index}", help=sup.token_help(v),
                  on_click=select_token, args=(v.index,))
st.html(sup.legend_html())

current = views[sel]
detail = f"**{sup.md_escape(current.text)}** · token {sel + 1} of {len(views)}"
if current.label is not None:
    who = "accepted suggestion" if current.source == "accepted" else "labeled"
    detail += f" · {who} {sup.code_span(current.label)}"
elif current.label is None and not current.top:
    detail += " · unlabeled"
if current.top:
    detail += " · model: " + ", ".join(f"{sup.md_escape(lab)} {p:.2f}" for lab, p in current.top)
with st.container(horizontal=True, gap="small", vertical_alignment="center", key="selection"):
    st.button("", icon=":material/chevron_left:", on_click=move_selection, args=(-1,),
              shortcut="Left", key="tok_prev", help="Select the previous token.",
              disabled=sel == 0)
    st.button("", icon=":material/chevron_right:", on_click=move_selection, args=(1,),
              shortcut="Right", key="tok_next", help="Select the next token.",
              disabled=sel == len(views) - 1)
    st.markdown(detail)

with st.container(horizontal=True, gap="small", key="labels"):
    for i, lab in enumerate(labels):
        st.button(sup.md_escape(lab), key=f"lab_{i}", on_click=set_label, args=(lab,),
                  shortcut=str(i + 1) if i < 9 else None,
                  type="primary" if lab == current.label else "secondary")
    st.button("Clear label", key="clear", icon=":material/backspace:", on_click=set_label,
              args=(None,), shortcut="X", disabled=current.label is None)

st.space("xsmall")
with st.container(horizontal=True, gap="small", vertical_alignment="bottom", key="actions"):
    st.button("Previous", icon=":material/arrow_back:", on_click=previous_sentence,
              shortcut="P", key="prev")
    st.button("Next", icon=":material/arrow_forward:", on_click=next_sentence, shortcut="N",
              key="next", type="primary")
    st.button("Skip", icon=":material/redo:", on_click=skip, shortcut="S", key="skip",
              help="Move this sentence to the end of your queue.")
    st.button("Undo", icon=":material/undo:", on_click=undo, shortcut="U", key="undo",
              help="Revert your last change (a whole accept is one change).")
    st.space("stretch")
    st.slider("Accept threshold", 0.5, 1.0, step=0.01, key="accept_thr", width=220,
              help="Suggestions at or above this confidence are accepted by the button.",
              disabled=version is None)
    n_acc = len(sup.accept_candidates(views, float(st.session_state["accept_thr"]), labels))
    st.button(f"Accept {n_acc} suggestion{'s' if n_acc != 1 else ''}", key="accept",
              icon=":material/done_all:", on_click=accept_suggestions, shortcut="A",
              disabled=version is None or n_acc == 0,
              help="Label the unlabeled tokens whose suggestion reaches the threshold "
                   "(stored as “accepted”, not as your own label).")

with st.expander("Keyboard shortcuts", icon=":material/keyboard:"):
    st.markdown("\n".join(f"- **{key}** — {what}" for key, what in SHORTCUTS))
    st.caption("Shortcuts work while the focus is not in a text field.")

with st.expander("Go to a sentence", icon=":material/search:"):
    n_train = store.sentence_count(pid, split="train")
    with st.container(horizontal=True, vertical_alignment="bottom"):
        st.number_input("Training sentence number", 1, max(1, n_train), key="jump_to",
                        width=220)
        st.button("Open", on_click=jump, key="jump")
