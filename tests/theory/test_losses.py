"""divclip.theory.losses: the gradient-equivalence theorem in torch, the spec's validation, metrics, robustness.
References are independent of the code under test: plain autograd through PPO's equation with bounds from
`Measure.bounds` (numpy, float64), numpy formulas for metrics, aggregation, advantages and KL estimators.
Tolerances: float64 1e-12 and float32 1e-6, relative to the largest magnitude compared.
"""

import dataclasses
import inspect
import math
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from divclip.theory import MEASURES, get_measure
from divclip.theory.advantages import group_advantages
from divclip.theory.forms import FORMS
from divclip.theory.loss_metrics import kl_penalty
from divclip.theory.losses import (
    LOSS_AGG_MODES,
    PRESETS,
    ClipSpec,
    agg_loss,
    clip_loss_with_bounds,
    policy_loss,
    preset,
)
from divclip.theory.measures import value_at_zero

TOL = {torch.float32: 1e-6, torch.float64: 1e-12}
P_FREE = sorted(n for n, m in MEASURES.items() if not m.p_dependent and n != "ratio")
P_DEPENDENT = sorted(n for n, m in MEASURES.items() if m.p_dependent)


def batch(seed, dtype=torch.float64, b=6, t=24, noise=0.3):
    g = torch.Generator().manual_seed(seed)
    old = torch.log_softmax(2.0 * torch.randn(b, t, 5, generator=g, dtype=torch.float64), -1)[..., 0]
    lp = old + noise * torch.randn(b, t, generator=g, dtype=torch.float64)
    adv = torch.randn(b, t, generator=g, dtype=torch.float64)
    mask = (torch.rand(b, t, generator=g) < 0.8).to(torch.float64)
    return old.to(dtype), lp.to(dtype), adv.to(dtype), mask.to(dtype)


def close(a, b, tol):
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return float((a - b).abs().max()) <= tol * max(1.0, float(b.abs().max()))


def ours(old, lp, adv, mask, spec, agg="token-mean"):
    leaf = lp.clone().requires_grad_()
    loss, metrics = policy_loss(leaf, old, adv, mask, spec, agg)
    loss.backward()
    return loss.detach(), leaf.grad, metrics


def reference(old, lp, adv, mask, lo, hi, agg="token-mean", dual_clip_c=None):
    """Plain autograd through max(-A·r, -A·clamp(r, lo, hi)) with the given (numpy or scalar) bounds."""
    leaf = lp.clone().requires_grad_()
    ratio = torch.exp(torch.clamp(leaf - old, -20.0, 20.0))
    if isinstance(lo, np.ndarray):
        lo, hi = torch.as_tensor(lo, dtype=lp.dtype), torch.as_tensor(hi, dtype=lp.dtype)
    sur = clip_loss_with_bounds(ratio, adv, lo, hi, dual_clip_c)
    loss = agg_loss(sur.loss, mask, agg)
    loss.backward()
    return loss.detach(), leaf.grad, sur


seeds = st.integers(0, 2**31 - 1)
noises = st.sampled_from([0.02, 0.1, 0.3, 1.0])


# ------------------------------------------------------------------------------------ the theorem
@settings(max_examples=25)
@given(seed=seeds, delta=st.floats(1e-3, 0.5), noise=noises, agg=st.sampled_from(LOSS_AGG_MODES))
def test_kl3_clip_is_ratio_clip_at_l_and_u(seed, delta, noise, agg):
    for dtype in (torch.float64, torch.float32):
        old, lp, adv, mask = batch(seed, dtype, noise=noise)
        spec = ClipSpec("kl3", delta=delta)
        lo, hi = get_measure("kl3").bounds(delta)
        ratio_spec = ClipSpec("ratio", eps_low=1.0 - lo, eps_high=hi - 1.0)
        loss, grad, m = ours(old, lp, adv, mask, spec, agg)
        loss_r, grad_r, m_r = ours(old, lp, adv, mask, ratio_spec, agg)
        assert close(loss, loss_r, TOL[dtype]) and close(grad, grad_r, TOL[dtype])
        # ... and the gated (DPPO) form with the same bounds has the same gradient.
        _, grad_g, m_g = ours(old, lp, adv, mask, dataclasses.replace(spec, form="gated"), agg)
        assert close(grad_g, grad, TOL[dtype])
        assert m["clipfrac"] == m_g["clipfrac"]


