"""What every command shares: the parser that raises instead of exiting, argument types,
the one-line error, reading a test file for a model, writing output.

The options that set a model parameter come from :mod:`gpsl.params` (:func:`add_params`);
the types here are for what is not a parameter (encodings, markers, names).
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

from gpsl import params
from gpsl.errors import InputError

_OFFSET_OPTIONS = ("-d", "--offsets")
_LOOKS_NEGATIVE = re.compile(r"^-\d")
_LEVEL = re.compile(r"^\d+$")


class ArgumentError(Exception):
    """Raised instead of argparse's print-usage-and-exit."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ArgumentError(message)


# --------------------------------------------------------------------------- argument types


def parse_offsets_arg(text: str) -> tuple[int, ...]:
    """``"-1,1"`` (or ``GPSL1``/``GPSL2``/``GPSL4``) -> ``(-1, 1)``; non-zero, no duplicates,
    bounded (:class:`gpsl.params.Offsets`)."""
    return params.argparse_type("offsets")(text)


def encoding(text: str) -> str:
    try:
        codec = codecs.lookup(text)
    except (LookupError, ValueError):
        raise argparse.ArgumentTypeError(f"unknown encoding {text!r}") from None
    if not getattr(codec, "_is_text_encoding", True):
        raise argparse.ArgumentTypeError(f"{text!r} is not a text encoding")
    return text


def names(text: str) -> list[str]:
    out = [v.strip() for v in text.split(",")]
    if any(not v or any(ch.isspace() for ch in v) for v in out):
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return out


def missing_marker(text: str) -> str:
    if text == "" or any(ch.isspace() for ch in text):
        raise argparse.ArgumentTypeError("the missing-label marker must be non-empty, no spaces")
    return text


def add_params(p: argparse.ArgumentParser, names_: tuple[str, ...], **overrides) -> None:
    """The options of parameters ``names_`` as :mod:`gpsl.params` writes them."""
    for name in names_:
        params.add_option(p, name, **overrides.get(name, {}))


def add_max_tokens(p: argparse.ArgumentParser) -> None:
    params.add_option(p, "max_tokens")


def add_encoding(p: argparse.ArgumentParser) -> None:
    p.add_argument("--encoding", type=encoding, default="utf-8")


def add_missing(p: argparse.ArgumentParser, help_: str) -> None:
    p.add_argument("--missing", type=missing_marker, default="_", metavar="MARK", help=help_)


def add_output(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", metavar="OUT", help="output file (default stdout)")


def normalise_argv(argv: list[str]) -> list[str]:
    """``-d -1,1`` -> ``-d=-1,1`` (argparse would take ``-1,1`` for an option); in ``test``,
    a bare ``-v`` is ``-v1`` (crf_test's verbose level 1) unless a level follows, so
    ``test -m M -v FILE`` keeps FILE."""
    out: list[str] = []
    command = next((a for a in argv if not a.startswith("-")), None)
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            out.extend(argv[i:])
            break
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if arg in _OFFSET_OPTIONS and nxt is not None and _LOOKS_NEGATIVE.match(nxt):
            out.append(f"{arg}={nxt}")
            i += 2
            continue
        if arg == "-v" and command == "test" and (nxt is None or not _LEVEL.match(nxt)):
            out.append("-v1")
            i += 1
            continue
        out.append(arg)
        i += 1
    return out


# --------------------------------------------------------------------------- refusals


def refuse(option: str, why: str) -> NoReturn:
    """An option the command cannot honour: one line, never silently dropped."""
    raise InputError(f"{option} {why}", source="arguments")


# --------------------------------------------------------------------------- output


def err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def progress(quiet: bool):
    """The per-sweep progress line of ``train`` (``callback`` of :meth:`GPSL.fit`)."""

    def show(info: dict) -> None:
        if not quiet:
            err(f"iter={int(info.get('iteration', 0)):<4d} "
                f"bound={float(info.get('bound', float('nan'))):.6f} "
                f"time={float(info.get('seconds', 0.0)):.2f}s")

    return show


def one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, InputError):
        where = f"{exc.filename}: " if exc.filename else ""
        return where + " ".join(str(exc.strerror or exc).split())
    return " ".join(str(exc).split()) or type(exc).__name__


