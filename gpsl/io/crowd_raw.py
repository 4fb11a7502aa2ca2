r"""Crowd votes from the one-folder-per-annotator layout, aligned to the gold tokens.

The layout (Rodrigues et al. 2014's Mechanical Turk NER data, as Nguyen et al. 2017 ship it)::

    SPLIT/ground_truth/DOC.txt               the reference tokens (and gold labels) of a document
    SPLIT/mturk_train_data/WORKER/DOC.txt    the same document as one worker labeled it

Every file has ``token label`` lines (split at the last space: a token may hold spaces) and a
blank line between sentences. :func:`read_crowd_folder` returns the gold sentences as
:class:`gpsl.io.CrowdSentence` (``labels`` = the gold, ``annotations`` = one label or ``None``
per gold token for every worker with a vote in the sentence) and an :class:`AlignmentReport`
of the votes kept and dropped.

Alignment
---------
The crowd interface tokenised some documents differently from the reference, so a worker's
``k``-th sentence is often not the gold ``k``-th sentence token for token. The published JSONL
(``val.crowd.jsonl``) keeps a worker's sentence only when its tokens are identical and drops
about 16% of them. Here a worker's whole token stream of a document is aligned to the gold
stream instead, and every gold token that aligns gets the worker's vote:

1. Token texts are compared after removing a trailing type marker ``/TYPE`` (``YORK/LOC``,
   ``Hutu/B-MISC``) whose ``TYPE`` is a label or an entity type of the label set; the label
   column is the vote, the marker is never read as one. Empty worker tokens (a line `` B-LOC``)
   are dropped.
2. The two streams are matched by a longest-matching-blocks diff (:class:`difflib.SequenceMatcher`):
   tokens in equal blocks align one to one.
3. Inside a block that differs, the texts are compared without spaces. When they are the same
   characters, each gold token is matched through character offsets:

   * one worker token with the same span: one to one;
   * several worker tokens exactly covering it (a split, ``U.S|.`` for ``U.S.``): the first
     piece's label when every piece is ``O`` or every piece has the same entity type; else
     (``Russia|n`` labeled ``B-LOC O`` for ``Russian``: an entity on part of the word, or
     pieces of several types) the worker did not label the token, and the vote is dropped;
   * a worker token covering it and more (a merge, ``2.`` for ``2`` ``.``): the worker's label
     on the first gold token it covers, its continuation (``B-X`` -> ``I-X``) on the others;
   * anything else (spans crossing each other) is dropped.

   When the characters differ, the block's worker tokens are dropped (``text differs``).

Every drop is counted by reason in the report; nothing is guessed beyond these rules.
"""

from __future__ import annotations

import difflib
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from gpsl import limits
from gpsl.errors import InputError
from gpsl.io.crowd import CrowdSentence
from gpsl.io.source import read_source, text_lines

__all__ = ["AlignmentReport", "CrowdFolderError", "align_tokens", "find_split",
           "read_crowd_folder"]

GOLD_DIR = "ground_truth"
WORKERS_DIR = "mturk_train_data"
_LABEL = re.compile(r"^(?:O|[A-Za-z]+-[A-Za-z][A-Za-z0-9_.]*)$")

#: reasons a worker token does not become a vote (keys of ``AlignmentReport.dropped``)
REASONS = ("empty token", "text differs", "split labeled in part", "spans cross")


class CrowdFolderError(InputError):
    """One or more bad files in a crowd folder: ``problems`` holds one ``file:line: problem``
    line per bad file; ``str()`` is the first of them and how many more there are."""

    def __init__(self, problems: list[InputError]):
        self.problems = list(problems)
        first = self.problems[0]
        more = len(self.problems) - 1
        tail = f" (and {more} more bad file{'s' if more > 1 else ''})" if more else ""
        super().__init__(first.message + tail, source=first.source, line=first.line)

    def lines(self) -> list[str]:
        """One line per bad file."""
        return [str(p) for p in self.problems]


