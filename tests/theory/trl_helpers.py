"""TRL 1.16's own policy loss on given per-token log-probs: `GRPOTrainer._compute_loss`, called in process.

`_compute_loss(model, inputs)` is the smallest real entry point: it runs TRL's log-prob gathering
(`_get_per_token_logps_and_entropies`), its ratio, clip and aggregation code for every `loss_type`. The trainer is
built with `object.__new__` and given the attributes `GRPOTrainer.__init__` sets from a real `GRPOConfig`
(`trainer_for`; tests/theory/test_losses_trl.py checks them against a fully constructed GRPOTrainer). The model is
a stub whose forward returns the log-probs we choose, in the shape of TRL's fused LM head (`log_probs`, `entropy`
over prompt + completion), so the gradient TRL's loss sends back lands on our (B, T) leaf. The accelerator is a
one-process stand-in (no reduction, no gather), which is what Accelerate does on one process.
"""

from __future__ import annotations

import contextlib
import functools
import tempfile
import types
from collections import defaultdict

import numpy as np
import torch

from divclip.theory.losses import ClipSpec

CLIPPED = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")  # the loss types that run PPO's clip
VESPO_FIELDS = ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")
PROMPT = 2  # prompt tokens in front of every completion (TRL slices them off)


class OneProcess:
    """Accelerate's behaviour on a single process, as far as `_compute_loss` uses it."""

    num_processes = 1
    is_main_process = True

    def autocast(self):
        return contextlib.nullcontext()

    def reduce(self, t, reduction="sum"):
        return t

    def gather(self, t):
        return t

    gather_for_metrics = gather


class GivenLogProbs(torch.nn.Module):
    """A causal LM stand-in whose fused-head output is the completion log-probs `lp` (B, T) we chose."""

    def __init__(self, lp, prefixed: bool = False):
        super().__init__()
        self.lp, self.prefixed = lp, prefixed  # prefixed: lp is already (B, P + T) (the benchmark's leaf)
        self.entropy = None

    def forward(self, input_ids, attention_mask, labels=None, fused_lm_head=False, **_):
        assert fused_lm_head, "TRL 1.16 asks the model for its fused-head log-probs"
        log_probs = self.lp
        if not self.prefixed:
            pad = torch.zeros(self.lp.shape[0], PROMPT, dtype=self.lp.dtype)
            log_probs = torch.cat([pad, self.lp], dim=1)  # (B, P + T), as the fused head returns them
        if self.entropy is None or self.entropy.shape != log_probs.shape:
            self.entropy = torch.zeros_like(log_probs, requires_grad=False)
        return types.SimpleNamespace(log_probs=log_probs, entropy=self.entropy)


@functools.cache
def grpo_config(**fields):
    """A real `trl.GRPOConfig` with these fields (cached: TrainingArguments' checks take a few ms)."""
    from trl import GRPOConfig

    return GRPOConfig(output_dir=tempfile.mkdtemp(prefix="divclip-trl-"), report_to="none", use_cpu=True, **fields)


# The attributes GRPOTrainer.__init__ copies from its GRPOConfig, as (attribute, field); epsilon_high is derived.
COPIED = (
    ("loss_type", "loss_type"),
    ("importance_sampling_level", "importance_sampling_level"),
    ("off_policy_mask_threshold", "off_policy_mask_threshold"),
    ("top_entropy_quantile", "top_entropy_quantile"),
    ("use_vllm", "use_vllm"),
    ("vllm_importance_sampling_correction", "vllm_importance_sampling_correction"),
    ("max_completion_length", "max_completion_length"),
    ("beta", "beta"),
    ("epsilon_low", "epsilon"),
)


def trainer_for(args, cls=None):
    """A GRPOTrainer (or subclass `cls`; not constructed: no model, no data) holding what `_compute_loss` reads
    from `args`."""
    from trl import GRPOTrainer

    trainer = object.__new__(cls or GRPOTrainer)
    for attr, name in COPIED:
        setattr(trainer, attr, getattr(args, name))
    trainer.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    trainer.args = args
    trainer.aux_loss_enabled = False
    trainer._entropy_bonus_enabled = False
    trainer.accelerator = OneProcess()
    trainer.current_gradient_accumulation_steps = 1
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    return trainer


def trl_inputs(old_log_prob, advantages, mask, num_items_in_batch):
    """The batch dict `_compute_loss` takes; advantages (B,) as TRL's own, mask (B, T) 0/1."""
    b, t = old_log_prob.shape
    ones = functools.partial(torch.ones, dtype=torch.long)
    return {
        "prompt_ids": ones(b, PROMPT),
        "prompt_mask": ones(b, PROMPT),
        "completion_ids": ones(b, t),
        "completion_mask": mask.long(),
        "advantages": advantages,
        "old_per_token_logps": old_log_prob,
        "num_items_in_batch": torch.as_tensor(num_items_in_batch),
    }


def trl_loss(trainer, log_prob, old_log_prob, advantages, mask, num_items_in_batch, backward=True):
    """(TRL's loss, its gradient with respect to log_prob (B, T) or None): `trainer._compute_loss` in train mode."""
    lp = log_prob.detach().clone().requires_grad_(backward)
    model = GivenLogProbs(lp)
    trainer.model = model  # `model.training` decides train/eval mode
    loss = trainer._compute_loss(model, trl_inputs(old_log_prob, advantages, mask, num_items_in_batch))
    if not backward:
        return loss.detach(), None
    loss.backward()
    return loss.detach(), lp.grad


def _f32(x: float) -> float:
    """TRL builds sapo's temperatures and VESPO's k, λ with torch.where on Python floats: float32 values."""
    return float(np.float32(x))


def trl_method(args, batch: int, num_items: float):
    """(ClipSpec, loss_agg_mode, loss_scale_factor) of a GRPOConfig on one process, one accumulation step."""
    level, loss_type = args.importance_sampling_level, args.loss_type
    eps_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    if loss_type in CLIPPED:
        spec = ClipSpec(
            "ratio",
            eps_low=args.epsilon,
            eps_high=eps_high,
            level=level,
            form="luspo" if loss_type == "luspo" else "clip",
            params={"dual_clip_c": args.delta, "clamp_log_ratio": False},
        )
    elif loss_type == "cispo":
        spec = ClipSpec(form="cispo_cap", level=level, params={"cispo_cap": eps_high, "clamp_log_ratio": False})
    elif loss_type == "sapo":
        spec = ClipSpec(
            form="sapo",
            level=level,
            params={
                "tau_pos": _f32(args.sapo_temperature_pos),
                "tau_neg": _f32(args.sapo_temperature_neg),
                "clamp_log_ratio": False,
            },
        )
    else:  # vespo: its own sequence weight whatever the level
        spec = ClipSpec(form="vespo", params={k: _f32(getattr(args, k)) for k in VESPO_FIELDS})
    global_tokens = float(max(num_items, 1))  # num_items_in_batch.clamp(min=1) / processes · accum / steps_per_gen
    agg = {
        "grpo": ("seq-mean-token-mean-all", None),
        "sapo": ("seq-mean-token-mean-all", None),
        "bnpo": ("token-mean", None),
        "dr_grpo": ("token-sum-norm", float(batch * args.max_completion_length)),
        "luspo": ("seq-mean-token-sum-all", None),
    }.get(loss_type, ("token-sum-norm", global_tokens))
    return spec, *agg
