"""divclip's losses against verl 0.9.1's own functions, called in the same process on the same tensors.

Exactness, per comparison: `torch.equal` (bit-identical) where divclip performs verl's floating-point operations
in verl's order; otherwise |Δ| <= 1e-6 (float32) or 1e-12 (float64) relative to the largest magnitude. The
gradient that divclip attaches in closed form (clip mode) multiplies -A·r before the upstream gradient, verl
after, so those gradients agree to rounding, not bitwise.
"""

import importlib.util
import math

import numpy as np
import pytest
import torch

from divclip.theory.advantages import group_advantages
from divclip.theory.loss_metrics import kl_penalty
from divclip.theory.losses import LOSS_AGG_MODES, ClipSpec, agg_loss, policy_loss, preset

# verl is imported by the `ca` fixture, not at collection: importing it costs seconds that every pytest run
# (even one selecting unrelated tests) would otherwise pay.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="verl is not installed")


@pytest.fixture(scope="module")
def ca():
    """verl's core_algos module (its policy losses, agg_loss, kl_penalty, advantage estimators)."""
    return pytest.importorskip("verl.trainer.ppo.core_algos")


TOL = {torch.float32: 1e-6, torch.float64: 1e-12}


def actor_config(**kw):
    """A minimal verl ActorConfig: one process, so global_batch_info stays {} (local token/sequence counts)."""
    from verl.workers.config.actor import ActorConfig

    return ActorConfig(strategy="fsdp", rollout_n=4, ppo_micro_batch_size_per_gpu=1, **kw)


def batch(dtype, seed=0, b=12, t=40, noise=0.3, adv_zero=False):
    g = torch.Generator().manual_seed(seed)
    old = torch.log_softmax(2.0 * torch.randn(b, t, 6, generator=g, dtype=torch.float64), -1)[..., 0]
    lp = old + noise * torch.randn(b, t, generator=g, dtype=torch.float64)
    adv = torch.randn(b, 1, generator=g, dtype=torch.float64).expand(b, t) + 0.3 * torch.randn(
        b, t, generator=g, dtype=torch.float64
    )
    if not adv_zero:
        adv = torch.where(adv == 0, torch.full_like(adv, 0.5), adv)
    lengths = torch.randint(1, t + 1, (b, 1), generator=g)
    mask = (torch.arange(t)[None, :] < lengths).to(torch.float64)
    mask[0] = 0.0  # one fully masked sequence
    return old.to(dtype), lp.to(dtype), adv.to(dtype), mask.to(dtype)


def close(a, b, dtype):
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    scale = max(1.0, float(b.abs().max()))
    return float((a - b).abs().max()) <= TOL[dtype] * scale


def run_ours(old, lp, adv, mask, spec, agg):
    leaf = lp.clone().requires_grad_()
    loss, metrics = policy_loss(leaf, old, adv, mask, spec, agg)
    loss.backward()
    return loss.detach(), leaf.grad, metrics


def run_verl(fn, old, lp, adv, mask, config, agg):
    leaf = lp.clone().requires_grad_()
    loss, metrics = fn(old, leaf, adv, mask, agg, config)
    loss.backward()
    return loss.detach(), leaf.grad, metrics


