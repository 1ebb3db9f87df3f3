"""The toy-arena page's figure, a pure function of a `toy_envs.ArenaResult` (partial or finished).

Four panels in one figure: expected reward, pass@k, entropy and the clip fractions. Curves are
`ArenaResult.band`: the across-seed mean per method and the band holding the middle 95 % of seeds. One figure
with one legend rather than four charts, and at most `MAX_POINTS` steps drawn per curve (every n-th step, the
last always included; the values at those steps are exact), because while a run trains the browser redraws
the figure every half second and plotly's drawing time, not the server's, sets how often that can happen
(benchmarks/bench_arena_redraw.py). Methods keep the colours of the reallocation page
(`divclip.app.realloc_figures.spec_colours`). Every x-axis spans the run's steps, 0 to `total_steps`, from the
first redraw on, so the axes do not rescale as steps arrive; `uirevision` names the run, so a zoom the reader
chose survives the redraws of that run. Given the 90 % threshold (`toy_envs.report.threshold_90`), the reward
panel draws it as a dashed line labelled with its value.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from divclip.app.figures import panel_title
from divclip.app.realloc_figures import figure, layout, spec_colours

MAX_POINTS = 300
# Two columns × two rows of panels, laid out by hand (as app.figures does) to build the figure in one go.
_COLS = ((0.0, 0.45), (0.55, 1.0))
_ROWS = ((0.58, 1.0), (0.0, 0.42))
BEST_LINE = "#999999"
THRESHOLD_LINE = "#555555"


def panels(k: int) -> tuple[tuple[str, str], ...]:
    """(metric, panel title) in drawing order; 'clipfrac' is the clip-fraction panel."""
    # Short enough for two panels side by side on a 390 px phone; the page's caption says the rest.
    return (
        ("expected_reward", "expected reward"),
        (f"pass@{k}", f"pass@{k}"),
        ("entropy", "entropy / token"),
        ("clipfrac", "clip fraction"),
    )


def shown_steps(steps_done: int, max_points: int = MAX_POINTS) -> np.ndarray:
    """0-based indices of the steps drawn: all of them up to max_points, else evenly spaced with the last."""
    if steps_done <= max_points:
        return np.arange(steps_done)
    return np.unique(np.linspace(0, steps_done - 1, max_points).round().astype(np.int64))


def _rgba(hex_colour: str, alpha: float) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _band_traces(result, metric: str, idx: np.ndarray, axes: dict, colours: dict, legend: bool) -> list[dict]:
    mean, lo, hi = (a[:, idx] for a in result.band(metric))  # each (methods, shown steps)
    x = idx + 1
    traces = []
    for i, m in enumerate(result.methods):
        c = colours[m]
        if len(result.seeds) > 1:
            traces.append(
                dict(
                    type="scatter",
                    x=np.concatenate([x, x[::-1]]),
                    y=np.concatenate([hi[i], lo[i][::-1]]),
                    fill="toself",
                    fillcolor=_rgba(c, 0.15),
                    line=dict(width=0),
                    hoverinfo="skip",
                    showlegend=False,
                    legendgroup=m,
                    name=f"{m} middle 95 % of seeds",
                    meta=dict(kind="band", method=m, metric=metric),
                    **axes,
                )
            )
        traces.append(
            dict(
                type="scatter",
                x=x,
                y=mean[i],
                mode="lines",
                name=m,
                legendgroup=m,
                showlegend=legend,
                line=dict(color=c, width=2.5),
                meta=dict(kind="mean", method=m, metric=metric),
                hovertemplate=f"{m} {metric}: %{{y:.4f}} at step %{{x}}<extra></extra>",
                **axes,
            )
        )
    return traces


def _clip_traces(result, idx: np.ndarray, axes: dict, colours: dict) -> list[dict]:
    traces = []
    for metric, dash in (("clipfrac_high", "solid"), ("clipfrac_low", "dash")):
        mean = result.metrics[metric].mean(1)[:, idx]  # (methods, shown steps)
        for i, m in enumerate(result.methods):
            traces.append(
                dict(
                    type="scatter",
                    x=idx + 1,
                    y=mean[i],
                    mode="lines",
                    name=m,
                    legendgroup=m,
                    showlegend=False,
                    line=dict(color=colours[m], width=1.5, dash=dash),
                    meta=dict(kind="mean", method=m, metric=metric),
                    hovertemplate=f"{m} {metric}: %{{y:.4f}} at step %{{x}}<extra></extra>",
                    **axes,
                )
            )
    return traces


def step_range(result) -> list[float]:
    """The x range of every panel: the run's whole length while it trains, however many steps are done; once
    stopped, the steps it did (after Stop at 167 of 3000 the curves filled 5 % of the panel, issue 34)."""
    if getattr(result, "stopped", False):
        return [0.0, float(max(result.steps_done, 1))]
    return [0.0, float(max(result.total_steps, result.steps_done, 1))]


def arena_figure(result, k: int = 8, max_points: int = MAX_POINTS, threshold: float | None = None) -> go.Figure:
    """Reward, pass@k, entropy and clip fractions over the steps, mean over seeds with the middle-95 % band.

    threshold: the expected reward that "steps to 90 %" counts to, drawn on the reward panel (None: not drawn).
    """
    if f"pass@{k}" not in result.metrics:
        raise ValueError(f"k must be one of {[m[5:] for m in result.metrics if m.startswith('pass@')]}, got {k!r}")
    n = len(result.seeds)
    title = (
        f"{result.env}: step {result.steps_done} of {result.total_steps}<br><sup>mean over {n} "
        f"seed{'s' if n != 1 else ''}" + (", band: middle 95 % of seeds" if n > 1 else "") + "</sup>"
    )
    colours = spec_colours(result.methods)
    idx = shown_steps(result.steps_done, max_points)
    traces, shapes, notes, axes_layout = [], [], [], {}
    for j, (metric, text) in enumerate(panels(k)):
        col, row = _COLS[j % 2], _ROWS[j // 2]
        suffix = "" if j == 0 else str(j + 1)
        axes = dict(xaxis=f"x{suffix}", yaxis=f"y{suffix}")
        axes_layout[f"xaxis{suffix}"] = dict(
            domain=col,
            anchor=f"y{suffix}",
            range=step_range(result),
            autorange=False,
            title=dict(text="step") if j >= 2 else None,
        )
        axes_layout[f"yaxis{suffix}"] = dict(
            domain=row, anchor=f"x{suffix}", rangemode="tozero" if metric == "clipfrac" else "normal"
        )
        notes.append(panel_title(text, col) | dict(y=row[1], yref="paper"))
        if idx.size == 0:
            continue
        if metric == "clipfrac":
            traces += _clip_traces(result, idx, axes, colours)
        else:
            traces += _band_traces(result, metric, idx, axes, colours, legend=j == 0)
    if np.isfinite(result.best_reward):
        shapes.append(
            dict(
                type="line",
                xref="x domain",
                yref="y",
                x0=0,
                x1=1,
                y0=result.best_reward,
                y1=result.best_reward,
                line=dict(color=BEST_LINE, width=1, dash="dot"),
                layer="below",
            )
        )
    if threshold is not None and np.isfinite(threshold):
        shapes.append(
            dict(
                type="line",
                xref="x domain",
                yref="y",
                x0=0,
                x1=1,
                y0=threshold,
                y1=threshold,
                line=dict(color=THRESHOLD_LINE, width=1, dash="dash"),
                layer="below",
            )
        )
        notes.append(
            dict(
                text=f"90 % threshold {threshold:.4f}",
                xref="x domain",
                yref="y",
                x=0.02,
                y=threshold,
                xanchor="left",
                yanchor="bottom",
                showarrow=False,
                font=dict(size=11, color=THRESHOLD_LINE),
            )
        )
    revision = f"{result.env}|{','.join(result.methods)}|{len(result.seeds)}|{result.total_steps}" + (
        "|stopped" if getattr(result, "stopped", False) else ""
    )
    return figure(
        traces,
        layout(
            title,
            700,
            panels=True,
            hovermode="closest",
            shapes=shapes,
            annotations=notes,
            uirevision=revision,
            **axes_layout,
        ),
    )
