"""Sign-in, roles and the Team page with AppTest against a temporary store (GPSL_DB)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the pages import `pages._ui`
    sys.path.insert(0, str(ROOT))

from _limits import limit  # noqa: E402
from _support import BL, BP, OUT, app_store_env  # noqa: E402
from _support import tiny_store as tiny_project  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from gpsl.annotation import Store  # noqa: E402

PASSWORD = "a long password"


@pytest.fixture
def db(tmp_path, monkeypatch) -> Path:
    return app_store_env(tmp_path, monkeypatch)


def run(params: dict | None = None, page: str | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(30))
    for k, v in (params or {}).items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, at.exception
    if page:
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception, at.exception
    return at


def signed_in_as(at: AppTest) -> str | None:
    for m in at.sidebar.markdown:
        if m.value.startswith("Signed in as **"):
            return m.value.split("**")[1]
    return None


def test_first_account_turns_sign_in_on(db):
    at = run(page="team")  # local mode: the user is the lead
    assert at.title[0].value == "Team" and signed_in_as(at) is None
    assert at.sidebar.text_input(key="annotator").value == "tester"
    at.text_input(key="acct_new_name").set_value("Lea")
    at.selectbox(key="acct_new_role").set_value("lead")
    at.text_input(key="acct_new_pw").set_value(PASSWORD)
    at.button(key="acct_create").click().run()
    assert not at.exception and not at.error
    store = Store(db)
    assert [(a["name"], a["role"]) for a in store.list_accounts()] == [("Lea", "lead")]
    assert signed_in_as(at) == "Lea"  # this tab stays signed in
    assert not any(w.key == "annotator" for w in at.sidebar.text_input)
    session = at.query_params["session"]
    assert store.session_identity(session).name == "Lea"

    fresh = run()  # another tab: sign in first, nothing else
    assert [t.value for t in fresh.title] == ["Sign in"]
    assert signed_in_as(fresh) is None and not fresh.sidebar.text_input
    fresh.text_input(key="signin_name").set_value("Lea")
    fresh.text_input(key="signin_password").set_value("wrong password")
    fresh.button[0].click().run()
    assert [e.value for e in fresh.error] == ["Wrong name or password."]
    fresh.text_input(key="signin_password").set_value(PASSWORD)
    fresh.button[0].click().run()
    assert not fresh.exception and signed_in_as(fresh) == "Lea"
    assert fresh.title[0].value == "Project"

    reopened = run({"session": session})  # the first tab after a reload or server restart
    assert signed_in_as(reopened) == "Lea" and reopened.title[0].value == "Project"
    forged = run({"session": "forged-session"})
    assert [t.value for t in forged.title] == ["Sign in"]


def test_annotator_by_link_labels_as_themselves_and_no_lead_page(db):
    store, pid = tiny_project(db)
    store.create_account("Lea", "lead", PASSWORD)
    ann = store.create_account("Ann", "annotator")
    link = store.issue_sign_in_link(ann)

    at = run({"token": link})
    assert signed_in_as(at) == "Ann" and at.title[0].value == "Annotate"
    assert "token" not in at.query_params and at.query_params["session"]
    sid = at.session_state[f"annotate_{pid}"]["current"]
    at.button(key="tok_1").click().run()
    labels = store.get_project(pid)["labels"]
    at.button(key=f"lab_{labels.index(OUT)}").click().run()
    assert not at.exception
    assert store.get_sentence(sid)["votes"][1] == {"Ann": OUT}

    # a reconnect after a server restart: a new session with the URL's session token
    again = run({"session": at.query_params["session"]})
    assert signed_in_as(again) == "Ann"
    assert again.session_state[f"annotate_{pid}"]["current"] == sid  # her leased sentence
    again.button(key="tok_2").click().run()
    again.button(key=f"lab_{labels.index(BL)}").click().run()
    assert store.get_sentence(sid)["votes"][2] == {"Ann": BL}
    assert {h["annotator"] for h in store.history(sentence_id=sid)} >= {"Ann"}

    # a lead's page is not in an annotator's navigation, and run on its own (as Streamlit
    # does for a first request straight to a page URL) it refuses before doing anything
    session = at.query_params["session"]
    for page in ("train", "team", "data", "project", "confidence"):
        with pytest.raises(ValueError, match="Known pages: .*annotate.py'\\]"):
            run({"session": session}).switch_page(f"pages/{page}.py")
        alone = AppTest.from_file(str(ROOT / "pages" / f"{page}.py"), default_timeout=limit(30))
        alone.query_params["session"] = session
        alone.run()
        assert not alone.exception, page
        assert [e.value for e in alone.error] == [
            "This page is for the project lead. Your role (annotator) can label sentences on "
            "the Annotate page."], page
        assert not alone.title and [b.key for b in alone.button] == ["sign_out"]  # no page
    assert store.list_model_versions(pid) == []

    # the account deleted meanwhile: the next run asks to sign in, no label is written
    store.delete_account(ann)
    again.run()
    assert [t.value for t in again.title] == ["Sign in"]
    assert any("session has ended" in w.value for w in again.warning)


def test_team_settings_guidelines_and_imports_credited_to_the_file(db):
    store, pid = tiny_project(db)
    at = run(page="team")
    at.number_input(key="k").set_value(2)
    at.toggle(key="blind").set_value(True)
    at.text_area(key="guidelines").set_value("Tag **people** with B-PER / I-PER.")
    at.button(key="team_save").click().run()
    assert not at.exception and not at.error
    settings = store.team_settings(pid)
    assert settings["overlap"] == 2 and settings["blind"] and settings["resolve"] == "majority"
    assert store.get_project(pid)["guidelines"] == "Tag **people** with B-PER / I-PER."

    data = run(page="data")
    data.file_uploader(key="imp_file").set_value(
        ("more.conll", b"Zed B-PER\nran O\n", "text/plain")).run()
    imp = [b for b in data.button if (b.key or "").startswith("imp_go_")][0]
    imp.click().run()
    assert not data.exception and not data.error
    last = store.sentence_ids(pid, "train")[-1]
    assert store.get_sentence(last)["votes"][0] == {"import:more.conll": BP}
    assert store.get_sentence(last)["labels"] == [BP, OUT]


def test_local_mode_keeps_the_typed_name_across_a_reload(db):
    at = run()
    assert at.sidebar.text_input(key="annotator").value == "tester"
    assert "annotator" not in at.query_params  # the default name stays out of the URL
    at.sidebar.text_input(key="annotator").set_value("Bea").run()
    assert at.query_params["annotator"] == "Bea"
    reloaded = run({"annotator": "Bea"})  # a reload: a new session, the same URL
    assert reloaded.sidebar.text_input(key="annotator").value == "Bea"
    reloaded.switch_page("pages/annotate.py").run()
    sid = reloaded.session_state[f"annotate_{reloaded.session_state['project_id']}"]["current"]
    reloaded.button(key="tok_0").click().run()
    reloaded.button(key="lab_0").click().run()
    assert "Bea" in Store(db).get_sentence(sid)["votes"][0]
