"""The Annotate page's labelling widget, server side: a Streamlit v2 component made from the
local folder ``pages/labeler`` (one JS and one CSS file, no build step, no network).

The widget owns the token chips, the cursor, the span selection, the labels, the
suggestions' shading and the keys, and paints every key at once in the browser.  What a key
changes reaches the server as an *event* ``{seq, sid, op, ...}`` of the browser's queue:

* ``op="set"``: ``ch = {token: label or None}`` on sentence ``sid`` (a key, a span, a
  click, a clear), one undo step;
* ``"undo"``, ``"next"`` / ``"skip"`` (``to``: the sentence the browser showed at once, from
  :func:`payload`'s ``next``), ``"prev"``, ``"accept"``.

:func:`apply` applies the events not applied yet, in order, **exactly once**: the session
remembers the last ``seq`` per browser queue (``client``), and each label step is written
with the history batch id ``w:<client>:<seq>``, which the store writes at most once
(:meth:`Store.set_label_steps` ``batches``), so a queue sent again after a reload or a
dropped connection changes nothing twice.  An event the server refuses (the person may no
longer label it, the sentence is stale, a label left the label set) is acknowledged with
a one-line reason (``refused``): the browser drops it and shows the reason.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from gpsl.annotation import STORE_ERRORS, SentenceView, accept_candidates
from pages import _ui
from pages._chips import label_colors
from pages._labeling import Labeling

KEY = "labeler"
ACKS = "labeler_acks"  # client -> the last seq applied (this session)
REFUSED = "labeler_refused"  # the latest refusals: {client, seq, why}
NOTE = "labeler_note"  # the latest one-line note for the widget: {client, seq, text, sid, sel}
CURSOR = "labeler_cursor"  # {sid, t}: the widget's cursor when it last sent
LIVE = "labeler_live"  # the widget has loaded in this session: the buttons are not needed
MAX_EVENTS = 200  # the most events taken from one message
_HERE = Path(__file__).resolve().parent / "labeler"
_component = st.components.v2.component(
    "gpsl_labeler", js=(_HERE / "widget.js").read_text(encoding="utf-8"),
    css=(_HERE / "widget.css").read_text(encoding="utf-8"), isolate_styles=False)


def live() -> bool:
    return bool(st.session_state.get(LIVE))


def received() -> tuple[str, list[dict]]:
    """The browser queue's id and its events not applied yet in this session, in order."""
    value = st.session_state.get(KEY)
    value = value.get("events") if hasattr(value, "get") else None
    if not isinstance(value, dict):
        return "", []
    client = str(value.get("client") or "")[:64]
    if not client:
        return "", []
    st.session_state[LIVE] = True
    cursor = value.get("cursor")
    st.session_state[CURSOR] = cursor if isinstance(cursor, dict) else None
    done = int(st.session_state.setdefault(ACKS, {}).get(client, 0))
    events = [e for e in value.get("events") or [] if isinstance(e, dict)
              and isinstance(e.get("seq"), int) and not isinstance(e.get("seq"), bool)
              and e["seq"] > done][:MAX_EVENTS]
    return client, sorted(events, key=lambda e: e["seq"])


def _sid(e: dict) -> int | None:
    sid = e.get("sid")
    return sid if isinstance(sid, int) and not isinstance(sid, bool) else None


class Events:
    """Applies one message's events for ``page`` (see the module's docstring)."""

    def __init__(self, page: Labeling, client: str):
        self.page, self.client = page, client
        self.acks = st.session_state.setdefault(ACKS, {})
        self.group: list[dict] = []  # consecutive label steps of one sentence
        page.say = self.say
        self.seq = 0

    def say(self, kind: str, text: str) -> None:
        """A message of an action: one line in the widget, not a toast that outlives it."""
        st.session_state[NOTE] = {"client": self.client, "seq": self.seq, "text": text,
                                  "sid": self.page.state["current"], "sel": None}

    def refuse(self, events: list[dict], why: str) -> None:
        out = st.session_state.setdefault(REFUSED, [])
        out.extend({"client": self.client, "seq": e["seq"], "why": why} for e in events)
        del out[:-20]

    def run(self, events: list[dict]) -> None:
        try:
            for e in events:
                self.seq = e["seq"]
                if e.get("op") == "set":
                    if self.group and _sid(self.group[0]) != _sid(e):
                        self.flush()
                    self.group.append(e)
                    continue
                self.flush()
                self.other(e)
                self.acks[self.client] = e["seq"]
        finally:
            self.flush()

    def steps(self, events: list[dict]) -> tuple[list[dict], list[dict]]:
        """The events' label steps that are valid now, and the events refused."""
        n = len(self.page.view(_sid(events[0])).tokens)
        ok, bad = [], []
        for e in events:
            ch = e.get("ch")
            try:
                step = {int(t): (None if lab is None else str(lab)) for t, lab in ch.items()}
            except (AttributeError, TypeError, ValueError):
                bad.append((e, "an unreadable change"))
                continue
            wrong = [lab for lab in step.values() if lab is not None
                     and lab not in self.page.labels]
            if wrong:
                bad.append((e, f"{wrong[0]!r} is no longer in the project's label set"))
            elif any(not 0 <= t < n for t in step):
                bad.append((e, "a token this sentence does not have"))
            else:
                ok.append((e, step))
        for e, why in bad:
            self.refuse([e], why)
        return ok, [e for e, _ in bad]

    def flush(self) -> None:
        events, self.group = self.group, []
        if not events:
            return
        sid, page = _sid(events[0]), self.page
        view = page.view(sid) if sid is not None else None
        if view is None or view.project_id != page.pid:
            self.refuse(events, "this sentence is no longer open to you")
        elif page.team and sid != page.state["current"]:
            self.refuse(events, "stale sentence: the queue has moved you to another one")
        else:
            ok, _ = self.steps(events)
            if ok:
                times = [e.get("at") for e, _ in ok]
                known = [t for t in times if isinstance(t, (int, float))]
                last = max(known) if known else 0
                try:
                    page.store.set_label_steps(
                        sid, [s for _, s in ok], page.annotator,
                        ages=[(last - t) / 1000.0 if isinstance(t, (int, float)) else 0.0
                              for t in times],
                        batches=[f"w:{self.client}:{e['seq']}" for e, _ in ok])
                except STORE_ERRORS as exc:
                    self.refuse([e for e, _ in ok], _ui.error_text(exc, "not saved"))
        self.acks[self.client] = events[-1]["seq"]

    def other(self, e: dict) -> None:
        page, op = self.page, e.get("op")
        if op == "undo":
            page.undo(batch=f"w:{self.client}:{e['seq']}")
            note = st.session_state.get(NOTE)
            if note and note["seq"] == e["seq"] and page.state["sel_sid"] == note["sid"]:
                note["sel"] = page.state["sel"]
            return
        if _sid(e) != page.state["current"]:
            return  # a move from a sentence this session has left already: done
        try:
            if op in ("next", "skip"):
                (page.skip if op == "skip" else page.next_sentence)()
                to = e.get("to")
                if to is not None and page.state["current"] != to:
                    self.say("info", "The queue has changed: this is the sentence it gives "
                                     "you now.")
            elif op == "prev":
                page.previous_sentence()
            elif op == "accept":
                page.accept_suggestions()
        except STORE_ERRORS as exc:
            self.refuse([e], _ui.error_text(exc, "not done"))


