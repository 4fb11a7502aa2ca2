"""Sentences of a project: append (with the file's labels as votes), read one or a page,
neighbours, training and gold data, gold labels."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, text

from gpsl.annotation.store import validate
from gpsl.annotation.store.db import Database, dumps, loads, now
from gpsl.annotation.store.records import others_hidden, overlap_of
from gpsl.annotation.store.store_errors import NotFoundError
from gpsl.errors import InputError


def insert(conn, project_id: int, items: list, split: str, doc, annotator: str, gold) -> int:
    """Append checked sentences (inside a write transaction); labels in the items become
    ``annotator``'s votes (history action ``'import'``), ``gold`` the gold labels."""
    project = conn.execute(text("SELECT labels FROM projects WHERE id = :p"),
                           {"p": project_id}).first()
    if project is None:
        raise NotFoundError(f"no project with id {project_id}")
    first = conn.execute(text("SELECT tokens FROM sentences WHERE project_id = :p LIMIT 1"),
                         {"p": project_id}).first()
    n_cols = len(loads(first[0])[0]) if first else None
    doc = validate.doc_name(doc)
    label_set = loads(project[0])
    start = conn.execute(text("SELECT COALESCE(MAX(position), -1) + 1 FROM sentences"
                              " WHERE project_id = :p"), {"p": project_id}).scalar_one()
    at, done = now(), 0
    items = items if isinstance(items, list) else list(items)
    gold = None if gold is None else list(gold)
    if gold is not None and len(gold) != len(items):
        validate.sentences(items, label_set, n_columns=n_cols, source=doc, gold=gold)
    for a in range(0, len(items), INSERT_PAGE):  # a page at a time: memory stays bounded
        checked = validate.sentences(items[a:a + INSERT_PAGE], label_set, n_columns=n_cols,
                                     source=doc, first=a, gold=None if gold is None else
                                     gold[a:a + INSERT_PAGE])
        n_cols = n_cols or len(checked[0]["tokens"][0])
        _insert_page(conn, project_id, checked, start + done, split, doc, annotator, at)
        done += len(checked)
    return done


#: sentences validated and written at a time by :func:`insert` (one transaction for all)
INSERT_PAGE = 2000


def _insert_page(conn, project_id: int, checked: list[dict], start: int, split: str, doc,
                 annotator: str, at: str) -> None:
    rows = [{"p": project_id, "pos": start + k, "doc": s["doc"] or doc, "line": s["line"],
             "split": split, "tokens": dumps([list(t) for t in s["tokens"]]),
             "n": len(s["tokens"]), "nl": sum(lab is not None for lab in s["labels"])}
            for k, s in enumerate(checked)]
    cols = "project_id, position, doc, line, split, tokens, n_tokens, n_labeled"
    if conn.dialect.name == "postgresql":  # one statement a page: its progress trigger once
        conn.execute(text(
            f"INSERT INTO sentences ({cols}) SELECT * FROM unnest(CAST(:p AS INTEGER[]),"
            " CAST(:pos AS INTEGER[]), CAST(:doc AS TEXT[]), CAST(:line AS INTEGER[]),"
            " CAST(:split AS TEXT[]), CAST(:tokens AS TEXT[]), CAST(:n AS INTEGER[]),"
            " CAST(:nl AS INTEGER[]))"), {k: [r[k] for r in rows] for k in rows[0]})
    else:
        conn.execute(text(f"INSERT INTO sentences ({cols}) VALUES (:p, :pos, :doc, :line,"
                          " :split, :tokens, :n, :nl)"), rows)
    ids = [r[0] for r in conn.execute(text(
        "SELECT id FROM sentences WHERE project_id = :p AND position >= :start"
        " ORDER BY position"), {"p": project_id, "start": start})]
    votes, gold_rows = [], []
    for sid, s in zip(ids, checked):
        for t, lab in enumerate(s["labels"]):
            if lab is not None:
                votes.append({"s": sid, "t": t, "a": annotator, "l": lab, "at": at,
                              "p": project_id})
        for t, lab in enumerate(s["gold"] or ()):
            if lab is not None:
                gold_rows.append({"s": sid, "t": t, "l": lab})
    if votes:
        conn.execute(text("INSERT INTO votes (sentence_id, token_index, annotator, label,"
                          " source, updated_at) VALUES (:s, :t, :a, :l, 'import', :at)"), votes)
        conn.execute(text("INSERT INTO derived_labels (sentence_id, token_index, label, source,"
                          " annotator) VALUES (:s, :t, :l, 'human', :a)"), votes)
        conn.execute(text(
            "INSERT INTO annotation_history (project_id, sentence_id, token_index, old_label,"
            " new_label, source, annotator, at, action) VALUES (:p, :s, :t, NULL, :l, 'human',"
            " :a, :at, 'import')"), votes)
    if gold_rows:
        conn.execute(text("INSERT INTO gold_labels (sentence_id, token_index, label)"
                          " VALUES (:s, :t, :l)"), gold_rows)


