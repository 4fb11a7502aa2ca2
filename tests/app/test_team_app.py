"""Sign-in, roles and the Team page with AppTest against a temporary store (GPSL_DB)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from streamlit.testing.v1 import AppTest  # noqa: E402

from gpsl.annotation import Store  # noqa: E402
from tests.support.helpers import BL, BP, IP, OUT, app_store_env  # noqa: E402
from tests.support.helpers import tiny_store as tiny_project  # noqa: E402
from tests.support.limits import limit  # noqa: E402

PASSWORD = "a long sturdy passphrase"


@pytest.fixture
def db(tmp_path, monkeypatch) -> Path:
    return app_store_env(tmp_path, monkeypatch)


def run(params: dict | None = None, page: str | None = None,
        session: str | None = None) -> AppTest:
    """The app in a new tab: ``params`` in its URL, ``session`` the session token its
    server-side state holds (a tab that signed in before)."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(30))
    for k, v in (params or {}).items():
        at.query_params[k] = v
    if session is not None:
        at.session_state["_session"] = session
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


def no_token_in_url(at: AppTest) -> bool:
    return not ({"session", "token"} & set(at.query_params))


def test_first_account_turns_sign_in_on(db):
    at = run(page="team")  # local mode: the user is the lead
    assert at.title[0].value == "Team" and signed_in_as(at) is None
    assert at.sidebar.text_input(key="annotator").value == "tester"
    assert any("Local mode" in c.value for c in at.sidebar.caption)
    at.text_input(key="lead_first_name").set_value("Lea")
    at.text_input(key="lead_first_pw").set_value("12345678901")  # long, but common
    at.text_input(key="lead_first_pw2").set_value("12345678901")
    at.button(key="lead_first_create").click().run()
    assert [e.value for e in at.error] and "too easy to guess" in at.error[0].value
    assert Store(db).account_count() == 0
    at.text_input(key="lead_first_pw").set_value(PASSWORD)
    at.text_input(key="lead_first_pw2").set_value(PASSWORD)
    at.button(key="lead_first_create").click().run()
    assert not at.exception and not at.error
    store = Store(db)
    assert [(a["name"], a["role"]) for a in store.list_accounts()] == [("Lea", "lead")]
    assert signed_in_as(at) == "Lea"  # this tab stays signed in
    assert not any(w.key == "annotator" for w in at.sidebar.text_input)
    session = at.session_state["_session"]
    assert store.session_identity(session).name == "Lea"
    assert no_token_in_url(at)  # the session lives in the tab's state (and a cookie)

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
    assert fresh.title[0].value == "Project" and no_token_in_url(fresh)

    reopened = run(session=session)  # the first tab, rerun with its session
    assert signed_in_as(reopened) == "Lea" and reopened.title[0].value == "Project"
    for forged in ({"session": session}, {"session": "forged-session"}):
        at_url = run(forged)  # a session in a URL signs nobody in, and leaves the URL
        assert [t.value for t in at_url.title] == ["Sign in"] and no_token_in_url(at_url)
    again = run(session="forged-session")
    assert [t.value for t in again.title] == ["Sign in"]


def test_a_second_submit_of_the_first_lead_form_keeps_the_tab_signed_in(db):
    """Enter, then a click on "Create the lead account": the second trigger reaches the
    server after the first one created the account and signed the tab in. It must fire
    nothing (a widget with the same key, the "New account" form's, got it and answered
    "already exists" with the lead's name and password filled in)."""
    at = run(page="team")
    at.text_input(key="lead_first_name").set_value("Lea")
    at.text_input(key="lead_first_pw").set_value(PASSWORD)
    at.text_input(key="lead_first_pw2").set_value(PASSWORD)
    button = at.button(key="lead_first_create")
    button.click().run()
    assert signed_in_as(at) == "Lea" and not at.error
    again = [b for b in at.button if b.key == button.key]  # what the second trigger reaches
    for b in again:
        b.click().run()
    assert not at.exception and not [e.value for e in at.error], [e.value for e in at.error]
    assert signed_in_as(at) == "Lea" and at.title[0].value == "Team"
    assert [a["name"] for a in Store(db).list_accounts()] == ["Lea"]
    new_form = {w.key: w.value for w in at.text_input}
    assert new_form.get("acct_new_name") == "" and new_form.get("acct_new_pw") == ""


