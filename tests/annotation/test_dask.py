"""Dask distributed with a real engine: a LocalCluster of two worker processes on loopback.

The scalable fit over sentence shards (gpsl.distributed) against the single-process fit, and
training jobs of the app on the cluster (gpsl.annotation.training.dask_jobs): reported, stopped, a
worker SIGKILLed mid-fit (version failed, no label lost, a retry succeeds).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from gpsl.errors import InputError
from gpsl.model import GPSL
from gpsl.synthetic import UNIGRAM_TEMPLATE, hide_labels, make_chain_task
from tests.support.helpers import BL, OUT, free_port, tiny_store, wait_until
from tests.support.limits import limit

distributed = pytest.importorskip("distributed")

from gpsl.annotation.training import dask_jobs, jobs, pipeline  # noqa: E402
from gpsl.distributed import InProcess  # noqa: E402

TINY = pipeline.TrainConfig(offsets=(-1, 1), max_iter=3, learn_hyper=False)


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes (one thread each) on 127.0.0.1; one client for the tests."""
    env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    lc = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None, env=env,
                                  silence_logs=50)
    client = distributed.Client(lc, set_as_default=False)
    client.wait_for_workers(2, timeout=limit(60))
    yield client
    for c in list(dask_jobs._CLIENTS.values()):
        c.close()
    dask_jobs._CLIENTS.clear()
    client.close()
    # SpecCluster's worker-status callback can raise KeyError for the worker the kill test
    # replaced (a race inside distributed while closing); the cluster is closed either way
    with contextlib.suppress(KeyError):
        lc.close()



def _address(client) -> str:
    return client.scheduler_info()["address"]


def _rel(a, b) -> float:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-300))


# --------------------------------------------------------------------------- sharded fit


@pytest.mark.timeout(120)
def test_sharded_fit_equals_the_single_process_fit(cluster):
    X, y = make_chain_task(160, n_labels=4, seed=3)
    y_missing = hide_labels(y, 0.3, seed=4)
    kw = dict(template=UNIGRAM_TEMPLATE, inference="sparse", max_iter=6)

    # missing labels and EM: the Dask fit (two workers, by address) against the same two
    # shards in this process
    dask_fit = GPSL(cluster=_address(cluster), learn_hyper=True, **kw).fit(X, y_missing)
    local = GPSL(cluster=InProcess(2), learn_hyper=True, **kw).fit(X, y_missing)
    assert dask_fit.n_shards_ == 2 and dask_fit.inference_ == "sparse"
    stats = dask_fit.shard_stats_["shards"]
    assert sum(st["tokens"] for st in stats) == sum(len(s) for s in X)
    # the nanny's MALLOC_TRIM_THRESHOLD_ was undone in each worker (relax_malloc)
    assert all(st["malloc_relaxed"] for st in stats) and all(st["seconds"] > 0 for st in stats)
    assert dask_fit.n_iter_ == local.n_iter_ >= 2
    assert _rel(dask_fit.bound_trace_, local.bound_trace_) <= 1e-8
    assert _rel(np.concatenate(dask_fit.predict_marginals(X[:40])),
                np.concatenate(local.predict_marginals(X[:40]))) <= 1e-8
    assert _rel(dask_fit.state_.r, local.state_.r) <= 1e-8
    assert _rel(dask_fit.state_.theta, local.state_.theta) <= 1e-8

    # every label observed: the Dask fit (a Client) against the plain single-process engine
    # (the sums are added in another order and L-BFGS keeps its pairs in single precision,
    # so a last-digit difference may move a stored pair by one float32 step: 2e-8 measured)
    plain = GPSL(**kw).fit(X, y)
    sharded = GPSL(cluster=cluster, **kw).fit(X, y)
    assert sharded.n_iter_ == plain.n_iter_
    assert _rel(sharded.bound_trace_, plain.bound_trace_) <= 1e-8
    assert _rel(np.concatenate(sharded.predict_marginals(X[:40])),
                np.concatenate(plain.predict_marginals(X[:40]))) <= 1e-6
    assert _rel(sharded.state_.W, plain.state_.W) <= 1e-6


