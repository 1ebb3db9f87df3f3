"""SkyRL 0.3.0: keys and defaults from the installed package, each registry loss against divclip's policy_loss
(loss and gradient, in process on CPU), the divclip plug-in through SkyRL's own dispatch, reads and writes."""

import dataclasses
import math
import typing
from pathlib import Path

import pytest
import torch
from skyrl_helpers import load

from divclip.engines import skyrl
from divclip.engines.base import as_ratio_clip
from divclip.theory.losses import policy_loss
from divclip.theory.spec import ClipSpec, method_string, parse_method

ppo_utils, AlgorithmConfig = load()
from divclip.trainer.integrations import skyrl as plugin  # noqa: E402  (after SkyRL's loss modules are loaded)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "engines" / "skyrl"


# ------------------------------------------------------------------------------------ keys and defaults
def _leaves(cls, prefix=""):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        inner = [a for a in (typing.get_args(hints[f.name]) or (hints[f.name],)) if dataclasses.is_dataclass(a)]
        if inner:
            yield from _leaves(inner[0], f"{prefix}{f.name}.")
        else:
            yield prefix + f.name


def test_known_keys_snapshot_is_the_installed_config():
    from skyrl.train.config import SkyRLTrainConfig

    assert set(_leaves(SkyRLTrainConfig)) == set(skyrl.known_keys())


def test_keys_and_defaults_are_the_installed_packages():
    from skyrl.train.config import SkyRLTrainConfig

    cfg = SkyRLTrainConfig()
    for key, k in skyrl.KEYS.items():
        node = cfg
        for part in key.split("."):
            node = getattr(node, part)
        assert node == k.default, key
        assert key in skyrl.known_keys()
    registry = set(ppo_utils.PolicyLossRegistry.list_available()) - {plugin.LOSS_NAME}
    assert registry == set(skyrl.LOSS_TYPES) - {skyrl.METHOD_MODE}
    assert set(skyrl.REDUCTIONS) == {
        "token_mean",
        "token_mean_legacy",
        "sequence_mean",
        "seq_mean_token_sum_norm",
        "prompt_mean",
    }


