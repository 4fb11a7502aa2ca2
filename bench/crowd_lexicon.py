"""Section 4 of ``bench.crowd_real``: the lexical features' learning curve.

GPSL and CRFsuite (the same feature strings, in the same run) trained on the gold of the first
n sentences (100, 200, 400, 800 and all) of a fixed shuffle (seed 0) of the training documents
of ``raw/``, tested on the held-out documents (section 2's split), with the ``ner`` feature set
without lexical features (``ner:en:none``), with each lexical group alone (``ner:en:cluster``,
``ner:en:freq``) and with both (``ner:en:cluster,freq``). Each group's share is the F1 with
both minus the F1 without that group. ``ner`` itself is the clusters alone (the frequency
did not pay). Every fit runs in its own forked process at its own defaults
(GPSL: its stop rule and the ``ner`` set's own defaults, :attr:`gpsl.features.NerFeatures.
DEFAULTS`, chosen by ``bench.ner_cv``; CRFsuite: L-BFGS, c1 = c2 = 0.1, 100 iterations).
Also: what the tables add to the install (:func:`install_size`).
"""

from __future__ import annotations

import numpy as np

SIZES = (100, 200, 400, 800, None)  # None: all training sentences
VARIANTS = (("none", "ner:en:none"), ("cluster", "ner:en:cluster"), ("freq", "ner:en:freq"),
            ("both", "ner:en:cluster,freq"))


def install_size() -> dict:
    """Bytes the derived tables add to the package (``gpsl/data``), and per language."""
    from gpsl import lexicon

    files = sorted(lexicon.DATA.iterdir())
    return {"total_bytes": sum(p.stat().st_size for p in files),
            "files": {p.name: p.stat().st_size for p in files}}


def section_curve(raw, log, isolated, split_documents, span_scores, gpsl_tagger,
                  crfsuite_tagger) -> list[dict]:
    """One row per (n, variant, tagger)."""
    train, test = split_documents(raw.docs)
    order = np.random.default_rng(0).permutation(len(train))
    Xte = [raw.sents[i].tokens for i in test]
    gte = [raw.gold[i] for i in test]
    rows = []
    for n in SIZES:
        pick = [train[j] for j in (order if n is None else order[:n])]
        Xtr = [raw.sents[i].tokens for i in pick]
        ytr = [raw.gold[i] for i in pick]
        for group, tmpl in VARIANTS:
            for tagger, fn in (("GPSL", gpsl_tagger), ("CRFsuite", crfsuite_tagger)):
                out = isolated(fn, Xtr, ytr, Xte, tmpl)
                row = {"n": len(pick), "lexical": group, "template": tmpl, "tagger": tagger}
                if "error" in out:
                    row["error"] = out["error"]
                else:
                    row.update(span_scores(gte, out.pop("pred")))
                    row.update(cpu_s=out["cpu_s"])
                log(f"    n={len(pick)} {group} {tagger}: F1 {row.get('f1', float('nan')):.2f}")
                rows.append(row)
    return rows


def curve_lines(rows: list[dict], size: dict | None) -> list[str]:
    """The learning-curve table, each group's share and the install size."""
    if not rows:
        return []
    f1 = {(r["n"], r["lexical"], r["tagger"]): r.get("f1") for r in rows}
    ns = sorted({r["n"] for r in rows})
    head = ["## 4. Lexical features: the learning curve (gold labels, held-out documents)", "",
            "GPSL / CRFsuite span F1 with the same feature strings, trained on the first n "
            "training sentences of a fixed shuffle.", "",
            "| n | " + " | ".join(f"{g}: GPSL / CRFsuite" for g, _ in VARIANTS)
            + " | GPSL - CRFsuite (ner = cluster) | cluster's share | freq's share |",
            "|---" * (len(VARIANTS) + 4) + "|"]

    def fmt(v):
        return "-" if v is None else f"{v:.2f}"

    for n in ns:
        cells = [f"{fmt(f1.get((n, g, 'GPSL')))} / {fmt(f1.get((n, g, 'CRFsuite')))}"
                 for g, _ in VARIANTS]
        both = f1.get((n, "both", "GPSL"))
        ner, crf = f1.get((n, "cluster", "GPSL")), f1.get((n, "cluster", "CRFsuite"))
        gap = "-" if None in (ner, crf) else f"{ner - crf:+.2f}"
        shares = []
        for without in ("freq", "cluster"):  # both groups minus the row without the group
            o = f1.get((n, without, "GPSL"))
            shares.append("-" if None in (both, o) else f"{both - o:+.2f}")
        head.append(f"| {n} | " + " | ".join(cells) + f" | {gap} | {shares[0]} | "
                    f"{shares[1]} |")
    head.append("")
    if size:
        head += [f"The tables add {size['total_bytes'] / 1e6:.2f} MB to the install ("
                 + ", ".join(f"{k} {v / 1e3:.0f} kB" for k, v in size["files"].items())
                 + "); the spacy-lookups-data wheel (98 MB) is not installed.", ""]
    return head
