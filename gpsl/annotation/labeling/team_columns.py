"""The Team page's figures from vote columns: a project's votes read once from the store as
numpy arrays (sentence, position, token, annotator, label), and agreement, the people's rows
and the conflicts computed over them without a Python object per vote.

The figures are those of :func:`gpsl.annotation.labeling.team.agreement_figures`,
:func:`~gpsl.annotation.labeling.team.annotator_stats` and
:func:`~gpsl.annotation.labeling.team.conflicts` (the reference, over one dict per vote;
``tests/annotation/test_team_columns.py`` holds them equal): pairwise Cohen's kappa, eq. (K) of
:mod:`gpsl.agreement`, from
:func:`gpsl.agreement.pair_kappas_coded`; Krippendorff's alpha, eq. (A), from the count
matrix of :func:`gpsl.agreement.count_matrix`.  :func:`figures` keeps the last result per
project while no vote, decision or team setting changed (:func:`stamp`).
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
from sqlalchemy import text

from gpsl import agreement
from gpsl.annotation.corpus import sentences
from gpsl.annotation.labeling.team import ACTIVE_GAP
from gpsl.annotation.store import validate
from gpsl.annotation.store.db import Database

__all__ = ["VoteColumns", "figures", "read_columns", "stamp"]


@dataclass(frozen=True)
class VoteColumns:
    """Every person's vote of a project (imported labels left out), one entry per vote,
    sorted by sentence position, token and annotator: ``annotator`` codes into ``names``
    (sorted), ``label`` codes into ``labels`` (sorted; -1: a vote without a label)."""

    sentence: np.ndarray
    position: np.ndarray
    token: np.ndarray
    annotator: np.ndarray
    label: np.ndarray
    names: tuple[str, ...]
    labels: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.sentence)


def _codes(values: list) -> tuple[tuple, np.ndarray]:
    """Sorted distinct values (None left out) and each value's code (-1: None)."""
    distinct = sorted({v for v in values if v is not None})
    index = {v: i for i, v in enumerate(distinct)}
    index[None] = -1
    return tuple(distinct), np.fromiter((index[v] for v in values), dtype=np.int64,
                                        count=len(values))


@contextlib.contextmanager
def _no_gc():
    """Python's cycle collector paused while a read makes a few hundred thousand tuples (it
    would walk them all several times: half the read's time at 255k votes)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _rows(db: Database, sql: str, args: dict) -> list[tuple]:
    """The rows of one read as plain tuples (the driver's own, without SQLAlchemy's row
    objects: half the time of a read of every vote)."""
    with _no_gc():
        return db.read(lambda conn: conn.execute(text(sql), args).cursor.fetchall(),
                       single=True)


def read_columns(db: Database, project_id: int) -> VoteColumns:
    """The project's votes as columns, in one read (the rows of
    :func:`gpsl.annotation.labeling.votes.of_project`: a vote whose source is ``import`` is left out
    by the query, one credited to an import by name here)."""
    rows = _rows(db, "SELECT v.sentence_id, s.position, v.token_index, v.annotator, v.label"
                     " FROM votes v JOIN sentences s ON s.id = v.sentence_id"
                     " WHERE s.project_id = :p AND v.source <> 'import'", {"p": project_id})
    with _no_gc():
        sid, pos, tok, who, lab = (list(c) for c in zip(*rows)) if rows else ([],) * 5
        del rows
        names, annotator = _codes(who)
        labels, label = _codes(lab)
        del who, lab
    sid, pos, tok = (np.asarray(c, dtype=np.int64) for c in (sid, pos, tok))
    imported = np.array([validate.is_import(a) for a in names] + [False], dtype=bool)
    if imported.any():  # imports credited by name: one test per distinct name
        keep = ~imported[annotator]
        sid, pos, tok, annotator, label = (c[keep] for c in (sid, pos, tok, annotator, label))
        people = [k for k, a in enumerate(names) if not imported[k]]
        recode = np.full(len(names), -1, dtype=np.int64)
        recode[people] = np.arange(len(people))
        annotator, names = recode[annotator], tuple(names[k] for k in people)
    order = np.lexsort((annotator, tok, pos))
    return VoteColumns(sid[order], pos[order], tok[order], annotator[order], label[order],
                       names, labels)


def _items(c: VoteColumns) -> tuple[np.ndarray, np.ndarray]:
    """Each vote's item (token) number, in the columns' order, and each item's first vote."""
    new = np.ones(len(c), dtype=bool)
    new[1:] = (c.sentence[1:] != c.sentence[:-1]) | (c.token[1:] != c.token[:-1])
    return np.cumsum(new) - 1, np.flatnonzero(new)


