"""Each engine's rollout correction read from its own keys and defaults, written back, and applied as the engine does.

Defaults are checked against the engines' own config classes; `read_correction` then `rollout_correction` is
checked against the engine's own function on the same settings (verl's compute_rollout_correction_and_rejection_mask,
SkyRL's compute_off_policy_correction, slime's vanilla_tis_function from its pinned source when a fetched copy is
present); round trips Correction -> settings -> Correction are exact.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from divclip.engines import read_correction, to_engine, translate, write_correction
from divclip.engines.correction import CORRECTION_KEYS, SKYRL, VERL
from divclip.theory.correction import Correction, parse_correction
from divclip.theory.correction_apply import rollout_correction

sys.path.insert(0, str(Path(__file__).parent))


def batch(seed=0, b=16, t=40, drift=0.04):
    g = torch.Generator().manual_seed(seed)
    kw = dict(generator=g, dtype=torch.float64)
    old = torch.log_softmax(2.0 * torch.randn(b, t, 6, **kw), -1)[..., 0]
    rollout = old + drift * torch.randn(b, t, **kw) + (torch.rand(b, t, **kw) < 0.04) * torch.randn(b, t, **kw)
    lengths = torch.randint(3, t + 1, (b, 1), generator=g)
    mask = (torch.arange(t)[None, :] < lengths).to(torch.float64)
    return old, rollout, mask


# ------------------------------------------------------------------------------------------------ defaults
@pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="verl is not installed")
def test_verl_keys_default_to_verls_yaml():
    import verl
    import yaml

    path = Path(verl.__file__).parent / "trainer/config/algorithm/rollout_correction.yaml"
    shipped = yaml.safe_load(path.read_text())
    for key, spec in CORRECTION_KEYS["verl"].items():
        assert spec.default == shipped[key.removeprefix(VERL)], key
    assert read_correction("verl", {}) is None  # verl's yaml: rollout_is null, rollout_rs null
    # verl's dataclass says rollout_is='sequence' where its yaml (what Hydra runs) says null
    from verl.trainer.config.algorithm import RolloutCorrectionConfig

    assert RolloutCorrectionConfig().rollout_is == "sequence" and shipped["rollout_is"] is None


@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="trl is not installed")
def test_trl_keys_default_to_grpo_config():
    from trl import GRPOConfig

    fields = GRPOConfig.__dataclass_fields__
    for key, spec in CORRECTION_KEYS["trl"].items():
        assert fields[key].default == spec.default, key
    assert read_correction("trl", {}) is None  # no vLLM, no OPSM
    assert read_correction("trl", {"use_vllm": True}) == parse_correction("is=sequence:mask=3.0/noclamp")
    assert read_correction("trl", {"off_policy_mask_threshold": 0.5}) == Correction(opsm=0.5, clamp_log_ratio=False)


def skyrl_config_class():
    helpers = pytest.importorskip("skyrl_helpers")
    helpers.load()
    from skyrl.train.config.config import OffPolicyCorrectionConfig

    return OffPolicyCorrectionConfig


@pytest.mark.skipif(importlib.util.find_spec("skyrl") is None, reason="skyrl is not installed")
def test_skyrl_keys_default_to_its_config():
    cls = skyrl_config_class()
    defaults = cls()
    for key, spec in CORRECTION_KEYS["skyrl"].items():
        if key.startswith(SKYRL):
            assert getattr(defaults, key.removeprefix(SKYRL)) == spec.default, key
    assert read_correction("skyrl", {}) is None


# --------------------------------------------------------------------------------------- engine parity
VERL_SETTINGS = [
    {"rollout_is": "token"},
    {"rollout_is": "sequence", "rollout_is_threshold": 3.0, "rollout_is_batch_normalize": True},
    {"rollout_is": "token", "rollout_is_threshold": "0.8_1.25"},
    {"rollout_rs": "token_k1,seq_max_k3", "rollout_rs_threshold": "1.1,0.3"},
    {"rollout_is": "sequence", "rollout_rs": "seq_mean_k1", "rollout_rs_threshold": 1.02},
]


@pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="verl is not installed")
@pytest.mark.parametrize("settings", VERL_SETTINGS)
def test_verl_settings_apply_as_verl(settings):
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    old, rollout, mask = batch()
    c = read_correction("verl", {VERL + k: v for k, v in settings.items()})
    kw = {"rollout_is_threshold": 2.0, **settings}
    proto, keep_ref, _ = compute_rollout_correction_and_rejection_mask(old, rollout, mask, **kw)
    w, keep, _ = rollout_correction(old, rollout, mask, c)
    assert torch.equal(keep, keep_ref)
    assert (w is None) == (proto is None)
    if w is not None:
        assert torch.allclose(w, proto.batch["rollout_is_weights"], rtol=1e-12, atol=0)


SKYRL_SETTINGS = [
    {"tis_ratio_type": "token"},
    {"tis_ratio_type": "sequence", "sequence_tis_ratio_clip_high": 3.0},
    {"sequence_mask_metric": "geometric", "geo_mask_low": 0.98, "geo_mask_high": 1.02},
    {"tis_ratio_type": "token", "sequence_mask_metric": "product"},
    {"token_mask_is_threshold_low": 0.8, "token_mask_is_threshold_high": 1.25, "tis_ratio_type": "token"},
]


@pytest.mark.skipif(importlib.util.find_spec("skyrl") is None, reason="skyrl is not installed")
@pytest.mark.parametrize("settings", SKYRL_SETTINGS)
def test_skyrl_settings_apply_as_skyrl(settings):
    from omegaconf import OmegaConf

    cls = skyrl_config_class()
    from skyrl.backends.skyrl_train.utils.off_policy_correction_utils import compute_off_policy_correction

    old, rollout, mask = batch(seed=1)
    cfg = OmegaConf.structured(cls(**settings))
    tis_ref, _, keep_ref = compute_off_policy_correction(old, rollout, mask, cfg)
    c = read_correction("skyrl", {SKYRL + k: v for k, v in settings.items()})
    w, keep, _ = rollout_correction(old, rollout, mask, c)
    assert torch.equal(keep, keep_ref) and 0 < int(keep.sum())
    if tis_ref is None:
        assert w is None
    else:
        valid = mask.bool()  # SkyRL's safe_exp_delta exponentiates in float32 whatever the input dtype
        assert torch.allclose(w[valid], tis_ref.expand_as(old)[valid], rtol=1e-6, atol=0)


SLIME_COMMIT = "624b824a898ab0ec1fcb4d373004c7f3852bf515"


def slime_loss_source():
    """slime's megatron_utils/loss.py at the pinned commit, from a fetched snapshot ($DIVCLIP_SLIME_GIT or the
    fetch tool's mirror); None when absent (CI has none)."""
    repo = os.environ.get("DIVCLIP_SLIME_GIT", "/work/.mirror/THUDM+slime/repo")
    if not Path(repo).exists():
        return None
    try:
        out = subprocess.run(
            ["git", "--git-dir", repo, "show", f"{SLIME_COMMIT}:slime/backends/megatron_utils/loss.py"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def slime_functions(source):
    """vanilla_tis_function and icepop_function, compiled alone from slime's own source (the module imports
    Megatron)."""
    import ast
    import types
    from typing import Any

    tree = ast.parse(source)
    wanted = [
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in ("vanilla_tis_function", "icepop_function")
    ]
    scope = {"torch": torch, "Any": Any}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), "slime-loss", "exec"), scope)
    return types.SimpleNamespace(tis=scope["vanilla_tis_function"], icepop=scope["icepop_function"])


