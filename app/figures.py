"""Figures of the pages, as pure functions of theory's intervals returning `plotly.graph_objects.Figure`.

Every number drawn comes from the `ClipInterval`s (theory's bounds) or from the measure's own `value`;
the one formula evaluated here is the PPO surrogate itself, min(r·A, clip(r, l, u)·A) (docs/theory.md §1).
Colours come from `METHOD_COLOURS`, so a method looks the same on every page.

Each figure is built in one go from trace and layout dicts (two side-by-side panels are laid out by hand
rather than with `make_subplots`): incremental `add_shape`/`add_vline` calls cost milliseconds each, and
the clip explorer redraws four figures on every slider move.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from divclip.app.intervals import ClipInterval, format_bound
from divclip.app.methods import METHOD_COLOURS, RATIO_CLIP

__all__ = ["METHOD_COLOURS", "divergence_curves", "interval_chart", "ratio_range", "surrogate_figure"]

N_POINTS = 300
_AXIS_LINE = "#999999"
_DELTA_LINE = "#444444"
# Two panels side by side: x domains, and the gap between them.
_LEFT, _RIGHT = (0.0, 0.46), (0.54, 1.0)


# ------------------------------------------------------------------------------------ log axes
_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
PLAIN_DECADES = 5  # up to this many decades the ticks are plain decimals; wider, powers of ten


def _plain(v: float) -> str:
    return f"{v:.10f}".rstrip("0").rstrip(".") if v < 1 else f"{v:.0f}"


def log_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Tick values and labels of a log axis over [lo, hi]: 1, 2, 5 per decade as plain decimals (0.1, 0.2, 0.5, 1,
    2, 5, 10) over two decades, one per decade (0.001, 0.01) up to five, powers of ten (10⁻⁶) over more; never
    plotly's SI prefixes (100µ, 10n) or its bare minor digits, odd in a maths lecture (issue 34)."""
    if not (0 < lo < hi and math.isfinite(hi)):
        raise ValueError(f"a log axis needs 0 < lo < hi, got lo={lo!r}, hi={hi!r}")
    k0, k1 = math.floor(math.log10(lo) + 1e-9), math.ceil(math.log10(hi) - 1e-9)
    if k1 - k0 <= PLAIN_DECADES:
        steps = (1, 2, 5) if k1 - k0 <= 2 else (1,)  # 1-2-5 over two decades, one tick a decade over more
        vals = [m * 10.0**k for k in range(k0, k1 + 1) for m in steps]
        vals = [float(f"{v:.12g}") for v in vals if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)]
        return vals, [_plain(v) for v in vals]
    step = max(1, math.ceil((k1 - k0) / 8))  # at most about 8 labels
    ks = [k for k in range(k0, k1 + 1) if k % step == 0 and lo * (1 - 1e-9) <= 10.0**k <= hi * (1 + 1e-9)]
    return [10.0**k for k in ks], [
        "1" if k == 0 else "10" if k == 1 else f"10{str(k).translate(_SUPERSCRIPT)}" for k in ks
    ]


def log_axis(lo: float, hi: float, **axis) -> dict:
    """A plotly log axis over [lo, hi] with `log_ticks`' labels (the one log-tick style of every page's figures)
    and no minor ticks; `axis` adds to it (title, domain, anchor …)."""
    vals, text = log_ticks(lo, hi)
    return dict(
        type="log",
        range=[math.log10(lo), math.log10(hi)],
        tickmode="array",
        tickvals=vals,
        ticktext=text,
        minor=dict(ticks="", showgrid=False),
        **axis,
    )


# ------------------------------------------------------------------------------------ helpers
VALIDATE = False  # tests switch plotly's (slow) property validation on; the app skips it


def _figure(traces: list[dict], layout: dict) -> go.Figure:
    # `_validate=False` is plotly's own switch (plotly.express builds figures the same way); it skips
    # per-property checks that cost ~20 ms per figure. tests/app/test_figures.py builds with VALIDATE on.
    return go.Figure(data=traces, layout=layout, _validate=VALIDATE)


