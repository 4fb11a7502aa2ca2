"""The app's refit after a batch of new labels, from the click to the stored predictions.

    python -m bench.app_refit [--tokens 20000] [--labeled 0.5] [--batch 100] [--repeats 3]
                              [--heldout 0.1] [--no-gold] [--out bench/results]

A real store (SQLite in a temporary directory) with a project of about ``--tokens`` tokens:
the first chunking sentences of ``../shared/data/crfpp/chunking`` (train + test pooled, read
in place), the last ``--heldout`` of them held out with their gold labels (``--no-gold``: no
held-out gold, so the calibration runs on folds of the labeled sentences). An annotator
labels ``--labeled`` of the training tokens at random (partial sentences, the app's case);
a first training run follows. Then, ``--repeats`` times: the annotator labels a batch of
``--batch`` tokens in the queue's order (the uncertainty queue of the active model: the
tokens of its first sentences, new sentences included), and the Train page's click runs:
:meth:`gpsl.annotation.Store.start_training` with the page's default settings starts the
worker process (``python -m gpsl.annotation.worker``, the real path), and the bench waits until
the version is done and its predictions are stored.

Per phase, wall and CPU seconds from the worker's progress record
(:class:`gpsl.annotation.runs.Progress`: CPU of the worker and its ended children):
start-up (click to the worker's first record; its CPU: interpreter, imports, store),
load, fit, calibration, predictions + query scores, store (the prediction rows, the model
folder, the version's finish). Medians over the repeats; the first (cold) run is shown
beside. The peer in the same run: CRFsuite (``bench.paper``'s settings) fitted on the same
training sentences with all their labels (it cannot train on partial ones), a measure of the
machine's speed at that moment. Writes ``app_refit.md`` and ``app_refit.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import (
    DATA_DIR,
    RESULTS_DIR,
    DataMissing,
    git_commit,
    header_lines,
    load_pooled,
    machine_info,
    now_iso,
)

ANNOTATOR = "ann"
#: the rows of the table: (label, the progress record's phases added up, part of a phase)
PHASES = (
    ("start-up", (), None),
    ("load", ("loading",), None),
    ("fit", ("fitting",), None),
    ("calibration", ("calibrating",), None),
    ("held-out figures", ("evaluating",), None),
    ("predictions + query scores", ("predicting",), "-store"),
    ("store", ("saving", "storing"), "+store"),
)


def project_data(tokens: int, heldout: float):
    """The first chunking sentences with about ``tokens`` tokens: ``(train, held, labels,
    template)``, each sentence ``(tokens, labels)``."""
    data = load_pooled(DATA_DIR, "chunking")
    n, total = 0, 0
    while n < len(data.X) and total < tokens:
        total += len(data.X[n])
        n += 1
    pairs = list(zip(data.X[:n], data.y[:n]))
    n_held = int(round(heldout * n))
    return pairs[:n - n_held], pairs[n - n_held:], data.labels, data.template


def make_store(tmp: Path, args):
    from gpsl.annotation import Store

    train, held, labels, template = project_data(args.tokens, 0.0 if args.no_gold
                                                 else args.heldout)
    store = Store(tmp / "refit.sqlite3", models_root=tmp / "models")
    pid = store.create_project("refit", labels, template, offsets=(-1, 1))
    store.add_sentences(pid, [{"tokens": x} for x, _ in train])
    if held:
        store.add_sentences(pid, [{"tokens": x} for x, _ in held], split="heldout",
                            gold=[y for _, y in held])
    truth = dict(zip(store.sentence_ids(pid, split="train"), [y for _, y in train]))
    rng = np.random.default_rng(0)
    for sid, y in truth.items():
        pick = np.flatnonzero(rng.random(len(y)) < args.labeled)
        if pick.size:
            store.set_labels(sid, {int(t): y[t] for t in pick}, ANNOTATOR)
    return store, pid, truth, train


def label_batch(store, pid: int, truth: dict, batch: int) -> int:
    """The annotator labels ``batch`` unlabeled tokens in the queue's order; returns how many
    sentences they touched."""
    left, touched = batch, 0
    for sid in store.queue(pid, annotator=ANNOTATOR, limit=None):
        if sid not in truth:
            continue
        known = store.sentence_view(sid, ANNOTATOR)["labels"]
        todo = [t for t, lab in enumerate(known) if lab is None][:left]
        if todo:
            store.set_labels(sid, {t: truth[sid][t] for t in todo}, ANNOTATOR)
            left -= len(todo)
            touched += 1
        if left <= 0:
            break
    return touched


def click(store, pid: int, poll: float = 0.05) -> dict:
    """The Train page's Start training (its default settings), then wait for the stored
    predictions; the progress record's phases, the click's wall seconds and the version."""
    from gpsl.annotation import TrainConfig, jobs, runs

    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    t_epoch, t0 = time.time(), time.perf_counter()
    vid = store.start_training(pid, TrainConfig())
    while store.get_model_version(vid)["status"] == "running":
        time.sleep(poll)
    wall = time.perf_counter() - t0
    proc = (jobs._WORKERS.get(vid) or (None,))[0]  # this process started it: reap it
    if proc is not None:
        proc.wait()
    jobs.reap_workers()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    worker_cpu = (after.ru_utime + after.ru_stime) - (kids.ru_utime + kids.ru_stime)
    version = store.get_model_version(vid)
    if version["status"] != "done":
        raise RuntimeError(f"the training run ended {version['status']}: {version['error']}")
    prog = runs.read_progress(store.models_root, pid, vid)
    started = prog.get("started")  # None: a version of gpsl before the phases were recorded
    return {"click_to_stored_s": wall, "worker_cpu_s": worker_cpu,
            "startup_wall_s": None if started is None else started - t_epoch,
            "startup_cpu_s": prog.get("startup_cpu"), "phases": prog.get("phases"),
            "parts": prog.get("parts", {}), "version": vid,
            "warm": version["metrics"].get("warm_start"),
            "python_path": str(Path(runs.__file__).resolve().parents[2]),
            "calibration": (version["metrics"].get("calibration") or {}).get("source"),
            "calibration_how": (version["metrics"].get("calibration") or {}).get("how"),
            "sweeps": version["metrics"]["n_iter"],
            "train_sentences": version["metrics"]["train_sentences"],
            "train_labeled_tokens": version["metrics"]["train_labeled_tokens"],
            "heldout_accuracy": version["metrics"].get("heldout_accuracy")}


def phase_rows(run: dict) -> dict:
    """``{row label: (wall, cpu)}`` of one run (:data:`PHASES`; NaN when the gpsl measured
    did not record its phases)."""
    if run["phases"] is None:
        return {label: (float("nan"), float("nan")) for label, _, _ in PHASES}
    by = {}
    for p in run["phases"]:
        w, c = by.get(p["name"], (0.0, 0.0))
        by[p["name"]] = (w + p["wall"], c + p["cpu"])
    store = run["parts"].get("store", {"wall": 0.0, "cpu": 0.0})
    out = {"start-up": (run["startup_wall_s"], run["startup_cpu_s"])}
    for label, names, part in PHASES[1:]:
        w = sum(by.get(n, (0.0, 0.0))[0] for n in names)
        c = sum(by.get(n, (0.0, 0.0))[1] for n in names)
        if part:
            sign = 1 if part[0] == "+" else -1
            w, c = w + sign * store["wall"], c + sign * store["cpu"]
        out[label] = (w, c)
    return out


def crfsuite_run(train, template_text: str) -> dict:
    from bench.paper import fit_peer
    from gpsl.features import Template

    template = Template.parse(template_text, source="chunking/template")
    X, y = [x for x, _ in train], [lab for _, lab in train]
    wall, cpu = time.perf_counter(), time.process_time()
    rec, _, _ = fit_peer("CRFsuite", template, X, y, X[:1], want_marginals=False)
    return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
            "sentences": len(X), "tokens": sum(len(s) for s in X)}


def med(values) -> float:
    return float(statistics.median(values))


def sec(x) -> str:
    """Seconds for the table ("–" where the gpsl measured recorded no phases)."""
    return "–" if x is None or x != x else f"{x:.2f}"


def report(result: dict) -> str:
    refits, first, peer = result["refits"], result["first"], result["crfsuite"]
    rows = [phase_rows(r) for r in refits]
    first_rows = phase_rows(first)
    a = result["args"]
    lines = header_lines("The app's refit after a batch of new labels", result["date"],
                         result["machine"], result["git"], result["command"])
    r0 = refits[-1]
    lines += [
        f"Project: {result['project']['tokens']:,} tokens in {result['project']['sentences']:,} "
        f"chunking sentences ({result['project']['heldout']} held out"
        + (" with gold" if result["project"]["heldout"] else ", no gold") + "); "
        f"{100 * a['labeled']:.0f}% of the training tokens labeled at random, then "
        f"{len(refits)} batches of {a['batch']} tokens in the queue's order, each followed by "
        f"Start training (the page's defaults) through the worker process. The last refit: "
        f"{r0['train_labeled_tokens']:,} labeled tokens in {r0['train_sentences']:,} "
        f"sentences, {r0['sweeps']} sweeps, warm start: {r0['warm'] or 'no'}, calibration: "
        f"{r0['calibration']}"
        + (f" ({r0['calibration_how']})" if r0.get("calibration_how") else "") + ".",
        "",
        f"| phase | refit wall s (median of {len(refits)}) | refit CPU s | first run wall s "
        "| first run CPU s |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, _, _ in PHASES:
        lines.append(f"| {label} | {sec(med(r[label][0] for r in rows))} "
                     f"| {sec(med(r[label][1] for r in rows))} | {sec(first_rows[label][0])} "
                     f"| {sec(first_rows[label][1])} |")
    click_med = med(r["click_to_stored_s"] for r in refits)
    each = ", ".join(f"{r['click_to_stored_s']:.2f}" for r in refits)
    lines += [
        f"| **click → predictions stored** | **{click_med:.2f}** | "
        f"{med(r['worker_cpu_s'] for r in refits):.2f} "
        f"| {first['click_to_stored_s']:.2f} | {first['worker_cpu_s']:.2f} |",
        "",
        f"Each refit's click → stored: {each} s "
        f"(goal ≤ 10 s: {'met' if click_med <= 10 else 'not met'}). Held-out accuracy after "
        f"the last refit: "
        + (f"{100 * r0['heldout_accuracy']:.2f}%" if r0["heldout_accuracy"] is not None
           else "–") + ".",
        "",
        f"Peer in the same run: CRFsuite fitted on the {peer[0]['sentences']:,} training "
        f"sentences with all their labels ({peer[0]['tokens']:,} tokens): "
        f"{med(p['wall_s'] for p in peer):.2f} s wall, {med(p['cpu_s'] for p in peer):.2f} s CPU "
        f"(median of {len(peer)}); the refit's click → stored / CRFsuite's fit (wall): "
        f"{click_med / med(p['wall_s'] for p in peer):.2f}.",
        "",
        "Rows: start-up = click to the worker's first progress record (its CPU: interpreter, "
        "imports, opening the store); store = the prediction rows, the model folder and the "
        "version's finish; the rows' CPU are the worker's and its ended children's (the "
        "last row's: the whole worker process, from its exit status).",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.app_refit", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--labeled", type=float, default=0.5,
                    help="share of the training tokens labeled before the first run")
    ap.add_argument("--batch", type=int, default=100, help="new labels before each refit")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--heldout", type=float, default=0.1)
    ap.add_argument("--no-gold", action="store_true",
                    help="no held-out gold: the calibration runs on folds")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR)
    ap.add_argument("--name", default="app_refit", help="result file name (no suffix)")
    args = ap.parse_args(argv)
    if not (0 < args.labeled <= 1 and args.batch > 0 and args.repeats > 0 and args.tokens > 0):
        ap.error("--labeled in (0, 1], --batch, --repeats and --tokens positive")
    command = "python -m bench.app_refit " + shlex.join(argv if argv is not None
                                                         else sys.argv[1:])
    try:
        load_pooled(DATA_DIR, "chunking")
    except DataMissing as exc:
        print(f"bench.app_refit: skipped: {exc}")
        return 0
    result = {"command": command.strip(), "date": now_iso(), "machine": machine_info(),
              "git": git_commit(), "args": {k: (str(v) if isinstance(v, Path) else v)
                                            for k, v in vars(args).items()},
              "refits": [], "crfsuite": [], "batches": []}
    with tempfile.TemporaryDirectory(prefix="gpsl-app-refit-") as tmp:
        store, pid, truth, train = make_store(Path(tmp), args)
        try:
            p = store.progress(pid, detail=False)
            result["project"] = {"sentences": store.sentence_count(pid),
                                 "tokens": sum(len(x) for x, _ in train) + sum(
                                     len(s["tokens"]) for s in store.get_sentences(
                                         pid, split="heldout")),
                                 "heldout": store.sentence_count(pid, split="heldout"),
                                 "labeled_tokens": p["labeled_tokens"]}
            template = store.get_project(pid)["template"]
            result["first"] = click(store, pid)
            print(f"first run: {result['first']['click_to_stored_s']:.2f} s", flush=True)
            for r in range(args.repeats):  # the peer beside each refit, under the same load
                result["batches"].append(label_batch(store, pid, truth, args.batch))
                result["refits"].append(click(store, pid))
                result["crfsuite"].append(crfsuite_run(train, template))
                print(f"refit {r + 1}: {result['refits'][-1]['click_to_stored_s']:.2f} s",
                      flush=True)
        finally:
            store.close()
    text = report(result)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.md").write_text(text, encoding="utf-8")
    (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