# ------------------------------------------------------------------------------- parity with SkyRL's losses
def _batch(seed, scale=0.5, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    old = torch.log(torch.rand(6, 9, generator=g, dtype=torch.float64) * 0.9 + 0.05).to(dtype)  # p in (0.05, 0.95)
    lp = (old + scale * torch.randn(6, 9, generator=g, dtype=torch.float64).to(dtype)).clamp(max=-1e-3)
    adv = torch.randn(6, 9, generator=g, dtype=torch.float64).to(dtype)
    adv[0, :3] = 0.0
    mask = (torch.rand(6, 9, generator=g) > 0.2).to(dtype)
    mask[-1] = 0.0  # an empty sequence
    old[1, 0], lp[1, 0], adv[1, 0], mask[1, 0] = math.log(0.1), math.log(0.5), -1.0, 1.0  # r = 5 > c for A < 0
    return lp, old, adv, mask


def _grad(fn, lp):
    leaf = lp.detach().clone().requires_grad_(True)
    out = fn(leaf)
    out.backward()
    return out.detach(), leaf.grad


CASES = [  # (SkyRL config, divclip spec, log-ratio scale, compare loss values)
    (dict(policy_loss_type="regular", eps_clip_low=0.2, eps_clip_high=0.28), "dapo/exp_dtype=float32", 0.5, True),
    (
        dict(policy_loss_type="dual_clip", eps_clip_low=0.2, eps_clip_high=0.2, clip_ratio_c=3.0),
        "grpo/dual=3/exp_dtype=float32",
        1.5,
        True,
    ),
    (dict(policy_loss_type="gspo", eps_clip_low=3e-4, eps_clip_high=4e-4), "gspo", 1e-3, True),
    (
        dict(policy_loss_type="cispo", cispo={"cispo_eps_clip_low": 0.5, "cispo_eps_clip_high": 1.0}),
        "ratio:0.5:1.0/cispo/exp_dtype=float32",
        0.8,
        True,
    ),
    # SkyRL's cispo defaults: cispo_eps_clip_low = 0 floors the IS weight at 1 (refused before: ε_low = 0)
    (dict(policy_loss_type="cispo"), "ratio:0:5/cispo/exp_dtype=float32", 0.8, True),
    (dict(policy_loss_type="sapo", sapo={"tau_pos": 1.0, "tau_neg": 1.05}), "sapo", 0.8, True),
    # dppo's value is -r·A·mask: the gated form's surrogate 'ratio' (value and gradient), its mask verl's arithmetic
    (
        dict(policy_loss_type="dppo", dppo={"dppo_type": "binary_tv", "delta_low": 0.2, "delta_high": 0.2}),
        "binary_tv:0.2/gated/gate=verl/surrogate=ratio/exp_dtype=float32",
        0.8,
        True,
    ),
    (
        dict(policy_loss_type="dppo", dppo={"dppo_type": "binary_kl", "delta_low": 0.05, "delta_high": 0.05}),
        "binary_kl:0.05/gated/gate=verl/surrogate=ratio/exp_dtype=float32",
        0.8,
        True,
    ),
    # δ_low != δ_high: the gated form's delta_high (issue 31 item 4)
    (
        dict(policy_loss_type="dppo", dppo={"dppo_type": "binary_tv", "delta_low": 0.1, "delta_high": 0.3}),
        "binary_tv:0.1/gated/delta_high=0.3/gate=verl/surrogate=ratio/exp_dtype=float32",
        0.8,
        True,
    ),
    (
        dict(policy_loss_type="dppo", dppo={"dppo_type": "binary_kl", "delta_low": 0.01, "delta_high": 0.05}),
        "binary_kl:0.01/gated/delta_high=0.05/gate=verl/surrogate=ratio/exp_dtype=float32",
        0.8,
        True,
    ),
]


def _config(kw):
    from omegaconf import OmegaConf

    return AlgorithmConfig.from_dict_config(OmegaConf.create(kw))


@pytest.mark.parametrize("kw,method,scale,values", CASES, ids=[c[1] for c in CASES])
@pytest.mark.parametrize("seed", [0, 1])
def test_registry_loss_equals_divclip_policy_loss(kw, method, scale, values, seed):
    lp, old, adv, mask = _batch(seed, scale)
    fn = ppo_utils.PolicyLossRegistry.get(kw["policy_loss_type"])
    cfg = _config(kw)
    ours, g_ours = _grad(lambda x: policy_loss(x, old, adv, mask, method, "token-sum", metrics=False)[0], lp)
    theirs, g_theirs = _grad(lambda x: fn(x, old, adv, config=cfg, loss_mask=mask)[0], lp)
    assert torch.count_nonzero(g_ours) > 10  # the batch exercises the loss, not a constant
    if values:
        torch.testing.assert_close(ours.to(theirs.dtype), theirs, rtol=2e-6, atol=1e-6)
    torch.testing.assert_close(g_ours.to(g_theirs.dtype), g_theirs, rtol=2e-6, atol=1e-6)
    assert skyrl.read(_flat(kw)).spec == parse_method(method)  # and divclip reads SkyRL's settings as that method


def _flat(kw, prefix="trainer.algorithm."):
    out = {}
    for k, v in kw.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v})
    return out


def test_regular_clips_where_divclip_says_and_dual_clip_caps():
    """The parity above is not vacuous: the batch has tokens clipped on each side and capped by the dual clip."""
    lp, old, adv, mask = _batch(1, 1.5)
    _, m = policy_loss(lp, old, adv, mask, "grpo/dual=3", "token-sum")
    assert m["clipfrac_low"] > 0 and m["clipfrac_high"] > 0 and m["dual_clipfrac"] > 0


