"""Annotate page latency as the annotator sees it: real Chromium, a real `streamlit run`.

    python -m bench.browser_latency [--sentences 100000] [--keys 40] [--nexts 15]
                                    [--only sample|large] [--out DIR]

For two stores - the sample project the app opens on (``sample_data/``) and a synthetic
store of ``--sentences`` sentences drawn from :func:`gpsl.synthetic.make_chain_task` (half
the labels hidden, an active model with stored predictions for every sentence, so the
page shows suggestions, shading and the uncertainty queue) - it starts ``streamlit run
app.py`` (local mode), opens the Annotate page in Debian's Chromium (Playwright, headless)
and measures, in the page:

* **key -> label visible**: from the key event's timestamp to the first animation frame
  after the key (its callbacks run just before that frame is painted, the DOM already
  changed), for label keys 400 ms apart, and checks that the chip then carries the label;
* **Next -> new sentence visible**: the same for ``N`` until the widget's first line names
  another sentence;
* **a burst of 20 keys 30 ms apart**, each key's time to its label, and whether the store
  then holds all 20 labels in order, each written once (history rows); the same with the
  server process paused (SIGSTOP) for 5 s mid-burst.

The table is printed and written to ``--out`` (default ``bench/results``) as
``browser_latency.md`` / ``.json``.  The machine's load average is part of the report: the
goals (p95 <= 50 ms per key at load <= 1; Next p95 <= 150 ms) are stated for it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.app_latency import stats_ms  # noqa: E402
from gpsl.annotation import Store  # noqa: E402
from gpsl.synthetic import hide_labels, make_chain_task  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
PROBE = """() => {
  window.__lat = [];
  window.addEventListener('keydown', (e) => {
    const t0 = e.timeStamp, W = window.__gpslWidget;
    const head = () => (document.querySelector('[data-testid=gpslWidgetHead]') || {}).textContent;
    const before = head(), t = W ? W.sel : null;
    const done = (what) => window.__lat.push({key: e.key, ms: performance.now() - t0,
      what: what, chip: (document.querySelector(`.gw-chip[data-t="${t}"]`) || {}).textContent});
    if (e.key === 'n') {  // until another sentence is named, frame by frame
      const step = () => requestAnimationFrame(() => {
        if (head() !== before) done('next');
        else if (performance.now() - t0 < 10000) step(); else done('timeout');
      });
      step();
    } else requestAnimationFrame(() => done('key'));
  }, true);
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_large(path: Path, n: int, seed: int = 0) -> int:
    """A store of ``n`` sentences from the synthetic chain grammar, half the labels hidden,
    and an active model with random stored predictions (as after a training run)."""
    rng = np.random.default_rng(seed)
    sentences, labels = make_chain_task(n, n_labels=5, seed=seed)
    labels = hide_labels(labels, 0.5, seed=seed)
    names = [f"L{k}" for k in range(5)]
    store = Store(path)
    pid = store.create_project("Synthetic", names, "", [-1, 1])
    for a in range(0, n, 20_000):
        store.add_sentences(pid, [{"tokens": s, "labels": y} for s, y in
                                  zip(sentences[a:a + 20_000], labels[a:a + 20_000])])
    vid = store.start_model_version(pid, {"offsets": [-1, 1], "kernel": "linear"})
    ids = store.sentence_ids(pid)
    for a in range(0, len(ids), 5000):
        chunk = ids[a:a + 5000]
        store.save_predictions(vid, {
            sid: rng.dirichlet(np.full(len(names), 0.3), size=len(sentences[a + i])
                               ).astype(np.float32) for i, sid in enumerate(chunk)})
    store.finish_model_version(vid, None, [0.0], {"heldout_accuracy": None}, 0,
                               classes=names)
    store.set_active_model(pid, vid)
    store.close()
    return pid


class Server:
    def __init__(self, db: Path, log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log = open(log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port",
             str(self.port), "--server.address", "127.0.0.1", "--server.headless", "true",
             "--browser.gatherUsageStats", "false"], cwd=ROOT, stdout=self.log,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "GPSL_DB": str(db), "GPSL_ANNOTATOR": "bench"})
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(self.url + "_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not start (see {log})")
            time.sleep(0.3)

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def open_page(browser, url: str, pid: int):
    page = browser.new_context(viewport={"width": 1400, "height": 950}).new_page()
    page.set_default_timeout(120_000)
    page.goto(f"{url}annotate?project={pid}")
    page.wait_for_function("() => { const w = window.__gpslWidget; return !!(w && w.root &&"
                           " w.root.isConnected && w.data && w.data.sid); }", timeout=180_000)
    page.evaluate(PROBE)
    page.locator(".gw-chip").first.click()
    return page


