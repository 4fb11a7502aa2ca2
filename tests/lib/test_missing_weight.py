"""The weight of missing labels (EM-lambda, gpsl.likelihood): exactness at lambda = 1, the
monotone blocks, the "auto" rule, shards, persistence and the CLI."""

import json
from pathlib import Path

import numpy as np
import pytest

from gpsl.inference import GPSLInference, Problem
from gpsl.io import read_conll
from gpsl.kernels import make_kernel
from gpsl.likelihood import missing_weight
from gpsl.model import GPSL
from gpsl.sparse import SparseGPSLInference
from gpsl.synthetic import hide_labels, make_chain_task
from tests.support.helpers import random_task

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "crfpp"
UNIGRAM = "U00:%x[0,0]\nU01:%x[-1,0]\nU02:%x[1,0]\n"


def _data(seed=0, n_sent=6, J=3, P=15, missing=0.7):
    lengths, X, y, J = random_task(seed, n_sent, J, P, missing, max_len=8)
    y[0] = 0
    return lengths, X, y, J


def _engine(mode, lam, *, family="meanfield", seed=0, missing=0.7, offsets=(-1, 1)):
    lengths, X, y, J = _data(seed, missing=missing)
    prob = Problem.build(lengths, y, offsets, J, missing_weight=lam)
    k = make_kernel("linear")
    if mode == "full":
        inf = GPSLInference(prob, k, k.base(X), k.base_diag(X), lambda_floor=0.0)
        inf.s.theta[:, 0] = np.log(2.0)
        inf.refresh()
        return inf
    theta0 = np.array([np.log(2.0)])
    feats = k.weight_space(X, np.tile(theta0, (J, 1)), exact=family == "khan")
    return SparseGPSLInference(prob, feats, family=family, theta0=theta0, lambda_floor=0.0)


def _plain_bound(inf) -> float:
    """The unweighted bound L_1 at the engine's current state (lambda set to 1 and back)."""
    lam, w = inf.p.missing_weight, inf.p.weight
    inf.p.missing_weight, inf.p.weight = 1.0, None
    try:
        return inf.elbo()
    finally:
        inf.p.missing_weight, inf.p.weight = lam, w


# --------------------------------------------------------------------------- the rule


def test_the_auto_rule_and_explicit_weights():
    assert missing_weight("auto", 30, 0) == 1.0
    assert missing_weight("auto", 60, 40) == 1.0  # at most half missing: the plain bound
    assert missing_weight("auto", 50, 50) == 1.0
    assert missing_weight("AUTO", 20, 80) == pytest.approx(0.25)
    assert missing_weight(0.1, 20, 80) == 0.1 and missing_weight(0, 1, 1) == 0.0
    for bad in (1.5, -0.1, "half", True, None, float("nan")):
        with pytest.raises(ValueError, match="missing_weight"):
            missing_weight(bad, 10, 10)
    prob = Problem.build([3, 2], [0, -1, -1, 1, -1], (-1, 1), 2, missing_weight=0.4)
    assert prob.w.tolist() == [1.0, 0.4, 0.4, 1.0, 0.4]
    assert Problem.build([2], [0, 1], (-1,), 2, missing_weight=0.4).weight is None


# --------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("mode", ["full", "sparse"])
def test_weights_of_one_take_the_weighted_code_paths_to_the_plain_bound_exactly(mode):
    plain = _engine(mode, 1.0)
    forced = _engine(mode, 1.0)
    forced.p.weight = np.ones(forced.p.n)  # every weighted sum taken, with w_t = 1
    for _ in range(4):
        assert forced.sweep() == plain.sweep()
    assert np.array_equal(forced.s.r, plain.s.r) and np.array_equal(forced.c.M, plain.c.M)


def test_a_missing_weight_changes_the_fit_only_where_labels_are_missing():
    complete = _engine("sparse", 0.2, missing=0.0)
    assert complete.p.weight is None  # nothing missing: nothing weighted
    weighted, plain = _engine("sparse", 0.2), _engine("sparse", 1.0)
    for _ in range(3):
        weighted.sweep()
        plain.sweep()
    assert not np.allclose(weighted.s.W, plain.s.W)


# The weighted bound's gradients against finite differences: test_inference and test_sparse
# (their gradient tests run with missing_weight 0.3 too).


# --------------------------------------------------------------------------- the two blocks


@pytest.mark.parametrize("mode,family", [("full", None), ("sparse", "meanfield"),
                                         ("sparse", "khan")])
