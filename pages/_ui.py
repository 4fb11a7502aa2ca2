"""Streamlit pieces shared by app.py and the pages: the cached store, who is signed in, the
sidebar, headers.

Not a page itself (``app.py`` lists the pages with ``st.navigation``).

Identity: with no account in the store the app is in single-user local mode, on a loopback
address only (:func:`served_locally`; the page says so): the user is the lead and the name
comes from the sidebar field, kept in the URL as ``?annotator=`` so that a reload keeps it,
else ``$GPSL_ANNOTATOR`` or "annotator" (a reserved name is refused).  Served beyond the
loopback, a store without accounts shows only the setup form (a setup token from the server's
console, or ``python -m gpsl.annotation.setup``): never first come, first lead.  Once an
account exists every run checks the tab's session token against the store: the token lives
in the tab's server-side state and in a cookie (:mod:`pages._cookie`), never in a URL, so it
survives reloads and server restarts until it expires or is revoked; a sign-in link
(``?token=...``, one use) starts such a session and leaves the address bar at once.  Without a
valid session the only page is the sign-in form: no label is ever credited to a fallback name.
Every page works on :func:`acting`, the store as this identity may use it
(:meth:`gpsl.annotation.Store.acting`: roles, membership and names checked in the back end).
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
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
from gpsl.annotation import (
    STORE_ERRORS,
    AccessDenied,
    Identity,
    InputError,
    Project,
    Store,
    TooManyAttempts,
    one_line,
)
from pages import _cookie, _log
from pages._format import md_escape, md_text
from pages._text import status_line

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_DIR = ROOT / "sample_data"
#: the tab's icon, served by the app (a ``:material/...:`` one is fetched from fonts.gstatic.com)
PAGE_ICON = str(ROOT / "pages" / "icon.png")
PAGES = {
    "project": "pages/project.py",
    "annotate": "pages/annotate.py",
    "train": "pages/train.py",
    "confidence": "pages/confidence.py",
    "data": "pages/data.py",
    "team": "pages/team.py",
}
SESSION_PARAM, LINK_PARAM, NAME_PARAM = "session", "token", "annotator"
PROJECT_PARAM = "project"  # the project's id in the URL: a reload, a tab, a bookmark keep it
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
    (a SQLite file or ``postgresql+psycopg://...``), else ``data/gpsl.sqlite3`` by app.py."""
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
    _announce_setup(store)
    return store


def _announce_setup(store: Store) -> None:
    """While the store has no account: print a one-time setup token on the server's console
    (the setup form asks for it when the app is served beyond the loopback)."""
    try:
        token = store.issue_setup_token() if store.account_count() == 0 else None
    except STORE_ERRORS:  # a read-only or busy store: the pages say so
        return
    if token is not None:
        print(f"gpsl: no accounts yet in {store.where}. On this machine (127.0.0.1) the app "
              "runs in single-user local mode. Served to others it asks for the lead's setup "
              f"token (one use, 24 hours): {token}  (or run: python -m gpsl.annotation.setup)",
              file=sys.stderr, flush=True)


def store() -> Store:
    """The store itself: for the door only (sign-in, sessions); pages use :func:`acting`."""
    return _open_store(db_target())


def acting() -> back.ActingStore | None:
    """The store as this tab's identity may use it (:meth:`Store.acting`), made by
    :func:`resolve_identity` on every run; None when nobody is signed in."""
    return st.session_state.get("_acting")


error_text = one_line  # one line: "<action>: <message>" (the message alone without an action)


def error(text: str) -> None:
    """One error line of plain text, escaped for Markdown: messages quote tokens, labels,
    file and project names (``![x](http://host/x.png)`` must show as text, never load)."""
    _log.shown("error", text)  # and in the server's log (pages/_log.py)
    st.error(md_text(text), icon=":material/error:")


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
        error(error_text(exc, action))
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
            return f"gpsl: {one_line(exc, action)}\n".encode()

    return data


