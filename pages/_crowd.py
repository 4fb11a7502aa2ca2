"""A crowd folder upload (the Project page's new project, the Data page's import into this
project): a folder (Streamlit's directory upload) or a .zip of it, read once per upload,
what the alignment kept and dropped, one error line per bad file; view code only."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from gpsl.annotation import (
    CROWD_HELDOUT,
    CROWD_MAX_HELDOUT,
    CrowdFolder,
    CrowdFolderError,
    CrowdImport,
    InputError,
    read_crowd_upload,
)
from pages import _ui
from pages._format import fmt_int

LAYOUT = ("`SPLIT/ground_truth/DOC.txt` (the gold: `token label` lines, a blank line between "
          "sentences) and `SPLIT/mturk_train_data/WORKER/DOC.txt` (the same documents as each "
          "worker labeled them)")
#: why a worker token gave no vote (the reasons of gpsl.io.crowd_raw), in words
REASONS = {
    "empty token": "a line with a label but no token",
    "text differs": "the worker's text differs from the gold there",
    "split labeled in part": "the crowd interface split a word and the worker labeled only "
                             "part of it, or its pieces with different types",
    "spans cross": "the worker's tokens cross the gold tokens' boundaries",
}
SOURCES = {"folder": "A folder", "zip": "A .zip of the folder"}


def _read(key: str, files) -> CrowdFolder | None:
    """The folder of these files, read once per upload (kept in the session), or None
    after one error line per bad file."""
    ident = tuple(f.file_id for f in files)
    cached = st.session_state.get(f"{key}_read")
    if cached is None or cached[0] != ident:
        try:
            got = read_crowd_upload([(f.name, f.getvalue()) for f in files])
        except CrowdFolderError as exc:
            got = exc.lines()
        except InputError as exc:
            got = [str(exc)]
        except Exception as exc:  # noqa: BLE001 - a bad upload must not show a traceback
            got = [f"{files[0].name}: cannot read the upload ({type(exc).__name__})"]
        cached = (ident, got)
        st.session_state[f"{key}_read"] = cached
    if isinstance(cached[1], list):
        for line in cached[1]:
            _ui.error(line)
        return None
    return cached[1]


def upload(key: str) -> CrowdFolder | None:
    """The upload widgets and the folder read from them (None: nothing, or errors shown)."""
    source = st.segmented_control("Upload", list(SOURCES), default="folder",
                                  format_func=SOURCES.get, key=f"{key}_source", required=True)
    if source == "zip":
        one = st.file_uploader("A .zip of the crowd folder", type=["zip"], key=f"{key}_zip",
                               help="The folder as one zip: " + LAYOUT + ".")
        files = [one] if one is not None else []
    else:
        files = st.file_uploader("The crowd folder", type=["txt"],
                                 accept_multiple_files="directory", key=f"{key}_dir",
                                 help="Pick the split folder (e.g. `val`): " + LAYOUT + ".")
    return _read(key, files) if files else None


def show_folder(folder: CrowdFolder) -> None:
    """What the reader found: workers, documents, votes kept and dropped, and why."""
    rep = folder.report
    cols = st.columns(4)
    cols[0].metric("Workers", fmt_int(folder.workers))
    cols[1].metric("Documents", fmt_int(len(folder.documents)),
                   help=f"{fmt_int(rep.gold_sentences)} gold sentences, "
                        f"{fmt_int(rep.gold_tokens)} tokens")
    cols[2].metric("Votes kept", fmt_int(folder.votes),
                   help=f"Of {fmt_int(rep.worker_tokens)} worker tokens: each worker's "
                        "tokens are aligned to the gold tokens of the document; the "
                        "identical-sentence rule of the published JSONL would keep "
                        f"{fmt_int(rep.identical_votes)}.")
    cols[3].metric("Worker tokens dropped", fmt_int(rep.dropped_tokens))
    if folder.dropped:
        st.caption("Dropped, and why: " + "; ".join(
            f"{fmt_int(n)} {REASONS.get(why, why)}" for why, n in folder.dropped.items())
            + f". {fmt_int(rep.sentences_without_votes)} gold sentences have no vote (they "
              "come in unlabeled).")
    with st.expander(f"Per worker ({fmt_int(folder.workers)})", icon=":material/person:"):
        st.dataframe(pd.DataFrame([
            {"worker": w, "documents": p["documents"], "votes kept": p["votes"],
             "worker tokens dropped": p["dropped"]}
            for w, p in sorted(rep.per_worker.items())]), hide_index=True)


def heldout_slider(key: str) -> float:
    """The share of documents held out (their gold: the held-out evaluation)."""
    pct = st.slider("Held-out documents", 0, int(100 * CROWD_MAX_HELDOUT),
                    int(round(100 * CROWD_HELDOUT)), step=5, format="%d%%", key=key,
                    help="Whole documents, spread over the folder: their gold labels are "
                         "held-out gold (the Confidence page's evaluation, calibration), "
                         "never training data; the workers' votes on them are not imported. "
                         "0%: every vote is imported and no gold is kept.")
    return pct / 100


def crowd_toggle(key: str) -> bool:
    return st.toggle("Training labels from the crowd model", value=True, key=key,
                     help="Fit Dawid–Skene on the votes after the import and decide disputed "
                          "tokens by its posterior (each vote weighed by its worker's "
                          "estimated reliability). Off: the majority decides (Team page).")


def import_text(done: CrowdImport) -> str:
    """The flash message after an import."""
    held = (f"; {fmt_int(done.heldout_documents)} documents held out "
            f"({fmt_int(done.heldout_sentences)} sentences, {fmt_int(done.gold_tokens)} gold "
            f"tokens; {fmt_int(done.votes_held_out)} votes on them not imported)"
            if done.heldout_documents else "")
    return (f"Imported {fmt_int(done.train_sentences)} training sentences with "
            f"{fmt_int(done.votes)} votes of {fmt_int(done.workers)} workers{held}. "
            f"Training labels: {done.rule}.")
