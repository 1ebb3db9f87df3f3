"""The verl plug-in: registration, and loss + gradients equal to verl's own `vanilla` at the derived bounds."""

import importlib
import math
import sys

import pytest
import torch

pytest.importorskip("verl")
from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla, get_policy_loss_fn  # noqa: E402
from verl.workers.config.actor import ActorConfig, PolicyLossConfig  # noqa: E402

import divclip.trainer.integrations.verl as plugin  # noqa: E402
from divclip.theory.measures import MEASURES, get_measure  # noqa: E402

AGG_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "token-sum"]


def actor(loss_mode="vanilla", **kw):
    return ActorConfig(
        strategy="fsdp",
        rollout_n=4,
        ppo_micro_batch_size_per_gpu=4,
        policy_loss=PolicyLossConfig(loss_mode=loss_mode),
        **kw,
    )


def batch(seed=0, B=12, T=16, dtype=torch.float64, spread=0.3):
    g = torch.Generator().manual_seed(seed)
    old = torch.log_softmax(2 * torch.randn(B, T, 16, generator=g, dtype=dtype), -1)[..., 0]  # (B, T)
    new = old + spread * torch.randn(B, T, generator=g, dtype=dtype)  # ratios well outside [0.8, 1.23]
    adv = torch.randn(B, 1, generator=g, dtype=dtype).expand(B, T).clone()
    adv[0] = 0.0
    mask = torch.arange(T)[None] < torch.randint(T // 4, T + 1, (B, 1), generator=g)  # bool, as verl passes it
    return old, new, adv, mask


def run(fn, config, old, new, adv, mask, agg="token-mean", weights=None):
    lp = new.clone().requires_grad_(True)
    loss, metrics = fn(
        old_log_prob=old,
        log_prob=lp,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode=agg,
        config=config,
        rollout_is_weights=weights,
    )
    loss.backward()
    return loss.detach(), lp.grad, metrics


def test_registered_modes_are_divclips():
    assert get_policy_loss_fn("atr_kl3") is plugin.compute_policy_loss_atr_kl3
    assert plugin.LOSS_MODES == ["atr_kl3", "divclip_method", *(f"divclip_{m}" for m in MEASURES)]
    for mode in plugin.LOSS_MODES:
        assert get_policy_loss_fn(mode).__module__ == plugin.__name__


def test_atr_kl3_bounds_are_the_theory_table():
    lo, hi, delta = plugin.atr_kl3_bounds(0.2)
    assert lo == 1 - 0.2 and delta == pytest.approx(0.023144, abs=1e-6) and hi == pytest.approx(1.23084, abs=1e-5)
    assert get_measure("kl3").value(hi) == pytest.approx(delta, rel=1e-12)


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("c", [math.inf, 3.0])  # dual clip off on both sides; on at verl's default on both
def test_atr_kl3_equals_vanilla_at_the_kl3_derived_widths(agg, c):
    old, new, adv, mask = batch(spread=0.8)  # a few ratios above c = 3 for A < 0
    eps_low = 0.2
    _, u, _ = plugin.atr_kl3_bounds(eps_low)
    ours_cfg = actor("atr_kl3", clip_ratio_low=eps_low, clip_ratio_high=0.9, clip_ratio_c=c)  # high is ignored
    vanilla_cfg = actor(clip_ratio_low=eps_low, clip_ratio_high=u - 1.0, clip_ratio_c=c)
    info = {"dp_size": 1, "batch_num_tokens": int(mask.sum()) + 5, "global_batch_size": 20, "loss_scale_factor": 7}
    for cfg in (ours_cfg, vanilla_cfg):
        cfg.global_batch_info.update(info if agg != "token-sum" else {})
    weights = torch.rand(old.shape, generator=torch.Generator().manual_seed(1), dtype=old.dtype) + 0.5
    loss, grad, m = run(get_policy_loss_fn("atr_kl3"), ours_cfg, old, new, adv, mask, agg, weights)
    ref_loss, ref_grad, ref_m = run(compute_policy_loss_vanilla, vanilla_cfg, old, new, adv, mask, agg, weights)
    assert torch.equal(loss, ref_loss)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-13, atol=1e-15)
    assert grad.abs().sum() > 0 and m["actor/pg_clipfrac"] > 0.05
    for key in ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"):
        assert m[key] == pytest.approx(ref_m[key], rel=1e-6, abs=1e-9), key  # verl counts in float32
    assert m["actor/clipfrac_low"] + m["actor/clipfrac_high"] == pytest.approx(m["actor/pg_clipfrac"], abs=1e-12)
    assert (m["actor/pg_clipfrac_lower"] > 0) == (c == 3.0)


