"""Labels per annotator: votes, their history, undo, adjudication and the derived label.

Every (token, annotator) vote is kept in ``votes``; every change of a vote is a row of
``annotation_history`` (that annotator's old and new vote).  A token's *training label* is
derived from its votes by :func:`derive_labels` and kept in ``derived_labels``, rewritten in
the same transaction as the votes:

* labels imported with a file (votes with source ``'import'``) count only while no one
  has voted on the token;
* a cleared token is a vote for "no label" (a NULL label);
* one vote: that label;
* several: the label a lead set with :func:`adjudicate` if there is one, else the
  ``posterior`` hook (where a crowd model's posterior plugs in), else the majority, with
  ties left missing.

:func:`undo` only ever touches the undoer's own votes.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from sqlalchemy import bindparam, text

from gpsl.annotation import validate
from gpsl.annotation.db import Database, loads, now
from gpsl.annotation.sentences import info_row
from gpsl.errors import InputError


class Vote(NamedTuple):
    annotator: str
    label: str | None  # None: the annotator cleared the token
    source: str
    at: str


class Derived(NamedTuple):
    label: str
    source: str
    annotator: str


Posterior = Callable[[int, Sequence[Vote]], str | None]


def derive_labels(votes: Mapping[int, Sequence[Vote]], adjudicated: Mapping[int, str],
                  posterior: Posterior | None = None) -> dict[int, Derived | None]:
    """The training label of each token in ``votes`` (token index -> its votes, oldest
    first) given the lead's ``adjudicated`` labels.  ``posterior(token, votes)`` (a crowd
    model) decides disputed tokens when given; otherwise the majority wins and a tie leaves
    the token missing (None)."""
    out: dict[int, Derived | None] = {}
    for t, vs in votes.items():
        if t in adjudicated:
            out[t] = Derived(adjudicated[t], "human", "adjudicated")
            continue
        vs = [v for v in vs if v.source != "import"] or list(vs)
        if not vs:
            out[t] = None
            continue
        if len(vs) == 1:
            source = "human" if vs[0].source == "import" else vs[0].source
            out[t] = None if vs[0].label is None else \
                Derived(vs[0].label, source, vs[0].annotator)
            continue
        if posterior is not None:
            lab = posterior(t, vs)
            voters = [v for v in vs if v.label == lab]
        else:
            counts = Counter(v.label for v in vs).most_common()
            top = [lab for lab, c in counts if c == counts[0][1]]
            lab = top[0] if len(top) == 1 else None
            voters = [v for v in vs if v.label == lab]
        if lab is None:
            out[t] = None
        else:
            source = "accepted" if voters and all(v.source == "accepted" for v in voters) \
                else "human"
            out[t] = Derived(lab, source, ", ".join(v.annotator for v in voters) or "model")
    return out


def _derived_now(conn, sentence_id: int, tokens) -> dict[int, str | None]:
    tokens = list(tokens)
    got = {t: lab for t, lab in conn.execute(text(
        "SELECT token_index, label FROM derived_labels WHERE sentence_id = :s AND token_index"
        " IN :ts").bindparams(bindparam("ts", expanding=True)),
        {"s": sentence_id, "ts": sorted(set(tokens)) or [-1]})}
    return {t: got.get(t) for t in tokens}


def _refresh_derived(conn, sentence_id: int, tokens) -> None:
    """Rewrite the derived labels of ``tokens`` of a sentence, its labeled-token count and
    its queue scores (inside the write transaction)."""
    from gpsl.annotation import queue

    tokens = sorted(set(int(t) for t in tokens))
    if not tokens:
        return
    p = {"s": sentence_id, "ts": tokens}
    votes: dict[int, list[Vote]] = {t: [] for t in tokens}
    for t, ann, lab, src, at in conn.execute(text(
            "SELECT token_index, annotator, label, source, updated_at FROM votes WHERE"
            " sentence_id = :s AND token_index IN :ts ORDER BY updated_at, annotator")
            .bindparams(bindparam("ts", expanding=True)), p):
        votes[t].append(Vote(ann, lab, src, at))
    adjudicated = {t: lab for t, lab in conn.execute(text(
        "SELECT token_index, label FROM adjudications WHERE sentence_id = :s AND token_index"
        " IN :ts").bindparams(bindparam("ts", expanding=True)), p)}
    posterior = None
    if any(sum(v.source != "import" for v in vs) > 1 for vs in votes.values()):
        from gpsl.annotation import team  # a disputed token: the project's crowd model?

        posterior = team.posterior_of(conn, sentence_id)
    derived = derive_labels(votes, adjudicated, posterior)
    conn.execute(text("DELETE FROM derived_labels WHERE sentence_id = :s AND token_index IN"
                      " :ts").bindparams(bindparam("ts", expanding=True)), p)
    rows = [{"s": sentence_id, "t": t, "l": d.label, "src": d.source, "a": d.annotator}
            for t, d in derived.items() if d is not None]
    if rows:
        conn.execute(text("INSERT INTO derived_labels (sentence_id, token_index, label, source,"
                          " annotator) VALUES (:s, :t, :l, :src, :a)"), rows)
    conn.execute(text("UPDATE sentences SET n_labeled = (SELECT COUNT(*) FROM derived_labels d"
                      " WHERE d.sentence_id = :s) WHERE id = :s"), {"s": sentence_id})
    queue.refresh_scores(conn, sentence_id)


def set_labels(db: Database, sentence_id: int, labels: Mapping[int, str | None],
               annotator: str, source: str = "human") -> list[int]:
    """Set (``None``: withdraw) ``annotator``'s votes on tokens of one sentence in one
    transaction; one undo step.  A bad label or index raises InputError and nothing is
    written.  Returns the new history ids (none when nothing changed)."""
    annotator = validate.annotator(annotator)
    source = validate.source(source)
    changes = dict(labels)

    def tx(conn):
        info = info_row(conn, sentence_id, db.for_update())
        label_set = loads(info["labels"])
        n = info["n_tokens"]
        mine = {r[0]: (r[1], r[2]) for r in conn.execute(text(
            "SELECT token_index, label, source FROM votes WHERE sentence_id = :s AND"
            " annotator = :a"), {"s": sentence_id, "a": annotator})}
        at, batch, hist, touched = now(), uuid.uuid4().hex, [], []
        derived = _derived_now(conn, sentence_id, range(n)) if any(
            v is None for v in changes.values()) else {}
        where = f"sentence {sentence_id}"
        for t, lab in changes.items():
            try:
                t = int(t)
            except (TypeError, ValueError):
                raise InputError(f"bad token index {t!r}", source=where) from None
            if not 0 <= t < n:
                raise InputError(f"token index {t} out of range (the sentence has {n} tokens)",
                                 source=where)
            lab = None if lab is None else str(lab)
            if lab is not None and lab not in label_set:
                raise InputError(f"token {t}: label {lab!r} is not in the project's label set"
                                 f" ({' '.join(label_set)})", source=where)
            old, old_source = mine.get(t, (None, None))
            if lab == old and (lab is None or old_source == source):
                if lab is not None or t in mine or derived.get(t) is None:
                    continue  # no change (a clear of an unlabeled token included)
            _put_vote(conn, sentence_id, t, annotator, lab, source, at, clear=True)
            hist.append({"p": info["project_id"], "s": sentence_id, "t": t, "old": old,
                         "new": lab, "src": None if lab is None else source, "a": annotator,
                         "at": at, "action": "clear" if lab is None else "set", "b": batch})
            mine[t] = (lab, source)
            touched.append(t)
        ids = [_history(conn, h) for h in hist]
        _refresh_derived(conn, sentence_id, touched)
        return ids

    return db.write(tx)


def _put_vote(conn, sid, t, annotator, label, source, at, clear: bool = False) -> None:
    """Write one vote; ``label`` None deletes it, or with ``clear`` records "no label"."""
    if label is None and not clear:
        conn.execute(text("DELETE FROM votes WHERE sentence_id = :s AND token_index = :t AND"
                          " annotator = :a"), {"s": sid, "t": t, "a": annotator})
    else:
        conn.execute(text(
            "INSERT INTO votes (sentence_id, token_index, annotator, label, source, updated_at)"
            " VALUES (:s, :t, :a, :l, :src, :at) ON CONFLICT (sentence_id, token_index,"
            " annotator) DO UPDATE SET label = excluded.label, source = excluded.source,"
            " updated_at = excluded.updated_at"),
            {"s": sid, "t": t, "a": annotator, "l": label, "src": source, "at": at})


def _history(conn, h: dict) -> int:
    return conn.execute(text(
        "INSERT INTO annotation_history (project_id, sentence_id, token_index, old_label,"
        " new_label, source, annotator, at, action, batch) VALUES (:p, :s, :t, :old, :new,"
        " :src, :a, :at, :action, :b) RETURNING id"), h).scalar_one()


def undo(db: Database, project_id: int, annotator: str | None = None) -> dict | None:
    """Revert the latest not-yet-undone ``set``/``clear`` step of ``annotator`` (of anyone
    when None: then that step's annotator is the undoer).  Only that annotator's votes
    change; every other vote stays.  The revert is history action ``'undo'`` and the
    entries are marked undone, so repeated calls walk further back.  Returns
    ``dict(sentence_id, annotator, changes=[{token_index, label, previous}] (the tokens'
    training labels after and before), undone, history_ids)`` or None when there is
    nothing to undo."""

    def tx(conn):
        sql = ("SELECT id, batch, sentence_id, annotator FROM annotation_history WHERE"
               " project_id = :p AND undone_by IS NULL AND action IN ('set', 'clear')")
        args = {"p": project_id}
        if annotator is not None:
            sql += " AND annotator = :a"
            args["a"] = annotator
        last = conn.execute(text(sql + " ORDER BY id DESC LIMIT 1"), args).first()
        if last is None:
            return None
        _, batch, sid, who = last
        info_row(conn, sid, db.for_update())
        if batch is None:
            entries = conn.execute(text("SELECT * FROM annotation_history WHERE id = :id"),
                                   {"id": last[0]}).fetchall()
        else:
            entries = conn.execute(text(
                "SELECT * FROM annotation_history WHERE batch = :b AND undone_by IS NULL AND"
                " action IN ('set', 'clear') AND annotator = :a ORDER BY id DESC"),
                {"b": batch, "a": who}).fetchall()
        at, new_batch = now(), uuid.uuid4().hex
        new_ids, touched, own = [], [], []
        for e in (r._mapping for r in entries):
            t = e["token_index"]
            cur = conn.execute(text("SELECT label FROM votes WHERE sentence_id = :s AND"
                                    " token_index = :t AND annotator = :a"),
                               {"s": sid, "t": t, "a": who}).first()
            current = cur[0] if cur else None
            own.append(t)
            target = e["old_label"]
            src = None
            if target is not None:  # how the annotator had set the previous vote
                prev = conn.execute(text(
                    "SELECT source FROM annotation_history WHERE sentence_id = :s AND"
                    " token_index = :t AND annotator = :a AND id < :id AND new_label = :l"
                    " ORDER BY id DESC LIMIT 1"),
                    {"s": sid, "t": t, "a": who, "id": e["id"], "l": target}).first()
                src = (prev[0] if prev else None) or "human"
            _put_vote(conn, sid, t, who, target, src, at)
            hid = _history(conn, {"p": project_id, "s": sid, "t": t, "old": current,
                                  "new": target, "src": src, "a": who, "at": at,
                                  "action": "undo", "b": new_batch})
            conn.execute(text("UPDATE annotation_history SET undone_by = :h WHERE id = :id"),
                         {"h": hid, "id": e["id"]})
            new_ids.append(hid)
            touched.append(t)
        before = _derived_now(conn, sid, own)
        _refresh_derived(conn, sid, touched)
        after = _derived_now(conn, sid, own)
        changes = [{"token_index": t, "label": after[t], "previous": before[t]} for t in own]
        return {"sentence_id": sid, "annotator": who, "changes": changes,
                "undone": [e._mapping["id"] for e in entries], "history_ids": new_ids}

    return db.write(tx)


def adjudicate(db: Database, sentence_id: int, token_index: int, label: str | None,
               lead: str) -> None:
    """A lead's decision for a disputed token (``None`` withdraws it); the token's derived
    label follows it whatever the votes say.  Votes are never changed; every change of the
    decision is a row of ``adjudication_history`` (:func:`adjudication_history`)."""
    lead = validate.annotator(lead)

    def tx(conn):
        info = info_row(conn, sentence_id, db.for_update())
        t = int(token_index)
        if not 0 <= t < info["n_tokens"]:
            raise InputError(f"token index {t} out of range", source=f"sentence {sentence_id}")
        before = conn.execute(text("SELECT label FROM adjudications WHERE sentence_id = :s"
                                   " AND token_index = :t"), {"s": sentence_id, "t": t}).first()
        before = before[0] if before else None
        if before == label:
            return
        conn.execute(text(
            "INSERT INTO adjudication_history (sentence_id, token_index, old_label, new_label,"
            " annotator, at) VALUES (:s, :t, :old, :new, :a, :at)"),
            {"s": sentence_id, "t": t, "old": before, "new": label, "a": lead, "at": now()})
        if label is None:
            conn.execute(text("DELETE FROM adjudications WHERE sentence_id = :s AND"
                              " token_index = :t"), {"s": sentence_id, "t": t})
        else:
            if label not in loads(info["labels"]):
                raise InputError(f"label {label!r} is not in the project's label set",
                                 source=f"sentence {sentence_id}")
            conn.execute(text(
                "INSERT INTO adjudications (sentence_id, token_index, label, annotator, at)"
                " VALUES (:s, :t, :l, :a, :at) ON CONFLICT (sentence_id, token_index) DO UPDATE"
                " SET label = excluded.label, annotator = excluded.annotator, at = excluded.at"),
                {"s": sentence_id, "t": t, "l": label, "a": lead, "at": now()})
        _refresh_derived(conn, sentence_id, [t])

    db.write(tx)


def adjudication_history(db: Database, sentence_id: int | None = None,
                         project_id: int | None = None, limit: int | None = 100) -> list[dict]:
    """Changes of the leads' decisions, newest first: ``dict(id, sentence_id, position,
    token_index, old_label, new_label, annotator, at)``."""
    where, args = [], {"limit": 2 ** 62 if limit is None else int(limit)}
    if sentence_id is not None:
        where.append("h.sentence_id = :s")
        args["s"] = sentence_id
    if project_id is not None:
        where.append("s.project_id = :p")
        args["p"] = project_id
    sql = ("SELECT h.id, h.sentence_id, s.position, h.token_index, h.old_label, h.new_label,"
           " h.annotator, h.at FROM adjudication_history h JOIN sentences s"
           " ON s.id = h.sentence_id")
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY h.id DESC LIMIT :limit"
    return db.read(lambda conn: [dict(r._mapping) for r in conn.execute(text(sql), args)])


def votes_of(db: Database, sentence_id: int) -> list[dict]:
    """Every vote of a sentence: ``dict(token_index, annotator, label, source, updated_at)``."""
    return db.read(lambda conn: [dict(r._mapping) for r in conn.execute(text(
        "SELECT token_index, annotator, label, source, updated_at FROM votes"
        " WHERE sentence_id = :s ORDER BY token_index, updated_at"), {"s": sentence_id})])


def history(db: Database, sentence_id: int | None = None, project_id: int | None = None,
            annotator: str | None = None, limit: int | None = 100) -> list[dict]:
    """Vote changes, newest first, filtered by sentence / project / annotator."""
    where, args = [], {}
    for col, key, val in (("h.sentence_id", "s", sentence_id), ("h.project_id", "p", project_id),
                          ("h.annotator", "a", annotator)):
        if val is not None:
            where.append(f"{col} = :{key}")
            args[key] = val
    sql = ("SELECT h.*, s.position FROM annotation_history h"
           " LEFT JOIN sentences s ON s.id = h.sentence_id")
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY h.id DESC LIMIT :limit"
    args["limit"] = 2 ** 62 if limit is None else int(limit)
    rows = db.read(lambda conn: conn.execute(text(sql), args).fetchall())
    out = []
    for r in rows:
        m = r._mapping
        out.append({k: m[k] for k in ("id", "project_id", "sentence_id", "position",
                                      "token_index", "old_label", "new_label", "source",
                                      "annotator", "at", "action", "undone_by")})
        out[-1]["undone"] = m["undone_by"] is not None
    return out


def skip(db: Database, sentence_id: int, annotator: str) -> None:
    """Record that ``annotator`` skipped a sentence (it goes last in their queue)."""
    annotator = validate.annotator(annotator)

    def tx(conn):
        info_row(conn, sentence_id)
        conn.execute(text("INSERT INTO skips (sentence_id, annotator, at) VALUES (:s, :a, :at)"
                          " ON CONFLICT (sentence_id, annotator) DO UPDATE SET at = excluded.at"),
                     {"s": sentence_id, "a": annotator, "at": now()})

    db.write(tx)
