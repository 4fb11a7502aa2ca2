"""The tagging benchmark end to end at toy sizes (chunking and the synthetic streaming run)."""

import json

import pytest

from bench import common, tagging

needs_data = pytest.mark.skipif(not common.DATA_DIR.is_dir(),
                                reason="../shared/data/crfpp is absent")


@needs_data
def test_tagging_benchmark_tiny_run(tmp_path):
    argv = ["--datasets", "chunking", "--train", "30", "--test", "20", "--repeats", "1",
            "--sentences", "40", "--out", str(tmp_path)]
    assert tagging.main(argv) == 0
    report = json.loads((tmp_path / "tagging.json").read_text())
    chunking, synthetic = report["rows"]
    assert chunking["dataset"] == "chunking" and synthetic["dataset"] == "synthetic"
    assert chunking["train_sentences"] == 30 and chunking["test_sentences"] == 20
    for k in ("gpsl", "gpsl_reference", "crf"):
        assert chunking[f"{k}_tokens_per_cpu_s"] > 0
    assert chunking["ratio"] == pytest.approx(chunking["gpsl_cpu_s"] / chunking["crf_cpu_s"])
    assert set(chunking["phases"]) == {"features", "latent", "rns"}
    assert all(v > 0 for v in chunking["phases"].values())
    p = chunking["passes"]
    for k in ("adaptive", "jacobi"):
        assert p[k]["sentences"] == 20 and 1 <= p[k]["median"] <= p[k]["max"] <= 100
        assert 0 <= p[k]["at_cap"] <= 20
    assert p["tokens"] == chunking["test_tokens"]
    assert p["max_abs_diff_both_converged"] < 1e-2  # one fixed point, stopped within tol
    assert synthetic["test_sentences"] == 40 and "passes" not in synthetic
    for r in report["rows"]:
        for cmd in ("gpsl_test", "crf_test"):
            assert r[cmd]["cpu_s"] > 0 and r[cmd]["peak_rss_mib"] > 0
    md = (tmp_path / "tagging.md").read_text()
    assert "python -m bench.tagging --datasets chunking --train 30" in md
    assert "| chunking | adaptive |" in md and "| synthetic | " in md


def test_child_reports_its_own_cpu_and_memory():
    import sys

    r = tagging.child([sys.executable, "-c", "x = bytearray(200 << 20); sum(range(10**6))"])
    assert r["peak_rss_mib"] > 150 and r["cpu_s"] > 0
    held = bytearray(400 << 20)  # this process's memory is not the child's
    r = tagging.child([sys.executable, "-c", "pass"])
    assert r["peak_rss_mib"] < 200 and len(held) == 400 << 20
    with pytest.raises(RuntimeError, match="failed"):
        tagging.child([sys.executable, "-c", "raise SystemExit(3)"])
