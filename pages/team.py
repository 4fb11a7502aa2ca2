"""Team page (leads only): who labeled what and how fast, agreement, the crowd model's
reliability, conflicting tokens and their resolution, team settings and accounts."""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import streamlit as st

from gpsl.annotation import (
    LINK_HOURS,
    MAX_OVERLAP,
    MIN_PASSWORD,
    TRAINING_RULES,
    GpslError,
    rule_settings,
    safe_filename,
    to_csv,
)
from pages import _ui
from pages._charts import figure, heatmap, plain, styled
from pages._format import fmt_int, fmt_num, fmt_time, md_escape
from pages._text import CONFLICT_STATUS, annotator_rows, conflict_rows, filter_conflicts

store, project = _ui.setup(role="lead")
who = _ui.identity()

_ui.header("Team", "Who labeled what, agreement, conflicts and accounts.", project)
_ui.show_flash()

people_tab, conflicts_tab, settings_tab, accounts_tab = st.tabs(
    ["People and agreement", "Conflicts", "Project settings", "Accounts"])


# ----------------------------------------------------------------------------- people

#: up to this many people, the pairwise kappa matrix shows with its values in the cells
SMALL_TEAM = 12
SCORE = st.column_config.ProgressColumn  # a 0-1 figure as a bar with its value


#: the columns of a person's labeling in the app (none for votes that came in a crowd folder)
ACTIVITY = ("changes", "active min", "labels / hour", "median s / label", "last label")


def people_rows(people, crowd) -> list[dict]:
    """One row per person: their labeling, agreement and (with the crowd model) estimated
    reliability; the least reliable first. The activity columns only when someone labeled
    in the app."""
    rel = {r.annotator: r for r in crowd.report} if crowd else {}
    active = any(p.changes for p in people)
    rows = []
    for row in annotator_rows(people):
        r = rel.get(row["annotator"])
        if crowd:
            row = {"annotator": row["annotator"], "labels": row["labels"],
                   "accuracy": r.accuracy if r else None,
                   "entity precision": r.precision if r else None,
                   "entity recall": r.recall if r else None,
                   **{k: v for k, v in row.items() if k not in ("annotator", "labels")}}
        rows.append({k: v for k, v in row.items() if active or k not in ACTIVITY})
    key = "accuracy" if crowd else "mean κ"
    return sorted(rows, key=lambda x: (x[key] is None, x[key] if x[key] is not None else 0,
                                       x["annotator"]))


def kappa_matrix(figures):
    """The pairwise kappa matrix of a large team: people ordered by mean kappa, no values
    in the cells (hover shows them, with the tokens the pair shares)."""
    mean = {r.annotator: r.kappa for r in figures.people}
    order = sorted(range(len(figures.annotators)),
                   key=lambda i: (mean.get(figures.annotators[i]) is None,
                                  -(mean.get(figures.annotators[i]) or 0.0)))
    names = [plain(figures.annotators[i]) for i in order]
    z = [[None if not (figures.shared[i][j] > 0 and figures.kappa[i][j] == figures.kappa[i][j])
          else float(figures.kappa[i][j]) for j in order] for i in order]
    shared = [[int(figures.shared[i][j]) for j in order] for i in order]
    fig = figure(title="Pairwise Cohen's κ (people ordered by mean κ; blank: no shared "
                       "tokens)", height=140 + 15 * len(names))
    fig.add_heatmap(z=z, x=names, y=names, zmin=-1.0, zmax=1.0, customdata=shared,
                    colorscale="Blues", hoverongaps=False, colorbar={"thickness": 12},
                    hovertemplate="%{y} · %{x}: κ %{z:.2f} on %{customdata} tokens"
                                  "<extra></extra>")
    fig.update_yaxes(autorange="reversed", type="category", tickfont={"size": 9})
    fig.update_xaxes(type="category", side="bottom", tickfont={"size": 9}, tickangle=-60)
    return fig


