"""Tests of the GPSL estimator (gpsl.model) and model persistence (gpsl.persist)."""

import json

import numpy as np
import pytest
from scipy.special import softmax

from gpsl.errors import InputError, ModelFormatError
from gpsl.model import GPSL, parse_offsets
from gpsl.synthetic import UNIGRAM_TEMPLATE, hide_labels, make_chain_task


@pytest.fixture(scope="module")
def task():
    X, Y = make_chain_task(70, seed=11)
    return X[:30], Y[:30], X[30:], Y[30:]


@pytest.fixture(scope="module")
def fitted(task):
    Xtr, Ytr, _, _ = task
    return GPSL(offsets=(-1, 1), template=UNIGRAM_TEMPLATE, max_iter=25).fit(Xtr, Ytr)


def accuracy(model, X, Y, **kw):
    pred = model.predict(X, **kw)
    flat = [(a, b) for p, y in zip(pred, Y) for a, b in zip(p, y)]
    return np.mean([a == b for a, b in flat])


def test_parse_offsets_presets_strings_and_errors():
    assert parse_offsets("GPSL4") == (-2, -1, 1, 2)
    assert parse_offsets("-1,1") == (-1, 1)
    assert parse_offsets([-1]) == (-1,)
    for bad in ("0", "-1,-1", "a,b"):
        with pytest.raises(InputError):
            parse_offsets(bad)


def test_fit_predict_marginals_and_score(task, fitted):
    _, _, Xte, Yte = task
    acc = accuracy(fitted, Xte, Yte)
    assert acc > 0.6  # measured 0.71; the HMM oracle gets 0.91, local-only GPSL 0.79
    assert fitted.classes_ == ["L0", "L1", "L2"]
    assert fitted.bound_trace_[-1] > fitted.bound_trace_[0]
    P = fitted.predict_marginals(Xte)
    assert [p.shape for p in P] == [(len(x), 3) for x in Xte]
    assert np.allclose(np.concatenate(P).sum(axis=1), 1.0)
    assert fitted.score(Xte, Yte) == pytest.approx(acc)


def test_dependent_functions_learn_the_transition_structure(fitted):
    """The chain moves k -> k or k -> k+1 (mod 3), never k -> k+2: m_S must rank it last."""
    prev = fitted.state_.m_S[fitted.offsets_.index(-1)]  # [previous label, own label]
    nxt = fitted.state_.m_S[fitted.offsets_.index(1)]  # [next label, own label]
    for k in range(3):
        assert np.argmin(prev[k]) == (k + 2) % 3
        assert np.argmax(prev[k]) == k
        assert np.argmin(nxt[:, k]) == (k + 2) % 3  # own k never followed by k+2


def test_empty_dependency_set_gives_softmax_of_predictive_moments(task):
    Xtr, Ytr, Xte, _ = task
    m = GPSL(offsets=(), template=UNIGRAM_TEMPLATE, max_iter=10, rns_variance=True)
    m.fit(Xtr, Ytr)
    means, variances = m.predict_latent(Xte[:5])
    assert min(float(v.min()) for v in variances) > 0
    for P, mu, v in zip(m.predict_marginals(Xte[:5]), means, variances):
        assert np.allclose(P, softmax(mu + 0.5 * v, axis=1))
    m.set_params(rns_variance=False)
    for P, mu in zip(m.predict_marginals(Xte[:5]), means):
        assert np.allclose(P, softmax(mu, axis=1))


def test_viterbi_decoder_for_gpsl1(task):
    Xtr, Ytr, Xte, Yte = task
    m = GPSL(offsets="GPSL1", template=UNIGRAM_TEMPLATE, max_iter=20).fit(Xtr, Ytr)
    assert accuracy(m, Xte, Yte, decoder="viterbi") > 0.6  # measured 0.70 (RNS 0.74)
    with pytest.raises(ValueError):
        GPSL(offsets="GPSL2", template=UNIGRAM_TEMPLATE, max_iter=3).fit(Xtr, Ytr).predict(
            Xte, decoder="viterbi")


