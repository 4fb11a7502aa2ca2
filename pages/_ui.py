"""Streamlit pieces shared by app.py and the pages: the cached store, who is signed in, the
sidebar, headers.

Not a page itself (``app.py`` lists the pages with ``st.navigation``).

Identity: with no account in the store the app is in single-user local mode (the user is the
lead; the name comes from the sidebar field, kept in the URL as ``?annotator=`` so that a
reload keeps it, else ``$GPSL_ANNOTATOR`` or "annotator").  Once an
account exists every run checks the tab's session token (``?session=...`` in the URL, kept
there by :func:`resolve_identity` on every run, so it survives reloads and server restarts)
against the store; a sign-in link (``?token=...``) starts such a session.  Without a valid
session the only page is the sign-in form: no label is ever credited to a fallback name.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import streamlit as st

try:  # Streamlit's internal page manager (other Streamlit versions may not have it)
    from streamlit.runtime.pages_manager import PagesManager
except ImportError:  # pragma: no cover
    PagesManager = None

import gpsl.annotation as back
from gpsl.annotation import STORE_ERRORS, Identity, InputError, Project, Store, one_line
from pages._format import md_escape
from pages._text import status_line

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_DIR = ROOT / "sample_data"
PAGES = {
    "project": "pages/project.py",
    "annotate": "pages/annotate.py",
    "train": "pages/train.py",
    "confidence": "pages/confidence.py",
    "data": "pages/data.py",
    "team": "pages/team.py",
}
SESSION_PARAM, LINK_PARAM, NAME_PARAM = "session", "token", "annotator"
# widget values that must survive page switches (Streamlit drops the state of widgets that
# are not rendered on the current page unless it is re-assigned every run)
ENTRY_FLAG = "_entry_ran"
FAILED_FLAG = "_store_failed"  # app.py could not read the store this run (error shown)
PAGE_CSS = """<style>
[data-testid="stMainBlockContainer"] { padding-top: 2.2rem; }
h1 { font-size: 2.1rem !important; }
</style>"""
PERSISTENT_KEYS = ("project_id", "annotator", "queue_order", "accept_thr", "train_preset",
                   "train_custom", "train_kernel", "train_hyper", "train_iter", "train_max_sent",
                   "train_inference", "conf_version")


def _prefer_navigation() -> None:
    """Streamlit treats an app with a ``pages/`` folder as a legacy multipage app until
    ``st.navigation`` runs once; a first request straight to a page URL would then keep
    the process in that mode.  The pages are listed by ``st.navigation`` in app.py."""
    if PagesManager is not None and hasattr(PagesManager, "uses_pages_directory"):
        PagesManager.uses_pages_directory = False


_prefer_navigation()


def db_target() -> str:
    """``--db PATH_OR_URL`` after ``--`` on the streamlit command line, else ``$GPSL_DB``
    (a SQLite file or ``postgresql+psycopg://...``), else ``data/gpsl.sqlite3`` next to
    app.py."""
    return _db_target(tuple(sys.argv[1:]), os.environ.get("GPSL_DB"))


@functools.lru_cache(maxsize=16)
def _db_target(argv: tuple[str, ...], env: str | None) -> str:
    """:func:`db_target` for one command line and ``$GPSL_DB`` (``env``, read again by
    ``default_db_url``, is part of the cache key): parsed once, not on every rerun of
    every page."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--db", default=None)
    args, _ = parser.parse_known_args(list(argv))
    target = args.db or back.default_db_url(ROOT)
    if "://" in target:
        return target
    return str(Path(target).expanduser().resolve())


@st.cache_resource(show_spinner="Opening the annotation store ...")
def _open_store(path: str) -> Store:
    store = Store(path)
    store.ensure_sample_project(SAMPLE_DIR)  # the first start opens on something real
    store.recover()  # after a crash: dead workers' versions failed, their leftovers removed
    return store


def store() -> Store:
    return _open_store(db_target())


error_text = one_line  # one line: "<action>: <message>" (the message alone without an action)


@contextmanager
def guard(action: str | None = None, *, stop: bool = False) -> Iterator[None]:
    """Run a block of page code; a :class:`gpsl.errors.GpslError` raised in it (the store
    busy past its timeout, bad input, a project deleted meanwhile ...) becomes one
    ``st.error`` line, ``"<action>: <message>"``, instead of a traceback.  The rest of the
    block is skipped; with ``stop`` the page stops there too (for reads the page needs).
    Streamlit's own control flow (``st.rerun``, ``st.stop``) passes through."""
    try:
        yield
    except STORE_ERRORS as exc:
        st.error(error_text(exc, action), icon=":material/error:")
        if stop:
            st.stop()


def callback(action: str):
    """Decorate a widget callback: a :class:`gpsl.errors.GpslError` raised in it (the store
    busy past its timeout, full, read-only or unreachable ...) becomes one error line,
    ``"<action>: <message>"``, on the next run instead of a traceback."""

    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except STORE_ERRORS as exc:
                flash("error", error_text(exc, action))
                return None

        return run

    return wrap


