"""Train page: start a background training run, watch it live, manage model versions."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from gpsl.annotation import jobs, pipeline
from gpsl.errors import InputError
from pages import _ui
from pages import _view as sup

store, project = _ui.setup(role="lead")
project = _ui.require_project(project)
pid = project["id"]
root = _ui.models_root()

_ui.header("Train", "Fit a GPSL model on the labeled tokens; it runs in the background while "
                    "you keep annotating.", project)
_ui.show_flash()

st.session_state.setdefault("train_preset", sup.preset_of(project["offsets"]))
st.session_state.setdefault("train_custom", sup.offsets_text(project["offsets"]))
st.session_state.setdefault("train_kernel", project.get("kernel") or "linear")
st.session_state.setdefault("train_hyper", False)
st.session_state.setdefault("train_iter", 30)
st.session_state.setdefault("train_max_sent", 0)
st.session_state.setdefault("train_inference", "auto")

with _ui.guard("Cannot read the training runs", stop=True):
    running = jobs.running_version(store, pid, root)


def bound_figure(bounds, title: str, first: int = 1, height: int = 300):
    """The bound per iteration (``first``: the iteration of ``bounds[0]``; a stored trace
    starts with the initial bound, iteration 0)."""
    fig = sup.figure(title=title, height=height, xaxis_title="iteration",
                     yaxis_title="variational lower bound", showlegend=False)
    fig.add_scatter(x=list(range(first, first + len(bounds))), y=bounds,
                    mode="lines+markers", line={"color": "#4f46e5"})
    fig.update_xaxes(dtick=max(1, len(bounds) // 10))
    return fig


def fmt_eta(seconds) -> str:
    if seconds is None:
        return ""
    seconds = int(round(float(seconds)))
    return f" · about {seconds // 60} min {seconds % 60} s left" if seconds >= 60 else \
        f" · about {seconds} s left"


settings_col, live_col = st.columns([2, 3], gap="large")

with settings_col:
    st.subheader("Settings", anchor=False)
    preset = st.segmented_control(
        "Dependency set", ["GPSL1", "GPSL2", "GPSL4", "Custom"], key="train_preset",
        required=True, help="Label dependencies of the pseudo-likelihood: GPSL1 the previous "
                            "label, GPSL2 previous and next, GPSL4 two either side.")
    offsets = None
    if preset == "Custom":
        text = st.text_input("Offsets", key="train_custom",
                             help="Comma-separated non-zero integers, e.g. -3, -1, 1.")
        try:
            offsets = sup.parse_offsets(text)
        except InputError as exc:
            st.error(str(exc))
    else:
        offsets = sup.PRESETS[preset]
        st.caption(f"{preset}: {sup.PRESET_HELP[preset]}")
    st.segmented_control("Kernel", ["linear", "rbf"], key="train_kernel", required=True,
                         format_func={"linear": "Linear", "rbf": "RBF (squared exp.)"}.get,
                         help="Covariance of the latent functions over the token features.")
    st.toggle("Learn hyper-parameters", key="train_hyper",
              help="Fit the kernel variances by variational EM, as in the paper (slower). Off "
                   "by default: maximising the bound shrinks the variances and lowered "
                   "accuracy in our measurements.")
    st.number_input("Max iterations", 1, 500, step=5, key="train_iter",
                    help="Coordinate-ascent sweeps; training stops earlier once the bound "
                         "improves by less than 0.01 %.")
    st.segmented_control("Inference", list(pipeline.INFERENCE_MODES), key="train_inference",
                         required=True,
                         format_func={"auto": "Auto", "full": "Full GP",
                                      "sparse": "Scalable"}.get,
                         help="Full GP: exact covariances, cost grows steeply with the "
                              "labeled tokens. Scalable: the large-project mode. Auto picks "
                              "by the number of labeled tokens.")
    st.number_input("Train on at most N labeled sentences (0 = all)", 0, 100_000, step=50,
                    key="train_max_sent",
                    help="By default every sentence with a labeled token is used. A cap "
                         "keeps rounds short; the most labeled sentences are used first.")
    if st.button("Start training", type="primary", icon=":material/play_arrow:",
                 disabled=running is not None or offsets is None, key="start"):
        with _ui.guard("Training not started"):  # bad settings, a run already going, busy
            config = pipeline.TrainConfig(
                offsets=offsets, kernel=st.session_state["train_kernel"],
                learn_hyper=bool(st.session_state["train_hyper"]),
                max_iter=int(st.session_state["train_iter"]),
                inference=st.session_state["train_inference"],
                max_sentences=int(st.session_state["train_max_sent"]) or None)
            vid = jobs.start_training(store, pid, config, root)
            started = store.get_model_version(vid)
            _ui.flash("info", f"Training of model version "
                              f"{sup.version_name(started) if started else vid} started.")
            st.rerun()
    if running is not None:
        st.caption("One run per project at a time: wait for this one or stop it.")

with live_col:
    st.subheader("Progress", anchor=False)

    def show_progress() -> None:
        if running is None:
            done = [v for v in store.list_model_versions(pid) if v["status"] != "running"]
            if not done:
                st.info("No model yet. Choose the settings and start training; the bound "
                        "appears here while it runs.")
                return
            last = done[-1]
            bounds = last.get("bound_trace") or []
            st.markdown(f"Last run: **{sup.version_name(last)}** · {last['status']}"
                        + (f" · {sup.md_escape(last['error'])}" if last.get("error") else ""))
            if bounds:
                st.plotly_chart(bound_figure(bounds, f"Bound of {sup.version_name(last)}",
                                                 first=0),
                                config={"displayModeBar": False})
            return
        now = jobs.running_version(store, pid, root)  # also marks a dead worker failed
        if now is None or now["id"] != running["id"]:
            st.rerun()  # finished: refresh the whole page (versions table, sidebar)
        prog = pipeline.read_progress(root, pid, running["id"]) or {}
        it, max_it = int(prog.get("iteration", 0)), int(prog.get("max_iter", 1) or 1)
        phase = prog.get("phase", "starting")
        mode = prog.get("inference_used") or prog.get("inference") or \
            running["settings"].get("inference", "auto")
        secs = (prog.get("seconds") or [0.0])[-1]
        eta = fmt_eta(pipeline.eta_seconds(prog))
        if phase == "predicting":
            done, total = int(prog.get("done", 0)), int(prog.get("total", 0) or 1)
            text = (f"{sup.version_name(running)} · {mode} inference · predicting: {done:,} of "
                    f"{total:,} sentences{eta}")
            st.progress(min(1.0, done / total), text=text)
        else:
            labeled = prog.get("labeled_tokens")
            text = (f"{sup.version_name(running)} · {mode} inference · {phase} · iteration "
                    f"{it} of at most {max_it} · {secs:.0f} s{eta}"
                    + (f" · {labeled:,} labeled tokens in {prog.get('sentences', 0):,} "
                       "sentences" if labeled else ""))
            st.progress(min(1.0, it / max_it) if phase == "fitting" else
                        (1.0 if it else 0.0), text=text)
        bounds = prog.get("bounds") or []
        if bounds:
            st.plotly_chart(bound_figure(bounds, "Variational lower bound (live)"),
                            config={"displayModeBar": False})
        else:
            st.caption(f"Worker pid {running['settings'].get('pid')} is {phase}; the first "
                       "iteration can take a while on large projects.")
        if st.button("Stop training", icon=":material/stop:", key="stop"):
            with _ui.guard("Training not stopped"):
                jobs.stop_training(store, running["id"])
                _ui.flash("warning", f"Stopped model version {sup.version_name(running)}.")
                st.rerun()

    @st.fragment(run_every=1.0 if running is not None else None)
    def live() -> None:  # a fragment rerun runs only this: it needs its own guard
        with _ui.guard("Cannot show the training progress"):
            show_progress()

    live()

with _ui.guard("Cannot show the model versions"):
    st.subheader("Model versions", anchor=False)
    versions = store.list_model_versions(pid)
    if not versions:
        st.caption("Finished runs are listed here with their held-out accuracy.")
    else:
        table = pd.DataFrame(sup.versions_table(versions))
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
        done = sup.versions_with_predictions(store, pid, versions)
        if done:
            with st.container(horizontal=True, vertical_alignment="bottom"):
                active = next((v["id"] for v in versions if v["active"]), None)
                vnames = sup.version_names(versions)
                choice = st.selectbox("Version", done[::-1], format_func=vnames.get,
                                      index=0 if active is None else done[::-1].index(active),
                                      key="train_pick", width=160)
                if st.button("Make active", disabled=choice == active, key="make_active",
                             icon=":material/star:"):
                    with _ui.guard("Model not made active"):
                        store.set_active_model(pid, choice)
                        _ui.flash("info", f"Model {vnames[choice]} is now active.")
                        st.rerun()
