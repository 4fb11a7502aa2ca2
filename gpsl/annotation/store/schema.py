"""The annotation store's tables (SQLAlchemy Core), the same on SQLite and PostgreSQL.

Schema version 8.  Labels are kept per annotator: ``votes`` holds every (token, annotator)
vote, ``adjudications`` the label a lead set for a disputed token, and ``derived_labels`` the
token's training label derived from both by
:func:`gpsl.annotation.labeling.label_writes.derive_labels` (rewritten in the same transaction as
every vote, so it is never stale).  Labels that came with an imported file are votes with source
``'import'``: they count only for tokens that no one has voted on since.  A vote with a NULL label
is an annotator's "no label" (Clear). ``annotation_history`` records every vote change (old and new
vote of that annotator).

Storage formats: ``projects.labels``/``offsets``/``settings``, ``sentences.tokens``,
``model_versions.settings``/``bound_trace``/``metrics``/``classes`` are JSON text;
``predictions.marginals`` the packed top labels and 16-bit probabilities of each token
(schema 6; :mod:`gpsl.annotation.corpus.predictions`),
``predictions.confidence`` the raw little-endian float32 per-token confidences, and
``predictions.queue_score`` the active-learning score of the sentence's unlabeled tokens
(:mod:`gpsl.annotation.labeling.queue`).  Times are ISO-8601 UTC strings.

Schema 3 adds teams: ``accounts`` (name, role, argon2 password hash), ``auth_tokens`` (sign-in
links and sessions, stored as SHA-256 hashes of random tokens,
:mod:`gpsl.annotation.people.accounts`), ``leases`` (which annotator holds which sentence until
when, :mod:`gpsl.annotation.labeling.queue`), ``adjudication_history`` (every change of a lead's
decision), the project's ``guidelines`` (Markdown text) and per-project model version numbers
(``model_versions.number``).

Schema 4 adds the per-token query scores of the annotation queue: ``predictions.query_scores``
(float32 NPY blob, one score per token, from :func:`gpsl.active.score_tokens`; NULL for
predictions written before schema 4) and ``model_versions.query_strategy`` (the name of the
score, a key of :data:`gpsl.active.QUERY_SCORES`; NULL before schema 4).

Schema 5 adds the door (:mod:`gpsl.annotation.people.accounts`, :mod:`gpsl.annotation.people.auth`):
``memberships`` (which accounts may see and label which project; a lead sees every project),
``sign_in_failures`` (failed sign-ins per name and per client, for the rate limit) and
``setup_tokens`` (the one-time token that creates the first lead account; SHA-256 hashes).

Schema 6 packs the predictions (before: float32 NPY blobs): ``predictions.marginals`` holds
each token's labels with a probability of at least ``1 / 131070`` and those probabilities in
16 bits, ``predictions.query_scores`` raw float32 behind a tag (:mod:`gpsl.annotation
.predictions`); and keeps predictions only for a project's active version and the one before
it (:func:`gpsl.annotation.store.migrations.migrate_5_to_6`).

Schema 7 adds ``store_info`` (key/value text: ``store_id``, the store's own random id that names
its folder of model files, progress files and locks, :mod:`gpsl.annotation.store.owned`; ``limits``,
the limits a lead set, JSON) and ``version_summaries`` (per model version, the figures the pages
show, computed once when the version is trained, JSON, :mod:`gpsl.annotation.training.summaries`).

Schema 8 keeps the progress counts: ``project_progress`` holds per project and split the
sentences, tokens, labeled tokens, complete and partly labeled sentences (the sums over
``sentences`` that :func:`gpsl.annotation.corpus.stats.progress` gives; on PostgreSQL spread over
1024 rows by sentence id, ``slot``, as a row updated many times in one transaction costs more
each time), kept by triggers on
``sentences`` in the transaction of every write that inserts, deletes or relabels a sentence
(:func:`gpsl.annotation.store.migrations.progress_triggers`), so the sidebar reads a row, not every
sentence; and the index ``predictions_by_queue`` (version, queue score, sentence) that the
queue walks, highest score first, instead of sorting every unlabeled sentence.
"""

from __future__ import annotations

from sqlalchemy import (
    CheckConstraint,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    text,
)

SCHEMA_VERSION = 8

metadata = MetaData()


def _fk(table: str, ondelete: str = "CASCADE") -> ForeignKey:
    return ForeignKey(f"{table}.id", ondelete=ondelete)


projects = Table(
    "projects", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", Text, nullable=False, unique=True),
    Column("labels", Text, nullable=False),
    Column("template", Text, nullable=False, server_default=""),
    Column("offsets", Text, nullable=False, server_default="[-1,1]"),
    Column("kernel", Text, nullable=False, server_default="linear"),
    Column("created_at", Text, nullable=False),
    Column("settings", Text, nullable=False, server_default="{}"),
    Column("guidelines", Text, nullable=False, server_default=""),
)

