"""The thin facade the pages (and scripts) use: one :class:`Store` object whose methods
delegate to the modules of :mod:`gpsl.annotation`.  It holds no connection of its own
beyond the engine's pool, so one instance may be shared by Streamlit's script threads.

Its read methods return the store's rows (dicts); :attr:`Store.reports` returns what the
pages show as typed records (:mod:`gpsl.annotation.reports`).  The services it calls take
the database, or its :class:`~gpsl.annotation.store.owned.Home` (the database and the store's own
folder of files), never the facade."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from gpsl import limits
from gpsl.annotation import reports
from gpsl.annotation.corpus import predictions, projects, search, sentences, stats
from gpsl.annotation.facade_team import TeamFacade
from gpsl.annotation.interchange import crowd_folders, exports, imports, vote_files
from gpsl.annotation.labeling import label_writes, queue, scoring, votes
from gpsl.annotation.permissions import Accepted, Blind, Role, Shows, door_only, requires
from gpsl.annotation.store import owned, store_limits, validate
from gpsl.annotation.store.db import Database
from gpsl.annotation.store.processes import worker_alive
from gpsl.annotation.store.store_errors import NotFoundError
from gpsl.annotation.training import jobs, spares, summaries, versions
from gpsl.annotation.training.pipeline import TrainConfig
from gpsl.io import Sentence


class Store(TeamFacade):
    """The annotation store at ``target``: a SQLite file path or a database URL
    (``postgresql+psycopg://...``).  ``timeout``: seconds to wait for locks before
    :class:`~gpsl.annotation.store.db.StoreBusyError`.  The team's methods (the door, accounts,
    sessions, team settings and figures) are :class:`~.facade_team.TeamFacade`'s."""

    def __init__(self, target: str | os.PathLike, *, timeout: float = 30.0,
                 models_root: str | os.PathLike | None = None):
        self.db = Database(target, timeout=timeout)
        self.home = owned.Home(self.db, models_root)  # what the services take
        self.target = self.db.target
        self.path = self.db.path
        self.timeout = self.db.timeout
        self.models_base = self.home.models_base

    @property
    def store_id(self) -> str:
        """The store's own id (:mod:`gpsl.annotation.store.owned`)."""
        return owned.store_id(self.db)

    @property
    def models_root(self) -> Path:
        """This store's own folder of model files, progress files and locks:
        ``<models base>/store-<store id>`` (:mod:`gpsl.annotation.store.owned`)."""
        return self.home.models_root

    @requires(Role.LEAD)
    def own_root(self, base=None) -> Path:
        """This store's own folder under ``base`` (default: the store's models base)."""
        return self.home.own_root(base)

    @requires(Role.LEAD)
    def model_path(self, version_id: int) -> Path:
        """The version's model folder, refused with one line when missing or another
        store's (:func:`gpsl.annotation.store.owned.model_path`)."""
        version = self.get_model_version(version_id)
        if version is None:
            raise NotFoundError(f"no model version with id {version_id}")
        return owned.model_path(self.models_root, version)

    @property
    def where(self) -> str:
        return self.db.where

    @property
    def dialect(self) -> str:
        return self.db.dialect

    @door_only
    def close(self) -> None:
        spares.drop(self.target)  # its spare worker (gpsl.annotation.training.spares), if it has
                                    # one
        self.db.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self) -> dict:
        return {"target": self.target, "timeout": self.timeout,
                "models_root": str(self.models_base)}

    def __setstate__(self, state) -> None:
        self.__init__(state["target"], timeout=state["timeout"],
                      models_root=state["models_root"])

    def __repr__(self) -> str:
        return f"Store({self.where!r})"

    @property
    def reports(self) -> reports.Reports:
        """What the pages show, as typed records."""
        return reports.Reports(self.home)

    # projects
    @requires(Role.LEAD)
    def create_project(self, name, labels, template="", offsets=(-1, 1), kernel="linear",
                       settings=None, **kw) -> int:
        return projects.create(self.db, name, labels, template, offsets, kernel, settings, **kw)

    @requires(Role.LEAD, import_credit="annotator")
    def create_project_from_sentences(self, name, sentences_, labels, template, offsets,
                                      kernel="linear", **kw) -> int:
        """From a list of sentences, or an :class:`imports.Upload` (written chunk by chunk)."""
        make = imports.create_project if isinstance(sentences_, imports.Upload) \
            else projects.create_from_sentences
        return make(self.db, name, sentences_, labels, template, offsets, kernel, **kw)

    @requires(Role.LEAD)
    def create_sample_copy(self, name: str, sample_dir) -> int:
        return projects.create_sample(self.db, name, sample_dir)

    @requires(Role.LEAD)
    def ensure_sample_project(self, sample_dir) -> int:
        return projects.ensure_sample(self.db, sample_dir)

    @requires(Role.ANNOTATOR, shows=Shows.MEMBER_PROJECTS)
    def list_projects(self) -> list[dict]:
        return projects.list_all(self.db)

    @requires(Role.ANNOTATOR, shows=Shows.NO_CROWD)
    def get_project(self, project_id: int) -> dict | None:
        return projects.get(self.db, project_id)

    @requires(Role.LEAD)
    def update_project(self, project_id: int, **fields) -> dict:
        return projects.update(self.db, project_id, **fields)

    @requires(Role.LEAD)
    def delete_project(self, project_id: int) -> bool:
        return projects.delete(self.db, project_id)

    # sentences
    @requires(Role.LEAD, import_credit="annotator")
    def add_sentences(self, project_id: int, items, **kw) -> int:
        return projects.add_sentences(self.db, project_id, items, **kw)

    @requires(Role.LEAD)
    def set_gold(self, sentence_id: int, gold: Sequence[str | None]) -> None:
        sentences.set_gold(self.db, sentence_id, gold)

    @requires(Role.LEAD)
    def get_sentence(self, sentence_id: int) -> dict | None:
        return sentences.get(self.db, sentence_id)

    @requires(Role.LEAD)
    def get_sentences(self, project_id: int, split: str | None = None, offset: int = 0,
                      limit: int | None = None) -> list[dict]:
        return sentences.page(self.db, project_id, split, offset, limit)

    @requires(Role.ANNOTATOR)
    def sentence_count(self, project_id: int, split: str | None = None) -> int:
        return sentences.count(self.db, project_id, split)

    @requires(Role.LEAD)
    def sentence_ids(self, project_id: int, split: str | None = None) -> list[int]:
        return sentences.ids(self.db, project_id, split)

    @requires(Role.ANNOTATOR)
    def neighbours(self, sentence_id: int):
        return sentences.neighbours(self.db, sentence_id)

    @requires(Role.LEAD)
    def training_data(self, project_id: int, split: str | None = "train", **kw):
        return sentences.training_data(self.db, project_id, split, **kw)

    @requires(Role.LEAD)
    def gold_data(self, project_id: int, split: str | None = "heldout"):
        return sentences.gold_data(self.db, project_id, split)

    @requires(Role.ANNOTATOR, own="annotator", project_decides="blind")
    def sentence_view(self, sentence_id: int, annotator: str,
                      blind: bool | None = None) -> dict | None:
        """:meth:`get_sentence` as ``annotator`` may see it (the project's blind mode)."""
        return sentences.view(self.db, sentence_id, annotator, blind)

    @requires(Role.LEAD)
    def export_sentences(self, project_id: int, split: str | None = None) -> list:
        return [Sentence(tokens=s["tokens"], labels=s["labels"], line=s["line"] or 1)
                for s in self.get_sentences(project_id, split=split)]

    # labels
    @requires(Role.ANNOTATOR, own="annotator", accepted=Accepted.MAPPING)
    def set_labels(self, sentence_id: int, labels: Mapping[int, str | None], annotator: str,
                   source: str = "human") -> list[int]:
        written = label_writes.set_labels(self.db, sentence_id, labels, annotator, source)
        self._labels_written(written.project_id, written.keep)
        return written.ids

    def _labels_written(self, project_id: int, keep: dict | None = None) -> None:
        """The step after a label write's commit, with the project (and its keep-training
        setting) the write returned: the keep-training service (:func:`jobs.after_write`:
        its failure logged and shown to the lead, never the write's)."""
        jobs.after_write(self.home, project_id, keep)

    @requires(Role.ANNOTATOR, own="annotator", accepted=Accepted.STEPS)
    def set_label_steps(self, sentence_id: int, steps: Sequence[Mapping[int, str | None]],
                        annotator: str, source: str = "human",
                        ages: Sequence[float] | None = None,
                        batches: Sequence[str] | None = None) -> list[int]:
        """Several undo steps (key presses) of one annotator on one sentence, one
        transaction; ``ages``: seconds each step lies before the write; ``batches``: the
        steps' event ids, each written at most once (:func:`labels.set_steps`)."""
        written = label_writes.set_steps(self.db, sentence_id, steps, annotator, source, ages,
                                     batches)
        self._labels_written(written.project_id, written.keep)
        return written.ids

    @requires(Role.ANNOTATOR, own="annotator", accepted=Accepted.ONE)
    def set_label(self, sentence_id: int, token_index: int, label: str | None, annotator: str,
                  source: str = "human") -> int | None:
        ids = self.set_labels(sentence_id, {token_index: label}, annotator, source)
        return ids[0] if ids else None

    @requires(Role.ANNOTATOR, own="annotator")
    def clear_label(self, sentence_id: int, token_index: int, annotator: str) -> int | None:
        return self.set_label(sentence_id, token_index, None, annotator)

    @requires(Role.ANNOTATOR, own="annotator")
    def undo(self, project_id: int, annotator: str | None = None,
             batch: str | None = None) -> dict | None:
        """Revert ``annotator``'s last step; ``batch``: the event id, done at most once."""
        out = label_writes.undo(self.db, project_id, annotator, batch)
        self._labels_written(project_id)
        return out

    @requires(Role.LEAD, own="lead")
    def adjudicate(self, sentence_id: int, token_index: int, label: str | None,
                   lead: str) -> None:
        written = label_writes.adjudicate(self.db, sentence_id, token_index, label, lead)
        self._labels_written(written.project_id, written.keep)

    @requires(Role.LEAD)
    def adjudication_history(self, sentence_id=None, project_id=None, limit=100) -> list[dict]:
        return votes.adjudication_history(self.db, sentence_id, project_id, limit)

    @requires(Role.LEAD)
    def votes(self, sentence_id: int) -> list[dict]:
        return votes.votes_of(self.db, sentence_id)

    @requires(Role.LEAD)
    def history(self, sentence_id=None, project_id=None, annotator=None, limit=100):
        return votes.history(self.db, sentence_id, project_id, annotator, limit)

    @requires(Role.ANNOTATOR, own="annotator")
    def skip(self, sentence_id: int, annotator: str) -> None:
        label_writes.skip(self.db, sentence_id, annotator)

    @requires(Role.ANNOTATOR, shows=Shows.OWN_PROGRESS)
    def progress(self, project_id: int, split: str | None = None, *,
                 detail: bool = True) -> dict:
        return stats.progress(self.db, project_id, split, detail=detail)

    # search (read-only)
    @requires(Role.ANNOTATOR, blind=Blind.TEXT_ONLY)
    def find_sentences(self, project_id: int, **filters) -> dict:
        return search.find(self.db, project_id, **filters)

    @requires(Role.ANNOTATOR, blind=Blind.REFUSED)
    def annotators(self, project_id: int) -> list[str]:
        return search.annotators(self.db, project_id)

    @requires(Role.ANNOTATOR)
    def sentence_by_number(self, project_id: int, number: int) -> dict | None:
        return search.by_number(self.db, project_id, number)

    @requires(Role.ANNOTATOR)
    def sentence_numbers(self, project_id: int, split: str | None = None) -> tuple[int, int, int]:
        return search.numbers(self.db, project_id, split)

    @requires(Role.LEAD)
    def token_history(self, sentence_id: int, token_index: int, limit: int | None = 50):
        return search.token_history(self.db, sentence_id, token_index, limit)

    # model versions
    @requires(Role.LEAD)
    def start_model_version(self, project_id: int, settings=None, *, pid=None) -> int:
        return versions.start(self.db, project_id, settings, pid=pid)

    @requires(Role.LEAD)
    def set_model_worker(self, version_id: int, pid: int, started: float | None,
                         **extra) -> None:
        versions.set_worker(self.db, version_id, pid, started, extra)

    @requires(Role.LEAD)
    def finish_model_version(self, version_id: int, path, bound_trace=None, metrics=None,
                             n_labeled_tokens=None, **kw) -> bool:
        return versions.finish(self.db, version_id, path, bound_trace, metrics,
                               n_labeled_tokens, **kw)

    @requires(Role.LEAD)
    def fail_model_version(self, version_id: int, error: str, status: str = "failed") -> bool:
        return versions.fail(self.db, version_id, error, status)

    @requires(Role.LEAD)
    def mark_stale_running_failed(self, project_id: int | None = None, *, alive=None,
                                  reason=None) -> list[int]:
        return versions.mark_stale_failed(
            self.db, alive or worker_alive,
            reason or (lambda v: f"worker process {v['settings'].get('pid')} is gone"),
            project_id)

    @requires(Role.LEAD)
    def set_active_model(self, project_id: int, version_id: int | None) -> None:
        versions.set_active(self.db, project_id, version_id)

    @requires(Role.ANNOTATOR)
    def active_model(self, project_id: int) -> dict | None:
        return versions.active(self.db, project_id)

    @requires(Role.LEAD)
    def get_model_version(self, version_id: int) -> dict | None:
        return versions.get(self.db, version_id)

    @requires(Role.LEAD)
    def list_model_versions(self, project_id: int) -> list[dict]:
        return versions.list_all(self.db, project_id)

    @requires(Role.LEAD)
    def list_query_rounds(self, project_id: int) -> list[dict]:
        return versions.query_rounds(self.db, project_id)

    # predictions and queue
    @requires(Role.LEAD)
    def save_predictions(self, version_id: int, marginals: Mapping[int, np.ndarray],
                         query_scores: Mapping[int, np.ndarray] | None = None) -> int:
        return scoring.save_predictions(self.db, version_id, marginals, query_scores)

    @requires(Role.LEAD)
    def get_predictions(self, version_id: int, sentence_ids=None) -> dict[int, np.ndarray]:
        return predictions.get(self.db, version_id, sentence_ids)

    @requires(Role.LEAD)
    def get_query_scores(self, version_id: int, sentence_ids=None) -> dict[int, np.ndarray]:
        return predictions.get_query_scores(self.db, version_id, sentence_ids)

    @requires(Role.LEAD)
    def label_activity(self, project_id: int) -> list[tuple[str, str, int]]:
        """``(day, annotator, labels set)`` (:func:`stats.activity`)."""
        return stats.activity(self.db, project_id)

    @requires(Role.LEAD)
    def store_summary(self, version_id: int, classes: Sequence[str] | None = None) -> dict:
        """Compute and store what the pages show of a version (:mod:`.summaries`);
        ``classes``: its labels, before the run records them."""
        return summaries.store_summary(self.db, version_id, classes)

    @requires(Role.LEAD)
    def has_predictions(self, version_id: int) -> bool:
        return predictions.has_any(self.db, version_id)

    @requires(Role.LEAD)
    def delete_predictions(self, version_id: int) -> int:
        return predictions.delete(self.db, version_id)

    @requires(Role.LEAD)
    def prune_predictions(self, project_id: int, keep: int = 1) -> int:
        return predictions.prune(self.db, project_id, keep)

    @requires(Role.ANNOTATOR, own_unless_lead="annotator")
    def queue(self, project_id: int, order: str = "uncertainty", annotator: str | None = None,
              limit: int | None = 100) -> list[int]:
        return queue.queue(self.db, project_id, order, annotator, limit)

    @requires(Role.LEAD)
    def ranked_queue(self, project_id: int, n: int = 10) -> list[dict]:
        return queue.ranked(self.db, project_id, n)

    @requires(Role.ANNOTATOR)
    def queue_strategy(self, project_id: int) -> str | None:
        """The query score ordering the uncertainty queue (:func:`queue.strategy`)."""
        return queue.strategy(self.db, project_id)

    @requires(Role.ANNOTATOR, own="annotator")
    def next_sentence(self, project_id: int, annotator: str, order: str = "uncertainty",
                      current: int | None = None, exclude=()) -> int | None:
        """The next sentence for a team member, leased to them (:func:`queue.route`)."""
        return queue.route(self.db, project_id, annotator, order, current, exclude)

    @requires(Role.ANNOTATOR, own="annotator")
    def next_to_annotate(self, project_id: int, annotator: str, order: str = "uncertainty",
                         current: int | None = None, seen=(), *, team: bool = False
                         ) -> int | None:
        """The next sentence to annotate: for a team member the store's routing, which
        leases it (:meth:`next_sentence`); alone, the first of the queue not seen in this
        session (:func:`queue.next_unseen`)."""
        if team:
            return self.next_sentence(project_id, annotator, order, current, seen)
        return queue.next_unseen(self.db, project_id, order, annotator, current, seen)

    @requires(Role.ANNOTATOR, own="annotator")
    def release_lease(self, annotator: str, sentence_id: int | None = None) -> int:
        return queue.release(self.db, annotator, sentence_id)

    @requires(Role.LEAD)
    def leases(self, project_id: int) -> list[dict]:
        return queue.leases(self.db, project_id)

    # training (gpsl.annotation.training.jobs)
    @requires(Role.LEAD, by="started_by")
    def start_training(self, project_id: int, config: TrainConfig,
                       started_by: str | None = None) -> int:
        """Start a background training run; returns its version id.  ``started_by``: who
        (through an acting store: always the acting person), shown on the run's line."""
        return jobs.start_training(self.home, project_id, config, started_by=started_by)

    @requires(Role.LEAD)
    def prepare_training(self, project_id: int) -> None:
        """A spare worker ready for the next click (the Train page, :mod:`.spares`)."""
        jobs.prepare_worker(self.home)

    @requires(Role.LEAD)
    def stop_training(self, version_id: int) -> bool:
        return jobs.stop_training(self.home, version_id)

    @requires(Role.LEAD)
    def keep_training(self, project_id: int) -> dict:
        """The project's keep-training setting: ``on``, ``every`` (N), ``new_labels``."""
        return jobs.keep_training(self.db, project_id)

    @requires(Role.LEAD)
    def set_keep_training(self, project_id: int, on: bool, every: int | None = None) -> dict:
        """Refit in the background after every ``every`` new labels (:func:`jobs.after_labels`)."""
        return jobs.set_keep_training(self.db, project_id, on, every)

    @requires(Role.LEAD)
    def recover(self) -> dict:
        """After a crash: dead workers' versions failed, their leftovers removed."""
        return jobs.recover(self.home)

    # imports and exports (gpsl.annotation.interchange.imports, gpsl.annotation.interchange.exports)
    @requires(Role.LEAD, import_credit="annotator")
    def import_sentences(self, project_id: int, sentences_, **kw) -> int:
        return imports.import_sentences(self.db, project_id, sentences_, **kw)

    @requires(Role.LEAD)
    def export_annotations(self, project_id: int, fmt: str = "conll",
                           split: str | None = "train") -> str:
        return exports.export_annotations(self.db, project_id, fmt, split)

    # limits
    @requires(Role.LEAD)
    def store_limits(self) -> dict:
        """The limits as the lead set them (``upload_mb``, ``max_tokens``; None: the server's
        default), those in force (``upload_bytes``, ``tokens``; None: no limit) and the
        ceilings (``upload_ceiling_mb``, ``tokens_ceiling``) (:mod:`.store_limits`)."""
        size, tokens = store_limits.effective(self.db)
        return {**store_limits.get(self.db), "upload_bytes": size, "tokens": tokens,
                "upload_ceiling_mb": limits.upload_ceiling_mb(),
                "tokens_ceiling": limits.tokens_ceiling()}

    @requires(Role.LEAD)
    def set_store_limits(self, upload_mb: float | None = None,
                         max_tokens: int | None = None) -> dict:
        """Set the store's limits within the ceilings (None: the server's default)."""
        store_limits.put(self.db, upload_mb, max_tokens)
        return self.store_limits()

    @requires(Role.LEAD)
    def parse_upload(self, data: bytes, filename: str, fmt: str | None = None) -> list:
        """:func:`imports.parse_upload` under the store's limits (its own exports always
        read back, :func:`store_limits.for_upload`)."""
        return self.open_upload(data, filename, fmt).sentences()

    @requires(Role.LEAD)
    def open_upload(self, data: bytes, filename: str, fmt: str | None = None):
        """:class:`imports.Upload` (a stream) under the store's limits (:meth:`parse_upload`)."""
        size, tokens = store_limits.for_upload(self.db, len(data or b""))
        return imports.Upload(data, filename, fmt, max_bytes=size or 0, max_tokens=tokens or 0)

    @requires(Role.LEAD)
    def annotations_file(self, project_id: int, fmt: str = "conll",
                         split: str | None = "train"):
        """:meth:`export_annotations` written page by page to a temporary file (rewound),
        built when asked for (a download)."""
        return exports.spooled(exports.iter_annotations(self.db, project_id, fmt, split))

    @requires(Role.LEAD)
    def predictions_file(self, project_id: int, version_id: int, fmt: str = "conll",
                         split: str | None = "train"):
        """:meth:`export_predictions` written page by page to a temporary file (rewound)."""
        return exports.spooled(exports.iter_predictions(
            self.db, project_id, self.get_model_version(version_id), fmt, split))

    @requires(Role.LEAD)
    def export_votes(self, project_id: int, fmt: str = "crowd",
                     split: str | None = "train") -> str:
        """Every vote, the training labels and the leads' decisions (:mod:`vote_files`)."""
        return vote_files.export_votes(self.db, project_id, fmt, split)

    @requires(Role.LEAD)
    def import_votes(self, project_id: int, data: bytes | str, fmt: str, *,
                     doc: str | None = None, add_labels: Sequence[str] = ()) -> int:
        """Append the sentences of a vote file (:func:`vote_files.read_votes`) with every
        vote credited to its annotator; returns how many sentences."""
        size, tokens = store_limits.for_upload(self.db, len(data or ""))
        items = vote_files.read_votes(data, fmt, doc or "<upload>", max_bytes=size or 0,
                                      max_tokens=tokens or 0)
        return vote_files.import_votes(self.db, project_id, items, doc=doc,
                                       add_labels=add_labels)

    @requires(Role.LEAD)
    def create_crowd_project(self, name: str, folder: crowd_folders.CrowdFolder, *,
                             heldout: float = crowd_folders.DEFAULT_HELDOUT,
                             offsets: Sequence[int] = (-1, 1), crowd: bool = True
                             ) -> crowd_folders.CrowdImport:
        """A project from a crowd folder (:func:`crowd_folders.read_upload`): every worker
        an annotator with their votes, ``heldout`` of the documents held out with their
        gold, the ``ner`` feature set; with ``crowd`` the crowd model fitted and used for
        the training labels (:mod:`crowd_folders`)."""
        return crowd_folders.finish(self.db, crowd_folders.create_project(
            self.db, name, folder, heldout=heldout, offsets=offsets), crowd)

    @requires(Role.LEAD)
    def import_crowd_folder(self, project_id: int, folder: crowd_folders.CrowdFolder, *,
                            heldout: float = crowd_folders.DEFAULT_HELDOUT,
                            add_labels: Sequence[str] = (), crowd: bool = True
                            ) -> crowd_folders.CrowdImport:
        """A crowd folder appended to a one-column project (:meth:`create_crowd_project`'s
        rule, one transaction)."""
        return crowd_folders.finish(self.db, crowd_folders.import_folder(
            self.db, project_id, folder, heldout=heldout, add_labels=add_labels), crowd)

    @requires(Role.LEAD)
    def export_predictions(self, project_id: int, version_id: int, fmt: str = "conll",
                           split: str | None = "train") -> str:
        return exports.export_predictions(self.db, project_id,
                                          self.get_model_version(version_id), fmt, split)

    @requires(Role.LEAD)
    def preview(self, project_id: int, split: str | None, fmt: str, n: int = 2) -> str:
        """The export text of the first ``n`` sentences ("" without sentences)."""
        first = self.get_sentences(project_id, split=split, limit=n)
        return exports.preview_text(first, fmt) if first else ""

    @requires(Role.LEAD)
    def check_model(self, version_id: int) -> None:
        """Raise a one-line error unless the version's saved model loads cleanly."""
        exports.check_model(self.model_path(version_id))

    @requires(Role.LEAD)
    def model_zip(self, version_id: int) -> bytes:
        return exports.model_zip(self.model_path(version_id))


Store = validate.typed_ids(Store)
