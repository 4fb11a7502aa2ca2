"""The Annotate page's keyboard queue, spans, BIO checks, go-to, search, guidelines and
token history, with AppTest (the browser side of the keyboard is in
test_browser_annotate.py).  Key events are given to the page as the keyboard component
(pages/_keys.py) sends them: ``{"epoch", "events": [{"n", "k", ...}]}``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

from streamlit.testing.v1 import AppTest  # noqa: E402

from gpsl.annotation import Store  # noqa: E402
from pages import (  # noqa: E402
    _chips,
    _format,
    _keys,  # noqa: E402
    _text,
)
from tests.support.helpers import BL, BP, IP, OUT, app_store_env  # noqa: E402
from tests.support.helpers import tiny_store as tiny_project  # noqa: E402
from tests.support.limits import limit  # noqa: E402


@pytest.fixture
def db(tmp_path, monkeypatch) -> Path:
    return app_store_env(tmp_path, monkeypatch)


def app(goto: int | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(30)).run()
    if goto is not None:
        at.session_state["goto_sentence"] = goto
    at.switch_page("pages/annotate.py").run()
    assert not at.exception, at.exception
    return at


def page_state(at: AppTest, pid: int) -> dict:
    return at.session_state[f"annotate_{pid}"]


def send(at: AppTest, *events: dict, epoch: str = "e1", first: int | None = None) -> None:
    """What the keyboard component sends: the events not yet acknowledged, numbered."""
    n0 = first if first is not None else getattr(at, "_n", 0) + 1
    at._n = n0 + len(events) - 1
    at.session_state[_keys.KEY] = {"epoch": epoch, "events": [
        {"n": n0 + i, **e} for i, e in enumerate(events)]}
    at.run()
    assert not at.exception, at.exception


def key(k: str, shift: bool = False) -> dict:
    return {"k": "key", "key": k, "shift": shift}


def batches(store: Store, sid: int) -> list[int]:
    """Sizes of the label steps of a sentence, oldest first (one step: one `at` time)."""
    sizes: dict[str, int] = {}
    for h in reversed(store.history(sid)):
        if h["action"] in ("set", "clear"):
            sizes[h["at"]] = sizes.get(h["at"], 0) + 1
    return list(sizes.values())


def test_keys_are_applied_in_order_once_and_in_one_transaction(db):
    store, pid = tiny_project(db)
    at = app()
    sid = page_state(at, pid)["current"]
    assert store.get_sentence(sid)["labels"] == [BP, None, None, BL, None]
    assert page_state(at, pid)["sel"] == 1  # no model: the first unlabeled token
    # BIO labels: the digits are the entity types (PER 1, LOC 2, O 0), on one token a
    # one-token entity
    send(at, key("1"), key("0"), key("0"))  # B-PER, O, then O on the next unlabeled
    assert store.get_sentence(sid)["labels"] == [BP, BP, OUT, BL, OUT]
    assert batches(store, sid) == [3]  # one transaction ...
    at.run()  # the same list again (the browser resends until acknowledged): no change
    send(at, key("1"), key("0"), key("0"), first=1)
    assert batches(store, sid) == [3]
    assert at.session_state[_keys.KEY]["events"][-1]["n"] == at.session_state[_keys.ACK]["seq"]
    # ... of three undo steps: one Undo is one key press (a new page load numbers from 1)
    send(at, key("u"), epoch="e2", first=1)
    assert store.get_sentence(sid)["labels"] == [BP, BP, OUT, BL, None]
    send(at, key("u"), epoch="e2")
    assert store.get_sentence(sid)["labels"] == [BP, BP, None, BL, None]
    assert page_state(at, pid)["sel"] == 2
    # Clear withdraws one's own vote ...
    send(at, key("ArrowLeft"), key("x"), epoch="e2")
    assert store.get_sentence(sid)["labels"] == [BP, None, None, BL, None]
    send(at, key("u"), epoch="e2")
    assert store.get_sentence(sid)["labels"] == [BP, BP, None, BL, None]
    # ... and is not a vote for "no label": the file's B-LOC is nobody's vote to clear
    send(at, key("ArrowRight"), key("ArrowRight"), key("x"), epoch="e2")
    assert page_state(at, pid)["sel"] == 3
    assert store.get_sentence(sid)["labels"] == [BP, BP, None, BL, None]
    assert at.button(key="clear").disabled
    # the last list stays in the session: another project must not apply it again
    other = store.create_project("other", [BP, OUT], sentences=[{"tokens": ["x", "y"]}])
    send(at, key("0"), epoch="e2")  # an O vote on token 4 outweighs the file's label
    assert store.get_sentence(sid)["labels"] == [BP, BP, None, OUT, None]
    assert at.button(key="clear").disabled  # the cursor moved on to token 5
    send(at, key("ArrowLeft"), epoch="e2")
    assert not at.button(key="clear").disabled  # token 4: a vote of one's own
    at.sidebar.selectbox(key="project_id").set_value(other).run()
    assert store.get_sentence(store.sentence_ids(other)[0])["labels"] == [None, None]
    at.sidebar.selectbox(key="project_id").set_value(pid).run()
    # navigation keys: next, previous, skip
    send(at, key("n"), epoch="e2")
    other = page_state(at, pid)["current"]
    assert other != sid
    send(at, key("p"), epoch="e2")
    assert page_state(at, pid)["current"] == sid


def test_keys_for_more_than_nine_labels_and_unknown_events(db):
    store = Store(db)
    labels = [f"{p}-{t}" for t in ("PER", "LOC", "ORG", "MISC", "DATE") for p in "BI"] + ["O"]
    pid = store.create_project("big", labels, sentences=[{"tokens": list("abcdef")}])
    hints = _chips.key_hints(labels)
    assert hints["O"] == "0" and hints["B-PER"] == "1" and "I-DATE" not in hints
    at = app()
    sid = page_state(at, pid)["current"]
    send(at, key("0"), {"k": "pick", "label": "I-DATE"}, {"k": "pick", "type": "MISC"},
         {"k": "bogus"}, key("q"), {"k": "click", "key": "lab_99"})
    assert store.get_sentence(sid)["labels"] == ["O", "I-DATE", "B-MISC", None, None, None]
    send(at, {"k": "pick", "label": "NOPE"})
    assert [e.value for e in at.error] == ["Not saved: 'NOPE' is not in the "
                                           "project's label set"]
    # the buttons of labels without a digit say how to reach them
    assert at.button(key=f"lab_{labels.index('I-DATE')}").help.startswith("Type /")


def test_a_span_is_one_step(db):
    store, pid = tiny_project(db)
    at = app()
    sid = page_state(at, pid)["current"]  # Anna went to Rome .
    send(at, {"k": "click", "key": "tok_1"}, key("ArrowRight", shift=True))
    assert any("tokens 2–3 of 5" in m.value for m in at.markdown)
    assert [b.label for b in at.button if (b.key or "").startswith("span_")] == [
        "PER :gray[1]", "LOC :gray[2]", "O (outside) :gray[0]"]
    send(at, key("2"))  # LOC over "went to": the label set has no I-LOC
    assert [e.value for e in at.error] == [
        f"sentence {sid}: token 2: label 'I-LOC' is not in the project's label set "
        "(B-PER I-PER B-LOC O)"]
    assert store.get_sentence(sid)["labels"] == [BP, None, None, BL, None]
    send(at, {"k": "click", "key": "tok_1"}, key("ArrowRight", shift=True), key("1"))
    assert store.get_sentence(sid)["labels"] == [BP, BP, IP, BL, None]
    assert batches(store, sid) == [2]
    assert page_state(at, pid)["anchor"] is None and page_state(at, pid)["sel"] == 4
    # Shift+click from token 5 back to token 4, then the O button: one more step
    send(at, {"k": "click", "key": "tok_3", "shift": True})
    at.button(key="span_2").click().run()
    assert store.get_sentence(sid)["labels"] == [BP, BP, IP, OUT, OUT]
    at.button(key="undo").click().run()  # the O span, in one step
    assert store.get_sentence(sid)["labels"] == [BP, BP, IP, BL, None]
    at.button(key="undo").click().run()  # the PER span, in one step
    assert store.get_sentence(sid)["labels"] == [BP, None, None, BL, None]
    # a label button on a span sets every token; Esc goes back to one token
    send(at, {"k": "click", "key": "tok_1"}, key("ArrowRight", shift=True),
         key("ArrowRight", shift=True), key("Escape"))
    assert page_state(at, pid)["anchor"] is None
    send(at, key("ArrowLeft", shift=True), {"k": "click", "key": "lab_3"})
    assert store.get_sentence(sid)["labels"] == [BP, None, OUT, OUT, None]


def test_bilou_spans(db):
    store = Store(db)
    pid = store.create_project("bilou", ["B-PER", "I-PER", "L-PER", "U-PER", "O"],
                               sentences=[{"tokens": list("abcd")}])
    at = app()
    sid = page_state(at, pid)["current"]
    send(at, {"k": "click", "key": "tok_0"}, key("ArrowRight", shift=True),
         key("ArrowRight", shift=True), key("1"))
    assert store.get_sentence(sid)["labels"] == ["B-PER", "I-PER", "L-PER", None]
    assert page_state(at, pid)["sel"] == 3
    at.button(key="span_0").click().run()  # the PER button on one token: a unit entity
    assert store.get_sentence(sid)["labels"] == ["B-PER", "I-PER", "L-PER", "U-PER"]
    at.button(key="undo").click().run()
    send(at, key("1"))  # on one token too a digit is the entity type: a unit entity
    assert store.get_sentence(sid)["labels"][3] == "U-PER"
    send(at, {"k": "pick", "label": "B-PER"})  # any label by the type-ahead
    assert store.get_sentence(sid)["labels"][3] == "B-PER"
    assert any("token 4: B\\-PER ends the sentence inside an entity" in c.value
               for c in at.caption)


def predicted(store: Store, pid: int, sid: int, rows, query=None, strategy=None) -> int:
    """An active model version whose stored marginals for ``sid`` are ``rows`` (and its
    query scores ``query``, by ``strategy``)."""
    labels = store.get_project(pid)["labels"]
    vid = store.start_model_version(pid, {"offsets": [-1, 1], "kernel": "linear"})
    store.save_predictions(vid, {sid: np.array(rows, dtype=np.float32)},
                           None if query is None else {sid: np.array(query)})
    store.finish_model_version(vid, None, [0.0], {}, 0, classes=labels,
                               query_strategy=strategy)
    store.set_active_model(pid, vid)
    return vid


def test_cursor_flags_and_valid_suggestions(db):
    store, pid = tiny_project(db)
    sid = store.sentence_ids(pid)[5]  # "Carl went to Oslo ." (unlabeled)
    #        B-PER I-PER B-LOC O
    predicted(store, pid, sid, [[0.40, 0.05, 0.05, 0.50],   # O (0.50)
                                [0.05, 0.60, 0.05, 0.30],   # argmax I-PER: invalid after O
                                [0.02, 0.02, 0.02, 0.94],
                                [0.05, 0.05, 0.45, 0.45],   # the least sure
                                [0.01, 0.01, 0.01, 0.97]])
    at = app(goto=sid)
    assert page_state(at, pid)["sel"] == 3  # the least sure token (0.45), not the first
    assert any(c.value.startswith("Queue: least confidence — ") for c in at.caption)
    # BIO-valid suggestions: B-PER I-PER (0.40 x 0.60) instead of O I-PER; O O is 0.15
    assert at.button(key="tok_0").label == "Carl *B\\-PER?*"
    assert at.button(key="tok_1").label == "went *I\\-PER?*"
    at.slider(key="accept_thr").set_value(0.5).run()
    assert at.button(key="accept").label == "Accept 3 suggestions"  # 0.60, 0.94, 0.97
    # an invalid label sequence is flagged: I-PER after O
    send(at, {"k": "click", "key": "tok_0"}, key("0"), {"k": "pick", "label": IP})
    assert store.get_sentence(sid)["labels"][:2] == [OUT, IP]
    assert any("token 2: I\\-PER follows O" in c.value for c in at.caption)
    css = next(h.value for h in at.html if "st-key-tok_" in h.value)
    assert ".st-key-tok_1 button { border: 2px solid" in css and "underline wavy" in css


def test_go_to_uses_the_shown_numbers(db):
    store, pid = tiny_project(db)
    ids = store.sentence_ids(pid)
    at = app()
    at.session_state["goto_open"] = True  # a lazy expander: its content runs when open
    at.run()

    def jump(text):
        at.text_input(key="jump_to").set_value(text).run()
        at.button(key="jump").click().run()
        assert not at.exception

    jump("3")
    assert page_state(at, pid)["current"] == ids[2]
    assert any(m.value.startswith("**Sentence 3**") for m in at.markdown)
    jump("7")
    assert at.warning[0].value == ("Sentence 7 is held out (gold labels for the evaluation); "
                                   "it is not annotated here.")
    jump("99")
    assert at.warning[0].value == "There is no sentence 99: this project's sentences are " \
                                  "numbered 1–7."
    jump("abc")
    assert at.warning[0].value.startswith("“abc” is not a sentence number")
    assert page_state(at, pid)["current"] == ids[2]


def test_find_sentences_and_open_a_hit(db):
    store, pid = tiny_project(db)
    ids = store.sentence_ids(pid)
    store.set_labels(ids[3], {0: BP}, "alice")
    store.set_labels(ids[3], {0: BL}, "bob")
    at = app()
    assert not [w for w in at.text_input if w.key == "find_text"]  # closed: not run
    at.session_state["find_open"] = True
    at.run()
    at.text_input(key="find_text").set_value("rome").run()
    assert [b.label for b in at.button if (b.key or "").startswith("find_open_")] == [
        "Sentence 2", "Sentence 3"]
    assert any("**Rome**" in m.value for m in at.markdown)
    at.text_input(key="find_text").set_value("").run()
    at.toggle(key="find_conflicts").set_value(True).run()
    assert at.selectbox(key="find_who").options == ["alice", "bob", "import"]
    at.button(key=f"find_open_{ids[3]}").click().run()
    assert page_state(at, pid)["current"] == ids[3]


def test_guidelines_and_token_history(db, monkeypatch):
    store, pid = tiny_project(db)
    at = app()
    sid = page_state(at, pid)["current"]
    assert any(c.value == "No guidelines yet." for c in at.caption)
    send(at, {"k": "pick", "label": IP}, key("ArrowLeft"))  # I-PER on token 2, back to it
    panel = "\n".join(m.value for m in at.markdown if "tester" in m.value)
    assert "**tester** · set `I-PER` (was none)" in panel
    send(at, key("u"))
    panel = "\n".join(m.value for m in at.markdown if "tester" in m.value)
    assert "undid: back to no label" in panel and "~~" in panel

    from gpsl.annotation.corpus import projects  # what the facade and the reports read through

    original = projects.get

    def with_guidelines(db, project_id):
        p = original(db, project_id)
        if p is not None:
            p["guidelines"] = "# Rules\nTag **people**.\n<script>alert(1)</script>\n![x](http://e/x.png)"
        return p

    monkeypatch.setattr(projects, "get", with_guidelines)
    at.run()
    text = next(m.value for m in at.markdown if "Rules" in m.value)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "<script>" not in text
    assert "!\\[x]" in text and "Tag **people**." in text
    assert store.get_sentence(sid)["labels"][1] is None


def test_view_helpers():
    from gpsl.annotation.labeling.rules import next_unlabeled, opening_token

    assert _format.safe_markdown("a <b> & ![i](u)") == "a &lt;b&gt; &amp; !\\[i](u)"
    assert _format.marked_text(["a", "*b*", "c"], [1]) == "a **\\*b\\*** c"
    assert next_unlabeled(["O", None, "O", None], 3) == 1
    assert next_unlabeled(["O", "O"], 0) == 0  # all labeled: it stays
    assert _chips.span_choices(["PER"]) == [("PER", "1"), ("O", "0")]
    labels = [None, "O", None, None]
    least = [1 - conf for conf in (0.9, 0.1, 0.5, 0.5)]  # least confidence, the fallback score
    assert opening_token(labels, least) == 2  # least sure unlabeled, first on a tie
    assert opening_token(labels[1:2], least[1:2]) == 0
    # with the queue's query scores: the highest-scored unlabeled token, first on a tie
    assert opening_token(labels, [0.1, 0.9, 0.3, 0.3]) == 2  # token 1 scores more: labeled
    assert opening_token(labels, [0.4, 0.9, 0.3, 0.3]) == 0  # not the least confident one


def test_the_queue_names_its_strategy():
    from gpsl.active import QUERY_SCORES
    from gpsl.annotation import Version, queue_strategy
    from gpsl.annotation.labeling.rules import opening_token
    from gpsl.annotation.reports import token_views

    assert _text.queue_caption("bald") == f"Queue: BALD — {QUERY_SCORES['bald']}"
    assert _text.queue_caption("least_confidence") == \
        f"Queue: least confidence — {QUERY_SCORES['least_confidence']}"
    for name, about in QUERY_SCORES.items():  # every name the library offers
        assert _text.queue_caption(name).endswith(f" — {about}")
    assert _text.queue_caption(None) == ""
    assert queue_strategy(None) is None
    assert queue_strategy(Version.from_row({"query_strategy": None})) == \
        "least_confidence"  # schema 3
    assert queue_strategy(Version.from_row({"query_strategy": "lookahead"})) == "lookahead"
    row = type("Row", (), {"position": 4, "score": 0.4217, "strategy": "bald",
                           "min_confidence": 0.55, "unlabeled": 3})
    assert _text.least_sure_caption(row) == ("Sentence 5 · BALD score 0.422 · lowest "
                                             "confidence 0.55 · 3 unlabeled tokens")
    # the view takes the scores of visible tokens only (blind mode hides the rest)
    sentence = {"tokens": [("a",), ("b",), ("c",)], "labels": [None] * 3,
                "sources": [None] * 3, "annotators": [None] * 3, "hidden": [1]}
    marg = np.full((3, 2), 0.5)
    views = token_views(sentence, marg, ["X", "O"], None, np.array([0.1, 0.9, 0.2]))
    assert [v.query for v in views] == [pytest.approx(0.1), None, pytest.approx(0.2)]
    assert opening_token([v.label for v in views], [v.score for v in views]) == 2
    assert all(v.query is None for v in token_views(sentence, marg, ["X", "O"], None,
                                                    np.zeros(2)))  # wrong length


def test_the_cursor_opens_at_the_highest_query_score(db):
    store, pid = tiny_project(db)
    sid = store.sentence_ids(pid)[5]  # "Carl went to Oslo ." (unlabeled)
    vid = predicted(store, pid, sid, [[0.40, 0.05, 0.05, 0.50],
                                      [0.05, 0.60, 0.05, 0.30],
                                      [0.02, 0.02, 0.02, 0.94],
                                      [0.05, 0.05, 0.45, 0.45],   # the least sure
                                      [0.01, 0.01, 0.01, 0.97]],
                    query=[0.1, 0.2, 0.7, 0.3, 0.0], strategy="bald")
    assert store.get_model_version(vid)["query_strategy"] == "bald"
    at = app(goto=sid)
    assert page_state(at, pid)["sel"] == 2  # the highest query score, not the least sure
    assert any(c.value.startswith("Queue: BALD — ") for c in at.caption)
    at.segmented_control(key="queue_order").set_value("sequential").run()
    assert not any(c.value.startswith("Queue: ") for c in at.caption)  # file order


def test_blind_project_panels_show_no_other_votes(db):
    store, pid = tiny_project(db)
    sid = store.sentence_ids(pid)[3]  # "Bob Smith went to Paris ."
    store.set_labels(sid, {0: BL}, "alice")
    store.set_team_settings(pid, blind=True)
    at = app(goto=sid)
    send(at, {"k": "click", "key": "tok_0"})
    assert at.button(key="tok_0").label == "Bob"  # alice's vote is not shown
    panel = "\n".join(m.value for m in at.markdown if "Token history" in m.value)
    assert "alice" not in panel and "No change recorded" in panel
    at.session_state["find_open"] = True
    at.run()
    assert [w.key for w in at.selectbox if (w.key or "").startswith("find_")] == []
    assert any(c.value == "Blind annotation: search by text only." for c in at.caption)
    at.text_input(key="find_text").set_value("bob smith").run()
    assert any(m.value == "**Bob** **Smith** went to Paris \\." for m in at.markdown)
    # one's own vote and its history do show
    send(at, key("1"), key("ArrowLeft"))
    panel = "\n".join(m.value for m in at.markdown if "Token history" in m.value)
    assert "**tester** · set `B-PER`" in panel and "alice" not in panel