# --------------------------------------------------------------------------------------- the plug-in
@pytest.mark.parametrize("method", ["kl3:0.05", "binary_kl:0.05", "kl3:0.023144&binary_tv:0.2", "dapo/dual=3"])
def test_plugin_through_skyrl_dispatch_is_divclips_loss(method):
    assert plugin.register(method) == method_string(parse_method(method))
    fn = ppo_utils.PolicyLossRegistry.get(plugin.LOSS_NAME)  # what SkyRL's worker calls for policy_loss_type
    cfg = _config({"policy_loss_type": plugin.LOSS_NAME})
    lp, old, adv, mask = _batch(3, 0.8)
    theirs, g_theirs = _grad(lambda x: fn(x, old, adv, config=cfg, loss_mask=mask)[0], lp)
    ours, g_ours = _grad(lambda x: policy_loss(x, old, adv, mask, method, "token-sum", metrics=False)[0], lp)
    torch.testing.assert_close(theirs, ours)
    torch.testing.assert_close(g_theirs, g_ours)
    _, metrics = fn(lp, old, adv, config=cfg, loss_mask=mask)
    assert 0 < metrics["clip_ratio"] < 1


def test_plugin_applies_skyrls_off_policy_correction_like_its_own_losses():
    """divclip_method with a ratio spec and SkyRL's token TIS equals SkyRL's dual_clip with the same TIS."""
    plugin.register("ratio:0.2:0.28/dual=3")
    opc = {"tis_ratio_type": "token", "token_tis_ratio_clip_high": 1.5}
    lp, old, adv, mask = _batch(4, 0.8)
    rollout = old + 0.3 * torch.randn_like(old, generator=torch.Generator().manual_seed(9))
    mine = ppo_utils.PolicyLossRegistry.get(plugin.LOSS_NAME)
    cfg_mine = _config({"policy_loss_type": plugin.LOSS_NAME, "off_policy_correction": opc})
    cfg_theirs = _config(
        {
            "policy_loss_type": "dual_clip",
            "eps_clip_low": 0.2,
            "eps_clip_high": 0.28,
            "clip_ratio_c": 3.0,
            "off_policy_correction": opc,
        }
    )
    a, ga = _grad(lambda x: mine(x, old, adv, config=cfg_mine, loss_mask=mask, rollout_logprobs=rollout)[0], lp)
    b, gb = _grad(
        lambda x: ppo_utils.ppo_policy_loss(x, old, adv, config=cfg_theirs, loss_mask=mask, rollout_logprobs=rollout)[
            0
        ],
        lp,
    )
    without, _ = _grad(
        lambda x: mine(x, old, adv, config=_config({"policy_loss_type": plugin.LOSS_NAME}), loss_mask=mask)[0], lp
    )
    torch.testing.assert_close(a, b, rtol=2e-6, atol=1e-6)
    torch.testing.assert_close(ga, gb, rtol=2e-6, atol=1e-6)
    assert not torch.isclose(a, without)  # the correction changed the loss


def test_plugin_refuses_a_missing_or_bad_method(monkeypatch):
    monkeypatch.delenv(plugin.METHOD_ENV, raising=False)
    with pytest.raises(ValueError, match="DIVCLIP_METHOD"):
        plugin.register()
    with pytest.raises(ValueError, match="kl4"):
        plugin.register("kl4:0.1")
    with pytest.raises(ValueError, match="entropy"):
        plugin.register("kl3@entropy=0.5")


def test_plugin_adaptive_delta_steps_per_call():
    method = plugin.register("kl3:0.02@clipfrac=0.05")
    fn = ppo_utils.PolicyLossRegistry.get(plugin.LOSS_NAME)
    lp, old, adv, mask = _batch(5, 1.0)
    plugin.CONTROLLERS.pop(method, None)
    _, m1 = fn(lp, old, adv, loss_mask=mask)
    _, m2 = fn(lp, old, adv, loss_mask=mask)
    assert m1["divclip_delta"] == pytest.approx(0.02)
    assert m1["clip_ratio"] > 0.05 and m2["divclip_delta"] > m1["divclip_delta"]  # too many clipped: δ widens


