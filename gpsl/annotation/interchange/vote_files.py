"""Every vote out of the store and back in: each annotator's labels, the training label the
project derives from them and the leads' decisions, in crowd JSONL and in the formats of
Label Studio, doccano and Prodigy.

A :class:`VotedSentence` is what travels: a sentence's tokens, split and number, every vote
(``votes``: annotator -> one label or None per token; labels imported with a file are the
votes of ``import:<file>``), which votes were accepted suggestions, the derived training
labels, the leads' decisions and the gold labels.  The formats:

* ``crowd``: one JSON object per sentence, ``{"id", "split", "tokens", "annotations":
  [{"annotator", "labels", "accepted"}], "derived", "adjudications": [{"token", "label",
  "lead"}], "labels"}`` (``labels``: the gold labels, only where there are some).  It is
  the crowd input of ``python -m gpsl aggregate`` and ``train --crowd``
  (:func:`gpsl.io.read_crowd_jsonl`), which read the annotations and the gold and ignore
  the rest.
* ``labelstudio``: one task per sentence with one annotation per person (``completed_by``:
  a number per annotator, the same in the whole file) and the training label as the task's
  prediction; ``doccano`` and ``prodigy``: one record per sentence and annotator with the
  annotator in the record (doccano ``annotator``; Prodigy ``_annotator_id`` and
  ``_session_id``), and one record of the training label without an annotator.  Each tool
  sees entity spans on the text (tokens joined by single spaces; BIO chunks).  Spans cannot
  tell an ``O`` vote from no vote, nor hold a partial ``I-`` label, so the exact token labels
  ride along (``gpsl``: in the task's ``data`` for Label Studio, in each record for doccano
  and Prodigy).  :func:`read_votes` takes those exact labels where the record's spans are
  still theirs and the spans (BIO, ``O`` elsewhere) where a tool changed them.

:func:`import_votes` appends such sentences to a project with every vote credited to its
annotator, every decision to its lead, in one transaction; the training labels are derived
again by the project's own rule.  Errors are one :class:`~gpsl.errors.InputError` line naming
the file and record.
"""

from __future__ import annotations

import io
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpsl import io as gio
from gpsl import limits
from gpsl.annotation.corpus import projects, sentences
from gpsl.annotation.interchange.exports import text_and_spans
from gpsl.annotation.interchange.imports import spans_to_labels, tokenize
from gpsl.annotation.labeling import label_writes, votes
from gpsl.annotation.store import validate
from gpsl.annotation.store.db import Database, loads, now
from gpsl.errors import InputError

VOTE_FORMATS = {"crowd": "crowd JSONL (annotations per annotator)",
                "labelstudio": "Label Studio JSON (one annotation per user)",
                "doccano": "doccano JSONL (a record per annotator)",
                "prodigy": "Prodigy JSONL (a record per annotator)"}
SPLITS = ("train", "heldout")
#: the name Label Studio's prediction of the training label carries
TRAINING_LABEL = "gpsl training label"


@dataclass
class VotedSentence:
    """One sentence with every vote on it (see the module docstring)."""

    tokens: list[tuple[str, ...]]
    votes: dict[str, list[str | None]] = field(default_factory=dict)
    accepted: dict[str, list[int]] = field(default_factory=dict)
    derived: list[str | None] | None = None
    adjudications: dict[int, tuple[str, str]] = field(default_factory=dict)
    gold: list[str | None] | None = None
    split: str = "train"
    number: int | None = None
    line: int = 1

    def comparable(self) -> tuple:
        """Everything a round trip keeps, for comparison."""
        return (tuple(self.tokens), self.split,
                tuple(sorted((a, tuple(labs)) for a, labs in self.votes.items())),
                tuple(sorted((a, tuple(sorted(ts))) for a, ts in self.accepted.items() if ts)),
                tuple(self.derived or ()), tuple(sorted(self.adjudications.items())),
                tuple(self.gold or ()))


# ----------------------------------------------------------------------------- out


