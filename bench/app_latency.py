"""Latency of an Annotate interaction on a large project (AppTest, no browser).

    python -m bench.app_latency [--sentences 5000] [--clicks 40] [--keep DIR]
                                [--backend sqlite|postgresql] [--out DIR]

Builds a temporary store with a synthetic project of ``--sentences`` sentences (two feature
columns, 8-40 tokens, 11 BIO labels, a third of the sentences partly labeled) and an active
model version with stored predictions (random marginals) for every sentence, so the page
shows suggestions, uncertainty highlights and the uncertainty queue exactly as after a real
training run.  Then it opens the Annotate page with ``streamlit.testing.v1.AppTest`` and
times reruns: clicking a token chip (select), clicking a label button (the label is written
to the store, the rerun reads it back), and Next (the queue query).  Every timed rerun is a
full script run (sidebar + page) as in a browser session; AppTest's own overhead (element
tree parsing) is included, so the numbers are an upper bound of the server-side time.
``--backend postgresql`` runs the same on a temporary PostgreSQL server
(:mod:`bench.postgres`, fsync on) instead of the SQLite file.  The table is printed and
written to ``--out`` (default ``bench/results``) as ``app_latency.md`` / ``.json``
(``app_latency_postgresql.*`` for PostgreSQL) with the machine header of the other
benchmarks.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gpsl.annotation import Store  # noqa: E402

LABELS = ["B-DATE", "I-DATE", "B-LOC", "I-LOC", "B-MONEY", "I-MONEY", "B-ORG", "I-ORG",
          "B-PER", "I-PER", "O"]
POS = ["NNP", "NN", "NNS", "VBD", "IN", "DT", "CD", "JJ", "PUNCT"]


def build_store(path, n_sentences: int, seed: int = 0) -> tuple[Store, int, int]:
    rng = np.random.default_rng(seed)
    store = Store(path)
    pid = store.create_project("Synthetic 5k", LABELS, "", [-1, 1])
    vocab = [f"w{i}" for i in range(20_000)]
    sentences = []
    for k in range(n_sentences):
        n = int(rng.integers(8, 41))
        toks = [(vocab[int(rng.integers(len(vocab)))], POS[int(rng.integers(len(POS)))])
                for _ in range(n)]
        labels = [None] * n
        if k % 3 == 0:
            for t in rng.choice(n, size=n // 2, replace=False):
                labels[int(t)] = LABELS[int(rng.integers(len(LABELS)))]
        sentences.append({"tokens": toks, "labels": labels})
    store.add_sentences(pid, sentences, doc="synthetic.conll")
    vid = store.start_model_version(pid, {"offsets": [-1, 1], "kernel": "linear"})
    ids = store.sentence_ids(pid)
    lengths = {s["id"]: len(s["tokens"]) for s in store.get_sentences(pid)}
    for a in range(0, len(ids), 500):
        chunk = ids[a:a + 500]
        store.save_predictions(vid, {
            sid: rng.dirichlet(np.full(len(LABELS), 0.3), size=lengths[sid]).astype(np.float32)
            for sid in chunk})
    store.finish_model_version(vid, None, [0.0], {"heldout_accuracy": None}, 0,
                               classes=LABELS)
    store.set_active_model(pid, vid)
    return store, pid, vid


def stats_ms(samples: list[float]) -> dict:
    """``n``, ``median``, ``p95`` and ``max`` of timings in seconds, in milliseconds."""
    ms = sorted(1000 * s for s in samples)
    p95 = ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]
    return {"n": len(ms), "median": round(statistics.median(ms), 1), "p95": round(p95, 1),
            "max": round(ms[-1], 1)}


def summarize(name: str, samples: list[float]) -> str:
    s = stats_ms(samples)
    return (f"| {name:<22} | {s['n']:>3} | {s['median']:>9.1f} | {s['p95']:>8.1f} | "
            f"{s['max']:>8.1f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=5000)
    parser.add_argument("--clicks", type=int, default=40, help="label clicks to time")
    parser.add_argument("--keep", default=None, help="build the store in DIR and keep it")
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"),
                        help="directory for app_latency[_postgresql].md/.json")
    args = parser.parse_args(argv)

    from streamlit.testing.v1 import AppTest

    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpsl-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    server = None
    if args.backend == "postgresql":
        from bench.postgres import TempPostgres

        server = TempPostgres(fsync=True).start()
        db = server.new_database("latency")
    else:
        db = workdir / "bench.sqlite3"
        if db.exists():
            db.unlink()
    t0 = time.perf_counter()
    store, pid, vid = build_store(db, args.sentences)
    build_s = time.perf_counter() - t0
    os.environ["GPSL_DB"] = str(db)
    os.environ.setdefault("GPSL_ANNOTATOR", "bench")

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    at.switch_page("pages/annotate.py").run()
    assert not at.exception, at.exception
    state_key = f"annotate_{pid}"

    select, label, nxt = [], [], []
    rng = np.random.default_rng(1)
    written = 0
    while len(label) < args.clicks:
        sid = at.session_state[state_key]["current"]
        n = len(store.get_sentence(sid)["tokens"])
        for t in range(0, n, max(1, n // 4)):
            if len(label) >= args.clicks:
                break
            start = time.perf_counter()
            at.button(key=f"tok_{t}").click().run()
            select.append(time.perf_counter() - start)
            k = int(rng.integers(9))
            start = time.perf_counter()
            at.button(key=f"lab_{k}").click().run()
            label.append(time.perf_counter() - start)
            assert not at.exception, at.exception
            written += store.get_sentence(sid)["labels"][t] == LABELS[k]
        start = time.perf_counter()
        at.button(key="next").click().run()
        nxt.append(time.perf_counter() - start)
    assert written == len(label), f"{written} of {len(label)} labels reached the store"

    from bench.common import git_commit, header_lines, machine_info, now_iso

    progress = store.progress(pid)
    command = " ".join(shlex.quote(a) for a in ["python", "-m", "bench.app_latency",
                                               *(argv if argv is not None else sys.argv[1:])])
    intro = (f"Annotate latency ({args.backend}): {args.sentences:,} sentences, "
             f"{progress['tokens']:,} tokens, "
             f"{progress['labeled_tokens']:,} labeled; active model v{vid} with predictions "
             f"for every sentence (store built in {build_s:.1f} s"
             + (f" at {db})" if args.keep and server is None else ")"))
    table = [f"| {'rerun after ...':<22} |   n | median ms |   p95 ms |   max ms |",
             f"|{'-' * 24}|----:|----------:|---------:|---------:|",
             summarize("label click (write)", label),
             summarize("token click (select)", select),
             summarize("Next (queue)", nxt)]
    print(intro, "", *table, "", f"command: {command}", sep="\n")
    machine = machine_info()
    try:
        machine["load_average_at_end"] = [round(v, 2) for v in os.getloadavg()]
    except OSError:
        pass
    name = "app_latency" + ("" if args.backend == "sqlite" else f"_{args.backend}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    date = now_iso()
    lines = header_lines(f"App latency ({args.backend})", date, machine, git_commit(), command)
    lines += [intro + ". AppTest reruns of the Annotate page, each a full script run; "
              "AppTest's own overhead is included, so the figures are upper bounds of the "
              "server-side time. Load average at the end: "
              f"{machine.get('load_average_at_end')}.", "", *table, ""]
    (out / f"{name}.md").write_text("\n".join(lines), encoding="utf-8")
    (out / f"{name}.json").write_text(json.dumps({
        "command": command, "date": date, "machine": machine, "git": git_commit(),
        "backend": args.backend, "sentences": args.sentences, "tokens": progress["tokens"],
        "labeled_tokens": progress["labeled_tokens"],
        "results_ms": {"label_click": stats_ms(label), "token_click": stats_ms(select),
                       "next": stats_ms(nxt)}}, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out / name}.md and .json")
    store.close()
    if server is not None:
        server.stop()
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
