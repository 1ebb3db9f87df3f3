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
        horizontal_spacing=0.06,
        vertical_spacing=0.22 / rows,
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
    fig.update_xaxes(type="log", title_text="old probability q")
    fig.update_yaxes(type="log", title_text="ratio r")
    fig.update_layout(
        coloraxis=dict(colorscale="Viridis", cmin=0.0, cmax=top, colorbar=dict(title=colour)),
        height=170 + 300 * rows,
        margin=dict(t=90, l=60, r=20, b=50),
        title=f"Gradient weight {colour} (∂ℓ/∂log π = −A·w; 0 = clipped)",
    )
    return fig


def cross_section_figure(methods, q: float, r: np.ndarray) -> go.Figure:
    """w against r at one old probability q: a solid line for A > 0 and a dashed one for A < 0 per method,
    beside the unclipped PPO weight w = r; methods without a per-token weight are left out."""
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
    fig.update_xaxes(type="log", title_text="ratio r")
    fig.update_yaxes(title_text="w", rangemode="tozero")
    fig.update_layout(
        title=f"Cross-section at q = {q:.4g}",
        height=420,
        margin=dict(t=70, l=60, r=20, b=50),
        legend=dict(orientation="h", y=-0.2),
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


def interval_rows(methods, q: float) -> list[dict]:
    """Per method at old probability q: family, sources, the ratio range kept for A > 0 and for A < 0, and the
    nearest divergence budget (the `divclip atlas` numbers)."""
    out = []
    for label in methods:
        row = atlas_row(find_method(label))
        near = row["nearest"]
        out.append(
            {
                "method": label,
                "family": row["family"],
                "source": ", ".join(row["sources"]),
                f"A > 0 keeps r in (q = {q:.4g})": _range(interval(label, q, 1)),
                f"A < 0 keeps r in (q = {q:.4g})": _range(interval(label, q, -1)),
                "nearest budget": _nearest_text(near),
            }
        )
    return out