def last_ids(conn, project_id: int, n: int) -> list[int]:
    """Ids of a project's ``n`` last sentences (by position), first to last."""
    rows = conn.execute(text("SELECT id FROM sentences WHERE project_id = :p ORDER BY"
                             " position DESC LIMIT :n"), {"p": project_id, "n": int(n)})
    return [r[0] for r in rows][::-1]


def set_gold(db: Database, sentence_id: int, labels: Sequence[str | None]) -> None:
    """Replace the gold labels of one sentence (``None`` = no gold for that token)."""

    def tx(conn):
        info = info_row(conn, sentence_id)
        known = set(loads(info["labels"]))
        labs = list(labels)
        if len(labs) != info["n_tokens"]:
            raise InputError(f"{len(labs)} gold labels for {info['n_tokens']} tokens",
                             source=f"sentence {sentence_id}")
        for t, lab in enumerate(labs):
            if lab is not None and lab not in known:
                raise InputError(f"token {t + 1}: gold label {lab!r} is not in the project's "
                                 "label set", source=f"sentence {sentence_id}")
        conn.execute(text("DELETE FROM gold_labels WHERE sentence_id = :s"), {"s": sentence_id})
        rows = [{"s": sentence_id, "t": t, "l": lab} for t, lab in enumerate(labs)
                if lab is not None]
        if rows:
            conn.execute(text("INSERT INTO gold_labels (sentence_id, token_index, label)"
                              " VALUES (:s, :t, :l)"), rows)

    db.write(tx)


def info_row(conn, sentence_id: int, lock: str = ""):
    """``id, project_id, n_tokens, split, tokens, labels, settings`` (the project's label
    set and its settings, JSON); ``lock`` (PostgreSQL's `` FOR UPDATE``): the sentence's row
    is locked by the same statement (``FOR UPDATE OF s``), serialising the label writers of
    one sentence."""
    r = conn.execute(text(
        "SELECT s.id, s.project_id, s.n_tokens, s.split, s.tokens, p.labels, p.settings"
        " FROM sentences s JOIN projects p ON p.id = s.project_id WHERE s.id = :s"
        + (f"{lock} OF s" if lock else "")), {"s": sentence_id}).first()
    if r is None:
        raise NotFoundError(f"no sentence with id {sentence_id}")
    return r._mapping


def tokens_in(conn, sentence_ids: list[int]) -> dict[int, list[list[str]]]:
    """``{sentence id: its tokens (lists of columns)}`` of some sentences."""
    return {sid: loads(toks) for sid, toks in conn.execute(text(
        "SELECT id, tokens FROM sentences WHERE id IN :ids").bindparams(
        bindparam("ids", expanding=True)), {"ids": list(sentence_ids)})}


def _as_dict(m, labels) -> dict:
    n = m["n_tokens"]
    labs: list[str | None] = [None] * n
    sources: list[str | None] = [None] * n
    annotators: list[str | None] = [None] * n
    for t, lab, src, ann in labels:
        labs[t], sources[t], annotators[t] = lab, src, ann
    return {"id": m["id"], "project_id": m["project_id"], "position": m["position"],
            "doc": m["doc"], "line": m["line"], "split": m["split"],
            "tokens": [tuple(tok) for tok in loads(m["tokens"])], "labels": labs,
            "sources": sources, "annotators": annotators}


_COLS = "s.id, s.project_id, s.position, s.doc, s.line, s.split, s.tokens, s.n_tokens"


def get(db: Database, sentence_id: int) -> dict | None:
    """One sentence: ``id, project_id, position, doc, line, split, tokens, labels`` (the
    derived training labels, None when missing), ``sources``, ``annotators``, ``votes``
    (per token ``{annotator: label}``) and ``gold`` (list, or None without gold)."""
    d = db.read(lambda conn: _get(conn, sentence_id))
    if d is not None:
        del d["_votes"], d["_settings"]
    return d


