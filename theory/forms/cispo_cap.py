"""TRL's cispo (form 'cispo_cap'): −sg(min(r, c))·A·log π, the IS weight capped at an absolute c, no lower bound.

ScaleRL's ε_max (arXiv:2510.13786), TRL 1.16 `cispo`, in TRL's arithmetic (GRPOTrainer._compute_loss, the same
operations in the same order), so that with `clamp_log_ratio=False` its per-token loss is TRL's bit for bit
(tests/theory/test_losses_trl.py). `cispo_cap_as_cispo` writes it as the two-sided `cispo` form where one exists.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from divclip.theory.forms._form import CLAMP_LOG_RATIO, Form, Param

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms


def cispo_cap_as_cispo(spec):
    """The two-sided `cispo` spec (MiniMax's CISPO, verl's and slime's `cispo`) equal to a `cispo_cap` spec:
    lower width 1 (bound 0, which r never crosses) and upper width c − 1; exact in float64 (1 + (c − 1) == c for
    c >= 1). A ValueError for a cap at or below 1 or the sequence ratio, which the two-sided form cannot say."""
    cap = spec.param("cispo_cap")
    if cap <= 1.0 or spec.level != "token":
        raise ValueError(
            f"cispo clips the token ratio to [1 − ε_low, 1 + ε_high]: an IS weight cap of {cap:g} at "
            f"level {spec.level!r} has no two-sided cispo form (it needs a cap above 1, token level)"
        )
    return dataclasses.replace(  # a new ClipSpec (of spec's class: divclip.theory.spec imports the forms)
        spec,
        measure="ratio",
        delta=None,
        eps_low=1.0,
        eps_high=cap - 1.0,
        form="cispo",
        params={"clamp_log_ratio": spec.param("clamp_log_ratio")},
    )


# ------------------------------------------------------------------------------------------ numpy
def weight(spec, q, r, adv):
    """w = min(r, c): ℓ = −sg(min(r, c))·A·log π has ∂ℓ/∂log π = −A·min(r, c); no token loses its gradient."""
    q, r, adv = np.broadcast_arrays(np.asarray(q, float), np.asarray(r, float), np.asarray(adv, float))
    return np.minimum(r, spec.param("cispo_cap"))


# ------------------------------------------------------------------------------------------ torch
def loss(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """TRL cispo: −sg(min(r, c))·A·log π (r the sequence ratio at level='sequence'). Only the upper cap exists,
    so `clipped` marks r > c and nothing is clipped below."""
    import torch

    from divclip.theory.forms._kernels import PolicyTerms, _flag, _ratio

    with torch.no_grad():
        log_ratio, ratio, _ = _ratio(spec, log_prob, old_log_prob, mask)
        cap = spec.param("cispo_cap")
        weight = torch.clamp(ratio, max=cap)  # (B, T)
        clipped = _flag(torch.gt, ratio, cap)
    loss = -weight * advantages * log_prob  # TRL's product order
    return PolicyTerms(loss, log_ratio, ratio, clipped, torch.zeros_like(clipped))


FORM = Form(
    "cispo_cap",
    "truncated IS",
    "−sg(min(r, c))·A·log π: the IS weight capped at an absolute c, no lower bound (TRL cispo, ScaleRL's ε_max)",
    ("arXiv:2510.13786", "trl:cispo"),
    params=(
        CLAMP_LOG_RATIO,
        Param(
            "cispo_cap",
            5.0,
            "absolute cap c on the IS weight r (TRL's ε_high under its cispo loss, "
            "ScaleRL's ε_max; TRL's default is its ε = 0.2, its docs recommend 5)",
            above=0.0,
        ),
    ),
    uses_budget=False,
    weight=weight,
    weight_note="w = min(r, c) for both signs of A; at level 'sequence' r is the sequence ratio",
    example="ratio/cispo_cap/noclamp/cispo_cap=5",
    levels=("token", "sequence"),
    loss=loss,
)
