"""Hostile content in the app (issue #7): token text, a project name and an annotator name
made of HTML, scripts and Markdown are shown as text on every page and kept unchanged in
the exports.

Streamlit renders ``st.markdown``, captions, widget labels and tooltips as Markdown (raw
HTML is not rendered there, but Markdown is), and ``st.html`` as HTML.  So every Markdown
string that carries user text must hold it Markdown-escaped (``md_escape``: punctuation
backslash-escaped, ``< > &`` as entities), and every HTML string HTML-escaped (``esc``).
"""

from __future__ import annotations

import functools
import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

import pytest  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from gpsl.annotation.interchange import exports as exp  # noqa: E402
from gpsl.annotation.training import jobs, pipeline  # noqa: E402
from gpsl.errors import InputError  # noqa: E402
from gpsl.io import read_jsonl  # noqa: E402
from pages import _format  # noqa: E402
from tests.support.helpers import BL, BP, IP, OUT  # noqa: E402
from tests.support.helpers import tiny_store as tiny_project  # noqa: E402
from tests.support.limits import limit  # noqa: E402

TINY = pipeline.TrainConfig(offsets=(-1, 1), max_iter=3, learn_hyper=False)
HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "**bold**",
    "# heading",
    "[link](javascript:alert(1))",
    "|table|",
    "`code`",
    "$math$",
    "<b>&amp;</b>",
]
PROJECT = "<i>evil</i> **project** [x](javascript:alert(2))"
# a person's name cannot hold < > or ` (validate.person refuses them); Markdown it may
ANNOTATOR = "**me** [x](javascript:alert(3)) #me"
# what must never reach an element rendered as HTML, or Markdown unescaped
RAW_HTML = re.compile(r"<\s*(script|img|i|b)\b|onerror\s*=\s*alert|javascript:alert", re.I)