def write_output(text: str, dest: str | None, encoding_: str) -> None:
    """Write ``text`` to ``dest`` (a file; ``None``: stdout) with :func:`output_stream`."""
    with output_stream(dest, encoding_) as write:
        write(text)


@contextlib.contextmanager
def output_stream(dest: str | None, encoding_: str):
    """A ``write(text)`` function for output in pieces. Each piece is encoded first (a
    character the encoding cannot write is an InputError naming the output line). A regular
    file is written to a temporary file beside it and renamed over it only when the block
    ends without an error: a failed command leaves no partial output file (and an existing
    one unchanged). Stdout, a pipe or a device named by ``dest`` get each piece as it comes."""
    lines_before = 0
    encode = codecs.getincrementalencoder(encoding_)().encode  # one BOM (utf-16) at most
    target = Path(dest) if dest is not None else None
    if target is not None and target.is_dir():
        raise InputError("is a directory, not a file", source=dest)
    direct = target is not None and target.exists() and not target.is_file()
    fh = tmp = None
    if target is not None:
        try:
            if direct:
                fh = open(target, "wb")  # noqa: SIM115 - closed below
            else:
                fd, tmp = tempfile.mkstemp(dir=target.parent or ".", prefix=f".{target.name}.",
                                           suffix=".part")
                fh = os.fdopen(fd, "wb")
        except OSError as exc:
            raise InputError(f"cannot write: {exc.strerror or exc}", source=dest) from None

    def write(text: str) -> None:
        nonlocal lines_before
        try:
            data = encode(text)
        except UnicodeEncodeError as exc:
            line = lines_before + text.count("\n", 0, exc.start) + 1
            raise InputError(f"character {text[exc.start]!r} cannot be written with encoding "
                             f"{encoding_} (output line {line}; use --encoding utf-8)",
                             source=dest or "<stdout>") from None
        lines_before += text.count("\n")
        if fh is not None:
            try:
                fh.write(data)
            except OSError as exc:
                raise InputError(f"cannot write: {exc.strerror or exc}", source=dest) from None
            return
        buffer = getattr(sys.stdout, "buffer", None)
        if buffer is not None:
            sys.stdout.flush()
            buffer.write(data)
            buffer.flush()
        else:
            sys.stdout.write(text)
            sys.stdout.flush()

    try:
        yield write
        if fh is not None:
            fh.close()
            if tmp is not None:
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(tmp, 0o666 & ~umask)
                os.replace(tmp, target)
                tmp = None
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", source=dest) from None
    finally:
        if fh is not None and not fh.closed:
            fh.close()
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


# --------------------------------------------------------------------------- models and files


def load_model(path: str) -> Any:
    p = Path(path)
    if not p.exists():
        raise InputError("model directory not found", source=path)
    if not p.is_dir():
        raise InputError("not a model directory (it is a file)", source=path)
    from gpsl.model import GPSL

    return GPSL.load(p)


def read_template(path: str | None, encoding_: str, n_columns: int) -> str | None:
    """The text of the ``-t`` template file, or the name of a built-in feature set (``ner``;
    a file of that name is ``./ner``), checked against the data's columns."""
    if path is None:
        return None
    from gpsl.features import Template

    template = Template.from_spec(path, encoding=encoding_)
    template.validate(n_columns)
    return template.text


def read_for_model(model: Any, path: str, encoding_: str,
                   max_tokens: int | None = None) -> tuple[list, list, bool]:
    """Sentences of a test file, the model's feature columns of them, whether gold is there."""
    from gpsl.io import read_conll

    sents = read_conll(path, encoding=encoding_, labeled=False, max_tokens=max_tokens)
    return sents, *model_columns(model, sents, path)


def model_columns(model: Any, sents: list, path: str) -> tuple[list, bool]:
    """The model's feature columns of some sentences of a file, and whether it has gold."""
    n = int(model.n_columns_)
    width = len(sents[0].tokens[0])
    if width == n + 1:
        return [[tok[:n] for tok in s.tokens] for s in sents], True
    if width == n:
        return [s.tokens for s in sents], False
    raise InputError(
        f"found {width} columns but the model was trained on {n} feature column"
        f"{'s' if n != 1 else ''} (expected {n}, or {n + 1} with a gold label)",
        source=path,
        line=sents[0].line,
    )
