"""Project page: overview of the current project, its settings, and new projects."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import plotly.express as px
import streamlit as st

from gpsl.annotation import (
    PRESET_HELP,
    PRESETS,
    TRAIN_PARAMS,
    UPLOAD_TYPES,
    GpslError,
    InputError,
    check_template,
    default_features,
    default_template_text,
    import_credit,
    parse_offsets,
)
from pages import _crowd, _ui
from pages._charts import styled
from pages._chips import label_chips_html, label_colors
from pages._format import fmt_int, fmt_pct, fmt_time, md_escape, offsets_text, parse_label_text
from pages._text import (
    model_summary,
    preset_name,
    upload_limits_text,
    upload_summary,
    widget_help,
)

store, project = _ui.setup(role="lead")
pid = project.id if project else None

_ui.header("Project", "Overview, settings and new annotation projects.", project)
_ui.show_flash()


def _limits_form() -> None:
    """The store's upload limits, set by a lead within the ceilings the server started
    with; the app's own exports are always taken back."""
    lim = store.store_limits()
    st.caption(f"Every project of this store. Ceilings set when the server started: "
               f"{lim['upload_ceiling_mb']:g} MB per file, {fmt_int(lim['tokens_ceiling'])} "
               "tokens per sentence. The app's own exports always import back.")
    with st.form("store_limits"):
        now_mb = lim["upload_bytes"] / (1 << 20) if lim["upload_bytes"] else \
            lim["upload_ceiling_mb"]
        size = st.number_input("MB per uploaded file", min_value=0.01,
                               max_value=float(lim["upload_ceiling_mb"]), step=1.0,
                               value=float(min(max(now_mb, 0.01), lim["upload_ceiling_mb"])),
                               key="limit_upload_mb")
        tokens = st.number_input("Tokens per sentence", min_value=1,
                                 max_value=int(lim["tokens_ceiling"]), step=100,
                                 value=int(min(lim["tokens"] or lim["tokens_ceiling"],
                                               lim["tokens_ceiling"])),
                                 key="limit_tokens")
        saved = st.form_submit_button("Save limits", type="primary")
    if saved:
        with _ui.guard("Limits not saved"):
            store.set_store_limits(upload_mb=float(size), max_tokens=int(tokens))
            _ui.flash("info", "Upload limits saved.")
            st.rerun()


def dependency_picker(key: str, offsets, label: str = TRAIN_PARAMS["offsets"].label
                      ) -> tuple[int, ...] | None:
    """Segmented GPSL1/2/4/Custom + custom offsets; None (and an error shown) when invalid."""
    preset = preset_name(offsets)
    choice = st.segmented_control(
        label, [*PRESETS, "Custom"], default=preset, key=f"{key}_preset", required=True,
        help=widget_help(TRAIN_PARAMS["offsets"]))
    if choice == "Custom":
        text = st.text_input("Offsets", value=offsets_text(offsets), key=f"{key}_custom",
                             help="Comma-separated non-zero integers, e.g. -3, -1, 1.")
        try:
            return parse_offsets(text)
        except InputError as exc:
            _ui.error(str(exc))
            return None
    st.caption(f"{choice or preset}: {PRESET_HELP.get(choice or preset, '')}")
    return PRESETS.get(choice or preset, tuple(offsets))


# ----------------------------------------------------------------------------- overview