@pytest.fixture
def db(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "gpsl.sqlite3"
    monkeypatch.setenv("GPSL_DB", str(path))
    monkeypatch.setenv("GPSL_ANNOTATOR", ANNOTATOR)
    return path


@pytest.fixture
def hostile(db):
    """A trained project whose last training sentence is all hostile tokens (some labeled
    by the hostile annotator); returns (store, project id, hostile sentence id)."""
    store, pid = tiny_project(db, [{"tokens": HOSTILE}])
    store.update_project(pid, name=PROJECT)
    sid = store.sentence_ids(pid, "train")[-1]
    store.set_labels(sid, {1: BP, 3: OUT}, ANNOTATOR)
    jobs.train_now(store.home, pid, TINY)
    return store, pid, sid


def app(page: str | None = None, goto: int | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(30)).run()
    assert not at.exception, at.exception
    if page:
        if goto is not None:
            at.session_state["goto_sentence"] = goto
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception, at.exception
    return at


def markdown_texts(at: AppTest) -> list[str]:
    """Every string the page renders as Markdown: markdown, captions, titles, widget labels
    and tooltips, alerts, metrics."""
    out = []
    for kind in ("markdown", "caption", "title", "header", "subheader", "info", "success",
                 "warning", "error"):
        out += [e.value for e in getattr(at, kind)]
    for kind in ("button", "selectbox", "text_input", "checkbox", "toggle", "slider",
                 "number_input", "metric", "expander"):
        for w in getattr(at, kind):
            out.append(getattr(w, "label", "") or "")
            out.append(getattr(w, "help", "") or "")
    return [t for t in out if t]  # (select box options are plain text, not Markdown)


def html_texts(at: AppTest) -> list[str]:
    return [h.value for h in at.html]


# the active part of each hostile string: none may survive once the backslash-escaped
# characters are taken out of a Markdown string (escaped, they show as text)
ACTIVE = ["<script", "<img", "<b>", "<i>", "**bold**", "**project**", "**me**", "# heading",
          "[link](", "[x](", "|table|", "`code`", "$math$"]


def assert_markdown_literal(texts: list[str]) -> None:
    for text in texts:
        assert not RAW_HTML.search(text), text
        bare = re.sub(r"\\.", "\N{MIDDLE DOT}", text)
        for active in ACTIVE:
            assert active not in bare, (active, text)


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.text = set(), set(), []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attrs.update(name for name, _ in attrs)

    def handle_data(self, data):
        self.text.append(data)


def assert_html_escaped(texts: list[str]) -> None:
    """Parsed as a browser would: only the app's own tags and attributes, and the hostile
    strings only as text content."""
    for text in texts:
        parser = _Tags()
        parser.feed(text)
        parser.close()
        assert parser.tags <= {"div", "span", "sup", "style", "em", "code"}, parser.tags
        assert parser.attrs <= {"style", "title"}, parser.attrs


def test_annotate_page_shows_hostile_tokens_as_text(hostile):
    store, pid, sid = hostile
    at = app("annotate", goto=sid)
    assert at.session_state[f"annotate_{pid}"]["current"] == sid
    # every token chip's label starts with the Markdown-escaped token text
    for i, tok in enumerate(HOSTILE):
        label = at.button(key=f"tok_{i}").label
        assert label.startswith(_format.md_escape(tok)), (tok, label)
        assert "<" not in label and ">" not in label
    assert at.button(key="tok_1").label.endswith(f"`{BP}`")  # labeled: label as code
    assert _format.md_escape(ANNOTATOR) in at.button(key="tok_1").help  # who labeled it
    assert any(_format.md_escape(PROJECT) in c.value for c in at.caption)  # page header
    assert_markdown_literal(markdown_texts(at))
    assert_html_escaped(html_texts(at))
    # select each token: the detail line shows it escaped too
    for i in (0, 3, 4, 6):
        at.button(key=f"tok_{i}").click().run()
        assert not at.exception
        detail = next(m.value for m in at.markdown if f"token {i + 1} of" in m.value)
        assert detail.startswith(f"**{_format.md_escape(HOSTILE[i])}**")
        assert_markdown_literal(markdown_texts(at))
    # labeling a hostile token from the page stores the plain label, the text unchanged
    at.button(key="tok_0").click().run()
    at.button(key="lab_0").click().run()
    saved = store.get_sentence(sid)
    assert saved["labels"][0] == BP and saved["annotators"][0] == ANNOTATOR
    assert [t[0] for t in saved["tokens"]] == HOSTILE


def test_confidence_page_shows_hostile_tokens_as_text(hostile):
    store, pid, sid = hostile
    at = app("confidence")
    rendered = " ".join(html_texts(at))
    shown = [tok for tok in HOSTILE if html.escape(tok, quote=True) in rendered]
    assert len(shown) >= 5, shown  # the hostile sentence is among the least sure ones
    for tok in HOSTILE:
        if "<" in tok:
            assert tok not in rendered
    assert_html_escaped(html_texts(at))
    assert_markdown_literal(markdown_texts(at))
    # the uncertain-token table is data (shown as text by the grid), values unchanged
    table = next(d.value for d in at.dataframe if "token" in d.value.columns)
    assert set(table["token"]) & set(HOSTILE)


def test_train_and_project_pages_escape_the_project_name(hostile):
    for page in ("train", None):
        at = app(page)
        assert_markdown_literal(markdown_texts(at))
        assert_html_escaped(html_texts(at))


def test_exports_keep_hostile_text_unchanged(hostile, tmp_path):
    store, pid, sid = hostile
    jsonl = exp.export_annotations(store.db, pid, "jsonl", "train")
    records = [json.loads(line) for line in jsonl.splitlines()]
    hostile_record = records[-1]
    assert [t if isinstance(t, str) else t[0] for t in hostile_record["tokens"]] == HOSTILE
    path = tmp_path / "x.jsonl"
    path.write_text(jsonl, encoding="utf-8")
    back = read_jsonl(path)
    assert [t[0] for t in back[-1].tokens] == HOSTILE
    assert back[-1].labels[1] == BP and back[-1].labels[3] == OUT

    # CoNLL cannot hold a token with whitespace: a clean one-line refusal, no bad file
    with pytest.raises(InputError) as info:
        exp.export_annotations(store.db, pid, "conll", "train")
    assert "\n" not in str(info.value) and "whitespace" in str(info.value)
    solid = [tok for tok in HOSTILE if not any(c.isspace() for c in tok)]
    other = store.create_project("solid", [BP, OUT])
    store.add_sentences(other, [{"tokens": solid, "labels": [BP] + [None] * (len(solid) - 1)}])
    conll = exp.export_annotations(store.db, other, "conll", "train")
    assert [line.split("\t")[0] for line in conll.splitlines() if line] == solid
    assert conll.splitlines()[0] == f"{solid[0]}\t{BP}"
    assert "&lt;" not in conll and "\\*" not in conll  # data, not HTML or Markdown

    version = store.active_model(pid)
    preds = exp.export_predictions(store.db, pid, version, "jsonl", "train")
    last = json.loads(preds.splitlines()[-1])
    assert [t if isinstance(t, str) else t[0] for t in last["tokens"]] == HOSTILE
    assert {BP, IP, BL, OUT} >= set(last["marginals"][0])


@pytest.mark.timeout(120)
def test_app_restarted_after_a_killed_writer_shows_every_saved_label(db, tmp_path):
    """A process writing labels is SIGKILLed; an app started afterwards shows every label
    whose write had returned before the kill."""
    import multiprocessing
    import time

    from bench.robustness.crashes import _label_writer

    store, pid = tiny_project(db)
    report = tmp_path / "writes.log"
    proc = multiprocessing.get_context("spawn").Process(
        target=_label_writer, args=(str(db), str(report), 0), daemon=True)
    proc.start()
    deadline = time.monotonic() + limit(60)
    while not (report.exists() and report.read_text().count("\n") > 30):
        assert time.monotonic() < deadline and proc.is_alive()
        time.sleep(0.05)
    proc.kill()
    proc.join(limit(30))
    last: dict = {}  # (sentence, token) -> the last label reported for it
    history = {h["id"]: h for h in store.history(project_id=pid, limit=None)}
    for line in report.read_text().splitlines()[1:]:
        sid, t, lab, hid = line.split()
        assert history[int(hid)]["new_label"] == lab  # every reported write is stored
        last[(int(sid), int(t))] = (int(hid), lab)

    for sid in sorted({s for s, _ in last})[:3]:
        at = app("annotate", goto=sid)  # a new session, as after a restart
        assert at.session_state[f"annotate_{pid}"]["current"] == sid
        current = store.get_sentence(sid)["labels"]
        for (s, t), (hid, lab) in last.items():
            if s != sid:
                continue
            newest = max(h["id"] for h in history.values()
                         if h["sentence_id"] == s and h["token_index"] == t)
            expected = lab if newest == hid else current[t]  # unreported later write
            assert current[t] == expected
            assert at.button(key=f"tok_{t}").label.endswith(f"`{expected}`")


def test_a_busy_store_is_a_message_not_a_traceback(db, monkeypatch):
    from gpsl.annotation import Store, StoreBusyError

    tiny_project(db)
    at = app("annotate")

    def busy(*args, **kwargs):
        raise StoreBusyError("the annotation store stayed busy for 30 s; try again")

    monkeypatch.setattr(Store, "set_labels", functools.wraps(Store.set_labels)(busy))
    # the page's writes of key presses (the stand-ins keep the methods' permissions)
    monkeypatch.setattr(Store, "set_label_steps", functools.wraps(Store.set_label_steps)(busy))
    at.button(key="tok_1").click().run()
    at.button(key="lab_1").click().run()
    assert not at.exception
    assert [e.value for e in at.error] == ["the annotation store stayed busy for 30 s; try again"]


# ------------------------------------------------- a busy store or bad input on every page

BUSY = "the annotation store stayed busy for 30 s; try again"


def _raising(exc, like=None):
    """A stand-in that raises ``exc``; ``like``: the facade method it replaces, whose
    permission declaration it keeps (an undeclared method is refused to everyone)."""
    def method(*args, **kwargs):
        raise exc
    return method if like is None else functools.wraps(like)(method)


def _errors(at: AppTest) -> list[str]:
    assert not at.exception, at.exception
    errors = [e.value for e in at.error]
    assert all("\n" not in e and "Traceback" not in e for e in errors), errors
    return errors


@pytest.mark.parametrize("page, method, message", [
    (None, "corpus.stats.progress", "Cannot show the project overview"),
    ("data", "training.versions.list_all", "Cannot show the exports"),
    ("train", "training.versions.list_all", "Cannot read the training runs"),
    ("confidence", "training.versions.list_all", "Cannot load the model's predictions"),
    ("annotate", "corpus.projects.get", "Cannot read the annotation store"),  # the sidebar
])
def test_a_busy_store_is_one_line_on_every_page(db, monkeypatch, page, method, message):
    """The store busy in one read of the back end (``module.function``, what the facade and
    the reports both read through): one error line on the page."""
    import importlib

    from gpsl.annotation import StoreBusyError

    tiny_project(db)
    at = app(page)
    module, name = method.rsplit(".", 1)
    module = importlib.import_module(f"gpsl.annotation.{module}")
    original = getattr(module, name)

    def busy(*args, **kwargs):
        split = args[2] if len(args) > 2 else kwargs.get("split")
        if name == "progress" and split == "train":
            return original(*args, **kwargs)  # the sidebar's: only the overview fails
        raise StoreBusyError(BUSY)

    monkeypatch.setattr(module, name, busy)
    at.run()
    assert f"{message}: {BUSY}" in _errors(at)
    if page == "data":  # the import form below the exports still shows
        assert "Import sentences" in [s.value for s in at.subheader]
    if page is None:
        assert "New project" in [s.value for s in at.subheader]


def test_project_page_actions_show_store_errors_as_one_line(db, monkeypatch):
    from gpsl.annotation import Store, StoreBusyError

    store, pid = tiny_project(db)
    at = app()
    monkeypatch.setattr(Store, "update_project",
                        _raising(StoreBusyError(BUSY), like=Store.update_project))
    next(b for b in at.button if b.label == "Save settings").click().run()
    assert _errors(at) == [f"Settings not saved: {BUSY}"]

    monkeypatch.setattr(Store, "delete_project",
                        _raising(StoreBusyError(BUSY), like=Store.delete_project))
    at.checkbox(key="confirm_delete").check().run()
    next(b for b in at.button if b.label == "Delete project").click().run()
    assert _errors(at) == [f"Project not deleted: {BUSY}"]
    assert store.get_project(pid) is not None

    monkeypatch.setattr(Store, "create_sample_copy", _raising(
        InputError("a project named 'tiny' already exists", source="<project>"),
        like=Store.create_sample_copy))
    at.button(key="create_sample").click().run()
    assert _errors(at) == ["Project not created: a project named 'tiny' already "
                           "exists"]
    assert len(store.list_projects()) == 1


def test_train_and_data_actions_show_store_errors_as_one_line(db, monkeypatch):
    from gpsl.annotation import StoreBusyError

    store, pid = tiny_project(db)
    at = app("train")
    from gpsl.annotation.training import versions  # what the training service writes through

    monkeypatch.setattr(versions, "start", _raising(StoreBusyError(BUSY)))
    at.button(key="start").click().run()
    assert _errors(at) == [f"Training not started: {BUSY}"]
    assert store.list_model_versions(pid) == []

    at = app("data")
    from gpsl.annotation.interchange import imports

    # the page imports a stream (issue 37): its write, not Store.add_sentences, meets the lock
    monkeypatch.setattr(imports, "import_upload", _raising(StoreBusyError(BUSY)))
    at.file_uploader(key="imp_file").set_value(("more.txt", b"Dora went home\n", "text/plain"))
    at.run()
    next(b for b in at.button if (b.key or "").startswith("imp_go_")).click().run()
    assert _errors(at) == [BUSY]
    assert store.sentence_count(pid) == 7


def test_a_download_that_fails_on_click_gives_one_line_instead_of_a_broken_download():
    from gpsl.annotation import StoreBusyError
    from pages import _ui

    def busy():
        raise StoreBusyError("the store stayed locked for 30 s")

    assert _ui.on_click_data(lambda: b"x\ty\n", "Export")() == b"x\ty\n"
    assert _ui.on_click_data(busy, "Annotations not exported")() == (
        b"gpsl: Annotations not exported: the store stayed locked for 30 s\n")
    missing = _ui.on_click_data(lambda: open("/nonexistent/model.json", "rb").read(), "Model")()
    assert missing.startswith(b"gpsl: Model: ") and missing.count(b"\n") == 1