@pytest.mark.parametrize(("low", "high"), [(0.0, 2.0), (0.5, 1.5)])
def test_slime_tis_applies_as_slime(low, high):
    import types

    source = slime_loss_source()
    if source is None:
        pytest.skip("no fetched slime snapshot at the pinned commit (the fetch tool's mirror); CI has none")
    fns = slime_functions(source)
    old, rollout, mask = batch(seed=2)
    args = types.SimpleNamespace(tis_clip=high, tis_clip_low=low)
    ones = torch.ones_like(old)
    ref, _, _ = fns.tis(args, pg_loss=ones, train_log_probs=[old], rollout_log_probs=[rollout], loss_masks=[mask])
    c = read_correction("slime", {"--use-tis": True, "--tis-clip": high, "--tis-clip-low": low})
    w, keep, _ = rollout_correction(old, rollout, mask, c)
    valid = mask.bool()
    assert torch.equal(keep, mask) and torch.allclose(w[valid], ref[valid], rtol=1e-12, atol=0)
    ice, _, _ = fns.icepop(args, pg_loss=ones, train_log_probs=[old], rollout_log_probs=[rollout], loss_masks=[mask])
    floor = None if low == 0 else low
    w, _, _ = rollout_correction(old, rollout, mask, Correction("token", "mask", high, floor, clamp_log_ratio=False))
    assert torch.equal(w[valid], ice[valid])


