"""``gpsl aggregate``: per-token posteriors and per-annotator reliability from crowd votes
(Dawid-Skene or the majority), without a tagger; and the crowd options and readers that
``train --crowd`` shares.

Crowd input is JSONL with ``"annotations"`` or CoNLL with one label column per annotator
(``--annotators N``), see :func:`gpsl.io.read_crowd`; ``aggregate`` writes the aggregated label
and its probability after every token (``_ _`` for a token without votes).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from gpsl import params
from gpsl.cli import common
from gpsl.errors import InputError

#: the crowd model's parameters (:mod:`gpsl.params`, group ``"crowd"``) as options; their
#: default is None on the command line so that ``train`` can tell one given without --crowd
CROWD_PARAMS = ("min_votes", "prior_diag", "prior_off", "shrink")


def add_parser(sub) -> None:
    p = sub.add_parser("aggregate", help="aggregate crowd votes (Dawid-Skene) without a tagger",
                       description="Per-token posteriors and per-annotator reliability from "
                                   "crowd votes (JSONL annotations, or CoNLL with one label "
                                   "column per annotator).")
    p.add_argument("--method", choices=("dawid-skene", "majority"), default="dawid-skene")
    common.add_encoding(p)
    common.add_missing(p, "label marking 'no label' (default _)")
    p.add_argument("--output-format", choices=("conll", "jsonl"), default="conll",
                   help="conll: feature columns, label, probability (default); jsonl: "
                        "tokens, labels, probabilities")
    common.add_output(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no annotator table on stderr")
    common.add_max_tokens(p)
    add_crowd_options(p)
    p.add_argument("crowd_file", metavar="CROWD_FILE")
    p.set_defaults(func=run)


def add_crowd_options(p: argparse.ArgumentParser) -> None:
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


def crowd_settings(args: argparse.Namespace) -> dict:
    """The crowd model's parameters: those given, the table's defaults for the rest."""
    return {k: params.param(k).default if getattr(args, k) is None else getattr(args, k)
            for k in CROWD_PARAMS}


def refuse_crowd_options(args: argparse.Namespace) -> None:
    """``train`` without ``--crowd``: a crowd option given anyway is an error, not ignored."""
    given = [opt for opt, value, default in (
        ("--crowd-format", args.crowd_format, None), ("--annotators", args.annotators, None),
        ("--annotator-names", args.annotator_names, None), ("--labels", args.labels, None),
        ("--trusted", args.trusted, []), ("--report", args.report, None),
        ("--tagger-prior", getattr(args, "tagger_prior", None), None),
        *((params.param(k).flags[-1], getattr(args, k), None) for k in CROWD_PARAMS))
        if value != default]
    if given:
        common.refuse(given[0], "needs --crowd")


def read_crowd_votes(args: argparse.Namespace, path: str):
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


def annotator_table(rows: list[dict]) -> str:
    lines = [f"{'annotator':<16} {'votes':>7} {'model':>9} {'accuracy':>9} {'agreement':>10}"]
    for r in rows:
        acc = "-" if r["accuracy"] is None else f"{r['accuracy']:.3f}"
        agr = "-" if r["agreement"] is None else f"{r['agreement']:.3f}"
        lines.append(f"{r['annotator'][:16]:<16} {r['votes']:>7d} {r['model']:>9} {acc:>9} "
                     f"{agr:>10}")
    return "\n".join(lines)


def write_report(path: str | None, payload: dict) -> None:
    if path is None:
        return
    common.write_output(json.dumps(payload, indent=1, ensure_ascii=False) + "\n", path,
                        "utf-8")


def gold_accuracy(sents, labels_flat) -> float | None:
    gold = [v for s in sents for v in s.labels]
    pairs = [(g, p) for g, p in zip(gold, labels_flat) if g is not None and p is not None]
    return 100.0 * sum(g == p for g, p in pairs) / len(pairs) if pairs else None


def run(args: argparse.Namespace) -> int:
    from gpsl.crowd import DawidSkene, MajorityVote, annotator_report
    from gpsl.io import format_conll

    sents, votes = read_crowd_votes(args, args.crowd_file)
    if args.method == "majority":
        agg = MajorityVote().fit_votes(votes)
    else:
        agg = DawidSkene(**crowd_settings(args)).fit_votes(votes)
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
    common.write_output(text, args.output, args.encoding)
    rows = annotator_report(agg, votes)
    gold = gold_accuracy(sents, labels)
    write_report(args.report, {"method": args.method, "classes": votes.classes,
                               "tokens": votes.n, "voted_tokens": int(votes.voted().sum()),
                               "gold_accuracy": gold, "annotators": rows})
    if not args.quiet:
        common.err(annotator_table(rows))
        common.err(f"gpsl: aggregated {int(votes.token.size)} votes of {votes.A} annotators "
                   f"on {int(votes.voted().sum())} of {votes.n} tokens"
                   + ("" if gold is None else f"; accuracy against the gold labels {gold:.2f}%"))
    return 0
