"""Crowd folders in the app: the one-folder-per-annotator layout of a crowd, read from an
upload and imported as a project or into one.

The layout (:mod:`gpsl.io.crowd_raw`)::

    SPLIT/ground_truth/DOC.txt               the reference tokens and gold labels
    SPLIT/mturk_train_data/WORKER/DOC.txt    the same document as one worker labeled it

**Reading** (:func:`read_upload`): the files of a folder upload or one ``.zip`` of the folder
are read by :func:`gpsl.io.crowd_upload.read_upload` (paths checked, a private temporary
folder, :func:`gpsl.io.crowd_raw.read_crowd_folder`, which aligns every worker's tokens to the
gold and counts the votes kept and dropped by reason). Every bad file is one line naming its
path inside the upload (:class:`~gpsl.io.crowd_raw.CrowdFolderError`); a worker folder whose
name cannot be a person's name is one too (a worker becomes an annotator of the store), and
the label set is the gold's and the votes' (BIO: every entity type with both its labels).

**Importing** (:func:`import_folder`, :func:`create_project`): one transaction, so a failure
writes nothing. The gold is never a vote:

* ``heldout`` (a share of the documents, whole documents spread evenly over the sorted
  document names, :func:`heldout_documents`): their sentences become held-out sentences and
  their gold labels the held-out gold that the Train run calibrates on and the Confidence
  page evaluates against. The workers' votes on these documents are not stored (a vote on a
  held-out sentence would be clamped into the predictions the evaluation reads); they are
  counted in the summary (``votes_held_out``). With ``heldout=0`` every vote is imported.
* every other document: training sentences (one token column, no file labels) with each
  worker's aligned labels as that worker's votes (credited to the worker, as if they had
  labeled in the app: every figure of the Team page counts them). Their gold is not stored.
  Sentences that no worker labeled are training sentences without labels (the queue's).

With ``crowd=True`` (the facade's default) the crowd model (Dawid-Skene,
:func:`gpsl.annotation.labeling.team.fit_crowd`: the Team page's reliability figures) is fitted
right after the import, the project resolves disputed tokens by it (the hard label a page shows) and
trains on the joint model's posterior (the training rule ``joint``,
:mod:`gpsl.annotation.training.joint_labels`, as ``gpsl train --crowd``): a second step, after the
import's transaction, so a failure there leaves the imported project on the majority rule.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpsl.annotation.corpus import projects
from gpsl.annotation.interchange import vote_files
from gpsl.annotation.interchange.vote_files import VotedSentence
from gpsl.annotation.labeling import team
from gpsl.annotation.store import validate
from gpsl.annotation.store.db import Database
from gpsl.errors import InputError
from gpsl.io import CrowdSentence, crowd_upload
from gpsl.io.crowd_raw import AlignmentReport, CrowdFolderError
from gpsl.tags import entity_types, scheme_of, sort_labels

#: the share of documents held out by default (their gold: the held-out evaluation)
DEFAULT_HELDOUT = 0.1
MAX_HELDOUT = 0.5
#: the feature set of a crowd project (one word column)
TEMPLATE = "ner"


@dataclass(frozen=True)
class CrowdFolder:
    """A crowd folder read from an upload: its gold sentences with the workers' aligned
    votes (``sentences``, :class:`gpsl.io.CrowdSentence`, ``id`` ``DOC:k``), what the
    alignment kept and dropped (``report``), the label set of the gold and the votes (BIO
    labels: every entity type with both its ``B-`` and ``I-`` label)."""

    name: str
    sentences: tuple[CrowdSentence, ...]
    report: AlignmentReport
    labels: tuple[str, ...]

    @property
    def documents(self) -> list[str]:
        return sorted({document_of(s) for s in self.sentences})

    @property
    def workers(self) -> int:
        return self.report.workers

    @property
    def votes(self) -> int:
        return self.report.votes

    @property
    def dropped(self) -> dict[str, int]:
        """Worker tokens that gave no vote, by reason (:data:`gpsl.io.crowd_raw.REASONS`)."""
        return {k: int(v) for k, v in sorted(self.report.dropped.items()) if v}


@dataclass(frozen=True)
class CrowdImport:
    """What an import wrote: documents, sentences and votes by split, the workers, the
    votes on held-out documents left out, the alignment's drops, the training rule."""

    project_id: int
    documents: int
    heldout_documents: int
    train_sentences: int
    heldout_sentences: int
    gold_tokens: int
    votes: int
    votes_held_out: int
    workers: int
    dropped: dict = field(default_factory=dict)
    rule: str = ""


def document_of(sentence: CrowdSentence) -> str:
    return str(sentence.id).rsplit(":", 1)[0]


# ----------------------------------------------------------------------------- reading


def read_upload(files: Sequence[tuple[str, bytes]], source: str | None = None) -> CrowdFolder:
    """A crowd folder from an upload: the files of a folder (``(path, bytes)``) or a single
    ``.zip`` of it (read by :func:`gpsl.io.crowd_upload.read_upload`), every worker's name a
    person's name. :class:`~gpsl.io.crowd_raw.CrowdFolderError` lists every bad file (one
    line each, the path inside the upload), InputError a problem with the upload itself."""
    name, sentences, report = crowd_upload.read_upload(files, source)
    bad = []
    for w in report.per_worker:
        try:
            validate.person(w, "worker name")
        except InputError as exc:
            bad.append(InputError(exc.message, source=f"{name}/mturk_train_data/{w}"))
    if bad:
        raise CrowdFolderError(bad)
    labels = {lab for s in sentences for lab in s.labels if lab is not None}
    labels |= {lab for s in sentences for labs in s.annotations.values() for lab in labs
               if lab is not None}
    if scheme_of(labels) == "BIO":  # every entity type with both its B- and I- label
        labels |= {f"{p}-{kind}" for kind in entity_types(labels) for p in "BI"}
    return CrowdFolder(name, tuple(sentences), report, tuple(sort_labels(labels)))