@pytest.mark.parametrize("name", P_FREE)
@settings(max_examples=15)
@given(seed=seeds, delta=st.floats(1e-3, 2.0), noise=noises, dual=st.sampled_from([None, 2.0]))
def test_every_p_free_measure_is_ratio_clipping_at_its_bounds(name, seed, delta, noise, dual):
    old, lp, adv, mask = batch(seed, noise=noise)
    lo, hi = get_measure(name).bounds(delta)
    spec = ClipSpec(name, delta=delta, params={"dual_clip_c": dual})
    loss, grad, m = ours(old, lp, adv, mask, spec)
    ref_loss, ref_grad, sur = reference(old, lp, adv, mask, lo, hi, dual_clip_c=dual)
    assert close(loss, ref_loss, 1e-12) and close(grad, ref_grad, 1e-12)
    clipfrac = float((sur.clipped * mask).sum() / mask.sum())
    assert m["clipfrac"] == pytest.approx(clipfrac, rel=1e-9)  # verl-style means: Σ / (n + 1e-8)
    if dual is None:
        _, grad_g, _ = ours(old, lp, adv, mask, dataclasses.replace(spec, form="gated"))
        assert close(grad_g, grad, 1e-12)


@pytest.mark.parametrize("name", P_DEPENDENT)
@settings(max_examples=15)
@given(seed=seeds, delta=st.floats(1e-3, 0.3), noise=noises)
def test_p_dependent_measures_clip_with_exact_per_token_bounds(name, seed, delta, noise):
    """Divclip solves bounds only for clipped tokens; the reference clamps every token to numpy bounds."""
    old, lp, adv, mask = batch(seed, noise=noise)
    p = np.exp(old.numpy())
    lo, hi = get_measure(name).bounds(delta, p)
    spec = ClipSpec(name, delta=delta)
    loss, grad, m = ours(old, lp, adv, mask, spec)
    ref_loss, ref_grad, sur = reference(old, lp, adv, mask, lo, hi)
    assert close(loss, ref_loss, 1e-12) and close(grad, ref_grad, 1e-12)
    assert m["clipfrac"] == pytest.approx(float((sur.clipped * mask).sum() / mask.sum()), rel=1e-9)
    _, grad_g, m_g = ours(old, lp, adv, mask, dataclasses.replace(spec, form="gated"))
    assert close(grad_g, grad, 1e-12)
    assert m_g["clipfrac"] == pytest.approx(m["clipfrac"], abs=1e-12)


def test_theorem_tests_see_clipping_on_both_sides():
    """Guard against a vacuous theorem test: the inputs above do clip, above and below."""
    old, lp, adv, mask = batch(0, noise=0.3)
    for name in P_FREE + P_DEPENDENT:
        _, _, m = ours(old, lp, adv, mask, ClipSpec(name, delta=0.02))
        assert m["clipfrac_low"] > 0 and m["clipfrac_high"] > 0, name


@pytest.mark.parametrize("name", P_DEPENDENT)
def test_p_dependent_float32_matches_float64_reference(name):
    old, lp, adv, mask = batch(11, torch.float32, noise=0.3)
    p = np.exp(old.double().numpy())
    lo, hi = get_measure(name).bounds(0.05, p)
    loss, grad, _ = ours(old, lp, adv, mask, ClipSpec(name, delta=0.05))
    ref_loss, ref_grad, _ = reference(old.double(), lp.double(), adv.double(), mask.double(), lo, hi)
    assert close(loss, ref_loss, 1e-6) and close(grad, ref_grad, 1e-6)


def test_gradient_rule_matches_autograd_with_dual_clip_and_saturated_log_ratios():
    """The clip mode attaches -A·r·keep in closed form; autograd through the equation agrees, including
    tokens past verl's ±20 log-ratio clamp (their gradient is 0)."""
    old, lp, adv, mask = batch(12, noise=1.0)
    lp[0, :6] = old[0, :6] + torch.tensor([30.0, -30.0, 25.0, -25.0, 30.0, -30.0])
    adv[0, :6] = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0, 1.0])
    for dual in (None, 3.0):
        spec = ClipSpec("ratio", eps_low=0.2, eps_high=0.28, params={"dual_clip_c": dual})
        loss, grad, _ = ours(old, lp, adv, mask, spec)
        ref_loss, ref_grad, _ = reference(old, lp, adv, mask, 0.8, 1.28, dual_clip_c=dual)
        assert torch.equal(loss, ref_loss) and close(grad, ref_grad, 1e-15)
        assert torch.all(grad[0, :6] == 0)


