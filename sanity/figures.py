"""Pure figure functions for the sanity-check report: report sections in, `plotly.graph_objects.Figure` out.

No numbers are computed here beyond placing what the report already holds (bin centres, log-space bounds).
"""

from __future__ import annotations

import plotly.graph_objects as go

HIGHLIGHT = ("ratio", "kl3")  # bounds drawn on the histogram: the config's clip and what KL3 would do


def log_ratio_histogram_figure(rollouts: dict, measures=HIGHLIGHT) -> go.Figure:
    """Histogram of masked log r, with the clip bounds of `measures` as vertical lines."""
    h = rollouts["histogram"]
    edges = h["edges"]
    centres = [(a + b) / 2 for a, b in zip(edges[:-1], edges[1:])]
    fig = go.Figure(
        go.Bar(
            x=centres, y=h["counts"], width=edges[1] - edges[0], name="tokens", marker_color="#888", showlegend=False
        )
    )
    dashes = ("solid", "dash", "dot", "dashdot")
    top = max(h["counts"], default=1) * 1.08
    for i, name in enumerate(m for m in measures if m in h["log_bounds"]):
        # One legend entry per measure, its two bounds as one trace: labels beside the lines overlapped each other
        # and the bars when two measures' bounds are close (ratio and KL3 share l = 1 − ε_low).
        xs = [x for x in h["log_bounds"][name] if x is not None]
        fig.add_trace(
            go.Scatter(
                x=[v for x in xs for v in (x, x, None)],
                y=[v for _ in xs for v in (0, top, None)],
                mode="lines",
                name=f"{name}: "
                + ", ".join(
                    f"{side} at log r = {x:.3f}"
                    for x, side in zip(h["log_bounds"][name], ("lower", "upper"))
                    if x is not None
                ),
                line=dict(
                    color=("#d62728", "#1f77b4", "#2ca02c", "#9467bd")[i % 4], dash=dashes[i % len(dashes)], width=2
                ),
                hoverinfo="skip",
            )
        )
    fig.update_layout(
        title=f"log r on {rollouts['n_tokens']} tokens ({rollouts['ratios']['source']})",
        xaxis_title="log r = log π_θ − log π_old",
        yaxis_title="tokens",
        yaxis_range=[0, top],
        showlegend=True,
        legend=dict(orientation="h", yanchor="top", y=-0.25, xanchor="left", x=0.0),
    )
    return fig


def delta_sweep_figure(rollouts: dict) -> go.Figure:
    """Clip fraction against the budget δ (ε for the ratio measure), one line per measure; the configured
    budget of each measure is marked."""
    sweep = rollouts["sweep"]
    fig = go.Figure()
    for name, series in sweep["measures"].items():
        fig.add_trace(go.Scatter(x=sweep["grid"], y=series["clipfrac"], mode="lines", name=name))
    for m in rollouts["measures"]:
        if m["problem"] or m["budget"] is None:
            continue
        x = m["budget"].get("delta", m["budget"].get("eps_low"))
        fig.add_trace(
            go.Scatter(
                x=[x],
                y=[m["clipfrac"]],
                mode="markers",
                name=f"{m['measure']} (config)",
                marker={"symbol": "x", "size": 9},
                showlegend=False,
            )
        )
    fig.update_layout(
        title="Clip fraction against the budget",
        xaxis_type="log",
        xaxis_title="budget δ (ratio: ε)",
        yaxis_title="clip fraction",
        yaxis_tickformat=".1%",
    )
    return fig


def bucket_figure(rollouts: dict, measure: str) -> go.Figure:
    """Clip fractions of one measure by old-token probability bucket: lower side (A < 0), upper side (A > 0)."""
    entry = next(m for m in rollouts["measures"] if m["measure"] == measure)
    buckets = entry.get("buckets") or []
    fig = go.Figure()
    for sign, side, label in (("A<0", "frac_low", "lower bound (A < 0)"), ("A>0", "frac_high", "upper bound (A > 0)")):
        rows = [b for b in buckets if b["sign"] == sign]
        fig.add_trace(
            go.Bar(
                x=[b["p_bucket"] for b in rows],
                y=[b[side] for b in rows],
                name=label,
                customdata=[b["tokens"] for b in rows],
                hovertemplate="%{y:.2%} of %{customdata} tokens",
            )
        )
    fig.update_layout(
        title=f"{measure}: clipped tokens by π_old(a)",
        barmode="group",
        xaxis_title="old-token probability p",
        yaxis_title="clipped fraction of the cell",
        yaxis_tickformat=".1%",
    )
    return fig


