"""The ``ner`` feature set's own defaults (``pair_variance``, ``decoder``), chosen on
cross-validation folds of the crowd-ner *training* sentences: the held-out documents that
``bench.crowd_real`` reports are never read.

For n in (200, 400, all) training sentences (the first n of ``bench.crowd_lexicon``'s fixed
shuffle of the training documents of ``raw/``), their documents are cut into 5 folds (seed 1;
a document's sentences stay in one fold, as the reported test set is documents never seen in
training: sentence folds let a document's names leak across folds, 89-90 F1 with all
sentences against 83-85 on held-out documents);
GPSL with ``template="ner"`` at each kernel variance and pair-function variance of the grid is
fitted on four folds and decoded on the fifth with each decoder (Algorithm 2, the exact
pseudo-likelihood maximiser and the chain's Viterbi path, :func:`gpsl.predict.chain_decode`),
seqeval span F1 averaged over the folds. The rule: the setting with the best mean F1 over the
sizes.

    python -m bench.ner_cv [--sizes 200,400,all] [--out bench/results] [--variances 1,2,4]
        [--pair-variances 1,4,16] [--lse-bound auto|jensen|bohning] [--offsets -1,1]
        [--stem ner_cv]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import RESULTS_DIR, git_commit, header_lines, machine_info, now_iso, write_results

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "crowd-ner"
VARIANCES = (1.0, 2.0, 4.0)
PAIR_VARIANCES = (1.0, 4.0, 16.0)
DECODERS = ("rns", "exact", "chain")
FOLDS = 5


def fold_of(docs, folds=FOLDS, seed=1) -> np.ndarray:
    """The fold of each sentence: its document's (documents dealt round-robin in a shuffled
    order)."""
    names = sorted(set(docs))
    order = np.random.default_rng(seed).permutation(len(names))
    by_name = {names[i]: k % folds for k, i in enumerate(order)}
    return np.array([by_name[d] for d in docs])


def fold_scores(X, y, docs, variance, pair_variance, folds=FOLDS, **kw) -> dict:
    """Mean span F1 over ``folds`` document folds of ``(X, y)`` per decoder."""
    from bench.crowd_real_methods import span_scores
    from gpsl.model import GPSL

    fold = fold_of(docs, folds)
    out = {d: [] for d in DECODERS}
    for k in range(folds):
        tr, va = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
        m = GPSL(template="ner", variance=variance, pair_variance=pair_variance, **kw).fit(
            [X[i] for i in tr], [y[i] for i in tr])
        Xva, yva = [X[i] for i in va], [y[i] for i in va]
        for d in DECODERS:
            out[d].append(span_scores(yva, m.predict(Xva, decoder=d))["f1"])
    return {d: float(np.mean(v)) for d, v in out.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="200,400,all")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR)
    ap.add_argument("--variances", default=",".join(map(str, VARIANCES)))
    ap.add_argument("--pair-variances", default=",".join(map(str, PAIR_VARIANCES)))
    ap.add_argument("--lse-bound", default="auto", help="GPSL's lse_bound in every fit")
    ap.add_argument("--offsets", default="-1,1", help="GPSL's dependency set in every fit")
    ap.add_argument("--stem", default="ner_cv")
    args = ap.parse_args(argv)
    grid = list(itertools.product(map(float, args.variances.split(",")),
                                  map(float, args.pair_variances.split(","))))
    from bench.crowd_real_methods import load, split_documents

    raw = load(DATA, "raw")
    train, _ = split_documents(raw.docs)  # the held-out documents are not read below
    order = np.random.default_rng(0).permutation(len(train))
    rows = []
    t0 = time.perf_counter()
    for size in args.sizes.split(","):
        pick = [train[j] for j in (order if size == "all" else order[:int(size)])]
        X, y = [raw.sents[i].tokens for i in pick], [raw.gold[i] for i in pick]
        docs = [raw.docs[i] for i in pick]
        for v, s2 in grid:
            f1 = fold_scores(X, y, docs, v, s2, lse_bound=args.lse_bound,
                             offsets=args.offsets)
            rows.append({"n": len(pick), "variance": v, "pair_variance": s2, **f1})
            print(f"n={len(pick)} variance={v} pair_variance={s2}: "
                  + ", ".join(f"{d} {f1[d]:.2f}" for d in DECODERS), flush=True)
    means = {}
    for r in rows:
        for d in DECODERS:
            means.setdefault((r["variance"], r["pair_variance"], d), []).append(r[d])
    best = max(means, key=lambda k: np.mean(means[k]))
    command = "python -m bench.ner_cv " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = header_lines("The ner feature set's defaults: 5 document folds of the crowd-ner "
                         "training sentences", now_iso(), machine_info(), git_commit(),
                         command.strip())
    lines += [f"* total time: {time.perf_counter() - t0:.0f} s", "",
              "Mean span F1 over 5 document folds of the first n training sentences (the "
              "held-out documents are not read).", "",
              "| n | variance | pair variance | " + " | ".join(DECODERS) + " |",
              "|---" * (3 + len(DECODERS)) + "|"]
    lines += [f"| {r['n']} | {r['variance']:g} | {r['pair_variance']:g} | "
              + " | ".join(f"{r[d]:.2f}" for d in DECODERS) + " |" for r in rows]
    lines += ["", "Mean over the sizes (the rule: the best of these):", "",
              "| variance | pair variance | decoder | mean F1 |", "|---|---|---|---|"]
    for k in sorted(means, key=lambda k: -np.mean(means[k])):
        lines.append(f"| {k[0]:g} | {k[1]:g} | {k[2]} | {np.mean(means[k]):.2f} |")
    lines += ["", f"Chosen: variance {best[0]:g}, pair variance {best[1]:g}, decoder "
              f"{best[2]}.", ""]
    md = "\n".join(lines)
    print(md)
    write_results(args.out, args.stem, md, {"rows": rows, "best": {
        "variance": best[0], "pair_variance": best[1], "decoder": best[2]}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
