"""GPG (form 'gpg'; arXiv:2504.02546, verl `gpg`, and verl `bypass_mode` REINFORCE without IS weights): −A·log π,
the plain policy gradient, weight 1 on every token, no ratio and no clip.

Reproduces verl 0.9.1's `gpg` (`verl.trainer.ppo.core_algos`), value and gradient, for every `loss_agg_mode`
(tests/theory/test_losses_verl_atlas.py calls verl's own function): the per-token loss is built from verl's
floating-point operations in verl's order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from divclip.theory.forms._form import Form
from divclip.theory.forms._numpy import _broadcast, _everywhere

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms


# ------------------------------------------------------------------------------------------ numpy
def weight(spec, q, r, adv):
    q, r, adv = _broadcast(q, r, adv)
    return np.ones_like(r)


# ------------------------------------------------------------------------------------------ torch
def loss(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """GPG (verl `gpg`, and `bypass_mode` REINFORCE without IS weights): −log π·A, gradient −A·∇log π."""
    import torch

    from divclip.theory.forms._kernels import PolicyTerms, _WithGradient

    with torch.no_grad():
        neg_adv = -advantages  # (B, T) the gradient −A; log π·(−A) is verl's (−log π)·A bit for bit
        value = log_prob * neg_adv
    loss = _WithGradient.apply(log_prob, value, neg_adv)  # −(g·A) = g·(−A) exactly
    return PolicyTerms(loss, None, None, None, None, grad=neg_adv)  # the token ratio: for the metrics only


FORM = Form(
    "gpg",
    "truncated IS",
    "−A·log π: the plain policy gradient, weight 1 on every token, no ratio and no clip",
    ("arXiv:2504.02546", "verl:gpg", "verl:bypass_mode (REINFORCE, no IS weight)"),
    uses_budget=False,
    weight=weight,
    interval=_everywhere,
    example="ratio/gpg",
    loss=loss,
)