def test_missing_labels_are_marginalised_not_dropped(task):
    """Hiding 30% of the labels costs little; dropping partial sentences costs more."""
    Xtr, Ytr, Xte, Yte = task
    full = accuracy(GPSL(template=UNIGRAM_TEMPLATE, max_iter=25).fit(Xtr, Ytr), Xte, Yte)
    hidden = hide_labels(Ytr, 0.3, seed=5)
    assert sum(v is None for lab in hidden for v in lab) > 60
    m = GPSL(template=UNIGRAM_TEMPLATE, max_iter=25).fit(Xtr, hidden)
    assert m.n_missing_ == sum(v is None for lab in hidden for v in lab)
    assert m.X_train_.shape[0] == sum(len(x) for x in Xtr)  # no token dropped
    acc_missing = accuracy(m, Xte, Yte)
    complete = [i for i, lab in enumerate(hidden) if None not in lab]
    assert 0 < len(complete) < 8
    dropped = GPSL(template=UNIGRAM_TEMPLATE, max_iter=25).fit(
        [Xtr[i] for i in complete], [hidden[i] for i in complete])
    acc_dropped = accuracy(dropped, Xte, Yte)
    assert acc_missing >= full - 0.04
    assert acc_missing > acc_dropped


def test_predict_marginals_with_partial_labels_clamps_known_tokens(fitted, task):
    _, _, Xte, Yte = task
    partial = [[y if i % 2 == 0 else None for i, y in enumerate(lab)] for lab in Yte[:5]]
    P = fitted.predict_marginals(Xte[:5], y=partial)
    for p, lab in zip(P, partial):
        for row, y in zip(p, lab):
            if y is not None:
                assert row[fitted.classes_.index(y)] == 1.0


def test_warm_start_with_missing_labels_reuses_only_the_hyperparameters(task):
    """The full GP: with missing labels a warm fit is exactly a cold fit with the previous
    theta: carried means would start the unlabeled tokens at the previous model's labels
    (gpsl.warm; the scalable mode's warm start is tested in test_warm.py)."""
    Xtr, Ytr, _, _ = task
    m = GPSL(template=UNIGRAM_TEMPLATE, max_iter=40, warm_start=True, learn_hyper=True,
             inference="full")
    m.fit(Xtr, hide_labels(Ytr, 0.5, seed=1))
    theta = m.state_.theta.copy()
    assert not np.allclose(theta, np.log(4.0))  # EM moved theta
    more = hide_labels(Ytr, 0.4, seed=1)
    m.set_params(learn_hyper=False).fit(Xtr, more)
    assert np.array_equal(m.state_.theta, theta)  # hyper-parameters carried over
    # another model with a different fitted state but the same theta starts identically
    other = GPSL(template=UNIGRAM_TEMPLATE, max_iter=40, warm_start=True, inference="full")
    other.fit(Xtr, more)
    assert not np.allclose(other.state_.alpha, m.state_.alpha)
    other.state_.theta[:] = theta
    other.fit(Xtr, more)
    assert other.bound_trace_ == m.bound_trace_


def test_warm_start_with_complete_labels_reaches_the_cold_fit_in_fewer_sweeps(task):
    Xtr, Ytr, Xte, Yte = task
    m = GPSL(offsets=(-1, 1), template=UNIGRAM_TEMPLATE, max_iter=60, tol=1e-6,
             warm_start=True)
    m.fit(Xtr[:30], Ytr[:30])
    grown_X, grown_y = Xtr[10:] + Xtr[:10], Ytr[10:] + Ytr[:10]  # kept, reordered, and new
    m.fit(grown_X, grown_y)
    cold = GPSL(offsets=(-1, 1), template=UNIGRAM_TEMPLATE, max_iter=60, tol=1e-6)
    cold.fit(grown_X, grown_y)
    assert m.bound_trace_[0] > cold.bound_trace_[0] + 1.0  # started from the previous state
    assert m.n_iter_ < cold.n_iter_
    # one maximiser: the same bound and the same predictions
    assert m.bound_trace_[-1] == pytest.approx(cold.bound_trace_[-1], rel=1e-4)
    assert m.predict(Xte) == cold.predict(Xte)


