"""The back end's errors and the one line every error becomes.

Every error a store call raises for a user is a :class:`gpsl.errors.GpslError` (its ``str`` is
one line); a failure SQLAlchemy reports that :mod:`gpsl.annotation.store.db` cannot name (a
constraint a bug broke, say) stays a SQLAlchemy error. :data:`STORE_ERRORS` holds both, so a
caller that shows errors (the pages) catches them without importing SQLAlchemy;
:func:`one_line` is the one format of an error in a message, a version's failure reason or a
downloaded error file.
"""

from __future__ import annotations

import os

from sqlalchemy.exc import SQLAlchemyError

from gpsl.errors import GpslError, InputError

__all__ = ["STORE_ERRORS", "AccessDenied", "GpslError", "InputError", "NotFoundError",
           "StoreBusyError", "StoreUnavailableError", "TooManyAttempts", "TrainingBusyError",
           "one_line"]


class NotFoundError(GpslError, LookupError):
    """A project, sentence, account or model version id that is not in the store."""


class StoreBusyError(GpslError):
    """Another process kept the store locked for longer than the store's timeout."""


class StoreUnavailableError(GpslError):
    """The store cannot be read or written: full disk, read-only file, server down ..."""


class TrainingBusyError(GpslError):
    """A training job of the project is still running."""


class AccessDenied(GpslError, PermissionError):
    """The acting person may not do this: a lead's action, a project they are not a member
    of, labels in someone else's name (:mod:`gpsl.annotation.access`)."""


class TooManyAttempts(GpslError):
    """Too many failed sign-ins for one name or from one place: wait, then try again."""


#: what a store call may raise: the one-line errors, and what SQLAlchemy could not map to one
STORE_ERRORS: tuple[type[BaseException], ...] = (GpslError, SQLAlchemyError)


def one_line(exc: BaseException, action: str | None = None) -> str:
    """``exc`` as one line, after ``"<action>: "`` when an action is given.

    A :class:`~gpsl.errors.GpslError` is its own message (it names the file, line or store
    already); an ``OSError`` with an errno is ``"<type>: <strerror>: <file>"``; anything else
    ``"<type>: <message>"``: an unexpected error keeps its type, which says what went wrong."""
    if isinstance(exc, GpslError):
        text = " ".join(str(exc).split()) or type(exc).__name__
    elif isinstance(exc, SQLAlchemyError):  # never the SQL statement or its parameters
        orig = getattr(exc, "orig", None) or exc
        first = (str(orig).strip().splitlines() or [""])[0]
        text = f"the annotation store refused the change ({type(orig).__name__}: " \
               f"{' '.join(first.split())[:200]})"
    elif isinstance(exc, OSError) and exc.errno is not None:
        text = f"{type(exc).__name__}: {os.strerror(exc.errno)}" + (
            f": {exc.filename}" if exc.filename else "")
    else:
        message = " ".join(str(exc).split())
        text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return f"{action}: {text}" if action else text
