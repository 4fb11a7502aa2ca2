"""Save and load fitted GPSL models: a directory of JSON and NPZ, never pickle.

Layout of a model directory::

    model.json   format name and version, configuration, classes, template text,
                 feature vocabulary, kernel, bound trace, SHA-256 of arrays.npz
    arrays.npz   theta, alpha, lambda, m_S, v_S, r and the training features (CSR parts)

A model is written to a temporary sibling directory and renamed into place, so a
crash never leaves a half-written model where a complete one is expected. Loading
refuses a newer format version, a missing or malformed file, a checksum mismatch
(tampering or damage) and arrays whose shapes do not agree, each with a one-line
:class:`~gpsl.errors.ModelFormatError`. ``numpy.load`` runs with
``allow_pickle=False``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from gpsl.errors import ModelFormatError

FORMAT_NAME = "gpsl-model"
FORMAT_VERSION = 1
_ARRAYS = ("theta", "alpha", "lam", "m_S", "v_S", "r", "y_train", "lengths",
           "X_data", "X_indices", "X_indptr", "X_shape")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def save_model(model, path) -> Path:
    """Write ``model`` (a fitted :class:`~gpsl.model.GPSL`) to the directory ``path``."""
    from gpsl import __version__

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        st = model.state_
        X = model.X_train_.tocsr()
        np.savez(tmp / "arrays.npz", theta=st.theta, alpha=st.alpha, lam=st.lam, m_S=st.m_S,
                 v_S=st.v_S, r=st.r, y_train=model.y_train_, lengths=model.lengths_,
                 X_data=X.data, X_indices=X.indices, X_indptr=X.indptr,
                 X_shape=np.array(X.shape, dtype=np.int64))
        params = model.get_params()
        saved = ("kernel", "min_freq", "max_iter", "tol", "learn_hyper", "decoder", "rns_tol",
                 "rns_max_iter", "rns_schedule", "rns_variance", "lambda_floor", "variance")
        config = {k: params[k] for k in saved if k in params}
        meta = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "gpsl_version": __version__,
            "config": config,
            "offsets": list(model.offsets_),
            "kernel": model.kernel_.name,
            "param_names": list(model.kernel_.param_names),
            "classes": list(model.classes_),
            "n_columns": int(model.n_columns_),
            "extractor": model.extractor_.to_dict(),
            "bound_trace": [float(v) for v in model.bound_trace_],
            "n_iter": int(model.n_iter_),
            "fit_seconds": float(model.fit_seconds_),
            "sha256": {"arrays.npz": _sha256(tmp / "arrays.npz")},
        }
        with open(tmp / "model.json", "w", encoding="utf-8") as f:
            json.dump(meta, f, ensure_ascii=False, indent=1)
            f.flush()
            os.fsync(f.fileno())
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _fail(path, message):
    raise ModelFormatError(message, source=str(path))


def load_model(path):
    """Load a model directory written by :func:`save_model`."""
    from gpsl.features import FeatureExtractor
    from gpsl.inference import VariationalState
    from gpsl.kernels import make_kernel
    from gpsl.model import GPSL

    path = Path(path)
    meta_path = path / "model.json"
    arr_path = path / "arrays.npz"
    if not path.is_dir():
        _fail(path, "not a model directory (it does not exist or is not a directory)")
    if not meta_path.is_file() or not arr_path.is_file():
        _fail(path, "not a gpsl model directory: model.json or arrays.npz is missing")
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        _fail(meta_path, f"damaged model description: {e}")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        _fail(meta_path, "not a gpsl model description")
    version = meta.get("format_version")
    if not isinstance(version, int):
        _fail(meta_path, "model format version is missing")
    if version > FORMAT_VERSION:
        _fail(meta_path, f"model format version {version} is newer than this gpsl supports "
                         f"({FORMAT_VERSION}); upgrade gpsl")
    expected = (meta.get("sha256") or {}).get("arrays.npz")
    if not expected or _sha256(arr_path) != expected:
        _fail(arr_path, "checksum mismatch: the model arrays are damaged or were modified")
    try:
        with np.load(arr_path, allow_pickle=False) as z:
            arrays = {k: np.array(z[k]) for k in _ARRAYS}
    except (OSError, ValueError, KeyError) as e:
        _fail(arr_path, f"damaged model arrays: {e}")
    try:
        classes = [str(c) for c in meta["classes"]]
        offsets = tuple(int(o) for o in meta["offsets"])
        kernel = make_kernel(meta["kernel"])
        extractor = FeatureExtractor.from_dict(meta["extractor"])
        config = dict(meta.get("config") or {})
        X = sp.csr_matrix((arrays["X_data"], arrays["X_indices"], arrays["X_indptr"]),
                          shape=tuple(int(v) for v in arrays["X_shape"]))
    except (KeyError, TypeError, ValueError) as e:
        _fail(meta_path, f"damaged model description: {e}")
    n, J, R = X.shape[0], len(classes), len(offsets)
    checks = {"theta": (J, len(kernel.param_names)), "alpha": (J, n), "lam": (J, n),
              "m_S": (R, J, J), "v_S": (R, J, J), "r": (n, J), "y_train": (n,)}
    for name, shape in checks.items():
        if arrays[name].shape != shape:
            _fail(arr_path, f"array {name} has shape {arrays[name].shape}, expected {shape}")
    if int(arrays["lengths"].sum()) != n or X.shape[1] != len(extractor.vocabulary_):
        _fail(arr_path, "training features do not match the sentence lengths or vocabulary")

    known = set(GPSL().get_params())
    model = GPSL(offsets=offsets, template=extractor.template,
                 **{k: v for k, v in config.items() if k in known and k != "kernel"})
    model.kernel = meta["kernel"]
    model.classes_ = classes
    model.offsets_ = offsets
    model.kernel_ = kernel
    model.template_ = extractor.template
    model.extractor_ = extractor
    model.n_columns_ = int(meta["n_columns"])
    model.X_train_ = X
    model.lengths_ = arrays["lengths"].astype(np.int64)
    model.y_train_ = arrays["y_train"].astype(np.int64)
    model.state_ = VariationalState(theta=arrays["theta"], alpha=arrays["alpha"],
                                    lam=arrays["lam"], m_S=arrays["m_S"], v_S=arrays["v_S"],
                                    r=arrays["r"])
    model.bound_trace_ = [float(v) for v in meta.get("bound_trace", [])]
    model.n_iter_ = int(meta.get("n_iter", 0))
    model.n_missing_ = int(np.sum(model.y_train_ < 0))
    model.fit_seconds_ = float(meta.get("fit_seconds", 0.0))
    model._predictor = None
    return model
