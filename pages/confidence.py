"""Confidence page: how sure the model is, how well calibrated, where to annotate next."""

from __future__ import annotations

import streamlit as st

from gpsl.annotation import queue_strategy
from pages import _ui
from pages._charts import (
    activity_figure,
    box_figure,
    histogram_figure,
    learning_figure,
    reliability_figure,
    selective_figure,
)
from pages._chips import label_colors, sentence_html
from pages._format import fmt_int, fmt_pct
from pages._text import (
    calibration_note,
    calibration_plain,
    least_sure_caption,
    noise_floor_note,
    queue_caption,
    version_names,
)

store, project = _ui.setup(role="lead")
project = _ui.require_project(project)
pid = project.id
reports = store.reports

_ui.header("Confidence", "The model's token confidence (largest marginal probability), its "
                         "calibration on held-out gold labels, and where it is least sure.",
           project)


@st.cache_data(max_entries=8, show_spinner="Loading the version's figures ...")
def load_summary(db: str, project_id: int, version_id: int):
    """The version's stored figures: they change with the version, never with a label."""
    return reports.summary(reports.version(version_id))


@st.cache_data(max_entries=4, show_spinner=False)
def load_ranked(db: str, project_id: int, version_id: int, label_stamp: int):
    """The first sentences of the queue (their tokens read now: a label changes them)."""
    return reports.ranked(project_id, reports.version(version_id), 8)


@st.cache_data(max_entries=4, show_spinner=False)
def load_uncertain(db: str, project_id: int, version_id: int, label_stamp: int):
    return reports.uncertain_tokens(load_summary(db, project_id, version_id), 30)


@st.cache_data(max_entries=4, show_spinner=False)
def load_activity(db: str, project_id: int, label_stamp: int):
    return reports.activity(project_id)


CHARTS = {"histogram": histogram_figure, "box": box_figure, "reliability": reliability_figure,
          "learning": learning_figure, "selective": selective_figure,
          "activity": activity_figure}


@st.cache_resource(max_entries=32, show_spinner=False)
def chart(kind: str, *data):
    """The figure of ``CHARTS[kind]`` over ``data``, which is its cache key (hashed by
    value): what a new version, label or day changes in the data draws a new figure; a rerun
    over the same data reuses the one built (never changed after: building was 80% of a
    rerun's CPU at 100,000 sentences)."""
    return CHARTS[kind](*data)


with _ui.guard("Cannot load the model's predictions", stop=True):
    versions = reports.versions(pid)
    usable = reports.with_predictions(versions)
    if not usable:
        st.info("No model yet: train one on the Train page to see its confidence here.",
                icon=":material/info:")
        st.page_link(_ui.PAGES["train"], label="Go to Train", icon=":material/model_training:")
        st.stop()

    active = next((v.id for v in versions if v.active), None)
    # follow the active version: when another version became active since the last run,
    # show it (a version picked by hand stays until then)
    if st.session_state.get("conf_version") not in usable or \
            st.session_state.get("conf_active_seen") != active:
        st.session_state["conf_version"] = active if active in usable else usable[-1]
    st.session_state["conf_active_seen"] = active
    st.selectbox("Model version", usable[::-1], key="conf_version", width=220,
                 format_func=lambda i: version_names(versions)[i]
                 + (" (active)" if i == active else ""),
                 help="Dashboards of this version's stored predictions.")
    version = next(v for v in versions if v.id == st.session_state["conf_version"])
    summary = load_summary(store.where, pid, version.id)
    calib = summary.calibration

colors = label_colors(project.labels)
mean_free = summary.mean_confidence

st.caption(calibration_plain(version), help=calibration_note(version))
cols = st.columns(6)
cols[0].metric("Unlabeled tokens", fmt_int(summary.unlabeled),
               help="Training tokens without a label when this version was trained: what "
                    "the histogram and box plot describe.")
cols[1].metric("Mean confidence (unlabeled)", f"{mean_free:.3f}" if mean_free is not None
               else "–")
cols[2].metric("Held-out accuracy", fmt_pct(calib.accuracy) if calib else "–",
               help="Token accuracy on the held-out gold labels." if calib else
               "The project has no held-out gold labels.")
cols[3].metric("Held-out confidence", f"{calib.mean_confidence:.3f}" if calib else "–",
               help="Mean confidence of the held-out tokens: calibrated confidences average "
                    "to the accuracy, so compare it with the held-out accuracy.")
cols[4].metric("ECE", f"{calib.ece:.3f}" if calib else "–",
               help="Expected calibration error over 10 equal-width confidence bins (0 = "
                    "perfectly calibrated).")
