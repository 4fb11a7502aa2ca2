"""What the dashboards say, from typed records: status lines, table rows of versions, people
and conflicts, the calibration notes and the queue's captions.  No Streamlit calls, no
numerics: every figure comes computed in the records (:mod:`gpsl.annotation.reports`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpsl.annotation import (
    LIMIT_SETTINGS,
    AnnotatorRow,
    Calibration,
    CalibrationReport,
    Conflict,
    InputError,
    Progress,
    RankedSentence,
    UploadSummary,
    Version,
    preset_of,
    query_description,
    upload_limits,
)
from pages._format import fmt_int, fmt_pct, fmt_time, offsets_text, query_name

CONFLICT_STATUS = {"open": "open (tie, no decision)", "resolved": "resolved by the rule",
                   "adjudicated": "decided by a lead"}


def preset_name(offsets: Sequence[int]) -> str:
    """"GPSL1" / "GPSL2" / "GPSL4" or "Custom"."""
    name = preset_of(offsets)
    return "Custom" if name == "custom" else name


def widget_help(param, more: str = "") -> str:
    """A widget's help from the parameter table's line (:data:`gpsl.annotation.TRAIN_PARAMS`):
    a sentence, then ``more``."""
    text = param.help[:1].upper() + param.help[1:]
    return text + ("" if text.endswith(".") else ".") + (f" {more}" if more else "")


def bounds(param) -> tuple[int, int]:
    """The lowest and highest whole number a parameter's interval allows (a widget's range)."""
    interval = next(c for c in param.constraints if hasattr(c, "left") and hasattr(c, "right"))
    return int(interval.left), int(interval.right)


def upload_limits_text(store=None) -> str:
    """"Limits: at most 20 MB per file, 1,000 tokens per sentence (...)." (with ``store``:
    the limits its lead set)."""
    try:
        if store is not None:
            lim = store.store_limits()
            size = lim["upload_bytes"] / (1 << 20) if lim["upload_bytes"] else None
            tokens = lim["tokens"]
        else:
            size, tokens = upload_limits()
    except InputError as exc:
        return str(exc)
    parts = [f"at most {size:g} MB per file" if size else "no size limit",
             f"{tokens:,} tokens per sentence" if tokens else "no sentence length limit"]
    how = ("a lead sets them on the Project page, Upload limits; the app's own exports "
           "always import back" if store is not None else
           f"set {LIMIT_SETTINGS[0]}, {LIMIT_SETTINGS[1]}")
    return "Limits: " + ", ".join(parts) + f" ({how})."


def upload_summary(summary: UploadSummary, columns: bool = False) -> str:
    """"**120** sentences · **1,500** tokens · **800** labeled" (with ``columns``: "· 3
    feature columns")."""
    text = (f"**{fmt_int(summary.sentences)}** sentences · **{fmt_int(summary.tokens)}** "
            f"tokens · **{fmt_int(summary.labeled)}** labeled")
    if columns:
        text += f" · {summary.n_columns} feature column{'s' if summary.n_columns != 1 else ''}"
    return text


def hidden_caption(overlap: int) -> str:
    """Why the Annotate page shows only one's own labels (blind mode, or overlap k)."""
    why = (f"each sentence goes to {overlap} people, who label it independently"
           if overlap > 1 else "blind annotation")
    return (f"Your own copy of the sentence ({why}): other people's labels, and the model's "
            "suggestions on tokens they labeled, stay hidden until a lead reviews the votes "
            "on the Team page.")


# ----------------------------------------------------------------------------- versions


def version_names(versions: Sequence[Version]) -> dict[int, str]:
    """Version id -> "v<number>" (for selectors that hold ids)."""
    return {v.id: v.name for v in versions}


def model_summary(version: Version | None) -> str:
    """"v3 · GPSL2 linear · 91.2% held-out accuracy" or "no model yet"."""
    if not version:
        return "no model yet"
    parts = [version.name, f"{preset_name(version.offsets)} "
                           f"{version.settings.get('kernel', 'linear')}"]
    acc = version.metrics.get("heldout_accuracy")
    if acc is not None:
        parts.append(f"{fmt_pct(acc)} held-out accuracy")
    return " · ".join(parts)


def status_line(progress: Progress, version: Version | None) -> str:
    return (f"{fmt_int(progress.labeled_tokens)} / {fmt_int(progress.tokens)} training "
            f"tokens labeled ({progress.pct_complete:.1f}%) · model: "
            + (version.name if version else "none"))


def versions_table(versions: Sequence[Version]) -> list[dict]:
    """Rows for the model-version table, newest first."""
    rows = []
    for v in reversed(list(versions)):
        s, m = v.settings, v.metrics
        offs = s.get("offsets", [])
        rows.append({
            "version": v.number or v.id,
            "active": "★" if v.active else "",
            "status": v.status,
            "started": fmt_time(v.created_at),
            "dependencies": f"{preset_name(offs)} ({offsets_text(offs)})",
            "kernel": s.get("kernel", ""),
            "hyper": "learned" if s.get("learn_hyper") else "fixed",
            "inference": v.inference,
            "iterations": m.get("n_iter"),
            "labeled tokens": v.n_labeled_tokens,
            "labels": labels_short(m.get("training_labels")),
            "missing-label weight": m.get("missing_weight"),
            "accuracy": m.get("heldout_accuracy"),
            "ECE": m.get("heldout_ece"),
            "calibration": calibration_short(v.calibration),
            "seconds": round(m["fit_seconds"], 1) if m.get("fit_seconds") is not None else None,
            "note": v.error or "",
        })
    return rows


def labels_short(rule: dict | None) -> str:
    """The training-label rule a version used, short: "majority", "crowd", "crowd, soft
    (120 tokens)", "joint, soft (120 tokens)"; "" for versions trained before it was recorded."""
    if not rule or not rule.get("resolve"):
        return ""
    if rule.get("joint"):
        return f"joint, soft ({fmt_int(rule.get('soft_tokens') or 0)} tokens)"
    if rule.get("soft"):
        return f"{rule['resolve']}, soft ({fmt_int(rule.get('soft_tokens') or 0)} tokens)"
    return str(rule["resolve"])


def calibration_short(cal: Calibration | None) -> str:
    """"T_U 0.87 · T_S 0.27 (held-out gold)", "T_U 0.87 · T_S 0.27 + vector (3-fold
    labels)", "T 1.20 (3-fold labels)" or "none"."""
    if not cal:
        return "none"
    if cal.summary:  # Calibrator.describe() (versions trained since the ensemble)
        return f"{cal.summary} ({cal.source})"
    if str(cal.kind).startswith("structured"):
        how = f"T_U {cal.t_unary:.2f} · T_S {cal.t_pair:.2f}"
        if cal.kind == "structured+vector":
            how += " + vector"
    else:
        how = f"T {cal.temperature:.2f}"
    return f"{how} ({cal.source})"


def calibration_plain(version: Version) -> str:
    """One line for a project lead: what the version's confidences were calibrated on and
    what a confidence then means (the technical account: :func:`calibration_note`)."""
    cal = version.calibration
    if not cal:
        return ("Not calibrated yet: too few labeled tokens and no held-out gold, so the "
                "confidences are the model's raw ones and usually too high.")
    tokens = fmt_int(cal.tokens or 0)
    source = str(cal.source or "")
    if source == "held-out gold":
        where = (f"on {tokens} held-out gold tokens (each held-out half on the other, so the "
                 "figures below are not in-sample)")
    elif source.endswith("-fold labels"):
        where = (f"on {tokens} labeled tokens, each predicted by a model trained without its "
                 f"sentence ({source.split('-')[0]} folds)")
    else:
        where = f"on {tokens} tokens ({source})" if source else f"on {tokens} tokens"
    return (f"Confidences are calibrated {where}: a token shown at 0.90 should be right about "
            "9 times in 10.")


def calibration_note(version: Version) -> str:
    """One line on how the version's marginals were calibrated (from its metrics)."""
    cal = version.calibration
    if not cal:
        return ("Not calibrated: too few labeled tokens and no held-out gold (the raw "
                "Algorithm 2 marginals are shown).")
    method = {"mean": "Algorithm 2 on the means", "probit": "uncertainty-aware RNS"}.get(
        cal.method, cal.method)
    if cal.kind == "ensemble":
        method = "a mixture of calibrators weighted by their cross-validated log score"
        how = str(cal.summary or "")
    elif str(cal.kind).startswith("structured"):
        how = (f"temperatures {cal.t_unary:.2f} (own score) and {cal.t_pair:.2f} "
               "(neighbour scores) inside Algorithm 2")
        if cal.kind == "structured+vector":
            how += " then a per-label scale and shift"
    else:
        how = f"temperature {cal.temperature:.2f}"
    return (f"Calibrated marginals: {method}, {how}, fitted on "
            f"{fmt_int(cal.tokens or 0)} tokens ({cal.source}); held-out "
            "figures are never in-sample (with held-out calibration, each half is calibrated "
            "on the other).")


def noise_floor_note(calib: CalibrationReport) -> str:
    """One line reading the ECE against its noise floor on the held-out tokens."""
    within = calib.ece <= calib.ece_floor and calib.ece_mass <= calib.ece_mass_floor
    verdict = ("both are within what chance alone gives: as calibrated as these tokens can "
               "show" if within else "more than chance alone gives: the reliability chart "
               "shows where")
    return (f"On {fmt_int(calib.tokens)} held-out tokens a perfectly calibrated model would "
            f"still show an ECE of about {calib.ece_floor:.3f} (equal-width) and "
            f"{calib.ece_mass_floor:.3f} (equal-mass) by chance; this version's "
            f"{calib.ece:.3f} and {calib.ece_mass:.3f} are {verdict}.")


# ----------------------------------------------------------------------------- the queue


def queue_caption(strategy: str | None) -> str:
    """One line on what orders the uncertainty queue: ``"Queue: BALD — tokens whose label
    would teach the model most (...)"`` (the description of
    :data:`gpsl.active.QUERY_SCORES`); empty without a strategy (no active model)."""
    if not strategy:
        return ""
    about = query_description(strategy)
    return f"Queue: {query_name(strategy)}" + (f" — {about}" if about else "")


def least_sure_caption(row: RankedSentence) -> str:
    """The line above a sentence of "Where the model is least sure": its number, its queue
    score named after the query score that gave it, its lowest confidence and how many
    tokens are unlabeled."""
    score = "–" if row.score is None or math.isnan(row.score) else f"{row.score:.3f}"
    return (f"Sentence {int(row.position) + 1} · {query_name(row.strategy)} score {score} · "
            f"lowest confidence {row.min_confidence:.2f} · {int(row.unlabeled)} unlabeled "
            "tokens")


# ----------------------------------------------------------------------------- teams


def filter_conflicts(conflicts: Sequence[Conflict], status: Sequence[str] = (),
                     labels: Sequence[str] = (), annotators: Sequence[str] = (),
                     text: str = "") -> list[Conflict]:
    """The conflicts with one of ``status``, a vote for one of ``labels``, a vote by one
    of ``annotators`` and ``text`` in the token (case-insensitive); empty filters pass."""
    text = (text or "").strip().lower()
    out = []
    for c in conflicts:
        if status and c.status not in status:
            continue
        if labels and not set(labels) & {lab for lab in c.votes.values() if lab}:
            continue
        if annotators and not set(annotators) & set(c.votes):
            continue
        if text and text not in str(c.token).lower():
            continue
        out.append(c)
    return out


def conflict_rows(conflicts: Sequence[Conflict]) -> list[dict]:
    """Table rows of conflicts (sentence numbers as the pages show them, 1-based)."""
    return [{"sentence": c.position + 1, "token #": c.token_index + 1, "token": c.token,
             "votes": " · ".join(f"{who}: {lab or '(no label)'}" for who, lab in c.votes.items()),
             "training label": c.derived or "—",
             "status": CONFLICT_STATUS.get(c.status, c.status)}
            for c in conflicts]


def annotator_rows(stats: Sequence[AnnotatorRow]) -> list[dict]:
    """Table rows of the people of a project."""
    return [{"annotator": r.annotator, "labels": r.votes, "sentences": r.sentences,
             "changes": r.changes, "active min": round(r.active_minutes, 1),
             "labels / hour": None if r.labels_per_hour is None else round(r.labels_per_hour),
             "median s / label": None if r.median_seconds is None
             else round(r.median_seconds, 2 if r.median_seconds < 10 else 1),
             "mean κ": r.kappa, "last label": fmt_time(r.last)} for r in stats]