# ------------------------------------------------------------------------------------------ round trips
ROUND_TRIPS = {
    "verl": [
        "is=token:tis=2.0",
        "is=sequence:mask=0.5_5.0/norm",
        "rs=seq_mean_k1:0.999_1.001/rs=token_k3:0.01",
        "is=token:tis=1.5/rs=seq_max_k2:0.2/bypass",
    ],
    "trl": [
        "is=sequence:mask=3.0/noclamp",
        "is=token:tis=0.5_2.0/noclamp",
        "opsm=0.5/noclamp",
        "is=token:mask=0.5_inf/noclamp",
    ],
    "skyrl": [
        "is=token:tis=2.0",
        "is=sequence:tis=5.0/rs=seq_mean_k1:0.5_2.0",
        "rs=seq_sum_k1:0.5_2.0/rs=token_k1:0.8_1.25",
    ],
    "slime": ["is=token:tis=0.0_2.0/noclamp", "is=token:tis=0.5_1.5/noclamp"],
}


@pytest.mark.parametrize(("engine", "text"), [(e, t) for e, ts in ROUND_TRIPS.items() for t in ts])
def test_round_trip_is_exact(engine, text):
    c = parse_correction(text)
    settings, cannot = write_correction(c, engine)
    assert cannot == []
    back = read_correction(engine, {"use_vllm": True, **settings} if engine == "trl" else settings)
    assert back == c
    assert write_correction(back, engine)[0] == settings


def test_what_a_target_cannot_express_is_named():
    c = parse_correction("is=sequence:tis=2.0/rs=token_k3:0.01/norm")
    _, cannot = write_correction(c, "trl")
    assert any("rejection" in why for why in cannot) and any("normalise" in why for why in cannot)
    with pytest.raises(ValueError, match="trl cannot express"):
        to_engine("grpo", "trl", correction=c)
    settings = {VERL + "rollout_is": "sequence", VERL + "rollout_rs": "token_k3", VERL + "rollout_rs_threshold": 0.01}
    out, diffs = translate(settings, "verl", "trl")
    assert out["vllm_importance_sampling_mode"] == "sequence_truncate"
    assert any("rollout correction" in d.what and "rejection" in d.nearest for d in diffs)
    out, diffs = translate(settings, "verl", "skyrl")
    assert out[SKYRL + "tis_ratio_type"] == "sequence"
    assert any("token_k3" in d.nearest for d in diffs)


