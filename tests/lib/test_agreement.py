"""gpsl.agreement against hand-computed and published values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from gpsl.agreement import (
    alpha_per_label,
    cohen_kappa,
    coincidences,
    krippendorff_alpha,
    pairwise_kappa,
)

N = None


def test_cohen_kappa_by_hand():
    # 50 items: both yes 20, A yes / B no 5, A no / B yes 10, both no 15.
    # p_o = 35/50 = 0.7; p_A(yes) = 25/50, p_B(yes) = 30/50; p_e = .5*.6 + .5*.4 = 0.5
    a = ["yes"] * 25 + ["no"] * 25
    b = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4, abs=1e-12)
    # pairs with a missing value are left out: the same figure
    assert cohen_kappa(a + [None, "yes"], b + ["no", None]) == pytest.approx(0.4, abs=1e-12)


def test_cohen_kappa_matches_scikit_learn_and_edge_cases():
    rng = np.random.default_rng(0)
    for _ in range(5):
        a = rng.choice(["B", "I", "O"], size=60, p=[0.2, 0.2, 0.6])
        b = np.where(rng.random(60) < 0.7, a, rng.choice(["B", "I", "O"], size=60))
        assert cohen_kappa(list(a), list(b)) == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)
    assert math.isnan(cohen_kappa(["O", "O"], ["O", "O"]))  # p_e = 1: undefined
    assert math.isnan(cohen_kappa([], []))
    assert cohen_kappa(["a", "b"], ["b", "a"]) == pytest.approx(-1.0)
    with pytest.raises(ValueError):
        cohen_kappa(["a"], ["a", "b"])


def test_krippendorff_alpha_by_hand():
    # units (a,a), (a,b), (b,b): o = [[2, 1], [1, 2]], n_a = n_b = 3, n = 6
    # alpha = 1 - (n - 1) * (o_ab + o_ba) / (n_a n_b + n_b n_a) = 1 - 5 * 2 / 18 = 4/9
    units = [["a", "a"], ["a", "b"], ["b", "b"]]
    values, o = coincidences(units)
    assert values == ["a", "b"]
    np.testing.assert_allclose(o, [[2, 1], [1, 2]])
    assert krippendorff_alpha(units) == pytest.approx(4 / 9, abs=1e-12)
    # a unit of three values adds 1/(m-1) = 1/2 per ordered pair: (a, a, b) ->
    # o_aa = 2 * 1/2 = 1, o_ab = o_ba = 2 * 1/2 = 1; with (b, b): o_bb = 2
    # n_a = 2, n_b = 3, n = 5: alpha = 1 - 4 * 2 / (2 * 2 * 3) = 1/3
    assert krippendorff_alpha([["a", "a", "b", None], ["b", "b"], ["a"]]) == \
        pytest.approx(1 / 3, abs=1e-12)


def test_krippendorff_alpha_published_example():
    # Krippendorff (2011), "Computing Krippendorff's alpha-reliability", the example with
    # 4 observers, 12 units and missing values: nominal alpha = 0.743
    A = [1, 2, 3, 3, 2, 1, 4, 1, 2, N, N, N]
    B = [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, N, 3]
    C = [N, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, N]
    D = [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, N]
    assert krippendorff_alpha(list(zip(A, B, C, D))) == pytest.approx(0.743, abs=5e-4)


def test_alpha_undefined_and_perfect():
    assert math.isnan(krippendorff_alpha([["a"], ["b"]]))  # nothing pairable
    assert math.isnan(krippendorff_alpha([["a", "a"], ["a", "a"]]))  # no variation
    assert krippendorff_alpha([["a", "a"], ["b", "b"], ["c", "c", "c"]]) == 1.0


def test_alpha_per_label_recodes_to_binary():
    units = [["a", "a"], ["a", "b"], ["b", "b"], ["c", "c"]]
    per = alpha_per_label(units)
    # label a: (T,T), (T,F), (F,F), (F,F): o_TT = 2, o_TF = o_FT = 1, o_FF = 4
    # n_T = 3, n_F = 5, n = 8: alpha = 1 - 7 * 2 / 30
    assert per["a"] == pytest.approx(1 - 7 * 2 / 30, abs=1e-12)
    assert per["c"] == 1.0  # c is never disputed
    assert set(per) == {"a", "b", "c"}


def test_pairwise_kappa_matrix():
    items = {0: {"ann": "B", "bob": "B", "cy": "O"}, 1: {"ann": "O", "bob": "O", "cy": "O"},
             2: {"ann": "B", "bob": "O"}, 3: {"ann": "O", "cy": None}}
    names, kappa, shared = pairwise_kappa(items)
    assert names == ["ann", "bob", "cy"]
    assert kappa[0, 1] == pytest.approx(cohen_kappa(["B", "O", "B"], ["B", "O", "O"]))
    assert kappa[0, 1] == kappa[1, 0]
    assert shared[0, 1] == 3 and shared[0, 2] == 2 and shared[1, 2] == 2
    assert shared[2, 2] == 2  # cy's cleared vote is no value
    assert np.all(np.diag(kappa) == 1.0)
