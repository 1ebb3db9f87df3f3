"""SAPO's soft gate (form 'sapo'): −A·σ(τ(r − 1))·4/τ, τ by the sign of A; no hard clip, no budget.

SAPO (arXiv:2511.20347; verl `sapo`, TRL `sapo`). Numpy weight: w = r·g(r), g(r) = 4σ(τ(r − 1))(1 − σ(τ(r − 1))) the
gate's slope (1 at r = 1), τ by the sign of A; 0 where |log r| > 20. w/r is the gate; for PPO's kept tokens it is
1. No interval (SAPO has no hard clip).

Aggregation: verl 0.9.1's `sapo` aggregates seq-mean-token-mean whatever loss_agg_mode says; the spec read from verl
sets `sapo_seq_mean=1`, and `aggregate` then does that (TRL's sapo, `sapo_seq_mean=0`, honours loss_agg_mode).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from scipy.special import expit

from divclip.theory.forms._form import CLAMP_LOG_RATIO, Form, Param
from divclip.theory.forms._numpy import _verl_ratio

TAU_MIN, TAU_MAX = 1e-6, 1e6
"""Allowed gate temperatures τ (the paper's defaults are 1 and 1.05): 4/τ and τ·(r - 1) stay finite in float32."""

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms
    from divclip.theory.spec import ClipSpec


# ------------------------------------------------------------------------------------------ numpy
def weight(spec, q, r, adv):
    """SAPO (form 'sapo'): w = r·4σ(1 − σ), σ = σ(τ(r − 1)), τ = tau_pos for A > 0 else tau_neg."""
    ratio, in_range = _verl_ratio(r)
    tau = np.where(adv > 0, spec.param("tau_pos"), spec.param("tau_neg"))
    x = tau * (ratio - 1.0)
    slope = 4.0 * expit(x) * expit(-x)  # σ(x)(1 − σ(x)) without cancellation for large |x|
    out = np.where(in_range, ratio * slope, 0.0)
    return np.broadcast_to(out, np.broadcast(q, r, adv).shape).copy()


# ------------------------------------------------------------------------------------------ torch
def loss(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> PolicyTerms:
    """SAPO (verl `sapo`): -A·f(r), f(r) = σ(τ(r - 1))·4/τ with τ = tau_pos for A > 0 else tau_neg. The soft
    gate's slope f'(r) = 4σ(1 - σ) is 1 at r = 1 and decays smoothly: no hard clip, so no clip fractions.
    verl's `sapo` always aggregates with seq-mean-token-mean, whatever loss_agg_mode says; here it is honoured,
    unless `sapo_seq_mean=1` (the spec read from verl; `aggregate` below)."""
    import torch

    from divclip.theory.forms._kernels import PolicyTerms, _flag, _ratio, _WithGradient, sequence_column

    with torch.no_grad():
        log_ratio, ratio, in_range = _ratio(spec, log_prob, old_log_prob, mask)
        pos, rest = _flag(torch.gt, advantages, 0.0), _flag(torch.le, advantages, 0.0)  # (B, T) τ+ / τ− tokens
        column = sequence_column(ratio)
        if column is not None:
            value, grad = _sapo_sequence(spec, column, in_range, pos, rest)
        else:
            value, grad = _sapo_token(spec, ratio, in_range, pos, rest)
        value.mul_(advantages)  # (−gate)·A, verl's −gate·A bit for bit
        grad.mul_(advantages)
    loss = _WithGradient.apply(log_prob, value, grad)
    return PolicyTerms(loss, log_ratio, ratio, None, None, grad=grad)


def _sapo_constants(spec, dtype, device):
    """(τ+, τ−, 4/τ+, 4/τ−) as Python floats holding values of the compute dtype, τ and 4/τ rounded as verl's (B, T)
    tensors of them are (float32: numpy's IEEE float32 division). Python numbers, not tensors: a tensor given as
    a scalar argument (alpha) would be read on the host."""
    import torch

    tau_pos, tau_neg = spec.param("tau_pos"), spec.param("tau_neg")
    if dtype == torch.float64:
        return tau_pos, tau_neg, 4.0 / tau_pos, 4.0 / tau_neg
    tau_pos, tau_neg = np.float32(tau_pos), np.float32(tau_neg)
    return float(tau_pos), float(tau_neg), float(np.float32(4.0) / tau_pos), float(np.float32(4.0) / tau_neg)


def _sapo_token(spec, ratio, in_range, pos, rest):
    """(−σ(τ(r − 1))·(4/τ), −4σ(1 − σ)·dr/d log π) per token, both (B, T), τ by the 0/1 flags pos / rest; verl's
    floating-point operations for the value (τ·(r − 1), sigmoid, times 4/τ), the gate's slope in closed form."""
    import torch

    tau_pos, tau_neg, q_pos, q_neg = _sapo_constants(spec, ratio.dtype, ratio.device)
    per_token = torch.mul(pos, tau_pos).add_(rest, alpha=tau_neg)  # (B, T) exactly τ+ or τ−
    sig = torch.sub(ratio, 1.0).mul_(per_token).sigmoid_()  # σ(τ(r − 1))
    grad = torch.addcmul(sig, sig, sig, value=-1.0).mul_(ratio).mul_(-4.0)  # −4σ(1 − σ)·r
    if in_range is not None:
        grad.mul_(in_range)  # verl's log-ratio clamp stops the gradient
    torch.mul(pos, q_pos, out=per_token).add_(rest, alpha=q_neg)  # (B, T) exactly 4/τ+ or 4/τ−
    return sig.mul_(per_token).neg_(), grad


def _sapo_sequence(spec, s, in_range, pos, rest):
    """`_sapo_token` at level='sequence': the gate and its slope once per sequence and sign of A, (B, 1), then
    picked per token by the sign flags (`_by_sign`). An s beyond the largest float counts as that float.

    Replaces `_sapo_token` on the (B, T) expansion of s; held equal to it (value bit for bit, gradient to
    rounding: σ·(1 − σ) here, σ − σ² there) by
    tests/theory/test_loss_fast_paths.py::test_sapo_sequence_path_equals_the_token_path."""
    import torch

    from divclip.theory.forms._kernels import _by_sign

    tau_pos, tau_neg, q_pos, q_neg = _sapo_constants(spec, s.dtype, s.device)
    dr = s.clamp(max=torch.finfo(s.dtype).max) if in_range is None else s * in_range  # (B, 1)
    sig_pos, sig_neg = torch.sigmoid(tau_pos * (s - 1.0)), torch.sigmoid(tau_neg * (s - 1.0))
    value = _by_sign(pos, rest, -(sig_pos * q_pos), -(sig_neg * q_neg))
    grad = _by_sign(pos, rest, (sig_pos * (1.0 - sig_pos)) * dr * -4.0, (sig_neg * (1.0 - sig_neg)) * dr * -4.0)
    return value, grad


def aggregate(terms, mask, rollout_is_weights, spec):
    """verl's sapo (`sapo_seq_mean=1`, what `from_engine('verl', ...)` reads): seq-mean-token-mean of the per-token
    loss times the rollout IS weights, whatever loss_agg_mode says. A plain sapo (TRL's) returns None: it honours
    loss_agg_mode."""
    from divclip.theory.loss_metrics import aggregate as aggregate_by_mode
    from divclip.theory.loss_metrics import masked_sum_finite

    if not spec.param("sapo_seq_mean"):
        return None
    loss_mat = terms.loss if rollout_is_weights is None else terms.loss * rollout_is_weights  # (B, T)
    return aggregate_by_mode(loss_mat, mask, "seq-mean-token-mean", None, masked_sum_finite)


FORM = Form(
    "sapo",
    "soft gate",
    "−A·σ(τ(r − 1))·4/τ, τ by the sign of A",
    ("arXiv:2511.20347", "verl:sapo", "trl:sapo"),
    uses_budget=False,
    weight=weight,
    params=(
        CLAMP_LOG_RATIO,
        *(
            Param(
                f"tau_{sign}",
                default,
                f"gate temperature τ for A {side}",
                above=0.0,
                at_most=TAU_MAX,
                at_least=TAU_MIN,
                why="the SAPO gate's 4/τ and τ·(r - 1) stay finite in float32",
                option="tau",
            )
            for sign, default, side in (("pos", 1.0, "> 0"), ("neg", 1.05, "<= 0"))
        ),
        Param(
            "sapo_seq_mean",
            False,
            "True (written /sapo_seq_mean=1): aggregate seq-mean-token-mean whatever loss_agg_mode says, as "
            "verl 0.9.1's sapo does (the spec `from_engine('verl', ...)` reads); False: honour "
            "loss_agg_mode (TRL's sapo)",
            kind="flag",
        ),
    ),
    weight_note="w = r·4σ(1 − σ), σ = σ(τ(r − 1)): r times the gate's slope; no interval (no hard clip)",
    example="sapo",
    levels=("token", "sequence"),
    loss=loss,
    aggregate=aggregate,
)
