"""GPSL at scale: fit time, peak memory and loss against training size, beside CRFsuite.

    python -m bench.scale [--sizes 25 50 100 200 400 800] [--full-max 100]
                          [--synthetic 20000 50000 200000] [--labels 20] [--repeats 3]
                          [--split-size 800] [--split-seeds 4] [--goal-repeats 3]
                          [--out bench/results]

(a) Pooled chunking (train.data + test.data), one seeded permutation: the last 100 sentences
    are the fixed test slice, the first N the training set. For every N: full GPSL2 (up to
    ``--full-max`` sentences: its time grows as n^2.4-3; the paper's Jensen bound), scalable
    GPSL2 (``inference="sparse"``, its default Boehning bound, and with the paper's Jensen
    bound) and CRFsuite (L-BFGS, c2 = 0.5, all possible transitions), each in its own fresh
    process so that its peak resident memory is its own.
(b) A synthetic corpus from :func:`gpsl.synthetic.make_chain_task` with ``--labels`` labels
    at each token count of ``--synthetic`` (test: 2,000 further sentences): scalable GPSL2 and
    CRFsuite.
(c) Per-token prediction (tagging) CPU time from raw tokens (feature extraction included for
    both), median of ``--repeats`` runs over the test set, against CRFsuite's, for every model
    of (a).
(d) The 800-sentence split of (a) drawn with ``--split-seeds`` further seeds (another fixed
    test slice each): scalable GPSL2 against CRFsuite, paired per seed (a 100-sentence test
    slice is about 2,400 tokens, so one split's difference is mostly noise).

(f) The goals of ``docs/speed.md``: the complete-label fit at ``--split-size`` chunking
    sentences and at the largest synthetic size against CRFsuite, each pair run
    ``--goal-repeats`` times in all (interleaved, fresh processes; medians of fit CPU
    seconds), and the peak memory at the largest synthetic size. At that size the GPSL fit
    also records the test loss after every sweep and, at its first and last sweep, the loss
    of the local functions alone, the loss given the true neighbour labels (the
    pseudo-likelihood's own task) and the exact pseudo-likelihood decoding: what the
    pseudo-likelihood captures there and what it cannot.

Fit times are given as CPU seconds (``time.process_time``: every thread of the fit's process,
the figure that stays stable on a loaded machine) and wall seconds. Growth exponents are
least-squares slopes of log(fit CPU seconds) on log(training tokens). Writes ``scale.md`` and
``scale.json`` to ``--out``.

    python -m bench.scale --cluster [--cluster-sizes 200000 1000000] [--cluster-workers 2]
                          [--cluster-budget 1500] [--labels 20] [--out bench/results]

(e) ``--cluster`` runs only this part: the synthetic corpus of (b) at each size, the scalable
    fit in one process beside the same fit with its sums over sentence shards on a Dask
    ``LocalCluster`` of ``--cluster-workers`` worker processes (one thread each, on
    127.0.0.1; :mod:`gpsl.distributed`), each in a fresh process. Reports the ratio of fit
    times, the agreement of bounds and test marginals, each shard's measured work and the
    client's waiting, and from those an estimate for N machines. A size whose two fits are
    estimated (from the sizes before it, time growing as n^1.3) to take longer than
    ``--cluster-budget`` seconds, or more memory than is available, is skipped with the
    reason. Writes ``scale_cluster.md`` and ``scale_cluster.json``.
"""

from __future__ import annotations

import argparse
import resource
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import (
    DATA_DIR,
    RESULTS_DIR,
    DataMissing,
    check_data,
    git_commit,
    header_lines,
    in_fresh_process,
    load_pooled,
    machine_info,
    now_iso,
    write_results,
)
from bench.scale_report import goals, write

TEST_SENTENCES = 100
SYNTH_TEST_SENTENCES = 2000


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _chunking_split(n_train: int, seed: int):
    data = load_pooled(DATA_DIR, "chunking")
    perm = np.random.default_rng(seed).permutation(len(data.X))
    test = perm[-TEST_SENTENCES:]
    if n_train > len(perm) - TEST_SENTENCES:
        raise ValueError(f"chunking has {len(perm) - TEST_SENTENCES} training sentences at most")
    train = perm[:n_train]
    return ([data.X[i] for i in train], [data.y[i] for i in train],
            [data.X[i] for i in test], [data.y[i] for i in test], data.template)


