"""Figures of the mass-reallocation page, pure functions of `divclip.theory.reallocation` results.

Every number drawn is a field of a `Comparison` (feasible boxes, the exact one-step optimum, the softmax
drift over PPO epochs) or of a `HeadroomCurve`; nothing is recomputed here. A spec keeps one colour on every
figure: the presets take their method's colour from `divclip.app.methods.METHOD_COLOURS`, other specs the colours no
preset uses. Figures are built from trace and layout dicts in one go, as in `divclip.app.figures`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from divclip.app import figures
from divclip.app.methods import METHOD_COLOURS, method_for
from divclip.theory.spec import PRESETS

# theory.spec.PRESETS name -> method label of app.methods (and so its colour), for the token-level clip presets
# (grpo, dapo, atr, dppo_kl, dppo_tv); gspo and sapo take spare colours.
PRESET_METHOD = {
    name: method_for(s.measure_name, s.eps_low, s.eps_high)
    for name, s in PRESETS.items()
    if s.form != "sapo" and s.level == "token"
}
_SPARE_COLOURS = tuple(c for m, c in METHOD_COLOURS.items() if m not in PRESET_METHOD.values())
ACTION_COLOURS = ("#3b3b3b", "#3182bd", "#e6550d", "#31a354", "#756bb1", "#8c6d31", "#d6616b", "#636363")
_ZERO_LINE = "#999999"
_LEFT, _RIGHT = (0.0, 0.46), (0.54, 1.0)


# ------------------------------------------------------------------------------------ helpers
def spec_colours(labels: Sequence[str]) -> dict[str, str]:
    """One colour per spec label: a preset's method colour, else the next colour no preset uses."""
    out, spare = {}, 0
    for label in labels:
        if label in PRESET_METHOD:
            out[label] = METHOD_COLOURS[PRESET_METHOD[label]]
        else:
            out[label] = _SPARE_COLOURS[spare % len(_SPARE_COLOURS)]
            spare += 1
    return out


def figure(traces: list[dict], layout: dict) -> go.Figure:
    """One builder for every app figure, so one switch (`divclip.app.figures.VALIDATE`) governs plotly validation."""
    return figures._figure(traces, layout)


def layout(title: str, height: int, panels: bool = False, **kwargs) -> dict:
    """The app's figure layout (`divclip.app.figures._layout`): title top left under the toolbar, the legend
    under the plot. Above the plot it sat on four figures' titles, and a long legend ran past the right edge
    (the "dppo_tv" chip was cut, issue 34)."""
    return {**figures._layout(title, height, panels=panels, **kwargs), "template": "plotly_white"}


def empty(title: str, note: str, height: int = 260) -> go.Figure:
    return figure(
        [],
        layout(
            title,
            height,
            xaxis=dict(visible=False),
            yaxis=dict(visible=False),
            annotations=[
                dict(text=note, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False, font=dict(size=14))
            ],
        ),
    )


def _hline(y: float, xref: str = "x domain", yref: str = "y", dash: str = "solid") -> dict:
    return dict(
        type="line",
        xref=xref,
        yref=yref,
        x0=0,
        x1=1,
        y0=y,
        y1=y,
        line=dict(color=_ZERO_LINE, width=1, dash=dash),
        layer="below",
    )


def _vline(x: float) -> dict:
    return dict(
        type="line",
        xref="x",
        yref="y domain",
        x0=x,
        x1=x,
        y0=0,
        y1=1,
        line=dict(color=_ZERO_LINE, width=1),
        layer="below",
    )


def action_label(i: int, p: float, a: float) -> str:
    return f"a{i}: p = {p:.3g}, A = {a:+.3g}"


