"""The annotation back end: projects, sentences, votes per annotator, model versions,
predictions, the queue, imports/exports and training jobs, on SQLite or PostgreSQL.

No Streamlit and no HTML here; the pages use :class:`Store` (the facade) and the modules
below.  See docs/ARCHITECTURE.md for the module table.
"""

from gpsl.annotation.db import default_db_url
from gpsl.annotation.errors import (
    NotFoundError,
    StoreBusyError,
    StoreUnavailableError,
)
from gpsl.annotation.facade import Store, default_models_root
from gpsl.annotation.projects import SAMPLE_PROJECT_NAME
from gpsl.annotation.schema import SCHEMA_VERSION

__all__ = [
    "SAMPLE_PROJECT_NAME",
    "SCHEMA_VERSION",
    "NotFoundError",
    "Store",
    "StoreBusyError",
    "StoreUnavailableError",
    "default_db_url",
    "default_models_root",
]