def _synthetic(n_tokens: int, labels: int, seed: int):
    from gpsl.synthetic import UNIGRAM_TEMPLATE, make_chain_task

    mean_len = 9.5  # make_chain_task's default lengths are uniform on 5..14
    n_sent = max(1, int(round(n_tokens / mean_len)))
    X, y = make_chain_task(n_sent + SYNTH_TEST_SENTENCES, n_labels=labels, seed=seed,
                           vocab_per_label=40, shared_vocab=60)
    return X[:n_sent], y[:n_sent], X[n_sent:], y[n_sent:], UNIGRAM_TEMPLATE


def _time_predict(fn, repeats: int) -> float:
    """Median CPU seconds of ``fn()`` (CPU, not wall: at a load average of 8 on 2 cores the
    wall time of GPSL's tagging, many small numpy steps of Algorithm 2, was 5 times its CPU
    time, CRFsuite's 2 times)."""
    times = []
    for _ in range(max(1, repeats)):
        c0 = time.process_time()
        fn()
        times.append(time.process_time() - c0)
    return float(np.median(times))


def run_job(job: dict) -> dict:
    """One fit in this (fresh) process: ``{fit_s, loss, peak_rss_mib, ...}``."""
    from gpsl.features import Template
    from gpsl.metrics import hamming_loss

    if job["source"] in ("chunking", "split"):
        Xtr, ytr, Xte, yte, template = _chunking_split(job["size"], job["seed"])
    else:
        Xtr, ytr, Xte, yte, template = _synthetic(job["size"], job["labels"], job["seed"])
    n_tokens = sum(len(s) for s in Xtr)
    n_test = sum(len(s) for s in Xte)
    rss_before = _peak_rss_mib()
    out = {**job, "train_sentences": len(Xtr), "train_tokens": n_tokens, "test_tokens": n_test}
    if job["method"] == "CRFsuite":
        from bench.peers import CRF_SCALE_PARAMS, fit_crfsuite, template_features

        tmpl = Template.parse(template)
        fit = fit_crfsuite(Xtr, ytr, tmpl, CRF_SCALE_PARAMS)
        crf, out["fit_s"], out["fit_cpu_s"] = fit.crf, fit.wall_s, fit.cpu_s
        pred = crf.predict(template_features(tmpl, Xte))
        out["predict_s"] = _time_predict(lambda: crf.predict(template_features(tmpl, Xte)),
                                         job["repeats"])
        out["labels"] = len(crf.classes_)
    else:
        from gpsl.model import GPSL

        mode = "full" if job["method"] == "GPSL2 full" else "sparse"
        bound = "jensen" if job["method"] == "GPSL2 sparse, Jensen" else "auto"
        model = GPSL(offsets=(-1, 1), template=template, inference=mode, lse_bound=bound)
        states = []
        on_sweep = (lambda eng: states.append(eng.s.copy())) if job.get("explain") else None
        t0, c0 = time.perf_counter(), time.process_time()
        model.fit(Xtr, ytr, on_sweep=on_sweep)
        out["fit_s"] = time.perf_counter() - t0
        out["fit_cpu_s"] = time.process_time() - c0
        if states:  # (copying the states adds under 1% to this fit's time)
            out["explain"] = explain(model, states, Xte, yte)
        out["sweeps"] = model.n_iter_
        out["bound"] = model.bound_trace_[-1]
        out["labels"] = len(model.classes_)
        pred = model.predict(Xte)
        out["rns_passes"] = int(getattr(model, "rns_iterations_", 0))
        out["predict_s"] = _time_predict(lambda: model.predict(Xte), job["repeats"])
    out["loss"] = hamming_loss(yte, pred)
    out["predict_us_per_token"] = 1e6 * out["predict_s"] / max(n_test, 1)
    out["peak_rss_mib"] = _peak_rss_mib()
    out["rss_before_fit_mib"] = rss_before
    return out


