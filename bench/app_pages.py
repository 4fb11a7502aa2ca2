"""Open and rerun CPU of the app's pages on one large store, built once and reused (issue 37:
Confidence and Data open in <= 2 s and rerun in <= 0.5 s at 100,000 sentences).

    python -m bench.app_pages --db /tmp/scale/store.sqlite3 [--sentences 100000]
                              [--max-iter 5] [--reruns 5] [--out DIR]

When ``--db`` (a SQLite file, outside the checkout) does not exist it is built first as
:mod:`bench.app_scale` builds its store: the generated corpus of ``--sentences`` imported,
one training run with ``--max-iter``, then the team's 255k votes (at 100,000).  Then
``streamlit.testing.v1.AppTest`` opens app.py against it and, page by page in
:data:`bench.app_scale.PAGES` order (as ``bench.app_scale`` does, so the same caches are
warm), opens each page once and reruns it ``--reruns`` times: CPU seconds of the open and
the median and largest rerun.  Written to ``--out`` (default ``bench/results``) as
``app_pages.md`` / ``.json``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.app_scale import (  # noqa: E402
    PAGES,
    _env,
    make_corpus,
    phase_import,
    phase_team,
    phase_train,
)
from bench.common import (  # noqa: E402
    git_commit,
    header_lines,
    machine_info,
    now_iso,
    write_results,
)


def build(db: Path, n: int, max_iter: int) -> dict:
    """The store of ``bench.app_scale`` at ``n`` sentences in ``db``'s folder."""
    folder = db.parent
    folder.mkdir(parents=True, exist_ok=True)
    train, held = make_corpus(folder, n)
    job = {"db": str(db), "models": str(folder / "models"), "train": str(train),
           "heldout": str(held), "max_iter": max_iter, "clicks": 0}
    job["pid"] = phase_import(job)["pid"]
    phase_train(job)
    phase_team({**job, "n": n})
    return job


def measure(db: Path, reruns: int) -> dict:
    from streamlit.testing.v1 import AppTest

    _env({"db": str(db), "models": str(db.parent / "models")})  # as bench.app_scale's pages
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.run()
    out = {}
    for page in PAGES:
        cpu = time.process_time()
        at.switch_page(f"pages/{page}.py").run()
        opened = time.process_time() - cpu
        again = []
        for _ in range(reruns):
            cpu = time.process_time()
            at.run()
            again.append(time.process_time() - cpu)
        out[page] = {"open_cpu_s": opened, "rerun_cpu_s": again,
                     "error": str(at.exception[0].message) if at.exception else None}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="the SQLite store (built when missing)")
    parser.add_argument("--sentences", type=int, default=100_000)
    parser.add_argument("--max-iter", type=int, default=5)
    parser.add_argument("--reruns", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args(argv)
    command = " ".join(shlex.quote(a) for a in ["python", "-m", "bench.app_pages",
                                               *(argv if argv is not None else sys.argv[1:])])
    db = Path(args.db).resolve()
    if not db.exists():
        print(f"building {args.sentences:,} sentences in {db} ...", flush=True)
        build(db, args.sentences, args.max_iter)
    pages = measure(db, args.reruns)
    machine = machine_info()
    machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    lines = ["| page | open CPU s | rerun CPU s, median | rerun CPU s, largest |",
             "|---|---:|---:|---:|"]
    for page, p in pages.items():
        lines.append(f"| {page} | {p['open_cpu_s']:.3f} | "
                     f"{statistics.median(p['rerun_cpu_s']):.3f} | "
                     f"{max(p['rerun_cpu_s']):.3f} |")
    errors = [f"{page}: {p['error']}" for page, p in pages.items() if p["error"]]
    body = [f"Store {db.name} ({db.stat().st_size / 2 ** 20:,.0f} MB); {args.reruns} reruns "
            f"per page; load average at the end: {machine['load_average_at_end']}.", "",
            *lines, ""] + ([f"Errors: {'; '.join(errors)}", ""] if errors else [])
    print(*body, f"command: {command}", sep="\n")
    date = now_iso()
    md = "\n".join(header_lines("App pages on one large store (issue 37)", date, machine,
                                git_commit(), command) + body)
    write_results(Path(args.out), "app_pages", md, {
        "command": command, "date": date, "machine": machine, "git": git_commit(),
        "pages": pages, "errors": errors})
    return 0


if __name__ == "__main__":
    sys.exit(main())
