"""The one table of parameters (gpsl.params): constraints, defaults, presets, contexts, and the
argparse options built from it."""

from __future__ import annotations

import argparse
import inspect
import math
import time

import numpy as np
import pytest

from gpsl import params as P
from gpsl.errors import InputError
from gpsl.model import GPSL
from tests.support.limits import limit


def test_the_table_holds_every_constructor_parameter_in_order_with_its_default():
    sig = inspect.signature(GPSL.__init__).parameters
    names = tuple(k for k in sig if k != "self")
    assert names == P.ESTIMATOR == GPSL.param_names()
    for k in names:
        assert sig[k].default == P.PARAMS[k].default, k
    assert P.defaults("library") == GPSL().get_params()


def test_crowd_defaults_are_the_crowd_models():
    from gpsl.crowd import CrowdGPSL, DawidSkene

    crowd = inspect.signature(CrowdGPSL.__init__).parameters
    ds = inspect.signature(DawidSkene.__init__).parameters
    for name in ("min_votes", "prior_diag", "prior_off", "shrink"):
        assert P.PARAMS[name].default == crowd[name].default == ds[name].default, name
    assert P.CROWD == tuple(k for k, p in P.PARAMS.items() if p.group == "crowd")
    for name in P.CROWD:  # every crowd parameter of the table is CrowdGPSL's, same default
        assert P.PARAMS[name].default == crowd[name].default, name
    from gpsl.cli.crowd import CROWD_PARAMS, JOINT_PARAMS

    assert sorted(CROWD_PARAMS + JOINT_PARAMS) == sorted(P.CROWD)  # the CLI's options


@pytest.mark.parametrize("name, value", [("annotator_model", "bsc"), ("tagger_prior", "bad"),
                                         ("prior_rule", "best"), ("kappa", 0.0),
                                         ("shrink", -1.0), ("min_votes", 0),
                                         ("prior_diag", float("nan"))])
def test_crowd_gpsl_refuses_through_the_table(name, value):
    """CrowdGPSL checks its table parameters as GPSL does: the table's one line, before any
    fit."""
    from gpsl.crowd import CrowdGPSL, Votes

    votes = Votes(lengths=[2], token=[0], annotator=[0], label=[0], annotators=["a"],
                  classes=["x", "y"])
    with pytest.raises(InputError) as exc:
        CrowdGPSL(GPSL(), **{name: value}).fit([[("a",), ("b",)]], votes)
    with pytest.raises(InputError) as want:
        P.check(name, value)
    assert str(exc.value) == str(want.value) and "\n" not in str(exc.value)


def test_every_number_has_finite_bounds_and_refuses_non_finite_values():
    numeric = [p for p in P.PARAMS.values() if p.interval is not None]
    assert {"max_iter", "tol", "variance", "inducing", "rns_damping", "lambda_floor",
            "missing_weight", "n_jobs", "min_freq", "rns_max_iter", "rns_tol"} <= \
        {p.name for p in numeric}
    for p in numeric:
        iv = p.interval
        assert math.isfinite(iv.left) and math.isfinite(iv.right), p.name
        bools = () if p.accepts(True) else (True,)  # verbose: a bool or a level
        for bad in (float("nan"), float("inf"), -float("inf"), "3", iv.right * 10 + 1, *bools):
            with pytest.raises(InputError, match=p.name) as err:
                p.check(bad)
            assert "\n" not in str(err.value)
        with pytest.raises(InputError):
            p.from_text("nan")
        with pytest.raises(InputError):
            p.from_text("99999999999999999999999")


def test_every_default_meets_its_own_constraint():
    for p in P.PARAMS.values():
        assert p.accepts(p.default), p.name
        for ctx in P.CONTEXTS.values():
            if p.name in ctx.overrides:
                assert p.accepts(ctx.overrides[p.name]), (ctx.name, p.name)


def test_canonical_forms():
    assert P.check("kernel", "SE") == "rbf" and P.check("kernel", "linear") == "linear"
    assert P.check("inference", " Sparse ") == "sparse"
    assert P.check("missing_weight", "AUTO") == "auto"
    assert P.check("missing_weight", 1) == 1.0 and isinstance(P.check("missing_weight", 1), float)
    assert P.check("max_iter", np.int64(7)) == 7 and type(P.check("max_iter", np.int64(7))) is int
    assert P.check("learn_hyper", np.bool_(True)) is True
    assert P.check("variance", None) is None
    with pytest.raises(InputError,
                       match="decoder must be one of 'auto', 'rns', 'chain', 'viterbi' or 'exact'"):
        P.check("decoder", "RNS")  # case matters where the code never ignored it
    with pytest.raises(InputError, match="unknown parameter"):
        P.check_params({"max_iterations": 3})


