"""Tagging speed: Algorithm 2 (RNS) and ``gpsl test`` beside CRFsuite, same features, one run.

    python -m bench.tagging [--train 800] [--test 2000] [--repeats 3] [--sentences N]
                            [--out bench/results]

For chunking (pooled ``train.data`` + ``test.data``, one seeded permutation: the first
``--train`` sentences train, the next ``--test`` are tagged; the paper's CRF++ template) and
word-only NER (``../shared/data/crowd-ner/val.gold.conll``: the first half trains, the second
is tagged; ``-t ner``):

* GPSL is trained by ``gpsl train --no-calibrate`` (the fit's defaults) and CRFsuite
  (sklearn-crfsuite, L-BFGS, c2 = 0.5, on the same template's feature strings) in this run;
* **tagging from raw tokens** (feature extraction included for both): the median of
  ``--repeats`` CPU times of ``model.predict`` (value-id features, the ``adaptive`` schedule),
  of the reference path (every token's feature strings looked up,
  ``FeatureExtractor.transform_strings``, and Algorithm 2's damped Jacobi passes as written,
  ``rns_schedule="jacobi"``: the code before) and of CRFsuite's ``predict``; tokens per CPU
  second and the ratio; and where ``predict``'s time goes (features, the latent means,
  Algorithm 2);
* **Algorithm 2's passes** per sentence under both schedules (median, max, sentences that hit
  the ``rns_max_iter`` cap), and how far the two schedules' marginals and labels are apart;
* **the whole command**: ``gpsl test -m MODEL FILE -o OUT`` and the same tagging by CRFsuite
  from the file (read, features, ``Tagger.tag``, write) as child processes: CPU seconds (user +
  system, from ``wait4``) and peak resident memory.

``--sentences N`` adds the whole commands on N synthetic sentences (the sample project's
grammar, ``sample_data/make_sample.py``; 2,000 more sentences train): the streaming figure
of ``gpsl test``. Writes ``tagging.md`` and ``tagging.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
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
    git_commit,
    header_lines,
    load_pooled,
    machine_info,
    now_iso,
    write_results,
)
from bench.scale import _time_predict  # median CPU seconds of repeats

NER_FILE = DATA_DIR.parent / "crowd-ner" / "val.gold.conll"
SYNTH_TRAIN = 2000


def _write_conll(path: Path, X, y) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for toks, labs in zip(X, y, strict=True):
            for tok, lab in zip(toks, labs, strict=True):
                fh.write(" ".join((*tok, lab)) + "\n")
            fh.write("\n")


def _data(name: str, n_train: int, n_test: int):
    """``(X_train, y_train, X_test, y_test, template spec)`` of a data set."""
    if name == "chunking":
        data = load_pooled(DATA_DIR, "chunking")
        perm = np.random.default_rng(0).permutation(len(data.X))
        tr, te = perm[:n_train], perm[n_train:n_train + n_test]
        return ([data.X[i] for i in tr], [data.y[i] for i in tr], [data.X[i] for i in te],
                [data.y[i] for i in te], data.template)
    from gpsl.io import read_conll

    sents = read_conll(NER_FILE)
    X = [s.tokens for s in sents]
    y = [s.labels for s in sents]
    h = len(X) // 2
    return X[:h], y[:h], X[h:], y[h:], "ner"


def _synthetic(n_test: int):
    sys.path.insert(0, str(REPO / "sample_data"))
    from make_sample import TEMPLATE, make_corpus

    gold, _ = make_corpus(seed=7, n=SYNTH_TRAIN + n_test)
    X = [[(w, t) for w, t, _ in s] for s in gold]
    y = [[lab for _, _, lab in s] for s in gold]
    return X[:SYNTH_TRAIN], y[:SYNTH_TRAIN], X[SYNTH_TRAIN:], y[SYNTH_TRAIN:], TEMPLATE


#: a small launcher between this process and the measured command: the peak memory of a
#: forked child counts the parent's pages before ``exec``, so the command is forked from this
#: small process, not from the benchmark's (which holds the data)
_LAUNCH = """import json, os, sys
pid = os.fork()
if pid == 0:
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, ru = os.wait4(pid, 0)
print(json.dumps({"code": os.waitstatus_to_exitcode(status), "cpu_s": ru.ru_utime + ru.ru_stime,
                  "peak_rss_mib": ru.ru_maxrss / 1024.0}))
