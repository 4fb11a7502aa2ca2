"""The engine timing benchmark runs end to end on a tiny slice (figures come from full runs)."""

import json

import pytest

from bench import common, engine_timing


@pytest.mark.skipif(not common.DATA_DIR.is_dir(), reason="../shared/data/crfpp is absent")
def test_engine_timing_tiny_run(tmp_path, monkeypatch):
    monkeypatch.setitem(common.PAPER_SIZES, "seg", (4, 3))
    monkeypatch.setitem(engine_timing.PAPER_SIZES, "seg", (4, 3))
    assert engine_timing.main(["--datasets", "seg", "--partitions", "2",
                               "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "engine_timing.json").read_text())
    rows = report["results"]["seg"]["rows"]
    assert len(rows) == 2 and all(r["fit_wall_s"] > 0 and r["sweeps"] >= 1 for r in rows)
    assert 0 <= report["results"]["seg"]["loss_mean"] <= 100
    md = (tmp_path / "engine_timing.md").read_text()
    assert "python -m bench.engine_timing --datasets seg" in md