def test_unmodelled_engine_corrections_are_refused_by_name():
    # SkyRL's outlier-token mask is modelled since (rule seq_any_k1; tests/engines/test_parity_skyrl.py)
    assert (
        read_correction("skyrl", {SKYRL + "outlier_token_is_threshold_high": 5.0}).rejections[0].option == "seq_any_k1"
    )
    with pytest.raises(ValueError, match="custom"):
        read_correction("slime", {"--use-tis": True, "--custom-tis-function-path": "x.icepop"})
    # OpenRLHF's seq-level gate is modelled since (a filter keeping token weights: test_openrlhf_gates_...);
    # what OpenRLHF itself refuses stays refused by name
    with pytest.raises(ValueError, match="mode clip needs .*level token"):
        read_correction("openrlhf", {OPENRLHF + "level": "seq", OPENRLHF + "mode": "clip"})
    assert read_correction("openrlhf", {}) is None
    assert read_correction("areal", {"actor.rejection_sampling.level": "token"}) is None  # ignored without decoupled
    # AReaL's rejection_sampling is modelled since (the filter= part; tests/engines/test_correction_areal.py)
    assert read_correction("areal", {"actor.use_decoupled_loss": True, "actor.rejection_sampling.level": "token"})
    with pytest.raises(ValueError, match="rollout_rs_threshold must be set"):
        read_correction("verl", {VERL + "rollout_rs": "token_k1"})
    with pytest.raises(ValueError, match="engine must be one of"):
        read_correction("nope", {})


def test_verl_bypass_with_rejection_reads_the_clip_and_the_correction():
    from divclip.engines import from_engine

    settings = {VERL + "bypass_mode": True, VERL + "rollout_rs": "token_k3", VERL + "rollout_rs_threshold": 0.02}
    assert from_engine("verl", settings).form == "clip"  # ppo_clip: vanilla on the rollout log-probs
    assert read_correction("verl", settings) == parse_correction("rs=token_k3:0.02/bypass")
    with pytest.raises(ValueError, match="loss_type reinforce"):
        from_engine("verl", {**settings, VERL + "loss_type": "reinforce"})


def openrlhf_loss_module():
    """OpenRLHF 0.11.2's models/loss.py, loaded alone: its package imports flash_attn and its utils deepspeed, so
    `masked_mean` (the one name loss.py takes from utils) is compiled from OpenRLHF's own utils.py source."""
    import ast
    import importlib.util
    import types

    spec = importlib.util.find_spec("openrlhf")
    if spec is None:
        pytest.skip("openrlhf is not installed")
    folder = Path(list(spec.submodule_search_locations)[0]) / "models"
    tree = ast.parse((folder / "utils.py").read_text())
    wanted = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "masked_mean"]
    utils = types.ModuleType("divclip_test_openrlhf.utils")
    utils.__dict__.update(torch=torch, Optional=__import__("typing").Optional)
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(folder / "utils.py"), "exec"), utils.__dict__)
    pkg = types.ModuleType("divclip_test_openrlhf")
    pkg.__path__ = [str(folder)]
    saved = {k: sys.modules.get(k) for k in ("divclip_test_openrlhf", "divclip_test_openrlhf.utils")}
    sys.modules.update({"divclip_test_openrlhf": pkg, "divclip_test_openrlhf.utils": utils})
    try:
        loss_spec = importlib.util.spec_from_file_location("divclip_test_openrlhf.loss", folder / "loss.py")
        module = importlib.util.module_from_spec(loss_spec)
        loss_spec.loader.exec_module(module)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return module


OPENRLHF = "--algo.advantage.is_correction_"