"""


def child(argv: list[str]) -> dict:
    """Run ``argv`` as a child process; its own CPU seconds (user + system) and peak memory
    (``wait4`` of the command, forked from a small launcher)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _LAUNCH, *argv], cwd=REPO,
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    try:
        rec = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        rec = {"code": proc.returncode}
    if proc.returncode != 0 or rec.get("code") != 0:
        raise RuntimeError(f"{shlex.join(argv)} failed ({rec.get('code')}): "
                           f"{proc.stderr.strip()}")
    return {"cpu_s": rec["cpu_s"], "wall_s": wall, "peak_rss_mib": rec["peak_rss_mib"]}


def crf_tag_file(model_file: str, template_spec: str, test_file: str, out_file: str) -> None:
    """CRFsuite's side of the whole command: read the file, expand the template, tag, write
    (``python -m bench.tagging --crf-tag MODEL TEMPLATE FILE OUT``)."""
    from bench.peers import crfsuite_model, template_features
    from gpsl.features import Template
    from gpsl.io import read_conll

    tmpl = Template.from_spec(template_spec)
    sents = read_conll(test_file, labeled=False)  # the last column is the gold label
    tagger = crfsuite_model(model_file)
    with open(out_file, "w", encoding="utf-8") as fh:
        X = [[tok[:-1] for tok in s.tokens] for s in sents]
        for s, feats in zip(sents, template_features(tmpl, X), strict=True):
            for tok, lab in zip(s.tokens, tagger.tag(feats), strict=True):
                fh.write("\t".join((*tok, lab)) + "\n")
            fh.write("\n")


def load_reference(model_dir: Path):
    """The saved model on the reference path: every token's feature strings looked up in the
    vocabulary (:meth:`gpsl.features.FeatureExtractor.transform_strings`, the tokens converted
    one by one, as ``predict`` did before the value-id expansion) and Algorithm 2's damped
    Jacobi passes as written. (Imported here: ``--crf-tag`` loads this module without gpsl's
    model.)"""
    from gpsl.model import GPSL, _as_tokens

    class Reference(GPSL):
        def _features(self, X):
            sents = [_as_tokens(s) for s in X]
            return (self.extractor_.transform_strings(sents),
                    np.array([len(s) for s in sents], dtype=np.int64))

    return Reference.load(model_dir).set_params(rns_schedule="jacobi")


def _phases(model, Xte, repeats: int) -> dict:
    """Median CPU seconds of ``predict``'s parts: the features, the latent means (``X W``,
    once per call), Algorithm 2."""
    Xf, lengths = model._features(Xte)
    mean, _ = model.predictor_(Xf, with_variance=False)
    sc = model.calibration_scores(Xte, with_variance=False)
    return {"features": _time_predict(lambda: model._features(Xte), repeats),
            "latent": _time_predict(lambda: model.predictor_(Xf, with_variance=False), repeats),
            "rns": _time_predict(lambda: sc.marginals("mean"), repeats)}


def _passes(model, Xte) -> dict:
    """Algorithm 2's passes per sentence under the default schedule and the reference
    (damped Jacobi), and how far their marginals and labels are apart."""
    from scipy.special import softmax

    from gpsl.predict import rns
    from gpsl.rns_sweeps import sweep_sentences

    b, lengths = model.local_scores(Xte)
    g, offsets = model._gS(), model.offsets_
    s = model.rns_settings()
    P, passes, conv = rns(b, g, lengths, offsets, tol=s["tol"], max_iter=s["max_iter"],
                          damping=s["damping"], schedule="adaptive", per_sentence=True)
    Pr, pr, cr = sweep_sentences(softmax(b, axis=1), b, g, lengths, offsets, tol=s["tol"],
                                 max_iter=s["max_iter"], eta=s["damping"])
    both = np.repeat(conv & cr, lengths)

    def stats(p, c):
        return {"median": float(np.median(p)), "max": int(p.max()),
                "at_cap": int((~c).sum()), "sentences": int(p.size)}

    return {"adaptive": stats(passes, conv), "jacobi": stats(pr, cr),
            "max_abs_diff_both_converged": float(np.abs(P - Pr)[both].max()) if both.any()
            else None,
            "labels_differ": int((P.argmax(1) != Pr.argmax(1)).sum()), "tokens": int(b.shape[0])}


