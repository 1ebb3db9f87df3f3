"""DRO (form 'dro'; arXiv:2405.19107, verl `dro`): −(A·log π − ½β·(log r)²), the policy gradient with a quadratic
log-ratio penalty, no clip; log r unclamped, as verl's.

Reproduces verl 0.9.1's `dro` (`verl.trainer.ppo.core_algos`), value and gradient, for every `loss_agg_mode`
(tests/theory/test_losses_verl_atlas.py calls verl's own function): the per-token loss is built from verl's
floating-point operations in verl's order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from divclip.theory.forms._form import Form, Param
from divclip.theory.forms._numpy import _broadcast

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms


# ------------------------------------------------------------------------------------------ numpy
def weight(spec, q, r, adv):
    """∂ℓ/∂log π = −A + β·log r, so w = 1 − β·log r / A; NaN at A = 0, where −A·w cannot carry the
    penalty's gradient β·log r (the frame's w is undefined there)."""
    q, r, adv = _broadcast(q, r, adv)
    beta = spec.param("dro_beta")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(adv != 0, 1.0 - beta * np.log(r) / np.where(adv != 0, adv, 1.0), np.nan)


# ------------------------------------------------------------------------------------------ torch
def loss(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """DRO (verl `dro`): −(log π·A − ½β·(log r)²), log r unclamped, in verl's operations (the value is bit-equal);
    its gradient −A + β·log r is attached in closed form."""
    import torch

    from divclip.theory.forms._kernels import LOG_RATIO_CLAMP, PolicyTerms, _WithGradient

    beta = spec.param("dro_beta")
    with torch.no_grad():
        log_ratio = log_prob - old_log_prob  # (B, T)
        value = -(log_prob * advantages - 0.5 * beta * log_ratio.square())
        grad = torch.add(-advantages, log_ratio, alpha=beta)  # −A + β·log r
        metric_log_ratio = log_ratio.clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # reused: the diagnostics' log r
    loss = _WithGradient.apply(log_prob, value, grad)
    return PolicyTerms(loss, metric_log_ratio, None, None, None, grad=grad)  # ratio None: exp(log r), if asked


FORM = Form(
    "dro",
    "penalty",
    "−(A·log π − ½β·(log r)²): policy gradient with a quadratic log-ratio penalty, no clip",
    ("arXiv:2405.19107", "verl:dro"),
    params=(
        Param(
            "dro_beta",
            0.05,
            "β of the quadratic penalty ½β·(log r)² (verl policy_loss.dro_beta; verl has no default and refuses none)",
            above=0.0,
        ),
    ),
    uses_budget=False,
    weight=weight,
    weight_note="w = 1 − β·log r / A: the penalty pulls r back to 1 whatever the sign of A; w is undefined "
    "(NaN) at A = 0, where the gradient is β·log r alone; no interval (where w changes sign depends "
    "on |A|, not on its sign)",
    example="ratio/dro",
    loss=loss,
)
