"""The entry point: one parser of every command, one line for every error.

Every error is one line ``gpsl: error: <message>`` on stderr with exit status 2 (an unexpected
internal error is one line too, with status 1; ``GPSL_DEBUG=1`` shows its traceback). Sentences
longer than ``--max-tokens`` (default 1000, or ``$GPSL_MAX_TOKENS``; 0 = no limit) are refused,
and ``train`` refuses a MODEL_DIR that exists but is not a gpsl model directory.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from gpsl.cli import aggregate, common, query, serve, tag, train
from gpsl.errors import GpslError

COMMANDS = "train, test, eval, query, aggregate or serve"


def build_parser() -> argparse.ArgumentParser:
    from gpsl import __version__

    parser = common.Parser(
        prog="gpsl",
        description="Gaussian process pseudo-likelihood sequence labeling (CRF++-like).",
    )
    parser.add_argument("--version", action="version", version=f"gpsl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    train.add_parser(sub)
    aggregate.add_parser(sub)
    tag.add_parsers(sub)
    query.add_parser(sub)
    serve.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 on any error)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(common.normalise_argv(args_list))
    except common.ArgumentError as exc:
        common.err(f"gpsl: error: {common.one_line(exc)} (see gpsl --help)")
        return 2
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else 0
    if getattr(args, "func", None) is None:
        common.err(f"gpsl: error: a command is required: {COMMANDS} (see gpsl --help)")
        return 2
    try:
        return int(args.func(args))
    except BrokenPipeError:
        try:  # silence the interpreter's final flush of the closed pipe
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 1
    except (GpslError, OSError, ValueError, OverflowError) as exc:
        lines = exc.lines() if hasattr(exc, "lines") else [common.one_line(exc)]
        for line in lines:  # one line per bad file of a crowd folder, else one line
            common.err(f"gpsl: error: {common.one_line(line)}")
        return 2
    except MemoryError:
        common.err("gpsl: error: not enough memory for this input (try smaller files or a "
                   "lower --max-tokens)")
        return 2
    except KeyboardInterrupt:
        common.err("gpsl: interrupted")
        return 130
    except Exception as exc:  # a bug: still one line, unless GPSL_DEBUG asks for the traceback
        if os.environ.get("GPSL_DEBUG"):
            raise
        common.err(f"gpsl: internal error: {type(exc).__name__}: {common.one_line(exc)} "
                   "(set GPSL_DEBUG=1 for the traceback; please report it)")
        return 1
