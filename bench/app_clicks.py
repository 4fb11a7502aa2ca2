"""Label clicks and Next on existing stores, back ends side by side in one run (issue 37).

    python -m bench.app_clicks --store DB MODELS [--store DB MODELS ...] [--clicks 40]
                               [--rounds 2] [--out DIR] [--stem app_clicks]

Each ``--store`` is a store (a SQLite file or a ``postgresql+psycopg://`` URL) and its model
folder, its first project trained (as :mod:`bench.app_scale` builds them).  Per round, each
store in turn gets a fresh process that opens the app in AppTest on its Annotate page and
times ``--clicks`` label clicks and the Nexts between them (:func:`bench.app_scale.
phase_clicks`: a full script run each, AppTest's own overhead included); the rounds
interleave the stores so that they meet the same load.  Per store and action: wall and
process CPU p50/p95, the SQL statements of one action and the time spent in them (the
database's work and the round trips as the client waits for them), the transactions
committed; then each store's p50/p95 against the first store's (its ratio).  The clicks
write labels: give copies.  Written to ``--out`` as ``<stem>.md`` / ``.json``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.app_scale import _summary, phase_clicks  # noqa: E402
from bench.common import (  # noqa: E402
    git_commit,
    header_lines,
    in_fresh_process,
    machine_info,
    now_iso,
    write_results,
)


def backend_of(db: str) -> str:
    return db.split(":", 1)[0].split("+")[0] if "://" in db else "sqlite"


def run(stores: list[tuple[str, str]], clicks: int, rounds: int) -> dict:
    """Every store's samples over ``rounds`` rounds (interleaved) and their summary."""
    from gpsl.annotation import Store

    names = [f"{i + 1}: {backend_of(db)}" for i, (db, _m) in enumerate(stores)]
    samples: dict[str, dict[str, list]] = {n: {} for n in names}
    loads = []
    for r in range(rounds):
        for name, (db, models) in zip(names, stores):
            pid = Store(db).list_projects()[0]["id"]
            job = {"db": db, "models": models, "pid": pid, "clicks": clicks, "seed": r + 1}
            loads.append(os.getloadavg()[0])
            got = in_fresh_process(phase_clicks, job)
            if got.get("click_error"):
                raise RuntimeError(f"{name}: {got['click_error']}")
            for k, v in got["samples"].items():
                samples[name].setdefault(k, []).extend(v)
    return {"stores": dict(zip(names, (db for db, _m in stores))),
            "summary": {n: _summary(s) for n, s in samples.items()},
            "samples": samples, "load_1min": [round(x, 2) for x in loads]}


ROWS = (("label click", "label_click"), ("Next", "next"))


def table(result: dict) -> list[str]:
    names = list(result["summary"])
    first = result["summary"][names[0]]
    lines = ["| action, figure | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for label, key in ROWS:
        for what, unit in (("ms", "wall ms"), ("cpu_ms", "process CPU ms"),
                           ("sql_ms", "in SQL ms")):
            for q in ("p50", "p95"):
                lines.append(f"| {label}: {unit} {q} | " + " | ".join(
                    f"{result['summary'][n][f'{key}_{what}'].get(q, float('nan')):.1f}"
                    for n in names) + " |")
        for what in ("statements", "commits"):
            lines.append(f"| {label}: {what} (min–max) | " + " | ".join(
                "{min}–{max}".format(**result["summary"][n][f"{key}_{what}"])
                for n in names) + " |")
        for what, unit in (("ms", "wall"), ("cpu_ms", "CPU")):
            for q in ("p50", "p95"):
                base = first[f"{key}_{what}"].get(q)
                lines.append(f"| {label}: {unit} {q} / store 1 | " + " | ".join(
                    f"{result['summary'][n][f'{key}_{what}'].get(q, 0) / base:.2f}×"
                    if base else "–" for n in names) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", nargs=2, action="append", required=True,
                        metavar=("DB", "MODELS"))
    parser.add_argument("--clicks", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--stem", default="app_clicks")
    args = parser.parse_args(argv)
    command = " ".join(shlex.quote(a) for a in ["python", "-m", "bench.app_clicks",
                                               *(argv if argv is not None else sys.argv[1:])])
    machine = machine_info()
    result = run([tuple(s) for s in args.store], args.clicks, args.rounds)
    machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    intro = (f"{args.clicks} label clicks (and the Nexts between them) per store and round, "
             f"{args.rounds} rounds taken in turn; 1-minute load average before each run: "
             f"{result['load_1min']}. Stores: "
             + "; ".join(f"{n} `{d}`" for n, d in result["stores"].items()) + ".")
    body = [intro, "", *table(result), ""]
    print(*body, f"command: {command}", sep="\n")
    date = now_iso()
    md = "\n".join(header_lines("Label click and Next per back end (issue 37)", date,
                                machine, git_commit(), command) + body)
    write_results(Path(args.out), args.stem, md, {
        "command": command, "date": date, "machine": machine, "git": git_commit(), **result})
    print(f"wrote {Path(args.out) / args.stem}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
