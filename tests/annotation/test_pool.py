"""The pool's predictions (gpsl.annotation.training.pool): chunked on two processes = one chunk in
one process, within the storage precision; a worker killed between two chunk transactions loses
nothing committed; predictions packed by schema 6 and pruned to what the pages show; the
migration of a schema-5 store (SQLite and PostgreSQL)."""

from __future__ import annotations

import functools
import signal
from io import BytesIO

import numpy as np
import pytest
from sqlalchemy import bindparam, text

from gpsl.annotation import SCHEMA_VERSION, Store
from gpsl.annotation.corpus import predictions, sentences
from gpsl.annotation.training import jobs, pipeline, pool
from gpsl.model import GPSL
from tests.support.helpers import BL, BP, IP, OUT, tiny_store, wait_until

TINY = pipeline.TrainConfig(offsets=(-1, 1), max_iter=3, learn_hyper=False)
LEVEL = 1 / 65535  # one 16-bit level: the storage's read-back error is below it

WORDS = ["Anna", "Bob", "went", "to", "Paris", "Rome", "Smith", "Jones", "flew", "."]


def _sentences(n: int, length: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"tokens": [WORDS[i] for i in rng.integers(0, len(WORDS), length)]}
            for _ in range(n)]


def _all(store, pid):
    return store.training_data(pid, split=None, with_ids=True)


def test_chunked_on_two_processes_stores_what_one_chunk_gives(tmp_path, monkeypatch):
    """The run's stored marginals, predicted in chunks of 8 tokens on two forked processes,
    equal one chunk's in this process (the saved model reloaded) within one level; the
    chunks arrive in order and cover every sentence once; parallel = serial exactly for the
    same chunks (query scores included: the same seeds)."""
    store, pid = tiny_store(tmp_path / "s.sqlite3", extra=_sentences(12, 5))
    monkeypatch.setattr(pool, "PREDICT_CHUNK_TOKENS", 8)
    monkeypatch.setenv(pool.PROCESSES_ENV, "2")
    version = jobs.train_now(store.home, pid, TINY, tmp_path / "models")
    assert version["status"] == "done"
    stored = store.get_predictions(version["id"])
    ids, X, y = _all(store, pid)
    assert set(stored) == set(ids)
    model = GPSL.load(version["path"])
    train = set(store.sentence_ids(pid, split="train"))
    P, Q = pool.predict_chunk(model, [X[k] for k in range(len(X)) if ids[k] in train],
                              [y[k] for k in range(len(X)) if ids[k] in train], "bald",
                              seed=version["id"])
    one = dict(zip([s for s in ids if s in train], P))
    for sid, p in one.items():
        assert stored[sid].shape == p.shape
        assert np.abs(stored[sid] - p).max() < LEVEL + 1e-6  # + Algorithm 2's stop rule
    job = pool.PoolJob(model, ids, X, y, train, {}, "bald", version["id"])
    assert pool.processes(10) == 2
    par = list(pool.predict_pool(job, budget=8, n_processes=2))
    ser = list(pool.predict_pool(job, budget=8, n_processes=1))
    assert len(par) > 2 and [d for d, _, _ in par] == sorted({d for d, _, _ in par})
    assert par[-1][0] == len(ids)
    assert sorted(s for _, m, _ in par for s in m) == sorted(ids)
    for (d1, m1, q1), (d2, m2, q2) in zip(par, ser, strict=True):
        assert d1 == d2 and m1.keys() == m2.keys() and q1.keys() == q2.keys()
        assert all(np.array_equal(m1[s], m2[s]) for s in m1)
        assert all(np.array_equal(q1[s], q2[s]) for s in q1)
    assert set(store.get_query_scores(version["id"])) == train
    # each chunk reading its own sentences from the store (the run's way, the worker holding
    # ids and lengths only) predicts the same, in the processes and in this one
    ids2, lengths = sentences.lengths(store.db, pid)
    assert ids2 == ids and lengths == [len(s) for s in X]
    back = sentences.of_ids(store.db, ids[::-1])
    assert back == (X[::-1], y[::-1])
    read = functools.partial(sentences.of_ids, store.db)
    job2 = pool.PoolJob(model, ids, None, None, train, {}, "bald", version["id"], read=read,
                        lengths=lengths)
    for n in (2, 1):
        got = list(pool.predict_pool(job2, budget=8, n_processes=n))
        for (d1, m1, q1), (d2, m2, q2) in zip(got, ser, strict=True):
            assert d1 == d2 and m1.keys() == m2.keys() and q1.keys() == q2.keys()
            assert all(np.array_equal(m1[s], m2[s]) for s in m1)
            assert all(np.array_equal(q1[s], q2[s]) for s in q1)


