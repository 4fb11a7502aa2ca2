"""Data page: export annotations and predictions, download models, import sentences, votes
and crowd folders."""

from __future__ import annotations

import streamlit as st

from gpsl.annotation import (
    UPLOAD_TYPES,
    VOTE_FORMATS,
    GpslError,
    InputError,
    import_credit,
    safe_filename,
)
from pages import _crowd, _ui
from pages._format import code_span, fmt_int
from pages._text import upload_limits_text, upload_summary, version_names

store, project = _ui.setup(role="lead")
project = _ui.require_project(project)
pid = project.id
base = safe_filename(project.name)
SPLITS = {"train": "Training sentences", "heldout": "Held-out sentences", "all": "All sentences"}
EXPORT_FORMATS = {"conll": "CoNLL (.conll)", "jsonl": "JSONL (.jsonl)"}
MIME = {"conll": "text/plain", "jsonl": "application/jsonl"}
TOOL_FORMATS = {"labelstudio": "Label Studio JSON", "doccano": "doccano JSONL",
                "prodigy": "Prodigy JSONL", "conll2003": "CoNLL-2003 columns"}
TOOL_SUFFIX = {"labelstudio": ".json", "doccano": ".jsonl", "prodigy": ".jsonl",
               "conll2003": ".txt"}
VOTE_SUFFIX = {**TOOL_SUFFIX, "crowd": ".jsonl"}

_ui.header("Data", "Export what you have, download models, and add more sentences.", project)
_ui.show_flash()


def _split(key: str) -> str | None:
    value = st.session_state.get(key) or "train"
    return None if value == "all" else value


