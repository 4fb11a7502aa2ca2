"""Error types shared by every gpsl module.

Every problem with user-supplied input (files, templates, model directories,
command-line arguments, uploads) is raised as :class:`InputError`, whose
``str()`` is a single line naming the file, the line and the problem, e.g.::

    train.data:12: expected 3 columns, found 2

The command line prints that line and exits with status 2; the app shows it.
"""

from __future__ import annotations

import re

_NOT_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SURROGATES = re.compile("[\ud800-\udfff]")


def clean_source(source) -> str | None:
    """A source name (a file name, which may hold anything) as it appears in a message:
    control characters and line breaks become spaces, unpaired surrogates U+FFFD, so the
    message stays one printable line."""
    if source is None:
        return None
    return _SURROGATES.sub("\ufffd", _NOT_ONE_LINE.sub(" ", str(source)))


class GpslError(Exception):
    """Base class of all errors raised deliberately by gpsl."""


#: the sources that name what the store checked rather than a file (no prefix of a message)
INTERNAL_SOURCES = frozenset({"<project>", "<account>", "<train>", "<annotator>", "<export>",
                              "<setup>", "<settings>", "<label>", "<link>", "<store>"})


class InputError(GpslError, ValueError):
    """Bad user input: a one-line message with the source and line number.

    Parameters
    ----------
    message:
        What is wrong, without the location.
    source:
        File name (or ``"<upload>"``, ``"<template>"`` ...) the input came from.
    line:
        1-based line number inside ``source``, when it applies.
    """

    def __init__(self, message: str, source: str | None = None, line: int | None = None):
        self.message = " ".join(str(message).split())  # always one line
        self.source = clean_source(source)
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        """``source:line: message``; an internal source (:data:`INTERNAL_SOURCES`, such as
        ``<account>``: what the store checked, not a file a person can open) is left out
        when no line goes with it: the message alone is what a person reads."""
        where = ""
        placeholder = self.source in INTERNAL_SOURCES and self.line is None
        if self.source is not None and not placeholder:
            where = str(self.source)
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        return where + self.message


class ModelFormatError(InputError):
    """A saved model directory is damaged, tampered with, or from a newer format."""
