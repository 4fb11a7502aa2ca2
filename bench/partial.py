"""Partial labels at the speed of complete ones: the scalable fit with tokens hidden, beside
CRFsuite.

    python -m bench.partial [--dataset chunking] [--train 800] [--hidden 0 0.5 0.9]
                            [--repeats 3] [--seed 0] [--previous] [--out bench/results]

A pooled data set (train.data + test.data; chunking by default), the split of ``bench.scale``:
one seeded permutation, the last 100 sentences the test slice, the first ``--train`` the
training sentences. For each
fraction of ``--hidden`` a random set of the training tokens loses its label
(:func:`gpsl.synthetic.hide_labels`, seed ``--seed + 1``); then

* ``GPSL2`` (the library's defaults: ``inference="auto"``, the scalable mode) fits every
  training sentence with the labels left, missing ones marginalised;
* ``GPSL2, whole sentences``: the same number of labeled tokens as complete sentences (the
  training sentences in their random order until the budget is spent), GPSL2 on those;
* ``CRFsuite, whole sentences``: CRFsuite (L-BFGS, c2 = 0.5, as ``bench.scale``) on those
  (it cannot use a partly labeled sentence); at 0% hidden that is CRFsuite on every sentence;
* with ``--previous``: ``GPSL2, previous default`` (``missing_start="uniform"``,
  ``lse_bound="jensen"``: the start and the bound the scalable mode used with missing labels
  before ``docs/speed.md``), once per fraction.

Every fit runs in a fresh process and is timed in CPU seconds (``time.process_time``, all
threads of the process; template features included for both libraries), ``--repeats`` times
with the methods interleaved, so that a load on the shared machine reaches every method
alike; the table shows the medians. ``vs complete`` is the fit's CPU time over GPSL2's with
every label (the goal: at most 1.5x at 90% hidden); ``vs CRFsuite`` over CRFsuite's on the
complete sentences (the goal: at most 1x with every label, at a loss no higher).

Writes ``partial.md`` and ``partial.json`` to ``--out`` (``partial_<dataset>.*`` for another
data set than chunking).

    python -m bench.partial --diagnose [--hidden 0.5 0.9] [--out bench/results]

Why a fit with missing labels took 8 sweeps: for each fraction, GPSL2 with the previous
default (``missing_start="uniform"``: every missing label uniform at the start, three mean
rounds a sweep with an ``r`` update between them; Jensen's bound), with only the bound changed
(Boehning's), with only the start changed (the labeled-tokens first sweep, one mean round),
with both (the default) and the default at ``missing_weight=1``; after every sweep the bound,
the test loss, the mean variance ``V`` of the local functions at the training tokens, the
share of missing labels whose most likely value changed and the CPU seconds so far. Writes
``partial_diagnosis.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import (
    DATA_DIR,
    RESULTS_DIR,
    DataMissing,
    check_data,
    git_commit,
    header_lines,
    in_fresh_process,
    machine_info,
    now_iso,
    write_results,
)
from bench.peers import CRF_SCALE_PARAMS
from bench.scale import TEST_SENTENCES

GOAL_PARTIAL = 1.5  # fit CPU at 90% hidden over the complete fit's
GOAL_PEER = 1.0  # complete fit CPU over CRFsuite's

METHODS = ("GPSL2", "GPSL2, whole sentences", "CRFsuite, whole sentences")
PREVIOUS = "GPSL2, previous default"


def _split(dataset: str, n_train: int, seed: int):
    """``bench.scale``'s split of any pooled data set (for chunking the same sentences)."""
    from bench.common import load_pooled

    data = load_pooled(DATA_DIR, dataset)
    perm = np.random.default_rng(seed).permutation(len(data.X))
    if n_train > len(perm) - TEST_SENTENCES:
        raise ValueError(f"{dataset} has {len(perm) - TEST_SENTENCES} training sentences at "
                         "most")
    test, train = perm[-TEST_SENTENCES:], perm[:n_train]
    return ([data.X[i] for i in train], [data.y[i] for i in train],
            [data.X[i] for i in test], [data.y[i] for i in test], data.template)


