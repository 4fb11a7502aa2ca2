"""Where the gold-trained gap to CRFsuite comes from: the estimator or the prior.

GPSL fits the pseudo-likelihood of the chain under a Gaussian prior on every (feature, label)
weight; CRFsuite's default (the learning curve's peer, ``bench.crowd_lexicon``) fits the
chain's likelihood under an L1 + L2 penalty (c1 = c2 = 0.1) with weights only for the
(feature, label) pairs seen in training. This diagnosis puts CRFsuite at GPSL's prior, so
that only the estimator differs: L2 alone with ``c2 = 1 / (2 sigma^2)`` (the negative log of
the Gaussian N(0, sigma^2) prior, sigma^2 the ``ner`` set's variance, 2) and a weight for
every pair (``all_possible_states``), as GPSL's GP has; once more with CRFsuite's own feature
generation (only the seen pairs); and L2 alone at wider Gaussian priors (variance 5 and 10),
whether any Gaussian prior does what the L1 does. GPSL runs at its defaults (the exact
decoder) and with the chain decoder; beside them piecewise training and the best of GPSL's
own prior grid read off the test documents (:func:`gpsl_rows`). The gold of the first n
training sentences of the learning curve's shuffle, span F1 on the held-out documents
(section 2's split): a diagnosis on the reported documents, and no setting is chosen from it.

    python -m bench.ner_gap [--sizes 200,400,all] [--out bench/results] [--data DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import RESULTS_DIR, git_commit, header_lines, machine_info, now_iso, write_results

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "crowd-ner"
BASE = {"algorithm": "lbfgs", "max_iterations": 100, "all_possible_transitions": True}


def crf_settings(variance: float, wider=(5.0, 10.0)) -> dict:
    """CRFsuite's settings by row: its default; L2 alone at GPSL's prior variance with every
    (feature, label) pair and with the seen pairs only; and L2 alone at the ``wider`` prior
    variances (seen pairs), whether any Gaussian prior does what the default's L1 does."""
    def c2(v):
        return 1.0 / (2.0 * v)  # -log N(w; 0, v) = w^2 / (2 v) + const

    rows = {"CRFsuite default (c1 = c2 = 0.1, seen pairs)": {"c1": 0.1, "c2": 0.1},
            f"CRFsuite at GPSL's prior (L2 alone, c2 = {c2(variance):g}, every pair)":
                {"c1": 0.0, "c2": c2(variance), "all_possible_states": True},
            f"CRFsuite at GPSL's prior (L2 alone, c2 = {c2(variance):g}, seen pairs)":
                {"c1": 0.0, "c2": c2(variance)}}
    for v in wider:
        rows[f"CRFsuite, L2 alone at prior variance {v:g} (c2 = {c2(v):g}, seen pairs)"] = {
            "c1": 0.0, "c2": c2(v)}
    return rows


PIECEWISE = "GPSL, piecewise: local functions fitted alone, the full fit's transitions"
AVERAGED = "GPSL, the two fits' local scores averaged, the full fit's transitions"
GRID_BEST = "GPSL, the best of its prior grid on these documents (oracle)"
GRID = [(v, s) for v in (1.0, 2.0, 4.0, 8.0) for s in (4.0, 16.0)]


