"""The Streamlit app, page by page, with AppTest against a temporary store (GPSL_DB)."""

from __future__ import annotations

import io
import json
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

from streamlit.testing.v1 import AppTest  # noqa: E402

from gpsl import active  # noqa: E402
from gpsl.annotation import SAMPLE_PROJECT_NAME, Store  # noqa: E402
from gpsl.annotation.interchange import exports as exp  # noqa: E402
from gpsl.annotation.interchange import imports as imp  # noqa: E402
from gpsl.annotation.training import jobs, pipeline, spares  # noqa: E402
from gpsl.io import read_conll  # noqa: E402
from pages import _chips, _format, _text  # noqa: E402
from tests.support.helpers import BL, BP, IP, OUT, app_store_env  # noqa: E402
from tests.support.helpers import tiny_store as tiny_project  # noqa: E402
from tests.support.limits import limit  # noqa: E402

# the full GP: on this toy project its most uncertain sentence is not the first one in order,
# which test_training_changes_highlights_queue_and_accept relies on (inference="auto" is the
# scalable mode since gpsl.auto, whose most uncertain sentence here is the first)
TINY = pipeline.TrainConfig(offsets=(-1, 1), max_iter=3, learn_hyper=False, inference="full")
HOSTILE = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "**bold**", "a_b_c",
           "$x$", "&amp;"]


@pytest.fixture
def db(tmp_path, monkeypatch) -> Path:
    return app_store_env(tmp_path, monkeypatch)


def app(page: str | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(30)).run()
    assert not at.exception, at.exception
    if page:
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception, at.exception
    return at


def keyed(widgets, prefix: str):
    """The one widget whose key starts with ``prefix`` (keys of upload forms end in the
    file id)."""
    found = [w for w in widgets if (w.key or "").startswith(prefix)]
    assert len(found) == 1, [w.key for w in widgets]
    return found[0]


def current_sentence(at: AppTest, pid: int) -> int:
    return at.session_state[f"annotate_{pid}"]["current"]


def test_opens_on_the_sample_project(db):
    at = app()
    assert at.title[0].value == "Project"
    assert at.sidebar.selectbox(key="project_id").value == 1
    assert at.sidebar.selectbox(key="project_id").options == [SAMPLE_PROJECT_NAME]
    assert at.sidebar.text_input(key="annotator").value == "tester"
    metrics = {m.label: m.value for m in at.metric}
    sample = read_conll(ROOT / "sample_data" / "sample.conll")
    assert metrics["Sentences"] == f"{len(sample):,}"
    assert metrics["Labeled tokens"] == f"{sum(len(s) - s.n_missing for s in sample):,}"
    assert metrics["Model"] == "none"
    assert "tokens labeled" in at.sidebar.caption[-1].value
    assert len(Store(db).list_projects()) == 1


def test_create_project_from_uploaded_conll(db):
    at = app()
    data = b"Anna NNP B-PER\nSmith NNP I-PER\nleft VBD _\n\nRome NNP B-LOC\nwon VBD O\n"
    at.file_uploader(key="new_file").set_value(("ner.conll", data, "text/plain")).run()
    assert not at.exception and not at.error
    labels = keyed(at.text_input, "new_labels_")
    assert labels.value == "B-LOC B-PER I-PER O"
    labels.set_value("B-PER I-PER B-LOC I-LOC O")  # add a type
    keyed(at.text_input, "new_name_").set_value("My NER")
    keyed(at.button, "create_upload_").click().run()
    assert not at.exception and not at.error

    store = Store(db)
    project = next(p for p in store.list_projects() if p["name"] == "My NER")
    assert project["labels"] == ["B-PER", "I-PER", "B-LOC", "I-LOC", "O"]
    assert project["offsets"] == [-1, 1]
    sents = store.export_sentences(project["id"])
    assert [s.labels for s in sents] == [["B-PER", "I-PER", None], ["B-LOC", "O"]]
    assert [s.tokens[0] for s in sents] == [("Anna", "NNP"), ("Rome", "NNP")]
    assert at.sidebar.selectbox(key="project_id").value == project["id"]


