"""The proof page's live figures, one per lecture step, as pure functions returning `plotly.graph_objects.Figure`.

Every number drawn comes from `divclip.theory`: D(r) from the measure's `value`, the roots from its `bounds`, the
widths from `equivalent_ratio_clip`, the series and the asymmetry's leading term from the SymPy derivation
(`divclip.theory.symbolic`, the statements the steps check), the surrogate and its gradient from theory's loss
(`divclip.app.sign_of_a`). Each figure marks the page's δ, so moving δ moves every figure.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import sympy as sp

from divclip import theory
from divclip.app import figures
from divclip.app.illustration import SymbolicRoots
from divclip.app.methods import colour_for
from divclip.app.sign_of_a import SignCurves
from divclip.theory.symbolic import DELTA, S, measure_expression

N_POINTS = 300
DELTA_RANGE = (1e-4, 0.5)  # δ axis of the figures drawn against δ (widened to include the page's δ)
LOWER, UPPER = "#1f77b4", "#d62728"  # l_δ and u_δ in every figure: the lower side blue, the upper red
_GREY, _DELTA_LINE = "#999999", "#444444"
_LEFT, _RIGHT = (0.0, 0.46), (0.54, 1.0)


def _layout(title: str, height: int, subtitle: str = "", **kwargs) -> dict:
    return figures._layout(title, height, subtitle=subtitle, **kwargs)


def _hline(y: float, xref: str = "x domain", yref: str = "y", colour: str = _DELTA_LINE) -> dict:
    return dict(
        type="line", xref=xref, yref=yref, x0=0, x1=1, y0=y, y1=y, line=dict(color=colour, width=1.5, dash="dash")
    )


def _vline(x: float, xref: str = "x", yref: str = "y domain", colour: str = _GREY, dash: str = "solid") -> dict:
    return dict(
        type="line",
        xref=xref,
        yref=yref,
        x0=x,
        x1=x,
        y0=0,
        y1=1,
        line=dict(color=colour, width=1, dash=dash),
        layer="below",
    )


def _text(text: str, x: float, y: float, xref: str = "x", yref: str = "y", **kw) -> dict:
    return dict(text=text, x=x, y=y, xref=xref, yref=yref, showarrow=False, **kw)


def _finite(values) -> np.ndarray:
    out = np.array(values, dtype=np.float64)
    out[~np.isfinite(out)] = np.nan
    return out


def _positive_span(*arrays) -> tuple[float, float]:
    """The smallest positive and the largest finite value of `arrays`, a little widened: a log axis's range."""
    values = np.concatenate([np.ravel(np.asarray(a, dtype=float)) for a in arrays])
    values = values[np.isfinite(values) & (values > 0)]
    if values.size == 0:
        return 1e-3, 1.0
    lo, hi = float(values.min()), float(values.max())
    return lo / 1.5, max(hi * 1.5, lo * 10)


def delta_grid(delta: float, n: int = N_POINTS) -> np.ndarray:
    """Log-spaced δ over DELTA_RANGE, widened to include the page's δ."""
    lo, hi = min(DELTA_RANGE[0], delta / 3), max(DELTA_RANGE[1], delta)
    return np.geomspace(lo, hi, n)