def agreement_figures(c: VoteColumns, max_matrix: int) -> dict:
    """:func:`gpsl.annotation.labeling.team.agreement_figures` from the columns (the same keys)."""
    item, _ = _items(c)
    has = c.label >= 0
    A, L = len(c.names), len(c.labels)
    a, b, kappa, n = agreement.pair_kappas_coded(item[has], c.annotator[has], c.label[has],
                                                 max(A, 1), max(L, 1))
    count = np.bincount(c.annotator[has], minlength=A)
    counted = [i for i in range(A) if count[i] > 0]
    shown = sorted(sorted(counted, key=lambda i: (-count[i], c.names[i]))[:max_matrix],
                   key=lambda i: c.names[i])
    at = np.full(A, -1, dtype=np.int64)
    at[shown] = np.arange(len(shown))
    K = np.full((len(shown), len(shown)), np.nan)
    S = np.zeros((len(shown), len(shown)), dtype=int)
    both = (at[a] >= 0) & (at[b] >= 0)
    i, j = at[a[both]], at[b[both]]
    K[i, j] = K[j, i] = kappa[both]
    S[i, j] = S[j, i] = n[both]
    K[np.arange(len(shown)), np.arange(len(shown))] = 1.0
    S[np.arange(len(shown)), np.arange(len(shown))] = count[shown]
    ok = (n > 0) & ~np.isnan(kappa)
    wk = (n * np.where(ok, kappa, 0.0))[ok]
    num = np.bincount(a[ok], wk, minlength=A) + np.bincount(b[ok], wk, minlength=A)
    den = np.bincount(a[ok], n[ok], minlength=A) + np.bincount(b[ok], n[ok], minlength=A)
    mean = {c.names[k]: (float(num[k] / den[k]) if den[k] > 0 else None) for k in counted}
    # alpha over the tokens with two or more labels; columns ordered by repr, as the
    # reference orders its values
    per_item = np.bincount(item[has], minlength=int(item.max()) + 1 if len(item) else 0)
    multi = has & (per_item[item] >= 2) if len(item) else has
    unit = np.cumsum(np.bincount(item[multi], minlength=len(per_item)) > 0) - 1
    present = sorted({c.labels[k] for k in np.unique(c.label[multi])}, key=repr)
    col = np.full(max(L, 1), -1, dtype=np.int64)
    for k, lab in enumerate(present):
        col[c.labels.index(lab)] = k
    n_units = int(np.count_nonzero(per_item >= 2))
    N, m = agreement.count_matrix(unit[item[multi]], col[c.label[multi]], n_units, len(present))
    return {"annotators": [c.names[k] for k in shown], "kappa": K, "shared": S,
            "mean_kappa": mean, "people": len(counted),
            "alpha": agreement.alpha_of_counts(N, m),
            "alpha_by_label": agreement.alpha_per_label_of_counts(present, N, m),
            "n_tokens": n_units}


def _seconds(stamps: list[str]) -> np.ndarray:
    """``datetime.fromisoformat(s).timestamp()`` of each stamp; the store's own UTC stamps
    (``+00:00``) parsed as one numpy array, the same floats."""
    if not stamps:
        return np.zeros(0)
    arr = np.asarray(stamps)
    if np.all(np.char.endswith(arr, "+00:00")):
        try:
            us = np.array(np.char.replace(arr, "+00:00", ""), dtype="datetime64[us]")
            return us.astype(np.int64) / 1e6
        except ValueError:
            pass
    return np.array([datetime.fromisoformat(s).timestamp() for s in stamps])


def label_seconds(times: np.ndarray) -> tuple[float, int, np.ndarray]:
    """:func:`gpsl.annotation.labeling.team.label_seconds` over an array: the actions of one write
    share its time, a gap of more than :data:`~gpsl.annotation.labeling.team.ACTIVE_GAP` s is a
    pause."""
    at, n = np.unique(times, return_counts=True)
    gap, n = np.diff(at), n[1:]
    keep = gap <= ACTIVE_GAP
    gap, n = gap[keep], n[keep]
    return float(gap.sum()), int(n.sum()), np.repeat(gap / n, n)