sentences = Table(
    "sentences", metadata,
    Column("id", Integer, primary_key=True),
    Column("project_id", Integer, _fk("projects"), nullable=False),
    Column("position", Integer, nullable=False),
    Column("doc", Text),
    Column("line", Integer),
    Column("split", Text, nullable=False, server_default="train"),
    Column("tokens", Text, nullable=False),
    Column("n_tokens", Integer, nullable=False),
    Column("n_labeled", Integer, nullable=False, server_default="0"),
    UniqueConstraint("project_id", "position"),
    CheckConstraint("split IN ('train', 'heldout')"),
    CheckConstraint("n_tokens > 0"),
)
Index("sentences_by_split", sentences.c.project_id, sentences.c.split, sentences.c.position,
      sentences.c.n_tokens, sentences.c.n_labeled)

votes = Table(
    "votes", metadata,
    Column("sentence_id", Integer, _fk("sentences"), nullable=False),
    Column("token_index", Integer, nullable=False),
    Column("annotator", Text, nullable=False),
    Column("label", Text),  # NULL: the annotator cleared the token ("no label")
    Column("source", Text, nullable=False, server_default="human"),
    Column("updated_at", Text, nullable=False),
    PrimaryKeyConstraint("sentence_id", "token_index", "annotator"),
    CheckConstraint("source IN ('human', 'accepted', 'import')"),
)

adjudications = Table(
    "adjudications", metadata,
    Column("sentence_id", Integer, _fk("sentences"), nullable=False),
    Column("token_index", Integer, nullable=False),
    Column("label", Text, nullable=False),
    Column("annotator", Text, nullable=False),
    Column("at", Text, nullable=False),
    PrimaryKeyConstraint("sentence_id", "token_index"),
)