# ------------------------------------------------------------------------------------ figures
def feasible_figure(comp, colours: dict[str, str]) -> go.Figure:
    """Per action and spec: the box of Δπ one step may reach, the LP optimum (◆) and the drift after E epochs (✕).

    The box is [−room_down, room_up] = [lo·p − p, min(1, hi·p) − p]; a ✕ outside it is mass the softmax moved
    although the token's own gradient was clipped (per-token clipping is not a trust region).
    """
    k, n = comp.probs.size, len(comp.rows)
    offsets = np.linspace(-0.3, 0.3, n) if n > 1 else np.zeros(1)
    traces = []
    for s, row in enumerate(comp.rows):
        f, o, d = row.feasible, row.optimum, row.drift
        y = np.arange(k) + offsets[s]
        c = colours[row.label]
        seg_x = np.column_stack([-f.room_down, f.room_up, np.full(k, np.nan)]).ravel()
        seg_y = np.column_stack([y, y, np.full(k, np.nan)]).ravel()
        custom = np.column_stack([f.q_min, f.q_max, f.lo, f.hi])
        traces.append(
            dict(
                type="scatter",
                x=seg_x,
                y=seg_y,
                mode="lines",
                name=row.label,
                legendgroup=row.label,
                line=dict(color=c, width=7),
                hoverinfo="skip",
                meta=dict(kind="box", spec=row.label),
            )
        )
        traces.append(
            dict(
                type="scatter",
                x=o.delta,
                y=y,
                mode="markers",
                name=f"{row.label} LP optimum",
                showlegend=False,
                legendgroup=row.label,
                marker=dict(color=c, size=11, symbol="diamond", line=dict(color="white", width=1)),
                customdata=custom,
                meta=dict(kind="optimum", spec=row.label),
                hovertemplate=(
                    f"{row.label}: LP Δ = %{{x:+.4f}}<br>box q ∈ [%{{customdata[0]:.4f}}, "
                    "%{customdata[1]:.4f}], r ∈ [%{customdata[2]:.4f}, %{customdata[3]:.4f}]<extra></extra>"
                ),
            )
        )
        traces.append(
            dict(
                type="scatter",
                x=d.probs[-1] - d.probs_old,
                y=y,
                mode="markers",
                name=f"{row.label} PG",
                showlegend=False,
                legendgroup=row.label,
                marker=dict(color=c, size=10, symbol="x-thin", line=dict(color=c, width=2.5)),
                meta=dict(kind="drift", spec=row.label),
                hovertemplate=f"{row.label}: after {d.epochs} epoch(s) Δ = %{{x:+.4f}}<extra></extra>",
            )
        )
    for name, symbol in (("◆ one-step optimum (LP)", "diamond"), (f"✕ after {comp.epochs} PPO epoch(s)", "x-thin")):
        traces.append(
            dict(
                type="scatter",
                x=[None],
                y=[None],
                mode="markers",
                name=name,
                marker=dict(color="#555555", size=10, symbol=symbol, line=dict(color="#555555", width=2)),
            )
        )
    ticks = [action_label(i, p, a) for i, (p, a) in enumerate(zip(comp.probs, comp.adv))]
    return figure(
        traces,
        layout(
            "Where each action's probability may go in one step (bar) and where it goes",
            170 + k * (34 + 16 * n),
            hovermode="closest",
            shapes=[_vline(0.0)],
            xaxis=dict(title=dict(text="Δπ(a) = π_new(a) − π_old(a)"), zeroline=False),
            yaxis=dict(tickvals=list(range(k)), ticktext=ticks, autorange="reversed", zeroline=False),
        ),
    )


def flow_figure(optimum, colour: str, label: str | None = None) -> go.Figure:
    """The one-step optimum's mass flow donor → receiver (`Optimum.flow`), as a Sankey diagram."""
    title = f"{label or optimum.spec}: mass moved by the one-step optimum"
    src, dst = np.nonzero(optimum.flow > 1e-12)
    if src.size == 0:
        return empty(title, "No mass moves: every action already sits where the best step leaves it.")
    donors, receivers = sorted(set(src.tolist())), sorted(set(dst.tolist()))
    node_of = {("d", i): n for n, i in enumerate(donors)}
    node_of.update({("r", j): len(donors) + n for n, j in enumerate(receivers)})
    labels = [f"a{i} {optimum.delta[i]:+.4f}" for i in donors] + [f"a{j} {optimum.delta[j]:+.4f}" for j in receivers]
    values = optimum.flow[src, dst]
    node_colours = ["#999999"] * len(donors) + [colour] * len(receivers)
    trace = dict(
        type="sankey",
        arrangement="fixed",
        valueformat=".4f",
        textfont=dict(color="#222222", size=13),
        node=dict(
            label=labels,
            color=node_colours,
            pad=18,
            thickness=16,
            x=[0.01] * len(donors) + [0.99] * len(receivers),
            y=[(n + 0.5) / len(donors) for n in range(len(donors))]
            + [(n + 0.5) / len(receivers) for n in range(len(receivers))],
        ),
        link=dict(
            source=[node_of[("d", i)] for i in src],
            target=[node_of[("r", j)] for j in dst],
            value=values,
            color=[_alpha(colour, 0.35)] * len(values),
            hovertemplate="%{source.label} → %{target.label}: %{value:.4f}<extra></extra>",
        ),
        meta=dict(kind="flow", spec=optimum.spec, source=src.tolist(), target=dst.tolist(), value=values.tolist()),
    )
    return figure([trace], layout(title, 140 + 60 * max(len(donors), len(receivers), 2)))


