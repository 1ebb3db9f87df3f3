"""The Atlas page's figures and table, as pure functions: every number comes from `divclip.theory.atlas`
(`gradient_weight`, `interval`, the catalogue); nothing here knows a method's formula.

w is the gradient weight of docs/theory.md §8: ∂ℓ/∂log π = −A·w, so 0 is a clipped token and r an unclipped PPO
token. The heatmaps put old probability q on x and the ratio r on y, both log scale, A > 0 left and A < 0
right, every panel on one colour scale. Cells with q·r > 1 (a new probability above 1) are left blank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from divclip.app.figures import log_axis
from divclip.theory.atlas import atlas_row, find_method, gradient_weight, interval

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")  # one per picked method (at most four)
COLOUR_MODES = ("w", "w / r")
Q_MIN = 1e-4


def q_axis(n: int = 97) -> np.ndarray:
    """Old probabilities from 1e-4 to 1, log spaced."""
    return np.logspace(np.log10(Q_MIN), 0.0, n)


def r_axis(r_max: float, n: int = 121) -> np.ndarray:
    """Ratios from 1/r_max to r_max, log spaced (r = 1 in the middle)."""
    return np.logspace(-np.log10(r_max), np.log10(r_max), n)


@dataclass(frozen=True)
class Panel:
    """One method's weights on the (r, q) grid: `pos` for A > 0, `neg` for A < 0, shape (len r, len q)."""

    label: str
    method: str
    pos: np.ndarray
    neg: np.ndarray


def weight_panels(methods, q: np.ndarray, r: np.ndarray) -> tuple[list[Panel], list[str]]:
    """The panels of the methods that have a per-token weight, and one message per method that has none
    (a sequence-level or batch-selective form says why)."""
    panels, problems = [], []
    feasible = q[None, :] * r[:, None] <= 1.0  # (R, Q) π_θ = q·r is a probability
    for label in methods:
        try:
            pos, neg = (gradient_weight(label, q[None, :], r[:, None], a) for a in (1.0, -1.0))
        except ValueError as exc:
            problems.append(f"{label}: {exc}")
            continue
        panels.append(
            Panel(label, find_method(label).method, np.where(feasible, pos, np.nan), np.where(feasible, neg, np.nan))
        )
    return panels, problems


ZERO_COLOUR = "#d4d4d4"  # w = 0, clipped: a neutral grey, never a colour of the scale
INFEASIBLE_COLOUR = "#ffffff"  # q·r > 1: no token, drawn white with a label
_ZERO_EDGE = 1e-9  # of the colour range: w at or below it is drawn as zero


def colour_scale(top: float) -> list[list]:
    """Grey at w = 0 (clipped), then viridis on w > 0 with w = 1 (an unclipped token at r = 1, or w/r = 1) at the
    scale's middle, so that 'kept' and 'clipped' differ at first sight however large the largest w is."""
    from plotly.colors import sample_colorscale

    one = min(max(1.0 / top, 0.05), 0.95) if top > 0 else 0.5
    below = [one * k / 4 for k in range(1, 5)]  # (0, w = 1]
    above = [one + (1 - one) * k / 4 for k in range(1, 5)]  # (1, top]
    stops = [_ZERO_EDGE, *below, *above]
    shades = sample_colorscale(
        "Viridis", [0.15, *(0.15 + 0.35 * k / 4 for k in range(1, 5))] + [0.5 + 0.5 * k / 4 for k in range(1, 5)]
    )
    return [[0.0, ZERO_COLOUR], [_ZERO_EDGE, ZERO_COLOUR], *([x, c] for x, c in zip(stops, shades))]


def _shown(w: np.ndarray, r: np.ndarray, colour: str) -> np.ndarray:
    return w / r[:, None] if colour == "w / r" else w


