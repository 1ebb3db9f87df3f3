"""The arena: reproducible, seeds independent, learns known answers, and reports what policy_loss does."""

import math
import threading

import numpy as np
import pytest
import torch

from divclip.theory import get_measure
from divclip.theory.losses import LOSS_AGG_MODES, PRESETS, ClipSpec, policy_loss, preset
from divclip.toy_envs import Bandit, arena, iter_arena, run_arena
from divclip.toy_envs.arena import _ClipTally, _seed_scale
from divclip.toy_envs.result import METRICS

SMALL = dict(steps=12, group_size=4, prompts_per_step=2, ppo_epochs=3, lr=0.1)
EASY = {"init_correct_prob": 0.1, "prompts": 8}  # sparse env where 12 small steps do find rewards


def test_same_seeds_give_identical_curves_and_different_seeds_differ():
    a = run_arena("sparse", "grpo,atr", seeds=[0, 1], **SMALL, env_kwargs=EASY)
    b = run_arena("sparse", "grpo,atr", seeds=[0, 1], **SMALL, env_kwargs=EASY)
    c = run_arena("sparse", "grpo,atr", seeds=[2, 3], **SMALL, env_kwargs=EASY)
    for k in METRICS:
        assert np.array_equal(a.metrics[k], b.metrics[k], equal_nan=True), k
    assert a.seeds == [0, 1] and c.seeds == [2, 3]
    assert not np.array_equal(a.metrics["reward_mean"], c.metrics["reward_mean"])
    assert not np.array_equal(a.metrics["expected_reward"][:, 0], a.metrics["expected_reward"][:, 1])


@pytest.mark.parametrize("env", ["bandit", "sparse", "sequence"])
def test_a_seed_trains_identically_alone_or_among_other_seeds(env):
    """Batching seeds into one policy_loss call (token-mean, rescaled by the seed count) changes nothing."""
    kw = {"env_kwargs": EASY} if env == "sparse" else {}
    alone = run_arena(env, "grpo,atr", seeds=[3], **SMALL, **kw)
    batch = run_arena(env, "grpo,atr", seeds=[0, 3, 5], **SMALL, **kw)
    assert batch.metrics["grad_norm"][:, 1].max() > 0  # seed 3 did learn something
    for k in METRICS:
        assert np.array_equal(alone.metrics[k][:, 0], batch.metrics[k][:, 1], equal_nan=True), k  # δ: NaN for grpo


@pytest.mark.slow
def test_every_method_reaches_the_best_arm():
    env = Bandit(arms=8)
    mu = env.arm_means
    threshold = float(mu.max() - 0.1 * (mu.max() - mu.mean()))  # best arm - 10 % of its gap to the mean arm
    methods = list(PRESETS) + ["k2", "binary_kl:0.05"]
    res = run_arena(env, methods, seeds=4, steps=200, group_size=16, prompts_per_step=1, ppo_epochs=4, lr=0.05)
    final = res.metrics["expected_reward"][:, :, -1]  # (methods, seeds)
    assert final.min() >= threshold, dict(zip(res.methods, final.min(1).round(4)))
    assert res.metrics["expected_reward"][:, :, 0].max() < threshold  # it had to learn: uniform start is 0.5


def test_one_epoch_makes_all_clip_methods_identical():
    """verl #791: with one epoch r ≡ 1, no bound binds, and GRPO, DAPO and ATR are the same algorithm."""
    res = run_arena("sparse", "grpo,dapo,atr", seeds=2, **{**SMALL, "ppo_epochs": 1}, env_kwargs=EASY)
    assert np.all(res.metrics["clipfrac"] == 0) and res.metrics["grad_norm"].max() > 0
    for k in ("expected_reward", "entropy", "grad_norm"):
        assert np.array_equal(res.metrics[k][0], res.metrics[k][1]) and np.array_equal(
            res.metrics[k][0], res.metrics[k][2]
        )