def test_the_team_table_shows_a_dash_for_a_kappa_nobody_shares(db):
    """Two people who labeled different sentences share no token: their mean κ is "–" (with
    a help text), never a literal None."""
    store, pid = tiny_project(db)
    first, second = store.sentence_ids(pid, "train")[:2]
    store.set_labels(first, {0: BP, 1: IP, 2: OUT}, "Ann")
    store.set_labels(second, {0: BP}, "Bob")
    store.set_labels(first, {0: BP, 1: IP, 2: OUT}, "Cleo")
    store.close()
    at = run(page="team")
    table = at.dataframe[0].value
    kappa = dict(zip(table["annotator"], table["mean κ"]))
    assert kappa["Bob"] == "–" and kappa["Ann"] != "–" and kappa["Cleo"] != "–", kappa
    assert all(isinstance(k, str) and k != "None" for k in kappa.values()), kappa
    assert kappa["Ann"] == kappa["Cleo"] == "1.00"  # each the other's only partner
    # one action each: no pace measured, "–" too (a literal None showed before)
    for col in ("labels / hour", "median s / label"):
        pace = dict(zip(table["annotator"], table[col]))
        assert pace["Bob"] == "–" and all(isinstance(v, str) and v != "None"
                                          for v in pace.values()), (col, pace)


def test_sign_in_is_rate_limited(db):
    store, _ = tiny_project(db)
    store.create_account("Lea", "lead", PASSWORD)
    at = run()
    for _ in range(5):
        at.text_input(key="signin_name").set_value("lea")
        at.text_input(key="signin_password").set_value("not the password")
        at.button[0].click().run()
        assert [e.value for e in at.error] == ["Wrong name or password."]
    at.text_input(key="signin_password").set_value(PASSWORD)  # right, but too late
    at.button[0].click().run()
    assert signed_in_as(at) is None
    assert "too many failed sign-ins for this name" in at.error[0].value
    other = run()  # another name is not locked out
    assert other.title[0].value == "Sign in"


def test_annotator_by_link_labels_as_themselves_and_no_lead_page(db):
    store, pid = tiny_project(db)
    other = store.create_project("other", [BP, OUT])
    store.create_account("Lea", "lead", PASSWORD)
    ann = store.create_account("Ann")  # an annotator, by default
    store.set_member(pid, ann)
    link = store.issue_sign_in_link(ann)

    at = run({"token": link})
    assert signed_in_as(at) == "Ann" and at.title[0].value == "Annotate"
    assert no_token_in_url(at)
    sid = at.session_state[f"annotate_{pid}"]["current"]
    at.button(key="tok_1").click().run()
    labels = store.get_project(pid)["labels"]
    at.button(key=f"lab_{labels.index(OUT)}").click().run()
    assert not at.exception
    assert store.get_sentence(sid)["votes"][1] == {"Ann": OUT}
    # her projects only: "other" is not hers
    assert at.sidebar.selectbox(key="project_id").options == ["tiny"]
    assert other not in [p.id for p in store.acting(at.session_state["_who"])
                         .reports.projects()]

    # the link again (history, a shared URL): used up, nobody is signed in
    used = run({"token": link})
    assert [t.value for t in used.title] == ["Sign in"] and signed_in_as(used) is None
    assert "not valid" in used.error[0].value

    # her tab again with its session (a rerun, or a reconnect that brought the cookie)
    session = at.session_state["_session"]
    again = run(session=session)
    assert signed_in_as(again) == "Ann"
    assert again.session_state[f"annotate_{pid}"]["current"] == sid  # her leased sentence
    again.button(key="tok_2").click().run()
    again.button(key=f"lab_{labels.index(BL)}").click().run()
    assert store.get_sentence(sid)["votes"][2] == {"Ann": BL}
    assert {h["annotator"] for h in store.history(sentence_id=sid)} >= {"Ann"}

    # a lead's page is not in an annotator's navigation; its URL (a hidden page, never
    # "Page not found"), and the page run on its own (as Streamlit does for a first request
    # straight to a page URL), refuse before doing anything
    for page in ("train", "team", "data", "project", "confidence"):
        via = run(session=session).switch_page(f"pages/{page}.py").run()
        assert not via.title and "for the project lead" in via.error[0].value
        alone = AppTest.from_file(str(ROOT / "pages" / f"{page}.py"), default_timeout=limit(30))
        alone.session_state["_session"] = session
        alone.run()
        assert not alone.exception, page
        assert [e.value for e in alone.error] == [
            "This page is for the project lead. Your role (annotator) can label sentences on "
            "the Annotate page."], page
        assert not alone.title and [b.key for b in alone.button] == ["sign_out"]  # no page
    assert store.list_model_versions(pid) == []

    # removed from the project: the page has nothing for her, and no label is written
    store.set_member(pid, ann, False)
    out = run(session=session)
    assert signed_in_as(out) == "Ann" and [b.key for b in out.button] == ["sign_out"]
    assert any("not a member of any project" in i.value for i in out.info)

    # the account deleted meanwhile: the next run asks to sign in, no label is written
    store.set_member(pid, ann)
    store.delete_account(ann)
    again.run()
    assert [t.value for t in again.title] == ["Sign in"]
    assert any("session has ended" in w.value for w in again.warning)