def _get(conn, sentence_id: int) -> dict | None:
    """:func:`get` inside a read transaction; its ``_votes`` hold every vote row
    ``(token_index, annotator, label, source, updated_at)``, oldest first, and
    ``_settings`` the project's settings (JSON).  Two statements (each a round trip on
    PostgreSQL, twice a page run): the sentence with its project's settings, then its
    derived labels, votes and gold labels as one list, each row tagged by its table."""
    r = conn.execute(text(f"SELECT {_COLS}, p.settings FROM sentences s JOIN projects p"
                          " ON p.id = s.project_id WHERE s.id = :s"),
                     {"s": sentence_id}).first()
    if r is None:
        return None
    labels, votes, gold = [], [], []
    for kind, t, lab, src, ann, at in conn.execute(text(
            "SELECT 0 AS kind, token_index, label, source, annotator, NULL AS at"
            " FROM derived_labels WHERE sentence_id = :s UNION ALL"
            " SELECT 1, token_index, label, source, annotator, updated_at FROM votes"
            " WHERE sentence_id = :s UNION ALL"
            " SELECT 2, token_index, label, NULL, NULL, NULL FROM gold_labels"
            " WHERE sentence_id = :s ORDER BY 1, 6"), {"s": sentence_id}):
        if kind == 0:
            labels.append((t, lab, src, ann))
        elif kind == 1:
            votes.append((t, ann, lab, src, at))
        else:
            gold.append((t, lab))
    m = r._mapping
    d = _as_dict(m, labels)
    d["votes"] = [{} for _ in range(m["n_tokens"])]
    for t, ann, lab, _src, _at in votes:
        d["votes"][t][ann] = lab
    d["gold"] = None
    if gold:
        d["gold"] = [None] * m["n_tokens"]
        for t, lab in gold:
            d["gold"][t] = lab
    d["_votes"] = votes
    d["_settings"] = m["settings"]
    return d


def page(db: Database, project_id: int, split: str | None = None, offset: int = 0,
         limit: int | None = None, *, only_labeled: bool = False) -> list[dict]:
    """Sentences in position order (as :func:`get` without votes and gold), paged;
    ``only_labeled``: those with a derived label (the others are never read)."""
    where, args = "s.project_id = :p", {"p": project_id}
    if split is not None:
        where += " AND s.split = :split"
        args["split"] = split
    if only_labeled:
        where += " AND EXISTS (SELECT 1 FROM derived_labels l WHERE l.sentence_id = s.id)"
    args.update(limit=2 ** 62 if limit is None else int(limit), offset=int(offset))

    def tx(conn):
        rows = conn.execute(text(f"SELECT {_COLS} FROM sentences s WHERE {where}"
                                 " ORDER BY s.position LIMIT :limit OFFSET :offset"),
                            args).fetchall()
        if not rows:
            return rows, {}
        if limit is None and offset == 0:  # the whole split: no id list
            lab_rows = conn.execute(text(
                "SELECT d.sentence_id, d.token_index, d.label, d.source, d.annotator FROM"
                f" derived_labels d JOIN sentences s ON s.id = d.sentence_id WHERE {where}"),
                args)
        else:
            lab_rows = conn.execute(text(
                "SELECT sentence_id, token_index, label, source, annotator FROM derived_labels"
                " WHERE sentence_id IN :ids").bindparams(bindparam("ids", expanding=True)),
                {"ids": [r[0] for r in rows]})
        by_sid: dict[int, list] = {}
        for sid, t, lab, src, ann in lab_rows:
            by_sid.setdefault(sid, []).append((t, lab, src, ann))
        return rows, by_sid

    rows, by_sid = db.read(tx)
    return [_as_dict(r._mapping, by_sid.get(r[0], ())) for r in rows]


def label_page(db: Database, project_id: int, split: str | None, offset: int,
               limit: int) -> list[tuple[int, int, list]]:
    """``(id, position, labels)`` of a page of sentences in position order (the derived
    labels, None missing): :func:`page` without decoding the tokens."""
    where, args = "project_id = :p", {"p": project_id, "limit": int(limit),
                                      "offset": int(offset)}
    if split is not None:
        where += " AND split = :split"
        args["split"] = split

    def tx(conn):
        rows = conn.execute(text(f"SELECT id, position, n_tokens FROM sentences WHERE {where}"
                                 " ORDER BY position LIMIT :limit OFFSET :offset"),
                            args).fetchall()
        labs = conn.execute(text(
            "SELECT sentence_id, token_index, label FROM derived_labels"
            " WHERE sentence_id IN :ids").bindparams(bindparam("ids", expanding=True)),
            {"ids": [r[0] for r in rows]}).fetchall() if rows else []
        return rows, labs

    rows, labs = db.read(tx)
    out = {sid: (sid, pos, [None] * n) for sid, pos, n in rows}
    for sid, t, lab in labs:
        out[sid][2][t] = lab
    return list(out.values())