def collect(db: Database, project_id: int, split: str | None = "train") -> list[VotedSentence]:
    """A project's sentences (of ``split``; None: all) with every vote, derived label,
    decision and gold label, in position order."""
    rows = sentences.page(db, project_id, split)
    cast = votes.every_vote(db, project_id, split)
    decided = votes.adjudications_with_leads(db, project_id)
    gids, _, glabels = sentences.gold_data(db, project_id, split)
    gold = dict(zip(gids, glabels))
    by_sid: dict[int, list[dict]] = defaultdict(list)
    for v in cast:
        by_sid[v["sentence_id"]].append(v)
    decisions: dict[int, dict[int, tuple[str, str]]] = defaultdict(dict)
    for (sid, t), got in decided.items():
        decisions[sid][t] = got
    out = []
    for s in rows:
        n = len(s["tokens"])
        item = VotedSentence(tokens=[tuple(t) for t in s["tokens"]], derived=list(s["labels"]),
                             gold=gold.get(s["id"]), split=s["split"],
                             number=s["position"] + 1, line=s["line"] or 1)
        for v in by_sid.get(s["id"], ()):
            if v["label"] is None:  # a "no label" vote of an old store: not a label
                continue
            item.votes.setdefault(v["annotator"], [None] * n)[v["token_index"]] = v["label"]
            if v["source"] == "accepted":
                item.accepted.setdefault(v["annotator"], []).append(v["token_index"])
        item.adjudications = dict(sorted(decisions.get(s["id"], {}).items()))
        out.append(item)
    return out


def _token_json(tokens) -> list:
    """One column: the tokens as strings; several: as lists (as :func:`gpsl.io.read_jsonl`)."""
    if all(len(t) == 1 for t in tokens):
        return [t[0] for t in tokens]
    return [list(t) for t in tokens]


def _adjudications_json(item: VotedSentence) -> list[dict]:
    return [{"token": t, "label": lab, "lead": lead}
            for t, (lab, lead) in sorted(item.adjudications.items())]


def _meta(item: VotedSentence, labels, **extra) -> dict:
    out = {"sentence": item.number, "split": item.split, "tokens": _token_json(item.tokens),
           "labels": list(labels)}
    out.update({k: v for k, v in extra.items() if v not in (None, [], {})})
    return out


def to_crowd(items: Sequence[VotedSentence]) -> str:
    lines = []
    for item in items:
        obj = {"id": item.number, "split": item.split, "tokens": _token_json(item.tokens),
               "annotations": [{"annotator": a, "labels": labs,
                                **({"accepted": sorted(item.accepted[a])}
                                   if item.accepted.get(a) else {})}
                               for a, labs in sorted(item.votes.items())],
               "derived": item.derived, "adjudications": _adjudications_json(item)}
        if item.gold is not None:
            obj["labels"] = item.gold
        lines.append(json.dumps(obj, ensure_ascii=False))
    return "".join(line + "\n" for line in lines)


def _spans(item: VotedSentence, labels) -> tuple[str, list[tuple[int, int]], list]:
    return text_and_spans(gio.Sentence(item.tokens, list(labels), 1))


def to_labelstudio(items: Sequence[VotedSentence]) -> str:
    people = sorted({a for item in items for a in item.votes})
    uid = {a: k for k, a in enumerate(people, 1)}

    def result(text, spans):
        return [{"from_name": "label", "to_name": "text", "type": "labels",
                 "value": {"start": a, "end": b, "text": text[a:b], "labels": [kind]}}
                for a, b, kind in spans]

    tasks = []
    for item in items:
        text, _, derived_spans = _spans(item, item.derived or [None] * len(item.tokens))
        gpsl = _meta(item, item.derived or [], votes=dict(sorted(item.votes.items())),
                     accepted={a: sorted(ts) for a, ts in item.accepted.items() if ts},
                     annotators={str(uid[a]): a for a in sorted(item.votes)},
                     adjudications=_adjudications_json(item), gold=item.gold)
        tasks.append({
            "id": item.number, "data": {"text": text, "gpsl": gpsl},
            "annotations": [{"completed_by": uid[a], "result": result(text, _spans(item, labs)[2])}
                            for a, labs in sorted(item.votes.items())],
            "predictions": [{"model_version": TRAINING_LABEL,
                             "result": result(text, derived_spans)}]})
    return json.dumps(tasks, ensure_ascii=False, indent=1) + "\n"