with _ui.guard("Cannot show the project overview"):  # the new-project form still shows
    if project is not None:
        progress = store.reports.progress(pid)
        # held-out sentences are never annotated
        train = store.reports.progress(pid, split="train")
        version = store.reports.active_version(pid)
        cols = st.columns(6)
        cols[0].metric("Sentences", fmt_int(progress.sentences),
                       help="All sentences, training and held-out.")
        cols[1].metric("Labeled tokens", fmt_int(progress.labeled_tokens),
                       help=f"of {fmt_int(train.tokens)} training tokens")
        cols[2].metric("Complete", f"{train.pct_complete:.1f}%",
                       help="Share of the training tokens that have a label (held-out sentences "
                            "carry gold labels for evaluation instead).")
        cols[3].metric("Annotators", len(progress.people),
                       help="People who set labels (labels from imported files are credited "
                            "to the import, “import:<file>”).")
        cols[4].metric("Model", version.name if version else "none",
                       help=model_summary(version))
        cols[5].metric("Held-out accuracy",
                       fmt_pct(version.metrics.get("heldout_accuracy") if version else None),
                       help="Token accuracy of the active model on the held-out gold labels.")

        colors = label_colors(project.labels)
        left, right = st.columns([3, 2], gap="large")
        with left:
            counts = progress.label_counts
            shown = [lab for lab in project.labels if counts.get(lab) and lab != "O"]
            if shown:
                fig = px.bar(pd.DataFrame({"label": shown, "tokens": [counts[x] for x in shown]}),
                             x="label", y="tokens", color="label", color_discrete_map=colors,
                             title="Labeled tokens per label")
                styled(fig, height=320, showlegend=False, xaxis_title=None)
                st.plotly_chart(fig, config={"displayModeBar": False})
                if counts.get("O"):
                    st.caption(f"Not in the chart: {fmt_int(counts['O'])} tokens labeled O.")
            else:
                st.info("No entity labels yet. Open the Annotate page to start labeling.")
        with right:
            status = pd.DataFrame({
                "sentences": [train.complete_sentences, train.partial_sentences,
                              train.unlabeled_sentences],
                "status": ["complete", "partly labeled", "unlabeled"]})
            fig = px.pie(status, names="status", values="sentences", hole=0.55,
                         title="Training sentences by annotation status",
                         color="status", color_discrete_map={"complete": "#16a34a",
                                                             "partly labeled": "#f59e0b",
                                                             "unlabeled": "#cbd5e1"})
            # the legend under the ring: the template's legend sits above a plot, on the title
            styled(fig, height=340, legend={"orientation": "h", "x": 0.5, "xanchor": "center",
                                                "y": -0.05, "yanchor": "top"})
            st.plotly_chart(fig, config={"displayModeBar": False})

        details = st.columns([3, 2], gap="large")
        with details[0]:
            st.markdown(f"**Labels ({len(project.labels)})**")
            st.html(label_chips_html(project.labels, colors))
            st.markdown(f"**Dependency set** {preset_name(project.offsets)} "
                        f"(offsets {offsets_text(project.offsets)}) · **Model** "
                        f"{md_escape(model_summary(version))}")
        with details[1]:
            annotators = progress.annotators
            if annotators:
                st.markdown("**Current labels by annotator**  \n" + " · ".join(
                    f"{md_escape(a)}: {fmt_int(n)}" for a, n in annotators.items()))
            if progress.skipped_sentences:
                st.markdown(f"**Skipped sentences** {progress.skipped_sentences}")

        with st.expander("Project settings", icon=":material/settings:"):
            st.caption("Changes apply to the next training run. Labels in use cannot be removed.")
            with st.form("settings"):
                labels_text = st.text_input(
                    "Labels", value=" ".join(project.labels),
                    help="Space-separated, in the order of the label buttons (keys 1-9). Add "
                         "entity types here, e.g. B-MISC I-MISC.")
                template_text = st.text_area(
                    "Features (`ner` or a CRF++ template)", value=project.template, height=220,
                    help="`ner`: the built-in feature set for words (shape, prefixes and "
                         "suffixes, capitalisation, ±2 windows). Or CRF++ template text: U "
                         "lines define features; an empty template uses gpsl's default "
                         "window template.")
                offsets_text = st.text_input(
                    "Dependency set", value=offsets_text(project.offsets),
                    help="Default for training: GPSL1, GPSL2, GPSL4 or offsets such as -1, 1.")
                new_name = st.text_input("Name", value=project.name)
                saved = st.form_submit_button("Save settings", type="primary")
            if saved:
                with _ui.guard("Settings not saved"):
                    labels = parse_label_text(labels_text)
                    offsets = parse_offsets(offsets_text)
                    n_columns = store.reports.columns(pid)
                    if template_text.strip() and n_columns:
                        check_template(template_text, n_columns)
                    store.update_project(pid, labels=labels, template=template_text, name=new_name,
                                         offsets=list(offsets))
                    _ui.flash("info", "Project settings saved.")
                    st.rerun()
            st.divider()
            confirm = st.checkbox("I want to delete this project with all its labels and models",
                                  key="confirm_delete")
            if st.button("Delete project", icon=":material/delete:", disabled=not confirm):
                with _ui.guard("Project not deleted"):
                    store.delete_project(pid)
                    st.session_state.pop("project_id", None)
                    _ui.flash("info", f"Deleted project “{project.name}”.")
                    st.rerun()

        with st.expander("All projects", icon=":material/list:"):
            rows = [{"project": p.name, "sentences": p.n_sentences, "labels": len(p.labels),
                     "created": fmt_time(p.created_at)} for p in store.reports.projects()]
            st.dataframe(pd.DataFrame(rows), hide_index=True)
            st.caption("Switch projects with the selector in the sidebar.")


# ----------------------------------------------------------------------------- new project

FEATURES = {"ner": "Built-in `ner` feature set", "crfpp": "CRF++ template"}


def feature_picker(key: str, n_columns: int) -> str:
    """The features of a new project: plain text (one column) starts on the built-in `ner`
    set, more columns on gpsl's window template; CRF++ templates stay selectable."""
    start = "ner" if default_features(n_columns) == "ner" else "crfpp"
    kind = st.segmented_control("Features", list(FEATURES), default=start, required=True,
                                format_func=FEATURES.get, key=f"{key}_kind")
    if kind == "ner":
        st.caption("Word features for plain text: the lowercased word, its shape (`Xxxx`, "
                   "`dd-dd`), prefixes and suffixes of 1–4 characters, capitalisation, digit, "
                   "hyphen and position flags, with ±2 windows and pairs (column 0).")
        return "ner"
    return st.text_area("Feature template (CRF++)", value=default_template_text(n_columns),
                        height=300, key=f"{key}_text",
                        help="Default: a window of ±2 tokens over every column.")


