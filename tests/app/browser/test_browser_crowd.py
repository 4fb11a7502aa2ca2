"""A crowd folder through the app in a real browser (`streamlit run app.py`, Debian Chromium):
the hand-made folder of ``_crowd_folder`` (written under the test's temporary directory)
uploaded as a folder (Streamlit's directory upload) on the Data page into a plain-text
project, with the votes kept and dropped shown and every vote stored; a folder with bad
files shows one error line per file and imports nothing; a .zip of it reads the same on the
Project page, which makes a new project of it (the ``ner`` feature set, the crowd rule),
whose Team page lists every worker with the crowd model's reliability; a plain-text file
starts a new project on the ``ner`` feature set (a CRF++ template stays selectable).

Skipped when /usr/bin/chromium is missing.  Screenshots go to $GPSL_TEST_ARTIFACTS
(default <tmp>/gpsl-test-artifacts, outside the checkout).
"""

from __future__ import annotations

import zipfile

import pytest

from gpsl.annotation import Store
from tests.support.crowd_folder import LABELS, upload_files, write_folder
from tests.support.helpers import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, serve_app, wait_until
from tests.support.limits import ms

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="Debian Chromium (/usr/bin/chromium) missing")


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("crowd")
    db = tmp / "gpsl.sqlite3"
    store = Store(db)
    pid = store.create_project("Plain words", list(LABELS), sentences=[
        {"tokens": [["Hello"], ["world"]]}])
    good = write_folder(tmp / "good")
    zipped = tmp / "crowd.zip"
    with zipfile.ZipFile(zipped, "w") as zf:
        for name, data in upload_files(good):
            zf.writestr(name, data)
    plain = tmp / "plain.txt"
    plain.write_text("Ada Lovelace met Charles Babbage\nGrace Hopper visited Arlington\n",
                     encoding="utf-8")
    bad = write_folder(tmp / "bad", workers={"W1": {"d1.txt": "Ada B_PER\nLovelace I-PER\n"},
                                             "W2": {"d1.txt": "Ada\n"}})
    with serve_app(tmp / "server.log", {"GPSL_DB": str(db),
                                        "GPSL_MODELS": str(tmp / "models")}) as url:
        yield {"url": url, "store": store, "pid": pid, "good": good, "bad": bad,
               "plain": plain, "zip": zipped}
    store.close()


def _open(browser, url, project):
    page = browser.new_context(viewport={"width": 1400, "height": 1600}).new_page()
    page.set_default_timeout(ms(30))
    page.goto(url)
    page.get_by_role("heading", name="Project", exact=True).wait_for(timeout=ms(60))
    page.get_by_test_id("stSidebar").get_by_test_id("stSelectbox").first.click()
    page.get_by_role("option", name=project).click()
    page.get_by_test_id("stSidebar").get_by_text("model: none").wait_for()
    return page


def _data_page_upload(page, folder):
    page.get_by_test_id("stSidebar").get_by_role("link", name="Data").click()
    page.get_by_text("Import a crowd folder").click()
    page.locator("input[type=file][webkitdirectory]").set_input_files(str(folder))