def _records(items: Sequence[VotedSentence], fmt: str) -> str:
    lines = []
    for item in items:
        records = [(None, item.derived or [None] * len(item.tokens))]
        records += sorted(item.votes.items())
        for who, labs in records:
            text, offsets, spans = _spans(item, labs)
            extra = {"kind": "training", "adjudications": _adjudications_json(item),
                     "gold": item.gold} if who is None else \
                {"accepted": sorted(item.accepted.get(who, []))}
            rec: dict = {"text": text}
            if fmt == "doccano":
                rec["label"] = [list(sp) for sp in spans]
                if who is not None:
                    rec["annotator"] = who
            else:
                starts = {a: i for i, (a, _) in enumerate(offsets)}
                ends = {b: i for i, (_, b) in enumerate(offsets)}
                rec["tokens"] = [{"text": text[a:b], "start": a, "end": b, "id": i}
                                 for i, (a, b) in enumerate(offsets)]
                rec["spans"] = [{"start": a, "end": b, "token_start": starts[a],
                                 "token_end": ends[b], "label": kind} for a, b, kind in spans]
                rec["answer"] = "accept"
                if who is not None:
                    rec["_annotator_id"] = who
                    rec["_session_id"] = f"gpsl-{who}"
            rec["gpsl"] = _meta(item, labs, **extra)
            lines.append(json.dumps(rec, ensure_ascii=False))
    return "".join(line + "\n" for line in lines)


def format_votes(items: Sequence[VotedSentence], fmt: str) -> str:
    if fmt == "crowd":
        return to_crowd(items)
    if fmt == "labelstudio":
        return to_labelstudio(items)
    if fmt in ("doccano", "prodigy"):
        return _records(items, fmt)
    raise InputError(f"unknown vote export format {fmt!r}", source="<export>")


def export_votes(db: Database, project_id: int, fmt: str = "crowd",
                 split: str | None = "train") -> str:
    """Every vote of a project (of ``split``; None: all sentences) in ``fmt``."""
    return format_votes(collect(db, project_id, split), fmt)


# ----------------------------------------------------------------------------- in


class _Where:
    """Names a record in an error line."""

    def __init__(self, source: str, line: int | None = None, what: str = ""):
        self.source, self.line, self.what = source, line, what

    def bad(self, message: str) -> InputError:
        return InputError(f"{self.what}{': ' if self.what else ''}{message}",
                          source=self.source, line=self.line)


def _labels(raw, n: int, where: _Where, what: str) -> list[str | None]:
    if not isinstance(raw, list) or len(raw) != n:
        raise where.bad(f"{what} must be a list of {n} labels or nulls")
    out = []
    for lab in raw:
        if lab is not None and (not isinstance(lab, str) or not lab.strip()
                                or any(c.isspace() for c in lab)):
            raise where.bad(f"{what}: bad label {lab!r}")
        out.append(lab)
    return out


def _name(raw, where: _Where, what: str = "annotator") -> str:
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = f"user {raw}"  # a tool's numeric user id
    if not isinstance(raw, str) or not raw.strip() or len(raw) > 200:
        raise where.bad(f"{what} must be a non-empty name, found {raw!r}")
    try:  # an annotator may be the file's own labels (import:<file>); a lead is a person
        return validate.person(raw, what) if what == "lead" else validate.credit(raw)
    except InputError as exc:
        raise where.bad(exc.message) from None


def _index_list(raw, n: int, where: _Where, what: str) -> list[int]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(t, int) and not isinstance(t, bool)
                                            and 0 <= t < n for t in raw):
        raise where.bad(f"{what} must be a list of token indices below {n}")
    return sorted(set(raw))


def _adjudications(raw, n: int, where: _Where) -> dict[int, tuple[str, str]]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise where.bad("adjudications must be a list")
    out = {}
    for a in raw:
        if not isinstance(a, dict):
            raise where.bad("each adjudication must be an object {token, label, lead}")
        t = a.get("token")
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < n:
            raise where.bad(f"adjudication of token {t!r}: no such token")
        lab = _labels([a.get("label")], 1, where, f"adjudication of token {t}")[0]
        if lab is None:
            raise where.bad(f"adjudication of token {t} has no label")
        out[t] = (lab, _name(a.get("lead"), where, "lead"))
    return out


