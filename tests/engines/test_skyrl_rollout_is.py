"""SkyRL 0.3.0's `rollout_is` policy loss against SkyRL's own function (loaded by tests/engines/skyrl_helpers.py).

SkyRL's `rollout_is_policy_loss` is −sg(f(r))·A·log π with r = π_θ/π_rollout (log r clamped to ±20, exp in
float32) and f(r) = r on (1 − eps_clip_low, 1 + eps_clip_high), 0 outside: REINFORCE weighted by an IcePop
band on the rollout ratio. In divclip that is the bypass correction `is=token:mask=LO_HI/bypass` (π_old is
π_rollout, the weight is of π_θ/π_rollout) with the REINFORCE form gpg (`ratio/gpg`): policy_loss gives SkyRL's
value and gradient. SkyRL's band is open, divclip's closed: they differ only for an r exactly on a bound, which
the data here is checked not to hold.
"""

import pytest
import torch

from divclip.engines import read_correction
from divclip.theory.correction import parse_correction
from divclip.theory.losses import policy_loss

helpers = pytest.importorskip("skyrl_helpers")
A = "trainer.algorithm."


def batch(seed=0, b=10, t=24, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    rollout = torch.log_softmax(2.0 * torch.randn(b, t, 6, generator=g, dtype=torch.float64), -1)[..., 0]
    lp = rollout + 0.2 * torch.randn(b, t, generator=g, dtype=torch.float64)
    lp[0, :3] += 25.0  # |log r| > 20: both clamp before exp
    adv = torch.randn(b, 1, generator=g, dtype=torch.float64).expand(b, t).contiguous()
    lengths = torch.randint(1, t + 1, (b, 1), generator=g)
    mask = (torch.arange(t)[None, :] < lengths).to(torch.float64)
    mask[2] = 0.0  # a row without a loss token
    return lp.to(dtype), rollout.to(dtype), adv.to(dtype), mask.to(dtype)


@pytest.mark.parametrize("eps", [(0.2, 0.2), (0.1, 0.3), (0.5, 2.0)])
@pytest.mark.parametrize("reduction", ["token_mean", "sequence_mean"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_rollout_is_loss_is_skyrls(eps, reduction, dtype):
    from omegaconf import OmegaConf

    ppo_utils, algorithm_config = helpers.load()
    low, high = eps
    cfg = algorithm_config.from_dict_config(
        OmegaConf.create({"policy_loss_type": "rollout_is", "eps_clip_low": low, "eps_clip_high": high})
    )
    loss_fn = ppo_utils.PolicyLossRegistry.get("rollout_is")
    lp, rollout, adv, mask = batch(dtype=dtype)
    r = torch.exp((lp - rollout).clamp(-20, 20))
    assert not bool(((r == 1 - low) | (r == 1 + high)).any())  # no ratio on a bound (open vs closed band)
    inside = (r > 1 - low) & (r < 1 + high) & mask.bool()
    assert 0 < int(inside.sum()) < int(mask.sum())  # the band bites: this test could fail
    # SkyRL pre-scales the advantages for its reduction, then sums the masked loss (reduce_loss)
    scaled = ppo_utils.apply_loss_reduction_to_advantages_minibatch(adv, mask, reduction, adv.shape[0], None)
    theirs_leaf = lp.clone().requires_grad_()
    theirs, _ = loss_fn(theirs_leaf, rollout, scaled, config=cfg, loss_mask=mask, rollout_logprobs=rollout)
    theirs.backward()
    agg = {"token_mean": "token-mean", "sequence_mean": "seq-mean-token-mean"}[reduction]
    leaf = lp.clone().requires_grad_()
    correction = read_correction(  # divclip's reading of the same settings
        "skyrl", {f"{A}policy_loss_type": "rollout_is", f"{A}eps_clip_low": low, f"{A}eps_clip_high": high}
    )
    assert correction == parse_correction(f"is=token:mask={1 - low!r}_{1 + high!r}/bypass")
    mine, out = policy_loss(leaf, rollout, adv, mask, "ratio/gpg", agg, rollout_log_prob=rollout, correction=correction)
    mine.backward()
    if reduction == "sequence_mean":  # SkyRL divides by every row, the empty one too; verl's mean by rows with a token
        rows = mask.shape[0]
        mine_value = mine.detach() * int((mask.sum(-1) > 0).sum()) / rows
        grad = leaf.grad * int((mask.sum(-1) > 0).sum()) / rows
    else:
        mine_value, grad = mine.detach(), leaf.grad
    tol = dict(rtol=2e-6, atol=1e-7) if dtype == torch.float64 else dict(rtol=2e-5, atol=1e-6)
    torch.testing.assert_close(mine_value, theirs.detach().to(mine.dtype), **tol)
    torch.testing.assert_close(grad, theirs_leaf.grad.to(grad.dtype), **tol)
    kept = out["rollout_corr/kept_token_fraction"]
    assert kept == pytest.approx(int(inside.sum()) / int(mask.sum()), rel=1e-12)


def test_rollout_is_with_an_off_policy_correction_is_refused_by_name():
    """SkyRL then weights by π_θ/π_rollout and by π_old/π_rollout at once: one correction cannot hold both."""
    settings = {f"{A}policy_loss_type": "rollout_is", f"{A}off_policy_correction.tis_ratio_type": "token"}
    with pytest.raises(ValueError, match="rollout_is with off_policy_correction"):
        read_correction("skyrl", settings)
    wide = read_correction("skyrl", {f"{A}policy_loss_type": "rollout_is", f"{A}eps_clip_low": 1.5})
    assert wide == parse_correction("is=token:mask=1.2/bypass")  # 1 − 1.5 < 0: no floor, as r > −0.5 always holds


def test_the_keys_default_to_skyrls_algorithm_config():
    from divclip.engines.correction import CORRECTION_KEYS

    _, algorithm_config = helpers.load()
    shipped = algorithm_config()
    for name in ("policy_loss_type", "eps_clip_low", "eps_clip_high"):
        assert CORRECTION_KEYS["skyrl"][A + name].default == getattr(shipped, name), name
    assert read_correction("skyrl", {}) is None  # regular: no correction


def test_the_pitfall_says_the_pair_is_refused():
    from divclip import engines

    settings = {f"{A}policy_loss_type": "rollout_is", f"{A}off_policy_correction.sequence_mask_metric": "geometric"}
    (advice,) = [a for a in engines.read("skyrl", settings).advice if a.code == "is_correction_threshold"]
    assert "refuses the pair by name" in advice.message
    with pytest.raises(ValueError, match="rollout_is with off_policy_correction"):
        read_correction("skyrl", settings)
    regular = {f"{A}off_policy_correction.sequence_mask_metric": "geometric"}
    (advice,) = [a for a in engines.read("skyrl", regular).advice if a.code == "is_correction_threshold"]
    assert "translate carries or names" in advice.message and read_correction("skyrl", regular) is not None
