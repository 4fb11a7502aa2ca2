"""The app-on-a-crowd benchmark runs end to end on a small hand-made crowd folder: the import,
a training run by the real worker process, CRFsuite beside it, the table and its files."""

import json

from bench import app_crowd
from tests.support.crowd_folder import write_folder


def test_app_crowd_on_a_small_folder(tmp_path):
    folder = write_folder(tmp_path / "crowd")
    out = tmp_path / "out"
    assert app_crowd.main(["--data", str(folder), "--heldout", "0.5", "--out", str(out)]) == 0
    report = json.loads((out / "app_crowd.json").read_text(encoding="utf-8"))
    imp, run = report["import"], report["train"]
    assert (imp["workers"], imp["documents"], imp["heldout_documents"]) == (3, 2, 1)
    assert (imp["votes"], imp["votes_held_out"]) == (20, 5)
    assert "crowd model" in imp["rule"]
    assert run["wall_s"] >= run["fit_s"] > 0 and run["cpu_s"] > 0
    assert isinstance(run["phases"], dict)  # polled: a run this small may show none
    assert run["training_labels"]["resolve"] == "crowd" and run["training_labels"]["joint"]
    assert run["training_labels"]["joint_sweeps"] >= 1
    for row in (report["gpsl"], report["crfsuite"]):
        assert 0.0 <= row["accuracy"] <= 1.0 and 0.0 <= row["f1"] <= 1.0
    md = (out / "app_crowd.md").read_text(encoding="utf-8")
    assert "python -m bench.app_crowd --data" in md and "| CRFsuite, same features" in md
    assert "Goal: train → predictions stored in under 5 minutes" in md
    assert "Trains on (the Train page's line): the joint model's posterior q(y)" in md
    assert "issue 39's ≤ 60 s" in md


def test_app_crowd_without_the_data_says_so(tmp_path, capsys):
    assert app_crowd.main(["--data", str(tmp_path / "absent"), "--out", str(tmp_path)]) == 0
    assert "not found" in capsys.readouterr().out
    assert not (tmp_path / "app_crowd.json").exists()