def explain(model, states, Xte, yte) -> dict:
    """What the pseudo-likelihood captures on the synthetic chain and what it cannot: the test
    loss after every sweep (``states``: the variational state after each), and at the first and
    the last sweep the loss of the local functions alone (argmax of ``m``), the loss given the
    true neighbour labels (argmax of ``m + g_d[y_nb]``: the pseudo-likelihood's own
    conditional, which training fits) and the exact pseudo-likelihood decoding."""
    from gpsl.likelihood import neighbour_index
    from gpsl.metrics import hamming_loss

    final = model.state_
    per_sweep, parts = [], {}
    for k, st in enumerate(states, start=1):
        model.engine_.state, model._predictor = st, None
        per_sweep.append(hamming_loss(yte, model.predict(Xte)))
        if k not in (1, len(states)):
            continue
        b, lengths = model.local_scores(Xte)
        gold = np.concatenate(model.gold_index(yte))
        nb = neighbour_index(lengths, model.offsets_)
        g = model._gS()
        a = b.copy()
        for d in range(len(model.offsets_)):
            has = nb[:, d] >= 0
            a[has] += g[d][gold[nb[has, d]]]
        parts["first" if k == 1 else "last"] = {
            "sweep": k, "rns": per_sweep[-1],
            "local_only": 100.0 * float(np.mean(b.argmax(axis=1) != gold)),
            "true_neighbours": 100.0 * float(np.mean(a.argmax(axis=1) != gold)),
            "exact_pl": hamming_loss(yte, model.predict(Xte, decoder="exact")),
            "pair_scale": float(np.abs(g).max())}
    model.engine_.state, model._predictor = final, None
    return {"loss_per_sweep": per_sweep, **parts}


def _worker_peak_rss_mib() -> float:
    """Run on a Dask worker: its peak resident memory."""
    return _peak_rss_mib()


def run_cluster_job(job: dict) -> dict:
    """One fit of (e) in this (fresh) process: ``method`` ``"single"`` or ``"dask"`` (a
    LocalCluster of ``workers`` processes started here, its start-up timed apart)."""
    import os

    from gpsl.metrics import hamming_loss
    from gpsl.model import GPSL

    Xtr, ytr, Xte, yte, template = _synthetic(job["size"], job["labels"], job["seed"])
    out = {**job, "train_sentences": len(Xtr), "train_tokens": sum(len(s) for s in Xtr)}
    cluster = client = None
    try:
        if job["method"] == "dask":
            from distributed import Client, LocalCluster

            t0 = time.perf_counter()
            threads = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                       "MKL_NUM_THREADS": "1"}
            cluster = LocalCluster(n_workers=job["workers"], threads_per_worker=1,
                                   processes=True, host="127.0.0.1", dashboard_address=None,
                                   env=threads, silence_logs=40)
            client = Client(cluster, set_as_default=False)
            client.wait_for_workers(job["workers"])
            out["cluster_start_s"] = time.perf_counter() - t0
        if job["method"] == "inprocess":
            from gpsl.distributed import InProcess

            where = InProcess(job["workers"])
        else:
            where = client
        model = GPSL(offsets=(-1, 1), template=template, inference="sparse", cluster=where)
        t0, c0 = time.perf_counter(), time.process_time()
        model.fit(Xtr, ytr)
        out["fit_s"] = time.perf_counter() - t0
        out["fit_cpu_s"] = time.process_time() - c0
        out["sweeps"] = model.n_iter_
        out["bound"] = model.bound_trace_[-1]
        out["bound_trace"] = model.bound_trace_
        if job["method"] == "inprocess":
            out["shard_stats"] = model.shard_stats_
        P = model.predict_marginals(Xte)
        out["loss"] = hamming_loss(yte, [[model.classes_[i] for i in p.argmax(axis=1)]
                                         for p in P])
        out["marginals"] = np.concatenate(P).astype(np.float64)
        out["peak_rss_mib"] = _peak_rss_mib()
        if job["method"] == "dask":
            out["shard_stats"] = model.shard_stats_
            out["worker_peak_rss_mib"] = sorted(client.run(_worker_peak_rss_mib).values())
            out["pid"] = os.getpid()
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    return out


def _cluster_child(job: dict) -> dict:
    return in_fresh_process(run_cluster_job, job)


