"""The sequential annotator model (gpsl.crowd.sequential), its M-step and bound terms, the
joint model with it, the echo variance, span-valid decoding and the joint model on the
command line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import gammaln, polygamma

from gpsl import cli
from gpsl.crowd import (
    CrowdGPSL,
    CrowdModel,
    MajorityVote,
    Votes,
    decode_labels,
    echo_variance,
    m_step,
    previous_labels,
    sequential_m_step,
)
from gpsl.crowd.confusion import _collapsed_terms, _skill_terms, trigamma
from gpsl.crowd.sequential import (
    SequentialModel,
    _centre_objective,
    sequential_counts,
    update_centres,
)
from gpsl.io import CrowdSentence
from gpsl.model import GPSL
from gpsl.synthetic import UNIGRAM_TEMPLATE

BIO = ["B-LOC", "B-PER", "I-LOC", "I-PER", "O"]


def random_votes(seed=0, J=4, A=5, n_sent=40, per_token=3):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 9, size=n_sent)
    tok, ann, lab = [], [], []
    for t in range(int(lengths.sum())):
        for a in rng.choice(A, size=per_token, replace=False):
            tok.append(t)
            ann.append(a)
            lab.append(rng.integers(J))
    votes = Votes(lengths=lengths, token=tok, annotator=ann, label=lab,
                  annotators=[f"a{k}" for k in range(A)], classes=[f"c{k}" for k in range(J)])
    r = rng.dirichlet(np.ones(J), size=votes.n)
    return votes, r


def annotator_terms(model, votes, r, prev):
    """The part of the joint bound (J1) that depends on the annotators, ``r`` fixed."""
    return float(np.sum(r * model.evidence(votes, prev))) + model.log_prior()


# --------------------------------------------------------------------------- the model


def test_previous_labels_are_the_annotators_own():
    # sentence 1: tokens 0-2, sentence 2: tokens 3-4
    votes = Votes(lengths=[3, 2], token=[0, 1, 2, 0, 2, 3, 4, 4],
                  annotator=[0, 0, 0, 1, 1, 0, 0, 1], label=[2, 1, 0, 1, 0, 2, 1, 2],
                  annotators=["a", "b"], classes=["x", "y", "z"])
    # a: 0:z 1:y 2:x | 3:z 4:y; b: 0:y 2:x (skipped 1) | 4:z
    np.testing.assert_array_equal(previous_labels(votes), [3, 2, 1, 3, 3, 3, 2, 3])


def test_counts_match_brute_force():
    votes, r = random_votes(1)
    prev = previous_labels(votes)
    N = sequential_counts(votes, r, prev)
    brute = np.zeros_like(N)
    for t, a, lab, p in zip(votes.token, votes.annotator, votes.label, prev):
        brute[a, :, p, lab] += r[t]
    np.testing.assert_allclose(N, brute, atol=1e-12)


@pytest.mark.parametrize("shrink", [0.0, 10.0])
def test_m_step_never_lowers_the_bound_and_each_block_is_optimal(shrink):
    votes, r = random_votes(2)
    prev = previous_labels(votes)
    m = sequential_m_step(votes, r, prev, kappa=5.0, shrink=shrink, inner=1)
    vals = [annotator_terms(m, votes, r, prev)]
    for _ in range(4):
        m = sequential_m_step(votes, r, prev, kappa=5.0, shrink=shrink, centre=m.centre,
                              skill=m.skill, inner=1)
        vals.append(annotator_terms(m, votes, r, prev))
    assert np.all(np.diff(vals) >= -1e-9 * abs(vals[0])), np.diff(vals)
    best = annotator_terms(m, votes, r, prev)
    # the rows' posteriors: no perturbed Dirichlet does better (eq. Q-VB)
    rng = np.random.default_rng(0)
    for _ in range(20):
        pert = SequentialModel(alpha=m.alpha * np.exp(rng.normal(scale=0.1,
                                                                 size=m.alpha.shape)),
                               centre=m.centre, kappa=m.kappa, prior_diag=m.prior_diag,
                               prior_off=m.prior_off, shrink=m.shrink, skill_=m.skill_)
        assert annotator_terms(pert, votes, r, prev) <= best + 1e-8
    # the centres: no perturbed centre does better, with q at its optimum for that centre
    N = sequential_counts(votes, r, prev)
    for _ in range(20):
        c = m.centre * np.exp(rng.normal(scale=0.1, size=m.centre.shape))
        c /= c.sum(axis=2, keepdims=True)
        pert = SequentialModel(alpha=N + m.kappa * c[:, :, None, :], centre=c, kappa=m.kappa,
                               prior_diag=m.prior_diag, prior_off=m.prior_off,
                               shrink=m.shrink, skill_=m.skill_)
        assert annotator_terms(pert, votes, r, prev) <= best + 1e-8


def test_centre_update_is_the_constrained_maximum():
    """Eq. (C) on random rows against scipy's SLSQP on the simplex."""
    rng = np.random.default_rng(3)
    R, P, J, kappa = 4, 5, 4, 7.0
    N = rng.gamma(0.5, 4.0, size=(R, P, J))
    beta = 1.0 + rng.uniform(0.0, 3.0, size=(R, J))
    c = update_centres(N, kappa, beta, np.full((R, J), 1.0 / J))
    np.testing.assert_allclose(c.sum(axis=1), 1.0)
    for i in range(R):
        def f(x, i=i):
            return -float(_centre_objective(x[None], N[i:i + 1], kappa, beta[i:i + 1] - 1.0)[0])

        res = minimize(f, np.full(J, 1.0 / J), method="SLSQP", bounds=[(1e-9, 1.0)] * J,
                       constraints={"type": "eq", "fun": lambda x: x.sum() - 1.0},
                       options={"ftol": 1e-14, "maxiter": 500})
        assert -f(c[i]) >= -res.fun - 1e-7
        np.testing.assert_allclose(c[i], res.x, atol=1e-4)


