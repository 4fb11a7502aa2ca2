"""The command line's default marginals beside CRFsuite's, from the commands as a user types them.

::

    python -m bench.cli_calibration                       # the four paper sets, 5 partitions
    python -m bench.cli_calibration --datasets seg --partitions 1

For every data set and random partition of the pooled ``train.data`` + ``test.data`` (seed 31,
sizes below), the split is written as two CRF++ column files and the model is trained and
applied by subprocesses exactly as a user would::

    python -m gpsl train -q -t TEMPLATE train.data model        # the defaults: calibrated
    python -m gpsl test -m model --marginals test.data          # label/probability per token

(``-q`` only hides the progress lines), and once more with ``train --no-calibrate`` for the
uncalibrated marginals. CRFsuite (sklearn-crfsuite, CRF++'s regularisation as in
``bench.paper``) is trained in the same run on the same template's features: ``CRFsuite``
labels each token with the argmax of its marginals (posterior decoding, like GPSL's RNS),
``CRFsuite Viterbi`` with the Viterbi path (``crf_test -v1``), each with the marginal
probability of the label it gives.

Per token of the test split: the predicted label's probability and whether it is right. ECE
over 10 equal-width bins of that probability (``gpsl.metrics.expected_calibration_error``),
its noise floor (the ECE a perfectly calibrated tagger with the same confidences would show,
``gpsl.metrics.ece_noise_floor``), the Hamming loss, the mean confidence; for ``gpsl train``
the wall-clock and CPU seconds of the command (its fold-fit processes included), and the
calibration's seconds, data and processes as the saved model records them
(``model.json``: ``calibration_run``). Means over partitions, and the paired per-partition
differences against CRFsuite.

Sizes (train/test sentences): chunking 100/200 and basenp 150/150 (the splits of issue 31),
seg 20/16 and JapaneseNE 50/50 (the paper's partitions).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import (
    DATA_DIR,
    REPO,
    RESULTS_DIR,
    DataMissing,
    check_data,
    git_commit,
    header_lines,
    jsonable,
    load_pooled,
    machine_info,
    mean_std,
    now_iso,
    parse_sizes,
    partitions,
)

#: train/test sentences: issue 31's splits for chunking and basenp, the paper's for the others
SIZES = {"chunking": (100, 200), "basenp": (150, 150), "seg": (20, 16), "JapaneseNE": (50, 50)}
DATASETS = tuple(SIZES)
#: the data sets of the acceptance (issue 31): ECE at or below CRFsuite's, loss no higher
ACCEPTANCE = ("chunking", "basenp")
SEED = 31
METHODS = ("gpsl default", "gpsl --no-calibrate", "CRFsuite", "CRFsuite Viterbi")
PEERS = ("CRFsuite", "CRFsuite Viterbi")
N_BINS = 10


# --------------------------------------------------------------------------- the commands


def _write(path: Path, X, y) -> None:
    """CRF++ columns (features, then the gold label), a blank line between sentences."""
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for x, lab in zip(X, y):
            for tok, v in zip(x, lab):
                fh.write(" ".join((*tok, v)) + "\n")
            fh.write("\n")


def _gpsl(args: list[str]) -> tuple[subprocess.CompletedProcess, float, float]:
    """``python -m gpsl ARGS`` as a user runs it; (process, wall seconds, CPU seconds of it and
    its children)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gpsl", *args], capture_output=True,
                          text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"python -m gpsl {' '.join(args)}: exit {proc.returncode}: "
                           f"{proc.stderr.strip().splitlines()[-1:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc, wall, cpu