def test_atr_kl3_in_float32_matches_vanilla_bit_for_bit():
    old, new, adv, mask = (t.float() if t.is_floating_point() else t for t in batch(seed=2))
    u = plugin.atr_kl3_bounds(0.2)[1]
    loss, grad, _ = run(get_policy_loss_fn("atr_kl3"), actor("atr_kl3", clip_ratio_c=3.0), old, new, adv, mask)
    ref_loss, ref_grad, _ = run(compute_policy_loss_vanilla, actor(clip_ratio_high=u - 1.0), old, new, adv, mask)
    assert torch.equal(loss, ref_loss)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("measure", ["kl3", "log_ratio", "k2", "kl3_reverse", "chi2", "hellinger"])
def test_measure_modes_take_delta_per_side_from_clip_ratio(measure):
    """divclip_<m>: δ_low = clip_ratio_low, δ_high = clip_ratio_high → vanilla at [lo(δ_low), hi(δ_high)]."""
    old, new, adv, mask = batch(seed=3)
    d_low, d_high = 0.02, 0.05
    m = get_measure(measure)
    lo, hi = m.bounds(d_low)[0], m.bounds(d_high)[1]
    cfg = actor(f"divclip_{measure}", clip_ratio_low=d_low, clip_ratio_high=d_high, clip_ratio_c=math.inf)
    ref_cfg = actor(clip_ratio_low=1 - lo, clip_ratio_high=hi - 1, clip_ratio_c=math.inf)
    loss, grad, metrics = run(get_policy_loss_fn(f"divclip_{measure}"), cfg, old, new, adv, mask)
    ref_loss, ref_grad, ref_m = run(compute_policy_loss_vanilla, ref_cfg, old, new, adv, mask)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-14)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(ref_m["actor/pg_clipfrac"])
    assert metrics["actor/pg_clipfrac"] > 0


def test_divclip_ratio_is_vanilla():
    old, new, adv, mask = batch(seed=4)
    cfg = dict(clip_ratio_low=0.2, clip_ratio_high=0.28)
    loss, grad, _ = run(get_policy_loss_fn("divclip_ratio"), actor("divclip_ratio", **cfg), old, new, adv, mask)
    ref_loss, ref_grad, _ = run(compute_policy_loss_vanilla, actor(**cfg), old, new, adv, mask)
    assert torch.equal(loss, ref_loss)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-13, atol=1e-16)  # theory writes the gradient in closed form


@pytest.mark.parametrize("measure", ["binary_kl", "binary_tv"])
def test_p_dependent_modes_use_per_token_bounds_per_side(measure):
    """Reference: vanilla's formula with each token's own [lo(δ_low, p), hi(δ_high, p)] from theory's numpy bounds."""
    old, new, adv, mask = batch(seed=5, spread=0.5)
    d_low, d_high = 0.005, 0.01
    m = get_measure(measure)
    p = old.exp().numpy()
    lo = torch.as_tensor(m.bounds(d_low, p)[0])
    hi = torch.as_tensor(m.bounds(d_high, p)[1])
    cfg = actor(f"divclip_{measure}", clip_ratio_low=d_low, clip_ratio_high=d_high, clip_ratio_c=3.0)
    loss, grad, metrics = run(get_policy_loss_fn(f"divclip_{measure}"), cfg, old, new, adv, mask)

    lp = new.clone().requires_grad_(True)
    ratio = torch.exp(lp - old)
    surrogate = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, lo, hi))
    surrogate = torch.where(adv < 0, torch.minimum(surrogate, -adv * 3.0), surrogate)
    ref = (surrogate * mask).sum() / mask.sum()
    ref.backward()
    torch.testing.assert_close(loss, ref.detach(), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, lp.grad, rtol=1e-9, atol=1e-12)
    assert metrics["actor/clipfrac_low"] > 0 and metrics["actor/clipfrac_high"] > 0


def test_bad_config_values_are_clear_errors():
    old, new, adv, mask = batch()
    with pytest.raises(ValueError, match=r"clip_ratio_low must lie in \(0, 1\) for atr_kl3 .* got 1.5"):
        run(get_policy_loss_fn("atr_kl3"), actor("atr_kl3", clip_ratio_low=1.5), old, new, adv, mask)
    with pytest.raises(ValueError, match=r"clip_ratio_c must be a number > 1"):
        run(get_policy_loss_fn("atr_kl3"), actor("atr_kl3", clip_ratio_c=0.5), old, new, adv, mask)