def test_flat_previous_label_dependence_is_dawid_skene():
    """Exact special case: rows equal for every previous label give exactly the evidence of
    the plain confusion model with those rows; and as kappa -> infinity (shrink 0) the
    M-step is Dawid-Skene's MAP M-step with the prior (P0)."""
    votes, r = random_votes(4)
    prev = previous_labels(votes)
    A, J = votes.A, votes.J
    rng = np.random.default_rng(5)
    alpha_rows = rng.gamma(2.0, 1.0, size=(A, J, J)) + 0.1
    seq = SequentialModel(alpha=np.repeat(alpha_rows[:, :, None, :], J + 1, axis=2),
                          centre=alpha_rows / alpha_rows.sum(axis=2, keepdims=True),
                          kappa=1.0, prior_diag=2.0, prior_off=0.1)
    elog = np.log(np.exp(seq.elog[:, :, 0, :]))
    plain = CrowdModel(log_pi=elog, one_coin=np.zeros(A, dtype=bool), prior_diag=2.0,
                       prior_off=0.1)
    np.testing.assert_allclose(seq.evidence(votes, prev), plain.evidence(votes), atol=1e-12)
    big = sequential_m_step(votes, r, prev, kappa=1e7, shrink=0.0)
    ds = m_step(votes, r, np.zeros(A, dtype=bool), 2.0, 0.1, shrink=0.0)
    np.testing.assert_allclose(big.centre, np.exp(ds.log_pi), atol=1e-6)
    np.testing.assert_allclose(big.evidence(votes, prev), ds.evidence(votes), atol=1e-4)