# ------------------------------------------------------------------------------------------ D(r) and its roots
def roots_figure(name: str, delta: float, height: int = 420, regions: bool = False) -> go.Figure:
    """D(r) with the δ line and the two roots l_δ < 1 < u_δ where they cross (theory's bounds); with `regions`,
    the two sides where D > δ, and which sign of A is clipped there (the gradient rule)."""
    m = theory.get_measure(name)
    lo, hi = m.bounds(delta)
    span = hi - lo
    x_lo, x_hi = max(lo - 0.6 * span, 1e-3), hi + 0.6 * span
    r = np.linspace(x_lo, x_hi, N_POINTS)
    d = _finite(m.value(r))
    y_max = 2.6 * delta
    d[d > 4 * y_max] = np.nan
    colour = colour_for(name)
    traces = [
        dict(
            type="scatter",
            x=r,
            y=d,
            mode="lines",
            name=f"D(r) = {m.text or m.code}",
            line=dict(color=colour, width=3),
            hovertemplate="D(%{x:.4f}) = %{y:.5g}<extra></extra>",
        )
    ]
    roots = [(lo, "l_δ", LOWER), (hi, "u_δ", UPPER)] if lo > 0 else [(hi, "u_δ", UPPER)]
    traces.append(
        dict(
            type="scatter",
            x=[x for x, _, _ in roots],
            y=[delta] * len(roots),
            mode="markers+text",
            text=[f"{label} = {x:.6f}" for x, label, _ in roots],
            textposition="top center",
            marker=dict(size=12, color=[c for _, _, c in roots], line=dict(color="white", width=1.5)),
            textfont=dict(size=14, color=[c for _, _, c in roots]),
            showlegend=False,
            cliponaxis=False,
            meta=dict(kind="roots", measure=name, lo=lo, hi=hi, delta=delta),
            hovertemplate="%{text}<extra></extra>",
        )
    )
    shapes = [_hline(delta), _vline(1.0)]
    shapes += [
        dict(type="line", x0=x, x1=x, y0=0, y1=delta, line=dict(color=c, width=1.5, dash="dot")) for x, _, c in roots
    ]
    notes = [
        _text(
            f"δ = {delta:.6g}",
            1.0,
            delta,
            xref="x domain",
            xanchor="right",
            yanchor="top",  # under the line: the roots' labels sit above it
            font=dict(color=_DELTA_LINE),
        )
    ]
    if regions:
        for x0, x1, c, words in (
            (x_lo, lo, LOWER, "D > δ, r < l_δ:<br>clipped when A < 0"),
            (hi, x_hi, UPPER, "D > δ, r > u_δ:<br>clipped when A > 0"),
        ):
            if x1 > x0:
                shapes.append(
                    dict(
                        type="rect",
                        xref="x",
                        yref="y domain",
                        x0=x0,
                        x1=x1,
                        y0=0,
                        y1=1,
                        fillcolor=c,
                        opacity=0.10,
                        line=dict(width=0),
                        layer="below",
                    )
                )
                notes.append(
                    _text(words, (x0 + x1) / 2, 0.97, yref="y domain", yanchor="top", font=dict(color=c, size=13))
                )
    subtitle = "{r : D(r) ≤ δ} = [l_δ, u_δ]" + ("; outside it a token may lose its gradient" if regions else "")
    return figures._figure(
        traces,
        _layout(
            "D(r), the budget δ and its two roots",
            height,
            subtitle,
            shapes=shapes,
            annotations=notes,
            hovermode="closest",
            showlegend=False,
            xaxis=dict(range=[x_lo, x_hi], title=dict(text="r = π_θ(a) / π_old(a)")),
            yaxis=dict(range=[0, y_max], title=dict(text="D(r)")),
        ),
    )