TOOLBAR = 36  # px above the title for plotly's toolbar, so that it never sits over the title


def _layout(title: str, height: int, panels: bool = False, subtitle: str = "", **kwargs) -> dict:
    """A short title top left under the toolbar's row, the explanation as a smaller subtitle (long lines would
    be cut off on a phone); the legend under the plot, where any number of measures fits without covering it."""
    top = TOOLBAR + (56 if subtitle else 30) + (30 if panels else 0)  # the subtitle clear of the top tick
    total = height + top - (80 if panels else 50)
    plot = max(total - top - 10, 120)  # the plot area's height in px
    return dict(
        title=dict(
            text=title,
            x=0.0,
            xanchor="left",
            yref="container",
            y=1.0,
            yanchor="top",
            pad=dict(t=TOOLBAR),
            font=dict(size=15),
            subtitle=dict(text=subtitle, font=dict(size=12, color="#555555")),
        ),
        height=total,
        margin=dict(l=10, r=10, t=top, b=10),
        # 75 px under the plot, clear of the tick labels and the axis title whatever the figure's height
        legend=dict(orientation="h", yanchor="top", y=-75 / plot, xanchor="left", x=0.0, font=dict(size=12)),
        font=dict(size=13),
        **kwargs,
    )


def _vline(x: float, xref: str = "x", yref: str = "y domain", **line) -> dict:
    return dict(
        type="line",
        xref=xref,
        yref=yref,
        x0=x,
        x1=x,
        y0=0,
        y1=1,
        line=dict(color=line.get("color", _AXIS_LINE), width=line.get("width", 1), dash=line.get("dash", "solid")),
        layer="below",
    )


# The same builders for the other figure modules (app/correction_figures.py): one title, legend and toolbar style.
figure_of = _figure
page_layout = _layout
vertical_line = _vline


def panel_title(text: str, domain: tuple[float, float]) -> dict:
    return dict(
        text=text,
        xref="paper",
        yref="paper",
        x=sum(domain) / 2,
        y=1.0,
        xanchor="center",
        yanchor="bottom",
        showarrow=False,
        font=dict(size=13),
    )


def _empty(title: str) -> go.Figure:
    return _figure([], _layout(title, 200))


def ratio_range(intervals: Sequence[ClipInterval], pad: float = 0.35) -> tuple[float, float]:
    """x-range in r around every interval: the union of [l, u] widened by `pad` of its span each side."""
    lo = min(iv.lo for iv in intervals)
    hi = max(iv.hi for iv in intervals)
    span = hi - lo
    return max(lo - pad * span, 0.0), hi + pad * span


def log_range(intervals: Sequence[ClipInterval], pad: float = 0.35) -> tuple[float, float]:
    """x-range in log r: the union of [log l, log u] widened by `pad` of its span; l = 0 shows as log r = −3
    or further left."""
    hi = max(math.log(iv.hi) for iv in intervals)
    lows = [math.log(iv.lo) if iv.lo > 0 else -3.0 for iv in intervals]
    lo = min(min(lows), -hi)
    span = hi - lo
    return lo - pad * span, hi + pad * span


def _finite(values) -> np.ndarray:
    out = np.array(values, dtype=np.float64)
    out[~np.isfinite(out)] = np.nan
    return out


def _bound_hover(iv: ClipInterval) -> tuple[list, str]:
    custom = [[iv.lo, iv.eps_low, "l"], [iv.hi, iv.eps_high, "u"]]
    hover = f"{iv.label}: %{{customdata[2]}} = %{{customdata[0]:.6f}} (ε = %{{customdata[1]:.6f}})<extra></extra>"
    return custom, hover


