"""A real crowd: CoNLL-2003 NER labeled by 46 Mechanical Turk workers, against every aggregator.

::

    nice python -m bench.crowd_real              # the whole run (about 10 minutes on 2 cores)
    python -m bench.crowd_real --quick           # sections 1-2 without GLAD, MACE and the
                                                 # lever rows (about 3 minutes)
    python -m bench.crowd_real --data jsonl --no-taggers   # section 1 on val.crowd.jsonl
    python -m bench.crowd_real --taggers-only    # sections 2-3 only
    python -m bench.crowd_real --variances 0.003 0.01 0.03 0.1 0.3 --no-taggers --methods \
        "gpsl Dawid-Skene"                       # the joint bound and F1 against sigma^2
    python -m bench.crowd_real --priors 1:30 3:30 10:30 --no-taggers --methods \
        "gpsl Dawid-Skene"                       # ... against the sequential priors

The data (``../shared/data/crowd-ner``, read in place; its README): the validation half of
Rodrigues et al.'s crowd, as one folder per annotator (``raw/``, read with
:func:`gpsl.io.crowd_raw.read_crowd_folder`, which aligns each worker's tokens to the gold) or as
the published ``val.crowd.jsonl`` (worker sentences kept only when tokenised identically).

1. **Inferred labels** of every voted sentence against the gold: crowd-kit 1.4.2's majority
   vote, Dawid-Skene (``n_iter=100``), GLAD, MACE and one-coin Dawid-Skene; gpsl's
   Dawid-Skene; the joint model :class:`gpsl.crowd.CrowdGPSL` with and without the
   sequential annotator model, the ``ner`` feature set and Jensen's bound on the
   log-partition (the levers; a table gives each one's share in span F1 and in the bound),
   all with the same votes in the same run. Span precision/recall/F1 (exact match,
   conlleval rules, as seqeval), token accuracy, CPU and wall seconds of the fit, peak
   memory (the resident set's growth during the fit: every method runs in its own forked
   process). The joint rows also
   give the F1 of the plain argmax of the posteriors (the span-valid decoding's share) and
   the sweeps of the fit. The published figures of the data's README come in their own rows:
   they used other protocols and are not comparable with the measured rows.
2. **Taggers trained on gold**, tested on held-out whole documents (every fifth document of
   ``raw/`` by name, 20%): GPSL with the default word-window template, GPSL with ``ner``, and
   CRFsuite (sklearn-crfsuite, L-BFGS, c1 = c2 = 0.1, 100 iterations, all transitions, as its
   NER tutorial) on the same ``ner`` feature strings.
3. **Taggers trained on the crowd** (not with ``--quick``): the joint model fitted on the
   votes of the training documents only, its tagger refit with GPSL's defaults and ``ner`` on
   the inferred labels (:class:`gpsl.crowd.CrowdGPSL`), against GPSL ``ner`` trained on the
   gold of the same documents (section 2); CRFsuite trained on crowd-kit's majority-vote and
   Dawid-Skene labels, and on the joint model's labels.

4. **The lexical features' learning curve** (:mod:`bench.crowd_lexicon`; ``--curve`` runs
   it alone, ``--no-curve`` leaves it out): GPSL and CRFsuite on the gold of 100, 200, 400,
   800 and all training sentences, with and without each lexical group of ``ner``, and the
   install size of the tables.

Section 1 also has the joint model at the priors chosen by held-out votes
(:mod:`gpsl.crowd.priors`; ``--priors ... --heldout`` gives any setting's held-out-vote
score) and section 3 the joint fit's own tagger and the refit on the joint posteriors (soft
labels, :func:`gpsl.crowd.joint.fit_soft`) at the prior variance chosen by held-out votes
(``refit_prior="heldout"``, ``train --crowd``'s default) and at GPSL's own, beside GPSL
trained on gold at the same variance.

Acceptance (issue 27): the joint model's span F1 at least crowd-kit's best + 5 points, its fit
within 3 minutes, the crowd-trained tagger within 3 points of the gold-trained one.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import crowd_lexicon
from bench.common import (
    REPO,
    RESULTS_DIR,
    DataMissing,
    git_commit,
    header_lines,
    jsonable,
    machine_info,
    now_iso,
)
from bench.crowd_real_methods import (
    Data,
    as_sentences,
    check_data,
    crfsuite_tagger,
    crowd_tagger,
    crowdkit_labels,
    gpsl_ds_labels,
    gpsl_tagger,
    isolated,
    joint_heldout_score,
    joint_labels,
    joint_rule_labels,
    load,
    span_scores,
    split_documents,
    votes_of,
)

DATA_DIR = REPO.parent / "shared" / "data" / "crowd-ner"

#: span F1 of the inferred training labels published for this data (the data's README)
PUBLISHED = (
    ("majority vote", 65.4, "Simpson and Gurevych 2019, their protocol"),
    ("Dawid-Skene", 74.4, "Simpson and Gurevych 2019, their protocol"),
    ("HMM-Crowd", 74.2, "Simpson and Gurevych 2019, their protocol"),
    ("BSC-seq", 77.4, "Simpson and Gurevych 2019, their protocol"),
    ("majority vote", 66.8, "data README, val.crowd.jsonl, seqeval"),
    ("crowd-kit DawidSkene(n_iter=100)", 71.7, "data README, val.crowd.jsonl, seqeval"),
)
CROWDKIT = ("crowd-kit majority vote", "crowd-kit Dawid-Skene", "crowd-kit GLAD",
            "crowd-kit MACE", "crowd-kit one-coin")
JOINT = "gpsl joint: sequential + ner (default)"
RULE = "gpsl joint: sequential + ner, priors by held-out votes"
NO_CROSSFIT = "gpsl joint: sequential + ner, no cross-fitted rounds"
#: the joint model's variants: (annotator model, template, lse_bound) -> row name
JOINT_ROWS = {
    ("confusion", None, "auto"): "gpsl joint: confusion + word windows",
    ("confusion", "ner", "auto"): "gpsl joint: confusion + ner",
    ("sequential", None, "auto"): "gpsl joint: sequential + word windows",
    ("sequential", "ner", "bohning"): "gpsl joint: sequential + ner, Boehning's bound",
    ("sequential", "ner", "auto"): JOINT,
}
#: each lever's share: the default against the row without that lever
LEVERS = (("the cross-fitted rounds (gpsl.crowd.crossfit)", NO_CROSSFIT),
          ("the sequential annotator model", "gpsl joint: confusion + ner"),
          ("the ner feature set", "gpsl joint: sequential + word windows"),
          ("Jensen's bound in the joint fit", "gpsl joint: sequential + ner, Boehning's bound"),
          ("the tagger (joint fit) and the sequential model together", "gpsl Dawid-Skene"))
TARGET_MARGIN = 5.0
TARGET_SECONDS = 180.0
TARGET_TAGGER_GAP = 3.0


@dataclass
class Config:
    data: str = "raw"
    quick: bool = False
    data_dir: str = str(DATA_DIR)
    out_dir: str = str(RESULTS_DIR)
    max_iter: int = 100
    verbose: bool = True
    methods: list = field(default_factory=list)
    taggers: bool = True
    variances: list = field(default_factory=list)
    priors: list = field(default_factory=list)  # (kappa, shrink[, centre target])
    heldout: bool = False  # the held-out-vote score of every --priors/--variances row too
    curve: bool = True  # section 4, the lexical features' learning curve
    curve_only: bool = False
    taggers_only: bool = False  # sections 2-3 only


# --------------------------------------------------------------------------- the run


def methods_of_section_1() -> list[str]:
    """Every row of section 1, in the table's order."""
    return (list(CROWDKIT) + ["gpsl Dawid-Skene"] + list(JOINT_ROWS.values())
            + [NO_CROSSFIT, RULE])


