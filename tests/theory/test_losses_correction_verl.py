"""`policy_loss(..., rollout_log_prob=, correction=)` against verl 0.9.1's own loss path, in process.

Decoupled mode: verl's trainer calls `compute_rollout_correction_and_rejection_mask` on (old_log_probs,
rollout_log_probs), replaces response_mask and hands the weights to the policy loss (`rollout_is_weights`); here
the two verl functions are composed exactly so. Bypass mode: verl's registered `bypass_mode` loss itself, with
the rollout correction in the actor config, for loss_type ppo_clip (divclip: any ratio form) and reinforce
(divclip: gpg). Loss and gradient to 1e-12 in float64.
"""

import importlib.util

import pytest
import torch

from divclip.theory.correction import parse_correction
from divclip.theory.losses import policy_loss

pytestmark = pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="verl is not installed")

CASES = [
    ("is=token:tis=2.0", dict(rollout_is="token", rollout_is_threshold=2.0)),
    (
        "is=sequence:tis=3.0/norm",
        dict(rollout_is="sequence", rollout_is_threshold=3.0, rollout_is_batch_normalize=True),
    ),
    ("is=token:mask=0.8_1.25", dict(rollout_is="token", rollout_is_threshold="0.8_1.25")),
    ("rs=seq_mean_k1:0.97_1.03", dict(rollout_is=None, rollout_rs="seq_mean_k1", rollout_rs_threshold="0.97_1.03")),
    (
        "is=token:tis=2.0/rs=token_k3:0.003/rs=seq_max_k2:0.05",
        dict(
            rollout_is="token",
            rollout_is_threshold=2.0,
            rollout_rs="token_k3,seq_max_k2",
            rollout_rs_threshold="0.003,0.05",
        ),
    ),
]


@pytest.fixture(scope="module")
def verl():
    ca = pytest.importorskip("verl.trainer.ppo.core_algos")
    rc = pytest.importorskip("verl.trainer.ppo.rollout_corr_helper")
    return ca, rc


def actor_config(**policy_loss):
    from verl.workers.config.actor import ActorConfig, PolicyLossConfig

    return ActorConfig(
        strategy="fsdp", rollout_n=4, ppo_micro_batch_size_per_gpu=1, policy_loss=PolicyLossConfig(**policy_loss)
    )


def batch(seed=0, b=12, t=40):
    g = torch.Generator().manual_seed(seed)
    kw = dict(generator=g, dtype=torch.float64)
    old = torch.log_softmax(2.0 * torch.randn(b, t, 6, **kw), -1)[..., 0]
    rollout = old + 0.05 * torch.randn(b, t, **kw) + (torch.rand(b, t, **kw) < 0.05) * torch.randn(b, t, **kw)
    lp = old + 0.2 * torch.randn(b, t, **kw)
    adv = torch.randn(b, 1, **kw).expand(b, t).contiguous()
    lengths = torch.randint(4, t + 1, (b, 1), generator=g)
    mask = (torch.arange(t)[None, :] < lengths).to(torch.float64)
    return old, rollout, lp, adv, mask


def grad_of(fn, lp):
    leaf = lp.clone().requires_grad_()
    loss, metrics = fn(leaf)
    loss.backward()
    return loss.detach(), leaf.grad, metrics


def close(a, b):
    return float((a - b).abs().max()) <= 1e-12 * max(1.0, float(b.abs().max()))


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize(("text", "verl_kw"), CASES)
def test_decoupled_loss_equals_verl_correction_then_verl_loss(verl, text, verl_kw, agg):
    ca, rc = verl
    old, rollout, lp, adv, mask = batch()
    proto, keep, _ = rc.compute_rollout_correction_and_rejection_mask(old, rollout, mask, **verl_kw)
    w = None if proto is None else proto.batch["rollout_is_weights"]
    config = actor_config()
    ref = grad_of(lambda x: ca.compute_policy_loss_vanilla(old, x, adv, keep, agg, config, rollout_is_weights=w), lp)
    ours = grad_of(
        lambda x: policy_loss(x, old, adv, mask, "grpo/dual=3", agg, rollout_log_prob=rollout, correction=text), lp
    )
    assert close(ours[0], ref[0]) and close(ours[1], ref[1])
    assert "rollout_corr/mismatch_k3" in ours[2]
    plain = policy_loss(lp, old, adv, mask, "grpo/dual=3", agg)[0]
    assert not torch.allclose(ours[0], plain, rtol=1e-9, atol=0)  # the correction changed the loss


