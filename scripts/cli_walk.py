"""The walks of ``gpsl train -t ner`` and ``gpsl aggregate --model joint``: which gpsl files a
command enters and which calls cross between the modules of ``gpsl/cli`` (docs/ARCHITECTURE.md,
"Walks"). Run from the checkout (or with ``PYTHONPATH`` naming another tree of gpsl)::

    python scripts/cli_walk.py            # a Markdown table on stdout
    python scripts/cli_walk.py --json     # every file and call

Each command runs in its own process on a small generated corpus (60 sentences of a
word-only NER task, written to a temporary folder; the crowd file: three simulated annotators,
90%, 80% and 60% right). A file is *entered* when any of its code runs (a function, or the
module's body on import) while the command runs, counted from the parsed arguments to the
command's exit status; ``with parser`` also counts the parser's construction (every command
module's ``add_parser``). Calls between ``gpsl/cli`` modules are counted by distinct callee.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

WALKS = {
    "train -t ner": ["train", "-t", "ner", "-q", "{dir}/train.conll", "{dir}/model_train"],
    "aggregate --model joint": ["aggregate", "--model", "joint", "-t", "ner", "-q",
                                "{dir}/crowd.jsonl", "-o", "{dir}/agg.conll"],
    "train --crowd -t ner": ["train", "--crowd", "-t", "ner", "-q", "{dir}/crowd.jsonl",
                             "{dir}/model_crowd"],
}


def write_data(folder: Path) -> None:
    rng = random.Random(0)
    types = {"John": "PER", "Mary": "PER", "Paris": "LOC", "Berlin": "LOC", "Acme": "ORG",
             "Corp": "ORG"}
    words = [*types, "lives", "in", "the", "city", "of", "works", "at", "today", "and"]
    sents = []
    for _ in range(60):
        toks = [rng.choice(words) for _ in range(rng.randint(4, 9))]
        labs, prev = [], None
        for t in toks:
            ty = types.get(t)
            labs.append("O" if ty is None else ("I-" if prev == ty else "B-") + ty)
            prev = ty
        sents.append((toks, labs))
    classes = sorted({lab for _, ls in sents for lab in ls})
    (folder / "train.conll").write_text("".join(
        "".join(f"{t} {lab}\n" for t, lab in zip(toks, labs)) + "\n" for toks, labs in sents))
    lines = []
    for toks, labs in sents:
        ann = [{"annotator": a, "labels": [lab if rng.random() < acc else rng.choice(classes)
                                           for lab in labs]}
               for a, acc in (("a1", 0.9), ("a2", 0.8), ("a3", 0.6))]
        lines.append(json.dumps({"tokens": toks, "labels": labs, "annotations": ann}))
    (folder / "crowd.jsonl").write_text("\n".join(lines) + "\n")


def one(argv: list[str]) -> dict:
    """The walk of one command in this process."""
    import gpsl
    from gpsl.cli.main import build_parser

    pkg = os.path.dirname(gpsl.__file__)
    entered: dict[str, set] = {}
    calls: set[str] = set()

    def prof(frame, event, arg):
        f = frame.f_code.co_filename
        if event != "call" or not f.startswith(pkg):
            return
        name = os.path.relpath(f, os.path.dirname(pkg))
        entered.setdefault(name, set())
        back = frame.f_back.f_code.co_filename if frame.f_back else ""
        if "gpsl/cli/" in name and "gpsl/cli/" in back and back != f:
            calls.add(f"{os.path.relpath(back, os.path.dirname(pkg))} -> {name}:"
                      f"{frame.f_code.co_name}")

    sys.setprofile(prof)
    args = build_parser().parse_args(argv)
    parser_files = set(entered)
    entered.clear()
    calls.clear()
    try:
        rc = args.func(args)
    finally:
        sys.setprofile(None)
    return {"status": rc, "entered": sorted(entered),
            "with_parser": sorted(parser_files | set(entered)), "cli_calls": sorted(calls)}


def main() -> int:
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(one(sys.argv[2:])))
        return 0
    out = {}
    with tempfile.TemporaryDirectory(prefix="gpsl-walk-") as tmp:
        write_data(Path(tmp))
        for name, argv in WALKS.items():
            run = subprocess.run([sys.executable, __file__, "--one",
                                  *(a.format(dir=tmp) for a in argv)],
                                 capture_output=True, text=True, check=True)
            out[name] = json.loads(run.stdout.splitlines()[-1])
    if "--json" in sys.argv:
        print(json.dumps(out, indent=1))
        return 0
    print("| command | files entered | with parser | gpsl/cli files entered | calls between "
          "gpsl/cli modules |\n|---|---|---|---|---|")
    for name, w in out.items():
        cli = [f.removeprefix("gpsl/cli/") for f in w["entered"] if f.startswith("gpsl/cli/")]
        print(f"| `{name}` | {len(w['entered'])} | {len(w['with_parser'])} | "
              f"{len(cli)} ({', '.join(cli)}) | {len(w['cli_calls'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