with _ui.guard("Cannot show the exports"):  # the import below still shows
    left, right = st.columns(2, gap="large")

    with left:
        st.subheader("Export annotations", anchor=False)
        st.caption("The current labels; a missing label is `_` in CoNLL and `null` in JSONL, so a "
                   "partly labeled sentence stays partly labeled.")
        with st.container(horizontal=True):
            fmt = st.segmented_control("Format", list(EXPORT_FORMATS), default="conll",
                                       format_func=EXPORT_FORMATS.get, key="exp_fmt", required=True)
            st.selectbox("Sentences", list(SPLITS), format_func=SPLITS.get, key="exp_split",
                         width=220)
        split = _split("exp_split")
        st.download_button(  # built when clicked, page by page (a CoNLL error: in the file)
            "Download annotations", icon=":material/download:", type="primary",
            data=_ui.on_click_data(lambda: store.annotations_file(pid, fmt, split),
                                   "Annotations not exported"),
            file_name=f"{base}-annotations.{fmt}", mime=MIME[fmt], key="dl_ann",
            on_click="ignore")
        try:
            preview, preview_error = store.preview(pid, split, fmt), None
        except InputError as exc:
            preview, preview_error = None, str(exc)
        if preview or preview_error:
            st.caption("Preview of the first two sentences:")
            if preview_error:
                _ui.error(preview_error)
            else:
                st.code(preview, language=None, height=180)
        with st.expander("For other tools", icon=":material/swap_horiz:"):
            st.caption("Entity spans on the sentence text (tokens joined by spaces; BIO/IOB "
                       "labels, a missing label counts as outside), or CoNLL-2003 columns.")
            with st.container(horizontal=True, vertical_alignment="bottom"):
                tool = st.selectbox("Format", list(TOOL_FORMATS), format_func=TOOL_FORMATS.get,
                                    key="exp_tool_fmt", width=220)
                st.download_button(
                    "Download", icon=":material/download:",
                    data=_ui.on_click_data(
                        lambda: store.annotations_file(pid, tool, split),
                        "Annotations not exported"),
                    file_name=f"{base}-{tool}{TOOL_SUFFIX[tool]}", mime="text/plain",
                    key="dl_tool", on_click="ignore")

        with st.expander("Every vote", icon=":material/groups:"):
            st.caption("Each annotator's labels (never only the training label), the training "
                       "label the project derives from them and the leads' decisions: crowd "
                       "JSONL (`annotations` per annotator; the input of `python -m gpsl "
                       "aggregate`), Label Studio (one annotation per user), doccano and "
                       "Prodigy (a record per annotator). The exact token labels ride along, "
                       "so importing the file below restores every vote.")
            with st.container(horizontal=True, vertical_alignment="bottom"):
                vfmt = st.selectbox("Format", list(VOTE_FORMATS), format_func=VOTE_FORMATS.get,
                                    key="exp_vote_fmt", width=320)
                st.download_button(
                    "Download every vote", icon=":material/download:",
                    data=_ui.on_click_data(lambda: store.export_votes(pid, vfmt, split),
                                           "Votes not exported"),
                    file_name=f"{base}-votes-{vfmt}{VOTE_SUFFIX[vfmt]}", mime="text/plain",
                    key="dl_votes", on_click="ignore")

    with right:
        st.subheader("Export predictions", anchor=False)
        versions = store.reports.versions(pid)
        vnames = version_names(versions)
        usable = store.reports.with_predictions(versions)
        if not usable:
            st.caption("Predictions can be exported once a model is trained.")
        else:
            st.caption("CoNLL: token columns, current label, predicted label and its probability. "
                       "JSONL: adds every label's marginal probability per token.")
            active = next((v.id for v in versions if v.active), usable[-1])
            with st.container(horizontal=True):
                vid = st.selectbox("Model version", usable[::-1], key="pred_version", width=160,
                                   index=usable[::-1].index(active) if active in usable else 0,
                                   format_func=vnames.get)
                pfmt = st.segmented_control("Format", list(EXPORT_FORMATS), default="conll",
                                            format_func=EXPORT_FORMATS.get, key="pred_fmt",
                                            required=True)
                st.selectbox("Sentences", list(SPLITS), format_func=SPLITS.get, key="pred_split",
                             width=220)
            psplit = _split("pred_split")
            st.download_button(
                "Download predictions", icon=":material/download:",
                data=_ui.on_click_data(
                    lambda: store.predictions_file(pid, vid, pfmt, psplit),
                    "Predictions not exported"),
                file_name=f"{base}-predictions-{vnames[vid]}.{pfmt}", mime=MIME[pfmt],
                key="dl_pred", on_click="ignore")

        st.subheader("Download a model", anchor=False)
        saved = [v for v in versions if v.status == "done" and v.path]
        if not saved:
            st.caption("Trained models can be downloaded here as a zip of the model directory "
                       "(JSON + NPZ; load it with `GPSL.load` or `python -m gpsl test -m DIR`).")
        else:
            st.caption("A zip of the model directory (JSON + NPZ, no pickle); load it with "
                       "`GPSL.load(dir)` or `python -m gpsl test -m DIR`.")
            with st.container(horizontal=True, vertical_alignment="bottom"):
                mv = st.selectbox("Model version", [v.id for v in saved][::-1],
                                  format_func=vnames.get, key="zip_version", width=160)
                try:  # a damaged model is never offered for download
                    store.check_model(mv)
                    damage = None
                except InputError as exc:
                    damage = str(exc)
                st.download_button("Download model (.zip)", icon=":material/deployed_code:",
                                   data=_ui.on_click_data(lambda: store.model_zip(mv),
                                                          "Model not exported"),
                                   file_name=f"{base}-model-{vnames[mv]}.zip",
                                   mime="application/zip",
                                   key="dl_model", on_click="ignore", disabled=damage is not None)
            if damage is not None:
                _ui.error(f"Model {vnames[mv]} cannot be downloaded: {damage}")

st.divider()
st.subheader("Import sentences", anchor=False)
st.caption("Append sentences to this project: CoNLL / CRF++ columns, plain text or JSONL, with "
           "the same number of feature columns as the project. Labels in the file are kept.")
upload = st.file_uploader("Data file", type=UPLOAD_TYPES, key="imp_file",
                          help=upload_limits_text(store))