def section_aggregation(cfg: Config, data: Data, log) -> list[dict]:
    votes = votes_of(data.sents)
    X = [s.tokens for s in data.sents]
    rows = []
    methods = methods_of_section_1()
    if cfg.quick:
        methods = [m for m in methods if m not in ("crowd-kit GLAD", "crowd-kit MACE")
                   and (not m.startswith("gpsl joint") or m == JOINT)]
    if cfg.methods:
        methods = [m for m in methods if m in cfg.methods]
    for name in methods:
        log(f"  {name} ...")
        if name in CROWDKIT:
            out = isolated(crowdkit_labels, name, votes)
        elif name == "gpsl Dawid-Skene":
            out = isolated(gpsl_ds_labels, votes)
        elif name == RULE:
            out = isolated(joint_rule_labels, votes, X, cfg.max_iter)
        elif name == NO_CROSSFIT:
            out = isolated(joint_labels, votes, X, "sequential", "ner", cfg.max_iter, None,
                           "auto", {"crossfit": 0})
        else:
            (am, tmpl, lse), = [k for k, v in JOINT_ROWS.items() if v == name]
            out = isolated(joint_labels, votes, X, am, tmpl, cfg.max_iter, None, lse)
        row = {"method": name}
        if "error" in out:
            row["error"] = out["error"]
            log(f"    failed: {out['error']}")
            rows.append(row)
            continue
        row.update(span_scores(data.gold, as_sentences(out.pop("labels"), votes.lengths)))
        if "argmax_labels" in out:
            am_scores = span_scores(data.gold, as_sentences(out.pop("argmax_labels"),
                                                            votes.lengths))
            row["f1_argmax"] = am_scores["f1"]
        row.update(out)
        log(f"    F1 {row['f1']:.2f}  CPU {row['cpu_s']:.1f} s  wall {row['wall_s']:.1f} s")
        rows.append(row)
    extra = [(f"gpsl joint: sequential + ner, sigma^2 = {var:g}", {"variance_fixed": var},
              (var, "auto", {})) for var in cfg.variances]
    extra += [(f"gpsl joint: sequential + ner, kappa = {k:g}, shrink = {sh:g}"
               + ("" if target == "one-coin" else f", {target} target"),
               {"kappa": k, "shrink": sh, "centre_target": target},
               (None, "auto", {"kappa": k, "shrink": sh, "centre_target": target}))
              for k, sh, target in ((*pq, "one-coin")[:3] for pq in cfg.priors)]
    for name, fixed, (var, lse, crowd_kw) in extra:
        log(f"  {name} ...")
        out = isolated(joint_labels, votes, X, "sequential", "ner", cfg.max_iter, var, lse,
                       crowd_kw)
        row = {"method": name, **fixed}
        if "error" in out:
            row["error"] = out["error"]
        else:
            row.update(span_scores(data.gold, as_sentences(out.pop("labels"), votes.lengths)))
            row["f1_argmax"] = span_scores(data.gold, as_sentences(out.pop("argmax_labels"),
                                                                   votes.lengths))["f1"]
            row.update(out)
            log(f"    F1 {row['f1']:.2f}  bound {row['bound']:.1f}")
        if cfg.heldout and "error" not in row:
            ho = isolated(joint_heldout_score, votes, X, cfg.max_iter, crowd_kw, var)
            if "error" in ho:
                row["heldout_error"] = ho["error"]
            else:
                row.update(heldout_log_lik=ho["heldout_log_lik"],
                           heldout_votes=ho["heldout_votes"], heldout_cpu_s=ho["cpu_s"])
                log(f"    held-out votes {ho['heldout_log_lik']:.1f} nats")
        rows.append(row)
    return rows