def run_dataset(name: str, args, tmp: Path, log) -> dict:
    from bench.peers import CRF_SCALE_PARAMS, fit_crfsuite, template_features
    from gpsl.features import Template
    from gpsl.model import GPSL

    Xtr, ytr, Xte, yte, spec = (_synthetic(args.sentences) if name == "synthetic"
                                else _data(name, args.train, args.test))
    n_test = sum(len(s) for s in Xte)
    train_f, test_f = tmp / f"{name}.train", tmp / f"{name}.test"
    _write_conll(train_f, Xtr, ytr)
    _write_conll(test_f, Xte, yte)
    tmpl_arg = spec if spec == "ner" else str(tmp / f"{name}.template")
    if spec != "ner":
        Path(tmpl_arg).write_text(spec, encoding="utf-8")
    model_dir = tmp / f"{name}.model"
    log(f"{name}: gpsl train --no-calibrate ({len(Xtr)} sentences)")
    subprocess.run([sys.executable, "-m", "gpsl", "train", "-q", "--no-calibrate", "-t",
                    tmpl_arg, str(train_f), str(model_dir)], cwd=REPO, check=True)
    tmpl = Template.from_spec(tmpl_arg)
    crf_file = str(tmp / f"{name}.crfsuite")
    log(f"{name}: CRFsuite fit")
    crf = fit_crfsuite(Xtr, ytr, tmpl, CRF_SCALE_PARAMS, model_filename=crf_file,
                       keep_tempfiles=True).crf
    out = {"dataset": name, "train_sentences": len(Xtr), "test_sentences": len(Xte),
           "test_tokens": n_test}
    if name != "synthetic":
        model = GPSL.load(model_dir)
        log(f"{name}: tagging, {n_test} tokens, {args.repeats} repeats")
        out["gpsl_cpu_s"] = _time_predict(lambda: model.predict(Xte), args.repeats)
        ref = load_reference(model_dir)
        out["gpsl_reference_cpu_s"] = _time_predict(lambda: ref.predict(Xte), args.repeats)
        out["crf_cpu_s"] = _time_predict(lambda: crf.predict(template_features(tmpl, Xte)),
                                       args.repeats)
        for k in ("gpsl", "gpsl_reference", "crf"):
            out[f"{k}_tokens_per_cpu_s"] = n_test / max(out[f"{k}_cpu_s"], 1e-9)
        out["ratio"] = out["gpsl_cpu_s"] / max(out["crf_cpu_s"], 1e-9)
        out["ratio_reference"] = out["gpsl_reference_cpu_s"] / max(out["crf_cpu_s"], 1e-9)
        out["phases"] = _phases(model, Xte, args.repeats)
        out["passes"] = _passes(model, Xte)
    log(f"{name}: whole commands")
    out["gpsl_test"] = child([sys.executable, "-m", "gpsl", "test", "-m", str(model_dir),
                              str(test_f), "-o", str(tmp / f"{name}.out")])
    out["crf_test"] = child([sys.executable, "-m", "bench.tagging", "--crf-tag", crf_file,
                             tmpl_arg, str(test_f), str(tmp / f"{name}.crf.out")])
    out["test_ratio"] = out["gpsl_test"]["cpu_s"] / max(out["crf_test"]["cpu_s"], 1e-9)
    return out


def run(args, log=print) -> dict:
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpsl-tagging-") as d:
        for name in args.datasets:
            rows.append(run_dataset(name, args, Path(d), log))
        if args.sentences:
            rows.append(run_dataset("synthetic", args, Path(d), log))
    return {"rows": rows}


def _f(v, digits=2):
    return "–" if v is None else f"{v:,.{digits}f}"


