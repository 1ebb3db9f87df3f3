"""verl `bypass_mode` REINFORCE with a per-token IS weight (form 'reinforce_is'): −A·sg(w)·log π, w = min(r, C) per
token (TIS), or r on [c, C] and 0 outside (IcePop).

verl's `compute_rollout_correction_weights` with old_log_prob the rollout's (bypass mode) and its
`compute_policy_loss_reinforce`. `divclip.theory.forms.reinforce_seq_is` is the same with one weight per sequence
and reuses the parameters and the torch code here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from divclip.theory.forms._form import Form, Param
from divclip.theory.forms._numpy import LOG_RATIO_CLAMP, _broadcast, _everywhere

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms

_IS_PARAMS = (
    Param(
        "rollout_is_threshold",
        2.0,
        "C: the IS weight is truncated at C (TIS), or zeroed above C with a lower threshold (IcePop)",
        above=0.0,
    ),
    Param(
        "rollout_is_threshold_lower",
        0.0,
        "c: with c > 0, weights outside [c, C] are zeroed (IcePop, "
        "verl's 'c_C' threshold string); 0 = plain truncation",
        at_least=0.0,
    ),
    Param(
        "rollout_is_batch_normalize",
        False,
        "True (written /rollout_is_batch_normalize=1): divide the weights by their batch mean (verl "
        "rollout_is_batch_normalize); False: off",
        kind="flag",
    ),
)


# ------------------------------------------------------------------------------------------ numpy
def weight(spec, q, r, adv):
    """w = min(r, C), or r·1[c <= r <= C] with IcePop, r's log clamped to ±20 as verl; refuses batch
    normalisation (a batch mean)."""
    q, r, adv = _broadcast(q, r, adv)
    r = np.exp(np.clip(np.log(r), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    if spec.param("rollout_is_batch_normalize"):
        raise ValueError(
            "reinforce_is with rollout_is_batch_normalize=1 divides by the batch's mean weight: "
            "its w is not a function of (q, r, A)"
        )
    cap, floor = spec.param("rollout_is_threshold"), spec.param("rollout_is_threshold_lower")
    if floor > 0:
        return np.where((r >= floor) & (r <= cap), r, 0.0)
    return np.minimum(r, cap)


def interval(spec, q, sign):
    (q,) = _broadcast(q)
    floor = spec.param("rollout_is_threshold_lower")
    if floor > 0:  # IcePop: the gradient is zeroed outside [c, C], whatever the sign of A
        return np.full_like(q, floor), np.full_like(q, spec.param("rollout_is_threshold"))
    return _everywhere(spec, q, sign)


# ------------------------------------------------------------------------------------------ torch
def _rollout_is_weights(log_prob, old_log_prob, mask, spec, level: str):
    """(w, raw) (B, T): verl's `compute_rollout_correction_weights` with old_log_prob the rollout's (bypass
    mode): raw = exp(clamp(log r, ±20))·m per token, or exp(clamp(Σ_t m·log r, ±20))·m per sequence; w = raw
    truncated at C (TIS) or zeroed outside [c, C] (IcePop); optionally divided by its batch mean where that
    mean exceeds 1e-8 (verl's Python `if`, here a torch.where)."""
    import torch

    from divclip.theory.loss_metrics import masked_mean_verl, masked_sum_verl

    with torch.no_grad():
        cap, floor = spec.param("rollout_is_threshold"), spec.param("rollout_is_threshold_lower")
        normalize = spec.param("rollout_is_batch_normalize")
        log_ratio = log_prob - old_log_prob  # (B, T)
        if level == "token":
            raw = torch.exp(torch.clamp(log_ratio, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP))
        else:
            seq = masked_sum_verl(log_ratio, mask, dim=-1).unsqueeze(-1)  # (B, 1)
            raw = torch.exp(torch.clamp(seq, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)).expand_as(log_ratio)
        raw = raw * mask
        if floor > 0:
            weights = torch.where((raw >= floor) & (raw <= cap), raw, torch.zeros_like(raw))
        else:
            weights = raw.clamp(max=cap)
        if normalize:
            if level == "token":
                mean = masked_mean_verl(weights, mask)
            else:
                seq_weights = masked_sum_verl(weights, mask, dim=-1) / (mask.sum(dim=-1) + 1e-8)  # (B,)
                seq_mask = (mask.sum(dim=-1) > 0).to(dtype=weights.dtype)
                mean = (seq_weights * seq_mask).sum() / seq_mask.sum().clamp_min(1e-8)
            weights = torch.where(mean > 1e-8, weights / mean, weights)
        return weights, raw


def _reinforce_is(log_prob, old_log_prob, advantages, mask, spec, level) -> PolicyTerms:
    import torch

    from divclip.theory.forms._kernels import PolicyTerms, _flag, _metric_ratio

    weights, raw = _rollout_is_weights(log_prob, old_log_prob, mask, spec, level)
    loss = -advantages * log_prob * weights  # verl's compute_policy_loss_reinforce, its product order
    with torch.no_grad():
        cap, floor = spec.param("rollout_is_threshold"), spec.param("rollout_is_threshold_lower")
        clipped_low = _flag(torch.lt, raw, floor) if floor > 0 else torch.zeros_like(raw)
        clipped = _flag(torch.gt, raw, cap).add_(clipped_low)  # truncated (or zeroed) above C, zeroed below c
    if level == "sequence":
        log_ratio, ratio = _metric_ratio(log_prob, old_log_prob)
        return PolicyTerms(loss, log_ratio, raw.detach(), clipped, clipped_low)
    return PolicyTerms(loss, None, None, clipped, clipped_low)  # the token ratio, formed only for the metrics


def loss(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """verl `bypass_mode` REINFORCE, IS weight per token: −A·log π·sg(w), w = min(r, C) per token."""
    return _reinforce_is(log_prob, old_log_prob, advantages, mask, spec, "token")


FORM = Form(
    "reinforce_is",
    "truncated IS",
    "−A·sg(w)·log π, w = min(r, C) per token (TIS), or r on [c, C] and 0 outside (IcePop)",
    ("verl:bypass_mode (REINFORCE, IS weight per token)",),
    params=_IS_PARAMS,
    uses_budget=False,
    weight=weight,
    interval=interval,
    example="ratio/reinforce_is",
    loss=loss,
)