def test_upload_error_is_one_line_and_writes_nothing(db):
    at = app()
    bad = b"Anna NNP B-PER\nSmith I-PER\n"
    at.file_uploader(key="new_file").set_value(("bad.conll", bad, "text/plain")).run()
    assert not at.exception
    assert [e.value for e in at.error] == [
        "bad.conll:2: expected 3 columns, found 2 (line 1 has 3)"]
    assert not any((b.key or "").startswith("create_upload_") for b in at.button)
    # a label outside the chosen label set: refused at creation, nothing written
    good = b"Anna NNP B-PER\nSmith NNP I-PER\n"
    at.file_uploader(key="new_file").set_value(("ok.conll", good, "text/plain")).run()
    keyed(at.text_input, "new_labels_").set_value("B-PER O")
    keyed(at.button, "create_upload_").click().run()
    assert not at.exception
    assert len(at.error) == 1 and "'I-PER' is not in the project's label set" in \
        at.error[0].value and "\n" not in at.error[0].value
    assert [p["name"] for p in Store(db).list_projects()] == [SAMPLE_PROJECT_NAME]


def test_label_undo_skip_and_navigation(db):
    store, pid = tiny_project(db)
    at = app("annotate")
    at.sidebar.text_input(key="annotator").set_value("alice").run()
    sid = current_sentence(at, pid)
    assert sid == store.queue(pid, "sequential")[0]  # no model: file order
    first = store.get_sentence(sid)
    assert first["labels"] == [BP, None, None, BL, None]
    assert at.button(key="tok_0").label == "Anna `B-PER`"
    assert at.button(key="tok_1").label == "went"

    # pick token 1, press the label button of I-PER: saved at once, selection moves on
    at.button(key="tok_1").click().run()
    at.button(key="lab_1").click().run()
    assert not at.exception
    s = store.get_sentence(sid)
    assert s["labels"][1] == IP and s["sources"][1] == "human" and s["annotators"][1] == "alice"
    assert at.session_state[f"annotate_{pid}"]["sel"] == 2  # next unlabeled token
    assert at.button(key="tok_1").label == "went `I-PER`"
    at.button(key="lab_3").click().run()  # O for token 2
    assert store.get_sentence(sid)["labels"][2] == OUT

    # clear, then undo the clear
    at.button(key="tok_2").click().run()
    at.button(key="clear").click().run()
    assert store.get_sentence(sid)["labels"][2] is None
    at.button(key="undo").click().run()
    assert store.get_sentence(sid)["labels"][2] == OUT
    at.button(key="undo").click().run()
    at.button(key="undo").click().run()
    assert store.get_sentence(sid)["labels"] == first["labels"]  # partial labels stay partial

    # skip: next sentence, and the skipped one goes to the end of alice's queue
    at.button(key="skip").click().run()
    nxt = current_sentence(at, pid)
    assert nxt != sid
    assert store.queue(pid, "sequential", annotator="alice")[-1] == sid
    at.button(key="prev").click().run()
    assert current_sentence(at, pid) == sid
    at.button(key="next").click().run()
    assert current_sentence(at, pid) == nxt
    assert store.progress(pid)["skipped_sentences"] == 1


def test_keyboard_shortcuts_and_help_are_shown(db):
    """The keys go through the page's client-side queue (pages/_keys.py), not Streamlit's
    button shortcuts; the keyboard itself is tested in test_annotate_page.py and in
    Chromium (test_browser_annotate.py)."""
    tiny_project(db)
    at = app("annotate")
    at.session_state["help_keys"] = True  # open the (lazy) expander
    at.run()
    help_text = next(m.value for m in at.markdown if "undo your last key press" in m.value)
    for key in ("1 … 9", "0", "/", "X", "← / →", "Shift + ← / →, Shift + click", "Esc", "A",
                "N / P", "S", "U"):
        assert f"**{key}**" in help_text
    assert not any(b.proto.shortcut for b in at.button)  # no second path for a key
    # BIO labels: the keys are the entity types', each shown once (the labels have none)
    assert at.button(key="span_0").label == "PER :gray[1]"
    assert at.button(key="span_2").label == "O (outside) :gray[0]"  # O always has a key
    assert at.button(key="lab_0").label == "B\\-PER" and at.button(key="lab_3").label == "O"