def test_skill_derivatives_match_finite_differences():
    rng = np.random.default_rng(6)
    J, k = 4, 8.0
    s = np.array([0.3, 0.55, 0.8])
    N = rng.gamma(1.0, 5.0, size=(3, J, J))
    D, Off = rng.normal(-2, 1, 3), rng.normal(-30, 3, 3)
    h = 1e-6
    for offset in (0.0, 1.0):
        f, d1, d2 = _skill_terms(s, D, Off, J, k, 2.0, 0.1, offset)
        fp = _skill_terms(s + h, D, Off, J, k, 2.0, 0.1, offset)
        fm = _skill_terms(s - h, D, Off, J, k, 2.0, 0.1, offset)
        np.testing.assert_allclose(d1, (fp[0] - fm[0]) / (2 * h), rtol=1e-5)
        np.testing.assert_allclose(d2, (fp[1] - fm[1]) / (2 * h), rtol=1e-5)
    f, d1, d2 = _collapsed_terms(s, N, k, 2.0, 0.1)
    fp, fm = _collapsed_terms(s + h, N, k, 2.0, 0.1), _collapsed_terms(s - h, N, k, 2.0, 0.1)
    np.testing.assert_allclose(d1, (fp[0] - fm[0]) / (2 * h), rtol=1e-5)
    np.testing.assert_allclose(d2, (fp[1] - fm[1]) / (2 * h), rtol=1e-5)
    assert np.all(d2 < 0)
    x = np.logspace(-6, 5, 500)
    np.testing.assert_allclose(trigamma(x), polygamma(1, x), rtol=1e-9)
    # the collapsed objective is the maximum over q of the variational one (eq. VB)
    kappa_m = k * np.where(np.eye(J, dtype=bool), s[0], (1 - s[0]) / (J - 1))
    lhs = f[0] - 2.0 * np.log(s[0]) - 0.1 * np.log1p(-s[0])
    rhs = float(np.sum(gammaln(N[0] + kappa_m) - gammaln(kappa_m)))
    assert lhs == pytest.approx(rhs)


# --------------------------------------------------------------------------- the joint model


def sticky_crowd(n_sent=40, seed=0):
    """Chain data with BIO spans; annotators who, once they start an entity, keep labeling
    I- tokens past its end (an error that depends on their previous label), and one who
    misses half the entities."""
    rng = np.random.default_rng(seed)
    X, y, sents = [], [], []
    words = {"O": ["the", "a", "saw", "in", "of", "and"], "PER": ["John", "Mary", "Anna"],
             "LOC": ["Paris", "Rome", "Oslo"]}
    for _ in range(n_sent):
        toks, labs = [], []
        while len(toks) < rng.integers(6, 10):
            kind = rng.choice(["O", "O", "PER", "LOC"])
            if kind == "O":
                toks.append((str(rng.choice(words["O"])),))
                labs.append("O")
            else:
                for k in range(int(rng.integers(1, 3))):
                    toks.append((str(rng.choice(words[kind])),))
                    labs.append(("B-" if k == 0 else "I-") + kind)
        X.append(toks)
        y.append(labs)
        ann = {}
        for name, sticky, miss in (("s1", 0.6, 0.0), ("s2", 0.5, 0.1), ("good", 0.0, 0.05),
                                   ("lazy", 0.0, 0.5)):
            out, prev = [], "O"
            for lab in labs:
                if lab != "O" and rng.random() < miss:
                    v = "O"
                elif lab == "O" and prev != "O" and rng.random() < sticky:
                    v = "I-" + prev[2:]
                else:
                    v = lab
                out.append(v)
                prev = v
            ann[name] = out
        sents.append(CrowdSentence(toks, labs, 1, None, annotations=ann))
    return X, y, sents


