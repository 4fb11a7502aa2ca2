"""Pool-based active-learning simulation: does querying uncertain tokens save labels?

    python -m bench.active_learning [--quick] [--dataset chunking|basenp|all] [--seeds N]
                                    [--rounds N] [--batch B] [--out DIR]

For every seed the train and test files of a CRF++ data set (``../shared/data/crfpp``) are pooled
and shuffled; a pool (60 sentences for basenp, 50 for chunking by default - see ``POOL_SIZES``
for why not the paper's 150 / 50) and a disjoint held-out test set (150 / 100) are drawn. Each
run starts from 3 fully labeled pool sentences. A round fits ``GPSL`` (warm-started from the
previous round) on every pool sentence with at least one revealed label - unrevealed
tokens are ``None`` and marginalised by the model - records the test token accuracy and the
number of labeled tokens, then asks a strategy of :mod:`gpsl.active` for the next batch: ``B``
tokens (token strategies; only those gold labels are revealed) or about ``B`` tokens' worth of
whole sentences (sentence strategies). The default batch is 10% of the pool's tokens and the
default 5 rounds take the curve to about half of the pool (3 seeds, GPSL ``max_iter=30``, fixed
kernel hyper-parameters unless ``--learn-hyper``). Full supervision of the pool is the horizontal
reference.

Outputs (in ``--out``, default ``bench/results``): ``active_learning.json`` (per data set
``pool_tokens`` and ``full_accuracy``; per strategy ``tokens_to_95`` / ``tokens_to_99`` (labeled
tokens needed to reach 95% / 99% of the full-supervision accuracy, linear interpolation on the
mean curve, ``null`` if never), ``auc`` (mean accuracy over a common range of fraction of the
pool labeled, see ``auc_range``), ``seconds_per_round`` (median fit time) and the curves),
``active_learning.md`` and ``active_learning_<dataset>.html`` (plotly learning curves).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bench.active_learning_run import (
    AUTO_FOLDS,
    _folds,
    _folds_text,
    _make_model,
    parse_strategy,
    run_strategy,
)
from gpsl import calibration
from gpsl.active import STRATEGIES
from gpsl.metrics import token_accuracy

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "crfpp"
DEFAULT_OUT = REPO / "bench" / "results"

DATASETS = ("basenp", "chunking")
# (pool, test) sentences. The paper's partitions are 150/150 (basenp) and 50/50 (chunking), but
# a GPSL fit costs O(J n^3) per sweep in the n tokens of the touched sentences (missing labels
# included) and partially labeled data needs ~3x more sweeps, so a 3-seed run of that size takes
# hours on 2 cores; these defaults (the committed results) keep the full run of both data sets
# near 40 minutes (override with --pool/--test).
POOL_SIZES = {"basenp": (60, 150), "chunking": (50, 100)}
QUICK_SIZES = {"basenp": (15, 30), "chunking": (12, 30)}
DEFAULT_STRATEGIES = (
    "least_confidence",
    "margin",
    "entropy",
    "random",
    "sentence_least_confidence:max",
    "random_sentence",
)


class DataMissing(RuntimeError):
    """The shared data directory (or a data set in it) is absent."""


@dataclass
class Config:
    """Settings of one benchmark run (see ``--help``)."""

    datasets: list[str]
    seeds: int = 3
    rounds: int = 5
    batch: int | None = None  # tokens per round; None = batch_fraction of the pool's tokens
    batch_fraction: float = 0.1
    n_pool: int | None = None  # None = POOL_SIZES[dataset][0]
    n_test: int | None = None
    n_init: int = 3
    max_iter: int = 30
    learn_hyper: bool = False
    cold_check: bool = False  # also fit a cold model on every round's data (time, accuracy)
    calibrate: int = 0  # K > 0: gpsl.calibration.calibrate(folds=K) on the revealed labels
    strategies: list[str] = field(default_factory=lambda: list(DEFAULT_STRATEGIES))
    data_dir: str = str(DEFAULT_DATA)
    out_dir: str = str(DEFAULT_OUT)
    quick: bool = False
    verbose: bool = True


# --------------------------------------------------------------------------- data


def load_dataset(data_dir: Path, name: str):
    """``(X, y, template_text)`` for the pooled train + test files of one data set."""
    from gpsl.io import read_conll

    folder = Path(data_dir) / name
    files = [folder / "train.data", folder / "test.data", folder / "template"]
    absent = [str(f) for f in files if not f.is_file()]
    if absent:
        raise DataMissing(f"shared data absent: {absent[0]} not found")
    sentences = read_conll(files[0]) + read_conll(files[1])
    sentences = [s for s in sentences if len(s)]
    X = [list(s.tokens) for s in sentences]
    y = [list(s.labels) for s in sentences]
    return X, y, files[2].read_text(encoding="utf-8")


def split(n_sentences: int, n_pool: int, n_test: int, seed: int):
    """Disjoint random ``(pool, test)`` index arrays drawn with ``seed``."""
    if n_pool + n_test > n_sentences:
        raise ValueError(f"pool {n_pool} + test {n_test} exceeds {n_sentences} sentences")
    perm = np.random.default_rng(seed).permutation(n_sentences)
    return perm[:n_pool], perm[n_pool : n_pool + n_test]


# --------------------------------------------------------------------------- summaries


def mean_curve(runs: list[dict]) -> dict:
    """Average the per-seed curves round by round (runs may stop early: use the common rounds)."""
    n = min(len(r["accuracy"]) for r in runs)
    out = {}
    for key in ("labeled_tokens", "fraction", "accuracy"):
        arr = np.array([r[key][:n] for r in runs], dtype=float)
        out[key] = arr.mean(axis=0).tolist()
        if key == "accuracy":
            out["accuracy_std"] = arr.std(axis=0).tolist()
    return out


def tokens_to_reach(labeled_tokens, accuracy, target: float) -> float | None:
    """Labeled tokens at which the curve first reaches ``target`` (linear interpolation)."""
    x = list(labeled_tokens)
    y = list(accuracy)
    for k, (xk, yk) in enumerate(zip(x, y)):
        if yk >= target:
            if k == 0:
                return float(xk)
            x0, y0 = x[k - 1], y[k - 1]
            return float(x0 + (target - y0) * (xk - x0) / (yk - y0))
    return None


def normalised_auc(fraction, accuracy, lo: float, hi: float) -> float | None:
    """Mean accuracy over ``[lo, hi]`` of fraction-of-pool-labeled (trapezoid, interpolated)."""
    f = np.asarray(fraction, dtype=float)
    a = np.asarray(accuracy, dtype=float)
    if f.size == 0 or hi <= lo:
        return float(a[0]) if f.size else None
    grid = np.unique(np.concatenate([[lo, hi], f[(f > lo) & (f < hi)]]))
    vals = np.interp(grid, f, a)
    area = float(np.sum((vals[1:] + vals[:-1]) * np.diff(grid) / 2))
    return area / (hi - lo)


# --------------------------------------------------------------------------- driver


def draw_run(X_all, y_all, n_pool: int, n_test: int, seed: int, batch: int | None = None,
             batch_fraction: float = 0.1, n_init: int = 3):
    """The data of one simulated run for ``seed``: pool and test sentences and labels, the
    token batch (``batch``, else ``batch_fraction`` of the pool's tokens), the sentence batch
    (as many tokens' worth of sentences) and the indices of the ``n_init`` fully labeled
    seed sentences."""
    pool, test = split(len(X_all), n_pool, n_test, seed)
    pool_X, pool_y = [X_all[i] for i in pool], [y_all[i] for i in pool]
    test_X, test_y = [X_all[i] for i in test], [y_all[i] for i in test]
    n_tok = sum(len(s) for s in pool_X)
    token_batch = batch or max(1, round(batch_fraction * n_tok))
    sentence_batch = max(1, round(token_batch * len(pool_X) / n_tok))
    init = np.random.default_rng(10_000 + seed).choice(len(pool_X), n_init, replace=False)
    return pool_X, pool_y, test_X, test_y, token_batch, sentence_batch, init


def run_dataset(cfg: Config, name: str, log) -> dict:
    X_all, y_all, template = load_dataset(Path(cfg.data_dir), name)
    n_pool, n_test = (QUICK_SIZES if cfg.quick else POOL_SIZES)[name]
    n_pool = cfg.n_pool or n_pool
    n_test = cfg.n_test or n_test
    runs: dict[str, list[dict]] = {s: [] for s in cfg.strategies}
    full_acc, full_secs, pool_tokens, test_tokens, batches, sbatches = [], [], [], [], [], []
    for seed in range(cfg.seeds):
        (pool_X, pool_y, test_X, test_y, token_batch, sentence_batch,
         init) = draw_run(X_all, y_all, n_pool, n_test, seed, cfg.batch, cfg.batch_fraction,
                          cfg.n_init)
        n_tok = sum(len(s) for s in pool_X)
        pool_tokens.append(n_tok)
        test_tokens.append(sum(len(s) for s in test_X))
        batches.append(token_batch)
        sbatches.append(sentence_batch)

        model = _make_model(template, cfg.max_iter, warm_start=False, learn_hyper=cfg.learn_hyper)
        t0 = time.perf_counter()
        model.fit(pool_X, pool_y)
        folds = _folds(cfg.calibrate, len(pool_X))
        if folds:  # the reference is calibrated as the rounds are
            calibration.calibrate(model, pool_X, pool_y, folds=folds)
        full_secs.append(time.perf_counter() - t0)
        full_acc.append(float(token_accuracy(test_y, model.predict(test_X))))
        log(
            f"{name} seed {seed}: pool {len(pool_X)} sentences / {n_tok} tokens, "
            f"batch {token_batch} tokens or {sentence_batch} sentences; full supervision "
            f"acc {full_acc[-1]:.4f} ({full_secs[-1]:.1f}s)"
        )
        for spec in cfg.strategies:
            curve = run_strategy(
                spec, pool_X, pool_y, test_X, test_y, template, init, token_batch,
                sentence_batch, cfg.rounds, cfg.max_iter, seed, log if cfg.verbose else None,
                cfg.learn_hyper, cfg.cold_check, cfg.calibrate,
            )  # fmt: skip
            curve["seed"] = seed
            curve["pool_tokens"] = n_tok
            runs[spec].append(curve)

    full = float(np.mean(full_acc))
    result = {
        "pool_sentences": n_pool,
        "test_sentences": n_test,
        "pool_tokens": float(np.mean(pool_tokens)),
        "test_tokens": float(np.mean(test_tokens)),
        "token_batch": float(np.mean(batches)),
        "sentence_batch": float(np.mean(sbatches)),
        "full_accuracy": full,
        "full_accuracy_std": float(np.std(full_acc)),
        "full_accuracy_per_seed": full_acc,
        "full_fit_seconds": float(np.median(full_secs)),
        "strategies": {},
    }
    curves = {spec: mean_curve(r) for spec, r in runs.items()}
    lo = max(c["fraction"][0] for c in curves.values())
    hi = min(c["fraction"][-1] for c in curves.values())
    result["auc_range"] = [lo, hi]
    for spec, c in curves.items():
        s_name, agg = parse_strategy(spec)
        fits = [t for r in runs[spec] for t in r["fit_seconds"]]
        queries = [t for r in runs[spec] for t in r["query_seconds"]]
        result["strategies"][spec] = {
            "strategy": s_name,
            "level": STRATEGIES[s_name].level,
            "aggregate": agg if STRATEGIES[s_name].level == "sentence" else None,
            "tokens_to_95": tokens_to_reach(c["labeled_tokens"], c["accuracy"], 0.95 * full),
            "tokens_to_99": tokens_to_reach(c["labeled_tokens"], c["accuracy"], 0.99 * full),
            "auc": normalised_auc(c["fraction"], c["accuracy"], lo, hi),
            "final_accuracy": c["accuracy"][-1],
            "final_fraction": c["fraction"][-1],
            "seconds_per_round": float(np.median(fits)),
            "query_seconds_per_round": float(np.median(queries)) if queries else 0.0,
            **_cold_summary(runs[spec]),
            "curve": c,
            "per_seed": [
                {k: r[k] for k in ("seed", "labeled_tokens", "accuracy", "fit_seconds", "n_iter")}
                for r in runs[spec]
            ],
        }
    return result


def _cold_summary(runs: list[dict]) -> dict:
    """Warm against cold refits of the same rounds (rounds after the first), if measured."""
    if not runs or "cold_fit_seconds" not in runs[0]:
        return {}
    warm = [t for r in runs for t in r["fit_seconds"][1:]]
    cold = [t for r in runs for t in r["cold_fit_seconds"][1:]]
    wacc = [a for r in runs for a in r["accuracy"][1:]]
    cacc = [a for r in runs for a in r["cold_accuracy"][1:]]
    if not warm:
        return {}
    return {
        "cold_seconds_per_round": float(np.median(cold)),
        "warm_to_cold_time": float(np.sum(warm) / np.sum(cold)),
        "warm_minus_cold_accuracy": float(np.mean(np.subtract(wacc, cacc))),
    }


def machine_info() -> dict:
    import scipy

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
    }


def _fmt(v, digits=0):
    if v is None:
        return "never"
    return f"{v:.{digits}f}"


def write_markdown(report: dict, path: Path) -> None:
    lines = [
        "# Active learning with GPSL",
        "",
        f"Command: `{report['command']}`  ",
        f"Date: {report['date']}  ",
        "Machine: {platform}, {cpu_count} CPUs, Python {python}, numpy {numpy}, "
        "scipy {scipy}  ".format(**report["machine"]),
        f"Seeds: {report['config']['seeds']}, rounds: {report['config']['rounds']}, "
        f"start: {report['config']['n_init']} fully labeled sentences, GPSL max_iter "
        f"{report['config']['max_iter']}, learn_hyper {report['config']['learn_hyper']}, "
        f"warm start; calibration: "
        + (f"{_folds_text(report['config'].get('calibrate'))} of the revealed sentences every "
           "round (s/round includes it)" if report["config"].get("calibrate") else "none")
        + f"; total time {report['total_seconds']:.0f} s",
        "",
        "Tokens to 95% / 99%: labeled tokens needed for the mean test accuracy to reach 95% / 99% "
        "of the accuracy of full supervision of the pool (linear interpolation; *never* = not "
        "within the rounds run). AUC: mean accuracy over the common range of the fraction of the "
        "pool labeled. s/round: median retraining (fit) time.",
    ]
    for name, d in report["datasets"].items():
        pool = d["pool_tokens"]
        lines += [
            "",
            f"## {name}",
            "",
            f"Pool {d['pool_sentences']} sentences ({pool:.0f} tokens on average), test "
            f"{d['test_sentences']} sentences; batch {d['token_batch']:.0f} tokens or "
            f"{d['sentence_batch']:.0f} sentences per round. Full supervision accuracy "
            f"{d['full_accuracy']:.4f} (sd {d['full_accuracy_std']:.4f}, fit "
            f"{d['full_fit_seconds']:.1f} s). AUC range: {100 * d['auc_range'][0]:.1f}% to "
            f"{100 * d['auc_range'][1]:.1f}% of the pool.",
            "",
            "| strategy | tokens to 95% | % of pool | tokens to 99% | % of pool | AUC "
            "| final acc (% labeled) | s/round |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for spec, s in d["strategies"].items():
            t95, t99 = s["tokens_to_95"], s["tokens_to_99"]
            lines.append(
                f"| {spec} | {_fmt(t95)} | {_fmt(t95 and 100 * t95 / pool, 1)} | {_fmt(t99)} "
                f"| {_fmt(t99 and 100 * t99 / pool, 1)} | {_fmt(s['auc'], 4)} "
                f"| {s['final_accuracy']:.4f} ({100 * s['final_fraction']:.1f}%) "
                f"| {s['seconds_per_round']:.2f} |"
            )
        cold = [(spec, s) for spec, s in d["strategies"].items() if "warm_to_cold_time" in s]
        if cold:
            lines += ["", "Warm-started refits against cold fits of the same rounds "
                      "(`--cold-check`, rounds after the first):", "",
                      "| strategy | warm s/round | cold s/round | warm time / cold time "
                      "| accuracy warm - cold |", "|---|---:|---:|---:|---:|"]
            for spec, s in cold:
                lines.append(f"| {spec} | {s['seconds_per_round']:.2f} "
                             f"| {s['cold_seconds_per_round']:.2f} "
                             f"| {s['warm_to_cold_time']:.2f} "
                             f"| {s['warm_minus_cold_accuracy']:+.4f} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_html(name: str, d: dict, path: Path) -> None:
    import plotly.graph_objects as go

    fig = go.Figure()
    for spec, s in d["strategies"].items():
        c = s["curve"]
        fig.add_trace(
            go.Scatter(
                x=c["labeled_tokens"],
                y=c["accuracy"],
                error_y={"type": "data", "array": c["accuracy_std"], "visible": True},
                mode="lines+markers",
                name=spec,
            )
        )
    fig.add_hline(
        y=d["full_accuracy"], line_dash="dash", annotation_text="full supervision of the pool"
    )
    fig.add_hline(y=0.95 * d["full_accuracy"], line_dash="dot", annotation_text="95% of full")
    fig.update_layout(
        title=f"GPSL active learning on {name} (pool {d['pool_tokens']:.0f} tokens)",
        xaxis_title="labeled tokens",
        yaxis_title="test token accuracy",
        template="plotly_white",
    )
    fig.write_html(str(path), include_plotlyjs="cdn")


def run(cfg: Config, command: str = "") -> dict:
    """Run the benchmark and write the result files; returns the report dict."""
    for spec in cfg.strategies:
        parse_strategy(spec)

    def log(msg: str) -> None:
        if cfg.verbose:
            print(msg, file=sys.stderr, flush=True)

    data_dir = Path(cfg.data_dir)
    if not data_dir.is_dir():
        raise DataMissing(f"shared data absent: {data_dir} not found")
    t0 = time.perf_counter()
    datasets = {name: run_dataset(cfg, name, log) for name in cfg.datasets}
    report = {
        "command": command,
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine_info(),
        "config": asdict(cfg),
        "total_seconds": time.perf_counter() - t0,
        "datasets": datasets,
    }
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "active_learning.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    write_markdown(report, out / "active_learning.md")
    for name, d in datasets.items():
        write_html(name, d, out / f"active_learning_{name}.html")
    return report


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.active_learning",
        description="Pool-based active-learning simulation with GPSL on the CRF++ data sets.",
    )
    p.add_argument(
        "--quick", action="store_true", help="1 seed, 3 rounds, pool/test 15/30 (chunking 12/30)"
    )
    p.add_argument("--dataset", choices=[*DATASETS, "all"], default="all")
    p.add_argument("--seeds", type=int, help="number of seeds (default 3; quick 1)")
    p.add_argument("--rounds", type=int, help="query rounds (default 5; quick 3)")
    p.add_argument("--batch", type=int, help="tokens per round (default 10%% of the pool)")
    p.add_argument("--batch-fraction", type=float, default=0.1, metavar="F",
                   help="tokens per round as a fraction of the pool's tokens when --batch is "
                        "not given (default 0.1)")
    p.add_argument("--pool", type=int, help="pool sentences (default 60 basenp, 50 chunking)")
    p.add_argument("--test", type=int, help="held-out test sentences (default 150 / 100)")
    p.add_argument("--init", type=int, default=3, help="initial fully labeled sentences")
    p.add_argument("--max-iter", type=int, help="GPSL max_iter (default 30; quick 20)")
    p.add_argument(
        "--learn-hyper",
        action="store_true",
        help="learn kernel hyper-parameters in every fit (slow; default: fixed)",
    )
    p.add_argument(
        "--cold-check",
        action="store_true",
        help="also fit every round's data from scratch and report warm/cold time and accuracy",
    )
    p.add_argument(
        "--calibrate",
        type=lambda v: AUTO_FOLDS if v == "auto" else int(v),
        default=0,
        metavar="K",
        help="calibrate every round's model by K folds of the revealed sentences, or 'auto': "
             "the app's choice without held-out gold (gpsl.calibration.calibration_folds); "
             "default 0 = raw marginals",
    )
    p.add_argument(
        "--strategies",
        help=f"comma-separated name[:aggregate] list (default: {','.join(DEFAULT_STRATEGIES)})",
    )
    p.add_argument("--data-dir", default=str(DEFAULT_DATA), help="the crfpp data folder")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output folder")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return p


def config_from_args(args: argparse.Namespace) -> Config:
    quick = args.quick

    def pick(value, normal, fast):
        return value if value is not None else (fast if quick else normal)

    return Config(
        datasets=list(DATASETS) if args.dataset == "all" else [args.dataset],
        seeds=pick(args.seeds, 3, 1),
        rounds=pick(args.rounds, 5, 3),
        batch=args.batch,
        batch_fraction=args.batch_fraction,
        n_pool=args.pool,
        n_test=args.test,
        n_init=args.init,
        max_iter=pick(args.max_iter, 30, 20),
        learn_hyper=args.learn_hyper,
        cold_check=args.cold_check,
        calibrate=args.calibrate,
        strategies=(
            [s.strip() for s in args.strategies.split(",") if s.strip()]
            if args.strategies
            else list(DEFAULT_STRATEGIES)
        ),
        data_dir=args.data_dir,
        out_dir=args.out,
        quick=quick,
        verbose=not args.quiet,
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    cfg = config_from_args(args)
    if not 0.0 < cfg.batch_fraction <= 1.0:
        print("bench.active_learning: --batch-fraction must be in (0, 1]", file=sys.stderr)
        return 2
    try:
        for spec in cfg.strategies:
            parse_strategy(spec)
    except ValueError as exc:
        print(f"bench.active_learning: {exc}", file=sys.stderr)
        return 2
    try:
        report = run(cfg, command=shlex.join(["python", "-m", "bench.active_learning", *argv]))
    except DataMissing as exc:
        print(f"bench.active_learning: {exc}", file=sys.stderr)
        return 2
    out = Path(cfg.out_dir)
    for name, d in report["datasets"].items():
        best = max(d["strategies"].items(), key=lambda kv: kv[1]["auc"] or 0.0)
        print(
            f"{name}: full accuracy {d['full_accuracy']:.4f}; best AUC {best[0]} "
            f"{best[1]['auc']:.4f}"
        )
    print(f"wrote {out / 'active_learning.json'}, active_learning.md and the html curves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
