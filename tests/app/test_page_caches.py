"""What the Confidence and Data pages keep between reruns (issue 37): a cached read or
check is used again only while what it shows is unchanged."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

from streamlit.testing.v1 import AppTest  # noqa: E402

from gpsl.annotation.interchange import exports  # noqa: E402
from gpsl.annotation.training import jobs, pipeline  # noqa: E402
from gpsl.errors import ModelFormatError  # noqa: E402
from tests.support.helpers import app_store_env, tiny_store  # noqa: E402
from tests.support.limits import limit  # noqa: E402

TINY = pipeline.TrainConfig(offsets=(-1, 1), max_iter=3, learn_hyper=False, inference="full")


@pytest.fixture
def db(tmp_path, monkeypatch) -> Path:
    return app_store_env(tmp_path, monkeypatch)


def app(page: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(30)).run()
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, at.exception
    return at


def flip_a_byte(path: Path) -> None:
    """Damage a file in place: the same size, one byte changed."""
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))


def test_an_unchanged_model_is_loaded_once_and_a_damaged_one_every_time(tmp_path,
                                                                        monkeypatch):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    version = jobs.train_now(store.home, pid, TINY)
    loads = []
    real = exports.GPSL.load
    monkeypatch.setattr(exports.GPSL, "load",
                        classmethod(lambda cls, p: loads.append(p) or real(p)))
    for _ in range(3):
        exports.check_model(version["path"])
    assert len(loads) == 1
    flip_a_byte(Path(version["path"]) / "model.json")  # same size: the checksum refuses it
    for _ in range(2):
        with pytest.raises(ModelFormatError):
            exports.check_model(version["path"])
    assert len(loads) == 3  # a damaged model is never remembered as good
    with pytest.raises(ModelFormatError):
        exports.model_zip(version["path"])


def test_the_data_page_refuses_a_model_damaged_after_it_showed_it(db):
    store, pid = tiny_store(db)
    version = jobs.train_now(store.home, pid, TINY)
    at = app("data")
    assert not at.error
    at.run()  # a rerun: the model checked before is offered again
    assert not at.error
    flip_a_byte(Path(version["path"]) / "arrays.npz")
    at.run()
    assert not at.exception
    assert any("cannot be downloaded" in e.value for e in at.error), [e.value for e in at.error]


def values(v) -> list:
    """A plotly array as a list (numbers come as base64 typed arrays)."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).tolist()
    return list(v)


def charts(at: AppTest) -> dict[str, dict]:
    """The page's plotly figures by title."""
    out = {}
    for c in at.get("plotly_chart"):
        spec = json.loads(c.proto.spec)
        out[spec["layout"]["title"]["text"]] = spec
    return out


def test_the_confidence_charts_follow_a_new_version_and_a_new_label(db):
    store, pid = tiny_store(db)
    jobs.train_now(store.home, pid, TINY)
    at = app("confidence")
    first = charts(at)
    curve = first["Every version: held-out accuracy and mean confidence"]
    assert {x for t in curve["data"] for x in t["x"]} == {"v1"}
    assert "Labels set per annotator per day" not in first  # no label set in the app yet
    at.run()
    assert charts(at) == first  # a rerun over the same data: the same figures

    # a label set: the activity chart shows it; the version's figures stay
    sid = store.sentence_ids(pid, "train")[-1]
    store.set_label(sid, 0, "O", "ann")
    at.run()
    now = charts(at)
    bars = now["Labels set per annotator per day"]["data"]
    assert [(t["name"], values(t["y"])) for t in bars] == [("ann", [1])]
    for title in first:
        assert now[title] == first[title]
    store.set_label(sid, 1, "O", "ann")
    at.run()
    bars = charts(at)["Labels set per annotator per day"]["data"]
    assert [(t["name"], values(t["y"])) for t in bars] == [("ann", [2])]

    # a new version: its point joins the learning curve
    jobs.train_now(store.home, pid, TINY)
    at.run()
    assert not at.exception
    curve = charts(at)["Every version: held-out accuracy and mean confidence"]
    assert {x for t in curve["data"] for x in t["x"]} == {"v1", "v2"}
