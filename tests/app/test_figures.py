"""Figures draw theory's bounds where they are, checked on the figure objects themselves (no browser)."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import pytest

from divclip import theory
from divclip.app import figures
from divclip.app.figures import divergence_curves, interval_chart, surrogate_figure
from divclip.app.intervals import clip_intervals
from divclip.app.methods import METHOD_COLOURS


@pytest.fixture(autouse=True)
def validated(monkeypatch):
    """Build with plotly's property validation on, so an invalid figure fails here, not in the browser."""
    monkeypatch.setattr(figures, "VALIDATE", True)


@pytest.fixture
def intervals():
    ivs, errors = clip_intervals(["kl3", "ratio", "binary_kl", "chi2"], 0.05, 0.2, 0.28, 0.01)
    assert errors == []
    return ivs


def traces_of(fig: go.Figure, kind: str) -> dict:
    return {
        t.meta["measure"] if "measure" in t.meta else t.name: t
        for t in fig.data
        if isinstance(t.meta, dict) and t.meta.get("kind") == kind
    }


def test_curve_markers_sit_at_theorys_roots(intervals):
    fig = divergence_curves(intervals, 0.05)
    bounds = traces_of(fig, "bounds")
    assert set(bounds) == {"kl3", "binary_kl", "chi2"}  # the ratio clip is a band, not a level set
    assert tuple(bounds["kl3"].x) == theory.kl3_bounds(0.05)
    assert tuple(bounds["binary_kl"].x) == theory.get_measure("binary_kl").bounds(0.05, p=0.01)
    assert tuple(bounds["kl3"].y) == (0.05, 0.05)
    assert bounds["kl3"].marker.color == METHOD_COLOURS["ATR-GRPO"]
    band = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(band) == 1 and (band[0].x0, band[0].x1) == (0.8, 1.28)
    delta_line = [s for s in fig.layout.shapes if s.type == "line" and s.y0 == s.y1 == 0.05]
    assert len(delta_line) == 1


def test_curves_are_the_measures_values(intervals):
    fig = divergence_curves(intervals, 0.05)
    kl3 = next(t for t in fig.data if t.mode == "lines" and t.legendgroup == "kl3")
    r = np.asarray(kl3.x)
    expected = theory.get_measure("kl3").value(r)
    shown = np.asarray(kl3.y, dtype=float)
    ok = ~np.isnan(shown)
    assert ok.sum() > 50 and np.allclose(shown[ok], expected[ok], rtol=0, atol=0)
    # Every interval fits in the x-range with room around it.
    x0, x1 = fig.layout.xaxis.range
    assert x0 < min(iv.lo for iv in intervals) and x1 > max(iv.hi for iv in intervals)


def test_log_space_uses_log_of_the_same_bounds(intervals):
    fig = divergence_curves(intervals, 0.05, log_space=True)
    lo, hi = theory.kl3_bounds(0.05)
    assert tuple(traces_of(fig, "bounds")["kl3"].x) == (math.log(lo), math.log(hi))


def test_interval_chart_has_both_spaces(intervals):
    fig = interval_chart(intervals)
    ratio = {t.meta["measure"]: t for t in fig.data if t.meta["space"] == "ratio"}
    logs = {t.meta["measure"]: t for t in fig.data if t.meta["space"] == "log"}
    assert set(ratio) == set(logs) == {"kl3", "ratio", "binary_kl", "chi2"}
    lo, hi = theory.kl3_bounds(0.05)
    assert tuple(ratio["kl3"].x) == (lo, hi) and tuple(logs["kl3"].x) == (math.log(lo), math.log(hi))
    assert tuple(ratio["kl3"].text) == (f"{lo:.6f}", f"{hi:.6f}")
    assert logs["kl3"].xaxis == "x2" and ratio["ratio"].line.color == METHOD_COLOURS["DAPO"]


