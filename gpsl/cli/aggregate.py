"""``gpsl aggregate``: per-token posteriors and per-annotator reliability from crowd votes
(Dawid-Skene, the majority, or the joint model of the votes and a tagger); and the crowd
options and readers that ``train --crowd`` shares.

Crowd input is JSONL with ``"annotations"``, CoNLL with one label column per annotator
(``--annotators N``), see :func:`gpsl.io.read_crowd`, or a folder in the one-folder-per-
annotator layout (``SPLIT/ground_truth/DOC.txt``, ``SPLIT/mturk_train_data/WORKER/DOC.txt``),
read with :func:`gpsl.io.crowd_raw.read_crowd_folder` (votes aligned to the gold tokens; how many
were kept and dropped is printed and written to ``--report``); ``aggregate`` writes the
aggregated label and its probability after every token (``_ _`` for a token without votes).
``--model joint`` fits :class:`gpsl.crowd.CrowdGPSL` (``-t`` its tagger's template or
feature set) and writes its inferred labels.
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
#: the joint model's own parameters (``train --crowd``, ``aggregate --model joint``)
JOINT_PARAMS = ("tagger_prior", "annotator_model", "kappa", "prior_rule")
METHODS = ("dawid-skene", "majority", "joint")


def add_parser(sub) -> None:
    p = sub.add_parser("aggregate", help="aggregate crowd votes (Dawid-Skene, majority, or "
                                         "the joint model with a tagger)",
                       description="Per-token posteriors and per-annotator reliability from "
                                   "crowd votes (JSONL annotations, CoNLL with one label "
                                   "column per annotator, or a folder of one folder per "
                                   "annotator).")
    p.add_argument("--model", "--method", dest="method", choices=METHODS,
                   default="dawid-skene",
                   help="dawid-skene (default), majority, or joint: the annotators learned "
                        "jointly with a GPSL tagger (-t its template or feature set)")
    p.add_argument("-t", "--template", metavar="TEMPLATE", default=None,
                   help="--model joint: the tagger's CRF++ template file, or 'ner' (the "
                        "built-in feature set for word-only data)")
    common.add_params(p, ("max_iter",), max_iter={"default": None})
    common.add_params(p, JOINT_PARAMS, **{k: {"default": None} for k in JOINT_PARAMS})
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


def joint_settings(args: argparse.Namespace) -> dict:
    """The joint model's own parameters: those given, the table's defaults for the rest."""
    return {k: params.param(k).default if getattr(args, k) is None else getattr(args, k)
            for k in JOINT_PARAMS}


def refuse_crowd_options(args: argparse.Namespace) -> None:
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


def read_crowd_votes(args: argparse.Namespace, path: str):
    """Crowd sentences, their :class:`gpsl.crowd.Votes` and, for a folder, the alignment
    report (:class:`gpsl.io.crowd_raw.AlignmentReport`, else None) from the crowd options."""
    from pathlib import Path

    from gpsl.crowd import Votes
    from gpsl.io import read_crowd

    alignment = None
    fmt = args.crowd_format
    if not Path(path).exists():
        raise InputError("no such file or folder", source=path)
    if Path(path).is_dir():
        from gpsl.io.crowd_raw import read_crowd_folder

        for opt, value in (("--crowd-format", fmt), ("--annotators", args.annotators),
                           ("--annotator-names", args.annotator_names)):
            if value is not None:
                raise InputError(f"{opt} does not apply to a folder (read as SPLIT/"
                                 "ground_truth + SPLIT/mturk_train_data/WORKER)", source=path)
        sents, alignment = read_crowd_folder(path, labels=args.labels, encoding=args.encoding,
                                             max_tokens=args.max_tokens)
        if not getattr(args, "quiet", False):
            common.err(f"gpsl: read {path}: {alignment.summary()}")
    else:
        kw: dict[str, Any] = {"encoding": args.encoding, "missing": args.missing,
                              "labels": args.labels, "max_tokens": args.max_tokens}
        if fmt is None:
            fmt = "jsonl" if path.lower().endswith((".jsonl", ".json")) else "conll"
        if fmt == "jsonl" and (args.annotators is not None or
                               args.annotator_names is not None):
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
    args.alignment_ = None if alignment is None else alignment.as_dict()
    return sents, votes


def alignment_of(args: argparse.Namespace) -> dict | None:
    """The alignment report of a folder read by :func:`read_crowd_votes` (else None)."""
    return getattr(args, "alignment_", None)


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


def gold_span_f1(sents, labels_flat) -> float | None:
    """Span F1 (%, exact match, conlleval rules) of the labels against the sentences' gold
    labels, when every sentence has complete gold labels of a span scheme; else None."""
    from gpsl import metrics, tags

    gold = [list(s.labels) for s in sents]
    if not gold or any(v is None for g in gold for v in g) or \
            tags.scheme_of({v for g in gold for v in g}) is None:
        return None
    cuts = np.cumsum([len(g) for g in gold])[:-1]
    pred = [["O" if v is None else v for v in part]
            for part in np.split(np.array(labels_flat, dtype=object), cuts)]
    return 100.0 * metrics.chunk_scores(gold, pred)["f1"]


def prior_report(joint) -> dict:
    """``{"priors": ...}``: the held-out-vote rule's choice and scores (else nothing)."""
    c = getattr(joint, "prior_choice_", None)
    if c is None:
        return {}
    return {"priors": {"kappa": c.kappa, "shrink": c.shrink, "heldout_votes": c.heldout_votes,
                       "scores": [{"kappa": k, "shrink": s, "heldout_log_lik": v}
                                  for k, s, v in c.scores]}}