@pytest.mark.parametrize("method", ["kl3:0.02", "kl3:0.02@kl3=0.001", "binary_kl:0.05"])
def test_plugin_computes_only_the_metrics_it_reports(method, monkeypatch):
    """Only REPORTED_METRICS (and kl3 for a controller that adapts to it), each the value the whole diagnostic set
    gives, bit for bit; no expm1 pass for kl3 when nothing reads it."""
    from divclip.theory import loss_metrics

    name = plugin.register(method)
    fn = ppo_utils.PolicyLossRegistry.get(plugin.LOSS_NAME)
    lp, old, adv, mask = _batch(6, 1.0)
    asked, real = [], loss_metrics.clip_stats

    def spy(terms, m, extra=(), names=loss_metrics.METRIC_NAMES):
        asked.append(tuple(names))
        return real(terms, m, extra, names)

    monkeypatch.setattr(loss_metrics, "clip_stats", spy)
    plugin.CONTROLLERS.pop(name, None)
    loss, m = fn(lp, old, adv, loss_mask=mask)
    adaptive = "@" in method
    assert asked == [plugin.REPORTED_METRICS + (("kl3",) if adaptive else ())]
    monkeypatch.setattr(plugin, "REPORTED_METRICS", loss_metrics.METRIC_NAMES)
    plugin.CONTROLLERS.pop(name, None)
    whole_loss, whole = fn(lp, old, adv, loss_mask=mask)
    assert asked[-1][: len(loss_metrics.METRIC_NAMES)] == loss_metrics.METRIC_NAMES
    assert m == whole and m["clip_ratio"] > 0.01 and torch.equal(loss, whole_loss)


# ------------------------------------------------------------------------------------------ read / write
METHODS = [
    "grpo",
    "dapo",
    "atr",
    "kl3:0.05",
    "gspo",
    "dapo/dual=3",
    "sapo",
    "ratio:1.0:4.0/cispo",
    "dppo_tv",
    "binary_kl:0.05",
    "kl3:0.023144&binary_tv:0.2",
    "gspo/dual=3",
]


@pytest.mark.parametrize("method", METHODS)
def test_write_then_read_gives_the_same_clip(method):
    spec = parse_method(method)
    w = skyrl.write(spec)
    back = skyrl.read(w.flat())
    assert back.unknown_keys == []
    assert back.spec.form == spec.form and back.spec.level == spec.level
    if spec.form == "clip" and not spec.p_dependent and type(spec) is ClipSpec:
        assert back.spec.ratio_bounds() == pytest.approx(spec.ratio_bounds(), rel=1e-12)
        assert back.spec.param("dual_clip_c", None) == spec.param("dual_clip_c", None)
    elif spec.form == "gated":
        assert (back.spec.measure_name, back.spec.delta, back.spec.param("tis_cap", None)) == (
            spec.measure_name,
            spec.delta,
            None,
        )
        assert any("truncate" in str(d) for d in w.differences)
    else:  # SkyRL's float32 exp (exp_dtype) is arithmetic the read adds, not part of the clip
        assert (
            dataclasses.replace(back.spec, params=tuple(kv for kv in back.spec.params if kv[0] != "exp_dtype")) == spec
        )


def test_kl3_is_written_as_its_exact_ratio_bounds_and_binary_kl_needs_the_plugin():
    w = skyrl.write(parse_method("atr"))
    assert w.settings["trainer.algorithm.policy_loss_type"] == "regular"
    assert [d.exact for d in w.differences] == [True]
    ratio, _ = as_ratio_clip(parse_method("atr"))
    assert 1 + w.settings["trainer.algorithm.eps_clip_high"] == pytest.approx(ratio.ratio_bounds()[1], rel=1e-15)
    w = skyrl.write(parse_method("binary_kl:0.05"))
    assert w.env == {"DIVCLIP_METHOD": "binary_kl:0.05"}
    assert w.settings[skyrl.ENTRYPOINT_KEY] == skyrl.PLUGIN