@dataclass
class AlignmentReport:
    """What :func:`read_crowd_folder` kept and dropped.

    ``worker_tokens``: non-empty-or-empty token lines read from worker files; ``votes``: votes
    kept (one per gold token and worker); ``aligned``: how those votes were made (``equal``
    blocks, ``same span`` inside a differing block, ``split``, ``merge``); ``dropped``: worker
    tokens that gave no vote, by reason; ``identical_votes``: the votes the identical-sentence
    rule of the published JSONL would keep (for comparison); ``per_worker``: ``{worker:
    {"votes", "dropped", "documents"}}``.
    """

    split: str = ""
    documents: int = 0
    gold_sentences: int = 0
    gold_tokens: int = 0
    workers: int = 0
    worker_documents: int = 0
    worker_tokens: int = 0
    votes: int = 0
    identical_votes: int = 0
    sentences_kept: int = 0
    sentences_without_votes: int = 0
    aligned: Counter = field(default_factory=Counter)
    dropped: Counter = field(default_factory=Counter)
    per_worker: dict = field(default_factory=dict)

    @property
    def dropped_tokens(self) -> int:
        return int(sum(self.dropped.values()))

    def as_dict(self) -> dict:
        return {"split": self.split, "documents": self.documents,
                "gold_sentences": self.gold_sentences, "gold_tokens": self.gold_tokens,
                "workers": self.workers, "worker_documents": self.worker_documents,
                "worker_tokens": self.worker_tokens, "votes": self.votes,
                "identical_votes": self.identical_votes,
                "dropped_tokens": self.dropped_tokens,
                "sentences_kept": self.sentences_kept,
                "sentences_without_votes": self.sentences_without_votes,
                "aligned": dict(self.aligned), "dropped": dict(self.dropped),
                "per_worker": self.per_worker}

    def summary(self) -> str:
        """One line: votes kept and dropped, against the identical-sentence rule."""
        why = ", ".join(f"{k} {v}" for k, v in sorted(self.dropped.items()) if v)
        return (f"{self.votes} votes kept from {self.worker_tokens} worker tokens of "
                f"{self.workers} workers on {self.worker_documents} documents "
                f"({self.dropped_tokens} tokens dropped{': ' + why if why else ''}); the "
                f"identical-sentence rule keeps {self.identical_votes}; "
                f"{self.sentences_kept} of {self.gold_sentences} gold sentences have votes")


# --------------------------------------------------------------------------- files


def _parse_file(path: Path, encoding: str, labels: set[str] | None, max_line: int | None,
                gold: bool) -> list[list[tuple[str, str, int]]]:
    """Sentences of ``(token, label, line)`` of one ``token label`` file; InputError on a
    bad file (empty, binary, a line without a label, a malformed or unknown label)."""
    name = str(path)
    text = read_source(path, encoding, name)
    sents: list[list[tuple[str, str, int]]] = []
    cur: list[tuple[str, str, int]] = []
    for lineno, line in enumerate(text_lines(text), start=1):
        limits.check_line_length(len(line), max_line, source=name, line=lineno)
        if not line.strip():
            if cur:
                sents.append(cur)
                cur = []
            continue
        tok, sep, lab = line.rstrip().rpartition(" ")
        if not sep:
            tok, sep, lab = line.rstrip().rpartition("\t")
        if not sep:
            raise InputError(f"expected 'token label', found {line.strip()[:40]!r}",
                             source=name, line=lineno)
        if not _LABEL.match(lab):
            raise InputError(f"bad label {lab[:40]!r} (expected O or PREFIX-TYPE)",
                             source=name, line=lineno)
        if labels is not None and lab not in labels:
            raise InputError(f"label {lab!r} is not in the label set", source=name,
                             line=lineno)
        if gold and not tok.strip():
            raise InputError("empty token in the ground truth", source=name, line=lineno)
        cur.append((tok, lab, lineno))
    if cur:
        sents.append(cur)
    if not sents:
        raise InputError("empty file (no 'token label' lines)", source=name)
    return sents


