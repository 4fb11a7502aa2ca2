"""What the default ``gpsl train`` costs, by phase, beside CRFsuite's fit (issue 36).

::

    python -m bench.cli_cost                          # chunking 800 and the NER val half
    python -m bench.cli_cost --sentences 20000 50000  # synthetic sentences at scale
    python -m bench.cli_cost --sentences 20000 50000 --generator sample  # issue 36's data

Each data point is written as CRF++ column files and run as a user runs it:

* ``python -m gpsl train -q [-t TEMPLATE] train.data model`` (the defaults: calibrated), as a
  subprocess; its CPU seconds are the child's and its fold-fit processes' (``os.wait4``), its
  peak memory the largest resident set among them; the same with ``--no-calibrate``;
* the phases, from the same command run once more in a child that times the functions it
  calls (``gpsl.cli.main.main(["train", ...])`` with CPU timers around ``read_conll``,
  ``GPSL.fit``, ``out_of_fold_scores``, ``Calibrator.select`` and ``GPSL.save``; CPU of the
  child and of the fold-fit processes it waited for): read, fit, fold fits, calibrator
  choice, save, and the rest (Python's start, imports, the summary);
* ``python -m gpsl test -m model --marginals test.data``: the Hamming loss and the ECE (10
  equal-width bins of the printed label's probability, as ``bench.cli_calibration``) of the
  default and of the ``--no-calibrate`` model; at scale its CPU and peak memory too;
* CRFsuite (sklearn-crfsuite, ``bench.scale``'s settings) on the same template's features,
  in a fresh process: fit CPU, loss, ECE of its marginals (posterior decoding).

Data: chunking, 800 training and 100 test sentences (``bench.cli_calibration``'s partition of
the pooled sentences, seed 31: issue 36's split), with every label and with 90% of the
training labels hidden (``_``); the NER val half
(``../shared/data/crowd-ner/val.gold.conll``, gold labels, ``-t ner``), a seeded 80/20 split
of its sentences; ``--sentences N``: ``bench.scale``'s synthetic sentences
(:func:`gpsl.synthetic.make_chain_task`, 10 labels, unigram template; 9.5 tokens a sentence),
2,000 test sentences; with ``--generator sample`` the sample project's grammar instead
(``sample_data/make_sample.py``, seed 1, its template; about 21.7 tokens a sentence, every
label): the data of issue 36's table at scale (20k sentences, 432k tokens). Ratios are
gpsl's CPU over CRFsuite's fit CPU in the same run (the goal: the default ``train`` at most
3x). Writes ``cli_cost.md``/``.json`` (or ``cli_cost_scale.*``, ``cli_cost_scale_sample.*``
with ``--sentences``) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import (
    REPO,
    RESULTS_DIR,
    git_commit,
    header_lines,
    in_fresh_process,
    machine_info,
    now_iso,
    write_results,
)

NER_GOLD = REPO.parent / "shared" / "data" / "crowd-ner" / "val.gold.conll"
#: the goal of issue 36: the default ``train`` at most this many times CRFsuite's fit CPU
GOAL = 3.0
PHASES = ("read", "fit", "fold fits", "calibrator choice", "save")


# --------------------------------------------------------------------------- the commands


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


#: a small process between this one and the measured command: it forks the command and
#: writes the command's own rusage (CPU, peak resident set) as JSON to the file it is given.
#: A child spawned straight from this process (vfork) would count this process's own peak
#: resident set, before its exec, as the child's (Linux keeps the larger of the two).
_SHIM = """import json, os, sys
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    json.dump({"cpu_s": ru.ru_utime + ru.ru_stime, "maxrss_kib": ru.ru_maxrss}, f)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_command(argv: list[str], stdout_path: Path | None = None) -> dict:
    """``argv`` as a subprocess: wall and CPU seconds (its own and its waited children's),
    peak resident set (MiB), stdout (or into ``stdout_path``) and stderr."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile("r") as usage, \
            (open(stdout_path, "wb") if stdout_path else tempfile.TemporaryFile()) as out:
        proc = subprocess.Popen([sys.executable, "-c", _SHIM, usage.name, *argv], stdout=out,
                                stderr=err, env=_env(), cwd=str(REPO))
        proc.wait()
        wall = time.perf_counter() - t0
        ru = json.loads(usage.read() or "{}")
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
        text = ""
        if stdout_path is None:
            out.seek(0)
            text = out.read().decode("utf-8", "replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {proc.returncode}: "
                           f"{stderr.strip().splitlines()[-1:]}")
    return {"wall_s": wall, "cpu_s": ru["cpu_s"], "peak_mib": ru["maxrss_kib"] / 1024.0,
            "stdout": text, "stderr": stderr}


def _cpu() -> float:
    """CPU seconds of this process and of the children it has waited for."""
    import resource

    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime


def phases_child(train_argv: list[str], out_json: str) -> int:
    """``gpsl train`` in this process with CPU timers around its phases (module docstring);
    writes ``{phase: CPU seconds}`` to ``out_json``."""
    import gpsl.calibration as cal
    import gpsl.io as gio
    from gpsl.cli.main import main as gpsl_main
    from gpsl.model import GPSL

    spent = {p: 0.0 for p in PHASES}
    active: list[str] = []  # the phase running (a fold fit's GPSL.fit is the fold phase's)

    def timed(phase, fn):
        def wrapper(*a, **kw):
            if active:
                return fn(*a, **kw)
            active.append(phase)
            c0 = _cpu()
            try:
                return fn(*a, **kw)
            finally:
                spent[phase] += _cpu() - c0
                active.pop()
        return wrapper

    gio.read_conll = timed("read", gio.read_conll)
    GPSL.fit = timed("fit", GPSL.fit)
    # where gpsl.calibration.calibrate looks it up
    cal.rule.out_of_fold_scores = timed("fold fits", cal.rule.out_of_fold_scores)
    cal.Calibrator.select = classmethod(timed("calibrator choice",
                                              cal.Calibrator.select.__func__))
    GPSL.save = timed("save", GPSL.save)
    c0 = _cpu()
    rc = gpsl_main(["train", *train_argv])
    spent["all"] = _cpu() - c0
    Path(out_json).write_text(json.dumps(spent), encoding="utf-8")
    return rc


def train_phases(train_argv: list[str], work: Path) -> dict:
    """The phases of ``gpsl train train_argv`` (:func:`phases_child` in a subprocess)."""
    out = work / "phases.json"
    rec = run_command([sys.executable, "-m", "bench.cli_cost", "--phases-of", str(out), "--",
                       *train_argv])
    spent = json.loads(out.read_text(encoding="utf-8"))
    spent["total"] = rec["cpu_s"]
    spent["rest"] = rec["cpu_s"] - sum(spent[p] for p in PHASES)
    return spent


def _marginals(text: str, gold: list[str]) -> dict:
    from bench.cli_calibration import _figures, _marginals_output

    conf, right = _marginals_output(text, gold)
    return _figures(conf, right)


def crfsuite_job(job: dict) -> dict:
    """CRFsuite on the template's features (fresh process; ``bench.scale``'s settings, those
    of issue 36's figures): fit CPU, loss and ECE of its posterior decoding (the argmax of its
    marginals, with their probability), peak memory."""
    import resource

    from bench.cli_calibration import _figures
    from bench.peers import CRF_SCALE_PARAMS, fit_crfsuite, template_features
    from gpsl.features import Template
    from gpsl.io import read_conll

    tr, te = read_conll(job["train"]), read_conll(job["test"])
    tmpl = Template.from_spec(job["template"])
    fit = fit_crfsuite([s.tokens for s in tr], [s.labels for s in tr], tmpl, CRF_SCALE_PARAMS)
    crf, fit_cpu = fit.crf, fit.cpu_s
    conf, right = [], []
    for s, marg in zip(te, crf.predict_marginals(template_features(tmpl,
                                                                   [s.tokens for s in te]))):
        for g, tok in zip(s.labels, marg):
            best = max(tok, key=tok.get)
            conf.append(tok[best])
            right.append(best == g)
    rec = _figures(np.array(conf), np.array(right))
    rec.update({"fit_cpu_s": fit_cpu, "settings": CRF_SCALE_PARAMS,
                "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0})
    return rec


# --------------------------------------------------------------------------- the data


def _write(path: Path, X, y) -> None:
    from bench.cli_calibration import _write as write

    write(path, X, y)


def chunking_point(work: Path, hidden: float = 0.0) -> dict:
    """Issue 36's split: ``bench.cli_calibration``'s partition of pooled chunking (seed 31),
    800 training and 100 test sentences; ``hidden``: that share of the training tokens'
    labels hidden (:func:`gpsl.synthetic.hide_labels`, seed 1, as ``bench.partial``)."""
    from bench.cli_calibration import SEED
    from bench.common import DATA_DIR, load_pooled, partitions
    from gpsl.synthetic import hide_labels

    data = load_pooled(DATA_DIR, "chunking")
    (tr, te), = partitions(len(data), 800, 100, 1, SEED, "chunking")
    Xtr, ytr = [data.X[i] for i in tr], [data.y[i] for i in tr]
    (work / "template").write_text(data.template, encoding="utf-8")
    if not hidden:
        return _files(work, "chunking 800", Xtr, ytr, [data.X[i] for i in te],
                      [data.y[i] for i in te], str(work / "template"))
    _write(work / "train-every-label.data", Xtr, ytr)  # CRFsuite's (issue 36's peer row)
    part = [["_" if v is None else v for v in s] for s in hide_labels(ytr, hidden, seed=1)]
    point = _files(work, f"chunking 800, {hidden:.0%} hidden", Xtr, part,
                   [data.X[i] for i in te], [data.y[i] for i in te], str(work / "template"))
    return {**point, "crf_train": str(work / "train-every-label.data")}


def ner_point(work: Path) -> dict:
    from gpsl.io import read_conll

    sents = read_conll(NER_GOLD)
    perm = np.random.default_rng(0).permutation(len(sents))
    cut = int(0.8 * len(sents))
    tr, te = [sents[i] for i in perm[:cut]], [sents[i] for i in perm[cut:]]
    return _files(work, "NER val half (gold)", [s.tokens for s in tr], [s.labels for s in tr],
                  [s.tokens for s in te], [s.labels for s in te], "ner")


def synthetic_point(work: Path, n_sentences: int) -> dict:
    from bench.scale import _synthetic

    Xtr, ytr, Xte, yte, template = _synthetic(int(round(n_sentences * 9.5)), 10, 0)
    (work / "template").write_text(template, encoding="utf-8")
    return _files(work, f"synthetic {n_sentences}", Xtr, ytr, Xte, yte, str(work / "template"))


def sample_point(work: Path, n_sentences: int, n_test: int = 2000) -> dict:
    """``n_sentences`` training and ``n_test`` test sentences of the sample project's grammar
    (every label), its template."""
    from bench.app_refit import _make_sample

    sample = _make_sample()
    gold, _ = sample.make_corpus(seed=1, n=n_sentences + n_test)
    X = [[(w, tag) for w, tag, _ in s] for s in gold]
    y = [[lab for _, _, lab in s] for s in gold]
    (work / "template").write_text(sample.TEMPLATE, encoding="utf-8")
    return _files(work, f"sample grammar {n_sentences}", X[:n_sentences], y[:n_sentences],
                  X[n_sentences:], y[n_sentences:], str(work / "template"))


def _files(work: Path, name: str, Xtr, ytr, Xte, yte, template: str) -> dict:
    _write(work / "train.data", Xtr, ytr)
    _write(work / "test.data", Xte, yte)
    return {"name": name, "work": work, "template": template,
            "train_sentences": len(Xtr), "train_tokens": sum(len(s) for s in Xtr),
            "test_tokens": sum(len(s) for s in Xte), "gold": [g for s in yte for g in s]}


# --------------------------------------------------------------------------- a point


def measure(point: dict, *, phases: bool = True, log=print) -> dict:
    work: Path = point["work"]
    py = [sys.executable, "-m", "gpsl"]
    train, test = str(work / "train.data"), str(work / "test.data")
    rec = {k: v for k, v in point.items() if k not in ("work", "gold", "crf_train")}
    for tag, extra in (("default", []), ("--no-calibrate", ["--no-calibrate"])):
        model = work / f"model-{tag.strip('-')}"
        argv = ["-q", "-t", point["template"], *extra, train, str(model)]
        r = run_command([*py, "train", *argv])
        meta = json.loads((model / "model.json").read_text(encoding="utf-8"))
        out = work / f"marginals-{tag.strip('-')}.txt"
        t = run_command([*py, "test", "-m", str(model), "--marginals", test], stdout_path=out)
        figs = _marginals(out.read_text(encoding="utf-8"), point["gold"])
        rec[tag] = {"train_cpu_s": r["cpu_s"], "train_wall_s": r["wall_s"],
                    "train_peak_mib": r["peak_mib"], "test_cpu_s": t["cpu_s"],
                    "test_peak_mib": t["peak_mib"], "loss": figs["loss"], "ece": figs["ece"],
                    "calibrator": (meta.get("calibration") or {}).get("kind"),
                    "calibration_run": meta.get("calibration_run"),
                    "summary_line": r["stderr"].strip().splitlines()[-1]}
        if tag == "default" and phases:
            rec[tag]["phases"] = train_phases(
                ["-q", "-t", point["template"], train, str(work / "model-phases")], work)
        log(f"{point['name']}: train {tag} {r['cpu_s']:.1f} CPU s, loss {figs['loss']:.2f}, "
            f"ECE {figs['ece']:.4f}", flush=True)
    rec["CRFsuite"] = in_fresh_process(crfsuite_job, {"train": point.get("crf_train", train),
                                                      "test": test,
                                                      "template": point["template"]})
    rec["CRFsuite"]["every_label"] = True
    c = rec["CRFsuite"]
    log(f"{point['name']}: CRFsuite fit {c['fit_cpu_s']:.1f} CPU s, loss {c['loss']:.2f}, "
        f"ECE {c['ece']:.4f}", flush=True)
    for tag in ("default", "--no-calibrate"):
        rec[tag]["ratio"] = rec[tag]["train_cpu_s"] / max(c["fit_cpu_s"], 1e-9)
    d = rec["default"]
    rec["goal"] = {"cpu": d["ratio"] <= GOAL, "loss": d["loss"] <= c["loss"],
                   "ece": d["ece"] <= c["ece"]}
    return rec


# --------------------------------------------------------------------------- the report


def markdown(report: dict) -> str:
    lines = header_lines("What the default `gpsl train` costs, by phase, beside CRFsuite",
                         report["date"], report["machine"], report["git"], report["command"])
    lines += [
        "CPU seconds (user + system, the command's process and its fold-fit processes). "
        "`train` = `python -m gpsl train -q -t TEMPLATE train.data model` as a subprocess; "
        "phases from the same command timed in a child (read, fit, fold fits, calibrator "
        "choice, save; rest = start, imports, summary); loss = Hamming loss (%) and ECE (10 "
        "equal-width bins) of `gpsl test --marginals` on the test slice; CRFsuite: fit CPU on "
        "the same template's features, its posterior marginals. Ratio = train CPU / CRFsuite "
        f"fit CPU (goal ≤ {GOAL:g}).", "",
        "| data | train tokens | command | train CPU s | ratio | loss | ECE | peak MiB | "
        "test CPU s | test peak MiB |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report["points"]:
        for tag in ("default", "--no-calibrate"):
            d = r[tag]
            cmd = "train" if tag == "default" else f"train {tag}"
            lines.append(f"| {r['name']} | {r['train_tokens']} | `{cmd}` | "
                         f"{d['train_cpu_s']:.1f} | {d['ratio']:.2f} | {d['loss']:.2f} | "
                         f"{d['ece']:.4f} | {d['train_peak_mib']:.0f} | {d['test_cpu_s']:.1f} | "
                         f"{d['test_peak_mib']:.0f} |")
        c = r["CRFsuite"]
        lines.append(f"| {r['name']} | {r['train_tokens']} | CRFsuite fit | {c['fit_cpu_s']:.1f} "
                     f"| 1 | {c['loss']:.2f} | {c['ece']:.4f} | {c['peak_mib']:.0f} | - | - |")
    lines += ["", "The default `train`'s phases (CPU s):", "",
              "| data | " + " | ".join(PHASES) + " | rest | all (timed run) | calibrator |",
              "|---|" + "---:|" * (len(PHASES) + 2) + "---|"]
    for r in report["points"]:
        p = r["default"].get("phases")
        if p:
            lines.append(f"| {r['name']} | " + " | ".join(f"{p[k]:.2f}" for k in PHASES)
                         + f" | {p['rest']:.2f} | {p['total']:.1f} | "
                         f"{r['default']['calibrator']} |")
    lines += ["", "Goal (issue 36): default `train` ≤ 3× CRFsuite's fit CPU, loss and ECE ≤ "
                  "CRFsuite's:", ""]
    for r in report["points"]:
        g = r["goal"]
        lines.append(f"- {r['name']}: CPU {'met' if g['cpu'] else '**not met**'} "
                     f"({r['default']['ratio']:.2f}×), loss {'met' if g['loss'] else '**not met**'}"
                     f", ECE {'met' if g['ece'] else '**not met**'}")
    return "\n".join(lines) + "\n"


POINTS = {"chunking": chunking_point, "hidden": lambda w: chunking_point(w, 0.9),
          "ner": ner_point}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.cli_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sentences", type=int, nargs="*", default=None,
                   help="synthetic training sentences (default: chunking 800 and NER instead)")
    p.add_argument("--generator", choices=("chain", "sample"), default="chain",
                   help="with --sentences: bench.scale's chain task or the sample grammar")
    p.add_argument("--points", nargs="+", choices=tuple(POINTS), default=list(POINTS))
    p.add_argument("--no-phases", action="store_true", help="skip the timed run")
    p.add_argument("--out", default=str(RESULTS_DIR))
    p.add_argument("--name", default=None, help="result files' base name")
    p.add_argument("--phases-of", default=None, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--phases-of" in argv:  # the timed child (train_phases)
        i = argv.index("--")
        return phases_child(argv[i + 1:], argv[argv.index("--phases-of") + 1])
    args = build_parser().parse_args(argv)
    command = "python -m bench.cli_cost " + " ".join(shlex.quote(a) for a in argv)
    print(command, flush=True)
    machine = machine_info()
    points = []
    with tempfile.TemporaryDirectory(prefix="gpsl-cli-cost-") as tmp:
        point = sample_point if args.generator == "sample" else synthetic_point
        makers = ([(f"s{n}", lambda w, n=n: point(w, n)) for n in args.sentences]
                  if args.sentences else
                  [(k, POINTS[k]) for k in args.points])
        for key, make in makers:
            work = Path(tmp) / key
            work.mkdir()
            points.append(measure(make(work), phases=not args.no_phases))
    report = {"date": now_iso(), "machine": machine, "git": git_commit(), "command": command,
              "args": vars(args), "points": points}
    md = markdown(report)
    name = args.name or (("cli_cost_scale" + ("_sample" if args.generator == "sample" else ""))
                         if args.sentences else "cli_cost")
    write_results(Path(args.out), name, md, report)
    print(md)
    print(f"wrote {Path(args.out) / (name + '.md')} and {name}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
