"""Warm starts against cold fits on active-learning rounds: what may a refit start from?

    python -m bench.warm_start [--quick] [--dataset basenp|chunking|all] [--pool N]
                               [--rounds N] [--seeds N] [--strategies a,b]
                               [--inference sparse|full] [--out DIR]

The rounds are those of :mod:`bench.active_learning` (same pool, test set, seed sentences and
batches), driven by cold fits so that every variant sees the same data. In every round after
the first, the round's training set is fitted

* ``cold`` - from scratch (the reference);
* ``library`` - with ``GPSL(warm_start=True)`` from the previous round's cold fit. In the
  scalable mode (``--inference sparse``, the default, as ``inference="auto"``): the weights,
  their precisions, ``q(f^S)`` and ``theta`` by feature and label name, never the missing
  labels' ``r`` (:func:`gpsl.warm.carry_sparse_state`); in the full GP: the hyper-parameters,
  plus the variational state of the kept sentences when no label is missing
  (:func:`gpsl.warm.warm_state`);
* the alternatives the library rejects: scalable mode ``library+r`` (the kept sentences'
  ``r`` carried as well); full GP ``alpha``, ``alpha+lam``, ``alpha+lam+S`` (those parts of
  the previous fit forced whatever the labels, :func:`gpsl.warm.carry_state`).

For each variant it records the fit time, the sweeps, the final bound and the test accuracy,
and summarises them against the cold fit separately for rounds whose training labels are all
observed (sentence strategies) and rounds with missing labels (token strategies).

Outputs (in ``--out``, default ``bench/results``): ``warm_start.json`` and ``warm_start.md``
(``warm_start_full.*`` with ``--inference full``).
"""

from __future__ import annotations

import argparse
import copy
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from bench import active_learning as AL
from bench.active_learning_run import _revealed, query_and_reveal
from bench.common import RESULTS_DIR, header_lines, machine_info, now_iso
from bench.common import git_commit as _git

VARIANTS = {"full": ("cold", "library", "alpha", "alpha+lam", "alpha+lam+S"),
            "sparse": ("cold", "library", "library+r")}
FORCED = {"alpha": ("alpha",), "alpha+lam": ("alpha", "lam"), "alpha+lam+S": ("alpha", "lam", "S")}
DEFAULT_STRATEGIES = ("random", "entropy", "random_sentence")


def _forced_model(template: str, max_iter: int, prev, parts, tol: float = 1e-3):
    """A full-GP GPSL whose warm start carries ``parts`` of ``prev`` regardless of missing
    labels."""
    from gpsl.engines import FullEngine
    from gpsl.model import GPSL
    from gpsl.warm import carry_state

    class ForcedEngine(FullEngine):
        def _warm(self, prev_, problem, classes, keys, lengths):
            if list(prev_.classes_) != list(classes):
                return None
            return carry_state(prev_.state_, prev_.sentence_keys_, prev_.lengths_, problem,
                               keys, lengths, parts)

    class Forced(GPSL):
        def _make_engine(self, mode, kernel, settings):
            return (ForcedEngine(kernel, settings) if mode == "full"
                    else super()._make_engine(mode, kernel, settings))

    m = Forced(template=template, max_iter=max_iter, tol=tol, warm_start=True,
               inference="full")
    m.__dict__.update({k: v for k, v in prev.__dict__.items() if k.endswith("_")})
    return m


def carry_r(state, prev, problem, keys, lengths, classes) -> None:
    """Copy the kept sentences' missing-label distributions ``r`` of ``prev`` into ``state``
    (sentences matched by content key, in turn; only tokens missing in both fits)."""
    where: dict = {}
    for i, k in enumerate(prev.sentence_keys_):
        where.setdefault(k, []).append(i)
    prev_start = np.cumsum(prev.lengths_) - prev.lengths_
    start = np.cumsum(lengths) - lengths
    col = [list(prev.classes_).index(c) if c in prev.classes_ else None for c in classes]
    for i, k in enumerate(keys):
        if not where.get(k):
            continue
        j = where[k].pop(0)
        for t in range(int(lengths[i])):
            a, b = int(start[i]) + t, int(prev_start[j]) + t
            if problem.y[a] < 0 and prev.y_train_[b] < 0:
                row = np.array([prev.state_.r[b, c] if c is not None else 0.0 for c in col])
                if row.sum() > 0:
                    state.r[a] = row / row.sum()