def find_split(path: str | os.PathLike) -> Path:
    """The split folder (holding ``ground_truth/``) of ``path``: ``path`` itself or its only
    subfolder with one. InputError when there is none or several."""
    root = Path(path)
    if not root.is_dir():
        raise InputError("not a folder", source=str(path))
    if (root / GOLD_DIR).is_dir():
        return root
    subs = sorted(p for p in root.iterdir() if p.is_dir() and (p / GOLD_DIR).is_dir())
    if not subs:
        raise InputError(f"no {GOLD_DIR}/ folder (expected SPLIT/{GOLD_DIR}/DOC.txt and "
                         f"SPLIT/{WORKERS_DIR}/WORKER/DOC.txt)", source=str(path))
    if len(subs) > 1:
        raise InputError(f"several splits ({', '.join(p.name for p in subs)}): give one "
                         f"folder, e.g. {subs[0]}", source=str(path))
    return subs[0]


def _workers_dir(split: Path) -> Path:
    cand = split / WORKERS_DIR
    if cand.is_dir():
        return cand
    others = sorted(p for p in split.iterdir() if p.is_dir() and p.name != GOLD_DIR)
    if len(others) == 1:
        return others[0]
    raise InputError(f"no {WORKERS_DIR}/ folder of worker folders", source=str(split))


# --------------------------------------------------------------------------- alignment


def _marker(types: set[str]) -> re.Pattern:
    alts = "|".join(sorted((re.escape(t) for t in types), key=len, reverse=True))
    return re.compile(rf"/(?:{alts})$") if alts else re.compile(r"(?!x)x")


def _continuation(label: str) -> str:
    return "I-" + label[2:] if label.startswith("B-") else label


def _entity_type(label: str) -> str | None:
    return None if label == "O" else label.split("-", 1)[-1]


