"""Tagging by the fast path (value-id features, the adaptive Algorithm 2 with its
extrapolation) against the reference path (every feature string looked up, the damped Jacobi
passes as written): the same marginals within 1e-6 where both converge, the same labels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpsl.io import read_conll
from gpsl.model import GPSL, _as_tokens
from gpsl.predict import rns

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def _split(name):
    if name == "chunking":
        path = DATA / "crfpp" / "chunking" / "test.data"  # 823 sentences (train.data: 77)
        template = DATA / "crfpp" / "chunking" / "template"
    else:
        path, template = DATA / "crowd-ner" / "val.gold.conll", None
    if not path.is_file():
        pytest.skip(f"{path} not present")
    sents = read_conll(path)
    spec = template.read_text(encoding="utf-8") if template is not None else "ner"
    return sents[:150], sents[150:250], spec


@pytest.mark.parametrize("name", ["chunking", "ner"])
def test_fast_tagging_equals_the_reference_path(name):
    train, test, spec = _split(name)
    # Algorithm 2's labels (the ner set's own decoder is the exact one)
    m = GPSL(template=spec, max_iter=30, decoder="rns").fit([s.tokens for s in train],
                                                            [s.labels for s in train])
    X = [s.tokens for s in test]
    tight = {"tol": 1e-11, "max_iter": 20000}
    m.set_params(rns_tol=tight["tol"], rns_max_iter=tight["max_iter"])
    P = np.concatenate(m.predict_marginals(X))
    assert P.shape[0] == sum(map(len, X)) > 1000
    labels = [lab for s in m.predict(X) for lab in s]
    # the reference: every token's feature strings, the damped Jacobi passes of Algorithm 2
    Xf = m.extractor_.transform_strings([_as_tokens(s) for s in X])
    mean, _ = m.predictor_(Xf, with_variance=False)
    lengths = np.array([len(s) for s in X])
    P_ref, passes = rns(mean, m._gS(), lengths, m.offsets_, schedule="jacobi",
                        damping=m.rns_damping, **tight)
    assert passes < tight["max_iter"]  # every sentence converged
    np.testing.assert_allclose(P, P_ref, rtol=0, atol=1e-6)
    assert labels == [m.classes_[i] for i in P_ref.argmax(axis=1)]
    # and at the default stop rule, within it
    m.set_params(rns_tol=1e-4, rns_max_iter=100)
    assert np.abs(np.concatenate(m.predict_marginals(X)) - P_ref).max() < 1e-2
