"""``bench.active_learning_pool``'s report: the Markdown tables (labels and annotator actions
to reach each target, the best token strategy), one HTML plot of the curves per data set, and
the JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.active_learning_pool_setup import PEER, SIZES, parse_spec
from bench.common import header_lines, jsonable


def best_token_strategy(res: dict) -> str | None:
    """The token-level GPSL strategy with the lowest mean percent of the pool to 99%."""
    best, val = None, None
    for spec, d in res["strategies"].items():
        if spec == PEER:
            continue
        base, _ = parse_spec(spec)
        if base == "random_sentence" or base.startswith("sentence_") or base == "random":
            continue
        m = d["summary"]["percent_to_99_mean"]
        if m is not None and (val is None or m < val):
            best, val = spec, m
    return best


def _reach_cell(s: dict, level: str) -> str:
    m, sd = s[f"percent_to_{level}_mean"], s[f"percent_to_{level}_std"]
    if m is not None:
        return f"{m:.1f} ± {sd:.1f}" if sd is not None else f"{m:.1f}"
    got = [v for v in s[f"percent_to_{level}"] if v is not None]
    n = len(s[f"percent_to_{level}"])
    return f"never ({len(got)}/{n})" + (
        f" [{', '.join(f'{v:.1f}' for v in got)}]" if got else "")


def _f(v, digits=1):
    return "never" if v is None else f"{v:.{digits}f}"


def write_markdown(report: dict, path: Path) -> None:
    cfg = report["config"]
    lines = header_lines("Active learning at a realistic size (`bench.active_learning_pool`)",
                         report["date"], report["machine"], report["git"], report["command"])
    lines += [
        f"Pools of {', '.join(f'{d} {SIZES[d][0]}' for d in cfg['datasets'])} sentences, fixed "
        f"test slices, {cfg['seeds']} seeds, {cfg['n_init']} seed sentences, rounds of "
        "1-2% of the pool's tokens (given per data set) up to "
        f"{100 * cfg['max_fraction']:.0f}% (a run stops after {cfg['patience']} "
        f"round{'s' if cfg['patience'] != 1 else ''} at or above 99% of full supervision). "
        "GPSL: scalable mode, cold fits, at most the sweeps per fit given for each data set. "
        "Figures "
        "are mean ± sd over the seeds of each seed's own crossing (linear interpolation); "
        "*never (k/n)* = only k of the n seeds reached it within the rounds run (their "
        "crossings in brackets). Actions: annotator actions, a span labeled in one go counts "
        "once.",
        "", f"Compute time {report['seconds']:.0f} s (summed over the processes of a merged "
        "report).", ""]
    for name, res in report["datasets"].items():
        best = best_token_strategy(res)
        mean_tokens = np.mean([s["pool_tokens"] for s in res["seeds"]])
        lines += [f"## {name}", "",
                  f"Pool {res['pool']} sentences ({mean_tokens:.0f}"
                  f" tokens on average), test {res['test']} sentences, rounds of "
                  f"{100 * res.get('round_fraction', cfg['round_fraction']):.0f}% of the pool's "
                  f"tokens, GPSL at most {res.get('max_iter', cfg['max_iter'])} sweeps a fit. "
                  "Full supervision "
                  f"accuracy {res['full_accuracy_mean']:.4f} "
                  f"(sd {res['full_accuracy_std']:.4f})."
                  f" Best token strategy: **{best}**.", "",
                  "| strategy | % of pool to 95% | % of pool to 99% | actions to 99% | "
                  "final acc | median fit (s) |", "|---|---:|---:|---:|---:|---:|"]
        for spec, d in res["strategies"].items():
            s = d["summary"]
            finals = [r["accuracy"][-1] for r in d["runs"]]
            p95 = _reach_cell(s, "95")
            p99 = _reach_cell(s, "99")
            a99 = _f(s["actions_to_99_mean"], 0) + (
                f" ± {s['actions_to_99_std']:.0f}" if s["actions_to_99_std"] is not None else "")
            lines.append(f"| {spec} | {p95} | {p99} | {a99} | {np.mean(finals):.4f} | "
                         f"{_f(s['fit_seconds_median'], 2)} |")
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_html(name: str, res: dict, path: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("against labeled tokens",
                                                        "against annotator actions"))
    for spec, d in res["strategies"].items():
        for col, key in ((1, "labeled_tokens"), (2, "actions")):
            n = min(len(r["accuracy"]) for r in d["runs"])
            x = np.mean([r[key][:n] for r in d["runs"]], axis=0)
            y = np.mean([r["accuracy"][:n] for r in d["runs"]], axis=0)
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=spec,
                                     legendgroup=spec, showlegend=col == 1), row=1, col=col)
    fig.add_hline(y=0.99 * res["full_accuracy_mean"], line_dash="dot",
                  annotation_text="99% of full supervision")
    fig.update_layout(title=f"Active learning on {name} (pool {res['pool']} sentences, mean "
                            "of the seeds' common rounds)", yaxis_title="test token accuracy")
    fig.write_html(path, include_plotlyjs="cdn")


def write_outputs(report: dict, out: Path, stem: str = "active_learning_pool") -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(jsonable(report), indent=1), encoding="utf-8")
    write_markdown(report, out / f"{stem}.md")
    for name, res in report["datasets"].items():
        write_html(name, res, out / f"{stem}_{name}.html")
    return out / f"{stem}.md"