def test_recipe_aggregation_is_written_as_skyrls_loss_reduction():
    assert skyrl.write(parse_method("grpo")).settings["trainer.algorithm.loss_reduction"] == "sequence_mean"
    assert skyrl.write(parse_method("dapo")).settings["trainer.algorithm.loss_reduction"] == "token_mean"
    w = skyrl.write(parse_method("dapo"), loss_agg_mode="seq-mean-token-sum")
    assert "loss_reduction" not in str(w.settings) and "seq-mean-token-sum" in str(w.differences[0])


def test_read_pitfalls_and_structure():
    r = skyrl.read(
        {
            "trainer.algorithm.policy_loss_type": "cispo",
            "trainer.update_epochs_per_batch": 1,
            "trainer.train_batch_size": 256,
            "trainer.policy_mini_batch_size": 256,
            "trainer.algorithm.eps_clip_hgh": 0.3,
        }
    )
    assert r.spec == parse_method("ratio:0:5/cispo/exp_dtype=float32") and r.updates_per_batch == 1 and r.on_policy
    codes = {a.code for a in r.advice}
    assert {"on_policy_clip_inert", "cispo_lower_bound_active"} <= codes
    assert all(a.source.startswith("skyrl 0.3.0") for a in r.advice)
    assert r.unknown_keys == [("trainer.algorithm.eps_clip_hgh", "trainer.algorithm.eps_clip_high")]
    r = skyrl.read({"trainer.algorithm.policy_loss_type": "regular", "trainer.algorithm.clip_ratio_c": 2.0})
    assert r.spec == parse_method("grpo/exp_dtype=float32") and r.updates_per_batch == 4
    assert [a.code for a in r.advice] == ["ignored_key"]
    with pytest.raises(ValueError, match="policy_mini_batch_size"):
        skyrl.read({"trainer.train_batch_size": 8, "trainer.policy_mini_batch_size": 16})


def test_detect_prefers_skyrl_over_verl_on_shared_prefixes():
    from divclip.engines import detect_engine

    assert detect_engine({"trainer.algorithm.eps_clip_low": 0.2}) == "skyrl"
    assert detect_engine({"trainer.train_batch_size": 64, "generator.n_samples_per_prompt": 8}) == "skyrl"


def test_fixture_run_gsm8k_reads_as_grpo_with_four_minibatches():
    from divclip.engines.config import read_config

    raw = read_config(FIXTURES / "run_gsm8k.sh")
    r = skyrl.read(raw.values)
    assert r.spec == parse_method("grpo/exp_dtype=float32") and r.loss_agg_mode == "token-mean"
    assert (r.minibatches, r.updates_per_batch, r.group_size, r.kl["use_kl_loss"]) == (4, 4, 5, True)
    assert not r.on_policy and r.unknown_keys == []


def test_plugin_entrypoint_hands_skyrl_a_config_it_parses():
    """main() drops its own trainer.override_entrypoint (not a SkyRL config field) and SkyRL's strict parser
    reads the rest, divclip_method included."""
    from skyrl.train.config import SkyRLTrainConfig

    args = plugin.skyrl_args(
        [
            "x",
            f"{plugin.ENTRYPOINT_KEY}={skyrl.PLUGIN}",
            "trainer.seed=3",
            "trainer.algorithm.policy_loss_type=divclip_method",
        ]
    )
    assert args == ["trainer.seed=3", "trainer.algorithm.policy_loss_type=divclip_method"]
    cfg = SkyRLTrainConfig.from_cli_overrides(args)
    assert (cfg.trainer.seed, cfg.trainer.algorithm.policy_loss_type) == (3, "divclip_method")
