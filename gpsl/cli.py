"""The command line, in the spirit of CRF++'s ``crf_learn`` and ``crf_test``.

::

    python -m gpsl train -t template [-d -1,1] [--kernel linear|rbf] train.data model_dir
    python -m gpsl train --scheduler tcp://HOST:8786 ... train.data model_dir   (on Dask)
    python -m gpsl test -m model_dir [--decoder rns|viterbi] [--marginals] test.data [-o out]
    python -m gpsl eval -m model_dir test.data
    python -m gpsl aggregate crowd.jsonl [-o out] [--report annotators.json]
    python -m gpsl train --crowd [--trusted NAME] crowd.jsonl model_dir

Crowd input (``--crowd``, ``aggregate``) is JSONL with ``"annotations"`` or CoNLL with one label
column per annotator (``--annotators N``), see :func:`gpsl.io.read_crowd`; ``aggregate`` writes
the aggregated label and its probability after every token (``_ _`` for a token without votes).

``test`` writes every input token line (columns joined by tabs, a gold label column kept as is)
with the predicted label appended, and a blank line after each sentence, exactly like
``crf_test``; ``--marginals`` writes ``label/0.987654`` like ``crf_test -v1``.

Every error is one line ``gpsl: error: <message>`` on stderr with exit status 2 (an unexpected
internal error is one line too, with status 1; ``GPSL_DEBUG=1`` shows its traceback). Sentences
longer than ``--max-tokens`` (default 1000, or ``$GPSL_MAX_TOKENS``; 0 = no limit) are refused,
and ``train`` refuses a MODEL_DIR that exists but is not a gpsl model directory.
"""

from __future__ import annotations

import argparse
import codecs
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from gpsl import metrics
from gpsl.errors import GpslError, InputError
from gpsl.model import parse_offsets

__all__ = ["main", "build_parser", "parse_offsets_arg"]

_OFFSET_OPTIONS = ("-d", "--offsets")
_LOOKS_NEGATIVE = re.compile(r"^-\d")


