"""``bench.paper``'s outputs: ``paper.md`` (Tables 1-3, Figure 3, calibration, exact decoding,
notes), ``missing_labels.html``, ``calibration.html`` and ``paper.json``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from bench.common import header_lines
from bench.paper_setup import (
    CRF_COMPLETE,
    GPSL_OFFSETS,
    N_BINS,
    PAPER_RNS,
    PAPER_TABLE1,
    PAPER_TABLE2,
)

# --------------------------------------------------------------------------- writers


def _f(v, digits=2, unit=""):
    return "–" if v is None else f"{v:.{digits}f}{unit}"


def _sec(v):
    if v is None:
        return "–"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def _ratio(v):
    if v is None:
        return "–"
    return f"{v:.1f}" if v >= 10 else f"{v:.2g}"


def write_markdown(report: dict, path: Path) -> None:
    cfg = report["config"]
    ds = list(report["results"])
    lines = header_lines("GPSL paper reproduction (section 6)", report["date"],
                         report["machine"], report["git"], report["command"])
    status = "complete" if report["complete"] else "INCOMPLETE (partial results so far)"
    lines += [
        f"Run {status}: {report.get('total_seconds', 0):.0f} s. "
        + (", ".join(f"{n} ({d})" for d, n in cfg["partitions_per_dataset"].items())
           if cfg.get("partitions_per_dataset") else str(cfg["n_partitions"]))
        + f" random partition(s) per data set from seed {cfg['seed']} (partition p of data "
        "set d is drawn from `SeedSequence([seed, crc32(d), p])`); train/test sentences: "
        + ", ".join(f"{d} {cfg['sizes'][d][0]}/{cfg['sizes'][d][1]}" for d in ds) + ".",
        "",
        "* GPSL: linear kernel, Algorithm 2 (RNS) decoding, features from each data set's CRF++ "
        "template; parameters: " + ", ".join(
            f"{k}={v}" for k, v in report["settings"]["gpsl"].items() if k != "offsets") + ".",
        "* CRFsuite (sklearn-crfsuite): L-BFGS, c1 = 0, c2 = 0.5, max 500 iterations, all "
        "possible states and transitions. Rule: CRF++'s default is L2 with C = 1 and CRF++ "
        "minimises -log-likelihood + ||w||²/(2C); CRFsuite minimises -log-likelihood + "
        "c2·||w||², so c2 = 1/(2C) = 0.5 gives the same objective. Features: the same template "
        "strings, `{string: 1.0}` per token.",
        "* CRFsuite-PA: passive-aggressive PA-I (C = 1, 100 epochs, averaged), an online "
        "cost-sensitive max-margin trainer of the same linear chain: the closest installable "
        "stand-in for the paper's SSVM. CRFsuite-AP: averaged structured perceptron (100 "
        "epochs). LogReg: scikit-learn multinomial logistic regression per token on the same "
        "features, C = 1 (no label dependencies).",
        "* Times are wall-clock seconds of one process; fit times include feature extraction; "
        "GPSL predict times are the first `predict_marginals` call after `fit` (it builds the "
        "predictive Cholesky factors).",
    ]
    if cfg.get("quick"):
        lines.append("* **--quick run**: fewer partitions, data sets, fractions, reduced sizes "
                     "and GPSL iterations; not comparable with the paper's numbers.")
    lines.append("")

    # Table 1
    lines += ["## Table 1: Hamming loss (%)", "",
              "Mean ± std over partitions; **bold** = best here; ★ = significantly different "
              "from the best (paired t-test, 5%). Paper columns: the paper's Table 1 (its CRF "
              "row is Bottou's SGD CRF, shown next to CRFsuite; its SSVM row next to "
              "CRFsuite-PA; ★ best-method marks, † GPstruct marks as printed).", ""]
    head = "| method |" + "".join(f" {d} | paper |" for d in ds)
    lines += [head, "|---|" + "---:|---:|" * len(ds)]
    paper_alias = {"CRFsuite": "CRF", "CRFsuite-PA": "SSVM"}
    methods = list(cfg["methods"])
    if any(PAPER_RNS in report["results"][d] for d in ds):  # derived from GPSL2's fits
        methods.insert(methods.index("GPSL2") + 1 if "GPSL2" in methods else 0, PAPER_RNS)
    shown = {paper_alias.get(m, m) for m in methods}
    extra_paper = [m for m in PAPER_TABLE1 if m not in shown]
    for m in methods + extra_paper:
        cells = []
        for d in ds:
            r = report["results"][d].get(m)
            if r and r["loss_mean"] is not None:
                s = f"{r['loss_mean']:.2f} ± {r['loss_std']:.2f}"
                s = f"**{s}**" if r["is_best"] else s
                s += " ★" if r["significant_vs_best"] else ""
            else:
                s = "–"
            pk = paper_alias.get(m, m)
            pv = PAPER_TABLE1.get(pk, {}).get(d)
            if pv:
                marks = pv[2].replace("best", "").replace("*", "★").replace("+", "†")
                ps = f"{pv[0]:.2f} ± {pv[1]:.2f}{(' ' + marks) if marks else ''}"
                ps = f"**{ps}**" if "best" in pv[2] else ps
                if pk != m and m in methods:
                    ps = f"{ps} ({pk})"
            else:
                ps = ""
            cells.append(f" {s} | {ps} |")
        label = m if m in methods else f"{m} (paper only)"
        lines.append(f"| {label} |" + "".join(cells))
    lab = []
    for d in ds:
        dd = report["data"][d]
        nf = _n_features(report["results"][d])
        lab.append(f" {dd['n_labels_pooled']} labels, "
                   f"{int(np.median(nf)) if nf else '–'} features | "
                   f"{dd['paper_n_labels']} labels, {dd['paper_n_features']} features |")
    lines += ["| *data* |" + "".join(lab), ""]

    # Table 2
    lines += ["## Table 2: training time", "",
              "Median seconds over partitions on this machine; × = ratio to CRFsuite's median "
              "in the same run. Paper: average seconds (Matlab, 3.2 GHz Intel).", "",
              "| data set | method | fit median (s) | × CRFsuite | predict median (s) | "
              "GPSL sweeps (median) | paper fit (s) |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for d in ds:
        for m, r in report["results"][d].items():
            ratio = r.get("ratio_fit_to_crfsuite")
            it = [v for v in (r.get("n_iter") or []) if v is not None]
            lines.append(f"| {d} | {m} | {_sec(r['fit_median_s'])} | "
                         f"{_ratio(ratio)} | "
                         f"{_sec(r['predict_median_s'])} | "
                         f"{int(np.median(it)) if it and m in GPSL_OFFSETS else '–'} | "
                         f"{_sec(r.get('paper_fit_s'))} |")
        if "GPstruct" in PAPER_TABLE2.get(d, {}):
            lines.append(f"| {d} | GPstruct (paper only) | | | | | "
                         f"{_sec(PAPER_TABLE2[d]['GPstruct'])} |")
    lines.append("")

    # Table 3
    lines += ["## Table 3: GPSL1, Algorithm 2 against Viterbi", ""]
    if report["table3"]:
        lines += ["Same fitted GPSL1 model and latent scores; t = paired t of Viterbi's loss "
                  "against Algorithm 2's (t > 0: Viterbi worse). Decode times: the decoder "
                  "alone on the test set's latent scores; latent = predictive means and "
                  "variances (shared by both). Iterations: `rns_iterations_` after "
                  "`predict_marginals`.", "",
                  "| data set | loss Alg. 2 | loss Viterbi | t | decode Alg. 2 (s) | decode "
                  "Viterbi (s) | latent (s) | mean iterations | paper: loss Alg.2 / Viterbi, t,"
                  " time Alg.2 / Viterbi, iterations |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for d, t in report["table3"].items():
            p = t.get("paper") or {}
            ps = (f"{p['loss_rns']} / {p['loss_viterbi']}, {p['t']}, {p['time_rns']} / "
                  f"{p['time_viterbi']}, {p['iterations']}" if p else "")
            lines.append(f"| {d} | {_f(t['loss_rns_mean'])} | {_f(t['loss_viterbi_mean'])} | "
                         f"{_f(t['t_viterbi_vs_rns'])} | {_sec(t['decode_rns_median_s'])} | "
                         f"{_sec(t['decode_viterbi_median_s'])} | {_sec(t['latent_median_s'])} "
                         f"| {_f(t['rns_iterations_mean'], 1)} | {ps} |")
    else:
        lines.append("GPSL1 was not run.")
    lines.append("")

    # Figure 3
    lines += ["## Figure 3: accuracy with missing training labels", ""]
    if report["missing_labels"]:
        lines += ["Token accuracy (%) on the test sentences, mean ± std over the partitions "
                  "named per data set (the first N partitions of Table 1), as a "
                  "fraction of the training labels is hidden (uniformly at random per token, "
                  "nested sets; hidden labels are `None` and marginalised by GPSL). Fraction 0 "
                  "= the Table 1 runs. CRFsuite is trained on the sentences left complete "
                  "(their mean number in brackets; – = none left). The paper's Figure 3 gives "
                  "no numbers (its plots are not in the source). Plot: `missing_labels.html`.",
                  ""]
        for d, ml in report["missing_labels"].items():
            names = list(ml["methods"])
            head = _figure3_title(f"**{d}**", ml)
            if ml.get("table1_max_abs_diff") is not None:
                head += (f"; run apart (`{ml['command']}`), its Table 1 losses differ from the "
                         f"main run's by at most {ml['table1_max_abs_diff']:.2f} points")
            lines += [head, "", "| missing | " + " | ".join(names) + " |",
                      "|---:|" + "---:|" * len(names)]
            for i, f in enumerate(ml["fractions"]):
                cells = []
                for m in names:
                    mm = ml["methods"][m]
                    v = mm["accuracy_mean"][i]
                    s = "–" if v is None else f"{v:.2f} ± {mm['accuracy_std'][i]:.2f}"
                    if m == CRF_COMPLETE and i > 0:
                        s += f" ({_f(ml['n_complete_mean'][i], 1)})"
                    cells.append(s)
                lines.append(f"| {f:.2f} | " + " | ".join(cells) + " |")
            lines.append("")
    else:
        lines += ["Not run.", ""]

    # calibration
    lines += ["## Calibration of the per-token marginals (beyond the paper)", ""]
    if report["calibration"]:
        lines += [f"Confidence = the largest marginal of a token, correct = its argmax is the "
                  f"gold label; ECE over {N_BINS} equal-width bins, per partition (mean ± std); "
                  "NLL and Brier over all labels of the data set. GPSL: RNS of Algorithm 2; "
                  "CRFsuite: forward-backward marginals; LogReg: predict_proba. Reliability "
                  "diagram: `calibration.html`.", "",
                  "| data set | method | ECE | NLL | Brier | mean confidence | accuracy |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for d, cal in report["calibration"].items():
            for m, c in cal.items():
                lines.append(f"| {d} | {m} | {_f(c['ece_mean'], 4)} ± {_f(c['ece_std'], 4)} | "
                             f"{_f(c['nll_mean'], 3)} | {_f(c['brier_mean'], 3)} | "
                             f"{_f(c['mean_confidence'], 3)} | {_f(c['accuracy'], 3)} |")
    else:
        lines.append("No method with marginals was run.")
    lines.append("")

    # exact decoding
    lines += ["## Exact pseudo-likelihood decoding for GPSL2 (beyond the paper)", ""]
    if report["exact_decoding"]:
        lines += ["The labelling maximising the product of GPSL2's pseudo-likelihood factors "
                  "prod_l softmax_q(b[l,q] + g₋₁[y_{l-1},q] + g₊₁[y_{l+1},q])[y_l], with b the "
                  "local score Algorithm 2 uses (the means m by default) and g = m_S + v_S/2, "
                  "found exactly by a Viterbi over label pairs "
                  "(O(L J³)), against Algorithm 2's per-token argmax. t > 0: the exact "
                  "maximiser's loss is higher. Log-PL gain: log PL(exact) − log PL(Algorithm 2) "
                  "per sentence (≥ 0 by construction).", "",
                  "| data set | loss Alg. 2 | loss exact | t | sentences differing | tokens "
                  "differing | mean log-PL gain | decode exact (s) | decode Alg. 2 (s) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for d, e in report["exact_decoding"].items():
            lines.append(f"| {d} | {_f(e['loss_rns_mean'])} | {_f(e['loss_exact_mean'])} | "
                         f"{_f(e['t_exact_vs_rns'])} | "
                         f"{_f(100 * e['frac_sentences_differ'], 1, '%')} | "
                         f"{_f(100 * e['frac_tokens_differ'], 2, '%')} | "
                         f"{_f(e['mean_log_pl_gain'], 3)} | {_sec(e['decode_exact_median_s'])} "
                         f"| {_sec(e['decode_rns_median_s'])} |")
    else:
        lines.append("GPSL2 was not run.")
    lines.append("")

    # notes
    notes = []
    for d in ds:
        for m, r in report["results"][d].items():
            if m not in GPSL_OFFSETS:
                continue
            it = [v for v in r.get("n_iter") or [] if v is not None]
            capped = sum(v >= cfg["max_iter"] for v in it)
            if capped:
                notes.append(f"{d} {m}: {capped}/{len(it)} fits stopped at max_iter "
                             f"{cfg['max_iter']} (not converged to tol "
                             f"{report['settings']['gpsl'].get('tol')}).")
            rit = [v for v in r.get("rns_iterations") or [] if v is not None]
            if rit and max(rit) >= 100:
                notes.append(f"{d} {m}: Algorithm 2 hit its iteration cap (100) on "
                             f"{sum(v >= 100 for v in rit)}/{len(rit)} test sets.")
    notes += above_paper_notes(report)
    for e in report["errors"]:
        notes.append(f"ERROR: {e}")
    if notes:
        lines += ["## Notes", ""] + [f"* {n}" for n in notes] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")


def _figure3_title(name: str, ml: dict) -> str:
    """``"basenp (2 partitions)"``: a data set's Figure 3 panel with its number of partitions
    (counted from the accuracy columns for reports written before ``n_partitions``)."""
    n = ml.get("n_partitions") or len(next(iter(ml["methods"].values()))["accuracy"][0])
    return f"{name} ({n} partition{'s' if n != 1 else ''})"


def above_paper_notes(report: dict) -> list[str]:
    """One note per GPSL model whose mean loss is above the paper's: by how much, and how
    that compares with the sampling error of the two means (different random partitions:
    standard error sd/sqrt(n) of ours, the paper's sd/sqrt(10)) and with the gap to the CRF
    peer in each source."""
    notes = []
    paper_crf = PAPER_TABLE1.get("CRF", {})
    for d, res in report["results"].items():
        crf = res.get("CRFsuite", {}).get("loss_mean")
        for m, r in res.items():
            if m not in GPSL_OFFSETS or r.get("loss_mean") is None:
                continue
            pub = PAPER_TABLE1.get(m, {}).get(d)
            if not pub or r["loss_mean"] <= pub[0]:
                continue
            losses = [v for v in r["losses"] if v is not None]
            se_ours = (r["loss_std"] or 0.0) / math.sqrt(len(losses))
            se_paper = pub[1] / math.sqrt(10)
            z = (r["loss_mean"] - pub[0]) / math.hypot(se_ours, se_paper)
            text = (f"{d} {m}: {r['loss_mean'] - pub[0]:+.2f} points above the paper "
                    f"({r['loss_mean']:.2f} against {pub[0]:.2f}); standard errors of the two "
                    f"means {se_ours:.2f} (ours, {len(losses)} partitions) and {se_paper:.2f} "
                    f"(the paper's sd {pub[1]:.2f} over 10 partitions), so the difference is "
                    f"{z:.1f} combined standard errors")
            if crf is not None and d in paper_crf:
                text += (f"; against the CRF peer ours is {r['loss_mean'] - crf:+.2f} "
                         f"(CRFsuite), the paper's {pub[0] - paper_crf[d][0]:+.2f} (its CRF)")
            notes.append(text + ".")
    return notes


def _n_features(results: dict) -> list:
    """GPSL's feature counts (template strings kept after ``min_freq``) per partition."""
    for m in GPSL_OFFSETS:
        if m in results:
            return [v for v in results[m].get("n_features") or [] if v is not None]
    return []


def _grid(n):
    cols = 1 if n == 1 else 2
    return math.ceil(n / cols), cols


def write_missing_html(report: dict, path: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    ml = report["missing_labels"]
    if not ml:
        return
    names = list(ml)
    rows, cols = _grid(len(names))
    fig = make_subplots(rows=rows, cols=cols,
                        subplot_titles=[_figure3_title(d, ml[d]) for d in names])
    colours = {"GPSL1": "#1f77b4", "GPSL2": "#ff7f0e", "GPSL4": "#2ca02c", CRF_COMPLETE: "#444"}
    for k, d in enumerate(names):
        r, c = divmod(k, cols)
        for m, mm in ml[d]["methods"].items():
            x = ml[d]["fractions"]
            fig.add_trace(go.Scatter(
                x=x, y=mm["accuracy_mean"],
                error_y={"type": "data", "array": [v or 0 for v in mm["accuracy_std"]]},
                mode="lines+markers", name=m, legendgroup=m, showlegend=k == 0,
                line={"color": colours.get(m), "dash": "dash" if m == CRF_COMPLETE else None}),
                row=r + 1, col=c + 1)
        fig.update_xaxes(title_text="fraction of training labels missing", row=r + 1, col=c + 1)
        fig.update_yaxes(title_text="test accuracy (%)", row=r + 1, col=c + 1)
    fig.update_layout(title="GPSL with missing training labels (paper Figure 3)",
                      template="plotly_white", height=420 * rows)
    fig.write_html(str(path), include_plotlyjs="cdn")


def write_calibration_html(report: dict, path: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    cal = report["calibration"]
    if not cal:
        return
    names = list(cal)
    rows, cols = _grid(len(names))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names)
    for k, d in enumerate(names):
        r, c = divmod(k, cols)
        fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfect calibration",
                                 line={"color": "#aaa", "dash": "dot"}, showlegend=k == 0,
                                 legendgroup="diag"), row=r + 1, col=c + 1)
        for m, cm in cal[d].items():
            pts = [b for b in cm["reliability"] if b["count"]]
            fig.add_trace(go.Scatter(
                x=[b["mean_confidence"] for b in pts], y=[b["accuracy"] for b in pts],
                mode="lines+markers", name=m, legendgroup=m, showlegend=k == 0,
                text=[f"{b['count']} tokens" for b in pts],
                hovertemplate="confidence %{x:.3f}<br>accuracy %{y:.3f}<br>%{text}",
                visible=True if m in ("GPSL2", "CRFsuite") else "legendonly"),
                row=r + 1, col=c + 1)
        fig.update_xaxes(title_text="mean confidence", range=[0, 1], row=r + 1, col=c + 1)
        fig.update_yaxes(title_text="accuracy", range=[0, 1], row=r + 1, col=c + 1)
    fig.update_layout(title="Reliability of per-token marginals (test partitions pooled)",
                      template="plotly_white", height=420 * rows)
    fig.write_html(str(path), include_plotlyjs="cdn")


def write_outputs(report: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "paper.json").write_text(json.dumps(report, indent=1, allow_nan=False),
                                    encoding="utf-8")
    write_markdown(report, out / "paper.md")
    write_missing_html(report, out / "missing_labels.html")
    write_calibration_html(report, out / "calibration.html")
