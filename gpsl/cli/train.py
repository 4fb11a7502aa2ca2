"""``gpsl train``: fit a model on a CRF++ column file (like ``crf_learn``), or on crowd votes
(``--crowd``), optionally calibrate it, and save it.

Every model option is a :class:`gpsl.model.GPSL` parameter read from :mod:`gpsl.params`
(:data:`MODEL_OPTIONS`), passed to the model as given, with crowd votes too: there the
saved tagger is refitted with them on the inferred labels (:class:`gpsl.crowd.CrowdGPSL`).
An option a run cannot honour is refused in one line (``--scheduler`` and
``--calibrate-folds`` with ``--crowd``; a crowd option without it).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from gpsl.cli import aggregate, common
from gpsl.errors import InputError

#: the GPSL parameters ``train`` sets, in the order of its help
MODEL_OPTIONS = ("offsets", "kernel", "inference", "lse_bound", "missing_start",
                 "missing_weight", "inducing", "max_iter", "tol", "learn_hyper", "variance",
                 "min_freq", "cluster")


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train a model from a CRF++ column file (like crf_learn)",
                       description="Train a GPSL model from a labeled CRF++ column file "
                                   "(label in the last column, '_' for a missing label).")
    p.add_argument("-t", "--template", metavar="TEMPLATE",
                   help="CRF++ template file (default: a window over every column)")
    common.add_params(p, MODEL_OPTIONS)
    common.add_encoding(p)
    common.add_missing(p, "label marking a missing label (default _)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    common.add_max_tokens(p)
    cal = p.add_mutually_exclusive_group()
    cal.add_argument("--calibrate", metavar="FILE", default=None,
                     help="held-out labeled CoNLL file (the training file's columns) on which "
                          "the marginals' calibration is fitted and saved with the model")
    common.add_params(cal, ("calibrate_folds",))
    p.add_argument("--crowd", action="store_true",
                   help="TRAIN_FILE holds crowd votes (JSONL annotations, or CoNLL with "
                        "--annotators N): learn annotator confusion matrices jointly")
    common.add_params(p, ("tagger_prior",), tagger_prior={"default": None})
    aggregate.add_crowd_options(p)
    p.add_argument("train_file", metavar="TRAIN_FILE")
    p.add_argument("model_dir", metavar="MODEL_DIR")
    p.set_defaults(func=run)


def _model(args: argparse.Namespace, template_text: str | None):
    from gpsl.model import GPSL

    return GPSL(template=template_text, **{k: getattr(args, k) for k in MODEL_OPTIONS})


def run(args: argparse.Namespace) -> int:
    from gpsl.persist import check_destination

    if args.crowd:
        return _run_crowd(args)
    aggregate.refuse_crowd_options(args)
    t0 = time.perf_counter()
    check_destination(args.model_dir)  # refuse before spending time on training
    from gpsl.io import read_conll

    sents = read_conll(args.train_file, encoding=args.encoding, missing=args.missing,
                       max_tokens=args.max_tokens)
    n_columns = len(sents[0].tokens[0])
    template_text = common.read_template(args.template, args.encoding, n_columns)
    n_tokens = sum(len(s) for s in sents)
    n_missing = sum(s.n_missing for s in sents)
    if n_missing == n_tokens:
        raise InputError(f"no labeled token: every label is {args.missing!r}",
                         source=args.train_file)
    cal = read_calibration(args, n_columns, len(sents))
    model = _model(args, template_text)
    model.fit([s.tokens for s in sents], [s.labels for s in sents],
              callback=common.progress(args.quiet))
    if args.calibrate_folds is not None:
        model.calibrate([s.tokens for s in sents], [s.labels for s in sents],
                        folds=args.calibrate_folds)
    _calibrate(model, cal, args)
    model.save(args.model_dir)
    seconds = time.perf_counter() - t0
    n_features = len(model.extractor_.vocabulary_)
    common.err(f"gpsl: trained on {n_tokens} tokens ({len(sents)} sentences, "
               f"{model.inference_} inference), {len(model.classes_)} labels, {n_missing} "
               f"missing labels, {n_features} features, {seconds:.2f} seconds; model saved "
               f"to {args.model_dir}")
    return 0


def _calibrate(model, cal, args: argparse.Namespace) -> None:
    """``--calibrate FILE`` (held-out sentences ``cal``); the calibration line."""
    if cal is not None:
        model.calibrate([s.tokens for s in cal], [s.labels for s in cal],
                        source=Path(args.calibrate).name)
    c = getattr(model, "calibrator_", None)
    if c is not None:
        common.err(f"gpsl: calibrated on {c.n_tokens} tokens ({c.source}): {c.kind}, "
                   f"{c.describe()}; NLL {c.nll_before:.4f} -> {c.nll_after:.4f}")


def read_calibration(args: argparse.Namespace, n_columns: int, n_sentences: int):
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


def _run_crowd(args: argparse.Namespace) -> int:
    """``train --crowd``: the joint model of the crowd's votes and the tagger
    (:class:`gpsl.crowd.CrowdGPSL`); the tagger's options as without ``--crowd``."""
    from gpsl.crowd import CrowdGPSL, annotator_report
    from gpsl.persist import check_destination

    if args.cluster is not None:
        common.refuse("--scheduler", "does not run the crowd model (--crowd)")
    if args.calibrate_folds is not None:
        common.refuse("--calibrate-folds", "needs labeled training sentences; with --crowd "
                                           "give held-out gold labels with --calibrate FILE")
    t0 = time.perf_counter()
    check_destination(args.model_dir)
    sents, votes = aggregate.read_crowd_votes(args, args.train_file)
    n_columns = len(sents[0].tokens[0])
    template_text = common.read_template(args.template, args.encoding, n_columns)
    cal = read_calibration(args, n_columns, len(sents))
    model = _model(args, template_text)
    joint = CrowdGPSL(model, tagger_prior=args.tagger_prior or "learn",
                      **aggregate.crowd_settings(args))
    joint.fit([s.tokens for s in sents], votes, callback=common.progress(args.quiet))
    _calibrate(joint.model_, cal, args)
    joint.model_.save(args.model_dir)
    rows = annotator_report(joint, votes)
    gold = aggregate.gold_accuracy(sents, joint.labels_array_)
    aggregate.write_report(args.report, {"method": "joint", "classes": votes.classes,
                                         "tokens": votes.n,
                                         "voted_tokens": int(votes.voted().sum()),
                                         "gold_accuracy": gold, "annotators": rows})
    if not args.quiet:
        common.err(aggregate.annotator_table(rows))
    common.err(f"gpsl: trained on {votes.n} tokens ({len(sents)} sentences) with "
               f"{votes.token.size} votes of {votes.A} annotators, {len(votes.classes)} labels, "
               f"{time.perf_counter() - t0:.2f} seconds; model saved to {args.model_dir}")
    return 0
