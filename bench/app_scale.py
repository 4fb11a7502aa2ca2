"""A large project as a user meets it: import, training, exports and every page (issue 37).

    python -m bench.app_scale [--sentences 10000 100000] [--backend sqlite postgresql]
                              [--max-iter 10] [--clicks 20] [--out DIR]

For each size and back end (SQLite file; PostgreSQL on a temporary server,
:class:`bench.postgres.TempPostgres`, fsync on) a new store is made in a temporary folder
and, each step in a fresh process of its own (so its peak resident memory is its own):

* **import**: a generated CoNLL file (two columns, 8-40 tokens a sentence, 11 BIO labels;
  2% of the sentences labeled, 2% partly labeled, 1% held-out with gold) read under the
  store's limits (the lead raised the upload limit first, as the app lets them) and imported;
* **train**: one training run as the Train page starts it (the app's defaults but
  ``--max-iter`` sweeps), its phases as the progress file records them (CPU seconds);
* **export**: the annotations (CoNLL) and the predictions (CoNLL and JSONL) as the Data
  page's download buttons build them, with their sizes;
* **team**: 3 people's votes on 3.5% of the sentences (255k votes at 100,000), and
  ``store.reports.team`` (first and again) beside the reference over one dict per vote;
* **pages**: ``streamlit.testing.v1.AppTest`` opens each page (first run) and reruns it,
  then times ``--clicks`` label clicks and Next on the Annotate page (p50/p95, a full
  script run each, AppTest's own overhead included: upper bounds of the server time).

Store size after each step. The growth exponent of a figure between two sizes is
``log(f2 / f1) / log(n2 / n1)`` (1 = linear).  Written to ``--out`` (default
``bench/results``) as ``app_scale.md`` / ``.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
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

from bench.app_latency import LABELS, POS  # noqa: E402  (the same synthetic project)
from bench.common import (  # noqa: E402
    git_commit,
    header_lines,
    in_fresh_process,
    machine_info,
    now_iso,
    write_results,
)

PAGES = ("project", "annotate", "train", "confidence", "data", "team")


def make_corpus(folder: Path, n: int, seed: int = 0) -> tuple[Path, Path]:
    """``train.conll`` (n sentences: 2% labeled, 2% partly) and ``heldout.conll`` (1% of n,
    labeled: gold) in ``folder``."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(20_000)]

    def write(path: Path, count: int, full_every: int, part_every: int) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            for k in range(count):
                m = int(rng.integers(8, 41))
                words = rng.integers(len(vocab), size=m)
                tags = rng.integers(len(POS), size=m)
                labs = rng.integers(len(LABELS), size=m)
                full = full_every and k % full_every == 0
                part = part_every and k % part_every == 1
                for t in range(m):
                    lab = LABELS[labs[t]] if full or (part and t % 2 == 0) else "_"
                    fh.write(f"{vocab[words[t]]}\t{POS[tags[t]]}\t{lab}\n")
                fh.write("\n")

    train, held = folder / "train.conll", folder / "heldout.conll"
    write(train, n, 50, 50)
    write(held, max(10, n // 100), 1, 0)
    return train, held


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Clock:
    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def _env(job: dict) -> None:
    os.environ["GPSL_DB"] = job["db"]
    os.environ["GPSL_MODELS"] = job["models"]
    os.environ.setdefault("GPSL_ANNOTATOR", "bench")


def store_size(store) -> int:
    """Bytes of the store (the SQLite file and its WAL; PostgreSQL's database size)."""
    from sqlalchemy import text

    if store.path is not None:
        return sum(p.stat().st_size for p in store.path.parent.glob(store.path.name + "*"))
    return int(store.db.read(lambda c: c.execute(text(
        "SELECT pg_database_size(current_database())")).scalar()))


def phase_import(job: dict) -> dict:
    from gpsl.annotation import Store

    _env(job)
    store = Store(job["db"])
    store.set_store_limits(upload_mb=200)  # the lead raises the limit (the file is > 20 MB)
    with _Clock() as c:
        pid = store.create_project("scale", LABELS, "", [-1, 1])
        data = Path(job["train"]).read_bytes()
        n = store.import_sentences(pid, store.open_upload(data, "train.conll", "conll"),
                                   doc="train.conll")  # streamed, as the Data page does
        del data
        held = store.open_upload(Path(job["heldout"]).read_bytes(), "heldout.conll", "conll")
        store.import_sentences(pid, held, split="heldout", doc="heldout.conll")
    return {"pid": pid, "sentences": n, "wall_s": c.wall, "cpu_s": c.cpu,
            "peak_mb": _peak_mb(), "file_mb": Path(job["train"]).stat().st_size / 2 ** 20,
            "store_mb": store_size(store) / 2 ** 20}


def phase_train(job: dict) -> dict:
    from gpsl.annotation import Store
    from gpsl.annotation.training import jobs, pipeline

    _env(job)
    store = Store(job["db"])
    with _Clock() as c:
        v = jobs.train_now(store.home, job["pid"], pipeline.TrainConfig(max_iter=job["max_iter"]))
    prog = pipeline.read_progress(store.models_root, job["pid"], v["id"]) or {}
    phases = {p["name"]: round(p["cpu"], 2) for p in prog.get("phases", [])}
    return {"status": v["status"], "error": v["error"], "version": v["id"], "wall_s": c.wall,
            "cpu_s": c.cpu, "phases_cpu_s": phases, "peak_mb": _peak_mb(),
            "store_mb": store_size(store) / 2 ** 20}


def phase_export(job: dict) -> dict:
    from gpsl.annotation import Store

    _env(job)
    store = Store(job["db"])
    out = {}
    vid = store.active_model(job["pid"])["id"]
    for name, build in (
            ("annotations conll", lambda: store.annotations_file(job["pid"], "conll", None)),
            ("predictions conll", lambda: store.predictions_file(job["pid"], vid, "conll")),
            ("predictions jsonl", lambda: store.predictions_file(job["pid"], vid, "jsonl"))):
        with _Clock() as c:
            f = build()
            size = f.seek(0, 2)
            f.close()
        out[name] = {"wall_s": c.wall, "cpu_s": c.cpu, "mb": size / 2 ** 20}
    out["peak_mb"] = _peak_mb()
    return out


#: the team's votes: 3 people vote on every token of this share of the sentences (255k
#: votes at 100,000 sentences, as in issue 37)
TEAM = ("ann", "ben", "cat")
TEAM_SHARE = 0.0354


def phase_team(job: dict) -> dict:
    """3 people's votes on every token of the first ``TEAM_SHARE`` of the sentences, each
    with its history row a few seconds after the person's previous one (written directly;
    the disputed tokens derived again by the project's rule); then ``store.reports.team``
    timed twice (first: computed; again: no vote changed) beside the reference over one
    dict per vote (``team_votes``, ``agreement``, ``annotator_stats``, ``conflicts``)."""
    from sqlalchemy import text

    from gpsl.annotation import Store
    from gpsl.annotation.labeling import label_writes

    _env(job)
    store = Store(job["db"])
    pid = job["pid"]
    rng = np.random.default_rng(2)
    k = max(1, round(TEAM_SHARE * job["n"]))
    rows, hist = [], []
    clock = {who: 1_767_225_600.0 for who in TEAM}  # 2026-01-01, each person's time
    for s in store.get_sentences(pid, split="train", limit=k):
        for t in range(len(s["tokens"])):
            first = LABELS[int(rng.integers(len(LABELS)))]
            for who in TEAM:
                lab = first if rng.random() < 0.8 else LABELS[int(rng.integers(len(LABELS)))]
                clock[who] += float(rng.uniform(2, 6)) + (1200 if rng.random() < 0.002 else 0)
                at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(clock[who])) + ".000+00:00"
                rows.append({"s": s["id"], "t": t, "a": who, "l": lab, "at": at})
                hist.append({"p": pid, "s": s["id"], "t": t, "l": lab, "a": who, "at": at})

    def tx(conn):
        conn.execute(text("INSERT INTO votes (sentence_id, token_index, annotator, label,"
                          " source, updated_at) VALUES (:s, :t, :a, :l, 'human', :at)"), rows)
        conn.execute(text(
            "INSERT INTO annotation_history (project_id, sentence_id, token_index, old_label,"
            " new_label, source, annotator, at, action) VALUES (:p, :s, :t, NULL, :l,"
            " 'human', :a, :at, 'set')"), hist)
        label_writes.rederive(conn, pid)

    with _Clock() as w:
        store.db.write(tx)
        store.db.analyze()  # as autovacuum would have: a team's votes come over days
    with _Clock() as first:
        team = store.reports.team(pid)
    with _Clock() as again:
        store.reports.team(pid)
    with _Clock() as ref:
        cast = store.team_votes(pid)
        figures = store.agreement(pid, cast)
        store.annotator_stats(pid, cast, figures)
        store.conflicts(pid, cast)
    return {"votes": len(rows), "sentences": k, "conflicts": len(team.conflicts),
            "write_cpu_s": w.cpu, "team_s": first.wall, "team_cpu_s": first.cpu,
            "team_again_s": again.wall, "team_again_cpu_s": again.cpu,
            "reference_s": ref.wall, "reference_cpu_s": ref.cpu, "peak_mb": _peak_mb(),
            "store_mb": store_size(store) / 2 ** 20}


def _ms(samples: list[float]) -> dict:
    ms = sorted(1000 * s for s in samples)
    if not ms:
        return {"n": 0}
    return {"n": len(ms), "p50": round(statistics.median(ms), 1),
            "p95": round(ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))], 1)}


