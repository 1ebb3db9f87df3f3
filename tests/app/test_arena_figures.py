"""The arena figure draws ArenaResult.band where it is, partial runs and long runs included."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from divclip.app import figures
from divclip.app.arena_figures import MAX_POINTS, arena_figure, panels, shown_steps
from divclip.app.realloc_figures import spec_colours
from divclip.toy_envs import iter_arena, run_arena


@pytest.fixture(autouse=True)
def validated(monkeypatch):
    monkeypatch.setattr(figures, "VALIDATE", True)


@pytest.fixture(scope="module")
def result():
    return run_arena("bandit", "grpo,dapo,atr", seeds=4, steps=12)


def by_kind(fig, kind: str) -> dict:
    return {
        (t.meta["method"], t.meta["metric"]): t
        for t in fig.data
        if isinstance(t.meta, dict) and t.meta.get("kind") == kind
    }


def test_means_and_bands_are_arena_result_band(result):
    fig = arena_figure(result, k=4)
    means, bands = by_kind(fig, "mean"), by_kind(fig, "band")
    x = np.arange(1, 13)
    for metric in ("expected_reward", "pass@4", "entropy"):
        mean, lo, hi = result.band(metric)
        for i, m in enumerate(result.methods):
            np.testing.assert_array_equal(means[m, metric].x, x)
            np.testing.assert_array_equal(means[m, metric].y, mean[i])
            np.testing.assert_array_equal(bands[m, metric].y, np.concatenate([hi[i], lo[i][::-1]]))
            assert means[m, metric].line.color == spec_colours(result.methods)[m]
    for metric in ("clipfrac_high", "clipfrac_low"):
        for i, m in enumerate(result.methods):
            np.testing.assert_array_equal(means[m, metric].y, result.metrics[metric].mean(1)[i])
    assert [a.text for a in fig.layout.annotations] == [t for _, t in panels(4)]
    assert fig.layout.shapes[0].y0 == result.best_reward == 0.9


def test_one_legend_entry_per_method(result):
    fig = arena_figure(result)
    assert [t.name for t in fig.data if t.showlegend is not False] == result.methods


def test_long_runs_are_drawn_at_most_max_points_steps():
    idx = shown_steps(1000)
    assert idx.size <= MAX_POINTS and idx[0] == 0 and idx[-1] == 999
    np.testing.assert_array_equal(shown_steps(7), np.arange(7))
    res = run_arena("bandit", "grpo", seeds=2, steps=40)
    fig = arena_figure(res, max_points=10)
    mean = by_kind(fig, "mean")["grpo", "entropy"]
    shown = np.asarray(mean.x) - 1
    assert len(shown) == 10 and shown[-1] == 39
    np.testing.assert_array_equal(mean.y, res.band("entropy")[0][0, shown])  # exact values at those steps


def test_partial_and_empty_results():
    stop = threading.Event()
    partial = None
    for partial in iter_arena("bandit", "grpo", 1, 50, every=5, stop=stop):  # noqa: B007 (last one kept)
        stop.set()  # stop after the first chunk
    assert partial.stopped and partial.steps_done == 5
    fig = arena_figure(partial)
    assert "step 5 of 50" in fig.layout.title.text
    assert not by_kind(fig, "band")  # one seed: no band
    assert max(by_kind(fig, "mean")["grpo", "entropy"].x) == 5  # the axes follow the data, the title the run
    stop = threading.Event()
    stop.set()
    (empty,) = list(iter_arena("bandit", "grpo", 1, 50, stop=stop))
    assert empty.steps_done == 0 and not arena_figure(empty).data


def test_bad_k_is_a_value_error(result):
    with pytest.raises(ValueError, match="k must be one of"):
        arena_figure(result, k=3)