def _with_r_model(template: str, max_iter: int, prev, tol: float = 1e-3):
    """The scalable warm start with the kept sentences' ``r`` carried as well (and, those
    guesses being the start, no labeled-tokens first sweep)."""
    from gpsl.engines import SparseEngine
    from gpsl.model import GPSL

    class WithR(SparseEngine):
        def warm(self, prev_, problem, classes, extractor, keys=None, lengths=None):
            s = super().warm(prev_, problem, classes, extractor, keys, lengths)
            if s is not None:
                carry_r(s, prev_, problem, keys, lengths, classes)
            return s

        def start_options(self):
            return {**super().start_options(), "labels_first": False}

    class CarryR(GPSL):
        def _make_engine(self, mode, kernel, settings):
            return (WithR(kernel, settings) if mode == "sparse" and settings.get("cluster")
                    is None else super()._make_engine(mode, kernel, settings))

    m = CarryR(template=template, max_iter=max_iter, tol=tol, warm_start=True,
               inference="sparse")
    m.__dict__.update({k: v for k, v in prev.__dict__.items() if k.endswith("_")})
    return m


def _fit(model, X, y, test_X, test_y) -> dict:
    from gpsl.metrics import token_accuracy

    t0 = time.perf_counter()
    model.fit(X, y)
    secs = time.perf_counter() - t0
    return {"seconds": secs, "sweeps": int(model.n_iter_), "bound": float(model.bound_trace_[-1]),
            "accuracy": float(token_accuracy(test_y, model.predict(test_X)))}


def run_rounds(name: str, spec: str, seed: int, n_pool: int, n_test: int, rounds: int,
               max_iter: int, data_dir: Path, log, tol: float = 1e-3,
               inference: str = "sparse") -> list[dict]:
    """Every variant on every round of one active-learning run; one row per round >= 1."""
    from gpsl.model import GPSL

    X_all, y_all, template = AL.load_dataset(data_dir, name)
    (pool_X, pool_y, test_X, test_y, token_batch, sentence_batch,
     init) = AL.draw_run(X_all, y_all, n_pool, n_test, seed)
    labeled = [np.zeros(len(s), dtype=bool) for s in pool_X]
    for i in init:
        labeled[i][:] = True
    strategy, aggregate = AL.parse_strategy(spec)
    level = AL.STRATEGIES[strategy].level
    prev, rows = None, []
    for r in range(rounds + 1):
        train = [i for i, m in enumerate(labeled) if m.any()]
        X = [pool_X[i] for i in train]
        y = [_revealed(pool_y[i], labeled[i]) for i in train]
        cold = GPSL(template=template, max_iter=max_iter, tol=tol, inference=inference)
        row = {"round": r, "tokens": sum(len(s) for s in X),
               "labeled": int(sum(m.sum() for m in labeled)),
               "complete": all(v is not None for lab in y for v in lab),
               "fits": {"cold": _fit(cold, X, y, test_X, test_y)}}
        if prev is not None:
            # a label seen for the first time changes the label set: the full GP carries no
            # start then; the scalable mode carries by label name (a new label at its prior)
            observed = {v for lab in y for v in lab if v is not None}
            row["warm_possible"] = inference == "sparse" or observed <= set(prev.classes_)
            lib = copy.deepcopy(prev).set_params(warm_start=True)
            row["fits"]["library"] = _fit(lib, X, y, test_X, test_y)
            if inference == "full":
                for v, parts in FORCED.items():
                    row["fits"][v] = _fit(_forced_model(template, max_iter, prev, parts, tol),
                                          X, y, test_X, test_y)
            else:
                row["fits"]["library+r"] = _fit(_with_r_model(template, max_iter, prev, tol),
                                                X, y, test_X, test_y)
            rows.append(row)
            log(f"  {name} {spec} seed {seed} round {r}: {row['tokens']} tokens, "
                + ("complete" if row["complete"] else "missing labels")
                + ("" if row["warm_possible"] else ", new labels (cold only)") + "; "
                + ", ".join(f"{v} {f['seconds']:.1f}s/{f['sweeps']} acc {f['accuracy']:.4f}"
                            for v, f in row["fits"].items()))
        prev = cold
        if r == rounds:
            break
        if not query_and_reveal(cold, strategy, aggregate, pool_X, pool_y, labeled,
                                   token_batch if level == "token" else sentence_batch,
                                   seed=seed * 1000 + r):
            break
    return rows


