"""Annotate page: one sentence at a time, token chips, label buttons, keyboard, spans.

A rerun loads only the current sentence and its prediction under the active model.  Keys
and clicks on the page's buttons go through a client-side queue (:mod:`pages._keys`) and
are applied here in the order they happened, several per rerun when they come faster than
reruns; label keys that arrive together are written in one transaction.  Without the
queue (before it has loaded, or in AppTest) the buttons' callbacks apply the same events.
"""

from __future__ import annotations

import streamlit as st

from gpsl.errors import GpslError, InputError
from gpsl.tags import entity_types, scheme_of, span_labels
from pages import _keys, _ui
from pages import _view as sup

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
ACTION_KEYS = {"x": "clear", "u": "undo", "n": "next", "p": "prev", "s": "skip",
               "a": "accept"}
CLICK_ACTIONS = ("clear", "undo", "next", "prev", "skip", "accept")

store, project = _ui.setup()
project = _ui.require_project(project)
pid = project["id"]
annotator = _ui.annotator()
labels = project["labels"]
scheme = scheme_of(labels)
types = entity_types(labels) if scheme else []
choices = sup.span_choices(types) if scheme else []
hints = sup.key_hints(labels)
st.session_state.setdefault("queue_order", "uncertainty")
st.session_state.setdefault("accept_thr", 0.9)
state = st.session_state.setdefault(f"annotate_{pid}", {
    "current": None, "back": [], "fwd": [], "seen": set(), "sel": None, "sel_sid": None})
state.setdefault("anchor", None)


# ----------------------------------------------------------------------------- navigation


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
    state["anchor"] = None


def next_sentence() -> None:
    state["anchor"] = None
    if state["fwd"]:
        state["back"].append(state["current"])
        state["current"] = state["fwd"].pop()
        return
    sid = sup.next_sentence(store, pid, _order(), annotator, state["current"], state["seen"])
    if sid is None or sid == state["current"]:
        _ui.flash("info", "No other sentence left in the queue.")
        return
    go_to(sid)


def previous_sentence() -> None:
    state["anchor"] = None
    if not state["back"]:
        _ui.flash("info", "This is the first sentence of this session.")
        return
    state["fwd"].append(state["current"])
    state["current"] = state["back"].pop()


def skip() -> None:
    if state["current"] is not None:
        store.skip(state["current"], annotator)
        state["seen"].add(state["current"])
    next_sentence()


def active_views(sid: int) -> list[sup.TokenView]:
    """The view of a sentence under the active model (BIO-valid suggestions)."""
    version = store.active_model(pid)
    marginals = store.get_predictions(version["id"], [sid]).get(sid) if version else None
    return sup.sentence_view(store.get_sentence(sid), marginals,
                             version["classes"] if version else None, scheme)


def accept_suggestions() -> None:
    sid = state["current"]
    version = store.active_model(pid)
    if sid is None or version is None:
        _ui.flash("warning", "No model suggestions yet: train a model on the Train page.")
        return
    threshold = float(st.session_state.get("accept_thr", 0.9))
    changes = sup.accept_candidates(active_views(sid), threshold, labels)
    if not changes:
        _ui.flash("info", f"No unlabeled token has a suggestion with confidence ≥ {threshold:.2f}.")
        return
    store.set_labels(sid, changes, annotator, source="accepted")
    _ui.flash("info", f"Accepted {len(changes)} suggestion{'s' if len(changes) > 1 else ''} "
                      f"(confidence ≥ {threshold:.2f}).")


def undo() -> None:
    result = store.undo(pid, annotator)
    if result is None:
        _ui.flash("info", "Nothing to undo.")
        return
    go_to(result["sentence_id"])
    if result["changes"]:
        state["sel"], state["sel_sid"] = result["changes"][0]["token_index"], state["current"]
        state["anchor"] = None
    n = len(result["changes"])
    _ui.flash("info", f"Undid the last change ({n} token{'s' if n > 1 else ''}).")


# ----------------------------------------------------------------------------- events