def test_sapo_and_cispo_gradients_match_their_formulas():
    old, lp, adv, mask = batch(13, noise=0.5)
    n = mask.sum()
    r = torch.exp(lp - old)
    _, grad, _ = ours(old, lp, adv, mask, preset("sapo"))
    tau = torch.where(adv > 0, torch.ones_like(adv), torch.full_like(adv, 1.05))
    sig = torch.sigmoid(tau * (r - 1))
    assert close(grad, -adv * 4 * sig * (1 - sig) * r * mask / n, 1e-12)
    _, grad, _ = ours(old, lp, adv, mask, ClipSpec("ratio", eps_low=0.2, eps_high=0.28, form="cispo"))
    assert close(grad, -r.clamp(0.8, 1.28) * adv * mask / n, 1e-12)


# --------------------------------------------------------------------------------------- metrics
def test_metrics_against_numpy():
    old, lp, adv, mask = batch(14, noise=0.4)
    spec = ClipSpec("ratio", eps_low=0.2, eps_high=0.28, params={"dual_clip_c": 1.5})
    _, _, m = ours(old, lp, adv, mask, spec)
    x, a, k = (lp - old).numpy(), adv.numpy(), mask.numpy().astype(bool)
    r = np.exp(x)
    high, low = (a > 0) & (r > 1.28), (a < 0) & (r < 0.8)
    dual = (a < 0) & (-a * r > -a * 1.5)
    expect = {
        "clipfrac": (high | low)[k].mean(),
        "clipfrac_low": low[k].mean(),
        "clipfrac_high": high[k].mean(),
        "dual_clipfrac": dual[k].mean(),
        "ppo_kl": (-x)[k].mean(),
        "kl3": (r - 1 - x)[k].mean(),
        "ratio_mean": r[k].mean(),
        "ratio_min": r[k].min(),
        "ratio_max": r[k].max(),
    }
    assert set(m) == set(expect)
    for key, v in expect.items():
        assert m[key] == pytest.approx(v, rel=1e-9, abs=1e-12), key
        assert isinstance(m[key], float)
    assert min(expect["clipfrac_low"], expect["clipfrac_high"], expect["dual_clipfrac"]) > 0
    assert m["clipfrac"] == pytest.approx(m["clipfrac_low"] + m["clipfrac_high"])


@pytest.mark.parametrize(
    "spec", ["grpo", "atr", "dppo_kl", "gspo", "sapo", ClipSpec("ratio", eps_low=0.2, eps_high=0.2, form="cispo")]
)
def test_metrics_off_gives_the_same_loss_and_gradient(spec):
    """metrics=False only skips the diagnostics: loss and gradient are bit for bit those of metrics=True."""
    old, lp, adv, mask = batch(16, noise=0.5)
    runs = []
    for metrics in (True, False):
        leaf = lp.clone().requires_grad_()
        loss, info = policy_loss(leaf, old, adv, mask, spec, metrics=metrics)
        loss.backward()
        runs.append((loss.detach(), leaf.grad, info))
    (loss_on, grad_on, info_on), (loss_off, grad_off, info_off) = runs
    assert torch.equal(loss_on, loss_off) and torch.equal(grad_on, grad_off)
    assert info_off == {} and "clipfrac" in info_on
    assert float(grad_on.abs().max()) > 0


def test_kl3_metric_is_nonnegative_for_tiny_drifts():
    old, lp, adv, mask = batch(15, torch.float32, noise=1e-4)
    _, _, m = ours(old, lp, adv, mask, "atr")
    expect = float(((lp.double() - old.double()) ** 2 / 2 * mask).sum() / mask.sum())
    assert m["kl3"] >= 0 and m["kl3"] == pytest.approx(expect, rel=0.05)