def test_joint_bound_with_the_sequential_model_never_decreases():
    X, y, sents = sticky_crowd()
    votes = Votes.from_sentences([CrowdSentence(s.tokens, None, 1, None,
                                                annotations=s.annotations) for s in sents],
                                 classes=BIO)
    joint = CrowdGPSL(GPSL(template=UNIGRAM_TEMPLATE, max_iter=30)).fit(X, votes)
    jt = np.array(joint.joint_trace_)
    assert jt.size >= 4
    assert np.all(np.diff(jt) >= -1e-9 * np.abs(jt).max()), np.diff(jt).min()
    np.testing.assert_allclose(joint.bound_trace_[1:], jt[1::2])
    assert joint.joint_model_.n_iter_ < 30  # the stop rule
    assert joint.variance_[0] == pytest.approx(echo_variance(X, UNIGRAM_TEMPLATE))
    truth = [v for lab in y for v in lab]
    acc = np.mean(np.array(joint.labels_array_) == np.array(truth))
    mv = MajorityVote().fit_votes(votes)
    acc_mv = np.mean([p == t for p, t in zip(mv.labels_array_, truth)])
    assert acc > acc_mv
    conf = CrowdGPSL(GPSL(template=UNIGRAM_TEMPLATE, max_iter=30),
                     annotator_model="confusion").fit(X, votes)
    acc_conf = np.mean(np.array(conf.labels_array_) == np.array(truth))
    assert acc >= acc_conf  # the sticky annotators' errors are what the model explains
    seq = joint.crowd_
    p_sticky = seq.pi[votes.annotators.index("s1")]
    o, i_per, b_per = BIO.index("O"), BIO.index("I-PER"), BIO.index("B-PER")
    # s1 says I-PER on a true O after its own B-PER far more often than after its own O
    assert p_sticky[o, b_per, i_per] > 3 * p_sticky[o, o, i_per]


@pytest.mark.parametrize("lse_bound", ["jensen", "bohning"])
def test_joint_bound_never_decreases_under_either_log_partition_bound(lse_bound):
    X, _, sents = sticky_crowd()
    votes = Votes.from_sentences([CrowdSentence(s.tokens, None, 1, None,
                                                annotations=s.annotations) for s in sents],
                                 classes=BIO)
    joint = CrowdGPSL(GPSL(template=UNIGRAM_TEMPLATE, max_iter=30),
                      lse_bound=lse_bound).fit(X, votes)
    assert joint.joint_model_.lse_bound_ == lse_bound
    jt = np.array(joint.joint_trace_)
    assert jt.size >= 4
    assert np.all(np.diff(jt) >= -1e-9 * np.abs(jt).max()), np.diff(jt).min()
    np.testing.assert_allclose(joint.bound_trace_[1:], jt[1::2])


def test_the_joint_fits_log_partition_bound_by_default():
    X, _, sents = sticky_crowd(12)
    votes = Votes.from_sentences([CrowdSentence(s.tokens, None, 1, None,
                                                annotations=s.annotations) for s in sents],
                                 classes=BIO)

    def used(model, **kw):
        joint = CrowdGPSL(model, **kw).fit(X, votes)
        return joint.joint_model_.lse_bound_, joint.model_.lse_bound_

    # the echo prior: Jensen's in the joint fit, the model's own (the scalable mode's
    # Boehning) in the refit tagger
    assert used(GPSL(template=UNIGRAM_TEMPLATE, max_iter=5)) == ("jensen", "bohning")
    # a bound the model sets is kept
    assert used(GPSL(template=UNIGRAM_TEMPLATE, max_iter=5, lse_bound="bohning"))[0] == "bohning"
    # the other priors keep the model's setting, so their fits are as before
    assert used(GPSL(template=UNIGRAM_TEMPLATE, max_iter=5, variance=0.1),
                tagger_prior="model")[0] == "bohning"
    assert used(GPSL(template=UNIGRAM_TEMPLATE, max_iter=5),
                tagger_prior="model", lse_bound="jensen")[0] == "jensen"


def test_decode_labels_are_span_valid():
    from gpsl import tags

    votes = Votes(lengths=[3], token=[0, 1, 2], annotator=[0, 0, 0], label=[0, 0, 0],
                  annotators=["a"], classes=BIO)
    r = np.array([[0.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.6, 0.0, 0.4], [0, 0, 1.0, 0, 0]])
    assert decode_labels(r, votes, "argmax") == ["O", "I-LOC", "I-LOC"]
    valid = decode_labels(r, votes)
    assert tags.violations(valid, "BIO") == {} and valid[0] == "O"
    with pytest.raises(ValueError, match="decode"):
        decode_labels(r, votes, "best")


