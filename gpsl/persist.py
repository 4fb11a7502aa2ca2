"""Save and load fitted GPSL models: a directory of JSON and NPZ, never pickle.

Layout of a model directory::

    model.json   format name and version, configuration, inference mode, classes, template
                 text, feature vocabulary, kernel, bound trace, the calibrator and how the
                 model was calibrated (``calibration_run``: held-out, folds or none, K,
                 tokens, seconds; absent in models saved before it), SHA-256 of arrays.npz
    arrays.npz   the variational state, r and the training features (CSR parts): theta,
                 alpha, lambda (full mode) or theta, W, cov, inducing (sparse mode)

Format version 1 (before the sparse mode) has no ``inference`` field and is read as a full
model. This module does not import :mod:`gpsl.model`: :func:`read_model` returns the parts and
:meth:`gpsl.model.GPSL.load` assembles the estimator.

A model is written to a temporary sibling directory and renamed into place, so a
crash never leaves a half-written model where a complete one is expected. Loading
refuses a newer format version, a missing or malformed file, a missing digest (the
description's own SHA-256, which covers the SHA-256 of ``arrays.npz``: together every file
of the model), a checksum mismatch (tampering or damage), ``NaN``/``Infinity`` anywhere in the
description, a file that is a symbolic link (never followed: each file is opened with
``O_NOFOLLOW`` and read once, and the bytes checked are the bytes loaded), arrays whose
shapes do not agree and values no fit produces (non-finite, beyond :data:`MAX_ABS`,
probabilities outside [0, 1]), each with a one-line :class:`~gpsl.errors.ModelFormatError`.
``numpy.load`` runs with ``allow_pickle=False``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import numpy as np
import scipy.sparse as sp

from gpsl.engines import ENGINES, Engine
from gpsl.errors import InputError, ModelFormatError
from gpsl.params import PARAMS

FORMAT_NAME = "gpsl-model"
FORMAT_VERSION = 2
_MAX_META = 1 << 30  # a model description larger than this is refused unread
_MAX_ARRAYS = 1 << 34  # arrays.npz larger than 16 GiB is refused unread
_CHUNK = 1 << 24  # model files are read 16 MiB at a time (memory follows the file's size)
#: the largest magnitude of a saved value: no fit comes near it (log kernel parameters are
#: below 15, probabilities 1, precisions about the number of tokens), and products of such
#: values stay far from overflow (1e308 in a tampered array made every prediction one label)
MAX_ABS = 1e12
#: the largest magnitude of a log kernel parameter (``theta``): exp(30) is 1e13, far beyond
#: any variance or length scale a fit reaches (the variance is at most 1e6 = exp(13.8))
MAX_LOG_PARAM = 30.0
#: the model's files: nothing else of a model directory is read or handed out
MODEL_FILES = ("model.json", "arrays.npz")
#: the estimator's arrays beside its engine's state (the training features, labels, lengths)
_MODEL_FLOAT = ("X_data",)
_MODEL_INT = ("y_train", "lengths", "X_indices", "X_indptr", "X_shape")


def _array_names(engine: type[Engine]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(floating point, integer) array names of a saved model whose engine is ``engine``."""
    return engine.FLOAT_ARRAYS + _MODEL_FLOAT, _MODEL_INT + engine.INT_ARRAYS


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_file(path: Path, limit: int) -> bytes:
    """The bytes of a model file, never through a symbolic link (``O_NOFOLLOW``) and only
    from a regular file of at most ``limit`` bytes; one :class:`ModelFormatError` line
    otherwise."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        if path.is_symlink():
            _fail(path, "is a symbolic link; refused (a model's files are never followed "
                        "elsewhere)")
        fd = os.open(path, flags)
    except ModelFormatError:
        raise
    except OSError as e:
        why = "is a symbolic link; refused" if e.errno == 40 else \
            f"cannot be read: {e.strerror or e}"
        _fail(path, why)
    except ValueError as e:
        _fail(repr(str(path)), f"bad model path: {e}")
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            _fail(path, "is not a regular file")
        if info.st_size > limit:
            _fail(path, "is implausibly large")
        try:
            return _read_bounded(f, limit, path)
        except OSError as e:
            _fail(path, f"cannot be read: {e.strerror or e}")


def _read_bounded(f, limit: int, path: Path) -> bytes:
    """The bytes of the open file ``f``, read in chunks of at most :data:`_CHUNK`: memory
    grows with the bytes read, never with ``limit`` (a single ``f.read(limit + 1)`` makes
    Python reserve the whole limit, 16 GiB, up front). A file that grows past ``limit`` while
    it is read is refused."""
    chunks, total = [], 0
    while True:
        chunk = f.read(min(_CHUNK, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            _fail(path, "is implausibly large")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _meta_digest(meta: dict) -> str:
    """SHA-256 of the model description itself (canonical JSON, without this digest)."""
    body = dict(meta)
    sums = dict(body.get("sha256") or {})
    sums.pop("model.json", None)
    body["sha256"] = sums
    text = json.dumps(body, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def is_model_dir(path) -> bool:
    """Whether ``path`` is a directory holding a gpsl model description (``model.json`` whose
    ``format`` is gpsl's), i.e. one that :func:`save_model` may replace."""
    path = Path(path)
    meta_path = path / "model.json"
    try:
        if not path.is_dir() or not meta_path.is_file() or meta_path.stat().st_size > _MAX_META:
            return False
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT_NAME


def check_destination(path) -> Path:
    """``path`` as a Path if a model may be saved there: it does not exist yet, or it is an
    existing gpsl model directory (replaced whole). Anything else (a file, a directory with
    other contents) is refused with a :class:`ModelFormatError`, so saving never deletes
    data that is not a model."""
    path = Path(path)
    try:
        exists = path.exists() or path.is_symlink()
    except (OSError, ValueError) as e:
        raise ModelFormatError(f"bad model path: {e}", source=repr(str(path))) from None
    if not exists:
        return path
    if path.is_dir() and not any(path.iterdir()):
        return path
    if not is_model_dir(path) or path.is_symlink():
        what = "a file" if path.is_file() else "not a gpsl model directory"
        raise ModelFormatError(f"already exists and is {what}; refusing to replace it "
                               "(choose a new model directory)", source=str(path))
    return path


def save_model(model, path) -> Path:
    """Write ``model`` (a fitted :class:`~gpsl.model.GPSL`) to the directory ``path``."""
    from gpsl._version import __version__

    path = check_destination(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        engine = model.engine_
        X = model.X_train_.tocsr()
        np.savez(tmp / "arrays.npz", y_train=model.y_train_, lengths=model.lengths_,
                 X_data=X.data, X_indices=X.indices, X_indptr=X.indptr,
                 X_shape=np.array(X.shape, dtype=np.int64), **engine.to_arrays())
        meta = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "gpsl_version": __version__,
            "config": model.persisted_config(),
            "inference": engine.name,
            "family": engine.family,
            "offsets": list(model.offsets_),
            "kernel": model.kernel_.name,
            "param_names": list(model.kernel_.param_names),
            "classes": list(model.classes_),
            "n_columns": int(model.n_columns_),
            "extractor": model.extractor_.to_dict(),
            "bound_trace": [float(v) for v in model.bound_trace_],
            "n_iter": int(model.n_iter_),
            "fit_seconds": float(model.fit_seconds_),
            "calibration": (None if getattr(model, "calibrator_", None) is None
                            else model.calibrator_.to_dict()),
            "calibration_run": (None if getattr(model, "calibration_run_", None) is None
                                else model.calibration_run_.to_dict()),
            "sha256": {"arrays.npz": _sha256(tmp / "arrays.npz")},
        }
        meta["sha256"]["model.json"] = _meta_digest(meta)
        with open(tmp / "model.json", "w", encoding="utf-8") as f:
            # one string, then one write: json.dump's chunked encoding runs in pure Python (a
            # 20k-token chunking model's vocabulary took 0.11 s of the app's refit that way)
            f.write(json.dumps(meta, ensure_ascii=False, indent=1))
            f.flush()
            os.fsync(f.fileno())
        old = None
        if path.exists():
            check_destination(path)  # still a model directory (or empty) just before replacing
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _fail(path, message) -> NoReturn:
    raise ModelFormatError(message, source=str(path))


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number a model holds")


def _finite(text: str) -> float:
    value = float(text)
    if not np.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value


def _read_meta(meta_path: Path) -> dict:
    raw = read_file(meta_path, _MAX_META)
    try:
        meta = json.loads(raw.decode("utf-8"), parse_constant=_no_constant,
                          parse_float=_finite)
    except (UnicodeError, json.JSONDecodeError) as e:
        _fail(meta_path, f"damaged model description: {e}")
    except (ValueError, RecursionError) as e:
        _fail(meta_path, f"damaged model description: {type(e).__name__}: {e}")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        _fail(meta_path, "not a gpsl model description")
    version = meta.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int):
        _fail(meta_path, "model format version is missing")
    if version > FORMAT_VERSION:
        _fail(meta_path, f"model format version {version} is newer than this gpsl supports "
                         f"({FORMAT_VERSION}); upgrade gpsl")
    sums = meta.get("sha256")
    if not isinstance(sums, dict) or not isinstance(sums.get("arrays.npz"), str):
        _fail(meta_path, "damaged model description: the checksum of arrays.npz is missing")
    own = sums.get("model.json")
    if not isinstance(own, str):
        _fail(meta_path, "the model description's own checksum is missing (it covers every "
                         "file of the model): refused as modified")
    if own != _meta_digest(meta):
        _fail(meta_path, "checksum mismatch: the model description is damaged or was modified")
    return meta


