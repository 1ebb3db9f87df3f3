"""Figures of the third policy (rollout corrections, docs/theory.md §10), as pure functions.

A correction acts on ρ = π_old/π_rollout, the ratio between the trainer's and the inference engine's
probability of a token. Drawn for a sequence whose L tokens all drift by the same ρ:

* `weight_figure`: what the correction leaves of a token's loss over ρ at one length L, the weight times the
  keep mask, computed by `divclip.theory.rollout_correction` itself on such sequences (for an off-policy
  sequence mask, with A < 0, the only sign it acts on);
* `length_figure`: the ρ each correction keeps (or leaves untruncated) as L grows, the band of
  `divclip.theory.correction_bounds.correction_intervals` (the length trap: a sequence bound closes on ρ = 1);
* `overlay_figure` (the clip explorer): a correction's ρ intervals on the same log axis as the measures'
  clip intervals in r = π_θ/π_old; a k3 rejection at δ is KL3's clip at δ, the same Lambert W interval.

Nothing here knows a correction's formula: the numbers are theory's.
"""

from __future__ import annotations

import math

import numpy as np

from divclip.app.figures import figure_of, log_axis, page_layout, vertical_line
from divclip.theory.correction import Correction, parse_correction
from divclip.theory.correction_bounds import BINARY_P, correction_intervals

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")  # one per correction (at most four)
DEFAULT_CORRECTIONS = "is=sequence:mask=3.0/noclamp, rs=token_k3:0.01, filter=sequence:ratio:sum:mask:0.5_2.0"
"""TRL's default (sequence_mask 3.0), a verl token k3 rejection, an AReaL sequence filter on Π ρ."""
MAX_CORRECTIONS = 4
RHO_MIN, RHO_MAX = 1 / 6, 6.0
LENGTHS = tuple(int(n) for n in np.unique(np.round(np.logspace(0, 3, 46))))
TABLE_LENGTHS = (1, 10, 100, 1000)


def parse_list(text: str) -> tuple[dict[str, Correction], list[str]]:
    """({label: Correction}, errors) of a comma-separated list of correction strings, at most four; a string that
    does not parse is reported and left out."""
    if not isinstance(text, str):
        return {}, [f"corrections must be a comma-separated list of correction strings, got {text!r}"]
    out, errors = {}, []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        try:
            c = parse_correction(item)
        except ValueError as exc:
            errors.append(str(exc))
            continue
        if not c.active:
            errors.append(f"correction {item!r} does nothing: there is nothing to draw")
        elif len(out) == MAX_CORRECTIONS:
            errors.append(f"at most {MAX_CORRECTIONS} corrections are drawn: {item!r} is left out")
        else:
            out[item] = c
    return out, errors


def rho_axis(n: int = 241) -> np.ndarray:
    """ρ from 1/6 to 6, log spaced, with a fine grid within ±2 % of 1, where long sequences' bounds lie."""
    coarse = np.logspace(math.log10(RHO_MIN), math.log10(RHO_MAX), n)
    fine = np.exp(np.linspace(-0.02, 0.02, 201))
    return np.unique(np.concatenate([coarse, fine]))


def kept_weight(c: Correction, rho: np.ndarray, length: int) -> np.ndarray:
    """Per ρ: the weight × keep of a token in a sequence of `length` tokens all at ρ (1 where the correction
    has no weight and keeps the token, 0 where it drops it), by `rollout_correction`; the mean over the
    sequence's tokens, which are all alike except under M2PO (a batch of one sequence: it keeps one token).
    π_rollout is held at `correction_bounds.BINARY_P` (0.5), where the intervals of OpenRLHF's binary gates are
    given (every other part reads ρ alone)."""
    import torch

    from divclip.theory.correction_apply import rollout_correction

    if not (isinstance(length, int) and not isinstance(length, bool) and length >= 1):
        raise ValueError(f"length must be an integer >= 1, got {length!r}")
    rho = np.asarray(rho, dtype=np.float64)
    rollout = torch.full((rho.size, length), math.log(BINARY_P), dtype=torch.float64)
    old = rollout + torch.from_numpy(np.log(rho))[:, None]
    mask = torch.ones_like(old)
    adv = -torch.ones_like(old) if c.opsm is not None else None  # OPSM acts on A < 0 only

    def one(o, r, m, a):
        w, keep, _ = rollout_correction(o, r, m, c, advantages=a, metrics=False)
        return (keep if w is None else w * keep).mean(-1)  # alike on every token but M2PO's (it keeps one)

    if c.m2po is None:
        out = one(old, rollout, mask, adv)
    else:  # M2PO is a batch statistic: one uniform batch per ρ
        out = torch.cat([one(old[i : i + 1], rollout[i : i + 1], mask[:1], None) for i in range(rho.size)])
    return out.numpy()


