"""Peak memory of importing a large upload as the Data page does, before and after the
streamed import (issue 37: "Peak memory at 100k sentences <= 500 MB").

    python -m bench.import_memory [--sentences 10000 100000] [--before REF] [--out DIR]

The file: ``sample_data/make_sample.py``'s grammar (the app's sample project),
``make_corpus(seed=1, n)`` rendered as CoNLL (``render``; at 100k sentences 2.18M tokens,
26.4 MB).  Each measurement is a child process of its own that does what the Data page
does: the lead raises the store's upload limit, the page reads the uploaded bytes, runs the
summary pass (the summary and the labels not in the project) and imports into a fresh
SQLite store (a project with the label ``O``; the file's other labels added with it).  Its
peak resident set is ``VmHWM`` of ``/proc/self/status``, the high-water mark of its own
image (``ru_maxrss`` would keep the parent's resident set at the fork across ``exec``: the
parent holds the generated file).

* **before**: the code of ``--before`` (default: the merge base of HEAD and ``main``),
  extracted with ``git archive`` into a temporary folder: ``Store.parse_upload`` (every
  sentence in a list), ``summarize``, ``unknown_labels``, ``import_sentences(list)``;
* **after**: this checkout: ``Store.open_upload``
(:class:`gpsl.annotation.interchange.imports.Upload`),
  its ``summary()`` and ``unknown_labels``, ``import_sentences(upload)`` (2,000 sentences at
  a time in one transaction).

CPU seconds (user + system of the child, its imports included) are the figures to read on a
loaded machine.  Written to ``--out`` (default ``bench/results``) as ``import_memory.md`` /
``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import git_commit, header_lines, machine_info, now_iso, write_results  # noqa: E402

#: the child: ``python -c CHILD job.json`` with the gpsl to measure first on sys.path
CHILD = r'''
import json, resource, sys, time
job = json.loads(open(sys.argv[1]).read())
sys.path.insert(0, job["root"])
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def peak():  # VmHWM: this process image's own high-water mark (ru_maxrss keeps the
    # parent's resident set at the fork across exec: the parent holding the generated file)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
from gpsl.annotation import Store
import gpsl.annotation as ann
imp = getattr(ann, "interchange", ann).imports  # before the sub-packages too
out = {"gpsl": __import__("gpsl").__file__, "start_mb": peak(), "start_cpu_s": cpu()}
store = Store(job["db"])
store.set_store_limits(upload_mb=200)  # the lead raises the limit: the file is over 20 MB
pid = store.create_project("p", ["O"], "", [-1, 1])
wall = time.perf_counter()
data = open(job["file"], "rb").read()  # the uploaded bytes (UploadedFile.getvalue())
c0 = cpu()
if job["mode"] == "after":
    up = store.open_upload(data, "train.conll", "conll")
    summary = up.summary()
    new = up.unknown_labels(["O"])
    src = up
else:
    src = store.parse_upload(data, "train.conll", "conll")
    summary = imp.summarize(src)
    new = imp.unknown_labels(src, ["O"])
out["summary_cpu_s"], out["summary_peak_mb"] = cpu() - c0, peak()
c1 = cpu()
n = store.import_sentences(pid, src, doc="train.conll", annotator="import:train.conll",
                           add_labels=new)
out.update(import_cpu_s=cpu() - c1, sentences=n, tokens=summary.tokens,
           labels=len(summary.labels), wall_s=time.perf_counter() - wall,
           peak_mb=peak(), cpu_s=cpu(), stored=store.sentence_count(pid))
print(json.dumps(out))
'''


def make_file(folder: Path, n: int) -> Path:
    """The app's grammar, ``n`` sentences (seed 1), as CoNLL."""
    sys.path.insert(0, str(ROOT / "sample_data"))
    import make_sample

    path = folder / f"train-{n}.conll"
    path.write_text(make_sample.render(*make_sample.make_corpus(seed=1, n=n)), encoding="utf-8")
    return path


