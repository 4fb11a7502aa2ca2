"""A store owns its files (gpsl.annotation.store.owned): two stores in one folder share no model,
progress file or training lock, a model of another store is refused, and a store of schema 6
keeps loading its own models after the migration."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from gpsl.annotation import Store
from gpsl.annotation.training import jobs, pipeline
from gpsl.errors import InputError
from gpsl.model import GPSL
from tests.support.helpers import BL, BP, IP, OUT, tiny_store

TINY = pipeline.TrainConfig(offsets=(-1, 1), max_iter=3, learn_hyper=False)


def _other_store(path: Path) -> tuple[Store, int]:
    """A store with the same project and version ids as :func:`tiny_store`'s, other labels."""
    store = Store(path)
    pid = store.create_project("other", [BP, IP, BL, OUT])
    store.add_sentences(pid, [
        {"tokens": "Paris is in France .".split(), "labels": [BL, OUT, OUT, BL, OUT]},
        {"tokens": "Rome is far .".split(), "labels": [BL, OUT, OUT, OUT]},
        {"tokens": "Smith met Jones .".split()},
    ])
    return store, pid


@pytest.mark.timeout(300)
def test_two_stores_in_one_folder_share_no_model_lock_or_progress_file(tmp_path):
    a, pa = tiny_store(tmp_path / "a.sqlite3")
    b, pb = _other_store(tmp_path / "b.sqlite3")
    assert a.models_base == b.models_base == tmp_path / "models"  # the same folder...
    assert a.store_id != b.store_id and a.models_root != b.models_root  # ...not the same files
    va = jobs.train_now(a.home, pa, TINY)
    vb = jobs.train_now(b.home, pb, TINY)
    assert (pa, va["id"]) == (pb, vb["id"])  # the ids collide
    assert va["status"] == vb["status"] == "done", (va["error"], vb["error"])
    assert Path(va["path"]) != Path(vb["path"])
    assert Path(va["path"]).is_dir() and Path(vb["path"]).is_dir()  # nothing moved aside
    assert not list((tmp_path / "models").rglob(".orphan-*"))
    ma, mb = GPSL.load(a.model_path(va["id"])), GPSL.load(b.model_path(vb["id"]))
    assert ma.bound_trace_ == va["bound_trace"] and mb.bound_trace_ == vb["bound_trace"]
    assert ma.bound_trace_ != mb.bound_trace_
    # progress files and training locks: one per store
    pa_file = pipeline.progress_file(a.models_root, pa, va["id"])
    pb_file = pipeline.progress_file(b.models_root, pb, vb["id"])
    assert pa_file.is_file() and pb_file.is_file() and pa_file != pb_file
    assert pipeline.read_progress(a.models_root, pa, va["id"])["phase"] == "done"
    locks = sorted((tmp_path / "models").rglob(".train.lock"))
    assert locks == sorted([a.models_root / str(pa) / ".train.lock",
                            b.models_root / str(pb) / ".train.lock"])
    # the second store's training never touched the first one's folder
    assert {p.parent.parent.name for p in locks} == {a.models_root.name, b.models_root.name}


def _two_trained(tmp_path: Path):
    """Two stores in one folder, each with a trained version (the same ids)."""
    a, pa = tiny_store(tmp_path / "a.sqlite3")
    b, pb = _other_store(tmp_path / "b.sqlite3")
    return a, pa, jobs.train_now(a.home, pa, TINY), b, pb, jobs.train_now(b.home, pb, TINY)


@pytest.mark.timeout(300)
def test_a_model_of_another_store_or_a_missing_one_is_refused(tmp_path):
    a, pa, va, b, pb, vb = _two_trained(tmp_path)
    # b's version row pointed at a's model folder (e.g. a copied database file)
    con = sqlite3.connect(tmp_path / "b.sqlite3")
    con.execute("UPDATE model_versions SET path = ? WHERE id = ?", (va["path"], vb["id"]))
    con.commit()
    con.close()
    with pytest.raises(InputError, match="belongs to another store") as err:
        b.model_path(vb["id"])
    assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="belongs to another store"):
        b.check_model(vb["id"])
    shutil.rmtree(va["path"])
    with pytest.raises(InputError, match="model folder of model version 1 is missing"):
        a.model_path(va["id"])
    with pytest.raises(InputError, match="is missing"):
        a.model_zip(va["id"])


def _as_schema_6(path: Path, store: Store, version: dict, legacy: Path) -> None:
    """The store at ``path`` as schema 6 left it: no store_info, no summaries, the version's
    model at the shared ``<models>/<project>/<version>``."""
    store.close()
    legacy.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(version["path"], legacy)
    con = sqlite3.connect(path)
    con.executescript("DROP TABLE store_info; DROP TABLE version_summaries;"
                      "DROP TRIGGER progress_on_insert; DROP TRIGGER progress_on_delete;"
                      "DROP TRIGGER progress_on_update; DROP TABLE project_progress;"
                      "DROP INDEX predictions_by_queue;"  # and schema 8's
                      "DELETE FROM schema_version WHERE version >= 7; PRAGMA user_version = 6;")
    con.execute("UPDATE model_versions SET path = ? WHERE id = ?", (str(legacy), version["id"]))
    con.commit()
    con.close()


@pytest.mark.timeout(300)
def test_migrated_stores_load_their_own_legacy_model_and_refuse_the_other_ones(tmp_path):
    a, pa, va, b, pb, vb = _two_trained(tmp_path)
    legacy = tmp_path / "models" / str(pa) / str(va["id"])  # the folder both used to share
    _as_schema_6(tmp_path / "a.sqlite3", a, va, legacy)
    _as_schema_6(tmp_path / "b.sqlite3", b, vb, tmp_path / "elsewhere" / "1" / "1")
    con = sqlite3.connect(tmp_path / "b.sqlite3")  # b's row names the shared folder (a's model)
    con.execute("UPDATE model_versions SET path = ? WHERE id = ?", (str(legacy), vb["id"]))
    con.commit()
    con.close()
    a2, b2 = Store(tmp_path / "a.sqlite3"), Store(tmp_path / "b.sqlite3")
    assert len(a2.store_id) == len(b2.store_id) == 32 and a2.store_id != b2.store_id
    assert a2.model_path(va["id"]) == legacy  # a's own model, recognised by its bound trace
    assert np.allclose(GPSL.load(a2.model_path(va["id"])).bound_trace_, va["bound_trace"])
    with pytest.raises(InputError, match="belongs to another store"):
        b2.model_path(vb["id"])
    # b trains again: its new model goes to its own folder, a's legacy model stays
    vb2 = jobs.train_now(b2.home, pb, TINY)
    assert vb2["status"] == "done" and Path(vb2["path"]).parent.parent == b2.models_root
    assert legacy.is_dir() and a2.model_path(va["id"]) == legacy