def test_training_changes_highlights_queue_and_accept(db):
    store, pid = tiny_project(db)
    at = app("annotate")
    first = current_sentence(at, pid)
    assert not any("dashed" in h.value for h in at.html if "<style>" in h.value
                   and "st-key-tok_" in h.value and "2px dashed" in h.value)
    version = jobs.train_now(store.home, pid, TINY)
    assert version["status"] == "done"
    uncertain = store.queue(pid, "uncertainty")
    assert uncertain != store.queue(pid, "sequential")

    fresh = app("annotate")  # a new session starts with the most uncertain sentence
    sid = current_sentence(fresh, pid)
    assert sid == uncertain[0] and sid != first
    css = next(h.value for h in fresh.html if "st-key-tok_" in h.value)
    assert "2px dashed" in css and "rgba(245,158,11," in css  # suggestions + uncertainty
    assert any("suggestions from model v" in m.value for m in fresh.markdown)
    # the queue says what ordered it; the cursor is on the highest-scored unlabeled token
    assert version["query_strategy"] == active.DEFAULT_QUERY
    assert _text.queue_caption(active.DEFAULT_QUERY) in [c.value for c in fresh.caption]
    q = store.get_query_scores(version["id"], [sid])[sid]
    free = [t for t, lab in enumerate(store.get_sentence(sid)["labels"]) if lab is None]
    assert fresh.session_state[f"annotate_{pid}"]["sel"] == free[int(np.argmax(q[free]))]
    assert fresh.button(key="tok_0").label.endswith("?*")  # italic suggestion
    assert any("confidence 1.0" in h.value for h in fresh.html)  # the legend

    # accept everything above 0.5: stored as 'accepted', one undo step
    fresh.slider(key="accept_thr").set_value(0.5).run()
    n = sum(1 for p in store.get_predictions(version["id"], [sid])[sid].max(axis=1) if p >= 0.5)
    assert fresh.button(key="accept").label == f"Accept {n} suggestion{'s' if n != 1 else ''}"
    fresh.button(key="accept").click().run()
    s = store.get_sentence(sid)
    assert sum(lab is not None for lab in s["labels"]) == n > 0
    assert {src for src in s["sources"] if src} == {"accepted"}
    assert "✓" in fresh.button(key="tok_0").label or s["labels"][0] is None
    fresh.button(key="undo").click().run()
    assert all(lab is None for lab in store.get_sentence(sid)["labels"])