def align_tokens(gold: list[str], worker: list[str], worker_labels: list[str]):
    """Align a worker's token stream to the gold stream (the module docstring's rules).

    ``gold`` and ``worker`` are normalised token texts (markers removed, no empty worker
    token). Returns ``(votes, how, dropped)``: ``votes[i]`` the worker's label for gold token
    ``i`` or ``None``, ``how`` a Counter of the ways votes were made, ``dropped`` a Counter of
    the reasons worker tokens gave no vote."""
    votes: list[str | None] = [None] * len(gold)
    how: Counter = Counter()
    dropped: Counter = Counter()
    sm = difflib.SequenceMatcher(None, gold, worker, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            for i, j in zip(range(i1, i2), range(j1, j2)):
                votes[i] = worker_labels[j]
            how["equal"] += i2 - i1
            continue
        if j2 == j1:
            continue  # gold tokens the worker does not have
        g_txt = ["".join(t.split()) for t in gold[i1:i2]]
        w_txt = ["".join(t.split()) for t in worker[j1:j2]]
        if i2 == i1 or "".join(g_txt) != "".join(w_txt):
            dropped["text differs"] += j2 - j1
            continue
        used = _char_align(g_txt, w_txt, worker_labels[j1:j2], votes, i1, how, dropped)
        unused = (j2 - j1) - used
        if unused > 0:
            dropped["spans cross"] += unused
    return votes, how, dropped


def _char_align(g_txt, w_txt, w_lab, votes, i0, how, dropped) -> int:
    """Match gold tokens to worker tokens through character offsets (same characters);
    returns how many worker tokens were used."""
    def spans(toks):
        out, pos = [], 0
        for t in toks:
            out.append((pos, pos + len(t)))
            pos += len(t)
        return out

    gs, ws = spans(g_txt), spans(w_txt)
    used: set[int] = set()
    split_conflict: set[int] = set()
    for i, (a, b) in enumerate(gs):
        if a == b:
            continue
        over = [j for j, (c, d) in enumerate(ws) if c < b and d > a]
        if not over:
            continue
        if len(over) == 1:
            j = over[0]
            c, d = ws[j]
            if (c, d) == (a, b):
                votes[i0 + i] = w_lab[j]
                how["same span"] += 1
                used.add(j)
            elif c <= a and d >= b:
                votes[i0 + i] = w_lab[j] if c == a else _continuation(w_lab[j])
                how["merge"] += 1
                used.add(j)
            continue
        if ws[over[0]][0] == a and ws[over[-1]][1] == b:
            labs = [w_lab[j] for j in over]
            types = {_entity_type(v) for v in labs}
            if len(types) > 1:  # pieces of several types, or an entity on part of the word
                split_conflict.update(over)
                continue
            votes[i0 + i] = labs[0]
            how["split"] += 1
            used.update(over)
    conflict = split_conflict - used
    dropped["split labeled in part"] += len(conflict)
    return len(used) + len(conflict)


def _marker_labels(kept, raw, marker):
    """``marker_votes``: a token ``WORD/TYPE`` labeled ``O`` is a vote for ``TYPE``
    (``I-TYPE`` after a token of the same type, else ``B-TYPE``)."""
    out, prev_type = [], None
    for (t, lab, ln), r in zip(kept, raw):
        m = marker.search(r.strip())
        typ = m.group(0)[1:].split("-", 1)[-1] if m else None
        if lab == "O" and typ:
            lab = ("I-" if prev_type == typ else "B-") + typ
        prev_type = _entity_type(lab)
        out.append((t, lab, ln))
    return out


# --------------------------------------------------------------------------- the reader


def read_crowd_folder(path: str | os.PathLike, *, labels=None, encoding: str = "utf-8",
                      min_aligned: float = 0.5, keep_unvoted: bool = False,
                      max_tokens: int | None = None, marker_votes: bool = False):
    """Crowd sentences from ``SPLIT/ground_truth`` + ``SPLIT/mturk_train_data/WORKER`` files.

    ``path`` is the split folder or a folder holding exactly one split. Returns
    ``(sentences, report)``: the gold sentences (``tokens`` one column, ``labels`` the gold,
    ``id`` ``DOC:k``, ``line`` the line of the first token in the gold file) with the worker
    votes aligned as the module docstring says, and an :class:`AlignmentReport`. Sentences
    without any vote are left out unless ``keep_unvoted``. ``marker_votes``: a worker token
    ``WORD/TYPE`` labeled ``O`` counts as a vote for ``TYPE`` (``B-``, or ``I-`` after a
    token of that type); off by default, the label column being the vote (in the CoNLL crowd
    four workers wrote ``/LOC`` on 1,370 tokens, all of them locations in the gold; the
    option turns 1,115 of their ``O`` votes into location votes).

    Hidden files (``.DS_Store``) are skipped. Every bad file is one line
    ``file:line: problem``; all of them are raised together as a
    :class:`CrowdFolderError`: an empty or binary file, a line without a label, a label that is
    not ``O`` or ``PREFIX-TYPE`` (or not in ``labels``), a worker file for a document
    ``ground_truth/`` lacks, a worker file of which fewer than ``min_aligned`` of the tokens
    align (another document's labels), a worker folder without files.
    """
    split = find_split(path)
    gold_dir, workers_dir = split / GOLD_DIR, _workers_dir(split)
    known = None if labels is None else {str(v) for v in labels}
    max_line = limits.max_line_chars()
    max_tok = limits.max_tokens(max_tokens)
    problems: list[InputError] = []

    gold: dict[str, list[list[tuple[str, str, int]]]] = {}
    for f in sorted(gold_dir.iterdir()):
        if not f.is_file() or f.name.startswith("."):
            continue
        try:
            gold[f.name] = _parse_file(f, encoding, known, max_line, gold=True)
            for s in gold[f.name]:
                limits.check_sentence_length(len(s), max_tok, source=str(f), line=s[0][2])
        except InputError as exc:
            problems.append(exc)
    if not gold and not problems:
        raise InputError("no documents in the ground truth", source=str(gold_dir))

    workers = sorted(p for p in workers_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not workers:
        raise InputError("no worker folders", source=str(workers_dir))
    parsed: dict[str, dict[str, list]] = {}
    for wdir in workers:
        files = sorted(p for p in wdir.iterdir() if p.is_file() and not p.name.startswith("."))
        if not files:
            problems.append(InputError("worker folder without files", source=str(wdir)))
            continue
        for f in files:
            try:
                if f.name not in gold:
                    if (gold_dir / f.name).exists():
                        continue  # the gold file is bad: reported already
                    raise InputError(f"no {GOLD_DIR}/{f.name} for this worker file",
                                     source=str(f))
                parsed.setdefault(wdir.name, {})[f.name] = _parse_file(
                    f, encoding, known, max_line, gold=False)
            except InputError as exc:
                problems.append(exc)
    if problems:
        raise CrowdFolderError(problems)

    label_set = {lab for doc in gold.values() for s in doc for _, lab, _ in s}
    label_set |= {lab for docs in parsed.values() for doc in docs.values() for s in doc
                  for _, lab, _ in s}
    marker = _marker(label_set | {t for t in map(_entity_type, label_set) if t})

    def norm(tok: str) -> str:
        return marker.sub("", tok.strip()) or tok.strip()

    report = AlignmentReport(split=split.name, documents=len(gold),
                             workers=len(parsed))
    gold_norm = {d: [norm(t) for s in doc for t, _, _ in s] for d, doc in gold.items()}
    # votes[doc][worker] = one label or None per gold token of the document
    doc_votes: dict[str, dict[str, list[str | None]]] = {d: {} for d in gold}
    for wname, docs in parsed.items():
        per = {"votes": 0, "dropped": 0, "documents": len(docs)}
        for dname, wsents in docs.items():
            report.worker_documents += 1
            toks = [(t, lab, ln) for s in wsents for t, lab, ln in s]
            report.worker_tokens += len(toks)
            empty = sum(1 for t, _, _ in toks if not t.strip())
            kept = [(norm(t), lab, ln) for t, lab, ln in toks if t.strip()]
            if marker_votes:
                kept = _marker_labels(kept, [t for t, _, _ in toks if t.strip()], marker)
            g = gold_norm[dname]
            lab_votes, how, dropped = align_tokens(g, [t for t, _, _ in kept],
                                                   [lab for _, lab, _ in kept])
            dropped["empty token"] += empty
            n_votes = sum(v is not None for v in lab_votes)
            if kept and n_votes < min_aligned * min(len(kept), len(g)):
                problems.append(InputError(
                    f"does not match {GOLD_DIR}/{dname}: {n_votes} of {len(kept)} tokens "
                    "align", source=str(workers_dir / wname / dname)))
                continue
            doc_votes[dname][wname] = lab_votes
            report.aligned.update(how)
            report.dropped.update(dropped)
            report.votes += n_votes
            per["votes"] += n_votes
            per["dropped"] += sum(dropped.values())
            gs = gold[dname]
            for k, sent in enumerate(gs):
                if k < len(wsents) and [t for t, _, _ in wsents[k]] == [t for t, _, _ in sent]:
                    report.identical_votes += len(sent)
        report.per_worker[wname] = per
    if problems:
        raise CrowdFolderError(problems)

    out: list[CrowdSentence] = []
    for dname, doc in gold.items():
        pos = 0
        for k, sent in enumerate(doc):
            L = len(sent)
            ann = {}
            for wname, lab_votes in doc_votes[dname].items():
                part = lab_votes[pos:pos + L]
                if any(v is not None for v in part):
                    ann[wname] = part
            pos += L
            report.gold_sentences += 1
            report.gold_tokens += L
            if not ann:
                report.sentences_without_votes += 1
                if not keep_unvoted:
                    continue
            report.sentences_kept += 1
            out.append(CrowdSentence([(t,) for t, _, _ in sent], [lab for _, lab, _ in sent],
                                     sent[0][2], f"{Path(dname).stem}:{k + 1}",
                                     annotations=dict(sorted(ann.items()))))
    return out, report
