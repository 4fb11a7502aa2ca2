"""Active learning at a realistic size: 700-sentence pools, Bayesian and batch-diverse queries.

::

    python -m bench.active_learning_pool                       # chunking, basenp, JapaneseNE
    python -m bench.active_learning_pool --datasets chunking --seeds 3 --strategies entropy bald

For every seed the train and test files of a CRF++ data set (``../shared/data/crfpp``) are
pooled and shuffled; a pool (700 sentences; JapaneseNE has 716 in all, so its pool is 600) and
a disjoint fixed test slice (200 sentences; 116 for JapaneseNE) are drawn. A run starts from
10 fully labeled pool sentences. Every round fits GPSL in the scalable mode on the pool
sentences with at least one revealed label (unrevealed tokens are ``None`` and marginalised,
their own factors weighted by the default ``missing_weight="auto"``, EM-lambda),
records the test token accuracy, the labeled tokens and the annotator actions so far, and
asks the strategy for the next batch: 2% of the pool's tokens (token strategies) or as many
tokens' worth of whole sentences (sentence strategies). A run ends at 40% of the pool's tokens,
or earlier once it has stayed at or above 99% of the accuracy of full supervision for
``--patience`` rounds (the curves are flat from there and the tokens-to-99% are known).

Strategies (``name[+diverse][+propagate]``):

* ``random`` (tokens), ``random_sentence``; ``least_confidence``, ``margin``, ``entropy``
  (tokens) and ``sentence_least_confidence``, ``sentence_margin``, ``sentence_entropy``
  (the token score's maximum over a sentence's unlabeled tokens) on GPSL's marginals;
* ``bald``: the mutual information between a token's label and the latent functions under q
  (:func:`gpsl.active.mutual_information` over :func:`gpsl.active.sample_marginals`);
* ``lookahead``: expected entropy reduction of the token's sentence when its label is
  clamped and propagated by Algorithm 2 (:func:`gpsl.active.lookahead_gain`), on a
  short-list of the most uncertain tokens (3x the batch);
* ``+diverse``: the batch is a greedy determinantal choice over a 3x short-list, with the
  correlations of the candidates' latent functions under q (:func:`gpsl.active.diverse_batch`);
* ``+propagate``: the batch is asked in 5 steps; after each step the revealed labels are
  clamped in Algorithm 2 (no refit) and the scores of those sentences are recomputed before
  the next step is chosen (Culotta and McCallum 2005), as the app's queue does between
  training runs.

The peer is CRFsuite (``bench.paper``'s settings) trained on complete sentences chosen by its
own least-confidence strategy (``1 - P(Viterbi path)``, python-crfsuite's tagger), from the
same 10 seed sentences and with the same batches of sentences.

Annotator actions: a gold span (a chunk, or a run of ``O`` tokens) whose revealed tokens are
adjacent and revealed in the same round counts once; a whole sentence costs its number of
spans.

Outputs (``--out``, default ``bench/results``): ``active_learning_pool.json`` (per data set and
strategy the per-seed curves, tokens and actions to 95% / 99% of full supervision per seed,
with mean and standard deviation), ``active_learning_pool.md`` and
``active_learning_pool_<dataset>.html`` (plotly learning curves against labeled tokens and
against annotator actions).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from bench.active_learning import DataMissing as AlDataMissing
from bench.active_learning import load_dataset, split, tokens_to_reach
from bench.active_learning_pool_report import best_token_strategy, write_outputs
from bench.active_learning_pool_setup import (
    DATASETS,
    DEFAULT_STRATEGIES,
    PEER,
    PROPAGATE_STEPS,
    SHORTLIST,
    SIZES,
    Config,
    parse_spec,
)
from bench.active_learning_run import _revealed
from bench.common import (
    DATA_DIR,
    RESULTS_DIR,
    DataMissing,
    git_commit,
    machine_info,
    mean_std,
    median,
    now_iso,
)
from gpsl import active
from gpsl.active import marginal as active_marginal
from gpsl.metrics import token_accuracy

# --------------------------------------------------------------------------- annotator actions


def segments(labels) -> np.ndarray:
    """Span id per token: a chunk (``B-X I-X ...``, or ``B I ...``) or a run of ``O`` tokens."""
    seg = np.zeros(len(labels), dtype=np.int64)
    k = 0
    prev = None
    for t, lab in enumerate(labels):
        lab = str(lab)
        head, _, typ = lab.partition("-")
        if t > 0:
            if lab == "O":
                new = prev != "O"
            elif head == "B" or head not in ("I",):
                new = True
            else:  # I-X continues a chunk of the same type only
                p_head, _, p_typ = str(prev).partition("-")
                new = prev == "O" or p_typ != typ
            k += int(new)
        seg[t] = k
        prev = lab
    return seg


def actions(gold, newly: np.ndarray) -> int:
    """Annotator actions to label the ``newly`` revealed tokens of one sentence in one go:
    adjacent revealed tokens of one gold span are one action."""
    idx = np.flatnonzero(newly)
    if idx.size == 0:
        return 0
    seg = segments(gold)
    n = 1
    for a, b in zip(idx[:-1], idx[1:], strict=True):
        if b != a + 1 or seg[a] != seg[b]:
            n += 1
    return n


# --------------------------------------------------------------------------- GPSL runs


def make_model(template: str, max_iter: int):
    from gpsl.model import GPSL

    return GPSL(template=template, inference="sparse", max_iter=max_iter)


def _token_scores(base: str, sc, clamp, seed) -> np.ndarray:
    """Scores per token of ``sc`` (higher: ask first) for a token-level base strategy;
    ``lookahead`` ranks its short-list by entropy (:func:`gpsl.active.lookahead_gain` then
    scores the short-list only)."""
    return active.score_tokens(sc, "entropy" if base == "lookahead" else base, clamp, seed)


def choose_tokens(model, base: str, mods: set, pool_X, pool_y, labeled, batch: int,
                  seed: int) -> list[list[int]]:
    """The batch of a token strategy, as the steps in which it is asked (one step unless
    ``propagate``); ``labeled`` is updated in place (the gold labels are revealed)."""
    sc = model.calibration_scores(pool_X, with_variance=base == "bald")
    lengths = sc.lengths
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    sent_of = np.repeat(np.arange(len(lengths)), lengths)
    gold = model.gold_index(pool_y)

    def clamp_now():
        return np.concatenate([np.where(m, g, -1) for g, m in zip(gold, labeled, strict=True)])

    clamp = clamp_now()
    score = _token_scores(base, sc, clamp, seed)
    emb = resid = None
    if "diverse" in mods:
        emb, resid = model.latent_embedding(pool_X)
    steps = PROPAGATE_STEPS if "propagate" in mods else 1
    sizes = [batch // steps + (1 if k < batch % steps else 0) for k in range(steps)]
    cap = active.default_max_per_sentence(batch)
    per_sent: dict[int, int] = {}
    chosen_steps = []
    for k, size in enumerate(sizes):
        free = np.flatnonzero(clamp < 0)
        if free.size == 0 or size == 0:
            break
        ok = np.array([per_sent.get(int(s), 0) < cap for s in sent_of[free]])
        free = free[ok]
        order = free[active_marginal._rank(score[free], np.random.default_rng(seed * 7919 + k))]
        short = order[: SHORTLIST * size] if (base == "lookahead" or "diverse" in mods) \
            else order[:size]
        q = score[short]
        if base == "lookahead":
            cands = [(int(sent_of[t]), int(t - starts[sent_of[t]])) for t in short]
            q = active.lookahead_gain(sc, clamp, cands)
        if "diverse" in mods:
            pick = active.diverse_batch(q, emb[short], resid[short], size,
                                        groups=sent_of[short], max_per_group=cap)
        else:
            pick, taken = [], dict(per_sent)
            for i in np.argsort(-q, kind="stable"):
                s = int(sent_of[short[i]])
                if taken.get(s, 0) < cap:
                    taken[s] = taken.get(s, 0) + 1
                    pick.append(int(i))
                if len(pick) == size:
                    break
        step = [int(short[i]) for i in pick]
        for t in step:
            s = int(sent_of[t])
            labeled[s][t - starts[s]] = True
            per_sent[s] = per_sent.get(s, 0) + 1
        chosen_steps.append(step)
        if k + 1 < len(sizes) and step:
            # propagation: clamp the new labels and rescore their sentences (no refit)
            clamp = clamp_now()
            touched = sorted({int(sent_of[t]) for t in step})
            sub = sc.take(touched)
            rows = sc.rows(touched)
            score[rows] = _token_scores(base, sub, clamp[rows], seed + 31 * (k + 1))
    return chosen_steps


def choose_sentences(model, base: str, pool_X, labeled, n_sent: int, seed: int) -> list[int]:
    """Whole unlabeled-or-partly-labeled sentences for a sentence strategy."""
    cand = [i for i, m in enumerate(labeled) if not m.all()]
    if base == "random_sentence":
        rng = np.random.default_rng(seed)
        return [cand[i] for i in rng.permutation(len(cand))[:n_sent]]
    marg = model.predict_marginals([pool_X[i] for i in cand])
    s = active.sentence_scores(marg, [labeled[i] for i in cand], base, "max")
    order = np.argsort(-np.nan_to_num(s, nan=-1.0), kind="stable")[:n_sent]
    return [cand[i] for i in order]


def run_gpsl(spec: str, data: dict, cfg: Config, seed: int, target: float, log) -> dict:
    base, mods = parse_spec(spec)
    pool_X, pool_y = data["pool_X"], data["pool_y"]
    labeled = [np.zeros(len(s), dtype=bool) for s in pool_X]
    for i in data["init"]:
        labeled[i][:] = True
    n_tok = data["pool_tokens"]
    n_actions = sum(actions(pool_y[i], labeled[i]) for i in data["init"])
    curve = {k: [] for k in ("labeled_tokens", "actions", "accuracy", "fit_seconds",
                             "query_seconds", "sentences", "missing_weight")}
    above = 0
    model = make_model(data["template"], cfg.max_iter)
    while True:
        train = [i for i, m in enumerate(labeled) if m.any()]
        t0 = time.perf_counter()
        model.fit([pool_X[i] for i in train], [_revealed(pool_y[i], labeled[i]) for i in train])
        fit_s = time.perf_counter() - t0
        acc = float(token_accuracy(data["test_y"], model.predict(data["test_X"])))
        n_lab = int(sum(m.sum() for m in labeled))
        for k, v in (("labeled_tokens", n_lab), ("actions", n_actions), ("accuracy", acc),
                     ("fit_seconds", fit_s), ("sentences", len(train)),
                     ("missing_weight", float(model.missing_weight_))):
            curve[k].append(v)
        log(f"  {spec:<26} seed {seed}: {n_lab:5d} tokens ({100 * n_lab / n_tok:4.1f}%) "
            f"{n_actions:5d} actions acc {acc:.4f} fit {fit_s:5.1f}s")
        above = above + 1 if acc >= target else 0
        if n_lab >= cfg.max_fraction * n_tok or above >= cfg.patience or all(
                m.all() for m in labeled):
            break
        t0 = time.perf_counter()
        before = [m.copy() for m in labeled]
        rseed = seed * 1000 + len(curve["accuracy"])
        if base == "random_sentence" or base.startswith("sentence_"):
            for i in choose_sentences(model, base, pool_X, labeled, data["sentence_batch"],
                                      rseed):
                labeled[i][:] = True
            n_actions += sum(actions(pool_y[i], labeled[i] & ~before[i])
                             for i in range(len(pool_X)))
        else:
            steps = choose_tokens(model, base, mods, pool_X, pool_y, labeled,
                                  data["token_batch"], rseed)
            # one action per span run within one step of one sentence
            mark = [np.zeros(len(s), dtype=bool) for s in pool_X]
            starts = np.r_[0, np.cumsum([len(s) for s in pool_X])[:-1]]
            for step in steps:
                for m in mark:
                    m[:] = False
                touched = set()
                for t in step:
                    s = int(np.searchsorted(starts, t, side="right") - 1)
                    mark[s][t - starts[s]] = True
                    touched.add(s)
                n_actions += sum(actions(pool_y[s], mark[s]) for s in touched)
        curve["query_seconds"].append(time.perf_counter() - t0)
    return curve


# --------------------------------------------------------------------------- the peer


def run_peer(data: dict, cfg: Config, seed: int, target: float, log) -> dict:
    """CRFsuite on complete sentences, chosen by sequence least confidence."""
    from bench.peers import fit_crfsuite, template_features
    from gpsl.features import Template

    template = Template.parse(data["template"])
    pool_X, pool_y = data["pool_X"], data["pool_y"]
    F = template_features(template, pool_X)
    Ft = template_features(template, data["test_X"])
    labeled = np.zeros(len(pool_X), dtype=bool)
    labeled[data["init"]] = True
    n_tok = data["pool_tokens"]
    curve = {k: [] for k in ("labeled_tokens", "actions", "accuracy", "fit_seconds")}
    n_actions = sum(actions(pool_y[i], np.ones(len(pool_y[i]), bool)) for i in data["init"])
    above = 0
    while True:
        idx = np.flatnonzero(labeled)
        fit = fit_crfsuite([F[i] for i in idx], [pool_y[i] for i in idx])
        crf, fit_s = fit.crf, fit.wall_s
        acc = float(token_accuracy(data["test_y"], crf.predict(Ft)))
        n_lab = int(sum(len(pool_X[i]) for i in idx))
        for k, v in (("labeled_tokens", n_lab), ("actions", n_actions), ("accuracy", acc),
                     ("fit_seconds", fit_s)):
            curve[k].append(v)
        log(f"  {PEER:<26} seed {seed}: {n_lab:5d} tokens ({100 * n_lab / n_tok:4.1f}%) "
            f"{n_actions:5d} actions acc {acc:.4f}")
        above = above + 1 if acc >= target else 0
        if n_lab >= cfg.max_fraction * n_tok or above >= cfg.patience or labeled.all():
            break
        cand = np.flatnonzero(~labeled)
        tagger = crf.tagger_
        lc = np.empty(cand.size)
        for k, i in enumerate(cand):
            tagger.set(F[i])
            path = tagger.tag()
            lc[k] = 1.0 - tagger.probability(path)
        for i in cand[np.argsort(-lc, kind="stable")[: data["sentence_batch"]]]:
            labeled[i] = True
            n_actions += actions(pool_y[i], np.ones(len(pool_y[i]), bool))
    return curve


# --------------------------------------------------------------------------- driver


def draw(X_all, y_all, template, n_pool, n_test, seed, cfg: Config) -> dict:
    pool, test = split(len(X_all), n_pool, n_test, seed)
    pool_X = [X_all[i] for i in pool]
    n_tok = sum(len(s) for s in pool_X)
    token_batch = max(1, round(cfg.round_fraction * n_tok))
    return {
        "pool_X": pool_X, "pool_y": [y_all[i] for i in pool],
        "test_X": [X_all[i] for i in test], "test_y": [y_all[i] for i in test],
        "template": template, "pool_tokens": n_tok, "token_batch": token_batch,
        "sentence_batch": max(1, round(token_batch * len(pool_X) / n_tok)),
        "init": np.random.default_rng(10_000 + seed).choice(len(pool_X), cfg.n_init,
                                                            replace=False),
    }


def reach(curve: dict, target: float, key: str) -> float | None:
    return tokens_to_reach(curve[key], curve["accuracy"], target)


def summarise(runs: list[dict], targets: list[dict], n_tok: list[int]) -> dict:
    out = {}
    for level in ("95", "99"):
        toks = [reach(r, t[level], "labeled_tokens") for r, t in zip(runs, targets)]
        acts = [reach(r, t[level], "actions") for r, t in zip(runs, targets)]
        frac = [None if v is None else 100 * v / n for v, n in zip(toks, n_tok)]
        ok = [v for v in frac if v is not None]
        m, sd = mean_std(ok) if len(ok) == len(frac) else (None, None)
        am, asd = mean_std([a for a in acts if a is not None]) \
            if all(a is not None for a in acts) else (None, None)
        out[f"tokens_to_{level}"] = toks
        out[f"percent_to_{level}"] = frac
        out[f"percent_to_{level}_mean"], out[f"percent_to_{level}_std"] = m, sd
        out[f"actions_to_{level}"] = acts
        out[f"actions_to_{level}_mean"], out[f"actions_to_{level}_std"] = am, asd
    out["fit_seconds_median"] = median([s for r in runs for s in r["fit_seconds"]])
    return out


def run_dataset(cfg: Config, name: str, log) -> dict:
    X_all, y_all, template = load_dataset(Path(cfg.data_dir), name)
    n_pool, n_test = SIZES[name]
    n_pool, n_test = cfg.pool or n_pool, cfg.test or n_test
    res = {"pool": n_pool, "test": n_test, "max_iter": cfg.max_iter,
           "round_fraction": cfg.round_fraction, "seeds": [], "strategies": {}}
    curves: dict[str, list] = {s: [] for s in cfg.strategies}
    if cfg.peer:
        curves[PEER] = []
    targets, n_toks = [], []
    for seed in range(cfg.seeds):
        data = draw(X_all, y_all, template, n_pool, n_test, seed, cfg)
        full = make_model(template, cfg.max_iter)
        t0 = time.perf_counter()
        full.fit(data["pool_X"], data["pool_y"])
        full_s = time.perf_counter() - t0
        acc = float(token_accuracy(data["test_y"], full.predict(data["test_X"])))
        t = {"95": 0.95 * acc, "99": 0.99 * acc}
        targets.append(t)
        n_toks.append(data["pool_tokens"])
        res["seeds"].append({"seed": seed, "pool_tokens": data["pool_tokens"],
                             "full_accuracy": acc, "full_fit_seconds": full_s,
                             "token_batch": data["token_batch"],
                             "sentence_batch": data["sentence_batch"]})
        log(f"{name} seed {seed}: pool {n_pool} sentences / {data['pool_tokens']} tokens, "
            f"batch {data['token_batch']} tokens or {data['sentence_batch']} sentences; "
            f"full supervision {acc:.4f} ({full_s:.1f}s)")
        for spec in cfg.strategies:
            curves[spec].append(run_gpsl(spec, data, cfg, seed, t["99"], log))
        if cfg.peer:
            curves[PEER].append(run_peer(data, cfg, seed, t["99"], log))
    for spec, runs in curves.items():
        res["strategies"][spec] = {"summary": summarise(runs, targets, n_toks), "runs": runs}
    accs = [s["full_accuracy"] for s in res["seeds"]]
    res["full_accuracy_mean"], res["full_accuracy_std"] = mean_std(accs)
    return res


def run(cfg: Config, command: str, log=print) -> dict:
    t0 = time.perf_counter()
    report = {"command": command, "date": now_iso(), "machine": machine_info(),
              "git": git_commit(), "config": asdict(cfg), "datasets": {}}
    for name in cfg.datasets:
        report["datasets"][name] = run_dataset(cfg, name, log)
    report["seconds"] = time.perf_counter() - t0
    return report


def merge(reports: list[dict]) -> dict:
    """One report from runs of the same settings over other data sets or strategies (run in
    parallel processes): the data sets and strategies are united, the commands listed."""
    if not reports:
        raise ValueError("nothing to merge")
    out = json.loads(json.dumps(reports[0]))
    out["command"] = " ; ".join(r["command"] for r in reports)
    out["seconds"] = sum(r["seconds"] for r in reports)
    for r in reports[1:]:
        for name, res in r["datasets"].items():
            if name not in out["datasets"]:
                out["datasets"][name] = res
                continue
            mine = out["datasets"][name]
            if [s["full_accuracy"] for s in mine["seeds"]] != \
                    [s["full_accuracy"] for s in res["seeds"]]:
                raise ValueError(f"{name}: the runs to merge drew different pools")
            mine["strategies"].update(res["strategies"])
    names = list(out["datasets"])
    out["config"]["datasets"] = names
    out["config"]["strategies"] = sorted({s for d in out["datasets"].values()
                                          for s in d["strategies"]} - {PEER})
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.active_learning_pool",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    ap.add_argument("--strategies", nargs="+", default=list(DEFAULT_STRATEGIES))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--max-iter", type=int, default=6)
    ap.add_argument("--patience", type=int, default=1)
    ap.add_argument("--max-fraction", type=float, default=0.40)
    ap.add_argument("--round-fraction", type=float, default=0.02)
    ap.add_argument("--pool", type=int, default=None)
    ap.add_argument("--test", type=int, default=None)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--data-dir", default=str(DATA_DIR))
    ap.add_argument("--out", default=str(RESULTS_DIR))
    ap.add_argument("--stem", default="active_learning_pool",
                    help="file name stem of the JSON and Markdown outputs")
    ap.add_argument("--merge", nargs="+", metavar="JSON",
                    help="write one report from earlier runs' JSON files (no fitting)")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.merge:
        try:
            report = merge([json.loads(Path(f).read_text(encoding="utf-8"))
                            for f in args.merge])
        except (OSError, ValueError, KeyError) as e:
            print(f"bench.active_learning_pool: --merge: {e}", file=sys.stderr)
            return 2
        print(f"wrote {write_outputs(report, Path(args.out), args.stem)}")
        return 0
    try:
        for s in args.strategies:
            parse_spec(s)
    except ValueError as e:
        print(f"bench.active_learning_pool: {e}", file=sys.stderr)
        return 2
    cfg = Config(datasets=args.datasets, strategies=args.strategies, seeds=args.seeds,
                 max_iter=args.max_iter, patience=args.patience, max_fraction=args.max_fraction,
                 round_fraction=args.round_fraction, pool=args.pool, test=args.test,
                 peer=not args.no_peer, data_dir=args.data_dir, out=args.out)
    command = "python -m bench.active_learning_pool " + shlex.join(argv or sys.argv[1:])
    try:
        report = run(cfg, command.strip(), log=lambda m: print(m, flush=True))
    except (DataMissing, AlDataMissing) as e:
        print(f"bench.active_learning_pool: {e}", file=sys.stderr)
        return 2
    for name, res in report["datasets"].items():
        print(f"{name}: best token strategy {best_token_strategy(res)}")
    print(f"wrote {write_outputs(report, Path(cfg.out), args.stem)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
