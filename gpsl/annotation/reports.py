"""What the pages show, as typed records (:mod:`gpsl.annotation.store.records`).

:class:`Reports` reads through the repositories and services with the store's
:class:`~gpsl.annotation.store.owned.Home` (``store.reports``: the facade's; never the facade
itself) and turns their rows into records, with the figures the pages draw already computed: the
Annotate page's view of a sentence (suggestions, confidences, the queue's token scores, the opening
token), the Confidence page's token table, reliability report and ranked queue, the Team
page's figures, the Train page's versions and progress.  The pages format and draw them; they
compute nothing and never see a row dict.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from gpsl import active, tags
from gpsl.annotation.corpus import predictions, projects, search, sentences, stats
from gpsl.annotation.labeling import queue, rules, team, team_columns, votes
from gpsl.annotation.people import accounts
from gpsl.annotation.permissions import Blind, Role, Shows, requires
from gpsl.annotation.store import validate
from gpsl.annotation.store.records import (
    Account,
    AnnotatorRow,
    CalibrationReport,
    Conflict,
    CrowdSummary,
    Decision,
    HistoryEntry,
    KeepTraining,
    Lease,
    Progress,
    Project,
    RankedSentence,
    Reliability,
    Scheme,
    SearchHit,
    SearchResult,
    SentenceView,
    TeamFigures,
    TeamSettings,
    TokenView,
    TrainingProgress,
    Version,
    VersionSummary,
)
from gpsl.annotation.store.store_errors import NotFoundError
from gpsl.annotation.training import jobs, runs, summaries, versions

__all__ = ["Reports", "query_description", "queue_strategy"]


class _Pandas:
    """pandas, imported on first use: the training worker imports this module (through the
    facade) and never draws a table; pandas is 0.4 CPU s of its start-up."""

    def __getattr__(self, name):
        import pandas

        return getattr(pandas, name)


pd = _Pandas()


def queue_strategy(version: Version | None) -> str | None:
    """The query score that orders the queue under an active ``version``: the one its run
    stored, else the old rule's (:data:`gpsl.annotation.labeling.queue.FALLBACK_QUERY`); None
    without a version."""
    if version is None:
        return None
    return version.query_strategy or queue.FALLBACK_QUERY


def query_description(strategy: str) -> str | None:
    """What a query score asks for (:data:`gpsl.active.QUERY_SCORES`)."""
    return active.QUERY_SCORES.get(strategy)


def scheme(labels: Sequence[str]) -> Scheme:
    """The span scheme of a label set and its entity types (:mod:`gpsl.tags`)."""
    name = tags.scheme_of(labels)
    return Scheme(name, tuple(tags.entity_types(labels)) if name else ())


def token_views(sentence: dict, marginals: np.ndarray | None, classes: Sequence[str] | None,
                scheme_name: str | None = None, query_scores: np.ndarray | None = None
                ) -> list[TokenView]:
    """Per-token view of one sentence (a :meth:`Store.get_sentence` or
    :meth:`Store.sentence_view` dict) with the active model's marginals (columns in
    ``classes`` order) and the queue's query scores (one per token) when there are any; no
    model output on the view's ``hidden`` tokens (a blind view: their stored marginals were
    computed with other people's labels clamped).  With a span ``scheme_name`` (BIO,
    BILOU) the suggestions are the most probable scheme-valid sequence given the labels
    already set (:func:`gpsl.tags.valid_decode`; hidden tokens count as uninformative
    there), not each token's argmax; ``confidence`` stays the token's largest marginal;
    ``score`` is the token's queue score (:func:`gpsl.annotation.labeling.rules.token_scores`);
    ``mine`` and ``own`` the annotator's vote and own copy (a view's ``mine``/``own``; a
    plain sentence's labels stand for ``own``)."""
    n = len(sentence["tokens"])
    use = marginals is not None and classes is not None and \
        marginals.shape == (n, len(classes))
    hidden = set(sentence.get("hidden") or ())
    mine = sentence.get("mine") or {}
    own = sentence.get("own")
    scored = query_scores is not None and np.shape(query_scores) == (n,)
    valid = None
    if use and scheme_name is not None:
        m = marginals
        if hidden:
            m = np.array(marginals, dtype=float)
            m[sorted(hidden)] = 1.0 / len(classes)
        valid = tags.valid_decode(m, classes, scheme_name, fixed=sentence["labels"])
    score = None
    if use or scored:
        score = rules.token_scores(marginals if use else None,
                                   query_scores if scored else None)
    views = []
    for t, tok in enumerate(sentence["tokens"]):
        sug, conf, top, sug_p = None, None, (), None
        if use and t not in hidden:
            row = marginals[t]
            order = np.argsort(-row)[:3]
            top = tuple((classes[j], float(row[j])) for j in order)
            sug, conf = top[0][0], top[0][1]
            if valid is not None and valid[t] in classes:
                sug = valid[t]
            sug_p = float(row[list(classes).index(sug)])
        votes = sentence["votes"][t] if sentence.get("votes") else {}
        query = float(query_scores[t]) if scored and t not in hidden else None
        views.append(TokenView(
            t, tok[0], tuple(tok), sentence["labels"][t], sentence["sources"][t],
            sentence["annotators"][t], sug, conf, top, dict(votes), sug_p, query,
            None if score is None or t in hidden else float(score[t]),
            mine.get(t), own[t] if own is not None else sentence["labels"][t]))
    return views