@pytest.mark.timeout(300)
def test_a_worker_killed_between_chunks_loses_nothing_committed(tmp_path):
    """The worker waits after its first chunk's transaction (pause_at="in-predict") and is
    SIGKILLed: the chunk is stored whole, the previous version stays active with all its
    predictions, a label set meanwhile is kept, and recovery fails the run cleanly."""
    path = tmp_path / "s.sqlite3"
    store, pid = tiny_store(path, extra=_sentences(260, 20))  # > 1 chunk of 4,000 tokens
    root = tmp_path / "models"
    first = jobs.train_now(store.home, pid, TINY, root)
    before = store.get_predictions(first["id"])
    vid = jobs.start_training(store.home, pid, TINY, pause_at="in-predict")
    root = store.own_root(root)  # the store's own folder of progress files (issue 37)
    try:
        wait_until(lambda: (pipeline.read_progress(root, pid, vid) or {}).get("done"),
                   what="the first chunk stored")
        sid = store.sentence_ids(pid)[4]
        store.set_label(sid, 0, BP, "ann")  # the app goes on meanwhile
    finally:
        proc = jobs._WORKERS[vid][0]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    done = pipeline.read_progress(root, pid, vid)["done"]
    ids, X, _ = _all(store, pid)
    assert 0 < done < len(ids)
    part = store.get_predictions(vid)
    assert set(part) == set(ids[:done])  # the committed chunk, whole
    assert all(part[s].shape == (len(X[k]), 4) for k, s in enumerate(ids[:done]))
    assert store.db.read(lambda c: c.exec_driver_sql("PRAGMA integrity_check").scalar()) == "ok"
    assert store.active_model(pid)["id"] == first["id"]
    assert {k: v.tobytes() for k, v in store.get_predictions(first["id"]).items()} == \
        {k: v.tobytes() for k, v in before.items()}
    assert store.get_sentence(sid)["votes"][0] == {"ann": BP}
    jobs.reap_workers()
    assert store.get_model_version(vid)["status"] == "failed"
    assert store.active_model(pid)["id"] == first["id"]


def test_pruning_keeps_what_the_pages_show(tmp_path):
    """After three runs: the active version's predictions cover every sentence (Annotate,
    the queue, Confidence, Data), the one before it is still a choice on Confidence and
    Data, the first has none left (its row and metrics stay: the learning curve)."""
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    root = tmp_path / "models"
    v1 = jobs.train_now(store.home, pid, TINY, root)
    store.set_label(store.sentence_ids(pid)[3], 0, BP, "ann")
    v2 = jobs.train_now(store.home, pid, TINY, root)
    store.set_label(store.sentence_ids(pid)[3], 1, IP, "ann")
    v3 = jobs.train_now(store.home, pid, TINY, root)
    ids = store.sentence_ids(pid, split=None)
    assert set(store.get_predictions(v3["id"])) == set(ids)
    assert set(store.get_predictions(v2["id"])) == set(ids)
    assert store.get_predictions(v1["id"]) == {}
    reports = store.reports
    shown = reports.with_predictions(reports.versions(pid))
    assert sorted(shown) == sorted([v2["id"], v3["id"]])
    assert [v.id for v in reports.versions(pid)] == [v1["id"], v2["id"], v3["id"]]
    assert store.queue(pid)  # the queue reads the active version's scores
    view = reports.sentence(ids[5], "ann")
    assert view.version.id == v3["id"] and all(t.suggestion for t in view.tokens)