def phase_pages(job: dict) -> dict:
    from streamlit.testing.v1 import AppTest

    from gpsl.annotation import Store

    _env(job)
    store = Store(job["db"])
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    with _Clock() as c:
        at.run()
    pages = {"app": {"open_s": c.wall, "open_cpu_s": c.cpu}}
    for page in PAGES:
        with _Clock() as c:
            at.switch_page(f"pages/{page}.py").run()
        with _Clock() as r:
            at.run()
        pages[page] = {"open_s": c.wall, "open_cpu_s": c.cpu, "rerun_s": r.wall,
                       "rerun_cpu_s": r.cpu,
                       "error": str(at.exception[0].message) if at.exception else None}
    return {"pages": pages, **_clicks(at, store, job), "peak_mb": _peak_mb()}


class _Statements:
    """The SQL statements a block runs (SQLAlchemy's ``before_cursor_execute``), the time
    spent in them (after - before: the database's work and the round trips; the driver's
    part included) and the transactions committed (on PostgreSQL, the write transactions:
    reads run in autocommit; each adds a BEGIN and a COMMIT round trip)."""

    def __init__(self):
        self.n = self.commits = 0
        self.seconds = 0.0

    def _before(self, conn, cursor, statement, params, context, executemany):
        self.n += 1
        conn.info["bench_t0"] = time.perf_counter()

    def _after(self, conn, cursor, statement, params, context, executemany):
        self.seconds += time.perf_counter() - conn.info.pop("bench_t0", time.perf_counter())

    def _commit(self, conn):
        self.commits += 1

    def __enter__(self):
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        self.n = self.commits = 0
        self.seconds = 0.0
        event.listen(Engine, "before_cursor_execute", self._before)
        event.listen(Engine, "after_cursor_execute", self._after)
        event.listen(Engine, "commit", self._commit)
        return self

    def __exit__(self, *exc):
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        event.remove(Engine, "before_cursor_execute", self._before)
        event.remove(Engine, "after_cursor_execute", self._after)
        event.remove(Engine, "commit", self._commit)


