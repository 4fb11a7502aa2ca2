"""The Annotate page's labelling widget (pages/labeler) in a real browser: `streamlit run
app.py` and Debian's Chromium (Playwright), one server for the module.

* a burst of 20 keys 30 ms apart: each label is on its chip when the key's handler returns
  (painted in the browser, before any answer of the server), and the store holds the 20
  labels, in order, each written once;
* the same with the server paused (SIGSTOP) for 5 s mid-burst, and with the page reloaded
  mid-burst while the server is paused (the queue lives in sessionStorage; the server
  writes each event once, by annotator, client id and seq);
* a key the server refuses (its label left the label set meanwhile) is undone on screen,
  with a one-line reason;
* Undo of a span is painted at once and reverts the whole span in the store;
* the project is part of the URL: a reload and a new tab keep it;
* a label written as Markdown (an image) is shown as text: rendering and hovering it
  fetches nothing (Chromium's request log).

Skipped when /usr/bin/chromium is missing.  Screenshots go to $GPSL_TEST_ARTIFACTS.
"""

from __future__ import annotations

import time

import pytest

from gpsl.annotation import Store
from tests.support.helpers import (
    ARTIFACTS,
    CHROMIUM,
    chromium_browser,  # noqa: F401 (the fixture `browser`)
    serve_app,
    server_paused,
    token_chip,
    wait_until,
    widget_button,
    widget_ready,
    widget_shows,
)
from tests.support.limits import ms

LABELS = ["B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-MISC", "I-MISC", "O"]
WORDS = [f"w{i}" for i in range(24)]
KEYS = "01234" * 4  # with BIO the digits are the entity types: O PER LOC ORG MISC
WANT = [{"0": "O", "1": "B-PER", "2": "B-LOC", "3": "B-ORG", "4": "B-MISC"}[k] for k in KEYS]
EVIL = "B-![t](http://127.0.0.1:9/x)"

pytestmark = [pytest.mark.skipif(not CHROMIUM.exists(),
                                 reason="Debian Chromium (/usr/bin/chromium) missing")]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("widget")
    db = tmp / "gpsl.sqlite3"
    store = Store(db)
    pids = {}
    for name in ("Burst", "Paused", "Reload", "Refused", "Undo"):
        pids[name] = store.create_project(name, LABELS, sentences=[{"tokens": WORDS}])
    pids["Evil"] = store.create_project("Evil", [EVIL, "O"], sentences=[
        {"tokens": ["a", "b", "c"], "labels": [EVIL, None, None]}])
    with serve_app(tmp / "server.log", {"GPSL_DB": str(db),
                                        "GPSL_ANNOTATOR": "widget-test"}) as url:
        yield url, store, pids
    store.close()


def open_project(browser, url: str, pid: int, context=None, n: int = len(WORDS)):
    context = context or browser.new_context(viewport={"width": 1400, "height": 950})
    page = context.new_page()
    page.set_default_timeout(ms(30))
    page.goto(f"{url}annotate?project={pid}")
    widget_ready(page)
    token_chip(page, 0).click()
    widget_shows(page, f"token 1 of {n}")
    return page


def shown_project(page) -> str:
    """The project the page shows (the header's caption starts with its name)."""
    return page.get_by_text("Pick a token, then its label").first.inner_text().split(" · ")[0]


def press_painted(page, key: str) -> str:
    """Press ``key`` (a real key press) and return the text of the chip it labeled, read in
    the same task as the key's handler: what is painted before any answer of the server."""
    t = page.evaluate("window.__gpslWidget.sel")
    page.evaluate("""([key, t]) => {
        window.__gpslProbe = null;
        document.addEventListener('keydown', () => {
            const chip = document.querySelector(`.gw-chip[data-t="${t}"]`);
            window.__gpslProbe = chip ? chip.textContent : null;
        }, {capture: true, once: true});  // after the widget's own: the key is applied
    }""", [key, t])
    page.keyboard.press(key)
    return page.evaluate("window.__gpslProbe")


