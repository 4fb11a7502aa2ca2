"""Issue 41, item 7: logging.  The library configures no handler but a NullHandler on
``gpsl``; the keep-training hook's failure (after a label write's commit) is logged and kept
on the project for the lead, who sees it on the Train page; the app logs the error lines its
pages show (the model service's refusals: tests/cli/test_serve.py)."""

from __future__ import annotations

import logging

import pytest

from gpsl.annotation import Store
from tests.support.helpers import OUT, ROOT, app_store_env, tiny_store, wait_until
from tests.support.limits import limit


def _broken_store(db, tmp_path) -> Store:
    """The store with its models folder under a regular file: the hook cannot make its lock."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    return Store(db, models_root=blocker)


def _five_labels(store, pid, sid) -> list[int]:
    return [store.set_label(sid, t, OUT, "alice") for t in range(5)]


def test_the_library_adds_only_a_null_handler():
    import gpsl.annotation  # noqa: F401 - every back-end module imported
    import gpsl.serve  # noqa: F401

    handlers = logging.getLogger("gpsl").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)
    assert all(isinstance(h, logging.NullHandler) or getattr(h, "_gpsl_app", False)
               for h in handlers), handlers  # the app's own (pages/_log) when an AppTest ran


def test_a_failing_keep_training_hook_is_logged_and_kept_for_the_lead(tmp_path, caplog):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    sid = store.sentence_ids(pid, split="train")[3]
    broken = _broken_store(tmp_path / "s.sqlite3", tmp_path)
    broken.set_keep_training(pid, True, 5)
    with caplog.at_level(logging.WARNING, logger="gpsl"):
        ids = _five_labels(broken, pid, sid)
    assert all(ids)  # the labels are committed: the hook's failure is never the write's
    assert store.get_sentence(sid)["labels"][:5] == [OUT] * 5
    assert store.list_model_versions(pid) == []
    records = [r for r in caplog.records if r.name == "gpsl.annotation.training.jobs"]
    assert records and records[-1].levelno == logging.ERROR, caplog.text
    assert "keep training (project" in records[-1].getMessage()
    assert "NotADirectoryError" in records[-1].getMessage() and records[-1].exc_info
    # kept on the project: the facade's row and the record the Train page reads
    error = store.keep_training(pid)["error"]
    assert "NotADirectoryError" in error["message"] and error["at"]
    shown = store.reports.keep_training(pid).error
    assert shown.startswith(error["message"]) and shown.endswith(" UTC)")
    # the lead turns it off and on again: the record is cleared
    store.set_keep_training(pid, False)
    assert store.keep_training(pid)["error"] is None
    assert store.reports.keep_training(pid).error is None


@pytest.mark.timeout(300)
def test_a_run_that_starts_clears_the_kept_failure(tmp_path, caplog):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    store = Store(tmp_path / "s.sqlite3", models_root=tmp_path / "models")
    ids = store.sentence_ids(pid, split="train")
    broken = _broken_store(tmp_path / "s.sqlite3", tmp_path)
    broken.set_keep_training(pid, True, 5)
    _five_labels(broken, pid, ids[3])
    assert store.keep_training(pid)["error"] is not None
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gpsl"):
        store.set_label(ids[4], 0, OUT, "bob")  # the models folder works again: a run starts
    versions = store.list_model_versions(pid)
    assert len(versions) == 1 and versions[0]["settings"]["started_by"] == "keep training"
    assert store.keep_training(pid)["error"] is None
    assert not [r for r in caplog.records if r.name == "gpsl.annotation.training.jobs"]
    wait_until(lambda: store.get_model_version(versions[0]["id"])["status"] != "running",
               timeout=limit(180))


def _app(monkeypatch):
    from streamlit.testing.v1 import AppTest

    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(30)).run()


def test_the_train_page_shows_the_hook_failure_to_the_lead(tmp_path, monkeypatch):
    db = app_store_env(tmp_path, monkeypatch)
    store, pid = tiny_store(db)
    broken = _broken_store(db, tmp_path)
    broken.set_keep_training(pid, True, 5)
    _five_labels(broken, pid, store.sentence_ids(pid, split="train")[3])
    at = _app(monkeypatch)
    at.switch_page("pages/train.py").run()
    assert not at.exception, at.exception
    lines = [w.value for w in at.warning if "Keep training could not start a run" in w.value]
    assert len(lines) == 1 and "NotADirectoryError" in lines[0], [w.value for w in at.warning]
    store.set_keep_training(pid, True, 5)  # the lead changed the setting: cleared
    at.run()
    assert not [w for w in at.warning if "Keep training could not start" in w.value]


def test_the_app_logs_the_error_lines_its_pages_show(tmp_path, monkeypatch, caplog):
    db = app_store_env(tmp_path, monkeypatch)
    store = Store(db)
    pid = store.create_project("empty", ["B-PER", "O"])
    store.add_sentences(pid, [{"tokens": ["a", "b"]}])
    at = _app(monkeypatch)
    at.switch_page("pages/train.py").run()
    with caplog.at_level(logging.WARNING, logger="pages"):
        at.button(key="start").click().run()
    shown = [e.value for e in at.error]
    assert shown and "no labeled tokens yet" in shown[0]
    logged = [r.getMessage() for r in caplog.records if r.name == "pages._log"]
    assert any("no labeled tokens yet" in m for m in logged), caplog.text
    handlers = [h for h in logging.getLogger("pages").handlers if getattr(h, "_gpsl_app", 0)]
    assert len(handlers) == 1  # configured once, however many runs
