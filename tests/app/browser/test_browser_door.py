"""The door in a real browser (`streamlit run app.py`, Debian Chromium): local mode on the
loopback, the setup form for a store without accounts reached under another host name (as
through a reverse proxy or a DNS name), a session kept in a cookie and never in any URL the
app writes or the browser requests, one-use sign-in links, sign-out, and a hostile account
name shown as text in the toast and the table (no image fetched, no link drawn).

Skipped when /usr/bin/chromium is missing.  Screenshots go to $GPSL_TEST_ARTIFACTS
(default <tmp>/gpsl-test-artifacts, outside the checkout).
"""

from __future__ import annotations

import pytest

from gpsl.annotation import Store
from tests.support.helpers import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    free_port,
    serve_app,
    tiny_store,
    wait_until,
)
from tests.support.limits import ms

PASSWORD = "sturdy wombat lantern"
HOST = "gpsl-door.test"  # resolved to 127.0.0.1 by Chromium only: not a loopback name

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="Debian Chromium (/usr/bin/chromium) missing")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("door")
    db = tmp / "gpsl.sqlite3"
    store, pid = tiny_store(db)
    port = free_port()
    with serve_app(tmp / "server.log", {"GPSL_DB": str(db), "GPSL_ANNOTATOR": "tester"},
                   port=port) as url:
        yield {"url": url, "port": port, "store": store, "pid": pid, "log": tmp / "server.log"}
    store.close()