def tokens_in_db(db: Database, ids: list[int]) -> dict[int, list[list[str]]]:
    """:func:`tokens_in` in a read transaction of its own."""
    return db.read(lambda conn: tokens_in(conn, ids))


def count(db: Database, project_id: int, split: str | None = None) -> int:
    sql, args = "SELECT COUNT(*) FROM sentences WHERE project_id = :p", {"p": project_id}
    if split is not None:
        sql += " AND split = :split"
        args["split"] = split
    return db.read(lambda conn: conn.execute(text(sql), args).scalar_one())


def ids(db: Database, project_id: int, split: str | None = None) -> list[int]:
    sql, args = "SELECT id FROM sentences WHERE project_id = :p", {"p": project_id}
    if split is not None:
        sql += " AND split = :split"
        args["split"] = split
    return db.read(lambda conn: [r[0] for r in conn.execute(text(sql + " ORDER BY position"),
                                                            args)])


def neighbours(db: Database, sentence_id: int) -> tuple[int | None, int | None]:
    """(previous, next) sentence ids by position in the same project and split."""

    def tx(conn):
        r = conn.execute(text("SELECT project_id, split, position FROM sentences WHERE id = :s"),
                         {"s": sentence_id}).first()
        if r is None:
            raise NotFoundError(f"no sentence with id {sentence_id}")
        a = {"p": r[0], "split": r[1], "pos": r[2]}
        prev = conn.execute(text("SELECT id FROM sentences WHERE project_id = :p AND"
                                 " split = :split AND position < :pos ORDER BY position DESC"
                                 " LIMIT 1"), a).first()
        nxt = conn.execute(text("SELECT id FROM sentences WHERE project_id = :p AND"
                                " split = :split AND position > :pos ORDER BY position"
                                " LIMIT 1"), a).first()
        return (prev[0] if prev else None, nxt[0] if nxt else None)

    return db.read(tx)


def training_data(db: Database, project_id: int, split: str | None = "train", *,
                  only_labeled: bool = False, with_ids: bool = False):
    """``(tokens, labels)`` of a split in position order (derived labels, None missing);
    ``only_labeled`` keeps the sentences with at least one labeled token (chosen in SQL: a
    training run on a large project decodes its labeled sentences only); ``with_ids``
    returns ``(ids, tokens, labels)``."""
    rows = page(db, project_id, split, only_labeled=only_labeled)
    tokens = [s["tokens"] for s in rows]
    labels = [s["labels"] for s in rows]
    if with_ids:
        return [s["id"] for s in rows], tokens, labels
    return tokens, labels


def lengths(db: Database, project_id: int) -> tuple[list[int], list[int]]:
    """``(ids, token counts)`` of every sentence of a project in position order (the
    pool's chunks are cut from these; their tokens are read chunk by chunk, :func:`of_ids`)."""
    rows = db.read(lambda conn: conn.execute(text(
        "SELECT id, n_tokens FROM sentences WHERE project_id = :p ORDER BY position"),
        {"p": project_id}).fetchall())
    return [r[0] for r in rows], [int(r[1]) for r in rows]


def of_ids(db: Database, ids: list[int]) -> tuple[list, list]:
    """``(tokens, labels)`` of the sentences ``ids`` in that order (derived labels, None
    missing), as :func:`training_data` gives them."""
    bind = {"ids": list(ids)}

    def tx(conn):
        rows = conn.execute(text(f"SELECT {_COLS} FROM sentences s WHERE s.id IN :ids")
                            .bindparams(bindparam("ids", expanding=True)), bind).fetchall()
        labs = conn.execute(text(
            "SELECT sentence_id, token_index, label, source, annotator FROM derived_labels"
            " WHERE sentence_id IN :ids").bindparams(bindparam("ids", expanding=True)),
            bind).fetchall()
        return rows, labs

    rows, labs = db.read(tx)
    by_sid: dict[int, list] = {}
    for sid, t, lab, src, ann in labs:
        by_sid.setdefault(sid, []).append((t, lab, src, ann))
    got = {r[0]: _as_dict(r._mapping, by_sid.get(r[0], ())) for r in rows}
    return [got[i]["tokens"] for i in ids], [got[i]["labels"] for i in ids]