def budget_intervals_figure(budget: dict) -> go.Figure:
    """The ratio interval each p-independent measure allows at the budget matching ε_low (what it would clip)."""
    rows = [r for r in budget.get("equivalents", []) if r["p"] is None and r["delta_from_eps_low"] is not None]
    fig = go.Figure()
    for r in rows:
        lo, hi = 1.0 - budget["eps_low"], 1.0 + r["implied_eps_high"]
        fig.add_trace(
            go.Scatter(
                x=[lo, hi], y=[r["measure"]] * 2, mode="lines+markers", name=r["measure"], hovertemplate="%{x:.4f}"
            )
        )
    if budget.get("eps_high") is not None and budget.get("eps_low") is not None:
        fig.add_vline(
            x=1.0 + budget["eps_high"],
            line_dash="dash",
            annotation_text="config 1+ε_high",
            annotation_position="top left",
        )  # inside the plot: at the right edge it was cut off
    fig.update_layout(
        title=f"Clip interval at the budget of ε_low = {budget.get('eps_low')}",
        xaxis_title="ratio r",
        showlegend=False,
        height=120 + 30 * max(len(rows), 1),
    )
    return fig


def correction_kept_figure(section: dict) -> go.Figure:
    """Per sequence (a marker at its length), the share of its tokens a rollout correction keeps (weight > 0, not
    rejected), as colour; one row per correction (report["corrections"], `divclip.sanity.corrections`)."""
    fig = go.Figure()
    for i, e in enumerate(section["corrections"]):
        seq = e["per_sequence"]
        fig.add_trace(
            go.Scatter(
                x=seq["length"],
                y=[e["label"]] * len(seq["length"]),
                mode="markers",
                name=e["label"],
                marker={
                    "size": 9,
                    "symbol": "line-ns-open",
                    "line": {"width": 3},
                    "color": seq["kept"],
                    "cmin": 0.0,
                    "cmax": 1.0,
                    "colorscale": [[0.0, "#c0392b"], [0.5, "#f1c40f"], [1.0, "#27ae60"]],
                    "showscale": i == 0,
                    "colorbar": {"title": {"text": "share kept"}},
                },
                hovertemplate="length %{x}: %{marker.color:.3f} kept<extra>%{y}</extra>",
            )
        )
    fig.update_layout(
        title=f"Share of each sequence's tokens kept, by length ({section['file']})",
        xaxis_title="sequence length (tokens)",
        yaxis={"autorange": "reversed", "automargin": True},
        showlegend=False,
        margin={"l": 12 + 7 * max((len(e["label"]) for e in section["corrections"]), default=10)},
    )
    return fig


def correction_weight_figure(section: dict) -> go.Figure:
    """Histogram (as steps, on shared bins) of the importance weights each correction applies to the valid tokens."""
    fig = go.Figure()
    dashes = ("solid", "dash", "dot", "dashdot")
    for i, e in enumerate(e for e in section["corrections"] if e["weight_histogram"] is not None):
        h = e["weight_histogram"]
        edges = h["edges"]
        centres = [(a + b) / 2 for a, b in zip(edges[:-1], edges[1:])]
        fig.add_trace(
            go.Scatter(
                x=centres,
                y=h["counts"],
                mode="lines",
                line={"shape": "hvh", "dash": dashes[i % len(dashes)], "width": 2},
                name=e["label"],
            )
        )
    fig.update_layout(
        title="Importance weights w(ρ) applied, ρ = π_old/π_rollout",
        xaxis_title="weight",
        yaxis_title="tokens per bin",
        legend={"orientation": "h", "y": -0.25},
    )
    return fig
