"""What the Confidence page shows of a model version, computed once when the version is
trained and stored (``version_summaries``, schema 7), so that opening the page costs what it
shows, not a pass over every token.

A summary holds, for the training tokens without a label when the version was trained:
their count and mean confidence (the largest marginal ``max_j p_tj``), a histogram of the
confidences (:data:`HIST_BINS` equal-width bins on [0, 1]), the box-plot quantiles of the
confidences per predicted label (Tukey's box: quartiles, whiskers at the most extreme values
within 1.5 IQR of the box), and the :data:`TOP_TOKENS` least confident of them; and the
version's reliability on the held-out gold (:func:`gpsl.annotation.reports.calibration_dict`).
It is a few kilobytes whatever the size of the project.

A version trained before schema 7 gets its summary the first time it is asked for
(:func:`get`)."""

from __future__ import annotations

import heapq
import json
import math

import numpy as np
from sqlalchemy import text

from gpsl import metrics
from gpsl.annotation.corpus import predictions, sentences
from gpsl.annotation.store.db import Database, now
from gpsl.annotation.store.records import CalibrationReport
from gpsl.annotation.training import versions
from gpsl.annotation.training.evaluation import heldout

#: equal-width confidence bins of the histogram
HIST_BINS = 40
#: the least confident unlabeled tokens kept (the page shows those still unlabeled)
TOP_TOKENS = 200
#: sentences read at a time
PAGE = 2000


def box(values: np.ndarray) -> dict:
    """Tukey's box of ``values``: ``q1, median, q3``, the whiskers ``lower``/``upper`` (the
    most extreme values within 1.5 IQR of the quartiles), ``n`` and ``mean``."""
    v = np.sort(np.asarray(values, dtype=float))
    q1, med, q3 = np.quantile(v, [0.25, 0.5, 0.75])
    iqr = q3 - q1
    inside = v[(v >= q1 - 1.5 * iqr) & (v <= q3 + 1.5 * iqr)]
    return {"q1": float(q1), "median": float(med), "q3": float(q3),
            "lower": float(inside[0]), "upper": float(inside[-1]), "n": int(v.size),
            "mean": float(v.mean())}


def compute(db: Database, project_id: int, version: dict) -> dict:
    """The summary of ``version`` (a version dict) from its stored predictions and the
    current labels, reading :data:`PAGE` sentences at a time (their labels, not their
    tokens: the words of the least confident tokens are read at the end)."""
    classes = list(version["classes"] or [])
    counts = np.zeros(HIST_BINS, dtype=np.int64)
    by_label: dict[str, list[np.ndarray]] = {}
    top: list[tuple] = []  # a min-heap of the items of the least confident
    total, n_free = 0.0, 0
    offset = 0
    while True:
        rows = sentences.label_page(db, project_id, "train", offset, PAGE)
        if not rows:
            break
        offset += len(rows)
        preds = predictions.get(db, version["id"], [r[0] for r in rows])
        parts: list[tuple] = []
        for k, (sid, position, labels) in enumerate(rows):
            p = preds.get(sid)
            if p is None or p.shape != (len(labels), len(classes)):
                continue
            free = np.array([lab is None for lab in labels], dtype=bool)
            if not free.any():
                continue
            conf = p.max(axis=1)[free]
            total += float(conf.sum())
            where = np.flatnonzero(free)
            parts.append((conf, p.argmax(axis=1)[free], np.full(where.size, position), where,
                          np.full(where.size, sid), np.full(where.size, k)))
        if not parts:
            continue
        conf, arg, pos, idx, sids, ordinal = (np.concatenate(c) for c in zip(*parts))
        n_free += int(conf.size)
        counts += np.histogram(conf, bins=HIST_BINS, range=(0.0, 1.0))[0]
        labels_here = np.unique(arg)  # in the order each label first shows (as by sentence)
        first = [int(ordinal[arg == j].min()) for j in labels_here]
        for _, j in sorted(zip(first, labels_here.tolist())):
            by_label.setdefault(classes[j], []).append(conf[arg == j])
        # the page's least confident (by confidence, then position, then token): only they
        # can enter the heap
        for k in np.lexsort((idx, pos, conf))[:TOP_TOKENS]:
            item = (-float(conf[k]), -int(pos[k]), -int(idx[k]), int(sids[k]),
                    classes[arg[k]])
            if len(top) < TOP_TOKENS:
                heapq.heappush(top, item)
            elif item > top[0]:
                heapq.heapreplace(top, item)
    words = sentences.tokens_in_db(db, sorted({t[3] for t in top})) if top else {}
    tokens = [{"sentence_id": t[3], "position": -t[1], "token_index": -t[2],
               "token": words[t[3]][-t[2]][0], "predicted": t[4], "confidence": -t[0]}
              for t in sorted(top, reverse=True)]
    return {
        "classes": classes,
        "unlabeled": n_free,
        "mean_confidence": total / n_free if n_free else None,
        "histogram": {"lo": 0.0, "hi": 1.0, "counts": counts.tolist()},
        "boxes": {lab: box(np.concatenate(parts)) for lab, parts in by_label.items()},
        "least_confident": tokens,
        "calibration": calibration_dict(db, project_id, version),
    }


