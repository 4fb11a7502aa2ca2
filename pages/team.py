"""Team page (leads only): who labeled what and how fast, agreement, the crowd model's
reliability, conflicting tokens and their resolution, team settings and accounts."""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import streamlit as st

from gpsl.annotation import MAX_OVERLAP, GpslError
from pages import _ui
from pages._charts import heatmap, styled
from pages._format import fmt_int, fmt_num, fmt_time, md_escape
from pages._text import CONFLICT_STATUS, annotator_rows, conflict_rows, filter_conflicts

store, project = _ui.setup(role="lead")
who = _ui.identity()

_ui.header("Team", "Who labeled what, agreement, conflicts and accounts.", project)
_ui.show_flash()

people_tab, conflicts_tab, settings_tab, accounts_tab = st.tabs(
    ["People and agreement", "Conflicts", "Project settings", "Accounts"])


# ----------------------------------------------------------------------------- people

def show_people(pid: int) -> None:
    figures = store.reports.team(pid)
    if figures is None:
        st.info("Nobody has labeled anything in this project yet (labels that came with an "
                "imported file do not count here).", icon=":material/info:")
        return
    cols = st.columns(4)
    cols[0].metric("People", len(figures.people))
    cols[1].metric("Tokens labeled by 2+", fmt_int(figures.n_tokens),
                   help="Tokens that two or more people labeled: the agreement figures use "
                        "only these.")
    cols[2].metric("Krippendorff's α", fmt_num(figures.alpha),
                   help="Nominal alpha over the project: 1 = perfect agreement, 0 = chance; "
                        "– when there is nothing to compare.")
    cols[3].metric("Conflicting tokens", fmt_int(len(figures.conflicts)))
    st.dataframe(pd.DataFrame(annotator_rows(figures.people)), hide_index=True,
                 column_config={"mean κ": st.column_config.NumberColumn(format="%.2f")})
    st.caption("Changes: label actions in the history (undone ones included). Active time "
               "adds the pauses of at most 5 minutes between two actions; labels per hour and "
               "the median seconds per label are measured over that time. Mean κ: Cohen's "
               "kappa with each other person, weighted by the tokens both labeled.")
    left, right = st.columns(2, gap="large")
    names = figures.annotators
    with left:
        if len(names) >= 2:
            st.plotly_chart(heatmap(figures.kappa, names, names, "Pairwise Cohen's κ",
                                    zmin=-1.0),
                            config={"displayModeBar": False})
        else:
            st.caption("Pairwise agreement needs two people who labeled the same tokens.")
    with right:
        per = figures.alpha_by_label
        if per:
            table = pd.DataFrame({"label": list(per), "α": list(per.values())})
            st.markdown("**Krippendorff's α per label** (this label against any other)")
            st.dataframe(table, hide_index=True,
                         column_config={"α": st.column_config.NumberColumn(format="%.2f")})

    st.subheader("Reliability from the crowd model", anchor=False)
    crowd = store.reports.crowd(pid)
    with st.container(horizontal=True, vertical_alignment="center"):
        if st.button("Fit the crowd model" if not crowd else "Fit the crowd model again",
                     key="fit_crowd", icon=":material/groups:"):
            with _ui.guard("Crowd model not fitted"):
                store.fit_crowd_model(pid)
                crowd = store.reports.crowd(pid)
                _ui.flash("info", f"Crowd model fitted on {crowd.n_votes:,} votes.")
                st.rerun()
        if crowd:
            st.caption(f"Dawid–Skene on {crowd.n_votes:,} votes over "
                       f"{crowd.n_tokens:,} tokens, fitted {fmt_time(crowd.fitted_at)}"
                       " UTC; the leads' decisions count as known labels.")
    if not crowd:
        st.caption("Dawid–Skene (gpsl.crowd) estimates each person's confusion matrix from "
                   "the votes: how often they give each label when the true label is another.")
        return
    report = crowd.report
    acc = pd.DataFrame([{"annotator": r.annotator, "accuracy": r.accuracy,
                         "votes": r.votes, "model": r.model} for r in report])
    left, right = st.columns([2, 3], gap="large")
    with left:
        fig = styled(px.bar(acc, x="annotator", y="accuracy",
                                hover_data=["votes", "model"], title="Estimated accuracy"),
                         height=320, yaxis_range=[0, 1])
        st.plotly_chart(fig, config={"displayModeBar": False})
    with right:
        person = st.selectbox("Confusion matrix of", [r.annotator for r in report],
                              key="team_confusion_of")
        row = next(r for r in report if r.annotator == person)
        labels = list(row.confusion)
        matrix = [[row.confusion[y][lab] for lab in labels] for y in labels]
        st.plotly_chart(heatmap(matrix, labels, labels,
                                    f"P(label given | true label), {person}",
                                    x_title="label given", y_title="true label"),
                        config={"displayModeBar": False})