def kept_band(c: Correction, lengths=LENGTHS) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) per length: the ρ every part of `c` keeps (or leaves untruncated), the intersection of its
    parts' intervals (`correction_intervals`); 0 / inf where no part bounds that side."""
    rows = correction_intervals(c, tuple(lengths))
    lo = np.array([max(row["by_length"][n][0] for row in rows) for n in lengths])
    hi = np.array([min(row["by_length"][n][1] for row in rows) for n in lengths])
    return lo, hi


def weight_figure(corrections: dict[str, Correction], length: int, rho: np.ndarray | None = None):
    """Weight × keep over ρ at one length, one line per correction, on a log ρ axis."""
    rho = rho_axis() if rho is None else rho
    traces, top = [], 1.0
    for colour, (label, c) in zip(COLOURS, corrections.items()):
        w = kept_weight(c, rho, length)
        top = max(top, float(np.nanmax(w)))
        traces.append(
            dict(
                type="scatter",
                x=rho,
                y=w,
                mode="lines",
                name=label,
                line=dict(color=colour, width=2.5, shape="hv"),
                hovertemplate=f"<b>{label}</b><br>ρ = %{{x:.4g}}<br>weight × kept = %{{y:.4g}}<extra></extra>",
                meta=dict(kind="weight", correction=str(c), length=length),
            )
        )
    traces.append(
        dict(
            type="scatter",
            x=rho,
            y=rho,
            mode="lines",
            name="ρ (an untruncated token weight)",
            line=dict(color="#999999", width=1, dash="dot"),
            hoverinfo="skip",
            meta=dict(kind="reference"),
        )
    )
    layout = page_layout(
        f"What each correction leaves of a token's loss, L = {length}",
        360,
        subtitle="every token of the sequence at the same ρ = π_old/π_rollout; 0: masked or rejected",
        hovermode="closest",
        xaxis=log_axis(RHO_MIN, RHO_MAX, title=dict(text="ρ = π_old/π_rollout per token")),
        yaxis=dict(range=[-0.05 * min(top, 6.0), 1.08 * min(top, 6.0)], title=dict(text="weight × kept")),
        shapes=[vertical_line(1.0)],
    )
    return figure_of(traces, layout)


def length_figure(corrections: dict[str, Correction], lengths=LENGTHS):
    """The kept ρ band of each correction against the sequence length L (both log axes)."""
    lengths = np.asarray(lengths)
    traces = []
    for colour, (label, c) in zip(COLOURS, corrections.items()):
        lo, hi = kept_band(c, tuple(int(n) for n in lengths))
        lo_drawn = np.clip(lo, RHO_MIN, RHO_MAX)
        hi_drawn = np.clip(hi, RHO_MIN, RHO_MAX)
        custom = np.stack([lo, hi], axis=-1)
        hover = f"<b>{label}</b><br>L = %{{x}}<br>keeps ρ in [%{{customdata[0]:.4g}}, %{{customdata[1]:.4g}}]"
        common = dict(type="scatter", x=lengths, mode="lines", line=dict(color=colour, width=2), customdata=custom)
        traces.append(
            {**common, "y": hi_drawn, "name": label, "legendgroup": label, "hovertemplate": hover + "<extra></extra>"}
        )
        traces.append(
            {
                **common,
                "y": lo_drawn,
                "name": label,
                "legendgroup": label,
                "showlegend": False,
                "fill": "tonexty",
                "fillcolor": _transparent(colour),
                "hovertemplate": hover + "<extra></extra>",
                "meta": dict(kind="band", correction=str(c)),
            }
        )
    layout = page_layout(
        "The ρ each correction keeps, by sequence length",
        360,
        subtitle="a constant per-token ρ over L tokens; a sequence bound closes on ρ = 1 as L grows (the length trap)",
        hovermode="closest",
        xaxis=log_axis(1, max(int(lengths.max()), 2), title=dict(text="sequence length L (tokens)")),
        yaxis=log_axis(RHO_MIN, RHO_MAX, title=dict(text="ρ kept")),
        shapes=[dict(type="line", xref="x domain", x0=0, x1=1, yref="y", y0=1, y1=1, line=dict(color="#999"))],
    )
    return figure_of(traces, layout)


