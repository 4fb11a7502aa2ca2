"""``gpsl aggregate``: per-token posteriors and per-annotator reliability from crowd votes
(Dawid-Skene, the majority, or the joint model of the votes and a tagger).

The crowd input and its options are :mod:`gpsl.cli.crowd`'s (shared with ``train --crowd``);
``aggregate`` writes the aggregated label and its probability after every token (``_ _`` for
a token without votes). ``--model joint`` fits :class:`gpsl.crowd.CrowdGPSL` (``-t`` its
tagger's template or feature set) and writes its inferred labels.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from gpsl import params
from gpsl.cli import common, crowd

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
    crowd.add_joint_options(p)
    common.add_encoding(p)
    common.add_missing(p, "label marking 'no label' (default _)")
    p.add_argument("--output-format", choices=("conll", "jsonl"), default="conll",
                   help="conll: feature columns, label, probability (default); jsonl: "
                        "tokens, labels, probabilities")
    common.add_output(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no annotator table on stderr")
    common.add_max_tokens(p)
    crowd.add_options(p)
    p.add_argument("crowd_file", metavar="CROWD_FILE")
    p.set_defaults(func=run)


def _fit_joint(args: argparse.Namespace, sents, votes):
    """``--model joint``: :class:`gpsl.crowd.CrowdGPSL` without the refit of a tagger."""
    from gpsl.crowd import CrowdGPSL
    from gpsl.model import GPSL

    template = common.read_template(args.template, args.encoding, len(sents[0].tokens[0]))
    extra = {} if args.max_iter is None else {"max_iter": args.max_iter}
    model = GPSL(template=template, **extra)
    joint = CrowdGPSL(model, refit=False, **crowd.joint_settings(args),
                      **crowd.crowd_settings(args))
    return joint.fit([s.tokens for s in sents], votes, callback=common.progress(args.quiet))


def run(args: argparse.Namespace) -> int:
    from gpsl.crowd import DawidSkene, MajorityVote
    from gpsl.io import format_conll

    if args.method != "joint":
        given = [opt for opt, v in (("-t", args.template), ("--max-iter", args.max_iter),
                                    *((params.param(k).flags[-1], getattr(args, k))
                                      for k in crowd.JOINT_PARAMS)) if v is not None]
        if given:
            common.refuse(given[0], "needs --model joint")
    if args.refit_prior is not None:  # aggregate refits no tagger
        common.refuse("--refit-prior", "needs train --crowd (aggregate refits no tagger)")
    data = crowd.read_votes(args, args.crowd_file)
    sents, votes = data.sentences, data.votes
    if args.method == "majority":
        agg = MajorityVote().fit_votes(votes)
    elif args.method == "joint":
        agg = _fit_joint(args, sents, votes)
    else:
        agg = DawidSkene(**crowd.crowd_settings(args)).fit_votes(votes)
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
    rep = crowd.report(args.method, data, agg, labels)
    crowd.write_report(args.report, rep)
    if not args.quiet:
        gold, f1 = rep["gold_accuracy"], rep["gold_span_f1"]
        crowd.show(rep)
        common.err(f"gpsl: aggregated {int(votes.token.size)} votes of {votes.A} annotators "
                   f"on {int(votes.voted().sum())} of {votes.n} tokens"
                   + ("" if gold is None else f"; accuracy against the gold labels {gold:.2f}%")
                   + ("" if f1 is None else f", span F1 {f1:.2f}"))
    return 0
