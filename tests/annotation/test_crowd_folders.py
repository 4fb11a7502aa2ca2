"""Crowd folders in the app's back end (``gpsl.annotation.interchange.crowd_folders``, on SQLite and
PostgreSQL): a folder or .zip upload read with the votes kept and dropped counted by hand,
imported as a project or into one in one transaction (every worker an annotator with their
votes, the held-out documents' gold as held-out gold and never a vote), the crowd rule and the
Team page's figures after it; hostile uploads refused with one line per bad file and nothing
written; the ``ner`` feature set as a plain-text project's default; the real crowd of
``../shared/data/crowd-ner`` (skipped with a message when it is absent)."""

from __future__ import annotations

import io
import stat
import zipfile
from pathlib import Path

import pytest

from gpsl.annotation import (
    AccessDenied,
    CrowdFolderError,
    Identity,
    InputError,
    Store,
    TrainConfig,
    default_features,
    read_crowd_upload,
)
from gpsl.annotation.interchange import crowd_folders as cf
from gpsl.annotation.training.jobs import train_now
from tests.support.crowd_folder import EXPECTED, LABELS, upload_files, write_folder

REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "crowd-ner" / "raw" / "val"


def _zip(files, extra=()) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files:
            zf.writestr(name, data)
        for info, data in extra:
            zf.writestr(info, data)
    return buf.getvalue()


# ----------------------------------------------------------------------------- reading


def test_a_folder_upload_is_aligned_with_votes_kept_and_dropped_counted(tmp_path):
    folder = read_crowd_upload(upload_files(write_folder(tmp_path)))
    rep = folder.report
    assert (folder.name, folder.workers, len(folder.documents)) == ("val", 3, 2)
    assert (rep.worker_tokens, folder.votes) == (EXPECTED["worker_tokens"], EXPECTED["votes"])
    assert folder.dropped == EXPECTED["dropped"]
    assert {w: p["votes"] for w, p in rep.per_worker.items()} == EXPECTED["per_worker"]
    assert folder.labels == LABELS
    first = folder.sentences[0]
    assert first.id == "d1:1" and [t[0] for t in first.tokens][3] == "U.S."
    # W2's split labeled in part gives no vote on U.S.; W3's split of one entity does
    assert first.annotations["W2"][3] is None and first.annotations["W3"][3] == "B-LOC"


def test_a_zip_of_the_folder_reads_the_same(tmp_path):
    base = write_folder(tmp_path / "deep" / "raw")
    files = [(f"raw/{name}", data) for name, data in upload_files(base)]
    files.append(("raw/README.md", b"a note beside the split"))
    folder = read_crowd_upload([("crowd.zip", _zip(files, [("__MACOSX/._x", b"\x00")]))])
    plain = read_crowd_upload(upload_files(base))
    assert folder.report.as_dict() == plain.report.as_dict()
    assert [s.annotations for s in folder.sentences] == [s.annotations for s in plain.sentences]


def test_every_bad_file_is_one_line_naming_the_file_and_line(tmp_path):
    base = write_folder(tmp_path, workers={"W1": {"d1.txt": "Ada B_PER\nLovelace I-PER\n"},
                                           "W2": {"d1.txt": "Ada\n"}},
                        gold={"d1.txt": "Ada B-PER\nLovelace I-PER\n", "d2.txt": ""})
    with pytest.raises(CrowdFolderError) as err:
        read_crowd_upload(upload_files(base))
    lines = err.value.lines()
    assert lines == ["val/ground_truth/d2.txt: empty file (no 'token label' lines)",
                     "val/mturk_train_data/W1/d1.txt:1: bad label 'B_PER' (expected O or "
                     "PREFIX-TYPE)",
                     "val/mturk_train_data/W2/d1.txt:1: expected 'token label', found 'Ada'"]
    assert all("\n" not in line and str(tmp_path) not in line for line in lines)


@pytest.mark.parametrize("name, why", [("import", "reserved"), ("a<b", "cannot hold")])
def test_a_worker_folder_that_cannot_be_a_person_is_refused(tmp_path, name, why):
    from tests.support.crowd_folder import GOLD

    base = write_folder(tmp_path, workers={name: GOLD, "W1": GOLD})
    with pytest.raises(CrowdFolderError) as err:
        read_crowd_upload(upload_files(base))
    assert len(err.value.lines()) == 1
    assert err.value.lines()[0].startswith(f"val/mturk_train_data/{name}: ")
    assert why in err.value.lines()[0]