@pytest.mark.parametrize(
    ("mode", "threshold"), [("mask", [0.5, 5.0]), ("mask", [0.9, 1.1]), ("clip", [0.8, 1.2]), ("clip", [1.5])]
)
def test_openrlhf_token_ratio_gate_applies_as_openrlhf(mode, threshold):
    from divclip.theory.losses import policy_loss

    loss_mod = openrlhf_loss_module()
    old, rollout, mask = batch(seed=5)
    g = torch.Generator().manual_seed(6)
    lp = old + 0.1 * torch.randn(old.shape, generator=g, dtype=torch.float64)
    adv = torch.randn(old.shape[0], 1, generator=g, dtype=torch.float64).expand_as(old).contiguous()
    band = [0.0, *threshold] if len(threshold) == 1 else threshold
    ref_fn = loss_mod.PolicyLoss(is_correction_level="token", is_correction_mode=mode, is_correction_threshold=band)
    leaf = lp.clone().requires_grad_()
    ref, *_ = ref_fn(leaf, old, adv, action_mask=mask, rollout_log_probs=rollout)
    ref.backward()
    settings = {OPENRLHF + "level": "token", OPENRLHF + "mode": mode, OPENRLHF + "threshold": threshold}
    c = read_correction("openrlhf", settings)
    ours_leaf = lp.clone().requires_grad_()
    ours, _ = policy_loss(ours_leaf, old, adv, mask, "grpo", "token-mean", rollout_log_prob=rollout, correction=c)
    ours.backward()
    ours, ref = ours.detach(), ref.detach()
    assert float(abs(ours - ref)) <= 1e-12 * max(1.0, float(abs(ref)))
    assert torch.allclose(ours_leaf.grad, leaf.grad, rtol=1e-10, atol=1e-15)
    plain = policy_loss(lp, old, adv, mask, "grpo", "token-mean")[0]
    assert not torch.allclose(plain, ours.detach())
    assert (
        write_correction(c, "openrlhf")[1] == []
        and read_correction("openrlhf", write_correction(c, "openrlhf")[0]) == c
    )


@pytest.mark.skipif(importlib.util.find_spec("skyrl") is None, reason="skyrl is not installed")
@pytest.mark.parametrize("settings", SKYRL_SETTINGS)
def test_skyrl_loss_with_its_correction_equals_skyrls(settings):
    """SkyRL's ppo_policy_loss applies off_policy_correction itself; divclip's loss with the correction read
    from the same settings is the same loss (SkyRL exponentiates in float32: its tolerance)."""
    from omegaconf import OmegaConf

    from divclip.theory.losses import policy_loss

    helpers = pytest.importorskip("skyrl_helpers")
    ppo_utils, algorithm_config = helpers.load()
    kw = {"policy_loss_type": "regular", "off_policy_correction": settings}
    cfg = algorithm_config.from_dict_config(OmegaConf.create(kw))
    old, rollout, mask = batch(seed=7)
    g = torch.Generator().manual_seed(8)
    lp = old + 0.1 * torch.randn(old.shape, generator=g, dtype=torch.float64)
    adv = torch.randn(old.shape[0], 1, generator=g, dtype=torch.float64).expand_as(old).contiguous()
    c = read_correction("skyrl", {SKYRL + k: v for k, v in settings.items()})
    leaf, ref_leaf = lp.clone().requires_grad_(), lp.clone().requires_grad_()
    ref = ppo_utils.ppo_policy_loss(ref_leaf, old, adv, config=cfg, loss_mask=mask, rollout_logprobs=rollout)[0]
    ours = policy_loss(leaf, old, adv, mask, "grpo", "token-sum", rollout_log_prob=rollout, correction=c)[0]
    ref.backward()
    ours.backward()
    torch.testing.assert_close(ours.detach(), ref.detach().to(ours.dtype), rtol=2e-6, atol=1e-6)
    torch.testing.assert_close(leaf.grad, ref_leaf.grad.to(leaf.grad.dtype), rtol=2e-6, atol=1e-6)
    plain = policy_loss(lp, old, adv, mask, "grpo", "token-sum")[0]
    assert not torch.allclose(plain, ours.detach(), rtol=1e-4)


OPENRLHF_GATES = {
    "seq ratio": ({OPENRLHF + "level": "seq"}, "filter=sequence:ratio:mean:mask:0.5_5.0:token"),
    "seq ratio, one threshold": ({OPENRLHF + "level": "seq", OPENRLHF + "threshold": ["1.2"]}, None),
    "token binary_kl": (
        {OPENRLHF + "level": "token", OPENRLHF + "gating": "binary_kl", OPENRLHF + "threshold": "0.02"},
        None,
    ),
    "seq tv": ({OPENRLHF + "level": "seq", OPENRLHF + "gating": "tv", OPENRLHF + "threshold": ["-1", "0.1"]}, None),
}


