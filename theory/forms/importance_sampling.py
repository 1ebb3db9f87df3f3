"""The importance-sampled policy gradient (form 'importance_sampling'): −A·r with r = π_θ/π_old differentiable, no
clip and no truncation: every token keeps the gradient −A·r·∇log π.

SkyRL 0.3.0's `importance_sampling` policy loss (`ppo_utils.importance_sampling_loss`, Tinker's
`importance_sampling`): −(exp(log π − log π_old)·A) per token, summed over the loss mask, with the plain exp in the
input's dtype (no ±20 clamp, no float32 exp, no off-policy correction): `ratio/importance_sampling/noclamp` is it,
value and gradient (tests/engines/test_parity_skyrl.py calls SkyRL's own function). With the clamp (the default,
verl's ±20 on log r before exp) the gradient is 0 where |log r| > 20, as autograd through the clamp gives.

Numpy weight: w = r (the raw r with `/noclamp`; r·1[|log r| <= 20] under the clamp), on every token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from divclip.theory.forms._form import CLAMP_LOG_RATIO, Form
from divclip.theory.forms._numpy import _broadcast, _everywhere, _spec_ratio

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms


# ------------------------------------------------------------------------------------------ numpy
def weight(spec, q, r, adv):
    """w = r: ∂(−A·r)/∂log π = −A·r; 0 beyond |log r| = 20 under the clamp (which stops the gradient)."""
    q, r, adv = _broadcast(q, r, adv)
    ratio, kept = _spec_ratio(spec, r)
    return np.where(kept, ratio, 0.0)


# ------------------------------------------------------------------------------------------ torch
def loss(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """−A·r (SkyRL's −(r·A); negation is exact, the product commutes), gradient −A·r, 0 where the clamp cut."""
    import torch

    from divclip.theory.forms._kernels import PolicyTerms, _token_ratio, _WithGradient

    with torch.no_grad():
        log_ratio, ratio, in_range = _token_ratio(log_prob, old_log_prob, spec.param("clamp_log_ratio"))
        value = torch.mul(ratio, advantages).neg_()  # (B, T) −(r·A)
        grad = value if in_range is None else value * in_range
    loss = _WithGradient.apply(log_prob, value, grad)
    return PolicyTerms(loss, log_ratio, ratio, None, None, grad=grad)


FORM = Form(
    "importance_sampling",
    "truncated IS",
    "−A·r: the importance-sampled policy gradient, r differentiable, no clip and no truncation",
    ("skyrl:importance_sampling", "tinker:importance_sampling"),
    params=(CLAMP_LOG_RATIO,),
    uses_budget=False,
    weight=weight,
    interval=_everywhere,
    example="ratio/importance_sampling/noclamp",
    loss=loss,
)
