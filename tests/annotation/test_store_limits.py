"""The limits a lead sets per store, within the ceilings of the server start, and the app's
own exports read back under the default limits (gpsl.annotation.store.store_limits)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpsl import limits
from gpsl.annotation import Store
from gpsl.errors import InputError
from tests.support.limits import limit

LABELS = ["B-PER", "I-PER", "B-LOC", "O"]
ROOT = Path(__file__).resolve().parents[2]


def _project(store: Store, n: int, length: int = 12) -> int:
    pid = store.create_project("big", LABELS)
    store.add_sentences(pid, [{"tokens": [f"word{k}x{t}" for t in range(length)],
                               "labels": ["O" if t % 3 else "B-PER" for t in range(length)]}
                              for k in range(n)])
    return pid


def test_a_lead_sets_the_limits_within_the_ceiling(tmp_path, monkeypatch):
    monkeypatch.setenv(limits.ENV_UPLOAD_CEILING_MB, "50")
    monkeypatch.setenv(limits.ENV_TOKENS_CEILING, "3000")
    store = Store(tmp_path / "s.sqlite3")
    before = store.store_limits()
    assert before["upload_mb"] is None and before["upload_bytes"] == 20 * limits.MB
    assert before["tokens"] == limits.DEFAULT_MAX_TOKENS
    got = store.set_store_limits(upload_mb=40, max_tokens=2500)
    assert got["upload_bytes"] == 40 * limits.MB and got["tokens"] == 2500
    assert Store(tmp_path / "s.sqlite3").store_limits()["upload_mb"] == 40  # kept
    for kw, needle in [({"upload_mb": 51}, "over the ceiling of 50 MB"),
                       ({"max_tokens": 3001}, "over the ceiling of 3000 tokens"),
                       ({"upload_mb": 0}, "expected a positive number"),
                       ({"max_tokens": -5}, "expected a positive number")]:
        with pytest.raises(InputError, match=needle) as err:
            store.set_store_limits(**kw)
        assert "\n" not in str(err.value)
    assert store.store_limits()["upload_bytes"] == 40 * limits.MB  # nothing changed
    # a file over the lead's limit is refused, one under it read
    pid = _project(store, 3)
    data = store.export_annotations(pid, "conll").encode()
    store.set_store_limits(upload_mb=len(data) / 2 / limits.MB)
    other = Store(tmp_path / "other.sqlite3")  # an empty store: no export of its own
    other.set_store_limits(upload_mb=len(data) / 2 / limits.MB)
    with pytest.raises(InputError, match="upload limit"):
        other.parse_upload(data, "x.conll", "conll")
    other.set_store_limits(upload_mb=len(data) * 2 / limits.MB)
    assert len(other.parse_upload(data, "x.conll", "conll")) == 3
    # the server restarted with a lower ceiling: the lead's limit is held under it
    monkeypatch.setenv(limits.ENV_UPLOAD_CEILING_MB, "10")
    store.set_store_limits(upload_mb=None)
    other.set_store_limits(upload_mb=None)
    monkeypatch.setenv(limits.ENV_UPLOAD_CEILING_MB, "50")
    other.set_store_limits(upload_mb=45)
    monkeypatch.setenv(limits.ENV_UPLOAD_CEILING_MB, "10")
    assert other.store_limits()["upload_bytes"] == 10 * limits.MB


@pytest.mark.parametrize("fmt", ["conll", "jsonl"])
def test_the_apps_own_export_imports_back_under_the_default_limits(tmp_path, monkeypatch, fmt):
    # the default upload limit scaled down (the 25.6 MB export against 20 MB of issue 37)
    monkeypatch.setenv(limits.ENV_MAX_UPLOAD_MB, "0.05")
    store = Store(tmp_path / "s.sqlite3")
    pid = _project(store, 400)
    long_pid = store.create_project("long", LABELS)
    monkeypatch.setenv(limits.ENV_MAX_TOKENS, "2000")
    store.add_sentences(long_pid, [{"tokens": ["w"] * 1500}])  # admitted under a higher limit
    monkeypatch.delenv(limits.ENV_MAX_TOKENS)
    data = store.annotations_file(pid, fmt).read()
    assert data.decode() == store.export_annotations(pid, fmt)
    assert len(data) > limits.max_upload_bytes()  # over the default limit...
    back = store.parse_upload(data, f"export.{fmt}", fmt)  # ...and read back
    assert len(back) == 400 and back[0].labels == ["B-PER", "O", "O"] * 4
    n = store.import_sentences(store.create_project("copy", LABELS), back)
    assert n == 400
    long_data = store.export_annotations(long_pid, fmt).encode()
    assert len(store.parse_upload(long_data, f"long.{fmt}", fmt)[0].tokens) == 1500
    # a file of another origin, larger than any export of this store, is refused
    with pytest.raises(InputError, match="upload limit"):
        store.parse_upload(data * 8, f"other.{fmt}", fmt)


def test_an_import_written_a_page_at_a_time_names_the_right_sentence_and_keeps_nothing(
        tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    pid = store.create_project("big", LABELS)
    items = [{"tokens": [f"w{k}", "x"], "labels": ["O", None]} for k in range(4500)]
    items[4100] = {"tokens": ["bad", "x"], "labels": ["B-XYZ", None]}
    with pytest.raises(InputError, match=r"sentence 4101, token 1 \('bad'\): label 'B-XYZ'"):
        store.add_sentences(pid, items)
    assert store.sentence_count(pid) == 0  # all or nothing, whatever the pages
    del items[4100]
    assert store.add_sentences(pid, items) == 4499
    got = store.get_sentences(pid, offset=2999, limit=2)
    assert [s["tokens"][0][0] for s in got] == ["w2999", "w3000"]
    assert [s["position"] for s in got] == [2999, 3000]
    assert store.progress(pid)["labeled_tokens"] == 4499


def test_the_lead_sets_the_limits_on_the_project_page(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("GPSL_DB", str(tmp_path / "db.sqlite3"))
    monkeypatch.setenv("GPSL_ANNOTATOR", "lead")
    monkeypatch.setenv(limits.ENV_UPLOAD_CEILING_MB, "64")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(60)).run()
    at.switch_page("pages/project.py").run()
    assert not at.exception, at.exception
    assert at.number_input(key="limit_upload_mb").max == 64
    at.number_input(key="limit_upload_mb").set_value(48.0)
    at.number_input(key="limit_tokens").set_value(3000)
    at.button(key="FormSubmitter:store_limits-Save limits").click().run()
    assert not at.exception, at.exception
    got = Store(tmp_path / "db.sqlite3").store_limits()
    assert got["upload_mb"] == 48 and got["tokens"] == 3000
    assert "at most 48 MB per file, 3,000 tokens per sentence" in \
        at.file_uploader(key="new_file").help