def gold_data(db: Database, project_id: int, split: str | None = "heldout"):
    """``(ids, tokens, gold_labels)`` of the sentences of ``split`` that have gold labels."""
    where, args = "s.project_id = :p", {"p": project_id}
    if split is not None:
        where += " AND s.split = :split"
        args["split"] = split
    rows = db.read(lambda conn: conn.execute(text(
        "SELECT s.id, s.tokens, s.n_tokens, g.token_index, g.label FROM sentences s"
        f" JOIN gold_labels g ON g.sentence_id = s.id WHERE {where}"
        " ORDER BY s.position, g.token_index"), args).fetchall())
    out_ids, tokens, labels = [], [], []
    for sid, toks, n, t, lab in rows:
        if not out_ids or out_ids[-1] != sid:
            out_ids.append(sid)
            tokens.append([tuple(tok) for tok in loads(toks)])
            labels.append([None] * n)
        labels[-1][t] = lab
    return out_ids, tokens, labels


def _own(rows: list[tuple], annotator: str, n: int):
    """``(own, sources, annotators, others)`` of a sentence's vote rows ``(token,
    annotator, label, source)``, oldest first: the annotator's own copy (their vote, else
    the label imported with the file) and the tokens someone else voted on."""
    mine = {t: lab for t, ann, lab, _src in rows if ann == annotator}
    own: list[str | None] = [None] * n
    own_src: list[str | None] = [None] * n
    own_who: list[str | None] = [None] * n
    others: set[int] = set()
    for t, ann, lab, src in rows:
        if ann == annotator:
            continue
        if validate.is_import(ann, src):
            if t not in mine and lab is not None and own[t] is None:
                own[t], own_src[t], own_who[t] = lab, "human", ann
        else:
            others.add(t)
    for t, lab in mine.items():
        src = next((s for tt, a, _l, s in rows if tt == t and a == annotator), "human")
        own[t], own_src[t], own_who[t] = lab, (None if lab is None else src), \
            (None if lab is None else annotator)
    return own, own_src, own_who, others


def own_copy(db: Database, sentence_id: int, annotator: str) -> list[str | None] | None:
    """``annotator``'s own copy of a sentence (:func:`view`'s ``own``) in one statement;
    None: no such sentence."""
    rows = db.read(lambda conn: conn.execute(text(
        "SELECT s.n_tokens, v.token_index, v.annotator, v.label, v.source FROM sentences s"
        " LEFT JOIN votes v ON v.sentence_id = s.id WHERE s.id = :s ORDER BY v.updated_at"),
        {"s": sentence_id}).fetchall(), single=True)
    if not rows:
        return None
    votes = [tuple(r[1:]) for r in rows if r[1] is not None]
    return _own(votes, annotator, int(rows[0][0]))[0]


def view(db: Database, sentence_id: int, annotator: str, blind: bool | None = None) -> dict | None:
    """One sentence as ``annotator`` may see it: the shape of :func:`get` plus ``mine``
    (``{token: label}`` of the annotator's own votes), ``own`` (the annotator's own copy of
    the sentence, one entry per token: their vote, else the label imported with the file,
    else None; the Annotate page's cursor, counts and Clear read it, never other people's
    votes), ``overlap`` (the project's k), ``blind`` and ``hidden`` (tokens on which someone
    else voted while the view hides them: the stored model marginals there were computed
    with those labels clamped, so a page must not show them as suggestions).

    ``blind`` None: the project's rule (:func:`gpsl.annotation.store.records.others_hidden`: blind
    mode, or overlap k >= 2, hides other people's votes until a lead reviews them).  A view
    that hides them shows the annotator's own copy: ``labels`` = ``own``, ``votes[t]``
    holds only the annotator's vote and the imported labels (``hidden_since``: per hidden
    token, the time of the latest vote that hides it).  Otherwise ``labels`` are the
    derived training labels and ``votes`` every vote."""
    d = db.read(lambda conn: _get(conn, sentence_id))
    if d is None:
        return None
    settings = loads(d.pop("_settings"), {})
    rows = [(t, ann, lab, src) for t, ann, lab, src, _at in d["_votes"]]
    others_at: dict[int, str] = {}
    for t, ann, _lab, src, at in d.pop("_votes"):
        if ann != annotator and not validate.is_import(ann, src):
            others_at[t] = max(others_at.get(t, ""), str(at))
    if blind is None:
        blind = others_hidden(settings)
    n = len(d["tokens"])
    d["mine"] = {t: lab for t, ann, lab, _src in rows if ann == annotator}
    d["overlap"] = overlap_of(settings)
    d["blind"] = bool(blind)
    d["hidden"] = []
    own, own_src, own_who, others = _own(rows, annotator, n)
    d["own"] = own
    if not blind:
        return d
    votes: list[dict] = [{} for _ in range(n)]
    for t, ann, lab, src in rows:
        if ann == annotator or validate.is_import(ann, src):
            votes[t][ann] = lab
    d.update(votes=votes, labels=list(own), sources=own_src, annotators=own_who,
             hidden=sorted(others), hidden_since=others_at)
    return d
