"""`rollout_correction` and the corrected `policy_loss` against TRL 1.16.0's own code, in process.

TRL computes its vLLM importance-sampling ratio inline in `GRPOTrainer._generate_and_score_completions` (no
function of its own). The test takes that block from the installed TRL's source at test time (`inspect`: the
lines under `if self.use_vllm and self.vllm_importance_sampling_correction:`) and runs it on a stand-in `self`
holding the mode and clip bounds: TRL's code, not a copy. The off-policy sequence mask is TRL's static
`GRPOTrainer.get_off_policy_mask`; the loss is TRL's `_compute_loss` (tests/theory/trl_helpers.py) fed the
ratio and the sampling log-probs as TRL's trainer stores them.
"""

import importlib.util
import inspect
import math
import textwrap
import types

import pytest
import torch

from divclip.theory.correction import Correction, parse_correction
from divclip.theory.correction_apply import rollout_correction

pytestmark = pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="trl is not installed")

GUARD = "if self.use_vllm and self.vllm_importance_sampling_correction:"


@pytest.fixture(scope="module")
def trl_is_block():
    """TRL's own IS-ratio block, compiled from the installed source."""
    trainer = pytest.importorskip("trl.trainer.grpo_trainer")
    lines = textwrap.dedent(inspect.getsource(trainer.GRPOTrainer._generate_and_score_completions)).splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == GUARD), None)
    if start is None:
        pytest.skip("this TRL has no vLLM importance-sampling block where 1.16.0 has it")
    indent = len(lines[start]) - len(lines[start].lstrip())
    body = []
    for line in lines[start + 1 :]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        body.append(line)
    return compile(textwrap.dedent("\n".join(body)), "trl-grpo-is-block", "exec")


def trl_ratio(block, old, sampling, mask, mode, clip_max, clip_min):
    me = types.SimpleNamespace(
        vllm_importance_sampling_mode=mode,
        vllm_importance_sampling_clip_max=clip_max,
        vllm_importance_sampling_clip_min=clip_min,
    )
    scope = dict(
        self=me,
        completion_mask=mask,
        tool_mask=None,
        old_per_token_logps=old,
        sampling_per_token_logps=sampling,
        torch=torch,
        math=math,
    )
    exec(block, scope)
    return scope["vllm_importance_sampling_ratio"].expand_as(old)  # (B, T) or (B, 1)


def batch(seed=0, b=16, t=40, drift=0.04):
    g = torch.Generator().manual_seed(seed)
    kw = dict(generator=g, dtype=torch.float64)
    old = torch.log_softmax(2.0 * torch.randn(b, t, 6, **kw), -1)[..., 0]
    sampling = old + drift * torch.randn(b, t, **kw) + (torch.rand(b, t, **kw) < 0.04) * torch.randn(b, t, **kw)
    lengths = torch.randint(3, t + 1, (b, 1), generator=g)
    mask = (torch.arange(t)[None, :] < lengths).to(torch.float64)
    return old, sampling, mask


def trl_correction(mode, clip_max, clip_min) -> Correction:
    """The Correction TRL's (mode, clip_max, clip_min) is (engines/trl.py's read_correction says the same)."""
    level, kind = mode.split("_")
    return Correction(
        is_level=level,
        is_mode=kind,
        is_cap=clip_max,
        is_floor=clip_min,
        clamp_log_ratio=False,
    )


MODES = ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
BOUNDS = [(3.0, None), (1.2, 0.8), (None, 0.9), (2.0, 0.5)]


@pytest.mark.parametrize(("clip_max", "clip_min"), BOUNDS)
@pytest.mark.parametrize("mode", MODES)
def test_vllm_importance_sampling_equals_trl(trl_is_block, mode, clip_max, clip_min):
    old, sampling, mask = batch()
    ref = trl_ratio(trl_is_block, old, sampling, mask, mode, clip_max, clip_min)
    w, keep, m = rollout_correction(old, sampling, mask, trl_correction(mode, clip_max, clip_min))
    valid = mask.bool()
    assert torch.equal(keep, mask)  # TRL never drops a token from the denominator
    assert float((w[valid] - ref[valid]).abs().max()) <= 1e-12 * max(1.0, float(ref[valid].abs().max()))
    assert float(w[valid].max()) > 0
    if mode.endswith("mask"):
        assert 0.0 < m["kept_token_fraction"] < 1.0 or mode.startswith("sequence")


