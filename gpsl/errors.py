"""Error types shared by every gpsl module.

Every problem with user-supplied input (files, templates, model directories,
command-line arguments, uploads) is raised as :class:`InputError`, whose
``str()`` is a single line naming the file, the line and the problem, e.g.::

    train.data:12: expected 3 columns, found 2

The command line prints that line and exits with status 2; the app shows it.
"""

from __future__ import annotations


class GpslError(Exception):
    """Base class of all errors raised deliberately by gpsl."""


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
        self.source = source
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.source is not None:
            where = str(self.source)
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        return where + self.message


class ModelFormatError(InputError):
    """A saved model directory is damaged, tampered with, or from a newer format."""
