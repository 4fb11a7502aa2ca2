"""Tampered models and unbounded numbers: a model without its digest, with arrays of 1e308, a
non-finite number in its description or a file behind a symbolic link is refused with one
line (loading, the command line, the app's model zip); every number a user gives (offsets,
annotators) is bounded before use."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from gpsl.annotation import Store
from gpsl.annotation.interchange import exports as exp
from gpsl.cli.main import main
from gpsl.errors import InputError, ModelFormatError
from gpsl.model import GPSL
from gpsl.persist import _meta_digest, _sha256
from tests.support.limits import limit

X = [[("Anna",), ("went",), ("home",)], [("Bob",), ("ran",)], [("Anna",), ("ran",)]]
Y = [["B-PER", "O", "O"], ["B-PER", "O"], ["B-PER", None]]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "m"
    model = GPSL(max_iter=3).fit(X, Y)
    model.save(path)
    return path


def copy(saved, tmp_path) -> Path:
    d = tmp_path / "m"
    shutil.copytree(saved, d)
    return d


def meta_of(d: Path) -> dict:
    return json.loads((d / "model.json").read_text(encoding="utf-8"))


def resum(d: Path, meta: dict) -> None:
    """Recompute both digests, as a tamperer who knows the format would."""
    meta["sha256"]["arrays.npz"] = _sha256(d / "arrays.npz")
    meta["sha256"]["model.json"] = _meta_digest(meta)
    (d / "model.json").write_text(json.dumps(meta), encoding="utf-8")


def refused(d: Path, match: str) -> str:
    with pytest.raises(ModelFormatError, match=match) as info:
        GPSL.load(d)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_the_digest_is_mandatory(saved, tmp_path):
    d = copy(saved, tmp_path)
    meta = meta_of(d)
    del meta["sha256"]["model.json"]
    meta["classes"] = meta["classes"][::-1]  # the trial: 1.59% accuracy when loaded
    (d / "model.json").write_text(json.dumps(meta), encoding="utf-8")
    refused(d, "own checksum is missing")
    meta["sha256"]["model.json"] = "0" * 64
    (d / "model.json").write_text(json.dumps(meta), encoding="utf-8")
    refused(d, "checksum mismatch")


@pytest.mark.parametrize("name, value, match", [
    ("m_S", 1e308, "beyond"), ("X_data", -1e13, "beyond"), ("theta", 1000.0, "theta"),
    ("r", 2.0, "outside \\[0, 1\\]"), ("m_S", np.inf, "NaN or infinite")])
def test_arrays_no_fit_produces_are_refused(saved, tmp_path, name, value, match):
    d = copy(saved, tmp_path)
    with np.load(d / "arrays.npz", allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays[name] = np.full_like(arrays[name], value, dtype=np.float64)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    (d / "arrays.npz").write_bytes(buf.getvalue())
    resum(d, meta_of(d))
    refused(d, match)


@pytest.mark.parametrize("text", ["Infinity", "-Infinity", "NaN", "1e400"])
def test_non_finite_numbers_in_the_description_are_refused(saved, tmp_path, text):
    d = copy(saved, tmp_path)
    meta = meta_of(d)
    meta["fit_seconds"] = 12345.5
    meta["calibration"] = None
    resum(d, meta)
    raw = (d / "model.json").read_text(encoding="utf-8").replace("12345.5", text)
    (d / "model.json").write_text(raw, encoding="utf-8")
    refused(d, "damaged model description")


def test_no_symbolic_link_is_followed(saved, tmp_path):
    for name in ("arrays.npz", "model.json"):
        d = tmp_path / name / "m"
        shutil.copytree(saved, d)
        real = d.parent / f"real-{name}"
        os.replace(d / name, real)
        os.symlink(real, d / name)
        refused(d, "symbolic link")
        with pytest.raises(InputError, match="symbolic link"):
            exp.model_zip(d)
    # the app's zip: the model's own two files, never a link to elsewhere in it
    d = copy(saved, tmp_path / "z")
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours", encoding="utf-8")
    os.symlink(secret, d / "notes.txt")
    (d / "extra.txt").write_text("stray", encoding="utf-8")
    with zipfile.ZipFile(io.BytesIO(exp.model_zip(d))) as zf:
        assert sorted(zf.namelist()) == ["m/arrays.npz", "m/model.json"]
        assert b"not yours" not in b"".join(zf.read(n) for n in zf.namelist())
    link = tmp_path / "linked"
    os.symlink(d, link)
    with pytest.raises(InputError, match="symbolic link"):
        exp.model_zip(link)


def run(argv) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


def test_the_command_line_refuses_a_tampered_model_in_one_line(saved, tmp_path):
    d = copy(saved, tmp_path)
    meta = meta_of(d)
    del meta["sha256"]["model.json"]
    (d / "model.json").write_text(json.dumps(meta), encoding="utf-8")
    data = tmp_path / "t.data"
    data.write_text("Anna\nwent\n", encoding="utf-8")
    for command in ("test", "eval", "query"):
        code, err = run([command, "-m", str(d), str(data)])
        assert code == 2 and len(err.splitlines()) == 1 and "checksum is missing" in err


@pytest.mark.parametrize("argv, match", [
    (["train", "-d=-9999999999", "FILE", "OUT"], "too far"),
    (["train", "-d", "99999999999999999999", "FILE", "OUT"], "too far"),
    (["train", "-d", ",".join(str(i) for i in range(1, 70)), "FILE", "OUT"], "at most 64"),
    (["aggregate", "--annotators", "99999999999999999999", "FILE"], "up to 10,000"),
    (["aggregate", "--annotators", "0", "FILE"], "positive integer"),
    (["aggregate", "--annotators", "-5", "FILE"], "positive integer"),
    (["query", "-m", "M", "--batch", "99999999999999999999", "FILE"], "positive integer"),
    (["train", "--max-iter", "99999999999999999999", "FILE", "OUT"], "positive integer"),
])
def test_every_number_on_the_command_line_is_bounded(tmp_path, argv, match):
    data = tmp_path / "d.conll"
    data.write_text("Anna B-PER B-PER\nwent O O\n", encoding="utf-8")
    argv = [str(data) if a == "FILE" else str(tmp_path / "out") if a == "OUT" else a
            for a in argv]
    code, err = run(argv)
    assert code == 2 and len(err.splitlines()) == 1 and match in err, err
    assert not (tmp_path / "out").exists()


def test_a_project_and_a_training_run_refuse_unbounded_offsets(tmp_path):
    from gpsl.annotation import TrainConfig

    store = Store(tmp_path / "s.sqlite3")
    pid = store.create_project("p", ["O", "B-PER"])
    for offsets in ([-9999999999], [10**20], list(range(1, 70)), [0]):
        with pytest.raises(InputError):
            store.update_project(pid, offsets=offsets)
        with pytest.raises(InputError):
            store.create_project(f"q{offsets[0]}", ["O"], offsets=offsets)
        with pytest.raises(InputError):
            TrainConfig(offsets=tuple(offsets))
    assert store.get_project(pid)["offsets"] == [-1, 1]


def test_query_on_a_fully_labeled_pool_is_one_line(saved, tmp_path):
    pool = tmp_path / "pool.data"
    pool.write_text("Anna B-PER\nwent O\n\nBob B-PER\n", encoding="utf-8")
    code, err = run(["query", "-m", str(saved), str(pool)])
    assert code == 2 and len(err.splitlines()) == 1 and "nothing to ask" in err


def test_a_model_loads_and_tags_under_an_address_space_limit(saved, tmp_path):
    """Loading reads model files in bounded chunks: under a 3 GB address-space limit (far
    below the 16 GiB cap on arrays.npz) a model loads and tags (a single read of the cap
    reserved 16 GiB up front: MemoryError)."""
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 * 10**9, 3 * 10**9))\n"
        "from gpsl.model import GPSL\n"
        "m = GPSL.load(sys.argv[1])\n"
        "print(m.predict([[('Anna',), ('ran',)]])[0][0])\n")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1")
    got = subprocess.run([sys.executable, "-c", code, str(saved)], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=limit(120))
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout.strip() == "B-PER"


def _edits(meta: dict):
    """Every field of a saved model description changed in turn (the template text above
    all), each written back without recomputing the digest, as a hand edit would be."""
    ext = meta["extractor"]
    more = ext["template"] + "\nU99:%x[0,0]"
    yield "the template", dict(meta, extractor=dict(ext, template=more))
    yield "the template replaced", dict(meta, extractor=dict(ext, template="U00:%x[0,0]\n"))
    yield "the template's source", dict(meta, extractor=dict(ext, template_source="other"))
    yield "the vocabulary", dict(meta, extractor=dict(ext, vocabulary=ext["vocabulary"][::-1]))
    for key, value in meta.items():
        if key not in ("sha256", "extractor", "format", "format_version"):
            yield key, dict(meta, **{key: [value] if not isinstance(value, list) else
                                     value[::-1] + ["x"]})


def test_each_file_of_a_saved_model_folder_is_covered_by_the_digest(saved, tmp_path):
    """A saved model folder holds model.json (the template text among its fields) and
    arrays.npz, nothing else; a hand edit of either (the template in particular) makes
    `python -m gpsl test` refuse with exit 2 and one line, never tag with exit 0."""
    assert sorted(p.name for p in saved.iterdir()) == ["arrays.npz", "model.json"]
    data = tmp_path / "t.data"
    data.write_text("Anna\nwent\n", encoding="utf-8")
    for i, (what, meta) in enumerate(_edits(meta_of(saved))):
        d = copy(saved, tmp_path / str(i))
        (d / "model.json").write_text(json.dumps(meta), encoding="utf-8")
        code, err = run(["test", "-m", str(d), str(data)])
        assert code == 2 and len(err.splitlines()) == 1, (what, code, err)
    d = copy(saved, tmp_path / "arrays")
    raw = bytearray((d / "arrays.npz").read_bytes())
    raw[len(raw) // 2] ^= 1
    (d / "arrays.npz").write_bytes(bytes(raw))
    code, err = run(["test", "-m", str(d), str(data)])
    assert code == 2 and len(err.splitlines()) == 1 and "arrays.npz" in err, err
