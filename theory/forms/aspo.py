"""ASPO, the flipped IS weight for A > 0 (form 'aspo'; arXiv:2510.06062 §6, Steps 1-3, eq. 3).

A > 0: −A·r_old/r (weight 1/r), 0 above hi, a soft cap c below 1/c; A < 0: GRPO's max(−A·r, −A·lo), soft cap c above
c (soft cap: −A·sg(c)·log π), as the authors' code (Archer2.0).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from divclip.theory.forms._form import Form, Param
from divclip.theory.forms._numpy import _arrays, _p_free

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms
    from divclip.theory.spec import ClipSpec


# ------------------------------------------------------------------------------------------ numpy
def weight(spec, q, r, adv):
    """A > 0: 1/r (eq. 3's flipped weight), 0 above hi (Step 1), c below 1/c (Step 3's soft dual clip);
    A < 0: GRPO's r, 0 below lo, c above c."""
    q, r, adv = _arrays(q, r, adv)
    lo, hi = spec.ratio_bounds()
    c = spec.param("aspo_dual_c")
    with np.errstate(divide="ignore"):
        pos = np.where(r > hi, 0.0, np.where(r < 1.0 / c, c, 1.0 / r))
    neg = np.where(r < lo, 0.0, np.where(r > c, c, r))
    return np.where(adv > 0, pos, np.where(adv < 0, neg, r))


def interval(spec, q, sign):
    q = np.asarray(q, dtype=np.float64)
    lo, hi = spec.ratio_bounds()
    return (np.zeros_like(q), np.full_like(q, hi)) if sign > 0 else (np.full_like(q, lo), np.full_like(q, math.inf))


# ------------------------------------------------------------------------------------------ torch
def loss(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> PolicyTerms:
    """ASPO (arXiv:2510.06062 §6). A > 0: Step 1 masks r > hi; Step 2 flips the weight, r̂ = π_old·π/sg(π²)
    (eq. 3), whose value is 1/r and whose gradient weight is 1/r (App. A.2 eq. 12); Step 3's soft dual clip caps
    the weight at c where 1/r > c, as CISPO does: loss −A·sg(c)·log π. A < 0: GRPO's max(−A·r, −A·lo), and the
    same soft cap where r > c. The soft cap on both signs follows the authors' code (Archer2.0's
    compute_policy_loss_archer), which the paper names as its implementation."""
    import torch

    from divclip.theory.forms._kernels import PolicyTerms, _clamped_ratio, _flag, _signs, _WithGradient, ratio_bounds

    lo, hi = ratio_bounds(spec)  # a compile-time constant under torch.compile
    c = spec.param("aspo_dual_c")
    with torch.no_grad():
        log_ratio, ratio, in_range = _clamped_ratio(log_prob, old_log_prob)
        adv_pos, adv_neg = _signs(advantages)
        masked_pos = _flag(torch.gt, ratio, hi).mul_(adv_pos)  # Step 1: gradient 0, value −A/hi
        masked_neg = _flag(torch.lt, ratio, lo).mul_(adv_neg)  # GRPO's lower clip: gradient 0, value −A·lo
        dual_pos = _flag(torch.lt, ratio, 1.0 / c).mul_(adv_pos)  # Step 3 for A > 0: 1/r > c
        dual_neg = _flag(torch.gt, ratio, c).mul_(adv_neg)  # the dual clip of A < 0: r > c
        dual = dual_pos + dual_neg
        plain_pos = adv_pos - masked_pos - dual_pos  # 1/r, with gradient
        plain_neg = adv_neg - masked_neg - dual_neg  # r, with gradient
        flipped = ratio.clamp(max=hi).reciprocal()  # 1/min(r, hi): eq. 3's value, the masked tokens' 1/hi
        value = flipped * (plain_pos + masked_pos) + ratio.clamp(min=lo) * (plain_neg + masked_neg)
        loss_value = -advantages * (value + c * log_prob * dual)  # the soft cap's value is −A·c·log π
        weight = (flipped * plain_pos + ratio * plain_neg).mul_(in_range).add_(dual, alpha=c)
        grad = -advantages * weight
    loss = _WithGradient.apply(log_prob, loss_value, grad)
    return PolicyTerms(loss, log_ratio, ratio, masked_pos + masked_neg, masked_neg, dual, grad=grad)


FORM = Form(
    "aspo",
    "hard clip",
    "A > 0: −A·r_old/r (weight 1/r), 0 above hi, soft cap c below 1/c; A < 0: max(−A·r, −A·lo), soft cap c "
    "above c (soft cap: −A·sg(c)·log π)",
    ("arXiv:2510.06062 §6 eq. 3", "arXiv:2510.06062 App. A.2 eq. 12"),
    params=(
        Param(
            "aspo_dual_c",
            3.0,
            "the soft dual-clip cap c on the IS weight (Step 3; 3 in the authors' "
            "code, github.com/wizard-III/Archer2.0): A > 0 tokens with r < 1/c and A < 0 tokens with r > c "
            "keep weight c",
            above=1.0,
        ),
    ),
    weight=weight,
    interval=interval,
    check=_p_free("aspo"),
    loss=loss,
    example="ratio:0.2:0.2/aspo",  # App. B: ε = 0.2,
)