def test_echo_variance_counts_features_per_token():
    X = [[("John",), ("lives",)], [("in",), ("Paris",), ("now",)]]
    assert echo_variance(X, "ner:en:none") == pytest.approx(1.0 / 34)
    assert echo_variance(X, "ner") == pytest.approx(1.0 / (34 + 12))  # + the cluster slots
    assert echo_variance(X, None) == pytest.approx(1.0 / 7)
    assert echo_variance(X, UNIGRAM_TEMPLATE, min_freq=1) == pytest.approx(
        1.0 / len([x for x in UNIGRAM_TEMPLATE.split("\n") if x.startswith("U")]))


def test_crowd_options_are_checked():
    votes = Votes(lengths=[2], token=[0], annotator=[0], label=[0], annotators=["a"],
                  classes=["x", "y"])
    for kw, needle in ((dict(annotator_model="bsc"), "annotator_model"),
                       (dict(decode="best"), "decode"), (dict(init="x"), "init"),
                       (dict(lse_bound="exact"), "lse_bound")):
        with pytest.raises(ValueError, match=needle):
            CrowdGPSL(GPSL(), **kw).fit([[("a",), ("b",)]], votes)
    with pytest.raises(ValueError, match="kappa"):
        sequential_m_step(votes, np.full((2, 2), 0.5), previous_labels(votes), kappa=0.0)


# --------------------------------------------------------------------------- the CLI


def crowd_file(tmp_path, n=25):
    X, y, sents = sticky_crowd(n)
    path = tmp_path / "crowd.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for k, s in enumerate(sents):
            fh.write(json.dumps({"id": k, "tokens": [t[0] for t in s.tokens],
                                 "labels": s.labels,
                                 "annotations": [{"annotator": a, "labels": v}
                                                 for a, v in s.annotations.items()]}) + "\n")
    return path


def test_cli_aggregate_joint_with_ner(tmp_path, capsys):
    path = crowd_file(tmp_path)
    out = tmp_path / "out.txt"
    assert cli.main(["aggregate", "--model", "joint", "-t", "ner", "--max-iter", "15", "-q",
                     str(path), "-o", str(out), "--report", str(tmp_path / "r.json")]) == 0
    rows = [x.split("\t") for x in out.read_text(encoding="utf-8").split("\n") if x]
    assert all(len(x) == 3 and x[1] in BIO and 0.0 < float(x[2]) <= 1.0 for x in rows)
    rep = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert rep["method"] == "joint" and rep["gold_span_f1"] > 50
    assert {r["annotator"] for r in rep["annotators"]} == {"s1", "s2", "good", "lazy"}


def test_cli_train_crowd_with_ner_and_bad_input(tmp_path, capsys):
    path = crowd_file(tmp_path)
    assert cli.main(["train", "--crowd", "-t", "ner", "--max-iter", "10", "-q", str(path),
                     str(tmp_path / "m")]) == 0
    assert GPSL.load(tmp_path / "m").template_.text == "ner"
    capsys.readouterr()
    for argv, needle in (
            (["aggregate", "-t", "ner", str(path)], "-t needs --model joint"),
            (["aggregate", "--kappa", "3", str(path)], "--kappa needs --model joint"),
            (["aggregate", "--model", "joint", "--kappa", "-1", str(path)], "kappa"),
            (["train", "--annotator-model", "confusion", str(path), str(tmp_path / "x")],
             "--annotator-model needs --crowd"),
            (["aggregate", "--model", "joint", "-t", str(tmp_path / "none"), str(path)],
             "none")):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err, (argv, err)