def open_upload(upload, fmt: str, store=None):
    """``(the upload as a stream, its summary)``, or ``None`` after one line (no traceback)."""
    try:
        stream = (store or back).open_upload(upload.getvalue(), upload.name, fmt)
        return stream, stream.summary()  # every sentence checked, none kept
    except InputError as exc:
        error(str(exc))
    except Exception as exc:  # noqa: BLE001 - a bad file must not show a traceback
        error(f"{back.import_credit(upload.name)[7:]}: cannot read the file as "
              f"{back.FORMATS.get(fmt, fmt)} ({type(exc).__name__})")
    return None


def upload_format(upload, key: str, where=st, **kw) -> str:
    """The format to read an upload as: a selectbox of the readers' formats that starts on
    the one the file's extension names (``where``: a container or column; ``kw``: its own)."""
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
    if who is not None:
        return who.name
    return default_annotator()


LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")
PROXY_HEADERS = ("X-Forwarded-For", "Forwarded", "X-Real-Ip", "X-Forwarded-Host")


def _loopback(host: str | None) -> bool:
    host = (host or "").strip().strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    header = header.strip()
    if header.startswith("["):  # [::1]:8501
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def served_locally() -> bool:
    """Whether single-user local mode may run: the server listens on a loopback address
    only, and this tab reached it as a loopback host from the loopback, with no proxy in
    between (a reverse proxy on the same machine forwards other people's requests: it adds
    ``X-Forwarded-For`` and passes their ``Host``)."""
    if not _loopback(st.get_option("server.address")):
        return False
    try:
        headers = st.context.headers
        ip = st.context.ip_address
    except Exception:  # noqa: BLE001 - no connection context (bare mode)
        return True
    if any(headers.get(h) for h in PROXY_HEADERS):
        return False
    host = headers.get("Host")
    if host and not _loopback(_host_name(host)):
        return False
    return not isinstance(ip, str) or _loopback(ip)  # None: Streamlit's loopback


def client_address() -> str:
    """Where this tab connects from, for the sign-in limit (:func:`back.client_address`)."""
    try:
        ip, headers = st.context.ip_address, st.context.headers
    except Exception:  # noqa: BLE001
        ip, headers = None, None
    return back.client_address(ip, headers)


def _local_name() -> str:
    """Local mode's name: the sidebar's (kept in the URL as ``?annotator=``), a person's
    name (a reserved one is refused with one line, and the default is used)."""
    st.session_state.setdefault("annotator", str(st.query_params.get(NAME_PARAM) or "")
                                .strip()[:60] or default_annotator())
    typed = str(st.session_state.get("annotator") or "").strip()
    try:
        name = back.check_person(typed) if typed else default_annotator()
    except InputError as exc:
        st.session_state["_name_error"] = str(exc)
        name = default_annotator()
    else:
        st.session_state.pop("_name_error", None)
    if name != default_annotator():
        if st.query_params.get(NAME_PARAM) != name:
            st.query_params[NAME_PARAM] = name
    elif NAME_PARAM in st.query_params:
        del st.query_params[NAME_PARAM]
    return name


def resolve_identity(s: Store) -> Identity | None:
    """Who uses this tab, checked against the store on every run (None: must sign in, or
    set the store up).

    No accounts: single-user local mode (the lead) on a loopback address; elsewhere the
    setup form.  Otherwise a sign-in link in the URL (``?token=``, one use) starts a session;
    the session token is kept in the session state and a cookie, never in the URL, and
    checked on every run, so a revoked or expired session (or an account deleted meanwhile)
    asks to sign in again at once."""
    st.session_state["_acting"] = None
    st.session_state["_setup"] = False
    st.session_state["_who"] = None
    if SESSION_PARAM in st.query_params:  # an old link's session: never taken from a URL
        del st.query_params[SESSION_PARAM]
    if s.account_count() == 0:
        if LINK_PARAM in st.query_params:
            del st.query_params[LINK_PARAM]
        if not served_locally():
            st.session_state["_setup"] = True
            return None
        who = Identity(_local_name(), "lead", None, True)
    else:
        if NAME_PARAM in st.query_params:  # names come from accounts now
            del st.query_params[NAME_PARAM]
        link = st.query_params.get(LINK_PARAM)
        if link:
            del st.query_params[LINK_PARAM]
            got = s.redeem_sign_in_link(link)
            if got is None:
                flash("error", "This sign-in link is not valid: it was used already, has "
                               "expired or was replaced. Ask your project lead for a new link, "
                               "or sign in below.")
            else:
                st.session_state["_session"] = got[1]
        token = st.session_state.get("_session") or _cookie.read(s.where)
        if token and token == st.session_state.get("_signed_out"):
            token = None  # the cookie this connection brought, of a session signed out
        who = s.session_identity(token) if token else None
        if who is None:
            if token:
                flash("warning", "Your session has ended: sign in again.")
                st.session_state["_drop_cookie"] = True
            st.session_state.pop("_session", None)
            return None
        st.session_state["_session"] = token
    try:
        acting_store = s.acting(who)
    except AccessDenied:  # the account went away between the two reads
        st.session_state.pop("_session", None)
        return None
    st.session_state["_who"] = acting_store.who
    st.session_state["_acting"] = acting_store
    return acting_store.who