def _data(n_train: int, hidden: float, seed: int, dataset: str = "chunking"):
    """Training sentences with ``hidden`` of the tokens' labels hidden, the whole-sentence
    subset with as many labeled tokens, the test slice and the template."""
    from gpsl.synthetic import hide_labels

    Xtr, ytr, Xte, yte, template = _split(dataset, n_train, seed)
    part = hide_labels(ytr, hidden, seed=seed + 1) if hidden > 0 else [list(s) for s in ytr]
    budget = sum(v is not None for s in part for v in s)
    whole, used = [], 0
    for i, s in enumerate(ytr):
        if used >= budget:
            break
        whole.append(i)
        used += len(s)
    return {"X": Xtr, "y": part, "y_full": ytr, "whole": whole, "budget": budget,
            "Xte": Xte, "yte": yte, "template": template}


def run_job(job: dict) -> dict:
    """One fit in this (fresh) process: CPU and wall seconds, sweeps, loss on the test slice."""
    from gpsl.metrics import hamming_loss

    d = _data(job["train"], job["hidden"], job["seed"], job.get("dataset", "chunking"))
    method = job["method"]
    if method in ("GPSL2", PREVIOUS):
        X, y = d["X"], d["y"]
    else:
        X = [d["X"][i] for i in d["whole"]]
        y = [d["y_full"][i] for i in d["whole"]]
    out = {**job, "sentences": len(X), "tokens": sum(len(s) for s in X),
           "labeled_tokens": sum(v is not None for s in y for v in s)}
    if method.startswith("CRFsuite"):
        from bench.peers import fit_crfsuite, template_features
        from gpsl.features import Template

        tmpl = Template.parse(d["template"])
        fit = fit_crfsuite(X, y, tmpl, CRF_SCALE_PARAMS)
        out["fit_cpu_s"], out["fit_s"] = fit.cpu_s, fit.wall_s
        pred = fit.crf.predict(template_features(tmpl, d["Xte"]))
    else:
        from gpsl.model import GPSL

        kw = {"missing_start": "uniform", "lse_bound": "jensen"} if method == PREVIOUS else {}
        model = GPSL(offsets=(-1, 1), template=d["template"], **kw)
        c0, t0 = time.process_time(), time.perf_counter()
        model.fit(X, y)
        out["fit_cpu_s"], out["fit_s"] = time.process_time() - c0, time.perf_counter() - t0
        out.update(sweeps=model.n_iter_, inference=model.inference_, bound=model.bound_trace_[-1],
                   lse_bound=model.lse_bound_, missing_weight=model.missing_weight_)
        pred = model.predict(d["Xte"])
    out["loss"] = hamming_loss(d["yte"], pred)
    return out


DIAGNOSIS = (
    ("previous default (uniform start, 3 rounds, Jensen)",
     {"missing_start": "uniform", "lse_bound": "jensen"}),
    ("bound only (uniform start, 3 rounds, Boehning)",
     {"missing_start": "uniform", "lse_bound": "bohning"}),
    ("start only (labeled tokens first, 1 round, Jensen)",
     {"missing_start": "labels", "lse_bound": "jensen", "force_labels_first": True}),
    ("default (labeled tokens first, 1 round, Boehning)", {}),
    ("default at missing_weight=1", {"missing_weight": 1.0}),
)


def diagnose_job(job: dict) -> dict:
    """One diagnosed fit: per sweep the bound, test loss, mean ``V``, the share of missing
    labels whose argmax of ``r`` changed, CPU seconds (the per-sweep bookkeeping is not
    counted: the clock pauses while it runs)."""
    from gpsl.metrics import hamming_loss
    from gpsl.model import GPSL

    d = _data(job["train"], job["hidden"], job["seed"], job.get("dataset", "chunking"))
    params = dict(job["params"])
    if params.pop("force_labels_first", False):
        model = _forced_labels_first(offsets=(-1, 1), template=d["template"], **params)
    else:
        model = GPSL(offsets=(-1, 1), template=d["template"], **params)
    rows, states, prev = [], [], {}
    clock = {"cpu": 0.0, "since": time.process_time()}

    def on_sweep(eng):
        clock["cpu"] += time.process_time() - clock["since"]
        miss = eng.p.missing
        arg = eng.s.r[miss].argmax(axis=1)
        rows.append({"sweep": len(rows) + 1, "bound": float(eng.elbo()),
                     "mean_V": float(np.mean(eng.c.Vd)),
                     "r_changed": (float(np.mean(arg != prev["arg"])) if "arg" in prev
                                   else None),
                     "cpu_s": clock["cpu"]})
        prev["arg"] = arg
        states.append(eng.s.copy())
        clock["since"] = time.process_time()

    model.fit(d["X"], d["y"], on_sweep=on_sweep)
    for row, st in zip(rows, states, strict=True):
        model.engine_.state, model._predictor = st, None
        row["loss"] = hamming_loss(d["yte"], model.predict(d["Xte"]))
    return {**job, "sweeps": model.n_iter_, "lse_bound": model.lse_bound_,
            "missing_weight": model.missing_weight_, "rows": rows}