def test_trl_default_is_sequence_mask_at_three():
    from trl import GRPOConfig

    fields = GRPOConfig.__dataclass_fields__
    assert fields["vllm_importance_sampling_mode"].default == "sequence_mask"
    assert fields["vllm_importance_sampling_clip_max"].default == 3.0
    assert fields["vllm_importance_sampling_clip_min"].default is None
    assert trl_correction("sequence_mask", 3.0, None) == parse_correction("is=sequence:mask=3.0/noclamp")


@pytest.mark.parametrize("delta", [0.0, 0.01, 0.05])
def test_off_policy_mask_equals_trl(delta):
    from trl import GRPOTrainer

    old, sampling, mask = batch(seed=2, drift=0.1)
    g = torch.Generator().manual_seed(3)
    adv = torch.randn(old.shape[0], 1, generator=g, dtype=torch.float64)
    ref = GRPOTrainer.get_off_policy_mask(adv, old, sampling, mask, delta).expand_as(old)
    w, keep, _ = rollout_correction(old, sampling, mask, Correction(opsm=delta), advantages=adv.expand_as(old))
    assert torch.equal(w, ref) and torch.equal(keep, mask)
    assert 0 < int((ref[:, 0] == 0).sum()) < old.shape[0] or delta == 0.05


@pytest.mark.parametrize("opsm", [None, 0.01])
@pytest.mark.parametrize("mode", MODES)
def test_trl_loss_with_correction_equals_trl(trl_is_block, mode, opsm):
    from trl_helpers import grpo_config, trainer_for, trl_loss, trl_method

    old, sampling, mask = batch(seed=4)
    g = torch.Generator().manual_seed(5)
    lp = old + 0.1 * torch.randn(old.shape, generator=g, dtype=torch.float64)
    adv = torch.randn(old.shape[0], generator=g, dtype=torch.float64)
    args = grpo_config(loss_type="dapo", max_completion_length=old.shape[1], off_policy_mask_threshold=opsm)
    trainer = trainer_for(args)
    trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
    ratio = trl_ratio(trl_is_block, old, sampling, mask, mode, 2.0, 0.5)
    inputs_extra = {"importance_sampling_ratio": ratio, "sampling_per_token_logps": sampling}
    original = trainer._compute_loss
    trainer._compute_loss = lambda model, inputs: original(model, {**inputs, **inputs_extra})
    ref_loss, ref_grad = trl_loss(trainer, lp, old, adv, mask, int(mask.sum()))
    trainer.use_vllm = False  # TRL without the vLLM correction: the correction must matter
    assert not torch.allclose(trl_loss(trainer, lp, old, adv, mask, int(mask.sum()))[1], ref_grad)
    trainer.use_vllm = True
    spec, agg, scale = trl_method(args, old.shape[0], int(mask.sum()))
    c = trl_correction(mode, 2.0, 0.5)
    if opsm is not None:
        c = Correction(**{**c.__dict__, "opsm": opsm})
    leaf = lp.clone().requires_grad_()
    adv_t = adv[:, None].expand_as(old)
    loss, _ = policy_loss_corrected(leaf, old, adv_t, mask, spec, agg, scale, sampling, c)
    loss.backward()
    loss = loss.detach()
    assert abs(float(loss) - float(ref_loss)) <= 1e-12 * max(1.0, abs(float(ref_loss)))
    assert float((leaf.grad - ref_grad).abs().max()) <= 1e-12 * max(1.0, float(ref_grad.abs().max()))


def policy_loss_corrected(lp, old, adv, mask, spec, agg, scale, rollout, c):
    from divclip.theory.losses import policy_loss

    return policy_loss(lp, old, adv, mask, spec, agg, loss_scale_factor=scale, rollout_log_prob=rollout, correction=c)