def test_save_load_round_trip_gives_identical_marginals(tmp_path, fitted, task):
    _, _, Xte, _ = task
    fitted.save(tmp_path / "model")
    loaded = GPSL.load(tmp_path / "model")
    for a, b in zip(fitted.predict_marginals(Xte), loaded.predict_marginals(Xte)):
        assert np.array_equal(a, b)
    assert loaded.classes_ == fitted.classes_
    assert loaded.offsets_ == fitted.offsets_
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())


def test_load_refuses_tampered_newer_and_missing_models(tmp_path, fitted):
    d = tmp_path / "m"
    fitted.save(d)
    raw = bytearray((d / "arrays.npz").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (d / "arrays.npz").write_bytes(bytes(raw))
    with pytest.raises(ModelFormatError, match="checksum"):
        GPSL.load(d)
    fitted.save(d)  # overwrite in place
    meta = json.loads((d / "model.json").read_text())
    meta["format_version"] = 99
    (d / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ModelFormatError, match="newer"):
        GPSL.load(d)
    (d / "model.json").write_text("{not json")
    with pytest.raises(ModelFormatError, match="damaged"):
        GPSL.load(d)
    with pytest.raises(ModelFormatError, match="not a model directory"):
        GPSL.load(tmp_path / "nope")
    assert "\n" not in str(ModelFormatError("x", source="a"))


def test_fit_validates_its_input():
    with pytest.raises(InputError, match="tokens but"):
        GPSL().fit([[("a",), ("b",)]], [["X"]])
    with pytest.raises(InputError, match="no labeled token"):
        GPSL().fit([[("a",)]], [[None]])
    with pytest.raises(RuntimeError, match="not fitted"):
        GPSL().predict([[("a",)]])


def test_exact_decoder_maximises_the_pseudo_likelihood_product(fitted, task):
    from gpsl.predict import pl_log_score

    _, _, Xte, _ = task
    exact = fitted.predict(Xte[:10], decoder="exact")
    rns_labels = fitted.predict(Xte[:10])
    b, lengths = fitted.local_scores(Xte[:10])
    g, start = fitted._gS(), 0
    for e, r, L in zip(exact, rns_labels, lengths):
        be = b[start:start + L]
        start += L
        ye = [fitted.classes_.index(v) for v in e]
        yr = [fitted.classes_.index(v) for v in r]
        assert pl_log_score(be, g, fitted.offsets_, ye) >= \
            pl_log_score(be, g, fitted.offsets_, yr) - 1e-9


@pytest.mark.parametrize("kernel", ["linear", "rbf"])
def test_sparse_mode_saves_loads_and_predicts_the_same(tmp_path, kernel):
    from gpsl.synthetic import make_chain_task

    X, y = make_chain_task(n_sentences=30, seed=3)[:2]
    m = GPSL(inference="sparse", kernel=kernel, max_iter=15, inducing=40).fit(X, y)
    assert m.inference_ == "sparse"
    P = m.predict_marginals(X[:5])
    mean, var = m.predict_latent(X[:5])
    m.save(tmp_path / "m")
    m2 = GPSL.load(tmp_path / "m")
    assert m2.inference_ == "sparse" and m2.inference == "sparse"
    for a, b in zip(P, m2.predict_marginals(X[:5])):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    mean2, var2 = m2.predict_latent(X[:5])
    for a, b in zip(var, var2):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-12)
        assert np.all(a > 0)


def test_auto_mode_is_the_scalable_mode_for_the_linear_kernel_and_capped_full_for_rbf():
    """inference="auto" (gpsl.auto): the scalable mode for the linear kernel at any size;
    the rbf kernel keeps the full GP up to RBF_FULL_TOKENS (or `inducing`) tokens."""
    from gpsl import auto
    from gpsl.synthetic import make_chain_task

    X, y = make_chain_task(n_sentences=20, seed=1)[:2]
    assert GPSL(max_iter=3).fit(X, y).inference_ == "sparse"
    assert GPSL(max_iter=3, inference="full").fit(X, y).inference_ == "full"
    assert GPSL(max_iter=2, kernel="rbf").fit(X, y).inference_ == "full"
    cap = auto.RBF_FULL_TOKENS
    assert auto.inference_mode("auto", cap, kernel_scale_only=False) == "full"
    assert auto.inference_mode("auto", cap + 1, kernel_scale_only=False) == "sparse"
    assert auto.inference_mode("auto", cap + 1, kernel_scale_only=False,
                               inducing=cap + 1) == "full"
    assert auto.inference_mode("auto", 10 ** 6) == "sparse"
    assert auto.inference_mode("full", 10 ** 6) == "full"
    with pytest.raises(ValueError, match="inference"):
        GPSL(inference="fast").fit(X, y)