def gpsl_rows(X, y, Xte, gte, grid=None) -> list[dict]:
    """GPSL's rows at one size: its defaults with the exact and the chain decoder; the
    piecewise variants (Sutton and McCallum 2005: the local functions fitted with no pair
    functions, ``offsets=()``, decoded with the chain of the full fit's transitions
    :func:`gpsl.predict.chain_transitions`, alone and averaged with the full fit's local
    scores); and the best span F1 of ``grid`` (kernel variance, pair variance) x decoder
    (exact, chain), read off the test documents: an upper bound of what choosing GPSL's prior
    could give, not a setting."""
    from bench.crowd_real_methods import span_scores
    from gpsl.model import GPSL
    from gpsl.predict import chain_decode

    def f1(pred):
        return span_scores(gte, pred)["f1"]

    def labels(model, idx, lengths):
        parts = np.split(idx, np.cumsum(lengths)[:-1])
        return [[model.classes_[i] for i in part] for part in parts]

    c0 = time.process_time()
    m = GPSL(template="ner").fit(X, y)
    cpu = time.process_time() - c0
    rows = [{"tagger": "GPSL (defaults: exact decoder)", "f1": f1(m.predict(Xte)),
             "cpu_s": cpu},
            {"tagger": "GPSL, chain decoder", "f1": f1(m.predict(Xte, decoder="chain")),
             "cpu_s": cpu}]
    c0 = time.process_time()
    alone = GPSL(template="ner", offsets=()).fit(X, y)
    cpu_alone = time.process_time() - c0
    if list(alone.classes_) == list(m.classes_):
        b_full, lengths = m.local_scores(Xte)
        b_alone, _ = alone.local_scores(Xte)
        for name, b in ((PIECEWISE, b_alone), (AVERAGED, (b_full + b_alone) / 2.0)):
            idx = chain_decode(b, m.state_.m_S, lengths, m.offsets_)
            rows.append({"tagger": name, "f1": f1(labels(m, idx, lengths)),
                         "cpu_s": cpu + cpu_alone})
    best = None
    for v, s2 in GRID if grid is None else grid:
        c0 = time.process_time()
        g = GPSL(template="ner", variance=v, pair_variance=s2).fit(X, y)
        cpu_g = time.process_time() - c0
        for dec in ("exact", "chain"):
            score = f1(g.predict(Xte, decoder=dec))
            if best is None or score > best["f1"]:
                best = {"tagger": GRID_BEST, "f1": score, "cpu_s": cpu_g,
                        "setting": f"variance {v:g}, pair variance {s2:g}, {dec}"}
    return rows + ([best] if best else [])


def run(raw, sizes, log=print, grid=None) -> list[dict]:
    """One row per (n, tagger): span F1 and CPU seconds of the fit."""
    from bench.crowd_real_methods import span_scores, split_documents
    from bench.peers import fit_crfsuite, template_features
    from gpsl.features import NerFeatures, Template

    train, test = split_documents(raw.docs)
    order = np.random.default_rng(0).permutation(len(train))
    Xte = [raw.sents[i].tokens for i in test]
    gte = [raw.gold[i] for i in test]
    tmpl = Template.parse("ner")
    Fte = template_features(tmpl, Xte)
    rows = []
    for size in sizes:
        pick = [train[j] for j in (order if size == "all" else order[:int(size)])]
        X, y = [raw.sents[i].tokens for i in pick], [raw.gold[i] for i in pick]
        new = [{"n": len(pick), **r} for r in gpsl_rows(X, y, Xte, gte, grid)]
        for name, p in crf_settings(NerFeatures.VARIANCE).items():
            fit = fit_crfsuite(X, y, tmpl, {**BASE, **p})
            pred = [list(q) for q in fit.crf.predict(Fte)]
            new.append({"n": len(pick), "tagger": name, "f1": span_scores(gte, pred)["f1"],
                        "cpu_s": fit.cpu_s})
        for r in new:
            log(f"n={r['n']} {r['tagger']}: F1 {r['f1']:.2f}")
        rows += new
    return rows


def table(rows: list[dict]) -> list[str]:
    """Span F1 by tagger (rows) and n (columns)."""
    ns = sorted({r["n"] for r in rows})
    names = list(dict.fromkeys(r["tagger"] for r in rows))
    f1 = {(r["n"], r["tagger"]): r["f1"] for r in rows}
    out = ["| tagger | " + " | ".join(f"n = {n}" for n in ns) + " |", "|---" * (len(ns) + 1)
           + "|"]
    out += [f"| {t} | " + " | ".join(f"{f1[(n, t)]:.2f}" if (n, t) in f1 else "-" for n in ns)
            + " |" for t in names]
    best = [f"n = {r['n']}: {r['setting']}" for r in rows if r.get("setting")]
    if best:
        out += ["", "The oracle's settings: " + "; ".join(best) + "."]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="200,400,all")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR)
    ap.add_argument("--data", type=Path, default=DATA, help="the crowd-ner folder")
    args = ap.parse_args(argv)
    from bench.crowd_real_methods import DataMissing, check_data, load

    try:
        check_data(args.data, "raw")
    except DataMissing as e:
        print(f"bench.ner_gap: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    rows = run(load(args.data, "raw"), args.sizes.split(","))
    command = "python -m bench.ner_gap " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = header_lines("The gold gap: GPSL's pseudo-likelihood against CRFsuite at the same "
                         "prior", now_iso(), machine_info(), git_commit(), command.strip())
    lines += [f"* total time: {time.perf_counter() - t0:.0f} s", "",
              "Span F1 on the held-out documents, trained on the gold of the first n "
              "training sentences (the learning curve's shuffle).", ""] + table(rows) + [""]
    md = "\n".join(lines)
    print(md)
    write_results(args.out, "ner_gap", md, {"rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
