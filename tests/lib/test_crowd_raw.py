"""The one-folder-per-annotator reader (gpsl.io.crowd_raw): alignment, kept and dropped votes,
hostile files, the command line on a folder, and a slice of the real crowd (../shared)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpsl import cli
from gpsl.crowd import CrowdGPSL, DawidSkene, MajorityVote, Votes
from gpsl.errors import InputError
from gpsl.io.crowd_raw import CrowdFolderError, align_tokens, find_split, read_crowd_folder

REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "crowd-ner" / "raw"

GOLD_A = [[("TORONTO", "B-LOC"), ("1996-08-23", "O")],
          [("Results", "O"), ("from", "O"), ("the", "O"), ("U.S.", "B-MISC"),
           ("Open", "I-MISC"), (".", "O")]]
GOLD_B = [[("Peter", "B-PER"), ("Kox", "I-PER"), ("(", "O"), ("Netherlands", "B-LOC"),
           (")", "O")]]


def write(path: Path, sents) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n" + "\n\n".join("\n".join(f"{t} {lab}" for t, lab in s)
                                       for s in sents) + "\n", encoding="utf-8")


def layout(root: Path, workers: dict) -> Path:
    """raw/val with the two gold documents and ``workers`` = {name: {doc: sentences}}."""
    split = root / "raw" / "val"
    write(split / "ground_truth" / "docA.txt", GOLD_A)
    write(split / "ground_truth" / "docB.txt", GOLD_B)
    for name, docs in workers.items():
        (split / "mturk_train_data" / name).mkdir(parents=True, exist_ok=True)
        for doc, sents in docs.items():
            write(split / "mturk_train_data" / name / doc, sents)
    return split


def good_workers():
    return {
        # identical to the gold, except a missed entity
        "w1": {"docA.txt": [[("TORONTO", "B-LOC"), ("1996-08-23", "O")],
                            [("Results", "O"), ("from", "O"), ("the", "O"), ("U.S.", "O"),
                             ("Open", "O"), (".", "O")]],
               "docB.txt": GOLD_B},
        # the interface split U.S. into U.S|. and put the whole document in one sentence;
        # TORONTO carries a type marker
        "w2": {"docA.txt": [[("TORONTO/LOC", "O"), ("1996-08-23", "O"), ("Results", "O"),
                             ("from", "O"), ("the", "O"), ("U.S", "B-MISC"), (".", "I-MISC"),
                             ("Open", "I-MISC"), (".", "O")]]},
        # a split labeled in part (Nether|lands: B-LOC O) and an empty token line
        "w3": {"docB.txt": [[("Peter", "B-PER"), ("Kox", "I-PER"), ("(", "O"),
                             ("Nether", "B-LOC"), ("lands", "O"), ("", "B-LOC"), (")", "O")]]},
        # a merge: "from the" as one token "fromthe"
        "w4": {"docA.txt": [[("TORONTO", "B-LOC"), ("1996-08-23", "O")],
                            [("Results", "O"), ("fromthe", "O"), ("U.S.", "B-LOC"),
                             ("Open", "I-LOC"), (".", "O")]]},
    }


def by_id(sents):
    return {s.id: s for s in sents}


def test_alignment_keeps_a_vote_for_every_token_that_aligns(tmp_path):
    split = layout(tmp_path, good_workers())
    sents, rep = read_crowd_folder(split)
    s = by_id(sents)
    assert set(s) == {"docA:1", "docA:2", "docB:1"}
    assert [t[0] for t in s["docA:2"].tokens] == ["Results", "from", "the", "U.S.", "Open", "."]
    assert s["docA:2"].labels == ["O", "O", "O", "B-MISC", "I-MISC", "O"]  # the gold
    a2 = s["docA:2"].annotations
    assert a2["w1"] == ["O", "O", "O", "O", "O", "O"]
    # w2: its one sentence spread over the gold's two; U.S|. (B-MISC I-MISC) is one vote
    assert s["docA:1"].annotations["w2"] == ["O", "O"]  # TORONTO/LOC: the label column
    assert a2["w2"] == ["O", "O", "O", "B-MISC", "I-MISC", "O"]
    # w4: fromthe covers from + the (a merge: the label, then its continuation)
    assert a2["w4"] == ["O", "O", "O", "B-LOC", "I-LOC", "O"]
    # w3: Nether|lands labeled in part: no vote on Netherlands; the empty token is dropped
    assert s["docB:1"].annotations["w3"] == ["B-PER", "I-PER", "O", None, "O"]
    assert rep.workers == 4 and rep.documents == 2 and rep.worker_documents == 5
    assert rep.dropped == {"empty token": 1, "split labeled in part": 2}
    assert rep.aligned["split"] == 1 and rep.aligned["merge"] == 2
    assert rep.votes == 8 + 5 + 8 + 4 + 8
    # the identical-sentence rule keeps w1's three sentences and w4's first
    assert rep.identical_votes == 2 + 6 + 5 + 2
    assert rep.per_worker["w3"] == {"votes": 4, "dropped": 3, "documents": 1}
    assert "votes kept" in rep.summary() and rep.as_dict()["dropped_tokens"] == 3
    votes = Votes.from_sentences(sents)
    assert votes.token.size == rep.votes


def test_marker_votes_option_reads_the_type_marker(tmp_path):
    split = layout(tmp_path, good_workers())
    sents, _ = read_crowd_folder(split, marker_votes=True)
    assert by_id(sents)["docA:1"].annotations["w2"] == ["B-LOC", "O"]


def test_align_tokens_text_that_differs_is_dropped():
    votes, how, dropped = align_tokens(["a", "b", "c"], ["a", "x", "c"], ["O", "B-PER", "O"])
    assert votes == ["O", None, "O"] and dropped["text differs"] == 1 and how["equal"] == 2


def test_unvoted_sentences_are_left_out_unless_asked(tmp_path):
    split = layout(tmp_path, {"w1": {"docB.txt": GOLD_B}})
    sents, rep = read_crowd_folder(split)
    assert [s.id for s in sents] == ["docB:1"] and rep.sentences_without_votes == 2
    sents, _ = read_crowd_folder(split, keep_unvoted=True)
    assert [s.id for s in sents] == ["docA:1", "docA:2", "docB:1"]
    assert sents[0].annotations == {}


@pytest.mark.parametrize("content, needle", [
    (b"", "empty file"),
    (b"\x00\x01\x02 O\n", "NUL byte"),
    (b"\xff\xfe\x00bad", "cannot be decoded"),
    (b"Peter B-PER\nKox\n", "expected 'token label'"),
    (b"Peter B_PER\n", "bad label"),
])
def test_hostile_worker_files_one_line_each(tmp_path, content, needle):
    split = layout(tmp_path, {"w1": {"docB.txt": GOLD_B}})
    bad = split / "mturk_train_data" / "w1" / "docA.txt"
    bad.write_bytes(content)
    with pytest.raises(CrowdFolderError) as err:
        read_crowd_folder(split)
    assert len(err.value.problems) == 1
    line = err.value.lines()[0]
    assert needle in line and str(bad) in line and "\n" not in line


def test_a_worker_file_the_gold_lacks_a_mismatched_file_and_labels(tmp_path):
    split = layout(tmp_path, {"w1": {"docB.txt": GOLD_B, "docC.txt": GOLD_B},
                              "w2": {"docA.txt": GOLD_B},
                              "w3": {"docB.txt": [[("Peter", "B-PERSON")]]}})
    (split / "mturk_train_data" / "w4").mkdir()
    with pytest.raises(CrowdFolderError) as err:
        read_crowd_folder(split, labels=["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-MISC",
                                         "I-MISC"])
    lines = err.value.lines()
    assert any("docC.txt" in x and "no ground_truth/docC.txt" in x for x in lines)
    assert any("w3" in x and "not in the label set" in x and ":2:" in x for x in lines)
    assert any(x.endswith("w4: worker folder without files") for x in lines)
    assert len(lines) == 3  # the mismatch is found only once the files read
    (split / "mturk_train_data" / "w1" / "docC.txt").unlink()
    (split / "mturk_train_data" / "w3" / "docB.txt").unlink()
    (split / "mturk_train_data" / "w3").rmdir()
    (split / "mturk_train_data" / "w4").rmdir()
    with pytest.raises(CrowdFolderError, match=r"w2/docA.txt: does not match "
                                               r"ground_truth/docA.txt: 0 of 5 tokens align"):
        read_crowd_folder(split)
    assert "(and" not in str(err.value) or len(lines) > 1


def test_find_split_and_layout_errors(tmp_path):
    split = layout(tmp_path, {"w1": {"docB.txt": GOLD_B}})
    assert find_split(tmp_path / "raw") == split
    assert find_split(split) == split
    write(tmp_path / "raw" / "test" / "ground_truth" / "d.txt", GOLD_B)
    with pytest.raises(InputError, match="several splits"):
        find_split(tmp_path / "raw")
    with pytest.raises(InputError, match="no ground_truth/ folder"):
        find_split(tmp_path / "raw" / "val" / "mturk_train_data")
    with pytest.raises(InputError, match="not a folder"):
        find_split(tmp_path / "nothing")


def test_cli_aggregate_reads_a_folder(tmp_path, capsys):
    split = layout(tmp_path, good_workers())
    out = tmp_path / "agg.txt"
    assert cli.main(["aggregate", str(split), "-o", str(out), "--report",
                     str(tmp_path / "r.json")]) == 0
    lines = out.read_text(encoding="utf-8").split("\n")
    assert lines[0].split("\t")[:2] == ["TORONTO", "B-LOC"]
    assert all(len(x.split("\t")) == 3 for x in lines if x)
    err = capsys.readouterr().err
    assert "votes kept" in err and "span F1" in err
    import json

    rep = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert rep["alignment"]["votes"] == 33 and rep["gold_span_f1"] is not None


def test_the_crowd_reader_of_the_cli_returns_the_alignment(tmp_path):
    """gpsl.cli.crowd.read_votes hands a folder's alignment report back as its return value
    (the namespace carries nothing back); a file has none."""
    from gpsl.cli import build_parser
    from gpsl.cli import crowd as cli_crowd

    split = layout(tmp_path, good_workers())
    args = build_parser().parse_args(["aggregate", "-q", str(split)])
    before = dict(vars(args))
    data = cli_crowd.read_votes(args, str(split))
    assert vars(args) == before
    assert data.alignment.votes == 33 == int(data.votes.token.size)
    assert len(data.sentences) == len(data.votes.lengths)
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text('{"tokens": ["a", "b"], "annotations": [{"annotator": "x", '
                     '"labels": ["O", "B-X"]}]}\n', encoding="utf-8")
    args = build_parser().parse_args(["aggregate", "-q", str(jsonl)])
    assert cli_crowd.read_votes(args, str(jsonl)).alignment is None


def test_cli_folder_with_bad_files_gives_one_line_each_and_exit_2(tmp_path, capsys):
    split = layout(tmp_path, {"w1": {"docB.txt": GOLD_B, "docC.txt": GOLD_B},
                              "w2": {"docA.txt": [[("x", "B_PER")]]}})
    assert cli.main(["aggregate", str(split)]) == 2
    err = capsys.readouterr().err.strip().split("\n")
    assert len(err) == 2 and all(x.startswith("gpsl: error: ") for x in err)
    assert cli.main(["aggregate", "--annotators", "2", str(split)]) == 2
    assert "does not apply to a folder" in capsys.readouterr().err
    # a path that is not there, a folder without the layout, a misspelt feature set
    for argv, needle in (
            (["aggregate", "--model", "joint", "-t", "ner", str(tmp_path / "nope")],
             f"{tmp_path / 'nope'}: no such file or folder"),
            (["train", "--crowd", "-t", "ner", str(tmp_path / "nope"), str(tmp_path / "m")],
             f"{tmp_path / 'nope'}: no such file or folder"),
            (["aggregate", "--model", "joint", "-t", "ner", str(split / "mturk_train_data")],
             "no ground_truth/ folder"),
            (["aggregate", "--model", "joint", "-t", "nre",
              str(layout(tmp_path / "good", good_workers()))],
             "nre: no such template file")):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err.strip().split("\n")
        assert err[-1].startswith("gpsl: error: ") and needle in err[-1], (argv, err)
        assert not any("Traceback" in x for x in err)
    assert not (tmp_path / "m").exists()


# --------------------------------------------------------------------------- the real crowd


@pytest.fixture(scope="module")
def real():
    if not REAL.is_dir():
        pytest.skip(f"shared data absent: {REAL} not found (the crowd-ner data is expected in "
                    "../shared/data/crowd-ner next to the repository)")
    return read_crowd_folder(REAL)


def test_real_folder_keeps_more_votes_than_the_identical_rule(real):
    sents, rep = real
    assert rep.workers == 46 and rep.documents == 200
    assert rep.identical_votes == 152035  # the published val.crowd.jsonl's votes
    assert rep.votes > 1.25 * rep.identical_votes
    assert rep.dropped_tokens < 0.02 * rep.worker_tokens
    assert len(sents) == rep.sentences_kept


def test_real_folder_on_the_command_line(real, tmp_path, capsys):
    """``gpsl aggregate`` on the real folder as the docs write it (Dawid-Skene: the joint
    model's run on the whole folder is the bench's): one ``token label p`` line per gold
    token of the voted sentences, the alignment and the score against the gold on stderr."""
    sents, rep = real
    out = tmp_path / "agg.txt"
    assert cli.main(["aggregate", str(REAL / "val"), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"{rep.votes} votes kept" in err and "span F1" in err
    blocks = out.read_text(encoding="utf-8").strip("\n").split("\n\n")
    assert len(blocks) == len(sents)
    for block, s in zip(blocks[:50], sents[:50]):
        rows = [x.split("\t") for x in block.split("\n")]
        assert [r[0] for r in rows] == [t[0] for t in s.tokens]
        assert all(0.0 < float(r[2]) <= 1.0 for r in rows)


def test_real_slice_end_to_end(real):
    """A slice of the real crowd (the 4 documents 8, 58, 108 and 158 by name, 31 sentences):
    the joint model with the sequential annotators and the ner features converges by its
    stop rule with a monotone bound, its labels are span-valid and beat the majority
    vote's against the gold (0.82 against 0.70 when written)."""
    from gpsl import metrics, tags
    from gpsl.model import GPSL

    sents, _ = real
    docs = sorted({s.id.split(":")[0] for s in sents})[7::50]
    part = [s for s in sents if s.id.split(":")[0] in docs]
    gold = [list(s.labels) for s in part]
    votes = Votes.from_sentences([type(s)(s.tokens, None, s.line, s.id,
                                          annotations=s.annotations) for s in part],
                                 classes=sorted({v for s in sents for v in s.labels}))

    def f1(flat):
        cuts = np.cumsum(votes.lengths)[:-1]
        pred = [["O" if v is None else v for v in p]
                for p in np.split(np.array(flat, dtype=object), cuts)]
        return metrics.chunk_scores(gold, pred)["f1"]

    joint = CrowdGPSL(GPSL(template="ner", inference="sparse", max_iter=40)).fit(
        [s.tokens for s in part], votes)
    jt = np.diff(joint.joint_trace_)
    assert np.all(jt >= -1e-8 * np.abs(joint.joint_trace_).max())
    assert joint.joint_model_.n_iter_ < 40  # the stop rule, not max_iter
    for lab in votes.split(np.array(joint.labels_array_, dtype=object)):
        assert tags.violations(list(lab), "BIO") == {}
    mv = MajorityVote().fit_votes(votes)
    assert f1(joint.labels_array_) > f1(mv.labels_array_) + 0.05
    assert f1(DawidSkene().fit_votes(votes).labels_array_) > f1(mv.labels_array_)
