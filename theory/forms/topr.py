"""TOPR, the tapered IS weight by the sign of A (form 'topr'; arXiv:2503.14286 §3, eqs. 7-8).

−sg(w)·A·log π with w = clip(π(τ)/μ(τ), a⁺, b⁺) for A ≥ 0 and clip(π(τ)/μ(τ), a⁻, b⁻) for A < 0, π(τ)/μ(τ) the
sequence's ratio. The numpy weight reads r as that sequence ratio (a one-token sequence's r is the token's).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from divclip.theory.forms._form import Form, Param
from divclip.theory.forms._numpy import _arrays

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms
    from divclip.theory.spec import ClipSpec


# ------------------------------------------------------------------------------------------ numpy
def _topr_limits(spec):
    return (
        (spec.param("topr_pos_low"), spec.param("topr_pos_high")),
        (spec.param("topr_neg_low"), spec.param("topr_neg_high")),
    )


def weight(spec, q, r, adv):
    """r is the sequence ratio π(τ)/μ(τ): w = clip(r, a⁺, b⁺) for A ≥ 0, clip(r, a⁻, b⁻) for A < 0."""
    q, r, adv = _arrays(q, r, adv)
    (a_pos, b_pos), (a_neg, b_neg) = _topr_limits(spec)
    return np.where(adv >= 0, np.clip(r, a_pos, b_pos), np.clip(r, a_neg, b_neg))


def _topr_check(spec):
    for sign, (a, b) in zip(("pos", "neg"), _topr_limits(spec)):
        if a > b:
            raise ValueError(f"form 'topr' needs topr_{sign}_low <= topr_{sign}_high, got {a!r} > {b!r}")


# ------------------------------------------------------------------------------------------ torch
def loss(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> PolicyTerms:
    """TOPR (arXiv:2503.14286 §3 eqs. 7-8): −sg(w)·A·log π per token, w = clip(π(τ)/μ(τ), a⁺, b⁺) for A >= 0
    and clip(π(τ)/μ(τ), a⁻, b⁻) for A < 0, with π(τ)/μ(τ) = exp(Σ_t log r_t) over the sequence's unmasked
    tokens (each log r_t clamped to ±20). Summed over a sequence's tokens this is the paper's
    w·R(τ)·∇log π(τ); the aggregation (`loss_agg_mode`) scales it as for any form. `ratio` in the terms is the
    token ratio (for the metrics); `clipped` marks tokens whose sequence ratio the truncation changed."""
    import torch

    from divclip.theory.forms._kernels import PolicyTerms, _clamped_ratio, _flag, _WithGradient

    (a_pos, b_pos), (a_neg, b_neg) = (
        (spec.param("topr_pos_low"), spec.param("topr_pos_high")),
        (spec.param("topr_neg_low"), spec.param("topr_neg_high")),
    )
    with torch.no_grad():
        log_ratio, ratio, _ = _clamped_ratio(log_prob, old_log_prob)
        seq_log = (log_ratio * mask).sum(dim=-1, keepdim=True)  # (B, 1) log π(τ)/μ(τ)
        adv_nonneg = _flag(torch.ge, advantages, 0.0)
        w_pos = _tapered(seq_log, a_pos, b_pos).expand_as(advantages)  # (B, T)
        w_neg = _tapered(seq_log, a_neg, b_neg).expand_as(advantages)
        weight = torch.lerp(w_neg, w_pos, adv_nonneg)  # exactly w_pos where A >= 0, w_neg elsewhere
        below = torch.lerp(
            _flag(torch.lt, seq_log, _log(a_neg)).expand_as(advantages),
            _flag(torch.lt, seq_log, _log(a_pos)).expand_as(advantages),
            adv_nonneg,
        )
        above = torch.lerp(
            _flag(torch.gt, seq_log, _log(b_neg)).expand_as(advantages),
            _flag(torch.gt, seq_log, _log(b_pos)).expand_as(advantages),
            adv_nonneg,
        )
        grad = -advantages * weight
        loss_value = grad * log_prob
    loss = _WithGradient.apply(log_prob, loss_value, grad)
    return PolicyTerms(loss, log_ratio, ratio, below + above, below, grad=grad)


def _log(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf


def _tapered(seq_log, low: float, high: float):
    """clip(exp(seq_log), low, high), computed in log space so a long sequence's ratio never overflows."""
    return seq_log.clamp(_log(low), _log(high)).exp()


FORM = Form(
    "topr",
    "truncated IS",
    "−sg(w)·A·log π with w = clip(π(τ)/μ(τ), a⁺, b⁺) for A ≥ 0 and clip(π(τ)/μ(τ), a⁻, b⁻) for A < 0, "
    "π(τ)/μ(τ) the sequence's ratio (canonical a⁺ = b⁺ = 1, a⁻ = 0, b⁻ = 1)",
    ("arXiv:2503.14286 §3 eq. 7", "arXiv:2503.14286 §3 eq. 8"),
    params=(
        Param(
            "topr_pos_low", 1.0, "a⁺: lower truncation of the ratio for A >= 0 (§3: 1, SFT on positives)", at_least=0.0
        ),
        Param("topr_pos_high", 1.0, "b⁺: upper truncation of the ratio for A >= 0 (§3: 1)", at_least=0.0),
        Param("topr_neg_low", 0.0, "a⁻: lower truncation of the ratio for A < 0 (§3: 0)", at_least=0.0),
        Param("topr_neg_high", 1.0, "b⁻: upper truncation of the ratio for A < 0 (§3: 1)", at_least=0.0),
    ),
    uses_budget=False,
    token_level=False,
    weight=weight,
    weight_note="TOPR weights a token by its whole sequence's ratio π(τ)/μ(τ) = Π_t r_t: here r is that sequence "
    "ratio (a one-token sequence's r is the token's), and every token keeps a gradient unless a "
    "truncation limit is 0 and the ratio reaches it",
    check=_topr_check,
    loss=loss,
    example="ratio/topr",  # §3: a⁺ = b⁺ = 1, a⁻ = 0, b⁻ = 1,
)