def heatmap_figure(
    panels: list[Panel], q: np.ndarray, r: np.ndarray, colour: str = "w", q_mark: float | None = None
) -> go.Figure:
    """One row per method, A > 0 | A < 0, one colour scale; hover gives q, r, w (and w/r); a dotted line marks
    the cross-section at `q_mark`, a grey one the edge q·r = 1."""
    if colour not in COLOUR_MODES:
        raise ValueError(f"colour must be one of {list(COLOUR_MODES)}, got {colour!r}")
    rows = max(len(panels), 1)
    titles = [f"{p.label}: {side}" for p in panels for side in ("A > 0", "A < 0")]
    fig = make_subplots(
        rows=rows,
        cols=2,
        subplot_titles=titles or None,
        shared_xaxes=True,
        shared_yaxes=True,
        horizontal_spacing=0.08,
        vertical_spacing=0.3 / rows,
    )
    values = [_shown(w, r, colour) for p in panels for w in (p.pos, p.neg)]
    top = max((float(np.nanmax(v)) for v in values if np.isfinite(v).any()), default=1.0)
    for i, p in enumerate(panels):
        for j, w in enumerate((p.pos, p.neg)):
            fig.add_trace(
                go.Heatmap(
                    x=q,
                    y=r,
                    z=_shown(w, r, colour),
                    customdata=w / r[:, None],
                    coloraxis="coloraxis",
                    name=f"{p.label} {'A > 0' if j == 0 else 'A < 0'}",
                    hovertemplate=(
                        f"<b>{p.label}</b> {'A > 0' if j == 0 else 'A < 0'}<br>q = %{{x:.4g}}<br>"
                        "r = %{y:.4g}<br>w = %{z:.4g}<br>w/r = %{customdata:.4g}<extra></extra>"
                    ),
                ),
                row=i + 1,
                col=j + 1,
            )
            edge = q >= 1.0 / r.max()
            if edge.any():  # name the blank corner where it is
                qx = float(np.sqrt(q[edge].min() * q.max()))
                fig.add_trace(
                    go.Scatter(
                        x=[qx],
                        y=[r.max() / 1.6],
                        mode="text",
                        text=["q·r > 1"],
                        textposition="middle center",
                        textfont=dict(color="#666", size=11),
                        showlegend=False,
                        hoverinfo="skip",
                        meta=dict(kind="infeasible"),
                    ),
                    row=i + 1,
                    col=j + 1,
                )
            fig.add_trace(
                go.Scatter(
                    x=q[edge],
                    y=1.0 / q[edge],
                    mode="lines",
                    showlegend=False,
                    hoverinfo="skip",
                    line=dict(color="#888", width=1),
                ),
                row=i + 1,
                col=j + 1,
            )
            if q_mark is not None:
                fig.add_trace(
                    go.Scatter(
                        x=[q_mark, q_mark],
                        y=[r.min(), r.max()],
                        mode="lines",
                        showlegend=False,
                        hoverinfo="skip",
                        line=dict(color="white", width=1.5, dash="dot"),
                    ),
                    row=i + 1,
                    col=j + 1,
                )
    # every panel's q ticks labelled, plain log ticks (figures.log_axis); axis titles once per column / row
    fig.update_xaxes(**log_axis(q.min(), q.max()), showticklabels=True)
    fig.update_xaxes(title_text="old probability q", row=rows)
    fig.update_yaxes(**log_axis(r.min(), r.max()))
    fig.update_yaxes(title_text="ratio r", col=1)
    ticks = sorted({0.0, 1.0, top} | ({round(top / 2)} if top > 4 else set()))
    fig.update_layout(
        coloraxis=dict(
            colorscale=colour_scale(top),
            cmin=0.0,
            cmax=top,
            colorbar=dict(
                title=colour,
                tickvals=ticks,
                ticktext=[
                    ("0 clipped" if t == 0 else "1 (unclipped at r = 1)" if t == 1 and colour == "w" else f"{t:g}")
                    for t in ticks
                ],
            ),
        ),
        height=170 + 320 * rows,
        plot_bgcolor=INFEASIBLE_COLOUR,
        margin=dict(t=90, l=60, r=20, b=50),
        title=f"Gradient weight {colour} (∂ℓ/∂log π = −A·w; grey = 0, clipped; white = q·r > 1, no token)",
    )
    return fig


