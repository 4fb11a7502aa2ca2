"""The scale benchmark end to end at toy sizes, and the sparse mode on a paper partition."""

import json

import numpy as np
import pytest

from bench import common, scale

needs_data = pytest.mark.skipif(not common.DATA_DIR.is_dir(),
                                reason="../shared/data/crfpp is absent")


@needs_data
def test_scale_benchmark_tiny_run(tmp_path):
    assert scale.main(["--sizes", "10", "--full-max", "10", "--synthetic", "800",
                       "--labels", "4", "--repeats", "1", "--split-size", "10",
                       "--split-seeds", "1", "--goal-repeats", "2", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "scale.json").read_text())
    goals = report["goals"]
    assert goals["chunking"]["runs"] == 2 and goals["synthetic"]["runs"] == 2
    assert len(goals["synthetic"]["crf_cpu"]) == 2 and goals["synthetic"]["ratio"] > 0
    e = goals["synthetic"]["explain"]  # the per-sweep losses of the largest synthetic fit
    assert len(e["loss_per_sweep"]) == e["last"]["sweep"] >= 1
    assert 0 <= e["first"]["true_neighbours"] <= 100 and 0 <= e["last"]["local_only"] <= 100
    assert len(report["goal_runs"]) == 4
    methods = {(r["source"], r["method"]) for r in report["rows"]}
    assert methods == {("chunking", "GPSL2 full"), ("chunking", "GPSL2 sparse"),
                       ("chunking", "GPSL2 sparse, Jensen"), ("chunking", "CRFsuite"),
                       ("synthetic", "GPSL2 sparse"), ("synthetic", "CRFsuite"),
                       ("split", "GPSL2 sparse"), ("split", "CRFsuite")}
    for r in report["rows"]:
        assert r["fit_s"] > 0 and r["fit_cpu_s"] > 0 and r["peak_rss_mib"] > 0
        assert 0 <= r["loss"] <= 100
    md = (tmp_path / "scale.md").read_text()
    assert "python -m bench.scale --sizes 10" in md and "µs / token" in md
    assert "## Goals" in md and "What the pseudo-likelihood cannot capture" in md
    assert "Mean difference (GPSL2 − CRFsuite)" in md and "over 2 splits" in md


def test_growth_exponent_of_a_power_law():
    rows = [{"train_tokens": n, "fit_s": 3e-4 * n ** 1.5} for n in (100, 1000, 10000)]
    assert scale.exponent(rows) == pytest.approx(1.5)


@needs_data
def test_sparse_mode_is_within_0_3_points_of_the_full_gp_on_a_paper_partition():
    """Chunking, the paper's sizes (50/50), partition 0 of bench.paper's seed."""
    from gpsl.metrics import hamming_loss
    from gpsl.model import GPSL

    data = common.load_pooled(common.DATA_DIR, "chunking")
    train, test = common.partitions(len(data.X), 50, 50, 1, 0, "chunking")[0]
    Xtr, ytr = [data.X[i] for i in train], [data.y[i] for i in train]
    Xte, yte = [data.X[i] for i in test], [data.y[i] for i in test]
    loss = {}
    for mode in ("full", "sparse"):
        m = GPSL(template=data.template, inference=mode).fit(Xtr, ytr)
        assert m.inference_ == mode
        loss[mode] = hamming_loss(yte, m.predict(Xte))
    assert loss["sparse"] <= loss["full"] + 0.3, loss
    assert np.isfinite(list(loss.values())).all()


def test_the_paper_bench_asks_for_the_full_gp():
    """Table 1 is the full GP's: bench.paper asks for inference="full" explicitly, whatever
    inference="auto" picks (gpsl.auto)."""
    from bench.paper_fits import make_gpsl
    from bench.paper_setup import Config

    for name in ("GPSL1", "GPSL2", "GPSL4"):
        assert make_gpsl(name, None, Config([], [], [])).inference == "full"


@pytest.mark.timeout(300)
def test_cluster_benchmark_tiny_run(tmp_path, monkeypatch):
    """``--cluster``: one process, a two-worker LocalCluster and the same shards in one
    process; a size over the time budget is skipped with its reason. (The fits run in this
    process here, not in fresh ones: three interpreter start-ups cost more than the fits.)"""
    pytest.importorskip("distributed")
    monkeypatch.setattr(scale, "_cluster_child", scale.run_cluster_job)
    assert scale.main(["--cluster", "--cluster-sizes", "500", "50000", "--cluster-budget",
                       "5", "--labels", "4", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "scale_cluster.json").read_text())
    (pair,) = report["pairs"]
    assert pair["same_shards_bound_rel_diff"] == 0.0
    assert pair["same_shards_marginals_max_abs_diff"] == 0.0
    assert pair["bound_rel_diff"] < 1e-8 and pair["ratio"] > 0
    assert len(pair["per_shard"]) == 2 and all(s["cpu_seconds"] > 0 for s in pair["per_shard"])
    assert sum(s["tokens"] for s in pair["per_shard"]) == pair["dask"]["train_tokens"]
    assert report["skipped"][0]["size"] == 50000 and "--cluster-budget" in \
        report["skipped"][0]["reason"]
    md = (tmp_path / "scale_cluster.md").read_text()
    assert "python -m bench.scale --cluster --cluster-sizes 500 50000" in md
    assert "same shards, one process" in md and "Estimate for N machines" in md
    # the estimate: N machines split the shards' work, the round trips stay
    one, two = (scale.estimate_n_machines(pair, 10 ** 6, n) for n in (1, 2))
    work = sum(s["cpu_seconds"] for s in pair["per_shard"]) * 10 ** 6 / \
        pair["dask"]["train_tokens"]
    assert one - two == pytest.approx(work / 2)