def test_verl_imports_the_plugin_named_in_the_environment(monkeypatch):
    """The documented switch: verl/__init__.py imports every module in VERL_USE_EXTERNAL_MODULES when `verl` is
    imported. Re-run that real code (importlib.reload) against a registry without divclip's modes."""
    import verl
    from verl.trainer.ppo import core_algos

    import divclip.trainer.integrations as integrations

    fresh = {k: v for k, v in core_algos.POLICY_LOSS_REGISTRY.items() if k not in plugin.LOSS_MODES}
    monkeypatch.setattr(core_algos, "POLICY_LOSS_REGISTRY", fresh)  # restored (with divclip's) after the test
    monkeypatch.setattr(integrations, "verl", plugin)
    monkeypatch.delitem(sys.modules, plugin.__name__)
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "divclip.trainer.integrations.verl")
    with pytest.raises(ValueError, match="Unsupported loss mode: atr_kl3"):
        core_algos.get_policy_loss_fn("atr_kl3")
    importlib.reload(verl)
    assert core_algos.get_policy_loss_fn("atr_kl3").__module__ == "divclip.trainer.integrations.verl"
    assert set(plugin.LOSS_MODES) <= set(fresh)


# ------------------------------------------------------------------------------ divclip_method ($DIVCLIP_METHOD)
def test_divclip_method_runs_an_intersection_as_theory_does(monkeypatch):
    """Through verl's own registry: the loss is divclip's policy_loss of the intersection (verl's token-mean over
    the same mask), the gradient its gradient, and the per-part clip fractions are logged."""
    from divclip.theory.losses import policy_loss

    method = "kl3:0.023144&binary_tv:0.2"
    monkeypatch.setenv("DIVCLIP_METHOD", method)
    old, new, adv, mask = batch(seed=5, spread=0.6)
    likely = old.clone()
    likely[::2] = likely[::2].clamp(min=-0.05)  # likely tokens (p > 0.867), where binary TV's upper bound binds
    old, new = likely, new - old + likely  # the same log-ratios
    with pytest.warns(UserWarning, match="clip_ratio_c are ignored"):
        loss, grad, m = run(get_policy_loss_fn("divclip_method"), actor("divclip_method"), old, new, adv, mask)
    lp = new.clone().requires_grad_(True)
    ref, info = policy_loss(lp, old, adv, mask.to(old.dtype), method, "token-mean")
    ref.backward()
    torch.testing.assert_close(loss, ref.detach(), rtol=1e-12, atol=0)
    torch.testing.assert_close(grad, lp.grad, rtol=1e-12, atol=0)
    for i in (0, 1):
        assert m[f"actor/clipfrac_high_part{i}"] == pytest.approx(info[f"clipfrac_high_part{i}"], rel=1e-8)
        assert info[f"clipfrac_high_part{i}"] > 0
    assert m["actor/pg_clipfrac"] == pytest.approx(info["clipfrac"], rel=1e-8)  # n + 1e-8 denominators


def test_divclip_method_adaptive_delta_is_a_stateful_loss_per_process(monkeypatch):
    from divclip.theory.adaptive import delta_update
    from divclip.theory.spec import parse_method

    method = "kl3:0.02@clipfrac=0.05:gain=0.5"
    monkeypatch.setenv("DIVCLIP_METHOD", method)
    monkeypatch.setattr(plugin, "CONTROLLERS", {})
    fn, cfg = get_policy_loss_fn("divclip_method"), actor("divclip_method")
    spec, delta = parse_method(method), 0.02
    for seed in range(4):  # each call (a micro-batch) steps δ from that call's own clip fraction
        if seed == 0:
            with pytest.warns(UserWarning, match="ignored"):
                run(fn, cfg, *batch(seed=9))
            plugin.CONTROLLERS.clear()
        _, _, m = run(fn, cfg, *batch(seed=seed, spread=0.5))
        assert m["actor/divclip_delta"] == pytest.approx(delta, rel=1e-12)
        delta = float(delta_update(delta, m["actor/pg_clipfrac"], spec))
    assert plugin.CONTROLLERS[method].steps == 4
    assert plugin.CONTROLLERS[method].delta[0] == pytest.approx(delta, rel=1e-12) and delta != 0.02


