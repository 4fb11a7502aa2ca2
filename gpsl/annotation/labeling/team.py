"""A project's team: its settings (overlap, blind mode, how disputes are resolved), the
crowd model of its votes, agreement figures, per-annotator speed and the conflicting tokens.

Settings live in ``projects.settings`` (JSON): ``overlap`` (k annotators per sentence,
:func:`gpsl.annotation.labeling.queue.route`; with k >= 2 annotators see only their own votes, as in
blind mode), ``blind`` (annotators see only their own votes,
:func:`gpsl.annotation.corpus.sentences.view`), ``resolve`` (``'majority'`` or ``'crowd'``: which
decides a disputed token without a lead's decision,
:func:`gpsl.annotation.labeling.rules.derive_labels`), ``soft`` (training takes every person's votes
as soft labels under the crowd model,
:func:`training_set`), ``joint`` (training takes the joint model's posterior,
:mod:`gpsl.annotation.training.joint_labels`; a crowd folder's import turns it on) and ``crowd``
(the fitted Dawid–Skene model).  The rule these make is
:func:`gpsl.annotation.labeling.rules.training_rule`.  Votes that came with an imported file are not
a person's and take no part in any figure here.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np

from gpsl import agreement
from gpsl.annotation.corpus import projects, sentences
from gpsl.annotation.labeling import label_writes, rules, votes
from gpsl.annotation.store import validate
from gpsl.annotation.store.db import Database, now
from gpsl.annotation.store.records import TrainingLabels, Vote, overlap_of
from gpsl.annotation.store.store_errors import NotFoundError
from gpsl.crowd import DawidSkene, Votes, annotator_report
from gpsl.errors import InputError

DEFAULTS = {"overlap": 1, "blind": False, "resolve": "majority", "soft": False,
            "joint": False}
RESOLVE = tuple(rules.RESOLVE_RULES)
MAX_OVERLAP = 20
ACTIVE_GAP = 300.0  # seconds: a longer pause between two labels is not labeling time
#: the most people the pairwise kappa matrices hold (those with the most votes): 10,000
#: people would make 100 million cells, and no page can show them
MAX_MATRIX = 200


def settings_of(project: dict) -> dict:
    """The team settings of a project dict (defaults filled in), with ``rule``: the
    training-label rule they make, in words
    (:func:`gpsl.annotation.labeling.rules.training_rule`)."""
    s = project.get("settings") or {}
    resolve = s.get("resolve", DEFAULTS["resolve"]) or "majority"
    joint = bool(s.get("joint", DEFAULTS["joint"]))
    soft = bool(s.get("soft", DEFAULTS["soft"])) and resolve == "crowd" and not joint
    return {"overlap": overlap_of(s), "blind": bool(s.get("blind", DEFAULTS["blind"])),
            "resolve": resolve, "soft": soft, "joint": joint, "crowd": s.get("crowd"),
            "rule": rules.training_rule(resolve, soft, joint),
            "posterior": rules.POSTERIORS[rules.rule_key(resolve, soft, joint)]}


def training_labels(project: dict) -> TrainingLabels:
    """Which posterior a project's training runs learn from, and the whole rule (the Train
    and Team pages show them)."""
    s = settings_of(project)
    return TrainingLabels(rules.rule_key(s["resolve"], s["soft"], s["joint"]), s["posterior"],
                          s["rule"])


def set_settings(db: Database, project_id: int, *, overlap: int | None = None,
                 blind: bool | None = None, resolve: str | None = None,
                 soft: bool | None = None, joint: bool | None = None) -> dict:
    """Change the team settings (one transaction); a change of ``resolve`` derives the
    disputed tokens' labels again.  ``soft`` (soft labels in training) needs ``resolve``
    ``'crowd'``; resolving by the majority turns it off.  ``joint`` (training on the joint
    model's posterior) needs no fitted model and wins over ``soft``.  Returns the new
    settings."""
    if overlap is not None:
        try:
            overlap = int(overlap)
        except (TypeError, ValueError):
            raise InputError(f"overlap must be a whole number, got {overlap!r}",
                             source="<project>") from None
        if not 1 <= overlap <= MAX_OVERLAP:
            raise InputError(f"overlap must be between 1 and {MAX_OVERLAP}", source="<project>")
    if resolve is not None and resolve not in RESOLVE:
        raise InputError(f"resolve must be 'majority' or 'crowd', got {resolve!r}",
                         source="<project>")

    def tx(conn):
        settings = projects.settings_of(conn, project_id, db.for_update())
        old_resolve = settings.get("resolve", "majority")
        if overlap is not None:
            settings["overlap"] = overlap
        if blind is not None:
            settings["blind"] = bool(blind)
        if resolve is not None:
            if resolve == "crowd" and not settings.get("crowd"):
                raise InputError("fit the crowd model first (Team page)", source="<project>")
            settings["resolve"] = resolve
            if resolve != "crowd":
                settings["soft"] = False
        if soft is not None:
            if soft and settings.get("resolve", "majority") != "crowd":
                raise InputError("soft labels need the crowd model: resolve disputes by the "
                                 "crowd model first", source="<project>")
            settings["soft"] = bool(soft)
        if joint is not None:
            settings["joint"] = bool(joint)
        projects.write_settings(conn, project_id, settings)
        if settings.get("resolve", "majority") != old_resolve:
            label_writes.rederive(conn, project_id)
        return settings_of({"settings": settings})

    return db.write(tx)


# ----------------------------------------------------------------------------- crowd model


def project_votes(db: Database, project_id: int) -> list[dict]:
    """Every person's vote of a project (imported labels left out): ``dict(sentence_id,
    position, token_index, annotator, label, source, updated_at)``."""
    return votes.of_project(db, project_id)


def fit_crowd(db: Database, project_id: int, **dawid_skene) -> dict:
    """Fit Dawid-Skene (:class:`gpsl.crowd.DawidSkene`, ``dawid_skene`` its arguments) on
    the project's votes, with the leads' decisions as observed labels; store it in the
    project's settings (``crowd``) and, when the project resolves disputes by the crowd
    model, derive the disputed tokens again.  Returns the stored model, whose ``report``
    has per annotator the votes, accuracy (eq. A of :mod:`gpsl.crowd`) and confusion
    matrix."""
    project = projects.get(db, project_id)
    if project is None:
        raise NotFoundError(f"no project with id {project_id}")
    cast = [v for v in project_votes(db, project_id) if v["label"] is not None]
    if not cast:
        raise InputError("no votes to fit the crowd model on", source=project["name"])
    adjudicated = votes.adjudications_of_project(db, project_id)
    classes = sorted(set(project["labels"]) | {v["label"] for v in cast}
                     | set(adjudicated.values()))
    ci = {c: i for i, c in enumerate(classes)}
    items = list(dict.fromkeys([(v["sentence_id"], v["token_index"]) for v in cast]
                               + list(adjudicated)))
    ii = {it: i for i, it in enumerate(items)}
    names = list(dict.fromkeys(v["annotator"] for v in cast))
    ai = {a: i for i, a in enumerate(names)}
    observed = np.full(len(items), -1, dtype=np.int64)
    for it, lab in adjudicated.items():
        observed[ii[it]] = ci[lab]
    data = Votes(lengths=np.array([len(items)]),
                 token=np.array([ii[(v["sentence_id"], v["token_index"])] for v in cast]),
                 annotator=np.array([ai[v["annotator"]] for v in cast]),
                 label=np.array([ci[v["label"]] for v in cast]),
                 annotators=names, classes=classes, observed=observed)
    ds = DawidSkene(**dawid_skene).fit_votes(data)
    report = annotator_report(ds, data)
    model = {"classes": classes, "annotators": names,
             "log_pi": np.maximum(ds.model_.log_pi, -700.0).tolist(),
             "log_prior": np.log(np.maximum(ds.class_prior_, 1e-300)).tolist(),
             "fitted_at": now(), "n_votes": len(cast), "n_tokens": len(items),
             "report": report}

    def tx(conn):
        settings = projects.settings_of(conn, project_id, db.for_update())
        settings["crowd"] = model
        projects.write_settings(conn, project_id, settings)
        if settings.get("resolve") == "crowd":
            label_writes.rederive(conn, project_id)

    db.write(tx)
    return model


# ----------------------------------------------------------------------------- training


def training_set(db: Database, project_id: int) -> dict:
    """What a training run fits, by the project's rule (:func:`settings_of`, ``rule``):
    ``ids, X, y`` (the ``'train'`` sentences with a training label or, with soft labels, a
    person's vote; their tokens; their labels, None missing), ``evidence`` (None, or with
    soft labels one ``(len, J)`` array per sentence for :meth:`gpsl.model.GPSL.fit`),
    ``classes`` (None, or the fit's sorted classes), ``resolve``, ``soft``, ``rule`` and
    ``soft_tokens`` (tokens whose label is soft).

    Hard labels: the derived training labels (:func:`gpsl.annotation.labeling.rules.derive_labels`).
    Soft labels: a token with a lead's decision keeps it as a hard label, a token without a
    person's vote keeps its derived label (a file's label, or none); every other token is a
    missing label with the evidence of its votes under the crowd model
    (:func:`gpsl.annotation.labeling.rules.crowd_evidence`): the missing-label machinery of the fit
    then gives it the crowd posterior with the tagger as prior.

    The joint posterior (``joint``, :func:`_joint_set`): ``y`` as with soft labels (the
    observed labels), ``evidence`` None, and ``annotations``: per sentence ``{annotator:
    labels}`` of the people's votes, for the joint model the training run fits
    (:mod:`gpsl.annotation.training.joint_labels`)."""
    project = projects.get(db, project_id)
    if project is None:
        raise NotFoundError(f"no project with id {project_id}")
    settings = settings_of(project)
    out = {"evidence": None, "classes": None, "resolve": settings["resolve"],
           "soft": settings["soft"], "joint": False, "rule": settings["rule"],
           "soft_tokens": 0}
    joint = _joint_set(db, project_id, out) if settings["joint"] else None
    if joint is not None:
        return joint
    if not settings["soft"] or not settings["crowd"]:
        out["soft"] = False
        out["rule"] = rules.training_rule(settings["resolve"], False)
        out["ids"], out["X"], out["y"] = sentences.training_data(
            db, project_id, "train", only_labeled=True, with_ids=True)
        return out
    cast, rows, y, classes = _voted_rows(db, project_id)
    evidence = []
    for s, labs in zip(rows, y):
        e = np.zeros((len(labs), len(classes)))
        for t, lab in enumerate(labs):
            if lab is None and (s["id"], t) in cast:
                e[t] = rules.crowd_evidence(settings["crowd"], cast[(s["id"], t)], classes)
                out["soft_tokens"] += 1
        evidence.append(e)
    out.update(ids=[s["id"] for s in rows], X=[s["tokens"] for s in rows], y=y,
               evidence=evidence, classes=classes)
    return out


def _voted_rows(db: Database, project_id: int):
    """The soft and joint rules' rows: ``(cast, rows, y, classes)``: the people's votes with
    a label by token, the ``'train'`` sentences with a vote or a label, their observed labels
    (a lead's decision; a token without a person's vote keeps its derived label; None on the
    other voted tokens) and the sorted classes of both."""
    cast: dict[tuple[int, int], list[Vote]] = defaultdict(list)
    for v in project_votes(db, project_id):
        if v["label"] is not None:
            cast[(v["sentence_id"], v["token_index"])].append(
                Vote(v["annotator"], v["label"], v["source"], v["updated_at"]))
    adjudicated = votes.adjudications_of_project(db, project_id)
    voted = {sid for sid, _ in cast}
    rows = [s for s in sentences.page(db, project_id, "train")
            if s["id"] in voted or any(lab is not None for lab in s["labels"])]
    y = [[None if ((s["id"], t) in cast and (s["id"], t) not in adjudicated) else lab
          for t, lab in enumerate(s["labels"])] for s in rows]
    classes = sorted({lab for labs in y for lab in labs if lab is not None}
                     | {v.label for vs in cast.values() for v in vs})
    return cast, rows, y, classes


def _joint_set(db: Database, project_id: int, out: dict) -> dict | None:
    """:func:`training_set` by the ``joint`` rule: the observed labels and every person's
    votes (``annotations``); the training run fits the joint model on them. None when nobody
    has voted: the hard labels (a file's) are all there is."""
    cast, rows, y, classes = _voted_rows(db, project_id)
    if not cast:
        return None
    annotations = []
    for s in rows:
        ann: dict[str, list] = {}
        for t in range(len(s["labels"])):
            for v in cast.get((s["id"], t), ()):
                ann.setdefault(v.annotator, [None] * len(s["labels"]))[t] = v.label
        annotations.append(ann)
    out.update(ids=[s["id"] for s in rows], X=[s["tokens"] for s in rows], y=y,
               annotations=annotations, classes=classes, joint=True, soft=True)
    out["soft_tokens"] = sum(lab is None and (s["id"], t) in cast
                             for s, labs in zip(rows, y) for t, lab in enumerate(labs))
    return out


# ----------------------------------------------------------------------------- figures


def _items(votes: Sequence[dict]) -> dict[tuple[int, int], dict[str, str | None]]:
    items: dict[tuple[int, int], dict[str, str | None]] = defaultdict(dict)
    for v in votes:
        items[(v["sentence_id"], v["token_index"])][v["annotator"]] = v["label"]
    return items


def agreement_figures(db: Database, project_id: int, cast: Sequence[dict] | None = None
                      ) -> dict:
    """Agreement over the tokens two or more people labeled (a cleared vote, "no label",
    is left out): ``annotators``, ``kappa`` and ``shared`` (pairwise Cohen's kappa and the
    tokens each pair shares, :func:`gpsl.agreement.pairwise_kappa`), ``alpha``
    (Krippendorff's nominal alpha over the project) and ``alpha_by_label``, ``n_tokens``
    (tokens with two or more labels)."""
    cast = project_votes(db, project_id) if cast is None else cast
    items = _items(cast)
    counts, pairs = agreement.pair_kappas(items)
    # the matrices hold the MAX_MATRIX people with the most votes (10,000 people would be
    # 100 million cells); every person's mean kappa is over all their pairs
    shown = sorted(sorted(counts, key=lambda a: (-counts[a], a))[:MAX_MATRIX])
    annotators, kappa, shared = agreement.pairwise_kappa(items, shown, pairs=(counts, pairs))
    units = [[lab for lab in v.values()] for v in items.values()]
    multi = [u for u in units if sum(lab is not None for lab in u) >= 2]
    return {"annotators": annotators, "kappa": kappa, "shared": shared,
            "mean_kappa": agreement.mean_kappa(counts, pairs), "people": len(counts),
            "alpha": agreement.krippendorff_alpha(multi),
            "alpha_by_label": agreement.alpha_per_label(multi),
            "n_tokens": len(multi)}


def label_seconds(times: Sequence[float]) -> tuple[float, int, list[float]]:
    """Labeling time from one person's label actions (``times``: seconds, sorted): the
    actions written in one transaction (keys that reached the server together) share one
    time, so the time since the previous write is shared by the labels of the write,
    ``gap / n`` each.  Returns ``(active seconds, labels timed, seconds per label)``;
    gaps longer than :data:`ACTIVE_GAP` (a pause) count neither as time nor as labels."""
    groups = sorted(Counter(times).items())
    active, timed, per_label = 0.0, 0, []
    for (before, _), (at, n) in zip(groups, groups[1:]):
        gap = at - before
        if gap > ACTIVE_GAP:
            continue
        active += gap
        timed += n
        per_label.extend([gap / n] * n)
    return active, timed, per_label


def annotator_stats(db: Database, project_id: int, cast: Sequence[dict] | None = None,
                    figures: dict | None = None) -> list[dict]:
    """One row per person: ``annotator, votes`` (current, with a label), ``sentences``,
    ``changes`` (label actions in the history, undone ones included), ``active_minutes``
    (the gaps of at most :data:`ACTIVE_GAP` s between consecutive actions),
    ``labels_per_hour`` (changes per active hour), ``median_seconds`` (median seconds per
    label, :func:`label_seconds`, long pauses left out), ``kappa`` (mean pairwise kappa with the
    others, weighted by shared tokens) and ``last`` (time of the latest action)."""
    cast = project_votes(db, project_id) if cast is None else cast
    figures = agreement_figures(db, project_id, cast) if figures is None else figures
    times: dict[str, list[float]] = defaultdict(list)
    for who, at in votes.action_times(db, project_id):
        if not validate.is_import(who):
            times[who].append(datetime.fromisoformat(at).timestamp())
    n_votes = Counter(v["annotator"] for v in cast if v["label"] is not None)
    sents: dict[str, set] = defaultdict(set)
    for v in cast:
        sents[v["annotator"]].add(v["sentence_id"])
    n_sent = {a: len(sents[a]) for a in n_votes}
    means = figures.get("mean_kappa")
    index = {a: i for i, a in enumerate(figures["annotators"])}
    names = sorted(set(n_votes) | set(times))
    rows = []
    for a in names:
        ts = sorted(times.get(a, []))
        active, timed, per_label = label_seconds(ts)
        kappa = None
        if means is not None:
            kappa = means.get(a)
        elif a in index:
            i = index[a]
            w = figures["shared"][i].astype(float).copy()
            w[i] = 0.0
            k = figures["kappa"][i]
            ok = (w > 0) & np.isfinite(k)
            if ok.any():
                kappa = float(np.sum(w[ok] * k[ok]) / np.sum(w[ok]))
        rows.append({"annotator": a, "votes": int(n_votes.get(a, 0)),
                     "sentences": int(n_sent.get(a, 0)), "changes": len(ts),
                     "active_minutes": active / 60.0,
                     "labels_per_hour": (timed / active * 3600.0) if active > 0 else None,
                     "median_seconds": statistics.median(per_label) if per_label else None,
                     "kappa": kappa,
                     "last": datetime.fromtimestamp(ts[-1], UTC).isoformat(timespec="seconds")
                     if ts else None})
    return rows


def conflicts(db: Database, project_id: int, cast: Sequence[dict] | None = None) -> list[dict]:
    """Tokens on which people disagree (two or more different votes, "no label" included):
    ``sentence_id, position, token_index, token, votes {annotator: label}, labels`` (the
    distinct labels voted), ``derived`` (the training label now, None when left missing),
    ``adjudicated`` (the lead's decision or None) and ``status`` (``'adjudicated'``,
    ``'resolved'`` by the majority or crowd model, or ``'open'``)."""
    cast = project_votes(db, project_id) if cast is None else cast
    items = _items(cast)
    disputed = {k: v for k, v in items.items() if len(v) > 1 and len(set(v.values())) > 1}
    if not disputed:
        return []
    sids = sorted({sid for sid, _ in disputed})
    toks, (derived, adj) = db.read(lambda conn: (sentences.tokens_in(conn, sids),
                                                  votes.decisions_of(conn, sids)))
    position = {(v["sentence_id"], v["token_index"]): v["position"] for v in cast}
    out = []
    for key in sorted(disputed, key=lambda k: (position[k], k[1])):
        sid, t = key
        tokens = toks[sid]
        status = "adjudicated" if key in adj else ("resolved" if derived.get(key) else "open")
        out.append({"sentence_id": sid, "position": position[key], "token_index": t,
                    "token": tokens[t][0], "votes": dict(sorted(disputed[key].items())),
                    "labels": sorted({lab for lab in disputed[key].values()},
                                     key=lambda x: (x is None, x or "")),
                    "derived": derived.get(key), "adjudicated": adj.get(key),
                    "status": status})
    return out