BYPASS = [
    (
        "ppo_clip",
        "grpo/dual=3",
        "rs=token_k3:0.02",
        dict(rollout_is=None, rollout_rs="token_k3", rollout_rs_threshold=0.02),
    ),
    (
        "ppo_clip",
        "grpo/dual=3",
        "is=token:tis=2.0/rs=seq_mean_k1:0.9_1.1",
        dict(rollout_is="token", rollout_rs="seq_mean_k1", rollout_rs_threshold="0.9_1.1"),
    ),
    ("reinforce", "ratio/gpg", "is=token:tis=1.5", dict(rollout_is="token", rollout_is_threshold=1.5)),
    (
        "reinforce",
        "ratio/gpg",
        "is=sequence:tis=2.0/rs=token_k2:0.02",
        dict(rollout_is="sequence", rollout_is_threshold=2.0, rollout_rs="token_k2", rollout_rs_threshold=0.02),
    ),
]


@pytest.mark.parametrize(("loss_type", "method", "text", "verl_kw"), BYPASS)
def test_bypass_loss_equals_verls_bypass_mode(verl, loss_type, method, text, verl_kw):
    from verl.trainer.config.algorithm import RolloutCorrectionConfig

    ca, _ = verl
    _, rollout, lp, adv, mask = batch(seed=1)
    rcfg = RolloutCorrectionConfig(bypass_mode=True, loss_type=loss_type, **verl_kw)
    config = actor_config(loss_mode="bypass_mode", rollout_correction=rcfg)
    ref = grad_of(lambda x: ca.compute_policy_loss_bypass_mode(rollout, x, adv, mask, "token-mean", config), lp)
    c = parse_correction(text + "/bypass")
    ours = grad_of(lambda x: policy_loss(x, rollout, adv, mask, method, rollout_log_prob=rollout, correction=c), lp)
    assert close(ours[0], ref[0]) and close(ours[1], ref[1])
    rs = ref[2].get("rollout_corr/rollout_rs_masked_fraction")
    if rs is not None:
        assert ours[2]["rollout_corr/rs_masked_fraction"] == pytest.approx(rs, rel=1e-9, abs=1e-12)
        assert 0 < rs < 1


def test_metrics_false_gives_the_same_loss():
    old, rollout, lp, adv, mask = batch()
    text = "is=sequence:tis=3.0/norm/rs=token_k3:0.003"
    a = policy_loss(lp, old, adv, mask, "grpo", rollout_log_prob=rollout, correction=text)[0]
    b, m = policy_loss(lp, old, adv, mask, "grpo", rollout_log_prob=rollout, correction=text, metrics=False)
    assert torch.equal(a, b) and m == {}


def test_misuse_is_named():
    old, rollout, lp, adv, mask = batch()
    with pytest.raises(ValueError, match="without rollout_log_prob"):
        policy_loss(lp, old, adv, mask, "grpo", correction="is=token")
    with pytest.raises(ValueError, match="not both"):
        policy_loss(
            lp, old, adv, mask, "grpo", rollout_is_weights=mask, rollout_log_prob=rollout, correction="is=token"
        )
    with pytest.raises(ValueError, match="unknown part"):
        policy_loss(lp, old, adv, mask, "grpo", rollout_log_prob=rollout, correction="tis=2")
