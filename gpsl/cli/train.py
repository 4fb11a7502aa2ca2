"""``gpsl train``: fit a model on a CRF++ column file (like ``crf_learn``), or on crowd votes
(``--crowd``), calibrate it, and save it.

Every model option is a :class:`gpsl.model.GPSL` parameter read from :mod:`gpsl.params`
(:data:`MODEL_OPTIONS`), passed to the model as given, with crowd votes too: there the
saved tagger is refitted with them on the inferred labels (:class:`gpsl.crowd.CrowdGPSL`;
the joint fit itself uses the tagger prior ``--tagger-prior``, by default ``auto``).

Calibration is on by default, with the app's rule (:func:`gpsl.calibration.calibrate_model`):
``--calibrate FILE`` (held-out gold), else K folds of the training sentences
(``--calibrate-folds K`` or :func:`gpsl.calibration.calibration_folds`), fitted in ``--jobs``
processes; too little data leaves the model uncalibrated and the summary line says why.
``--no-calibrate`` turns it off. ``--crowd`` has no gold labels: without ``--calibrate FILE``
it calibrates on folds of the labels the crowd model inferred (docs/cli.md: measured against
gold, far better than none).

An option a run cannot honour is refused in one line (``--scheduler`` with ``--crowd``;
``--jobs`` without fold fits; ``--calibrate FILE`` or ``--calibrate-folds K`` the data is too
small for; a crowd option without ``--crowd``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from gpsl.cli import common, crowd
from gpsl.errors import InputError

#: the GPSL parameters ``train`` sets, in the order of its help
MODEL_OPTIONS = ("offsets", "kernel", "inference", "lse_bound", "missing_start",
                 "missing_weight", "inducing", "max_iter", "tol", "learn_hyper", "variance",
                 "pair_variance", "min_freq", "cluster")


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train a model from a CRF++ column file (like crf_learn)",
                       description="Train a GPSL model from a labeled CRF++ column file "
                                   "(label in the last column, '_' for a missing label).")
    p.add_argument("-t", "--template", metavar="TEMPLATE",
                   help="CRF++ template file, or 'ner': the built-in feature set for word-only "
                        "data (word, shape, affixes, capitalisation; default: a window over "
                        "every column)")
    common.add_params(p, MODEL_OPTIONS)
    common.add_encoding(p)
    common.add_missing(p, "label marking a missing label (default _)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    common.add_max_tokens(p)
    cal = p.add_mutually_exclusive_group()
    cal.add_argument("--calibrate", metavar="FILE", default=None,
                     help="held-out labeled CoNLL file (the training file's columns, 50 "
                          "labeled tokens or more) on which the marginals' calibration is "
                          "fitted and saved with the model (default: folds of the training "
                          "sentences)")
    common.add_params(cal, ("calibrate_folds", "no_calibrate"))
    common.add_params(p, ("jobs",))
    p.add_argument("--crowd", action="store_true",
                   help="TRAIN_FILE holds crowd votes (JSONL annotations, CoNLL with "
                        "--annotators N, or a folder SPLIT/ground_truth + "
                        "SPLIT/mturk_train_data/WORKER): learn the annotators jointly")
    crowd.add_joint_options(p)
    crowd.add_options(p)
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
    crowd.refuse_without_crowd(args)
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
    cal = read_calibration(args, n_columns)
    refuse_jobs(args, check_plan(args, _labeled([s.labels for s in sents]), cal))
    model = _model(args, template_text)
    X, y = [s.tokens for s in sents], [s.labels for s in sents]
    model.fit(X, y, callback=common.progress(args.quiet))
    run_ = _calibrate(model, X, y, cal, args)
    model.save(args.model_dir)
    seconds = time.perf_counter() - t0
    n_features = len(model.extractor_.vocabulary_)
    common.err(f"gpsl: trained on {n_tokens} tokens ({len(sents)} sentences, "
               f"{model.inference_} inference), {len(model.classes_)} labels, {n_missing} "
               f"missing labels, {n_features} features, fit {model.fit_seconds_:.2f} s; "
               f"{run_.summary()}; {seconds:.2f} seconds in all; model saved to "
               f"{args.model_dir}")
    return 0


def _labeled(labels) -> tuple[int, int]:
    """Labeled sentences and labeled tokens of per-sentence ``labels`` (None = missing)."""
    counts = [sum(lab is not None for lab in s) for s in labels]
    return sum(c > 0 for c in counts), sum(counts)


def check_plan(args: argparse.Namespace, labeled: tuple[int, int], cal):
    """The calibration the rule will choose (:func:`gpsl.calibration.plan`) for ``labeled``
    (training sentences and tokens with a label), checked before any training:
    ``--calibrate FILE`` or ``--calibrate-folds K`` the data cannot honour is refused in one
    line."""
    from gpsl.calibration import MIN_TOKENS, plan

    if args.no_calibrate:
        return None
    n_sent, n_tok = labeled
    h_sent, h_tok = (0, 0) if cal is None else (len(cal), _labeled([s.labels for s in cal])[1])
    p = plan(labeled_sentences=n_sent, labeled_tokens=n_tok, held_out_sentences=h_sent,
             held_out_tokens=h_tok, folds=args.calibrate_folds)
    if cal is not None and p.source != "held-out":
        raise InputError(f"too little to calibrate on: {h_tok} labeled tokens in {h_sent} "
                         f"sentences (at least {MIN_TOKENS} in two; or leave --calibrate out "
                         "to calibrate on folds of the training sentences)",
                         source=args.calibrate)
    if args.calibrate_folds is not None and p.source != "folds":
        raise InputError(f"--calibrate-folds {args.calibrate_folds}: {p.reason}",
                         source=args.train_file)
    return p


def refuse_jobs(args: argparse.Namespace, p) -> None:
    """``--jobs`` sets the processes of the fold fits: refused where there are none."""
    if args.jobs is None:
        return
    if args.no_calibrate:
        common.refuse("--jobs", "sets the processes of the calibration's fold fits; with "
                                "--no-calibrate there are none")
    if args.calibrate is not None:
        common.refuse("--jobs", "sets the processes of the calibration's fold fits; "
                                "--calibrate FILE calibrates on held-out labels without them")
    if args.cluster is not None and args.jobs > 1:
        common.refuse("--jobs", "with --scheduler: the fold fits run on the Dask cluster, "
                                "one after the other")


def _calibrate(model, X, y, cal, args: argparse.Namespace, folds_source="{folds}-fold"):
    """The model's calibration by the app's rule (:func:`gpsl.calibration.calibrate_model`)
    and its line; ``--no-calibrate`` records that it is off."""
    from gpsl.calibration import calibrate_model, not_calibrated

    if args.no_calibrate:
        return not_calibrated(model, "--no-calibrate")
    required = ("held-out" if cal is not None
                else "folds" if args.calibrate_folds is not None else None)
    held = None if cal is None else ([s.tokens for s in cal], [s.labels for s in cal])
    run_ = calibrate_model(model, X, y, held_out=held, folds=args.calibrate_folds,
                           required=required, jobs=args.jobs,
                           held_out_source=Path(args.calibrate).name if cal else "held-out",
                           folds_source=folds_source)
    _calibration_line(model)
    return run_


def _calibration_line(model) -> None:
    c = getattr(model, "calibrator_", None)
    if c is not None:
        common.err(f"gpsl: calibrated on {c.n_tokens} tokens ({c.source}): {c.kind}, "
                   f"{c.describe()}; NLL {c.nll_before:.4f} -> {c.nll_after:.4f}")


def read_calibration(args: argparse.Namespace, n_columns: int):
    """The ``--calibrate`` file's sentences (checked before any training), or None."""
    from gpsl.io import read_conll

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
    from gpsl.crowd import CrowdGPSL
    from gpsl.persist import check_destination

    if args.cluster is not None:
        common.refuse("--scheduler", "does not run the crowd model (--crowd)")
    t0 = time.perf_counter()
    check_destination(args.model_dir)
    data = crowd.read_votes(args, args.train_file)
    sents, votes = data.sentences, data.votes
    n_columns = len(sents[0].tokens[0])
    template_text = common.read_template(args.template, args.encoding, n_columns)
    cal = read_calibration(args, n_columns)
    refuse_jobs(args, check_plan(args, _labeled(inferred_labels(None, votes)), cal))
    model = _model(args, template_text)
    joint = CrowdGPSL(model, **crowd.joint_settings(args), **crowd.crowd_settings(args))
    X = [s.tokens for s in sents]
    joint.fit(X, votes, callback=common.progress(args.quiet))
    run_ = _calibrate(joint.model_, X, inferred_labels(joint, votes), cal, args,
                      folds_source="{folds}-fold inferred labels")
    joint.model_.save(args.model_dir)
    rep = crowd.report("joint", data, joint, joint.labels_array_)
    crowd.write_report(args.report, rep)
    if not args.quiet:
        crowd.show(rep)
    common.err(f"gpsl: trained on {votes.n} tokens ({len(sents)} sentences) with "
               f"{votes.token.size} votes of {votes.A} annotators, {len(votes.classes)} labels; "
               f"{run_.summary()}; {time.perf_counter() - t0:.2f} seconds in all; model saved "
               f"to {args.model_dir}")
    return 0


def inferred_labels(joint, votes) -> list[list]:
    """``train --crowd``'s calibration data without gold: per sentence, the label the crowd
    model inferred (``joint.labels_array_``) at every token with a vote or an observed label,
    ``None`` elsewhere (the tokens its tagger was refitted on). ``joint=None``: ``True`` at
    those tokens (to count them before the fit). Measured against gold in
    ``bench.crowd_calibration``."""
    keep = votes.split(votes.voted() | (votes.observed >= 0))
    flat = (np.ones(votes.n, dtype=bool) if joint is None
            else np.asarray(joint.labels_array_, dtype=object))
    return [[(True if joint is None else lab) if k else None for lab, k in zip(lv, kv)]
            for lv, kv in zip(votes.split(flat), keep)]
