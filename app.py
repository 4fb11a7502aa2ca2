"""gpsl annotation app: sequence labeling with Gaussian processes and active learning.

Run with ``make run`` or ``streamlit run app.py [-- --db PATH]``.  The store is
``--db PATH``, else ``$GPSL_DB``, else ``data/gpsl.sqlite3``; the first start creates the
sample project.  Pages: Project, Annotate, Train, Confidence, Data (``pages/``).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:  # `gpsl` and `pages._ui` import from here
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from pages import _ui  # noqa: E402

st.set_page_config(page_title="gpsl", page_icon=":material/label:", layout="wide")

_ui.keep_widget_state()
with _ui.guard("Cannot read the annotation store"):  # the page shows the rest
    _ui.sidebar(_ui.store())  # in the entrypoint, so the sidebar widgets keep their state
st.session_state[_ui.ENTRY_FLAG] = True  # tells the page that this run has a sidebar
navigation = st.navigation(
    [
        st.Page(_ui.PAGES["project"], title="Project", icon=":material/folder_open:",
                default=True),
        st.Page(_ui.PAGES["annotate"], title="Annotate", icon=":material/edit_note:"),
        st.Page(_ui.PAGES["train"], title="Train", icon=":material/model_training:"),
        st.Page(_ui.PAGES["confidence"], title="Confidence", icon=":material/insights:"),
        st.Page(_ui.PAGES["data"], title="Data", icon=":material/download:"),
    ]
)
navigation.run()
