"""Charts of the pages: the one plotly template ``gpsl`` every figure uses, the heatmap of
the Team page and the bound curve of the Train page.  No Streamlit calls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.express as px
import plotly.graph_objects as go
import plotly.io as pio

from pages._chips import PALETTE

PLOT_TEMPLATE = "gpsl"


def _register_plot_template() -> None:
    """One plotly template for every figure of the app (margins, fonts, colours), instead
    of a layout dict repeated per figure."""
    if PLOT_TEMPLATE in pio.templates:
        return
    base = pio.templates["plotly_white"]
    tmpl = go.layout.Template(base)
    tmpl.layout.update(margin=dict(l=10, r=10, t=30, b=10), height=300,
                       font=dict(size=12), colorway=PALETTE,
                       legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))
    pio.templates[PLOT_TEMPLATE] = tmpl


def figure(**layout):
    """A plotly figure with the app's template (and any extra layout)."""
    _register_plot_template()
    return go.Figure(layout={"template": PLOT_TEMPLATE, **layout})


def styled(fig, **layout):
    """Apply the app's template (and extra layout) to a plotly express figure."""
    _register_plot_template()
    fig.update_layout(template=PLOT_TEMPLATE, **layout)
    return fig


def plain(text) -> str:
    """Text shown literally by plotly, which reads ``<a href>``, ``<b>`` ... in titles and
    tick labels (labels and names are user text)."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def heatmap(matrix, x: Sequence[str], y: Sequence[str], title: str, *, zmin: float = 0.0,
            zmax: float = 1.0, digits: int = 2, height: int | None = None,
            x_title: str | None = None, y_title: str | None = None):
    """A plotly heatmap with the app's template and the values written in the cells (an
    empty cell where the value is NaN)."""
    z = [[float(v) if math.isfinite(float(v)) else None for v in row] for row in matrix]
    cells = [["" if v is None else f"{v:.{digits}f}" for v in row] for row in z]
    fig = figure(title=plain(title), height=height or max(260, 60 + 38 * len(y)),
                 xaxis_title=x_title, yaxis_title=y_title)
    fig.add_heatmap(z=z, x=[plain(v) for v in x], y=[plain(v) for v in y], zmin=zmin,
                    zmax=zmax, text=cells,
                    texttemplate="%{text}", colorscale="Blues", hoverongaps=False,
                    colorbar={"thickness": 12})
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category", side="bottom")
    return fig


def bound_figure(bounds: Sequence[float], title: str, first: int = 1, height: int = 300):
    """The bound per iteration (``first``: the iteration of ``bounds[0]``; a stored trace
    starts with the initial bound, iteration 0)."""
    fig = figure(title=title, height=height, xaxis_title="iteration",
                 yaxis_title="variational lower bound", showlegend=False)
    fig.add_scatter(x=list(range(first, first + len(bounds))), y=list(bounds),
                    mode="lines+markers", line={"color": "#4f46e5"})
    fig.update_xaxes(dtick=max(1, len(bounds) // 10))
    return fig


def histogram_figure(bins):
    """The confidence histogram of the unlabeled tokens from its stored bins (``mid``,
    ``count``; a few dozen numbers, never one per token), log scale."""
    fig = figure(title="Confidence of unlabeled tokens (log scale)", height=330, bargap=0.05,
                 xaxis_title="confidence", yaxis_title="tokens (log scale)",
                 xaxis_range=[0, 1], yaxis_type="log")
    fig.add_bar(x=list(bins["mid"]), y=list(bins["count"]), width=float(bins["hi"].iloc[0]
                - bins["lo"].iloc[0]), marker_color="#f59e0b",
                hovertemplate="confidence %{x:.3f}<br>%{y} tokens<extra></extra>")
    return fig


def box_figure(boxes, labels: Sequence[str], colors: dict):
    """Box plots of the confidence per predicted label from their stored quartiles and
    whiskers (``predicted, q1, median, q3, lower, upper, n``)."""
    fig = figure(title="Confidence by predicted label", height=330, showlegend=False,
                 xaxis_title="predicted label", yaxis_title="confidence")
    by = {r["predicted"]: r for r in boxes.to_dict("records")}
    for lab in [lab for lab in labels if lab in by]:
        r = by[lab]
        fig.add_box(x=[plain(lab)], q1=[r["q1"]], median=[r["median"]], q3=[r["q3"]],
                    lowerfence=[r["lower"]], upperfence=[r["upper"]], name=plain(lab),
                    marker_color=colors.get(lab), boxpoints=False,
                    hovertext=f"{int(r['n'])} tokens")
    return fig


def reliability_figure(table, tokens: str):
    """The reliability diagram of the held-out gold (``table``: the stored calibration
    bins, ``tokens``: their count as shown): accuracy per confidence bin, the diagonal and
    the range a calibrated model's accuracy falls in (95%)."""
    fig = figure()
    fig.add_trace(go.Bar(x=table["bin_mid"], y=table["accuracy"],
                         width=0.095, name="accuracy", marker_color="#4f46e5",
                         customdata=table["count"], text=table["count"],
                         textposition="outside", texttemplate="%{text}",
                         hovertemplate="confidence %{x:.2f}<br>accuracy %{y:.3f}"
                                       "<br>%{customdata} tokens<extra></extra>"))
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfect calibration",
                             line={"dash": "dash", "color": "#94a3b8"}))
    # consistency bars: where a perfectly calibrated model's accuracy would fall (95%)
    fig.add_trace(go.Scatter(
        x=table["bin_mid"], y=table["mean_confidence"],
        mode="markers", name="a calibrated model's range (95%)",
        marker={"color": "#f59e0b", "size": 7, "symbol": "line-ew-open"},
        error_y={"type": "data", "symmetric": False, "color": "#f59e0b", "thickness": 2,
                 "array": table["band_up"], "arrayminus": table["band_down"]},
        customdata=table[["band_lo", "band_hi"]],
        hovertemplate="a calibrated model: accuracy %{customdata[0]:.3f}–"
                      "%{customdata[1]:.3f}<extra></extra>"))
    return styled(fig, title=f"Reliability on {tokens} held-out tokens", height=380,
                  xaxis_title="confidence", yaxis_title="accuracy",
                  xaxis_range=[-0.02, 1.02], yaxis_range=[0, 1.12],
                  legend={"orientation": "h", "y": -0.3, "yanchor": "top"})