with people_tab:
    if project is None:
        st.info("There is no project yet.")
    else:
        with _ui.guard("Cannot show the team figures"):
            show_people(project.id)


# ----------------------------------------------------------------------------- conflicts

def show_conflicts(pid: int) -> None:
    conflicts = store.reports.conflicts(pid)
    if not conflicts:
        st.info("No conflicting tokens: wherever two people labeled a token they agree.",
                icon=":material/task_alt:")
        return
    voters = sorted({a for c in conflicts for a in c.votes})
    voted = sorted({lab for c in conflicts for lab in c.votes.values() if lab})
    with st.container(horizontal=True, vertical_alignment="bottom"):
        status = st.multiselect("Status", list(CONFLICT_STATUS), default=["open"],
                                format_func=CONFLICT_STATUS.get, key="conf_status")
        labels = st.multiselect("Voted label", voted, key="conf_labels")
        people = st.multiselect("Annotator", voters, key="conf_people")
        text = st.text_input("Token contains", key="conf_text")
    shown = filter_conflicts(conflicts, status, labels, people, text)
    st.caption(f"{len(shown)} of {len(conflicts)} conflicting tokens. Select a row to "
               "resolve it.")
    event = st.dataframe(pd.DataFrame(conflict_rows(shown)), hide_index=True,
                         on_select="rerun", selection_mode="single-row", key="conf_table")
    picked = event.selection.rows if event is not None else []
    if not picked or picked[0] >= len(shown):
        return
    c = shown[picked[0]]
    tokens = store.reports.tokens(c.sentence_id)
    st.markdown(f"**Sentence {c.position + 1}**, token {c.token_index + 1}: " + " ".join(
        (f"**{md_escape(tok)}**" if t == c.token_index else md_escape(tok))
        for t, tok in enumerate(tokens)))
    with st.container(horizontal=True, vertical_alignment="bottom"):
        choices = list(project.labels)
        default = c.adjudicated or c.derived or next(
            (lab for lab in c.labels if lab), choices[0])
        label = st.selectbox("Decision", choices, index=choices.index(default)
                             if default in choices else 0, key=f"adj_{c.sentence_id}_"
                             f"{c.token_index}")
        if st.button("Adjudicate", type="primary", icon=":material/gavel:", key="adj_go"):
            with _ui.guard("Not adjudicated"):
                store.adjudicate(c.sentence_id, c.token_index, label, who.name)
                _ui.flash("info", f"Token “{c.token}” is now {label} (your decision).")
                st.rerun()
        if c.adjudicated and st.button("Withdraw the decision", key="adj_withdraw",
                                       icon=":material/undo:"):
            with _ui.guard("Decision not withdrawn"):
                store.adjudicate(c.sentence_id, c.token_index, None, who.name)
                _ui.flash("info", "Decision withdrawn: the votes decide again.")
                st.rerun()
    rule = store.reports.team_settings(pid).resolve
    st.caption("Without a decision the token is resolved by "
               + ("the crowd model (each vote weighed by its annotator's estimated "
                  "reliability)" if rule == "crowd" else "the majority (a tie stays "
                                                         "unlabeled)")
               + ": change this under Project settings.")
    history = store.reports.decisions(c.sentence_id, c.token_index)
    if history:
        st.dataframe(pd.DataFrame([{"when": fmt_time(h.at), "lead": h.lead,
                                    "from": h.old_label or "—",
                                    "to": h.new_label or "(withdrawn)"} for h in history]),
                     hide_index=True)


with conflicts_tab:
    if project is not None:
        with _ui.guard("Cannot show the conflicts"):
            show_conflicts(project.id)


# ----------------------------------------------------------------------------- settings

with settings_tab:
    if project is None:
        st.info("There is no project yet.")
    else:
        with _ui.guard("Cannot show the settings"):
            pid = project.id
            current = store.reports.team_settings(pid)
            with st.form("team_settings"):
                overlap = st.number_input(
                    "Annotators per sentence (k)", 1, MAX_OVERLAP, value=current.overlap, key="k",
                    help="The queue hands each sentence to k different people (never to more "
                         "at once) before it counts as done. 1: every sentence once.")
                blind = st.toggle(
                    "Blind annotation", value=current.blind, key="blind",
                    help="Annotators see the model's suggestions and their own labels, never "
                         "another person's.")
                rules = {"majority": "the majority (a tie stays unlabeled)",
                         "crowd": "the crowd model (Dawid–Skene reliability)"}
                resolve = st.radio(
                    "A disputed token without a lead's decision is decided by", list(rules),
                    key="resolve",
                    index=list(rules).index(current.resolve), format_func=rules.get,
                    help="The crowd model has to be fitted first (People and agreement tab).")
                guidelines = st.text_area(
                    "Annotation guidelines (Markdown)", value=project.guidelines,
                    height=220, help="Shown to every annotator on the Annotate page.",
                    key="guidelines")
                saved = st.form_submit_button("Save", type="primary", key="team_save")
            if saved:
                with _ui.guard("Settings not saved"):
                    store.set_team_settings(pid, overlap=int(overlap), blind=bool(blind),
                                            resolve=resolve)
                    store.update_project(pid, guidelines=guidelines)
                    _ui.flash("info", "Team settings saved.")
                    st.rerun()
            leases = store.reports.leases(pid)
            if leases:
                st.caption("Sentences handed out now: " + " · ".join(
                    f"{md_escape(x.annotator)} → sentence {x.position + 1}" for x in leases))


