"""bench.ner_gap on a hand-made crowd folder: every tagger at every size, the table and the
written Markdown + JSON; CRFsuite's L2 row is GPSL's Gaussian prior."""

from __future__ import annotations

import json

from bench import ner_gap
from gpsl.features import NerFeatures
from tests.bench.test_bench_crowd_real import fake_crowd


def test_crfsuite_at_gpsl_prior_is_the_gaussian_prior_negative_log():
    rows = ner_gap.crf_settings(NerFeatures.VARIANCE)
    at_prior = [p for name, p in rows.items() if "GPSL's prior" in name]
    assert len(at_prior) == 2
    for p in at_prior:  # -log N(w; 0, s2) = w^2 / (2 s2) + const = c2 w^2
        assert p["c1"] == 0.0 and p["c2"] == 1.0 / (2.0 * NerFeatures.VARIANCE)
    assert [p.get("all_possible_states", False) for p in at_prior] == [True, False]
    wider = [p["c2"] for name, p in rows.items() if "L2 alone at prior variance" in name]
    assert wider == [0.1, 0.05]


def test_every_tagger_at_every_size_and_the_outputs(tmp_path, monkeypatch):
    data = fake_crowd(tmp_path / "crowd-ner", n_docs=10)
    out = tmp_path / "out"
    monkeypatch.setattr(ner_gap, "GRID", [(1.0, 4.0), (2.0, 4.0)])
    assert ner_gap.main(["--sizes", "6,all", "--out", str(out), "--data", str(data)]) == 0
    rows = json.loads((out / "ner_gap.json").read_text())["rows"]
    ns = sorted({r["n"] for r in rows})
    assert ns[0] == 6 and len(ns) == 2 and len(rows) == 2 * 10
    assert all(0.0 <= r["f1"] <= 100.0 and r["cpu_s"] >= 0.0 for r in rows)
    md = (out / "ner_gap.md").read_text()
    assert f"| tagger | n = 6 | n = {ns[1]} |" in md
    assert md.count("| CRFsuite at GPSL's prior") == 2 and "GPSL, chain decoder" in md
    assert ner_gap.PIECEWISE in md and ner_gap.AVERAGED in md
    # the oracle is the best of the grid's fits, at least the defaults' (variance 2, pair 4)
    for n in ns:
        got = {r["tagger"]: r for r in rows if r["n"] == n}
        oracle = got[ner_gap.GRID_BEST]
        assert oracle["f1"] >= max(got["GPSL (defaults: exact decoder)"]["f1"],
                                   got["GPSL, chain decoder"]["f1"]) - 1e-9
        assert oracle["setting"].startswith(("variance 1, pair variance 4",
                                             "variance 2, pair variance 4"))
    assert "The oracle's settings: n = 6: variance" in md


def test_missing_data_is_one_line(tmp_path, capsys):
    assert ner_gap.main(["--out", str(tmp_path), "--data", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not found" in err[0]
