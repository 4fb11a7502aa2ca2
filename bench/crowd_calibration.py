"""What ``train --crowd`` should calibrate on when it has no gold: measured against gold.

::

    python -m bench.crowd_calibration                    # 2 partitions, about 10 minutes
    python -m bench.crowd_calibration --partitions 1 --train 100 --test 100

The real crowd of ``../shared/data/crowd-ner`` (CoNLL-2003 NER sentences labeled by Mechanical
Turk workers, gold labels beside them; read its README). Per random partition of its
sentences (seed 31): the joint model of the votes and the tagger is fitted on ``--train``
sentences' votes exactly as ``gpsl train --crowd`` fits it (``CrowdGPSL(GPSL(...),
tagger_prior="learn")``, the library's defaults unless ``--inference``), and its tagger is
then, in turn:

* ``none`` - left uncalibrated;
* ``folds of inferred labels`` - calibrated on K folds of the training sentences with the
  labels the crowd model inferred (``gpsl.cli.train.inferred_labels``, the voted tokens), by
  ``gpsl.calibration.calibrate_model``: what ``train --crowd`` does by default;
* ``held-out gold`` - calibrated on ``--held-out`` other sentences' gold labels
  (``train --crowd --calibrate FILE``).

Each is scored on ``--test`` further sentences' gold labels: ECE over 10 equal-width bins of
the predicted label's probability, its noise floor, Hamming loss, mean confidence; and the
calibration's seconds. One fit serves the three (the fit, not the calibration, is the joint
model's cost), so this runs the library calls the command makes rather than the command.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import (
    REPO,
    RESULTS_DIR,
    git_commit,
    header_lines,
    jsonable,
    machine_info,
    mean_std,
    now_iso,
)

CROWD_DIR = REPO.parent / "shared" / "data" / "crowd-ner"
FILES = ("val.crowd.jsonl", "val.gold.conll")
VARIANTS = ("none", "folds of inferred labels", "held-out gold")
SEED = 31


def _figures(model, X, y) -> dict:
    from gpsl.metrics import ece_noise_floor, expected_calibration_error

    P = model.predict_marginals(X)
    pred = model.predict(X)
    idx = {c: i for i, c in enumerate(model.classes_)}
    conf = np.concatenate([p[np.arange(len(ps)), [idx[v] for v in ps]]
                           for p, ps in zip(P, pred)])
    right = np.array([a == b for ys, ps in zip(y, pred) for a, b in zip(ys, ps)])
    return {"ece": expected_calibration_error(conf, right, 10),
            "ece_floor": ece_noise_floor(conf, n_bins=10, binning="width"),
            "loss": 100.0 * (1.0 - float(right.mean())), "mean_confidence": float(conf.mean()),
            "tokens": int(conf.size)}


def run_partition(crowd, gold, tr, ho, te, inference: str) -> dict:
    from gpsl.calibration import calibrate_model
    from gpsl.cli.train import inferred_labels
    from gpsl.crowd import CrowdGPSL, Votes
    from gpsl.model import GPSL

    votes = Votes.from_sentences([crowd[i] for i in tr])
    Xtr = [[tuple(t) if isinstance(t, (tuple, list)) else (t,) for t in crowd[i].tokens]
           for i in tr]
    Xho, yho = [[tok[:1] for tok in gold[i].tokens] for i in ho], [gold[i].labels for i in ho]
    Xte, yte = [[tok[:1] for tok in gold[i].tokens] for i in te], [gold[i].labels for i in te]
    t0 = time.perf_counter()
    joint = CrowdGPSL(GPSL(inference=inference), tagger_prior="learn").fit(Xtr, votes)
    out = {"fit_s": time.perf_counter() - t0, "inference": joint.model_.inference_}
    m = joint.model_
    out["none"] = _figures(m, Xte, yte)
    run = calibrate_model(m, Xtr, inferred_labels(joint, votes),
                          folds_source="{folds}-fold inferred labels")
    out["folds of inferred labels"] = {**_figures(m, Xte, yte), "calibration": run.to_dict()}
    run = calibrate_model(m, Xtr, inferred_labels(joint, votes), held_out=(Xho, yho),
                          held_out_source="held-out gold")
    out["held-out gold"] = {**_figures(m, Xte, yte), "calibration": run.to_dict()}
    return out


def run(args) -> dict:
    from gpsl.io import read_conll, read_crowd

    crowd = read_crowd(CROWD_DIR / FILES[0], "jsonl")
    gold = read_conll(CROWD_DIR / FILES[1])
    if len(crowd) != len(gold):
        raise RuntimeError(f"{len(crowd)} crowd sentences but {len(gold)} gold ones")
    need = args.train + args.held_out + args.test
    results = []
    t_start = time.perf_counter()
    for p in range(args.partitions):
        order = np.random.default_rng([args.seed, p]).permutation(len(crowd))[:need]
        tr = order[:args.train]
        ho = order[args.train:args.train + args.held_out]
        te = order[args.train + args.held_out:]
        rec = run_partition(crowd, gold, tr, ho, te, args.inference)
        rec["partition"] = p
        results.append(rec)
        print(f"p{p} ({rec['inference']}, fit {rec['fit_s']:.0f} s): " + " | ".join(
            f"{v} ECE {rec[v]['ece']:.4f} loss {rec[v]['loss']:.2f}" for v in VARIANTS),
            flush=True)
    return {"results": results, "seconds": time.perf_counter() - t_start}


def write_markdown(report: dict, path: Path) -> None:
    a = report["args"]
    lines = header_lines("train --crowd: what to calibrate on without gold", report["date"],
                         report["machine"], report["git"], report["command"])
    lines += [
        f"crowd-ner (`../shared/data/crowd-ner/val.crowd.jsonl`, gold beside it), seed "
        f"{a['seed']}, {a['partitions']} random partitions of {a['train']} crowd-labeled "
        f"training sentences, {a['held_out']} held-out gold sentences and {a['test']} test "
        f"sentences; the joint model with `inference={a['inference']!r}`; "
        f"{report['seconds'] / 60:.1f} minutes in all. ECE over 10 equal-width bins of the "
        "predicted label's probability against the test sentences' gold labels. Means ± "
        "standard deviations over the partitions.", "",
        "| calibrated on | ECE | ECE floor | Hamming loss (%) | mean confidence | "
        "calibration (s) |", "|---|---:|---:|---:|---:|---:|"]
    for v in VARIANTS:
        row = report["summary"][v]

        def ms(key, digits=4, row=row):
            m, s = row[key]
            return "-" if m is None else f"{m:.{digits}f} ± {s:.{digits}f}"
        lines.append(f"| {v} | {ms('ece')} | {ms('ece_floor')} | {ms('loss', 2)} | "
                     f"{ms('mean_confidence')} | {ms('calibration_s', 1)} |")
    lines += ["", "Per partition (ECE: none / folds of inferred labels / held-out gold):", ""]
    for r in report["results"]:
        lines.append(f"- p{r['partition']}: " + " / ".join(f"{r[v]['ece']:.4f}" for v in VARIANTS)
                     + f" (joint fit {r['fit_s']:.0f} s, {r['inference']})")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def summarise(results: list) -> dict:
    out = {}
    for v in VARIANTS:
        out[v] = {k: mean_std([r[v][k] for r in results])
                  for k in ("ece", "ece_floor", "loss", "mean_confidence")}
        out[v]["calibration_s"] = mean_std([(r[v].get("calibration") or {}).get("seconds", 0.0)
                                            for r in results])
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.crowd_calibration", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--train", type=int, default=300)
    p.add_argument("--held-out", type=int, default=100)
    p.add_argument("--test", type=int, default=400)
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--inference", default="auto", choices=("auto", "full", "sparse"))
    p.add_argument("--out", default=str(RESULTS_DIR))
    p.add_argument("--name", default="crowd_calibration")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    missing = [f for f in FILES if not (CROWD_DIR / f).is_file()]
    if missing:
        print(f"bench.crowd_calibration: shared data absent: {CROWD_DIR / missing[0]} not found",
              file=sys.stderr)
        return 2
    command = "python -m bench.crowd_calibration " + " ".join(shlex.quote(a) for a in argv)
    print(command, flush=True)
    machine = machine_info()
    out = run(args)
    report = {"date": now_iso(), "machine": machine, "git": git_commit(), "command": command,
              "args": vars(args), "seconds": out["seconds"],
              "summary": summarise(out["results"]), "results": out["results"]}
    dest = Path(args.out)
    dest.mkdir(parents=True, exist_ok=True)
    write_markdown(report, dest / f"{args.name}.md")
    (dest / f"{args.name}.json").write_text(json.dumps(jsonable(report), indent=1) + "\n",
                                            encoding="utf-8")
    print((dest / f"{args.name}.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