def _shot(page, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


@pytest.mark.timeout(400)
def test_setup_sessions_links_and_escaping(served):
    from playwright.sync_api import sync_playwright

    store: Store = served["store"]
    port = served["port"]
    local, named = served["url"], f"http://{HOST}:{port}/"
    seen: list[str] = []  # every URL the browser requested, navigated to or opened

    def watch(page):
        page.on("request", lambda r: seen.append(r.url))
        page.on("websocket", lambda ws: seen.append(ws.url))
        page.on("framenavigated", lambda f: seen.append(f.url))
        page.set_default_timeout(ms(30))
        return page

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True,
            args=[*CHROMIUM_ARGS, f"--host-resolver-rules=MAP {HOST} 127.0.0.1"])
        try:
            # 1. on the loopback, no account: single-user local mode, and the page says so
            page = watch(browser.new_context(viewport={"width": 1300, "height": 850})
                         .new_page())
            page.goto(local)
            page.get_by_role("heading", name="Project", exact=True).wait_for(timeout=ms(60))
            page.get_by_test_id("stSidebar").get_by_text("Local mode").wait_for()
            _shot(page, "door_local_mode.png")

            # 2. under another host name the same server is "served to others": only the
            # setup form, which wants the token the server printed
            lead_ctx = browser.new_context(viewport={"width": 1300, "height": 850})
            lead = watch(lead_ctx.new_page())
            lead.goto(named)
            lead.get_by_role("heading", name="Set up this annotation store").wait_for(
                timeout=ms(60))
            assert lead.get_by_role("heading", name="Project", exact=True).count() == 0
            assert "setup token" in served["log"].read_text()  # printed on the console
            lead.get_by_label("Setup token").wait_for()
            _shot(lead, "door_setup.png")
            token = store.issue_setup_token()  # (the console's token is used up by this one)
            lead.get_by_label("Setup token").fill(token)
            lead.get_by_label("Your name (the lead account)").fill("Lea")
            lead.get_by_label("Password", exact=True).fill(PASSWORD)
            lead.get_by_label("The same password again").fill(PASSWORD)
            lead.get_by_role("button", name="Create the lead account").click()
            lead.get_by_role("heading", name="Project", exact=True).wait_for(timeout=ms(60))
            lead.get_by_test_id("stSidebar").get_by_text("Signed in as").wait_for()
            assert [(a["name"], a["role"]) for a in store.list_accounts()] == [("Lea", "lead")]

            # the session: in a SameSite cookie, valid in the store, in no URL
            cookies = wait_until(lambda: [c for c in lead_ctx.cookies()
                                          if c["name"].startswith("gpsl_session_")], 30)
            assert len(cookies) == 1 and cookies[0]["sameSite"] == "Strict"
            session = cookies[0]["value"]
            assert store.session_identity(session).name == "Lea"
            lead.reload()  # a reload (new connection) finds the session in the cookie
            lead.get_by_role("heading", name="Project", exact=True).wait_for(timeout=ms(60))
            lead.get_by_test_id("stSidebar").get_by_text("Signed in as").wait_for()
            _shot(lead, "door_signed_in.png")

            # the local tab is no longer in local mode: it must sign in
            page.reload()
            page.get_by_role("heading", name="Sign in").wait_for(timeout=ms(60))

            # 3. accounts on the Team page: a hostile name shows as text, nothing is loaded
            lead.get_by_test_id("stSidebarNav").get_by_role("link", name="Team").click()
            lead.get_by_role("heading", name="Team", exact=True).wait_for(timeout=ms(60))
            lead.get_by_role("tab", name="Accounts").click()
            hostile = f"![i](http://{HOST}:{port}/b.png) www.example.com"
            form = lead.get_by_test_id("stForm").filter(has_text="New account")
            form.get_by_label("Name").fill(hostile)
            form.get_by_role("button", name="Create account").click()
            toast = lead.get_by_test_id("stToast")
            toast.wait_for(timeout=ms(30))
            assert hostile in toast.inner_text().replace("\u2060", "")  # as typed
            drawn = lead.locator("img[src*='b.png'], a[href*='b.png'], a[href*='example.com']")
            assert drawn.count() == 0, [drawn.nth(i).evaluate("e => e.outerHTML")
                                        for i in range(drawn.count())]
            form.get_by_label("Name").fill("Ann")
            form.get_by_role("button", name="Create account").click()
            lead.get_by_test_id("stToast").filter(has_text="“Ann”").wait_for(timeout=ms(30))
            ann_id = next(a["id"] for a in store.list_accounts() if a["name"] == "Ann")
            assert next(a for a in store.list_accounts() if a["id"] == ann_id)["role"] == \
                "annotator"  # the default role
            assert "Ann" in [m["name"] for m in store.members(served["pid"])]  # this project
            _shot(lead, "door_team_accounts.png")

            # 4. a sign-in link works once
            link = f"{named}?token={store.issue_sign_in_link(ann_id)}"
            ann = watch(browser.new_context(viewport={"width": 1300, "height": 850})
                        .new_page())
            ann.goto(link)
            ann.get_by_role("heading", name="Annotate", exact=True).wait_for(timeout=ms(60))
            ann.get_by_test_id("stSidebar").get_by_text("Ann", exact=False).first.wait_for()
            assert "token=" not in ann.url
            again = watch(browser.new_context(viewport={"width": 1300, "height": 850})
                          .new_page())
            again.goto(link)
            again.get_by_role("heading", name="Sign in").wait_for(timeout=ms(60))
            again.get_by_text("This sign-in link is not valid").wait_for()
            _shot(again, "door_link_used.png")

            # 5. sign out: the session ends in the store, the cookie goes, a reload signs in
            lead.get_by_test_id("stSidebar").get_by_role("button", name="Sign out").click()
            lead.get_by_role("heading", name="Sign in").wait_for(timeout=ms(60))
            assert store.session_identity(session) is None
            assert lead.get_by_text("session has ended").count() == 0  # signed out: no alarm
            wait_until(lambda: not [c for c in lead_ctx.cookies()
                                    if c["name"].startswith("gpsl_session_") and c["value"]],
                       30)
            lead.reload()
            lead.get_by_role("heading", name="Sign in").wait_for(timeout=ms(60))
            _shot(lead, "door_sign_in.png")
        finally:
            browser.close()

    tokens = [session] + [r[0] for r in store.db.read(lambda c: c.exec_driver_sql(
        "SELECT token_hash FROM auth_tokens").fetchall())]
    assert seen, "no URL recorded"
    leaked = [u for u in seen for t in tokens if t in u]
    assert not leaked, leaked  # no session token (nor its hash) in any URL
    assert not [u for u in seen if "b.png" in u]  # the hostile image was never fetched


