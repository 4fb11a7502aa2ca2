"""A project's team: its settings (overlap, blind mode, how disputes are resolved), the
crowd model of its votes, agreement figures, per-annotator speed and the conflicting tokens.

Settings live in ``projects.settings`` (JSON): ``overlap`` (k annotators per sentence,
:func:`gpsl.annotation.queue.route`), ``blind`` (annotators see only their own votes,
:func:`gpsl.annotation.sentences.view`), ``resolve`` (``'majority'`` or ``'crowd'``: which
decides a disputed token without a lead's decision, :func:`gpsl.annotation.labels.derive_labels`)
and ``crowd`` (the fitted crowd model).  Votes that came with an imported file are not a
person's and take no part in any figure here.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np

from gpsl import agreement
from gpsl.annotation import labels, projects, sentences, validate, votes
from gpsl.annotation.db import Database, now
from gpsl.annotation.errors import NotFoundError
from gpsl.crowd import DawidSkene, Votes, annotator_report
from gpsl.errors import InputError

DEFAULTS = {"overlap": 1, "blind": False, "resolve": "majority"}
RESOLVE = ("majority", "crowd")
MAX_OVERLAP = 20
ACTIVE_GAP = 300.0  # seconds: a longer pause between two labels is not labeling time


def settings_of(project: dict) -> dict:
    """The team settings of a project dict (defaults filled in)."""
    s = project.get("settings") or {}
    return {"overlap": int(s.get("overlap", DEFAULTS["overlap"]) or 1),
            "blind": bool(s.get("blind", DEFAULTS["blind"])),
            "resolve": s.get("resolve", DEFAULTS["resolve"]) or "majority",
            "crowd": s.get("crowd")}


def set_settings(db: Database, project_id: int, *, overlap: int | None = None,
                 blind: bool | None = None, resolve: str | None = None) -> dict:
    """Change the team settings (one transaction); a change of ``resolve`` derives the
    disputed tokens' labels again.  Returns the new settings."""
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
        projects.write_settings(conn, project_id, settings)
        if settings.get("resolve", "majority") != old_resolve:
            labels.rederive(conn, project_id)
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
            labels.rederive(conn, project_id)

    db.write(tx)
    return model


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
    annotators, kappa, shared = agreement.pairwise_kappa(items)
    units = [[lab for lab in v.values()] for v in items.values()]
    multi = [u for u in units if sum(lab is not None for lab in u) >= 2]
    return {"annotators": annotators, "kappa": kappa, "shared": shared,
            "alpha": agreement.krippendorff_alpha(multi),
            "alpha_by_label": agreement.alpha_per_label(multi),
            "n_tokens": len(multi)}


def annotator_stats(db: Database, project_id: int, cast: Sequence[dict] | None = None,
                    figures: dict | None = None) -> list[dict]:
    """One row per person: ``annotator, votes`` (current, with a label), ``sentences``,
    ``changes`` (label actions in the history, undone ones included), ``active_minutes``
    (the gaps of at most :data:`ACTIVE_GAP` s between consecutive actions),
    ``labels_per_hour`` (changes per active hour), ``median_seconds`` (median gap between
    consecutive actions, long pauses left out), ``kappa`` (mean pairwise kappa with the
    others, weighted by shared tokens) and ``last`` (time of the latest action)."""
    cast = project_votes(db, project_id) if cast is None else cast
    figures = agreement_figures(db, project_id, cast) if figures is None else figures
    times: dict[str, list[float]] = defaultdict(list)
    for who, at in votes.action_times(db, project_id):
        if not validate.is_import(who):
            times[who].append(datetime.fromisoformat(at).timestamp())
    n_votes = Counter(v["annotator"] for v in cast if v["label"] is not None)
    n_sent = {a: len({v["sentence_id"] for v in cast if v["annotator"] == a})
              for a in n_votes}
    index = {a: i for i, a in enumerate(figures["annotators"])}
    names = sorted(set(n_votes) | set(times))
    rows = []
    for a in names:
        ts = sorted(times.get(a, []))
        gaps = [b - c for c, b in zip(ts, ts[1:]) if 0 <= b - c <= ACTIVE_GAP]
        active = sum(gaps)
        kappa = None
        if a in index:
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
                     "labels_per_hour": (len(gaps) / active * 3600.0) if active > 0 else None,
                     "median_seconds": statistics.median(gaps) if gaps else None,
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