def cross_section_figure(methods, q: float, r: np.ndarray) -> go.Figure:
    """w against r at one old probability q: a solid line for A > 0 and a dashed one for A < 0 per method,
    beside the unclipped PPO weight w = r; methods without a per-token weight are left out. Ratios above 1/q
    (q·r > 1: no probability) are not drawn; their band is shaded and labelled."""
    r_all = np.asarray(r, dtype=float)
    r = r_all[q * r_all <= 1.0]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=r,
            y=r,
            mode="lines",
            name="unclipped PPO (w = r)",
            line=dict(color="#999", dash="dot"),
            hovertemplate="r = %{x:.4g}<extra></extra>",
        )
    )
    for label, colour in zip(methods, COLOURS):
        for a, dash, side in ((1.0, "solid", "A > 0"), (-1.0, "dash", "A < 0")):
            try:
                w = gradient_weight(label, q, r, a)
            except ValueError:
                break
            fig.add_trace(
                go.Scatter(
                    x=r,
                    y=w,
                    mode="lines",
                    name=f"{label}, {side}",
                    line=dict(color=colour, dash=dash, width=2),
                    hovertemplate=f"<b>{label}</b> {side}<br>r = %{{x:.4g}}<br>w = %{{y:.4g}}<extra></extra>",
                )
            )
    fig.update_xaxes(**log_axis(r_all.min(), r_all.max()), title_text="ratio r")
    fig.update_yaxes(title_text="w", rangemode="tozero")
    if r_all.max() * q > 1.0:
        fig.add_vrect(
            x0=1.0 / q,
            x1=r_all.max(),
            fillcolor="#bbbbbb",
            opacity=0.25,
            line_width=0,
        )
        fig.add_annotation(  # on a log axis an annotation's x is log10(r)
            x=float(np.log10(1.0 / q)),
            y=1.0,
            yref="paper",
            xanchor="left",
            yanchor="top",
            showarrow=False,
            text=f" q·r > 1 (r > 1/q = {1 / q:.4g}):<br> not a probability",
            font=dict(color="#555"),
        )
    fig.update_layout(
        title=f"Cross-section at q = {q:.4g}",
        height=460,
        margin=dict(t=70, l=60, r=20, b=50),
        legend=dict(orientation="h", y=-0.3),
    )
    return fig


def _range(bounds, i: int = 0) -> str:
    if bounds is None:
        return "none (no hard clip)"
    lo, hi = (float(np.ravel(b)[i]) for b in bounds)
    return f"[{lo:.5g}, {'∞)' if hi == np.inf else f'{hi:.5g}]'}"


def _nearest_text(near: dict | None) -> str:
    if near is None:
        return "none"
    how = " (equal)" if near["equal"] else f" (d={near['distance']:.3g})"
    return f"{near['measure']} δ={near['delta']:.4g}{how}"


def _moot_upper(bounds, q: float) -> str:
    """'' or the note that at this q the upper bound cannot bind: r = π_θ/q ≤ 1/q < hi."""
    if bounds is None:
        return ""
    hi = float(np.ravel(bounds[1])[0])
    return f"; r ≤ 1/q = {1 / q:.4g} < {hi:.5g}: the upper clip cannot bind" if hi > 1.0 / q else ""


def interval_rows(methods, q: float) -> list[dict]:
    """Per method at old probability q: family, sources, the ratio range kept for A > 0 and for A < 0, and the
    nearest divergence budget (the `divclip atlas` numbers); an upper bound above 1/q is said not to bind."""
    out = []
    for label in methods:
        row = atlas_row(find_method(label))
        near = row["nearest"]
        pos = interval(label, q, 1)
        out.append(
            {
                "method": label,
                "family": row["family"],
                "source": ", ".join(row["sources"]),
                f"A > 0 keeps r in (q = {q:.4g})": _range(pos) + _moot_upper(pos, q),
                f"A < 0 keeps r in (q = {q:.4g})": _range(interval(label, q, -1)),
                "nearest budget": _nearest_text(near),
            }
        )
    return out