# ------------------------------------------------------------------------------------ figures
def divergence_curves(intervals: Sequence[ClipInterval], delta: float, log_space: bool = False) -> go.Figure:
    """D(r) (or D against log r) for each δ-measure, the δ line, and the interval each one cuts out.

    Markers sit at (l, δ) and (u, δ), the roots theory returned; dotted drops mark them on the axis. The
    ratio clip, whose budget is ε rather than δ, is a shaded band.
    """
    title, subtitle = (
        ("D against log r", "the same intervals in log-ratio space")
        if log_space
        else ("D(r) and the clip interval", "{r : D(r) ≤ δ} for each measure")
    )
    if not intervals:
        return _empty("Nothing to draw: choose a measure")
    x_lo, x_hi = log_range(intervals) if log_space else ratio_range(intervals)
    grid_x = np.linspace(x_lo, x_hi, N_POINTS)
    grid_r = np.exp(grid_x) if log_space else grid_x
    to_x = (lambda r: math.log(r) if r > 0 else x_lo) if log_space else (lambda r: r)
    y_max = 2.5 * delta
    traces, shapes, notes = [], [], []
    for iv in intervals:
        x0, x1 = to_x(iv.lo), to_x(iv.hi)
        if iv.delta is None:  # the ratio clip: its budget is ε, so it is a band, not a level set
            shapes.append(
                dict(
                    type="rect",
                    xref="x",
                    yref="y domain",
                    x0=x0,
                    x1=x1,
                    y0=0,
                    y1=1,
                    fillcolor=iv.colour,
                    opacity=0.12,
                    line=dict(width=0),
                    layer="below",
                )
            )
            band = iv.method if iv.method == RATIO_CLIP else f"{iv.method} ratio clip"
            notes.append(
                dict(
                    text=band,
                    xref="x",
                    yref="y domain",
                    x=x0,
                    y=1.0,
                    xanchor="left",
                    yanchor="top",
                    showarrow=False,
                    font=dict(color=iv.colour, size=12),
                )
            )
            continue
        d = _finite(iv.measure.value(grid_r, iv.p))  # D(r[, p]) from theory
        d[d > 4 * y_max] = np.nan  # far off the chart: keeps the unified hover box short
        where = f" (p = {iv.p:g})" if iv.p is not None else ""
        traces.append(
            dict(
                type="scatter",
                x=grid_x,
                y=d,
                mode="lines",
                name=f"{iv.label}{where}",
                legendgroup=iv.name,
                line=dict(color=iv.colour, width=2.5),
                customdata=grid_r,
                hovertemplate=f"{iv.label}: D = %{{y:.5f}} at r = %{{customdata:.4f}}<extra></extra>",
            )
        )
        custom, hover = _bound_hover(iv)
        # l = 0 means D stays below δ all the way down to r = 0: there is no root to mark on that side.
        roots = [(x, c) for x, c, r in ((x0, custom[0], iv.lo), (x1, custom[1], iv.hi)) if r > 0]
        traces.append(
            dict(
                type="scatter",
                x=[x for x, _ in roots],
                y=[iv.delta] * len(roots),
                mode="markers",
                name=f"{iv.label} bounds",
                showlegend=False,
                legendgroup=iv.name,
                customdata=[c for _, c in roots],
                hovertemplate=hover,
                marker=dict(color=iv.colour, size=10, line=dict(color="white", width=1.5)),
                meta=dict(kind="bounds", measure=iv.name, lo=iv.lo, hi=iv.hi),
            )
        )
        shapes += [
            dict(
                type="line",
                xref="x",
                yref="y",
                x0=x,
                x1=x,
                y0=0,
                y1=iv.delta,
                line=dict(color=iv.colour, width=1, dash="dot"),
            )
            for x, _ in roots
        ]
    shapes.append(
        dict(
            type="line",
            xref="x domain",
            yref="y",
            x0=0,
            x1=1,
            y0=delta,
            y1=delta,
            line=dict(color=_DELTA_LINE, width=1.5, dash="dash"),
        )
    )
    notes.append(
        dict(
            text=f"δ = {delta:.6g}",
            xref="x domain",
            yref="y",
            x=1.0,
            y=delta,
            xanchor="right",
            yanchor="bottom",
            showarrow=False,
            font=dict(color=_DELTA_LINE),
        )
    )
    shapes.append(_vline(0.0 if log_space else 1.0))
    layout = _layout(
        title,
        430,
        subtitle=subtitle,
        hovermode="x unified",
        shapes=shapes,
        annotations=notes,
        xaxis=dict(range=[x_lo, x_hi], title=dict(text="log r" if log_space else "r = π_θ(a) / π_old(a)")),
        yaxis=dict(range=[0, y_max], title=dict(text="D")),
    )
    return _figure(traces, layout)