def convexity_figure(name: str, delta: float, height: int = 420) -> go.Figure:
    """The minimum at r = 1: D(r) against its quadratic D″(1)(r − 1)²/2 (D″ from SymPy's exact second derivative),
    the two meeting at 1, where D and D′ vanish. Near 1 the clip's half-width is about √(2δ/D″(1)), which the
    figure marks, next to theory's roots."""
    m = theory.get_measure(name)
    lo, hi = m.bounds(delta)
    r_sym = sp.Symbol("r", positive=True)
    curvature = float(sp.diff(measure_expression(name).subs(sp.Symbol("r"), r_sym), r_sym, 2).subs(r_sym, 1))
    half = math.sqrt(2 * delta / curvature)
    span = max(hi - lo, 2 * half)
    r = np.linspace(max(1 - 1.2 * span, 1e-3), 1 + 1.2 * span, N_POINTS)
    d = _finite(m.value(r))
    quad = curvature * (r - 1) ** 2 / 2
    y_max = 2.6 * delta
    traces = [
        dict(
            type="scatter",
            x=r,
            y=d,
            mode="lines",
            name="D(r)",
            line=dict(color=colour_for(name), width=3),
            hovertemplate="D(%{x:.4f}) = %{y:.5g}<extra></extra>",
        ),
        dict(
            type="scatter",
            x=r,
            y=quad,
            mode="lines",
            name=f"D″(1)(r − 1)²/2, D″(1) = {curvature:.4g}",
            line=dict(color=_DELTA_LINE, width=2, dash="dash"),
            hovertemplate="quadratic %{y:.5g} at r = %{x:.4f}<extra></extra>",
        ),
        dict(
            type="scatter",
            x=[1 - half, 1 + half],
            y=[delta, delta],
            mode="markers",
            name=f"1 ± √(2δ/D″(1)) = 1 ± {half:.4f}",
            marker=dict(size=10, color="white", line=dict(color=_DELTA_LINE, width=2)),
            meta=dict(kind="convexity", measure=name, curvature=curvature, delta=delta),
        ),
        dict(
            type="scatter",
            x=[lo, hi],
            y=[delta, delta],
            mode="markers",
            name=f"l_δ, u_δ = {lo:.4f}, {hi:.4f}",
            marker=dict(size=9, color=[LOWER, UPPER]),
        ),
    ]
    return figures._figure(
        traces,
        _layout(
            "A strict minimum at r = 1: D is quadratic there",
            height,
            "D(1) = D′(1) = 0, D″ > 0; near 1 the roots sit at about 1 ± √(2δ/D″(1))",
            shapes=[_hline(delta), _vline(1.0)],
            hovermode="closest",
            xaxis=dict(range=[r[0], r[-1]], title=dict(text="r = π_θ(a) / π_old(a)")),
            yaxis=dict(range=[0, y_max], title=dict(text="D(r)")),
        ),
    )


def branches_figure(delta: float, height: int = 420) -> go.Figure:
    """Bracketing l_δ < 1 < u_δ for KL3: the two real branches of Lambert W on (−1/e, 0), W₀ ≥ −1 and W₋₁ ≤ −1,
    meeting at the branch point (−1/e, −1); at x = −e^{−1−δ} (inside the interval for every δ > 0) the roots
    −W₀(x) and −W₋₁(x) sit on either side of 1. W from scipy.special.lambertw; the dots are theory's bounds."""
    from scipy.special import lambertw

    lo, hi = theory.kl3_bounds(delta)
    x = -np.exp(-1.0 - np.geomspace(1e-6, 4.0, N_POINTS))  # (−1/e, 0), dense near the branch point
    w0, wm1 = np.real(lambertw(x, 0)), np.real(lambertw(x, -1))
    at = -math.exp(-1.0 - delta)
    traces = [
        dict(type="scatter", x=x, y=-w0, mode="lines", name="−W₀(x): l_δ", line=dict(color=LOWER, width=3)),
        dict(type="scatter", x=x, y=-wm1, mode="lines", name="−W₋₁(x): u_δ", line=dict(color=UPPER, width=3)),
        dict(
            type="scatter",
            x=[at, at],
            y=[lo, hi],
            mode="markers+text",
            text=[f"l_δ = {lo:.6f}", f"u_δ = {hi:.6f}"],
            textposition=["bottom right", "middle right"],
            textfont=dict(size=14, color=[LOWER, UPPER]),
            cliponaxis=False,
            showlegend=False,
            marker=dict(size=12, color=[LOWER, UPPER], line=dict(color="white", width=1.5)),
            meta=dict(kind="branches", lo=lo, hi=hi, delta=delta, x=at),
            hovertemplate="%{y:.6f}<extra></extra>",
        ),
    ]
    notes = [_text(f"x = −e^(−1−δ) = {at:.5f}", at, 0.02, yref="y domain", xanchor="left", yanchor="bottom")]
    return figures._figure(
        traces,
        _layout(
            "Two branches of W, one on each side of 1",
            height,
            "they meet at the branch point (−1/e, 1); on (−1/e, 0), −W₀(x) < 1 < −W₋₁(x)",
            shapes=[_hline(1.0, colour=_GREY), _vline(at, dash="dot")],
            annotations=notes,
            hovermode="closest",
            xaxis=dict(range=[-math.exp(-1.0) - 0.004, max(-0.2, at + 0.05)], title=dict(text="x")),
            yaxis=dict(range=[0, max(2.8, hi * 1.15)], title=dict(text="−W(x)")),
        ),
    )