@pytest.mark.parametrize("methods", ["grpo,dapo,atr", "binary_kl:0.02,kl3:0.05"])
def test_gradient_clip_fractions_equal_policy_loss_metrics(methods):
    """Per-seed fractions read off ∂loss/∂log π average to policy_loss's own clipfrac (token-mean)."""
    res = run_arena("sparse", methods, seeds=3, **{**SMALL, "lr": 0.3}, env_kwargs=EASY, loss_metrics=True)
    ours = res.metrics["clipfrac"].mean(1)  # (methods, steps): equal token counts per seed
    assert ours.max() > 0.01, "clipping never bound: the comparison would be vacuous"
    np.testing.assert_allclose(ours, res.loss_info["clipfrac"], atol=1e-12)
    np.testing.assert_allclose(res.metrics["clipfrac_low"].mean(1), res.loss_info["clipfrac_low"], atol=1e-12)
    np.testing.assert_allclose(res.metrics["clipfrac_high"].mean(1), res.loss_info["clipfrac_high"], atol=1e-12)
    plain = run_arena("sparse", methods, seeds=3, **{**SMALL, "lr": 0.3}, env_kwargs=EASY)
    assert plain.loss_info == {}  # off by default; the training itself is identical
    for k in METRICS:
        assert np.array_equal(plain.metrics[k], res.metrics[k], equal_nan=True), k


@pytest.mark.parametrize("name", ["grpo", "dapo", "atr", "dppo_kl"])
def test_zero_gradient_tokens_are_the_gradient_rule(name):
    """A token's gradient is zero iff D(r, p) > δ and (r - 1)·A > 0 (docs/theory.md §1), from the measure's maths."""
    spec = preset(name)
    g = torch.Generator().manual_seed(0)
    old = torch.log(torch.rand(400, 3, generator=g, dtype=torch.float64) * 0.9 + 0.05)
    lp = (old + 0.4 * torch.randn(400, 3, generator=g, dtype=torch.float64)).clamp(max=-1e-3).requires_grad_(True)
    adv = torch.randn(400, 3, generator=g, dtype=torch.float64)
    loss, _ = policy_loss(lp, old, adv, torch.ones_like(adv), spec)
    loss.backward()
    r = (lp - old).exp().detach()
    m = get_measure(spec.measure)
    if spec.measure == "ratio":  # GRPO/DAPO: the lower side's budget is ε_low, the upper side's ε_high
        lo, hi = m.bounds(spec.eps_low)[0], m.bounds(spec.eps_high)[1]
        outside = (r < lo) | (r > hi)
    else:
        outside = m._value(r, old.exp(), torch) > spec.delta
    rule = outside & ((r - 1) * adv > 0)
    assert 10 < int(rule.sum()) < 1190
    assert torch.equal(lp.grad == 0, rule)
    tally = _ClipTally(4, adv)  # 4 runs of 100 rows each
    tally.add(lp.grad, lp.detach(), old)
    tally.add(lp.grad, lp.detach(), old)  # a second epoch with the same outcome counts twice
    total, low, high, dual = tally.counts()  # (4,) each
    for run, rows in enumerate(torch.arange(400).view(4, 100)):
        hit = rule[rows]
        assert int(low[run]) == 2 * int((hit & (adv[rows] < 0) & (r[rows] < 1)).sum())  # lower bound
        assert int(high[run]) == 2 * int((hit & (adv[rows] > 0)).sum())  # upper bound
        assert int(dual[run]) == 2 * int((hit & (adv[rows] < 0) & (r[rows] > 1)).sum())
        assert int(total[run]) == 2 * int(hit.sum())
    assert int(low.sum()) > 0 and int(high.sum()) > 0


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_seed_scale_restores_each_seeds_own_gradient(mode):
    S, N, T = 3, 4, 5
    g = torch.Generator().manual_seed(1)
    old = -torch.rand(S * N, T, generator=g, dtype=torch.float64) - 0.1
    lp = (old + 0.3 * torch.randn(S * N, T, generator=g, dtype=torch.float64)).requires_grad_(True)
    adv = torch.randn(S * N, T, generator=g, dtype=torch.float64)
    mask = torch.ones_like(adv)
    spec = preset("atr")
    scale = _seed_scale(spec, S, N, T, mode)
    assert scale == (1.0 if mode == "token-sum" else S)
    (scale * policy_loss(lp, old, adv, mask, spec, loss_agg_mode=mode)[0]).backward()
    for s in range(S):
        rows = slice(s * N, (s + 1) * N)
        lp_s = lp.detach()[rows].clone().requires_grad_(True)
        policy_loss(lp_s, old[rows], adv[rows], mask[rows], spec, loss_agg_mode=mode)[0].backward()
        torch.testing.assert_close(lp.grad[rows], lp_s.grad, rtol=1e-14, atol=0)