# ------------------------------------------------------------------------------------ aggregation
def test_agg_loss_modes_against_numpy():
    g = np.random.default_rng(0)
    lm, mk = g.normal(size=(7, 11)), (g.random((7, 11)) < 0.6).astype(float)
    mk[3] = 0
    rows = mk.sum(1) > 0
    expect = {
        "token-mean": (lm * mk).sum() / mk.sum(),
        "token-sum": (lm * mk).sum(),
        "seq-mean-token-mean": ((lm * mk).sum(1)[rows] / mk.sum(1)[rows]).mean(),
        "seq-mean-token-sum": (lm * mk).sum(1)[rows].mean(),
        "seq-mean-token-sum-norm": (lm * mk).sum(1)[rows].mean() / 11,
    }
    for mode, v in expect.items():
        rel = 1e-8 if mode == "seq-mean-token-mean" else 1e-12  # verl divides by (tokens + 1e-8) there
        assert float(agg_loss(torch.tensor(lm), torch.tensor(mk), mode)) == pytest.approx(v, rel=rel)
    got = agg_loss(torch.tensor(lm), torch.tensor(mk), "seq-mean-token-sum-norm", loss_scale_factor=4)
    assert float(got) == pytest.approx(expect["seq-mean-token-sum"] / 4, rel=1e-12)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_empty_mask_gives_zero_loss_and_finite_metrics(mode):
    old, lp, adv, mask = batch(16)
    assert float(agg_loss(torch.randn(3, 4), torch.zeros(3, 4), mode)) == 0.0
    for name, spec in PRESETS.items():
        loss, grad, m = ours(old, lp, adv, torch.zeros_like(mask), spec, mode)
        assert float(loss) == 0.0 and torch.all(grad == 0), name
        assert all(math.isfinite(v) for v in m.values()), name


# ------------------------------------------------------------------------------------- robustness
@pytest.mark.parametrize("spec_name", sorted(PRESETS))
def test_huge_log_ratios_give_finite_loss_and_gradients(spec_name):
    old, lp, adv, mask = batch(17)
    lp = old + torch.where(torch.rand(old.shape) < 0.5, 1e4, -1e4).to(old.dtype)
    for dtype in (torch.float64, torch.float32):
        loss, grad, m = ours(old.to(dtype), lp.to(dtype), adv.to(dtype), mask.to(dtype), spec_name)
        assert torch.isfinite(loss) and torch.all(torch.isfinite(grad)), spec_name
        assert all(math.isfinite(v) for v in m.values()), spec_name


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("spec_name", ["atr", "dppo_kl", "gspo", "sapo"])
def test_half_precision_inputs_are_computed_in_float32(dtype, spec_name):
    old, lp, adv, mask = batch(18, dtype)
    leaf = lp.clone().requires_grad_()
    loss, _ = policy_loss(leaf, old, adv, mask, spec_name)
    loss.backward()
    assert loss.dtype == torch.float32 and leaf.grad.dtype == dtype
    ref, _ = policy_loss(lp.float(), old.float(), adv.float(), mask.float(), spec_name)
    assert torch.equal(loss.detach(), ref)


@pytest.mark.parametrize("which", ["log_prob", "old_log_prob", "advantages", "rollout_is_weights"])
def test_nan_input_raises_naming_it_even_under_the_mask(which):
    old, lp, adv, mask = batch(19)
    inputs = {"log_prob": lp, "old_log_prob": old, "advantages": adv, "rollout_is_weights": torch.ones_like(lp)}
    mask[2, 3] = 0.0
    inputs[which][2, 3] = float("nan")
    for spec in ("atr", "dppo_kl", "sapo"):
        with pytest.raises(ValueError, match=which):
            policy_loss(
                inputs["log_prob"],
                inputs["old_log_prob"],
                inputs["advantages"],
                mask,
                spec,
                rollout_is_weights=inputs["rollout_is_weights"],
            )


def test_infinite_advantages_raise():
    old, lp, adv, mask = batch(20)
    adv[0, 0] = math.inf
    with pytest.raises(ValueError, match="advantages contains ±inf"):
        policy_loss(lp, old, adv, mask, "grpo")