def _npy(arr) -> bytes:
    buf = BytesIO()
    np.save(buf, np.asarray(arr, dtype=np.float32), allow_pickle=False)
    return buf.getvalue()


def test_a_schema_5_store_is_packed_and_pruned(store_target):
    """Schema 5 kept float32 NPY blobs for every version: migrating packs the active
    version's and the one before it (within one level; confidences from the packed values;
    query scores unchanged) and drops the older ones' predictions, nothing else."""
    store = Store(store_target)
    labels = [BP, IP, BL, OUT]
    pid = store.create_project("p5", labels, "", [-1, 1])
    store.add_sentences(pid, [{"tokens": [f"w{i}" for i in range(4)]} for _ in range(5)])
    other = store.create_project("other", labels, "", [-1, 1])
    store.add_sentences(other, [{"tokens": ["x", "y"]}])
    ids = store.sentence_ids(pid)
    rng = np.random.default_rng(5)
    versions, raw = [], {}
    for _ in range(3):
        vid = store.start_model_version(pid, {})
        preds = {sid: rng.dirichlet(np.ones(4) * 0.3, 4).astype(np.float32) for sid in ids}
        store.save_predictions(vid, preds, {sid: rng.random(4) for sid in ids})
        store.finish_model_version(vid, None, [0.0], {}, 0, classes=labels, activate=True)
        versions.append(vid)
        raw[vid] = preds
    ov = store.start_model_version(other, {})
    store.save_predictions(ov, {store.sentence_ids(other)[0]: np.eye(4)[:2]})
    store.finish_model_version(ov, None, [0.0], {}, 0, classes=labels, activate=True)
    store.set_active_model(pid, versions[1])  # the lead went back one version
    queue = store.queue(pid)
    scores = {v: store.get_query_scores(v) for v in versions}

    def back_to_schema_5(conn):  # what schema 5 wrote: NPY blobs of every version
        for vid, preds in raw.items():
            conn.execute(text("UPDATE predictions SET marginals = :m, query_scores = :q"
                              " WHERE model_version_id = :v AND sentence_id = :s"),
                         [{"m": _npy(p), "q": _npy(scores[vid][sid]), "v": vid, "s": sid}
                          for sid, p in preds.items()])
        conn.execute(text("UPDATE schema_version SET version = 5"))
        if store.dialect == "sqlite":
            conn.exec_driver_sql("PRAGMA user_version = 5")

    store.db.write(back_to_schema_5)
    size = store.db.read(lambda c: c.execute(text(
        "SELECT SUM(LENGTH(marginals)) FROM predictions WHERE model_version_id IN :v")
        .bindparams(bindparam("v", expanding=True)), {"v": versions[1:]}).scalar_one())
    store.close()
    store = Store(store_target)
    assert store.db.read(lambda c: c.execute(text("SELECT MAX(version) FROM schema_version"))
                         .scalar_one()) == SCHEMA_VERSION == 8
    # kept: the active version (2) and the newest other (3); the first: pruned
    assert store.get_predictions(versions[0]) == {}
    for vid in versions[1:]:
        got = store.get_predictions(vid)
        assert set(got) == set(ids)
        for sid in ids:
            assert np.abs(got[sid] - raw[vid][sid]).max() < LEVEL
            assert np.array_equal(got[sid], predictions.quantise(raw[vid][sid]))
        assert {s: q.tobytes() for s, q in store.get_query_scores(vid).items()} == \
            {s: q.tobytes() for s, q in scores[vid].items()}
    conf = store.db.read(lambda c: c.execute(text(
        "SELECT sentence_id, confidence FROM predictions WHERE model_version_id = :v"),
        {"v": versions[1]}).fetchall())
    got = store.get_predictions(versions[1])
    assert all(np.frombuffer(bytes(c), "<f4").tolist() == got[s].max(axis=1).tolist()
               for s, c in conf)
    packed = store.db.read(lambda c: c.execute(text(
        "SELECT SUM(LENGTH(marginals)) FROM predictions WHERE model_version_id IN :v")
        .bindparams(bindparam("v", expanding=True)), {"v": versions[1:]}).scalar_one())
    assert packed < size / 2
    assert store.queue(pid) == queue  # the active version's queue, unchanged
    assert len(store.get_predictions(ov)) == 1  # another project's active version: kept
    store.close()


