"""bench.import_memory runs end to end at a small size: both code paths import every
sentence in a child process of their own, and it writes its Markdown and JSON."""

import json

from bench import import_memory


def test_import_memory_small_run(tmp_path):
    assert import_memory.main(["--sentences", "300", "--before", "HEAD",
                               "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "import_memory.json").read_text(encoding="utf-8"))
    rows = {r["mode"]: r for r in report["rows"]}
    assert set(rows) == {"before", "after"}
    for r in rows.values():
        assert r["n"] == r["sentences"] == r["stored"] == 300
        assert r["peak_mb"] >= r["summary_peak_mb"] >= r["start_mb"] > 0
        assert r["cpu_s"] > r["import_cpu_s"] > 0
    assert rows["before"]["tokens"] == rows["after"]["tokens"] > 300
    assert "| 300 |" in (tmp_path / "import_memory.md").read_text(encoding="utf-8")
