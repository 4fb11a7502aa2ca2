"""The serve benchmark runs end to end (a small model, one repeat) and reports every row."""

import json

from bench import serve


def test_serve_bench_one_repeat(tmp_path):
    assert serve.main(["--repeats", "1", "--train-sentences", "40", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "serve.json").read_text(encoding="utf-8"))
    assert report["predict"]["tasks"] == 100 and report["predict"]["cpu_median_s"] > 0
    assert report["tag"]["tokens_per_s"] > 0 and report["crfsuite"]["tokens_per_s"] > 0
    assert report["gpsl_test"]["same_labels_as_v1_tag"] is True
    md = (tmp_path / "serve.md").read_text(encoding="utf-8")
    assert "python -m bench.serve --repeats 1" in md and "| `/predict`, 100 tasks" in md
