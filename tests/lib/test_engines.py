"""The engine protocol (gpsl.engines): the full, sparse and sharded fits as polymorphic
objects; models saved before it still load and predict the same."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from gpsl import engines
from gpsl.distributed import InProcess
from gpsl.model import GPSL
from gpsl.params import check_params
from gpsl.synthetic import make_chain_task

ROOT = Path(__file__).resolve().parents[2]
SAVED = Path(__file__).resolve().parents[1] / "fixtures" / "models_v2"


def test_no_caller_branches_on_the_mode_name():
    """No comparison with a mode's name: the fitted engine answers (a saved mode's name only
    picks its engine class, by lookup). Choosing the mode of a fit
    (``GPSL._inference_mode``, the ``inference="auto"`` rule) is the one place allowed."""
    compare = re.compile(r"""[!=]=\s*["'](full|sparse)["']|["'](full|sparse)["']\s*[!=]=""")
    packages = sorted(str(p.relative_to(ROOT)) for name in ("crowd", "active")
                      for p in (ROOT / "gpsl" / name).glob("*.py"))
    assert {"gpsl/crowd/joint.py", "gpsl/active/bayes.py"} <= set(packages)
    for rel in ("gpsl/model.py", "gpsl/predict.py", "gpsl/persist.py", "gpsl/warm.py",
                "gpsl/calibration/calibrator.py", *packages):
        text = (ROOT / rel).read_text(encoding="utf-8")
        if "def _inference_mode" in text:
            a = text.index("def _inference_mode")
            text = text[:a] + text[text.index("\n    def ", a + 1):]
        assert not compare.search(text), (rel, compare.search(text))


@pytest.fixture(scope="module")
def task():
    X, y = make_chain_task(n_sentences=16, seed=6)[:2]
    rng = np.random.default_rng(2)
    part = [[lab if rng.random() < 0.5 else None for lab in s] for s in y]
    return X, y, part


@pytest.mark.parametrize("kw, cls", [
    (dict(inference="full"), engines.FullEngine),
    (dict(inference="sparse"), engines.SparseEngine),
    (dict(inference="sparse", kernel="rbf", inducing=10), engines.SparseEngine),
    (dict(inference="sparse", cluster=InProcess(2)), engines.ShardedEngine),
])
def test_every_engine_keeps_the_protocol_and_round_trips_its_arrays(task, kw, cls):
    X, y, part = task
    m = GPSL(max_iter=3, **kw).fit(X, part)
    eng = m.engine_
    assert type(eng) is cls and m.inference_ == eng.name and m.state_ is eng.state
    # labels are missing: the scalable mode keeps Boehning's bound (gpsl.auto)
    assert m.lse_bound_ == ("jensen" if cls is engines.FullEngine else "bohning")
    arrays = eng.to_arrays()
    assert set(arrays) == set(eng.FLOAT_ARRAYS + eng.INT_ARRAYS)
    back = engines.ENGINES[eng.name].from_arrays(arrays, kernel=m.kernel_, X=m.X_train_,
                                                 family=eng.family)
    Xf, _ = m._features(X[:4])
    for with_variance in (False, True):
        a, va = eng.predictor()(Xf, with_variance=with_variance)
        b, vb = back.predictor()(Xf, with_variance=with_variance)
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(va, vb, rtol=1e-10, atol=1e-12)
    shapes = type(back).array_shapes(arrays, n=m.X_train_.shape[0], J=len(m.classes_),
                                     kernel=m.kernel_, n_features=m.X_train_.shape[1],
                                     family=eng.family)
    assert all(arrays[k].shape == s for k, s in shapes.items())
    assert (m.n_shards_ == 2) if cls is engines.ShardedEngine else not hasattr(m, "n_shards_")


def test_make_engine_and_the_auto_bound(task):
    X, y, _ = task
    settings = check_params(GPSL().get_params())
    kernel = GPSL().fit(X, y).kernel_
    assert type(engines.make_engine("full", kernel, settings)) is engines.FullEngine
    assert type(engines.make_engine("sparse", kernel, settings)) is engines.SparseEngine
    sharded = engines.make_engine("sparse", kernel, {**settings, "cluster": InProcess(1)})
    assert type(sharded) is engines.ShardedEngine
    assert engines.resolve_lse_bound("auto", "bohning", False) == "bohning"
    assert engines.resolve_lse_bound("auto", "bohning", True) == "bohning"  # gpsl.auto
    assert engines.resolve_lse_bound("bohning", "jensen", True) == "bohning"
    assert GPSL(inference="sparse", max_iter=2).fit(X, y).lse_bound_ == "bohning"
    assert GPSL(inference="full", max_iter=2).fit(X, y).lse_bound_ == "jensen"
    with pytest.raises(ValueError, match="learn_hyper with the rbf kernel"):
        GPSL(inference="sparse", kernel="rbf", learn_hyper=True).fit(X, y)


def test_a_warm_start_across_modes_starts_cold_instead_of_failing(task):
    X, y, _ = task
    m = GPSL(inference="sparse", warm_start=True, max_iter=3).fit(X, y)
    m.set_params(inference="full")
    cold = GPSL(inference="full", max_iter=3).fit(X, y)
    assert m.fit(X, y).bound_trace_ == cold.bound_trace_


def _test_sentences():
    text = (SAVED / "test_sentences.txt").read_text(encoding="utf-8")
    return [[tuple(line.split()) for line in block.splitlines()]
            for block in text.strip().split("\n\n")]


@pytest.mark.parametrize("name", ["full", "sparse", "sparse_rbf_khan", "full_calibrated"])
def test_models_saved_before_the_engine_protocol_load_and_predict_the_same(name):
    """``fixtures/models_v2`` was written by the code before this protocol
    (``fixtures/make_models_v2.py``)."""
    meta = json.loads((SAVED / name / "model.json").read_text(encoding="utf-8"))
    m = GPSL.load(SAVED / name)
    assert m.inference_ == meta["inference"] and m.engine_.family == meta["family"]
    P = np.concatenate(m.predict_marginals(_test_sentences()))
    np.testing.assert_allclose(P, np.load(SAVED / "expected.npz")[name], rtol=1e-9,
                               atol=1e-12)
    assert (m.calibrator_ is not None) == name.endswith("calibrated")
