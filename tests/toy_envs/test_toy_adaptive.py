"""The arena with intersections and adaptive δ: the `delta` column, per-seed controllers, and δ moving toward
its target (replayed against `delta_update` from the run's own logged signal)."""

import math

import numpy as np
import pytest

from divclip.theory.adaptive import delta_update
from divclip.theory.spec import parse_method
from divclip.toy_envs import run_arena
from divclip.toy_envs.result import METRICS, ArenaResult

SMALL = dict(steps=30, group_size=4, prompts_per_step=2, ppo_epochs=3, lr=0.1)


def test_delta_column_constant_for_fixed_nan_without_a_single_delta():
    res = run_arena("bandit", "atr,kl3:0.05,grpo,kl3:0.023144&binary_tv:0.2", seeds=2, **SMALL)
    d = res.metrics["delta"]
    assert np.all(d[0] == parse_method("atr").delta) and np.all(d[1] == 0.05)
    assert np.all(np.isnan(d[2])) and np.all(np.isnan(d[3]))


@pytest.mark.parametrize(
    "env, method",
    [("bandit", "kl3:0.02@kl3=0.002:gain=0.4"), ("sparse", "kl3@clipfrac=0.05"), ("bandit", "kl3@entropy=1.5")],
)
def test_each_seeds_delta_replays_the_controller_on_its_logged_signal(env, method):
    """T = 1 in bandit/sparse, so the CSV's kl3 (per response) is the per-token k3 the controller reads, and
    the gradient-read clip fraction equals policy_loss's; the entropy column is the rollout policy's."""
    kw = {"env_kwargs": {"init_correct_prob": 0.1, "prompts": 8}} if env == "sparse" else {}
    res = run_arena(env, method, seeds=3, **SMALL, **kw)
    spec = parse_method(method)
    delta = res.metrics["delta"][0]  # (seeds, steps)
    signal = res.metrics[spec.signal][0]
    assert np.all(delta[:, 0] == spec.delta)
    replay = delta[:, :1].copy()
    for t in range(delta.shape[1] - 1):
        replay = np.concatenate([replay, delta_update(replay[:, -1:], signal[:, t : t + 1], spec)], axis=1)
    np.testing.assert_allclose(delta, replay, rtol=1e-7)  # policy_loss divides clip counts by n + 1e-8
    assert np.ptp(delta) > 0  # it moved
    assert np.all((delta >= spec.delta_min) & (delta <= spec.delta_max))


@pytest.mark.slow  # 8 seeds x 60 steps x 2 methods; the controller's rule itself is checked fast above
def test_adaptive_delta_moves_toward_its_target_on_the_issue_command_settings():
    res = run_arena("sparse", "atr,kl3@clipfrac=0.1", seeds=8, steps=60)
    delta, clip = res.metrics["delta"][1], res.metrics["clipfrac"][1]
    # sparse rewards: ATR's δ clips far below 10 % of tokens, so the controller narrows δ, and clipping rises
    assert clip[:, :10].mean() < 0.1
    assert delta[:, -10:].mean() < 0.5 * delta[:, 0].mean()
    assert clip[:, -20:].mean() > 2 * clip[:, :10].mean()
    assert abs(clip[:, -20:].mean() - 0.1) < abs(clip[:, :10].mean() - 0.1)
    fixed = res.metrics["clipfrac"][0]
    assert clip[:, -20:].mean() > fixed[:, -20:].mean()


def test_an_adaptive_seed_trains_identically_alone_or_among_other_seeds():
    alone = run_arena("bandit", "atr,kl3@kl3=0.002", seeds=[3], **SMALL)
    batch = run_arena("bandit", "atr,kl3@kl3=0.002", seeds=[0, 3, 5], **SMALL)
    for k in METRICS:
        assert np.array_equal(alone.metrics[k][:, 0], batch.metrics[k][:, 1], equal_nan=True), k


def test_csv_keeps_delta_and_reads_old_csvs_without_it(tmp_path):
    res = run_arena("bandit", "kl3@kl3=0.002", seeds=2, **SMALL)
    res.to_csv(tmp_path / "m.csv")
    back = ArenaResult.from_csv(tmp_path / "m.csv")
    np.testing.assert_allclose(back.metrics["delta"], res.metrics["delta"], rtol=1e-8)
    lines = (tmp_path / "m.csv").read_text().splitlines()
    header = lines[0].split(",")
    i = header.index("delta")
    old = [",".join(c for j, c in enumerate(line.split(",")) if j != i) for line in lines]
    (tmp_path / "old.csv").write_text("\n".join(old) + "\n")
    assert np.all(np.isnan(ArenaResult.from_csv(tmp_path / "old.csv").metrics["delta"]))
    assert math.isfinite(back.metrics["expected_reward"][0, 0, -1])