def _forced_labels_first(**params):
    """A GPSL whose scalable engine takes the labeled-tokens start whatever the bound (the
    library refuses it under Jensen's bound: this measures why)."""
    from gpsl.engines import SparseEngine
    from gpsl.model import GPSL

    class Forced(SparseEngine):
        def start_options(self):
            return {"labels_first": True, "mean_rounds": 1}

    class Model(GPSL):
        def _make_engine(self, mode, kernel, settings):
            return Forced(kernel, settings)

    return Model(**params)


def _diagnose_child(job: dict) -> dict:
    return in_fresh_process(diagnose_job, job)


def diagnose(args, log=print, child=None) -> dict:
    check_data(DATA_DIR, [args.dataset])
    fits = []
    for h in [h for h in args.hidden if h > 0]:
        for name, params in DIAGNOSIS:
            job = {"train": args.train, "hidden": h, "seed": args.seed, "name": name,
                   "params": params, "dataset": args.dataset}
            r = _diagnose_child(job) if child is None else child(job)
            fits.append(r)
            last = r["rows"][-1]
            log(f"[{h:.0%} {name}] {r['sweeps']} sweeps, {last['cpu_s']:.2f} CPU s, loss "
                f"{last['loss']:.2f}% (per sweep: "
                + ", ".join(f"{x['loss']:.2f}" for x in r["rows"]) + ")")
    return {"fits": fits}


def write_diagnosis(report: dict, out: Path) -> list[str]:
    lines = header_lines("Why a fit with missing labels took 8 sweeps "
                         "(`bench.partial --diagnose`)", report["date"], report["machine"],
                         report["git"], report["command"])
    lines += [f"Pooled {report['dataset']}, {report['train']} training sentences, the test slice "
              "of `bench.scale`; GPSL2 in the scalable mode with the library's stop rule "
              "(relative bound change ≤ tol = 1e-3). After every sweep: the bound, the test "
              "Hamming loss, the mean variance V of the local functions at the training "
              "tokens, the share of missing labels whose most likely value changed in the "
              "sweep, and the fit's CPU seconds so far (one run each, fresh processes).", ""]
    for h in sorted({f["hidden"] for f in report["fits"]}):
        lines += [f"## {h:.0%} of the tokens hidden", ""]
        for f in [f for f in report["fits"] if f["hidden"] == h]:
            lines += [f"**{f['name']}**: {f['sweeps']} sweeps, bound {f['lse_bound']}, "
                      f"missing weight {f['missing_weight']:.3f}", "",
                      "| sweep | bound | test loss % | mean V | argmax r changed | CPU s |",
                      "|---:|---:|---:|---:|---:|---:|"]
            for x in f["rows"]:
                ch = "–" if x["r_changed"] is None else f"{100 * x['r_changed']:.2f}%"
                lines.append(f"| {x['sweep']} | {x['bound']:.1f} | {x['loss']:.2f} | "
                             f"{x['mean_V']:.2f} | {ch} | {x['cpu_s']:.2f} |")
            lines.append("")
    write_results(out, "partial_diagnosis", "\n".join(lines), report)
    return lines


def _in_child(job: dict) -> dict:
    return in_fresh_process(run_job, job)


def run(args, log=print, child=None) -> dict:
    check_data(DATA_DIR, [args.dataset])
    rows = []
    for rep in range(args.repeats):
        for h in args.hidden:
            methods = list(METHODS)
            if args.previous and h > 0 and rep == 0:
                methods.append(PREVIOUS)
            for method in methods:
                if method != "GPSL2" and h == 0 and method != "CRFsuite, whole sentences":
                    continue  # every sentence is whole at 0%: the GPSL2 row is that fit
                job = {"train": args.train, "hidden": h, "seed": args.seed, "method": method,
                       "repeat": rep, "dataset": args.dataset}
                r = _in_child(job) if child is None else child(job)
                rows.append(r)
                log(f"[{h:>4.0%} {method:<26} #{rep + 1}] {r['tokens']:>6} tokens "
                    f"({r['labeled_tokens']} labeled) fit {r['fit_cpu_s']:6.2f} CPU s "
                    f"({r['fit_s']:5.2f} s) sweeps {r.get('sweeps', '–')} loss "
                    f"{r['loss']:5.2f}%")
    return {"rows": rows, "summary": summarise(rows)}