def section_taggers(cfg: Config, raw: Data, log) -> tuple[list[dict], list[dict]]:
    """Sections 2 and 3 on held-out documents of ``raw/``."""
    train, test = split_documents(raw.docs)
    Xtr = [raw.sents[i].tokens for i in train]
    Xte = [raw.sents[i].tokens for i in test]
    gtr = [raw.gold[i] for i in train]
    gte = [raw.gold[i] for i in test]
    split = {"train_sentences": len(train), "test_sentences": len(test),
             "train_tokens": int(sum(len(x) for x in Xtr)),
             "test_tokens": int(sum(len(x) for x in Xte)),
             "test_documents": len({raw.docs[i] for i in test})}

    def score(name, out, labels_from=None, **extra):
        row = {"tagger": name, **extra}
        if "error" in out:
            row["error"] = out["error"]
            log(f"    failed: {out['error']}")
            return row
        row.update(span_scores(gte, out.pop("pred")))
        out.pop("labels", None)
        row.update(out)
        if labels_from is not None:
            row["training_labels_f1"] = labels_from
        log(f"    {name}: F1 {row['f1']:.2f}  CPU {row['cpu_s']:.1f} s")
        return row

    gold_rows = []
    log("  gold-trained taggers ...")
    gold_rows.append(score("GPSL, word windows (default template)",
                           isolated(gpsl_tagger, Xtr, gtr, Xte, None), labels="gold"))
    gold_rows.append(score("GPSL, ner", isolated(gpsl_tagger, Xtr, gtr, Xte, "ner"),
                           labels="gold"))
    gold_rows.append(score("CRFsuite, ner features", isolated(crfsuite_tagger, Xtr, gtr, Xte),
                           labels="gold"))
    for r in gold_rows:
        r["split"] = split
    if cfg.quick:
        return gold_rows, []
    log("  crowd-trained taggers ...")
    votes = votes_of(raw.sents, train)
    crowd_rows = []
    out = isolated(crowd_tagger, votes, Xtr, Xte)
    joint_train = None if "error" in out else as_sentences(out["labels"], votes.lengths)
    lab_f1 = None if joint_train is None else span_scores(gtr, joint_train)["f1"]
    extra = [] if "error" in out else [
        ("GPSL, ner, the joint fit's own tagger (echo prior)", {"pred": out.pop("own_pred"),
                                                                "cpu_s": 0.0, "wall_s": 0.0}),
        ("GPSL, ner, refit on the joint posteriors at GPSL's own variance (refit_prior="
         "'model')", {"pred": out.pop("model_var_pred"), "cpu_s": out.pop("model_var_cpu_s"),
                      "wall_s": 0.0}),
        ("GPSL, ner, refit on the joint model's argmax labels",
         {"pred": out.pop("hard_pred"), "cpu_s": out.pop("hard_cpu_s"), "wall_s": 0.0})]
    crowd_rows.append(score("GPSL, ner, refit on the joint model's posteriors at the "
                            "held-out-vote variance (train --crowd)",
                            out, labels_from=lab_f1, labels="joint model"))
    for name, o in extra:
        crowd_rows.append(score(name, o, labels_from=lab_f1, labels="joint model"))
    if "refit_variance" in crowd_rows[0]:  # the gold-trained tagger at the same variance
        v = crowd_rows[0]["refit_variance"]
        crowd_rows.append(score(f"GPSL, ner, on gold at the crowd rule's variance ({v:g})",
                                isolated(gpsl_tagger, Xtr, gtr, Xte, "ner", v),
                                labels="gold"))
    for name, lab_name in (("crowd-kit majority vote", "majority vote"),
                           ("crowd-kit Dawid-Skene", "crowd-kit Dawid-Skene")):
        agg = isolated(crowdkit_labels, name, votes)
        if "error" in agg:
            crowd_rows.append({"tagger": f"CRFsuite on {lab_name}", "error": agg["error"]})
            continue
        ytr = as_sentences(agg["labels"], votes.lengths)
        crowd_rows.append(score(f"CRFsuite, ner features, on {lab_name} labels",
                                isolated(crfsuite_tagger, Xtr, ytr, Xte),
                                labels_from=span_scores(gtr, ytr)["f1"], labels=lab_name))
    if joint_train is not None:
        crowd_rows.append(score("CRFsuite, ner features, on the joint model's labels",
                                isolated(crfsuite_tagger, Xtr, joint_train, Xte),
                                labels_from=lab_f1, labels="joint model"))
    for r in crowd_rows:
        r["split"] = split
    return gold_rows, crowd_rows