DTYPES = [torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("agg", LOSS_AGG_MODES)
def test_ratio_clip_with_dual_clip_is_verl_vanilla(ca, dtype, agg):
    old, lp, adv, mask = batch(dtype, noise=1.0)  # wide ratios: both bounds and the dual clip bind
    spec = ClipSpec("ratio", eps_low=0.2, eps_high=0.28, params={"dual_clip_c": 3.0})
    config = actor_config(clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0, loss_agg_mode=agg)
    loss, grad, m = run_ours(old, lp, adv, mask, spec, agg)
    v_loss, v_grad, vm = run_verl(ca.compute_policy_loss_vanilla, old, lp, adv, mask, config, agg)
    assert torch.equal(loss, v_loss)  # same operations in the same order
    assert close(grad, v_grad, dtype)  # closed-form gradient: rounding-level agreement
    assert float(grad.abs().max()) > 0 and m["clipfrac"] > 0.05 and m["dual_clipfrac"] > 0
    assert m["clipfrac"] == pytest.approx(vm["actor/pg_clipfrac"], rel=TOL[dtype], abs=0)
    # verl's pg_clipfrac_lower is the dual-clip fraction, not the lower-bound clip fraction.
    assert m["dual_clipfrac"] == pytest.approx(vm["actor/pg_clipfrac_lower"], rel=TOL[dtype], abs=0)
    assert m["ppo_kl"] == pytest.approx(vm["actor/ppo_kl"], rel=TOL[dtype], abs=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_kl3_at_grpo_bounds_is_verl_vanilla_at_l_u(ca, dtype):
    """The theorem against verl itself: KL3 at δ is verl's vanilla loss with clip_ratio_low/high = 1-l_δ, u_δ-1."""
    old, lp, adv, mask = batch(dtype, seed=3, noise=0.5)
    spec = ClipSpec("kl3", delta=0.05, params={"dual_clip_c": 3.0})
    lo, hi = spec.ratio_bounds()
    config = actor_config(clip_ratio_low=1.0 - lo, clip_ratio_high=hi - 1.0, clip_ratio_c=3.0)
    loss, grad, m = run_ours(old, lp, adv, mask, spec, "token-mean")
    v_loss, v_grad, vm = run_verl(ca.compute_policy_loss_vanilla, old, lp, adv, mask, config, "token-mean")
    assert close(loss, v_loss, dtype) and close(grad, v_grad, dtype)  # 1 - (1 - l) may differ from l by an ulp
    assert m["clipfrac"] == pytest.approx(vm["actor/pg_clipfrac"], rel=TOL[dtype]) and m["clipfrac"] > 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "measure, delta, verl_fn",
    [("binary_kl", 0.05, "compute_policy_loss_dppo_kl"), ("binary_tv", 0.2, "compute_policy_loss_dppo_tv")],
)
@pytest.mark.parametrize("cap", [20.0, 1.5])
def test_gated_binary_measures_are_verl_dppo(ca, dtype, measure, delta, verl_fn, cap):
    old, lp, adv, mask = batch(dtype, seed=1, noise=0.8)
    spec = ClipSpec(measure, delta=delta, form="gated", params={"tis_cap": cap})
    config = actor_config(clip_ratio=delta, clip_ratio_low=delta, clip_ratio_high=delta, clip_ratio_c=cap)
    loss, grad, m = run_ours(old, lp, adv, mask, spec, "token-mean")
    v_loss, v_grad, vm = run_verl(getattr(ca, verl_fn), old, lp, adv, mask, config, "token-mean")
    assert torch.equal(loss, v_loss)  # same masks (D is computed differently, but no token sits on δ), same products
    assert torch.equal(grad, v_grad)  # plain autograd through the same products
    assert m["clipfrac"] > 0.02
    assert m["clipfrac"] == pytest.approx(vm["actor/pg_clipfrac"], rel=TOL[dtype], abs=0)
    assert m["ppo_kl"] == pytest.approx(vm["actor/ppo_kl"], rel=TOL[dtype], abs=TOL[dtype])


def test_gated_clipfrac_differs_from_verl_only_on_zero_advantage_tokens(ca):
    """verl's dppo pg_clipfrac counts A = 0 tokens whose ratio left the interval downwards; divclip does not
    (their gradient is 0 either way). Loss and gradient still agree exactly."""
    old, lp, adv, mask = batch(torch.float64, seed=2, noise=0.8)
    adv[::2] = 0.0
    spec = ClipSpec("binary_kl", delta=0.05, form="gated", params={"tis_cap": 20.0})
    config = actor_config(clip_ratio=0.05, clip_ratio_low=0.05, clip_ratio_high=0.05, clip_ratio_c=20.0)
    loss, grad, m = run_ours(old, lp, adv, mask, spec, "token-mean")
    v_loss, v_grad, vm = run_verl(ca.compute_policy_loss_dppo_kl, old, lp, adv, mask, config, "token-mean")
    assert torch.equal(loss, v_loss) and torch.equal(grad, v_grad)
    assert vm["actor/pg_clipfrac"] > m["clipfrac"] > 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "token-mean"])