def _marginals_output(text: str, gold: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(probability of the predicted label, right?) per token of ``test --marginals``."""
    conf, right = [], []
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) != len(gold):
        raise RuntimeError(f"test printed {len(lines)} token lines for {len(gold)} tokens")
    for ln, g in zip(lines, gold):
        label, p = ln.split("\t")[-1].rsplit("/", 1)
        conf.append(float(p))
        right.append(label == g)
    return np.array(conf), np.array(right)


def run_gpsl(work: Path, template: Path, train: Path, test: Path, gold: list[str],
             extra: list[str], tag: str) -> dict:
    """``gpsl train`` (``extra`` options) then ``gpsl test --marginals``; the figures."""
    model = work / f"model-{tag}"
    proc, wall, cpu = _gpsl(["train", "-q", "-t", str(template), *extra, str(train),
                             str(model)])
    meta = json.loads((model / "model.json").read_text(encoding="utf-8"))
    out, _, _ = _gpsl(["test", "-m", str(model), "--marginals", str(test)])
    conf, right = _marginals_output(out.stdout, gold)
    run = meta.get("calibration_run") or {}
    rec = _figures(conf, right)
    rec.update({"train_wall_s": wall, "train_cpu_s": cpu,
                "fit_s": float(meta.get("fit_seconds", 0.0)),
                "calibration_s": float(run.get("seconds", 0.0)),
                "calibration": {k: run.get(k) for k in ("source", "folds", "tokens",
                                                        "processes", "reason")},
                "calibrator": (meta.get("calibration") or {}).get("kind"),
                # the candidates allowed to change the decisions (gpsl.calibration.decisions)
                "may_change_decisions": sorted(
                    k for k, c in ((meta.get("calibration") or {}).get("candidates")
                                   or {}).items()
                    if c.get("admissible") and (c.get("cv_fixed") or c.get("cv_broken"))),
                "inference": meta.get("inference"),
                "summary_line": proc.stderr.strip().splitlines()[-1]})
    return rec


def run_crfsuite(template_text: str, Xtr, ytr, Xte, yte) -> dict:
    """CRFsuite on the template's features: posterior (argmax of the marginals) and Viterbi
    labels, each with the marginal of the label it gives."""
    from bench.peers import fit_crfsuite, template_features
    from gpsl.features import Template

    template = Template.parse(template_text, source="template")
    fit = fit_crfsuite(Xtr, ytr, template)
    crf, fit_wall, fit_cpu = fit.crf, fit.wall_s, fit.cpu_s
    Fte = template_features(template, Xte)
    marg = crf.predict_marginals(Fte)
    vit = crf.predict(Fte)
    gold = [g for lab in yte for g in lab]
    post_lab, post_p, vit_p = [], [], []
    for sm, sv in zip(marg, vit):
        for tok, v in zip(sm, sv):
            best = max(tok, key=tok.get)
            post_lab.append(best)
            post_p.append(tok[best])
            vit_p.append(tok.get(v, 0.0))
    vit_lab = [v for s in vit for v in s]
    out = {}
    for name, labels, probs in (("CRFsuite", post_lab, post_p),
                                ("CRFsuite Viterbi", vit_lab, vit_p)):
        rec = _figures(np.array(probs), np.array([a == g for a, g in zip(labels, gold)]))
        rec.update({"fit_wall_s": fit_wall, "fit_cpu_s": fit_cpu})
        out[name] = rec
    return out


def _figures(conf: np.ndarray, right: np.ndarray) -> dict:
    from gpsl.metrics import ece_noise_floor, expected_calibration_error

    return {"ece": expected_calibration_error(conf, right, N_BINS),
            "ece_floor": ece_noise_floor(conf, n_bins=N_BINS, binning="width"),
            "loss": 100.0 * (1.0 - float(np.mean(right))),
            "mean_confidence": float(np.mean(conf)), "tokens": int(conf.size)}


# --------------------------------------------------------------------------- the run


def run(args) -> dict:
    results: dict = {}
    extra = shlex.split(args.train_args)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpsl-cli-calibration-") as tmp:
        for name in args.datasets:
            data = load_pooled(Path(args.data_dir), name)
            ntr, nte = args.sizes[name]
            results[name] = []
            for p, (tr, te) in enumerate(partitions(len(data), ntr, nte, args.partitions,
                                                    args.seed, name)):
                work = Path(tmp) / f"{name}-p{p}"
                work.mkdir()
                Xtr, ytr = [data.X[i] for i in tr], [data.y[i] for i in tr]
                Xte, yte = [data.X[i] for i in te], [data.y[i] for i in te]
                template = work / "template"
                template.write_text(data.template, encoding="utf-8")
                _write(work / "train.data", Xtr, ytr)
                _write(work / "test.data", Xte, yte)
                gold = [g for lab in yte for g in lab]
                rec = {"partition": p,
                       "gpsl default": run_gpsl(work, template, work / "train.data",
                                                work / "test.data", gold, extra, "default"),
                       "gpsl --no-calibrate": run_gpsl(work, template, work / "train.data",
                                                       work / "test.data", gold,
                                                       [*extra, "--no-calibrate"], "raw")}
                rec.update(run_crfsuite(data.template, Xtr, ytr, Xte, yte))
                results[name].append(rec)
                d, r, c = rec["gpsl default"], rec["gpsl --no-calibrate"], rec["CRFsuite"]
                print(f"{name} p{p}: default ECE {d['ece']:.4f} loss {d['loss']:.2f} "
                      f"(calibration {d['calibration_s']:.1f} s, {d['calibration']['source']}"
                      f", {d['inference']}) | --no-calibrate ECE {r['ece']:.4f} loss "
                      f"{r['loss']:.2f} | CRFsuite ECE {c['ece']:.4f} loss {c['loss']:.2f}",
                      flush=True)
    return {"results": results, "seconds": time.perf_counter() - t_start}


def _paired(a, b) -> dict:
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    se = float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else None
    return {"diff": float(d.mean()), "se": se, "at_or_below": int((d <= 0).sum()),
            "n": int(d.size)}


def summarise(results: dict) -> dict:
    out = {}
    for name, recs in results.items():
        if not recs:
            continue
        row = {}
        for m in METHODS:
            row[m] = {k: mean_std([r[m][k] for r in recs])
                      for k in ("ece", "ece_floor", "loss", "mean_confidence")}
        for k in ("train_wall_s", "train_cpu_s", "fit_s", "calibration_s"):
            for m in ("gpsl default", "gpsl --no-calibrate"):
                row[m][k] = mean_std([r[m][k] for r in recs])
        row["CRFsuite"]["fit_cpu_s"] = mean_std([r["CRFsuite"]["fit_cpu_s"] for r in recs])
        d = row["gpsl default"]
        d["sources"] = sorted({f"{r['gpsl default']['calibration']['source']}"
                               f"/{r['gpsl default']['calibration']['folds']}" for r in recs})
        d["calibrators"] = sorted({str(r["gpsl default"]["calibrator"]) for r in recs})
        d["inference"] = sorted({str(r["gpsl default"]["inference"]) for r in recs})
        row["paired"] = {peer: {k: _paired([r["gpsl default"][k] for r in recs],
                                           [r[peer][k] for r in recs])
                                for k in ("ece", "loss")} for peer in PEERS}
        row["partitions"] = len(recs)
        out[name] = row
    return out


def acceptance(summary: dict) -> dict:
    """Issue 31: on chunking and basenp the default's mean ECE is at or below CRFsuite's
    (both decodings), at the same or lower mean Hamming loss."""
    out = {}
    for name in ACCEPTANCE:
        if name not in summary:
            continue
        row = summary[name]
        d = row["gpsl default"]
        out[name] = {peer: {"ece": d["ece"][0] <= row[peer]["ece"][0],
                            "loss": d["loss"][0] <= row[peer]["loss"][0]} for peer in PEERS}
    out["met"] = (None if not out else
                  all(v["ece"] and v["loss"] for name in ACCEPTANCE if name in out
                      for v in out[name].values()))
    return out


# --------------------------------------------------------------------------- the report


def _ms(v, digits=4) -> str:
    m, s = v
    if m is None:
        return "-"
    return f"{m:.{digits}f} ± {s:.{digits}f}"


def _pd(q: dict, digits=4) -> str:
    se = "-" if q["se"] is None else f"{q['se']:.{digits}f}"
    return f"{q['diff']:+.{digits}f} ± {se} ({q['at_or_below']} of {q['n']} ≤ 0)"


def write_markdown(report: dict, path: Path) -> None:
    summ = report["summary"]
    lines = header_lines("The command line's default marginals beside CRFsuite's", report["date"],
                         report["machine"], report["git"], report["command"])
    lines += [
        f"Seed {report['args']['seed']}, {report['args']['partitions']} pooled partitions per "
        f"data set, {report['seconds'] / 60:.1f} minutes in all. Each partition: "
        "`python -m gpsl train -q -t TEMPLATE train.data model` then "
        "`python -m gpsl test -m model --marginals test.data`, as subprocesses"
        + (f" with the extra train options `{report['args']['train_args']}` (**not the "
           "defaults**)" if report["args"]["train_args"] else " (the defaults)")
        + "; `--no-calibrate` the same with that option. CRFsuite: sklearn-crfsuite, "
        "CRF++'s regularisation (`bench.paper`), the same template's features, in the same "
        "run. ECE over 10 equal-width bins of the predicted label's probability; its floor is "
        "the ECE a perfectly calibrated tagger with the same confidences would show; loss = "
        "Hamming loss (%). Means ± standard deviations over the partitions.", "",
        "| data set (train/test) | gpsl default ECE | loss | --no-calibrate ECE | loss | "
        "CRFsuite ECE | loss | CRFsuite Viterbi ECE | loss |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, row in summ.items():
        a, b = report["args"]["sizes"][name]
        cells = []
        for m in METHODS:
            cells += [_ms(row[m]["ece"]), _ms(row[m]["loss"], 2)]
        lines.append(f"| {name} ({a}/{b}) | " + " | ".join(cells) + " |")
    lines += ["", "Paired per-partition differences, gpsl default − peer (mean ± standard "
                  "error; partitions at or below 0):", "",
              "| data set | ECE − CRFsuite | loss − CRFsuite | ECE − CRFsuite Viterbi | "
              "loss − CRFsuite Viterbi |", "|---|---:|---:|---:|---:|"]
    for name, row in summ.items():
        p = row["paired"]
        lines.append(f"| {name} | {_pd(p['CRFsuite']['ece'])} | "
                     f"{_pd(p['CRFsuite']['loss'], 2)} | {_pd(p['CRFsuite Viterbi']['ece'])} | "
                     f"{_pd(p['CRFsuite Viterbi']['loss'], 2)} |")
    lines += ["", "What the default costs (seconds; `gpsl train` wall and CPU include Python's "
                  "start, reading, features, saving and the fold-fit processes):", "",
              "| data set | mode | calibration (source/K) | calibrator kinds | train wall "
              "default / --no-calibrate | train CPU default / --no-calibrate | fit | "
              "calibration | CRFsuite fit CPU |", "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for name, row in summ.items():
        d, r = row["gpsl default"], row["gpsl --no-calibrate"]
        lines.append(
            f"| {name} | {', '.join(d['inference'])} | {', '.join(d['sources'])} | "
            f"{', '.join(d['calibrators'])} | {_ms(d['train_wall_s'], 1)} / "
            f"{_ms(r['train_wall_s'], 1)} | {_ms(d['train_cpu_s'], 1)} / "
            f"{_ms(r['train_cpu_s'], 1)} | {_ms(d['fit_s'], 2)} | {_ms(d['calibration_s'], 1)} "
            f"| {_ms(row['CRFsuite']['fit_cpu_s'], 2)} |")
    lines += ["", "ECE noise floors (same binning) and mean confidence:", "",
              "| data set | " + " | ".join(f"{m} floor / confidence" for m in METHODS) + " |",
              "|---|" + "---:|" * len(METHODS)]
    for name, row in summ.items():
        lines.append(f"| {name} | " + " | ".join(
            f"{row[m]['ece_floor'][0]:.4f} / {row[m]['mean_confidence'][0]:.4f}"
            for m in METHODS) + " |")
    acc = report["acceptance"]
    lines += ["", "## Acceptance (issue 31)", "",
              "On " + " and ".join(ACCEPTANCE) + ", the default's mean ECE at or below "
              "CRFsuite's, at the same or lower mean Hamming loss:", "",
              "| data set | ECE ≤ CRFsuite | loss ≤ CRFsuite | ECE ≤ CRFsuite Viterbi | "
              "loss ≤ CRFsuite Viterbi |", "|---|---|---|---|---|"]
    yes = {True: "yes", False: "**no**"}
    for name in ACCEPTANCE:
        if name in acc:
            a = acc[name]
            lines.append(f"| {name} | {yes[a['CRFsuite']['ece']]} | "
                         f"{yes[a['CRFsuite']['loss']]} | {yes[a['CRFsuite Viterbi']['ece']]} | "
                         f"{yes[a['CRFsuite Viterbi']['loss']]} |")
    met = ("not measured (neither data set in this run)" if acc["met"] is None
           else yes[acc["met"]])
    lines += ["", f"Met: {met}.", "",
              "Per partition (gpsl default / CRFsuite: ECE, loss; --no-calibrate loss; "
              "calibration seconds; the calibrator kept, and the candidates whose left-out "
              "predictions showed they may change the decisions, `gpsl.calibration.decisions`):",
              ""]
    for name, recs in report["results"].items():
        for r in recs:
            d, c = r["gpsl default"], r["CRFsuite"]
            cal = d["calibration"]
            how = (f"{cal['source']}, K={cal['folds']}, {cal['processes']} process(es)"
                   if cal["source"] != "none" else f"none: {cal['reason']}")
            may = ", ".join(d.get("may_change_decisions") or []) or "none"
            lines.append(f"- {name} p{r['partition']}: {d['ece']:.4f} / {c['ece']:.4f}, "
                         f"{d['loss']:.2f} / {c['loss']:.2f}; "
                         f"{r['gpsl --no-calibrate']['loss']:.2f}; {d['calibration_s']:.1f} s "
                         f"({how}; {d['calibrator']}; may change decisions: {may})")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.cli_calibration", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    p.add_argument("--partitions", type=int, default=5)
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--sizes", default="",
                   help="override sizes, e.g. 'seg=10/6' (default: chunking 100/200, basenp "
                        "150/150, seg 20/16, JapaneseNE 50/50)")
    p.add_argument("--train-args", default="",
                   help="extra options of every gpsl train (a what-if: the report says the "
                        "figures are then not the defaults')")
    p.add_argument("--data-dir", default=str(DATA_DIR))
    p.add_argument("--out", default=str(RESULTS_DIR))
    p.add_argument("--name", default="cli_calibration", help="result files' base name")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    try:
        check_data(Path(args.data_dir), args.datasets)
        args.sizes = {**SIZES, **parse_sizes(args.sizes, args.datasets)}
    except (DataMissing, ValueError) as e:
        print(f"bench.cli_calibration: {e}", file=sys.stderr)
        return 2
    command = "python -m bench.cli_calibration " + " ".join(shlex.quote(a) for a in argv)
    print(command, flush=True)
    machine = machine_info()
    out = run(args)
    summary = summarise(out["results"])
    report = {"date": now_iso(), "machine": machine, "git": git_commit(), "command": command,
              "args": vars(args), "seconds": out["seconds"], "summary": summary,
              "acceptance": acceptance(summary), "results": out["results"]}
    dest = Path(args.out)
    dest.mkdir(parents=True, exist_ok=True)
    write_markdown(report, dest / f"{args.name}.md")
    (dest / f"{args.name}.json").write_text(json.dumps(jsonable(report), indent=1) + "\n",
                                            encoding="utf-8")
    print((dest / f"{args.name}.md").read_text(encoding="utf-8"))
    print(f"wrote {dest / (args.name + '.md')} and {args.name}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