def _table(rows: list[dict]) -> dict:
    """``{"columns", "rows"}`` of a list of row dicts: the columns in the order they first
    appear, a missing value, None or NaN as None (what the pages read back as a table)."""
    columns: list = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)

    def cell(v):
        if isinstance(v, (float, np.floating)):
            return None if math.isnan(v) else float(v)
        return v.item() if isinstance(v, np.generic) else v

    return {"columns": columns, "rows": [[cell(row.get(c)) for c in columns] for row in rows]}


def _calibration_tables(result, train_labels, n_bins: int = 10) -> dict:
    """:func:`calibration_dict`'s figures and tables (plain lists, no pandas: the training
    worker writes them and never draws a table; pandas was 0.25 s of its CPU)."""
    conf, correct = result.confidence, result.correct
    band_of = metrics.frequency_bands(result.gold_label, train_labels)
    bands = [{"labels": r["band"], "tokens": r["tokens"], "accuracy": r["accuracy"],
              "mean confidence": r["mean_confidence"], "ECE (15 equal-mass bins)": r["ece_mass"],
              "which": ", ".join(r["labels"])}
             for r in metrics.calibration_by_band(conf, correct, result.gold_label, band_of)]
    table = [{**r, "bin_mid": (r["bin_lo"] + r["bin_hi"]) / 2,
              "band_up": r["band_hi"] - r["mean_confidence"],
              "band_down": r["mean_confidence"] - r["band_lo"]}
             for r in metrics.reliability_table(conf, correct, n_bins, consistency=True)
             if r["accuracy"] is not None and not math.isnan(r["accuracy"])]  # bins with tokens
    out = {"accuracy": result.accuracy, "ece": result.ece,
           "ece_floor": metrics.ece_noise_floor(conf, n_bins, binning="width"),
           "ece_mass": result.ece_mass,
           "ece_mass_floor": metrics.ece_noise_floor(conf, 15, binning="mass"),
           "mean_confidence": result.mean_confidence, "nll": result.nll}
    out = {k: (None if v is None else float(v)) for k, v in out.items()}
    out["tokens"] = int(result.tokens)
    out.update(table=_table(table), selective=_table(metrics.selective_accuracy(conf, correct)),
               thresholds=_table(metrics.threshold_table(conf, correct)), bands=_table(bands))
    return out


def _frame(d: dict):
    import pandas as pd  # on first use (the worker never reads a table back)

    return pd.DataFrame(d["rows"], columns=d["columns"])


def calibration_dict(db: Database, project_id: int, version: dict) -> dict | None:
    """The reliability of ``version`` (a version dict) on the held-out gold labels as JSON
    data (:func:`calibration_report` reads it back), or None without gold or predictions
    (:func:`gpsl.annotation.training.evaluation.heldout`, the one held-out evaluation)."""
    ids, _, gold = sentences.gold_data(db, project_id, "heldout")
    if not ids:
        return None
    preds = predictions.get(db, version["id"], ids)
    result = heldout(version["classes"], [preds.get(sid) for sid in ids], gold)
    if result is None:
        return None
    _, train_y = sentences.training_data(db, project_id, "train", only_labeled=True)
    return _calibration_tables(result, train_y)


def calibration_report(d: dict | None) -> CalibrationReport | None:
    """The :class:`CalibrationReport` of :func:`calibration_dict`'s data."""
    if d is None:
        return None
    return CalibrationReport(**{k: (_frame(v) if isinstance(v, dict) else v)
                                for k, v in d.items()})


def save(db: Database, version_id: int, summary: dict) -> None:
    """Store (or replace) the summary of a version."""
    body = json.dumps(summary, allow_nan=False)

    def tx(conn):
        conn.execute(text("DELETE FROM version_summaries WHERE model_version_id = :v"),
                     {"v": version_id})
        conn.execute(text("INSERT INTO version_summaries (model_version_id, summary, created_at)"
                          " VALUES (:v, :s, :at)"), {"v": version_id, "s": body, "at": now()})

    db.write(tx)


def load(db: Database, version_id: int) -> dict | None:
    """The stored summary of a version, or None."""
    raw = db.read(lambda c: c.execute(text(
        "SELECT summary FROM version_summaries WHERE model_version_id = :v"),
        {"v": version_id}).scalar())
    return None if raw is None else json.loads(raw)


def store_summary(db: Database, version_id: int, classes=None) -> dict:
    """Compute and store the summary of a version (called once its predictions are stored,
    :mod:`gpsl.annotation.training.pipeline`, with its ``classes`` before the run records them)."""
    version = versions.get(db, version_id)
    if classes is not None:
        version = {**version, "classes": list(classes)}
    summary = compute(db, version["project_id"], version)
    save(db, version_id, summary)
    return summary


def get(db: Database, version_id: int) -> dict:
    """The stored summary of a version; computed and stored first when it has none (a
    version trained before schema 7)."""
    found = load(db, version_id)
    return found if found is not None else store_summary(db, version_id)
