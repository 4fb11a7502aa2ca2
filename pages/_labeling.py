"""The Annotate page's actions and the events of its keyboard queue, without layout: a
module (compiled once) rather than page code (run again on every rerun).

:class:`Labeling` holds one session's context (store, project, annotator, the page state
in ``st.session_state``) and the actions of the page's buttons and keys; :class:`Batch`
applies a list of events (keys, clicks, type-ahead picks) in the order they happened.
"""

from __future__ import annotations

import streamlit as st

from gpsl.annotation import (
    STORE_ERRORS,
    AccessDenied,
    GpslError,
    InputError,
    Project,
    SentenceView,
    accept_candidates,
    next_unlabeled,
)
from pages import _ui
from pages._chips import key_hints, span_choices

ACTION_KEYS = {"x": "clear", "u": "undo", "n": "next", "p": "prev", "s": "skip",
               "a": "accept"}
CLICK_ACTIONS = ("clear", "undo", "next", "prev", "skip", "accept")
ACTION_ERRORS = {"next": "Cannot open the next sentence", "prev": "Cannot go back",
                 "skip": "Sentence not skipped", "undo": "Nothing undone",
                 "accept": "Suggestions not accepted"}


class Labeling:
    """The Annotate page's context and actions for one project and annotator."""

    def __init__(self, store, project: Project, annotator: str):
        self.store = store
        self.project = project
        self.pid = project.id
        self.annotator = annotator
        who = _ui.identity()
        self.team = who is not None and not who.local  # a team member: routed, leased
        self.lead = who is None or who.is_lead
        self.blind = project.hides_others  # blind mode, or overlap: others' votes hidden
        self.labels = list(project.labels)
        self.span_scheme = store.reports.scheme(self.labels)
        self.scheme = self.span_scheme.name
        self.types = list(self.span_scheme.types)
        self.choices = span_choices(self.types) if self.scheme else []
        # one meaning per key: with a span scheme the digits are the entity types (the
        # labels themselves by click or type-ahead), otherwise the labels
        self.hints = {} if self.scheme else key_hints(self.labels)
        self.state = st.session_state.setdefault(f"annotate_{self.pid}", {
            "current": None, "back": [], "fwd": [], "seen": set(), "sel": None,
            "sel_sid": None})
        self.state.setdefault("anchor", None)
        self.say = _ui.flash  # how an action's message is shown (the widget: one line)

    def order(self) -> str:
        return st.session_state.get("queue_order") or "uncertainty"


    def go_to(self, sid: int | None) -> None:
        if sid is None or sid == self.state["current"]:
            return
        if self.state["current"] is not None:
            self.state["back"].append(self.state["current"])
        self.state["fwd"].clear()
        self.state["current"] = sid
        self.state["seen"].add(sid)
        self.state["anchor"] = None


    def next_sentence(self) -> None:
        self.state["anchor"] = None
        if self.state["fwd"]:
            self.state["back"].append(self.state["current"])
            self.state["current"] = self.state["fwd"].pop()
            return
        sid = self.store.next_to_annotate(self.pid, self.annotator, self.order(),
                                          self.state["current"], self.state["seen"],
                                          team=self.team)
        if sid is None or sid == self.state["current"]:
            self.say("info", "No other sentence left in the queue.")
            return
        self.go_to(sid)


    def previous_sentence(self) -> None:
        self.state["anchor"] = None
        if not self.state["back"]:
            self.say("info", "This is the first sentence of this session.")
            return
        self.state["fwd"].append(self.state["current"])
        self.state["current"] = self.state["back"].pop()


    def skip(self) -> None:
        if self.state["current"] is not None:
            self.store.skip(self.state["current"], self.annotator)
            self.state["seen"].add(self.state["current"])
        self.next_sentence()


    def view(self, sid: int) -> SentenceView | None:
        """The sentence as this annotator sees it under the active model (None: gone, or in
        a project this person may not open: the back end refuses it)."""
        try:
            return self.store.reports.sentence(sid, self.annotator, self.labels)
        except AccessDenied:
            return None


    def accept_suggestions(self) -> None:
        sid = self.state["current"]
        if sid is None or self.store.reports.active_version(self.pid) is None:
            self.say("warning", "No model suggestions yet: train a model on the Train page.")
            return
        threshold = float(st.session_state.get("accept_thr", 0.9))
        changes = accept_candidates(self.view(sid).tokens, threshold, self.labels)
        if not changes:
            self.say("info", "No unlabeled token has a suggestion with confidence ≥ "
                              f"{threshold:.2f}.")
            return
        self.store.set_labels(sid, changes, self.annotator, source="accepted")
        self.say("info", f"Accepted {len(changes)} suggestion{'s' if len(changes) > 1 else ''} "
                          f"(confidence ≥ {threshold:.2f}).")


    def undo(self, batch: str | None = None) -> None:
        """Revert this person's last step (``batch``: the widget's event id, done once)."""
        result = self.store.undo(self.pid, self.annotator, batch=batch)
        if result is None:
            self.say("info", "Nothing to undo.")
            return
        self.go_to(result["sentence_id"])
        if result["changes"]:
            self.state["sel"] = result["changes"][0]["token_index"]
            self.state["sel_sid"] = self.state["current"]
            self.state["anchor"] = None
        n = len(result["changes"])
        self.say("info", f"Undid the last change ({n} token{'s' if n > 1 else ''}).")

    def apply_events(self, events: list[dict]) -> None:
        """Apply events in order (the keyboard queue's, or one button's own)."""
        try:
            Batch(self, events).run()
        except STORE_ERRORS as exc:
            _ui.flash("error", _ui.error_text(exc, "Not saved"))

    def jump(self) -> None:
        """Open the sentence whose shown number is in the "Go to" field."""
        raw = str(st.session_state.get("jump_to") or "").strip()
        if not raw:
            return
        try:
            first, last, n = self.store.sentence_numbers(self.pid)
            try:
                number = int(raw.lstrip("#"))
            except ValueError:
                _ui.flash("warning", f"“{raw}” is not a sentence number (this project has "
                                     f"sentences {first}–{last}).")
                return
            hit = self.store.sentence_by_number(self.pid, number)
        except STORE_ERRORS as exc:
            _ui.flash("error", _ui.error_text(exc, "Cannot open the sentence"))
            return
        if hit is None:
            _ui.flash("warning", f"There is no sentence {number}: this project's sentences "
                                 f"are numbered {first}–{last}." if n else
                                 "This project has no sentences.")
            return
        if hit["split"] != "train":
            _ui.flash("warning", f"Sentence {number} is held out (gold labels for the "
                                 "evaluation); it is not annotated here.")
            return
        self.go_to(hit["sentence_id"])


