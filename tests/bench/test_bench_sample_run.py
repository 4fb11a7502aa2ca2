"""The sample-run benchmark runs end to end (one repeat) and reports both rows."""

import json

from bench import sample_run


def test_sample_run_one_repeat(tmp_path):
    assert sample_run.main(["--repeats", "1", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "sample_run.json").read_text(encoding="utf-8"))
    (run,), (peer,) = report["gpsl"], report["crfsuite"]
    assert run["train_sentences"] == 240 and run["heldout_tokens"] == peer["heldout_tokens"] > 0
    assert run["wall_s"] >= run["fit_s"] > 0 and peer["wall_s"] > 0
    # the app's run calibrates on the held-out gold: confidence close to accuracy
    assert run["heldout_accuracy"] > 0.9 and peer["heldout_accuracy"] > 0.9
    assert abs(run["heldout_accuracy"] - run["heldout_mean_confidence"]) < 0.02
    md = (tmp_path / "sample_run.md").read_text(encoding="utf-8")
    assert "python -m bench.sample_run --repeats 1" in md and "| CRFsuite |" in md
