"""Shared helpers of the benchmarks: the CRF++ data, pooled random partitions, machine header.

The four CRF++ data sets live outside the repository, in ``../shared/data/crfpp`` (see
``../shared/data/README.md``); they are read in place, never copied. :func:`load_pooled` pools a
data set's ``train.data`` and ``test.data`` as the paper does; :func:`partitions` draws disjoint
random train/test index sets from a recorded seed.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO.parent / "shared" / "data" / "crfpp"
RESULTS_DIR = REPO / "bench" / "results"

#: The paper's data sets and partition sizes (train, test) in sentences (paper, Table 1).
PAPER_SIZES = {"basenp": (150, 150), "chunking": (50, 50), "seg": (20, 16), "JapaneseNE": (50, 50)}
DATASETS = tuple(PAPER_SIZES)
DATA_FILES = ("train.data", "test.data", "template")


class DataMissing(RuntimeError):
    """The shared data directory (or a file of a data set in it) is absent."""


@dataclass
class Pooled:
    """A data set's train + test files pooled: sentences, labels and the CRF++ template text."""

    name: str
    X: list  # list of sentences, each a list of token tuples (feature columns only)
    y: list  # list of label lists
    template: str
    labels: list  # sorted set of all labels in the pooled data

    def __len__(self) -> int:
        return len(self.X)


