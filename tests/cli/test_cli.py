"""Tests for the command line (gpsl.cli), crf_learn / crf_test style."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from gpsl import cli
from gpsl.cli import common
from gpsl.cli import train as cli_train
from tests.support.limits import limit

TRAIN = (
    "the DT B\ndog NN I\nruns VBZ O\n\n"
    "a DT B\ncat NN I\nsleeps VBZ O\n\n"
    "the DT B\ncat NN I\nruns VBZ O\n\n"
    "a DT B\ndog NN _\nsleeps VBZ O\n"
)
TEMPLATE = "# unigram\nU00:%x[0,0]\nU01:%x[0,1]\nU02:%x[-1,1]/%x[0,1]\n\n# bigram\nB\n"


def run(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, *needles):
    assert code == 2
    assert err.startswith("gpsl: error: ")
    assert err.count("\n") == 1 and err.endswith("\n")
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err


@pytest.fixture
def files(tmp_path):
    train = tmp_path / "train.data"
    train.write_text(TRAIN, encoding="utf-8")
    template = tmp_path / "template"
    template.write_text(TEMPLATE, encoding="utf-8")
    return tmp_path, train, template


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    "text, expected",
    [("-1,1", (-1, 1)), ("-1", (-1,)), ("-2,-1,1,2", (-2, -1, 1, 2)), ("1", (1,)),
     ("gpsl4", (-2, -1, 1, 2)), (" -1, 1", (-1, 1))],
)
def test_parse_offsets_arg(text, expected):
    assert cli.parse_offsets_arg(text) == expected


@pytest.mark.parametrize("text", ["0", "-1,0", "-1,-1", "a", "-1,,1", "", "1.5"])
def test_parse_offsets_arg_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError):
        cli.parse_offsets_arg(text)


@pytest.mark.parametrize(
    "argv, offsets",
    [
        (["-d", "-1,1"], (-1, 1)),
        (["-d=-1,1"], (-1, 1)),
        (["-d", "-1"], (-1,)),
        (["-d-2,-1,1,2"], (-2, -1, 1, 2)),
        (["--offsets", "-2,-1,1,2"], (-2, -1, 1, 2)),
        (["--offsets=-1"], (-1,)),
        ([], (-1, 1)),
    ],
)
def test_offsets_option_forms(argv, offsets):
    args = cli.build_parser().parse_args(common.normalise_argv(["train", *argv, "t.data", "m"]))
    assert args.offsets == offsets
    assert args.train_file == "t.data" and args.model_dir == "m"


@pytest.mark.parametrize(
    "argv, needle",
    [
        ([], "a command is required"),
        (["frobnicate"], "invalid choice"),
        (["train", "-d", "0,1", "x", "m"], "offsets must be non-zero"),
        (["train", "-d=-1,-1", "x", "m"], "duplicate"),
        (["train", "-d", "-1,a", "x", "m"], "bad offsets"),
        (["train", "--kernel", "poly", "x", "m"], "invalid choice: 'poly'"),
        (["train", "--max-iter", "0", "x", "m"], "positive integer"),
        (["train", "-f", "x2", "x", "m"], "positive integer"),
        (["train", "--tol", "-1", "x", "m"], "a number in [0, 1]"),
        (["train", "--tol", "nan", "x", "m"], "a number in [0, 1]"),
        (["train", "-d", "99999999999999999999", "x", "m"], "too far"),
        (["train", "-d=-9999999999", "x", "m"], "too far"),
        (["train", "--max-iter", "99999999999999999999", "x", "m"], "positive integer"),
        (["train", "--variance", "inf", "x", "m"], "(0, 1e6]"),
        (["train", "--min-votes", "3", "x", "m"], "--min-votes needs --crowd"),
        (["query", "-m", "m", "--seed", "-1", "x"], "argument --seed"),
        (["train", "--missing-weight", "2", "x", "m"], "'auto' or a number in [0, 1]"),
        (["train", "--missing-weight", "some", "x", "m"], "'auto' or a number in [0, 1]"),
        (["train", "--encoding", "klingon", "x", "m"], "unknown encoding"),
        (["train", "x"], "required"),
        (["test", "x.data"], "-m/--model"),
        (["test", "-m", "m", "--decoder", "beam", "x"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, needle, capsys):
    code, out, err = run(argv, capsys)
    assert out == ""
    assert_one_line_error(code, err, needle)


def test_help_and_version(capsys):
    code, out, _ = run(["--help"], capsys)
    assert code == 0 and "train" in out and "test" in out and "eval" in out
    code, out, _ = run(["--version"], capsys)
    assert code == 0 and out.startswith("gpsl ")


# --------------------------------------------------------------------------- file errors


def test_train_missing_file(files, capsys):
    tmp, _, template = files
    code, _, err = run(["train", "-t", template, tmp / "nope.data", tmp / "m"], capsys)
    assert_one_line_error(code, err, f"{tmp / 'nope.data'}: cannot read file")


def test_train_ragged_file_names_file_and_line(files, capsys):
    tmp, _, template = files
    bad = tmp / "bad.data"
    bad.write_text("a DT B\nb NN I\n\nc NN\n", encoding="utf-8")
    code, _, err = run(["train", "-t", template, bad, tmp / "m"], capsys)
    assert_one_line_error(code, err, f"{bad}:4: expected 3 columns, found 2")
    assert not (tmp / "m").exists()


def test_train_bad_template_names_template_line(files, capsys):
    tmp, train, template = files
    template.write_text("U00:%x[0,0]\n\nU01:%x[0,x]\n", encoding="utf-8")
    code, _, err = run(["train", "-t", template, train, tmp / "m"], capsys)
    assert_one_line_error(code, err, f"{template}:3: bad macro")
    template.write_text("U00:%x[0,0]\nU01:%x[1,2]\n", encoding="utf-8")
    code, _, err = run(["train", "-t", template, train, tmp / "m"], capsys)
    assert_one_line_error(code, err, f"{template}:2: %x[1,2] uses column 2")


def test_train_all_labels_missing(files, capsys):
    tmp, _, template = files
    unl = tmp / "unl.data"
    unl.write_text("a DT _\nb NN _\n", encoding="utf-8")
    code, _, err = run(["train", "-t", template, unl, tmp / "m"], capsys)
    assert_one_line_error(code, err, f"{unl}: no labeled token")


@pytest.mark.parametrize("command", ["test", "eval"])
def test_missing_model_dir(files, command, capsys):
    tmp, train, _ = files
    code, out, err = run([command, "-m", tmp / "no-model", train], capsys)
    assert out == ""
    assert_one_line_error(code, err, f"{tmp / 'no-model'}: model directory not found")
    code, out, err = run([command, "-m", train, train], capsys)
    assert_one_line_error(code, err, "not a model directory")


# --------------------------------------------------------------------------- with a stand-in model


class FakeModel:
    """Labels a token "N" when its second column is NN, else "O"; fixed marginals."""

    n_columns_ = 2
    classes_ = ["N", "O"]
    inference_ = "sparse"
    fit_seconds_ = 1.5
    kwargs: dict = {}
    saved_to = None

    def __init__(self, **kwargs):
        FakeModel.kwargs = kwargs
        self.extractor_ = types.SimpleNamespace(vocabulary_={"a": 0, "b": 1, "c": 2})

    def fit(self, X, y, callback=None):
        FakeModel.fit_args = (X, y)
        for i in (1, 2):
            callback({"iteration": i, "bound": -10.0 / i, "seconds": 0.5 * i})
        return self

    def save(self, path):
        FakeModel.saved_to = path

    def predict(self, X, decoder=None):
        FakeModel.decoder = decoder
        for s in X:
            assert all(len(t) == 2 for t in s)
        return [["N" if t[1] == "NN" else "O" for t in s] for s in X]

    def predict_marginals(self, X):
        return [np.tile([0.25, 0.75], (len(s), 1)) if i else np.tile([0.9876543, 0.0123457],
                (len(s), 1)) for i, s in enumerate(X)]


@pytest.fixture
def fake(monkeypatch):
    module = types.ModuleType("gpsl.model")
    module.GPSL = FakeModel
    monkeypatch.setitem(sys.modules, "gpsl.model", module)
    monkeypatch.setattr(common, "load_model", lambda path: FakeModel())
    return FakeModel


def test_train_wiring_progress_and_summary(files, fake, capsys):
    tmp, train, template = files
    code, out, err = run(["train", "-t", template, "-d", "-2,-1,1,2", "--kernel", "rbf",
                          "--max-iter", "7", "--tol", "0.01", "--learn-hyper", "--variance", "2.5",
                          "--pair-variance", "3", "-f", "2", "--inference", "sparse",
                          "--inducing", "30",
                          "--missing-start", "supervised", "--missing-weight", "0.25", train,
                          tmp / "model"], capsys)
    assert code == 0 and out == ""
    assert fake.kwargs == dict(offsets=(-2, -1, 1, 2), kernel="rbf", template=TEMPLATE,
                               min_freq=2, max_iter=7, tol=0.01, learn_hyper=True,
                               variance=2.5, pair_variance=3.0, inference="sparse",
                               inducing=30,
                               lse_bound="auto", missing_start="supervised",
                               missing_weight=0.25, cluster=None)
    X, y = fake.fit_args
    assert X[0] == [("the", "DT"), ("dog", "NN"), ("runs", "VBZ")]
    assert y[3] == ["B", None, "O"]
    assert fake.saved_to == str(tmp / "model")
    lines = err.splitlines()
    assert lines[0] == "iter=1    bound=-10.000000 time=0.50s"
    assert lines[1] == "iter=2    bound=-5.000000 time=1.00s"
    assert lines[2].startswith("gpsl: trained on 12 tokens (4 sentences, sparse inference), "
                               "2 labels, 1 missing labels, 3 features, fit 1.50 s; not "
                               "calibrated: 11 labeled training tokens are too few to "
                               "calibrate on (at least 50); ")
    assert len(lines) == 3


def test_test_output_exactly_like_crf_test(files, fake, capsys, tmp_path):
    data = tmp_path / "t.data"
    data.write_text("the DT B\ndog NN I\n\r\n\r\ncat  NN\t_\n", encoding="utf-8")
    code, out, err = run(["test", "-m", tmp_path, data], capsys)
    assert code == 0 and err == ""
    assert out == "the\tDT\tB\tO\ndog\tNN\tI\tN\n\ncat\tNN\t_\tN\n\n"
    # no gold column: the prediction is the third column
    data.write_text("the DT\ndog NN\n", encoding="utf-8")
    code, out, _ = run(["test", "-m", tmp_path, "--decoder", "viterbi", data], capsys)
    assert out == "the\tDT\tO\ndog\tNN\tN\n\n"
    assert fake.decoder == "viterbi"


def test_test_marginals_and_output_file(files, fake, capsys, tmp_path):
    data = tmp_path / "t.data"
    data.write_text("the DT B\ndog NN I\n\ncat NN I\n", encoding="utf-8")
    expected = "the\tDT\tB\tO/0.012346\ndog\tNN\tI\tN/0.987654\n\ncat\tNN\tI\tN/0.250000\n\n"
    code, out, _ = run(["test", "-m", tmp_path, "--marginals", data], capsys)
    assert code == 0 and out == expected
    code, out, _ = run(["test", "-m", tmp_path, "-v1", data], capsys)
    assert out == expected
    # a bare -v is level 1 and leaves the file name alone, before or after it
    for argv in (["-v", data], [data, "-v"], ["-v", "1", data], ["-v", "0", "--marginals", data]):
        code, out, err = run(["test", "-m", tmp_path, *argv], capsys)
        assert (code, out, err) == (0, expected, ""), argv
    code, out, _ = run(["test", "-m", tmp_path, "-v", "0", data], capsys)
    assert code == 0 and "/" not in out
    dest = tmp_path / "out.txt"
    code, out, _ = run(["test", "-m", tmp_path, data, "-o", dest], capsys)
    assert code == 0 and out == ""
    assert dest.read_text(encoding="utf-8") == "the\tDT\tB\tO\ndog\tNN\tI\tN\n\ncat\tNN\tI\tN\n\n"


def test_test_wrong_column_count(fake, capsys, tmp_path):
    data = tmp_path / "t.data"
    data.write_text("\nthe DT B x\n", encoding="utf-8")
    code, _, err = run(["test", "-m", tmp_path, data], capsys)
    assert_one_line_error(code, err, f"{data}:2: found 4 columns but the model was trained on 2")


def test_eval_stand_in(fake, capsys, tmp_path):
    data = tmp_path / "t.data"
    data.write_text("the DT O\ndog NN N\nis VBZ N\ncat NN _\n", encoding="utf-8")
    code, out, err = run(["eval", "-m", tmp_path, data], capsys)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[:3] == ["tokens: 4 (scored 3, missing 1)", "accuracy: 66.67%",
                         "hamming loss: 33.33%"]
    # the marginals' calibration: three tokens at confidence 0.9877 (argmax N), two right
    assert lines[3].startswith("marginals (uncalibrated, labels known to the model): mean "
                               "confidence 0.9877, accuracy 0.6667, ECE (15 equal-mass bins) "
                               "0.3210")
    assert len(lines) == 4
    data.write_text("the DT\n", encoding="utf-8")
    code, _, err = run(["eval", "-m", tmp_path, data], capsys)
    assert_one_line_error(code, err, "no gold label column")


# --------------------------------------------------------------------------- the real model


def _real_model_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("gpsl.model", "gpsl.persist"))


real = pytest.mark.skipif(not _real_model_available(),
                          reason="gpsl.model / gpsl.persist not written yet")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    if not _real_model_available():
        pytest.skip("gpsl.model / gpsl.persist not written yet")
    tmp = tmp_path_factory.mktemp("cli")
    train = tmp / "train.data"
    train.write_text(TRAIN, encoding="utf-8")
    template = tmp / "template"
    template.write_text(TEMPLATE, encoding="utf-8")
    model = tmp / "model"
    code = cli.main(["train", "-q", "-t", str(template), "-d", "-1,1", "--max-iter", "10",
                     str(train), str(model)])
    assert code == 0
    return tmp, train, model


@real
def test_real_train_then_test(trained, capsys):
    tmp, train, model = trained
    assert model.is_dir()
    test = tmp / "test.data"
    test.write_text("the DT B\ncat NN I\nsleeps VBZ O\n\na DT B\ndog NN I\n", encoding="utf-8")
    code, out, err = run(["test", "-m", model, test], capsys)
    assert code == 0, err
    blocks = out.split("\n\n")
    assert out.endswith("\n\n") and len(blocks) == 3 and blocks[2] == ""
    lines = [ln.split("\t") for b in blocks[:2] for ln in b.split("\n")]
    inputs = [ln.split() for ln in test.read_text().split("\n") if ln]
    assert [ln[:3] for ln in lines] == inputs
    assert all(len(ln) == 4 and ln[3] in {"B", "I", "O"} for ln in lines)
    # the pattern is trivial: the model should get it right
    assert [ln[3] for ln in lines] == [ln[2] for ln in inputs]

    code, out, err = run(["test", "-m", model, "--marginals", test], capsys)
    assert code == 0, err
    for ln in out.split("\n"):
        if ln:
            label, prob = ln.split("\t")[3].split("/")
            assert label in {"B", "I", "O"}
            assert len(prob.split(".")[1]) == 6 and 1 / 3 < float(prob) <= 1.0

    code, out, err = run(["eval", "-m", model, test], capsys)
    assert code == 0, err
    assert "accuracy: 100.00%" in out and "hamming loss: 0.00%" in out
    # B/I/O labels: the conlleval summary (by seqeval) follows, untyped chunks here
    lines = out.splitlines()
    assert "chunks (conlleval, seqeval): 2 of 2 sentences with complete gold labels" in lines
    assert "processed 5 tokens with 2 phrases; found: 2 phrases; correct: 2." in lines
    assert any(ln.strip() == "(untyped): precision: 100.00%; recall: 100.00%; FB1: 100.00  2"
               for ln in lines)


@real
def test_real_summary_line(files, capsys):
    tmp, train, template = files
    code, _, err = run(["train", "-t", template, "--max-iter", "3", train, tmp / "m"], capsys)
    assert code == 0, err
    lines = err.splitlines()
    assert lines[0].startswith("iter=1 ")
    assert lines[-1].startswith("gpsl: trained on 12 tokens (4 sentences, sparse inference), "
                                "3 labels, "
                                "1 missing labels, ")


@real
def test_real_sparse_mode_trains_saves_and_tags(files, capsys, tmp_path):
    tmp, train, template = files
    code, _, err = run(["train", "-t", template, "--inference", "sparse", "--max-iter", "5",
                        train, tmp / "ms"], capsys)
    assert code == 0, err
    assert "sparse inference" in err.splitlines()[-1]
    assert json.loads((tmp / "ms" / "model.json").read_text())["inference"] == "sparse"
    code, out, err = run(["test", "-m", tmp / "ms", train], capsys)
    assert code == 0, err
    assert len([ln for ln in out.splitlines() if ln.strip()]) == 12


@real
def test_real_ragged_test_file_and_viterbi_error(trained, capsys):
    tmp, _, model = trained
    bad = tmp / "ragged.data"
    bad.write_text("the DT B\ncat NN\n", encoding="utf-8")
    code, out, err = run(["test", "-m", model, bad], capsys)
    assert out == ""
    assert_one_line_error(code, err, f"{bad}:2: expected 3 columns, found 2")
    good = tmp / "good.data"
    good.write_text("the DT\n", encoding="utf-8")
    code, _, err = run(["test", "-m", model, "--decoder", "viterbi", good], capsys)
    assert_one_line_error(code, err, "Viterbi")


def test_python_dash_m_entry_point(tmp_path):
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "gpsl", "test", "-m", str(tmp_path / "none"),
                           "x.data"], cwd=root, capture_output=True, text=True, timeout=limit(60))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == f"gpsl: error: {tmp_path / 'none'}: model directory not found\n"


def test_max_tokens_option_and_environment(files, capsys, monkeypatch):
    code, _, err = run(["train", "--max-tokens", "2", str(files[1]), str(files[0] / "m")], capsys)
    assert_one_line_error(code, err, "sentence has 3 tokens; the limit is 2")
    monkeypatch.setenv("GPSL_MAX_TOKENS", "x")
    code, _, err = run(["train", str(files[1]), str(files[0] / "m")], capsys)
    assert_one_line_error(code, err, "GPSL_MAX_TOKENS: expected a non-negative number")
    code, _, err = run(["train", "--max-tokens", "-1", str(files[1]), str(files[0] / "m")], capsys)
    assert_one_line_error(code, err, "argument --max-tokens")


def test_non_text_encoding_and_foreign_model_dir(files, capsys, tmp_path):
    code, _, err = run(["train", "--encoding", "base64", str(files[1]), str(files[0] / "m")],
                       capsys)
    assert_one_line_error(code, err, "'base64' is not a text encoding")
    other = tmp_path / "docs"
    other.mkdir()
    (other / "keep").write_text("keep")
    code, _, err = run(["train", str(files[1]), str(other)], capsys)
    assert_one_line_error(code, err, "not a gpsl model directory; refusing to replace it")
    assert (other / "keep").exists()


def test_unexpected_errors_are_one_line_with_status_1(files, capsys, monkeypatch):
    def boom(args):
        raise KeyError("surprise")

    monkeypatch.setattr(cli_train, "run", boom)
    monkeypatch.delenv("GPSL_DEBUG", raising=False)
    code, _, err = run(["train", str(files[1]), str(files[0] / "m")], capsys)
    assert code == 1
    assert err.count("\n") == 1 and "internal error: KeyError" in err
    monkeypatch.setenv("GPSL_DEBUG", "1")
    with pytest.raises(KeyError):
        cli.main(["train", str(files[1]), str(files[0] / "m")])


def _chain_file(path, n_sentences, seed):
    """``n_sentences`` of the synthetic chain task as a one-column CoNLL file."""
    from gpsl.synthetic import make_chain_task

    X, y = make_chain_task(n_sentences, seed=seed)
    path.write_text("\n".join("".join(f"{w[0]} {lab}\n" for w, lab in zip(x, ys))
                              for x, ys in zip(X, y)), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def chain_files(tmp_path_factory):
    """Training (12 sentences, 100+ tokens), held-out (8) and test (6) files of the chain
    task: enough for the default calibration (5 folds)."""
    tmp = tmp_path_factory.mktemp("chain")
    return (_chain_file(tmp / "train.data", 12, 1), _chain_file(tmp / "held.data", 8, 2),
            _chain_file(tmp / "test.data", 6, 3))


def _printed(out: str) -> list[tuple[str, float]]:
    """(label, probability) of every token line of ``test --marginals``."""
    return [(ln.split("\t")[-1].rsplit("/", 1)[0], float(ln.rsplit("/", 1)[1]))
            for ln in out.splitlines() if ln.strip()]


@real
def test_train_calibrates_by_default_on_folds_and_test_prints_the_calibrated_marginals(
        chain_files, tmp_path, capsys):
    from gpsl.model import GPSL

    train, _, test = chain_files
    code, _, err = run(["train", "-q", "--max-iter", "5", train, tmp_path / "m"], capsys)
    assert code == 0, err
    summary = err.splitlines()[-1]
    assert "gpsl: calibrated on " in err and "(5-fold)" in err
    assert "; calibrated on 5 folds of the training sentences (" in summary
    assert " s)" in summary and "seconds in all" in summary
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    rec = meta["calibration_run"]
    n_tokens = sum(1 for ln in train.read_text().splitlines() if ln.strip())
    assert rec["source"] == "folds" and rec["folds"] == 5 and rec["sentences"] == 12
    assert rec["tokens"] == n_tokens == meta["calibration"]["n_tokens"]
    assert rec["seconds"] > 0 and rec["processes"] >= 1
    model = GPSL.load(tmp_path / "m")
    assert model.calibrator_ is not None and model.calibration_run_.folds == 5
    # test --marginals prints the calibrated marginal of the predicted label
    code, out, err = run(["test", "-m", tmp_path / "m", "--marginals", test], capsys)
    assert code == 0, err
    printed = _printed(out)
    from gpsl.io import read_conll

    X = [s.tokens for s in read_conll(test)]
    X = [[tok[:1] for tok in x] for x in X]
    P = np.concatenate(model.predict_marginals(X))
    raw = np.concatenate(model.predict_marginals(X, calibrated=False))
    labels = [lab for lab, _ in printed]
    idx = [model.classes_.index(lab) for lab in labels]
    rows = np.arange(len(idx))
    assert np.allclose([p for _, p in printed], P[rows, idx], atol=1e-6)
    assert not np.allclose(P, raw)  # the calibrator changed them
    code, out, err = run(["eval", "-m", tmp_path / "m", test], capsys)
    assert code == 0, err
    assert "marginals (calibrated on 5 folds of the training sentences" in out


@real
def test_no_calibrate_and_too_little_data_are_recorded(chain_files, files, tmp_path, capsys):
    from gpsl.model import GPSL

    train, _, test = chain_files
    code, _, err = run(["train", "-q", "--max-iter", "5", "--no-calibrate", train,
                        tmp_path / "m"], capsys)
    assert code == 0, err
    assert "gpsl: calibrated" not in err
    assert "; not calibrated: --no-calibrate; " in err.splitlines()[-1]
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    assert meta["calibration"] is None
    assert meta["calibration_run"] == {"source": "none", "folds": None, "tokens": 0,
                                       "sentences": 0, "processes": 0, "seconds": 0.0,
                                       "reason": "--no-calibrate"}
    model = GPSL.load(tmp_path / "m")
    assert model.calibrator_ is None and model.calibration_run_.source == "none"
    code, out, _ = run(["eval", "-m", tmp_path / "m", test], capsys)
    assert "marginals (uncalibrated: --no-calibrate," in out
    # the default on 4 sentences: too few to calibrate, trained all the same, and said why
    tmp, small, template = files
    code, _, err = run(["train", "-q", "-t", template, "--max-iter", "3", small, tmp / "s"],
                       capsys)
    assert code == 0, err
    assert "; not calibrated: 11 labeled training tokens are too few" in err
    rec = json.loads((tmp / "s" / "model.json").read_text())["calibration_run"]
    assert rec["source"] == "none" and "at least 50" in rec["reason"]


@real
def test_calibrate_from_a_held_out_file_and_explicit_folds(chain_files, files, tmp_path,
                                                           capsys):
    train, held, test = chain_files
    code, _, err = run(["train", "-q", "--max-iter", "5", "--calibrate", held, train,
                        tmp_path / "mc"], capsys)
    assert code == 0, err
    assert "(held.data)" in err and "calibrated on held-out labels (" in err
    meta = json.loads((tmp_path / "mc" / "model.json").read_text())
    assert meta["calibration"]["source"] == "held.data"
    assert meta["calibration_run"]["source"] == "held-out"
    assert meta["calibration_run"]["sentences"] == 8 and meta["calibration_run"]["folds"] is None
    code, out, err = run(["eval", "-m", tmp_path / "mc", test], capsys)
    assert code == 0, err
    assert "marginals (calibrated on held-out labels" in out and "ECE (15 equal-mass" in out
    code, _, err = run(["train", "-q", "--max-iter", "5", "--calibrate-folds", "3",
                        "--jobs", "1", train, tmp_path / "mf"], capsys)
    assert code == 0, err
    assert "(3-fold)" in err and "calibrated on 3 folds" in err
    assert json.loads((tmp_path / "mf" / "model.json").read_text())["calibration_run"][
        "processes"] == 1


@real
@pytest.mark.parametrize("argv, needle", [
    (["--calibrate", "{small}"], "labeled tokens in 2 sentences (at least 50 in two; or leave "
                                 "--calibrate out"),
    (["--calibrate-folds", "7"], "12 labeled training sentences are too few for 7 calibration "
                                 "folds (at least 14)"),
    (["--no-calibrate", "--jobs", "2"], "--jobs sets the processes of the calibration's fold "
                                        "fits; with --no-calibrate there are none"),
    (["--calibrate", "{held}", "--jobs", "2"], "--calibrate FILE calibrates on held-out"),
    (["--no-calibrate", "--calibrate-folds", "3"], "not allowed with argument"),
    (["--jobs", "0"], "argument --jobs"),
])
def test_calibration_options_the_data_cannot_honour_are_refused(chain_files, tmp_path, capsys,
                                                                 argv, needle):
    train, held, _ = chain_files
    small = _chain_file(tmp_path / "small.data", 2, 4)  # fewer than 50 tokens
    argv = [a.format(small=small, held=held) for a in argv]
    code, out, err = run(["train", "-q", *argv, train, tmp_path / "m"], capsys)
    assert out == ""
    assert_one_line_error(code, err, needle)
    assert not (tmp_path / "m").exists()  # refused before any training


# --------------------------------------------------------------------------- train --crowd


CROWD = [
    {"tokens": ["the", "dog", "runs"],
     "annotations": [{"annotator": "a", "labels": ["B", "I", "O"]},
                     {"annotator": "b", "labels": ["B", "I", "O"]}]},
    {"tokens": ["a", "cat", "sleeps"],
     "annotations": [{"annotator": "a", "labels": ["B", "I", "O"]},
                     {"annotator": "b", "labels": ["B", "O", "O"]}]},
    {"tokens": ["the", "cat", "runs"],
     "annotations": [{"annotator": "a", "labels": ["B", "I", None]}]},
    {"tokens": ["a", "dog", "sleeps"],
     "annotations": [{"annotator": "b", "labels": ["B", None, "O"]}]},
]


@pytest.fixture
def crowd_file(tmp_path):
    path = tmp_path / "crowd.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in CROWD), encoding="utf-8")
    held = tmp_path / "held.data"  # 54 tokens: enough to calibrate on (at least 50)
    held.write_text("the B\ndog I\nsleeps O\n\na B\ncat I\nruns O\n\n" * 9,
                    encoding="utf-8")
    return path, held


@real
def test_train_crowd_honours_the_tagger_options_and_calibrate(crowd_file, capsys, tmp_path,
                                                              monkeypatch):
    import functools

    from gpsl import model as gm

    made = []
    real_init = gm.GPSL.__init__

    @functools.wraps(real_init)  # GPSL.param_names reads the signature
    def spy(self, *a, **kw):
        real_init(self, *a, **kw)
        made.append(self)

    monkeypatch.setattr(gm.GPSL, "__init__", spy)
    src, held = crowd_file
    code, _, err = run(["train", "--crowd", "-q", "--max-iter", "3", "--missing-weight", "0.3",
                        "--lse-bound", "bohning", "--missing-start", "supervised",
                        "--calibrate", held, src, tmp_path / "m"], capsys)
    assert code == 0, err
    assert "gpsl: calibrated on 54 tokens (held.data)" in err
    assert "; calibrated on held-out labels (54 tokens, " in err.splitlines()[-1]
    assert made and all((m.missing_weight, m.lse_bound, m.missing_start)
                        == (0.3, "bohning", "supervised") for m in made)
    saved = json.loads((tmp_path / "m" / "model.json").read_text())
    assert saved["calibration"]["source"] == "held.data"
    assert saved["config"]["missing_weight"] == 0.3 and saved["config"]["lse_bound"] == "bohning"


@pytest.mark.parametrize("extra, needle", [
    (["--calibrate-folds", "2"], "--calibrate-folds 2: 10 labeled training tokens are too few"),
    (["--scheduler", "tcp://127.0.0.1:1"], "--scheduler does not run the crowd model"),
    (["--calibrate", "{held}", "--jobs", "2"], "--jobs sets the processes of the calibration's "
                                               "fold fits; --calibrate FILE"),
    (["--calibrate", "{small}"], "too little to calibrate on: 6 labeled tokens in 2 sentences"),
])
def test_train_crowd_refuses_what_it_cannot_honour(crowd_file, capsys, tmp_path, extra, needle):
    src, held = crowd_file
    small = tmp_path / "small.data"
    small.write_text("the B\ndog I\nsleeps O\n\na B\ncat I\nruns O\n", encoding="utf-8")
    extra = [a.format(small=small, held=held) for a in extra]
    code, out, err = run(["train", "--crowd", *extra, src, tmp_path / "m"], capsys)
    assert out == ""
    assert_one_line_error(code, err, needle)
    assert not (tmp_path / "m").exists()


@real
def test_train_crowd_calibrates_on_folds_of_the_inferred_labels(capsys, tmp_path):
    """No gold with --crowd: the default calibrates on folds of the labels the crowd model
    inferred (the voted tokens), and says so; too few votes, or --no-calibrate: none."""
    from gpsl.synthetic import make_chain_task

    X, y = make_chain_task(12, seed=4)
    src = tmp_path / "crowd.jsonl"
    lines = []
    for x, lab in zip(X, y):
        noisy = [("L1" if i % 7 == 3 else v) for i, v in enumerate(lab)]
        lines.append(json.dumps({"tokens": [w[0] for w in x], "annotations": [
            {"annotator": "a", "labels": lab}, {"annotator": "b", "labels": noisy}]}))
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    n_tokens = sum(len(x) for x in X)
    code, _, err = run(["train", "--crowd", "-q", "--max-iter", "3", "--jobs", "1", src,
                        tmp_path / "m"], capsys)
    assert code == 0, err
    assert f"gpsl: calibrated on {n_tokens} tokens (5-fold inferred labels)" in err
    assert "; calibrated on 5 folds of the training sentences (" in err.splitlines()[-1]
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    assert meta["calibration_run"]["source"] == "folds"
    assert meta["calibration_run"]["tokens"] == n_tokens
    code, _, err = run(["train", "--crowd", "-q", "--max-iter", "3", "--no-calibrate", src,
                        tmp_path / "m2"], capsys)
    assert code == 0 and "; not calibrated: --no-calibrate; " in err


@real
def test_train_crowd_with_too_few_votes_is_not_calibrated_and_says_so(crowd_file, capsys,
                                                                       tmp_path):
    src, _ = crowd_file
    code, _, err = run(["train", "--crowd", "-q", "--max-iter", "3", src, tmp_path / "m"],
                       capsys)
    assert code == 0, err
    assert "; not calibrated: 10 labeled training tokens are too few to calibrate on" in err
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    assert meta["calibration"] is None and meta["calibration_run"]["source"] == "none"


def test_huge_offsets_are_refused_fast_on_the_command_line(files):
    import time

    tmp, train, _ = files
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gpsl", "train", "-d=-9999999999", str(train),
                           str(tmp / "m")], capture_output=True, text=True,
                          timeout=limit(120))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "too far" in proc.stderr and time.perf_counter() - t0 < limit(60)


@real
def test_real_train_with_ner_uses_the_feature_sets_defaults(tmp_path, capsys):
    """``train -t ner`` fits with the ``ner`` set's variance 2 and pair variance 4 and the
    saved model decodes with its decoder (exact); ``test`` prints those labels."""
    from gpsl.model import GPSL

    rows = []
    for i in range(12):
        name, place = ("John", "Mary", "Anne")[i % 3], ("Paris", "Rome")[i % 2]
        rows += [f"{name} B-PER", "Smith I-PER", "visited O", f"{place} B-LOC", ". O", ""]
    data = tmp_path / "ner.data"
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    code, _, err = run(["train", "-t", "ner", "--max-iter", "5", "--no-calibrate", data,
                        tmp_path / "m"], capsys)
    assert code == 0, err
    model = GPSL.load(tmp_path / "m")
    assert np.allclose(np.exp(model.state_.theta[:, 0]), 2.0)
    assert model.decoder_() == "exact"
    code, out, err = run(["test", "-m", tmp_path / "m", data], capsys)
    assert code == 0, err
    sents = [s.split("\n") for s in out.strip().split("\n\n")]
    X = [[(ln.split()[0],) for ln in s] for s in sents]
    assert [[ln.split()[-1] for ln in s] for s in sents] == model.predict(X, decoder="exact")