def take(page) -> list[dict]:
    out = page.evaluate("window.__lat")
    page.evaluate("window.__lat = []")
    return out


def settle(page, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while page.evaluate("window.__gpslWidget.q.pending.length") and time.monotonic() < deadline:
        time.sleep(0.1)


def label_keys(names: list[str]) -> list[str]:
    return [str(i + 1) for i in range(min(4, len([x for x in names if x != "O"])))]


BURST_LABELS = [f"L{k}" for k in range(5)]


def burst_project(db: Path) -> int:
    """A project beside the measured one for the bursts: sentences of 24 unlabeled tokens
    (20 keys label 20 of them, left to right)."""
    store = Store(db)
    pid = store.create_project("Burst", BURST_LABELS, sentences=[
        {"tokens": [f"b{i}" for i in range(24)]} for _ in range(2)])
    store.close()
    return pid


def burst(page, store: Store, server: Server, keys: list[str], pause: bool) -> dict:
    """20 keys 30 ms apart on a sentence of 24 unlabeled tokens; ``pause``: the server
    stopped (SIGSTOP) for 5 s from the 10th key on."""
    sid = page.evaluate("window.__gpslWidget.data.sid")
    take(page)
    page.locator(".gw-chip").first.click()
    stopped = None
    for i in range(20):
        if pause and i == 10:
            os.kill(server.proc.pid, signal.SIGSTOP)
            stopped = time.monotonic()
        page.keyboard.press(keys[i % len(keys)])
        page.wait_for_timeout(30)
    if stopped is not None:
        time.sleep(max(0.0, 5.0 - (time.monotonic() - stopped)))
        os.kill(server.proc.pid, signal.SIGCONT)
    lat = take(page)
    settle(page)
    expect = [f"L{int(keys[i % len(keys)]) - 1}" for i in range(20)]
    deadline = time.monotonic() + 60
    while store.get_sentence(sid)["labels"][:20] != expect and time.monotonic() < deadline:
        time.sleep(0.2)
    rows = sorted((h for h in store.history(sid, limit=None) if h["action"] == "set"),
                  key=lambda h: h["id"])
    stored = [(h["token_index"], h["new_label"]) for h in rows]
    return {"ms": [x["ms"] for x in lat], "within_50ms": sum(x["ms"] <= 50 for x in lat),
            "painted": sum(bool(x["chip"]) and x["chip"] == f"b{i}{expect[i]}"
                           for i, x in enumerate(lat)),
            "history_rows": len(rows), "in_order": [t for t, _ in stored] == list(range(20)),
            "exactly_once": stored == list(enumerate(expect))}


def measure(name: str, db: Path, pid: int, names: list[str], args, browser, work: Path) -> dict:
    bursts = burst_project(db)
    server = Server(db, work / f"{name}.log")
    store = Store(db)
    try:
        page = open_page(browser, server.url, pid)
        cpu0 = server.cpu_seconds()
        keys = label_keys(names)
        key_ms = []
        while len(key_ms) < args.keys:
            page.keyboard.press(keys[len(key_ms) % len(keys)])
            time.sleep(0.4)
            key_ms += [x["ms"] for x in take(page) if x["what"] == "key"]
            if len(key_ms) % 8 == 0:
                settle(page)
                page.keyboard.press("n")  # a fresh sentence now and then
                time.sleep(1.0)
                settle(page)
                take(page)
                page.locator(".gw-chip").first.click()
        next_ms = []
        for _ in range(args.nexts):
            settle(page)
            time.sleep(0.8)  # the prefetched sentence arrives with the last answer
            take(page)
            page.keyboard.press("n")
            time.sleep(0.6)
            next_ms += [x["ms"] for x in take(page) if x["what"] in ("next", "timeout")]
        settle(page)
        cpu = server.cpu_seconds() - cpu0
        page.context.close()
        page = open_page(browser, server.url, bursts)
        plain = burst(page, store, server, ["1", "2", "3", "4", "5"], pause=False)
        page.keyboard.press("n")
        settle(page)
        time.sleep(1.0)
        paused = burst(page, store, server, ["1", "2", "3", "4", "5"], pause=True)
        page.context.close()
    finally:
        store.close()
        server.stop()
    return {"store": name, "key": stats_ms([m / 1000 for m in key_ms]),
            "next": stats_ms([m / 1000 for m in next_ms]),
            "burst": {**plain, "stats": stats_ms([m / 1000 for m in plain["ms"]])},
            "burst_paused": {**paused, "stats": stats_ms([m / 1000 for m in paused["ms"]])},
            "server_cpu_s": round(cpu, 1)}


def rows(r: dict) -> list[str]:
    def line(what, s, extra=""):
        return (f"| {r['store']} | {what} | {s['n']} | {s['median']:.1f} | {s['p95']:.1f} | "
                f"{s['max']:.1f} | {extra} |")

    out = [line("key -> label visible (keys 400 ms apart)", r["key"]),
           line("Next -> new sentence visible", r["next"])]
    for what, b in (("burst of 20 keys 30 ms apart", r["burst"]),
                    ("the same, server paused 5 s mid-burst", r["burst_paused"])):
        out.append(line(what, b["stats"],
                        f"{b['within_50ms']}/20 within 50 ms, {b['painted']}/20 showed their "
                        f"label; {b['history_rows']} rows stored, in order {b['in_order']}, "
                        f"all 20 exactly once {b['exactly_once']}"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=40)
    parser.add_argument("--nexts", type=int, default=15)
    parser.add_argument("--only", choices=("sample", "large"), default=None)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from bench.common import git_commit, header_lines, machine_info, now_iso, write_results

    machine = machine_info()
    work = Path(tempfile.mkdtemp(prefix="gpsl-browser-latency-"))
    results, builds = [], {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            if args.only in (None, "sample"):
                db = work / "sample.sqlite3"
                store = Store(db)
                from pages._ui import SAMPLE_DIR
                pid = store.ensure_sample_project(SAMPLE_DIR)
                names = list(store.get_project(pid)["labels"])
                store.close()
                results.append(measure("sample", db, pid, names, args, browser, work))
            if args.only in (None, "large"):
                db = work / "large.sqlite3"
                t0, c0 = time.perf_counter(), time.process_time()
                pid = build_large(db, args.sentences)
                builds["large"] = {"wall_s": round(time.perf_counter() - t0, 1),
                                   "cpu_s": round(time.process_time() - c0, 1)}
                results.append(measure(f"{args.sentences:,} sentences", db, pid,
                                       [f"L{k}" for k in range(5)], args, browser, work))
        finally:
            browser.close()
    command = " ".join(shlex.quote(a) for a in ["python", "-m", "bench.browser_latency",
                                               *(argv if argv is not None else sys.argv[1:])])
    load = [round(v, 2) for v in os.getloadavg()]
    table = ["| store | what | n | median ms | p95 ms | max ms | notes |",
             "|---|---|---:|---:|---:|---:|---|"]
    for r in results:
        table += rows(r)
    cpu = "; ".join(f"{r['store']}: server {r['server_cpu_s']} CPU s" for r in results)
    text = "\n".join([*header_lines("Annotate latency in Chromium", now_iso(), machine,
                                    git_commit(), command),
                      "Measured in the page: from the key event's timestamp to the first "
                      "animation frame after it shows the change (the frame about to be "
                      "painted). Goals: key "
                      "p95 <= 50 ms at load <= 1 (<= 100 ms at load ~4), Next p95 <= 150 ms. "
                      f"Load average at the end: {load}. {cpu}.", "", *table, ""])
    print(text)
    write_results(Path(args.out), "browser_latency", text, {
        "command": command, "machine": machine, "load_average_at_end": load,
        "builds": builds, "results": results})
    print(f"wrote {Path(args.out) / 'browser_latency'}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
