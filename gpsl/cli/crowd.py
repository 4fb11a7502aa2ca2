"""The crowd options and reading that ``aggregate`` and ``train --crowd`` share, and the one
place their annotator report is assembled.

Crowd input is JSONL with ``"annotations"``, CoNLL with one label column per annotator
(``--annotators N``), see :func:`gpsl.io.read_crowd`, or a folder in the one-folder-per-
annotator layout (``SPLIT/ground_truth/DOC.txt``, ``SPLIT/mturk_train_data/WORKER/DOC.txt``),
read with :func:`gpsl.io.crowd_raw.read_crowd_folder` (votes aligned to the gold tokens; how
many were kept and dropped is printed and returned, :class:`CrowdInput`, for ``--report``).
Every crowd parameter is read from :mod:`gpsl.params`; its default on the command line is
None, so that ``train`` can tell one given without ``--crowd`` and refuse it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from gpsl import params
from gpsl.cli import common
from gpsl.errors import InputError

#: the crowd model's parameters (:mod:`gpsl.params`, group ``"crowd"``) as options
CROWD_PARAMS = ("min_votes", "prior_diag", "prior_off", "shrink")
#: the joint model's own parameters (``train --crowd``, ``aggregate --model joint``)
JOINT_PARAMS = ("tagger_prior", "annotator_model", "kappa", "prior_rule", "centre_target",
                "refit_prior", "crossfit")


class CrowdInput(NamedTuple):
    """What :func:`read_votes` read: the crowd sentences, their :class:`gpsl.crowd.Votes` and,
    for a folder, the alignment report (:class:`gpsl.io.crowd_raw.AlignmentReport`, else
    None)."""

    sentences: list
    votes: Any
    alignment: Any = None


def add_joint_options(p: argparse.ArgumentParser) -> None:
    """The joint model's options, None when not given."""
    common.add_params(p, JOINT_PARAMS, **{k: {"default": None} for k in JOINT_PARAMS})


def add_options(p: argparse.ArgumentParser) -> None:
    """The crowd input's options, the crowd model's parameters and ``--report``."""
    p.add_argument("--crowd-format", choices=("jsonl", "conll"), default=None,
                   help="crowd input format (default: jsonl for *.jsonl/*.json, else conll)")
    common.add_params(p, ("annotators",))
    p.add_argument("--annotator-names", type=common.names, default=None, metavar="A,B,...",
                   help="names of the CoNLL annotator columns (default a1..aN)")
    p.add_argument("--labels", type=common.names, default=None, metavar="L1,L2,...",
                   help="the label set; any other label in the votes is an error")
    p.add_argument("--trusted", action="append", default=[], metavar="NAME",
                   help="an annotator whose labels are taken as observed (adjudication); "
                        "repeatable")
    for name in CROWD_PARAMS:
        p_ = params.param(name)
        params.add_option(p, name, default=None, help=f"{p_.help} (default {p_.default})")
    p.add_argument("--report", metavar="REPORT_JSON",
                   help="write the annotator report (votes, estimated accuracy, confusion "
                        "matrix) as JSON")


def _given_or_default(args: argparse.Namespace, names: tuple[str, ...]) -> dict:
    return {k: params.param(k).default if getattr(args, k) is None else getattr(args, k)
            for k in names}


def crowd_settings(args: argparse.Namespace) -> dict:
    """The crowd model's parameters: those given, the table's defaults for the rest."""
    return _given_or_default(args, CROWD_PARAMS)


def joint_settings(args: argparse.Namespace) -> dict:
    """The joint model's own parameters: those given, the table's defaults for the rest."""
    return _given_or_default(args, JOINT_PARAMS)


def refuse_without_crowd(args: argparse.Namespace) -> None:
    """``train`` without ``--crowd``: a crowd option given anyway is an error, not ignored."""
    given = [opt for opt, value, default in (
        ("--crowd-format", args.crowd_format, None), ("--annotators", args.annotators, None),
        ("--annotator-names", args.annotator_names, None), ("--labels", args.labels, None),
        ("--trusted", args.trusted, []), ("--report", args.report, None),
        *((params.param(k).flags[-1], getattr(args, k), None)
          for k in CROWD_PARAMS + JOINT_PARAMS))
        if value != default]
    if given:
        common.refuse(given[0], "needs --crowd")


def _read_folder(args: argparse.Namespace, path: str):
    from gpsl.io.crowd_raw import read_crowd_folder

    for opt, value in (("--crowd-format", args.crowd_format), ("--annotators", args.annotators),
                       ("--annotator-names", args.annotator_names)):
        if value is not None:
            raise InputError(f"{opt} does not apply to a folder (read as SPLIT/"
                             "ground_truth + SPLIT/mturk_train_data/WORKER)", source=path)
    sents, alignment = read_crowd_folder(path, labels=args.labels, encoding=args.encoding,
                                         max_tokens=args.max_tokens)
    if not getattr(args, "quiet", False):
        common.err(f"gpsl: read {path}: {alignment.summary()}")
    return sents, alignment


def _read_file(args: argparse.Namespace, path: str):
    from gpsl.io import read_crowd

    fmt = args.crowd_format
    kw: dict[str, Any] = {"encoding": args.encoding, "missing": args.missing,
                          "labels": args.labels, "max_tokens": args.max_tokens}
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
    return read_crowd(path, fmt, n_annotators=args.annotators, **kw)