def read_path(path) -> CrowdFolder:
    """A crowd folder read in place (scripts, benchmarks, tests): ``path`` is the split
    folder or a folder holding one."""
    root = Path(path)
    files = [(str(p.relative_to(root.parent)), p.read_bytes())
             for p in sorted(root.rglob("*")) if p.is_file()]
    return read_upload(files, source=root.name)


# ----------------------------------------------------------------------------- importing


def heldout_documents(documents: Iterable[str], share: float) -> set[str]:
    """``round(share * n)`` of the ``n`` documents, spread evenly over their sorted names
    (at least one document stays for training)."""
    try:
        share = float(share)
    except (TypeError, ValueError):
        raise InputError(f"the held-out share must be a number, got {share!r}",
                         source="<import>") from None
    if not (math.isfinite(share) and 0.0 <= share <= MAX_HELDOUT):
        raise InputError(f"the held-out share must be between 0 and {MAX_HELDOUT}",
                         source="<import>")
    docs = sorted(set(documents))
    k = min(int(round(share * len(docs))), max(len(docs) - 1, 0))
    return {docs[int((j + 0.5) * len(docs) / k)] for j in range(k)} if k else set()


def plan(folder: CrowdFolder, heldout: float = DEFAULT_HELDOUT
         ) -> tuple[list[VotedSentence], dict]:
    """The sentences an import appends (the module docstring's rule) and its figures."""
    held = heldout_documents(folder.documents, heldout)
    items, counts = [], Counter()
    for s in folder.sentences:
        n_votes = sum(lab is not None for labs in s.annotations.values() for lab in labs)
        if document_of(s) in held:
            items.append(VotedSentence(tokens=list(s.tokens), gold=list(s.labels),
                                       split="heldout", line=s.line))
            counts["heldout_sentences"] += 1
            counts["gold_tokens"] += sum(lab is not None for lab in s.labels)
            counts["votes_held_out"] += n_votes
        else:
            items.append(VotedSentence(tokens=list(s.tokens), split="train", line=s.line,
                                       votes={w: list(labs)
                                              for w, labs in s.annotations.items()}))
            counts["train_sentences"] += 1
            counts["votes"] += n_votes
    figures = {"documents": len(folder.documents), "heldout_documents": len(held),
               "workers": folder.workers, "dropped": folder.dropped,
               **{k: int(counts[k]) for k in ("train_sentences", "heldout_sentences",
                                              "gold_tokens", "votes", "votes_held_out")}}
    return items, figures


def import_folder(db: Database, project_id: int, folder: CrowdFolder, *,
                  heldout: float = DEFAULT_HELDOUT, add_labels: Sequence[str] = ()) -> dict:
    """Append a crowd folder to a one-column project in one transaction (the module
    docstring's rule); ``add_labels`` join its label set in the same transaction. Returns
    the figures of :func:`plan` with ``project_id``."""
    items, figures = plan(folder, heldout)

    def tx(conn):
        n_columns = projects.token_columns(conn, project_id)
        if n_columns not in (None, 1):
            raise InputError(f"this project's tokens have {n_columns} columns; a crowd "
                             "folder has one (the word): import it as a new project",
                             source=folder.name)
        vote_files.append(conn, project_id, items, folder.name, add_labels)
        return project_id

    project_id = db.write(tx)
    db.analyze()  # the planner sees the votes just written
    return {"project_id": project_id, **figures}


def create_project(db: Database, name: str, folder: CrowdFolder, *,
                   heldout: float = DEFAULT_HELDOUT, offsets: Sequence[int] = (-1, 1),
                   template: str = TEMPLATE) -> dict:
    """A new project (the folder's labels, the ``ner`` feature set) with the folder's
    sentences and votes, all in one transaction. Returns the figures of :func:`plan` with
    ``project_id``."""
    items, figures = plan(folder, heldout)
    if template and template.strip():
        validate.template(template, 1)

    def tx(conn):
        db.lock(conn, 0x70726A)  # as projects.create: concurrent creates of one name
        pid = projects.insert(conn, name, list(folder.labels), template, offsets, "linear", {})
        vote_files.append(conn, pid, items, folder.name)
        return pid

    project_id = db.write(tx)
    db.analyze()  # the planner sees the votes just written
    return {"project_id": project_id, **figures}


def use_crowd_model(db: Database, project_id: int) -> str:
    """Fit the crowd model on the project's votes and resolve disputed tokens by it, and
    train on the joint model's posterior; returns the training rule in words."""
    team.fit_crowd(db, project_id)
    return team.set_settings(db, project_id, resolve="crowd", joint=True)["rule"]


def finish(db: Database, figures: dict, crowd: bool = True) -> CrowdImport:
    """The import's record; with ``crowd`` and votes, the crowd model fitted and used
    first (:func:`use_crowd_model`)."""
    pid = figures["project_id"]
    if crowd and figures["votes"]:
        rule = use_crowd_model(db, pid)
    else:
        rule = team.settings_of(projects.get(db, pid) or {})["rule"]
    return CrowdImport(**figures, rule=rule)