def test_train_page_runs_a_background_job_and_lists_versions(db):
    store, pid = tiny_project(db)
    at = app("train")
    assert at.segmented_control(key="train_preset").value == "GPSL2"
    at.segmented_control(key="train_preset").set_value("Custom").run()
    at.text_input(key="train_custom").set_value("-2, -1, 1").run()
    at.toggle(key="train_hyper").set_value(False).run()
    at.number_input(key="train_iter").set_value(3).run()
    assert at.segmented_control(key="train_inference").value == "auto"
    assert at.number_input(key="train_max_sent").value == 0  # no cap by default
    at.segmented_control(key="train_inference").set_value("full").run()
    spare = spares._SPARE.get("proc")  # the page started the click's worker ahead
    assert spare is not None and spare.poll() is None and "--spare" in spare.args
    at.button(key="start").click().run()
    assert not at.exception and not at.error
    versions = store.list_model_versions(pid)
    assert versions[0]["settings"]["pid"] == spare.pid  # the click handed it the version
    assert len(versions) == 1 and versions[0]["settings"]["offsets"] == [-2, -1, 1]
    assert versions[0]["settings"]["inference"] == "full"
    assert versions[0]["settings"]["max_sentences"] is None
    deadline = time.monotonic() + limit(120)
    while jobs.running_version(store.home, pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    version = store.get_model_version(versions[0]["id"])
    assert version["status"] == "done", version["error"]
    at.run()
    table = at.dataframe[0].value
    assert list(table["version"]) == [version["id"]] and list(table["status"]) == ["done"]
    assert list(table["dependencies"]) == ["Custom (-2, -1, 1)"]
    assert any("Last run: **v1**" in m.value for m in at.markdown)
    assert version["metrics"]["inference"] == "full"
    labeled = [s for s in store.get_sentences(pid, "train")
               if any(lab is not None for lab in s["labels"])]
    assert version["metrics"]["train_sentences"] == len(labeled)  # every labeled sentence


def test_confidence_page_with_a_model_and_click_through(db):
    store, pid = tiny_project(db)
    at = app("confidence")
    assert any("No model yet" in i.value for i in at.info)
    jobs.train_now(store.home, pid, TINY)
    at = app("confidence")
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Held-out accuracy"].endswith("%") and metrics["ECE"] != "–"
    assert metrics["Held-out confidence"] != "–" and metrics["ECE (equal-mass)"] != "–"
    # the ECE read against what chance alone gives on these held-out tokens
    floor = [c.value for c in at.caption if "by chance; this version" in c.value]
    assert len(floor) == 1 and f"{metrics['ECE']} and {metrics['ECE (equal-mass)']}" in floor[0]
    # histogram, box, reliability, learning curve, selective accuracy
    assert len(at.get("plotly_chart")) >= 5
    assert any("accept" in c.value.lower() for c in at.caption)  # the threshold section
    assert at.session_state["conf_version"] == store.active_model(pid)["id"]
    # a newer version becomes active: the page follows it (it kept showing v1 before)
    second = jobs.train_now(store.home, pid, TINY)
    at.run()
    assert not at.exception
    assert at.session_state["conf_version"] == second["id"]
    # the least-sure sentences: in queue order, scored by the strategy that says so
    name = _format.query_name(active.DEFAULT_QUERY)
    assert any(_text.queue_caption(active.DEFAULT_QUERY) in c.value for c in at.caption)
    assert sum(f" · {name} score " in c.value for c in at.caption) >= 1
    most = store.queue(pid, "uncertainty")[0]
    at.button(key=f"open_{most}").click().run()
    assert not at.exception
    assert at.session_state[f"annotate_{pid}"]["current"] == most  # opened on Annotate


def test_export_and_reimport_round_trip(db):
    store, pid = tiny_project(db)
    at = app("data")
    assert not at.exception
    assert {b.key for b in at.get("download_button")} >= {"dl_ann"}
    assert "Anna\tB-PER" in at.code[0].value
    text = exp.export_annotations(store.db, pid, "conll", "train")  # what the button serves
    assert "went\t_" in text

    at = app()
    at.file_uploader(key="new_file").set_value(("export.conll", text.encode(), "text/plain"))
    at.run()
    keyed(at.text_input, "new_labels_").set_value("B-PER I-PER B-LOC O")
    keyed(at.text_input, "new_name_").set_value("Round trip")
    keyed(at.button, "create_upload_").click().run()
    assert not at.exception and not at.error
    new = next(p["id"] for p in store.list_projects() if p["name"] == "Round trip")
    before, after = store.export_sentences(pid, "train"), store.export_sentences(new, "train")
    assert [s.tokens for s in after] == [s.tokens for s in before]
    assert [s.labels for s in after] == [s.labels for s in before]

    # JSONL export, and import more sentences on the Data page
    jsonl = exp.export_annotations(store.db, pid, "jsonl", "train")
    assert [s.labels for s in imp.parse_upload(jsonl.encode(), "x.jsonl")] == \
        [s.labels for s in before]
    at = app("data")
    at.file_uploader(key="imp_file").set_value(("more.txt", b"Dora went home\n", "text/plain"))
    at.run()
    keyed(at.button, "imp_go_").click().run()
    assert not at.exception and not at.error
    assert store.sentence_count(pid, "train") == len(before) + 1


def test_prediction_export_and_model_zip(db):
    store, pid = tiny_project(db)
    version = jobs.train_now(store.home, pid, TINY)
    conll = exp.export_predictions(store.db, pid, version, "conll", None)
    first = conll.splitlines()[0].split("\t")
    assert first[:2] == ["Anna", "B-PER"] and first[2] in version["classes"]
    assert 0.0 <= float(first[3]) <= 1.0
    jsonl = exp.export_predictions(store.db, pid, version, "jsonl", "train")
    rec = json.loads(jsonl.splitlines()[0])
    assert set(rec["marginals"][0]) == set(version["classes"])
    assert abs(sum(rec["marginals"][0].values()) - 1) < 1e-3
    blob = exp.model_zip(version["path"])
    names = zipfile.ZipFile(io.BytesIO(blob)).namelist()
    assert f"{version['id']}/model.json" in names
    at = app("data")
    assert {b.key for b in at.get("download_button")} == {"dl_ann", "dl_tool", "dl_votes",
                                                                "dl_pred", "dl_model"}


def test_hostile_token_text_is_escaped(db):
    extra = [{"tokens": HOSTILE}]
    store, pid = tiny_project(db, extra)
    hostile_sid = store.sentence_ids(pid, "train")[-1]
    jobs.train_now(store.home, pid, TINY)

    at = app("annotate")
    at.session_state["goto_sentence"] = hostile_sid
    at.run()
    assert current_sentence(at, pid) == hostile_sid
    labels = [at.button(key=f"tok_{i}").label for i in range(len(HOSTILE))]
    for label in labels:
        assert "<" not in label and ">" not in label  # entities, never markup
    assert labels[0].startswith("&lt;script&gt;alert\\(1\\)&lt;/script&gt;")
    assert labels[2].startswith("\\*\\*bold\\*\\*")
    for h in at.html:
        assert "<script" not in h.value and "<img" not in h.value

    at = app("confidence")
    assert not at.exception
    rendered = " ".join(h.value for h in at.html)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rendered
    assert "&lt;img src=x onerror=alert(1)&gt;" in rendered
    assert "<script" not in rendered and "<img" not in rendered

    # the helpers themselves
    assert _format.esc("<b a='1'>&") == "&lt;b a=&#x27;1&#x27;&gt;&amp;"
    html = _chips.sentence_html(HOSTILE, [None] * len(HOSTILE), [0.5] * len(HOSTILE))
    assert "<script" not in html and "&lt;script&gt;" in html
    assert "<" not in _format.md_escape("<img src=x onerror=alert(1)>")


def test_delete_project_then_pages_ask_for_one(db):
    at = app()
    at.checkbox(key="confirm_delete").check().run()
    next(b for b in at.button if b.label == "Delete project").click().run()
    assert not at.exception
    assert Store(db).list_projects() == []
    for page in ("annotate", "train", "confidence", "data"):
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception
        assert any("create one on the Project page" in i.value for i in at.info)


def test_db_flag_overrides_the_environment(db, tmp_path, monkeypatch):
    flagged = tmp_path / "flag" / "other.sqlite3"
    monkeypatch.setattr(sys, "argv", ["app.py", "--db", str(flagged)])
    at = app()
    assert at.title[0].value == "Project"
    assert flagged.is_file() and not db.exists()  # `streamlit run app.py -- --db PATH`
    assert Store(flagged).list_projects()[0]["name"] == SAMPLE_PROJECT_NAME


def test_noise_floor_note_reads_the_ece_against_chance():
    from dataclasses import replace

    from gpsl.annotation import CalibrationReport

    calib = CalibrationReport(table=None, accuracy=0.9, ece=0.011, ece_floor=0.014,
                              ece_mass=0.012, ece_mass_floor=0.016, mean_confidence=0.9,
                              nll=0.3, tokens=1234, selective=None, thresholds=None, bands=None)
    note = _text.noise_floor_note(calib)
    assert "1,234 held-out tokens" in note and "0.014 (equal-width)" in note
    assert "0.016 (equal-mass)" in note and "within what chance alone gives" in note
    over = _text.noise_floor_note(replace(calib, ece_mass=0.03))
    assert "more than chance alone gives" in over and "0.030" in over


def test_versions_table_says_how_each_version_was_calibrated():
    from gpsl.annotation import Calibration, Version

    def short(row):
        return _text.calibration_short(Calibration.from_row(row))

    assert short(None) == "none"
    assert short({"kind": "temperature", "temperature": 1.234,
                  "source": "3-fold labels"}) == "T 1.23 (3-fold labels)"
    assert short({"kind": "structured", "t_unary": 0.871, "t_pair": 0.27,
                  "source": "held-out gold"}) == \
        "T_U 0.87 · T_S 0.27 (held-out gold)"
    assert short({"kind": "structured+vector", "t_unary": 2.5, "t_pair": 9.0,
                  "source": "3-fold labels"}) == \
        "T_U 2.50 · T_S 9.00 + vector (3-fold labels)"
    ens = {"kind": "ensemble",
           "summary": "0.70 × [T_U 1.30 · T_S 10.11] + 0.30 × [T 0.81 (probit)]",
           "source": "3-fold labels"}
    assert short(ens) == \
        "0.70 × [T_U 1.30 · T_S 10.11] + 0.30 × [T 0.81 (probit)] (3-fold labels)"
    plain = _text.calibration_plain(Version.from_row(
        {"metrics": {"calibration": {**ens, "tokens": 1606}}}))
    assert plain.startswith("Confidences are calibrated on 1,606 labeled tokens") \
        and "(3 folds)" in plain and "9 times in 10" in plain and "T_U" not in plain
    held = _text.calibration_plain(Version.from_row({"metrics": {"calibration": {
        "kind": "temperature", "temperature": 1.5, "source": "held-out gold", "tokens": 80}}}))
    assert "on 80 held-out gold tokens" in held and "not in-sample" in held
    assert _text.calibration_plain(Version.from_row({"metrics": {}})).startswith(
        "Not calibrated yet")
    note = _text.calibration_note(Version.from_row(
        {"metrics": {"calibration": {**ens, "tokens": 1606}}}))
    assert "mixture of calibrators" in note and "0.30 × [T 0.81 (probit)]" in note \
        and "1,606 tokens (3-fold labels)" in note and "temperature 1.00" not in note
    row = _text.versions_table([Version.from_row(
        {"id": 4, "number": 2, "active": True, "status": "done",
         "created_at": None, "settings": {"offsets": [-1, 1]},
         "metrics": {"calibration": {"kind": "temperature", "temperature": 2.0,
                                     "source": "held-out gold"},
                     "missing_weight": 0.25}})])[0]
    assert row["version"] == 2 and row["calibration"] == "T 2.00 (held-out gold)"
    assert row["missing-label weight"] == 0.25


def test_the_apps_start_up_objects_leave_the_collectors_scans(tmp_path, monkeypatch):
    """After the first full run the process's objects are frozen (``gc.freeze``): a full
    collection during a later click no longer walks them (70-90 ms -> about 10 ms of CPU at
    100k sentences, docs/app.md). Once a process: a second run freezes nothing more, and a
    cycle made after the freeze is still collected."""
    import gc
    import weakref

    app_store_env(tmp_path, monkeypatch)
    gc.unfreeze()
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(120))
        at.run()
        assert not at.exception
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # the modules' objects, Streamlit's, pandas' and Plotly's
        at.run()
        assert gc.get_freeze_count() <= frozen  # nothing new frozen (freed ones leave it)

        class Node:
            pass

        node = Node()
        node.me = node
        ref = weakref.ref(node)
        del node
        gc.collect()
        assert ref() is None
    finally:
        gc.unfreeze()
