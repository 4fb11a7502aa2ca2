"""One real-browser test: `streamlit run app.py`, Chromium, label a token by clicks; then a
project with HTML/script tokens is opened on the same server and must show them as text.

Skipped when Debian's Chromium (/usr/bin/chromium) is missing.  The screenshot is saved to
$GPSL_TEST_ARTIFACTS
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
    CHROMIUM_ARGS,
    serve_app,
    token_chip,
    widget_button,
    widget_ready,
    widget_shows,
)
from tests.support.limits import limit, ms

ROOT = Path(__file__).resolve().parents[3]
HOSTILE = ["<img src=x onerror=window.__pwned=1>", "<script>window.__pwned=2</script>"]


@pytest.fixture
def server(tmp_path):
    """The app on a free loopback port with its store in tmp_path; yields (url, db)."""
    db = tmp_path / "gpsl.sqlite3"
    with serve_app(tmp_path / "server.log",
                   {"GPSL_DB": str(db), "GPSL_ANNOTATOR": "browser-test"}) as url:
        yield url, db


@pytest.mark.timeout(240)
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian Chromium (/usr/bin/chromium) missing")
def test_label_a_token_in_the_browser(server):
    from playwright.sync_api import sync_playwright

    url, db = server
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(ms(30))  # Playwright's default, scaled
            page.goto(url)
            nav = page.get_by_test_id("stSidebarNav")
            nav.get_by_role("link", name="Annotate").click(timeout=ms(60))
            page.get_by_role("heading", name="Annotate", exact=True).wait_for(timeout=ms(60))
            widget_ready(page)

            store = Store(db)
            pid = store.list_projects()[0]["id"]
            sid = store.queue(pid, "sequential")[0]  # no model yet: file order
            sentence = store.get_sentence(sid)
            t = sentence["labels"].index(None)

            # click the token chip, then the label button
            chip = token_chip(page, t)
            chip.click(timeout=ms(30))
            widget_shows(page, f"token {t + 1} of {len(sentence['tokens'])}")
            widget_button(page, "label", "B-ORG").click()

            deadline = time.monotonic() + limit(30)
            while store.get_sentence(sid)["labels"][t] is None:
                assert time.monotonic() < deadline, "the label never reached the store"
                time.sleep(0.2)
            saved = store.get_sentence(sid)
            assert saved["labels"][t] == "B-ORG"
            assert saved["sources"][t] == "human"
            assert saved["annotators"][t] == "browser-test"
            chip.filter(has_text="B-ORG").wait_for(timeout=ms(30))  # the chip shows it

            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "browser_annotate.png"), full_page=True)

            # hostile token text (issue #7), on the same server: shown as text, never run
            hostile = store.create_project("Hostile tokens", ["B-X", "O"], sentences=[
                {"tokens": HOSTILE + ["end"], "labels": [None, "O", None]}])
            page.reload()
            page.get_by_role("heading", name="Annotate", exact=True).wait_for(timeout=ms(60))
            page.get_by_test_id("stSidebar").get_by_test_id("stSelectbox").click()
            page.get_by_role("option", name="Hostile tokens").click(timeout=ms(30))
            widget_shows(page, "token 1 of 3")  # its first token
            for i, tok in enumerate(HOSTILE):  # the chips carry the literal text
                token_chip(page, i).filter(has_text=tok).wait_for(timeout=ms(30))
            assert page.evaluate("window.__pwned") is None
            for frame in page.frames:  # st.html / components may use iframes
                assert frame.evaluate("typeof window.__pwned") == "undefined", frame.url
            text = page.locator("body").inner_text()
            assert "<img src=x" in text and "<script>window.__pwned=2</script>" in text
            assert store.get_sentence(store.sentence_ids(hostile)[0])["tokens"][:2] == \
                [(tok,) for tok in HOSTILE]
            page.screenshot(path=str(ARTIFACTS / "browser_hostile.png"), full_page=True)
        finally:
            browser.close()


@pytest.mark.timeout(240)
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian Chromium (/usr/bin/chromium) missing")
def test_two_annotators_keep_two_votes_and_undo_only_their_own(server):
    """Two browser sessions with different annotator names label the same token; the second
    one's Undo removes only the second one's vote (it used to remove the first one's label)."""
    from playwright.sync_api import sync_playwright

    url, db = server
    store = Store(db)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            pages = []
            for name in ("first", "second"):
                page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
                page.set_default_timeout(ms(30))  # Playwright's default, scaled
                page.goto(url)
                page.get_by_role("heading", name="Project", exact=True).wait_for(timeout=ms(60))
                field = page.get_by_test_id("stSidebar").get_by_test_id("stTextInputField")
                field.fill(name)
                field.press("Enter")
                page.wait_for_timeout(ms(2))  # the rerun that takes the new name
                page.get_by_test_id("stSidebarNav").get_by_role("link", name="Annotate").click(
                    timeout=ms(60))
                page.get_by_role("heading", name="Annotate", exact=True).wait_for(timeout=ms(60))
                widget_ready(page)
                pages.append(page)
            pid = store.list_projects()[0]["id"]
            sid = store.queue(pid, "sequential")[0]
            sentence = store.get_sentence(sid)
            t = sentence["labels"].index(None)

            def label(page, name):
                token_chip(page, t).click(timeout=ms(30))
                widget_shows(page, f"token {t + 1} of {len(sentence['tokens'])}")
                widget_button(page, "label", name).click(timeout=ms(30))

            def votes():
                return store.get_sentence(sid)["votes"][t]

            def wait_for(expected):
                deadline = time.monotonic() + limit(30)
                while votes() != expected:
                    assert time.monotonic() < deadline, votes()
                    time.sleep(0.2)

            label(pages[0], "B-ORG")
            wait_for({"first": "B-ORG"})
            label(pages[1], "B-PER")
            wait_for({"first": "B-ORG", "second": "B-PER"})
            assert store.get_sentence(sid)["labels"][t] is None  # a tie: left unlabeled
            widget_button(pages[1], "undo").click(timeout=ms(30))
            wait_for({"first": "B-ORG"})
            assert store.get_sentence(sid)["labels"][t] == "B-ORG"
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            pages[1].screenshot(path=str(ARTIFACTS / "browser_two_annotators.png"))
        finally:
            browser.close()