class Batch:
    """Applies a list of events (keys, clicks) in order.  Label changes of one sentence
    are collected and written in one transaction (one undo step) when something else
    needs the store; a span is a step of its own, and when the list contains an undo,
    every label key is its own step (so the undo reverts exactly the last one)."""

    def __init__(self, events: list[dict]):
        self.events = events
        self.per_key = any(self.action(e)[0] == "undo" for e in events)
        self.buf: dict[int, str | None] = {}
        self.sid: int | None = None
        self.labels: list[str | None] | None = None

    # what an event asks for
    def action(self, e: dict) -> tuple[str, object]:
        kind = e.get("k")
        if kind == "pick":
            if e.get("type"):
                return "type", str(e["type"])
            return "label", str(e.get("label"))
        key = str(e.get("key") or "")
        shift = bool(e.get("shift"))
        if kind == "click":
            if key.startswith("tok_") and key[4:].isdigit():
                return ("extend_to" if shift else "select"), int(key[4:])
            if key.startswith("lab_") and key[4:].isdigit() and int(key[4:]) < len(labels):
                return "label", labels[int(key[4:])]
            if key.startswith("span_") and key[5:].isdigit() and int(key[5:]) < len(choices):
                return "type", choices[int(key[5:])][0]
            if key in ("tok_prev", "tok_next"):
                return "move", -1 if key == "tok_prev" else 1
            if key in CLICK_ACTIONS:
                return key, None
            return "none", None
        if kind != "key":
            return "none", None
        if key in ("ArrowLeft", "ArrowRight"):
            return ("extend" if shift else "move"), -1 if key == "ArrowLeft" else 1
        if key == "Escape":
            return "collapse", None
        if key in ACTION_KEYS:
            return ACTION_KEYS[key], None
        if key.isdigit():
            if self.span() is not None and scheme:
                kind_ = next((c for c, k in choices if k == key), None)
                return ("type", kind_) if kind_ else ("none", None)
            lab = next((lab for lab, k in hints.items() if k == key), None)
            return ("label", lab) if lab else ("none", None)
        return "none", None

    # the sentence being labeled
    def current_labels(self) -> list[str | None]:
        if self.sid != state["current"] or self.labels is None:
            self.flush()
            self.sid = state["current"]
            self.labels = list(store.get_sentence(self.sid)["labels"])
        return self.labels

    def ensure_selection(self) -> None:
        if state["sel_sid"] != state["current"] or state["sel"] is None:
            state["sel"] = sup.opening_token(active_views(state["current"]))
            state["sel_sid"], state["anchor"] = state["current"], None
        n = len(self.current_labels())
        state["sel"] = min(max(0, state["sel"]), n - 1)

    def span(self) -> tuple[int, int] | None:
        a = state.get("anchor")
        if a is None or state["sel_sid"] != state["current"] or a == state["sel"]:
            return None
        return min(a, state["sel"]), max(a, state["sel"])

    def write(self, changes: dict[int, str | None], own_step: bool) -> None:
        labs = self.current_labels()
        if own_step:
            self.flush()
        self.buf.update(changes)
        for t, lab in changes.items():
            labs[t] = lab
        if own_step or self.per_key:
            self.flush()

    def flush(self) -> None:
        if self.buf and self.sid is not None:
            buf, self.buf = self.buf, {}
            try:
                store.set_labels(self.sid, buf, annotator)
            except GpslError as exc:  # a bad label, or the store busy past its timeout
                _ui.flash("error", str(exc))
                self.labels = None  # read again: nothing of this step was written

    def invalidate(self) -> None:
        self.flush()
        self.labels = None

    # apply
    def run(self) -> None:
        try:
            for e in self.events:
                if state["current"] is None:
                    return
                self.apply(*self.action(e))
        finally:
            self.flush()

    def apply(self, what: str, arg) -> None:
        if what == "none":
            return
        if what in ("next", "prev", "skip", "undo", "accept"):
            self.invalidate()
            {"next": next_sentence, "prev": previous_sentence, "skip": skip, "undo": undo,
             "accept": accept_suggestions}[what]()
            return
        self.ensure_selection()
        n = len(self.current_labels())
        sel = state["sel"]
        if what == "select":
            if 0 <= int(arg) < n:
                state["sel"], state["anchor"] = int(arg), None
        elif what == "extend_to":
            if 0 <= int(arg) < n:
                state["anchor"] = sel if state["anchor"] is None else state["anchor"]
                state["sel"] = int(arg)
        elif what == "move":
            state["sel"], state["anchor"] = min(max(0, sel + int(arg)), n - 1), None
        elif what == "extend":
            state["anchor"] = sel if state["anchor"] is None else state["anchor"]
            state["sel"] = min(max(0, sel + int(arg)), n - 1)
        elif what == "collapse":
            state["anchor"] = None
        elif what in ("label", "clear", "type"):
            self.set_labels(what, arg)

    def set_labels(self, what: str, arg) -> None:
        span = self.span()
        lo, hi = span if span else (state["sel"], state["sel"])
        if what == "type":
            kind = str(arg)
            if not scheme or (kind != "O" and kind not in types):
                return
            new = span_labels(kind, hi - lo + 1, scheme)
            changes = {lo + i: lab for i, lab in enumerate(new)}
        else:
            lab = None if what == "clear" else arg
            if lab is not None and lab not in labels:
                raise InputError(f"{lab!r} is not in the project's label set",
                                 source="<label>")
            changes = {t: lab for t in range(lo, hi + 1)}
        self.write(changes, own_step=span is not None)
        state["anchor"] = None
        if what != "clear":  # move on to the next unlabeled token
            state["sel"] = sup.next_unlabeled(self.current_labels(), hi)
        state["sel_sid"] = state["current"]