def test_bad_shapes_types_and_modes_raise():
    old, lp, adv, mask = batch(21)
    with pytest.raises(ValueError, match=r"advantages has shape \(6, 23\) but log_prob has shape \(6, 24\)"):
        policy_loss(lp, old, adv[:, :-1], mask, "grpo")
    with pytest.raises(ValueError, match="log_prob must have shape"):
        policy_loss(lp[0], old[0], adv[0], mask[0], "grpo")
    with pytest.raises(ValueError, match="old_log_prob must be a torch.Tensor"):
        policy_loss(lp, old.numpy(), adv, mask, "grpo")
    with pytest.raises(ValueError, match="loss_agg_mode must be one of"):
        policy_loss(lp, old, adv, mask, "grpo", "mean")
    with pytest.raises(ValueError, match=r"unknown method 'ppo2': .* allowed: a preset \['atr'"):
        policy_loss(lp, old, adv, mask, "ppo2")
    with pytest.raises(ValueError, match="spec must be a ClipSpec"):
        policy_loss(lp, old, adv, mask, 0.2)
    with pytest.raises(ValueError, match="metrics must be True or False, got 'no'"):
        policy_loss(lp, old, adv, mask, "grpo", metrics="no")
    with pytest.raises(ValueError, match="loss_scale_factor"):
        agg_loss(lp, mask, "seq-mean-token-sum-norm", loss_scale_factor=0)


# ----------------------------------------------------------------------------------------- ClipSpec
@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(measure="kl4", delta=0.1), r"ClipSpec.measure must be one of .* got 'kl4'"),
        (dict(measure="kl3", delta=0.0), r"ClipSpec.delta must be a finite number > 0, got 0.0"),
        (dict(measure="kl3", delta=-1), r"ClipSpec.delta must be a finite number > 0, got -1"),
        (dict(measure="kl3", delta=math.nan), r"ClipSpec.delta must be a finite number > 0, got nan"),
        (dict(measure="kl3"), r"measure 'kl3' needs a budget delta > 0, got delta=None"),
        (dict(measure="kl3", delta=0.1, eps_high=0.2), r"eps_low/eps_high are clip widths for measure 'ratio'"),
        (dict(measure="ratio", delta=0.2), r"measure 'ratio' takes clip widths eps_low and eps_high"),
        (dict(measure="ratio", eps_low=0.2), r"needs both eps_low and eps_high, got eps_low=0.2, eps_high=None"),
        (dict(measure="ratio", eps_low=-0.1, eps_high=0.2), r"ClipSpec.eps_low must be a finite number >= 0, got -0.1"),
        (dict(measure="ratio", eps_low=0.2, eps_high=True), r"ClipSpec.eps_high must be .*, got True"),
        (dict(measure="kl3", delta=0.1, form="ppo"), r"ClipSpec.form must be one of .* got 'ppo'"),
        (dict(measure="kl3", delta=0.1, level="token-level"), r"ClipSpec.level must be one of"),
        (
            dict(measure="kl3", delta=0.1, params={"dual_clip_c": 1.0}),
            r"ClipSpec.dual_clip_c must be a finite number > 1",
        ),
        (
            dict(measure="kl3", delta=0.1, form="gated", params={"dual_clip_c": 3.0}),
            r"dual_clip_c applies to form='clip'",
        ),
        (dict(measure="kl3", delta=0.1, params={"tis_cap": 3.0}), r"tis_cap applies to form='gated' only"),
        (dict(measure="kl3", delta=0.1, form="gated", params={"tis_cap": -1.0}), r"ClipSpec.tis_cap must be"),
        (dict(measure="kl3", delta=0.1, params={"tau_pos": 2.0}), r"tau_pos/tau_neg apply to form='sapo' only"),
        (
            dict(form="sapo", params={"tau_neg": 0.0}),
            r"ClipSpec.tau_neg must be a finite number > 0 and <= 1e\+06, got 0.0",
        ),
        (dict(form="sapo", delta=0.1), r"form='sapo' takes no clip budget"),
        (dict(measure="binary_kl", delta=0.1, level="sequence"), r"level='sequence' needs a p-independent"),
        (dict(measure="kl3", delta=0.1, level="sequence", form="gated"), r"level='sequence' \(GSPO\) needs"),
    ],
)
def test_clip_spec_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ClipSpec(**kwargs)


