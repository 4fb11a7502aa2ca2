"""The annotation back end: projects, sentences, votes per annotator, model versions,
predictions, the queue, imports/exports and training jobs, on SQLite or PostgreSQL.

No Streamlit and no HTML here.  This package's namespace is what the pages (and scripts) use:
the facade :class:`Store` (its :attr:`Store.reports` give the typed records of
:mod:`gpsl.annotation.store.records`), the errors, the training settings and the stateless helpers
of uploads, templates and dependency sets.  See docs/ARCHITECTURE.md for the layers.
"""

from gpsl.annotation.access import ActingStore
from gpsl.annotation.corpus.projects import SAMPLE_PROJECT_NAME, default_features
from gpsl.annotation.corpus.search import STATUSES as SEARCH_STATUSES
from gpsl.annotation.facade import Store
from gpsl.annotation.interchange.crowd_folders import DEFAULT_HELDOUT as CROWD_HELDOUT
from gpsl.annotation.interchange.crowd_folders import MAX_HELDOUT as CROWD_MAX_HELDOUT
from gpsl.annotation.interchange.crowd_folders import CrowdFolder, CrowdImport
from gpsl.annotation.interchange.crowd_folders import read_upload as read_crowd_upload
from gpsl.annotation.interchange.exports import EXPORT_FORMATS, safe_filename, to_csv
from gpsl.annotation.interchange.imports import (
    FORMATS,
    LIMIT_SETTINGS,
    UPLOAD_TYPES,
    UploadSummary,
    guess_format,
    parse_upload,
    summarize,
    unknown_labels,
    upload_limits,
)
from gpsl.annotation.interchange.vote_files import VOTE_FORMATS
from gpsl.annotation.labeling.queue import ORDERS as QUEUE_ORDERS
from gpsl.annotation.labeling.rules import (
    RESOLVE_RULES,
    TRAINING_RULES,
    accept_candidates,
    next_unlabeled,
    rule_key,
    rule_settings,
    training_rule,
)
from gpsl.annotation.labeling.team import MAX_OVERLAP, RESOLVE
from gpsl.annotation.people.accounts import MIN_PASSWORD, Identity
from gpsl.annotation.people.auth import LINK_HOURS, SESSION_DAYS, client_address
from gpsl.annotation.reports import query_description, queue_strategy
from gpsl.annotation.store.db import default_db_url
from gpsl.annotation.store.owned import default_models_root
from gpsl.annotation.store.records import (
    Account,
    AnnotatorRow,
    Calibration,
    CalibrationReport,
    Conflict,
    CrowdSummary,
    Decision,
    HistoryEntry,
    KeepTraining,
    Lease,
    Progress,
    Project,
    RankedSentence,
    Reliability,
    Scheme,
    SearchHit,
    SearchResult,
    SentenceView,
    TeamFigures,
    TeamSettings,
    TokenView,
    TrainingLabels,
    TrainingProgress,
    Version,
)
from gpsl.annotation.store.schema import SCHEMA_VERSION
from gpsl.annotation.store.store_errors import (
    STORE_ERRORS,
    AccessDenied,
    GpslError,
    InputError,
    NotFoundError,
    StoreBusyError,
    StoreUnavailableError,
    TooManyAttempts,
    TrainingBusyError,
    one_line,
)
from gpsl.annotation.store.validate import default_template_text, import_credit, is_import
from gpsl.annotation.store.validate import person as check_person
from gpsl.annotation.store.validate import template as check_template
from gpsl.annotation.training.pipeline import INFERENCE_MODES, KERNELS, TRAIN_PARAMS, TrainConfig
from gpsl.io.crowd_raw import CrowdFolderError
from gpsl.params import PRESET_HELP, PRESETS, parse_offsets, preset_of
from gpsl.tags import entity_type

#: how long a session lasts (the session cookie's lifetime)
SESSION_SECONDS = SESSION_DAYS * 24 * 3600

__all__ = [
    "LINK_HOURS", "MIN_PASSWORD", "SESSION_DAYS", "SESSION_SECONDS", "AccessDenied",
    "ActingStore", "TooManyAttempts", "check_person", "client_address", "to_csv",
    "CROWD_HELDOUT", "CROWD_MAX_HELDOUT", "CrowdFolder", "CrowdFolderError", "CrowdImport",
    "default_features", "read_crowd_upload",
    "EXPORT_FORMATS", "FORMATS", "INFERENCE_MODES", "KERNELS", "LIMIT_SETTINGS", "MAX_OVERLAP",
    "PRESETS", "PRESET_HELP", "QUEUE_ORDERS", "RESOLVE", "RESOLVE_RULES", "SAMPLE_PROJECT_NAME",
    "SCHEMA_VERSION", "TRAINING_RULES", "VOTE_FORMATS",
    "SEARCH_STATUSES", "STORE_ERRORS", "TRAIN_PARAMS", "UPLOAD_TYPES", "Account", "AnnotatorRow",
    "Calibration", "CalibrationReport", "Conflict", "CrowdSummary", "Decision", "GpslError",
    "HistoryEntry", "Identity", "InputError", "KeepTraining", "Lease", "NotFoundError",
    "Progress", "Project",
    "RankedSentence", "Reliability", "Scheme", "SearchHit", "SearchResult", "SentenceView",
    "Store", "StoreBusyError", "StoreUnavailableError", "TeamFigures", "TeamSettings", "TokenView",
    "TrainConfig", "TrainingBusyError", "TrainingLabels", "TrainingProgress", "UploadSummary",
    "Version",
    "accept_candidates", "check_template", "default_db_url", "default_models_root",
    "default_template_text", "entity_type", "guess_format", "import_credit", "is_import",
    "next_unlabeled", "one_line", "parse_offsets", "parse_upload", "preset_of",
    "query_description", "queue_strategy", "rule_key", "rule_settings", "safe_filename",
    "summarize", "training_rule",
    "unknown_labels", "upload_limits",
]