@_ui.callback("Not saved")
def apply_events(events: list[dict]) -> None:
    Batch(events).run()


def click(key: str) -> dict:
    """The event a button's own callback applies (without the client-side queue)."""
    return {"k": "click", "key": key}


@_ui.callback("Cannot open the sentence")
def jump() -> None:
    raw = str(st.session_state.get("jump_to") or "").strip()
    if not raw:
        return
    first, last, n = store.sentence_numbers(pid)
    try:
        number = int(raw.lstrip("#"))
    except ValueError:
        _ui.flash("warning", f"“{raw}” is not a sentence number (this project has sentences "
                             f"{first}–{last}).")
        return
    hit = store.sentence_by_number(pid, number)
    if hit is None:
        _ui.flash("warning", f"There is no sentence {number}: this project's sentences are "
                             f"numbered {first}–{last}." if n else "This project has no "
                             "sentences.")
        return
    if hit["split"] != "train":
        _ui.flash("warning", f"Sentence {number} is held out (gold labels for the evaluation); "
                             "it is not annotated here.")
        return
    go_to(hit["sentence_id"])


def open_hit(sid: int) -> None:
    go_to(sid)


# ----------------------------------------------------------------------------- state

goto = st.session_state.pop("goto_sentence", None)  # from the Confidence page
if goto is not None:
    go_to(int(goto))
queued = _keys.new_events()
if queued and state["current"] is not None:
    apply_events(queued)
# first on the page (it keeps its place), after the events it acknowledges are applied
typeahead = [{"value": lab, "kind": "label",
              "text": lab + (f"  ({hints[lab]})" if lab in hints else "")} for lab in labels]
typeahead += [{"value": kind, "kind": "type", "text": f"{kind}: entity (span)"}
              for kind in types]
_keys.render(typeahead, exact=["tok_prev", "tok_next", *CLICK_ACTIONS],
             prefixes=["tok_", "lab_", "span_"])
sentence = store.get_sentence(state["current"]) if state["current"] is not None else None
if sentence is None or sentence["project_id"] != pid:
    state.update(current=None, back=[], fwd=[], anchor=None)
    first = sup.next_sentence(store, pid, _order(), annotator, None, state["seen"])
    if first is not None:
        go_to(first)
        sentence = store.get_sentence(first)

_ui.header("Annotate", "Pick a token, then its label. Unlabeled tokens may stay unlabeled: "
                       "the model learns from partial annotation.", project)
_ui.show_flash()

if sentence is None:
    st.success("Every training sentence is fully labeled.", icon=":material/task_alt:")
    st.page_link(_ui.PAGES["train"], label="Train a model", icon=":material/model_training:")
    st.page_link(_ui.PAGES["data"], label="Export the annotations", icon=":material/download:")
    st.stop()

sid = sentence["id"]
version = store.active_model(pid)
marginals = store.get_predictions(version["id"], [sid]).get(sid) if version else None
views = sup.sentence_view(sentence, marginals, version["classes"] if version else None, scheme)
if state["sel_sid"] != sid or state["sel"] is None or state["sel"] >= len(views):
    state["sel"], state["sel_sid"], state["anchor"] = sup.opening_token(views), sid, None
sel = state["sel"]
anchor = state["anchor"] if state["anchor"] is not None and state["anchor"] < len(views) else None
span = (min(anchor, sel), max(anchor, sel)) if anchor is not None and anchor != sel else None
colors = sup.label_colors(labels)
n_labeled = sum(v.label is not None for v in views)
flags = sup.flagged_tokens(views, scheme)

# ----------------------------------------------------------------------------- layout