def test_collapsed_skill_step_is_the_limit_of_the_alternation():
    """Dawid-Skene's shrinkage M-step maximises q and s at once (collapsed, concave in s):
    it reaches the point that alternating eq. (VB) and eq. (S) approaches, and its bound
    terms are at least as high."""
    from gpsl.crowd.confusion import (
        _dirichlet_elog_batch,
        expected_counts,
        shrink_betas,
        update_skills,
    )

    votes, r = random_votes(7, J=3, A=4, per_token=3)
    one_coin = np.zeros(votes.A, dtype=bool)
    cm = m_step(votes, r, one_coin, 2.0, 0.1, shrink=10.0)
    N = expected_counts(votes, r)
    s = np.full(votes.A, 0.5)
    for _ in range(3000):
        elog = _dirichlet_elog_batch(N + shrink_betas(votes.J, s, 10.0))
        s = update_skills(s, elog, 10.0, 2.0, 0.1)
    np.testing.assert_allclose(cm.skill, s, atol=1e-6)
    alt = m_step(votes, r, one_coin, 2.0, 0.1, shrink=10.0, skill=s)
    assert cm.log_prior() + float(np.sum(r * cm.evidence(votes))) >= \
        alt.log_prior() + float(np.sum(r * alt.evidence(votes))) - 1e-9


def test_entity_reliability_and_the_report():
    from gpsl.crowd import annotator_report, entity_reliability

    # tokens: 0 B-PER, 1 O, 2 B-LOC (posteriors one-hot); "lazy" says O everywhere, "eager"
    # says B-PER on token 0 (right) and B-LOC on token 1 (wrong), "good" is right everywhere
    classes = ["B-LOC", "B-PER", "O"]
    truth = [1, 2, 0]
    token, ann, lab = [], [], []
    for a, labels in enumerate(([2, 2, 2], [1, 0, 0], [1, 2, 0])):
        for t, v in enumerate(labels):
            token.append(t)
            ann.append(a)
            lab.append(v)
    votes = Votes(lengths=[3], token=token, annotator=ann, label=lab,
                  annotators=["lazy", "eager", "good"], classes=classes)
    r = np.eye(3)[truth]
    prec, rec = entity_reliability(votes, r)
    assert np.isnan(prec[0]) and rec[0] == 0.0
    assert prec[1] == pytest.approx(2 / 3) and rec[1] == 1.0
    assert prec[2] == 1.0 and rec[2] == 1.0
    rows = annotator_report(MajorityVote().fit_votes(votes), votes)
    # under the majority's vote fractions: eager's three entity votes are right with
    # probabilities 2/3, 1/3 and 2/3
    assert rows[0]["precision"] is None and rows[0]["recall"] == 0.0
    assert rows[1]["precision"] == pytest.approx(5 / 9)
    assert entity_reliability(Votes(lengths=[1], token=[0], annotator=[0], label=[0],
                                    annotators=["a"], classes=["x", "y"]),
                              np.eye(2)[[0]]) is None


@pytest.mark.parametrize("model", ["dawid-skene", "joint"])
def test_one_label_crowd_gives_that_label_without_a_numerical_warning(tmp_path, capsys, model):
    """A crowd whose votes all carry one label (J = 1): every confusion matrix is [[1]], the
    skills enter nothing; no 0/0 in the skill step (warnings are errors here) and every
    voted token gets the label with probability 1."""
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"tokens": ["a", "b", "c"], "annotations": [
        {"annotator": "x", "labels": ["O", "O", "O"]},
        {"annotator": "y", "labels": ["O", None, "O"]}]}) + "\n")
    out = tmp_path / "out.txt"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert cli.main(["aggregate", "--model", model, "-q", str(path), "-o", str(out)]) == 0
    rows = [line.split() for line in out.read_text().splitlines() if line.strip()]
    assert [r[-2] for r in rows] == ["O", "O", "O"]
    assert all(abs(float(r[-1]) - 1.0) < 1e-9 for r in rows)