def _available_mib() -> float | None:
    try:
        import psutil

        return psutil.virtual_memory().available / 2 ** 20
    except Exception:  # noqa: BLE001
        return None


def run_cluster(args, log=print) -> dict:
    """Part (e): single process against the Dask LocalCluster at each size."""
    pairs, skipped = [], []
    for n in sorted(args.cluster_sizes):
        if pairs:
            prev = pairs[-1]
            grow = (n / prev["single"]["train_tokens"])
            est_s = sum(prev[m]["fit_s"] for m in METHODS) * grow ** 1.3
            est_mib = (prev["single"]["peak_rss_mib"] + prev["dask"]["peak_rss_mib"]
                       + sum(prev["dask"].get("worker_peak_rss_mib", []))) * grow
            avail = _available_mib()
            reason = None
            if est_s > args.cluster_budget:
                reason = (f"the three fits are estimated at {est_s:.0f} s (from {prev['size']} "
                          f"tokens, time ~ n^1.3), over --cluster-budget "
                          f"{args.cluster_budget:.0f} s")
            elif avail is not None and est_mib > 0.8 * avail:
                reason = (f"estimated peak memory {est_mib:.0f} MiB is over 80% of the "
                          f"{avail:.0f} MiB available")
            if reason:
                log(f"[cluster {n:>8}] skipped: {reason}")
                skipped.append({"size": n, "reason": reason})
                continue
        pair = {"size": n}
        for method in METHODS:
            job = {"size": n, "labels": args.labels, "seed": args.seed, "method": method,
                   "workers": args.cluster_workers}
            r = _cluster_child(job)
            pair[method] = r
            log(f"[cluster {n:>8} {method:<9}] {r['train_tokens']:>8} tokens fit "
                f"{r['fit_s']:8.1f}s sweeps {r['sweeps']} loss {r['loss']:6.2f}% peak "
                f"{r['peak_rss_mib']:7.0f} MiB"
                + (f" workers {r['worker_peak_rss_mib']} MiB, cluster start "
                   f"{r['cluster_start_s']:.1f}s" if method == "dask" else ""))
        a, b, c = pair["dask"], pair["single"], pair["inprocess"]
        pair["ratio"] = a["fit_s"] / b["fit_s"]
        pair["bound_rel_diff"] = abs(a["bound"] - b["bound"]) / abs(b["bound"])
        pair["marginals_max_abs_diff"] = float(np.max(np.abs(a["marginals"] - b["marginals"])))
        pair["labels_differing"] = int(np.sum(a["marginals"].argmax(axis=1)
                                              != b["marginals"].argmax(axis=1)))
        pair["test_tokens"] = int(a["marginals"].shape[0])
        # the acceptance comparison: the same shards, added in the same order, in one process
        pair["same_shards_bound_rel_diff"] = abs(a["bound"] - c["bound"]) / abs(c["bound"])
        pair["same_shards_trace_max_rel_diff"] = max(
            abs(x - y) / abs(y) for x, y in zip(a["bound_trace"], c["bound_trace"],
                                                strict=True))
        pair["same_shards_marginals_max_abs_diff"] = float(
            np.max(np.abs(a["marginals"] - c["marginals"])))
        st = a["shard_stats"]
        sweeps = max(1, a["sweeps"])
        work = [s["seconds"] for s in st["shards"]]
        pair["per_shard"] = [{"tokens": s["tokens"], "seconds": s["seconds"],
                              "cpu_seconds": s["cpu_seconds"],
                              "seconds_per_sweep": s["seconds"] / sweeps,
                              "cpu_per_sweep": s["cpu_seconds"] / sweeps,
                              "us_per_token_per_sweep": 1e6 * s["cpu_seconds"] / sweeps
                              / max(1, s["tokens"])} for s in st["shards"]]
        pair["rounds"] = st["rounds"]
        pair["rounds_per_sweep"] = st["rounds"] / sweeps
        pair["wait_s"] = st["wait_seconds"]
        # what the client waited for beyond the slowest shard's own work: messages and
        # scheduling, per round trip
        pair["overhead_per_round_ms"] = 1e3 * max(0.0, st["wait_seconds"] - max(work)) \
            / max(1, st["rounds"])
        pair["client_s"] = a["fit_s"] - st["wait_seconds"]
        for r in (a, b, c):
            r.pop("marginals", None)
        pairs.append(pair)
        log(f"[cluster {n:>8}] ratio {pair['ratio']:.2f}; against the same shards in one "
            f"process: bound rel. diff {pair['same_shards_bound_rel_diff']:.1e}, marginals "
            f"max diff {pair['same_shards_marginals_max_abs_diff']:.1e}; against the "
            f"unsharded fit: bound rel. diff {pair['bound_rel_diff']:.1e}, "
            f"{pair['labels_differing']} of {pair['test_tokens']} test labels differ")
    return {"pairs": pairs, "skipped": skipped, "workers": args.cluster_workers}