def keep_session_cookie(s: Store) -> None:
    """Write (or remove) this tab's session cookie: drawn on every run of app.py."""
    token = st.session_state.get("_session")
    who = st.session_state.get("_who")
    if token and who is not None and not who.local:
        _cookie.write(s.where, token, back.SESSION_SECONDS)
    elif st.session_state.pop("_drop_cookie", False) or _cookie.read(s.where):
        _cookie.write(s.where, None, 0)


def identity() -> Identity | None:
    """This run's identity (as resolved by :func:`resolve_identity`)."""
    return st.session_state.get("_who")


def sign_out() -> None:
    token = st.session_state.pop("_session", None)
    st.session_state["_signed_out"] = token
    try:
        store().end_session(token)
    except STORE_ERRORS as exc:
        flash("error", one_line(exc, "Not signed out"))
        return
    st.session_state["_who"] = None
    st.session_state["_acting"] = None
    st.session_state["_drop_cookie"] = True


def _signed_in(token: str) -> None:
    st.session_state["_session"] = token
    for key in ("signin_password", "setup_password", "setup_again", "setup_token"):
        st.session_state.pop(key, None)
    st.rerun()


def sign_in_page() -> None:
    """The only page while this tab has no valid session (accounts exist)."""
    st.session_state.pop(ENTRY_FLAG, None)
    st.html(PAGE_CSS)
    st.title("Sign in", anchor=False)
    st.caption("This annotation store has accounts: sign in with your name and password, or "
               "open the sign-in link your project lead gave you (each link works once).")
    show_flash()
    with st.form("sign_in"):
        name = st.text_input("Name", key="signin_name", max_chars=60)
        password = st.text_input("Password", type="password", key="signin_password",
                                 max_chars=256)
        submitted = st.form_submit_button("Sign in", type="primary")
    if submitted:
        with guard("Not signed in"):
            try:
                got = store().sign_in(name, password, client_address())
            except TooManyAttempts as exc:
                error(str(exc))
                return
            if got is None:
                st.error("Wrong name or password.", icon=":material/error:")
                return
            _signed_in(got[1])


def setup_page() -> None:
    """The only page of a store without accounts served beyond the loopback: the first lead
    account, made with the setup token the server printed (never first come, first lead)."""
    st.session_state.pop(ENTRY_FLAG, None)
    st.html(PAGE_CSS)
    st.title("Set up this annotation store", anchor=False)
    st.caption("This app is served to other machines and has no account yet, so nobody can "
               "use it until its lead account exists. Type the setup token the server printed "
               "on its console (or run `python -m gpsl.annotation.setup` on the server, or "
               "`make setup`, and sign in).")
    show_flash()
    with st.form("setup"):
        token = st.text_input("Setup token", type="password", key="setup_token",
                              max_chars=200)
        name = st.text_input("Your name (the lead account)", key="setup_name", max_chars=60)
        password = st.text_input("Password", type="password", key="setup_password",
                                 max_chars=256,
                                 help="At least 10 characters, hard to guess: several uncommon "
                                      "words are easy to remember.")
        again = st.text_input("The same password again", type="password", key="setup_again",
                              max_chars=256)
        submitted = st.form_submit_button("Create the lead account", type="primary")
    if submitted:
        if password != again:
            st.error("The two passwords differ.", icon=":material/error:")
            return
        with guard("Not set up"):
            _, session = store().setup_lead(token, name, password, client_address())
            flash("info", "Lead account created: sign-in is on. Create the others on the "
                          "Team page.")
            _signed_in(session)