def test_surrogate_is_flat_exactly_beyond_the_clip(intervals):
    fig = surrogate_figure(intervals)
    lo, hi = theory.kl3_bounds(0.05)
    points = [t for t in fig.data if isinstance(t.meta, dict) and t.meta.get("measure") == "kl3"]
    assert {(p.meta["adv"], p.meta["r"]) for p in points} == {(1.0, hi), (-1.0, lo)}
    for axis, adv, edge in (("x", 1.0, hi), ("x2", -1.0, lo)):
        curve = next(t for t in fig.data if t.legendgroup == "kl3" and t.mode == "lines" and t.xaxis == axis)
        r, y = np.asarray(curve.x), np.asarray(curve.y)
        clipped = r > hi if adv > 0 else r < lo
        assert clipped.any() and (~clipped).any()
        assert np.all(y[clipped] == edge * adv)  # flat: zero gradient
        assert np.allclose(y[~clipped], r[~clipped] * adv)  # unclipped side is r·A


def test_empty_selection_draws_an_empty_figure():
    for fig in (divergence_curves([], 0.05), interval_chart([]), surrogate_figure([])):
        assert isinstance(fig, go.Figure) and len(fig.data) == 0


def test_zero_lower_bound_is_drawn_at_the_left_edge():
    ivs, errors = clip_intervals(["chi2", "kl3"], 1.5, 0.2, 0.2, 0.1)  # χ² with δ ≥ 1 has l = 0 (README)
    assert errors == [] and ivs[0].lo == 0.0
    for fig in (interval_chart(ivs), divergence_curves(ivs, 1.5, log_space=True)):
        for trace in fig.data:
            if isinstance(trace.meta, dict):
                assert np.isfinite(np.asarray(trace.x, dtype=float)).all()
    chi2 = next(t for t in interval_chart(ivs).data if t.meta["measure"] == "chi2")
    assert chi2.marker.symbol[0] == "triangle-left" and chi2.x[0] == 0.0
    # On the D(r) curve there is no lower root to mark: only u sits on the δ line.
    marks = next(t for t in divergence_curves(ivs, 1.5).data if t.meta and t.meta["measure"] == "chi2")
    assert tuple(marks.x) == (ivs[0].hi,)


def test_interval_chart_shades_the_intersection_of_the_chosen_measures():
    """The shaded band is [max l, min u], the bounds theory's intersection clips at (all_of, action_bounds)."""
    import numpy as np

    from divclip.app.figures import add_intersection, interval_chart
    from divclip.app.intervals import clip_intervals
    from divclip.theory.reallocation import action_bounds

    p = 0.95
    intervals, errors = clip_intervals(["kl3", "binary_tv"], 0.05, 0.2, 0.28, p)
    assert not errors
    fig = add_intersection(interval_chart(intervals), intervals)
    lo, hi = fig.layout.meta["intersection"]
    ref_lo, ref_hi = action_bounds("kl3:0.05&binary_tv:0.05", np.array([p]))
    assert lo == pytest.approx(float(ref_lo[0]), rel=1e-12) and hi == pytest.approx(float(ref_hi[0]), rel=1e-12)
    bands = [sh for sh in fig.layout.shapes if sh.type == "rect"]
    assert sorted(sh.xref for sh in bands) == ["x", "x2"]  # ratio and log-ratio axes
    assert (bands[0].x0, bands[0].x1) == (lo, hi) if bands[0].xref == "x" else (bands[1].x0, bands[1].x1) == (lo, hi)
    one = add_intersection(interval_chart(intervals[:1]), intervals[:1])
    assert not [sh for sh in one.layout.shapes if sh.type == "rect"]


@pytest.mark.parametrize(
    ("lo", "hi", "text"),
    [
        (0.1, 10.0, ["0.1", "0.2", "0.5", "1", "2", "5", "10"]),
        (1e-4, 0.5, ["0.0001", "0.001", "0.01", "0.1"]),
        (1e-12, 1.0, ["10⁻¹²", "10⁻¹⁰", "10⁻⁸", "10⁻⁶", "10⁻⁴", "10⁻²", "1"]),
    ],
)
def test_log_ticks_are_plain_decimals_or_powers_of_ten_never_si(lo, hi, text):
    vals, labels = figures.log_ticks(lo, hi)
    assert labels == text and all(lo <= v <= hi for v in vals)
    assert not any(c in "".join(labels) for c in "µnpmk")  # no SI prefix
    axis = figures.log_axis(lo, hi, title=dict(text="δ"))
    assert axis["type"] == "log" and axis["tickmode"] == "array" and axis["minor"]["ticks"] == ""
    with pytest.raises(ValueError, match="0 < lo < hi"):
        figures.log_ticks(0.0, 1.0)
