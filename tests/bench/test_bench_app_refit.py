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


@pytest.mark.timeout(400)
def test_app_refit_on_a_generated_project_on_both_back_ends(tmp_path):
    """--sentences: a generated project (sample_data's grammar), its first click on SQLite and
    on a temporary PostgreSQL server: every sentence's predictions stored, the phases, the
    worker's memory, the store's size and the stored bytes a token."""
    from bench.postgres import PostgresUnavailable, find_bindir

    try:
        find_bindir()
        backends = ["sqlite", "postgresql"]
    except PostgresUnavailable:
        backends = ["sqlite"]
    args = ["--sentences", "150", "--complete", "30", "--partial", "30", "--backend",
            *backends, "--out", str(tmp_path)]
    assert app_refit.main(args) == 0
    report = json.loads((tmp_path / "app_refit_150.json").read_text(encoding="utf-8"))
    assert [r["backend"] for r in report["runs"]] == backends
    for run in report["runs"]:
        first, st = run["first"], run["store_after"]
        assert run["project"]["sentences"] == 150 and run["refits"] == []
        assert first["train_sentences"] == 60 and first["calibration"] == "5-fold labels"
        assert st["prediction_tokens"] == run["project"]["tokens"] > 1500
        # packed: well below float32's 4 bytes a label and token (11 labels) + headers
        assert 4 < st["marginals_bytes_per_token"] < 4 * 11
        assert st["bytes"] > run["store_before"]["bytes"] > 0
        assert first["peak_tree_pss_mib"] > 10 and first["peak_process_rss_mib"] > 10
        rows = app_refit.phase_rows(first)
        assert rows["predictions + query scores"][1] > 0 and rows["fit"][1] > 0
        assert run["crfsuite"][0]["sentences"] == 30
    md = (tmp_path / "app_refit_150.md").read_text(encoding="utf-8")
    assert "python -m bench.app_refit --sentences 150" in md and "bytes a token" in md
    assert all(f"## {b}" in md for b in backends)