def _tokens(raw, where: _Where) -> list[tuple[str, ...]]:
    if not isinstance(raw, list) or not raw:
        raise where.bad("tokens must be a non-empty list")
    out = []
    for tok in raw:
        cols = (tok,) if isinstance(tok, str) else tuple(tok) if isinstance(tok, list) else ()
        if not cols or not all(isinstance(c, str) and c for c in cols):
            raise where.bad(f"bad token {tok!r}")
        out.append(cols)
    return out


def _split(raw, where: _Where) -> str:
    if raw is None:
        return "train"
    if raw not in SPLITS:
        raise where.bad(f"split must be 'train' or 'heldout', found {raw!r}")
    return raw


def read_crowd(text: str, source: str) -> list[VotedSentence]:
    """Crowd JSONL (:func:`gpsl.io.read_crowd_jsonl` reads the tokens, annotations and gold;
    the keys it leaves are read here)."""
    base = gio.read_crowd_jsonl(io.StringIO(text), name=source)
    raw_lines = text.splitlines()
    out = []
    for s in base:
        where = _Where(source, s.line)
        obj = json.loads(raw_lines[s.line - 1])
        n = len(s.tokens)
        item = VotedSentence(tokens=list(s.tokens), split=_split(obj.get("split"), where),
                             number=obj.get("id") if isinstance(obj.get("id"), int) else None,
                             line=s.line)
        for ann in obj.get("annotations") or []:
            who = _name(ann.get("annotator"), where)
            item.votes[who] = list(s.annotations[ann["annotator"]])
            acc = _index_list(ann.get("accepted"), n, where, f"{who}: accepted")
            if acc:
                item.accepted[who] = acc
        if obj.get("derived") is not None:
            item.derived = _labels(obj["derived"], n, where, "derived")
        item.adjudications = _adjudications(obj.get("adjudications"), n, where)
        if obj.get("labels") is not None:
            item.gold = list(s.labels)
        out.append(item)
    return out


def _exact(meta_labels, tokens, text, spans, where: _Where) -> list[str | None]:
    """The record's labels: the exact ones of its ``gpsl`` metadata while the spans are still
    theirs, else the spans as BIO labels (``O`` elsewhere)."""
    offsets = _offsets(tokens)
    if meta_labels is not None:
        labs = _labels(meta_labels, len(tokens), where, "gpsl labels")
        mine = text_and_spans(gio.Sentence(tokens, labs, 1))
        if mine[0] == text and sorted(mine[2]) == sorted(spans):
            return labs
    return list(spans_to_labels(text, offsets, spans, source=where.source, line=where.line))


def _offsets(tokens) -> list[tuple[int, int]]:
    out, pos = [], 0
    for t in tokens:
        out.append((pos, pos + len(t[0])))
        pos += len(t[0]) + 1
    return out


