"""GPPO, the gradient-preserving clip (form 'gppo'; arXiv:2508.07629): CE-GPPO (`cegppo`) at β1 = β2 = 1.

−A·r inside [lo, hi]; −A·lo·r/sg(r) for A < 0, r < lo; −A·hi·r/sg(r) for A > 0, r > hi: clipped tokens keep gradient
weight lo or hi. Its forward value is the clip form's. The weight, interval and torch terms here take CE-GPPO's β1,
β2 (arXiv:2509.20712 eqs. 8, 10); `divclip.theory.forms.cegppo` reuses them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from divclip.theory.forms._form import Form
from divclip.theory.forms._numpy import LOG_RATIO_CLAMP, _arrays, _p_free

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms
    from divclip.theory.spec import ClipSpec


# ------------------------------------------------------------------------------------------ numpy
def _gppo_weight(spec, q, r, adv, beta_low: float, beta_high: float):
    """CE-GPPO's F (arXiv:2509.20712 eq. 10): β1·lo below lo for A < 0, β2·hi above hi for A > 0, else r."""
    q, r, adv = _arrays(q, r, adv)
    lo, hi = spec.ratio_bounds()
    w = np.where((adv < 0) & (r < lo), beta_low * lo, r)
    w = np.where((adv > 0) & (r > hi), beta_high * hi, w)
    return w * (np.abs(np.log(r)) <= LOG_RATIO_CLAMP)  # verl's ±20 clamp stops the gradient too


def _gppo_interval(spec, q, sign, beta_low: float, beta_high: float):
    """Where w ≠ 0: everywhere, except beyond a bound whose β is 0 (β = 0 is PPO's zero gradient there)."""
    q = np.asarray(q, dtype=np.float64)
    lo, hi = spec.ratio_bounds()
    if sign > 0:
        return np.zeros_like(q), np.full_like(q, hi if beta_high == 0 else math.inf)
    return np.full_like(q, lo if beta_low == 0 else 0.0), np.full_like(q, math.inf)


# ------------------------------------------------------------------------------------------ torch
def _gppo_terms(log_prob, old_log_prob, advantages, spec, beta_low: float, beta_high: float) -> PolicyTerms:
    """CE-GPPO (arXiv:2509.20712 eq. 8): ℓ = δ·A inside [lo, hi]; β1·lo/sg(δ)·δ·A for A < 0, δ < lo;
    β2·hi/sg(δ)·δ·A for A > 0, δ > hi (the loss is −ℓ). Its gradient (eq. 10) has weight β1·lo, β2·hi or δ."""
    import torch

    from divclip.theory.forms._kernels import PolicyTerms, _clamped_ratio, _flag, _signs, _WithGradient, ratio_bounds

    lo, hi = ratio_bounds(spec)  # a compile-time constant under torch.compile
    with torch.no_grad():
        log_ratio, ratio, in_range = _clamped_ratio(log_prob, old_log_prob)
        adv_pos, adv_neg = _signs(advantages)
        clipped_low = _flag(torch.lt, ratio, lo).mul_(adv_neg)  # (B, T)
        clipped_high = _flag(torch.gt, ratio, hi).mul_(adv_pos)
        kept = 1.0 - clipped_low - clipped_high
        value = ratio * kept + (beta_low * lo) * clipped_low + (beta_high * hi) * clipped_high  # the IS weight
        loss_value = -advantages * value
        # d/d log π of c/sg(δ)·δ is c (times the clamp's in_range), of δ it is δ: the weight is `value` itself
        grad = loss_value * in_range
    loss = _WithGradient.apply(log_prob, loss_value, grad)
    return PolicyTerms(loss, log_ratio, ratio, clipped_low + clipped_high, clipped_low, grad=grad)


def loss(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> PolicyTerms:
    """GPPO (arXiv:2508.07629): CE-GPPO with β1 = β2 = 1; its forward value is the clip form's."""
    return _gppo_terms(log_prob, old_log_prob, advantages, spec, 1.0, 1.0)


FORM = Form(
    "gppo",
    "truncated IS",
    "−A·r inside [lo, hi]; −A·lo·r/sg(r) for A < 0, r < lo; −A·hi·r/sg(r) for A > 0, r > hi: clipped tokens keep "
    "gradient weight lo or hi",
    ("arXiv:2508.07629", "arXiv:2509.20712 eq. 8 (β1 = β2 = 1)"),
    weight=lambda spec, q, r, adv: _gppo_weight(spec, q, r, adv, 1.0, 1.0),
    interval=lambda spec, q, sign: _gppo_interval(spec, q, sign, 1.0, 1.0),
    check=_p_free("gppo"),
    loss=loss,
    example="ratio:0.2:0.28/gppo",  # the authors’ recipe widths (github.com/suu990901/KlearReasoner),
)