def _click_until(page, store, pid, button: str, shown: str) -> None:
    """Click ``button`` and wait for ``shown``; a click that came while the page was still
    rerunning (the file widget's upload) is lost by Streamlit: it is clicked again only while
    nothing of the import is in the store and the button is still there."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    target = page.get_by_role("button", name=button)
    target.click()
    for _ in range(6):
        try:
            page.get_by_text(shown).wait_for(timeout=ms(20))
            return
        except PlaywrightTimeout:
            if not store.team_votes(pid) and target.count():
                target.click()
    page.get_by_text(shown).wait_for(timeout=ms(60))


@pytest.mark.timeout(300)
def test_a_crowd_folder_through_the_data_and_project_pages(app):
    from playwright.sync_api import sync_playwright

    store, pid = app["store"], app["pid"]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            # bad files: one error line each, no import button, nothing written
            page = _open(browser, app["url"], "Plain words")
            _data_page_upload(page, app["bad"])
            errors = page.get_by_test_id("stAlertContentError")
            errors.filter(has_text="W2/d1.txt:1: expected 'token label'").wait_for(
                timeout=ms(60))
            texts = [t.split("\n")[-1].strip() for t in errors.all_inner_texts()]  # the icon
            assert texts == ["val/mturk_train_data/W1/d1.txt:1: bad label 'B_PER' (expected "
                             "O or PREFIX-TYPE)", "val/mturk_train_data/W2/d1.txt:1: expected "
                             "'token label', found 'Ada'"], texts
            assert page.get_by_role("button", name="Import the crowd folder").count() == 0
            page.screenshot(path=str(ARTIFACTS / "crowd_folder_errors.png"))
            assert store.sentence_count(pid) == 1 and store.team_votes(pid) == []
            page.context.close()

            # the good folder into this project: 25 votes kept, 4 worker tokens dropped
            page = _open(browser, app["url"], "Plain words")
            _data_page_upload(page, app["good"])
            page.get_by_text("Votes kept").wait_for(timeout=ms(60))
            main = page.get_by_test_id("stMain")
            assert "Dropped, and why: 1 a line with a label but no token" in main.inner_text()
            _click_until(page, store, pid, "Import the crowd folder",
                         "with 25 votes of 3 workers")
            page.screenshot(path=str(ARTIFACTS / "crowd_folder_imported.png"))
            wait_until(lambda: len(store.team_votes(pid)) == 25, timeout=30)
            assert store.sentence_count(pid) == 4
            assert store.team_settings(pid)["resolve"] == "crowd"
            page.context.close()

            # a .zip of the folder reads the same
            page = _open(browser, app["url"], "Plain words")
            page.get_by_role("tab", name="From a crowd folder").click()
            page.locator(".st-key-new_crowd_source button").filter(
                has_text="A .zip of the folder").click()
            page.locator(".st-key-new_crowd_zip input[type=file]").set_input_files(
                str(app["zip"]))
            page.get_by_text("Votes kept").wait_for(timeout=ms(60))
            assert "Dropped, and why: 1 a line with a label but no token" in \
                page.get_by_test_id("stMain").inner_text()
            page.context.close()

            # a new project from it on the Project page, then its Team page
            page = _open(browser, app["url"], "Plain words")
            page.get_by_role("tab", name="From a crowd folder").click()
            page.locator("input[type=file][webkitdirectory]").set_input_files(
                str(app["good"]))
            page.get_by_text("Votes kept").wait_for(timeout=ms(60))
            page.locator(".st-key-new_crowd_name input").fill("Crowd words")
            page.locator(".st-key-create_crowd button").click()
            page.get_by_text("Created project “Crowd words”").wait_for(timeout=ms(120))
            new = next(p for p in store.list_projects() if p["name"] == "Crowd words")
            assert new["template"] == "ner" and len(store.team_votes(new["id"])) == 25
            page.get_by_test_id("stSidebar").get_by_role("link", name="Team").click()
            page.get_by_text("Reliability from the crowd model").wait_for(timeout=ms(60))
            table = page.get_by_test_id("stDataFrame").first
            table.wait_for()
            page.screenshot(path=str(ARTIFACTS / "crowd_folder_team.png"))
            page.context.close()

            # a plain-text file starts on the ner feature set; CRF++ stays selectable
            page = _open(browser, app["url"], "Plain words")
            page.locator(".st-key-new_file input[type=file]").set_input_files(
                str(app["plain"]))
            page.get_by_text("Word features for plain text").wait_for(timeout=ms(60))
            template = page.locator("[class*='st-key-new_tpl_'] textarea")
            assert template.count() == 0  # no CRF++ text while ner is on
            page.screenshot(path=str(ARTIFACTS / "crowd_plain_text_ner.png"))
            kinds = page.locator("[class*='st-key-new_tpl_'] button")
            kinds.filter(has_text="CRF++ template").click()
            template.wait_for()
            assert "%x[0,0]" in template.input_value()
            kinds.filter(has_text="feature set").click()
            page.get_by_text("Word features for plain text").wait_for()
            page.locator("[class*='st-key-new_labels_'] input").fill("B-PER I-PER O")
            page.locator("[class*='st-key-new_labels_'] input").press("Enter")
            page.wait_for_timeout(1000)
            page.locator("[class*='st-key-create_upload_'] button").click()
            page.get_by_text("Created project “plain”").wait_for(timeout=ms(60))
            made = next(p for p in store.list_projects() if p["name"] == "plain")
            assert made["template"] == "ner"
        finally:
            browser.close()