def prior_line(joint) -> None:
    c = getattr(joint, "prior_choice_", None)
    if c is not None:
        common.err(f"gpsl: priors by {c.heldout_votes} held-out votes: kappa {c.kappa:g}, "
                   f"shrink {c.shrink:g} (held-out log-likelihood "
                   f"{max(v for *_, v in c.scores):.1f} nats, best of {len(c.scores)})")


def _fit_joint(args: argparse.Namespace, sents, votes):
    """``--model joint``: :class:`gpsl.crowd.CrowdGPSL` without the refit of a tagger."""
    from gpsl.crowd import CrowdGPSL
    from gpsl.model import GPSL

    template = common.read_template(args.template, args.encoding, len(sents[0].tokens[0]))
    extra = {} if args.max_iter is None else {"max_iter": args.max_iter}
    model = GPSL(template=template, **extra)
    return CrowdGPSL(model, refit=False, **joint_settings(args),
                     **crowd_settings(args)).fit([s.tokens for s in sents], votes,
                                                 callback=common.progress(args.quiet))


def run(args: argparse.Namespace) -> int:
    from gpsl.crowd import DawidSkene, MajorityVote, annotator_report
    from gpsl.io import format_conll

    if args.method != "joint":
        given = [opt for opt, v in (("-t", args.template), ("--max-iter", args.max_iter),
                                    *((params.param(k).flags[-1], getattr(args, k))
                                      for k in JOINT_PARAMS)) if v is not None]
        if given:
            common.refuse(given[0], "needs --model joint")
    sents, votes = read_crowd_votes(args, args.crowd_file)
    if args.method == "majority":
        agg = MajorityVote().fit_votes(votes)
    elif args.method == "joint":
        agg = _fit_joint(args, sents, votes)
    else:
        agg = DawidSkene(**crowd_settings(args)).fit_votes(votes)
    P = agg.probas_
    labels = agg.labels_array_
    index = {c: i for i, c in enumerate(votes.classes)}
    prob = [float(P[t, index[labels[t]]]) if labels[t] is not None else None
            for t in range(votes.n)]
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
    f1 = gold_span_f1(sents, labels)
    write_report(args.report, {"method": args.method, "classes": votes.classes,
                               "tokens": votes.n, "voted_tokens": int(votes.voted().sum()),
                               "gold_accuracy": gold, "gold_span_f1": f1,
                               "alignment": alignment_of(args), "annotators": rows,
                               **prior_report(agg)})
    if not args.quiet:
        common.err(annotator_table(rows))
        prior_line(agg)
        common.err(f"gpsl: aggregated {int(votes.token.size)} votes of {votes.A} annotators "
                   f"on {int(votes.voted().sum())} of {votes.n} tokens"
                   + ("" if gold is None else f"; accuracy against the gold labels {gold:.2f}%")
                   + ("" if f1 is None else f", span F1 {f1:.2f}"))
    return 0
