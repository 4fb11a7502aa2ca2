"""gpsl annotation app: sequence labeling with Gaussian processes and active learning.

Run with ``make run`` or ``streamlit run app.py [-- --db PATH]``.  The store is
``--db PATH``, else ``$GPSL_DB``, else ``data/gpsl.sqlite3``; the first start creates the
sample project.  Pages (``pages/``): Project, Annotate, Team, Train, Confidence, Data for a
lead (and in single-user local mode: a store without accounts served on a loopback address);
Annotate for an annotator; only the sign-in form for a tab that is not signed in, and only
the setup form (the first lead account) for a store without accounts served to others.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:  # `gpsl` and `pages._ui` import from here
    sys.path.insert(0, str(ROOT))

st.set_page_config(page_title="gpsl", page_icon=str(ROOT / "pages" / "icon.png"),
                   layout="wide")  # served by the app: no request leaves the machine
# .streamlit/config.toml turns the sidebar navigation off, so that the first run of a freshly
# started server, which Streamlit runs in its legacy `pages/` folder mode, never shows the
# raw folder list; the app's own navigation below is on from the first run.
st.set_option("client.showSidebarNavigation", True)
# no built-in CSV export of tables (cells written as they are, formulas included): the pages
# offer their own CSV downloads with formula cells neutralised (also in .streamlit/config.toml)
st.set_option("client.disableDataExport", True)

from pages import _log, _ui  # noqa: E402

_log.configure()  # warnings and errors of the pages and the library to stderr, once

PAGES = {
    "project": dict(title="Project", icon=":material/folder_open:"),
    "annotate": dict(title="Annotate", icon=":material/edit_note:"),
    "team": dict(title="Team", icon=":material/groups:"),
    "train": dict(title="Train", icon=":material/model_training:"),
    "confidence": dict(title="Confidence", icon=":material/insights:"),
    "data": dict(title="Data", icon=":material/download:"),
}

_ui.keep_widget_state()
who, failed = None, True
st.session_state["_who"] = None  # resolved again below, on every run
with _ui.guard("Cannot read the annotation store"):  # the page shows the rest
    store = _ui.store()
    who = _ui.resolve_identity(store)
    failed = False
    if who is not None:
        _ui.sidebar(_ui.acting())  # in the entrypoint, so the sidebar widgets keep their state
    _ui.keep_session_cookie(store)  # the session token in a cookie, never in a URL
st.session_state[_ui.ENTRY_FLAG] = True  # tells the page that this run has a sidebar
st.session_state[_ui.FAILED_FLAG] = failed
if failed:  # every page: each one shows the store's error line and stops
    pages = [st.Page(_ui.PAGES[name], default=(i == 0), **PAGES[name])
             for i, name in enumerate(PAGES)]
elif who is None and st.session_state.get("_setup"):
    pages = [st.Page(_ui.setup_page, title="Set up", icon=":material/key:",
                     url_path="setup", default=True)]
elif who is None:
    pages = [st.Page(_ui.sign_in_page, title="Sign in", icon=":material/login:",
                     url_path="signin", default=True)]
else:
    names = list(PAGES) if who.is_lead else ["annotate"]
    pages = [st.Page(_ui.PAGES[name], default=(i == 0), **PAGES[name])
             for i, name in enumerate(names)]
if not failed:  # every other page's URL too, hidden: each page shows the sign-in (or setup)
    # form, or refuses a role, itself (_ui.setup), where Streamlit said "Page not found"
    shown = set(names) if who is not None else set()
    pages += [st.Page(_ui.PAGES[name], visibility="hidden", **PAGES[name])
              for name in PAGES if name not in shown]
st.navigation(pages).run()
if gc.get_freeze_count() == 0 and not failed:  # once a process, after its first full run
    # The objects of the app's start (modules, Streamlit's, pandas' and Plotly's tables: about
    # 200k) leave the collector's scans, so a full collection during a label click costs about
    # 10 ms of CPU, not 70-90 (the p95 outliers of a click at 100k sentences; docs/app.md).
    # What the runs allocate later is collected as before.
    import pandas  # noqa: F401 - the pages' libraries, loaded before the freeze
    import plotly.graph_objects  # noqa: F401

    gc.collect()
    gc.freeze()