def _read_arrays(arr_path: Path, expected: str, engine: type[Engine]) -> dict[str, np.ndarray]:
    """The arrays of ``arrays.npz``, after the checksum and every member's header are checked:
    object (pickled) arrays, sizes larger than the member and missing members are refused
    before any data is read; ``np.load`` runs with ``allow_pickle=False``."""
    raw = read_file(arr_path, _MAX_ARRAYS)
    if hashlib.sha256(raw).hexdigest() != expected:
        _fail(arr_path, "checksum mismatch: the model arrays are damaged or were modified")
    float_names, int_names = _array_names(engine)
    names = float_names + int_names
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as zf:
            infos = {i.filename: i for i in zf.infolist()}
            for name in names:
                info = infos.get(name + ".npy")
                if info is None:
                    _fail(arr_path, f"damaged model arrays: array {name} is missing")
                with zf.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                    elif version == (2, 0):
                        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                    else:
                        _fail(arr_path, f"damaged model arrays: {name} has npy version "
                                        f"{version}")
                    if dtype.hasobject:
                        _fail(arr_path, f"array {name} holds Python objects; refused (gpsl "
                                        "never loads pickled data)")
                    if int(np.prod(shape, dtype=np.float64)) * dtype.itemsize > info.file_size:
                        _fail(arr_path, f"damaged model arrays: {name} declares shape {shape},"
                                        " larger than its data")
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            arrays = {k: np.array(z[k]) for k in names}
    except ModelFormatError:
        raise
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, MemoryError,
            TypeError, AttributeError) as e:
        _fail(arr_path, f"damaged model arrays: {type(e).__name__}: {e}")
    for name in float_names:
        a = arrays[name]
        if a.dtype.kind != "f":
            _fail(arr_path, f"array {name} has dtype {a.dtype}, expected floating point")
        if not np.all(np.isfinite(a)):
            _fail(arr_path, f"array {name} contains NaN or infinite values")
        if a.size and float(np.abs(a).max()) > MAX_ABS:
            _fail(arr_path, f"array {name} holds values beyond ±{MAX_ABS:g}, which no fit "
                            "produces")
    for name in int_names:
        a = arrays[name]
        if a.dtype.kind not in "iu":
            _fail(arr_path, f"array {name} has dtype {a.dtype}, expected integers")
    return arrays


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_meta_fields(meta: dict, meta_path: Path) -> None:
    classes = meta.get("classes")
    if (not isinstance(classes, list) or not classes
            or not all(isinstance(c, str) and c for c in classes)
            or len(set(classes)) != len(classes)):
        _fail(meta_path, "damaged model description: classes must be a list of distinct labels")
    offsets = meta.get("offsets")
    if (not isinstance(offsets, list) or not offsets or not all(_is_int(o) for o in offsets)
            or not PARAMS["offsets"].accepts(offsets)):
        _fail(meta_path, "damaged model description: offsets must be distinct non-zero "
                         "integers")
    if not _is_int(meta.get("n_columns")) or meta["n_columns"] < 1:
        _fail(meta_path, "damaged model description: n_columns must be a positive integer")
    config = meta.get("config", {})
    if not isinstance(config, dict):
        _fail(meta_path, "damaged model description: config is not an object")
    for key, value in config.items():  # the constraints of gpsl.params, as at fit time
        if key in PARAMS and PARAMS[key].persisted and not PARAMS[key].accepts(value):
            _fail(meta_path, f"damaged model description: bad config value {key}="
                             f"{value!r}")
    trace = meta.get("bound_trace", [])
    if not isinstance(trace, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in trace):
        _fail(meta_path, "damaged model description: bound_trace is not a list of numbers")
    seconds = meta.get("fit_seconds", 0.0)
    if not _is_int(meta.get("n_iter", 0)) or not isinstance(seconds, (int, float)) \
            or isinstance(seconds, bool):
        _fail(meta_path, "damaged model description: bad n_iter or fit_seconds")
    if not isinstance(meta.get("kernel"), str) or not isinstance(meta.get("extractor"), dict):
        _fail(meta_path, "damaged model description: kernel or extractor is missing")