def test_hostile_uploads_are_one_line(tmp_path, monkeypatch):
    files = upload_files(write_folder(tmp_path))
    cases = {
        "outside": [("val/../../etc/x.txt", b"a O\n")] + files,
        "absolute": [("/etc/passwd", b"a O\n")] + files,
        "no gold": [f for f in files if "ground_truth" not in f[0]],
        "two splits": files + [("other/" + n.split("/", 1)[1], d) for n, d in files],
        "a file and a folder": files + [("val/ground_truth", b"x O\n")],
    }
    for what, upload in cases.items():
        with pytest.raises(InputError) as err:
            read_crowd_upload(upload)
        assert "\n" not in str(err.value) and str(tmp_path) not in str(err.value), what
    link = zipfile.ZipInfo("val/ground_truth/d3.txt")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    bad_zips = {"zip slip": _zip([("../evil.txt", b"x O\n")] + files),
                "symbolic link": _zip(files, [(link, "/etc/passwd")]),
                "not a zip": b"PK\x03\x04 broken"}
    for what, data in bad_zips.items():
        with pytest.raises(InputError) as err:
            read_crowd_upload([("crowd.zip", data)])
        assert str(err.value).startswith("crowd.zip: ") and "\n" not in str(err.value), what
    monkeypatch.setenv("GPSL_MAX_UPLOAD_MB", "1")  # a small zip that unpacks to 2 MB
    bomb = _zip(files + [("val/ground_truth/big.txt", b"x O\n" * (1 << 19))])
    assert len(bomb) < 1 << 20
    with pytest.raises(InputError, match="unpacked"):
        read_crowd_upload([("crowd.zip", bomb)])


# ----------------------------------------------------------------------------- importing


def test_a_crowd_project_every_worker_an_annotator_and_gold_held_out(store, tmp_path):
    folder = read_crowd_upload(upload_files(write_folder(tmp_path)))
    done = store.create_crowd_project("crowd", folder, heldout=0.5)
    pid = done.project_id
    # d2 (of d1, d2) is held out: its gold is held-out gold, its 5 votes are not imported
    assert (done.documents, done.heldout_documents, done.train_sentences,
            done.heldout_sentences, done.gold_tokens) == (2, 1, 2, 1, 3)
    assert (done.votes, done.votes_held_out) == (20, 5)
    assert done.votes + done.votes_held_out == folder.votes
    project = store.get_project(pid)
    assert project["template"] == "ner" and tuple(project["labels"]) == LABELS
    ids, X, gold = store.gold_data(pid)
    assert [[t[0] for t in s] for s in X] == [["Paris", "is", "big"]]
    assert gold == [["B-LOC", "O", "O"]] and store.votes(ids[0]) == []
    cast = store.team_votes(pid)
    assert len(cast) == 20 and {v["annotator"] for v in cast} == {"W1", "W2", "W3"}
    assert all(v["source"] == "human" for v in cast)
    first = store.sentence_ids(pid, "train")[0]
    assert {v["annotator"]: v["label"] for v in store.votes(first) if v["token_index"] == 1} \
        == {"W1": "I-PER", "W2": "O", "W3": "I-PER"}
    # the crowd model is fitted and decides: the training rule is the crowd posterior
    settings = store.team_settings(pid)
    assert settings["resolve"] == "crowd" and settings["crowd"]["n_votes"] == 20
    assert done.rule == settings["rule"] and "crowd model" in done.rule
    labels = store.get_sentence(first)["labels"]
    assert labels == ["B-PER", "I-PER", "O", "B-LOC", "O"]  # 2 of 3 workers, and W2 alone
    # the Team page's figures: every worker with the crowd model's reliability
    crowd = store.reports.crowd(pid)
    assert {r.annotator for r in crowd.report} == {"W1", "W2", "W3"}
    by = {r.annotator: r for r in crowd.report}
    assert all(0.0 <= r.accuracy <= 1.0 for r in crowd.report)
    assert by["W1"].accuracy > by["W2"].accuracy
    assert by["W1"].recall > by["W2"].recall  # W2 left Lovelace and Bob unlabeled
    team = store.reports.team(pid)
    assert {p.annotator for p in team.people} == {"W1", "W2", "W3"}
    assert team.n_tokens == 7 and len(team.annotators) == 3
    # every vote can leave the store again
    exported = store.export_votes(pid, "crowd", None)
    assert exported.count('"annotator": "W3"') == 2


def test_a_crowd_folder_into_a_project_is_one_transaction(store, tmp_path):
    folder = read_crowd_upload(upload_files(write_folder(tmp_path)))
    pid = store.create_project("plain", ["O", "B-PER", "I-PER"], sentences=[
        {"tokens": [["Hello"], ["world"]]}])
    before = (store.sentence_count(pid), store.team_votes(pid))
    with pytest.raises(InputError, match="B-LOC"):  # not in the label set
        store.import_crowd_folder(pid, folder, heldout=0.0)
    assert (store.sentence_count(pid), store.team_votes(pid)) == before
    assert store.get_project(pid)["labels"] == ["O", "B-PER", "I-PER"]
    done = store.import_crowd_folder(pid, folder, heldout=0.0, crowd=False,
                                     add_labels=["B-LOC", "I-LOC"])
    assert (done.votes, done.votes_held_out, done.heldout_documents) == (25, 0, 0)
    assert store.sentence_count(pid) == 1 + 3 and len(store.team_votes(pid)) == 25
    assert store.team_settings(pid)["resolve"] == "majority" and "majority" in done.rule
    # a two-column project refuses it, and a name in use refuses a new project: nothing written
    cols = store.create_project("columns", list(LABELS), sentences=[
        {"tokens": [["Ada", "NNP"]]}])
    with pytest.raises(InputError, match="columns"):
        store.import_crowd_folder(cols, folder)
    assert store.sentence_count(cols) == 1
    n_projects = len(store.list_projects())
    with pytest.raises(InputError, match="already exists"):
        store.create_crowd_project("plain", folder)
    assert len(store.list_projects()) == n_projects
    with pytest.raises(InputError, match="held-out share"):
        store.create_crowd_project("new", folder, heldout=0.9)
    assert len(store.list_projects()) == n_projects


