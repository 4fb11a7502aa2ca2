"""Two annotators typing on one sentence at the same time, in real browsers (`streamlit run
app.py`, Debian Chromium, two browser contexts): k = 2 with blind mode off (the default),
each presses 10 keys 60 ms apart, their presses interleaved.  Both get exactly their 10
votes, on the tokens their own cursor was on, with no conflict; neither sees the other's
labels before a lead's review; the lead's Team page shows both people.

Skipped when /usr/bin/chromium is missing.  Screenshots go to $GPSL_TEST_ARTIFACTS
(default <tmp>/gpsl-test-artifacts, outside the checkout).
"""

from __future__ import annotations

import re

import pytest

from gpsl.annotation import Store
from tests.support.helpers import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    serve_app,
    token_chip,
    wait_until,
    widget_ready,
    widget_shows,
)
from tests.support.limits import limit, ms

LABELS = ["B-PER", "I-PER", "B-LOC", "I-LOC", "O"]  # keys: PER 1, LOC 2, O 0
TOKENS = ("Ada Lovelace met Charles Babbage in London and later wrote to Mary Somerville "
          "about engines").split()
PASSWORD = "lead password 1"
KEYS = ["1", "1", "0", "2", "0", "0", "1", "0", "2", "0"]
WANT = ["B-PER", "B-PER", "O", "B-LOC", "O", "O", "B-PER", "O", "B-LOC", "O"]

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="Debian Chromium (/usr/bin/chromium) missing")



@pytest.mark.timeout(300)
def test_two_annotators_type_on_one_sentence_at_once(tmp_path):
    from playwright.sync_api import sync_playwright

    db = tmp_path / "gpsl.sqlite3"
    store = Store(db)
    pid = store.create_project("Overlap", LABELS, sentences=[
        {"tokens": TOKENS}, {"tokens": "Grace Hopper visited Arlington".split()}])
    store.set_team_settings(pid, overlap=2)  # blind mode stays off: the default
    store.create_account("Lea", "lead", PASSWORD)
    links = {}
    for name in ("Ann", "Bob"):  # annotators see the projects they are members of
        aid = store.create_account(name, "annotator")
        store.set_member(pid, aid)
        links[name] = store.issue_sign_in_link(aid)
    sid = store.sentence_ids(pid)[0]
    n = len(TOKENS)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with serve_app(tmp_path / "server.log", {"GPSL_DB": str(db)}) as url, \
            sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            pages = {}
            for name in ("Ann", "Bob"):
                page = browser.new_context(viewport={"width": 1400, "height": 950}).new_page()
                page.set_default_timeout(ms(30))
                page.goto(f"{url}?token={links[name]}")
                page.get_by_role("heading", name="Annotate", exact=True).wait_for(
                    timeout=ms(60))
                widget_ready(page)
                widget_shows(page, f"0 of {n} tokens labeled by you", "Head")
                token_chip(page, 0).click()  # the focus on the page; token 1 selected
                widget_shows(page, f"token 1 of {n}")
                pages[name] = page
            ann, bob = pages["Ann"], pages["Bob"]
            assert {x["annotator"] for x in store.leases(pid)} == {"Ann", "Bob"}
            assert {x["sentence_id"] for x in store.leases(pid)} == {sid}
            # 10 keys each, 60 ms apart, Ann's and Bob's presses interleaved
            for k in KEYS:
                ann.keyboard.press(k)
                ann.wait_for_timeout(30)
                bob.keyboard.press(k)
                bob.wait_for_timeout(30)

            def votes():
                return store.get_sentence(sid)["votes"]

            wait_until(lambda: sum(len(v) for v in votes()) >= 20, 60, what="20 votes")
            got = votes()
            for t in range(10):
                assert got[t] == {"Ann": WANT[t], "Bob": WANT[t]}, (t, got[t])
            assert all(v == {} for v in got[10:]), got[10:]
            assert store.conflicts(pid) == []  # identical keys: no conflict
            for page in (ann, bob):
                widget_shows(page, f"10 of {n} tokens labeled by you", "Head")
                widget_shows(page, f"token 11 of {n}")
                widget_shows(page, "all saved", "Sync")

            # Ann labels one more token; Bob, on the same sentence, does not see it
            ann.keyboard.press("2")
            wait_until(lambda: votes()[10] == {"Ann": "B-LOC"}, 60, what="Ann's 11th vote")
            widget_shows(ann, f"11 of {n} tokens labeled by you", "Head")
            bob.keyboard.press("ArrowRight")  # Bob's cursor only: his page stays his
            widget_shows(bob, f"token 12 of {n}")
            bob.reload()  # drawn afresh after Ann's vote: still without it
            widget_ready(bob)
            widget_shows(bob, f"10 of {n} tokens labeled by you", "Head")
            assert "B-LOC" not in token_chip(bob, 10).inner_text()
            assert not re.search(r"\bAnn\b", bob.locator("body").inner_text())
            bob.get_by_text("stay hidden until a lead reviews").wait_for(timeout=ms(30))
            bob.screenshot(path=str(ARTIFACTS / "overlap_bob.png"), full_page=True)
            ann.screenshot(path=str(ARTIFACTS / "overlap_ann.png"), full_page=True)

            # the lead reviews: the Team page lists both people with their votes
            lead = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            lead.set_default_timeout(ms(30))
            lead.goto(url)
            lead.get_by_role("heading", name="Sign in").wait_for(timeout=ms(60))
            lead.get_by_role("textbox", name="Name").fill("Lea")
            lead.get_by_role("textbox", name="Password").fill(PASSWORD)
            lead.get_by_role("button", name="Sign in").click()
            lead.get_by_role("heading", name="Project", exact=True).wait_for(timeout=ms(60))
            lead.get_by_test_id("stSidebarNav").get_by_role("link", name="Team").click()
            lead.get_by_role("heading", name="Team", exact=True).wait_for(timeout=ms(60))
            people = lead.get_by_role("tabpanel", name="People and agreement")
            people.get_by_test_id("stDataFrame").first.wait_for(timeout=ms(30))
            metric = people.get_by_test_id("stMetric").filter(has_text="Tokens labeled by 2+")
            assert metric.inner_text().split()[-1] == "10"
            lead.screenshot(path=str(ARTIFACTS / "overlap_team.png"), full_page=True)
            # the speed figure reads when the keys were pressed (60 ms apart), not when the
            # busy server wrote them (several to a write)
            speed = {r["annotator"]: r["median_seconds"] for r in store.annotator_stats(pid)}
            for name in ("Ann", "Bob"):
                assert 0.02 < speed[name] < limit(0.3), speed
        finally:
            browser.close()
    store.close()