def on_click_data(build, action: str):
    """``data`` for ``st.download_button`` that is built only when the button is clicked.

    Streamlit calls it outside the page script, where no ``st.error`` can be shown and an
    exception would only make the download fail without a word. So a failure (the store busy
    past its timeout, a model folder removed meanwhile ...) downloads one line of text,
    ``"gpsl: <action>: <message>"``, instead."""
    def data():
        try:
            return build()
        except Exception as exc:  # noqa: BLE001 - shown to the user in the downloaded file
            return f"gpsl: {error_text(exc, action)}\n".encode()

    return data


def parse_upload(upload, fmt: str) -> list | None:
    """The sentences of an uploaded file, or ``None`` after showing one error line (never a
    traceback for a bad file)."""
    try:
        return back.parse_upload(upload.getvalue(), upload.name, fmt)
    except InputError as exc:
        st.error(str(exc), icon=":material/error:")
    except Exception as exc:  # noqa: BLE001 - a bad file must not show a traceback
        st.error(f"{upload.name}: cannot read the file ({type(exc).__name__}: "
                 f"{' '.join(str(exc).split())})", icon=":material/error:")
    return None


def upload_format(upload, key: str, where=st, **kw) -> str:
    """The format to read an upload as: a selectbox of the readers' formats that starts on
    the one the file's extension names (``where``: a container or column; ``kw`` go to the
    selectbox)."""
    names = list(back.FORMATS)
    return where.selectbox("Format", names, index=names.index(back.guess_format(upload.name)),
                           format_func=back.FORMATS.get, key=key, **kw)


def keep_widget_state() -> None:
    for key in PERSISTENT_KEYS:
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]


def switch_project(project_id: int) -> None:
    """Select another project (applied by the sidebar on the next run)."""
    st.session_state["_pending_project"] = int(project_id)


def project_id() -> int | None:
    return st.session_state.get("project_id")


def annotator() -> str:
    """The name this tab's labels are credited to."""
    who = st.session_state.get("_who")
    if who is not None and not who.local:
        return who.name
    name = str(st.session_state.get("annotator") or "").strip()
    return name or default_annotator()


def resolve_identity(s: Store) -> Identity | None:
    """Who uses this tab, checked against the store on every run (None: must sign in).

    No accounts: single-user local mode (the lead).  Otherwise a sign-in link in the URL
    (``?token=``) starts a session; the session token is kept in the URL (``?session=``)
    and in the session state, and checked on every run, so a revoked or expired session
    (or an account deleted meanwhile) asks to sign in again at once."""
    if s.account_count() == 0:
        # the name typed in the sidebar survives a reload: it is kept in the URL (?annotator=)
        st.session_state.setdefault("annotator", str(st.query_params.get(NAME_PARAM) or "")
                                    .strip()[:60] or default_annotator())
        name = str(st.session_state.get("annotator") or "").strip() or default_annotator()
        if name != default_annotator():
            if st.query_params.get(NAME_PARAM) != name:
                st.query_params[NAME_PARAM] = name
        elif NAME_PARAM in st.query_params:
            del st.query_params[NAME_PARAM]
        who = Identity(name, "lead", None, True)
        st.session_state["_who"] = who
        return who
    params = st.query_params
    link = params.get(LINK_PARAM)
    if link:
        del st.query_params[LINK_PARAM]
        got = s.redeem_sign_in_link(link)
        if got is None:
            flash("error", "This sign-in link is not valid (expired or replaced by a newer "
                           "one): ask your project lead for a new link, or sign in below.")
        else:
            st.session_state["_session"] = got[1]
    token = st.session_state.get("_session") or params.get(SESSION_PARAM)
    who = s.session_identity(token) if token else None
    if who is None:
        if token:
            flash("warning", "Your session has ended: sign in again.")
        st.session_state.pop("_session", None)
        if SESSION_PARAM in st.query_params:
            del st.query_params[SESSION_PARAM]
        st.session_state["_who"] = None
        return None
    st.session_state["_session"] = token
    if st.query_params.get(SESSION_PARAM) != token:  # page switches drop query params
        st.query_params[SESSION_PARAM] = token
    st.session_state["_who"] = who
    return who


def identity() -> Identity | None:
    """This run's identity (as resolved by :func:`resolve_identity`)."""
    return st.session_state.get("_who")


def sign_out() -> None:
    token = st.session_state.pop("_session", None)
    try:
        store().end_session(token)
    except STORE_ERRORS as exc:
        flash("error", error_text(exc, "Not signed out"))
        return
    st.session_state["_who"] = None
    if SESSION_PARAM in st.query_params:
        del st.query_params[SESSION_PARAM]


