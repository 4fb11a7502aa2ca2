"""The Annotate page's keyboard in a real browser: `streamlit run app.py` and Debian's
Chromium (Playwright), one server shared by the tests of this module.

* ten keys pressed 100 ms apart -> ten labels in the store (keys are painted and queued
  client-side by the labelling widget, pages/labeler, and applied in order by the page);
* a span selected with Shift+arrows, its entity type picked once -> B-/I- stored in one
  step, and one Undo removes the whole span;
* a token and a span clicked with the mouse (Shift+click) go through the same queue, and
  clicks 100 ms apart (token, label, token, label) all land, in order.

Skipped when /usr/bin/chromium is missing.  Screenshots go to $GPSL_TEST_ARTIFACTS
(default <tmp>/gpsl-test-artifacts, outside the checkout).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpsl.annotation import Store
from tests.support.helpers import (
    ARTIFACTS,
    CHROMIUM,
    chromium_browser,  # noqa: F401 (the fixture `browser`)
    serve_app,
    token_chip,
    widget_button,
    widget_ready,
    widget_shows,
)
from tests.support.limits import limit, ms

ROOT = Path(__file__).resolve().parents[3]
TYPES = ["PER", "LOC", "ORG", "MISC", "DATE"]
LABELS = [f"{p}-{t}" for t in TYPES for p in "BI"] + ["O"]  # 11 labels, 5 entity types
KEYS_TOKENS = "one two three four five six seven eight nine ten eleven twelve".split()
SPAN_TOKENS = "Anna visited New York City with Bob today .".split()

pytestmark = [pytest.mark.skipif(not CHROMIUM.exists(),
                                 reason="Debian Chromium (/usr/bin/chromium) missing")]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """One server for the module: a store with a "Keys" and a "Spans" project."""
    tmp = tmp_path_factory.mktemp("annotate")
    db = tmp / "gpsl.sqlite3"
    store = Store(db)
    keys = store.create_project("Keys", LABELS)
    store.add_sentences(keys, [{"tokens": KEYS_TOKENS}])
    spans = store.create_project("Spans", LABELS)
    store.add_sentences(spans, [{"tokens": SPAN_TOKENS}])
    with serve_app(tmp / "server.log", {"GPSL_DB": str(db),
                                        "GPSL_ANNOTATOR": "keyboard-test"}) as url:
        yield url, store, {"Keys": keys, "Spans": spans}
    store.close()


def open_annotate(browser, url: str, project: str, sid: int):
    """The Annotate page of ``project`` with its widget drawing sentence ``sid``: switching
    the project reruns the page, and until the rerun lands the previous project's widget is
    still on it (a click there is lost when the new one replaces it)."""
    page = browser.new_context(viewport={"width": 1400, "height": 950}).new_page()
    page.set_default_timeout(ms(30))  # Playwright's default, scaled
    page.goto(url)
    page.get_by_test_id("stSidebarNav").get_by_role("link", name="Annotate").click(
        timeout=ms(60))
    page.get_by_role("heading", name="Annotate", exact=True).wait_for(timeout=ms(60))
    box = page.get_by_test_id("stSidebar").get_by_test_id("stSelectbox")
    if project not in box.inner_text():
        box.click()
        page.get_by_role("option", name=project).click(timeout=ms(30))
    page.get_by_text(f"**{project}**".strip("*")).first.wait_for(timeout=ms(30))
    widget_ready(page)
    page.wait_for_function("sid => String(window.__gpslWidget.data.sid) === String(sid)",
                           arg=sid, timeout=ms(60))
    return page


def wait_for(get, expected, timeout: float = 30.0) -> None:
    """Poll ``get()`` until it equals ``expected`` (fails with the last value)."""
    deadline = time.monotonic() + limit(timeout)
    while (value := get()) != expected:
        assert time.monotonic() < deadline, f"{value!r} != {expected!r}"
        time.sleep(0.2)


@pytest.mark.timeout(180)
def test_ten_keys_at_100_ms_are_ten_labels(app, browser):
    url, store, pids = app
    sid = store.sentence_ids(pids["Keys"])[0]
    page = open_annotate(browser, url, "Keys", sid)
    token_chip(page, 0).click()  # focus the page
    widget_shows(page, f"token 1 of {len(KEYS_TOKENS)}")
    # BIO labels: the digits are the entity types (PER 1 ... DATE 5, O 0), each key shown
    # once (on its type's button); on one token a type is a one-token entity
    keys = ["1", "2", "3", "4", "5", "0", "1", "2", "3", "4"]
    for key in keys:  # each key labels the selected token and moves to the next one
        page.keyboard.press(key)
        page.wait_for_timeout(100)
    expected = ["B-PER", "B-LOC", "B-ORG", "B-MISC", "B-DATE", "O", "B-PER", "B-LOC",
                "B-ORG", "B-MISC"]
    wait_for(lambda: store.get_sentence(sid)["labels"][:10], expected)
    saved = store.get_sentence(sid)
    assert saved["labels"] == expected + [None, None]
    assert set(saved["annotators"][:10]) == {"keyboard-test"}
    token_chip(page, 9).filter(has_text="B-MISC").wait_for(timeout=ms(30))
    # the type-ahead reaches every label: `/`, part of a name, Enter (token 11 is next)
    page.keyboard.press("/")
    page.keyboard.type("date")
    page.get_by_test_id("gpslTypeAhead").wait_for(timeout=ms(10))
    assert page.get_by_test_id("gpslTypeAhead").inner_text().split("\n")[1:4] == [
        "DATE: entity (span) (5)", "B-DATE", "I-DATE"]  # exact match, then the others
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    wait_for(lambda: store.get_sentence(sid)["labels"][10], "I-DATE")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "browser_keys.png"), full_page=True)
    # clicks 100 ms apart, without waiting for the page: each lands on the token clicked
    # just before it (a click during a slow rerun used to be lost or applied out of order)
    store.set_labels(sid, {0: None, 1: None}, "keyboard-test")
    page.reload()
    widget_ready(page)
    for chip, label in ((1, "B-LOC"), (0, "B-ORG")):  # B-LOC on "two", B-ORG on "one"
        token_chip(page, chip).click()
        page.wait_for_timeout(100)
        widget_button(page, "label", label).click()
        page.wait_for_timeout(100)
    wait_for(lambda: store.get_sentence(sid)["labels"][:2], ["B-ORG", "B-LOC"])
    page.context.close()


@pytest.mark.timeout(180)
def test_a_span_is_labeled_in_one_step_and_undone_in_one(app, browser):
    url, store, pids = app
    sid = store.sentence_ids(pids["Spans"])[0]
    page = open_annotate(browser, url, "Spans", sid)
    token_chip(page, 2).click()  # "New"
    widget_shows(page, f"token 3 of {len(SPAN_TOKENS)}")
    page.keyboard.press("Shift+ArrowRight")
    page.keyboard.press("Shift+ArrowRight")
    widget_shows(page, f"tokens 3–5 of {len(SPAN_TOKENS)}")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "browser_span_selected.png"), full_page=True)
    page.keyboard.press("2")  # the second entity type: LOC
    wait_for(lambda: store.get_sentence(sid)["labels"][2:5], ["B-LOC", "I-LOC", "I-LOC"])
    history = store.history(sid)
    assert len(history) == 3 and {h["at"] for h in history} == {history[0]["at"]}
    # a one-token entity with the mouse: click "Anna", then the PER type button
    token_chip(page, 0).click()
    widget_shows(page, f"token 1 of {len(SPAN_TOKENS)}")
    widget_button(page, "type", "PER").click()
    wait_for(lambda: store.get_sentence(sid)["labels"][0], "B-PER")
    # Shift+click selects a span with the mouse; O for both tokens is one step too
    token_chip(page, 5).click()
    widget_shows(page, f"token 6 of {len(SPAN_TOKENS)}")
    token_chip(page, 6).click(modifiers=["Shift"])
    widget_shows(page, f"tokens 6–7 of {len(SPAN_TOKENS)}")
    page.keyboard.press("0")
    wait_for(lambda: store.get_sentence(sid)["labels"][5:7], ["O", "O"])
    # one undo per step, newest first: the O span, the PER token, the LOC span
    page.keyboard.press("u")
    wait_for(lambda: store.get_sentence(sid)["labels"][5:7], [None, None])
    assert store.get_sentence(sid)["labels"][:5] == ["B-PER", None, "B-LOC", "I-LOC", "I-LOC"]
    page.keyboard.press("u")
    wait_for(lambda: store.get_sentence(sid)["labels"][0], None)
    page.keyboard.press("u")
    wait_for(lambda: store.get_sentence(sid)["labels"], [None] * len(SPAN_TOKENS))
    page.context.close()