def acceptance(report: dict) -> dict:
    rows = {r["method"]: r for r in report["aggregation"] if "f1" in r}
    ck = [rows[m] for m in CROWDKIT if m in rows]
    out: dict = {}
    if ck and JOINT in rows:
        best = max(ck, key=lambda r: r["f1"])
        j = rows[JOINT]
        out["best_crowdkit"] = {"method": best["method"], "f1": best["f1"]}
        out["joint_f1"] = j["f1"]
        out["margin"] = j["f1"] - best["f1"]
        out["f1_met"] = out["margin"] >= TARGET_MARGIN
        out["joint_cpu_s"] = j["cpu_s"]
        out["joint_wall_s"] = j["wall_s"]
        out["time_met"] = j["wall_s"] <= TARGET_SECONDS
        out["converged"] = j.get("sweeps", 0) < j.get("max_iter", 0)
    gold = {r["tagger"]: r for r in report.get("gold_taggers", []) if "f1" in r}
    crowd = [r for r in report.get("crowd_taggers", []) if "f1" in r
             and r["tagger"].startswith("GPSL")]
    if crowd and "GPSL, ner" in gold:
        out["crowd_tagger_f1"] = crowd[0]["f1"]
        out["gold_tagger_f1"] = gold["GPSL, ner"]["f1"]
        out["tagger_gap"] = gold["GPSL, ner"]["f1"] - crowd[0]["f1"]
        out["tagger_met"] = out["tagger_gap"] <= TARGET_TAGGER_GAP
    return out