derived_labels = Table(
    "derived_labels", metadata,
    Column("sentence_id", Integer, _fk("sentences"), nullable=False),
    Column("token_index", Integer, nullable=False),
    Column("label", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("annotator", Text, nullable=False),
    PrimaryKeyConstraint("sentence_id", "token_index"),
)

annotation_history = Table(
    "annotation_history", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("project_id", Integer, _fk("projects"), nullable=False),
    Column("sentence_id", Integer, _fk("sentences"), nullable=False),
    Column("token_index", Integer, nullable=False),
    Column("old_label", Text),
    Column("new_label", Text),
    Column("source", Text),
    Column("annotator", Text, nullable=False),
    Column("at", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("batch", Text),
    Column("undone_by", Integer),
    CheckConstraint("action IN ('set', 'clear', 'undo', 'import')"),
    sqlite_autoincrement=True,
)
Index("history_by_project", annotation_history.c.project_id, annotation_history.c.id)
Index("history_by_token", annotation_history.c.sentence_id, annotation_history.c.token_index,
      annotation_history.c.id)
Index("history_by_batch", annotation_history.c.batch)
Index("history_undoable_by", annotation_history.c.project_id, annotation_history.c.annotator,
      annotation_history.c.id,
      sqlite_where=text("undone_by IS NULL AND action IN ('set', 'clear')"),
      postgresql_where=text("undone_by IS NULL AND action IN ('set', 'clear')"))

gold_labels = Table(
    "gold_labels", metadata,
    Column("sentence_id", Integer, _fk("sentences"), nullable=False),
    Column("token_index", Integer, nullable=False),
    Column("label", Text, nullable=False),
    PrimaryKeyConstraint("sentence_id", "token_index"),
)

model_versions = Table(
    "model_versions", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("project_id", Integer, _fk("projects"), nullable=False),
    Column("created_at", Text, nullable=False),
    Column("finished_at", Text),
    Column("settings", Text, nullable=False, server_default="{}"),
    Column("classes", Text),
    Column("bound_trace", Text),
    Column("metrics", Text),
    Column("path", Text),
    Column("n_labeled_tokens", Integer),
    Column("status", Text, nullable=False, server_default="running"),
    Column("active", Integer, nullable=False, server_default="0"),
    Column("error", Text),
    Column("number", Integer),  # 1, 2, ... within the project (schema 3)
    Column("query_strategy", Text),  # the queue's query score (schema 4; NULL: before it)
    CheckConstraint("status IN ('running', 'done', 'failed', 'killed')"),
    CheckConstraint("active IN (0, 1)"),
    sqlite_autoincrement=True,
)
Index("model_versions_by_project", model_versions.c.project_id, model_versions.c.id)
Index("one_active_model", model_versions.c.project_id, unique=True,
      sqlite_where=text("active = 1"), postgresql_where=text("active = 1"))

predictions = Table(
    "predictions", metadata,
    Column("model_version_id", Integer, _fk("model_versions"), nullable=False),
    Column("sentence_id", Integer, _fk("sentences"), nullable=False),
    Column("marginals", LargeBinary, nullable=False),
    Column("confidence", LargeBinary, nullable=False),
    Column("min_confidence", Float, nullable=False),
    Column("queue_score", Float),
    Column("query_scores", LargeBinary),  # float32 NPY, one per token (schema 4; NULL: before)
    PrimaryKeyConstraint("model_version_id", "sentence_id"),
)
Index("predictions_by_sentence", predictions.c.sentence_id)
Index("predictions_by_score", predictions.c.model_version_id, predictions.c.sentence_id,
      predictions.c.queue_score)
Index("predictions_by_queue", predictions.c.model_version_id, predictions.c.queue_score,
      predictions.c.sentence_id)  # schema 8: the queue's walk
                                    # (:mod:`gpsl.annotation.labeling.queue`)

query_rounds = Table(  # written by schema 1 only; kept so that no stored data is lost
    "query_rounds", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("project_id", Integer, _fk("projects"), nullable=False),
    Column("model_version_id", Integer, _fk("model_versions", "SET NULL")),
    Column("created_at", Text, nullable=False),
    Column("strategy", Text, nullable=False),
    Column("items", Text, nullable=False),
    sqlite_autoincrement=True,
)

skips = Table(
    "skips", metadata,
    Column("sentence_id", Integer, _fk("sentences"), nullable=False),
    Column("annotator", Text, nullable=False),
    Column("at", Text, nullable=False),
    PrimaryKeyConstraint("sentence_id", "annotator"),
)

adjudication_history = Table(
    "adjudication_history", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("sentence_id", Integer, _fk("sentences"), nullable=False),
    Column("token_index", Integer, nullable=False),
    Column("old_label", Text),
    Column("new_label", Text),  # NULL: the decision was withdrawn
    Column("annotator", Text, nullable=False),
    Column("at", Text, nullable=False),
    sqlite_autoincrement=True,
)
Index("adjudication_history_by_token", adjudication_history.c.sentence_id,
      adjudication_history.c.token_index, adjudication_history.c.id)

accounts = Table(
    "accounts", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", Text, nullable=False, unique=True),
    Column("role", Text, nullable=False),
    Column("password_hash", Text),  # argon2id (argon2-cffi); NULL: sign-in links only
    Column("created_at", Text, nullable=False),
    CheckConstraint("role IN ('lead', 'annotator')"),
    sqlite_autoincrement=True,
)

auth_tokens = Table(
    "auth_tokens", metadata,
    Column("token_hash", Text, primary_key=True),  # SHA-256 hex of a 256-bit random token
    Column("account_id", Integer, _fk("accounts"), nullable=False),
    Column("kind", Text, nullable=False),
    Column("created_at", Text, nullable=False),
    Column("expires_at", Text, nullable=False),
    CheckConstraint("kind IN ('link', 'session')"),
)
Index("auth_tokens_by_account", auth_tokens.c.account_id, auth_tokens.c.kind)

memberships = Table(  # schema 5: who may see and label a project (leads see every one)
    "memberships", metadata,
    Column("project_id", Integer, _fk("projects"), nullable=False),
    Column("account_id", Integer, _fk("accounts"), nullable=False),
    Column("added_at", Text, nullable=False),
    PrimaryKeyConstraint("project_id", "account_id"),
)
Index("memberships_by_account", memberships.c.account_id)

sign_in_failures = Table(  # schema 5: failed sign-ins ("name:<name>", "client:<address>")
    "sign_in_failures", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", Text, nullable=False),
    Column("at", Text, nullable=False),
    sqlite_autoincrement=True,
)
Index("sign_in_failures_by_key", sign_in_failures.c.key, sign_in_failures.c.at)

setup_tokens = Table(  # schema 5: one-time tokens that create the first lead (SHA-256 hex)
    "setup_tokens", metadata,
    Column("token_hash", Text, primary_key=True),
    Column("created_at", Text, nullable=False),
    Column("expires_at", Text, nullable=False),
)

leases = Table(
    "leases", metadata,
    Column("sentence_id", Integer, _fk("sentences"), nullable=False),
    Column("annotator", Text, nullable=False),
    Column("expires_at", Text, nullable=False),
    PrimaryKeyConstraint("sentence_id", "annotator"),
)
Index("leases_by_annotator", leases.c.annotator, leases.c.expires_at)

store_info = Table(  # schema 7: the store's own id ("store_id") and the lead's limits
    "store_info", metadata,
    Column("key", Text, primary_key=True),
    Column("value", Text, nullable=False),
)

version_summaries = Table(  # schema 7: what the pages show of a version, computed once
    "version_summaries", metadata,
    Column("model_version_id", Integer, _fk("model_versions"), primary_key=True,
           autoincrement=False),
    Column("summary", Text, nullable=False),  # JSON
    Column("created_at", Text, nullable=False),
)

project_progress = Table(  # schema 8: the sums over sentences, per project and split
    "project_progress", metadata,
    Column("project_id", Integer, _fk("projects"), nullable=False),
    Column("split", Text, nullable=False),
    Column("slot", Integer, nullable=False, server_default="0"),  # PostgreSQL: id % 1024
    Column("n_sentences", Integer, nullable=False, server_default="0"),
    Column("n_tokens", Integer, nullable=False, server_default="0"),
    Column("n_labeled", Integer, nullable=False, server_default="0"),  # labeled tokens
    Column("n_complete", Integer, nullable=False, server_default="0"),  # sentences
    Column("n_partial", Integer, nullable=False, server_default="0"),  # sentences
    PrimaryKeyConstraint("project_id", "split", "slot"),
)

schema_version = Table(
    "schema_version", metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("applied_at", Text, nullable=False),
)
