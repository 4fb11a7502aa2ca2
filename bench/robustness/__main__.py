"""``python -m bench.robustness [--long] [--out DIR] [--seed N]``: the robustness report.

Runs the three parts of issue #7 and writes ``robustness.json`` and ``robustness.md`` into
``DIR`` (default ``bench/results``; ``robustness_long.*`` with ``--long``):

* **hostile inputs** (:mod:`bench.robustness.inputs`, :mod:`bench.robustness.hostile`):
  generated malformed files of every import format (CoNLL, JSONL, text, CoNLL-2003, doccano,
  Label Studio, Prodigy; parsed and imported into a store), templates, offsets, model
  directories and command lines of every command; each must be accepted or rejected with a
  one-line error: never a traceback, a multi-line message or a hang (issue #32);
* **concurrent annotators** (:mod:`bench.robustness.concurrency`): 4 processes and 4
  threads writing 500 labels each to one store, plus same-token races;
* **crashes** (:mod:`bench.robustness.crashes`): training workers and label writers killed
  with SIGKILL, then the store reopened and checked;
* **PostgreSQL**: the concurrency trials (16 writers x 1,000 label writes) and the label
  writers killed with SIGKILL again on a temporary PostgreSQL server (:mod:`bench.postgres`),
  shown next to SQLite in one table.

Default sizes (about 2,000 inputs: 140 per input kind, 70 per command, 4 writers x 500
labels per mode, 6 + 6 crash trials) finish in a few minutes; ``--long`` runs the full sizes
(about 4,000 inputs: 285 per kind, three 4 x 500 seeds per mode plus 8 x 250, 20 + 20 crash
trials).  The exit status is
1 when any trial lost a write, corrupted a store or produced a traceback.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench import common

SIZES = {
    "default": {"inputs_per_kind": 140, "concurrency": [(4, 500, 0), (16, 1000, 0)],
                "race_rounds": 20, "crash_training": 6, "crash_labels": 6,
                "postgres_concurrency": [(16, 1000, 0)], "postgres_crash_labels": 6},
    "long": {"inputs_per_kind": 285, "concurrency": [(4, 500, 0), (4, 500, 1), (4, 500, 2),
                                             (8, 250, 3), (16, 1000, 0)],
             "race_rounds": 40, "crash_training": 20, "crash_labels": 20,
             "postgres_concurrency": [(16, 1000, 0), (4, 500, 1)],
             "postgres_crash_labels": 20},
}


def run_inputs(n: int, seed: int) -> dict:
    try:
        from bench.robustness import inputs
    except ImportError as exc:
        return {"available": False, "error": f"bench.robustness.inputs: {exc}"}
    started = time.perf_counter()
    try:
        kinds = inputs.run_input_trials(n_examples=n, seed=seed)
    except Exception:
        return {"available": True, "error": traceback.format_exc()[-800:], "kinds": {},
                "tried": 0, "accepted": 0, "rejected_cleanly": 0, "tracebacks": 1}
    total = {key: sum(int(k.get(key, 0)) for k in kinds.values())
             for key in ("tried", "accepted", "rejected_cleanly", "tracebacks")}
    return {"available": True, "kinds": kinds, **total,
            "seconds": round(time.perf_counter() - started, 1)}


def run_concurrency(plan, race_rounds: int, workdir: Path) -> list[dict]:
    from bench.robustness.concurrency import run_concurrency_trial

    out = []
    for mode in ("process", "thread"):
        for writers, per, seed in plan:
            path = workdir / f"concurrency-{mode}-{writers}x{per}-{seed}.sqlite3"
            try:
                out.append(run_concurrency_trial(path, writers=writers, labels_per_writer=per,
                                                 mode=mode, seed=seed,
                                                 race_rounds=race_rounds))
            except Exception:
                out.append({"mode": mode, "writers": writers, "labels_per_writer": per,
                            "seed": seed, "writes_attempted": writers * per,
                            "writes_found": 0, "lost_writes": writers * per, "errors": 1,
                            "locked_errors": 0, "tracebacks": 1, "integrity_check": "unknown",
                            "traceback": traceback.format_exc()[-800:]})
    return out


def run_postgres(plan, race_rounds: int, n_label_crashes: int, seed: int,
                 workdir: Path) -> dict:
    """The concurrency and label-crash trials on a temporary PostgreSQL server (Debian's
    postgresql, fsync on), one new database per trial."""
    from bench.postgres import PostgresUnavailable, TempPostgres
    from bench.robustness.concurrency import run_concurrency_trial
    from bench.robustness.crashes import run_label_crash_trials

    try:
        server = TempPostgres(fsync=True).start()
    except PostgresUnavailable as exc:
        return {"available": False, "error": str(exc)}
    try:
        conc = []
        for mode in ("process", "thread"):
            for writers, per, s in plan:
                try:
                    conc.append(run_concurrency_trial(
                        server.new_database(), writers=writers, labels_per_writer=per,
                        mode=mode, seed=s, race_rounds=race_rounds, workdir=workdir / "pg"))
                except Exception:
                    conc.append({"mode": mode, "writers": writers, "labels_per_writer": per,
                                 "seed": s, "writes_attempted": writers * per,
                                 "writes_found": 0, "lost_writes": writers * per,
                                 "errors": 1, "locked_errors": 0, "tracebacks": 1,
                                 "integrity_check": "unknown",
                                 "traceback": traceback.format_exc()[-800:]})
        started = time.perf_counter()
        try:
            crashes = run_label_crash_trials(n_label_crashes, workdir / "pg", seed,
                                             new_store=lambda k: server.new_database())
            crashes["seconds"] = round(time.perf_counter() - started, 1)
        except Exception:
            crashes = {"trials": n_label_crashes, "intact": 0, "corrupted": 0,
                       "lost_labels": 0, "tracebacks": 1, "writes_reported": 0,
                       "traceback": traceback.format_exc()[-800:]}
        return {"available": True, "server": f"PostgreSQL ({server.bindir.parent.name})",
                "concurrency": conc, "label_crashes": crashes}
    finally:
        server.stop()


def run_crashes(n_training: int, n_labels: int, seed: int, workdir: Path) -> dict:
    from bench.robustness.crashes import run_crash_trials

    started = time.perf_counter()
    try:
        out = run_crash_trials(n_training, seed=seed, workdir=workdir / "crashes",
                               label_trials=n_labels)
    except Exception:
        return {"trials": n_training + n_labels, "intact": 0, "corrupted": 0,
                "lost_labels": 0, "tracebacks": 1, "traceback": traceback.format_exc()[-800:]}
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


def _column(conc: list[dict], label_crashes: dict) -> dict:
    """The figures of one back end (a column of the SQLite / PostgreSQL table)."""
    return {
        "writers": max((c["writers"] for c in conc), default=0),
        "writes_attempted": sum(c["writes_attempted"] for c in conc),
        "writes_found": sum(c.get("writes_found", 0) for c in conc),
        "lost_writes": sum(c["lost_writes"] for c in conc),
        "write_errors": sum(c.get("errors", 0) for c in conc),
        "locked_errors": sum(c.get("locked_errors", 0) for c in conc),
        "race_rounds": sum(c.get("race_rounds", 0) for c in conc),
        "race_rounds_both_votes_kept": sum(c.get("race_both_votes_kept", 0) for c in conc),
        "stores_corrupted": sum(c.get("integrity_check") != "ok" for c in conc),
        "label_crash_trials": label_crashes.get("trials", 0),
        "label_crash_trials_intact": label_crashes.get("intact", 0),
        "label_writes_reported": label_crashes.get("writes_reported", 0),
        "lost_labels_after_kill": label_crashes.get("lost_labels", 0),
        "tracebacks": sum(c.get("tracebacks", 0) for c in conc)
        + label_crashes.get("tracebacks", 0),
    }


def _failures(inputs: dict, kind: str) -> int:
    return sum(int((k.get("failure_types") or {}).get(kind, 0))
               for k in (inputs.get("kinds") or {}).values())


def summarize(inputs: dict, conc: list[dict], crashes: dict, postgres: dict | None = None
              ) -> dict:
    postgres = postgres or {"available": False, "error": "not run"}
    s = {
        "inputs_tried": inputs.get("tried", 0),
        "inputs_accepted": inputs.get("accepted", 0),
        "inputs_rejected_cleanly": inputs.get("rejected_cleanly", 0),
        "input_tracebacks": inputs.get("tracebacks", 0),
        "input_hangs": _failures(inputs, "hang"),
        "input_multi_line": _failures(inputs, "bad_message"),
        "input_exceptions": _failures(inputs, "exception"),
        "writes_attempted": sum(c["writes_attempted"] for c in conc),
        "writes_found": sum(c.get("writes_found", 0) for c in conc),
        "lost_writes": sum(c["lost_writes"] for c in conc),
        "write_errors": sum(c.get("errors", 0) for c in conc),
        "locked_errors": sum(c.get("locked_errors", 0) for c in conc),
        "race_rounds": sum(c.get("race_rounds", 0) for c in conc),
        "race_rounds_both_votes_kept": sum(c.get("race_both_votes_kept", 0) for c in conc),
        "race_rounds_both_in_history": sum(c.get("race_both_in_history", 0) for c in conc),
        "concurrency_stores_corrupted": sum(c.get("integrity_check") != "ok" for c in conc),
        "crash_trials": crashes.get("trials", 0),
        "crash_trials_intact": crashes.get("intact", 0),
        "crash_stores_corrupted": crashes.get("corrupted", 0),
        "lost_labels_after_kill": crashes.get("lost_labels", 0),
        "sqlite": _column(conc, crashes.get("labels", {})),
        "postgresql": _column(postgres["concurrency"], postgres["label_crashes"])
        if postgres.get("available") else None,
        "postgresql_error": None if postgres.get("available") else postgres.get("error"),
    }
    s["tracebacks"] = (s["input_tracebacks"] + sum(c.get("tracebacks", 0) for c in conc)
                       + crashes.get("tracebacks", 0))
    s["ok"] = bool(
        inputs.get("available") and not inputs.get("error")
        and s["inputs_tried"] == s["inputs_accepted"] + s["inputs_rejected_cleanly"]
        and s["tracebacks"] == 0 and s["lost_writes"] == 0 and s["write_errors"] == 0
        and s["race_rounds_both_votes_kept"] == s["race_rounds"]
        and s["race_rounds_both_in_history"] == s["race_rounds"]
        and s["concurrency_stores_corrupted"] == 0
        and s["crash_trials_intact"] == s["crash_trials"] and s["crash_stores_corrupted"] == 0
        and s["lost_labels_after_kill"] == 0
        and (s["postgresql"] is None or (
            s["postgresql"]["lost_writes"] == 0 and s["postgresql"]["write_errors"] == 0
            and s["postgresql"]["tracebacks"] == 0 and s["postgresql"]["stores_corrupted"] == 0
            and s["postgresql"]["lost_labels_after_kill"] == 0
            and s["postgresql"]["label_crash_trials_intact"]
            == s["postgresql"]["label_crash_trials"])))
    return s


def markdown(report: dict) -> str:
    s = report["summary"]
    lines = common.header_lines("Robustness (issues #7, #32)", report["date"], report["machine"],
                                report["git"], report["command"])
    lines += [
        ("Sizes: the full ones (`--long`). Result: " if report["size"] == "long" else
         "Sizes: default (quick; `--long` for the full sizes). Result: ")
        + ("**all checks passed**" if s["ok"] else "**CHECKS FAILED**") + ".",
        "",
        "| figure | value |",
        "|---|---:|",
        f"| inputs tried | {s['inputs_tried']:,} |",
        f"| accepted | {s['inputs_accepted']:,} |",
        f"| rejected cleanly (one-line error) | {s['inputs_rejected_cleanly']:,} |",
        f"| uncaught exceptions / multi-line errors / hangs | {s['input_exceptions']} / "
        f"{s['input_multi_line']} / {s['input_hangs']} |",
        f"| tracebacks (all parts) | {s['tracebacks']} |",
        f"| label writes attempted (concurrent) | {s['writes_attempted']:,} |",
        f"| label writes found in the store | {s['writes_found']:,} |",
        f"| lost writes | {s['lost_writes']} |",
        f"| errors seen by writers (\"database is locked\") | {s['write_errors']} "
        f"({s['locked_errors']}) |",
        f"| same-token races: both votes kept, both in history | "
        f"{s['race_rounds_both_votes_kept']} / {s['race_rounds']}, "
        f"{s['race_rounds_both_in_history']} / {s['race_rounds']} |",
        f"| crash trials (SIGKILL) | {s['crash_trials']} |",
        f"| trials with data intact | {s['crash_trials_intact']} |",
        f"| corrupted stores (integrity_check) | "
        f"{s['crash_stores_corrupted'] + s['concurrency_stores_corrupted']} |",
        f"| labels lost after a kill | {s['lost_labels_after_kill']} |",
        "",
    ]
    lines += ["## SQLite and PostgreSQL", "",
              "The same trials on both back ends: concurrent label writers (processes and "
              "threads, same-token races) and label writers killed with SIGKILL.", ""]
    pg = s.get("postgresql")
    if pg is None:
        lines += [f"PostgreSQL not run: {s.get('postgresql_error')}", ""]
    sq = s["sqlite"]
    rows = [("most writers in one trial", "writers"),
            ("label writes attempted", "writes_attempted"),
            ("label writes found", "writes_found"), ("lost writes", "lost_writes"),
            ("errors seen by writers", "write_errors"),
            ("\"locked\" errors", "locked_errors"),
            ("same-token races: both votes kept", "race_rounds_both_votes_kept"),
            ("corrupted stores", "stores_corrupted"),
            ("label writers SIGKILLed", "label_crash_trials"),
            ("... stores intact", "label_crash_trials_intact"),
            ("... writes reported before the kills", "label_writes_reported"),
            ("... committed labels lost", "lost_labels_after_kill"),
            ("tracebacks", "tracebacks")]
    lines += ["| figure | SQLite | PostgreSQL |", "|---|---:|---:|"]
    for name, key in rows:
        lines.append(f"| {name} | {sq.get(key, 0):,} | "
                     + (f"{pg.get(key, 0):,}" if pg is not None else "not run") + " |")
    lines.append("")
    if report.get("postgresql", {}).get("concurrency"):
        lines += ["PostgreSQL trials:", "",
                  "| mode | writers x labels | seconds | writes/s | attempted | found | lost | "
                  "errors | races ok | integrity |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
        for c in report["postgresql"]["concurrency"]:
            lines.append(
                f"| {c['mode']} | {c['writers']} x {c['labels_per_writer']} | "
                f"{c.get('seconds', '–')} | {c.get('writes_per_second', '–')} | "
                f"{c['writes_attempted']} | {c.get('writes_found', 0)} | {c['lost_writes']} | "
                f"{c.get('errors', 0)} | {c.get('race_both_votes_kept', 0)}/"
                f"{c.get('race_rounds', 0)} | {c.get('integrity_check')} |")
        lines.append("")
    inputs = report["inputs"]
    lines += ["## Hostile inputs", ""]
    if not inputs.get("available") or inputs.get("error"):
        lines += [f"Not run: {inputs.get('error')}", ""]
    else:
        lines += ["| input kind | tried | accepted | rejected cleanly | exceptions | "
                  "multi-line | hangs | other failures |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for kind, k in inputs["kinds"].items():
            types = k.get("failure_types") or {}
            other = k.get("tracebacks", 0) - sum(types.get(t, 0) for t in
                                                 ("exception", "bad_message", "hang"))
            lines.append(f"| {kind} | {k.get('tried', 0)} | {k.get('accepted', 0)} | "
                         f"{k.get('rejected_cleanly', 0)} | {types.get('exception', 0)} | "
                         f"{types.get('bad_message', 0)} | {types.get('hang', 0)} | {other} |")
        lines.append("")
        failures = [(kind, ex) for kind, k in inputs["kinds"].items()
                    for ex in (k.get("examples_of_failures") or [])[:3]]
        if failures:
            lines += ["Examples of failures:", ""]
            lines += [f"* {kind}: `{' '.join(str(ex).split())[:240]}`" for kind, ex in failures]
            lines.append("")
    if report.get("issue42"):
        from bench.robustness.issue42 import markdown_lines

        lines += markdown_lines(report["issue42"])
    lines += ["## Concurrent annotators", "",
              "Writers start together on one barrier and write to the same SQLite file (WAL); "
              "each write is checked against the history afterwards, every (token, annotator) "
              "vote against that annotator's newest history row.", "",
              "| mode | writers x labels | seconds | writes/s | attempted | found | lost | "
              "errors | races ok | integrity |",
              "|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for c in report["concurrency"]:
        lines.append(
            f"| {c['mode']} | {c['writers']} x {c['labels_per_writer']} | "
            f"{c.get('seconds', '–')} | {c.get('writes_per_second', '–')} | "
            f"{c['writes_attempted']} | {c.get('writes_found', 0)} | {c['lost_writes']} | "
            f"{c.get('errors', 0)} | {c.get('race_both_votes_kept', 0)}/"
            f"{c.get('race_rounds', 0)} | {c.get('integrity_check')} |")
    crashes = report["crashes"]
    lines += ["", "## Crashes", ""]
    if "training" in crashes:
        t, lab = crashes["training"], crashes["labels"]
        phases = ", ".join(f"{k} {v}" for k, v in sorted(t["phases_at_kill"].items()))
        lines += [
            "| trial kind | trials | intact | corrupted | notes |",
            "|---|---:|---:|---:|---|",
            f"| training worker SIGKILLed | {t['trials']} | {t['intact']} | {t['corrupted']} | "
            f"phase at kill: {phases}; previous model kept active {t['previous_model_kept']}, "
            f"finished before the kill {t['finished_before_kill']}; an uninterrupted run "
            f"takes {t['worker_run_seconds']} s |",
            f"| label writer SIGKILLed | {lab['trials']} | {lab['intact']} | "
            f"{lab['corrupted']} | {lab['writes_reported']:,} writes reported before the "
            f"kills, {lab['lost_labels']} lost |",
            "",
        ]
    else:
        lines += [f"Failed: {crashes.get('traceback')}", ""]
    lines += [
        "A training trial is intact when the reopened store passes `PRAGMA integrity_check`, "
        "the killed version is marked failed, the previous model is still active and loads, "
        "its predictions cover every sentence, no unfinished version has a model path and "
        "no staging or temporary model directory survives `gpsl.annotation.training.jobs.recover` "
        "(run by the app on start). A label trial is intact when every write reported after "
        "`set_label` returned is in the history and every vote is its annotator's newest.",
        "",
    ]
    return "\n".join(lines)


def _write_issue42(report: dict, out: Path) -> int:
    from bench.robustness.issue42 import markdown_lines

    lines = common.header_lines("Robustness: the cases of issue 42", report["date"],
                                report["machine"], report["git"], report["command"])
    (out / "robustness_issue42.json").write_text(json.dumps(common.jsonable(report), indent=1),
                                                 encoding="utf-8")
    (out / "robustness_issue42.md").write_text("\n".join(lines + markdown_lines(
        report["issue42"])), encoding="utf-8")
    c = report["issue42"]["classes"]
    print("issue 42: " + ", ".join(f"{k} {v['ok']}/{v['cases']}" for k, v in c.items())
          + f" -> {out / 'robustness_issue42.md'}", file=sys.stderr)
    return 0 if report["issue42"]["ok"] else 1


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m bench.robustness",
                                     description="Robustness report (issue #7).")
    parser.add_argument("--long", action="store_true", help="the full sizes (slower)")
    parser.add_argument("--out", default=str(common.RESULTS_DIR), help="output directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only-issue42", action="store_true",
                        help="only the family of issue 42 (robustness_issue42.*)")
    args = parser.parse_args(argv)
    size = "long" if args.long else "default"
    sizes = SIZES[size]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    report = {
        "title": "Robustness (issues #7, #32)",
        "command": shlex.join(["python", "-m", "bench.robustness", *argv]),
        "date": common.now_iso(),
        "machine": common.machine_info(),
        "git": common.git_commit(),
        "size": size,
        "sizes": sizes,
    }
    with tempfile.TemporaryDirectory(prefix="gpsl-robustness-") as tmp:
        work = Path(tmp)
        print("issue 42 cases ...", file=sys.stderr, flush=True)
        from bench.robustness.issue42 import run_issue42

        report["issue42"] = run_issue42()
        if args.only_issue42:
            report["summary"] = {"ok": report["issue42"]["ok"]}
            return _write_issue42(report, out)
        print("hostile inputs ...", file=sys.stderr, flush=True)
        report["inputs"] = run_inputs(sizes["inputs_per_kind"], args.seed)
        print("concurrent writers ...", file=sys.stderr, flush=True)
        plan = [(w, n, s + args.seed) for w, n, s in sizes["concurrency"]]
        report["concurrency"] = run_concurrency(plan, sizes["race_rounds"], work)
        print("crash trials ...", file=sys.stderr, flush=True)
        report["crashes"] = run_crashes(sizes["crash_training"], sizes["crash_labels"],
                                        args.seed, work)
        print("PostgreSQL ...", file=sys.stderr, flush=True)
        pg_plan = [(w, n, s + args.seed) for w, n, s in sizes["postgres_concurrency"]]
        report["postgresql"] = run_postgres(pg_plan, sizes["race_rounds"],
                                            sizes["postgres_crash_labels"], args.seed, work)
    report["summary"] = summarize(report["inputs"], report["concurrency"], report["crashes"],
                                  report["postgresql"])
    report["summary"]["issue42_ok"] = report["issue42"]["ok"]
    report["summary"]["ok"] = report["summary"]["ok"] and report["issue42"]["ok"]
    report["seconds"] = round(time.perf_counter() - started, 1)
    stem = "robustness_long" if args.long else "robustness"
    (out / f"{stem}.json").write_text(json.dumps(common.jsonable(report), indent=1),
                                      encoding="utf-8")
    (out / f"{stem}.md").write_text(markdown(report), encoding="utf-8")
    s = report["summary"]
    print(f"inputs {s['inputs_tried']} tried, {s['inputs_rejected_cleanly']} rejected cleanly; "
          f"writes {s['writes_attempted']} attempted, {s['writes_found']} found, "
          f"{s['lost_writes']} lost; crash trials {s['crash_trials']}, "
          f"{s['crash_trials_intact']} intact; tracebacks {s['tracebacks']}; "
          f"{report['seconds']} s -> {out / (stem + '.md')}", file=sys.stderr)
    return 0 if s["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