def test_auto_bound_is_bohning_in_the_scalable_mode_with_or_without_missing_labels():
    from gpsl.synthetic import hide_labels, make_chain_task

    X, y = make_chain_task(n_sentences=20, seed=1)[:2]
    for labels in (y, hide_labels(y, 0.5, seed=2)):
        assert GPSL(max_iter=3).fit(X, labels).lse_bound_ == "bohning"
        assert GPSL(max_iter=3, inference="full").fit(X, labels).lse_bound_ == "jensen"
        assert GPSL(max_iter=3, lse_bound="jensen").fit(X, labels).lse_bound_ == "jensen"


def test_full_mode_mean_from_weights_equals_the_kernel_form():
    from gpsl.predict import LatentPredictor
    from gpsl.synthetic import make_chain_task

    X, y = make_chain_task(n_sentences=15, seed=2)[:2]
    m = GPSL(inference="full", max_iter=5).fit(X, y)
    Xf, _ = m._features(X)
    st = m.state_
    pred = LatentPredictor(m.kernel_, m.X_train_, st.theta, st.alpha, st.lam)
    fast, zero = pred(Xf, with_variance=False)
    slow, var = pred(Xf, with_variance=True)
    np.testing.assert_allclose(fast, slow, rtol=1e-9, atol=1e-12)
    assert not zero.any() and np.all(var > 0)


def test_params_are_listed_once_and_a_saved_model_records_its_mode(tmp_path):
    import inspect

    names = [p for p in inspect.signature(GPSL.__init__).parameters if p != "self"]
    assert list(GPSL().get_params()) == names
    from gpsl.synthetic import make_chain_task

    X, y = make_chain_task(n_sentences=8, seed=2)[:2]
    GPSL(inference="full", max_iter=3).fit(X, y).save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    assert meta["inference"] == "full" and meta["format_version"] == 2
    from gpsl.params import PARAMS

    assert set(meta["config"]) == {n for n in names if PARAMS[n].persisted}
    assert set(meta["config"]).isdisjoint({"offsets", "template", "warm_start", "n_jobs",
                                           "callback", "verbose", "cluster"})


def test_a_model_directory_of_format_1_still_loads_as_a_full_model(tmp_path):
    """Format 1 (before the sparse mode): no inference field, the old config keys."""
    from gpsl.persist import _meta_digest

    X, y = make_chain_task(n_sentences=8, seed=5)
    m = GPSL(inference="full", max_iter=4).fit(X, y)
    m.save(tmp_path / "m")
    meta_path = tmp_path / "m" / "model.json"
    meta = json.loads(meta_path.read_text())
    meta["format_version"] = 1
    del meta["inference"], meta["family"]
    for k in ("inference", "covariance", "inducing", "lse_bound"):
        del meta["config"][k]
    meta["sha256"]["model.json"] = _meta_digest(meta)
    meta_path.write_text(json.dumps(meta))
    old = GPSL.load(tmp_path / "m")
    assert old.inference_ == "full" and old.inference == "auto"
    for a, b in zip(m.predict_marginals(X), old.predict_marginals(X)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("field,value", [("inference", ["sparse"]), ("inference", "fast"),
                                         ("family", {"a": 1})])
def test_a_bad_inference_mode_in_model_json_is_one_line(tmp_path, field, value):
    from gpsl.persist import _meta_digest

    X, y = make_chain_task(n_sentences=6, seed=5)
    GPSL(inference="sparse", max_iter=2).fit(X, y).save(tmp_path / "m")
    meta_path = tmp_path / "m" / "model.json"
    meta = json.loads(meta_path.read_text())
    meta[field] = value
    meta["sha256"]["model.json"] = _meta_digest(meta)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ModelFormatError, match="damaged model description"):
        GPSL.load(tmp_path / "m")


