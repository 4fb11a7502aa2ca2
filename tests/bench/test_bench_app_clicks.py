"""bench.app_clicks on two copies of a tiny trained SQLite store: every click and Next is
timed with its statements, the table compares each store with the first, the JSON and the
Markdown are written with the command."""

import json
import shutil

import pytest

from bench import app_clicks, app_scale


@pytest.mark.timeout(600)
def test_app_clicks_on_two_stores(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    train, held = app_scale.make_corpus(folder, 40)
    job = {"db": str(tmp_path / "a" / "store.sqlite3"), "models": str(tmp_path / "a" / "models"),
           "train": str(train), "heldout": str(held), "max_iter": 2, "clicks": 0}
    (tmp_path / "a").mkdir()
    job["pid"] = app_scale.in_fresh_process(app_scale.phase_import, job)["pid"]
    assert app_scale.in_fresh_process(app_scale.phase_train, job)["status"] == "done"
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    out = tmp_path / "out"
    stores = [str(tmp_path / x / "store.sqlite3") for x in "ab"]
    args = ["--store", stores[0], str(tmp_path / "a" / "models"),
            "--store", stores[1], str(tmp_path / "b" / "models"),
            "--clicks", "3", "--rounds", "1", "--out", str(out)]
    assert app_clicks.main(args) == 0
    report = json.loads((out / "app_clicks.json").read_text(encoding="utf-8"))
    assert list(report["stores"].values()) == stores
    for name in report["stores"]:
        s = report["summary"][name]
        assert s["label_click_ms"]["n"] == 3 and s["next_ms"]["n"] >= 1
        assert s["label_click_statements"]["min"] >= 10 and s["next_statements"]["min"] >= 10
        assert s["label_click_sql_ms"]["p50"] > 0
        assert len(report["samples"][name]["label"]) == 3
    md = (out / "app_clicks.md").read_text(encoding="utf-8")
    assert "python -m bench.app_clicks --store" in md
    assert "| label click: wall p50 / store 1 | 1.00× |" in md
    assert "| Next: statements (min–max) |" in md