def test_shards_are_contiguous_sentence_ranges_of_about_equal_tokens():
    from gpsl.distributed import split_sentences

    lengths = np.random.default_rng(0).integers(1, 30, size=101)
    for n in (1, 2, 3, 7, 101, 500):
        cuts = split_sentences(lengths, n)
        assert cuts[0][0] == 0 and cuts[-1][1] == len(lengths)
        assert all(a < b for a, b in cuts) and all(
            cuts[i][1] == cuts[i + 1][0] for i in range(len(cuts) - 1))
        assert len(cuts) == n if n <= 7 else len(cuts) <= min(n, len(lengths))
        sizes = [int(lengths[a:b].sum()) for a, b in cuts]
        assert max(sizes) - min(sizes) <= 2 * int(lengths.max())


def test_the_cluster_refuses_what_it_does_not_shard_in_one_line(cluster):
    X, y = make_chain_task(20, n_labels=3, seed=0)
    for kw, words in ((dict(inference="full"), "inference='full'"),
                      (dict(kernel="rbf"), "linear kernel"),
                      (dict(covariance="khan"), "mean-field")):
        with pytest.raises(InputError, match=words) as err:
            GPSL(cluster=cluster, template=UNIGRAM_TEMPLATE, **kw).fit(X, y)
        assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="Client or a scheduler address"):
        GPSL(cluster=42, template=UNIGRAM_TEMPLATE).fit(X, y)


def _write_conll(path, X, y):
    path.write_text("".join("".join(f"{w[0]} {lab}\n" for w, lab in zip(s, ls)) + "\n"
                            for s, ls in zip(X, y)))
    return path