def _f(v, d=2):
    return "-" if v is None else f"{v:.{d}f}"


def table_lines(report: dict) -> list[str]:
    lines = ["## 1. Inferred labels of the voted sentences "
             f"({report['settings']['data']})", "",
             "| method | span P | span R | span F1 | F1 argmax | token acc. | CPU s | wall s | "
             "peak MB | sweeps | bound J1 |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["aggregation"]:
        if "error" in r:
            lines.append(f"| {r['method']} | failed: {r['error']} ||||||||||")
            continue
        lines.append(f"| {r['method']} | {_f(r['precision'])} | {_f(r['recall'])} | "
                     f"**{_f(r['f1'])}** | {_f(r.get('f1_argmax'))} | "
                     f"{_f(r['token_accuracy'])} | {_f(r['cpu_s'], 1)} | {_f(r['wall_s'], 1)}"
                     f" | {_f(r['peak_mb'], 0)} | {r.get('sweeps', '-')} | "
                     f"{_f(r.get('bound'), 0)} |")
    for name, f1, where in PUBLISHED:
        lines.append(f"| *published: {name}* ({where}) | | | *{f1:.1f}* | | | | | | | |")
    lines.append("")
    ho = [r for r in report["aggregation"] if "heldout_log_lik" in r]
    if ho:
        lines += ["The held-out-vote score of each row's setting (gpsl.crowd.priors: the joint "
                  f"fit on the kept votes, {ho[0]['heldout_votes']} votes left out, their log "
                  "predictive probability; no gold read) beside its span F1 on all votes:", "",
                  "| setting | held-out log-lik (nats) | span F1 | J1 |", "|---|---|---|---|"]
        lines += [f"| {r['method']} | {r['heldout_log_lik']:.1f} | {_f(r['f1'])} | "
                  f"{_f(r.get('bound'), 0)} |" for r in ho]
        lines.append("")
    lines += lever_lines(report)
    for key, title in (("gold_taggers", "## 2. Taggers trained on gold, held-out documents"),
                       ("crowd_taggers", "## 3. Taggers trained on the crowd, held-out "
                                         "documents")):
        rows = report.get(key) or []
        if not rows:
            continue
        sp = next((r["split"] for r in rows if "split" in r), {})
        lines += [title, "",
                  f"{sp.get('train_sentences')} training sentences ({sp.get('train_tokens')} "
                  f"tokens), {sp.get('test_sentences')} test sentences ({sp.get('test_tokens')}"
                  f" tokens) of {sp.get('test_documents')} held-out documents.", "",
                  "| tagger | training labels (span F1 vs gold) | span P | span R | span F1 "
                  "| token acc. | CPU s | wall s |", "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            if "error" in r:
                lines.append(f"| {r['tagger']} | failed: {r['error']} |||||||")
                continue
            src = r.get("labels", "")
            if r.get("training_labels_f1") is not None:
                src += f" ({r['training_labels_f1']:.2f})"
            lines.append(f"| {r['tagger']} | {src} | {_f(r['precision'])} | {_f(r['recall'])}"
                         f" | **{_f(r['f1'])}** | {_f(r['token_accuracy'])} | "
                         f"{_f(r['cpu_s'], 1)} | {_f(r['wall_s'], 1)} |")
        lines.append("")
    return lines


def lever_lines(report: dict) -> list[str]:
    """Each lever's share: the default joint row against the row without the lever (span F1
    and the bound J1 where both rows have one)."""
    rows = {r["method"]: r for r in report["aggregation"] if "f1" in r}
    if JOINT not in rows:
        return []
    j = rows[JOINT]
    out = []
    for lever, other in LEVERS:
        if other not in rows:
            continue
        o = rows[other]
        dj = (f"{j['bound'] - o['bound']:+.0f}" if j.get("bound") is not None
              and o.get("bound") is not None else "-")
        out.append(f"| {lever} | {other} | {_f(o['f1'])} | {j['f1'] - o['f1']:+.2f} | {dj} |")
    if not out:
        return []
    return ["Each lever's share: the default joint row against the row without the lever "
            "(the bound's change where both rows are joint fits of the same votes).", "",
            "| lever | row without it | its span F1 | F1 gained | J1 gained |",
            "|---|---|---|---|---|", *out, ""]


def summary_lines(report: dict) -> list[str]:
    a = report.get("acceptance") or {}
    lines = ["## Acceptance (issue 27)", ""]
    if "margin" in a:
        lines.append(f"* span F1 of the joint model {a['joint_f1']:.2f} against crowd-kit's best "
                     f"({a['best_crowdkit']['method']}) {a['best_crowdkit']['f1']:.2f}: "
                     f"{a['margin']:+.2f} points (target +{TARGET_MARGIN:.0f}): "
                     f"{'met' if a['f1_met'] else 'NOT met'}")
        lines.append(f"* the joint fit: {a['joint_cpu_s']:.0f} CPU s, {a['joint_wall_s']:.0f} "
                     f"wall s (target {TARGET_SECONDS:.0f} s wall: "
                     f"{'met' if a['time_met'] else 'NOT met'}), "
                     f"{'converged' if a['converged'] else 'stopped at max_iter'}")
    if "tagger_gap" in a:
        lines.append(f"* the tagger trained on the crowd {a['crowd_tagger_f1']:.2f} against the "
                     f"same tagger on gold {a['gold_tagger_f1']:.2f}: {a['tagger_gap']:.2f} "
                     f"points behind (aim: within {TARGET_TAGGER_GAP:.0f}): "
                     f"{'met' if a['tagger_met'] else 'NOT met'}")
    return lines + [""]


def notes_lines(report: dict) -> list[str]:
    al = report.get("alignment")
    out = ["Methods run one at a time in their own forked process (CPU seconds are that "
           "process's; peak MB is the growth of its resident set during the fit). Span "
           "scores: exact-match spans, conlleval rules (gpsl.metrics.chunk_scores, seqeval). A "
           "token without a label (no vote, a tie) counts as O. *F1 argmax*: the joint model's "
           "posteriors decoded token by token instead of as the most probable span-valid "
           "sequence. The joint model: gpsl.crowd.CrowdGPSL with its defaults (the tagger's "
           "prior variance 1 / features per token, Jensen's bound on the log-partition, stop "
           "rule 1e-4), GPSL's default settings otherwise; *word windows* is GPSL's default "
           "template over the one word column; *Boehning's bound*: the scalable mode's own "
           "bound on the log-partition in the joint fit."]
    if al:
        out += ["", f"raw/ read by gpsl.io.crowd_raw.read_crowd_folder: {al['votes']} votes kept "
                f"from {al['worker_tokens']} worker tokens ({al['dropped_tokens']} dropped: "
                + ", ".join(f"{k} {v}" for k, v in sorted(al["dropped"].items()))
                + f"); the identical-sentence rule of val.crowd.jsonl keeps "
                  f"{al['identical_votes']}; {al['sentences_kept']} of {al['gold_sentences']} "
                  "gold sentences have votes."]
    return out + [""]


def write_outputs(report: dict, out: Path, stem: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    meta = report["meta"]
    lines = header_lines("A real crowd: CoNLL-2003 NER from 46 Mechanical Turk workers",
                         meta["date"], meta["machine"], meta["git"], meta["command"])
    lines += [f"* total time: {meta.get('total_seconds', 0):.0f} s", ""]
    lines += summary_lines(report) + notes_lines(report) + table_lines(report)
    lines += crowd_lexicon.curve_lines(report.get("curve") or [], report.get("install"))
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / f"{stem}.json").write_text(json.dumps(jsonable(report), indent=1) + "\n",
                                      encoding="utf-8")


def run(cfg: Config, command: str = "") -> dict:
    def log(msg):
        if cfg.verbose:
            print(msg, file=sys.stderr, flush=True)

    data_dir = Path(cfg.data_dir)
    check_data(data_dir, cfg.data)
    meta = {"command": command, "date": now_iso(), "machine": machine_info(),
            "git": git_commit()}
    t0 = time.perf_counter()
    log(f"section 1 ({cfg.data}) ...")
    data = load(data_dir, cfg.data)
    report = {"meta": meta, "settings": {"data": cfg.data, "quick": cfg.quick,
                                         "max_iter": cfg.max_iter},
              "alignment": data.alignment,
              "aggregation": [] if cfg.curve_only or cfg.taggers_only
              else section_aggregation(cfg, data, log),
              "install": crowd_lexicon.install_size()}
    raw = data if cfg.data == "raw" else load(data_dir, "raw")
    if cfg.taggers and not cfg.methods and not cfg.curve_only:
        log("sections 2-3 (held-out documents of raw/) ...")
        report["gold_taggers"], report["crowd_taggers"] = section_taggers(cfg, raw, log)
    if cfg.curve_only or (cfg.curve and cfg.taggers and not cfg.methods and not cfg.quick
                          and not cfg.taggers_only):
        log("section 4 (the lexical features' learning curve) ...")
        report["curve"] = crowd_lexicon.section_curve(raw, log, isolated, split_documents,
                                                      span_scores, gpsl_tagger,
                                                      crfsuite_tagger)
    report["acceptance"] = acceptance(report)
    meta["total_seconds"] = time.perf_counter() - t0
    return report


def stem_of(cfg: Config) -> str:
    return "crowd_real" + ("" if cfg.data == "raw" else f"_{cfg.data}") + \
        ("_quick" if cfg.quick else "") + ("_variances" if cfg.variances else "") + \
        ("_priors" if cfg.priors else "") + ("_heldout" if cfg.heldout else "") + \
        ("_curve" if cfg.curve_only else "") + \
        ("_taggers" if cfg.taggers_only else "") + \
        ("_partial" if cfg.methods and not (cfg.variances or cfg.priors) else "")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.crowd_real",
                                description=__doc__.split("\n")[0])
    p.add_argument("--data", choices=("raw", "jsonl"), default="raw",
                   help="section 1's input: raw/ (aligned by gpsl, default) or val.crowd.jsonl")
    p.add_argument("--quick", action="store_true",
                   help="without GLAD, MACE, the joint model's lever rows and section 3")
    p.add_argument("--methods", nargs="+", metavar="NAME",
                   help="only these rows of section 1 (and no sections 2-3)")
    p.add_argument("--priors", nargs="+", default=[], metavar="KAPPA:SHRINK[:pooled]",
                   help="extra rows: the joint model with the sequential prior's kappa and "
                        "shrink at each pair (its bound beside its F1); ':pooled' the "
                        "crowd's matrix as the centres' target")
    p.add_argument("--heldout", action="store_true",
                   help="with --priors or --variances: each row's held-out-vote score too "
                        "(the rule's fold, one more joint fit a row)")
    p.add_argument("--variances", type=float, nargs="+", default=[], metavar="S2",
                   help="extra rows: the joint model with the tagger's prior variance fixed "
                        "at each S2 (its bound beside its F1)")
    p.add_argument("--no-taggers", action="store_true",
                   help="section 1 only (no taggers on held-out documents)")
    p.add_argument("--curve", action="store_true",
                   help="section 4 only: the lexical features' learning curve")
    p.add_argument("--no-curve", action="store_true", help="without section 4")
    p.add_argument("--taggers-only", action="store_true",
                   help="sections 2-3 only (the taggers on held-out documents)")
    p.add_argument("--max-iter", type=int, default=100, help="the joint fits' sweeps (100)")
    p.add_argument("--out", default=str(RESULTS_DIR), help="output folder (bench/results)")
    p.add_argument("--data-dir", default=str(DATA_DIR), help=argparse.SUPPRESS)
    p.add_argument("-q", "--quiet", action="store_true")
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    known = methods_of_section_1()
    bad = [m for m in (args.methods or []) if m not in known]
    if bad:
        print(f"bench.crowd_real: unknown method {bad[0]!r}; choose from {', '.join(known)}",
              file=sys.stderr)
        return 2
    try:
        priors = []
        for pair in args.priors:
            parts = pair.split(":")
            target = parts.pop() if len(parts) == 3 else "one-coin"
            k, sh = (float(v) for v in parts)
            if len(parts) != 2 or min(k, sh) <= 0 or target not in ("one-coin", "pooled"):
                raise ValueError
            priors.append((k, sh, target))
    except ValueError:
        print("bench.crowd_real: --priors takes KAPPA:SHRINK[:pooled] with positive numbers",
              file=sys.stderr)
        return 2
    cfg = Config(data=args.data, quick=args.quick, data_dir=args.data_dir, out_dir=args.out,
                 max_iter=args.max_iter, verbose=not args.quiet, methods=list(args.methods or []),
                 taggers=not args.no_taggers, variances=list(args.variances),
                 priors=priors, curve=not args.no_curve, curve_only=args.curve,
                 taggers_only=args.taggers_only, heldout=args.heldout)
    command = shlex.join(["python", "-m", "bench.crowd_real", *argv])
    try:
        report = run(cfg, command=command)
    except (DataMissing, ValueError, OSError) as exc:
        print(f"bench.crowd_real: {exc}", file=sys.stderr)
        return 2
    write_outputs(report, Path(cfg.out_dir), stem_of(cfg))
    print(f"command: {command}")
    print("\n".join(table_lines(report) + summary_lines(report)
                    + crowd_lexicon.curve_lines(report.get("curve") or [],
                                                report.get("install"))))
    print(f"wrote {Path(cfg.out_dir) / (stem_of(cfg) + '.md')} and .json")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
