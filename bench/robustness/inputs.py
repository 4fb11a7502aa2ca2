"""Hostile inputs: generated malformed data for every place a user hands gpsl data.

:func:`run_input_trials` draws ``n_examples`` inputs per kind from seeded generators (plain
:mod:`random`, no hypothesis) and feeds each to the real entry point:

========== ==================================================================================
kind       entry point
========== ==================================================================================
conll      :func:`gpsl.io.read_conll` (then a write/read round trip of what was accepted)
jsonl      :func:`gpsl.io.read_jsonl` (round trip too)
text       :func:`gpsl.io.read_text`
template   :meth:`gpsl.features.Template.parse`, ``validate`` and feature extraction
offsets    :func:`gpsl.model.parse_offsets` (command line ``-d`` and the app's custom field)
model_dir  :meth:`gpsl.model.GPSL.load` on damaged/tampered copies of a small model, then
           ``predict`` on what loads
cli_args   the real ``python -m gpsl`` in a subprocess (``max(3, n // 10)`` runs)
upload     :func:`gpsl.annotation.interchange.imports.parse_upload`, ``create_project`` and
``import_sentences``
           against a temporary store, checking that a refused import wrote nothing
conll2003, the other tools' formats (:mod:`bench.robustness.hostile`): parsed and imported the
doccano,   same way
labelstudio,
prodigy
cli_*      every command (train, train --crowd, test, eval, query, aggregate, others) with
           hostile arguments and files, its ``main`` run in this process (``n // 2`` each)
========== ==================================================================================

A trial that runs longer than :data:`bench.robustness.hostile.TRIAL_SECONDS` (scaled by the
machine's load) is stopped and counted as a ``hang``.

Each input ends in one of three outcomes: **accepted** (and the result is consistent),
**rejected cleanly** (:class:`~gpsl.errors.InputError` / ``ModelFormatError`` whose message is
one line naming the source; for the command line: exit status 2, one stderr line, no
``Traceback``), or a **traceback**: any other exception, a multi-line or anonymous message,
an inconsistent accepted result or a partial write (``failure_types`` counts which).
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np

from bench.robustness.generators import gen_conll, gen_jsonl, gen_template, gen_text

REPO = Path(__file__).resolve().parents[2]

KINDS = ("conll", "jsonl", "text", "template", "offsets", "model_dir", "cli_args", "upload",
         "conll2003", "doccano", "labelstudio", "prodigy", "cli_train", "cli_crowd",
         "cli_test", "cli_eval", "cli_query", "cli_aggregate", "cli_other")

# ----------------------------------------------------------------------------- checks


def _failure_kind(problem: str) -> str:
    """``bad_message`` for an unclean message (multi-line, no source), else ``exception``."""
    return "bad_message" if problem.startswith(("multi-line", "message does")) else "exception"


def _clean_message(exc: BaseException, source: str | None) -> str | None:
    """None when ``exc`` is a clean rejection; otherwise what is wrong with it."""
    from gpsl.errors import InputError

    if not isinstance(exc, InputError):
        return f"{type(exc).__name__}: {exc}"[:300]
    text = str(exc)
    if "\n" in text or "\r" in text:
        return f"multi-line message: {text[:200]!r}"
    if source is not None and not text.startswith(source):
        return f"message does not name {source!r}: {text[:200]!r}"
    return None


def _check_sentences(sents, n_cols_equal: bool = True) -> str | None:
    if not sents:
        return "accepted with no sentences"
    widths = set()
    for s in sents:
        if not s.tokens or len(s.tokens) != len(s.labels):
            return f"sentence at line {s.line}: {len(s.tokens)} tokens, {len(s.labels)} labels"
        for tok in s.tokens:
            widths.add(len(tok))
            for c in tok:
                if not isinstance(c, str) or c == "" or "\n" in c or "\r" in c or "\x00" in c:
                    return f"bad token {tok!r} at line {s.line}"
        for lab in s.labels:
            if lab is not None and (not isinstance(lab, str) or lab == "" or lab == "_"
                                    or any(ch.isspace() for ch in lab)):
                return f"bad label {lab!r} at line {s.line}"
    if n_cols_equal and len(widths) > 1:
        return f"ragged token widths {sorted(widths)}"
    return None


def _tally():
    return {"tried": 0, "accepted": 0, "rejected_cleanly": 0, "tracebacks": 0,
            "failure_types": Counter(), "examples_of_failures": []}


def _record(t: dict, outcome: str, detail: str = "", sample: bytes | str = b"",
            kind: str = "") -> None:
    t["tried"] += 1
    if outcome in ("accepted", "rejected_cleanly"):
        t[outcome] += 1
        return
    t["tracebacks"] += 1
    t["failure_types"][kind or "exception"] += 1
    if len(t["examples_of_failures"]) < 5:
        shown = sample[:120] if isinstance(sample, (bytes, str)) else repr(sample)[:120]
        t["examples_of_failures"].append({"failure": kind or "exception", "detail": detail,
                                          "input": repr(shown)})


def _trial(t: dict, sample, source: str | None, fn, check=None) -> None:
    from bench.robustness.hostile import Hang, time_limit

    try:
        with time_limit(_seconds()):
            result = fn()
    except Hang as exc:
        _record(t, "failure", str(exc), sample, "hang")
        return
    except Exception as exc:  # noqa: BLE001 - that is the point of the trial
        problem = _clean_message(exc, source)
        if problem is None:
            _record(t, "rejected_cleanly")
        else:
            _record(t, "failure", problem, sample, _failure_kind(problem))
        return
    problem = check(result) if check else None
    if problem:
        _record(t, "failure", problem, sample, "inconsistent")
    else:
        _record(t, "accepted")


# ----------------------------------------------------------------------------- kinds


def _content(sents):
    """Tokens, labels and ids (line numbers change when blank lines are normalised)."""
    return [(s.tokens, s.labels, s.id) for s in sents]


def _strip_bom(sents):
    if sents and sents[0].tokens and sents[0].tokens[0][0].startswith("\ufeff"):
        return None
    return sents


def _conll_trials(rng, n):
    from gpsl.io import format_conll, read_conll

    t = _tally()
    for _ in range(n):
        data = gen_conll(rng)
        labeled = rng.random() < 0.8

        def check(sents, labeled=labeled):
            problem = _check_sentences(sents)
            if problem or not labeled or _strip_bom(sents) is None:
                return problem
            again = read_conll(format_conll(sents).encode(), name="again")
            return None if _content(again) == _content(sents) else \
                "write/read round trip changed the sentences"

        _trial(t, data, "trial.data", lambda data=data, labeled=labeled: read_conll(
            data, name="trial.data", labeled=labeled), check)
    return t


def _jsonl_trials(rng, n):
    from gpsl.io import format_jsonl, read_jsonl

    t = _tally()
    for _ in range(n):
        data = gen_jsonl(rng)

        def check(sents):
            problem = _check_sentences(sents)
            if problem:
                return problem
            ids = [s.id for s in sents if s.id is not None]
            if len(ids) != len(set(ids)):
                return "duplicate ids accepted"
            again = read_jsonl(format_jsonl(sents).encode(), name="again")
            return None if _content(again) == _content(sents) else \
                "write/read round trip changed the sentences"

        _trial(t, data, "trial.jsonl",
               lambda data=data: read_jsonl(data, name="trial.jsonl"), check)
    return t


def _text_trials(rng, n):
    from gpsl.io import read_text

    t = _tally()
    for _ in range(n):
        data = gen_text(rng)
        _trial(t, data, "trial.txt", lambda data=data: read_text(data, name="trial.txt"),
               _check_sentences)
    return t


def _template_trials(rng, n):
    from gpsl.features import FeatureExtractor, Template

    t = _tally()
    sents = [[("Anna", "NNP"), ("went", "VBD"), ("home", "NN")], [("Hi", "UH")]]
    for _ in range(n):
        text = gen_template(rng)

        def run(text=text):
            tpl = Template.parse(text, source="trial.template")
            tpl.validate(2)
            return FeatureExtractor(tpl).fit_transform(sents)

        def check(X):
            return None if X.shape[0] == 4 else f"feature matrix has {X.shape[0]} rows"

        _trial(t, text, "trial.template", run, check)
    return t


def _offsets_trials(rng, n):
    from gpsl.model import parse_offsets

    t = _tally()
    pieces = ["-1", "1", "0", "-2", "2", "x", "", " ", "1.5", "99999999999999999999", "-",
              "GPSL2", "gpsl4", "GPSL9", "\x00", "١", "+1", "--1", "1e3"]
    for _ in range(n):
        text = rng.choice([",", ", ", ";", " "]).join(rng.choice(pieces)
                                                      for _ in range(rng.randint(0, 4)))

        def check(offs):
            ok = (isinstance(offs, tuple) and offs and all(isinstance(o, int) and o != 0
                                                           for o in offs)
                  and len(set(offs)) == len(offs))
            return None if ok else f"bad offsets accepted: {offs!r}"

        _trial(t, text, None, lambda text=text: parse_offsets(text), check)
    return t


def _small_model(workdir: Path) -> Path:
    from gpsl.model import GPSL

    X = [[("Anna",), ("went",), ("home",)], [("Bob",), ("ran",)], [("Anna",), ("ran",)]]
    y = [["B-PER", "O", "O"], ["B-PER", "O"], ["B-PER", None]]
    path = workdir / "model"
    GPSL(max_iter=3).fit(X, y).save(path)
    return path


def _resum(d: Path, meta: dict | None = None) -> None:
    """Recompute the checksums, as a tamperer who knows the format would."""
    from gpsl.persist import _meta_digest, _sha256

    if meta is None:
        meta = json.loads((d / "model.json").read_text(encoding="utf-8"))
    if isinstance(meta.get("sha256"), dict) and (d / "arrays.npz").is_file():
        meta["sha256"]["arrays.npz"] = _sha256(d / "arrays.npz")
        meta["sha256"]["model.json"] = _meta_digest(meta)
    (d / "model.json").write_text(json.dumps(meta), encoding="utf-8")


def _damage_model(rng: random.Random, d: Path) -> str:
    """Apply one random damage to model directory ``d``; returns its description."""
    op = rng.randrange(12)
    npz, js = d / "arrays.npz", d / "model.json"
    if op == 0:
        raw = bytearray(npz.read_bytes())
        raw[rng.randrange(len(raw))] ^= 0xFF
        npz.write_bytes(bytes(raw))
        if rng.random() < 0.5:
            _resum(d)
        return "flipped a byte of arrays.npz"
    if op == 1:
        npz.write_bytes(npz.read_bytes()[:rng.randrange(npz.stat().st_size)])
        if rng.random() < 0.5:
            _resum(d)
        return "truncated arrays.npz"
    if op == 2 or op == 3:
        with np.load(npz, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        name = rng.choice(sorted(arrays))
        choice = rng.randrange(6)
        if choice == 0:
            arrays[name] = np.array([{"evil": 1}], dtype=object)
        elif choice == 1:
            arrays[name] = arrays[name].astype(str)
        elif choice == 2:
            arrays[name] = np.full_like(arrays[name], np.nan, dtype=np.float64)
        elif choice == 3:
            arrays[name] = arrays[name].reshape(-1)[:-1] if arrays[name].size else \
                np.zeros(3)
        elif choice == 4:
            arrays[name] = arrays[name] * rng.choice([-1, 1000, 10**6])
        else:
            del arrays[name]
        buf = io.BytesIO()
        np.savez(buf, **arrays)  # writes object arrays with pickle, as an attacker would
        npz.write_bytes(buf.getvalue())
        _resum(d)
        return f"replaced array {name} ({choice}) and recomputed the checksums"
    if op == 4:
        meta = json.loads(js.read_text(encoding="utf-8"))
        key = rng.choice(sorted(meta))
        meta[key] = rng.choice([None, 0, -1, "x", [], {}, [0], ["a", "a"], True, 1e308])
        if rng.random() < 0.7:
            _resum(d, meta)
        else:
            js.write_text(json.dumps(meta), encoding="utf-8")
        return f"set model.json {key}"
    if op == 5:
        meta = json.loads(js.read_text(encoding="utf-8"))
        key = rng.choice(sorted(meta.get("config", {})) or ["x"])
        meta.setdefault("config", {})[key] = rng.choice([None, -5, "evil", [], 1e309 * 0])
        _resum(d, meta)
        return f"set config {key}"
    if op == 6:
        js.write_bytes(rng.choice([b"", b"{", b"\xff\xfe", b"[" * 100000, b"null",
                                   b'{"format": "gpsl-model"}', b"\x00" * 10]))
        return "rewrote model.json"
    if op == 7:
        (npz if rng.random() < 0.5 else js).unlink()
        return "deleted a file"
    if op == 8:
        npz.unlink()
        npz.mkdir()
        return "arrays.npz is a directory"
    if op == 9:
        with zipfile.ZipFile(npz, "w") as zf:
            zf.writestr("theta.npy", b"\x93NUMPY\x01\x00v\x00{'descr': '<f8', 'fortran_order'"
                                     b": False, 'shape': (99999999999, 99999), }" + b" " * 60
                                     + b"\n")
        _resum(d)
        return "npz member declaring a huge shape"
    if op == 10:
        meta = json.loads(js.read_text(encoding="utf-8"))
        meta["extractor"]["template"] = rng.choice(["U:%x[0,5]", "X", "", "U:%x[99,0]"])
        _resum(d, meta)
        return "changed the template"
    meta = json.loads(js.read_text(encoding="utf-8"))
    meta["format_version"] = rng.choice([2, 99, "1", None, -1])
    _resum(d, meta)
    return "changed the format version"


def _model_trials(rng, n, workdir: Path):
    from gpsl.model import GPSL

    t = _tally()
    base = _small_model(workdir)
    for i in range(n):
        d = workdir / f"m{i}"
        shutil.copytree(base, d)
        what = _damage_model(rng, d)

        def run(d=d):
            m = GPSL.load(d)
            return m.predict([[("Anna",), ("went",)], [("x",)]])

        def check(pred):
            return None if [len(p) for p in pred] == [2, 1] else f"bad prediction {pred!r}"

        _trial(t, what, str(d), run, check)
        shutil.rmtree(d, ignore_errors=True)
    return t


def _cli_trials(rng, n, workdir: Path):
    t = _tally()
    good = workdir / "good.data"
    good.write_text("Anna NNP B-PER\nwent VBD O\n\nBob NNP B-PER\nran VBD O\n", encoding="utf-8")
    tpl = workdir / "template"
    tpl.write_text("U00:%x[0,0]\nU01:%x[-1,0]\n", encoding="utf-8")
    model = _small_model(workdir / "cli") if not (workdir / "cli" / "model").exists() else \
        workdir / "cli" / "model"
    bad_model = workdir / "cli_bad_model"
    if not bad_model.exists():
        shutil.copytree(model, bad_model)
        _damage_model(rng, bad_model)
    other = workdir / "not_a_model"
    other.mkdir(exist_ok=True)
    (other / "keep.txt").write_text("keep", encoding="utf-8")
    for i in range(n):
        bad = workdir / f"bad{i}.data"
        bad.write_bytes(gen_conll(rng))
        badtpl = workdir / f"bad{i}.template"
        badtpl.write_bytes(gen_template(rng).encode("utf-8", errors="replace"))
        files = [str(good), str(good), str(bad), str(workdir / "missing.data"), str(workdir),
                 "/dev/zero", ""]
        cmd = rng.choice(["train", "test", "eval", "bogus", ""])
        args = [cmd] if cmd else []
        if cmd == "train":
            args += ["-q", "--max-iter", rng.choice(["2", "0", "x", "-1", "99999999999999999"])]
            if rng.random() < 0.7:
                args += ["-t", rng.choice([str(tpl), str(badtpl), str(workdir / "nope")])]
            if rng.random() < 0.5:
                args += ["-d", rng.choice(["-1,1", "-1", "0", "x", "GPSL4", "-1,-1", ""])]
            args += [rng.choice(files), rng.choice([str(workdir / f"out{i}"), str(other),
                                                    str(good)])]
        elif cmd in ("test", "eval"):
            args += ["-m", rng.choice([str(model), str(model), str(bad_model), str(good),
                                       str(workdir / "nomodel")])]
            if rng.random() < 0.3:
                args += ["--decoder", rng.choice(["rns", "viterbi", "exact", "evil"])]
            if rng.random() < 0.3:
                args += ["--max-tokens", rng.choice(["1", "0", "-5", "many"])]
            if rng.random() < 0.2:
                args += ["--encoding", rng.choice(["latin-1", "rot13", "nope", "ascii"])]
            args.append(rng.choice(files))
        else:
            args += rng.choice([[], ["--help"], ["-x"], ["train"], ["\x7f"]])
        env = dict(os.environ, PYTHONPATH=str(REPO), GPSL_MAX_TOKENS="")
        env.pop("GPSL_DEBUG", None)
        try:
            proc = subprocess.run([sys.executable, "-m", "gpsl", *args], cwd=workdir, env=env,
                                  capture_output=True, text=True, timeout=120,
                                  errors="replace")
        except subprocess.TimeoutExpired:
            _record(t, "failure", "timed out", " ".join(args), "timeout")
            continue
        err = proc.stderr.strip()
        if "Traceback" in proc.stderr or proc.returncode not in (0, 2):
            _record(t, "failure", f"exit {proc.returncode}: {err[-300:]}", " ".join(args),
                    "exception")
        elif proc.returncode == 2 and (len(err.splitlines()) != 1
                                       or not err.startswith("gpsl: error: ")):
            _record(t, "failure", f"stderr {err[:300]!r}", " ".join(args), "bad_message")
        elif not (other / "keep.txt").exists():
            _record(t, "failure", "a non-model directory was replaced", " ".join(args),
                    "partial_write")
        else:
            _record(t, "accepted" if proc.returncode == 0 else "rejected_cleanly")
    return t


def _upload_trials(rng, n, workdir: Path):
    from gpsl.annotation import Store
    from gpsl.annotation.interchange import imports as imp

    t = _tally()
    store = Store(workdir / "upload.sqlite3")
    base_pid = store.create_project("base", ["B-PER", "I-PER", "O"])
    store.add_sentences(base_pid, [{"tokens": [["Anna"], ["went"]], "labels": ["B-PER", "O"]}])
    gens = {"conll": gen_conll, "jsonl": gen_jsonl, "text": gen_text}
    for i in range(n):
        fmt = rng.choice(sorted(gens))
        data = gens[fmt](rng)
        name = rng.choice([f"up{i}.{fmt}", f"up{i}.data", f"up{i}", ""])
        max_bytes = rng.choice([None, None, 100, 0])
        before_projects = len(store.list_projects())
        before_base = (store.sentence_count(base_pid), store.get_project(base_pid)["labels"])

        def run(data=data, name=name, fmt=fmt, max_bytes=max_bytes, i=i):
            sents = imp.parse_upload(data, name, fmt, max_bytes=max_bytes)
            summary = imp.summarize(sents)
            labels = list(summary.labels) or ["O"]
            if rng.random() < 0.3 and len(labels) > 1:
                labels = labels[1:]  # a label of the file is now outside the label set
            if rng.random() < 0.5:
                store.create_project_from_sentences(f"p{i}", sents, labels, "", (-1, 1),
                                   heldout_fraction=rng.choice([0, 0.2]), doc=name or None)
            else:
                add = imp.unknown_labels(sents, ["B-PER", "I-PER", "O"])
                imp.import_sentences(store.db, base_pid, sents, doc=name or None,
                                     split=rng.choice(["train", "heldout"]),
                                     add_labels=add if rng.random() < 0.5 else ())
            return sents

        try:
            run()
        except Exception as exc:  # noqa: BLE001
            problem = _clean_message(exc, name or "<upload>")
            after_base = (store.sentence_count(base_pid), store.get_project(base_pid)["labels"])
            if len(store.list_projects()) != before_projects or after_base != before_base:
                _record(t, "failure", f"a refused upload left a partial write ({exc})", data,
                        "partial_write")
            elif problem is None:
                _record(t, "rejected_cleanly")
            else:
                _record(t, "failure", problem, data, _failure_kind(problem))
        else:
            _record(t, "accepted")
    store.close()
    return t


def _seconds() -> float:
    """A trial's time limit: :data:`bench.robustness.hostile.TRIAL_SECONDS` times the
    machine's load factor (the suite's :mod:`tests.support.limits` rule, when importable)."""
    from bench.robustness.hostile import TRIAL_SECONDS

    try:
        from tests.support.limits import limit
    except ImportError:
        return TRIAL_SECONDS
    return limit(TRIAL_SECONDS)


def run_input_trials(n_examples: int, seed: int) -> dict:
    """Run ``n_examples`` generated inputs per kind (``max(3, n_examples // 10)`` command-line
    runs in a subprocess, ``n_examples // 2`` per command in this process) from ``seed``;
    returns ``{kind: {"tried", "accepted", "rejected_cleanly", "tracebacks",
    "failure_types", "examples_of_failures"}}`` (see the module docstring)."""
    from bench.robustness import hostile

    rng = random.Random(seed)
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="gpsl-inputs-") as tmp:
        work = Path(tmp)
        out["conll"] = _conll_trials(random.Random(rng.random()), n_examples)
        out["jsonl"] = _jsonl_trials(random.Random(rng.random()), n_examples)
        out["text"] = _text_trials(random.Random(rng.random()), n_examples)
        out["template"] = _template_trials(random.Random(rng.random()), n_examples)
        out["offsets"] = _offsets_trials(random.Random(rng.random()), n_examples)
        (work / "models").mkdir()
        out["model_dir"] = _model_trials(random.Random(rng.random()), n_examples,
                                         work / "models")
        (work / "cli").mkdir()
        out["cli_args"] = _cli_trials(random.Random(rng.random()), max(3, n_examples // 10),
                                      work)
        (work / "upload").mkdir()
        out["upload"] = _upload_trials(random.Random(rng.random()), n_examples,
                                       work / "upload")
        (work / "tools").mkdir()
        out.update(hostile.run_trials(n_examples, max(1, n_examples // 2),
                                      int(rng.random() * 2**31), work / "tools",
                                      seconds=_seconds()))
    for t in out.values():
        t["failure_types"] = dict(t["failure_types"])
    return out


if __name__ == "__main__":  # python -m bench.robustness.inputs [N] [SEED]
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    print(json.dumps(run_input_trials(n, seed), indent=1, ensure_ascii=False))
