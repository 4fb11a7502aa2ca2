"""The labelling widget's server side (pages/_widget.py) with AppTest: the events the browser
queue sends are applied in order and exactly once - within a session and when a new session
(a reload) sends them again - and an event with a label the project no longer has is
refused with its reason; a label written as Markdown is escaped in the plain buttons'
tooltips (issue 42, defect 5; the browser side is tests/app/browser/test_browser_widget.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
from streamlit.testing.v1 import AppTest  # noqa: E402

from gpsl.annotation import Store  # noqa: E402
from pages import _widget  # noqa: E402
from pages._format import md_escape  # noqa: E402
from tests.support.helpers import app_store_env  # noqa: E402
from tests.support.limits import limit  # noqa: E402

EVIL = "B-![t](http://127.0.0.1:9/x)"


@pytest.fixture
def db(tmp_path, monkeypatch) -> Path:
    return app_store_env(tmp_path, monkeypatch)


def opened(pid: int) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(30))
    at.query_params["project"] = str(pid)
    at.run()
    at.switch_page("pages/annotate.py").run()
    assert not at.exception, at.exception
    return at


def send(at: AppTest, client: str, events: list[dict]) -> None:
    at.session_state[_widget.KEY] = {"events": {"client": client, "events": events}}
    at.run()
    assert not at.exception, at.exception


def test_events_are_applied_once_and_a_stale_label_is_refused(db):
    store = Store(db)
    pid = store.create_project("w", ["B-PER", "I-PER", "B-LOC", "O"],
                               sentences=[{"tokens": "a b c d".split()}])
    sid = store.sentence_ids(pid)[0]
    at = opened(pid)
    events = [{"seq": 1, "sid": sid, "op": "set", "ch": {"0": "B-PER"}, "at": 1000},
              {"seq": 2, "sid": sid, "op": "set", "ch": {"1": "I-PER"}, "at": 1030}]
    send(at, "tab1", events)
    assert store.get_sentence(sid)["labels"] == ["B-PER", "I-PER", None, None]
    assert at.session_state[_widget.ACKS]["tab1"] == 2
    send(at, "tab1", events)  # sent again in the same session
    again = opened(pid)  # a reload: a new session, the same queue sent again
    send(again, "tab1", [*events, {"seq": 3, "sid": sid, "op": "set", "ch": {"2": "O"}}])
    history = [h for h in store.history(sid, limit=None) if h["action"] == "set"]
    assert sorted((h["token_index"], h["new_label"]) for h in history) == [
        (0, "B-PER"), (1, "I-PER"), (2, "O")]  # each once
    # the lead drops B-LOC; a key for it, queued before the page knew, is refused
    store.update_project(pid, labels=["B-PER", "I-PER", "O"])
    send(again, "tab1", [{"seq": 4, "sid": sid, "op": "set", "ch": {"3": "B-LOC"}}])
    assert store.get_sentence(sid)["labels"][3] is None
    refused = again.session_state[_widget.REFUSED]
    assert refused[-1]["seq"] == 4 and "no longer in the project's label set" in \
        refused[-1]["why"]
    assert again.session_state[_widget.ACKS]["tab1"] == 4  # acknowledged: it leaves the queue


def test_a_markdown_label_is_escaped_in_the_buttons_tooltips(db):
    store = Store(db)
    pid = store.create_project("evil", [EVIL, "O"], sentences=[{"tokens": ["a", "b"]}])
    at = opened(pid)
    entity = at.button(key="span_0").help  # the entity type's button (the plain buttons)
    assert md_escape(EVIL[2:]) in entity and "![t](" not in entity, entity
    for b in at.button:  # no tooltip carries the label as Markdown
        assert "](http" not in (b.help or ""), (b.key, b.help)