def require_role(role: str | None) -> Identity:
    """Stop the page (before it does anything) unless this tab is signed in, and as a lead
    when ``role == 'lead'``."""
    who = identity()
    if who is None:
        if not st.session_state.get(FAILED_FLAG):  # else the store's error line is shown
            (setup_page if st.session_state.get("_setup") else sign_in_page)()
        st.stop()
    if role == "lead" and not who.is_lead:
        st.error("This page is for the project lead. Your role (annotator) can label "
                 "sentences on the Annotate page.", icon=":material/block:")
        st.stop()
    return who


def default_annotator() -> str:
    return (os.environ.get("GPSL_ANNOTATOR") or "").strip() or "annotator"


def sidebar(store) -> Project | None:
    """Project selector, annotator name and a status line (of the acting store: an
    annotator sees the projects they are a member of); returns the current project."""
    names = {p.id: p.name for p in store.reports.projects()}
    ids = list(names)
    pending = st.session_state.pop("_pending_project", None)
    in_url = str(st.query_params.get(PROJECT_PARAM) or "")
    if pending is None and "project_id" not in st.session_state and in_url.isdigit():
        pending = int(in_url)  # a new session (a reload, a tab, a bookmark): the URL's
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
            if st.session_state.get("_name_error"):
                error(st.session_state["_name_error"] + f" (labels are recorded as "
                                                         f"“{default_annotator()}”)")
            elif not str(st.session_state.get("annotator") or "").strip():
                st.caption(f"No name given: labels are recorded as “{default_annotator()}”.")
            st.caption(":material/lock: Local mode: one person on this machine, no sign-in "
                       "(the app listens on 127.0.0.1 only). To let a team in, see "
                       "docs/app.md, *Serving a team safely*.")
        else:
            with st.container(horizontal=True, vertical_alignment="center"):
                st.markdown(f"Signed in as **{md_escape(who.name)}** ({who.role})")
                st.button("Sign out", key="sign_out", on_click=sign_out,
                          icon=":material/logout:")
        pid = st.session_state.get("project_id")
        if pid is not None and st.query_params.get(PROJECT_PARAM) != str(pid):
            st.query_params[PROJECT_PARAM] = str(pid)
        if pid is not None:
            progress = store.reports.progress(pid, split="train", detail=False)
            st.caption(status_line(progress, store.reports.active_version(pid)))
    return store.reports.project(pid)


def setup(role: str | None = None) -> tuple[back.ActingStore, Project | None]:
    """Start of every page: returns the acting store and the current project.  The page stops
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
        st.set_page_config(page_title="gpsl", page_icon=PAGE_ICON, layout="wide")
        keep_widget_state()
        with guard("Cannot read the annotation store", stop=True):
            st.session_state["_who"] = None
            if resolve_identity(store()) is not None:
                sidebar(acting())
            keep_session_cookie(store())
    require_role(role)
    st.html(PAGE_CSS)
    pid = st.session_state.get("project_id")
    with guard("Cannot open the project", stop=True):
        s = acting()
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
            st.info("You are not a member of any project yet: ask your project lead to add "
                    "you to one.")
        st.stop()
    return project


def flash(kind: str, text: str) -> None:
    """Queue a message for the next run (set from callbacks); an error or warning is logged."""
    _log.shown(kind, text)
    st.session_state.setdefault("_flash", []).append((kind, text))


def show_flash() -> None:
    """The queued messages, as plain text: every one is escaped for Markdown (they quote
    tokens, labels and names; a toast once loaded ``![i](http://host/b.png)``)."""
    for kind, text in st.session_state.pop("_flash", []):
        text = md_text(text)
        if kind == "error":
            st.error(text, icon=":material/error:")
        elif kind == "warning":
            st.warning(text, icon=":material/warning:")
        else:
            st.toast(text, icon=":material/check_circle:")