def write(report: dict, out: Path) -> str:
    meta = report["meta"]
    lines = header_lines("Tagging: Algorithm 2 and gpsl test beside CRFsuite", meta["date"],
                         meta["machine"], meta["git"], meta["command"])
    lines += ["## Tagging from raw tokens (median CPU seconds, features included)", "",
              "| data | test tokens | GPSL tok/CPU s | GPSL reference path | CRFsuite tok/CPU s "
              "| ratio GPSL/CRFsuite CPU | reference |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        if "ratio" in r:
            lines.append(f"| {r['dataset']} | {r['test_tokens']:,} | "
                         f"{_f(r['gpsl_tokens_per_cpu_s'], 0)} | "
                         f"{_f(r['gpsl_reference_tokens_per_cpu_s'], 0)} | "
                         f"{_f(r['crf_tokens_per_cpu_s'], 0)} | {r['ratio']:.2f}× | "
                         f"{r['ratio_reference']:.2f}× |")
    lines += ["", "The reference path: every token's feature strings looked up and Algorithm 2's "
              "damped Jacobi passes as written (the code before). GPSL's `predict`, median CPU "
              "seconds of its parts:", "", "| data | features | latent means | Algorithm 2 |",
              "|---|---:|---:|---:|"]
    for r in report["rows"]:
        if "phases" in r:
            ph = r["phases"]
            lines.append(f"| {r['dataset']} | {ph['features']:.4f} | {ph['latent']:.4f} | "
                         f"{ph['rns']:.4f} |")
    lines += ["", "## Algorithm 2's passes per sentence", "",
              "| data | schedule | median | max | at the cap | sentences |",
              "|---|---|---:|---:|---:|---:|"]
    for r in report["rows"]:
        p = r.get("passes")
        if p:
            for k in ("adaptive", "jacobi"):
                s = p[k]
                lines.append(f"| {r['dataset']} | {k} | {s['median']:g} | {s['max']} | "
                             f"{s['at_cap']} | {s['sentences']} |")
    lines += ["", "Largest |difference| of the two schedules' marginals where both converged "
              "(the stop rule's tolerance is 1e-4) and labels that differ: " + "; ".join(
                  f"{r['dataset']} {r['passes']['max_abs_diff_both_converged']:.1e}, "
                  f"{r['passes']['labels_differ']} of {r['passes']['tokens']:,}"
                  for r in report["rows"] if r.get("passes")) + ".", "",
              "## The whole command (child process: CPU s = user + system, peak memory)", "",
              "| data | test tokens | `gpsl test` CPU s | peak MiB | CRFsuite CPU s | peak MiB "
              "| ratio |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        g, c = r["gpsl_test"], r["crf_test"]
        lines.append(f"| {r['dataset']} | {r['test_tokens']:,} | {g['cpu_s']:.2f} | "
                     f"{g['peak_rss_mib']:.0f} | {c['cpu_s']:.2f} | {c['peak_rss_mib']:.0f} | "
                     f"{r['test_ratio']:.2f}× |")
    lines += ["", "CRFsuite's whole command: `python -m bench.tagging --crf-tag MODEL TEMPLATE "
              "FILE OUT` (gpsl's reader, the same template expansion, pycrfsuite's Tagger).", ""]
    text = "\n".join(lines)
    write_results(out, "tagging", text, report)
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.tagging", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("--datasets", nargs="+", default=["chunking", "ner"],
                   choices=["chunking", "ner"])
    p.add_argument("--train", type=int, default=800, help="chunking training sentences")
    p.add_argument("--test", type=int, default=2000, help="chunking sentences tagged")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sentences", type=int, default=0,
                   help="also the whole commands on this many synthetic sentences")
    p.add_argument("--out", type=Path, default=RESULTS_DIR)
    p.add_argument("--crf-tag", nargs=4, metavar=("MODEL", "TEMPLATE", "FILE", "OUT"),
                   help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.crf_tag:
        crf_tag_file(*args.crf_tag)
        return 0
    command = "python -m bench.tagging " + shlex.join(argv)
    report = run(args, log=lambda m: print(m, file=sys.stderr, flush=True))
    report["meta"] = {"date": now_iso(), "machine": machine_info(), "git": git_commit(),
                      "command": command.strip()}
    print(write(report, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