@pytest.mark.timeout(300)
def test_a_page_url_signed_out_shows_the_sign_in(tmp_path):
    """A signed-out visit to a page's URL (/team, a bookmark) shows the sign-in form, never
    Streamlit's "Page not found"; signing in there opens that page; an annotator at a lead's
    page URL reads that it is for the lead."""
    from playwright.sync_api import sync_playwright

    store, pid = tiny_store(tmp_path / "gpsl.sqlite3")
    store.create_account("Lea", "lead", PASSWORD)
    ann_id = store.create_account("Ann", "annotator", None)
    store.set_member(pid, ann_id)
    with serve_app(tmp_path / "server.log", {"GPSL_DB": str(tmp_path / "gpsl.sqlite3")}) as url, \
            sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            def tab(path):
                page = browser.new_context(viewport={"width": 1300, "height": 850}).new_page()
                page.set_default_timeout(ms(30))
                page.goto(url + path)
                return page

            tab("").get_by_role("heading", name="Sign in").wait_for(timeout=ms(60))
            for path in ("team", "data"):
                page = tab(path)
                page.get_by_role("heading", name="Sign in").wait_for(timeout=ms(60))
                page.wait_for_timeout(1500)  # Streamlit's "Page not found" dialog came by now
                assert page.get_by_text("Page not found").count() == 0
                _shot(page, f"door_signed_out_{path}.png")
            page.get_by_label("Name", exact=True).fill("Lea")
            page.get_by_label("Password", exact=True).fill(PASSWORD)
            page.get_by_role("button", name="Sign in").click()
            page.get_by_role("heading", name="Data", exact=True).wait_for(timeout=ms(60))
            ann = tab(f"?token={store.issue_sign_in_link(ann_id)}")
            ann.get_by_role("heading", name="Annotate", exact=True).wait_for(timeout=ms(60))
            wait_until(lambda: [c for c in ann.context.cookies()
                                if c["name"].startswith("gpsl_session_") and c["value"]], 30)
            ann.goto(url + "team")  # a bookmark of a lead's page, the session in its cookie
            ann.get_by_text("This page is for the project lead").wait_for(timeout=ms(60))
            assert ann.get_by_text("Page not found").count() == 0
            _shot(ann, "door_annotator_team.png")
        finally:
            browser.close()
    store.close()


@pytest.mark.timeout(300)
def test_enter_then_a_click_on_create_the_lead_account_signs_the_tab_in(tmp_path):
    """Local mode, the first lead account: Enter in the form, then a click on its button.
    The two submits run side by side on the server; the second finds the account the first
    made and signs this tab in with the typed password, never "already exists" and
    signed out."""
    from playwright.sync_api import sync_playwright

    db = tmp_path / "gpsl.sqlite3"
    store, _ = tiny_store(db)
    with serve_app(tmp_path / "server.log", {"GPSL_DB": str(db), "GPSL_ANNOTATOR": "tester"}) \
            as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1300, "height": 850}).new_page()
            page.set_default_timeout(ms(30))
            page.goto(url + "team")
            page.get_by_role("heading", name="Team", exact=True).wait_for(timeout=ms(60))
            page.get_by_role("tab", name="Accounts").click()
            form = page.get_by_test_id("stForm").filter(has_text="Your lead account")
            form.get_by_label("Name").fill("Lea")
            form.get_by_label("Password (at least", exact=False).fill(PASSWORD)
            form.get_by_label("The same password again").fill(PASSWORD)
            form.get_by_label("The same password again").press("Enter")
            form.get_by_role("button", name="Create the lead account").click()
            page.get_by_test_id("stSidebar").get_by_text("Signed in as").wait_for(
                timeout=ms(60))
            page.wait_for_timeout(2000)  # the second submit's answer is drawn by now
            _shot(page, "door_first_lead_enter_and_click.png")
            assert page.get_by_text("already exists").count() == 0
            assert page.get_by_test_id("stSidebar").get_by_text("Signed in as").count() == 1
        finally:
            browser.close()
    assert [(a["name"], a["role"]) for a in store.list_accounts()] == [("Lea", "lead")]
    store.close()
