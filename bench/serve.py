"""gpsl serve under load: Label Studio's ``/predict`` latency and ``/v1/tag`` throughput,
beside ``gpsl test`` and CRFsuite on the same model's data.

    python -m bench.serve [--repeats 20] [--train-sentences 320] [--out bench/results]

The model: ``gpsl train -t ner`` (the defaults: calibration on folds) on the words and labels
of the sample project's first 320 gold sentences; the held-out 80 are the text to tag. The
server is ``python -m gpsl serve`` with its defaults (one worker) on a loopback port, asked
by a client in this process over HTTP:

* ``/predict``: 100 Label Studio tasks of exactly 30 tokens each (the held-out words run
  together and cut), ``--repeats`` times: wall-clock latency (median, p95) and the server's
  CPU seconds per request (its process's CPU time, before and after);
* ``/v1/tag``: the held-out sentences as token lists in one request, ``--repeats`` times:
  tokens per wall second and per server CPU second;
* ``gpsl test -m MODEL --marginals``: the whole command on the same sentences (process start
  and model load included, the path a user takes), ``--repeats`` times, tokens per second;
* CRFsuite (sklearn-crfsuite, ``bench.paper``'s settings, the same template) trained on the
  same sentences: tagging the held-out ones with marginals, in process (no HTTP, no start).

Writes ``serve.md`` and ``serve.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from bench.common import (
    REPO,
    RESULTS_DIR,
    git_commit,
    header_lines,
    machine_info,
    now_iso,
    write_results,
)

TOKEN = "bench-serve-token"
CONFIG = ('<View><Text name="text" value="$text"/><Labels name="label" toName="text">'
          '<Label value="PER"/><Label value="ORG"/><Label value="LOC"/><Label value="DATE"/>'
          '<Label value="MONEY"/></Labels></View>')


def data(tmp: Path, n_train: int = 320):
    from gpsl.io import read_conll

    gold = read_conll(REPO / "sample_data" / "sample_gold.conll")
    train, held = gold[:n_train], gold[320:]
    path = tmp / "train.conll"
    path.write_text("\n\n".join("\n".join(f"{t[0]} {lab}" for t, lab in
                                          zip(s.tokens, s.labels, strict=True))
                                for s in train) + "\n", encoding="utf-8")
    test = tmp / "test.conll"
    test.write_text("\n\n".join("\n".join(t[0] for t in s.tokens) for s in held) + "\n",
                    encoding="utf-8")
    return train, held, path, test


def tasks(held, n: int = 100, length: int = 30) -> list[dict]:
    """``n`` tasks of exactly ``length`` tokens of gpsl's tokenizer: held-out words in order,
    wrapping around."""
    from gpsl.serve.labelstudio import tokenize

    words = [t[0] for s in held for t in s.tokens]
    out, k = [], 0
    for i in range(n):
        text = ""
        while len(tokenize(text)) < length:
            cand = (text + " " + words[k % len(words)]).strip()
            k += 1
            if len(tokenize(cand)) <= length:
                text = cand
        out.append({"id": i + 1, "data": {"text": text}})
    return out


def post(url: str, path: str, payload: dict) -> tuple[float, dict]:
    body = json.dumps(payload).encode()
    req = urllib.request.Request(url + path, data=body, headers={
        "Authorization": f"Token {TOKEN}", "Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read())
    return time.perf_counter() - t0, out


def server_cpu(pid: int) -> float:
    import psutil

    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def p95(values) -> float:
    return float(np.percentile(values, 95))


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(model: Path, tmp: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = open(tmp / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "gpsl", "serve", "-m", str(model),
                             "--port", str(port), "--state-dir", str(tmp / "state"),
                             "--log-level", "WARNING"],
                            stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "GPSL_SERVE_TOKEN": TOKEN})
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return proc, url
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"gpsl serve exited (see {log.name})") from None
            time.sleep(0.2)
    raise RuntimeError("gpsl serve did not start")


def measure(repeats: int, tmp: Path, n_train: int = 320) -> dict:
    from bench.peers import fit_peer
    from gpsl.model import GPSL

    train, held, train_path, test_path = data(tmp, n_train)
    model = tmp / "model"
    subprocess.run([sys.executable, "-m", "gpsl", "train", "-t", "ner", "-q", str(train_path),
                    str(model)], check=True, capture_output=True)
    sentences = [[t[0] for t in s.tokens] for s in held]
    n_tokens = sum(map(len, sentences))
    out: dict = {"train_sentences": len(train), "held_sentences": len(held),
                 "held_tokens": n_tokens, "repeats": repeats}
    proc, url = start_server(model, tmp)
    try:
        batch = {"tasks": tasks(held), "label_config": CONFIG}
        post(url, "/setup", {"project": "1.0", "schema": CONFIG})
        post(url, "/predict", batch)  # warm: first request's imports and caches
        walls, cpus = [], []
        for _ in range(repeats):
            c0 = server_cpu(proc.pid)
            wall, res = post(url, "/predict", batch)
            cpus.append(server_cpu(proc.pid) - c0)
            walls.append(wall)
        assert len(res["results"]) == 100
        out["predict"] = {"tasks": 100, "tokens_per_task": 30, "wall_s": walls, "cpu_s": cpus,
                          "median_s": statistics.median(walls), "p95_s": p95(walls),
                          "cpu_median_s": statistics.median(cpus),
                          "spans": sum(len(r["result"]) for r in res["results"])}
        walls, cpus = [], []
        for _ in range(repeats):
            c0 = server_cpu(proc.pid)
            wall, res = post(url, "/v1/tag", {"sentences": sentences})
            cpus.append(server_cpu(proc.pid) - c0)
            walls.append(wall)
        tagged = [s["labels"] for s in res["sentences"]]
        out["tag"] = {"wall_s": walls, "cpu_s": cpus,
                      "tokens_per_s": n_tokens / statistics.median(walls),
                      "tokens_per_cpu_s": n_tokens / statistics.median(cpus)}
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    walls, cpus = [], []
    for _ in range(repeats if repeats < 5 else 5):
        c0, t0 = child_cpu(), time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "gpsl", "test", "-m", str(model),
                               "--marginals", str(test_path)], check=True,
                              capture_output=True, text=True)
        walls.append(time.perf_counter() - t0)
        cpus.append(child_cpu() - c0)
    cli = [[line.split("\t")[-1].split("/")[0] for line in block.split("\n") if line]
           for block in done.stdout.strip().split("\n\n")]
    out["gpsl_test"] = {"wall_s": walls, "cpu_s": cpus,
                        "tokens_per_s": n_tokens / statistics.median(walls),
                        "tokens_per_cpu_s": n_tokens / statistics.median(cpus),
                        "same_labels_as_v1_tag": cli == tagged}
    m = GPSL.load(model)
    rec, _, _ = fit_peer("CRFsuite", m.template_, [list(s.tokens) for s in train],
                         [list(s.labels) for s in train], [[(w,) for w in s] for s in sentences],
                         want_marginals=False)
    out["crfsuite"] = {"predict_s": rec["predict_s"],
                       "tokens_per_s": n_tokens / rec["predict_s"]}
    return out


def report(result: dict) -> str:
    pr, tg, cl, cr = (result["predict"], result["tag"], result["gpsl_test"],
                      result["crfsuite"])
    lines = header_lines("gpsl serve: /predict latency, /v1/tag throughput", result["date"],
                         result["machine"], result["git"], result["command"])
    lines += [
        f"Model: `gpsl train -t ner` on {result['train_sentences']} sample sentences (words "
        f"only); text: the {result['held_sentences']} held-out sentences "
        f"({result['held_tokens']:,} tokens). Server: `gpsl serve` defaults (1 worker), "
        f"HTTP on loopback; {result['repeats']} requests each.",
        "",
        "| request | wall median s | wall p95 s | server CPU median s | server CPU p95 s |",
        "|---|---:|---:|---:|---:|",
        f"| `/predict`, 100 tasks x 30 tokens | {pr['median_s']:.3f} | {pr['p95_s']:.3f} "
        f"| {pr['cpu_median_s']:.3f} | {p95(pr['cpu_s']):.3f} |",
        f"| `/v1/tag`, {result['held_sentences']} sentences | "
        f"{statistics.median(tg['wall_s']):.3f} | {p95(tg['wall_s']):.3f} "
        f"| {statistics.median(tg['cpu_s']):.3f} | {p95(tg['cpu_s']):.3f} |",
        "",
        "| tagger | tokens / wall s | tokens / CPU s |",
        "|---|---:|---:|",
        f"| `/v1/tag` (HTTP, model loaded) | {tg['tokens_per_s']:,.0f} "
        f"| {tg['tokens_per_cpu_s']:,.0f} |",
        f"| `gpsl test --marginals` (whole command) | {cl['tokens_per_s']:,.0f} "
        f"| {cl['tokens_per_cpu_s']:,.0f} |",
        f"| CRFsuite, in process (labels only; no HTTP, no start) | {cr['tokens_per_s']:,.0f} | |",
        "",
        f"`/v1/tag` against `gpsl test`: {tg['tokens_per_s'] / cl['tokens_per_s']:.1f}x the "
        f"tokens per wall second; same labels: {cl['same_labels_as_v1_tag']}. The goal for "
        f"`/predict` is 1 s at p95: {pr['p95_s']:.3f} s wall, {p95(pr['cpu_s']):.3f} s of the "
        f"server's CPU (wall time above CPU time is time the server waited for a core: load "
        f"average {result['machine']['load_average_at_start']} at the start on "
        f"{result['machine']['cpu_count']} cores).",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--train-sentences", type=int, default=320,
                   help="sample sentences the model is trained on (at most 320)")
    p.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    command = "python -m bench.serve " + shlex.join(argv if argv is not None else sys.argv[1:])
    with tempfile.TemporaryDirectory() as tmp:
        result = measure(args.repeats, Path(tmp), min(320, args.train_sentences))
    result.update(command=command.strip(), date=now_iso(), machine=machine_info(),
                  git=git_commit())
    md = report(result)
    print(md)
    write_results(args.out, "serve", md, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