class _ArgumentError(Exception):
    """Raised instead of argparse's print-usage-and-exit."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _ArgumentError(message)


# --------------------------------------------------------------------------- argument types


def parse_offsets_arg(text: str) -> tuple[int, ...]:
    """``"-1,1"`` (or ``GPSL1``/``GPSL2``/``GPSL4``) -> ``(-1, 1)``; non-zero, no duplicates."""
    try:
        return parse_offsets(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def _missing_weight(text: str):
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a number in [0, 1], got "
                                         f"{text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a number in [0, 1], got "
                                         f"{text!r}")
    return value


def _encoding(text: str) -> str:
    try:
        codec = codecs.lookup(text)
    except (LookupError, ValueError):
        raise argparse.ArgumentTypeError(f"unknown encoding {text!r}") from None
    if not getattr(codec, "_is_text_encoding", True):
        raise argparse.ArgumentTypeError(f"{text!r} is not a text encoding")
    return text


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a non-negative integer (0: no limit), got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"expected a non-negative integer (0: no limit), got {text!r}")
    return value


def _add_max_tokens(p: argparse.ArgumentParser) -> None:
    from gpsl import limits

    p.add_argument("--max-tokens", type=_limit, default=None, metavar="N",
                   help="refuse sentences longer than N tokens (default "
                        f"{limits.DEFAULT_MAX_TOKENS} or ${limits.ENV_MAX_TOKENS}; 0: no limit)")


def _names(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",")]
    if any(not v or any(ch.isspace() for ch in v) for v in names):
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return names


def _add_crowd_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--crowd-format", choices=("jsonl", "conll"), default=None,
                   help="crowd input format (default: jsonl for *.jsonl/*.json, else conll)")
    p.add_argument("--annotators", type=_positive_int, default=None, metavar="N",
                   help="CoNLL crowd input: the last N columns are one label column per "
                        "annotator ('_' = no label)")
    p.add_argument("--annotator-names", type=_names, default=None, metavar="A,B,...",
                   help="names of the CoNLL annotator columns (default a1..aN)")
    p.add_argument("--labels", type=_names, default=None, metavar="L1,L2,...",
                   help="the label set; any other label in the votes is an error")
    p.add_argument("--trusted", action="append", default=[], metavar="NAME",
                   help="an annotator whose labels are taken as observed (adjudication); "
                        "repeatable")
    p.add_argument("--min-votes", type=_positive_int, default=30, metavar="N",
                   help="annotators with fewer votes get one skill parameter instead of a "
                        "confusion matrix (default 30)")
    p.add_argument("--prior-diag", type=_non_negative_float, default=2.0, metavar="X",
                   help="Dirichlet pseudo-count on the confusion matrices' diagonal (2)")
    p.add_argument("--prior-off", type=_non_negative_float, default=0.1, metavar="X",
                   help="Dirichlet pseudo-count off the diagonal (0.1)")
    p.add_argument("--shrink", type=_non_negative_float, default=10.0, metavar="K",
                   help="shrink each confusion matrix towards the annotator's one-skill matrix "
                        "with K pseudo-votes per row (default 10; 0: fixed prior, MAP)")
    p.add_argument("--report", metavar="REPORT_JSON",
                   help="write the annotator report (votes, estimated accuracy, confusion "
                        "matrix) as JSON")


def _missing(text: str) -> str:
    if text == "" or any(ch.isspace() for ch in text):
        raise argparse.ArgumentTypeError("the missing-label marker must be non-empty, no spaces")
    return text


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    from gpsl import __version__

    parser = _Parser(
        prog="gpsl",
        description="Gaussian process pseudo-likelihood sequence labeling (CRF++-like).",
    )
    parser.add_argument("--version", action="version", version=f"gpsl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("train", help="train a model from a CRF++ column file (like crf_learn)",
                       description="Train a GPSL model from a labeled CRF++ column file "
                                   "(label in the last column, '_' for a missing label).")
    p.add_argument("-t", "--template", metavar="TEMPLATE",
                   help="CRF++ template file (default: a window over every column)")
    p.add_argument("-d", "--offsets", type=parse_offsets_arg, default=(-1, 1), metavar="OFFSETS",
                   help="label dependency offsets: -1 (GPSL1), -1,1 (GPSL2, default), "
                        "-2,-1,1,2 (GPSL4)")
    p.add_argument("--kernel", choices=("linear", "rbf"), default="linear")
    p.add_argument("--inference", choices=("auto", "full", "sparse"), default="auto",
                   help="full GP, the scalable weight-space mode, or auto (the scalable "
                        "mode for the linear kernel; rbf: full up to 2,000 tokens)")
    p.add_argument("--lse-bound", choices=("auto", "jensen", "bohning"), default="auto",
                   help="bound on the expected log-partition (auto: jensen for full, bohning "
                        "for sparse)")
    p.add_argument("--missing-start", choices=("labels", "uniform", "supervised"),
                   default="labels",
                   help="scalable fit with missing labels: first fit the labeled tokens "
                        "(labels, the default), start from zero weights (uniform) or from "
                        "the fit of the complete sentences (supervised)")
    p.add_argument("--missing-weight", type=_missing_weight, default="auto", metavar="W",
                   help="weight of a missing label's own factor when fitting, 'auto' "
                        "(min(1, labeled / missing tokens), the default) or a number in "
                        "[0, 1]; 1 = the plain variational bound")
    p.add_argument("--inducing", type=_positive_int, default=500, metavar="M",
                   help="inducing tokens of the rbf kernel in the sparse mode (default 500)")
    p.add_argument("--max-iter", type=_positive_int, default=100, metavar="N",
                   help="maximum number of coordinate-ascent sweeps (default 100)")
    p.add_argument("--tol", type=_non_negative_float, default=None, metavar="X",
                   help="stop when the bound improves by less than this (relative, default 1e-3)")
    p.add_argument("--learn-hyper", action="store_true",
                   help="learn the per-label kernel hyper-parameters by variational EM "
                        "(off by default: maximising the bound shrinks the variances and "
                        "lowers accuracy on the paper's data sets)")
    p.add_argument("--variance", type=_positive_float, default=None, metavar="S2",
                   help="kernel variance (linear: prior variance of each feature weight; "
                        "default 4.0 linear, 1.0 rbf); the starting value when --learn-hyper "
                        "is given")
    p.add_argument("-f", "--min-freq", type=_positive_int, default=1, metavar="MIN_FREQ",
                   help="keep features seen at least MIN_FREQ times (like crf_learn -f)")
    p.add_argument("--encoding", type=_encoding, default="utf-8")
    p.add_argument("--missing", type=_missing, default="_", metavar="MARK",
                   help="label marking a missing label (default _)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="a Dask scheduler (tcp://HOST:PORT): the scalable fit's sums over "
                        "sentences run on its workers (linear kernel, mean-field)")
    _add_max_tokens(p)
    cal = p.add_mutually_exclusive_group()
    cal.add_argument("--calibrate", metavar="FILE", default=None,
                     help="held-out labeled CoNLL file (the training file's columns) on which "
                          "the marginals' calibration is fitted and saved with the model")
    cal.add_argument("--calibrate-folds", type=_positive_int, default=None, metavar="K",
                     help="fit the calibration on K folds of the training sentences instead "
                          "(K more fits)")
    p.add_argument("--crowd", action="store_true",
                   help="TRAIN_FILE holds crowd votes (JSONL annotations, or CoNLL with "
                        "--annotators N): learn annotator confusion matrices jointly")
    p.add_argument("--tagger-prior", choices=("learn", "model"), default=None,
                   help="--crowd: 'learn' (default) learns the tagger's prior variance in the "
                        "joint bound and refits the saved tagger with the given settings on "
                        "the inferred labels; 'model' keeps the given settings in the joint fit")
    _add_crowd_options(p)
    p.add_argument("train_file", metavar="TRAIN_FILE")
    p.add_argument("model_dir", metavar="MODEL_DIR")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("aggregate", help="aggregate crowd votes (Dawid-Skene) without a tagger",
                       description="Per-token posteriors and per-annotator reliability from "
                                   "crowd votes (JSONL annotations, or CoNLL with one label "
                                   "column per annotator).")
    p.add_argument("--method", choices=("dawid-skene", "majority"), default="dawid-skene")
    p.add_argument("--encoding", type=_encoding, default="utf-8")
    p.add_argument("--missing", type=_missing, default="_", metavar="MARK",
                   help="label marking 'no label' (default _)")
    p.add_argument("--output-format", choices=("conll", "jsonl"), default="conll",
                   help="conll: feature columns, label, probability (default); jsonl: "
                        "tokens, labels, probabilities")
    p.add_argument("-o", "--output", metavar="OUT", help="output file (default stdout)")
    p.add_argument("-q", "--quiet", action="store_true", help="no annotator table on stderr")
    _add_max_tokens(p)
    _add_crowd_options(p)
    p.add_argument("crowd_file", metavar="CROWD_FILE")
    p.set_defaults(func=_cmd_aggregate)

    p = sub.add_parser("test", help="label a CRF++ column file (like crf_test)",
                       description="Append the predicted label to every token line.")
    p.add_argument("-m", "--model", required=True, metavar="MODEL_DIR")
    p.add_argument("--decoder", choices=("rns", "viterbi", "exact"), default=None,
                   help="decoder (default: the model's, normally rns)")
    p.add_argument("--marginals", action="store_true",
                   help="write label/probability (RNS marginal), like crf_test -v1")
    p.add_argument("-v", dest="verbose_level", type=int, nargs="?", const=1, default=0,
                   metavar="LEVEL", help="-v1 is --marginals (crf_test compatibility)")
    p.add_argument("--encoding", type=_encoding, default="utf-8")
    p.add_argument("-o", "--output", metavar="OUT", help="output file (default stdout)")
    _add_max_tokens(p)
    p.add_argument("test_file", metavar="TEST_FILE")
    p.set_defaults(func=_cmd_test)

    p = sub.add_parser("eval", help="token accuracy, Hamming loss and (BIO/IOB labels) "
                                    "conlleval per-type P/R/F1 on a labeled file")
    p.add_argument("-m", "--model", required=True, metavar="MODEL_DIR")
    p.add_argument("--decoder", choices=("rns", "viterbi", "exact"), default=None)
    p.add_argument("--encoding", type=_encoding, default="utf-8")
    p.add_argument("--missing", type=_missing, default="_", metavar="MARK",
                   help="gold label marking a missing label, not scored (default _)")
    _add_max_tokens(p)
    p.add_argument("test_file", metavar="TEST_FILE")
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("query", help="the tokens to label next in a pool file (active "
                                     "learning)",
                       description="Rank the unlabeled tokens of a CRF++ column file by a "
                                   "query strategy under a trained model and print the "
                                   "batch to label next, best first (tab-separated: rank, "
                                   "sentence, token, line, word, score, suggestion, p). "
                                   "Tokens with a label in the file are known: clamped in "
                                   "Algorithm 2 and never asked.")
    p.add_argument("-m", "--model", required=True, metavar="MODEL_DIR")
    p.add_argument("--strategy", choices=(*active_scores(), "random"), default=None,
                   help="query score (default: the app's, see README 'Active learning')")
    p.add_argument("--batch", type=_positive_int, default=50, metavar="N",
                   help="tokens to ask (default 50)")
    p.add_argument("--diverse", action="store_true",
                   help="choose a batch that does not ask the same question twice "
                        "(determinantal choice over the latent functions' correlations)")
    p.add_argument("--max-per-sentence", type=_positive_int, default=None, metavar="K",
                   help="at most K tokens of one sentence (default: a quarter of the batch)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--missing", type=_missing, default="_", metavar="MARK",
                   help="label marking an unlabeled token in the file (default _)")
    p.add_argument("--encoding", type=_encoding, default="utf-8")
    p.add_argument("-o", "--output", metavar="OUT", help="output file (default stdout)")
    _add_max_tokens(p)
    p.add_argument("pool_file", metavar="POOL_FILE")
    p.set_defaults(func=_cmd_query)

    p = sub.add_parser("worker", help="run one training job of the annotation app",
                       description="Run the training pipeline of one model version of the "
                                   "annotation store named by GPSL_DB (started by the app).")
    p.add_argument("--version", dest="model_version", type=_positive_int, required=True,
                   metavar="ID", help="model version id")
    p.add_argument("--models-root", default=None, metavar="DIR",
                   help="directory of saved models")
    p.set_defaults(func=_cmd_worker)
    return parser


def _cmd_worker(args: argparse.Namespace) -> int:
    from gpsl.annotation.jobs import worker_main

    return worker_main(args.model_version, args.models_root)


def _join_offsets(argv: list[str]) -> list[str]:
    """``-d -1,1`` -> ``-d=-1,1`` (argparse would take ``-1,1`` for an option)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            out.extend(argv[i:])
            break
        if arg in _OFFSET_OPTIONS and i + 1 < len(argv) and _LOOKS_NEGATIVE.match(argv[i + 1]):
            out.append(f"{arg}={argv[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


# --------------------------------------------------------------------------- commands


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _load_model(path: str) -> Any:
    p = Path(path)
    if not p.exists():
        raise InputError("model directory not found", source=path)
    if not p.is_dir():
        raise InputError("not a model directory (it is a file)", source=path)
    from gpsl.model import GPSL

    return GPSL.load(p)


def _cmd_train(args: argparse.Namespace) -> int:
    from gpsl.features import Template
    from gpsl.io import read_conll
    from gpsl.persist import check_destination

    if getattr(args, "crowd", False):
        if args.scheduler is not None:
            raise InputError("--scheduler does not run the crowd model (--crowd)",
                             source="arguments")
        return _cmd_train_crowd(args)
    _refuse_crowd_options(args)
    t0 = time.perf_counter()
    check_destination(args.model_dir)  # refuse before spending time on training
    sents = read_conll(args.train_file, encoding=args.encoding, missing=args.missing,
                       max_tokens=args.max_tokens)
    n_columns = len(sents[0].tokens[0])
    template_text = None
    if args.template is not None:
        template = Template.from_file(args.template, encoding=args.encoding)
        template.validate(n_columns)
        template_text = template.text
    n_tokens = sum(len(s) for s in sents)
    n_missing = sum(s.n_missing for s in sents)
    if n_missing == n_tokens:
        raise InputError(f"no labeled token: every label is {args.missing!r}",
                         source=args.train_file)
    cal = _read_calibration(args, n_columns, len(sents))

    from gpsl.model import GPSL

    model = GPSL(offsets=args.offsets, kernel=args.kernel, template=template_text,
                 min_freq=args.min_freq, max_iter=args.max_iter,
                 learn_hyper=args.learn_hyper, variance=args.variance,
                 inference=args.inference, inducing=args.inducing, lse_bound=args.lse_bound,
                 missing_start=args.missing_start, missing_weight=args.missing_weight,
                 **({} if args.tol is None else {"tol": args.tol}),
                 **({} if args.scheduler is None else {"cluster": args.scheduler}))

    def progress(info: dict) -> None:
        if not args.quiet:
            _err(f"iter={int(info.get('iteration', 0)):<4d} "
                 f"bound={float(info.get('bound', float('nan'))):.6f} "
                 f"time={float(info.get('seconds', 0.0)):.2f}s")

    model.fit([s.tokens for s in sents], [s.labels for s in sents], callback=progress)
    if cal is not None:
        model.calibrate([s.tokens for s in cal], [s.labels for s in cal],
                        source=Path(args.calibrate).name)
    elif args.calibrate_folds is not None:
        model.calibrate([s.tokens for s in sents], [s.labels for s in sents],
                        folds=args.calibrate_folds)
    if getattr(model, "calibrator_", None) is not None:
        c = model.calibrator_
        _err(f"gpsl: calibrated on {c.n_tokens} tokens ({c.source}): {c.kind}, "
             f"{c.describe()}; NLL {c.nll_before:.4f} -> {c.nll_after:.4f}")
    model.save(args.model_dir)
    seconds = time.perf_counter() - t0
    n_features = len(model.extractor_.vocabulary_)
    _err(f"gpsl: trained on {n_tokens} tokens ({len(sents)} sentences, {model.inference_} "
         f"inference), "
         f"{len(model.classes_)} labels, {n_missing} missing labels, {n_features} features, "
         f"{seconds:.2f} seconds; model saved to {args.model_dir}")
    return 0


def _read_calibration(args: argparse.Namespace, n_columns: int, n_sentences: int):
    """The ``--calibrate`` file's sentences (checked before any training), or None."""
    from gpsl.io import read_conll

    if args.calibrate_folds is not None and n_sentences < 2 * args.calibrate_folds:
        raise InputError(f"{n_sentences} sentences are too few for {args.calibrate_folds} "
                         "calibration folds", source=args.train_file)
    if args.calibrate is None:
        return None
    cal = read_conll(args.calibrate, encoding=args.encoding, missing=args.missing,
                     max_tokens=args.max_tokens)
    width = len(cal[0].tokens[0])
    if width != n_columns:
        raise InputError(f"found {width} feature columns but the training file has "
                         f"{n_columns}", source=args.calibrate, line=cal[0].line)
    if all(lab is None for s in cal for lab in s.labels):
        raise InputError(f"no labeled token: every label is {args.missing!r}",
                         source=args.calibrate)
    return cal


def _read_for_model(model: Any, path: str, encoding: str,
                    max_tokens: int | None = None) -> tuple[list, list, bool]:
    """Sentences of a test file, the model's feature columns of them, whether gold is there."""
    from gpsl.io import read_conll

    sents = read_conll(path, encoding=encoding, labeled=False, max_tokens=max_tokens)
    n = int(model.n_columns_)
    width = len(sents[0].tokens[0])
    if width == n + 1:
        return sents, [[tok[:n] for tok in s.tokens] for s in sents], True
    if width == n:
        return sents, [s.tokens for s in sents], False
    raise InputError(
        f"found {width} columns but the model was trained on {n} feature column"
        f"{'s' if n != 1 else ''} (expected {n}, or {n + 1} with a gold label)",
        source=path,
        line=sents[0].line,
    )


def _write_output(text: str, dest: str | None, encoding: str) -> None:
    try:
        data = text.encode(encoding)
    except UnicodeEncodeError as exc:
        line = text.count("\n", 0, exc.start) + 1
        raise InputError(f"character {text[exc.start]!r} cannot be written with encoding "
                         f"{encoding} (output line {line}; use --encoding utf-8)",
                         source=dest or "<stdout>") from None
    if dest is not None:
        if Path(dest).is_dir():
            raise InputError("is a directory, not a file", source=dest)
        try:
            with open(dest, "w", encoding=encoding, newline="\n") as fh:
                fh.write(text)
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


def _cmd_test(args: argparse.Namespace) -> int:
    from gpsl.io import format_conll

    model = _load_model(args.model)
    sents, X, _ = _read_for_model(model, args.test_file, args.encoding, args.max_tokens)
    pred = model.predict(X, decoder=args.decoder)
    if args.marginals or args.verbose_level >= 1:
        index = {c: i for i, c in enumerate(model.classes_)}
        marg = model.predict_marginals(X)
        extra = [
            [[f"{lab}/{float(P[j, index[lab]]):.6f}"] for j, lab in enumerate(labs)]
            for labs, P in zip(pred, marg, strict=True)
        ]
    else:
        extra = [[[lab] for lab in labs] for labs in pred]
    text = format_conll(sents, extra_columns=extra, label=False)
    _write_output(text, args.output, args.encoding)
    return 0


def active_scores() -> tuple[str, ...]:
    from gpsl.active import QUERY_SCORES

    return tuple(QUERY_SCORES)


def _cmd_query(args: argparse.Namespace) -> int:
    from gpsl import active

    model = _load_model(args.model)
    sents, X, has_gold = _read_for_model(model, args.pool_file, args.encoding,
                                         args.max_tokens)
    y = None
    if has_gold:
        n, known = int(model.n_columns_), set(model.classes_)
        y = []
        for s in sents:
            labs = [None if tok[n] == args.missing else tok[n] for tok in s.tokens]
            for t, lab in enumerate(labs):
                if lab is not None and lab not in known:
                    raise InputError(f"label {lab!r} is not one of the model's labels (mark "
                                     f"unlabeled tokens with {args.missing!r})",
                                     source=args.pool_file, line=s.line + t)
            y.append(labs)
    strategy = args.strategy or active.DEFAULT_QUERY
    items = active.query_model(model, X, y, strategy, args.batch, diverse=args.diverse,
                               max_per_sentence=args.max_per_sentence, seed=args.seed)
    asked = sorted({it.sentence for it in items})
    marg = model.predict_marginals([X[i] for i in asked],
                                   y=None if y is None else [y[i] for i in asked])
    by_sent = dict(zip(asked, marg, strict=True))
    lines = ["rank\tsentence\ttoken\tline\tword\tscore\tsuggestion\tp"]
    for k, it in enumerate(items, 1):
        s = sents[it.sentence]
        row = by_sent[it.sentence][it.token]
        j = int(np.argmax(row))
        lines.append(f"{k}\t{it.sentence + 1}\t{it.token + 1}\t{s.line + it.token}\t"
                     f"{s.tokens[it.token][0]}\t{it.score:.6f}\t{model.classes_[j]}\t"
                     f"{float(row[j]):.6f}")
    _write_output("\n".join(lines) + "\n", args.output, args.encoding)
    print(f"{len(items)} tokens by {strategy}{' (diverse batch)' if args.diverse else ''}",
          file=sys.stderr)
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    model = _load_model(args.model)
    sents, X, has_gold = _read_for_model(model, args.test_file, args.encoding, args.max_tokens)
    if not has_gold:
        raise InputError(
            f"no gold label column: the file has {model.n_columns_} columns, the model's feature "
            f"columns only", source=args.test_file, line=sents[0].line)
    pred = model.predict(X, decoder=args.decoder)
    marg = model.predict_marginals(X)
    total = right = missing = 0
    for s, labs in zip(sents, pred, strict=True):
        for tok, p in zip(s.tokens, labs, strict=True):
            gold = tok[-1]
            if gold == args.missing:
                missing += 1
                continue
            total += 1
            right += gold == p
    if total == 0:
        raise InputError(f"no gold labels to score (every label is {args.missing!r})",
                         source=args.test_file)
    acc = 100.0 * right / total
    print(f"tokens: {total + missing} (scored {total}, missing {missing})")
    print(f"accuracy: {acc:.2f}%")
    print(f"hamming loss: {100.0 - acc:.2f}%")
    gold = [[tok[-1] for tok in s.tokens] for s in sents]
    index = {c: i for i, c in enumerate(model.classes_)}
    gidx = [[index.get(g, -1) if g != args.missing else -1 for g in labs] for labs in gold]
    cal = metrics.calibration_summary(marg, gidx)
    state = "calibrated" if getattr(model, "calibrator_", None) is not None else "uncalibrated"
    print(f"marginals ({state}, labels known to the model): mean confidence "
          f"{cal['mean_confidence']:.4f}, accuracy {cal['accuracy']:.4f}, ECE (15 equal-mass "
          f"bins) {cal['ece_mass']:.4f}, ECE (10 bins) {cal['ece_width']:.4f}, NLL "
          f"{cal['nll']:.4f}, Brier {cal['brier']:.4f}")
    if metrics.is_chunk_label_set(lab for g in gold for lab in g if lab != args.missing):
        keep = [i for i, g in enumerate(gold) if args.missing not in g]
        print(f"chunks (conlleval, seqeval): {len(keep)} of {len(gold)} sentences with "
              "complete gold labels")
        print(metrics.conlleval_report([gold[i] for i in keep], [list(pred[i]) for i in keep]))
    return 0


# --------------------------------------------------------------------------- crowds


def _refuse_crowd_options(args: argparse.Namespace) -> None:
    """``train`` without ``--crowd``: a crowd option given anyway is an error, not ignored."""
    given = [opt for opt, value, default in (
        ("--crowd-format", args.crowd_format, None), ("--annotators", args.annotators, None),
        ("--annotator-names", args.annotator_names, None), ("--labels", args.labels, None),
        ("--trusted", args.trusted, []), ("--report", args.report, None),
        ("--tagger-prior", getattr(args, "tagger_prior", None), None))
        if value != default]
    if given:
        raise InputError(f"{given[0]} needs --crowd", source="arguments")


def _read_crowd_votes(args: argparse.Namespace, path: str):
    """Crowd sentences and their :class:`gpsl.crowd.Votes` from the crowd options."""
    from gpsl.crowd import Votes
    from gpsl.io import read_crowd

    kw: dict[str, Any] = {"encoding": args.encoding, "missing": args.missing,
                          "labels": args.labels, "max_tokens": args.max_tokens}
    fmt = args.crowd_format
    if fmt is None:
        fmt = "jsonl" if path.lower().endswith((".jsonl", ".json")) else "conll"
    if fmt == "jsonl" and (args.annotators is not None or args.annotator_names is not None):
        raise InputError("--annotators/--annotator-names apply to CoNLL crowd input only",
                         source=path)
    if fmt == "conll":
        if args.annotators is None:
            raise InputError("a CoNLL crowd file needs --annotators N (the number of "
                             "annotator label columns)", source=path)
        kw["annotators"] = args.annotator_names
    sents = read_crowd(path, fmt, n_annotators=args.annotators, **kw)
    names = {a for s in sents for a in s.annotations}
    unknown = [t for t in args.trusted if t not in names]
    if unknown:
        raise InputError(f"--trusted {unknown[0]!r}: no such annotator in the file", source=path)
    votes = Votes.from_sentences(sents, classes=args.labels, trusted=args.trusted, source=path)
    if votes.token.size == 0 and not (votes.observed >= 0).any():
        raise InputError("no votes in the file", source=path)
    return sents, votes


def _annotator_table(rows: list[dict]) -> str:
    lines = [f"{'annotator':<16} {'votes':>7} {'model':>9} {'accuracy':>9} {'agreement':>10}"]
    for r in rows:
        acc = "-" if r["accuracy"] is None else f"{r['accuracy']:.3f}"
        agr = "-" if r["agreement"] is None else f"{r['agreement']:.3f}"
        lines.append(f"{r['annotator'][:16]:<16} {r['votes']:>7d} {r['model']:>9} {acc:>9} "
                     f"{agr:>10}")
    return "\n".join(lines)


def _write_report(path: str | None, payload: dict) -> None:
    import json

    if path is None:
        return
    _write_output(json.dumps(payload, indent=1, ensure_ascii=False) + "\n", path, "utf-8")


def _gold_accuracy(sents, labels_flat) -> float | None:
    gold = [v for s in sents for v in s.labels]
    pairs = [(g, p) for g, p in zip(gold, labels_flat) if g is not None and p is not None]
    return 100.0 * sum(g == p for g, p in pairs) / len(pairs) if pairs else None


def _cmd_aggregate(args: argparse.Namespace) -> int:
    import json

    from gpsl.crowd import DawidSkene, MajorityVote, annotator_report
    from gpsl.io import format_conll

    sents, votes = _read_crowd_votes(args, args.crowd_file)
    if args.method == "majority":
        agg = MajorityVote().fit_votes(votes)
    else:
        agg = DawidSkene(prior_diag=args.prior_diag, prior_off=args.prior_off,
                         min_votes=args.min_votes, shrink=args.shrink).fit_votes(votes)
    P = agg.probas_
    labels = agg.labels_array_
    prob = [float(P[t].max()) if labels[t] is not None else None for t in range(votes.n)]
    cuts = np.cumsum(votes.lengths)[:-1]
    lab_s = np.split(np.array(labels, dtype=object), cuts)
    prob_s = np.split(np.array(prob, dtype=object), cuts)
    if args.output_format == "conll":
        extra = [[["_" if lab is None else lab, "_" if p is None else f"{p:.6f}"]
                  for lab, p in zip(ls, ps)] for ls, ps in zip(lab_s, prob_s)]
        text = format_conll(sents, extra_columns=extra, label=False,
                            source=args.output or "<stdout>")
    else:
        out = []
        for s, ls, ps in zip(sents, lab_s, prob_s):
            toks = [t[0] if len(t) == 1 else list(t) for t in s.tokens]
            obj: dict[str, Any] = {"tokens": toks, "labels": list(ls),
                                   "probabilities": [None if p is None else round(p, 6)
                                                     for p in ps]}
            if s.id is not None:
                obj = {"id": s.id, **obj}
            out.append(json.dumps(obj, ensure_ascii=False))
        text = "\n".join(out) + "\n"
    _write_output(text, args.output, args.encoding)
    rows = annotator_report(agg, votes)
    gold = _gold_accuracy(sents, labels)
    _write_report(args.report, {"method": args.method, "classes": votes.classes,
                                "tokens": votes.n, "voted_tokens": int(votes.voted().sum()),
                                "gold_accuracy": gold, "annotators": rows})
    if not args.quiet:
        _err(_annotator_table(rows))
        _err(f"gpsl: aggregated {int(votes.token.size)} votes of {votes.A} annotators on "
             f"{int(votes.voted().sum())} of {votes.n} tokens"
             + ("" if gold is None else f"; accuracy against the gold labels {gold:.2f}%"))
    return 0


def _cmd_train_crowd(args: argparse.Namespace) -> int:
    from gpsl.crowd import CrowdGPSL, annotator_report
    from gpsl.features import Template
    from gpsl.model import GPSL
    from gpsl.persist import check_destination

    t0 = time.perf_counter()
    check_destination(args.model_dir)
    sents, votes = _read_crowd_votes(args, args.train_file)
    n_columns = len(sents[0].tokens[0])
    template_text = None
    if args.template is not None:
        template = Template.from_file(args.template, encoding=args.encoding)
        template.validate(n_columns)
        template_text = template.text
    extra: dict[str, Any] = {} if args.tol is None else {"tol": args.tol}
    if getattr(args, "inference", None) is not None:
        extra["inference"] = args.inference
    if getattr(args, "inducing", None) is not None:
        extra["inducing"] = args.inducing
    model = GPSL(offsets=args.offsets, kernel=args.kernel, template=template_text,
                 min_freq=args.min_freq, max_iter=args.max_iter,
                 learn_hyper=args.learn_hyper, variance=args.variance, **extra)

    def progress(info: dict) -> None:
        if not args.quiet:
            _err(f"iter={int(info.get('iteration', 0)):<4d} "
                 f"bound={float(info.get('bound', float('nan'))):.6f} "
                 f"time={float(info.get('seconds', 0.0)):.2f}s")

    joint = CrowdGPSL(model, prior_diag=args.prior_diag, prior_off=args.prior_off,
                      min_votes=args.min_votes, shrink=args.shrink,
                      tagger_prior=args.tagger_prior or "learn")
    joint.fit([s.tokens for s in sents], votes, callback=progress)
    joint.model_.save(args.model_dir)
    rows = annotator_report(joint, votes)
    gold = _gold_accuracy(sents, joint.labels_array_)
    _write_report(args.report, {"method": "joint", "classes": votes.classes, "tokens": votes.n,
                                "voted_tokens": int(votes.voted().sum()),
                                "gold_accuracy": gold, "annotators": rows})
    if not args.quiet:
        _err(_annotator_table(rows))
    _err(f"gpsl: trained on {votes.n} tokens ({len(sents)} sentences) with {votes.token.size} "
         f"votes of {votes.A} annotators, {len(votes.classes)} labels, "
         f"{time.perf_counter() - t0:.2f} seconds; model saved to {args.model_dir}")
    return 0


# --------------------------------------------------------------------------- entry point


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, InputError):
        where = f"{exc.filename}: " if exc.filename else ""
        return where + " ".join(str(exc.strerror or exc).split())
    return " ".join(str(exc).split()) or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 on any error)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(_join_offsets(args_list))
    except _ArgumentError as exc:
        _err(f"gpsl: error: {_one_line(exc)} (see gpsl --help)")
        return 2
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else 0
    if getattr(args, "func", None) is None:
        _err("gpsl: error: a command is required: train, test, eval, aggregate or worker "
             "(see gpsl --help)")
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
    except (GpslError, OSError, ValueError) as exc:
        _err(f"gpsl: error: {_one_line(exc)}")
        return 2
    except MemoryError:
        _err("gpsl: error: not enough memory for this input (try smaller files or a lower "
             "--max-tokens)")
        return 2
    except KeyboardInterrupt:
        _err("gpsl: interrupted")
        return 130
    except Exception as exc:  # a bug: still one line, unless GPSL_DEBUG asks for the traceback
        if os.environ.get("GPSL_DEBUG"):
            raise
        _err(f"gpsl: internal error: {type(exc).__name__}: {_one_line(exc)} "
             "(set GPSL_DEBUG=1 for the traceback; please report it)")
        return 1