def _ner_task():
    names, places = ["John", "Mary", "Anne", "Peter"], ["Paris", "Berlin", "Rome", "Oslo"]
    X, y = [], []
    for i in range(24):
        n, p = names[i % 4], places[(i // 4) % 4]
        X.append([(n,), ("Smith",), ("lives",), ("in",), (p,), (".",)])
        y.append(["B-PER", "I-PER", "O", "O", "B-LOC", "O"])
    return X, y


def test_the_ner_feature_set_carries_its_variances_and_decoder(tmp_path):
    """``GPSL(template="ner")`` at its defaults fits with the feature set's kernel variance (2)
    and pair-function variance (4, :attr:`gpsl.features.NerFeatures.DEFAULTS`) and decodes
    with the exact PL decoder; other templates keep 4, the paper's 1 and Algorithm 2; given
    values win; a saved model decodes as it did."""
    from gpsl.features import NerFeatures

    X, y = _ner_task()
    assert NerFeatures.DEFAULTS == {"variance": 2.0, "pair_variance": 4.0, "decoder": "exact"}
    m = GPSL(template="ner", max_iter=5).fit(X, y)
    same = GPSL(template="ner", max_iter=5, variance=2.0, pair_variance=4.0).fit(X, y)
    paper = GPSL(template="ner", max_iter=5, variance=2.0, pair_variance=1.0).fit(X, y)
    assert np.allclose(np.exp(m.state_.theta[:, 0]), 2.0)
    assert np.array_equal(m.state_.m_S, same.state_.m_S)
    assert np.abs(m.state_.m_S).max() > np.abs(paper.state_.m_S).max()
    assert np.allclose(np.exp(GPSL(template="ner", max_iter=2, variance=4.0).fit(X, y)
                              .state_.theta[:, 0]), 4.0)
    assert m.decoder == "auto" and m.decoder_() == "exact"
    assert m.predict(X) == m.predict(X, decoder="exact")
    assert GPSL(template="ner", decoder="rns").fit(X, y).decoder_() == "rns"
    assert GPSL(template="ner", offsets=(-2, -1, 1, 2), max_iter=2).fit(X, y).decoder_() \
        == "rns"  # the chain needs dependencies within -1..+1
    plain = GPSL(template="U00:%x[0,0]", max_iter=5).fit(X, y)
    one = GPSL(template="U00:%x[0,0]", max_iter=5, pair_variance=1.0).fit(X, y)
    assert plain.decoder_() == "rns" and np.array_equal(plain.state_.m_S, one.state_.m_S)
    assert np.allclose(np.exp(plain.state_.theta[:, 0]), 4.0)
    m.save(tmp_path / "m")
    back = GPSL.load(tmp_path / "m")
    assert back.decoder_() == "exact" and back.predict(X) == m.predict(X)


def test_chain_decoder_is_the_viterbi_path_of_the_chain(task):
    """``decoder="chain"`` on GPSL1 equals Viterbi with the pair means and local means."""
    from gpsl.predict import viterbi

    Xtr, Ytr, Xte, _ = task
    m = GPSL(offsets=(-1,), template=UNIGRAM_TEMPLATE, max_iter=10).fit(Xtr, Ytr)
    b, lengths = m.local_scores(Xte)
    idx = viterbi(b, m.state_.m_S, lengths, (-1,))
    want = [[m.classes_[i] for i in part] for part in np.split(idx, np.cumsum(lengths)[:-1])]
    assert m.predict(Xte, decoder="chain") == want


def test_start_variance_is_the_variance_a_fit_starts_from():
    """``GPSL.start_variance``: the given variance, else the ``ner`` set's own (linear kernel),
    else the kernel's default; the crowd refit's candidates are multiples of it."""
    from gpsl.features import NerFeatures

    assert GPSL(template="ner").start_variance() == NerFeatures.DEFAULTS["variance"]
    assert GPSL(template="ner", variance=0.5).start_variance() == 0.5
    assert GPSL().start_variance() == 4.0
    assert GPSL(kernel="rbf").start_variance() == 1.0
    assert GPSL(template="ner", kernel="rbf").start_variance() == 1.0
