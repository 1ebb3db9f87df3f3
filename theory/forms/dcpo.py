"""DCPO, probability-dependent bounds (form 'dcpo'; arXiv:2509.02333 eq. 4 (eq. 27), App. A.6, r_max = 10).

PPO's clip with per-token bounds from q = π_old, lo(q) = ½ + ½√max(1 − 4ε_low/q, 0), hi(q) = min(½ + ½√(1 +
4ε_high/q), r_max), and the loss of A < 0 tokens capped at −A·r_max (a dual clip at r_max). A published form no
engine ships (docs/theory.md §7); `weight` is the gradient weight w of docs/theory.md §1, `interval` the ratio
interval where w ≠ 0 for A of a sign.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from divclip.theory.forms._form import Form, Param
from divclip.theory.forms._numpy import LOG_RATIO_CLAMP, _arrays, _ratio_only

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms
    from divclip.theory.spec import ClipSpec


# ------------------------------------------------------------------------------------------ numpy
def dcpo_bounds(q, eps_low: float, eps_high: float, r_max: float, xp=np):
    """DCPO's ratio bounds at old probability q (arXiv:2509.02333 eq. 4, derived from |(r − 1)·p| ≤ ε with
    p = r·q, eq. 3): lo = ½ + ½·√max(1 − 4ε_low/q, 0), hi = ½ + ½·√(1 + 4ε_high/q), hi capped at r_max (App. A.6).
    `xp` is numpy (arrays) or torch (tensors); q = 0 gives lo = ½, hi = r_max."""
    if xp is np:
        q = np.asarray(q, dtype=np.float64)
        with np.errstate(divide="ignore"):
            return _dcpo_bounds(q, eps_low, eps_high, r_max, np)
    return _dcpo_bounds(q, eps_low, eps_high, r_max, xp)


def _dcpo_bounds(q, eps_low, eps_high, r_max, xp):
    lo = 0.5 + 0.5 * xp.sqrt((1.0 - 4.0 * eps_low / q).clip(min=0.0))
    hi = 0.5 + 0.5 * xp.sqrt(1.0 + 4.0 * eps_high / q)
    return lo, hi.clip(max=r_max)


def weight(spec, q, r, adv):
    q, r, adv = _arrays(q, r, adv)
    lo, hi = dcpo_bounds(q, spec.eps_low, spec.eps_high, spec.param("dcpo_r_max"))
    kept_pos = r <= hi  # A > 0: the upper bound zeroes the gradient above hi (eq. 8's min)
    kept_neg = (r >= lo) & (r <= spec.param("dcpo_r_max"))  # A < 0: below lo, and above r_max (dual clip)
    kept = np.where(adv > 0, kept_pos, np.where(adv < 0, kept_neg, True))
    return r * kept * (np.abs(np.log(r)) <= LOG_RATIO_CLAMP)  # verl's ±20 clamp stops the gradient too


def interval(spec, q, sign):
    r_max = spec.param("dcpo_r_max")
    lo, hi = dcpo_bounds(q, spec.eps_low, spec.eps_high, r_max)
    return (np.zeros_like(hi), hi) if sign > 0 else (lo, np.full_like(lo, r_max))


# ------------------------------------------------------------------------------------------ torch
def loss(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> PolicyTerms:
    """DCPO (arXiv:2509.02333 eqs. 4, 8; App. A.6): PPO's clip with per-token bounds from q = π_old,
    lo(q) = ½ + ½√max(1 − 4ε_low/q, 0), hi(q) = min(½ + ½√(1 + 4ε_high/q), r_max), and the loss of A < 0 tokens
    capped at −A·r_max (a dual clip at r_max)."""
    import torch

    from divclip.theory.forms._kernels import _clamped_ratio, _ppo_terms

    r_max = spec.param("dcpo_r_max")
    with torch.no_grad():
        log_ratio, ratio, in_range = _clamped_ratio(log_prob, old_log_prob)
        lo, hi = dcpo_bounds(old_log_prob.exp(), spec.eps_low, spec.eps_high, r_max, xp=torch)  # (B, T) each
    return _ppo_terms(log_prob, log_ratio, ratio, in_range, advantages, lo, hi, r_max)


FORM = Form(
    "dcpo",
    "hard clip",
    "max(−A·r, −A·clip(r, lo(q), min(hi(q), r_max))), for A < 0 at most −A·r_max; "
    "lo(q) = ½ + ½√max(1 − 4ε_low/q, 0), hi(q) = ½ + ½√(1 + 4ε_high/q)",
    ("arXiv:2509.02333 eq. 4", "arXiv:2509.02333 eq. 8", "arXiv:2509.02333 App. A.6"),
    params=(
        Param(
            "dcpo_r_max",
            10.0,
            "the hard ceiling on the ratio for both signs of A (App. A.6: r_max = 10; "
            "for A > 0 it caps hi(q), for A < 0 it is a dual clip)",
            above=1.0,
        ),
    ),
    weight=weight,
    interval=interval,
    check=_ratio_only("dcpo"),
    loss=loss,
    example="ratio:0.16:0.2/dcpo",  # App. A.9: ε_low = 0.16, ε_high = 0.2 (r_max = 10),
)
