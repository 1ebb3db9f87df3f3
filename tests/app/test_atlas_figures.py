"""The Atlas page's pure figure builders (app/atlas_figures.py): their numbers are `gradient_weight`'s and
`interval`'s, one colour scale, hover text with the numbers, blank cells where q·r > 1."""

from __future__ import annotations

import numpy as np
import pytest

from divclip.app import atlas_figures
from divclip.app.atlas_figures import (
    cross_section_figure,
    heatmap_figure,
    interval_rows,
    q_axis,
    r_axis,
    weight_panels,
)
from divclip.theory import gradient_weight


@pytest.fixture(scope="module")
def grid():
    return q_axis(25), r_axis(10.0, 31)


def test_panels_are_the_frames_weights(grid):
    q, r = grid
    panels, problems = weight_panels(["grpo", "dppo_kl"], q, r)
    assert problems == [] and [p.label for p in panels] == ["grpo", "dppo_kl"]
    for p in panels:
        for w, a in ((p.pos, 1.0), (p.neg, -1.0)):
            expected = gradient_weight(p.label, q[None, :], r[:, None], a)
            feasible = q[None, :] * r[:, None] <= 1
            np.testing.assert_array_equal(w[feasible], expected[feasible])
            assert np.isnan(w[~feasible]).all() and (~feasible).any()
    grpo = panels[0]
    assert np.nanmin(grpo.pos[r > 1.2]) == 0 and np.all(grpo.pos[(r > 0.5) & (r < 1.2)][:, 0] > 0)


def test_a_method_without_weight_is_reported_not_drawn(grid):
    from divclip.theory import forms
    from divclip.theory.forms import Form, declare_form

    declare_form(
        Form(
            "demo_batch2",
            "batch-selective",
            "demo",
            ("test:demo",),
            token_level=False,
            weight_note="depends on the batch",
        )
    )
    try:
        panels, problems = weight_panels(["grpo", "grpo/demo_batch2"], *grid)
    finally:
        forms._FORMS.pop("demo_batch2")
    assert [p.label for p in panels] == ["grpo"]
    assert len(problems) == 1 and "grpo/demo_batch2" in problems[0] and "depends on the batch" in problems[0]


def test_heatmaps_share_one_colour_scale_and_hover_numbers(grid):
    q, r = grid
    panels, _ = weight_panels(["grpo", "sapo", "dapo"], q, r)
    fig = heatmap_figure(panels, q, r, q_mark=0.01)
    maps = [t for t in fig.data if t.type == "heatmap"]
    assert len(maps) == 6 and {t.coloraxis for t in maps} == {"coloraxis"}
    assert fig.layout.coloraxis.cmin == 0 and fig.layout.coloraxis.cmax == pytest.approx(
        np.nanmax([np.nanmax(w) for p in panels for w in (p.pos, p.neg)])
    )
    np.testing.assert_array_equal(np.asarray(maps[1].z, dtype=float), panels[0].neg)  # grpo, A < 0
    assert "w = %{z" in maps[0].hovertemplate and "q = %{x" in maps[0].hovertemplate
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert [a.text for a in fig.layout.annotations][:2] == ["grpo: A > 0", "grpo: A < 0"]
    marks = [t for t in fig.data if t.type == "scatter" and tuple(t.x) == (0.01, 0.01)]
    assert len(marks) == 6
    ratio = heatmap_figure(panels, q, r, colour="w / r")
    np.testing.assert_allclose(np.asarray(ratio.data[0].z, dtype=float), panels[0].pos / r[:, None])
    with pytest.raises(ValueError, match="colour must be one of"):
        heatmap_figure(panels, q, r, colour="nope")