@pytest.mark.timeout(120)
def test_train_on_a_scheduler_from_the_command_line(cluster, tmp_path):
    X, y = make_chain_task(60, n_labels=3, seed=5)
    data = _write_conll(tmp_path / "train.data", X, y)
    model_dir = tmp_path / "model"
    out = subprocess.run([sys.executable, "-m", "gpsl", "train", "--scheduler",
                          _address(cluster), "--max-iter", "3", str(data), str(model_dir)],
                         capture_output=True, text=True, timeout=limit(120),
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.returncode == 0, out.stderr
    assert "sparse inference" in out.stderr.splitlines()[-1]
    loaded = GPSL.load(model_dir)
    reference = GPSL(max_iter=3, inference="sparse").fit(X, y)
    assert loaded.inference_ == "sparse" and loaded.n_iter_ == reference.n_iter_
    assert _rel(loaded.bound_trace_, reference.bound_trace_) <= 1e-8
    assert _rel(np.concatenate(loaded.predict_marginals(X[:10], method="mean",
                                                        calibrated=False)),
                np.concatenate(reference.predict_marginals(X[:10], method="mean"))) <= 1e-8
    # calibrated by default, the fold fits on the cluster too, one after the other
    run = loaded.calibration_run_
    assert (run.source, run.folds, run.processes) == ("folds", 5, 1)
    assert loaded.calibrator_ is not None


def test_an_unreachable_scheduler_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("GPSL_DASK_TIMEOUT", "1")
    address = f"tcp://127.0.0.1:{free_port()}"
    X, y = make_chain_task(10, n_labels=3, seed=0)
    with pytest.raises(InputError, match="cannot reach the Dask scheduler"):
        GPSL(cluster=address, template=UNIGRAM_TEMPLATE).fit(X, y)
    data = _write_conll(tmp_path / "train.data", X, y)
    out = subprocess.run([sys.executable, "-m", "gpsl", "train", "--scheduler", address,
                          str(data), str(tmp_path / "model")], capture_output=True, text=True,
                         env={**os.environ, "GPSL_DASK_TIMEOUT": "1"}, timeout=limit(120))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the Dask scheduler" in lines[0], out.stderr
    # the app's runner: one line, and no version recorded
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    monkeypatch.setenv(dask_jobs.SCHEDULER_ENV, address)
    with pytest.raises(InputError, match="cannot reach the Dask scheduler"):
        jobs.start_training(store.home, pid, TINY, models_root=tmp_path / "models")
    assert store.list_model_versions(pid) == []


def test_dask_is_not_imported_without_a_scheduler(tmp_path):
    code = ("import sys\n"
            "from gpsl.model import GPSL\n"
            "from gpsl.annotation.training import jobs\n"
            "from gpsl.synthetic import make_chain_task, UNIGRAM_TEMPLATE\n"
            "X, y = make_chain_task(30, seed=1)\n"
            "GPSL(template=UNIGRAM_TEMPLATE, inference='sparse', max_iter=2).fit(X, y)\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed'))\n"
            "print(bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=limit(120), cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))  # noqa: E501
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- training jobs


def _labels(store, pid):
    return [(s.tokens, s.labels) for s in store.export_sentences(pid)]


@pytest.mark.timeout(120)
def test_a_job_on_the_cluster_is_reported_and_stopped(cluster, tmp_path, monkeypatch):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    root = store.own_root(tmp_path / "models")
    monkeypatch.setenv(dask_jobs.SCHEDULER_ENV, _address(cluster))
    vid = jobs.start_training(store.home, pid, TINY, models_root=root, pause_at="in-fit")
    try:
        # reported: the job claimed the version and writes the same progress file
        prog = wait_until(lambda: (p := pipeline.read_progress(root, pid, vid))
                          and p.get("iteration", 0) >= 1 and p)
        assert prog["phase"] == "fitting" and len(prog["bounds"]) == 1
        settings = store.get_model_version(vid)["settings"]
        assert settings["runner"] == "dask" and settings["pid"] != os.getpid()
        assert settings["pid"] in cluster.run(os.getpid).values()
        assert jobs.worker_alive(settings) is True
        with pytest.raises(jobs.TrainingBusyError):
            jobs.start_training(store.home, pid, TINY, models_root=root)
        # stopped: the job ends itself at its next check
        assert jobs.stop_training(store.home, vid)
        wait_until(lambda: pipeline.read_progress(root, pid, vid)["phase"] == "stopped")
        fut = dask_jobs._FUTURES.get(vid, (None,))[0]
        if fut is not None:
            wait_until(lambda: fut.done())
    finally:
        jobs.stop_training(store.home, vid)
    version = store.get_model_version(vid)
    assert version["status"] == "killed" and version["error"] == "stopped by the user"
    assert store.active_model(pid) is None and store.get_predictions(vid) == {}
    assert not pipeline.staging_dir(root, pid, vid).exists()
    assert jobs.running_version(store.home, pid, root) is None


@pytest.mark.timeout(180)
def test_a_worker_killed_mid_fit_fails_the_version_and_a_retry_succeeds(cluster, tmp_path,
                                                                       monkeypatch):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    root = store.own_root(tmp_path / "models")
    monkeypatch.setenv(dask_jobs.SCHEDULER_ENV, _address(cluster))
    worker_pid = None
    try:
        vid = jobs.start_training(store.home, pid, TINY, models_root=root, pause_at="in-fit")
        wait_until(lambda: (pipeline.read_progress(root, pid, vid) or {}).get("iteration", 0)
                   >= 1)
        # an annotator labels while the job runs
        sid = store.sentence_ids(pid, split="train")[5]  # "Carl went to Oslo ."
        store.set_labels(sid, {0: OUT, 3: BL}, "ann")
        before = _labels(store, pid)
        worker_pid = store.get_model_version(vid)["settings"]["pid"]
        os.kill(worker_pid, signal.SIGKILL)

        def ended():
            jobs.mark_stale(store.home, root, pid)  # what the app does on every page run
            return store.get_model_version(vid)["status"] != "running"

        wait_until(ended, timeout=60)
    finally:
        # the nanny replaces the killed worker: wait until the scheduler has dropped it
        wait_until(lambda: len(pids := [w.get("pid") for w in
                                        cluster.scheduler_info()["workers"].values()]) == 2
                   and worker_pid not in pids, timeout=60)
    failed = store.get_model_version(vid)
    assert failed["status"] == "failed", failed
    assert "Dask worker" in failed["error"] and str(worker_pid) in failed["error"]
    assert _labels(store, pid) == before  # no label lost, the one made meanwhile included
    assert store.get_sentence(sid)["labels"][3] == BL
    assert store.active_model(pid) is None and store.get_predictions(vid) == {}

    retry = jobs.start_training(store.home, pid, TINY, models_root=root)
    wait_until(lambda: store.get_model_version(retry)["status"] != "running", timeout=90)
    done = store.get_model_version(retry)
    assert done["status"] == "done", done["error"]
    assert done["active"] and pipeline.model_dir(root, pid, retry).is_dir()
    model = GPSL.load(done["path"])
    assert model.classes_ == done["classes"]
    assert sorted(store.get_predictions(retry)) == sorted(store.sentence_ids(pid))
    assert pipeline.read_progress(root, pid, retry)["phase"] == "done"
    jobs.recover(store.home, root)  # the failed version's leftovers go
    assert not pipeline.staging_dir(root, pid, vid).exists()
    assert not pipeline.model_dir(root, pid, vid).exists()
