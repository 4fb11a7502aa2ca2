"""Reading and writing sequence-labeling data (every public name importable from ``gpsl.io``).

* :mod:`gpsl.io.formats`: CRF++/CoNLL column files, JSONL and plain text (:class:`Sentence`);
* :mod:`gpsl.io.crowd`: crowd annotation files (:class:`CrowdSentence`);
* :mod:`gpsl.io.crowd_raw`: crowd votes in the one-folder-per-annotator layout, aligned to the
  gold tokens (imported from there: :func:`~gpsl.io.crowd_raw.read_crowd_folder`).
"""

from gpsl.io.crowd import CrowdSentence, read_crowd, read_crowd_conll, read_crowd_jsonl
from gpsl.io.formats import (
    FORMATS,
    Sentence,
    format_conll,
    format_jsonl,
    iter_conll,
    read_any,
    read_conll,
    read_jsonl,
    read_text,
    write_conll,
    write_jsonl,
)
from gpsl.io.source import Source

__all__ = [
    "FORMATS",
    "CrowdSentence",
    "Sentence",
    "Source",
    "format_conll",
    "format_jsonl",
    "iter_conll",
    "read_any",
    "read_conll",
    "read_crowd",
    "read_crowd_conll",
    "read_crowd_jsonl",
    "read_jsonl",
    "read_text",
    "write_conll",
    "write_jsonl",
]