cols[5].metric("ECE (equal-mass)", f"{calib.ece_mass:.3f}" if calib else "–",
               help="ECE over 15 bins holding as many tokens each: the crowded top bin is "
                    "split, so errors there show.")
if calib:
    st.caption(noise_floor_note(calib))

left, right = st.columns(2, gap="large")
with left:
    if summary.unlabeled:
        st.plotly_chart(chart("histogram", summary.histogram),
                        config={"displayModeBar": False})
    else:
        st.success("Every training token was labeled.")
with right:
    if summary.unlabeled:
        st.plotly_chart(chart("box", summary.boxes, tuple(project.labels), colors),
                        config={"displayModeBar": False})

left, right = st.columns(2, gap="large")
with left:
    if calib:
        st.plotly_chart(chart("reliability", calib.table, fmt_int(calib.tokens)),
                        config={"displayModeBar": False})
        st.caption("Numbers on the bars: held-out tokens in each confidence bin. Orange "
                   "whiskers: the accuracies a perfectly calibrated model would show in the "
                   "bin 95% of the time; a bar ending outside them is off by more than chance.")
    else:
        st.info("No held-out gold labels in this project, so no reliability diagram. Create "
                "projects with a held-out share, or import held-out sentences on the Data "
                "page.")
with right:
    curve = reports.learning_curve(versions)
    if len(curve):
        st.plotly_chart(chart("learning", curve), config={"displayModeBar": False})

if calib:
    st.subheader("Choosing an accept threshold", anchor=False)
    st.caption("On the held-out gold: how many tokens \"accept suggestions ≥ threshold\" "
               "would accept and how often they would be right; and the accuracy of the k% "
               "most confident tokens.")
    left, right = st.columns(2, gap="large")
    with left:
        st.plotly_chart(chart("selective", calib.selective),
                        config={"displayModeBar": False})
    with right:
        st.dataframe(calib.thresholds, hide_index=True, column_config={
            "threshold": st.column_config.NumberColumn("accept ≥", format="%.2f"),
            "count": st.column_config.NumberColumn("tokens"),
            "share": st.column_config.ProgressColumn("share of tokens", min_value=0.0,
                                                     max_value=1.0, format="percent"),
            "accuracy": st.column_config.NumberColumn("accuracy", format="%.4f")})
        if not calib.bands.empty:
            st.caption("By label frequency (rare: under 5% of the labeled training tokens)")
            st.dataframe(calib.bands, hide_index=True, column_config={
                "accuracy": st.column_config.NumberColumn(format="%.4f"),
                "mean confidence": st.column_config.NumberColumn(format="%.4f"),
                "ECE (15 equal-mass bins)": st.column_config.NumberColumn(format="%.4f")})

st.subheader("Where the model is least sure", anchor=False)
queue_note = queue_caption(queue_strategy(next((v for v in versions if v.active), None)))
st.caption("Training sentences in the order of the annotation queue under the active model "
           "(the highest query score of their unlabeled tokens first); open one to annotate "
           "it." + (f" {queue_note}." if queue_note else ""))
stamp = reports.label_stamp(pid)
top = load_ranked(store.where, pid, version.id, stamp)
if not top:
    st.success("No unlabeled training tokens left.")
for row, sent in top:
    with st.container(border=True):
        with st.container(horizontal=True, vertical_alignment="center"):
            st.caption(least_sure_caption(row))
            st.space("stretch")
            if st.button("Annotate", key=f"open_{row.sentence_id}", icon=":material/edit_note:",
                         type="tertiary"):
                st.session_state["goto_sentence"] = int(row.sentence_id)
                st.switch_page(_ui.PAGES["annotate"])
        st.html(sentence_html(list(sent["token"]), list(sent["label"]),
                                  list(sent["confidence"]), list(sent["predicted"]), colors))

with st.expander("Most uncertain tokens", icon=":material/table_rows:"):
    st.dataframe(load_uncertain(store.where, pid, version.id, stamp), hide_index=True,
                 column_config={
        "confidence": st.column_config.ProgressColumn("confidence", min_value=0.0,
                                                      max_value=1.0, format="%.2f")})

st.subheader("Annotator progress", anchor=False)
with _ui.guard("Cannot show the annotator progress"):
    activity = load_activity(store.where, pid, stamp)
    if activity.empty:
        st.caption("No labels set in the app yet (imported labels are not counted).")
    else:
        st.plotly_chart(chart("activity", activity), config={"displayModeBar": False})