def interval_chart(intervals: Sequence[ClipInterval]) -> go.Figure:
    """One bar per measure from l to u, in ratio space (left) and log-ratio space (right)."""
    if not intervals:
        return _empty("Nothing to draw: choose a measure")
    r_lo, r_hi = ratio_range(intervals, pad=0.3)
    r_lo -= 0.03 * (r_hi - r_lo)  # room for a marker at l = 0
    g_lo, g_hi = log_range(intervals, pad=0.1)
    traces = []
    for iv in intervals:
        label = f"{iv.method}<br>{iv.budget_text}"
        custom, hover = _bound_hover(iv)
        symbols = ["triangle-left" if iv.lo <= 0 else "circle", "circle"]
        log_x = [math.log(iv.lo) if iv.lo > 0 else g_lo, math.log(iv.hi)]
        for axis, xs, text in (("", [iv.lo, iv.hi], [format_bound(iv.lo), format_bound(iv.hi)]), ("2", log_x, None)):
            traces.append(
                dict(
                    type="scatter",
                    x=xs,
                    y=[label, label],
                    xaxis=f"x{axis}",
                    yaxis=f"y{axis}",
                    mode="lines+markers+text" if text else "lines+markers",
                    name=iv.label,
                    showlegend=False,
                    line=dict(color=iv.colour, width=6),
                    marker=dict(color=iv.colour, size=12, symbol=symbols),
                    text=text,
                    textposition=["bottom center", "top center"],
                    textfont=dict(color=iv.colour),
                    customdata=custom,
                    hovertemplate=hover,
                    cliponaxis=False,
                    meta=dict(kind="interval", space="log" if axis else "ratio", measure=iv.name, lo=iv.lo, hi=iv.hi),
                )
            )
    layout = _layout(
        "The induced ratio clips",
        130 + 84 * len(intervals),  # room for each bar's value labels above and below it (issue 34: overlaps)
        subtitle="left: r ∈ [l, u]; right: log r",
        hovermode="closest",
        xaxis=dict(domain=_LEFT, range=[r_lo, r_hi], title=dict(text="r ∈ [l, u]")),
        xaxis2=dict(domain=_RIGHT, range=[g_lo, g_hi], title=dict(text="log r ∈ [log l, log u]")),
        # Half a category of room above the first bar and below the last for the value labels.
        yaxis=dict(type="category", range=[len(intervals) - 0.35, -0.75]),
        yaxis2=dict(anchor="x2", matches="y", showticklabels=False, type="category"),
        shapes=[_vline(1.0), _vline(0.0, "x2", "y2 domain")],
    )
    return _figure(traces, layout)


