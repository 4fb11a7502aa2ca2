"""``gpsl test`` streams: the file read a block at a time, tagged and written in chunks; the
output is that of tagging the whole file at once, wherever the chunks and blocks end."""

from __future__ import annotations

import argparse

import pytest

from gpsl import cli
from gpsl.calibration import calibrate
from gpsl.cli import tag
from gpsl.errors import InputError
from gpsl.io import format_conll, iter_conll, read_conll, source
from gpsl.model import GPSL
from gpsl.synthetic import make_chain_task


@pytest.fixture(scope="module")
def model_and_file(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stream")
    X, y = make_chain_task(70, n_labels=4, seed=3)
    model = GPSL(offsets=(-1, 1)).fit(X[:40], y[:40])
    model.save(tmp / "model")
    test = tmp / "test.data"
    test.write_text("".join("".join(f"{tok[0]} {lab}\n" for tok, lab in zip(s, lab_s,
                                                                           strict=True)) + "\n"
                            for s, lab_s in zip(X[40:], y[40:], strict=True)), encoding="utf-8")
    return tmp / "model", test


def _whole_file(model_dir, test, marginals=False):
    """The output of tagging every sentence of the file in one call (the code before)."""
    model = GPSL.load(model_dir)
    sents = read_conll(test, labeled=False)
    X = [[tok[:1] for tok in s.tokens] for s in sents]
    return tag.tag_chunk(model, sents, X, None, marginals)


def _args(model_dir, test, out, marginals=False):
    return argparse.Namespace(model=str(model_dir), test_file=str(test), output=str(out),
                              encoding="utf-8", decoder=None, marginals=marginals,
                              verbose_level=0, max_tokens=None)


@pytest.mark.parametrize("marginals", [False, True])
def test_streamed_output_equals_the_whole_file_whatever_the_chunk_size(model_and_file,
                                                                       tmp_path, marginals):
    model_dir, test = model_and_file
    expected = _whole_file(model_dir, test, marginals)
    assert expected.count("\n\n") == 30
    for chunk_tokens in (1, 17, 100, 10**6):  # one sentence a chunk ... one chunk
        out = tmp_path / f"out{chunk_tokens}"
        assert tag.run_test(_args(model_dir, test, out, marginals), chunk_tokens) == 0
        assert out.read_text(encoding="utf-8") == expected, chunk_tokens


def test_the_command_line_streams_to_stdout_like_the_file(model_and_file, capsys, tmp_path):
    model_dir, test = model_and_file
    assert cli.main(["test", "-m", str(model_dir), str(test)]) == 0
    assert capsys.readouterr().out == _whole_file(model_dir, test)


def test_chunks_keep_every_sentence_once_in_order():
    sents = [[0] * n for n in (3, 1, 5, 2, 2, 7)]
    for size in (1, 4, 6, 100):
        parts = list(tag.chunks(sents, size))
        assert [s for p in parts for s in p] == sents
        assert all(sum(map(len, p)) - len(p[-1]) < size for p in parts)


@pytest.mark.parametrize("block", [1, 2, 3, 7, 1 << 20])
def test_iter_conll_reads_what_read_conll_reads_across_block_boundaries(tmp_path, monkeypatch,
                                                                        block):
    path = tmp_path / "f.data"
    path.write_bytes("\ufeffthe DT B\r\ndög NN I\r\rcat\tNN  _\rx y z\n\nlast one L".encode())
    monkeypatch.setattr(source, "BLOCK", block)
    got = list(iter_conll(path))
    want = read_conll(path)
    assert [(s.tokens, s.labels, s.line) for s in got] == [(s.tokens, s.labels, s.line)
                                                           for s in want]
    with open(path, "rb") as fh:  # a binary file object reads the same
        assert [s.tokens for s in iter_conll(fh)] == [s.tokens for s in want]


@pytest.mark.parametrize("data", [
    b"a B\nc D\n\ne F\nbad\xff G\n",  # undecodable byte on line 5
    b"a B\r\nc D\r\n\r\ne F\r\nx\x00 G\r\n",  # NUL on line 5
    b"a B\nc D\n\ne F G\n",  # a column too many on line 4
    b"\n\n",  # nothing
])
@pytest.mark.parametrize("block", [1, 3, 1 << 20])
def test_iter_conll_refuses_bad_input_like_read_conll(tmp_path, monkeypatch, data, block):
    path = tmp_path / "bad.data"
    path.write_bytes(data)
    monkeypatch.setattr(source, "BLOCK", block)
    with pytest.raises(InputError) as want:
        read_conll(path)
    with pytest.raises(InputError) as got:
        list(iter_conll(path))
    assert str(got.value) == str(want.value)


def test_an_error_late_in_the_file_leaves_no_output_file(model_and_file, tmp_path, capsys):
    model_dir, test = model_and_file
    bad = tmp_path / "bad.data"
    bad.write_bytes(test.read_bytes() + b"x y z\n")  # a column too many at the end
    out = tmp_path / "out.txt"
    code = cli.main(["test", "-m", str(model_dir), str(bad), "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "expected 2 columns, found 3" in err
    assert not out.exists() and list(tmp_path.iterdir()) == [bad]
    out.write_text("kept\n", encoding="utf-8")  # an existing file stays as it was
    assert cli.main(["test", "-m", str(model_dir), str(bad), "-o", str(out)]) == 2
    assert out.read_text(encoding="utf-8") == "kept\n"


def test_output_file_gets_the_usual_permissions(model_and_file, tmp_path):
    model_dir, test = model_and_file
    out = tmp_path / "o.txt"
    assert cli.main(["test", "-m", str(model_dir), str(test), "-o", str(out)]) == 0
    assert out.stat().st_mode & 0o644 == 0o644
    assert format_conll  # the writer the chunks go through (gpsl.io)


@pytest.mark.parametrize("kinds", [None, ("temperature",), ("step",), ("structured",)])
def test_labels_and_marginals_run_algorithm_2_once_and_give_what_predict_gives(kinds):
    """``gpsl test --marginals`` and ``gpsl eval`` take the labels as the argmax of the
    marginals of one run: the labels of ``predict`` under every calibration."""
    import numpy as np

    X, y = make_chain_task(60, n_labels=4, seed=5)
    model = GPSL(offsets=(-1, 1)).fit(X[:30], y[:30])
    if kinds is not None:
        calibrate(model, X[30:45], y[30:45], kinds=kinds, ensemble=None)
    calls = []
    real = model.calibration_scores
    model.calibration_scores = lambda *a, **k: calls.append(1) or real(*a, **k)
    pred, marg = tag.labels_and_marginals(model, X[45:], None)
    assert len(calls) == 1
    del model.calibration_scores
    assert pred == model.predict(X[45:])
    for a, b in zip(marg, model.predict_marginals(X[45:]), strict=True):
        np.testing.assert_array_equal(a, b)
    pred_e, _ = tag.labels_and_marginals(model, X[45:], "exact")
    assert pred_e == model.predict(X[45:], decoder="exact")


FIELDS = ["a", "B-PER", "é", "x/0.5", "", " ", "a b", "a\tb", "a\nb", "\r", "_", "-"]


def test_conll_text_is_format_conll_or_leaves_the_checks_to_it():
    """The output text built in one piece equals ``format_conll``'s; where a field is no
    CoNLL column (empty, whitespace inside, not a string) or a token has no column (never read
    from a file) it gives way, and ``format_conll`` writes or refuses as before."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from gpsl.io.formats import Sentence

    field = st.one_of(st.sampled_from(FIELDS), st.integers(0, 3))
    token = st.lists(field, min_size=0, max_size=3).map(tuple)

    @settings(max_examples=300, deadline=None, derandomize=True, database=None)
    @given(st.lists(st.lists(st.tuples(token, field), min_size=1, max_size=4), max_size=4))
    def check(data):
        sents = [Sentence([t for t, _ in s], [None] * len(s), 1) for s in data]
        extra = [[[lab] for _, lab in s] for s in data]
        fast = tag.conll_text(sents, extra)
        try:
            ref = format_conll(sents, extra_columns=extra, label=False)
        except (InputError, TypeError):
            ref = None
        if fast is not None:
            assert fast == ref
        elif all(isinstance(c, str) and t for s in data for t, lab in s for c in (*t, lab)):
            assert ref is None  # given way only where format_conll refuses (or no columns)

    check()
