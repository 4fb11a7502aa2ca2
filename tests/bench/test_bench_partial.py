"""bench.partial end to end at a toy size (the fits in this process: an interpreter start-up
per fit costs more than the fits)."""

import json

import pytest

from bench import common, partial

needs_data = pytest.mark.skipif(not common.DATA_DIR.is_dir(),
                                reason="../shared/data/crfpp is absent")


@needs_data
@pytest.mark.timeout(300)
def test_partial_benchmark_tiny_run(tmp_path, monkeypatch):
    monkeypatch.setattr(partial, "_in_child", partial.run_job)  # fits in this process
    assert partial.main(["--train", "30", "--hidden", "0.5", "--repeats", "2", "--previous",
                         "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "partial.json").read_text())
    got = {(s["hidden"], s["method"]) for s in report["summary"]}
    assert got == {(0.0, "GPSL2"), (0.0, "CRFsuite, whole sentences"), (0.5, "GPSL2"),
                   (0.5, "GPSL2, whole sentences"), (0.5, "CRFsuite, whole sentences"),
                   (0.5, "GPSL2, previous default")}
    by = {(s["hidden"], s["method"]): s for s in report["summary"]}
    half = by[(0.5, "GPSL2")]
    assert half["repeats"] == 2 and by[(0.5, "GPSL2, previous default")]["repeats"] == 1
    assert half["inference"] == "sparse" and half["lse_bound"] == "bohning"
    assert by[(0.0, "GPSL2")]["vs_complete"] == pytest.approx(1.0)
    assert half["vs_complete"] == pytest.approx(half["fit_cpu_s"] / by[(0.0, "GPSL2")]["fit_cpu_s"])
    # the whole-sentence budget: as many labeled tokens as the partial set (the last sentence
    # may overshoot), all of them labeled
    whole = by[(0.5, "CRFsuite, whole sentences")]
    assert whole["tokens"] == whole["labeled_tokens"]
    assert half["labeled_tokens"] <= whole["labeled_tokens"] < half["labeled_tokens"] + 80
    assert whole["sentences"] < half["sentences"] == 30
    for s in report["summary"]:
        assert s["fit_cpu_s"] > 0 and 0 <= s["loss"] <= 100
    md = (tmp_path / "partial.md").read_text()
    assert "python -m bench.partial --train 30" in md and "## Goals" in md
    assert "complete labels, GPSL2 against CRFsuite" in md


def test_bad_fractions_are_refused(capsys):
    assert partial.main(["--hidden", "1.0"]) == 2
    assert "--hidden" in capsys.readouterr().err


@needs_data
@pytest.mark.timeout(300)
def test_the_diagnosis_records_every_sweep_of_every_variant(tmp_path, monkeypatch):
    monkeypatch.setattr(partial, "_diagnose_child", partial.diagnose_job)
    assert partial.main(["--diagnose", "--train", "25", "--hidden", "0.6", "--out",
                         str(tmp_path)]) == 0
    report = json.loads((tmp_path / "partial_diagnosis.json").read_text())
    assert [f["name"] for f in report["fits"]] == [n for n, _ in partial.DIAGNOSIS]
    by = {f["name"]: f for f in report["fits"]}
    prev = by[partial.DIAGNOSIS[0][0]]
    default = by[partial.DIAGNOSIS[3][0]]
    assert prev["lse_bound"] == "jensen" and default["lse_bound"] == "bohning"
    assert by[partial.DIAGNOSIS[4][0]]["missing_weight"] == 1.0
    for f in report["fits"]:
        assert len(f["rows"]) == f["sweeps"] >= 1
        cpu = [x["cpu_s"] for x in f["rows"]]
        assert cpu == sorted(cpu) and all(0 <= x["loss"] <= 100 for x in f["rows"])
        assert f["rows"][0]["r_changed"] is None
        assert all(0 <= x["r_changed"] <= 1 for x in f["rows"][1:])
    md = (tmp_path / "partial_diagnosis.md").read_text()
    assert "## 60% of the tokens hidden" in md and "argmax r changed" in md