def annotator_stats(db: Database, project_id: int, c: VoteColumns, figures: dict) -> list[dict]:
    """:func:`gpsl.annotation.labeling.team.annotator_stats` from the columns (the same rows)."""
    A = len(c.names)
    n_votes = np.bincount(c.annotator[c.label >= 0], minlength=A)
    span = int(c.sentence.max()) + 1 if len(c) else 1
    n_sent = np.bincount(np.unique(c.annotator * span + c.sentence) // span, minlength=A)
    rows = _rows(db, "SELECT annotator, at FROM annotation_history WHERE project_id = :p AND"
                     " action IN ('set', 'clear') ORDER BY annotator, id", {"p": project_id})
    with _no_gc():
        who, stamps = (list(x) for x in zip(*rows)) if rows else ([], [])
        del rows
    seconds = _seconds(stamps)
    times: dict[str, np.ndarray] = {}
    start = 0
    for k in range(1, len(who) + 1):  # ordered by annotator: one slice each
        if k == len(who) or who[k] != who[start]:
            if not validate.is_import(who[start]):
                times[who[start]] = seconds[start:k]
            start = k
    means = figures["mean_kappa"]
    names = sorted({c.names[k] for k in range(A) if n_votes[k] > 0} | set(times))
    index = {name: k for k, name in enumerate(c.names)}
    out = []
    for a in names:
        ts = times.get(a, np.zeros(0))
        active, timed, per_label = label_seconds(ts)
        k = index.get(a)
        out.append({"annotator": a, "votes": int(n_votes[k]) if k is not None else 0,
                    "sentences": int(n_sent[k]) if k is not None and n_votes[k] > 0 else 0,
                    "changes": len(ts), "active_minutes": active / 60.0,
                    "labels_per_hour": (timed / active * 3600.0) if active > 0 else None,
                    "median_seconds": float(np.median(per_label)) if len(per_label) else None,
                    "kappa": means.get(a),
                    "last": datetime.fromtimestamp(float(ts.max()), UTC).isoformat(
                        timespec="seconds") if len(ts) else None})
    return out


def conflicts(db: Database, c: VoteColumns) -> list[dict]:
    """:func:`gpsl.annotation.labeling.team.conflicts` from the columns (the same rows, in order)."""  # noqa: E501
    with _no_gc():  # a dict or two per disputed token
        return _conflicts(db, c)


def _conflicts(db: Database, c: VoteColumns) -> list[dict]:
    item, first = _items(c)
    if not len(c):
        return []
    size = np.diff(np.append(first, len(c)))
    low = np.minimum.reduceat(c.label, first)
    high = np.maximum.reduceat(c.label, first)
    disputed = np.flatnonzero((size > 1) & (low != high))
    if not len(disputed):
        return []
    sids = np.unique(c.sentence[first[disputed]]).tolist()
    toks, derived, adj = {}, {}, {}
    for a in range(0, len(sids), 5000):  # a bounded IN list
        chunk = sids[a:a + 5000]
        toks.update(db.read(lambda conn, ids=chunk: sentences.tokens_in(conn, ids)))
        for table, into in (("derived_labels", derived), ("adjudications", adj)):
            into.update({(s, t): lab for s, t, lab in _rows(
                db, f"SELECT sentence_id, token_index, label FROM {table} WHERE sentence_id"
                    " IN (" + ", ".join(str(int(x)) for x in chunk) + ")", {})})
    names, labels = c.names, (*c.labels, None)  # code -1: no label
    sentence, token, position = (x.tolist() for x in (c.sentence, c.token, c.position))
    annotator, label = c.annotator.tolist(), c.label.tolist()
    ends = (first[disputed] + size[disputed]).tolist()
    out = []
    for lo, hi in zip(first[disputed].tolist(), ends):  # ordered by position and token
        sid, t = sentence[lo], token[lo]
        cast = dict(zip([names[a] for a in annotator[lo:hi]],
                        [labels[x] for x in label[lo:hi]]))
        key = (sid, t)
        d, decided = derived.get(key), adj.get(key)
        out.append({"sentence_id": sid, "position": position[lo], "token_index": t,
                    "token": toks[sid][t][0], "votes": cast,
                    "labels": sorted(set(cast.values()), key=_none_last),
                    "derived": d, "adjudicated": decided,
                    "status": "adjudicated" if key in adj else ("resolved" if d else "open")})
    return out


def _none_last(x):
    return (x is None, x or "")


def stamp(db: Database, project_id: int) -> tuple:
    """What the figures depend on besides the votes' rows: the project's newest history
    row (every write of a vote writes one), the newest decision, the project's settings
    (the rule that derives the training labels, the crowd model) and its creation time (a
    project made again under the same id)."""
    return db.read(lambda conn: tuple(conn.execute(text(
        "SELECT (SELECT MAX(id) FROM annotation_history WHERE project_id = :p),"
        " (SELECT MAX(id) FROM adjudication_history),"
        " settings, created_at FROM projects WHERE id = :p"), {"p": project_id}).first()
        or ()), single=True)


#: per database: project id -> (stamp, figures); weakly, so it goes with the store
_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def figures(db: Database, project_id: int, max_matrix: int, make=None, *,
            cache: bool = True):
    """``agreement, people, conflicts`` of a project (None: nobody has voted), or what
    ``make`` makes of them, computed again only when :func:`stamp` changed."""
    key = (stamp(db, project_id), make) if cache else None
    held = _CACHE.get(db, {}).get(project_id) if cache else None
    if held is not None and held[0] == key:
        return held[1]
    c = read_columns(db, project_id)
    out = None
    if len(c):
        fig = agreement_figures(c, max_matrix)
        out = {"agreement": fig, "people": annotator_stats(db, project_id, c, fig),
               "conflicts": conflicts(db, c)}
        if make is not None:
            out = make(out)
    if cache:
        _CACHE.setdefault(db, {})[project_id] = (key, out)
    return out
