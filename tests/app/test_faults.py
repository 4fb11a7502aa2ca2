"""Faults give one line, never a traceback: a full disk (a real, small tmpfs), a read-only
database (an immutable file), a write lock held past the timeout, and a PostgreSQL server
that goes away mid-session and comes back.  Committed labels are never lost."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from streamlit.testing.v1 import AppTest  # noqa: E402

from gpsl.annotation import Store, StoreBusyError, StoreUnavailableError  # noqa: E402
from gpsl.errors import GpslError  # noqa: E402
from tests.support.helpers import tiny_store  # noqa: E402
from tests.support.limits import limit  # noqa: E402


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text, text
    return text


@contextlib.contextmanager
def small_disk(path: Path, size: str = "2m"):
    """A real tmpfs of ``size`` mounted at ``path`` (needs root; skipped otherwise)."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _fill(directory: Path) -> Path:
    filler = directory / "filler"
    with open(filler, "wb") as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
                f.flush()
    return filler


def test_a_full_disk_is_one_line_and_loses_nothing_committed(tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        store, pid = tiny_store(disk / "s.sqlite3")
        sids = store.sentence_ids(pid, "train")
        filler = _fill(disk)
        saved, error = [], None
        for k in range(2000):  # the WAL grows until the disk refuses
            sid, t = sids[k % len(sids)], k % 4
            lab = ["B-PER", "O"][(k // (4 * len(sids))) % 2]
            try:
                if store.set_label(sid, t, lab, f"a{k % 7}") is not None:
                    saved.append((sid, t, f"a{k % 7}", lab))
            except GpslError as exc:
                error = exc
                break
        assert isinstance(error, StoreUnavailableError)
        assert "disk is full" in _one_line(error)
        filler.unlink()
        store.set_label(sids[0], 0, "O", "after")  # works again once there is room
        final = {}
        for sid, t, who, lab in saved:
            final[(sid, t, who)] = lab
        for (sid, t, who), lab in final.items():
            assert store.get_sentence(sid)["votes"][t].get(who) == lab
        store.close()


def test_a_read_only_database_is_one_line(tmp_path):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    sid = store.sentence_ids(pid, "train")[3]
    store.close()
    files = [p for p in tmp_path.iterdir() if p.name.startswith("s.sqlite3")]
    done = subprocess.run(["chattr", "+i", *map(str, files)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot make the file immutable: {done.stderr.strip()}")
    try:
        with pytest.raises(GpslError) as info:
            Store(tmp_path / "s.sqlite3").set_label(sid, 0, "O", "alice")
        assert isinstance(info.value, StoreUnavailableError | StoreBusyError)
        assert str(tmp_path / "s.sqlite3") in _one_line(info.value)
    finally:
        subprocess.run(["chattr", "-i", *map(str, files)], capture_output=True)


def test_a_read_only_connection_is_one_line(tmp_path):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    sid = store.sentence_ids(pid, "train")[3]
    ro = Store(f"sqlite:///file:{tmp_path / 's.sqlite3'}?mode=ro&uri=true")
    assert ro.get_sentence(sid)["tokens"]  # reads work
    with pytest.raises(StoreUnavailableError, match="read-only"):
        ro.set_label(sid, 0, "O", "alice")
    _one_line(StoreUnavailableError("x"))
    assert store.get_sentence(sid)["labels"][0] is None


def test_a_write_lock_held_past_the_timeout_is_one_line(tmp_path):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    sid = store.sentence_ids(pid, "train")[3]
    busy = Store(tmp_path / "s.sqlite3", timeout=0.3)
    holder = sqlite3.connect(tmp_path / "s.sqlite3", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreBusyError) as info:
            busy.skip(sid, "alice")
        assert time.monotonic() - t0 < limit(5)
        assert "busy" in _one_line(info.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    busy.skip(sid, "alice")


@pytest.mark.timeout(120)
def test_postgresql_stopped_mid_session_and_restarted(tmp_path):
    from bench.postgres import PostgresUnavailable, TempPostgres

    try:
        server = TempPostgres().start()
    except PostgresUnavailable as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(str(exc))
        pytest.skip(f"PostgreSQL half skipped: {exc}")
    try:
        url = server.new_database()
        store = Store(url, timeout=2.0)
        pid = store.create_project("p", ["B", "O"])
        store.add_sentences(pid, [{"tokens": ["a", "b"]}])
        sid = store.sentence_ids(pid)[0]
        store.set_label(sid, 0, "B", "alice")
        server.pg_ctl("stop")
        with pytest.raises(StoreUnavailableError) as info:
            store.set_label(sid, 1, "O", "alice")
        assert "not reachable" in _one_line(info.value)
        assert "password" not in str(info.value)
        server.pg_ctl("start")
        store.set_label(sid, 1, "O", "alice")  # the pool reconnects
        assert store.get_sentence(sid)["labels"] == ["B", "O"]
        store.close()
    finally:
        server.stop()


# ------------------------------------------------------------------------ the app


def test_app_pages_show_a_full_disk_as_one_line(tmp_path, monkeypatch):
    with small_disk(tmp_path / "disk") as disk:
        db = disk / "gpsl.sqlite3"
        store, pid = tiny_store(db)
        monkeypatch.setenv("GPSL_DB", str(db))
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(30)).run()
        assert not at.exception
        at.switch_page("pages/annotate.py").run()
        assert not at.exception
        filler = _fill(disk)
        errors = []
        for k in range(300):  # label clicks until the disk refuses one
            at.button(key=f"tok_{k % 4}").click().run()
            at.button(key=f"lab_{k % 2}").click().run()
            assert not at.exception, at.exception
            errors = [e.value for e in at.error]
            if errors:
                break
        assert errors and all("\n" not in e for e in errors), errors
        assert any("disk is full" in e for e in errors), errors
        at.button(key="skip").click().run()  # Skip under the same fault: one line too
        assert not at.exception
        at.switch_page("pages/train.py").run()
        at.button(key="start").click().run()
        assert not at.exception, at.exception
        assert all("\n" not in e.value for e in at.error)
        filler.unlink()
        shutil.rmtree(disk / "models", ignore_errors=True)
        store.close()


@pytest.mark.timeout(180)
def test_a_worker_that_runs_out_of_disk_records_why(tmp_path):
    """The disk fills while a training worker starts: it can write neither its progress nor
    its failure; it exits with ENOSPC and the app process records that as the reason."""
    from gpsl.annotation.training import jobs, pipeline

    with small_disk(tmp_path / "disk", "3m") as disk:
        store, pid = tiny_store(disk / "s.sqlite3")
        vid = jobs.start_training(store.home, pid, pipeline.TrainConfig(max_iter=3),
                                  disk / "models")
        filler = _fill(disk)
        proc = jobs._WORKERS[vid][0]
        proc.wait(timeout=limit(120))
        assert proc.returncode == errno.ENOSPC
        jobs.reap_workers()  # the disk is still full: nothing can be written yet
        assert vid in jobs._WORKERS
        filler.unlink()
        jobs.reap_workers()  # now the reason is recorded
        version = store.get_model_version(vid)
        assert version["status"] == "failed", version
        assert "out of disk space" in version["error"]
        assert vid not in jobs._WORKERS
        store.close()


@pytest.mark.timeout(180)
def test_app_pages_when_postgresql_goes_away_and_comes_back(monkeypatch):
    from bench.postgres import PostgresUnavailable, TempPostgres

    try:
        server = TempPostgres().start()
    except PostgresUnavailable as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(str(exc))
        pytest.skip(f"PostgreSQL half skipped: {exc}")
    try:
        url = server.new_database()
        store, pid = tiny_store(url)
        sid = store.queue(pid, "sequential")[0]
        monkeypatch.setenv("GPSL_DB", url)
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(60)).run()
        at.switch_page("pages/annotate.py").run()
        assert not at.exception, at.exception
        server.pg_ctl("stop")
        at.button(key="lab_0").click().run()  # the label write: one line
        assert not at.exception, at.exception
        errors = [e.value for e in at.error]
        assert errors and all("\n" not in e and "Traceback" not in e for e in errors), errors
        assert any("not reachable" in e for e in errors), errors
        for page in ("train", "confidence", "data", "project"):  # every page: one line
            at.switch_page(f"pages/{page}.py").run()
            assert not at.exception, (page, at.exception)
            assert all("\n" not in e.value for e in at.error), page
            assert any("not reachable" in e.value for e in at.error), page
        server.pg_ctl("start")
        at.switch_page("pages/annotate.py").run()  # shows the failed click's message once
        assert not at.exception, at.exception
        at.run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        at.button(key="tok_0").click().run()
        at.button(key="lab_0").click().run()  # works again
        assert not at.error, [e.value for e in at.error]
        assert store.get_sentence(sid)["labels"][0] is not None
        store.close()
    finally:
        server.stop()