def _bins(h: dict) -> dict:
    """A stored histogram as columns ``lo, hi, mid, count``."""
    counts = h["counts"]
    edges = np.linspace(h["lo"], h["hi"], len(counts) + 1)
    return {"lo": edges[:-1], "hi": edges[1:], "mid": (edges[:-1] + edges[1:]) / 2,
            "count": counts}


class Reports:
    """The pages' reads of a store (``store.reports``), as records."""

    def __init__(self, home):
        self.home = home  # the database and the store's own folder (owned.Home)
        self.db = home.db

    # projects
    @requires(Role.ANNOTATOR, shows=Shows.NO_CROWD)
    def project(self, project_id: int | None) -> Project | None:
        row = projects.get(self.db, project_id) if project_id is not None else None
        return None if row is None else Project.from_row(row)

    @requires(Role.ANNOTATOR, shows=Shows.MEMBER_PROJECTS)
    def projects(self) -> list[Project]:
        return [Project.from_row(p) for p in projects.list_all(self.db)]

    @requires(Role.ANNOTATOR, shows=Shows.OWN_PROGRESS)
    def progress(self, project_id: int, split: str | None = None, *,
                 detail: bool = True) -> Progress:
        p = dict(stats.progress(self.db, project_id, split, detail=detail))
        people = tuple(a for a in p.get("annotators", {}) if not validate.is_import(a))
        return Progress(**p, people=people)

    @requires(Role.LEAD)
    def columns(self, project_id: int) -> int | None:
        """How many columns the project's tokens have (None: no sentence yet)."""
        first = sentences.page(self.db, project_id, None, 0, 1)
        return len(first[0]["tokens"][0]) if first else None

    # model versions
    @requires(Role.LEAD)
    def versions(self, project_id: int) -> list[Version]:
        return [Version.from_row(v) for v in versions.list_all(self.db, project_id)]

    @requires(Role.LEAD)
    def version(self, version_id: int) -> Version | None:
        row = versions.get(self.db, version_id)
        return None if row is None else Version.from_row(row)

    @requires(Role.ANNOTATOR)
    def active_version(self, project_id: int) -> Version | None:
        row = versions.active(self.db, project_id)
        return None if row is None else Version.from_row(row)

    @requires(Role.LEAD)
    def with_predictions(self, versions: Sequence[Version]) -> list[int]:
        """Ids of the done versions that still have stored predictions (old ones are pruned)."""
        return [v.id for v in versions
                if v.status == "done" and predictions.has_any(self.db, v.id)]

    @requires(Role.LEAD)
    def running(self, project_id: int) -> Version | None:
        """The project's running version whose worker is alive (versions whose worker died
        are marked failed first)."""
        row = jobs.running_version(self.home, project_id)
        return None if row is None else Version.from_row(row)

    @requires(Role.LEAD)
    def keep_training(self, project_id: int) -> KeepTraining:
        """The project's keep-training setting, its count of new labels and why its last
        automatic run could not start (:func:`jobs.after_write`)."""
        k = jobs.keep_training(self.db, project_id)
        lo, hi = jobs.KEEP_EVERY.constraints[0].left, jobs.KEEP_EVERY.constraints[0].right
        e = k.get("error")
        return KeepTraining(on=k["on"], every=k["every"], new_labels=k["new_labels"],
                            every_min=int(lo), every_max=int(hi), label=jobs.KEEP_EVERY.label,
                            help=jobs.KEEP_EVERY.help, error=None if not e else
                            f"{e['message']} ({str(e['at'])[:16].replace('T', ' ')} UTC)")

    @requires(Role.LEAD)
    def training_progress(self, version: Version) -> TrainingProgress:
        row = runs.read_progress(self.home.models_root, version.project_id, version.id)
        prog = TrainingProgress.from_row(row, version.settings.get("inference", "auto"))
        return prog if row is None else replace(prog, eta_seconds=runs.eta_seconds(row))

    # annotating
    @requires(Role.ANNOTATOR)
    def scheme(self, labels: Sequence[str]) -> Scheme:
        return scheme(labels)

    @requires(Role.ANNOTATOR, own="annotator")
    def sentence(self, sentence_id: int, annotator: str,
                 labels: Sequence[str] | None = None) -> SentenceView | None:
        """A sentence as ``annotator`` may see it under the project's active model
        (``labels``: the project's label set, when the caller has it)."""
        row = sentences.view(self.db, sentence_id, annotator, None)
        if row is None:
            return None
        if labels is None:
            labels = (projects.get(self.db, row["project_id"]) or {}).get("labels") or []
        name = tags.scheme_of(labels)
        version = self.active_version(row["project_id"])
        marginals = query = None
        if row.get("hidden") and version is not None and version.finished_at:
            # a vote the version's predictions could not know (written after it finished)
            # hides nothing: its stored suggestion does not reflect that vote
            since = row.get("hidden_since") or {}
            row = {**row, "hidden": [t for t in row["hidden"]
                                     if since.get(t, "") <= version.finished_at]}
        if version is not None:  # both arrays in one read
            marginals, query = predictions.of_sentence(self.db, version.id, sentence_id)
        views = token_views(row, marginals, version.classes if version else None, name, query)
        shown = [v.label for v in views]
        return SentenceView(
            id=row["id"], project_id=row["project_id"], position=row["position"],
            doc=row.get("doc"), line=row.get("line"), split=row["split"], tokens=tuple(views),
            version=version, scheme=name, blind=bool(row.get("blind")),
            opening=rules.opening_token([v.own for v in views], [v.score for v in views]),
            flagged=tags.violations(shown, name) if name else {},
            overlap=int(row.get("overlap") or 1), hidden=len(row.get("hidden") or ()))

    @requires(Role.ANNOTATOR, own="annotator")
    def own_labels(self, sentence_id: int, annotator: str) -> list[str | None]:
        """``annotator``'s own copy of a sentence (their votes, else the file's labels): what
        the Annotate page's cursor moves over, never other people's votes."""
        own = sentences.own_copy(self.db, sentence_id, annotator)  # one statement
        if own is None:
            raise NotFoundError(f"no sentence with id {sentence_id}")
        return own

    @requires(Role.ANNOTATOR, blind_own="only")
    def token_history(self, sentence_id: int, token_index: int, limit: int | None = 20, *,
                      only: str | None = None) -> list[HistoryEntry]:
        """A token's history, newest first; ``only``: that annotator's changes and the
        imported labels (what a blind view may show)."""
        out = []
        for h in search.token_history(self.db, sentence_id, token_index, limit):
            imported = validate.is_import(h["annotator"], h.get("source"))
            if only is not None and h["annotator"] != only and not imported:
                continue
            out.append(HistoryEntry(h["id"], h["annotator"], h["action"], h["old_label"],
                                    h["new_label"], h["source"], h["at"], h["undone"],
                                    imported))
        return out

    @requires(Role.ANNOTATOR, blind=Blind.TEXT_ONLY)
    def search(self, project_id: int, **filters) -> SearchResult:
        found = search.find(self.db, project_id, **filters)
        return SearchResult(found["total"], tuple(
            SearchHit(h["sentence_id"], h["number"], h["split"], h["n_tokens"],
                      h["n_labeled"], tuple(h["tokens"]), tuple(h["marks"]))
            for h in found["hits"]))

    # dashboards
    @requires(Role.LEAD)
    def summary(self, version: Version) -> VersionSummary:
        """What the Confidence page shows of a version: its stored summary
        (:mod:`gpsl.annotation.training.summaries`, computed once when it was trained)."""
        d = summaries.get(self.db, version.id)
        return VersionSummary(
            unlabeled=int(d["unlabeled"]), mean_confidence=d["mean_confidence"],
            histogram=pd.DataFrame(_bins(d["histogram"])),
            boxes=pd.DataFrame([{"predicted": lab, **b} for lab, b in d["boxes"].items()],
                               columns=["predicted", "q1", "median", "q3", "lower", "upper",
                                        "n", "mean"]),
            least_confident=tuple(d["least_confident"]),
            calibration=summaries.calibration_report(d["calibration"]))

    @requires(Role.LEAD)
    def calibration(self, project_id: int, version: Version) -> CalibrationReport | None:
        """Reliability of the version on the held-out gold labels, or None without gold or
        predictions (stored with its summary)."""
        return self.summary(version).calibration

    @requires(Role.LEAD)
    def ranked(self, project_id: int, version: Version, n: int = 10):
        """The first ``n`` sentences of the annotation queue (the one ranking,
        :mod:`gpsl.annotation.labeling.queue`) with their unlabeled tokens' confidences under
        ``version``: a list of ``(RankedSentence, tokens)``, ``tokens`` a pandas table
        ``token, label, predicted, confidence`` of the sentence (read for these sentences
        only)."""
        rows = queue.ranked(self.db, project_id, n)
        preds = predictions.get(self.db, version.id, [r["sentence_id"] for r in rows])
        out = []
        for r in rows:
            s, p = sentences.get(self.db, r["sentence_id"]), preds.get(r["sentence_id"])
            if s is None or p is None or p.shape != (len(s["tokens"]), len(version.classes)):
                continue
            conf, arg = p.max(axis=1), p.argmax(axis=1)
            free = np.array([lab is None for lab in s["labels"]], dtype=bool)
            if not free.any():
                continue
            table = pd.DataFrame({"token": [t[0] for t in s["tokens"]], "label": s["labels"],
                                  "predicted": [version.classes[j] for j in arg],
                                  "confidence": conf})
            out.append((RankedSentence(r["sentence_id"], r["position"], r["score"],
                                       r["strategy"], float(conf[free].min()),
                                       float(conf[free].mean()), int(free.sum())), table))
        return out

    @requires(Role.LEAD)
    def uncertain_tokens(self, summary: VersionSummary, n: int = 20):
        """The ``n`` least confident tokens of the summary that are still unlabeled (their
        sentences read now), as pandas ``sentence, token #, token, predicted, confidence``."""
        rows, seen = [], {}
        for t in summary.least_confident:
            sid = t["sentence_id"]
            if sid not in seen:
                s = sentences.get(self.db, sid)
                seen[sid] = s["labels"] if s is not None else None
            labels = seen[sid]
            if labels is None or t["token_index"] >= len(labels) or \
                    labels[t["token_index"]] is not None:
                continue
            rows.append({"sentence": t["position"] + 1, "token #": t["token_index"] + 1,
                         "token": t["token"], "predicted": t["predicted"],
                         "confidence": t["confidence"]})
            if len(rows) == n:
                break
        return pd.DataFrame(rows, columns=["sentence", "token #", "token", "predicted",
                                           "confidence"])

    @staticmethod
    @requires(Role.ANNOTATOR)
    def learning_curve(versions: Sequence[Version]):
        """Every done version in training order: labeled tokens, held-out accuracy, mean
        confidence and ECE (None where the project has no held-out gold) (pandas)."""
        rows = [{"version": v.name, "id": v.id, "labeled tokens": v.n_labeled_tokens or 0,
                 "accuracy": v.metrics.get("heldout_accuracy"),
                 "mean confidence": v.metrics.get("heldout_mean_confidence"),
                 "ECE": v.metrics.get("heldout_ece"), "finished": v.finished_at}
                for v in sorted(versions, key=lambda v: v.id) if v.status == "done"]
        return pd.DataFrame(rows, columns=["version", "id", "labeled tokens", "accuracy",
                                           "mean confidence", "ECE", "finished"])

    @requires(Role.LEAD)
    def activity(self, project_id: int):
        """Labels set per annotator per day (history action 'set', not undone) as pandas
        ``day, annotator, labels`` (counted by the database)."""
        rows = [{"day": d, "annotator": a, "labels": c}
                for d, a, c in stats.activity(self.db, project_id)]
        return pd.DataFrame(rows, columns=["day", "annotator", "labels"])

    @requires(Role.ANNOTATOR)
    def label_stamp(self, project_id: int) -> int:
        """The id of the project's newest history row: changes whenever a label does."""
        return (votes.history(self.db, None, project_id, None, 1) or [{"id": 0}])[0]["id"]

    # teams
    @requires(Role.ANNOTATOR)
    def team_settings(self, project_id: int) -> TeamSettings:
        s = team.settings_of(projects.get(self.db, project_id) or {})
        return TeamSettings(s["overlap"], s["blind"], s["resolve"], s["soft"], s["rule"])

    @requires(Role.LEAD)
    def crowd(self, project_id: int) -> CrowdSummary | None:
        model = team.settings_of(projects.get(self.db, project_id) or {})["crowd"]
        return None if not model else crowd_summary(model)

    @requires(Role.LEAD)
    def team(self, project_id: int) -> TeamFigures | None:
        """Agreement, the people's rows and the conflicts (None: nobody has voted), from
        the votes' columns (:mod:`gpsl.annotation.labeling.team_columns`), computed again only when
        a vote, a decision or the team settings changed."""
        gc_was = gc.isenabled()
        gc.disable()  # a record per conflict: the cycle collector would walk them all
        try:
            return team_columns.figures(self.db, project_id, team.MAX_MATRIX, team_figures)
        finally:
            if gc_was:
                gc.enable()

    @requires(Role.LEAD)
    def conflicts(self, project_id: int) -> list[Conflict]:
        """The conflicting tokens: those of :meth:`team` (kept until a vote changes)."""
        figures = self.team(project_id)
        return [] if figures is None else list(figures.conflicts)

    @requires(Role.LEAD)
    def decisions(self, sentence_id: int, token_index: int) -> list[Decision]:
        """The leads' decisions on one token, newest first."""
        return [Decision(h["at"], h["annotator"], h["old_label"], h["new_label"])
                for h in votes.adjudication_history(self.db, sentence_id, None, 100)
                if h["token_index"] == token_index]

    @requires(Role.LEAD)
    def tokens(self, sentence_id: int) -> list[str]:
        """A sentence's tokens (their first column)."""
        return [tok[0] for tok in sentences.get(self.db, sentence_id)["tokens"]]

    @requires(Role.LEAD)
    def accounts(self) -> list[Account]:
        return [Account(**{**a, "projects": tuple(a.get("projects", ()))})
                for a in accounts.list_all(self.db)]

    @requires(Role.LEAD)
    def leases(self, project_id: int) -> list[Lease]:
        return [Lease(**x) for x in queue.leases(self.db, project_id)]


#: ids checked first, as the facade's methods check them (:func:`validate.typed_ids`)
Reports = validate.typed_ids(Reports)


def team_figures(got: dict) -> TeamFigures:
    """The Team page's record of :func:`gpsl.annotation.labeling.team_columns.figures`."""
    figures = got["agreement"]
    return TeamFigures(
        tuple(figures["annotators"]), figures["kappa"], figures["shared"], figures["alpha"],
        figures["alpha_by_label"], figures["n_tokens"],
        tuple(AnnotatorRow(**r) for r in got["people"]),
        tuple(conflict(c) for c in got["conflicts"]))


def conflict(c: dict) -> Conflict:
    return Conflict(c["sentence_id"], c["position"], c["token_index"], c["token"],
                    dict(c["votes"]), tuple(c["labels"]), c["derived"], c["adjudicated"],
                    c["status"])


def crowd_summary(model: dict) -> CrowdSummary:
    return CrowdSummary(model["n_votes"], model["n_tokens"], model["fitted_at"], tuple(
        Reliability(r["annotator"], r["accuracy"], r["votes"], r["model"],
                    r.get("confusion") or {}, r.get("precision"), r.get("recall"),
                    r.get("agreement")) for r in model["report"]))