def surrogate_figure(intervals: Sequence[ClipInterval]) -> go.Figure:
    """The PPO surrogate min(r·A, clip(r, l, u)·A) for A = +1 and A = −1 under each measure's interval.

    Where a curve is flat its gradient is zero: the token is clipped (r > u with A > 0, r < l with A < 0).
    """
    if not intervals:
        return _empty("Nothing to draw: choose a measure")
    x_lo, x_hi = ratio_range(intervals)
    r = np.linspace(x_lo, x_hi, N_POINTS)
    traces = []
    for axis, adv in (("", 1.0), ("2", -1.0)):
        where = dict(xaxis=f"x{axis}", yaxis=f"y{axis}")
        traces.append(
            dict(
                type="scatter",
                x=r,
                y=r * adv,
                mode="lines",
                name="unclipped r·A",
                showlegend=not axis,
                legendgroup="unclipped",
                line=dict(color="#aaaaaa", width=1, dash="dot"),
                hoverinfo="skip",
                **where,
            )
        )
        for iv in intervals:
            surrogate = np.minimum(r * adv, np.clip(r, iv.lo, iv.hi) * adv)  # docs/theory.md §1
            edge = iv.hi if adv > 0 else iv.lo
            traces.append(
                dict(
                    type="scatter",
                    x=r,
                    y=surrogate,
                    mode="lines",
                    name=iv.label,
                    legendgroup=iv.name,
                    showlegend=not axis,
                    line=dict(color=iv.colour, width=2.5),
                    hovertemplate=f"{iv.label}: %{{y:.4f}}<extra></extra>",
                    **where,
                )
            )
            traces.append(
                dict(
                    type="scatter",
                    x=[edge],
                    y=[edge * adv],
                    mode="markers",
                    showlegend=False,
                    legendgroup=iv.name,
                    name=f"{iv.label} clip point",
                    marker=dict(color=iv.colour, size=9),
                    meta=dict(kind="clip_point", measure=iv.name, adv=adv, r=edge),
                    hovertemplate=f"{iv.label}: clipped beyond r = {format_bound(edge)}<extra></extra>",
                    **where,
                )
            )
    layout = _layout(
        "PPO surrogate min(r·A, clip(r)·A)",
        440,
        panels=True,
        subtitle="flat means zero gradient",
        hovermode="x unified",
        xaxis=dict(domain=_LEFT, range=[x_lo, x_hi], title=dict(text="r")),
        xaxis2=dict(domain=_RIGHT, range=[x_lo, x_hi], title=dict(text="r")),
        yaxis=dict(title=dict(text="surrogate")),
        yaxis2=dict(anchor="x2"),
        shapes=[_vline(1.0), _vline(1.0, "x2", "y2 domain")],
        annotations=[panel_title("A > 0: flat above u", _LEFT), panel_title("A < 0: flat below l", _RIGHT)],
    )
    return _figure(traces, layout)


def intersection_bounds(intervals: Sequence[ClipInterval]) -> tuple[float, float] | None:
    """[max l, min u] over the intervals: where every chosen constraint holds (None for fewer than two)."""
    if len(intervals) < 2:
        return None
    return max(iv.lo for iv in intervals), min(iv.hi for iv in intervals)


def add_intersection(fig: go.Figure, intervals: Sequence[ClipInterval]) -> go.Figure:
    """Shade the intersection [max l, min u] of the intervals on `interval_chart`'s ratio and log-ratio axes
    (a token clipped by all chosen measures at once, `divclip.theory.spec.all_of`)."""
    bounds = intersection_bounds(intervals)
    if bounds is None:
        return fig
    lo, hi = bounds
    text = f"∩ all: [{format_bound(lo)}, {format_bound(hi)}]"
    style = dict(fillcolor="rgba(120, 120, 120, 0.18)", line_width=0, layer="below")
    fig.add_vrect(x0=lo, x1=hi, xref="x", **style)
    # said in the subtitle: inside the plot the label sat on the top bar's value label (issue 34)
    fig.layout.title.subtitle.text = f"{fig.layout.title.subtitle.text}; shaded: {text}"
    if lo > 0:
        fig.add_vrect(x0=math.log(lo), x1=math.log(hi), xref="x2", **style)
    fig.layout.meta = {**(fig.layout.meta or {}), "intersection": [lo, hi]}
    return fig