@pytest.mark.parametrize(
    "value, match",
    [
        (None, r"reads its method string from \$DIVCLIP_METHOD"),
        ("kl3@entropy=1", r"does not hand the policy loss the entropy|does not pass the entropy"),
        ("gspo", r"token-level clip, gated or cispo"),
        ("kl3&dppo_kl", r"\$DIVCLIP_METHOD: method 'kl3&dppo_kl': AllOf.parts\[1\] has form='gated'"),
    ],
)
def test_divclip_method_bad_env_is_a_clear_error(monkeypatch, value, match):
    if value is None:
        monkeypatch.delenv("DIVCLIP_METHOD", raising=False)
    else:
        monkeypatch.setenv("DIVCLIP_METHOD", value)
    with pytest.raises(ValueError, match=match):
        run(get_policy_loss_fn("divclip_method"), actor("divclip_method"), *batch())


# ---------------------------------------------------------------------- δ without verl's 0.2, warnings once
@pytest.fixture
def fresh_warnings(monkeypatch, caplog):
    monkeypatch.setattr(plugin, "_WARNED", set())
    monkeypatch.delenv("DIVCLIP_DELTA", raising=False)
    caplog.set_level("WARNING", logger="divclip.verl")
    return caplog


def _codes(caplog):
    return [r.getMessage().split("]")[0].split("[")[1] for r in caplog.records if r.name == "divclip.verl"]


def test_divclip_delta_env_is_the_budget_and_clip_ratio_is_reported_ignored(fresh_warnings, monkeypatch):
    old, new, adv, mask = batch()
    delta = float(get_measure("kl3").value(0.8))
    monkeypatch.setenv("DIVCLIP_DELTA", repr(delta))
    fn = get_policy_loss_fn("divclip_kl3")
    cfg = actor("divclip_kl3", clip_ratio_c=math.inf)  # clip_ratio_low/high stay verl's 0.2
    ref = actor("divclip_kl3", clip_ratio_low=delta, clip_ratio_high=delta, clip_ratio_c=math.inf)
    monkeypatch.delenv("DIVCLIP_DELTA")
    want, want_grad, _ = run(fn, ref, old, new, adv, mask)
    monkeypatch.setenv("DIVCLIP_DELTA", repr(delta))
    for _ in range(3):  # the loss runs every micro-batch; the warning is logged once
        got, grad, _ = run(fn, cfg, old, new, adv, mask)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(grad, want_grad, rtol=0, atol=0)
    assert _codes(fresh_warnings) == ["ignored_key", "ignored_key"]  # clip_ratio_low and clip_ratio_high, once
    assert "actor.clip_ratio_low = 0.2" in fresh_warnings.records[0].getMessage()


def test_divclip_delta_env_pair_sets_each_side(fresh_warnings, monkeypatch):
    old, new, adv, mask = batch()
    monkeypatch.setenv("DIVCLIP_DELTA", "0.02,0.03")
    cfg = actor("divclip_kl3", clip_ratio_low=0.02, clip_ratio_high=0.03, clip_ratio_c=math.inf)
    low, high = plugin.measure_budgets("kl3", cfg)
    assert (low, high) == (0.02, 0.03) and _codes(fresh_warnings) == []


@pytest.mark.parametrize("text", ["", "abc", "0", "-0.1", "nan", "0.1,0.2,0.3", "inf"])
def test_bad_divclip_delta_is_a_clear_error(fresh_warnings, monkeypatch, text):
    monkeypatch.setenv("DIVCLIP_DELTA", text)
    old, new, adv, mask = batch()
    cfg = actor("divclip_kl3", clip_ratio_low=0.02, clip_ratio_high=0.02)
    if not text:  # empty means unset: the explicit clip_ratio budgets are used
        run(get_policy_loss_fn("divclip_kl3"), cfg, old, new, adv, mask)
        return
    with pytest.raises(ValueError, match=rf"DIVCLIP_DELTA must be a budget δ > 0 .* got '{text}'"):
        run(get_policy_loss_fn("divclip_kl3"), cfg, old, new, adv, mask)


@pytest.mark.parametrize("measure", [m for m in MEASURES if m != "ratio"])
def test_verl_default_budget_is_refused_without_divclip_delta(fresh_warnings, measure):
    old, new, adv, mask = batch()
    with pytest.raises(
        ValueError,
        match=rf"divclip_{measure} would read its {measure} budget δ from "
        r"actor.clip_ratio_low = 0.2, verl's default .* DIVCLIP_DELTA",
    ):
        run(get_policy_loss_fn(f"divclip_{measure}"), actor(f"divclip_{measure}"), old, new, adv, mask)
    with pytest.raises(ValueError, match=r"actor.clip_ratio_high = 0.2"):
        run(
            get_policy_loss_fn(f"divclip_{measure}"),
            actor(f"divclip_{measure}", clip_ratio_low=0.01),
            old,
            new,
            adv,
            mask,
        )