def extract(ref: str, folder: Path) -> dict:
    """``git archive ref gpsl`` into ``folder``; its commit."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", ref], capture_output=True,
                            text=True, check=True).stdout.strip()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "gpsl"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return {"ref": ref, "commit": commit}


def measure(mode: str, root: Path, file: Path, folder: Path) -> dict:
    db = folder / f"{mode}-{file.stem}" / "gpsl.sqlite3"
    db.parent.mkdir(parents=True)
    job = folder / f"{mode}-{file.stem}.json"
    job.write_text(json.dumps({"root": str(root), "db": str(db), "file": str(file),
                               "mode": mode}))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPSL_DB")}
    env["GPSL_MODELS"] = str(db.parent / "models")
    r = subprocess.run([sys.executable, "-c", CHILD, str(job)], capture_output=True, text=True,
                       cwd=folder, env=env, check=False)
    if r.returncode:
        raise SystemExit(f"the {mode} child failed:\n{r.stderr[-3000:]}")
    got = json.loads(r.stdout.strip().splitlines()[-1])
    if not got["gpsl"].startswith(str(root)):
        raise SystemExit(f"the {mode} child imported {got['gpsl']}, not {root}")
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sentences", type=int, nargs="+", default=[10000, 100000])
    ap.add_argument("--before", default=None, help="git ref of the code before (default: "
                    "the merge base of HEAD and main)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--stem", default="import_memory")
    args = ap.parse_args(argv)
    command = "python -m bench.import_memory " + shlex.join(argv if argv is not None
                                                            else sys.argv[1:])
    before_ref = args.before or subprocess.run(
        ["git", "-C", str(ROOT), "merge-base", "HEAD", "main"], capture_output=True,
        text=True, check=True).stdout.strip()
    machine, date, git = machine_info(), now_iso(), git_commit()
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpsl-import-memory-") as tmp:
        folder = Path(tmp)
        (folder / "before").mkdir()
        before = extract(before_ref, folder / "before")
        for n in args.sentences:
            file = make_file(folder, n)
            for mode, root in (("before", folder / "before"), ("after", ROOT)):
                got = measure(mode, root, file, folder)
                got.update(mode=mode, n=n, file_mb=file.stat().st_size / 1e6)
                rows.append(got)
                print(f"{n:>7,} {mode:6} peak {got['peak_mb']:7.0f} MB  CPU "
                      f"{got['cpu_s']:6.1f} s  (summary {got['summary_cpu_s']:.1f} s, import "
                      f"{got['import_cpu_s']:.1f} s)", flush=True)
    try:
        load_end = [round(v, 2) for v in os.getloadavg()]
    except OSError:
        load_end = None
    md = header_lines("Import of a large upload: peak memory before and after streaming",
                      date, machine, git, command)
    md += [f"* before: {before['ref']} = {before['commit'][:12]} (`git archive`); after: this "
           f"checkout; load average at the end {load_end}", "",
           "| sentences | tokens | file | code | peak RSS | RSS after imports | CPU s (all) |"
           " summary pass CPU s | import CPU s | wall s |",
           "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        md.append(f"| {r['n']:,} | {r['tokens']:,} | {r['file_mb']:.1f} MB | {r['mode']} | "
                  f"**{r['peak_mb']:,.0f} MB** | {r['start_mb']:.0f} MB | {r['cpu_s']:.1f} | "
                  f"{r['summary_cpu_s']:.1f} | {r['import_cpu_s']:.1f} | {r['wall_s']:.1f} |")
    md += ["", "Each row is one child process: read the bytes, the summary pass, the import "
           "into a fresh SQLite store (all sentences stored, checked by count).", ""]
    write_results(args.out, args.stem, "\n".join(md), {
        "command": command, "date": date, "machine": machine, "git": git, "before": before,
        "load_average_at_end": load_end, "rows": rows})
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