class Batch:
    """Applies a list of events (keys, clicks) in order.  Label changes of one sentence
    are collected and written in one transaction when something else needs the store, each
    key press (a label, a span, a clear) its own undo step, so Undo reverts exactly one.
    The cursor moves over the annotator's own copy of the sentence (their votes, else the
    file's labels; :meth:`Reports.own_labels`), read once per batch: what other people do
    to the sentence meanwhile never moves it, so every key lands where this person's cursor
    was."""

    def __init__(self, ctx: Labeling, events: list[dict]):
        self.ctx = ctx
        self.state, self.store, self.annotator = ctx.state, ctx.store, ctx.annotator
        self.events = events
        self.steps: list[dict[int, str | None]] = []
        self.times: list[float | None] = []  # when each step's key was pressed (browser ms)
        self.t: float | None = None  # the time of the event being applied
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
            if key.startswith("lab_") and key[4:].isdigit() and int(key[4:]) < len(self.ctx.labels):
                return "label", self.ctx.labels[int(key[4:])]
            choices = self.ctx.choices
            if key.startswith("span_") and key[5:].isdigit() and int(key[5:]) < len(choices):
                return "type", self.ctx.choices[int(key[5:])][0]
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
            if self.ctx.scheme:  # the entity types: one token or a span
                kind_ = next((c for c, k in self.ctx.choices if k == key), None)
                return ("type", kind_) if kind_ else ("none", None)
            lab = next((lab for lab, k in self.ctx.hints.items() if k == key), None)
            return ("label", lab) if lab else ("none", None)
        return "none", None

    # the sentence being labeled: the annotator's own copy
    def current_labels(self) -> list[str | None]:
        if self.sid != self.state["current"] or self.labels is None:
            self.flush()
            self.sid = self.state["current"]
            self.labels = self.store.reports.own_labels(self.sid, self.annotator)
        return self.labels

    def ensure_selection(self) -> None:
        if self.state["sel_sid"] != self.state["current"] or self.state["sel"] is None:
            self.state["sel"] = self.ctx.view(self.state["current"]).opening
            self.state["sel_sid"], self.state["anchor"] = self.state["current"], None
        n = len(self.current_labels())
        self.state["sel"] = min(max(0, self.state["sel"]), n - 1)

    def span(self) -> tuple[int, int] | None:
        a = self.state.get("anchor")
        if a is None or self.state["sel_sid"] != self.state["current"] or a == self.state["sel"]:
            return None
        return min(a, self.state["sel"]), max(a, self.state["sel"])

    def write(self, changes: dict[int, str | None]) -> None:
        """One key press's changes: an undo step of its own, written with the others of
        the batch in one transaction."""
        labs = self.current_labels()
        self.steps.append(dict(changes))
        self.times.append(self.t)
        for t, lab in changes.items():
            labs[t] = lab

    def ages(self, times: list[float | None]) -> list[float]:
        """Seconds each step's key was pressed before the last one of the write (from the
        browser's clock, differences only): the steps' history times, which the speed
        figures read, are the presses' and not the write's."""
        known = [t for t in times if t is not None]
        last = max(known) if known else None
        return [0.0 if t is None or last is None else (last - t) / 1000.0 for t in times]

    def flush(self) -> None:
        if self.steps and self.sid is not None:
            steps, self.steps = self.steps, []
            times, self.times = self.times, []
            try:
                self.store.set_label_steps(self.sid, steps, self.annotator,
                                           ages=self.ages(times))
            except GpslError as exc:  # a bad label, or the store busy past its timeout
                _ui.flash("error", str(exc))
                self.labels = None  # read again: nothing of these steps was written

    def invalidate(self) -> None:
        self.flush()
        self.labels = None

    # apply
    def run(self) -> None:
        try:
            for e in self.events:
                if self.state["current"] is None:
                    return
                t = e.get("t")
                self.t = float(t) if isinstance(t, (int, float)) and not isinstance(
                    t, bool) else None
                self.apply(*self.action(e))
        finally:
            self.flush()

    def apply(self, what: str, arg) -> None:
        if what == "none":
            return
        if what in ACTION_ERRORS:
            self.invalidate()
            action = {"next": self.ctx.next_sentence, "prev": self.ctx.previous_sentence,
                      "skip": self.ctx.skip, "undo": self.ctx.undo,
                      "accept": self.ctx.accept_suggestions}[what]
            try:
                action()
            except STORE_ERRORS as exc:
                _ui.flash("error", _ui.error_text(exc, ACTION_ERRORS[what]))
            return
        self.ensure_selection()
        n = len(self.current_labels())
        sel = self.state["sel"]
        if what == "select":
            if 0 <= int(arg) < n:
                self.state["sel"], self.state["anchor"] = int(arg), None
        elif what == "extend_to":
            if 0 <= int(arg) < n:
                self.state["anchor"] = sel if self.state["anchor"] is None else self.state["anchor"]
                self.state["sel"] = int(arg)
        elif what == "move":
            self.state["sel"], self.state["anchor"] = min(max(0, sel + int(arg)), n - 1), None
        elif what == "extend":
            self.state["anchor"] = sel if self.state["anchor"] is None else self.state["anchor"]
            self.state["sel"] = min(max(0, sel + int(arg)), n - 1)
        elif what == "collapse":
            self.state["anchor"] = None
        elif what in ("label", "clear", "type"):
            self.set_labels(what, arg)

    def set_labels(self, what: str, arg) -> None:
        span = self.span()
        lo, hi = span if span else (self.state["sel"], self.state["sel"])
        if what == "type":
            kind = str(arg)
            if not self.ctx.scheme or (kind != "O" and kind not in self.ctx.types):
                return
            new = self.ctx.span_scheme.span(kind, hi - lo + 1)
            changes = {lo + i: lab for i, lab in enumerate(new)}
        else:
            lab = None if what == "clear" else arg
            if lab is not None and lab not in self.ctx.labels:
                raise InputError(f"{lab!r} is not in the project's label set",
                                 source="<label>")
            changes = {t: lab for t in range(lo, hi + 1)}
        self.write(changes)
        self.state["anchor"] = None
        if what == "clear":  # withdraws this person's votes: a file's label may show again
            self.invalidate()
        else:  # move on to the next token unlabeled in this person's copy
            self.state["sel"] = next_unlabeled(self.current_labels(), hi)
        self.state["sel_sid"] = self.state["current"]