def summarise(rows: list[dict], inference: str = "sparse") -> dict:
    """Per variant against ``cold``: time ratio (sum over rounds), sweeps, accuracy and bound
    differences (means over rounds), for complete-label and missing-label rounds apart.
    Rounds in which a label appeared for the first time are left out (every start is cold
    there); their number is ``rounds_new_labels``."""
    out = {}
    for kind, sel in (("complete", True), ("missing", False)):
        part = [r for r in rows if r["complete"] == sel and r["warm_possible"]]
        skipped = sum(1 for r in rows if r["complete"] == sel and not r["warm_possible"])
        if not part:
            continue
        cold = [r["fits"]["cold"] for r in part]
        out[kind] = {"rounds": len(part), "rounds_new_labels": skipped}
        for v in VARIANTS[inference]:
            fits = [r["fits"][v] for r in part]
            out[kind][v] = {
                "time_to_cold": sum(f["seconds"] for f in fits) / sum(f["seconds"] for f in cold),
                "seconds_median": float(np.median([f["seconds"] for f in fits])),
                "sweeps_mean": float(np.mean([f["sweeps"] for f in fits])),
                "accuracy_mean": float(np.mean([f["accuracy"] for f in fits])),
                "accuracy_minus_cold": float(np.mean([f["accuracy"] - c["accuracy"]
                                                      for f, c in zip(fits, cold, strict=True)])),
                "worst_accuracy_minus_cold": float(min(f["accuracy"] - c["accuracy"]
                                                       for f, c in zip(fits, cold, strict=True))),
                "bound_minus_cold": float(np.mean([f["bound"] - c["bound"]
                                                   for f, c in zip(fits, cold, strict=True)])),
            }
    return out