st.subheader("New project", anchor=False)
with st.expander("Upload limits of this store", icon=":material/tune:"):
    _limits_form()
upload_tab, crowd_tab, sample_tab = st.tabs(["From a file", "From a crowd folder",
                                              "Copy of the sample"])

with upload_tab:
    st.caption("CoNLL / CRF++ columns (label last, `_` for a missing label), plain text (one "
               "whitespace-tokenised sentence per line) or JSONL (`tokens`, optional `labels`).")
    upload = st.file_uploader("Data file", type=UPLOAD_TYPES, key="new_file",
                              help=upload_limits_text(store))
    if upload is not None:
        fid = upload.file_id
        fmt = _ui.upload_format(upload, f"new_fmt_{fid}", width=300,
                                help="Guessed from the file extension.")
        opened = _ui.open_upload(upload, fmt, store)
        if opened:
            sentences, summary = opened  # a stream: checked and counted, written chunk by chunk
            st.markdown(upload_summary(summary, columns=True))
            form_left, form_right = st.columns(2, gap="large")
            with form_left:
                name = st.text_input("Project name", value=Path(upload.name).stem,
                                     key=f"new_name_{fid}")
                labels_text = st.text_input(
                    "Labels", value=" ".join(summary.labels), key=f"new_labels_{fid}",
                    help="Derived from the file. Add more, separated by spaces (e.g. B-MISC "
                         "I-MISC); the order is the order of the label buttons.")
                if not summary.labels:
                    st.caption("The file has no labels: type the label set, e.g. "
                               "`B-PER I-PER B-ORG I-ORG O`.")
                offsets = dependency_picker(f"new_dep_{fid}", (-1, 1))
                heldout = st.slider(
                    "Held-out share for evaluation", 0, 40, 0, step=5, format="%d%%",
                    key=f"new_held_{fid}",
                    help="The last sentences of the file become held-out: their labels are "
                         "gold labels for measuring the model, never training data.")
            with form_right:
                template_text = feature_picker(f"new_tpl_{fid}", summary.n_columns)
            if st.button("Create project", type="primary", key=f"create_upload_{fid}",
                         icon=":material/add:"):
                try:
                    new_pid = store.create_project_from_sentences(
                        name, sentences, parse_label_text(labels_text),
                        template_text, offsets or (-1, 1), "linear",
                        heldout_fraction=heldout / 100, doc=upload.name,
                        annotator=import_credit(upload.name))
                except GpslError as exc:
                    _ui.error(str(exc))
                else:
                    _ui.switch_project(new_pid)
                    _ui.flash("info", f"Created project “{name.strip()}” with "
                                      f"{summary.sentences} sentences.")
                    st.rerun()

with crowd_tab:
    st.caption("A crowd's annotations, one folder per annotator, as Rodrigues et al.'s "
               "Mechanical Turk NER data ships: " + _crowd.LAYOUT + ". Every worker becomes an "
               "annotator with their votes; the features are the built-in `ner` set.")
    folder = _crowd.upload("new_crowd")
    if folder is not None:
        _crowd.show_folder(folder)
        left, right = st.columns(2, gap="large")
        with left:
            crowd_name = st.text_input("Project name", value=folder.name, key="new_crowd_name")
            crowd_offsets = dependency_picker("new_crowd_dep", (-1, 1))
        with right:
            crowd_held = _crowd.heldout_slider("new_crowd_held")
            use_crowd = _crowd.crowd_toggle("new_crowd_model")
        if st.button("Create project", type="primary", key="create_crowd",
                     icon=":material/add:"):
            with _ui.guard("Project not created"), st.spinner(
                    f"Importing {fmt_int(folder.votes)} votes"
                    + (" and fitting the crowd model" if use_crowd else "") + "…"):
                done = store.create_crowd_project(crowd_name, folder, heldout=crowd_held,
                                                  offsets=crowd_offsets or (-1, 1),
                                                  crowd=use_crowd)
                _ui.switch_project(done.project_id)
                _ui.flash("info", f"Created project “{crowd_name.strip()}”. "
                                  + _crowd.import_text(done))
                st.rerun()

with sample_tab:
    st.caption("400 synthetic news sentences with five entity types: 120 fully labeled, 120 "
               "partly, 160 unlabeled; the last 80 are held out with gold labels.")
    sample_name = st.text_input("Project name", value="Sample copy", key="sample_name")
    if st.button("Create from the sample", key="create_sample", icon=":material/content_copy:"):
        with _ui.guard("Project not created"):
            new_pid = store.create_sample_copy(sample_name, _ui.SAMPLE_DIR)
            _ui.switch_project(new_pid)
            _ui.flash("info", f"Created project “{sample_name.strip()}” from the sample.")
            st.rerun()
