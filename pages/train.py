"""Train page: start a background training run, watch it live, manage model versions."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from gpsl.annotation import (
    PRESET_HELP,
    PRESETS,
    TRAIN_PARAMS,
    InputError,
    TrainConfig,
    parse_offsets,
)
from pages import _ui
from pages._charts import bound_figure
from pages._format import fmt_eta, md_escape, md_text, offsets_text
from pages._text import bounds, preset_name, version_names, versions_table, widget_help

#: a run's phases in order (the progress record's names) and how the live line says them
RUN_PHASES = ("starting", "loading", "joint", "fitting", "calibrating", "evaluating", "saving",
              "predicting", "storing")
PHASE_TEXT = {"starting": "starting the worker", "loading": "reading the labels",
              "joint": "fitting the joint crowd model (annotators and tagger)",
              "evaluating": "held-out figures", "saving": "saving the model",
              "storing": "storing the version", "paused": "paused"}
#: the progress record's phases as the summary of a run names them
PHASE_NAMES = {"loading": "load", "joint": "joint crowd model", "fitting": "fit",
               "calibrating": "calibration",
               "evaluating": "held-out figures", "saving": "save",
               "predicting": "predictions", "storing": "store"}


def run_summary(version, prog) -> str:
    """One line about a finished run: who started it, its warm start, how it was
    calibrated and the seconds of its phases (the worker's progress record)."""
    parts = [f"started by {version.settings.get('started_by', 'click')}"]
    if version.metrics.get("warm_start"):
        parts.append(f"warm start from {version.metrics['warm_start']}")
    cal = version.calibration
    if cal is not None and cal.how:
        parts.append(f"calibrator {cal.how}")
    if prog.phases:
        total = sum(w for _, w, _ in prog.phases)
        parts.append(f"{total:.1f} s in the worker (" + ", ".join(
            f"{PHASE_NAMES.get(n, n)} {w:.1f}" for n, w, _ in prog.phases) + ")")
    return " · ".join(parts)


store, project = _ui.setup(role="lead")
project = _ui.require_project(project)
pid = project.id

_ui.header("Train", "Fit a GPSL model on the labeled tokens; it runs in the background while "
                    "you keep annotating.", project)
_ui.show_flash()

P = TRAIN_PARAMS  # labels, help, options and bounds of the widgets: gpsl.params
DEFAULT = TrainConfig()  # the table's defaults for a run started in the app
st.session_state.setdefault("train_preset", preset_name(project.offsets))
st.session_state.setdefault("train_custom", offsets_text(project.offsets))
st.session_state.setdefault("train_kernel", project.kernel or DEFAULT.kernel)
st.session_state.setdefault("train_hyper", DEFAULT.learn_hyper)
st.session_state.setdefault("train_iter", DEFAULT.max_iter)
st.session_state.setdefault("train_max_sent", 0)
st.session_state.setdefault("train_inference", DEFAULT.inference)

with _ui.guard("Cannot read the training runs", stop=True):
    running = store.reports.running(pid)


settings_col, live_col = st.columns([2, 3], gap="large")

with settings_col:
    st.subheader("Settings", anchor=False)
    preset = st.segmented_control(P["offsets"].label, [*PRESETS, "Custom"], key="train_preset",
                                  required=True, help=widget_help(P["offsets"]))
    offsets = None
    if preset == "Custom":
        text = st.text_input("Offsets", key="train_custom",
                             help="Comma-separated non-zero integers, e.g. -3, -1, 1.")
        try:
            offsets = parse_offsets(text)
        except InputError as exc:
            _ui.error(str(exc))
    else:
        offsets = PRESETS[preset]
        st.caption(f"{preset}: {PRESET_HELP[preset]}")
    st.segmented_control(P["kernel"].label, list(P["kernel"].options), key="train_kernel",
                         required=True, format_func=P["kernel"].option_label,
                         help=widget_help(P["kernel"]))
    st.toggle(P["learn_hyper"].label, key="train_hyper", help=widget_help(P["learn_hyper"]))
    low, high = bounds(P["max_iter"])
    st.number_input(P["max_iter"].label, low, high, step=5, key="train_iter",
                    help=widget_help(P["max_iter"], "Training stops earlier once the bound "
                                     f"improves by less than {100 * DEFAULT.tol:g}% in a "
                                     "sweep."))
    st.segmented_control(P["inference"].label, list(P["inference"].options),
                         key="train_inference", required=True,
                         format_func=P["inference"].option_label,
                         help=widget_help(P["inference"]))
    st.number_input(P["max_sentences"].label, 0, bounds(P["max_sentences"])[1], step=50,
                    key="train_max_sent", help=widget_help(P["max_sentences"]))
    if running is None and offsets is not None:
        store.prepare_training(pid)  # the click's worker, started now with its imports
    if st.button("Start training", type="primary", icon=":material/play_arrow:",
                 disabled=running is not None or offsets is None, key="start"):
        with _ui.guard("Training not started"):  # bad settings, a run already going, busy
            config = TrainConfig(
                offsets=offsets, kernel=st.session_state["train_kernel"],
                learn_hyper=bool(st.session_state["train_hyper"]),
                max_iter=int(st.session_state["train_iter"]),
                inference=st.session_state["train_inference"],
                max_sentences=int(st.session_state["train_max_sent"]) or None)
            vid = store.start_training(pid, config)
            started = store.reports.version(vid)
            _ui.flash("info", f"Training of model version "
                              f"{started.name if started else vid} started.")
            st.rerun()
    if running is not None:
        st.caption("One run per project at a time: wait for this one or stop it.")

    with _ui.guard("Cannot show keep training"):
        keep = store.reports.keep_training(pid)
        st.session_state.setdefault("train_keep_every", keep.every)

        def save_keep() -> None:  # a callback: a one-line error, the widget keeps its value
            with _ui.guard("Keep training not changed"):
                store.set_keep_training(pid, bool(st.session_state["train_keep"]),
                                        int(st.session_state["train_keep_every"]))

        with st.container(horizontal=True, vertical_alignment="bottom"):
            st.toggle("Keep training", value=keep.on, key="train_keep", on_change=save_keep,
                      help="Refit in the background after every N new labels (anyone's), "
                           "with the last run's settings; never a second run while one is "
                           "running.")
            st.number_input(keep.label, keep.every_min, keep.every_max, step=10,
                            key="train_keep_every", on_change=save_keep, help=keep.help,
                            width=220)
        if keep.on:
            st.caption(f"Keep training is on: {keep.new_labels:,} of {keep.every:,} new "
                       "labels since the last run began.")
        if keep.error:  # logged by the back end (gpsl.annotation.training.jobs) when it happened
            st.warning(md_text(f"Keep training could not start a run: {keep.error}"),
                       icon=":material/warning:")
    with _ui.guard("Cannot read the team settings"):
        trains_on = store.training_labels(pid)
        st.caption(f"**Trains on:** {trains_on.posterior}.")
        st.caption(f"**Training labels:** {trains_on.rule} "
                   "(the project's rule: Team → Project settings).")

with live_col:
    st.subheader("Progress", anchor=False)

    def show_progress() -> None:
        if running is None:
            done = [v for v in store.reports.versions(pid) if v.status != "running"]
            if not done:
                st.info("No model yet. Choose the settings and start training; the bound "
                        "appears here while it runs.")
                return
            last = done[-1]
            bounds = last.bound_trace
            st.markdown(f"Last run: **{last.name}** · {last.status}"
                        + (f" · {md_escape(last.error)}" if last.error else ""))
            st.caption(run_summary(last, store.reports.training_progress(last)))
            if bounds:
                st.plotly_chart(bound_figure(bounds, f"Bound of {last.name}", first=0),
                                config={"displayModeBar": False})
            return
        now = store.reports.running(pid)  # also marks a dead worker failed
        if now is None or now.id != running.id:
            st.rerun()  # finished: refresh the whole page (versions table, sidebar)
        prog = store.reports.training_progress(running)
        eta = fmt_eta(prog.eta_seconds)
        who = " (keep training)" if running.settings.get("started_by") == "keep training" else ""
        head = f"{running.name}{who} · {prog.inference} inference"
        if prog.phase == "predicting":
            text = (f"{head} · predictions and query scores: {prog.done:,} of "
                    f"{max(prog.total, 1):,} sentences{eta}")
            st.progress(min(1.0, prog.done / max(prog.total, 1)), text=text)
        elif prog.phase == "calibrating" and prog.steps:
            what = {"fold": f"fold fit {min(prog.step + 1, prog.steps - 1)} of "
                            f"{prog.steps - 1}",
                    "selection": "choosing the calibrator", "refit": "refitting the calibrator",
                    "held-out halves": "calibrating the held-out halves"}.get(
                prog.step_name, prog.step_name or "calibrating")
            st.progress(min(1.0, prog.step / prog.steps),
                        text=f"{head} · calibrating: {what}{eta}")
        elif prog.phase == "fitting":
            secs = (prog.seconds or (0.0,))[-1]
            left = prog.eta_seconds
            frac = secs / (secs + left) if left is not None and secs + left > 0 else 0.0
            sweep = (f"sweep {prog.iteration} done · {secs:.0f} s" if prog.iteration
                     else "first sweep")
            text = (f"{head} · fitting · {sweep}"
                    + (f"{eta} (the stop rule's estimate)" if eta else "")
                    + (f" · {prog.labeled_tokens:,} labeled tokens in {prog.sentences:,} "
                       "sentences" if prog.labeled_tokens else ""))
            st.progress(min(1.0, frac), text=text)
        else:  # no measure inside these phases: the bar counts the run's phases
            k = RUN_PHASES.index(prog.phase) if prog.phase in RUN_PHASES else 0
            st.progress(k / len(RUN_PHASES), text=f"{head} · "
                        f"{PHASE_TEXT.get(prog.phase, prog.phase)} (step {k + 1} of "
                        f"{len(RUN_PHASES)})")
        if prog.bounds:
            st.plotly_chart(bound_figure(prog.bounds, "Variational lower bound (live)"),
                            config={"displayModeBar": False})
        else:
            st.caption(f"Worker pid {running.settings.get('pid')} is {prog.phase}; the first "
                       "iteration can take a while on large projects.")
        if st.button("Stop training", icon=":material/stop:", key="stop"):
            with _ui.guard("Training not stopped"):
                store.stop_training(running.id)
                _ui.flash("warning", f"Stopped model version {running.name}.")
                st.rerun()

    @st.fragment(run_every=1.0 if running is not None else None)
    def live() -> None:  # a fragment rerun runs only this: it needs its own guard
        with _ui.guard("Cannot show the training progress"):
            show_progress()

    live()

with _ui.guard("Cannot show the model versions"):
    st.subheader("Model versions", anchor=False)
    versions = store.reports.versions(pid)
    if not versions:
        st.caption("Finished runs are listed here with their held-out accuracy.")
    else:
        table = pd.DataFrame(versions_table(versions))
        st.dataframe(table, hide_index=True, column_config={
            "accuracy": st.column_config.NumberColumn("held-out acc.", format="percent"),
            "ECE": st.column_config.NumberColumn("ECE", format="%.3f"),
            "missing-label weight": st.column_config.NumberColumn(
                "missing-label weight", format="%.2f",
                help="How much a token without a label counts as its own training target "
                     "(1 while at most half the tokens of the trained sentences are "
                     "unlabeled, less when most are: partial annotation)"),
            "note": st.column_config.TextColumn("note", width="large"),
        })
        st.caption("★ = active model: its predictions drive suggestions, highlights and the "
                   "uncertainty queue. Accuracy and ECE are measured on the held-out gold "
                   "labels. Only versions whose predictions are kept (the newest ones) can be "
                   "made active.")
        done = store.reports.with_predictions(versions)
        if done:
            with st.container(horizontal=True, vertical_alignment="bottom"):
                active = next((v.id for v in versions if v.active), None)
                vnames = version_names(versions)
                choice = st.selectbox("Version", done[::-1], format_func=vnames.get,
                                      index=0 if active is None else done[::-1].index(active),
                                      key="train_pick", width=160)
                if st.button("Make active", disabled=choice == active, key="make_active",
                             icon=":material/star:"):
                    with _ui.guard("Model not made active"):
                        store.set_active_model(pid, choice)
                        _ui.flash("info", f"Model {vnames[choice]} is now active.")
                        st.rerun()