def lambert_figure(delta: float, height: int = 420) -> go.Figure:
    """KL3's D(r) = δ as r·e^{−r} = e^{−(1+δ)}: r·e^{−r} is drawn as e^{−1−D(r)} from theory's KL3, so its two
    crossings with the line are theory's roots, one on each real branch of Lambert W (W_0 below 1, W_{−1} above)."""
    m = theory.get_measure("kl3")
    lo, hi = m.bounds(delta)
    r = np.linspace(max(lo - 0.8 * (1 - lo), 1e-3), hi + 1.2 * (hi - 1), N_POINTS)
    y = np.exp(-1.0 - _finite(m.value(r)))  # = r e^{-r}
    level = math.exp(-1.0 - delta)
    traces = [
        dict(
            type="scatter",
            x=r,
            y=y,
            mode="lines",
            name="r·e^(−r)",
            line=dict(color=colour_for("kl3"), width=3),
            hovertemplate="r·e^(−r) = %{y:.5f} at r = %{x:.4f}<extra></extra>",
        ),
        dict(
            type="scatter",
            x=[lo, hi],
            y=[level, level],
            mode="markers+text",
            showlegend=False,
            text=[f"l_δ = −W₀(x) = {lo:.6f}", f"u_δ = −W₋₁(x) = {hi:.6f}"],
            textposition="bottom center",
            marker=dict(size=12, color=[LOWER, UPPER]),
            textfont=dict(size=14, color=[LOWER, UPPER]),
            cliponaxis=False,
            meta=dict(kind="roots", measure="kl3", lo=lo, hi=hi, delta=delta),
        ),
    ]
    notes = [
        _text(f"e^(−(1+δ)) = {level:.6f}", 1.0, level, xref="x domain", xanchor="right", yanchor="bottom"),
        _text("1/e at r = 1: the branch point", 1.0, math.exp(-1.0), yanchor="bottom", font=dict(color=_GREY)),
    ]
    return figures._figure(
        traces,
        _layout(
            "r·e^(−r) = e^(−(1+δ)): two crossings, two branches",
            height,
            "W₀ gives the root below 1, W₋₁ the one above",
            shapes=[_hline(level), _vline(1.0)],
            annotations=notes,
            showlegend=False,
            hovermode="closest",
            xaxis=dict(title=dict(text="r")),
            yaxis=dict(
                range=[min(float(np.nanmin(y)), level) * 0.97, math.exp(-1.0) * 1.012], title=dict(text="r·e^(−r)")
            ),
        ),
    )


