"""gpsl.tags: span schemes, BIO/BILOU validity and the constrained decoder (numerically,
against brute force)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpsl.tags import (
    allowed,
    entity_types,
    scheme_of,
    span_labels,
    valid_decode,
    violations,
)

BIO = ["B-LOC", "I-LOC", "B-ORG", "I-ORG", "O"]
BILOU = ["B-PER", "I-PER", "L-PER", "U-PER", "O"]


def test_scheme_and_types():
    assert scheme_of(BIO) == "BIO"
    assert scheme_of(BILOU) == "BILOU"
    assert scheme_of(["B-X", "I-X", "E-X", "S-X", "O"]) == "IOBES"
    assert scheme_of(["NN", "VB"]) is None and scheme_of(["O"]) is None
    assert scheme_of(["B-NP", "I-NP", "NN"]) is None  # a plain label: not a span labeling
    assert entity_types(BIO) == ["LOC", "ORG"]
    assert entity_types(["O", "B-NP", "I-VP", "I-NP"]) == ["NP", "VP"]


def test_span_labels():
    assert span_labels("PER", 3) == ["B-PER", "I-PER", "I-PER"]
    assert span_labels("PER", 1) == ["B-PER"]
    assert span_labels("PER", 1, "BILOU") == ["U-PER"]
    assert span_labels("PER", 3, "BILOU") == ["B-PER", "I-PER", "L-PER"]
    assert span_labels("PER", 2, "IOBES") == ["B-PER", "E-PER"]
    assert span_labels("O", 2) == ["O", "O"]
    with pytest.raises(ValueError):
        span_labels("PER", 0)


def test_allowed_and_violations():
    assert allowed("B-LOC", "I-LOC") and allowed("I-LOC", "I-LOC") and allowed(None, "B-LOC")
    assert not allowed("B-LOC", "I-ORG") and not allowed("O", "I-ORG")
    assert not allowed(None, "I-ORG")
    assert violations(["B-LOC", "I-ORG", "O", "I-ORG"]) == {
        1: "I-ORG follows B-LOC", 3: "I-ORG follows O"}
    assert violations(["I-ORG", None, "I-LOC"]) == {0: "I-ORG starts the sentence"}
    assert violations(["B-LOC", "I-LOC", "O", "B-ORG"]) == {}
    # BILOU: no O inside an entity, no entity left open at the end
    assert not allowed("B-PER", "O", "BILOU") and allowed("L-PER", "O", "BILOU")
    assert not allowed("U-PER", "L-PER", "BILOU")
    assert violations(["B-PER", "O", "B-PER"], "BILOU") == {
        1: "O follows B-PER", 2: "B-PER ends the sentence inside an entity"}
    assert violations(["B-PER", "I-PER", "L-PER", "U-PER"], "BILOU") == {}


def _brute(m, classes, scheme, fixed=None):
    """Exhaustive search: fewest violations, then the largest sum of log marginals."""
    n = m.shape[0]
    best, best_key = None, None
    for ys in itertools.product(range(len(classes)), repeat=n):
        labs = [classes[j] for j in ys]
        if fixed and any(f is not None and f != lab for f, lab in zip(fixed, labs)):
            continue
        bad = sum(not allowed(labs[t - 1] if t else None, labs[t], scheme) for t in range(n))
        bad += not allowed(labs[-1], None, scheme)
        logp = sum(np.log(max(m[t, j], 1e-12)) for t, j in enumerate(ys)
                   if not (fixed and fixed[t] is not None))
        key = (bad, -logp)
        if best_key is None or key < best_key:
            best, best_key = labs, key
    return best, best_key


@pytest.mark.parametrize("scheme,classes", [("BIO", BIO), ("BILOU", BILOU)])
def test_valid_decode_matches_brute_force(scheme, classes):
    rng = np.random.default_rng(0)
    for trial in range(40):
        n = int(rng.integers(1, 5))
        m = rng.dirichlet(np.full(len(classes), 0.4), size=n)
        fixed = None
        if trial % 3 == 0:
            fixed = [classes[int(rng.integers(len(classes)))] if rng.random() < 0.4 else None
                     for _ in range(n)]
        got = valid_decode(m, classes, scheme, fixed)
        want, (bad, neg_logp) = _brute(m, classes, scheme, fixed)
        got_bad = sum(not allowed(got[t - 1] if t else None, got[t], scheme)
                      for t in range(n)) + (not allowed(got[-1], None, scheme))
        got_logp = sum(np.log(max(m[t, classes.index(lab)], 1e-12)) for t, lab in
                       enumerate(got) if not (fixed and fixed[t] is not None))
        assert got_bad == bad, (got, want)
        assert got_logp == pytest.approx(-neg_logp, abs=1e-9), (got, want)
        if fixed:
            assert all(f is None or f == g for f, g in zip(fixed, got))


def test_valid_decode_repairs_an_invalid_argmax():
    classes = BIO
    # argmax per token: O, I-ORG (invalid after O); the repair picks B-ORG for token 1
    m = np.array([[0.02, 0.02, 0.02, 0.04, 0.90],
                  [0.05, 0.05, 0.30, 0.55, 0.05]])
    assert [classes[j] for j in m.argmax(axis=1)] == ["O", "I-ORG"]
    assert valid_decode(m, classes) == ["O", "B-ORG"]
    # a clamped B-LOC before it: I-ORG is invalid there, I-LOC has p = 0.05 < B-ORG's 0.30
    assert valid_decode(m, classes, fixed=["B-LOC", None]) == ["B-LOC", "B-ORG"]
    # a valid argmax is returned unchanged
    ok = np.array([[0.1, 0.0, 0.8, 0.0, 0.1], [0.0, 0.1, 0.1, 0.7, 0.1]])
    assert valid_decode(ok, classes) == ["B-ORG", "I-ORG"]
    # clamped labels that break the scheme themselves stay (fewest violations otherwise)
    assert valid_decode(m, classes, fixed=["B-LOC", "I-ORG"]) == ["B-LOC", "I-ORG"]
    # a clamped label the model never saw is a state of its own
    got = valid_decode(m[:, :4], classes[:4], fixed=[None, "O"])
    assert got[1] == "O" and got[0] in classes[:4]
    assert valid_decode(np.zeros((0, 5)), classes) == []
    with pytest.raises(ValueError):
        valid_decode(m, classes[:3])