def reliability_scatter(rows: list[dict]):
    """Every person as a dot: mean kappa with the others against the crowd model's accuracy
    (size: labels); hover names them."""
    data = pd.DataFrame([r for r in rows if r["mean κ"] is not None
                         and r["accuracy"] is not None])
    if data.empty:
        return None
    data["name"] = [plain(a) for a in data["annotator"]]
    fig = px.scatter(data, x="mean κ", y="accuracy", size="labels", hover_name="name",
                     hover_data={"labels": True, "entity precision": ":.2f",
                                 "entity recall": ":.2f", "name": False},
                     title="Reliability and agreement, one dot per person")
    fig.update_traces(marker={"color": "#4f46e5", "opacity": 0.7, "sizemin": 4})
    return styled(fig, height=380, xaxis_title="mean Cohen's κ with the others",
                  yaxis_title="estimated accuracy (crowd model)")


def team_figures(pid: int):
    """The project's team figures, computed again only when a label changed (a page of 46
    workers takes seconds to compute; picking a confusion matrix reruns the page)."""
    stamp = (pid, project.created_at, store.where, store.reports.label_stamp(pid))
    cached = st.session_state.get("_team_figures")
    if cached is None or cached[0] != stamp:
        cached = (stamp, store.reports.team(pid))
        st.session_state["_team_figures"] = cached
    return cached[1]