def sign_in_page() -> None:
    """The only page while this tab has no valid session (accounts exist)."""
    st.session_state.pop(ENTRY_FLAG, None)
    st.html(PAGE_CSS)
    st.title("Sign in", anchor=False)
    st.caption("This annotation store has accounts: sign in with your name and password, or "
               "open the sign-in link your project lead gave you.")
    show_flash()
    with st.form("sign_in"):
        name = st.text_input("Name", key="signin_name")
        password = st.text_input("Password", type="password", key="signin_password")
        submitted = st.form_submit_button("Sign in", type="primary")
    if submitted:
        with guard("Not signed in"):
            s = store()
            who = s.verify_password(name, password)
            if who is None:
                st.error("Wrong name or password.", icon=":material/error:")
                return
            st.session_state["_session"] = s.start_session(who.account_id)
            st.session_state.pop("signin_password", None)
            st.rerun()


def require_role(role: str | None) -> Identity:
    """Stop the page (before it does anything) unless this tab is signed in, and as a lead
    when ``role == 'lead'``."""
    who = identity()
    if who is None:
        if not st.session_state.get(FAILED_FLAG):  # else the store's error line is shown
            sign_in_page()
        st.stop()
    if role == "lead" and not who.is_lead:
        st.error("This page is for the project lead. Your role (annotator) can label "
                 "sentences on the Annotate page.", icon=":material/block:")
        st.stop()
    return who


def default_annotator() -> str:
    return (os.environ.get("GPSL_ANNOTATOR") or "").strip() or "annotator"


def sidebar(store: Store) -> Project | None:
    """Project selector, annotator name and a status line; returns the current project."""
    names = {p.id: p.name for p in store.reports.projects()}
    ids = list(names)
    pending = st.session_state.pop("_pending_project", None)
    if pending in names:
        st.session_state["project_id"] = pending
    if st.session_state.get("project_id") not in names:
        if ids:
            st.session_state["project_id"] = ids[0]
        else:
            st.session_state.pop("project_id", None)
    st.session_state.setdefault("annotator", default_annotator())
    who = identity()
    with st.sidebar:
        if ids:
            st.selectbox("Project", ids, format_func=lambda i: names.get(i, str(i)),
                         key="project_id", help="The annotation project all pages work on.")
        if who is None or who.local:
            st.text_input("Annotator", key="annotator", max_chars=60,
                          help="Your name; it is recorded with every label you set.")
            if not str(st.session_state.get("annotator") or "").strip():
                st.caption(f"No name given: labels are recorded as “{default_annotator()}”.")
        else:
            with st.container(horizontal=True, vertical_alignment="center"):
                st.markdown(f"Signed in as **{md_escape(who.name)}** ({who.role})")
                st.button("Sign out", key="sign_out", on_click=sign_out,
                          icon=":material/logout:")
        pid = st.session_state.get("project_id")
        if pid is not None:
            progress = store.reports.progress(pid, split="train", detail=False)
            st.caption(status_line(progress, store.reports.active_version(pid)))
    return store.reports.project(pid)


def setup(role: str | None = None) -> tuple[Store, Project | None]:
    """Start of every page: returns the store and the current project.  The page stops
    here (showing the sign-in form or a refusal) unless this tab is signed in, as a lead
    when ``role == 'lead'`` (:func:`require_role`): the role is checked on the server on
    every run, whatever URL or request reached the page.

    app.py draws the sidebar before ``st.navigation`` (widgets of the entrypoint keep their
    state across pages).  When Streamlit runs a page file on its own - with a ``pages/``
    folder next to app.py it does so for a first request straight to a page URL, and
    AppTest does so after ``switch_page`` - the page draws the page config and sidebar.
    """
    if not st.session_state.pop(ENTRY_FLAG, False):
        st.session_state[FAILED_FLAG] = False
        st.set_page_config(page_title="gpsl", page_icon=":material/label:", layout="wide")
        keep_widget_state()
        with guard("Cannot read the annotation store", stop=True):
            st.session_state["_who"] = None
            if resolve_identity(store()) is not None:
                sidebar(store())
    require_role(role)
    st.html(PAGE_CSS)
    pid = st.session_state.get("project_id")
    with guard("Cannot open the project", stop=True):
        s = store()
        return s, s.reports.project(pid)


def header(title: str, caption: str, project: Project | None = None) -> None:
    st.title(title, anchor=False)
    text = caption if project is None else f"**{md_escape(project.name)}** · {caption}"
    st.caption(text)


def require_project(project: Project | None) -> Project:
    """The current project, or a hint to create one (and the page stops)."""
    if project is None:
        who = identity()
        if who is not None and who.is_lead:
            st.info("There is no project yet: create one on the Project page.")
            st.page_link(PAGES["project"], label="Go to Project", icon=":material/folder_open:")
        else:
            st.info("There is no project yet: your project lead has to create one.")
        st.stop()
    return project


def flash(kind: str, text: str) -> None:
    """Queue a message for the next run (set from callbacks)."""
    st.session_state.setdefault("_flash", []).append((kind, text))


def show_flash() -> None:
    for kind, text in st.session_state.pop("_flash", []):
        if kind == "error":
            st.error(text, icon=":material/error:")
        elif kind == "warning":
            st.warning(text, icon=":material/warning:")
        else:
            st.toast(text, icon=":material/check_circle:")