def summarise(rows: list[dict]) -> list[dict]:
    """Medians per (hidden, method) and the goals' ratios."""
    out = []
    keys = sorted({(r["hidden"], r["method"]) for r in rows},
                  key=lambda k: (k[0], (METHODS + (PREVIOUS,)).index(k[1])))
    complete = [r["fit_cpu_s"] for r in rows if r["hidden"] == 0 and r["method"] == "GPSL2"]
    ref = float(np.median(complete)) if complete else None
    crf = [r["fit_cpu_s"] for r in rows
           if r["hidden"] == 0 and r["method"] == "CRFsuite, whole sentences"]
    crf_ref = float(np.median(crf)) if crf else None
    for h, m in keys:
        sel = [r for r in rows if r["hidden"] == h and r["method"] == m]
        cpu = float(np.median([r["fit_cpu_s"] for r in sel]))
        sweeps = [r["sweeps"] for r in sel if "sweeps" in r]
        out.append({"hidden": h, "method": m, "repeats": len(sel),
                    "sentences": sel[0]["sentences"], "tokens": sel[0]["tokens"],
                    "labeled_tokens": sel[0]["labeled_tokens"],
                    "sweeps": int(np.median(sweeps)) if sweeps else None,
                    "fit_cpu_s": cpu, "fit_cpu_all": [r["fit_cpu_s"] for r in sel],
                    "fit_s": float(np.median([r["fit_s"] for r in sel])),
                    "vs_complete": cpu / ref if ref else None,
                    "vs_crfsuite": cpu / crf_ref if crf_ref else None,
                    "loss": float(np.median([r["loss"] for r in sel])),
                    "inference": sel[0].get("inference"), "lse_bound": sel[0].get("lse_bound"),
                    "missing_weight": sel[0].get("missing_weight")})
    return out


def goals(summary: list[dict]) -> list[str]:
    """The issue's goals, measured (met or not, with the figures)."""
    get = {(s["hidden"], s["method"]): s for s in summary}
    lines = []
    full = get.get((0.0, "GPSL2"))
    crf = get.get((0.0, "CRFsuite, whole sentences"))
    if full and crf:
        ok = full["fit_cpu_s"] <= GOAL_PEER * crf["fit_cpu_s"] and full["loss"] <= crf["loss"]
        lines.append(f"* complete labels, GPSL2 against CRFsuite: fit CPU "
                     f"{full['fit_cpu_s']:.2f} s against {crf['fit_cpu_s']:.2f} s "
                     f"(×{full['fit_cpu_s'] / crf['fit_cpu_s']:.2f}, goal ≤ {GOAL_PEER:g}), "
                     f"loss {full['loss']:.2f}% against {crf['loss']:.2f}% "
                     f"(goal: no higher): {'met' if ok else 'NOT met'}")
    for h in sorted({s["hidden"] for s in summary if s["hidden"] > 0}):
        g = get.get((h, "GPSL2"))
        if g and full:
            prev = get.get((h, PREVIOUS))
            goal = f", goal ≤ {GOAL_PARTIAL:g}" if h >= 0.9 else ""
            ok = g["vs_complete"] <= GOAL_PARTIAL
            lines.append(f"* {h:.0%} hidden: fit CPU {g['fit_cpu_s']:.2f} s, ×"
                         f"{g['vs_complete']:.2f} the complete fit's{goal}, {g['sweeps']} sweeps, "
                         f"loss {g['loss']:.2f}%"
                         + (f" (previous default: {prev['fit_cpu_s']:.2f} s, "
                            f"{prev['sweeps']} sweeps, loss {prev['loss']:.2f}%)" if prev else "")
                         + (f": {'met' if ok else 'NOT met'}" if h >= 0.9 else ""))
    return lines


