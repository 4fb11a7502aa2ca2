"""Input size limits, in one place.

Every reader of user data enforces them, so a huge upload or a runaway sentence is refused with a
one-line :class:`~gpsl.errors.InputError` before it can exhaust memory or time:

===================  ==============  ======================  =============================
limit                default         environment variable    also set by
===================  ==============  ======================  =============================
tokens per sentence  1,000           ``GPSL_MAX_TOKENS``     ``--max-tokens`` (command line)
characters per line  1,000,000       ``GPSL_MAX_LINE_CHARS``
upload size (app)    20 MB (MiB)     ``GPSL_MAX_UPLOAD_MB``   a lead, per store (app)
===================  ==============  ======================  =============================

A lead may set the upload size and the tokens per sentence of a store in the app (Project
page), within a hard ceiling set when the server starts: ``GPSL_UPLOAD_CEILING_MB`` (default
200, Streamlit's own ``server.maxUploadSize``) and ``GPSL_TOKENS_CEILING`` (default 10,000)
(:func:`upload_ceiling_mb`, :func:`tokens_ceiling`, :mod:`gpsl.annotation.store.store_limits`).

An explicit argument wins over the environment variable, which wins over the default. ``0`` means
"no limit". The Streamlit server has its own, larger cap (``server.maxUploadSize`` in
``.streamlit/config.toml``); the app's own limit is checked first with a readable message.

The longest sentence of the CRF++ data sets used by the benchmarks has 117 tokens; the bundled
sample's 40.
"""

from __future__ import annotations

import os

from gpsl.errors import InputError

__all__ = [
    "DEFAULT_MAX_LINE_CHARS",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_MAX_UPLOAD_MB",
    "ENV_MAX_LINE_CHARS",
    "ENV_MAX_TOKENS",
    "ENV_MAX_UPLOAD_MB",
    "check_line_length",
    "check_sentence_length",
    "check_upload_size",
    "tokens_ceiling",
    "upload_ceiling_mb",
    "max_line_chars",
    "max_tokens",
    "max_upload_bytes",
]

DEFAULT_MAX_TOKENS = 1000
DEFAULT_MAX_LINE_CHARS = 1_000_000
DEFAULT_MAX_UPLOAD_MB = 20

ENV_MAX_TOKENS = "GPSL_MAX_TOKENS"
ENV_MAX_LINE_CHARS = "GPSL_MAX_LINE_CHARS"
ENV_MAX_UPLOAD_MB = "GPSL_MAX_UPLOAD_MB"
ENV_UPLOAD_CEILING_MB = "GPSL_UPLOAD_CEILING_MB"
ENV_TOKENS_CEILING = "GPSL_TOKENS_CEILING"
DEFAULT_UPLOAD_CEILING_MB = 200
DEFAULT_TOKENS_CEILING = 10_000

MB = 1 << 20


def _resolve(value: int | float | None, env: str, default: int | float) -> int | float | None:
    """Explicit value, else the environment variable, else the default; ``0`` -> ``None``."""
    source = None
    if value is None:
        raw = os.environ.get(env, "").strip()
        if raw:
            source = env
            try:
                value = float(raw) if env == ENV_MAX_UPLOAD_MB else int(raw)
            except ValueError:
                raise InputError(f"expected a non-negative number, got {raw!r}",
                                 source=env) from None
        else:
            value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 \
            or value == float("inf"):
        raise InputError(f"limit must be a non-negative number, got {value!r}",
                         source=source or "<limits>")
    return None if value == 0 else value


def max_tokens(value: int | None = None) -> int | None:
    """Tokens allowed in one sentence (``None``: no limit)."""
    v = _resolve(value, ENV_MAX_TOKENS, DEFAULT_MAX_TOKENS)
    return None if v is None else int(v)


def max_line_chars(value: int | None = None) -> int | None:
    """Characters allowed on one input line (``None``: no limit)."""
    v = _resolve(value, ENV_MAX_LINE_CHARS, DEFAULT_MAX_LINE_CHARS)
    return None if v is None else int(v)


def max_upload_bytes(value: int | None = None) -> int | None:
    """Bytes allowed in one upload of the app (``None``: no limit). ``value`` is in bytes; the
    environment variable ``GPSL_MAX_UPLOAD_MB`` in megabytes (MiB, as Streamlit counts)."""
    if value is not None:
        v = _resolve(value, ENV_MAX_UPLOAD_MB, DEFAULT_MAX_UPLOAD_MB * MB)
        return None if v is None else int(v)
    v = _resolve(None, ENV_MAX_UPLOAD_MB, DEFAULT_MAX_UPLOAD_MB)
    return None if v is None else int(v * MB)


def upload_ceiling_mb() -> float:
    """The highest upload size (MB) a lead may set: ``GPSL_UPLOAD_CEILING_MB`` at server
    start (``0`` is refused: a ceiling is a number)."""
    v = _resolve(None, ENV_UPLOAD_CEILING_MB, DEFAULT_UPLOAD_CEILING_MB)
    if v is None:
        raise InputError("the ceiling must be a positive number", source=ENV_UPLOAD_CEILING_MB)
    return float(v)


def tokens_ceiling() -> int:
    """The most tokens per sentence a lead may allow: ``GPSL_TOKENS_CEILING``."""
    v = _resolve(None, ENV_TOKENS_CEILING, DEFAULT_TOKENS_CEILING)
    if v is None:
        raise InputError("the ceiling must be a positive number", source=ENV_TOKENS_CEILING)
    return int(v)


def _size(n: int) -> str:
    if n >= MB:
        return f"{n / MB:.1f} MB"
    if n >= 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n} bytes"


def check_sentence_length(n_tokens: int, limit: int | None, source: str | None,
                          line: int | None = None) -> None:
    """InputError ``file:line: sentence has N tokens; the limit is M ...`` when over the limit."""
    if limit is not None and n_tokens > limit:
        raise InputError(
            f"sentence has {n_tokens:,} tokens; the limit is {limit:,}"
            f" (set --max-tokens / {ENV_MAX_TOKENS})",
            source=source, line=line)


def check_line_length(n_chars: int, limit: int | None, source: str | None,
                      line: int | None = None) -> None:
    """InputError when one line is longer than ``limit`` characters."""
    if limit is not None and n_chars > limit:
        raise InputError(
            f"line has {n_chars:,} characters; the limit is {limit:,}"
            f" (set {ENV_MAX_LINE_CHARS})",
            source=source, line=line)


def check_upload_size(n_bytes: int, limit: int | None, source: str | None) -> None:
    """InputError when an upload is larger than ``limit`` bytes."""
    if limit is not None and n_bytes > limit:
        raise InputError(
            f"the file is {_size(n_bytes)}; the upload limit is {_size(limit)}"
            f" (set {ENV_MAX_UPLOAD_MB})",
            source=source)

#: the most feature lines (U and B) a template holds: each is a feature of every token, and
#: CRF++'s own templates have a few dozen (20,000 lines ran past 90 s and 6 GB)
MAX_TEMPLATE_LINES = 1000
#: the most characters of template text (comments included), refused before it is parsed
MAX_TEMPLATE_CHARS = 100_000