@pytest.mark.parametrize("name", list(OPENRLHF_GATES))
def test_openrlhf_gates_read_as_filters_and_write_back(name):
    """OpenRLHF's seq-level and binary_kl / tv gates are filters (their parity with PolicyLoss itself:
    tests/engines/test_parity_openrlhf.py); their string reads back; OpenRLHF writes them back to the same
    correction; AReaL and verl name them as what they cannot say."""
    settings, text = OPENRLHF_GATES[name]
    c = read_correction("openrlhf", settings)
    f = c.filter
    assert f is not None and f.action == "mask" and c.is_level is None and not c.clamp_log_ratio
    assert f.level == ("sequence" if settings[OPENRLHF + "level"] == "seq" else "token")
    gating = settings.get(OPENRLHF + "gating", "ratio")
    assert f.metric == {"ratio": "ratio", "binary_kl": "binary_kl", "tv": "binary_tv"}[gating]
    assert f.seq_weight == ("token" if f.metric == "ratio" else "geometric") and not f.areal
    if text is not None:
        assert str(c) == text
    assert parse_correction(str(c)) == c
    out, cannot = write_correction(c, "openrlhf")
    assert cannot == [] and read_correction("openrlhf", out) == c
    _, cannot = write_correction(c, "areal")
    assert len(cannot) == 1 and "OpenRLHF's gate" in cannot[0] and str(f) in cannot[0]
    _, cannot = write_correction(c, "verl")
    assert any("OpenRLHF filter" in x for x in cannot)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"level": "token", "seq_weight": "token"}, "seq_weight 'token' applies to a sequence ratio mask only"),
        ({"level": "sequence", "action": "clamp", "seq_weight": "token"}, "sequence ratio mask only"),
        ({"level": "sequence", "seq_weight": "token", "lower": -0.5, "upper": 2.0}, "lower >= 0"),
        ({"seq_weight": "mean"}, r"seq_weight must be one of \['geometric', 'token'\], got 'mean'"),
        ({"metric": "binary_kl", "action": "clamp"}, "clamp' needs metric 'ratio'"),
        ({"metric": "binary_tv", "upper": 0.0}, "upper must be > 0 for metric 'binary_tv'"),
    ],
)
def test_filter_gate_options_refused_by_name(kwargs, match):
    from divclip.theory.correction import Filter

    with pytest.raises(ValueError, match=match):
        Filter(**kwargs)


def test_openrlhf_seq_ratio_gate_accepts_openrlhfs_bands_areal_refuses():
    """OpenRLHF takes any band on exp(mean log ρ), e.g. [0.9, 1.0]; AReaL's ratio filter needs upper > 1."""
    c = read_correction("openrlhf", {OPENRLHF + "level": "seq", OPENRLHF + "threshold": ["0.9", "1.0"]})
    assert (c.filter.lower, c.filter.upper) == (0.9, 1.0)
    with pytest.raises(ValueError, match="upper must be > 1"):
        parse_correction("filter=sequence:ratio:mean:mask:0.9_1.0")


@pytest.mark.parametrize(
    "text",
    [
        "filter=token:binary_kl:mask:0.1_0.2",
        "filter=sequence:binary_tv:sum:mask:0.1",
        "filter=sequence:binary_kl:max:mask:0.1",
    ],
)
def test_openrlhf_kind_filters_openrlhf_cannot_say_are_named(text):
    """A lower bound > 0 on a divergence, or a sum / max over the sequence: OpenRLHF's flags have neither."""
    out, cannot = write_correction(text, "openrlhf")
    assert out == {OPENRLHF + "level": "off"} and len(cannot) == 1
    assert "not expressible" in cannot[0] and text.removeprefix("filter=") in cannot[0]