def history_of(store, sid):
    rows = [h for h in store.history(sid, limit=None) if h["action"] == "set"]
    return [(h["token_index"], h["new_label"]) for h in sorted(rows, key=lambda h: h["id"])]


def burst(page, keys=KEYS):
    painted = []
    for key in keys:
        painted.append(press_painted(page, key))
        page.wait_for_timeout(30)
    return painted


def check_stored(store, sid, want=WANT):
    n = len(want)
    wait_until(lambda: store.get_sentence(sid)["labels"][:n] == want, 60,
               what="the burst's labels in the store")
    assert store.get_sentence(sid)["labels"][n:] == [None] * (len(WORDS) - n)
    assert history_of(store, sid) == list(enumerate(want))  # in order, each once


@pytest.mark.timeout(240)
def test_a_burst_is_painted_at_once_and_stored_in_order_once(app, browser):
    url, store, pids = app
    page = open_project(browser, url, pids["Burst"])
    sid = store.sentence_ids(pids["Burst"])[0]
    painted = burst(page)
    for i, (text, label) in enumerate(zip(painted, WANT)):
        assert text == f"w{i}{label}", (i, text)  # on its chip when the key returned
    check_stored(store, sid)
    widget_shows(page, "all saved", "Sync")
    widget_shows(page, f"20 of {len(WORDS)} tokens labeled by you", "Head")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "widget_burst.png"), full_page=True)
    page.context.close()


@pytest.mark.timeout(300)
def test_a_burst_with_the_server_paused_for_5_s(app, browser):
    url, store, pids = app
    page = open_project(browser, url, pids["Paused"])
    sid = store.sentence_ids(pids["Paused"])[0]
    with server_paused(url):
        painted = burst(page, KEYS[:10]) + burst(page, KEYS[10:])  # paused from the 11th
        for i, (text, label) in enumerate(zip(painted, WANT)):
            assert text == f"w{i}{label}", (i, text)  # painted while the server sleeps
        widget_shows(page, "waiting for the server", "Sync")
        time.sleep(5.0)
    check_stored(store, sid)
    widget_shows(page, "all saved", "Sync")
    page.context.close()


@pytest.mark.timeout(300)
def test_a_reload_mid_burst_loses_nothing_and_writes_nothing_twice(app, browser):
    url, store, pids = app
    page = open_project(browser, url, pids["Reload"])
    sid = store.sentence_ids(pids["Reload"])[0]
    burst(page, KEYS[:10])
    with server_paused(url):  # the rest typed while the server is paused
        burst(page, KEYS[10:])
        assert page.evaluate("window.__gpslWidget.q.pending.length") > 0
        page.evaluate("setTimeout(() => location.reload(), 0)")  # mid-burst, not acknowledged
        time.sleep(2.0)
    widget_ready(page)
    check_stored(store, sid)  # sent by the old page and again by the new one: once each
    widget_shows(page, f"20 of {len(WORDS)} tokens labeled by you", "Head")
    page.context.close()


@pytest.mark.timeout(240)
def test_a_refused_key_is_undone_on_screen_with_its_reason(app, browser):
    url, store, pids = app
    pid = pids["Refused"]
    page = open_project(browser, url, pid)
    sid = store.sentence_ids(pid)[0]
    assert press_painted(page, "1") == "w0B-PER"
    wait_until(lambda: store.get_sentence(sid)["labels"][0] == "B-PER", 30, what="B-PER")
    # the lead drops the unused MISC labels while this page still offers them
    store.update_project(pid, labels=[x for x in LABELS if not x.endswith("MISC")])
    assert press_painted(page, "4") == "w1B-MISC"  # painted at once ...
    widget_shows(page, "is no longer in the project's label set", "Reason")  # ... refused
    wait_until(lambda: token_chip(page, 1).inner_text().strip() == "w1", 30,
               what="the refused label gone from its chip")
    assert store.get_sentence(sid)["labels"][:2] == ["B-PER", None]
    page.wait_for_function("() => !document.querySelector(\"[data-act=label][data-arg=B-MISC]\")")
    assert widget_button(page, "label", "I-MISC").count() == 0  # the new label set
    page.screenshot(path=str(ARTIFACTS / "widget_refused.png"), full_page=True)
    page.context.close()