METHODS = ("single", "dask", "inprocess")


def estimate_n_machines(pair: dict, n_tokens: int, machines: int) -> float:
    """Fit seconds on ``machines`` dedicated one-worker machines for ``n_tokens``: the
    client's own part and the shards' CPU work scaled linearly in tokens (the per-token cost
    measured), the work split evenly, plus the measured overhead per round trip for the same
    number of round trips."""
    scale = n_tokens / pair["dask"]["train_tokens"]
    work = sum(s["cpu_seconds"] for s in pair["per_shard"]) * scale
    return (pair["client_s"] * scale + work / machines
            + pair["rounds"] * pair["overhead_per_round_ms"] / 1e3)


def write_cluster(report: dict, out: Path) -> list[str]:
    lines = header_lines("The scalable fit on a Dask cluster (`bench.scale --cluster`)",
                         report["date"], report["machine"], report["git"], report["command"])
    w = report["workers"]
    lines += [f"Synthetic corpus of (b) (`make_chain_task`, {report['labels']} labels, "
              "unigram template), GPSL2 in the scalable mode (linear kernel, mean-field, "
              "Boehning bound). `single`: one process. `dask`: the same fit with its sums over "
              f"sentences on a `LocalCluster` of {w} worker processes (one thread each, "
              "127.0.0.1), one shard per worker; cluster start-up not included. "
              "`same shards`: the sharded fit with the same shards in one process "
              "(`gpsl.distributed.InProcess`), the reference the Dask fit must equal. Each "
              "fit in a fresh process. On a 2-core machine shared with other jobs no speed-up "
              "is expected: the ratio measures the overhead.", "",
              "| tokens | single fit (s) | dask fit (s) | ratio | same shards fit (s) | sweeps "
              "(single / dask / same) | single peak (MiB) | dask client / workers peak (MiB) | "
              "loss % (single / dask) |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in report["pairs"]:
        a, b, c = p["dask"], p["single"], p["inprocess"]
        lines.append(f"| {b['train_tokens']} | {b['fit_s']:.1f} | {a['fit_s']:.1f} | "
                     f"{p['ratio']:.2f} | {c['fit_s']:.1f} | {b['sweeps']} / {a['sweeps']} / "
                     f"{c['sweeps']} | {b['peak_rss_mib']:.0f} | {a['peak_rss_mib']:.0f} / "
                     f"{', '.join(f'{v:.0f}' for v in a['worker_peak_rss_mib'])} | "
                     f"{b['loss']:.2f} / {a['loss']:.2f} |")
    for s in report["skipped"]:
        lines.append(f"| {s['size']} | skipped: {s['reason']} | | | | | | | |")
    lines.append("")
    if report["pairs"]:
        lines += ["## Agreement", "",
                  "| tokens | dask against | bound rel. diff (last) | bound trace max rel. diff "
                  "| marginals max abs diff | test labels differing |",
                  "|---:|---|---:|---:|---:|---:|"]
        for p in report["pairs"]:
            n = p["dask"]["train_tokens"]
            lines.append(f"| {n} | same shards, one process | "
                         f"{p['same_shards_bound_rel_diff']:.1e} | "
                         f"{p['same_shards_trace_max_rel_diff']:.1e} | "
                         f"{p['same_shards_marginals_max_abs_diff']:.1e} | – |")
            lines.append(f"| {n} | unsharded single process | {p['bound_rel_diff']:.1e} | – | "
                         f"{p['marginals_max_abs_diff']:.1e} | {p['labels_differing']} of "
                         f"{p['test_tokens']} |")
        lines += ["", "Against the unsharded fit only the order of the floating-point "
                  "additions differs; the difference grows over the sweeps (an L-BFGS step "
                  "stopped one iteration earlier or later changes the path), and RNS turns a "
                  "tiny change into another label for tokens near a tie.", ""]
    if report["pairs"]:
        lines += ["## Per-shard cost", "",
                  "| tokens | shard | shard tokens | work, wall (s) | work, CPU (s) | CPU per "
                  "sweep (s) | CPU µs per token and sweep | round trips per sweep | overhead "
                  "per round trip (ms) | client's own (s) |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for p in report["pairs"]:
            for i, s in enumerate(p["per_shard"]):
                lines.append(f"| {p['dask']['train_tokens']} | {i} | {s['tokens']} | "
                             f"{s['seconds']:.1f} | {s['cpu_seconds']:.1f} | "
                             f"{s['cpu_per_sweep']:.2f} | {s['us_per_token_per_sweep']:.1f} | "
                             f"{p['rounds_per_sweep']:.0f} | {p['overhead_per_round_ms']:.1f} | "
                             f"{p['client_s']:.1f} |")
        lines += ["", "Work: the seconds a shard spent in its calls (wall, and its thread's "
                  "CPU time: on this shared machine a worker gets only part of a core). "
                  "Overhead per round trip: the client's waiting beyond the slowest shard's "
                  "wall time, per call of all shards (messages, scheduling on a loaded "
                  "machine). Client's own: the fit's time not spent waiting for shards "
                  "(features, splitting and scattering, the optimisers' steps)."]
        p = report["pairs"][-1]
        lines += ["", f"## Estimate for N machines (from the {p['dask']['train_tokens']}-token "
                  "run)", "",
                  "Fit time ≈ client's own part (grows with tokens) + the shards' CPU work "
                  "(linear in tokens) / N + round trips × the overhead per round trip "
                  "measured here (about the same number of round trips at any size). One "
                  "worker process per dedicated machine. The overhead was measured on "
                  "loopback under load; a LAN adds about 1 ms and the transfer of W "
                  "(D × J doubles, twice per call) per round trip.", "",
                  "| tokens | N = 1 | N = 2 | N = 4 | N = 8 | N = 16 |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for n in (200_000, 1_000_000, 10_000_000):
            lines.append(f"| {n} | " + " | ".join(
                f"{estimate_n_machines(p, n, m):.0f} s" for m in (1, 2, 4, 8, 16)) + " |")
        lines.append("")
    write_results(out, "scale_cluster", "\n".join(lines), report)
    return lines


def _in_child(job: dict) -> dict:
    return in_fresh_process(run_job, job)


def exponent(rows: list[dict]) -> float | None:
    pts = [(r["train_tokens"], r.get("fit_cpu_s", r.get("fit_s"))) for r in rows
           if r.get("fit_cpu_s", r.get("fit_s"))]
    if len(pts) < 2:
        return None
    x = np.log([p[0] for p in pts])
    y = np.log([p[1] for p in pts])
    return float(np.polyfit(x, y, 1)[0])


def run(args, log=print) -> dict:
    jobs = []
    if args.sizes:
        check_data(DATA_DIR, ["chunking"])
        for n in args.sizes:
            methods = ["GPSL2 sparse", "GPSL2 sparse, Jensen", "CRFsuite"]
            if n <= args.full_max:
                methods.insert(0, "GPSL2 full")
            jobs += [{"source": "chunking", "size": n, "method": m, "seed": args.seed,
                      "labels": None, "repeats": args.repeats} for m in methods]
    for seed in range(args.seed + 1, args.seed + 1 + args.split_seeds):
        jobs += [{"source": "split", "size": args.split_size, "method": m, "seed": seed,
                  "labels": None, "repeats": 1} for m in ("GPSL2 sparse", "CRFsuite")]
    top = max(args.synthetic) if args.synthetic else None
    for n in args.synthetic or []:
        jobs += [{"source": "synthetic", "size": n, "method": m, "seed": args.seed,
                  "labels": args.labels, "repeats": args.repeats,
                  **({"explain": True} if n == top and m == "GPSL2 sparse" else {})}
                 for m in ("GPSL2 sparse", "CRFsuite")]
    # (f): the goal pairs again, interleaved (the first run of each is in the jobs above)
    for rep in range(1, max(1, args.goal_repeats)):
        if args.sizes and args.split_size in args.sizes:
            jobs += [{"source": "chunking", "size": args.split_size, "method": m,
                      "seed": args.seed, "labels": None, "repeats": 1, "goal_repeat": rep}
                     for m in ("GPSL2 sparse", "CRFsuite")]
        if top:
            jobs += [{"source": "synthetic", "size": top, "method": m, "seed": args.seed,
                      "labels": args.labels, "repeats": 1, "goal_repeat": rep}
                     for m in ("GPSL2 sparse", "CRFsuite")]
    rows = []
    for job in jobs:
        r = _in_child(job)
        rows.append(r)
        log(f"[{r['source']} {r['size']:>6} {r['method']:<13}] {r['train_tokens']:>7} tokens "
            f"fit {r['fit_cpu_s']:7.1f} CPU s ({r['fit_s']:6.1f} s) loss {r['loss']:6.2f}% "
            f"peak {r['peak_rss_mib']:7.0f} MiB predict {r['predict_us_per_token']:7.1f} "
            "us/token" + (" (goal repeat)" if r.get("goal_repeat") else ""))
    extra = [r for r in rows if r.get("goal_repeat")]
    rows = [r for r in rows if not r.get("goal_repeat")]
    summary = {}
    for source in ("chunking", "synthetic", "split"):
        for method in ("GPSL2 full", "GPSL2 sparse", "GPSL2 sparse, Jensen", "CRFsuite"):
            sel = [r for r in rows if r["source"] == source and r["method"] == method]
            if sel:
                summary[f"{source}/{method}"] = {"exponent": exponent(sel),
                                                 "sizes": [r["size"] for r in sel]}
    return {"rows": rows, "goal_runs": extra, "summary": summary,
            "goals": goals(rows, extra, args.split_size, top)}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="*", default=[25, 50, 100, 200, 400, 800])
    p.add_argument("--full-max", type=int, default=100,
                   help="largest training size (sentences) of the full GP (default 100: "
                        "its time grows as n^2.5, 350 s at 200 sentences)")
    p.add_argument("--synthetic", type=int, nargs="*", default=[20000, 50000, 200000])
    p.add_argument("--labels", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3,
                   help="tagging-time repeats per model (median)")
    p.add_argument("--goal-repeats", type=int, default=3,
                   help="runs of each goal pair in all (default 3; medians)")
    p.add_argument("--split-size", type=int, default=800,
                   help="training sentences of the repeated splits of (d) (default 800)")
    p.add_argument("--split-seeds", type=int, default=4,
                   help="further random splits for (d) (default 4; 0 = none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cluster", action="store_true",
                   help="run only (e): single process against a Dask LocalCluster")
    p.add_argument("--cluster-sizes", type=int, nargs="+", default=[200000, 1000000],
                   help="synthetic training tokens of (e) (default 200000 1000000)")
    p.add_argument("--cluster-workers", type=int, default=2,
                   help="worker processes of the LocalCluster (default 2)")
    p.add_argument("--cluster-budget", type=float, default=1500.0,
                   help="skip a size of (e) whose two fits are estimated to take longer "
                        "(seconds, default 1500)")
    p.add_argument("--out", default=str(RESULTS_DIR))
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if args.cluster:
        report = run_cluster(args, log=lambda m: print(m, file=sys.stderr, flush=True))
        report.update(labels=args.labels,
                      command=shlex.join(["python", "-m", "bench.scale", *argv]),
                      date=now_iso(), machine=machine_info(), git=git_commit())
        print("\n".join(write_cluster(report, Path(args.out))))
        return 0
    try:
        report = run(args, log=lambda m: print(m, file=sys.stderr, flush=True))
    except DataMissing as exc:
        print(f"bench.scale: {exc}", file=sys.stderr)
        return 2
    report.update(split_size=args.split_size,
                  command=shlex.join(["python", "-m", "bench.scale", *argv]), date=now_iso(),
                  machine=machine_info(), git=git_commit())
    print("\n".join(write(report, Path(args.out))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
