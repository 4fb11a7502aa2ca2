"""bench.app_pages end to end at a tiny size: the store is built when missing and reused
when present, every page opens and reruns without an error, the table and the JSON are
written with the command."""

import json

import pytest

from bench import app_pages, app_scale


@pytest.mark.timeout(600)
def test_app_pages_builds_once_and_measures_every_page(tmp_path, monkeypatch):
    for name in ("GPSL_DB", "GPSL_MODELS", "GPSL_ANNOTATOR"):  # the bench sets them in this
        monkeypatch.setenv(name, "")  # process: recorded, so restored after the test
        monkeypatch.delenv(name)
    db = tmp_path / "store" / "store.sqlite3"
    args = ["--db", str(db), "--sentences", "60", "--max-iter", "2", "--reruns", "2",
            "--out", str(tmp_path / "out")]
    assert app_pages.main(args) == 0
    report = json.loads((tmp_path / "out" / "app_pages.json").read_text(encoding="utf-8"))
    assert report["errors"] == []
    assert list(report["pages"]) == list(app_scale.PAGES)
    for p in report["pages"].values():
        assert p["open_cpu_s"] > 0 and len(p["rerun_cpu_s"]) == 2
    corpus = db.parent / "train.conll"  # written only when the store is built
    built = corpus.stat().st_mtime_ns
    assert app_pages.main([*args[:2], "--reruns", "1", "--out", str(tmp_path / "again")]) == 0
    assert corpus.stat().st_mtime_ns == built  # the store was reused, not built again
    again = json.loads((tmp_path / "again" / "app_pages.json").read_text(encoding="utf-8"))
    assert again["errors"] == [] and len(again["pages"]["data"]["rerun_cpu_s"]) == 1
    md = (tmp_path / "out" / "app_pages.md").read_text(encoding="utf-8")
    assert "python -m bench.app_pages --db" in md and "| confidence |" in md