def test_only_a_lead_imports_a_crowd_folder(store, tmp_path):
    folder = read_crowd_upload(upload_files(write_folder(tmp_path)))
    pid = store.create_project("plain", list(LABELS), sentences=[{"tokens": [["Hi"]]}])
    store.create_account("Lea", "lead", "lead password sturdy lantern")
    aid = store.create_account("Ann", "annotator")
    store.set_member(pid, aid)
    ann = store.acting(Identity("Ann", "annotator", aid, False))
    with pytest.raises(AccessDenied):
        ann.import_crowd_folder(pid, folder)
    with pytest.raises(AccessDenied):
        ann.create_crowd_project("mine", folder)


def test_held_out_documents_are_whole_and_spread():
    docs = [f"d{k:02d}" for k in range(20)]
    held = cf.heldout_documents(docs, 0.1)
    assert held == {"d05", "d15"}
    assert cf.heldout_documents(docs, 0.0) == set()
    assert len(cf.heldout_documents(["a", "b"], 0.5)) == 1
    assert cf.heldout_documents(["a"], 0.5) == set()  # one document stays for training


# ----------------------------------------------------------------------------- ner default


def test_a_plain_text_project_defaults_to_the_ner_feature_set(store_target, tmp_path):
    assert default_features(1) == "ner"
    assert "U22:%x[0,2]" in default_features(3)  # the window template over 3 columns
    store = Store(store_target, models_root=tmp_path / "models")
    words = ["Ada", "Lovelace", "met", "Charles", "Babbage", "in", "London", "today"]
    tags = ["B-PER", "I-PER", "O", "B-PER", "I-PER", "O", "B-LOC", "O"]
    sentences = [{"tokens": [[w] for w in words[k:] + words[:k]],
                  "labels": tags[k:] + tags[:k]} for k in range(8)]
    pid = store.create_project_from_sentences("plain", sentences, sorted(set(tags)), None,
                                              (-1, 1))
    assert store.get_project(pid)["template"] == "ner"
    columns = store.create_project_from_sentences(
        "columns", [{"tokens": [[w, "X"] for w in words], "labels": tags}],
        sorted(set(tags)), None, (-1, 1))
    assert store.get_project(columns)["template"] == default_features(2)
    version = train_now(store.home, pid, TrainConfig(max_iter=3))
    assert version["status"] == "done", version["error"]
    store.close()


# ----------------------------------------------------------------------------- the real crowd


@pytest.fixture(scope="module")
def real():
    if not REAL.is_dir():
        pytest.skip(f"the crowd data is absent ({REAL}): expected ../shared/data/crowd-ner")
    return cf.read_path(REAL)


def test_the_real_crowd_folder(real):
    rep = real.report
    assert (real.workers, len(real.documents), rep.gold_sentences) == (46, 200, 2997)
    # the alignment keeps more votes than the published identical-sentence rule
    assert rep.votes > rep.identical_votes > 0.7 * rep.worker_tokens
    items, figures = cf.plan(real, cf.DEFAULT_HELDOUT)
    assert figures["heldout_documents"] == 20
    assert figures["votes"] + figures["votes_held_out"] == rep.votes
    assert all(not i.votes for i in items if i.split == "heldout")


def test_a_slice_of_the_real_crowd_in_the_store(store, real):
    docs = set(real.documents[:12])
    files = [(str(p.relative_to(REAL.parent)), p.read_bytes())
             for p in sorted(REAL.rglob("*.txt")) if p.name in {f"{d}.txt" for d in docs}]
    folder = read_crowd_upload(files)
    done = store.create_crowd_project("crowd slice", folder, heldout=0.25)
    assert done.heldout_documents == 3 and done.votes > 5000
    crowd = store.reports.crowd(done.project_id)
    team = store.reports.team(done.project_id)
    assert {r.annotator for r in crowd.report} == {p.annotator for p in team.people}
    assert len(team.people) == len({w for s in folder.sentences for w in s.annotations
                                    if s.id.rsplit(":", 1)[0] not in
                                    cf.heldout_documents(folder.documents, 0.25)})
    assert all(r.precision is None or 0.0 <= r.precision <= 1.0 for r in crowd.report)
    assert store.reports.team_settings(done.project_id).resolve == "crowd"