def _transparent(colour: str, alpha: float = 0.15) -> str:
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def interval_table(corrections: dict[str, Correction], lengths=TABLE_LENGTHS) -> list[dict]:
    """One row per part of each correction (the correction named on its first part's row): what the part bounds
    and its ρ interval at each length. A correction of one part leaves its part cell "—" (the part is the whole
    correction, named beside it), and where every correction has one part there is no part column."""
    rows = []
    by_label = {label: correction_intervals(c, lengths) for label, c in corrections.items()}
    with_parts = any(len(parts) > 1 for parts in by_label.values())
    for label, parts in by_label.items():
        for i, row in enumerate(parts):
            out = {"correction": label if i == 0 else ""}
            if with_parts:
                out["part"] = row["part"] if len(parts) > 1 else "—"
            out["bounds"] = row["bounds"]
            for n in lengths:
                lo, hi = row["by_length"][n]
                out[f"L = {n}"] = f"[{lo:.4g}, {hi:.4g}]"
            rows.append(out)
    return rows


def overlay_figure(intervals, correction: Correction, length: int):
    """The measures' clip intervals in r (one bar each) and the correction's ρ intervals at L = 1 and L = length,
    on one log axis: the same divergence bounds a third policy."""
    rows = [(f"{iv.method} ({iv.budget_text})", iv.lo, iv.hi, iv.colour, "clip of r") for iv in intervals]
    for row in correction_intervals(correction, tuple(dict.fromkeys((1, length)))):
        for n in dict.fromkeys((1, length)):
            lo, hi = row["by_length"][n]
            rows.append((f"{row['part']}, L = {n}", lo, hi, "#444444", "kept ρ"))
    lo_all = min([lo for _, lo, _, _, _ in rows if lo > 0] + [0.7])
    hi_all = max([hi for _, _, hi, _, _ in rows if math.isfinite(hi)] + [1.3])
    x_lo, x_hi = max(lo_all / 1.25, 1e-3), min(hi_all * 1.25, 1e3)
    traces = []
    for label, lo, hi, colour, kind in rows:
        xs = [max(lo, x_lo), min(hi, x_hi)]
        open_ends = ["triangle-left" if lo < x_lo else "circle", "triangle-right" if hi > x_hi else "circle"]
        traces.append(
            dict(
                type="scatter",
                x=xs,
                y=[label, label],
                mode="lines+markers",
                showlegend=False,
                line=dict(color=colour, width=6, dash="solid" if kind == "clip of r" else "dot"),
                marker=dict(color=colour, size=10, symbol=open_ends),
                hovertemplate=f"<b>{label}</b>: {kind} in [{lo:.6g}, {hi:.6g}]<extra></extra>",
                meta=dict(kind=kind, lo=lo, hi=hi),
            )
        )
    layout = page_layout(
        "The third policy on the same axis",
        110 + 44 * len(rows),
        subtitle="solid: the measures' clip of r = π_θ/π_old; dotted: the ρ = π_old/π_rollout the correction keeps",
        hovermode="closest",
        xaxis=log_axis(x_lo, x_hi, title=dict(text="ratio (log scale)")),
        yaxis=dict(type="category", autorange="reversed", automargin=True),
        shapes=[vertical_line(1.0)],
    )
    return figure_of(traces, layout)