def _span_list(raw, where: _Where, kind: str) -> list[tuple[int, int, str]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise where.bad(f"the spans must be a list, found {type(raw).__name__}")
    out = []
    for sp in raw:
        try:
            if kind == "doccano":
                a, b, tag = sp
            elif kind == "prodigy":
                a, b, tag = sp["start"], sp["end"], sp["label"]
            else:
                v = sp["value"]
                a, b, tag = v["start"], v["end"], (v.get("labels") or [None])[0]
            a, b = int(a), int(b)
        except (TypeError, ValueError, KeyError, IndexError):
            raise where.bad(f"bad span {sp!r}") from None
        if not isinstance(tag, str) or not tag:
            raise where.bad(f"span {sp!r} has no label")
        out.append((a, b, tag))
    return sorted(out)


def _sentence_of(meta: dict | None, text, where: _Where) -> VotedSentence:
    if not isinstance(text, str) or not text.strip():
        raise where.bad("the record has no text")
    if meta is not None and meta.get("tokens") is not None:
        tokens = _tokens(meta["tokens"], where)
        if " ".join(t[0] for t in tokens) != text:
            tokens = [(text[a:b],) for a, b in tokenize(text)]
    else:
        tokens = [(text[a:b],) for a, b in tokenize(text)]
    if not tokens:
        raise where.bad("the text has no tokens")
    number = meta.get("sentence") if meta else None
    return VotedSentence(tokens=tokens, split=_split(meta.get("split") if meta else None, where),
                         number=number if isinstance(number, int) else None, line=where.line or 1)


def _finish(item: VotedSentence, meta: dict | None, where: _Where, training: bool) -> None:
    if not meta or not training:
        return
    n = len(item.tokens)
    item.adjudications = _adjudications(meta.get("adjudications"), n, where)
    if meta.get("gold") is not None:
        item.gold = _labels(meta["gold"], n, where, "gold")


def _mapping(meta: dict | None, key: str) -> dict:
    got = (meta or {}).get(key)
    return got if isinstance(got, dict) else {}


def read_labelstudio(text: str, source: str) -> list[VotedSentence]:
    try:
        tasks = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InputError(f"not valid JSON ({getattr(exc, 'msg', exc)})", source=source) from None
    if not isinstance(tasks, list):
        raise InputError("a Label Studio export is a JSON list of tasks", source=source)
    out = []
    for k, task in enumerate(tasks, 1):
        where = _Where(source, None, f"task {k}")
        if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
            raise where.bad("task without data")
        meta = task["data"].get("gpsl")
        meta = meta if isinstance(meta, dict) else None
        item = _sentence_of(meta, task["data"].get("text"), where)
        names = _mapping(meta, "annotators")
        exact = _mapping(meta, "votes")
        anns = task.get("annotations") or task.get("completions") or []
        if not isinstance(anns, list):
            raise where.bad("annotations must be a list")
        for ann in anns:
            if not isinstance(ann, dict):
                raise where.bad("an annotation must be an object")
            by = ann.get("completed_by")
            if isinstance(by, dict):
                by = by.get("email") or by.get("id")
            who = names.get(str(by)) or (f"user {by}" if by is not None else "user")
            who = _name(who, where)
            spans = _span_list(ann.get("result"), where, "labelstudio")
            item.votes[who] = _exact(exact.get(who), item.tokens, task["data"]["text"],
                                     spans, where)
        for who, ts in _mapping(meta, "accepted").items():
            if who in item.votes:
                item.accepted[who] = _index_list(ts, len(item.tokens), where, "accepted")
        preds = task.get("predictions") or []
        for pred in preds if isinstance(preds, list) else []:
            if isinstance(pred, dict) and pred.get("model_version") == TRAINING_LABEL:
                spans = _span_list(pred.get("result"), where, "labelstudio")
                item.derived = _exact((meta or {}).get("labels"), item.tokens,
                                      task["data"]["text"], spans, where)
        _finish(item, meta, where, True)
        out.append(item)
    return out


def _json_records(text: str, source: str):
    for k, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise InputError(f"not valid JSON ({getattr(exc, 'msg', exc)})", source=source,
                             line=k) from None
        if not isinstance(rec, dict):
            raise InputError("each line must be a JSON object", source=source, line=k)
        yield k, rec


def read_records(text: str, source: str, fmt: str) -> list[VotedSentence]:
    """doccano or Prodigy JSONL: records of one sentence (the same ``gpsl.sentence``, one
    after another) are one sentence; a record without ``gpsl`` is a sentence of its own."""
    out: list[VotedSentence] = []
    current = None
    for k, rec in _json_records(text, source):
        where = _Where(source, k)
        if fmt == "prodigy" and rec.get("answer", "accept") != "accept":
            continue
        meta = rec.get("gpsl") if isinstance(rec.get("gpsl"), dict) else None
        key = (meta or {}).get("sentence")
        item = _sentence_of(meta, rec.get("text"), where)
        if current is not None and key is not None and key == current[0] and \
                current[1].tokens == item.tokens:
            item = current[1]
        else:
            out.append(item)
            current = (key, item)
        spans = _span_list(rec.get("label", rec.get("labels")) if fmt == "doccano"
                           else rec.get("spans"), where, fmt)
        who = rec.get("annotator") if fmt == "doccano" else rec.get("_annotator_id")
        labs = _exact((meta or {}).get("labels"), item.tokens, rec["text"], spans, where)
        if who is None and (meta or {}).get("kind") == "training":
            item.derived = labs
            _finish(item, meta, where, True)
            continue
        who = _name(who if who is not None else "import", where)
        if who in item.votes:
            raise where.bad(f"a second record of annotator {who!r} for this sentence")
        item.votes[who] = labs
        acc = _index_list((meta or {}).get("accepted"), len(item.tokens), where, "accepted")
        if acc:
            item.accepted[who] = acc
    return out


def read_votes(data: bytes | str, fmt: str, source: str = "<upload>", *,
               max_bytes: int | None = None, max_tokens: int | None = None
               ) -> list[VotedSentence]:
    """The sentences and votes of a file written by :func:`export_votes` (or by the tool
    named by ``fmt``); every problem is one InputError line naming the file and record.
    ``max_bytes``/``max_tokens``: the limits (:mod:`gpsl.limits`; None: the defaults)."""
    if fmt not in VOTE_FORMATS:
        raise InputError(f"unknown vote format {fmt!r}", source=source)
    if isinstance(data, bytes):
        limits.check_upload_size(len(data), limits.max_upload_bytes(max_bytes), source)
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 text (byte {exc.start})", source=source) from None
    if fmt == "crowd":
        items = read_crowd(data, source)
    elif fmt == "labelstudio":
        items = read_labelstudio(data, source)
    else:
        items = read_records(data, source, fmt)
    if not items:
        raise InputError("no sentences found", source=source)
    cap = limits.max_tokens(max_tokens)
    for item in items:
        if cap and len(item.tokens) > cap:
            raise InputError(f"sentence of {len(item.tokens)} tokens (the limit is {cap})",
                             source=source, line=item.line)
    return items


def import_votes(db: Database, project_id: int, items: Sequence[VotedSentence], *,
                 doc: str | None = None, add_labels: Sequence[str] = ()) -> int:
    """Append ``items`` to a project in one transaction (:func:`append`).  Returns how
    many sentences."""
    items = list(items)
    out = db.write(lambda conn: append(conn, project_id, items, doc, add_labels))
    db.analyze()  # the planner sees the votes just written
    return out


def append(conn, project_id: int, items: Sequence[VotedSentence], doc: str | None = None,
           add_labels: Sequence[str] = ()) -> int:
    """Inside a write transaction: append ``items``, every vote credited to its annotator
    (``import:...`` names stay imported labels; accepted suggestions stay accepted), every
    decision to its lead, the gold labels as gold; the training labels are derived by the
    project's rule.  A label outside the label set (and ``add_labels``) is refused
    (:class:`InputError` naming ``doc`` and the sentence's line).  Returns how many
    sentences."""
    source = doc or "<import>"
    projects.row(conn, project_id, " FOR UPDATE" if conn.dialect.name == "postgresql"
                 else "")  # the project row locked (NotFoundError without it)
    if add_labels:
        projects.extend_labels(conn, project_id, list(add_labels))
    known = set(loads(projects.row(conn, project_id)._mapping["labels"]))
    for item in items:
        used = [lab for labs in item.votes.values() for lab in labs]
        used += [lab for lab, _ in item.adjudications.values()] + list(item.gold or ())
        unknown = sorted({lab for lab in used if lab is not None and lab not in known})
        if unknown:
            raise InputError(f"label {unknown[0]!r} is not in the project's label set",
                             source=source, line=item.line)
    at, n_added = now(), 0
    for split in SPLITS:
        part = [item for item in items if item.split == split]
        if not part:
            continue
        gold = [item.gold for item in part] if split == "heldout" else None
        n = sentences.insert(conn, project_id, [
            {"tokens": item.tokens, "line": item.line} for item in part], split, doc,
            "import", gold)
        ids = sentences.last_ids(conn, project_id, n)
        for sid, item in zip(ids, part):
            rows = []
            for who, labs in item.votes.items():
                accepted = set(item.accepted.get(who, ()))
                src = "import" if validate.is_import(who) else None
                for t, lab in enumerate(labs):
                    if lab is not None:
                        rows.append({"p": project_id, "s": sid, "t": t, "a": who, "l": lab,
                                     "at": at, "src": src or ("accepted" if t in accepted
                                                              else "human")})
            votes.add_imported(conn, rows)
            for t, (lab, lead) in item.adjudications.items():
                votes.set_adjudication(conn, sid, t, lab, lead, at)
            label_writes.refresh_derived(conn, sid, range(len(item.tokens)))
        n_added += n
    return n_added
