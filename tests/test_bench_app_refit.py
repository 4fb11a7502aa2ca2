"""bench.app_refit end to end on a small project (one refit through the worker process): every
phase row, the peer, the warm start and the refitted calibration, Markdown and JSON."""

import json

import pytest

from bench import app_refit
from bench.common import DATA_DIR, DataMissing, load_pooled


@pytest.mark.timeout(300)
def test_app_refit_one_small_refit(tmp_path):
    try:
        load_pooled(DATA_DIR, "chunking")
    except DataMissing as exc:
        pytest.skip(str(exc))
    args = ["--tokens", "1500", "--batch", "20", "--repeats", "1", "--out", str(tmp_path)]
    assert app_refit.main(args) == 0
    report = json.loads((tmp_path / "app_refit.json").read_text(encoding="utf-8"))
    (refit,), (peer,) = report["refits"], report["crfsuite"]
    assert report["batches"] == [report["batches"][0]] and report["batches"][0] >= 1
    assert refit["warm"] == "version 1" and refit["calibration"] == "held-out gold"
    assert refit["calibration_how"] == "refitted" and report["first"]["calibration_how"] == \
        "selected"
    rows = app_refit.phase_rows(refit)
    assert set(rows) == {label for label, _, _ in app_refit.PHASES}
    assert all(w >= 0 and c >= 0 for w, c in rows.values())
    assert rows["fit"][1] > 0 and rows["start-up"][1] > 0
    # the phases add up to no more than the click's wall time and the worker's CPU
    assert sum(w for w, _ in rows.values()) <= refit["click_to_stored_s"] * 1.05 + 0.1
    assert sum(c for _, c in rows.values()) <= refit["worker_cpu_s"] * 1.05 + 0.1
    assert peer["cpu_s"] > 0 and peer["tokens"] > 1000
    md = (tmp_path / "app_refit.md").read_text(encoding="utf-8")
    assert "python -m bench.app_refit --tokens 1500" in md
    assert "| **click → predictions stored** |" in md and "CRFsuite" in md