def apply(page: Labeling) -> bool:
    """Apply the events the widget sent that this session has not applied yet (True: some)."""
    client, events = received()
    done = bool(events) and page.state["current"] is not None
    if done:
        Events(page, client).run(events)
    cursor, state = st.session_state.get(CURSOR) or {}, page.state
    t = cursor.get("t")
    if cursor.get("sid") == state["current"] is not None and isinstance(t, int) and t >= 0:
        state["sel"], state["sel_sid"], state["anchor"] = t, state["current"], None
    return done


def tokens(sentence: SentenceView) -> list[dict]:
    flags = sentence.flagged
    return [{"x": v.text, "l": v.label, "s": v.source, "m": v.mine, "o": v.own,
             "w": v.annotator, "g": v.suggestion if v.label is None else None,
             "c": v.confidence, "top": [[lab, round(p, 3)] for lab, p in v.top],
             "f": v.index in flags} for v in sentence.tokens]


def where(sentence: SentenceView) -> str:
    text = f"Sentence {sentence.position + 1}"
    if sentence.doc:
        text += f" · {sentence.doc}" + (f" line {sentence.line}" if sentence.line else "")
    return text


def upcoming(page: Labeling, sid: int) -> SentenceView | None:
    """The sentence Next will open, read while this one is labeled (it leases nothing)."""
    state = page.state
    try:
        if state["fwd"]:
            nxt = state["fwd"][-1]
        elif page.team:
            seen = state["seen"] | {sid}
            nxt = next((s for s in page.store.queue(page.pid, page.order(), page.annotator,
                                                    limit=50) if s not in seen), None)
        else:
            nxt = page.store.next_to_annotate(page.pid, page.annotator, page.order(), sid,
                                              state["seen"])
    except STORE_ERRORS:
        return None
    return page.view(nxt) if nxt is not None and nxt != sid else None


def payload(page: Labeling, sentence: SentenceView, threshold: float) -> dict:
    """What the widget draws: this sentence, the next one, the labels and keys, and the
    acknowledgements and refusals of its events."""
    nxt = upcoming(page, sentence.id)
    acc = accept_candidates(sentence.tokens, threshold, page.labels)
    options = [{"value": lab, "kind": "label",
                "text": lab + (f"  ({page.hints[lab]})" if lab in page.hints else "")}
               for lab in page.labels]
    options += [{"value": kind, "kind": "type",
                 "text": f"{kind}: entity (span)" + (f"  ({key})" if key else "")}
                for kind, key in page.choices if kind != "O"]
    spans = {}
    for kind in page.types:
        one, three = page.span_scheme.span(kind, 1), page.span_scheme.span(kind, 3)
        spans[kind] = [one[0], *three]
    return {
        "scope": f"{page.annotator}:{page.pid}", "live": live(),
        "sid": sentence.id, "where": where(sentence), "tokens": tokens(sentence),
        "opening": sentence.opening,
        "next": None if nxt is None else {"sid": nxt.id, "where": where(nxt),
                                          "tokens": tokens(nxt), "opening": nxt.opening},
        "labels": [{"v": lab, "k": page.hints.get(lab)} for lab in page.labels],
        "types": [{"v": kind, "k": key} for kind, key in page.choices],
        "scheme": page.scheme or "", "spans": spans, "colors": label_colors(page.labels),
        "options": options, "model": sentence.version is not None, "n_accept": len(acc),
        "ack": dict(st.session_state.get(ACKS, {})),
        "refused": list(st.session_state.get(REFUSED, [])),
        "note": st.session_state.get(NOTE),
    }


def render(page: Labeling, sentence: SentenceView, threshold: float) -> None:
    _component(key=KEY, data=payload(page, sentence, threshold),
               on_events_change=lambda: None)