def test_m_steps_never_lower_the_weighted_bound_and_the_e_step_never_lowers_the_plain_one(
        mode, family):
    inf = _engine(mode, 0.25, family=family or "meanfield", seed=5)
    tol = 1e-9
    gained = 0.0
    for _ in range(6):
        for step in (lambda: inf.update_mean_U(track_r=False), inf.update_cov_U,
                     inf.update_S):
            before = inf.elbo()
            step()
            after = inf.elbo()
            assert after >= before - tol * abs(before)
            gained += after - before
        before = _plain_bound(inf)
        inf.update_r()
        assert _plain_bound(inf) >= before - tol * abs(before)
    assert gained > 1.0


# --------------------------------------------------------------------------- the estimator


def test_auto_is_the_plain_fit_while_half_the_labels_are_observed_and_lambda_below():
    X, y = make_chain_task(60, seed=1)
    kw = dict(template=UNIGRAM, inference="sparse", max_iter=5)
    y40 = hide_labels(y, 0.4, seed=2)
    auto = GPSL(**kw).fit(X, y40)
    one = GPSL(missing_weight=1.0, **kw).fit(X, y40)
    assert auto.missing_weight_ == 1.0
    assert auto.bound_trace_ == one.bound_trace_
    y85 = hide_labels(y, 0.85, seed=2)
    lab = sum(v is not None for s in y85 for v in s)
    miss = sum(v is None for s in y85 for v in s)
    fit = GPSL(**kw).fit(X, y85)
    assert fit.missing_weight_ == pytest.approx(lab / miss)
    assert GPSL(missing_weight=0.5, **kw).fit(X, y85).missing_weight_ == 0.5
    # the crowd model's evidence makes every latent label observed evidence: no weight
    ev = [np.zeros((len(s), 3)) for s in X]
    assert GPSL(**kw).fit(X, y85, evidence=ev, classes=["L0", "L1", "L2"]) \
        .missing_weight_ == 1.0


def test_partial_labels_teach_more_with_the_missing_weight():
    """The reason for the weight: basenp's 77 training sentences with 85% of the labels
    hidden; the plain bound's self-targets pull the functions flat (89.6% on held-out
    sentences) and the weighted fit predicts better (92.3%)."""
    folder = DATA / "basenp"
    if not (folder / "train.data").is_file():
        pytest.skip(f"shared data set {folder} not present")
    train = read_conll(folder / "train.data")
    test = read_conll(folder / "test.data")[:300]
    X, y = [s.tokens for s in train], hide_labels([s.labels for s in train], 0.85, seed=1)
    # the start the weight was made for: every missing label uniform, Jensen's bound (the
    # labeled-tokens start of missing_start="labels" removes most of that pull itself)
    kw = dict(template=(folder / "template").read_text(), inference="sparse",
              missing_start="uniform", lse_bound="jensen")
    acc = {lam: GPSL(missing_weight=lam, **kw).fit(X, y).score(
        [s.tokens for s in test], [s.labels for s in test]) for lam in (1.0, "auto")}
    assert acc["auto"] > acc[1.0] + 0.015, acc


def test_shards_fit_the_weighted_bound_as_one_process():
    from gpsl.distributed import InProcess

    X, y = make_chain_task(120, n_labels=4, seed=3)
    y_part = hide_labels(y, 0.8, seed=4)
    kw = dict(template=UNIGRAM, inference="sparse", max_iter=5)
    plain = GPSL(**kw).fit(X, y_part)
    sharded = GPSL(cluster=InProcess(3), **kw).fit(X, y_part)
    assert plain.missing_weight_ < 1.0 and sharded.missing_weight_ == plain.missing_weight_
    assert sharded.n_iter_ == plain.n_iter_
    assert np.allclose(sharded.bound_trace_, plain.bound_trace_, rtol=1e-8)
    assert np.allclose(sharded.state_.r, plain.state_.r, atol=1e-6)


def test_the_weight_is_saved_and_a_damaged_one_is_refused(tmp_path):
    from gpsl.errors import GpslError
    from gpsl.persist import _meta_digest

    X, y = make_chain_task(30, seed=5)
    GPSL(template=UNIGRAM, missing_weight=0.3, max_iter=3).fit(X, hide_labels(y, 0.5)) \
        .save(tmp_path / "m")
    back = GPSL.load(tmp_path / "m")
    assert back.missing_weight == 0.3
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    meta["config"]["missing_weight"] = 7
    meta["sha256"]["model.json"] = _meta_digest(meta)  # a consistent but bad description
    (tmp_path / "m" / "model.json").write_text(json.dumps(meta))
    with pytest.raises(GpslError, match="missing_weight") as err:
        GPSL.load(tmp_path / "m")
    assert "\n" not in str(err.value)