def test_streaming_yields_every_n_steps_and_stops_early():
    steps = [r.steps_done for r in iter_arena("bandit", "grpo", seeds=2, **{**SMALL, "steps": 12}, every=5)]
    assert steps == [5, 10, 12]
    stop = threading.Event()
    seen = []
    for r in iter_arena("bandit", "grpo", seeds=2, **{**SMALL, "steps": 50}, every=5, stop=stop):
        seen.append(r)
        stop.set()
    assert [r.steps_done for r in seen] == [5, 5] and seen[-1].stopped and not seen[0].stopped
    assert not seen[-1].finished and seen[-1].total_steps == 50
    calls = iter(range(100))
    last = list(iter_arena("bandit", "grpo", seeds=2, **SMALL, stop=lambda: next(calls) >= 3))[-1]
    assert last.stopped and last.steps_done == 3


def test_yielded_results_are_read_only_prefixes_of_the_final_one():
    """Yields share the arena's buffer (no per-yield copy); they are read-only and never change afterwards."""
    results = [
        (r, {k: np.array(v) for k, v in r.metrics.items()})
        for r in iter_arena("bandit", "grpo", seeds=2, **{**SMALL, "steps": 12}, every=5)
    ]
    final = results[-1][0]
    for r, copied in results:
        for k in METRICS:
            assert not r.metrics[k].flags.writeable
            assert np.array_equal(r.metrics[k], copied[k], equal_nan=True)  # unchanged after later steps
            assert np.array_equal(r.metrics[k], final.metrics[k][..., : r.steps_done], equal_nan=True)
    with pytest.raises(ValueError, match="read-only"):
        final.metrics["entropy"][0, 0, 0] = 0.0


@pytest.mark.parametrize("env", ["bandit", "sequence"])
def test_metrics_do_not_depend_on_how_steps_are_batched_for_them(env, monkeypatch):
    """Metrics are computed for blocks of steps at once (every yield, or when pending tables grow large):
    the numbers are bit for bit those of one step at a time."""
    one_by_one = run_arena(env, "grpo,atr", seeds=2, **SMALL, every=1)
    blocks = run_arena(env, "grpo,atr", seeds=2, **SMALL, every=5)
    monkeypatch.setattr(arena, "_PENDING_BYTES", 1)  # flush after every step without yielding
    small = run_arena(env, "grpo,atr", seeds=2, **SMALL, every=100)
    for k in METRICS:
        assert np.isfinite(one_by_one.metrics[k][1 if k == "delta" else slice(None)]).all(), k  # grpo has no δ
        assert np.array_equal(one_by_one.metrics[k], blocks.metrics[k], equal_nan=True), k
        assert np.array_equal(one_by_one.metrics[k], small.metrics[k], equal_nan=True), k