def test_budget_at_ratio_scale_and_explicit_default_warn_once(fresh_warnings, monkeypatch):
    old, new, adv, mask = batch()
    fn = get_policy_loss_fn("divclip_kl3")
    for _ in range(2):
        run(fn, actor("divclip_kl3", clip_ratio_low=0.15, clip_ratio_high=0.15), old, new, adv, mask)
    monkeypatch.setenv("DIVCLIP_DELTA", "0.2")  # given explicitly: allowed, but still flagged
    run(fn, actor("divclip_kl3", clip_ratio_low=0.2, clip_ratio_high=0.2), old, new, adv, mask)
    codes = _codes(fresh_warnings)
    assert codes == ["divergence_budget_ratio_scale", "divergence_budget_verl_default"]
    lo, hi = get_measure("kl3").bounds(0.2)
    assert f"[{lo:.4g}, {hi:.4g}]" in fresh_warnings.records[1].getMessage()  # [0.4932, 1.772]


def test_clip_that_cannot_bind_is_reported(fresh_warnings, monkeypatch):
    old, new, adv, mask = batch()
    monkeypatch.setenv("DIVCLIP_DELTA", "5")  # above chi2's D(0+) = 1: lower bound 0
    run(
        get_policy_loss_fn("divclip_chi2"),
        actor("divclip_chi2", clip_ratio_low=5.0, clip_ratio_high=5.0),
        old,
        new,
        adv,
        mask,
    )
    assert "clip_cannot_bind" in _codes(fresh_warnings)


def test_atr_kl3_warns_once_that_clip_ratio_high_is_ignored(fresh_warnings):
    old, new, adv, mask = batch()
    fn = get_policy_loss_fn("atr_kl3")
    _, hi, _ = plugin.atr_kl3_bounds(0.2)
    run(fn, actor("atr_kl3", clip_ratio_low=0.2, clip_ratio_high=hi - 1.0), old, new, adv, mask)
    assert _codes(fresh_warnings) == []  # the exported setting: nothing ignored
    for _ in range(3):
        run(fn, actor("atr_kl3", clip_ratio_low=0.2, clip_ratio_high=0.28), old, new, adv, mask)
    assert _codes(fresh_warnings) == ["ignored_key"]
    msg = fresh_warnings.records[0].getMessage()
    assert "atr_kl3 ignores actor.clip_ratio_high = 0.28" in msg and "u_δ = 1.230842" in msg


@pytest.mark.parametrize("mode", ["atr_kl3", "divclip_binary_kl", "divclip_kl3"])
def test_plugin_metrics_are_the_full_diagnostics_and_only_what_it_reports(mode, monkeypatch):
    """The plug-in computes only REPORTED_METRICS (no expm1 pass for kl3, no min/max for the ratio); each metric is
    the value the whole diagnostic set gives, bit for bit, and the loss does not depend on the choice."""
    from divclip.theory import loss_metrics

    old, new, adv, mask = batch(seed=4, spread=0.6)
    cfg = actor(mode, clip_ratio_low=0.05 if mode != "atr_kl3" else 0.2, clip_ratio_high=0.08, clip_ratio_c=3.0)
    asked = []
    real = loss_metrics.clip_stats

    def spy(terms, m, extra=(), names=loss_metrics.METRIC_NAMES):
        asked.append(tuple(names))
        return real(terms, m, extra, names)

    monkeypatch.setattr(loss_metrics, "clip_stats", spy)
    loss, grad, m = run(get_policy_loss_fn(mode), cfg, old, new, adv, mask)
    # the spec's terms: the reported names; a two-budget pair's upper spec (divclip_binary_kl at 0.05/0.08): its
    # clip counts only, no second ppo_kl
    counts = tuple(k for k in plugin.REPORTED_METRICS if k != "ppo_kl")
    assert asked == [plugin.REPORTED_METRICS] + ([counts] if mode == "divclip_binary_kl" else [])
    asked.clear()
    monkeypatch.setattr(plugin, "REPORTED_METRICS", loss_metrics.METRIC_NAMES)
    whole_loss, whole_grad, whole = run(get_policy_loss_fn(mode), cfg, old, new, adv, mask)
    assert asked[0] == loss_metrics.METRIC_NAMES
    assert m == whole and m["actor/pg_clipfrac"] > 0.01
    assert torch.equal(loss, whole_loss) and torch.equal(grad, whole_grad)