@pytest.mark.parametrize("value, expected", [
    ("GPSL1", (-1,)), ("gpsl4", (-2, -1, 1, 2)), (" -1, 1", (-1, 1)), ([-1], (-1,)),
    ((), ()), ([np.int64(2), -1], (2, -1)), ([1.0], (1,)), (["-3", "1"], (-3, 1)),
    ([P.MAX_OFFSET, -P.MAX_OFFSET], (P.MAX_OFFSET, -P.MAX_OFFSET)),
])
def test_offsets(value, expected):
    assert P.parse_offsets(value) == expected


@pytest.mark.parametrize("value, needle", [
    ("0", "non-zero"), ("-1,-1", "duplicate"), ("a,b", "bad offsets"), ("", "at least one"),
    ("-1,,1", "bad offsets"), ([1.5], "bad offsets"), (3, "bad offsets"), ([True], "bad offsets"),
    ("-9999999999", "too far"), ([-9999999999], "too far"), ("99999999999999999999", "too far"),
    ([P.MAX_OFFSET + 1], "too far"), (list(range(1, P.MAX_OFFSETS + 2)), "at most"),
    (",".join(str(i) for i in range(1, P.MAX_OFFSETS + 2)), "at most"),
    ("1" * 5000, "bad offsets"),
])
def test_offsets_refused_in_one_line_and_fast(value, needle):
    t0 = time.perf_counter()
    with pytest.raises(InputError, match=needle) as err:
        P.parse_offsets(value)
    assert time.perf_counter() - t0 < limit(1.0)
    assert "\n" not in str(err.value) and str(err.value).startswith("offsets: ")


def test_presets_and_their_help():
    assert P.PRESETS == {"GPSL1": (-1,), "GPSL2": (-1, 1), "GPSL4": (-2, -1, 1, 2)}
    assert set(P.PRESET_HELP) == set(P.PRESETS)
    assert P.preset_of([-1, 1]) == "GPSL2" and P.preset_of((1, -1)) == "custom"
    assert P.PARAMS["offsets"].default == P.GPSL2


def test_contexts_write_down_where_defaults_differ():
    assert P.defaults("cli") == P.defaults("library")
    app = P.defaults("app")
    assert app["max_iter"] == 30 != P.defaults()["max_iter"] == 100
    assert {k for k in app if app[k] != P.defaults()[k]} == set(P.CONTEXTS["app"].overrides)
    assert "max_iter" in P.CONTEXTS["app"].why
    assert P.defaults("app", ["max_iter", "max_sentences"]) == {"max_iter": 30,
                                                               "max_sentences": None}


def test_widget_facts():
    assert P.PARAMS["inference"].options == ("auto", "full", "sparse")
    assert P.PARAMS["inference"].option_label("sparse") == "Scalable"
    assert P.PARAMS["kernel"].option_label("rbf") == "RBF (squared exp.)"
    assert P.PARAMS["max_iter"].label == "Max iterations"
    assert (P.PARAMS["max_iter"].interval.left, P.PARAMS["max_iter"].interval.right) == \
        (1, 10**6)
    assert "0.1%" in P.PARAMS["tol"].help and P.PARAMS["tol"].default == 1e-3


def _parser(*names, **kw):
    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise ValueError(message)

    p = Parser(prog="x")
    for n in names:
        P.add_option(p, n, **kw)
    return p


def test_argparse_options_from_the_table():
    p = _parser("offsets", "kernel", "max_iter", "tol", "learn_hyper", "variance",
                "missing_weight", "inference", "cluster")
    a = p.parse_args([])
    assert (a.offsets, a.kernel, a.max_iter, a.tol, a.learn_hyper, a.variance,
            a.missing_weight, a.inference, a.cluster) == \
        ((-1, 1), "linear", 100, 1e-3, False, None, "auto", "auto", None)
    a = p.parse_args(["-d=-2,-1,1,2", "--kernel", "rbf", "--max-iter", "7", "--tol", "0.01",
                      "--learn-hyper", "--variance", "2.5", "--missing-weight", "0.25",
                      "--inference", "Sparse", "--scheduler", "tcp://h:1"])
    assert (a.offsets, a.kernel, a.max_iter, a.tol, a.learn_hyper, a.variance,
            a.missing_weight, a.inference, a.cluster) == \
        ((-2, -1, 1, 2), "rbf", 7, 0.01, True, 2.5, 0.25, "sparse", "tcp://h:1")
    for argv, needle in [(["--max-iter", "0"], "positive integer"),
                         (["--kernel", "poly"], "invalid choice: 'poly'"),
                         (["--tol", "nan"], "a number in [0, 1]"),
                         (["-d=-9999999999"], "too far"),
                         (["--missing-weight", "2"], "'auto' or a number in [0, 1]"),
                         (["--variance", "0"], "expected a number in (0, 1e6]")]:
        with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace("[", r"\[")):
            p.parse_args(argv)
    assert _parser("max_iter", context="app").parse_args([]).max_iter == 30
    assert _parser("decoder").parse_args([]).decoder == "auto"  # the feature set's decoder
    assert _parser("pair_variance").parse_args([]).pair_variance is None
    help_text = " ".join(_parser("tol", "inducing").format_help().split())
    assert "0.1% a sweep" in help_text and "(default 500)" in help_text
