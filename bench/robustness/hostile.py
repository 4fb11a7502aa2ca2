"""Hostile inputs for every import format and every command of ``python -m gpsl``.

Each generator takes a :class:`random.Random` and returns one input: the bytes of a file in
one of the app's upload formats (CoNLL, JSONL and plain text are
:mod:`bench.robustness.inputs`' own; here doccano, Label Studio, Prodigy, CoNLL-2003 and
the crowd formats), or the argument list of one command line. The documents keep a
plausible structure and put hostile values where values go: wrong types (``null``,
booleans, lists where text goes, ``"PER"`` where a list goes), offsets of ``0.5``, ``-1``,
``10**30`` and past the text, NUL, escaped lone surrogates, control characters, Markdown
and URLs, deep nesting, numbers of thousands of digits, ``NaN``; then, sometimes, byte
damage (:func:`bench.robustness.generators._mutate`).

The same generators drive the benchmark (seeded :mod:`random`) and the suite's fuzz test
(``tests/cli/test_fuzz.py``: hypothesis hands them its own ``Random``, so it chooses, and shrinks,
every value).
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
import signal
import threading
from collections import Counter
from pathlib import Path

from bench.robustness.generators import _mutate, _word, gen_conll, gen_jsonl, gen_text

TEXT = "Anna Smith lives in New York , says Bob ."
#: values that go where a number, a text or a list is expected
ODD = [None, True, False, 0, -1, 0.5, 1e308, 10**30, "", "PER", "0", [], {}, [0],
       ["PER"], {"k": 1}, "a\u0000b", "\\ud800", "x" * 300, "![i](http://127.0.0.1:9/b.png)",
       "=HYPERLINK(\"http://x\")", "www.example.com", "B-PER", "O", "\u2028", "\t"]
TAGS = ["PER", "LOC", "ORG", "B-PER", "O", "", " PER", "P E R", "PER\n", "\u0000", None, 5,
        ["PER"], "![x](http://h/x.png)"]
SPECIAL_LINES = ['{"text": "' + "[" * 3000 + '"}', "[" * 20000, '{"text": 1e999}',
                 '{"text": NaN}', '{"label": [[' + "9" * 5000 + ", 1, \"X\"]]}", "{",
                 '{"text": "\\ud800\\udc00 ok"}', '{"text": "a\\u0000b"}', "null", "[1, 2]"]


def _offset(rng: random.Random, text: str, good: int) -> object:
    r = rng.random()
    if r < 0.75:
        return good
    return rng.choice([good + 0.5, -1, len(text) + rng.randint(1, 50), 10**30, str(good),
                       None, True, [good], float(good), -(10**20)])


def _text(rng: random.Random) -> object:
    if rng.random() < 0.85:
        return rng.choice([TEXT, "Paris", TEXT + " " + _word(rng), "  ", "a\u2028b c",
                           "東京 に 行く", "x " * rng.choice([3, 600]), "\u3000Anna"])
    return rng.choice(ODD)


def _spans(rng: random.Random, text) -> list:
    if not isinstance(text, str):
        return [[0, 4, "PER"]]
    words, pos, out = text.split(" "), 0, []
    for w in words:
        if w and rng.random() < 0.3:
            out.append([_offset(rng, text, pos), _offset(rng, text, pos + len(w)),
                        rng.choice(TAGS) if rng.random() < 0.2 else "PER"])
        pos += len(w) + 1
    if rng.random() < 0.1:  # overlapping or across a boundary
        out.append([0, rng.randint(1, 6), "LOC"])
    return out


def _lines_of(rng: random.Random, records: list) -> bytes:
    lines = [json.dumps(r, ensure_ascii=rng.random() < 0.5) for r in records]
    if rng.random() < 0.05:
        lines.insert(rng.randint(0, len(lines)), rng.choice(SPECIAL_LINES))
    data = rng.choice(["\n", "\r\n", "\r"]).join(lines).encode("utf-8", "surrogatepass")
    return _mutate(rng, data) if rng.random() < 0.25 else data


def gen_doccano(rng: random.Random) -> bytes:
    records = []
    for _ in range(rng.randint(0, 5)):
        text = _text(rng)
        rec: dict = {"text": text} if rng.random() < 0.95 else {}
        r = rng.random()
        if r < 0.6:
            rec["label"] = _spans(rng, text)
        elif r < 0.7:
            rec["entities"] = [{"start_offset": a, "end_offset": b, "label": t}
                               for a, b, t in _spans(rng, text)]
        elif r < 0.85:
            rec["label"] = rng.choice(ODD)
        elif r < 0.9:
            rec["label"] = [rng.choice(ODD) for _ in range(rng.randint(1, 3))]
        records.append(rec)
    return _lines_of(rng, records)


def gen_prodigy(rng: random.Random) -> bytes:
    records = []
    for _ in range(rng.randint(0, 5)):
        text = _text(rng)
        rec: dict = {"text": text}
        if isinstance(text, str) and rng.random() < 0.5:
            toks, pos = [], 0
            for w in text.split(" "):
                if w:
                    toks.append({"start": _offset(rng, text, pos),
                                 "end": _offset(rng, text, pos + len(w)), "id": len(toks)})
                pos += len(w) + 1
            rec["tokens"] = toks if rng.random() < 0.9 else rng.choice(ODD)
        if rng.random() < 0.85:
            rec["spans"] = [{"start": a, "end": b, "label": t} for a, b, t in _spans(rng, text)]
            if rng.random() < 0.1:
                rec["spans"] = rng.choice(ODD)
        if rng.random() < 0.2:
            rec["answer"] = rng.choice(["accept", "reject", "ignore", None, 1, ["accept"]])
        records.append(rec)
    return _lines_of(rng, records)


def gen_labelstudio(rng: random.Random) -> bytes:
    tasks: list = []
    for k in range(rng.randint(0, 4)):
        text = _text(rng)
        result = [{"from_name": "label", "to_name": "text", "type": "labels",
                   "value": {"start": a, "end": b,
                             "labels": [t] if rng.random() < 0.85 else rng.choice(
                                 ["PER", [], ["PER", "LOC"], None, [None], {"a": 1}]),
                             **({"text": "x"} if rng.random() < 0.05 else {})}}
                  for a, b, t in _spans(rng, text)]
        if rng.random() < 0.1:
            result.append({"type": "choices", "value": {"choices": ["x"]}})
        ann = {"result": result if rng.random() < 0.9 else rng.choice(ODD)}
        if rng.random() < 0.1:
            ann["was_cancelled"] = True
        task: dict = {"id": k, "data": {"text": text} if rng.random() < 0.95 else
                      rng.choice(ODD)}
        r = rng.random()
        if r < 0.75:
            task["annotations"] = [ann]
        elif r < 0.85:
            task["annotations"] = rng.choice(ODD)
        elif r < 0.9:
            task["completions"] = [ann]
        tasks.append(task)
    doc: object = tasks if rng.random() < 0.93 else rng.choice(ODD + [{"data": {}}])
    data = json.dumps(doc, indent=rng.choice([None, 1]),
                      ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    if rng.random() < 0.04:
        data = rng.choice(["[" * 30000, "[{}] extra", "[{\"data\": {\"text\": 1e999}}]",
                           "[" + ",".join(["{}"] * 2) + "", "[NaN]"]).encode()
    return _mutate(rng, data) if rng.random() < 0.2 else data


def gen_conll2003(rng: random.Random) -> bytes:
    out = ["-DOCSTART- -X- -X- O", ""] if rng.random() < 0.8 else []
    for _ in range(rng.randint(0, 4)):
        for _ in range(rng.randint(1, 6)):
            cols = [_word(rng).replace(" ", "") or "x", "NNP", "B-NP",
                    rng.choice(["O", "B-PER", "I-PER", "B-LOC", "_"])]
            if rng.random() < 0.05:
                cols = cols[:rng.randint(1, 3)]
            out.append(" ".join(cols))
        out.append("" if rng.random() < 0.9 else "-DOCSTART- -X- -X- O")
    data = "\n".join(out).encode()
    return _mutate(rng, data) if rng.random() < 0.4 else data


def gen_crowd_jsonl(rng: random.Random) -> bytes:
    records = []
    sane = rng.random() < 0.5
    for k in range(rng.randint(0, 5)):
        n = rng.randint(1, 5)
        names = ["a", "b", "c"] if sane else ["a", "b", "", "x y", None, 5]
        anns: object = [{"annotator": rng.choice(names), "labels": [
            rng.choice(["O", "B-PER", "I-PER", None, "_"]) if sane or rng.random() < 0.9
            else rng.choice(ODD) for _ in range(n if sane or rng.random() < 0.9 else n + 1)]}
            for _ in range(rng.randint(1 if sane else 0, 3))]
        if sane:  # each annotator once per sentence
            anns = list({a["annotator"]: a for a in anns}.values())
        elif rng.random() < 0.2:
            anns = rng.choice(ODD + [{"a": ["O"] * n}])
        rec: dict = {"tokens": [_word(rng) for _ in range(n)], "annotations": anns}
        if rng.random() < 0.2:
            rec["labels"] = [rng.choice(["O", "B-PER", None]) for _ in range(n)]
        if rng.random() < 0.3:
            rec["id"] = rng.choice([k, f"s{k}"] if sane else [k, None, 1.5, [k]])
        records.append(rec)
    data = "\n".join(json.dumps(r, ensure_ascii=rng.random() < 0.5) for r in records)
    data = data.encode("utf-8", "surrogatepass")
    return _mutate(rng, data) if not sane and rng.random() < 0.3 else data


def gen_crowd_conll(rng: random.Random) -> bytes:
    n_ann = rng.randint(1, 3)
    out = []
    for _ in range(rng.randint(0, 4)):
        for _ in range(rng.randint(1, 5)):
            out.append("\t".join([_word(rng).replace(" ", "").replace("\t", "") or "x"]
                                 + [rng.choice(["O", "B-PER", "_", "I-PER"])
                                    for _ in range(n_ann if rng.random() < 0.95 else 1)]))
        out.append("")
    data = "\n".join(out).encode()
    return _mutate(rng, data) if rng.random() < 0.3 else data


#: every format the app and the command line read, with its generator (the first three
#: from bench.robustness.inputs)
UPLOADS = {"conll": gen_conll, "jsonl": gen_jsonl, "text": gen_text,
           "conll2003": gen_conll2003, "doccano": gen_doccano,
           "labelstudio": gen_labelstudio, "prodigy": gen_prodigy}
CROWD = {"jsonl": gen_crowd_jsonl, "conll": gen_crowd_conll}

# ----------------------------------------------------------------------------- commands

NUMBERS = ["0", "-1", "x", "", "1.5", "1e3", "99999999999999999999", "-9999999999", "nan",
           "inf", "\x7f", "٣"]
OFFSETS = ["0", "x", "-1,-1", "", "-9999999999", "99999999999999999999", "-1001", ",",
           "-1.5", "gpsl9"]


def cli_args(rng: random.Random, command: str, files: dict) -> list[str]:
    """One hostile command line of ``command`` (train, crowd, test, eval, query, aggregate,
    other); ``files`` names the paths a run may use: ``good`` (a small labeled CoNLL file),
    ``bad`` (a hostile one, written fresh), ``crowd`` (hostile crowd votes), ``pool`` (an
    unlabeled pool), ``model`` (a saved model), ``bad_model`` (a damaged one), ``out`` (a
    new output path), ``other`` (a directory that is not a model), ``missing`` (no such
    file), ``template``.  Half the runs are sane apart from the odd value (so that the
    commands run through), half are hostile throughout."""
    p_bad = 0.05 if rng.random() < 0.5 else 0.35

    def v(good: list, bad: list):
        return rng.choice(bad if rng.random() < p_bad else good)

    def opt(p: float, flag: str, good: list, bad: list) -> list:
        return [flag, v(good, bad)] if rng.random() < p else []

    data = v([files["good"], files["bad"]], [files["missing"], files["other"], "/dev/null",
                                             ""])
    model = v([files["model"]], [files["bad_model"], files["good"], files["missing"],
                                 files["other"]])
    if command == "train":
        args = ["train", "-q", "--max-iter", v(["1", "2", "3"], NUMBERS)]
        args += opt(0.5, "-d", ["-1,1", "-1", "GPSL4", "gpsl2", "-2,2"], OFFSETS)
        args += opt(0.4, "-t", [files["template"]], [files["bad"], files["missing"]])
        args += opt(0.2, "--kernel", ["linear", "rbf", "se"], ["evil", ""])
        args += opt(0.2, "--inference", ["full", "sparse", "auto"], ["x", ""])
        args += opt(0.2, "--tol", ["0.01", "0.1"], ["-1", "nan", "2", "x"])
        args += opt(0.15, "--variance", ["1", "0.5"], ["0", "-1", "inf", "1e7"])
        args += opt(0.15, "--min-freq", ["1", "2"], NUMBERS)
        args += opt(0.1, "--missing-weight", ["auto", "0.5"], ["2", "x"])
        args += opt(0.1, "--calibrate-folds", ["2"], ["1", "1000", "x"])
        args += opt(0.1, "--max-tokens", ["100", "0"], NUMBERS)
        args += opt(0.1, "--encoding", ["utf-8", "latin-1"], ["rot13", "nope"])
        args += opt(0.05, rng.choice(["--annotators", "--trusted", "--report"]), ["2"], ["2"])
        return args + [data, v([files["out"]], [files["other"], files["good"]])]
    if command == "crowd":
        crowd = files["crowd"]
        args = ["train", "-q", "--crowd", "--max-iter", v(["1", "2"], NUMBERS)]
        if crowd.endswith(".conll") or rng.random() < p_bad:
            args += ["--annotators", v(["2", "3"], NUMBERS)]
        args += opt(0.2, "--trusted", ["a", "a1"], ["zz", ""])
        args += opt(0.2, "--labels", ["O,B-PER,I-PER"], ["O", ",", "a b"])
        args += opt(0.1, "--crowd-format", ["jsonl" if crowd.endswith("jsonl") else "conll"],
                    ["x", "conll"])
        args += opt(0.05, "--scheduler", ["tcp://127.0.0.1:1"], ["x"])
        args += opt(0.05, "--calibrate-folds", ["2"], ["x"])
        return args + [v([crowd], [data]), v([files["out"]], [files["other"]])]
    if command in ("test", "eval"):
        args = [command, "-m", model]
        args += opt(0.3, "--decoder", ["rns", "viterbi", "exact"], ["evil"])
        args += opt(0.2, "--max-tokens", ["100", "0"], NUMBERS)
        args += opt(0.2, "--encoding", ["utf-8", "latin-1", "ascii"], ["rot13", "nope"])
        if command == "test":
            args += [v(["-v"], ["x"])] if rng.random() < 0.1 else []
            args += [v(["--marginals", "-v1"], ["-v9"])] if rng.random() < 0.2 else []
            args += opt(0.1, "-o", [files["out"]], [files["other"]])
        else:
            args += opt(0.2, "--missing", ["_"], ["", "a b", "O"])
        return args + [data]
    if command == "query":
        args = ["query", "-m", model]
        args += opt(0.4, "--strategy", ["bald", "margin", "entropy", "least_confidence",
                                        "random"], ["x", ""])
        args += opt(0.4, "--batch", ["1", "3", "50"], NUMBERS)
        args += opt(0.2, "--seed", ["0", "7"], NUMBERS)
        args += opt(0.2, "--max-per-sentence", ["1", "2"], NUMBERS)
        args += ["--diverse"] if rng.random() < 0.2 else []
        args += opt(0.1, "--missing", ["_"], ["", "O"])
        return args + [v([files["pool"], files["good"]], [data])]
    if command == "aggregate":
        crowd = files["crowd"]
        args = ["aggregate", "-q"] if rng.random() < 0.7 else ["aggregate"]
        if crowd.endswith(".conll") or rng.random() < p_bad:
            args += ["--annotators", v(["2", "3"], NUMBERS + ["10000"])]
        args += opt(0.3, "--method", ["dawid-skene", "majority"], ["x"])
        args += opt(0.2, "--labels", ["O,B-PER,I-PER"], ["O", ",", "a b"])
        args += opt(0.2, "--trusted", ["a", "a1"], ["zz", ""])
        args += opt(0.2, rng.choice(["--min-votes", "--prior-diag", "--prior-off",
                                     "--shrink"]), ["1", "2"], NUMBERS)
        args += opt(0.1, "--output-format", ["conll", "jsonl"], ["x"])
        args += opt(0.1, "--report", [files["out"] + ".json"], [files["other"]])
        return args + [v([crowd], [data])]
    return rng.choice([[], ["--help"], ["--version"], ["-x"], ["train"], ["\x7f"], ["bogus"],
                       ["test"], ["query", "-m"], ["aggregate", "--annotators"],
                       ["train", "-d"], ["eval", "-m", model]])


COMMANDS = ("train", "crowd", "test", "eval", "query", "aggregate", "other")


# ----------------------------------------------------------------------------- trials


class Hang(BaseException):
    """A trial that ran past its time limit (a BaseException: no ``except Exception`` of the
    code under test swallows it)."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`Hang` in the code of the block after ``seconds`` of wall time (the
    main thread only; elsewhere the block runs unlimited)."""
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def expired(signum, frame):
        raise Hang(f"over {seconds:g} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def one_line_problem(exc: BaseException, source: str | None) -> str | None:
    """None when ``exc`` is a clean refusal (an InputError of one line naming ``source``);
    else what is wrong with it."""
    from gpsl.errors import InputError

    if not isinstance(exc, InputError):
        return f"exception {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    text = str(exc)
    if "\n" in text or "\r" in text:
        return f"multi-line message {text[:200]!r}"
    if source is not None and not text.startswith(source):
        return f"message does not name {source!r}: {text[:200]!r}"
    return None


def sentences_problem(sents) -> str | None:
    """None when parsed sentences are storable: non-empty tokens of text without NUL,
    surrogates or line breaks; a label per token, text or None."""
    if not sents:
        return "accepted with no sentences"
    for s in sents:
        if not s.tokens or len(s.tokens) != len(s.labels):
            return f"sentence at line {s.line}: {len(s.tokens)} tokens, {len(s.labels)} labels"
        for tok in s.tokens:
            for c in tok:
                if not isinstance(c, str) or not c or any(ch in c for ch in "\n\r\x00") \
                        or any("\ud800" <= ch <= "\udfff" for ch in c):
                    return f"bad token {tok!r} at line {s.line}"
        for lab in s.labels:
            if lab is not None and (not isinstance(lab, str) or not lab.strip()
                                    or any(ch.isspace() or ch == "\x00" for ch in lab)):
                return f"bad label {lab!r} at line {s.line}"
    return None


def upload_trial(store, base_pid: int, data: bytes, fmt: str, name: str,
                 rng: random.Random, seconds: float) -> tuple[str, str]:
    """Parse an upload as the app does and import it (a new project or the base one);
    ``(outcome, detail)``: ``accepted``, ``rejected_cleanly``, ``exception``,
    ``bad_message``, ``inconsistent``, ``partial_write`` or ``hang``."""
    from gpsl.annotation.interchange import imports
    from gpsl.annotation.store import validate
    from gpsl.errors import clean_source

    source = clean_source(name) if name else "<upload>"
    before = (len(store.list_projects()), store.sentence_count(base_pid),
              store.get_project(base_pid)["labels"])
    sents = None
    try:
        with time_limit(seconds):
            sents = imports.parse_upload(data, name, fmt)
            problem = sentences_problem(sents)
            if problem:
                return "inconsistent", problem
            labels = imports.summarize(sents).labels or ["O"]
            if rng.random() < 0.5:
                store.create_project_from_sentences(
                    f"p{rng.random()}", sents, labels, "", (-1, 1),
                    heldout_fraction=rng.choice([0, 0.2]), doc=name or None,
                    annotator=validate.import_credit(name or "upload"))
            else:
                add = imports.unknown_labels(sents, store.get_project(base_pid)["labels"])
                store.import_sentences(base_pid, sents, doc=name or None,
                                       split=rng.choice(["train", "heldout"]),
                                       annotator=validate.import_credit(name or "upload"),
                                       add_labels=add if rng.random() < 0.7 else ())
    except Hang as exc:
        return "hang", str(exc)
    except Exception as exc:  # noqa: BLE001 - that is the point of the trial
        after = (len(store.list_projects()), store.sentence_count(base_pid),
                 store.get_project(base_pid)["labels"])
        if after != before:
            return "partial_write", f"a refused upload left a partial write ({exc})"
        # a refusal at import (after the parse) may name the import's source
        problem = one_line_problem(exc, None if sents is not None else source)
        if problem is None:
            return "rejected_cleanly", ""
        return ("bad_message" if problem.startswith(("multi-line", "message does"))
                else "exception"), problem
    return "accepted", ""


def cli_trial(argv: list[str], seconds: float) -> tuple[str, str]:
    """Run ``python -m gpsl ARGV`` in this process (its real ``main``, stdout and stderr
    captured); ``(outcome, detail)`` as :func:`upload_trial`: exit 0 is accepted, exit 2
    with one line ``gpsl: error: ...`` (beside progress lines) a clean refusal, anything
    else a failure."""
    from gpsl.cli.main import main

    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.StringIO()
    try:
        with time_limit(seconds), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            code = main(list(argv))
    except Hang as exc:
        return "hang", f"{exc}: {' '.join(argv)[:200]}"
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # noqa: BLE001 - escaped main(): a traceback
        return "exception", f"{type(exc).__name__}: {exc} ({' '.join(argv)[:200]})"
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    errors = [ln for ln in lines if not ln.startswith("iter=")]
    if code == 0:
        return "accepted", ""
    if code == 2 and len(errors) == 1 and errors[0].startswith("gpsl: error: "):
        return "rejected_cleanly", ""
    if code == 2:
        return "bad_message", f"{errors!r:.300} ({' '.join(argv)[:200]})"
    return "exception", f"exit {code}: {lines[-3:]!r:.300} ({' '.join(argv)[:200]})"


def cli_files(workdir: Path, rng: random.Random) -> dict:
    """The files :func:`cli_args` names, made in ``workdir``: a small labeled CoNLL file,
    a template, an unlabeled pool, a model trained on the file, a damaged copy of it, a
    directory that is not a model; ``bad``, ``crowd`` and ``out`` are fresh per trial
    (:func:`fresh_files`)."""
    from bench.robustness.inputs import _damage_model
    from gpsl.model import GPSL

    good = workdir / "good.data"
    good.write_text("Anna NNP B-PER\nSmith NNP I-PER\nwent VBD O\n\nBob NNP B-PER\nran VBD O"
                    "\n\nAnna NNP _\nsat VBD O\n", encoding="utf-8")
    pool = workdir / "pool.data"
    pool.write_text("Anna NNP _\nwent VBD _\n\nCarl NNP _\nran VBD O\n", encoding="utf-8")
    template = workdir / "template"
    template.write_text("U00:%x[0,0]\nU01:%x[-1,0]\nU02:%x[0,1]\n", encoding="utf-8")
    model = workdir / "model"
    if not model.exists():
        X = [[("Anna", "NNP"), ("went", "VBD")], [("Bob", "NNP"), ("ran", "VBD")]]
        GPSL(max_iter=3).fit(X, [["B-PER", "O"], ["B-PER", "O"]]).save(model)
    bad_model = workdir / "bad_model"
    if not bad_model.exists():
        shutil.copytree(model, bad_model)
        _damage_model(rng, bad_model)
    other = workdir / "not_a_model"
    other.mkdir(exist_ok=True)
    (other / "keep.txt").write_text("keep", encoding="utf-8")
    return {"good": str(good), "pool": str(pool), "template": str(template),
            "model": str(model), "bad_model": str(bad_model), "other": str(other),
            "missing": str(workdir / "missing.data")}


def fresh_files(files: dict, workdir: Path, rng: random.Random, k: int) -> dict:
    """``files`` with a new hostile ``bad`` CoNLL file, ``crowd`` votes (JSONL or CoNLL)
    and a new ``out`` path for trial ``k``."""
    bad = workdir / f"bad{k}.data"
    bad.write_bytes(gen_conll(rng))
    fmt = rng.choice(sorted(CROWD))
    crowd = workdir / f"crowd{k}.{fmt}"
    crowd.write_bytes(CROWD[fmt](rng))
    return {**files, "bad": str(bad), "crowd": str(crowd), "out": str(workdir / f"out{k}")}


#: seconds a trial may run before it counts as a hang (on an idle machine; the benchmark
#: scales it by the load like the suite's limits)
TRIAL_SECONDS = 60.0
NEW_UPLOADS = ("conll2003", "doccano", "labelstudio", "prodigy")


def _tally() -> dict:
    return {"tried": 0, "accepted": 0, "rejected_cleanly": 0, "tracebacks": 0,
            "failure_types": Counter(), "examples_of_failures": []}


def _count(t: dict, outcome: str, detail: str, sample) -> None:
    t["tried"] += 1
    if outcome in ("accepted", "rejected_cleanly"):
        t[outcome] += 1
        return
    t["tracebacks"] += 1
    t["failure_types"][outcome] += 1
    if len(t["examples_of_failures"]) < 5:
        shown = sample[:120] if isinstance(sample, (bytes, str)) else repr(sample)[:200]
        t["examples_of_failures"].append({"failure": outcome, "detail": detail[:300],
                                          "input": repr(shown)})


def run_trials(n_uploads: int, n_cli: int, seed: int, workdir: Path,
               seconds: float = TRIAL_SECONDS) -> dict:
    """The tools' upload formats (``n_uploads`` each: parsed and imported into a temporary
    store) and every command (``n_cli`` each, run in this process); ``{kind: tally}`` as
    :func:`bench.robustness.inputs.run_input_trials` (failure types: ``exception``,
    ``bad_message``, ``inconsistent``, ``partial_write``, ``hang``)."""
    from gpsl.annotation import Store

    rng = random.Random(seed)
    out: dict = {}
    store = Store(workdir / "uploads.sqlite3")
    base = store.create_project("base", ["B-PER", "I-PER", "O"])
    store.add_sentences(base, [{"tokens": [["Anna"], ["went"]], "labels": ["B-PER", "O"]}])
    for fmt in NEW_UPLOADS:
        t = out[fmt] = _tally()
        for i in range(n_uploads):
            data = UPLOADS[fmt](rng)
            name = rng.choice([f"up{i}.json", f"up{i}.jsonl", "", "a\nb.json", "évil\x00.txt"])
            outcome, detail = upload_trial(store, base, data, fmt, name, rng, seconds)
            _count(t, outcome, detail, data)
    store.close()
    files = cli_files(workdir, rng)
    for command in COMMANDS:
        t = out[f"cli_{command}"] = _tally()
        for k in range(n_cli):
            argv = cli_args(rng, command, fresh_files(files, workdir, rng, k))
            outcome, detail = cli_trial(argv, seconds)
            _count(t, outcome, detail, argv)
    for t in out.values():
        t["failure_types"] = dict(t["failure_types"])
    return out
