"""Training time and loss of the GPSL engine on the paper's partitions (issue: engine figures).

    python -m bench.engine_timing [--datasets chunking basenp] [--partitions N] [--offsets -1,1]
                                  [--out bench/results]

For each data set, draws the same random partitions as ``bench.paper`` (paper sizes, seed 0),
fits GPSL with the default settings and the data set's CRF++ template, and reports the wall-clock
and CPU seconds of ``fit``, the number of sweeps, the training tokens and the test Hamming loss.
Set ``OPENBLAS_NUM_THREADS`` to fix the BLAS threads; the value is printed in the header.
Writes ``engine_timing.md`` and ``engine_timing.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import (
    DATA_DIR,
    PAPER_SIZES,
    RESULTS_DIR,
    DataMissing,
    check_data,
    load_pooled,
    machine_info,
    now_iso,
    partitions,
)
from gpsl.metrics import hamming_loss
from gpsl.model import GPSL

TARGETS = {"chunking": (12.69, 15.0), "basenp": (5.55, 60.0)}
"""Issue targets for GPSL2: (Hamming loss %, median training seconds)."""


def run(datasets, n_partitions: int, offsets: str, seed: int = 0) -> dict:
    check_data(DATA_DIR, datasets)
    out = {}
    for name in datasets:
        data = load_pooled(DATA_DIR, name)
        rows = []
        n_tr, n_te = PAPER_SIZES[name]
        for p, (train, test) in enumerate(partitions(len(data.X), n_tr, n_te, n_partitions,
                                                     seed, name)):
            Xtr, ytr = [data.X[i] for i in train], [data.y[i] for i in train]
            Xte, yte = [data.X[i] for i in test], [data.y[i] for i in test]
            model = GPSL(offsets=offsets, template=data.template)
            wall, cpu = time.perf_counter(), time.process_time()
            model.fit(Xtr, ytr)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            loss = hamming_loss(yte, model.predict(Xte))
            rows.append({"partition": p, "fit_wall_s": wall, "fit_cpu_s": cpu,
                         "sweeps": model.n_iter_, "train_tokens": int(model.X_train_.shape[0]),
                         "labels": len(model.classes_), "loss": loss})
            print(f"[{name} p{p}] fit {wall:6.1f}s wall {cpu:6.1f}s cpu, {model.n_iter_} sweeps, "
                  f"{rows[-1]['train_tokens']} tokens, loss {loss:5.2f}%", file=sys.stderr)
        out[name] = {
            "rows": rows,
            "fit_median_s": float(np.median([r["fit_wall_s"] for r in rows])),
            "loss_mean": float(np.mean([r["loss"] for r in rows])),
            "loss_std": float(np.std([r["loss"] for r in rows], ddof=1)) if len(rows) > 1 else 0.0,
            "target": TARGETS.get(name),
        }
    return out


def write(report: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "engine_timing.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    m = report["machine"]
    lines = ["# GPSL engine: training time and loss", "",
             f"* command: `{report['command']}`",
             f"* date: {report['date']}; machine: {m.get('cpu_model')}, "
             f"{m.get('cpu_count')} cores; "
             f"OPENBLAS_NUM_THREADS={report['blas_threads']}; load average at start "
             f"{report['load_average']}",
             f"* GPSL offsets {report['offsets']}, linear kernel, default settings", "",
             "| data set | partitions | tokens (median) | labels | fit median (s) "
             "| sweeps (median) | loss mean ± sd (%) | target loss / time |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, r in report["results"].items():
        rows = r["rows"]
        tgt = r["target"]
        lines.append(
            f"| {name} | {len(rows)} | {int(np.median([x['train_tokens'] for x in rows]))} | "
            f"{rows[0]['labels']} | {r['fit_median_s']:.1f} | "
            f"{int(np.median([x['sweeps'] for x in rows]))} | {r['loss_mean']:.2f} ± "
            f"{r['loss_std']:.2f} | " + (f"{tgt[0]} / {tgt[1]:.0f} s" if tgt else "–") + " |")
    (out / "engine_timing.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(prog="python -m bench.engine_timing", description=__doc__)
    p.add_argument("--datasets", nargs="+", default=["chunking", "basenp"],
                   choices=sorted(PAPER_SIZES))
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--offsets", default="-1,1")
    p.add_argument("--out", default=str(RESULTS_DIR))
    args = p.parse_args(argv)
    try:
        results = run(args.datasets, args.partitions, args.offsets)
    except DataMissing as exc:
        print(f"bench.engine_timing: {exc}", file=sys.stderr)
        return 2
    report = {"command": shlex.join(["python", "-m", "bench.engine_timing", *argv]),
              "date": now_iso(), "machine": machine_info(),
              "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "(default)"),
              "load_average": [round(x, 2) for x in os.getloadavg()],
              "offsets": args.offsets, "results": results}
    write(report, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