def test_metrics_are_finite_and_sane():
    res = run_arena("sequence", "grpo,atr", seeds=2, **SMALL)
    for k in METRICS:
        if k != "delta":
            assert np.isfinite(res.metrics[k]).all(), k
    m = res.metrics
    assert np.isnan(m["delta"][0]).all() and (m["delta"][1] == PRESETS["atr"].delta).all()  # grpo: no δ; atr
    assert (m["kl_exact"] >= 0).all() and (m["kl3"] >= 0).all() and m["kl_exact"].max() > 0
    assert (np.diff(np.stack([m[f"pass@{k}"] for k in (1, 4, 8, 16)]), axis=0) >= -1e-15).all()  # pass@k grows in k
    np.testing.assert_allclose(m["pass@1"], m["prob_correct"], rtol=1e-12)
    assert (m["entropy"] <= math.log(8) + 1e-12).all()


def test_mlp_policy_runs_reproducibly_and_differs_from_tabular():
    a = run_arena("sequence", "grpo", seeds=2, policy="mlp", **SMALL)
    b = run_arena("sequence", "grpo", seeds=2, policy="mlp", **SMALL)
    t = run_arena("sequence", "grpo", seeds=2, **SMALL)
    assert np.array_equal(a.metrics["expected_reward"], b.metrics["expected_reward"])
    np.testing.assert_allclose(a.metrics["expected_reward"][..., 0], t.metrics["expected_reward"][..., 0])  # same start
    assert not np.allclose(a.metrics["expected_reward"][..., -1], t.metrics["expected_reward"][..., -1])


def test_methods_accept_specs_labels_and_measure_strings():
    spec = ClipSpec("ratio", eps_low=0.1, eps_high=0.3)
    res = run_arena("bandit", [("narrow", spec), "kl3:0.05", "ratio:0.2:0.28", "k2"], seeds=1, **SMALL)
    assert res.methods == ["narrow", "kl3:0.05", "ratio:0.2:0.28", "k2"]
    assert res.specs["narrow"] is spec and res.specs["ratio:0.2:0.28"] == preset("dapo")
    assert res.specs["k2"].delta == pytest.approx(0.5 * math.log(0.8) ** 2)  # lower bound at 0.8, like ATR


@pytest.mark.parametrize(
    "kwargs, arg",
    [
        ({"env": "maze"}, "env"),
        ({"methods": "grpo,ppo9"}, "ppo9"),
        ({"methods": ""}, "methods"),
        ({"methods": "binary_kl"}, "binary_kl"),
        ({"methods": "grpo,grpo"}, "unique"),
        ({"seeds": 0}, "seeds"),
        ({"seeds": [1, 1]}, "seeds"),
        ({"seeds": [-1]}, "seeds"),
        ({"steps": 0}, "steps"),
        ({"group_size": 1}, "group_size"),
        ({"prompts_per_step": 0}, "prompts_per_step"),
        ({"ppo_epochs": 0}, "ppo_epochs"),
        ({"lr": 0.0}, "lr"),
        ({"lr": float("nan")}, "lr"),
        ({"every": 0}, "every"),
        ({"loss_agg_mode": "mean"}, "loss_agg_mode"),
        ({"adv_norm": "max"}, "adv_norm"),
        ({"policy": "transformer"}, "policy"),
        ({"stop": 3}, "stop"),
        ({"loss_metrics": 1}, "loss_metrics"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(kwargs, arg):
    args = {"env": "bandit", "methods": "grpo", "seeds": 2, **SMALL, **kwargs}
    with pytest.raises(ValueError, match=arg):
        iter_arena(args.pop("env"), args.pop("methods"), **args)  # raised at the call, before iterating


def test_torch_threads_are_restored_around_every_yield():
    before = torch.get_num_threads()
    seen = []
    run_arena("bandit", "grpo", seeds=1, **SMALL, every=4, callback=lambda r: seen.append(torch.get_num_threads()))
    assert seen == [before] * 3 and torch.get_num_threads() == before