if upload is not None:
    fid = upload.file_id
    c1, c2 = st.columns(2)
    fmt_in = _ui.upload_format(upload, f"imp_fmt_{fid}", c1)
    target = c2.selectbox("Add as", ["train", "heldout"], key=f"imp_split_{fid}",
                          format_func={"train": "training sentences (labels = annotations)",
                                       "heldout": "held-out sentences (labels = gold)"}.get)
    opened = _ui.open_upload(upload, fmt_in, store)
    if opened:
        sentences, summary = opened  # a stream: checked and counted, imported chunk by chunk
        new_labels = sentences.unknown_labels(project.labels)
        st.markdown(upload_summary(summary))
        add_labels = False
        if new_labels:
            add_labels = st.checkbox(
                "Add the new labels " + " ".join(code_span(x) for x in new_labels)
                + " to the project", key=f"imp_add_{fid}",
                help="Otherwise the import is refused: every label must be in the label set.")
        if st.button("Import", type="primary", icon=":material/upload:", key=f"imp_go_{fid}"):
            try:
                n = store.import_sentences(pid, sentences, split=target, doc=upload.name,
                                           annotator=import_credit(upload.name),
                                           add_labels=new_labels if add_labels else ())
            except GpslError as exc:
                _ui.error(str(exc))
            else:
                _ui.flash("info", f"Imported {n} sentences from {upload.name}.")
                st.rerun()

with st.expander("Import every vote of a vote file", icon=":material/groups:"):
    st.caption("A file written by “Every vote” above (here or in another gpsl store): its "
               "sentences are appended with every annotator's labels credited to them and "
               "the leads' decisions kept; the training labels follow this project's rule.")
    vote_file = st.file_uploader("Vote file", type=["jsonl", "json"], key="imp_votes_file",
                                 help=upload_limits_text(store))
    if vote_file is not None:
        vin = st.selectbox("Format", list(VOTE_FORMATS), format_func=VOTE_FORMATS.get,
                           key=f"imp_votes_fmt_{vote_file.file_id}", width=320,
                           index=list(VOTE_FORMATS).index(
                               "labelstudio" if vote_file.name.endswith(".json") else "crowd"))
        if st.button("Import the votes", type="primary", icon=":material/upload:",
                     key=f"imp_votes_go_{vote_file.file_id}"):
            try:
                n = store.import_votes(pid, vote_file.getvalue(), vin, doc=vote_file.name)
            except GpslError as exc:
                st.error(str(exc), icon=":material/error:")
            else:
                _ui.flash("info", f"Imported {n} sentences with their votes from "
                                  f"{vote_file.name}.")
                st.rerun()

with st.expander("Import a crowd folder", icon=":material/folder_shared:"):
    st.caption("One folder per annotator: " + _crowd.LAYOUT + ". Every worker becomes an "
               "annotator of this project with their votes (the sentences are appended). "
               "A crowd folder has one token column: it goes into a plain-text project; "
               "the Project page makes a new project of one.")
    folder = _crowd.upload("imp_crowd")
    if folder is not None:
        _crowd.show_folder(folder)
        new_crowd_labels = [lab for lab in folder.labels if lab not in project.labels]
        left, right = st.columns(2, gap="large")
        with left:
            held = _crowd.heldout_slider("imp_crowd_held")
        with right:
            use_crowd = _crowd.crowd_toggle("imp_crowd_model")
        add_crowd = False
        if new_crowd_labels:
            add_crowd = st.checkbox(
                "Add the new labels " + " ".join(code_span(x) for x in new_crowd_labels)
                + " to the project", key="imp_crowd_add",
                help="Otherwise the import is refused: every label must be in the label set.")
        if st.button("Import the crowd folder", type="primary", icon=":material/upload:",
                     key="imp_crowd_go"):
            with _ui.guard("Crowd folder not imported"), st.spinner(
                    f"Importing {fmt_int(folder.votes)} votes"
                    + (" and fitting the crowd model" if use_crowd else "") + "…"):
                done = store.import_crowd_folder(
                    pid, folder, heldout=held, crowd=use_crowd,
                    add_labels=new_crowd_labels if add_crowd else ())
                _ui.flash("info", _crowd.import_text(done))
                st.rerun()