def test_cross_section_lines(grid):
    r = r_axis(10.0, 101)
    fig = cross_section_figure(["dapo", "sapo"], 0.01, r)
    names = [t.name for t in fig.data]
    assert names == ["unclipped PPO (w = r)", "dapo, A > 0", "dapo, A < 0", "sapo, A > 0", "sapo, A < 0"]
    np.testing.assert_array_equal(fig.data[1].y, gradient_weight("dapo", 0.01, r, 1.0))
    np.testing.assert_array_equal(fig.data[4].y, gradient_weight("sapo", 0.01, r, -1.0))
    assert fig.data[2].line.dash == "dash" and "w = %{y" in fig.data[1].hovertemplate


def test_interval_rows_answer_the_newcomers_question():
    rows = interval_rows(["grpo", "dppo_tv"], 0.01)
    grpo, tv = rows
    assert grpo["A > 0 keeps r in (q = 0.01)"] == "[0, 1.2]" and grpo["A < 0 keeps r in (q = 0.01)"] == "[0.8, ∞)"
    assert tv["A > 0 keeps r in (q = 0.01)"] == "[0, 21]"  # binary TV: 1 + δ/q = 1 + 0.2/0.01
    assert tv["nearest budget"] == "binary_tv δ=0.2 (equal)" and tv["family"] == "hard clip"
    assert interval_rows(["sapo"], 0.5)[0]["A > 0 keeps r in (q = 0.5)"] == "none (no hard clip)"


def test_colour_scale_draws_zero_grey_and_puts_w_one_mid_scale():
    """Issue 34: on the old 0-10 viridis scale the kept region (w ≤ 1.2) was nearly as dark as the clipped one."""
    from plotly.colors import sample_colorscale

    from divclip.app.atlas_figures import ZERO_COLOUR, colour_scale

    scale = colour_scale(10.0)
    assert scale[0] == [0.0, ZERO_COLOUR] and scale[1][1] == ZERO_COLOUR and scale[1][0] < 1e-6
    positions = [x for x, _ in scale]
    assert positions == sorted(positions) and positions[-1] == pytest.approx(1.0)
    at_one = dict((round(x, 9), c) for x, c in scale)[0.1]  # w = 1 of a 0-10 scale
    assert at_one == sample_colorscale("Viridis", [0.5])[0]


def test_heatmap_ticks_are_plain_and_every_q_axis_is_labelled():
    q, r = atlas_figures.q_axis(), atlas_figures.r_axis(10.0)
    panels, _ = atlas_figures.weight_panels(["grpo", "dapo"], q, r)
    fig = atlas_figures.heatmap_figure(panels, q, r)
    layout = fig.layout
    ys = [layout[a] for a in layout if a.startswith("yaxis")]
    xs = [layout[a] for a in layout if a.startswith("xaxis")]
    assert all(list(y.ticktext) == ["0.1", "0.2", "0.5", "1", "2", "5", "10"] for y in ys)
    assert all(x.showticklabels and list(x.ticktext) == ["0.0001", "0.001", "0.01", "0.1", "1"] for x in xs)
    assert [y.title.text for y in ys].count("ratio r") == 2  # the left column only: never over the left panel
    assert sum(1 for t in fig.data if t.meta and t.meta.get("kind") == "infeasible") == 4


def test_cross_section_never_draws_a_ratio_above_one_over_q():
    r = atlas_figures.r_axis(10.0, 301)
    fig = atlas_figures.cross_section_figure(["grpo", "dapo"], 0.9, r)
    assert all(max(t.x) <= 1 / 0.9 for t in fig.data)
    (band,) = fig.layout.shapes
    assert band.x0 == pytest.approx(1 / 0.9) and "not a probability" in fig.layout.annotations[0].text


def test_interval_table_says_when_the_upper_bound_cannot_bind():
    rows = {row["method"]: row for row in atlas_figures.interval_rows(["grpo", "dapo"], 0.9)}
    assert rows["grpo"]["A > 0 keeps r in (q = 0.9)"] == "[0, 1.2]; r ≤ 1/q = 1.111 < 1.2: the upper clip cannot bind"
    low = atlas_figures.interval_rows(["grpo"], 0.5)[0]
    assert low["A > 0 keeps r in (q = 0.5)"] == "[0, 1.2]"