def write_markdown(report: dict, path: Path) -> None:
    cfg = report["config"]
    lines = header_lines("Warm starts against cold fits (active-learning rounds)",
                         report["date"], report["machine"], report["git"], report["command"])
    lines += [
        f"Rounds of `bench.active_learning` (pool {cfg['pool']}, 3 fully labeled seed sentences, "
        f"batch 10% of the pool's tokens or as many tokens' worth of sentences, GPSL2, "
        f"max_iter {cfg['max_iter']}, tol {cfg.get('tol', 1e-3):g}), {cfg['seeds']} seed(s), "
        "strategies "
        f"{', '.join(cfg['strategies'])}; every round after the first is fitted cold and from "
        "the previous round's cold fit, in the "
        + ("scalable mode. `library` = `GPSL(warm_start=True)` (weights, precisions, q(f^S) "
           "and theta by feature and label name; never r); `library+r` = the kept sentences' "
           "missing-label distributions r carried as well."
           if cfg.get("inference", "full") == "sparse" else
           "full GP. `library` = `GPSL(warm_start=True)` (hyper-parameters, plus the kept "
           "sentences' state when no label is missing); `alpha`, `alpha+lam`, `alpha+lam+S` = "
           "those parts forced over whatever the labels.")
        + " Time = sum of warm fit times / sum of cold fit times; accuracy and bound "
        "differences are means over rounds (warm - cold); worst = the lowest accuracy "
        "difference of a round.", ""]
    for name, d in report["datasets"].items():
        for kind, s in d["summary"].items():
            title = ("all training labels observed (sentence strategies)" if kind == "complete"
                     else "missing training labels (token strategies)")
            lines += [f"## {name}: {title}, {s['rounds']} rounds", "",
                      *([f"({s['rounds_new_labels']} more round(s) in which a label appeared "
                         "for the first time are left out: every start is cold there.)", ""]
                        if s["rounds_new_labels"] else []),
                      "| start | time / cold | median s | sweeps | accuracy | acc − cold "
                      "| worst acc − cold | bound − cold |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|"]
            for v in VARIANTS[cfg.get("inference", "full")]:
                x = s[v]
                lines.append(f"| {v} | {x['time_to_cold']:.2f} | {x['seconds_median']:.2f} "
                             f"| {x['sweeps_mean']:.1f} | {x['accuracy_mean']:.4f} "
                             f"| {x['accuracy_minus_cold']:+.4f} "
                             f"| {x['worst_accuracy_minus_cold']:+.4f} "
                             f"| {x['bound_minus_cold']:+.1f} |")
            lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.warm_start",
                                description="Warm-started against cold GPSL refits on "
                                            "active-learning rounds.")
    p.add_argument("--quick", action="store_true", help="pool 12, 2 rounds, test 30, max_iter 10")
    p.add_argument("--dataset", choices=["basenp", "chunking", "all"], default="all")
    p.add_argument("--pool", type=int, help="pool sentences (default 60 basenp, 50 chunking)")
    p.add_argument("--rounds", type=int, help="query rounds (default 3)")
    p.add_argument("--seeds", type=int, default=1, help="seeds (default 1)")
    p.add_argument("--max-iter", type=int, help="GPSL max_iter (default 30; quick 10)")
    p.add_argument("--tol", type=float, default=1e-3, help="GPSL tol (default 1e-3, the "
                                                            "library's)")
    p.add_argument("--inference", choices=("sparse", "full"), default="sparse",
                   help="the scalable mode (the default, as inference='auto') or the full GP")
    p.add_argument("--strategies", help="comma-separated (default: "
                                        f"{','.join(DEFAULT_STRATEGIES)})")
    p.add_argument("--data-dir", default=str(AL.DEFAULT_DATA), help=argparse.SUPPRESS)
    p.add_argument("--out", default=str(RESULTS_DIR), help="output folder (bench/results)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    strategies = ([s.strip() for s in args.strategies.split(",") if s.strip()]
                  if args.strategies else list(DEFAULT_STRATEGIES))
    try:
        for s in strategies:
            AL.parse_strategy(s)
    except ValueError as exc:
        print(f"bench.warm_start: {exc}", file=sys.stderr)
        return 2
    datasets = ["basenp", "chunking"] if args.dataset == "all" else [args.dataset]
    pools = {"basenp": 60, "chunking": 50}
    tests = {"basenp": 150, "chunking": 100}
    rounds = args.rounds if args.rounds is not None else (2 if args.quick else 3)
    max_iter = args.max_iter or (10 if args.quick else 30)

    def log(msg):
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    report = {"command": shlex.join(["python", "-m", "bench.warm_start", *argv]),
              "date": now_iso(), "machine": machine_info(), "git": _git(),
              "config": {"pool": args.pool or ("12" if args.quick else "60 basenp, 50 chunking"),
                         "rounds": rounds, "seeds": args.seeds, "strategies": strategies,
                         "max_iter": max_iter, "tol": args.tol,
                         "inference": args.inference},
              "datasets": {}}
    for name in datasets:
        n_pool = args.pool or (12 if args.quick else pools[name])
        n_test = 30 if args.quick else tests[name]
        try:
            rows = [row for seed in range(args.seeds) for spec in strategies
                    for row in run_rounds(name, spec, seed, n_pool, n_test, rounds, max_iter,
                                          Path(args.data_dir), log, args.tol, args.inference)]
        except AL.DataMissing as exc:
            print(f"bench.warm_start: {exc}", file=sys.stderr)
            return 2
        report["datasets"][name] = {"rows": rows, "summary": summarise(rows, args.inference)}
        report["total_seconds"] = time.perf_counter() - t0
        out = Path(args.out)  # written after every data set
        out.mkdir(parents=True, exist_ok=True)
        stem = "warm_start" if args.inference == "sparse" else "warm_start_full"
        (out / f"{stem}.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
        write_markdown(report, out / f"{stem}.md")
    print(f"wrote {out / (stem + '.json')} and {stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
