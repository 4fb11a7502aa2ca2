"""Reproduce section 6 of the GPSL paper (Tables 1-3, Figure 3) and two checks beyond it.

    python -m bench.paper [--quick] [--datasets ...] [--partitions N] [--methods ...]
                          [--missing-fractions ...] [--out DIR] [--seed S] [--max-iter N]

The four CRF++ data sets are read from ``../shared/data/crfpp`` (relative to the repository; the
run stops with exit status 2 when they are absent). Each data set's ``train.data`` and
``test.data`` are pooled and ``--partitions`` random train/test partitions of the paper's sizes
(basenp 150/150, chunking 50/50, seg 20/16, JapaneseNE 50/50 sentences) are drawn from the
recorded ``--seed`` (partition ``p`` of data set ``d`` uses ``SeedSequence([seed, crc32(d), p])``,
see :func:`bench.common.partitions`). Every method runs on the same partitions, with features
from the data set's CRF++ template:

* ``GPSL1`` / ``GPSL2`` / ``GPSL4``: :class:`gpsl.model.GPSL` with offsets ``(-1,)``, ``(-1, 1)``,
  ``(-2, -1, 1, 2)`` and the linear kernel, decoded with Algorithm 2 (RNS);
* ``CRFsuite``: sklearn-crfsuite, L-BFGS with L2 only (the rule:
  :data:`bench.peers.CRF_PARAMS`);
* ``CRFsuite-PA``: sklearn-crfsuite passive-aggressive (PA-I, C=1): an online cost-sensitive
  max-margin trainer of the same linear-chain model, the closest installable stand-in for the
  paper's structural SVM;
* ``CRFsuite-AP``: sklearn-crfsuite averaged (structured) perceptron;
* ``LogReg``: scikit-learn multinomial logistic regression per token with the same template
  features (no label dependencies; C=1 = CRF++'s default C).

Results (``--out``, default ``bench/results``): ``paper.md``, ``paper.json``,
``missing_labels.html`` and ``calibration.html``. They are rewritten after every partition, so an
interrupted run leaves the partitions done so far (``"complete": false`` in the JSON).

JSON layout: ``results[dataset][method]`` -> ``loss_mean``, ``loss_std`` (Hamming loss, %),
``losses`` (per partition), ``fit_median_s``, ``predict_median_s``, ``fit_s``, ``predict_s``,
``t_vs_best``, ``p_vs_best``, ``significant_vs_best``, ``ratio_fit_to_crfsuite``, the paper's
numbers, and for GPSL ``n_iter`` / ``rns_iterations``; ``table3[dataset]`` (GPSL1, Algorithm 2
vs Viterbi), ``missing_labels[dataset]`` (Figure 3), ``calibration[dataset][method]`` (ECE,
reliability bins), ``exact_decoding[dataset]`` (GPSL2, exact pseudo-likelihood maximiser vs
Algorithm 2), ``partitions[dataset]`` (seeds and sentence indices), ``paper`` (reference data).

This module is the driver and the command line; the parts: :mod:`bench.paper_setup` (methods,
the paper's numbers, :class:`~bench.paper_setup.Config`), :mod:`bench.paper_fits` (one
partition's fits and checks), :mod:`bench.paper_summary` (aggregates, the report, merging runs),
:mod:`bench.paper_report` (the Markdown, HTML and JSON outputs); the peers: :mod:`bench.peers`.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from bench.common import (
    DATA_DIR,
    DATASETS,
    PAPER_SIZES,
    RESULTS_DIR,
    DataMissing,
    check_data,
    git_commit,
    load_pooled,
    machine_info,
    now_iso,
    parse_sizes,
    partitions,
)
from bench.paper_fits import run_partition
from bench.paper_report import write_outputs
from bench.paper_setup import (
    DEFAULT_FRACTIONS,
    DEFAULT_METHODS,
    METHODS,
    QUICK_DATASETS,
    QUICK_FRACTIONS,
    QUICK_MAX_ITER,
    QUICK_PARTITIONS,
    QUICK_SIZES,
    Config,
)
from bench.paper_summary import build_report, merge_figure3, merge_reports, summarise_dataset

# --------------------------------------------------------------------------- driver


def run(cfg: Config, command: str = "") -> dict:
    """Run the benchmark, writing the outputs after every partition; returns the report."""
    def log(msg):
        if cfg.verbose:
            print(msg, file=sys.stderr, flush=True)

    unknown = [m for m in cfg.methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}")
    check_data(Path(cfg.data_dir), cfg.datasets)
    meta = {"command": command, "date": now_iso(), "machine": machine_info(),
            "git": git_commit()}
    out = Path(cfg.out_dir)
    t_start = time.perf_counter()
    errors: list[str] = []
    done: dict = {}
    for name in cfg.datasets:
        data = load_pooled(Path(cfg.data_dir), name)
        n_tr, n_te = cfg.sizes[name]
        parts = []
        for p, (tr, te) in enumerate(partitions(len(data), n_tr, n_te, cfg.n_partitions,
                                                cfg.seed, name)):
            log(f"[{name} p{p}] {n_tr}/{n_te} sentences, {len(data.labels)} labels pooled")
            parts.append(run_partition(cfg, data, p, tr, te, log, errors))
            done[name] = summarise_dataset(cfg, name, data, parts)
            meta["total_seconds"] = time.perf_counter() - t_start
            report = build_report(cfg, meta, done, complete=False, errors=errors)
            write_outputs(report, out)
    meta["total_seconds"] = time.perf_counter() - t_start
    report = build_report(cfg, meta, done, complete=True, errors=errors)
    write_outputs(report, out)
    return report


def _list(values) -> list[str]:
    return [v for item in values or [] for v in str(item).replace(",", " ").split() if v]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.paper",
        description="Reproduce the GPSL paper's section 6 (Tables 1-3, Figure 3) plus "
                    "calibration and exact-decoding checks on the CRF++ data sets.")
    p.add_argument("--quick", action="store_true",
                   help=f"{QUICK_PARTITIONS} partitions of seg and chunking (25/25), fractions "
                        f"{' '.join(map(str, QUICK_FRACTIONS))}, GPSL max_iter {QUICK_MAX_ITER}")
    p.add_argument("--datasets", nargs="+", metavar="NAME",
                   help=f"data sets (default: {' '.join(DATASETS)})")
    p.add_argument("--partitions", type=int, metavar="N", help="random partitions (default 10)")
    p.add_argument("--methods", nargs="+", metavar="NAME",
                   help=f"methods (default: {' '.join(DEFAULT_METHODS)})")
    p.add_argument("--missing-fractions", nargs="*", type=float, metavar="F",
                   help="fractions of training labels hidden for Figure 3 (default "
                        f"{' '.join(map(str, DEFAULT_FRACTIONS))}; none = skip)")
    p.add_argument("--missing-partitions", type=int, metavar="N",
                   help="run Figure 3 on the first N partitions only (default: all)")
    p.add_argument("--out", default=str(RESULTS_DIR), help="output folder (bench/results)")
    p.add_argument("--merge", nargs="+", metavar="PAPER_JSON",
                   help="combine the paper.json of runs on different data sets into one "
                        "report in --out, then stop")
    p.add_argument("--figure3", nargs="+", metavar="PAPER_JSON",
                   help="with --merge: take Figure 3 from these runs (same seed, their "
                        "partitions the first of the main run's)")
    p.add_argument("--seed", type=int, default=0, help="partition seed (default 0)")
    p.add_argument("--max-iter", type=int, help="GPSL max_iter (default 100; quick "
                                                f"{QUICK_MAX_ITER})")
    p.add_argument("--learn-hyper", action="store_true",
                   help="learn GPSL's kernel hyper-parameters (Algorithm 1's EM step; default: "
                        "the library default, off)")
    p.add_argument("--inference", choices=("full", "sparse"), default="full",
                   help="GPSL's inference mode (default full: Table 1 is the full GP's; "
                        "sparse: the scalable mode, inference='auto''s choice)")
    p.add_argument("--data-dir", default=str(DATA_DIR), help=argparse.SUPPRESS)
    p.add_argument("--sizes", help=argparse.SUPPRESS)  # e.g. "4/3" or "seg=4/3"
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return p


def config_from_args(args: argparse.Namespace) -> Config:
    quick = args.quick
    datasets = _list(args.datasets) or list(QUICK_DATASETS if quick else DATASETS)
    bad = [d for d in datasets if d not in DATASETS]
    if bad:
        raise ValueError(f"unknown data set {bad[0]!r}; choose from {', '.join(DATASETS)}")
    methods = _list(args.methods) or list(DEFAULT_METHODS)
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ValueError(f"unknown method {bad[0]!r}; choose from {', '.join(METHODS)}")
    if args.missing_fractions is None:
        fractions = list(QUICK_FRACTIONS if quick else DEFAULT_FRACTIONS)
    else:
        fractions = sorted(set(args.missing_fractions))
    if any(not 0.0 < f < 1.0 for f in fractions):
        raise ValueError("missing fractions must lie strictly between 0 and 1")
    sizes = dict(PAPER_SIZES)
    if quick:
        sizes.update(QUICK_SIZES)
    if args.sizes:
        sizes.update(parse_sizes(args.sizes, datasets))
    n_part = args.partitions if args.partitions is not None else (
        QUICK_PARTITIONS if quick else 10)
    if n_part < 1:
        raise ValueError("--partitions must be at least 1")
    max_iter = args.max_iter if args.max_iter is not None else (QUICK_MAX_ITER if quick else 100)
    if args.missing_partitions is not None and args.missing_partitions < 0:
        raise ValueError("--missing-partitions must be non-negative")
    return Config(datasets=datasets, methods=list(dict.fromkeys(methods)), fractions=fractions,
                  n_partitions=n_part, missing_partitions=args.missing_partitions,
                  seed=args.seed, max_iter=max_iter,
                  learn_hyper=True if args.learn_hyper else None, inference=args.inference,
                  sizes=sizes,
                  data_dir=args.data_dir, out_dir=args.out, quick=quick,
                  verbose=not args.quiet)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if args.figure3 and not args.merge:
        print("bench.paper: --figure3 needs --merge MAIN_JSON", file=sys.stderr)
        return 2
    if args.merge:
        try:
            report = merge_reports([json.loads(Path(f).read_text(encoding="utf-8"))
                                    for f in args.merge])
            if args.figure3:
                report = merge_figure3(report, [
                    json.loads(Path(f).read_text(encoding="utf-8")) for f in args.figure3])
        except (OSError, ValueError, KeyError) as exc:
            print(f"bench.paper: cannot merge: {exc}", file=sys.stderr)
            return 2
        write_outputs(report, Path(args.out))
        print(f"merged {len(args.merge)} runs into {Path(args.out) / 'paper.md'}")
        return 0
    try:
        cfg = config_from_args(args)
        report = run(cfg, command=shlex.join(["python", "-m", "bench.paper", *argv]))
    except DataMissing as exc:
        print(f"bench.paper: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"bench.paper: {exc}", file=sys.stderr)
        return 2
    out = Path(cfg.out_dir)
    for d, res in report["results"].items():
        row = ", ".join(f"{m} {r['loss_mean']:.2f}%" for m, r in res.items()
                        if r["loss_mean"] is not None)
        print(f"{d}: {row}")
    if report["errors"]:
        print(f"{len(report['errors'])} error(s); see the notes in paper.md", file=sys.stderr)
    print(f"wrote {out / 'paper.md'}, paper.json, missing_labels.html, calibration.html")
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())