def show_people(pid: int) -> None:
    figures = team_figures(pid)
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
            st.caption(f"Reliability from the crowd model: Dawid–Skene on "
                       f"{crowd.n_votes:,} votes over {crowd.n_tokens:,} tokens, fitted "
                       f"{fmt_time(crowd.fitted_at)} UTC; the leads' decisions count as "
                       "known labels.")
        else:
            st.caption("Dawid–Skene (gpsl.crowd) estimates each person's reliability from "
                       "the votes: how often they give each label when the true label is "
                       "another.")
    rows = people_rows(figures.people, crowd)
    table = pd.DataFrame(rows)  # a person who shares no token with another: "–", not None
    table["mean κ"] = [fmt_num(k) for k in table["mean κ"]]
    for col, digits in (("labels / hour", 0), ("median s / label", 1)):  # – : one action
        if col in table:
            table[col] = [fmt_num(x, digits) for x in table[col]]
    pace = "– : no pause between two of this person's labels measured yet."
    st.dataframe(table, hide_index=True, height=min(38 + 35 * len(rows), 560),
                 column_config={"mean κ": st.column_config.TextColumn(
                     "mean κ", help="Cohen's κ with each other person, weighted by the tokens "
                                    "both labeled; – : no token labeled by this person and "
                                    "another."),
                                "labels / hour": st.column_config.TextColumn(
                                    "labels / hour", help=pace),
                                "median s / label": st.column_config.TextColumn(
                                    "median s / label", help=pace),
                                "accuracy": SCORE("accuracy", format="%.2f", min_value=0.0,
                                                  max_value=1.0),
                                "entity precision": SCORE("entity precision", format="%.2f",
                                                          min_value=0.0, max_value=1.0),
                                "entity recall": SCORE("entity recall", format="%.2f",
                                                       min_value=0.0, max_value=1.0)})
    st.caption(("The least reliable first (click a column to sort). Accuracy: the crowd "
                "model's estimate of the share of a person's labels that are right; entity "
                "precision: the same of their entity labels (not O); entity recall: of the "
                "tokens they labeled that are entities by the crowd model, the share they "
                "labeled right. " if crowd else "")
               + ("Changes: label actions in the history (undone ones included). Active time "
                  "adds the pauses of at most 5 minutes between two actions; labels per hour "
                  "and the median seconds per label are measured over that time. "
                  if "changes" in rows[0] else "")
               + "Mean κ: Cohen's kappa with each other person, weighted by the tokens both "
               "labeled.")
    left, right = st.columns(2, gap="large")
    names = figures.annotators
    with left:
        if len(names) > SMALL_TEAM and crowd:
            scatter = reliability_scatter(rows)
            if scatter is not None:
                st.plotly_chart(scatter, config={"displayModeBar": False})
        elif len(names) > SMALL_TEAM:
            st.plotly_chart(kappa_matrix(figures), config={"displayModeBar": False})
        elif len(names) >= 2:
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
    if len(names) > SMALL_TEAM and crowd:
        with st.expander(f"Pairwise Cohen's κ of all {len(names)} people",
                         icon=":material/grid_on:"):
            st.plotly_chart(kappa_matrix(figures), config={"displayModeBar": False})

    if not crowd:
        return
    report = crowd.report
    left, right = st.columns([2, 3], gap="large")
    with left:
        if len(report) <= SMALL_TEAM:
            acc = pd.DataFrame([{"annotator": r.annotator, "accuracy": r.accuracy,
                                 "votes": r.votes, "model": r.model} for r in report])
            fig = styled(px.bar(acc, x="annotator", y="accuracy",
                                hover_data=["votes", "model"], title="Estimated accuracy"),
                         height=320, yaxis_range=[0, 1])
            st.plotly_chart(fig, config={"displayModeBar": False})
        else:
            st.caption("Each person's confusion matrix: how often they give each label "
                       "(columns) when the crowd model believes the true label is another "
                       "(rows). Pick a person on the right; the table above has everyone.")
    with right:
        order = [r.annotator for r in sorted(report, key=lambda r: (r.accuracy is None,
                                                                     r.accuracy or 0.0))]
        person = st.selectbox("Confusion matrix of", order, key="team_confusion_of")
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
    rows = conflict_rows(shown)
    with st.container(horizontal=True, vertical_alignment="center"):
        st.caption(f"{len(shown)} of {len(conflicts)} conflicting tokens. Select a row to "
                   "resolve it.")
        st.download_button("Download as CSV", to_csv(rows), icon=":material/download:",
                           file_name=f"{safe_filename(project.name)}-conflicts.csv",
                           mime="text/csv", key="conf_csv", on_click="ignore",
                           help="Cells that a spreadsheet would run as a formula (=, +, -, @ "
                                "...) start with ' so they stay text.")
    # a decision clears the selection (a new table key): the next token is picked by the
    # lead, never selected for them
    table = f"conf_table_{st.session_state.get('conf_round', 0)}"
    event = st.dataframe(pd.DataFrame(rows), hide_index=True,
                         on_select="rerun", selection_mode="single-row", key=table)
    picked = event.selection.rows if event is not None else []
    if not picked or picked[0] >= len(shown):
        return
    c = shown[picked[0]]
    tokens = store.reports.tokens(c.sentence_id)
    st.markdown(f"**Sentence {c.position + 1}**, token {c.token_index + 1}: " + " ".join(
        (f"**{md_escape(tok)}**" if t == c.token_index else md_escape(tok))
        for t, tok in enumerate(tokens)))
    if c.adjudicated:
        st.caption(f"Decided now: {md_escape(c.adjudicated)} (a lead's decision).")
    with st.container(horizontal=True, vertical_alignment="bottom"):
        choices = list(project.labels)
        # never pre-filled: the lead picks every decision themselves
        label = st.selectbox("Decision", choices, index=None, placeholder="Choose a label",
                             key=f"adj_{c.sentence_id}_{c.token_index}")
        if st.button("Adjudicate", type="primary", icon=":material/gavel:", key="adj_go",
                     disabled=label is None):
            with _ui.guard("Not adjudicated"):
                store.adjudicate(c.sentence_id, c.token_index, label, who.name)
                _ui.flash("info", f"Token “{c.token}” is now {label} (your decision).")
                st.session_state["conf_round"] = st.session_state.get("conf_round", 0) + 1
                st.rerun()
        if c.adjudicated and st.button("Withdraw the decision", key="adj_withdraw",
                                       icon=":material/undo:"):
            with _ui.guard("Decision not withdrawn"):
                store.adjudicate(c.sentence_id, c.token_index, None, who.name)
                _ui.flash("info", "Decision withdrawn: the votes decide again.")
                st.session_state["conf_round"] = st.session_state.get("conf_round", 0) + 1
                st.rerun()
    rule = store.reports.team_settings(pid).rule
    st.caption(f"Training labels: {rule}. Change the rule under Project settings.")
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
                         "another person's. With k ≥ 2 this holds anyway: each of the k "
                         "votes is independent until a lead reviews them here.")
                rule = st.radio(
                    "Training labels: a lead's decision, else", list(TRAINING_RULES),
                    key="resolve", index=list(TRAINING_RULES).index(
                        store.training_labels(pid).key),
                    format_func=TRAINING_RULES.get,
                    help="The joint crowd model is fitted by each training run (the "
                         "annotators learned together with the tagger) and the tagger learns "
                         "from its posterior's probabilities. Soft labels keep the "
                         "Dawid–Skene posterior's probabilities: the votes enter the fit as "
                         "evidence on the token's missing label; the Dawid–Skene model has to "
                         "be fitted first (People and agreement tab).")
                st.caption(f"Now: {current.rule}.")
                guidelines = st.text_area(
                    "Annotation guidelines (Markdown)", value=project.guidelines,
                    height=220, help="Shown to every annotator on the Annotate page.",
                    key="guidelines")
                saved = st.form_submit_button("Save", type="primary", key="team_save")
            if saved:
                with _ui.guard("Settings not saved"):
                    store.set_team_settings(pid, overlap=int(overlap), blind=bool(blind),
                                            **rule_settings(rule))
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