def _clicks(at, store, job: dict) -> dict:
    """``job['clicks']`` label clicks and the Nexts between them on the Annotate page of
    ``at`` (p50/p95 wall and CPU ms, a full script run each; the SQL statements of each,
    the time in them and the transactions committed; ``samples``: every figure)."""
    at.switch_page("pages/annotate.py").run()
    state_key = f"annotate_{job['pid']}"
    samples: dict[str, list[float]] = {k: [] for k in (
        "label", "label_cpu", "label_statements", "label_sql", "label_commits",
        "next", "next_cpu", "next_statements", "next_sql", "next_commits")}
    rng = np.random.default_rng(job.get("seed", 1))

    def timed(kind: str, element) -> None:
        with _Statements() as sql:
            start, cpu = time.perf_counter(), time.process_time()
            element.run()
            samples[kind].append(time.perf_counter() - start)
            samples[kind + "_cpu"].append(time.process_time() - cpu)
        samples[kind + "_statements"].append(sql.n)
        samples[kind + "_sql"].append(sql.seconds)
        samples[kind + "_commits"].append(sql.commits)

    while len(samples["label"]) < job["clicks"] and not at.exception:
        sid = at.session_state[state_key]["current"]
        n = len(store.get_sentence(sid)["tokens"])
        for t in range(0, n, max(1, n // 3)):
            if len(samples["label"]) >= job["clicks"]:
                break
            at.button(key=f"tok_{t}").click().run()
            k = int(rng.integers(9))
            timed("label", at.button(key=f"lab_{k}").click())
        timed("next", at.button(key="next").click())
    return {**_summary(samples), "samples": samples,
            "click_error": str(at.exception[0].message) if at.exception else None}


def _summary(samples: dict[str, list[float]]) -> dict:
    """p50/p95 of :func:`_clicks`' samples (ms; statements and commits as counts)."""
    out = {}
    for kind, name in (("label", "label_click"), ("next", "next")):
        out[f"{name}_ms"] = _ms(samples[kind])
        out[f"{name}_cpu_ms"] = _ms(samples[kind + "_cpu"])
        out[f"{name}_sql_ms"] = _ms(samples[kind + "_sql"])
        for what in ("statements", "commits"):
            got = samples[kind + "_" + what]
            out[f"{name}_{what}"] = {"min": min(got), "median": statistics.median(got),
                                     "max": max(got)} if got else {}
    return out


def phase_clicks(job: dict) -> dict:
    """Only the label clicks and Nexts of :func:`phase_pages`, on an existing store (the
    app opened on its Annotate page; ``--clicks-on``)."""
    from streamlit.testing.v1 import AppTest

    from gpsl.annotation import Store

    _env(job)
    store = Store(job["db"])  # an older store is migrated here, before the clock
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.run()
    return {**_clicks(at, store, job), "peak_mb": _peak_mb()}


def run_one(n: int, backend: str, args, work: Path) -> dict:
    folder = work / f"{backend}-{n}"
    folder.mkdir(parents=True)
    train, held = make_corpus(folder, n)
    server = None
    if backend == "postgresql":
        from bench.postgres import TempPostgres

        server = TempPostgres(fsync=True).start()
        db = server.new_database("scale")
    else:
        db = str(folder / "store.sqlite3")
    job = {"db": db, "models": str(folder / "models"), "train": str(train),
           "heldout": str(held), "max_iter": args.max_iter, "clicks": args.clicks}
    try:
        out = {"import": in_fresh_process(phase_import, job)}
        job["pid"] = out["import"]["pid"]
        out["train"] = in_fresh_process(phase_train, job)
        out["export"] = in_fresh_process(phase_export, job)
        out["team"] = in_fresh_process(phase_team, {**job, "n": n})
        out["app"] = in_fresh_process(phase_pages, job)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return out


def exponent(a: float | None, b: float | None, n1: int, n2: int) -> float | None:
    if not a or not b or a <= 0 or b <= 0:
        return None
    return math.log(b / a) / math.log(n2 / n1)


def rows_of(r: dict) -> dict[str, float | None]:
    """The figures of one run by name (seconds are CPU seconds where marked)."""
    out = {"import CPU s": r["import"]["cpu_s"], "import peak MB": r["import"]["peak_mb"],
           "store after import MB": r["import"]["store_mb"],
           "train CPU s": r["train"]["cpu_s"], "train peak MB": r["train"]["peak_mb"],
           "store after training MB": r["train"]["store_mb"]}
    for phase, cpu in r["train"]["phases_cpu_s"].items():
        out[f"train: {phase} CPU s"] = cpu
    for name, e in r["export"].items():
        if isinstance(e, dict):
            out[f"export {name} CPU s"] = e["cpu_s"]
            out[f"export {name} MB"] = e["mb"]
    out["export peak MB"] = r["export"]["peak_mb"]
    if "team" in r:
        t = r["team"]
        out["team votes (3 people)"] = t["votes"]
        out["reports.team first CPU s"] = t["team_cpu_s"]
        out["reports.team again CPU s"] = t["team_again_cpu_s"]
        out["reference (per-vote dicts) CPU s"] = t["reference_cpu_s"]
    for page, p in r["app"]["pages"].items():
        out[f"{page}: open s"] = p["open_s"]
        out[f"{page}: open CPU s"] = p["open_cpu_s"]
        if "rerun_s" in p:
            out[f"{page}: rerun s"] = p["rerun_s"]
            out[f"{page}: rerun CPU s"] = p["rerun_cpu_s"]
    for what in ("label_click_ms", "next_ms", "label_click_cpu_ms", "next_cpu_ms"):
        for q in ("p50", "p95"):
            out[f"{what[:-3].replace('_', ' ')} {q} ms"] = r["app"].get(what, {}).get(q)
    out["AppTest peak MB"] = r["app"]["peak_mb"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--backend", nargs="+", choices=("sqlite", "postgresql"),
                        default=["sqlite", "postgresql"])
    parser.add_argument("--max-iter", type=int, default=10)
    parser.add_argument("--clicks", type=int, default=20)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--stem", default="app_scale")
    parser.add_argument("--render", default=None, metavar="JSON",
                        help="only write the table again from a result file of this bench")
    parser.add_argument("--clicks-on", default=None, metavar="DB",
                        help="only time --clicks label clicks and Next on this existing store"
                             " (its first project, models in --models); prints JSON")
    parser.add_argument("--models", default=None, help="the model folder of --clicks-on")
    args = parser.parse_args(argv)
    if args.clicks_on:
        from gpsl.annotation import Store

        pid = Store(args.clicks_on).list_projects()[0]["id"]
        job = {"db": args.clicks_on, "models": args.models, "pid": pid, "clicks": args.clicks}
        print(json.dumps({"load_before": os.getloadavg(),
                          **in_fresh_process(phase_clicks, job),
                          "load_after": os.getloadavg()}, default=str))
        return 0
    if args.render:
        old = json.loads(Path(args.render).read_text(encoding="utf-8"))
        run = parser.parse_args(shlex.split(old["command"])[3:])  # the run's own settings
        run.out, run.stem = args.out, args.stem
        report(old["results"], run, old["command"], old["machine"], old["date"])
        return 0
    command = " ".join(shlex.quote(a) for a in ["python", "-m", "bench.app_scale",
                                               *(argv if argv is not None else sys.argv[1:])])
    work = Path(tempfile.mkdtemp(prefix="gpsl-scale-"))
    results: dict = {}
    try:
        for backend in args.backend:
            for n in args.sentences:
                print(f"{backend} {n:,} sentences ...", flush=True)
                results[f"{backend} {n}"] = run_one(n, backend, args, work)
                report(results, args, command)  # what is measured so far
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def report(results: dict, args, command: str, machine: dict | None = None,
           date: str | None = None) -> None:
    """Print and write the table of ``results`` (the runs so far)."""
    keys = list(results)
    table = {k: rows_of(v) for k, v in results.items()}
    names = list(next(iter(table.values())))
    head = "| figure | " + " | ".join(keys) + " | growth exponent |"
    lines = [head, "|---|" + "---:|" * (len(keys) + 1)]
    sizes = sorted({int(k.split()[1]) for k in keys})
    backends = [b for b in args.backend if any(k.startswith(b + " ") for k in keys)]
    for name in names:
        cells = [table[k].get(name) for k in keys]
        exps = []
        for backend in backends:
            if len(sizes) >= 2 and all(f"{backend} {n}" in table for n in (sizes[0], sizes[-1])):
                e = exponent(table[f"{backend} {sizes[0]}"].get(name),
                             table[f"{backend} {sizes[-1]}"].get(name), sizes[0], sizes[-1])
                exps.append("–" if e is None else f"{e:.2f}")
        lines.append(f"| {name} | " + " | ".join("–" if v is None else f"{v:,.3g}"
                                                   for v in cells)
                     + f" | {' / '.join(exps) or '–'} |")
    errors = [f"{k}: {where} {e}" for k, v in results.items() for where, e in
              [("training", v["train"]["error"]), ("clicks", v["app"]["click_error"])]
              + [(p, q["error"]) for p, q in v["app"]["pages"].items() if q.get("error")] if e]
    if machine is None:
        machine = machine_info()
        machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    date = date or now_iso()
    intro = (f"Sizes {', '.join(f'{n:,}' for n in sizes)} sentences; back ends "
             f"{', '.join(backends)}; training with max_iter={args.max_iter}; "
             f"{args.clicks} label clicks. Seconds are wall seconds unless marked CPU; the "
             "growth exponent is per back end, between the smallest and largest size. Load "
             f"average at the end: {machine['load_average_at_end']}.")
    body = [intro, "", *lines, ""] + ([f"Errors: {'; '.join(errors)}", ""] if errors else [])
    print(*body, f"command: {command}", sep="\n")
    md = "\n".join(header_lines("App at scale (issue 37)", date, machine, git_commit(),
                                command) + body)
    write_results(Path(args.out), args.stem, md, {
        "command": command, "date": date, "machine": machine, "git": git_commit(),
        "results": results, "table": table, "errors": errors})
    print(f"wrote {Path(args.out) / args.stem}.md and .json")


if __name__ == "__main__":
    sys.exit(main())
