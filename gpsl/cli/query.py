"""``gpsl query``: the tokens to label next in a pool file under a saved model (active
learning, :func:`gpsl.active.query_model`), best first."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from gpsl.cli import common
from gpsl.errors import InputError


def add_parser(sub) -> None:
    from gpsl.active import QUERY_SCORES

    p = sub.add_parser("query", help="the tokens to label next in a pool file (active "
                                     "learning)",
                       description="Rank the unlabeled tokens of a CRF++ column file by a "
                                   "query strategy under a trained model and print the "
                                   "batch to label next, best first (tab-separated: rank, "
                                   "sentence, token, line, word, score, suggestion, p). "
                                   "Tokens with a label in the file are known: clamped in "
                                   "Algorithm 2 and never asked.")
    p.add_argument("-m", "--model", required=True, metavar="MODEL_DIR")
    p.add_argument("--strategy", choices=(*QUERY_SCORES, "random"), default=None,
                   help="query score (default: the app's, see README 'Active learning')")
    common.add_params(p, ("batch",))
    p.add_argument("--diverse", action="store_true",
                   help="choose a batch that does not ask the same question twice "
                        "(determinantal choice over the latent functions' correlations)")
    common.add_params(p, ("max_per_sentence", "seed"))
    common.add_missing(p, "label marking an unlabeled token in the file (default _)")
    common.add_encoding(p)
    common.add_output(p)
    common.add_max_tokens(p)
    p.add_argument("pool_file", metavar="POOL_FILE")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpsl import active

    model = common.load_model(args.model)
    sents, X, has_gold = common.read_for_model(model, args.pool_file, args.encoding,
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
    common.write_output("\n".join(lines) + "\n", args.output, args.encoding)
    print(f"{len(items)} tokens by {strategy}{' (diverse batch)' if args.diverse else ''}",
          file=sys.stderr)
    return 0