def read_votes(args: argparse.Namespace, path: str) -> CrowdInput:
    """The crowd sentences of ``path`` (a file or a folder), their votes and, for a folder,
    the alignment report, read as the crowd options say."""
    from gpsl.crowd import Votes

    if not Path(path).exists():
        raise InputError("no such file or folder", source=path)
    alignment = None
    if Path(path).is_dir():
        sents, alignment = _read_folder(args, path)
    else:
        sents = _read_file(args, path)
    names = {a for s in sents for a in s.annotations}
    unknown = [t for t in args.trusted if t not in names]
    if unknown:
        raise InputError(f"--trusted {unknown[0]!r}: no such annotator in the file", source=path)
    votes = Votes.from_sentences(sents, classes=args.labels, trusted=args.trusted, source=path)
    if votes.token.size == 0 and not (votes.observed >= 0).any():
        raise InputError("no votes in the file", source=path)
    return CrowdInput(sents, votes, alignment)


# --------------------------------------------------------------------------- the report


def report(method: str, data: CrowdInput, model, labels) -> dict:
    """The annotator report of a crowd run (``--report``'s JSON and what the lines print):
    the votes, the aggregated or inferred ``labels`` (one per token) against the file's gold
    (:func:`gpsl.metrics.gold_accuracy`, :func:`gpsl.metrics.gold_span_f1`), the alignment
    of a folder, every annotator (:func:`gpsl.crowd.annotator_report`) and the held-out-vote
    rule's choice of priors."""
    from gpsl import metrics
    from gpsl.crowd import annotator_report

    votes = data.votes
    gold = [list(s.labels) for s in data.sentences]
    pred = votes.split(np.array(labels, dtype=object))
    return {"method": method, "classes": votes.classes, "tokens": votes.n,
            "voted_tokens": int(votes.voted().sum()),
            "gold_accuracy": metrics.gold_accuracy(gold, pred),
            "gold_span_f1": metrics.gold_span_f1(gold, pred),
            "alignment": None if data.alignment is None else data.alignment.as_dict(),
            "annotators": annotator_report(model, votes), **_priors(model)}


def _priors(model) -> dict:
    """``{"priors": ..., "refit_prior": ...}``: the held-out-vote rules' choices and scores
    (each only when it ran)."""
    out = {}
    c = getattr(model, "prior_choice_", None)
    if c is not None:
        out["priors"] = {"kappa": c.kappa, "shrink": c.shrink, "heldout_votes": c.heldout_votes,
                         "scores": [{"kappa": k, "shrink": s, "heldout_log_lik": v}
                                    for k, s, v in c.scores]}
    rc = getattr(model, "refit_choice_", None)
    if rc is not None:
        out["refit_prior"] = {"variance": rc.variance, "folds": rc.folds,
                              "scores": [{"variance": v, "heldout_log_lik": sc}
                                         for v, sc in rc.scores]}
    cf = getattr(model, "crossfit_", None)
    if cf is not None:
        out["crossfit"] = {"rounds": [{"heldout_log_lik": t["heldout"], "moved": t["moved"]}
                                      for t in cf.rounds]}
    return out


def write_report(path: str | None, payload: dict) -> None:
    if path is None:
        return
    common.write_output(json.dumps(payload, indent=1, ensure_ascii=False) + "\n", path,
                        "utf-8")


def annotator_table(rows: list[dict]) -> str:
    lines = [f"{'annotator':<16} {'votes':>7} {'model':>9} {'accuracy':>9} {'agreement':>10}"]
    for r in rows:
        acc = "-" if r["accuracy"] is None else f"{r['accuracy']:.3f}"
        agr = "-" if r["agreement"] is None else f"{r['agreement']:.3f}"
        lines.append(f"{r['annotator'][:16]:<16} {r['votes']:>7d} {r['model']:>9} {acc:>9} "
                     f"{agr:>10}")
    return "\n".join(lines)


def show(payload: dict) -> None:
    """The annotator table and the priors' line of a :func:`report` on stderr."""
    common.err(annotator_table(payload["annotators"]))
    c = payload.get("priors")
    if c is not None:
        common.err(f"gpsl: priors by {c['heldout_votes']} held-out votes: kappa "
                   f"{c['kappa']:g}, shrink {c['shrink']:g} (held-out log-likelihood "
                   f"{max(s['heldout_log_lik'] for s in c['scores']):.1f} nats, best of "
                   f"{len(c['scores'])})")
    rc = payload.get("refit_prior")
    if rc is not None and rc["scores"]:
        common.err(f"gpsl: the tagger's prior variance by the votes of {rc['folds']} held-out "
                   f"folds: {rc['variance']:g} (held-out log-likelihood "
                   f"{max(s['heldout_log_lik'] for s in rc['scores']):.1f} nats, best of "
                   f"{len(rc['scores'])})")
    cf = payload.get("crossfit")
    if cf is not None and cf["rounds"]:
        last = cf["rounds"][-1]
        common.err(f"gpsl: {len(cf['rounds'])} cross-fitted rounds (the last moved the "
                   f"posteriors {last['moved']:.4f} per token; held-out votes "
                   f"{last['heldout_log_lik']:.1f} nats)")
