"""Label writes: votes per annotator, their history, undo, adjudication and the derived label.

Every (token, annotator) vote is kept in ``votes``; every change of a vote is a row of
``annotation_history`` (that annotator's old and new vote).  A token's *training label* is
derived from its votes by :func:`gpsl.annotation.labeling.rules.derive_labels` and kept in
``derived_labels``; each write below changes, in **one transaction**, the votes, their
history, the touched tokens' derived labels and the sentence's queue scores
(:func:`refresh_derived`), so none of them is ever stale:

* labels imported with a file (votes with source ``'import'``) count only while no one
  has voted on the token;
* Clear withdraws the annotator's own vote (it is not a vote for "no label"; a NULL vote,
  which stores written before that rule may hold, still counts as one);
* one vote: that label;
* several: the label a lead set with :func:`adjudicate` if there is one, else the project's
  crowd model when it resolves disputes (:func:`gpsl.annotation.labeling.rules.crowd_posterior`),
  else the majority, with ties left missing.

:func:`undo` only ever touches the undoer's own votes.  The SQL is
:mod:`gpsl.annotation.labeling.votes`'.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from gpsl.annotation.corpus import projects, sentences
from gpsl.annotation.labeling import rules, scoring, votes
from gpsl.annotation.store import validate
from gpsl.annotation.store.db import Database, loads, now
from gpsl.errors import InputError


class Written(NamedTuple):
    """What a label write did: its new history ids, the project it wrote in and that
    project's keep-training setting: what the step after its commit needs
    (:func:`gpsl.annotation.training.jobs.after_labels`), read in the write's own transaction."""

    ids: list[int]
    project_id: int
    keep: dict


def _posterior(settings: dict):
    """The crowd model's ``posterior`` hook when the project resolves by it, else None."""
    if settings.get("resolve") == "crowd" and settings.get("crowd"):
        return rules.crowd_posterior(settings["crowd"])
    return None


def refresh_derived(conn, sentence_id: int, tokens: Iterable[int], *,
                    settings: dict | None = None) -> None:
    """Rewrite the derived labels of ``tokens`` of a sentence, its labeled-token count and
    its queue scores (inside the write transaction); ``settings``: the project's, when the
    caller has read them already."""
    tokens = sorted(set(int(t) for t in tokens))
    if not tokens:
        return
    cast, adjudicated = votes.cast_and_decisions(conn, sentence_id, tokens)
    posterior = None
    if any(sum(v.source != "import" for v in vs) > 1 for vs in cast.values()):
        posterior = _posterior(projects.settings_of_sentence(conn, sentence_id)
                               if settings is None else settings)  # a disputed token
    votes.write_derived(conn, sentence_id, rules.derive_labels(cast, adjudicated, posterior))
    scoring.refresh_scores(conn, sentence_id)


def rederive(conn, project_id: int) -> int:
    """Derive the training label of every disputed token again (after the resolve rule or
    the crowd model changed); returns how many tokens."""
    n = 0
    settings = projects.settings_of(conn, project_id)  # read once, not per sentence
    for sid, tokens in votes.disputed(conn, project_id).items():
        refresh_derived(conn, sid, tokens, settings=settings)
        n += len(tokens)
    return n


def set_labels(db: Database, sentence_id: int, labels: Mapping[int, str | None],
               annotator: str, source: str = "human") -> Written:
    """Set (``None``: withdraw) ``annotator``'s votes on tokens of one sentence in one
    transaction; one undo step (:func:`set_steps` with one step)."""
    return set_steps(db, sentence_id, [labels], annotator, source)


#: the most a step's time may lie before its write (seconds, :func:`set_steps`' ``ages``)
MAX_STEP_AGE = 60.0


def set_steps(db: Database, sentence_id: int, steps: Sequence[Mapping[int, str | None]],
              annotator: str, source: str = "human",
              ages: Sequence[float] | None = None,
              batches: Sequence[str] | None = None) -> Written:
    """Write several undo steps of ``annotator``'s votes on one sentence in one transaction:
    each step (``{token: label}``, a key press, a span, an "accept") is its own history
    batch, so Undo reverts exactly one of them.  ``None`` withdraws the annotator's own
    vote (Clear): it is not a vote for "no label", and where the annotator has no vote it
    changes nothing.  ``ages``: per step, how many seconds before this write it happened
    (keys queued in the browser while the page was busy: their history times are then the
    times they were pressed, which the speed figures read; at most :data:`MAX_STEP_AGE`;
    a negative, non-finite or non-numeric age is refused).  A bad label or index raises
    InputError and nothing is written.  ``batches``: the steps' own history batch ids (a
    client's event ids): a step whose batch ``annotator``'s history holds already was written
    before and is skipped, so an event sent again is applied exactly once.  Returns the new
    history ids (none when nothing changed) and the sentence's project (:class:`Written`)."""
    annotator = validate.annotator(annotator)
    source = validate.source(source)
    steps = [dict(step) for step in steps]
    ages = [0.0] * len(steps) if ages is None else [
        validate.age(a, MAX_STEP_AGE) for a in ages]
    if len(ages) != len(steps):
        raise ValueError(f"{len(ages)} ages for {len(steps)} steps")
    names = [None] * len(steps) if batches is None else [str(b) for b in batches]
    if len(names) != len(steps):
        raise ValueError(f"{len(names)} batches for {len(steps)} steps")

    def tx(conn):
        info = sentences.info_row(conn, sentence_id, db.for_update())
        label_set, settings = loads(info["labels"]), loads(info["settings"], {})
        n = info["n_tokens"]
        mine = votes.of_annotator(conn, sentence_id, annotator)
        written, hist, touched, final = datetime.now(UTC), [], set(), {}
        where = f"sentence {sentence_id}"
        done = votes.batches_present(conn, annotator, names)
        for step, age, name in zip(steps, ages, names):
            if name in done:
                continue  # written before: this is the same event sent again
            batch = name or uuid.uuid4().hex
            at = (written - timedelta(seconds=age)).isoformat(timespec="milliseconds")
            for t, lab in step.items():
                t = validate.token_index(t, n, where)
                lab = None if lab is None else str(lab)
                if lab is not None and lab not in label_set:
                    raise InputError(f"token {t}: label {lab!r} is not in the project's label"
                                     f" set ({' '.join(label_set)})", source=where)
                if t not in mine and lab is None:
                    continue  # nothing of this annotator's to clear
                old, old_source = mine.get(t, (None, None))
                if t in mine and lab is not None and lab == old and old_source == source:
                    continue  # no change
                final[t] = (lab, source, at)  # the vote after every step, written once
                hist.append({"p": info["project_id"], "s": sentence_id, "t": t, "old": old,
                             "new": lab, "src": None if lab is None else source,
                             "a": annotator, "at": at,
                             "action": "clear" if lab is None else "set", "b": batch})
                if lab is None:
                    del mine[t]
                else:
                    mine[t] = (lab, source)
                touched.add(t)
        votes.put_many(conn, sentence_id, annotator, final)
        ids = votes.add_history_many(conn, hist)
        refresh_derived(conn, sentence_id, touched, settings=settings)
        return Written(ids, info["project_id"], settings.get("keep_training") or {})

    return db.write(tx)