def learning_figure(curve):
    """Every version's held-out accuracy and mean confidence (``curve``: the learning
    curve table, one row per done version)."""
    long = curve.melt(id_vars=["version", "labeled tokens"],
                      value_vars=["accuracy", "mean confidence"], var_name="figure",
                      value_name="value").dropna(subset=["value"])
    fig = px.line(long, x="version", y="value", color="figure", markers=True,
                  hover_data=["labeled tokens"],
                  title="Every version: held-out accuracy and mean confidence",
                  color_discrete_map={"accuracy": "#16a34a", "mean confidence": "#f59e0b"})
    styled(fig, height=330, yaxis_tickformat=".1%", xaxis_type="category",
           yaxis_title="held-out", xaxis_title="model version",
           legend={"orientation": "h", "y": -0.35, "title": {"text": ""}})
    if not long.empty and long["value"].max() - long["value"].min() < 0.02:
        # close figures (one version): a 2-point window, so the ticks stay distinct
        mid = (long["value"].max() + long["value"].min()) / 2
        fig.update_yaxes(range=[mid - 0.01, mid + 0.01])
    if long.empty:
        fig.add_annotation(text="no held-out gold: no figures per version",
                           showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return fig


def selective_figure(sel):
    """Selective accuracy: the accuracy of the k% most confident held-out tokens."""
    fig = px.line(sel, x="coverage", y="accuracy", markers=True,
                  hover_data=["count", "min_confidence"],
                  title="Selective accuracy: the k% most confident tokens")
    fig.update_traces(line_color="#4f46e5")
    return styled(fig, height=300, xaxis_tickformat=".0%", yaxis_tickformat=".1%",
                  xaxis_title="share of tokens kept (most confident first)")


def activity_figure(activity):
    """Labels set per annotator per day (``day, annotator, labels``)."""
    fig = px.bar(activity, x="day", y="labels", color="annotator",
                 title="Labels set per annotator per day")
    fig.update_traces(width=0.35 if activity["day"].nunique() < 4 else None)
    return styled(fig, height=300, xaxis_type="category")
