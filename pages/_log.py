"""The app's log: the warnings and errors the pages show (and the back end's, under
``gpsl``) written to the server's standard error, one line each, so that what a user was told
is in the log too.  The library configures no handler (a ``NullHandler`` on ``gpsl``); the app
does, once per process (:func:`configure`): ``GPSL_LOG_LEVEL`` (default ``WARNING``)."""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger(__name__)
#: the loggers the app writes: the library's and the pages'
NAMES = ("gpsl", "pages")
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure() -> None:
    """A stderr handler on the library's and the pages' loggers (once: the app's script runs
    again on every interaction)."""
    level = os.environ.get("GPSL_LOG_LEVEL", "WARNING").strip().upper() or "WARNING"
    for name in NAMES:
        logger = logging.getLogger(name)
        if any(getattr(h, "_gpsl_app", False) for h in logger.handlers):
            continue
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_FORMAT))
        handler._gpsl_app = True  # ours: not added twice
        logger.addHandler(handler)
        logger.setLevel(level if level in logging.getLevelNamesMapping() else "WARNING")


def shown(kind: str, text: str) -> None:
    """Log a line a page shows (``kind``: ``error``, ``warning``; anything else is not
    logged)."""
    if kind == "error":
        log.error("shown: %s", text)
    elif kind == "warning":
        log.warning("shown: %s", text)