def check_data(data_dir: Path, datasets) -> None:
    """Raise :class:`DataMissing` (one-line message) unless every file of ``datasets`` exists."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataMissing(
            f"shared data absent: {data_dir} not found (the CRF++ data sets are expected in "
            "../shared/data/crfpp next to the repository)"
        )
    for name in datasets:
        for f in DATA_FILES:
            path = data_dir / name / f
            if not path.is_file():
                raise DataMissing(f"shared data absent: {path} not found")


def load_pooled(data_dir: Path, name: str) -> Pooled:
    """Pool ``train.data`` + ``test.data`` of one data set (empty sentences dropped)."""
    from gpsl.io import read_conll

    check_data(data_dir, [name])
    folder = Path(data_dir) / name
    sentences = read_conll(folder / "train.data") + read_conll(folder / "test.data")
    sentences = [s for s in sentences if len(s.tokens)]
    X = [list(s.tokens) for s in sentences]
    y = [list(s.labels) for s in sentences]
    labels = sorted({v for lab in y for v in lab if v is not None})
    template = (folder / "template").read_text(encoding="utf-8")
    return Pooled(name, X, y, template, labels)


def dataset_key(name: str) -> int:
    """A stable integer for a data set name (seeds must not depend on Python's hash salt)."""
    return zlib.crc32(name.encode("utf-8"))


def partition_seed(seed: int, name: str, index: int) -> list[int]:
    """The entropy of partition ``index`` of data set ``name`` under the run seed ``seed``."""
    return [int(seed), dataset_key(name), int(index)]


def partitions(n_total: int, n_train: int, n_test: int, n_partitions: int, seed: int,
               name: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n_partitions`` disjoint random ``(train, test)`` index arrays over ``n_total`` items.

    Partition ``p`` is a permutation drawn from ``SeedSequence([seed, crc32(name), p])``, so a
    partition does not change when the number of partitions or the set of data sets does.
    """
    if n_train < 1 or n_test < 1:
        raise ValueError(f"partition sizes must be positive, got {n_train}/{n_test}")
    if n_train + n_test > n_total:
        raise ValueError(f"{name}: train {n_train} + test {n_test} exceeds the {n_total} "
                         "pooled sentences")
    out = []
    for p in range(n_partitions):
        rng = np.random.default_rng(np.random.SeedSequence(partition_seed(seed, name, p)))
        perm = rng.permutation(n_total)
        out.append((np.sort(perm[:n_train]), np.sort(perm[n_train:n_train + n_test])))
    return out


def parse_sizes(spec: str, datasets) -> dict:
    """``"4/3"`` (every data set) or ``"seg=4/3,chunking=10/10"`` -> ``{name: (train, test)}``."""
    sizes = {}
    for part in str(spec).replace(",", " ").split():
        name, _, pair = part.rpartition("=")
        try:
            a, b = (int(x) for x in pair.split("/"))
        except ValueError:
            raise ValueError(f"bad --sizes {part!r}: expected TRAIN/TEST or NAME=TRAIN/TEST") \
                from None
        for d in ([name] if name else datasets):
            sizes[d] = (a, b)
    return sizes


def hide_labels(y, fraction: float, rng: np.random.Generator, order=None):
    """Hide ``round(fraction * n_tokens)`` labels chosen uniformly at random (become ``None``).

    ``order`` (a permutation of the token positions, drawn from ``rng`` when omitted) makes the
    hidden sets nested across fractions: the same order hides a superset for a larger fraction.
    Returns ``(y_hidden, n_hidden)``.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"missing fraction must lie in [0, 1], got {fraction}")
    n = sum(len(lab) for lab in y)
    if order is None:
        order = rng.permutation(n)
    k = int(round(fraction * n))
    hidden = np.zeros(n, dtype=bool)
    hidden[np.asarray(order)[:k]] = True
    out, start = [], 0
    for lab in y:
        h = hidden[start:start + len(lab)]
        out.append([None if hh else v for v, hh in zip(lab, h)])
        start += len(lab)
    return out, k


# --------------------------------------------------------------------------- statistics


def label_space(P: np.ndarray, classes, all_labels) -> np.ndarray:
    """Marginals ``P`` over a model's ``classes`` as columns of ``all_labels`` (the data set's
    labels; zero for a label the model never saw)."""
    pos = {c: i for i, c in enumerate(all_labels)}
    out = np.zeros((P.shape[0], len(all_labels)))
    out[:, [pos[c] for c in classes]] = P
    return out


def mean_std(values) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (ddof=1; 0 for one value) ignoring ``None``."""
    v = np.array([x for x in values if x is not None], dtype=float)
    if v.size == 0:
        return None, None
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def median(values) -> float | None:
    v = [x for x in values if x is not None]
    return float(np.median(v)) if v else None


def finite_or_none(x):
    """``x`` as a float, or ``None`` when it is ``None``, NaN or infinite (strict JSON)."""
    if x is None:
        return None
    x = float(x)
    return x if np.isfinite(x) else None


def jsonable(obj):
    """Recursively turn numpy scalars/arrays into Python objects and non-finite floats to None."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return finite_or_none(obj)
    return obj


# --------------------------------------------------------------------------- machine header


def cpu_model() -> str:
    """The CPU model name from ``/proc/cpuinfo`` (``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").split("\n"):
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def git_commit(repo: Path = REPO) -> dict:
    """``{"commit", "dirty"}`` from read-only git commands (``None`` when git is unavailable)."""

    def run(*args):
        try:
            r = subprocess.run(["git", "--no-optional-locks", "-C", str(repo), *args],
                               capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    commit = run("rev-parse", "HEAD")
    status = run("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def machine_info() -> dict:
    import scipy

    try:
        load = [round(v, 2) for v in os.getloadavg()]
    except OSError:
        load = None
    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average_at_start": load,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "threads_env": {k: os.environ.get(k) for k in (
            "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")},
    }


def now_iso() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def header_lines(title: str, date: str, machine: dict, git: dict, command: str) -> list[str]:
    """The Markdown header every result file starts with."""
    commit = git.get("commit") or "unavailable"
    if git.get("dirty"):
        commit += " (working tree has uncommitted changes)"
    threads = ", ".join(f"{k}={v}" for k, v in machine["threads_env"].items() if v is not None)
    return [
        f"# {title}",
        "",
        f"* machine: {machine['cpu_model']}, {machine['cpu_count']} logical cores, "
        f"load average at start {machine['load_average_at_start']}; {machine['platform']}",
        f"* software: Python {machine['python']}, numpy {machine['numpy']}, "
        f"scipy {machine['scipy']}" + (f"; {threads}" if threads else "; no BLAS thread limit"),
        f"* date: {date}",
        f"* git commit: {commit}",
        f"* command: `{command}`",
        "",
    ]


def in_fresh_process(fn, job: dict) -> dict:
    """``fn(job)`` in a new spawned process of its own (nothing inherited: imports, caches and
    the peak resident set are that job's alone); returns its result."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn"),
                             max_tasks_per_child=1) as ex:
        return ex.submit(fn, job).result()


def write_results(out: Path, stem: str, markdown: str, report: dict) -> None:
    """``out/stem.md`` (the table as printed) and ``out/stem.json`` (``report``, numpy values
    and non-finite floats made JSON by :func:`jsonable`)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(markdown, encoding="utf-8")
    (out / f"{stem}.json").write_text(json.dumps(jsonable(report), indent=1), encoding="utf-8")