def _alpha(hex_colour: str, alpha: float) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def bucket_figure(comp, colours: dict[str, str]) -> go.Figure:
    """Net mass by confidence bucket of π_old: the one-step optimum (left), after E PPO epochs (right)."""
    traces = []
    for row in comp.rows:
        for axis, values in (("", row.optimum.net_mass_by_bucket), ("2", row.drift.net_mass_by_bucket[-1])):
            traces.append(
                dict(
                    type="bar",
                    x=list(comp.bucket_labels),
                    y=values,
                    name=row.label,
                    legendgroup=row.label,
                    showlegend=not axis,
                    marker=dict(color=colours[row.label]),
                    xaxis=f"x{axis}",
                    yaxis=f"y{axis}",
                    meta=dict(kind="bucket", spec=row.label, stage="pg" if axis else "lp"),
                    hovertemplate=f"{row.label}: %{{x}} net %{{y:+.4f}}<extra></extra>",
                )
            )
    return figure(
        traces,
        layout(
            "Net probability mass gained by each confidence bucket of π_old",
            380,
            panels=True,
            barmode="group",
            hovermode="closest",
            xaxis=dict(domain=_LEFT, title=dict(text="π_old(a) bucket")),
            xaxis2=dict(domain=_RIGHT, title=dict(text="π_old(a) bucket")),
            yaxis=dict(title=dict(text="Σ Δπ in bucket"), zeroline=True, zerolinecolor=_ZERO_LINE),
            yaxis2=dict(anchor="x2", matches="y", zeroline=True, zerolinecolor=_ZERO_LINE),
            annotations=[
                figures.panel_title("one-step optimum (LP)", _LEFT),
                figures.panel_title(f"softmax PG after {comp.epochs} epoch(s)", _RIGHT),
            ],
        ),
    )