def test_clip_spec_is_frozen_hashable_and_documented():
    spec = ClipSpec("kl3", delta=0.02)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.delta = 0.1
    assert hash(spec) == hash(ClipSpec("kl3", delta=0.02))
    assert spec.ratio_bounds() == get_measure("kl3").bounds(0.02)
    with pytest.raises(ValueError, match="its bounds are per token"):
        ClipSpec("binary_kl", delta=0.05).ratio_bounds()
    source = inspect.getsource(sys.modules[ClipSpec.__module__])
    for f in dataclasses.fields(ClipSpec):  # every field carries a one-line doc string
        assert f"{f.name}: " in source and source.split(f"    {f.name}: ")[1].split("\n")[1].strip().startswith('"""')


def test_presets():
    assert sorted(PRESETS) == ["atr", "dapo", "dppo_kl", "dppo_tv", "grpo", "gspo", "sapo"]
    atr = preset("atr")
    assert atr.delta == pytest.approx(0.023143551314209755, rel=1e-14)
    lo, hi = atr.ratio_bounds()
    assert lo == pytest.approx(0.8, rel=1e-14) and hi == pytest.approx(1.23084, abs=1e-5)
    assert preset("grpo").ratio_bounds() == (0.8, 1.2) and preset("dapo").ratio_bounds() == (0.8, 1.28)
    assert preset("dppo_kl") == ClipSpec("binary_kl", delta=0.05, form="gated", params={"tis_cap": 20.0})
    assert preset("gspo").level == "sequence" and preset("gspo").ratio_bounds() == (1 - 3e-4, 1 + 4e-4)
    with pytest.raises(TypeError):
        PRESETS["mine"] = atr
    with pytest.raises(ValueError, match=r"preset name must be one of \['atr'"):
        preset("ppo")
    assert {"clip", "gated", "cispo", "sapo"} <= set(FORMS)  # the forms package declares more


def test_measures_with_lower_bound_zero_still_clip_above():
    old, lp, adv, mask = batch(22, noise=1.0)
    assert value_at_zero(get_measure("chi2")) <= 1.5  # δ = 1.5 puts lo at 0
    spec = ClipSpec("chi2", delta=1.5)
    assert spec.ratio_bounds()[0] == 0.0
    _, _, m = ours(old, lp, adv, mask, spec)
    assert m["clipfrac_low"] == 0.0 and m["clipfrac_high"] > 0


# ------------------------------------------------------------------------------------ KL estimators
def test_kl_penalty_estimators():
    lp, ref = torch.tensor([-1.0, -2.0, -0.5, -40.0]), torch.tensor([-1.5, -1.0, -0.5, -10.0])
    d = (lp - ref).numpy()
    assert torch.allclose(kl_penalty(lp, ref, "k1"), torch.tensor(d))
    assert torch.allclose(kl_penalty(lp, ref, "k2"), torch.tensor(0.5 * d**2))
    k3 = np.clip(np.exp(np.clip(-d, -20, 20)) - np.clip(-d, -20, 20) - 1, -10, 10)
    assert torch.allclose(kl_penalty(lp, ref, "k3"), torch.tensor(k3, dtype=torch.float32))
    assert float(kl_penalty(lp, ref, "k3")[-1]) == 10.0 and torch.all(kl_penalty(lp, ref, "k3") >= 0)
    for alias, name in (("kl", "k1"), ("mse", "k2"), ("low_var_kl", "k3")):
        assert torch.equal(kl_penalty(lp, ref, alias), kl_penalty(lp, ref, name))
    with pytest.raises(ValueError, match="estimator must be one of"):
        kl_penalty(lp, ref, "k4")
    with pytest.raises(ValueError, match="ref_log_prob has shape"):
        kl_penalty(lp, ref[:2])