def write(report: dict, out: Path) -> list[str]:
    lines = header_lines("Partial labels at the speed of complete ones (`bench.partial`)",
                         report["date"], report["machine"], report["git"], report["command"])
    lines += [f"Pooled {report['dataset']}, {report['train']} training sentences and the "
              "100-sentence test "
              "slice of `bench.scale` (seed "
              f"{report['seed']}); a random {', '.join(f'{h:.0%}' for h in report['hidden'])} "
              "of the training tokens hidden. Fit CPU seconds (all threads; template features "
              f"included), median of {report['repeats']} runs, each in a fresh process, methods "
              "interleaved. `vs complete`: over GPSL2's fit with every label; `vs CRFsuite`: "
              "over CRFsuite's on every sentence. Hamming loss on the test slice.", "",
              "## Goals", "", *goals(report["summary"]), "",
              "## All fits (medians)", "",
              "| hidden | method | sentences | tokens (labeled) | sweeps | fit CPU s | "
              "vs complete | vs CRFsuite | fit wall s | Hamming loss % |",
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in report["summary"]:
        vc = f"×{s['vs_complete']:.2f}" if s["vs_complete"] is not None else "–"
        vr = f"×{s['vs_crfsuite']:.2f}" if s["vs_crfsuite"] is not None else "–"
        lines.append(f"| {s['hidden']:.0%} | {s['method']} | {s['sentences']} | {s['tokens']} "
                     f"({s['labeled_tokens']}) | {s['sweeps'] if s['sweeps'] else '–'} | "
                     f"{s['fit_cpu_s']:.2f} | {vc} | {vr} | {s['fit_s']:.2f} | "
                     f"{s['loss']:.2f} |")
    lines += ["", "Per-run CPU seconds: " + "; ".join(
        f"{s['hidden']:.0%} {s['method']}: " + ", ".join(f"{v:.2f}" for v in s["fit_cpu_all"])
        for s in report["summary"]), ""]
    stem = "partial" if report["dataset"] == "chunking" else f"partial_{report['dataset']}"
    write_results(out, stem, "\n".join(lines), report)
    return lines


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.partial", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", choices=("chunking", "basenp", "JapaneseNE", "seg"),
                   default="chunking", help="pooled data set (default chunking)")
    p.add_argument("--train", type=int, default=800, help="training sentences (default 800)")
    p.add_argument("--hidden", type=float, nargs="+", default=[0.0, 0.5, 0.9],
                   help="fractions of the training tokens hidden (default 0 0.5 0.9)")
    p.add_argument("--repeats", type=int, default=3, help="runs of every fit (default 3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--previous", action="store_true",
                   help="also fit the previous default for missing labels (uniform start, "
                        "Jensen's bound; one run per fraction, about 15 s each)")
    p.add_argument("--diagnose", action="store_true",
                   help="per-sweep figures of the previous default, the bound or the start "
                        "changed alone, and the default (see above)")
    p.add_argument("--out", default=str(RESULTS_DIR))
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if any(not 0.0 <= h < 1.0 for h in args.hidden):
        print("bench.partial: --hidden fractions must lie in [0, 1)", file=sys.stderr)
        return 2
    command = shlex.join(["python", "-m", "bench.partial", *argv])
    if args.diagnose:
        try:
            report = diagnose(args, log=lambda m: print(m, file=sys.stderr, flush=True))
        except DataMissing as exc:
            print(f"bench.partial: {exc}", file=sys.stderr)
            return 2
        report.update(dataset=args.dataset, train=args.train, seed=args.seed, command=command,
                      date=now_iso(), machine=machine_info(), git=git_commit())
        print("\n".join(write_diagnosis(report, Path(args.out))))
        return 0
    if 0.0 not in args.hidden:
        args.hidden = [0.0, *args.hidden]  # the reference of every ratio
    args.hidden = sorted(set(args.hidden))
    try:
        report = run(args, log=lambda m: print(m, file=sys.stderr, flush=True))
    except ValueError as exc:
        print(f"bench.partial: {exc}", file=sys.stderr)
        return 2
    except DataMissing as exc:
        print(f"bench.partial: {exc}", file=sys.stderr)
        return 2
    report.update(dataset=args.dataset, train=args.train, hidden=args.hidden,
                  repeats=args.repeats, seed=args.seed,
                  command=command, date=now_iso(),
                  machine=machine_info(), git=git_commit())
    print("\n".join(write(report, Path(args.out))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