main, side = st.columns([4, 1.25], gap="medium")
with main:
    top = st.columns([3, 2], vertical_alignment="bottom")
    with top[0]:
        where = f"Sentence {sentence['position'] + 1}"
        if sentence.get("doc"):
            where += f" · {sup.md_escape(sentence['doc'])}"
            if sentence.get("line"):
                where += f" line {sentence['line']}"
        model_note = (f"suggestions from model v{version['id']}" if version
                      else "no model yet: suggestions appear after training")
        st.markdown(f"**{where}** · {n_labeled} of {len(views)} tokens labeled · "
                    f"{model_note}")
    with top[1]:
        with st.container(horizontal=True, vertical_alignment="bottom", gap="small"):
            with st.popover("Guidelines", icon=":material/menu_book:"):
                guidelines = str(project.get("guidelines") or "").strip()
                if guidelines:
                    st.markdown(sup.safe_markdown(guidelines))
                else:
                    st.caption("No guidelines yet.")
            st.segmented_control("Queue", list(ORDERS), format_func=ORDERS.get,
                                 key="queue_order", required=True,
                                 help="Which sentence Next brings: the one with the least "
                                      "confident unlabeled token under the active model, or "
                                      "file order.",
                                 label_visibility="collapsed", width="stretch")

    st.html(sup.chip_css(views, colors, sel, span=span, flagged=flags)
            + sup.label_button_css(labels, colors))
    with st.container(horizontal=True, gap="small", key="chips"):
        for v in views:
            st.button(sup.token_button_label(v), key=f"tok_{v.index}",
                      help=sup.token_help(v), on_click=apply_events,
                      args=([click(f"tok_{v.index}")],))
    st.html(sup.legend_html())
    if flags:
        st.caption(":red[**Breaks " + scheme + ":**] " + " · ".join(
            f"token {t + 1}: {sup.md_escape(why)}" for t, why in sorted(flags.items())))

    current = views[sel]
    if span:
        text = " ".join(v.text for v in views[span[0]:span[1] + 1])
        detail = (f"**{sup.md_escape(text)}** · tokens {span[0] + 1}–{span[1] + 1} of "
                  f"{len(views)} · " + ("pick the entity type below (keys 1 … 9, 0 = O)"
                                        if scheme else "pick a label for every token"))
    else:
        detail = f"**{sup.md_escape(current.text)}** · token {sel + 1} of {len(views)}"
        if current.label is not None:
            who = "accepted suggestion" if current.source == "accepted" else "labeled"
            detail += f" · {who} {sup.code_span(current.label)}"
        elif not current.top:
            detail += " · unlabeled"
        if current.top:
            detail += " · model: " + ", ".join(f"{sup.md_escape(lab)} {p:.2f}"
                                               for lab, p in current.top)
    with st.container(horizontal=True, gap="small", vertical_alignment="center",
                      key="selection"):
        st.button("", icon=":material/chevron_left:", on_click=apply_events,
                  args=([click("tok_prev")],), key="tok_prev",
                  help="Select the previous token.", disabled=sel == 0 and not span)
        st.button("", icon=":material/chevron_right:", on_click=apply_events,
                  args=([click("tok_next")],), key="tok_next", help="Select the next token.",
                  disabled=sel == len(views) - 1 and not span)
        st.markdown(detail)

    if scheme:
        with st.container(horizontal=True, gap="small", vertical_alignment="center",
                          key="spans"):
            st.caption("Entity" if not span else "Span as", width="content")
            for k, (kind, key) in enumerate(choices):
                name = "O (outside)" if kind == "O" else sup.md_escape(kind)
                st.button(f"{name} :gray[{key}]" if key else name, key=f"span_{k}",
                          on_click=apply_events, args=([click(f"span_{k}")],),
                          help=f"Label the selection as one {kind} entity "
                               f"({' '.join(span_labels(kind, 2, scheme))} …) in one step."
                          if kind != "O" else "Label every selected token O.")

    with st.container(horizontal=True, gap="small", key="labels"):
        for i, lab in enumerate(labels):
            key = hints.get(lab)
            st.button(f"{sup.md_escape(lab)} :gray[{key}]" if key else sup.md_escape(lab),
                      key=f"lab_{i}", on_click=apply_events, args=([click(f"lab_{i}")],),
                      help=None if key else "Type / and part of the label to set it "
                                            "from the keyboard.",
                      type="primary" if lab == current.label and not span else "secondary")
        st.button("Clear label", key="clear", icon=":material/backspace:",
                  on_click=apply_events, args=([click("clear")],),
                  disabled=current.label is None and not span)

    st.space("xsmall")
    with st.container(horizontal=True, gap="small", vertical_alignment="bottom",
                      key="actions"):
        st.button("Previous", icon=":material/arrow_back:", on_click=apply_events,
                  args=([click("prev")],), key="prev")
        st.button("Next", icon=":material/arrow_forward:", on_click=apply_events,
                  args=([click("next")],), key="next", type="primary")
        st.button("Skip", icon=":material/redo:", on_click=apply_events,
                  args=([click("skip")],), key="skip",
                  help="Move this sentence to the end of your queue.")
        st.button("Undo", icon=":material/undo:", on_click=apply_events,
                  args=([click("undo")],), key="undo",
                  help="Revert your last change (a whole accept or span is one change).")
        st.space("stretch")
        st.slider("Accept threshold", 0.5, 1.0, step=0.01, key="accept_thr", width=220,
                  help="Suggestions at or above this confidence are accepted by the button.",
                  disabled=version is None)
        n_acc = len(sup.accept_candidates(views, float(st.session_state["accept_thr"]), labels))
        st.button(f"Accept {n_acc} suggestion{'s' if n_acc != 1 else ''}", key="accept",
                  icon=":material/done_all:", on_click=apply_events,
                  args=([click("accept")],), disabled=version is None or n_acc == 0,
                  help="Label the unlabeled tokens whose suggestion reaches the threshold "
                       "(stored as “accepted”, not as your own label)"
                       + ("; the suggestions are BIO-valid." if scheme else "."))

    # lazy expanders (on_change="rerun"): their content runs only while they are open
    shortcuts = st.expander("Keyboard shortcuts", icon=":material/keyboard:",
                            key="help_keys", on_change="rerun")
    if shortcuts.open:
        shortcuts.markdown("\n".join(f"- **{key}** — {what}" for key, what in SHORTCUTS))
        shortcuts.caption("Keys work while the focus is not in a text field; keys pressed "
                          "faster than the page updates are queued and applied in order.")

    goto_box = st.expander("Go to a sentence", icon=":material/pin_drop:", key="goto_open",
                           on_change="rerun")
    if goto_box.open:
        with goto_box, st.container(horizontal=True, vertical_alignment="bottom"):
            st.text_input("Sentence number (as shown above the tokens)", key="jump_to",
                          width=280, placeholder=f"e.g. {sentence['position'] + 1}")
            st.button("Open", on_click=jump, key="jump")

    find_box = st.expander("Find sentences", icon=":material/search:", key="find_open",
                           on_change="rerun")
    if find_box.open:
        with find_box, _ui.guard("Cannot search"):
            cols = st.columns([3, 2, 2, 2])
            query = cols[0].text_input("Text", key="find_text",
                                       placeholder="words of the sentence")
            label_filter = cols[1].selectbox("Label", labels, index=None, key="find_label",
                                             placeholder="any label")
            people = store.annotators(pid)  # the expander is lazy: read only while open
            who_filter = cols[2].selectbox("Annotator", people, index=None, key="find_who",
                                           placeholder="anyone")
            status_filter = cols[3].selectbox("Status", ("unlabeled", "partial", "complete"),
                                              index=None, key="find_status",
                                              placeholder="any status")
            conflicts = st.toggle("Only sentences with conflicting votes", key="find_conflicts",
                                  help="A token whose votes from different annotators "
                                       "disagree.")
            if query.strip() or label_filter or who_filter or status_filter or conflicts:
                found = store.find_sentences(pid, text_query=query, label=label_filter,
                                             annotator=who_filter, status=status_filter,
                                             conflicts=conflicts, limit=15)
                st.caption(f"{found['total']:,} sentence{'s' if found['total'] != 1 else ''}"
                           + (" (the first 15)" if found["total"] > 15 else ""))
                for hit in found["hits"]:
                    with st.container(horizontal=True, vertical_alignment="center", gap="small"):
                        st.button(f"Sentence {hit['number']}",
                                  key=f"find_open_{hit['sentence_id']}", on_click=open_hit,
                                  args=(hit["sentence_id"],), type="tertiary")
                        st.markdown(f"{hit['n_labeled']}/{hit['n_tokens']} · "
                                    + sup.marked_text(hit["tokens"], hit["marks"]))

with side:
    with _ui.guard("Cannot read the history"):
        panel = [f"**Token history** · {sup.md_escape(current.text)}", ""]
        if current.votes:
            panel += ["Votes now: " + ", ".join(
                f"{sup.md_escape(who)} {sup.code_span(lab) if lab else 'no label'}"
                for who, lab in current.votes.items()), ""]
        rows = store.token_history(sid, sel, limit=20)
        panel += [f"- {line}" for line in sup.history_lines(rows)] or [
            ":gray[No change recorded for this token.]"]
        st.markdown("\n".join(panel))

