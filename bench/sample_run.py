"""A default training run of the app on the bundled sample project, beside CRFsuite.

    python -m bench.sample_run [--repeats 3] [--out bench/results]

The sample project as ``make run`` opens it (``sample_data/``: 400 sentences, the last 80
held out with gold labels) in a new SQLite store in a temporary directory; each repeat is one
training run with the default settings (``TrainConfig()``, what Start training on the Train
page runs) in this process, from the start to the stored predictions: fit, calibration on
the held-out gold, held-out evaluation, query scores.  The peer is CRFsuite (L-BFGS,
``bench.paper``'s settings) fitted on the sentences whose labels are complete (it cannot
train on partial ones) and scored on the same held-out gold, in the same run.  Reports the
medians of wall and CPU seconds and the held-out figures (they do not change between
repeats: the run is deterministic).  Writes ``sample_run.md`` and ``sample_run.json`` to
``--out``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO, RESULTS_DIR, git_commit, header_lines, machine_info, now_iso

SAMPLE = REPO / "sample_data"


def gpsl_run(tmp: Path, repeat: int) -> dict:
    from gpsl.annotation import Store
    from gpsl.annotation.training import jobs, pipeline

    store = Store(tmp / f"run{repeat}.sqlite3", models_root=tmp / f"models{repeat}")
    try:
        pid = store.ensure_sample_project(SAMPLE)
        wall, cpu = time.perf_counter(), time.process_time()
        version = jobs.train_now(store.home, pid, pipeline.TrainConfig())
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        store.close()
    if version["status"] != "done":
        raise RuntimeError(f"the training run ended {version['status']}: {version['error']}")
    m = version["metrics"]
    return {"wall_s": wall, "cpu_s": cpu, "fit_s": m["fit_seconds"], "sweeps": m["n_iter"],
            "inference": m["inference"], "train_sentences": m["train_sentences"],
            "train_labeled_tokens": m["train_labeled_tokens"],
            "missing_weight": m["missing_weight"], "heldout_tokens": m["heldout_tokens"],
            "heldout_accuracy": m["heldout_accuracy"],
            "heldout_mean_confidence": m["heldout_mean_confidence"],
            "heldout_ece": m["heldout_ece"], "heldout_ece_mass": m["heldout_ece_mass"]}


def crfsuite_run() -> dict:
    from bench.peers import fit_peer
    from gpsl.annotation.corpus.projects import split_heldout
    from gpsl.features import Template
    from gpsl.io import read_conll

    sentences = read_conll(SAMPLE / "sample.conll")
    gold = {tuple(map(tuple, s.tokens)): s.labels
            for s in read_conll(SAMPLE / "sample_gold.conll")}
    train, held = split_heldout(sentences, 0.2)  # as the sample project splits it
    complete = [s for s in train if s.labels and all(v is not None for v in s.labels)]
    Xte = [list(s.tokens) for s in held]
    yte = [gold[tuple(map(tuple, s.tokens))] for s in held]
    template = Template.parse((SAMPLE / "template").read_text(encoding="utf-8"),
                              source="sample_data/template")
    wall, cpu = time.perf_counter(), time.process_time()
    rec, _, pred = fit_peer("CRFsuite", template, [list(s.tokens) for s in complete],
                            [list(s.labels) for s in complete], Xte, want_marginals=False)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    pairs = [(p, g) for ps, gs in zip(pred, yte) for p, g in zip(ps, gs) if g is not None]
    return {"wall_s": wall, "cpu_s": cpu, "fit_s": rec["fit_s"],
            "train_sentences": len(complete), "heldout_tokens": len(pairs),
            "heldout_accuracy": sum(p == g for p, g in pairs) / len(pairs)}


def median(rows, key):
    return statistics.median(r[key] for r in rows)


def report(result: dict) -> str:
    g, c = result["gpsl"], result["crfsuite"]
    first = g[0]
    lines = header_lines("A default training run on the sample project", result["date"],
                         result["machine"], result["git"], result["command"])
    lines += [
        f"{len(g)} repeats, medians. GPSL: the app's training run with the default settings "
        f"({first['train_sentences']} sentences, {first['train_labeled_tokens']:,} labeled "
        f"tokens, `{first['inference']}` inference, {first['sweeps']} sweeps, missing weight "
        f"{first['missing_weight']:.2f}), from the start to the stored predictions. CRFsuite: "
        f"fitted on the {c[0]['train_sentences']} sentences with complete labels.",
        "",
        "| | wall s | CPU s | fit s | held-out accuracy | mean confidence | ECE (10 bins) "
        "| ECE (15 equal-mass) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        f"| GPSL, training run | {median(g, 'wall_s'):.1f} | {median(g, 'cpu_s'):.1f} "
        f"| {median(g, 'fit_s'):.1f} | {100 * first['heldout_accuracy']:.1f}% "
        f"| {first['heldout_mean_confidence']:.3f} | {first['heldout_ece']:.3f} "
        f"| {first['heldout_ece_mass']:.3f} |",
        f"| CRFsuite | {median(c, 'wall_s'):.1f} | {median(c, 'cpu_s'):.1f} "
        f"| {median(c, 'fit_s'):.1f} | {100 * c[0]['heldout_accuracy']:.1f}% | | | |",
        "",
        f"Held out: {first['heldout_tokens']:,} gold tokens. Ratio of wall times (GPSL run / "
        f"CRFsuite): {median(g, 'wall_s') / median(c, 'wall_s'):.1f}; of CPU times "
        f"{median(g, 'cpu_s') / median(c, 'cpu_s'):.1f}.",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sample_run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = ap.parse_args(argv)
    command = "python -m bench.sample_run " + shlex.join(argv if argv is not None
                                                          else sys.argv[1:])
    result = {"command": command.strip(), "date": now_iso(), "machine": machine_info(),
              "git": git_commit(), "gpsl": [], "crfsuite": []}
    with tempfile.TemporaryDirectory(prefix="gpsl-sample-run-") as tmp:
        for r in range(args.repeats):  # the peer beside each repeat, under the same load
            result["gpsl"].append(gpsl_run(Path(tmp), r))
            result["crfsuite"].append(crfsuite_run())
    text = report(result)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sample_run.md").write_text(text, encoding="utf-8")
    (args.out / "sample_run.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