# ----------------------------------------------------------------------------- accounts

def link_url(token: str) -> str:
    """The app's root URL (this page's URL without its own path) with the link token."""
    page = (st.context.url or "").split("?")[0].split("#")[0]
    return f"{page.rstrip('/').rsplit('/', 1)[0]}/?{_ui.LINK_PARAM}={token}"


with accounts_tab:
    with _ui.guard("Cannot show the accounts"):
        accounts = store.reports.accounts()
        if who.local:
            st.info("No accounts yet: the app runs in single-user mode and you are its lead. "
                    "Create your own lead account first (with a password); from then on "
                    "everyone signs in, and this tab stays signed in as that account.",
                    icon=":material/info:")
        shown_link = st.session_state.pop("_new_link", None)
        if shown_link:
            st.success(f"Sign-in link for **{md_escape(shown_link[0])}** (valid "
                       f"{shown_link[2]} days; only this newest link works). Send it to them "
                       "privately:", icon=":material/link:")
            st.code(shown_link[1], language=None)
        if accounts:
            st.dataframe(pd.DataFrame([{
                "name": a.name, "role": a.role,
                "password": "yes" if a.has_password else "no (links only)",
                "link valid until": fmt_time(a.link_expires) or "—",
                "created": fmt_time(a.created_at)} for a in accounts]),
                hide_index=True)
        with st.form("new_account", clear_on_submit=True):
            st.markdown("**New account**")
            with st.container(horizontal=True):
                name = st.text_input("Name", max_chars=60, key="acct_new_name",
                                     value=who.name if who.local and not accounts else "")
                role = st.selectbox("Role", ["annotator", "lead"], key="acct_new_role",
                                    index=1 if not accounts else 0)
                password = st.text_input("Password (optional for annotators)",
                                         type="password", key="acct_new_pw")
            create = st.form_submit_button("Create account", icon=":material/person_add:",
                                           key="acct_create")
        if create:
            try:
                aid = store.create_account(name, role, password or None)
            except GpslError as exc:
                st.error(_ui.error_text(exc, "Account not created"), icon=":material/error:")
            else:
                if who.local:  # the first account: this tab signs in as it
                    st.session_state["_session"] = store.start_session(aid)
                _ui.flash("info", f"Created the {role} account “{name.strip()}”.")
                st.rerun()
        if accounts:
            st.markdown("**Manage an account**")
            ids = [a.id for a in accounts]
            byid = {a.id: a for a in accounts}
            with st.container(horizontal=True, vertical_alignment="bottom"):
                aid = st.selectbox("Account", ids, format_func=lambda i: byid[i].name,
                                   key="acct_pick", width=220)
                if st.button("Issue a sign-in link", key="acct_link", icon=":material/link:"):
                    with _ui.guard("No link issued"):
                        token = store.issue_sign_in_link(aid)
                        st.session_state["_new_link"] = (byid[aid].name, link_url(token),
                                                         14)
                        st.rerun()
                other = "annotator" if byid[aid].role == "lead" else "lead"
                if st.button(f"Make {other}", key="acct_role", icon=":material/swap_horiz:"):
                    with _ui.guard("Role not changed"):
                        store.set_account_role(aid, other)
                        _ui.flash("info", f"{byid[aid].name} is now {other}.")
                        st.rerun()
            with st.container(horizontal=True, vertical_alignment="bottom"):
                new_pw = st.text_input("New password", type="password", key="acct_pw",
                                       width=260)
                if st.button("Set password", key="acct_setpw", icon=":material/password:"):
                    with _ui.guard("Password not set"):
                        store.set_account_password(aid, new_pw)
                        _ui.flash("info", f"New password set for {byid[aid].name} (their "
                                          "open sessions ended).")
                        st.rerun()
                sure = st.checkbox("Delete this account (its labels stay)", key="acct_sure")
                if st.button("Delete account", key="acct_delete", disabled=not sure,
                             icon=":material/person_remove:"):
                    with _ui.guard("Account not deleted"):
                        store.delete_account(aid)
                        _ui.flash("info", f"Deleted the account “{byid[aid].name}”.")
                        st.rerun()