@dataclass
class ModelParts:
    """Everything a model directory holds, checked: what :meth:`gpsl.model.GPSL.load` needs."""

    meta: dict
    config: dict
    inference: str
    family: str | None
    kernel: object
    extractor: object
    X: sp.csr_matrix
    arrays: dict
    calibrator: object = None  # gpsl.calibration.Calibrator or None
    calibration_run: object = None  # gpsl.calibration.CalibrationRun or None
    engine: Engine | None = None  # the fitted engine of the recorded mode (gpsl.engines)


def _engine_of(meta: dict, meta_path: Path) -> tuple[type[Engine], str | None]:
    """The engine class of the recorded mode and its covariance family."""
    mode = meta.get("inference", "full")  # format 1: the full mode only
    if not isinstance(mode, str) or mode not in ENGINES:
        _fail(meta_path, f"damaged model description: unknown inference mode {mode!r}")
    engine = ENGINES[mode]
    family = meta.get("family")
    if engine.FAMILIES and (not isinstance(family, str) or family not in engine.FAMILIES):
        _fail(meta_path, f"damaged model description: unknown covariance family {family!r}")
    return engine, (family if engine.FAMILIES else None)


def read_model(path) -> ModelParts:
    """Read and check a model directory written by :func:`save_model`.

    Every problem (missing files, damaged or modified JSON or NPZ, a newer format, pickled
    object arrays, inconsistent shapes, out-of-range values) is a one-line
    :class:`~gpsl.errors.ModelFormatError` naming the file.
    """
    from gpsl.features import FeatureExtractor
    from gpsl.kernels import make_kernel

    path = Path(path)
    meta_path = path / "model.json"
    arr_path = path / "arrays.npz"
    try:
        is_dir = path.is_dir()
        complete = is_dir and meta_path.is_file() and arr_path.is_file()
    except (OSError, ValueError) as e:
        _fail(repr(str(path)), f"bad model path: {e}")
    if not is_dir:
        _fail(path, "not a model directory (it does not exist or is not a directory)")
    if not complete:
        _fail(path, "not a gpsl model directory: model.json or arrays.npz is missing")
    meta = _read_meta(meta_path)
    _check_meta_fields(meta, meta_path)
    engine, family = _engine_of(meta, meta_path)
    arrays = _read_arrays(arr_path, meta["sha256"]["arrays.npz"], engine)
    classes = list(meta["classes"])
    offsets = tuple(meta["offsets"])
    config = dict(meta.get("config") or {})
    try:
        kernel = make_kernel(meta["kernel"])
    except ValueError as e:
        _fail(meta_path, f"damaged model description: {e}")
    try:
        extractor = FeatureExtractor.from_dict(meta["extractor"])
        if extractor.template is not None:
            extractor.template.validate(int(meta["n_columns"]))
    except InputError as e:
        _fail(meta_path, f"damaged model description: {e.message}")
    shape = arrays["X_shape"]
    if shape.shape != (2,) or np.any(shape < 0):
        _fail(arr_path, f"array X_shape is {shape.tolist()}, expected two sizes")
    indptr, indices = arrays["X_indptr"], arrays["X_indices"]
    if (indptr.ndim != 1 or indices.ndim != 1 or indptr.size != int(shape[0]) + 1
            or (indptr.size and (indptr[0] != 0 or indptr[-1] != indices.size))
            or np.any(np.diff(indptr) < 0) or indices.size != arrays["X_data"].size
            or (indices.size and (indices.min() < 0 or indices.max() >= int(shape[1])))):
        _fail(arr_path, "damaged training features: the sparse matrix parts do not agree")
    try:
        X = sp.csr_matrix((arrays["X_data"], arrays["X_indices"], arrays["X_indptr"]),
                          shape=(int(shape[0]), int(shape[1])))
        X.check_format(full_check=True)
    except (ValueError, TypeError, IndexError, MemoryError) as e:
        _fail(arr_path, f"damaged training features: {e}")
    n, J, R = X.shape[0], len(classes), len(offsets)
    checks = {"theta": (J, len(kernel.param_names)), "m_S": (R, J, J), "v_S": (R, J, J),
              "r": (n, J), "y_train": (n,)}
    try:
        checks.update(engine.array_shapes(arrays, n=n, J=J, kernel=kernel,
                                          n_features=X.shape[1], family=family))
    except ValueError as e:
        _fail(arr_path, str(e))
    for name, shp in checks.items():
        if arrays[name].shape != shp:
            _fail(arr_path, f"array {name} has shape {arrays[name].shape}, expected {shp}")
    try:
        engine.check_values(arrays, family)
    except ValueError as e:
        _fail(arr_path, str(e))
    theta = arrays["theta"]
    if theta.size and float(np.abs(theta).max()) > MAX_LOG_PARAM:
        _fail(arr_path, f"array theta holds log kernel parameters beyond ±{MAX_LOG_PARAM:g}, "
                        "which no fit produces")
    r = arrays["r"]
    if r.size and (float(r.min()) < -1e-6 or float(r.max()) > 1.0 + 1e-6):
        _fail(arr_path, "array r holds probabilities outside [0, 1]")
    lengths = arrays["lengths"]
    if lengths.ndim != 1 or np.any(lengths < 0) or int(lengths.sum()) != n \
            or X.shape[1] != len(extractor.vocabulary_):
        _fail(arr_path, "training features do not match the sentence lengths or vocabulary")
    y = arrays["y_train"]
    if y.size and (y.min() < -1 or y.max() >= J):
        _fail(arr_path, f"array y_train has labels outside 0..{J - 1} (and -1 for missing)")
    calibrator = None
    if meta.get("calibration") is not None:
        from gpsl.calibration import Calibrator

        try:
            calibrator = Calibrator.from_dict(meta["calibration"], J)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as e:
            _fail(meta_path, f"damaged model description: calibration: {e}")
    run = None
    if meta.get("calibration_run") is not None:  # how it was calibrated (or why not)
        from gpsl.calibration import CalibrationRun

        try:
            run = CalibrationRun.from_dict(meta["calibration_run"])
        except (ValueError, TypeError) as e:
            _fail(meta_path, f"damaged model description: calibration_run: {e}")
        if (run.source == "none") != (calibrator is None):
            _fail(meta_path, "damaged model description: calibration_run does not match the "
                             "calibration")
    return ModelParts(meta=meta, config=config, inference=engine.name, family=family,
                      kernel=kernel, extractor=extractor, X=X, arrays=arrays,
                      calibrator=calibrator, calibration_run=run,
                      engine=engine.from_arrays(arrays, kernel=kernel, X=X, family=family))
