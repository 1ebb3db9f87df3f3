"""CISPO (form 'cispo'): −sg(clip(r, lo, hi))·A·log π, the IS weight clipped whatever the sign of A.

MiniMax's CISPO (arXiv:2506.13585; verl `cispo`). Numpy weight: w = clip(r, lo(q), hi(q)) whatever the sign of A:
every token keeps a gradient, so the keep interval is (0, ∞).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from divclip.theory.forms._form import CLAMP_LOG_RATIO, EXP_DTYPE, Form
from divclip.theory.forms._numpy import _shaped, _spec_ratio, clip_bounds

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms
    from divclip.theory.spec import ClipSpec


# ------------------------------------------------------------------------------------------ numpy
def weight(spec, q, r, adv):
    """CISPO (form 'cispo'): w = clip(r, lo, hi), both bounds whatever the sign of A."""
    ratio, _ = _spec_ratio(spec, r)  # verl clamps log r at ±20; slime does not
    lo, hi = clip_bounds(spec, q)
    return np.broadcast_to(np.minimum(np.maximum(ratio, lo), hi), np.broadcast(ratio, adv).shape).copy()


def interval(spec, q, sign: int):
    """(0, ∞) for both signs: CISPO caps the IS weight at the bounds but never zeroes a gradient."""
    return _shaped(q, 0.0, np.inf)


# ------------------------------------------------------------------------------------------ torch
def loss(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> PolicyTerms:
    """CISPO (verl `cispo`): -sg(clip(r, lo, hi))·A·log π. Clipping bounds the IS weight only, on both sides
    whatever the sign of A, so every token keeps a gradient."""
    import torch

    from divclip.theory.forms._kernels import (
        PolicyTerms,
        _const,
        _flag,
        _per_token_clip,
        _ratio,
        _WithGradient,
        ratio_bounds,
    )

    with torch.no_grad():
        log_ratio, ratio, _ = _ratio(spec, log_prob, old_log_prob, mask)
        if spec.p_dependent:
            clipped_ratio = _per_token_clip(spec, ratio, old_log_prob, None, ratio_from=log_prob)
        else:
            clipped_ratio = torch.clamp(ratio, *ratio_bounds(spec))
        clipped, clipped_low = _flag(torch.ne, clipped_ratio, ratio), _flag(torch.gt, clipped_ratio, ratio)
        grad = torch.mul(clipped_ratio, advantages).neg_()  # (−clip(r))·A: verl's product order, its gradient
        value = grad * _const(log_prob)
    loss = _WithGradient.apply(log_prob, value, grad)
    return PolicyTerms(loss, log_ratio, ratio, clipped, clipped_low, grad=grad)


FORM = Form(
    "cispo",
    "truncated IS",
    "−sg(clip(r, lo, hi))·A·log π",
    ("arXiv:2506.13585", "verl:cispo"),
    weight=weight,
    interval=interval,
    example="ratio:0.2:0.2/cispo",
    params=(CLAMP_LOG_RATIO, EXP_DTYPE),
    loss=loss,
)