def first_lead() -> None:
    """Local mode, no account: this machine's user makes the lead account (only a loopback
    address reaches this page without one; served to others the app asks for the setup
    token instead)."""
    st.info("No accounts yet: the app runs in single-user local mode and you are its lead. "
            "To let a team in, create your own lead account first (with a password); from "
            "then on everyone signs in, and this tab stays signed in as that account.",
            icon=":material/info:")
    # keys of its own: a second submit (Enter, then a click) that arrives after this tab is
    # signed in must not fire the "New account" form, nor fill it with this name and password
    with st.form("first_lead", clear_on_submit=False):
        st.markdown("**Your lead account**")
        with st.container(horizontal=True):
            name = st.text_input("Name", max_chars=60, key="lead_first_name",
                                 value=who.name)
            password = st.text_input(f"Password (at least {MIN_PASSWORD} characters, hard "
                                     "to guess)", type="password", key="lead_first_pw",
                                     max_chars=256)
            again = st.text_input("The same password again", type="password",
                                  key="lead_first_pw2", max_chars=256)
        create = st.form_submit_button("Create the lead account", icon=":material/person_add:",
                                       key="lead_first_create")
    if create:
        if password != again:
            _ui.error("The two passwords differ.")
            return
        with _ui.guard("Account not created"):
            mine = st.session_state.get("_first_lead") == name
            st.session_state["_first_lead"] = name
            try:
                aid = store.create_account(name, "lead", password)
            except GpslError:
                # a second submit (Enter, then a click) ran beside the first, which made this
                # account: this tab signs in as it with the typed password (rate-limited)
                got = _ui.store().sign_in(name, password, _ui.client_address()) if mine \
                    else None
                if got is None:
                    raise
                st.session_state["_session"] = got[1]
                st.rerun()
            st.session_state["_session"] = _ui.store().start_session(aid)
            _ui.flash("info", f"Created the lead account “{' '.join(name.split())}”: "
                              "sign-in is on.")
            st.rerun()