def entropy_figure(comp, colours: dict[str, str]) -> go.Figure:
    """H(π) over the PPO epochs for every spec, with the one-step optimum's entropy at epoch 1 (◆)."""
    traces = []
    h0 = float(comp.rows[0].drift.entropy[0]) if comp.rows else 0.0
    for row in comp.rows:
        d, c = row.drift, colours[row.label]
        traces.append(
            dict(
                type="scatter",
                x=np.arange(d.epochs + 1),
                y=d.entropy,
                mode="lines+markers",
                name=row.label,
                legendgroup=row.label,
                line=dict(color=c, width=2.5),
                marker=dict(size=5),
                meta=dict(kind="entropy", spec=row.label),
                hovertemplate=f"{row.label}: H = %{{y:.4f}} after epoch %{{x}}<extra></extra>",
            )
        )
        traces.append(
            dict(
                type="scatter",
                x=[1],
                y=[h0 + row.optimum.entropy_change],
                mode="markers",
                showlegend=False,
                name=f"{row.label} LP",
                legendgroup=row.label,
                marker=dict(color=c, size=11, symbol="diamond", line=dict(color="white", width=1)),
                meta=dict(kind="entropy_lp", spec=row.label),
                hovertemplate=f"{row.label}: one-step optimum H = %{{y:.4f}}<extra></extra>",
            )
        )
    return figure(
        traces,
        layout(
            "Entropy H(π) over PPO epochs (◆ one-step optimum)",
            380,
            hovermode="closest",
            shapes=[_hline(h0, dash="dot")],
            xaxis=dict(title=dict(text="epoch"), dtick=max(1, comp.epochs // 10)),
            yaxis=dict(title=dict(text="H (nats)")),
        ),
    )


def ratio_figure(drift, adv, label: str | None = None) -> go.Figure:
    """One spec: each action's ratio π_e/π_old over the epochs, its clip interval (dashed), clipped epochs (○)."""
    k = drift.probs_old.size
    x = np.arange(drift.epochs + 1)
    traces, shapes = [], []
    for i in range(k):
        c = ACTION_COLOURS[i % len(ACTION_COLOURS)]
        name = action_label(i, drift.probs_old[i], adv[i])
        traces.append(
            dict(
                type="scatter",
                x=x,
                y=drift.ratio[:, i],
                mode="lines",
                name=name,
                legendgroup=f"a{i}",
                line=dict(color=c, width=2.5),
                meta=dict(kind="ratio", action=i),
                hovertemplate=f"a{i}: r = %{{y:.4f}} after epoch %{{x}}<extra></extra>",
            )
        )
        clipped = np.flatnonzero(drift.clipped_low[:, i] | drift.clipped_high[:, i])  # epoch e = index + 1
        traces.append(
            dict(
                type="scatter",
                x=clipped,
                y=drift.ratio[clipped, i],
                mode="markers",
                showlegend=False,
                name=f"a{i} clipped",
                legendgroup=f"a{i}",
                marker=dict(color=c, size=10, symbol="circle-open", line=dict(width=2)),
                meta=dict(kind="clipped", action=i),
                hovertemplate=f"a{i}: gradient zeroed in the epoch starting at r = %{{y:.4f}}<extra></extra>",
            )
        )
        for bound in (drift.lo[i], drift.hi[i]):
            if np.isfinite(bound):
                shapes.append(
                    dict(
                        type="line",
                        xref="x domain",
                        yref="y",
                        x0=0,
                        x1=1,
                        y0=bound,
                        y1=bound,
                        line=dict(color=c, width=1, dash="dash"),
                        layer="below",
                    )
                )
    return figure(
        traces,
        layout(
            f"{label or drift.spec}: ratio π_e/π_old of each action over the epochs",
            400,
            hovermode="closest",
            shapes=shapes,
            xaxis=dict(title=dict(text="epoch"), dtick=max(1, drift.epochs // 10)),
            yaxis=dict(title=dict(text="r = π_e(a) / π_old(a)")),
        ),
    )


def headroom_figure(curves: dict, comp, colours: dict[str, str]) -> go.Figure:
    """room_up(p) = min(1, hi·p) − p for each spec (`headroom_curve`), with this distribution's actions marked."""
    traces = []
    for row in comp.rows:
        curve, c = curves[row.label], colours[row.label]
        traces.append(
            dict(
                type="scatter",
                x=curve.p,
                y=curve.room_up,
                mode="lines",
                name=row.label,
                legendgroup=row.label,
                line=dict(color=c, width=2.5),
                meta=dict(kind="headroom", spec=row.label),
                hovertemplate=f"{row.label}: room↑ = %{{y:.4f}} at p = %{{x:.3f}}<extra></extra>",
            )
        )
        traces.append(
            dict(
                type="scatter",
                x=row.feasible.probs,
                y=row.feasible.room_up,
                mode="markers",
                showlegend=False,
                name=f"{row.label} actions",
                legendgroup=row.label,
                marker=dict(color=c, size=9),
                text=[f"a{i}" for i in range(comp.probs.size)],
                meta=dict(kind="headroom_actions", spec=row.label),
                hovertemplate=f"{row.label}: %{{text}} room↑ = %{{y:.4f}} at p = %{{x:.3f}}<extra></extra>",
            )
        )
    return figure(
        traces,
        layout(
            "Room to gain, min(1, hi·p) − p, against p (dots: these actions)",
            380,
            hovermode="closest",
            xaxis=dict(title=dict(text="p = π_old(a)"), range=[0, 1]),
            yaxis=dict(title=dict(text="room↑")),
        ),
    )