def test_sequence_level_is_verl_gspo(ca, dtype, agg):
    old, lp, adv, mask = batch(dtype, seed=4, noise=0.002)  # sequence ratios straddle 1 ± 4e-4
    spec = preset("gspo")
    config = actor_config(clip_ratio_low=3e-4, clip_ratio_high=4e-4)
    loss, grad, m = run_ours(old, lp, adv, mask, spec, agg)
    v_loss, v_grad, vm = run_verl(ca.compute_policy_loss_gspo, old, lp, adv, mask, config, agg)
    assert torch.equal(loss, v_loss)
    assert close(grad, v_grad, dtype) and float(grad.abs().max()) > 0
    assert 0 < m["clipfrac"] < 1
    assert m["clipfrac"] == pytest.approx(vm["actor/pg_clipfrac"], rel=TOL[dtype], abs=0)
    assert m["ppo_kl"] == pytest.approx(vm["actor/ppo_kl"], rel=TOL[dtype], abs=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_cispo_is_verl_cispo(ca, dtype):
    old, lp, adv, mask = batch(dtype, seed=5, noise=0.6)
    spec = ClipSpec("ratio", eps_low=0.2, eps_high=0.28, form="cispo")
    config = actor_config(clip_ratio_low=0.2, clip_ratio_high=0.28)
    loss, grad, m = run_ours(old, lp, adv, mask, spec, "token-mean")
    v_loss, v_grad, vm = run_verl(ca.compute_policy_loss_cispo, old, lp, adv, mask, config, "token-mean")
    assert torch.equal(loss, v_loss) and torch.equal(grad, v_grad)
    assert m["clipfrac"] > 0.02
    assert m["clipfrac"] == pytest.approx(vm["actor/pg_clipfrac"], rel=TOL[dtype], abs=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("low", [1.0, 10.0])
def test_cispo_without_a_floor_is_verl_cispo(ca, dtype, low):
    """verl's CISPO with clip_ratio_low >= 1 (its own test's setting): the IS weight has no floor. divclip reads it
    as ε_low = low (lower bound max(1 - ε_low, 0) = 0) and computes verl's loss and gradient (issue 31 item 4)."""
    from divclip.engines import from_engine

    old, lp, adv, mask = batch(dtype, seed=5, noise=0.6)
    settings = {
        "actor_rollout_ref.actor.policy_loss.loss_mode": "cispo",
        "actor_rollout_ref.actor.clip_ratio_low": low,
        "actor_rollout_ref.actor.clip_ratio_high": 0.28,
    }
    spec = from_engine("verl", settings)
    assert spec == ClipSpec("ratio", eps_low=low, eps_high=0.28, form="cispo") and spec.ratio_bounds()[0] == 0.0
    loss, grad, m = run_ours(old, lp, adv, mask, spec, "token-mean")
    config = actor_config(clip_ratio_low=low, clip_ratio_high=0.28)
    v_loss, v_grad, vm = run_verl(ca.compute_policy_loss_cispo, old, lp, adv, mask, config, "token-mean")
    assert torch.equal(loss, v_loss) and torch.equal(grad, v_grad)
    assert m["clipfrac_low"] == 0 and m["clipfrac"] > 0.02  # only the cap clips
    assert m["clipfrac"] == pytest.approx(vm["actor/pg_clipfrac"], rel=TOL[dtype], abs=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sapo_is_verl_sapo(ca, dtype):
    """verl's sapo always aggregates with seq-mean-token-mean (it ignores loss_agg_mode); divclip honours the
    argument, so the comparison uses that mode. The value is verl's bit for bit; the gradient, attached in closed
    form (−A·4σ(1 − σ)·r), agrees to rounding."""
    old, lp, adv, mask = batch(dtype, seed=6, noise=0.6)
    agg = "seq-mean-token-mean"
    loss, grad, _ = run_ours(old, lp, adv, mask, preset("sapo"), agg)
    v_loss, v_grad, _ = run_verl(ca.compute_policy_loss_sapo, old, lp, adv, mask, actor_config(), agg)
    assert torch.equal(loss, v_loss) and close(grad, v_grad, dtype) and float(grad.abs().max()) > 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_rollout_is_weights_multiply_like_verl(ca, dtype):
    old, lp, adv, mask = batch(dtype, seed=7, noise=0.5)
    w = torch.rand(old.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(dtype) + 0.5
    spec = ClipSpec("ratio", eps_low=0.2, eps_high=0.2, params={"dual_clip_c": 3.0})
    leaf = lp.clone().requires_grad_()
    loss, _ = policy_loss(leaf, old, adv, mask, spec, rollout_is_weights=w)
    v_leaf = lp.clone().requires_grad_()
    v_loss, _ = ca.compute_policy_loss_vanilla(
        old, v_leaf, adv, mask, "token-mean", actor_config(clip_ratio_c=3.0), rollout_is_weights=w
    )
    loss.backward()
    v_loss.backward()
    assert torch.equal(loss.detach(), v_loss.detach()) and close(leaf.grad, v_leaf.grad, dtype)


@pytest.mark.parametrize("dtype", [*DTYPES, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("agg", LOSS_AGG_MODES)
@pytest.mark.parametrize("mask_kind", ["float", "bool"])
def test_agg_loss_is_verl_agg_loss(ca, dtype, agg, mask_kind):
    """Bit-equal values and the same result dtype (a bf16 loss with a bool mask stays bf16, as in verl)."""
    g = torch.Generator().manual_seed(8)
    loss_mat = torch.randn(9, 17, generator=g, dtype=torch.float64).to(dtype)
    mask = torch.rand(9, 17, generator=g) < 0.6
    mask[2] = False
    mask = mask if mask_kind == "bool" else mask.to(dtype)
    ours, theirs = agg_loss(loss_mat, mask, agg), ca.agg_loss(loss_mat, mask, agg)
    assert ours.dtype == theirs.dtype
    assert torch.equal(ours, theirs)
    if agg == "seq-mean-token-sum-norm":
        assert torch.equal(
            agg_loss(loss_mat, mask, agg, loss_scale_factor=64), ca.agg_loss(loss_mat, mask, agg, loss_scale_factor=64)
        )


def test_agg_loss_ignores_nan_outside_the_mask_like_verl(ca):
    loss_mat = torch.randn(3, 5)
    mask = torch.ones(3, 5)
    mask[1, 2] = 0.0
    loss_mat[1, 2] = float("nan")
    assert torch.equal(agg_loss(loss_mat, mask, "token-mean"), ca.agg_loss(loss_mat, mask, "token-mean"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("estimator", ["k1", "k2", "k3", "kl", "mse", "low_var_kl"])
def test_kl_penalty_is_verl_kl_penalty(ca, dtype, estimator):
    g = torch.Generator().manual_seed(9)
    lp = (torch.randn(6, 30, generator=g, dtype=torch.float64) * 3).to(dtype)
    ref = (torch.randn(6, 30, generator=g, dtype=torch.float64) * 3).to(dtype)
    lp[0, 0], ref[0, 0] = -30.0, 0.0  # exercises verl's ±20 and ±10 clamps
    assert torch.equal(kl_penalty(lp, ref, estimator), ca.kl_penalty(lp, ref, estimator))


def _verl_scores(fn, rewards, group_size, **kw):
    n = rewards.numel()
    token_rewards = torch.zeros(n, 5, dtype=rewards.dtype)
    token_rewards[:, -1] = rewards  # outcome reward on the last token
    index = np.repeat(np.arange(n // group_size), group_size)
    adv, _ = fn(token_rewards, torch.ones(n, 5, dtype=rewards.dtype), index, **kw)
    return adv[:, 0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group_size", [2, 5, 8])
def test_group_advantages_are_verl_grpo_and_rloo(ca, dtype, group_size):
    g = torch.Generator().manual_seed(10)
    rewards = torch.randn(6 * group_size, generator=g, dtype=torch.float64).to(dtype)  # no constant groups
    cases = [
        ("std", ca.compute_grpo_outcome_advantage, {}),
        ("none", ca.compute_grpo_outcome_advantage, {"norm_adv_by_std_in_grpo": False}),
        ("rloo", ca.compute_rloo_outcome_advantage, {}),
    ]
    for norm, fn, kw in cases:
        ours = group_advantages(rewards, group_size, norm)
        theirs = _verl_scores(fn, rewards.clone(), group_size, **kw)
        assert close(ours, theirs, dtype), norm


def test_constant_groups_give_zero_where_verl_gives_rounding_noise(ca):
    rewards = torch.full((16,), 0.1, dtype=torch.float32)  # fl(mean of eight 0.1f) != 0.1f
    theirs = _verl_scores(ca.compute_grpo_outcome_advantage, rewards.clone(), 8)
    assert float(theirs.abs().max()) > 1e-3  # verl: (R - fl(mean)) / (0 + 1e-6)
    assert torch.equal(group_advantages(rewards, 8), torch.zeros(16))


# ------------------------------------------------------------------ gated (DPPO) at extreme log-ratios
def extreme_batch(dtype, seed=11):
    """Tokens whose |log r| reaches 50 both ways (p = e^-30 rising to 0.9, p = 0.9 falling to e^-45, ...), mixed
    with ordinary ones; the new probability stays below 1, where verl's +1e-8 is negligible."""
    g = torch.Generator().manual_seed(seed)
    b, t = 8, 30
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 45.0 - 1e-3
    lp = -torch.rand(b, t, generator=g, dtype=torch.float64) * 45.0 - 1e-3
    old[0, :4] = torch.tensor([-30.0, -0.1053605, -45.0, -25.0], dtype=torch.float64)
    lp[0, :4] = torch.tensor([-0.1053605, -45.0, -0.5, -48.0], dtype=torch.float64)
    adv = torch.randn(b, t, generator=g, dtype=torch.float64)
    adv[0, :4] = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    mask = torch.ones(b, t, dtype=torch.float64)
    return old.to(dtype), lp.to(dtype), adv.to(dtype), mask.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "measure, delta, verl_fn",
    [("binary_kl", 0.05, "compute_policy_loss_dppo_kl"), ("binary_tv", 0.2, "compute_policy_loss_dppo_tv")],
)
def test_gated_decides_on_the_true_log_ratio_like_verl(ca, dtype, measure, delta, verl_fn):
    """|log r| up to 48: D is evaluated on the true ratio (verl never clamps its D), so a token at p = e^-30 that
    rose to 0.9 is masked, not kept with the gradient of a ratio clamped to e^20."""
    old, lp, adv, mask = extreme_batch(dtype)
    assert float((lp - old).abs().max()) > 40
    spec = ClipSpec(measure, delta=delta, form="gated", params={"tis_cap": 20.0})
    config = actor_config(clip_ratio=delta, clip_ratio_low=delta, clip_ratio_high=delta, clip_ratio_c=20.0)
    loss, grad, m = run_ours(old, lp, adv, mask, spec, "token-mean")
    v_loss, v_grad, vm = run_verl(getattr(ca, verl_fn), old, lp, adv, mask, config, "token-mean")
    assert torch.equal(loss, v_loss) and torch.equal(grad, v_grad)
    assert grad[0, 0] == 0 and grad[0, 1] == 0  # the two tokens of the issue: masked by both
    assert m["clipfrac"] > 0.02
    assert m["clipfrac"] == pytest.approx(vm["actor/pg_clipfrac"], rel=TOL[dtype], abs=0)


def test_gated_at_new_probability_one_is_exact_where_verl_adds_1e_8(ca):
    """Deliberate difference: at π_θ(a) = 1 exactly (log π = 0) the binary KL is
    p·log(1/r) + (1-p)·log((1-p)/0) = ∞ for every p < 1, so divclip masks a token pushed there by A > 0. verl
    evaluates (1-p)·log((1-p+1e-8)/(0+1e-8)), finite: at p = 1 - 1e-6 it is ~5.6e-6 < δ and verl keeps the
    token. Everywhere else (new probability below 1, e.g. the tests above) the two agree bit for bit."""
    p_old = 1.0 - 1e-6
    old = torch.tensor([[math.log(p_old), math.log(0.5)]], dtype=torch.float64)
    lp = torch.zeros_like(old)  # new probability exactly 1
    adv = torch.ones_like(old)
    mask = torch.ones_like(old)
    spec = ClipSpec("binary_kl", delta=0.05, form="gated", params={"tis_cap": 20.0})
    config = actor_config(clip_ratio=0.05, clip_ratio_low=0.05, clip_ratio_high=0.05, clip_ratio_c=20.0)
    _, grad, _ = run_ours(old, lp, adv, mask, spec, "token-mean")
    _, v_grad, _ = run_verl(ca.compute_policy_loss_dppo_kl, old, lp, adv, mask, config, "token-mean")
    assert grad[0, 0] == 0 and v_grad[0, 0] != 0  # exact D = ∞ masks; verl's D ≈ 5.6e-6 keeps
    assert grad[0, 1] == 0 and v_grad[0, 1] == 0  # p = 0.5: D is large either way (verl: 9.2)
    from divclip.theory.forms._kernels import _divergence

    d, _ = _divergence(spec, (lp - old).exp(), old, lp)
    assert torch.isinf(d).all()  # from the log-probs, no ratio formed: 1 - q = -expm1(0) = 0 exactly


@pytest.mark.parametrize("dtype", DTYPES)
def test_gated_kl3_decides_on_the_true_ratio(dtype):
    """A p-free measure whose bound lies beyond e^20 (KL3 at δ = 1e9: u_δ ≈ 1e9 > e^20 ≈ 4.9e8): a token at
    r = e^25 is past u_δ and is masked although its clamped ratio e^20 is inside."""
    from divclip.theory import kl3_bounds

    lo, hi = kl3_bounds(1e9)
    assert hi > math.exp(20) and math.exp(25) > hi
    old = torch.tensor([[-30.0, -30.0, -1.0]], dtype=dtype)
    lp = torch.tensor([[-5.0, -12.0, -1.2]], dtype=dtype)  # r = e^25 (past hi), e^18 (inside), e^-0.2
    adv = torch.ones_like(old)
    spec = ClipSpec("kl3", delta=1e9, form="gated")
    _, grad, m = run_ours(old, lp, adv, torch.ones_like(old), spec, "token-sum")
    assert grad[0, 0] == 0 and grad[0, 1] != 0 and grad[0, 2] != 0
    assert m["clipfrac"] == pytest.approx(1 / 3)