@pytest.mark.timeout(240)
def test_undo_of_a_span_is_painted_at_once(app, browser):
    url, store, pids = app
    pid = pids["Undo"]
    page = open_project(browser, url, pid)
    sid = store.sentence_ids(pid)[0]
    page.keyboard.press("Shift+ArrowRight")
    page.keyboard.press("Shift+ArrowRight")
    widget_shows(page, f"tokens 1–3 of {len(WORDS)}")
    page.keyboard.press("2")  # LOC over three tokens: one step
    wait_until(lambda: store.get_sentence(sid)["labels"][:3] == ["B-LOC", "I-LOC", "I-LOC"],
               30, what="the span")
    page.evaluate("""() => { window.__gpslProbe = null;
        document.addEventListener('keydown', () => { window.__gpslProbe =
            [0, 1, 2].map(t => document.querySelector(`.gw-chip[data-t="${t}"]`).textContent);
        }, {capture: true, once: true}); }""")
    page.keyboard.press("u")
    assert page.evaluate("window.__gpslProbe") == ["w0", "w1", "w2"]  # at once
    wait_until(lambda: store.get_sentence(sid)["labels"][:3] == [None] * 3, 30,
               what="the span undone")
    widget_shows(page, "all saved", "Sync")
    assert [h["action"] for h in store.history(sid, limit=None)].count("undo") == 3
    page.context.close()


@pytest.mark.timeout(240)
def test_the_project_is_in_the_url(app, browser):
    url, store, pids = app
    page = open_project(browser, url, pids["Undo"])
    assert f"project={pids['Undo']}" in page.url
    assert shown_project(page) == "Undo"
    page.reload()
    widget_ready(page)
    assert shown_project(page) == "Undo"
    page.get_by_test_id("stSidebar").get_by_test_id("stSelectbox").click()
    page.get_by_role("option", name="Reload").click()
    href = lambda: page.evaluate("location.href")  # noqa: E731 (replaceState: not page.url)
    wait_until(lambda: f"project={pids['Reload']}" in href(), 30, what="the URL's project")
    wait_until(lambda: shown_project(page) == "Reload", 30, what="the project switched")
    other = page.context.new_page()  # a new tab from the address bar: the same project
    other.goto(href())
    widget_ready(other)
    assert shown_project(other) == "Reload"
    assert other.evaluate("window.__gpslWidget.data.scope").endswith(f":{pids['Reload']}")
    page.context.close()


@pytest.mark.timeout(240)
def test_a_markdown_label_fetches_nothing(app, browser):
    url, store, pids = app
    context = browser.new_context(viewport={"width": 1400, "height": 950})
    requests = []
    context.on("request", lambda r: requests.append(r.url))
    page = open_project(browser, url, pids["Evil"], context, n=3)
    token_chip(page, 0).filter(has_text=EVIL).wait_for(timeout=ms(30))  # shown as text
    for target in (token_chip(page, 0), widget_button(page, "label", EVIL)):
        target.hover()
        page.wait_for_timeout(ms(1))
    page.keyboard.press("/")
    page.keyboard.type("B-!")
    page.get_by_test_id("gpslTypeAhead").filter(has_text=EVIL).wait_for(timeout=ms(10))
    page.keyboard.press("Escape")
    page.wait_for_timeout(ms(1))
    assert not [u for u in requests if "127.0.0.1:9/" in u], requests
    page.screenshot(path=str(ARTIFACTS / "widget_markdown_label.png"), full_page=True)
    context.close()