def test_the_first_visitor_of_a_served_app_never_becomes_its_lead(db):
    """Served beyond the loopback (here: on every interface), a store without accounts shows
    only the setup form: the lead account needs the setup token the server printed."""
    from streamlit import config

    old = config.get_option("server.address")
    config.set_option("server.address", "0.0.0.0")
    try:
        tiny_project(db)
        at = run()
        assert [t.value for t in at.title] == ["Set up this annotation store"]
        assert not at.sidebar.text_input and signed_in_as(at) is None
        hidden = run().switch_page("pages/team.py").run()  # its URL: the setup form
        assert [t.value for t in hidden.title] == ["Set up this annotation store"]
        at.text_input(key="setup_token").set_value("a guess")
        at.text_input(key="setup_name").set_value("Mallory")
        at.text_input(key="setup_password").set_value(PASSWORD)
        at.text_input(key="setup_again").set_value(PASSWORD)
        at.button[0].click().run()
        assert "setup token is not valid" in at.error[0].value
        store = Store(db)
        assert store.account_count() == 0
        token = store.issue_setup_token()  # what the server printed on its console
        at.text_input(key="setup_token").set_value(token)
        at.text_input(key="setup_name").set_value("Lea")
        at.text_input(key="setup_password").set_value(PASSWORD)
        at.text_input(key="setup_again").set_value(PASSWORD)
        at.button[0].click().run()
        assert not at.exception and signed_in_as(at) == "Lea" and no_token_in_url(at)
        assert [(a["name"], a["role"]) for a in store.list_accounts()] == [("Lea", "lead")]
        assert store.setup_lead is not None and store.issue_setup_token() is None  # over
        late = run()
        assert [t.value for t in late.title] == ["Sign in"]
    finally:
        config.set_option("server.address", old)


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


def test_local_mode_refuses_reserved_names(db):
    at = run({"annotator": "adjudicated"})  # a reserved name in the URL
    assert "reserved" in at.sidebar.error[0].value
    at.switch_page("pages/annotate.py").run()
    sid = at.session_state[f"annotate_{at.session_state['project_id']}"]["current"]
    at.button(key="tok_0").click().run()
    at.button(key="lab_0").click().run()
    votes = Store(db).get_sentence(sid)["votes"][0]
    assert "adjudicated" not in votes and "tester" in votes  # the default name instead
    at.sidebar.text_input(key="annotator").set_value("import:evil.conll").run()
    assert "reserved" in at.sidebar.error[0].value


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