# ------------------------------------------------------------------------------------- advantages
@settings(max_examples=30)
@given(seed=seeds, group_size=st.integers(2, 9), groups=st.integers(1, 5))
def test_group_advantages_against_numpy(seed, group_size, groups):
    rng = np.random.default_rng(seed)
    r = rng.integers(0, 3, size=(groups, group_size)).astype(float)  # small integers: constant groups happen
    flat = torch.tensor(r.reshape(-1))
    mean, std = r.mean(1, keepdims=True), r.std(1, ddof=1, keepdims=True)
    loo = (r.sum(1, keepdims=True) - r) / (group_size - 1)
    constant = (r == r[:, :1]).all(1, keepdims=True)
    for norm, expect in (("std", (r - mean) / (std + 1e-6)), ("none", r - mean), ("rloo", r - loo)):
        expect = np.where(constant, 0.0, expect).reshape(-1)
        got = group_advantages(flat, group_size, norm).numpy()
        assert np.allclose(got, expect, rtol=1e-12, atol=1e-12), norm
        assert np.all(got[np.repeat(constant.reshape(-1), group_size)] == 0.0)


def test_group_advantages_edge_cases_and_errors():
    assert torch.equal(group_advantages(torch.tensor([0.1] * 8), 8), torch.zeros(8))
    assert torch.allclose(group_advantages(torch.tensor([1.0, 0.0]), 1), torch.tensor([1 / (1 + 1e-6), 0.0]))
    assert group_advantages([1, 0, 0, 1], 2).dtype == torch.get_default_dtype()
    with pytest.raises(ValueError, match="not a multiple of group_size=4"):
        group_advantages(torch.ones(6), 4)
    with pytest.raises(ValueError, match="norm must be one of"):
        group_advantages(torch.ones(4), 2, "zscore")
    with pytest.raises(ValueError, match="group_size must be an integer >= 1, got 0"):
        group_advantages(torch.ones(4), 0)
    with pytest.raises(ValueError, match="rewards contains NaN"):
        group_advantages(torch.tensor([1.0, math.nan]), 2)
    with pytest.raises(ValueError, match=r"rewards must have shape \(N,\)"):
        group_advantages(torch.ones(2, 2), 2)


def test_non_contiguous_inputs_match_contiguous_ones():
    old, lp, adv, mask = batch(23, noise=0.5)

    def t(x):  # same values, column-major strides
        return x.t().contiguous().t()

    for spec in ("atr", "dppo_kl", "gspo", ClipSpec("binary_kl", delta=0.05)):
        loss, grad, m = ours(old, lp, adv, mask, spec)
        loss_t, grad_t, m_t = ours(t(old), t(lp), t(adv), t(mask), spec)
        assert torch.equal(loss, loss_t) and torch.equal(grad, grad_t) and m == m_t


def test_custom_measures_from_formulas():
    from divclip.theory.formula import measure_from_formula

    old, lp, adv, mask = batch(24, noise=0.5)
    custom = ClipSpec(measure_from_formula("r - 1 - log(r)", name="my_kl3"), delta=0.05)
    loss, grad, _ = ours(old, lp, adv, mask, custom)
    loss_k, grad_k, _ = ours(old, lp, adv, mask, ClipSpec("kl3", delta=0.05))
    assert close(loss, loss_k, 1e-10) and close(grad, grad_k, 1e-10)
    with pytest.raises(ValueError, match="p-dependent without a torch bound solver"):
        ClipSpec(measure_from_formula("p*(r - 1)**2", name="my_tv2"), delta=0.05)


def test_sequence_level_with_one_token_per_sequence():
    """T = 1 (a bandit's single action): the sequence ratio is the token ratio, and the (B, 1) expand is no
    stride-0 view; the sequence-level clip must still see it as one value per row (it crashed with None)."""
    lp = torch.log(torch.tensor([[0.5], [0.2], [0.9]], dtype=torch.float64)).requires_grad_()
    old = torch.log(torch.tensor([[0.4], [0.3], [0.9]], dtype=torch.float64))
    adv = torch.tensor([[1.0], [-1.0], [0.5]], dtype=torch.float64)
    mask = torch.ones_like(old)
    seq, _ = policy_loss(lp, old, adv, mask, "ratio:0.2:0.2/seq")
    tok, _ = policy_loss(lp, old, adv, mask, "ratio:0.2:0.2")
    assert torch.equal(seq, tok)
    (g_seq,) = torch.autograd.grad(seq, lp)
    (g_tok,) = torch.autograd.grad(policy_loss(lp, old, adv, mask, "ratio:0.2:0.2")[0], lp)
    assert torch.allclose(g_seq, g_tok, rtol=1e-12, atol=0)
