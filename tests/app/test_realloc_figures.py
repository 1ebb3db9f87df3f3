"""The reallocation figures draw theory.reallocation's numbers where they are (checked on the figure objects)."""

from __future__ import annotations

import numpy as np
import pytest

from divclip.app import figures
from divclip.app.methods import METHOD_COLOURS
from divclip.app.realloc_figures import (
    bucket_figure,
    entropy_figure,
    feasible_figure,
    flow_figure,
    headroom_figure,
    ratio_figure,
    spec_colours,
)
from divclip.theory import compare_measures, constrained_optimum, headroom_curve

SPECS = ["grpo", "dapo", "atr", "dppo_kl", "dppo_tv"]


@pytest.fixture(autouse=True)
def validated(monkeypatch):
    """Build with plotly's property validation on, so an invalid figure fails here, not in the browser."""
    monkeypatch.setattr(figures, "VALIDATE", True)


@pytest.fixture(scope="module")
def comp():
    return compare_measures([0.6, 0.3, 0.1], [1, -1, 0.5], SPECS, lr=0.5, epochs=8)


@pytest.fixture(scope="module")
def colours(comp):
    return spec_colours([r.label for r in comp.rows])


def traces(fig, kind: str) -> dict:
    return {
        t.meta["spec"] if "spec" in t.meta else t.meta["action"]: t
        for t in fig.data
        if isinstance(t.meta, dict) and t.meta.get("kind") == kind
    }


def test_presets_keep_their_method_colours():
    got = spec_colours(["atr", "kl3:0.05", "grpo", "ratio:0.1", "dppo_tv"])
    assert got["atr"] == METHOD_COLOURS["ATR-GRPO"] and got["grpo"] == METHOD_COLOURS["GRPO"]
    assert got["dppo_tv"] == METHOD_COLOURS["DPPO-Binary-TV"]
    others = {got["kl3:0.05"], got["ratio:0.1"]}
    assert len(others) == 2 and not others & {got["atr"], got["grpo"], got["dppo_tv"]}


def test_feasible_boxes_and_markers_are_theorys(comp, colours):
    fig = feasible_figure(comp, colours)
    boxes, optima, drifts = traces(fig, "box"), traces(fig, "optimum"), traces(fig, "drift")
    assert set(boxes) == set(optima) == set(drifts) == set(SPECS)
    for row in comp.rows:
        x = np.array(boxes[row.label].x, dtype=float).reshape(-1, 3)  # (K, [start, end, gap])
        np.testing.assert_array_equal(x[:, 0], -row.feasible.room_down)
        np.testing.assert_array_equal(x[:, 1], row.feasible.room_up)
        np.testing.assert_array_equal(optima[row.label].x, row.optimum.delta)
        np.testing.assert_array_equal(drifts[row.label].x, row.drift.probs[-1] - row.drift.probs_old)
        assert boxes[row.label].line.color == colours[row.label]
    # the LP optimum stays inside its box; after 8 epochs dppo_tv's confident action has left it (docs: +0.2327)
    dppo_tv = comp.rows[SPECS.index("dppo_tv")]
    assert dppo_tv.drift.probs[-1][0] - 0.6 > dppo_tv.feasible.room_up[0]


def test_flow_is_the_optimums_flow(comp, colours):
    opt = comp.rows[SPECS.index("atr")].optimum
    fig = flow_figure(opt, colours["atr"], "atr")
    (sankey,) = fig.data
    assert sankey.type == "sankey" and fig.layout.title.text.startswith("atr:")
    flows = {(s, t): v for s, t, v in zip(sankey.meta["source"], sankey.meta["target"], sankey.meta["value"])}
    assert flows == {(i, j): opt.flow[i, j] for i, j in zip(*np.nonzero(opt.flow > 1e-12))}
    assert flows.keys() == {(1, 0), (2, 0)}  # docs/reallocation.md: flow 1→0 0.0600, 2→0 0.0200
    assert sum(sankey.link.value) == pytest.approx(opt.delta[0])


def test_flow_without_movement_says_so():
    opt = constrained_optimum([0.5, 0.5], [1, 1], "grpo")
    fig = flow_figure(opt, "#1f77b4")
    assert not fig.data and "No mass moves" in fig.layout.annotations[0].text


def test_bucket_bars_are_net_mass(comp, colours):
    fig = bucket_figure(comp, colours)
    bars = [t for t in fig.data if t.meta["kind"] == "bucket"]
    assert len(bars) == 2 * len(SPECS)
    for t in bars:
        row = comp.rows[SPECS.index(t.meta["spec"])]
        want = row.optimum.net_mass_by_bucket if t.meta["stage"] == "lp" else row.drift.net_mass_by_bucket[-1]
        np.testing.assert_array_equal(t.y, want)
        assert list(t.x) == list(comp.bucket_labels)


def test_entropy_lines_and_optimum_markers(comp, colours):
    fig = entropy_figure(comp, colours)
    lines, lp = traces(fig, "entropy"), traces(fig, "entropy_lp")
    for row in comp.rows:
        np.testing.assert_array_equal(lines[row.label].y, row.drift.entropy)
        assert lp[row.label].y[0] == pytest.approx(row.drift.entropy[0] + row.optimum.entropy_change, abs=1e-15)
    # the honest finding: on this input every spec lowers entropy
    assert all(row.drift.entropy[-1] < row.drift.entropy[0] for row in comp.rows)


def test_ratio_lines_and_clipped_epochs(comp):
    drift = comp.rows[SPECS.index("atr")].drift
    fig = ratio_figure(drift, comp.adv, "atr")
    lines, clipped = traces(fig, "ratio"), traces(fig, "clipped")
    for i in range(3):
        np.testing.assert_array_equal(lines[i].y, drift.ratio[:, i])
        epochs = np.flatnonzero(drift.clipped_low[:, i] | drift.clipped_high[:, i])
        np.testing.assert_array_equal(clipped[i].x, epochs)
    assert len(clipped[1].x) == 7  # docs: the A<0 action is clipped from epoch 2 on …
    assert drift.ratio[-1, 1] < drift.lo[1]  # … and still falls below lo (0.54 < 0.8)
    assert {s.y0 for s in fig.layout.shapes} == {drift.lo[0], drift.hi[0]}


def test_headroom_curves_are_theorys(comp, colours):
    curves = {label: headroom_curve(label) for label in SPECS}
    fig = headroom_figure(curves, comp, colours)
    lines, dots = traces(fig, "headroom"), traces(fig, "headroom_actions")
    for row in comp.rows:
        np.testing.assert_array_equal(lines[row.label].y, curves[row.label].room_up)
        np.testing.assert_array_equal(dots[row.label].y, row.feasible.room_up)