# ------------------------------------------------------------------------------------------ series
def _series_values(roots: SymbolicRoots, deltas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The truncated root series of the derivation (`theory.symbolic.root_series`) at each δ."""
    var = roots.variable
    t = np.sqrt(2.0 * deltas) if var == S else deltas
    lower = sp.lambdify(var, roots.lower_series, "numpy")
    upper = sp.lambdify(var, roots.upper_series, "numpy")
    return np.broadcast_to(lower(t), t.shape).astype(float), np.broadcast_to(upper(t), t.shape).astype(float)


def series_figure(roots: SymbolicRoots, delta: float, height: int = 420) -> go.Figure:
    """Left: the exact roots (theory's bounds) and the derivation's series against δ. Right: how far apart they
    are, on log axes: the error falls like the first power the series leaves out."""
    deltas = delta_grid(delta)
    m = theory.get_measure(roots.name)
    lo, hi = m.bounds(deltas)
    s_lo, s_hi = _series_values(roots, deltas)
    var = "s = √(2δ)" if roots.variable == S else "δ"
    traces = []
    for exact, series, label, colour in ((lo, s_lo, "l_δ", LOWER), (hi, s_hi, "u_δ", UPPER)):
        traces += [
            dict(
                type="scatter", x=deltas, y=exact, mode="lines", name=f"{label} exact", line=dict(color=colour, width=3)
            ),
            dict(
                type="scatter",
                x=deltas,
                y=series,
                mode="lines",
                name=f"{label} series to O({var[0]}⁵)",
                line=dict(color=colour, width=2, dash="dash"),
            ),
            dict(
                type="scatter",
                x=deltas,
                y=_finite(np.abs(series - exact)),
                mode="lines",
                xaxis="x2",
                yaxis="y2",
                name=f"|series − exact|, {label}",
                showlegend=False,
                line=dict(color=colour, width=2),
            ),
        ]
    at_lo, at_hi = m.bounds(delta)
    traces.append(
        dict(
            type="scatter",
            x=[delta, delta],
            y=[at_lo, at_hi],
            mode="markers",
            showlegend=False,
            marker=dict(size=11, color=[LOWER, UPPER]),
            meta=dict(kind="exact_at_delta", lo=at_lo, hi=at_hi, delta=delta),
        )
    )
    return figures._figure(
        traces,
        _layout(
            "The series against the exact roots",
            height,
            f"dashed: the series in {var}; right: their distance",
            panels=True,
            hovermode="x unified",
            shapes=[
                _vline(delta, colour=_DELTA_LINE, dash="dash"),
                _vline(delta, "x2", "y2 domain", _DELTA_LINE, "dash"),
            ],
            annotations=[
                figures.panel_title("l_δ and u_δ against δ", _LEFT),
                figures.panel_title("|series − exact| (log scale)", _RIGHT),
            ],
            xaxis=figures.log_axis(deltas[0], deltas[-1], domain=_LEFT, title=dict(text="δ")),
            xaxis2=figures.log_axis(deltas[0], deltas[-1], domain=_RIGHT, title=dict(text="δ")),
            yaxis=dict(title=dict(text="r")),
            yaxis2=figures.log_axis(*_positive_span(*(t["y"] for t in traces if t.get("yaxis") == "y2")), anchor="x2"),
        ),
    )


# ------------------------------------------------------------------------------------------ asymmetry
def mirror_figure(name: str, delta: float, height: int = 420) -> go.Figure:
    """D(1 + x) and D(1 − x) on one axis x = distance from 1: the side whose curve is steeper reaches δ first,
    so its clip is the tighter one. For KL3 = (r − 1) − log r the −log r term grows without bound as r → 0."""
    m = theory.get_measure(name)
    lo, hi = m.bounds(delta)
    eps_low, eps_high = 1.0 - lo, hi - 1.0
    x = np.linspace(0.0, 1.5 * max(eps_low, eps_high), N_POINTS)
    up = _finite(m.value(1.0 + x))
    below = x < 1.0
    down = np.full_like(x, np.nan)
    down[below] = _finite(m.value(1.0 - x[below]))
    y_max = 2.6 * delta
    traces = [
        dict(type="scatter", x=x, y=up, mode="lines", name="D(1 + x): above 1", line=dict(color=UPPER, width=3)),
        dict(type="scatter", x=x, y=down, mode="lines", name="D(1 − x): below 1", line=dict(color=LOWER, width=3)),
        dict(
            type="scatter",
            x=[eps_low, eps_high],
            y=[delta, delta],
            mode="markers+text",
            showlegend=False,
            text=[f"ε_low = {eps_low:.4g}", f"ε_high = {eps_high:.4g}"],
            textposition=["top left", "bottom right"],
            marker=dict(size=12, color=[LOWER, UPPER]),
            textfont=dict(size=14, color=[LOWER, UPPER]),
            cliponaxis=False,
            meta=dict(kind="widths", eps_low=eps_low, eps_high=eps_high, delta=delta),
        ),
    ]
    tighter = "lower" if eps_low < eps_high else "upper" if eps_high < eps_low else "neither"
    verdict = (
        f"the {tighter} side reaches δ first: its clip is the tighter one"
        if tighter != "neither"
        else "both sides reach δ together: a symmetric clip"
    )
    return figures._figure(
        traces,
        _layout(
            "The two sides of r = 1, folded onto one axis",
            height,
            verdict,
            hovermode="x unified",
            shapes=[_hline(delta)],
            annotations=[_text(f"δ = {delta:.6g}", 1.0, delta, xref="x domain", xanchor="right", yanchor="bottom")],
            xaxis=dict(title=dict(text="x = |r − 1|"), range=[0, x[-1]]),
            yaxis=dict(range=[0, y_max], title=dict(text="D")),
        ),
    )


def leading_term_text(leading: sp.Expr) -> str:
    return str(leading).replace("delta", "δ").replace("**", "^").replace("*", "·")


def asymmetry_figure(name: str, delta: float, leading: sp.Expr, height: int = 420) -> go.Figure:
    """ε_high − ε_low against δ (theory's `equivalent_ratio_clip`) next to the leading term the derivation proved
    (`leading`, e.g. 4δ/3 for KL3); log axes where the difference is positive."""
    deltas = delta_grid(delta)
    eps_low, eps_high = theory.equivalent_ratio_clip(name, deltas)
    gap = np.asarray(eps_high) - np.asarray(eps_low)
    lead = np.broadcast_to(sp.lambdify(DELTA, leading, "numpy")(deltas), deltas.shape).astype(float)
    at_low, at_high = theory.equivalent_ratio_clip(name, delta)
    positive = bool(np.all(gap > 0) and np.all(lead > 0))
    words = leading_term_text(leading)
    traces = [
        dict(
            type="scatter",
            x=deltas,
            y=gap,
            mode="lines",
            name="ε_high − ε_low (exact)",
            line=dict(color=colour_for(name), width=3),
        ),
        dict(
            type="scatter",
            x=deltas,
            y=lead,
            mode="lines",
            name=f"leading term {words}",
            line=dict(color=_DELTA_LINE, width=2, dash="dash"),
        ),
        dict(
            type="scatter",
            x=[delta],
            y=[at_high - at_low],
            mode="markers+text",
            showlegend=False,
            text=[f"{at_high - at_low:.4g} at δ = {delta:.4g}"],
            textposition="top left",
            marker=dict(size=12, color=colour_for(name)),
            cliponaxis=False,
            meta=dict(kind="gap", gap=at_high - at_low, delta=delta),
        ),
    ]
    return figures._figure(
        traces,
        _layout(
            "How much looser the upper side is",
            height,
            f"ε_high − ε_low against δ, and its leading term {words}",
            hovermode="x unified",
            shapes=[_vline(delta, colour=_DELTA_LINE, dash="dash")],
            xaxis=figures.log_axis(deltas[0], deltas[-1], title=dict(text="δ")),
            yaxis=(
                figures.log_axis(*_positive_span(gap, lead), title=dict(text="ε_high − ε_low"))
                if positive
                else dict(title=dict(text="ε_high − ε_low"))
            ),
        ),
    )


# ------------------------------------------------------------------------------------------ sign of A
def sign_figure(curves: SignCurves, height: int = 520) -> go.Figure:
    """Four panels: the surrogate (top) and ∂loss/∂log π (bottom) for A = +1 (left) and A = −1 (right). The
    measure at δ and the ratio clip at [l_δ, u_δ] are drawn over each other (the theorem: one curve); for A < 0 the
    dual clip c adds a second flat stretch above c."""
    colour = colour_for(curves.name)
    r = curves.r
    traces, shapes, notes = [], [], []
    axes = {
        (1.0, "sur"): ("x", "y"),
        (-1.0, "sur"): ("x2", "y2"),
        (1.0, "grad"): ("x3", "y3"),
        (-1.0, "grad"): ("x4", "y4"),
    }
    styles = {
        "measure": dict(color=colour, width=4),
        "ratio": dict(color="#111111", width=2, dash="dash"),
        "dual": dict(color="#2ca02c", width=2, dash="dot"),
    }
    names = {
        "measure": f"{curves.name} at δ = {curves.delta:.4g}",
        "ratio": f"ratio clip at [{curves.lo:.4f}, {curves.hi:.4f}]",
        "dual": f"with dual clip c = {curves.c:g}",
    }
    for (adv, what), (xa, ya) in axes.items():
        data = curves.surrogate if what == "sur" else curves.gradient
        for key in ("measure", "ratio", "dual"):
            if (key, adv) not in data:
                continue
            traces.append(
                dict(
                    type="scatter",
                    x=r,
                    y=data[key, adv],
                    mode="lines",
                    name=names[key],
                    xaxis=xa,
                    yaxis=ya,
                    legendgroup=key,
                    showlegend=(adv, what) == (-1.0, "sur"),
                    line=styles[key],
                    meta=dict(kind=what, spec=key, adv=adv),
                    hovertemplate=f"{names[key]}: %{{y:.4f}} at r = %{{x:.3f}}<extra></extra>",
                )
            )
        bound, c = (curves.hi, UPPER) if adv > 0 else (curves.lo, LOWER)
        shapes += [_vline(1.0, xa, f"{ya} domain"), _vline(bound, xa, f"{ya} domain", c, "dot")]
        if adv < 0:
            shapes.append(_vline(curves.c, xa, f"{ya} domain", "#2ca02c", "dot"))
    top, bottom = (0.58, 1.0), (0.0, 0.40)
    layout = _layout(
        "The surrogate and its gradient, by the sign of A",
        height,
        "flat surrogate = zero gradient; only u_δ binds for A > 0, only l_δ (and c) for A < 0",
        panels=True,
        hovermode="x unified",
        shapes=shapes,
        annotations=notes
        + [
            figures.panel_title(f"A > 0: u_δ = {curves.hi:.4f} binds", _LEFT),
            figures.panel_title(f"A < 0: l_δ = {curves.lo:.4f} binds", _RIGHT),
            _text(
                "∂loss/∂log π",
                0.0,
                bottom[1] + 0.02,
                "paper",
                "paper",
                xanchor="left",
                yanchor="bottom",
                font=dict(size=12),
            ),
        ],
        xaxis=dict(domain=_LEFT, anchor="y", showticklabels=False, matches="x3"),
        xaxis2=dict(domain=_RIGHT, anchor="y2", showticklabels=False, matches="x4"),
        xaxis3=dict(domain=_LEFT, anchor="y3", title=dict(text="r")),
        xaxis4=dict(domain=_RIGHT, anchor="y4", title=dict(text="r")),
        yaxis=dict(domain=top, anchor="x", title=dict(text="surrogate")),
        yaxis2=dict(domain=top, anchor="x2"),
        yaxis3=dict(domain=bottom, anchor="x3", title=dict(text="gradient")),
        yaxis4=dict(domain=bottom, anchor="x4"),
    )
    return figures._figure(traces, layout)