def manage_accounts(accounts) -> None:
    projects = {p.id: p.name for p in store.reports.projects()}
    shown_link = st.session_state.pop("_new_link", None)
    if shown_link:
        st.success(f"Sign-in link for **{md_escape(shown_link[0])}**: it works once, within "
                   f"{LINK_HOURS} hours (only this newest link works). Send it to them "
                   "privately:", icon=":material/link:")
        st.code(shown_link[1], language=None)
    st.dataframe(pd.DataFrame([{
        "name": a.name, "role": a.role,
        "password": "yes" if a.has_password else "no (links only)",
        "projects": "every project" if a.role == "lead" else
        ", ".join(projects.get(i, str(i)) for i in a.projects) or "none yet",
        "signed in": f"{a.sessions} session{'s' if a.sessions != 1 else ''}"
        if a.sessions else "—",
        "link valid until": fmt_time(a.link_expires) or "—",
        "created": fmt_time(a.created_at)} for a in accounts]),
        hide_index=True)
    with st.form("new_account", clear_on_submit=True):
        st.markdown("**New account**")
        with st.container(horizontal=True):
            name = st.text_input("Name", max_chars=60, key="acct_new_name")
            role = st.selectbox("Role", ["annotator", "lead"], key="acct_new_role", index=0)
            password = st.text_input("Password (optional for annotators)", type="password",
                                     key="acct_new_pw", max_chars=256)
        member_of = st.multiselect(
            "Projects (annotators see only these)", list(projects),
            default=[project.id] if project is not None else [],
            format_func=projects.get, key="acct_new_projects")
        create = st.form_submit_button("Create account", icon=":material/person_add:",
                                       key="acct_create")
    if create:
        try:
            aid = store.create_account(name, role, password or None)
            for pid in member_of:
                store.set_member(pid, aid, True)
        except GpslError as exc:
            _ui.error(_ui.error_text(exc, "Account not created"))
        else:
            _ui.flash("info", f"Created the {role} account “{' '.join(name.split())}”.")
            st.rerun()
    st.markdown("**Manage an account**")
    ids = [a.id for a in accounts]
    byid = {a.id: a for a in accounts}
    with st.container(horizontal=True, vertical_alignment="bottom"):
        aid = st.selectbox("Account", ids, format_func=lambda i: byid[i].name,
                           key="acct_pick", width=220)
        if st.button("Issue a sign-in link", key="acct_link", icon=":material/link:"):
            with _ui.guard("No link issued"):
                token = store.issue_sign_in_link(aid)
                st.session_state["_new_link"] = (byid[aid].name, link_url(token))
                st.rerun()
        other = "annotator" if byid[aid].role == "lead" else "lead"
        if st.button(f"Make {other}", key="acct_role", icon=":material/swap_horiz:"):
            with _ui.guard("Role not changed"):
                store.set_account_role(aid, other)
                _ui.flash("info", f"{byid[aid].name} is now {other}.")
                st.rerun()
        if st.button("Sign out everywhere", key="acct_revoke", icon=":material/logout:",
                     disabled=not byid[aid].sessions,
                     help="End every session of this account (on every device)."):
            with _ui.guard("Sessions not ended"):
                n = store.end_sessions(aid)
                _ui.flash("info", f"Ended {n} session{'s' if n != 1 else ''} of "
                                  f"{byid[aid].name}.")
                st.rerun()
    if byid[aid].role == "annotator" and projects:
        with st.container(horizontal=True, vertical_alignment="bottom"):
            chosen = st.multiselect("Member of", list(projects),
                                    default=[i for i in byid[aid].projects if i in projects],
                                    format_func=projects.get, key=f"acct_projects_{aid}")
            if st.button("Save projects", key="acct_save_projects",
                         icon=":material/folder_shared:"):
                with _ui.guard("Projects not saved"):
                    for pid in projects:
                        store.set_member(pid, aid, pid in chosen)
                    _ui.flash("info", f"{byid[aid].name} is a member of "
                                      f"{len(chosen)} project{'s' if len(chosen) != 1 else ''}.")
                    st.rerun()
    with st.container(horizontal=True, vertical_alignment="bottom"):
        new_pw = st.text_input("New password", type="password", key="acct_pw", width=260,
                               max_chars=256)
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


with accounts_tab:
    with _ui.guard("Cannot show the accounts"):
        if who.local:
            first_lead()
        else:
            manage_accounts(store.reports.accounts())
