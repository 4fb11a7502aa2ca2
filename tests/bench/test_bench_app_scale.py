"""bench.app_scale end to end at a tiny size on SQLite: every step runs, every page opens
without an error, the exports and the store sizes grow with the project, the table and the
JSON are written with the command."""

import json

import pytest

from bench import app_scale


@pytest.mark.timeout(600)
def test_app_scale_at_a_tiny_size(tmp_path):
    args = ["--sentences", "60", "120", "--backend", "sqlite", "--max-iter", "2",
            "--clicks", "2", "--out", str(tmp_path)]
    assert app_scale.main(args) == 0
    report = json.loads((tmp_path / "app_scale.json").read_text(encoding="utf-8"))
    assert report["errors"] == []
    small, big = report["results"]["sqlite 60"], report["results"]["sqlite 120"]
    for r, n in ((small, 60), (big, 120)):
        assert r["import"]["sentences"] == n
        assert r["train"]["status"] == "done"
        assert {"fitting", "predicting"} <= set(r["train"]["phases_cpu_s"])
        assert set(r["app"]["pages"]) == {"app", *app_scale.PAGES}
        assert r["app"]["label_click_ms"]["n"] == 2 and r["app"]["next_ms"]["n"] >= 1
        assert r["app"]["peak_mb"] > 0 and r["train"]["store_mb"] > r["import"]["store_mb"]
        # 3 people vote on every token of the team's sentences; their figures are computed
        team = r["team"]
        assert team["sentences"] == max(1, round(app_scale.TEAM_SHARE * n))
        assert team["votes"] > 3 * 8 * team["sentences"] - 1 and team["votes"] % 3 == 0
        assert team["conflicts"] > 0
    # twice the sentences: larger exports (every sentence is written)
    for name in ("annotations conll", "predictions conll", "predictions jsonl"):
        assert big["export"][name]["mb"] > 1.5 * small["export"][name]["mb"]
    md = (tmp_path / "app_scale.md").read_text(encoding="utf-8")
    assert "python -m bench.app_scale --sentences 60 120" in md
    assert "| confidence: open s |" in md and "growth exponent" in md
    assert "| reports.team first CPU s |" in md
