"""Partial annotation: what a budget of labeled tokens teaches, as scattered tokens or sentences.

::

    python -m bench.missing_weight                               # chunking, basenp, JapaneseNE
    python -m bench.missing_weight --datasets basenp --fractions 0.05 --seeds 1

For every seed the train and test files of a CRF++ data set (``../shared/data/crfpp``) are
pooled and shuffled, and a pool (700 sentences; JapaneseNE 600) and a disjoint test slice (200;
JapaneseNE 116) are drawn, as in ``bench.active_learning_pool``. For every budget (a fraction
of the pool's tokens) the same number of labels is given in two layouts:

* **tokens**: that many pool tokens chosen uniformly at random, every other label of their
  sentences missing (``None``, marginalised): partial annotation. GPSL is fitted on every
  sentence with a labeled token, once with the plain bound (``missing_weight=1``) and once
  with the default ``missing_weight="auto"`` (EM-lambda, :mod:`gpsl.likelihood`);
* **sentences**: random whole pool sentences until the budget is reached (complete labels):
  GPSL and the peer, CRFsuite (``bench.paper``'s settings), which cannot learn from partial
  labels.

Reported: test token accuracy per layout and model (mean ± sd over seeds), GPSL's fit time
and sweeps, and the missing weight ``lambda`` the "auto" rule chose. GPSL: scalable mode,
``--max-iter`` sweeps at most (30; the fits stop earlier at ``tol``).

Outputs (``--out``, default ``bench/results``): ``missing_weight.json`` and
``missing_weight.md``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from bench.active_learning import DataMissing, load_dataset, split
from bench.active_learning_pool import DATASETS, SIZES  # the same pools and test slices
from bench.active_learning_run import _revealed
from bench.common import (
    DATA_DIR,
    RESULTS_DIR,
    git_commit,
    header_lines,
    jsonable,
    machine_info,
    mean_std,
    now_iso,
)
from gpsl.metrics import token_accuracy

FRACTIONS = (0.05, 0.15, 0.30)
VARIANTS = ("tokens, plain bound (lambda = 1)", "tokens, missing_weight=auto",
            "sentences, GPSL", "sentences, CRFsuite")


def token_layout(lengths, budget: int, rng) -> list[np.ndarray]:
    """``budget`` tokens chosen uniformly at random: one boolean mask per sentence."""
    n = int(np.sum(lengths))
    pick = np.zeros(n, dtype=bool)
    pick[rng.choice(n, size=min(budget, n), replace=False)] = True
    return np.split(pick, np.cumsum(lengths)[:-1])


def sentence_layout(lengths, budget: int, rng) -> list[int]:
    """Random whole sentences until at least ``budget`` tokens are labeled."""
    out, got = [], 0
    for i in rng.permutation(len(lengths)):
        if got >= budget:
            break
        out.append(int(i))
        got += int(lengths[i])
    return out


def fit_gpsl(template, X, y, max_iter, missing_weight, test_X, test_y) -> dict:
    from gpsl.model import GPSL

    model = GPSL(template=template, inference="sparse", max_iter=max_iter,
                 missing_weight=missing_weight)
    t0 = time.perf_counter()
    model.fit(X, y)
    secs = time.perf_counter() - t0
    return {"accuracy": float(token_accuracy(test_y, model.predict(test_X))),
            "fit_seconds": secs, "sweeps": int(model.n_iter_),
            "missing_weight": float(model.missing_weight_)}


def fit_crf(template, X, y, test_X, test_y) -> dict:
    from bench.peers import fit_crfsuite, template_features
    from gpsl.features import Template

    tpl = Template.parse(template)
    fit = fit_crfsuite(X, y, tpl)
    pred = fit.crf.predict(template_features(tpl, test_X))
    return {"accuracy": float(token_accuracy(test_y, pred)), "fit_seconds": fit.wall_s}


def run_dataset(name: str, args, log) -> dict:
    X_all, y_all, template = load_dataset(Path(args.data_dir), name)
    n_pool, n_test = SIZES[name]
    n_pool, n_test = args.pool or n_pool, args.test or n_test
    runs = {f: {v: [] for v in VARIANTS} for f in args.fractions}
    for seed in range(args.seeds):
        pool, test = split(len(X_all), n_pool, n_test, seed)
        PX, Py = [X_all[i] for i in pool], [y_all[i] for i in pool]
        TX, Ty = [X_all[i] for i in test], [y_all[i] for i in test]
        lengths = np.array([len(s) for s in PX])
        for frac in args.fractions:
            budget = max(1, round(frac * int(lengths.sum())))
            rng = np.random.default_rng(7919 * seed + round(1000 * frac))
            masks = token_layout(lengths, budget, rng)
            keep = [i for i, m in enumerate(masks) if m.any()]
            Xp = [PX[i] for i in keep]
            yp = [_revealed(Py[i], masks[i]) for i in keep]
            got = {VARIANTS[0]: fit_gpsl(template, Xp, yp, args.max_iter, 1.0, TX, Ty),
                   VARIANTS[1]: fit_gpsl(template, Xp, yp, args.max_iter, "auto", TX, Ty)}
            sents = sentence_layout(lengths, budget, rng)
            Xs, ys = [PX[i] for i in sents], [Py[i] for i in sents]
            got[VARIANTS[2]] = fit_gpsl(template, Xs, ys, args.max_iter, "auto", TX, Ty)
            got[VARIANTS[3]] = fit_crf(template, Xs, ys, TX, Ty)
            got[VARIANTS[2]]["tokens"] = int(lengths[sents].sum())
            for v, r in got.items():
                r.setdefault("tokens", budget)
                runs[frac][v].append(r)
            log(f"{name} seed {seed} {100 * frac:4.1f}%: " + "; ".join(
                f"{v} {r['accuracy']:.4f}" for v, r in got.items())
                + f" (lambda {got[VARIANTS[1]]['missing_weight']:.3f})")
    return {"pool": n_pool, "test": n_test, "fractions": {
        str(f): {v: {"runs": rs, "accuracy_mean": mean_std([r["accuracy"] for r in rs])[0],
                     "accuracy_std": mean_std([r["accuracy"] for r in rs])[1]}
                 for v, rs in per.items()} for f, per in runs.items()}}


def write_markdown(report: dict, path: Path) -> None:
    lines = header_lines("Partial annotation and the missing weight (`bench.missing_weight`)",
                         report["date"], report["machine"], report["git"], report["command"])
    seeds, sweeps = report["args"]["seeds"], report["args"]["max_iter"]
    pools = ", ".join(f"{d} {r['pool']}" for d, r in report["results"].items())
    lines += [
        f"Pools of {pools} sentences, fixed test slices, {seeds} seed(s). A budget of labeled "
        "tokens (a fraction of the pool's tokens) is given as random tokens (partial "
        "annotation; the other labels of their sentences missing) or as random complete "
        f"sentences. GPSL: scalable mode, at most {sweeps} sweeps; CRFsuite: `bench.paper`'s "
        "settings, complete sentences only. Test token accuracy, mean ± sd over the seeds; "
        "lambda = the missing weight the default rule chose.", "",
        f"Compute time {report['seconds']:.0f} s.", ""]
    for name, res in report["results"].items():
        lines += [f"## {name}", "",
                  "| labeled | " + " | ".join(VARIANTS) + " | lambda | sentence tokens |",
                  "|---:|" + "---:|" * (len(VARIANTS) + 2)]
        for frac, per in res["fractions"].items():
            cells = []
            for v in VARIANTS:
                m, sd = per[v]["accuracy_mean"], per[v]["accuracy_std"]
                cells.append(f"{m:.4f}" + (f" ± {sd:.4f}" if len(per[v]["runs"]) > 1 else ""))
            lam = np.mean([r["missing_weight"] for r in per[VARIANTS[1]]["runs"]])
            budget = np.mean([r["tokens"] for r in per[VARIANTS[1]]["runs"]])
            sent = np.mean([r["tokens"] for r in per[VARIANTS[2]]["runs"]])
            lines.append(f"| {100 * float(frac):.0f}% ({budget:.0f}) | " + " | ".join(cells)
                         + f" | {lam:.3f} | {sent:.0f} |")
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.missing_weight",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    ap.add_argument("--fractions", nargs="+", type=float, default=list(FRACTIONS))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--max-iter", type=int, default=30)
    ap.add_argument("--pool", type=int, default=None)
    ap.add_argument("--test", type=int, default=None)
    ap.add_argument("--data-dir", default=str(DATA_DIR))
    ap.add_argument("--out", default=str(RESULTS_DIR))
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    bad = [f for f in args.fractions if not 0 < f <= 1]
    if bad:
        print(f"bench.missing_weight: --fractions must be in (0, 1], not {bad[0]}",
              file=sys.stderr)
        return 2
    command = "python -m bench.missing_weight " + shlex.join(argv or sys.argv[1:])
    t0 = time.perf_counter()
    report = {"command": command.strip(), "date": now_iso(), "machine": machine_info(),
              "git": git_commit(), "args": vars(args), "datasets": args.datasets,
              "results": {}}
    try:
        for name in args.datasets:
            report["results"][name] = run_dataset(name, args, lambda m: print(m, flush=True))
    except DataMissing as e:
        print(f"bench.missing_weight: {e}", file=sys.stderr)
        return 2
    report["seconds"] = time.perf_counter() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "missing_weight.json").write_text(json.dumps(jsonable(report), indent=1),
                                             encoding="utf-8")
    write_markdown(report, out / "missing_weight.md")
    print(f"wrote {out / 'missing_weight.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