def test_the_packing_reads_back_within_one_level():
    """Any probabilities: a row read back sums to 1, each value within one 16-bit level,
    labels at level 0 left out; old NPY blobs still read; beyond 255 labels too."""
    rng = np.random.default_rng(0)
    for J in (2, 23, 300):
        m = rng.dirichlet(np.full(J, 0.1), 50)
        blob = predictions.encode_marginals(m)
        back = predictions.decode(blob)
        assert back.dtype == np.float32 and back.shape == m.shape
        assert np.abs(back - m).max() < LEVEL
        assert np.allclose(back.sum(axis=1), 1.0, atol=1e-6, rtol=0)
        assert np.array_equal(back, predictions.quantise(m))
        assert len(blob) == 10 + 50 * (1 if J <= 255 else 2) + int((back > 0).sum()) * (
            3 if J <= 255 else 4)
    assert np.array_equal(predictions.decode(_npy(m)), m.astype(np.float32))
    q = rng.random(7)
    assert np.array_equal(predictions.decode(predictions.encode_scores(q)),
                          q.astype(np.float32))
    assert predictions.decode(predictions.encode_marginals(np.zeros((0, 3)))).shape == (0, 3)
    assert predictions.quantise([[1.0, 0.0, 0.0]]).tolist() == [[1.0, 0.0, 0.0]]


def test_a_chunk_quantised_and_packed_at_once_equals_each_sentence_alone():
    """predictions.check and write level a chunk's sentences in one call
    (predictions._levels_many): the stored arrays and packed bytes are those of each
    sentence alone (quantise, encode_marginals), for every width, empty sentences, rows of
    zeros, ties and non-finite marginals (left as they are)."""
    rng = np.random.default_rng(5)
    arrs = []
    for k in range(60):
        J = (3, 11, 300)[k % 3]
        L = int(rng.integers(0, 9))
        a = rng.dirichlet(np.full(J, 0.3), size=L).astype(np.float32)
        if L and k % 5 == 0:
            a[0] = 0.0  # a row of zeros: uniform
        if L > 1 and k % 7 == 0:
            a[1] = 1.0 / J  # ties
        arrs.append(a)
    arrs.append(np.array([[np.nan, 0.5, 0.5]], dtype=np.float32))
    margs = {100 + k: a for k, a in enumerate(arrs)}
    items, _ = predictions.check(margs)
    assert [sid for sid, _ in items] == list(margs)
    for (_, got), a in zip(items, arrs):
        want = predictions._as_stored(a)
        assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True)
    fine = [arr for _, arr in items if np.all(np.isfinite(arr))]
    packed = [predictions._pack(q) for q in predictions._levels_many(fine)]
    assert packed == [predictions.encode_marginals(arr) for arr in fine]
    for arr, blob in zip(fine, packed):
        assert np.array_equal(predictions.decode(blob), arr)  # the stored values read back
    with pytest.raises(ValueError, match="marginals must be"):
        predictions._levels_many([np.zeros(3)])
