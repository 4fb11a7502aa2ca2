"""A page load asks nothing of any host but the app's own (Chromium, request logging): the
tab's icon is served by the app, never fetched from fonts.gstatic.com, so the app works
offline and tells no outside server who opens it.  Skipped without Debian's Chromium."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from tests.support.helpers import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, serve_app
from tests.support.limits import ms

PAGES = ("", "annotate", "train", "team", "data")


@pytest.mark.timeout(300)
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian Chromium (/usr/bin/chromium) missing")
def test_no_page_load_makes_a_request_off_the_loopback(tmp_path):
    from playwright.sync_api import sync_playwright

    with serve_app(tmp_path / "server.log",
                   {"GPSL_DB": str(tmp_path / "gpsl.sqlite3"),
                    "GPSL_ANNOTATOR": "offline-test"}) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 850})
            page.set_default_timeout(ms(60))
            hosts: list[str] = []
            page.on("request", lambda r: hosts.append(urlsplit(r.url).hostname or r.url))
            for name in PAGES:
                page.goto(url.rstrip("/") + "/" + name)
                page.get_by_test_id("stSidebarNav").wait_for(timeout=ms(90))
                page.wait_for_timeout(ms(2))
            icon = page.locator("link[rel='shortcut icon'], link[rel='icon']").first
            href = icon.get_attribute("href") or ""
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "offline_team.png"))
        finally:
            browser.close()
    outside = sorted({h for h in hosts if h not in ("127.0.0.1", "localhost")
                      and not h.startswith(("data:", "blob:"))})
    assert hosts and outside == [], outside
    assert "gstatic" not in href and "material" not in href, href