def undo(db: Database, project_id: int, annotator: str | None = None,
         batch: str | None = None) -> dict | None:
    """Revert the latest not-yet-undone ``set``/``clear`` step of ``annotator`` (of anyone
    when None: then that step's annotator is the undoer).  Only that annotator's votes
    change; every other vote stays.  The revert is history action ``'undo'`` and the
    entries are marked undone, so repeated calls walk further back.  Returns
    ``dict(sentence_id, annotator, changes=[{token_index, label, previous}] (the tokens'
    training labels after and before), undone, history_ids)`` or None when there is
    nothing to undo.  ``batch``: the revert's history batch id (a client's event id): when
    ``annotator``'s history holds it already, this undo was done before and nothing
    happens (None)."""
    event = batch

    def tx(conn):
        if event is not None and annotator is not None and votes.batches_present(
                conn, annotator, [event]):
            return None
        last = votes.last_step(conn, project_id, annotator)
        if last is None:
            return None
        hid0, batch, sid, who = last
        sentences.info_row(conn, sid, db.for_update())
        entries = votes.step_entries(conn, hid0, batch, who)
        at, new_batch = now(), event or uuid.uuid4().hex
        new_ids, touched, own = [], [], []
        for e in (r._mapping for r in entries):
            t = e["token_index"]
            current = votes.current(conn, sid, t, who)
            own.append(t)
            target = e["old_label"]
            src = None
            if target is not None:  # how the annotator had set the previous vote
                src = votes.source_before(conn, sid, t, who, e["id"], target) or "human"
            votes.put(conn, sid, t, who, target, src, at)
            hid = votes.add_history(conn, {"p": project_id, "s": sid, "t": t, "old": current,
                                           "new": target, "src": src, "a": who, "at": at,
                                           "action": "undo", "b": new_batch})
            votes.mark_undone(conn, e["id"], hid)
            new_ids.append(hid)
            touched.append(t)
        before = votes.derived_of(conn, sid, own)
        refresh_derived(conn, sid, touched)
        after = votes.derived_of(conn, sid, own)
        changes = [{"token_index": t, "label": after[t], "previous": before[t]} for t in own]
        return {"sentence_id": sid, "annotator": who, "changes": changes,
                "undone": [e._mapping["id"] for e in entries], "history_ids": new_ids}

    return db.write(tx)


def adjudicate(db: Database, sentence_id: int, token_index: int, label: str | None,
               lead: str) -> Written:
    """A lead's decision for a disputed token (``None`` withdraws it); the token's derived
    label follows it whatever the votes say.  Votes are never changed; every change of the
    decision is a row of ``adjudication_history``.  Returns the sentence's project
    (:class:`Written`, no history ids)."""
    lead = validate.annotator(lead)

    def tx(conn):
        info = sentences.info_row(conn, sentence_id, db.for_update())
        t = validate.token_index(token_index, info["n_tokens"], f"sentence {sentence_id}")
        if label is not None and label not in loads(info["labels"]):
            raise InputError(f"label {label!r} is not in the project's label set",
                             source=f"sentence {sentence_id}")
        settings = loads(info["settings"], {})
        if votes.set_adjudication(conn, sentence_id, t, label, lead, now()):
            refresh_derived(conn, sentence_id, [t], settings=settings)
        return Written([], info["project_id"], settings.get("keep_training") or {})

    return db.write(tx)


def skip(db: Database, sentence_id: int, annotator: str) -> None:
    """Record that ``annotator`` skipped a sentence (it goes last in their queue)."""
    annotator = validate.annotator(annotator)

    def tx(conn):
        sentences.info_row(conn, sentence_id)
        votes.skip(conn, sentence_id, annotator, now())

    db.write(tx)
