"""DPPO's gated form (form 'gated'): −A·sg(min(r, c))·log π, zeroed where the bound is crossed in A's direction.

DPPO (arXiv:2602.04879; verl `dppo_kl`/`dppo_tv`), with any measure as the gate. Numpy weight: w = min(r, c_tis)
on kept tokens (the clip form's keep rule without dual clip), 0 on clipped ones; r is verl's clamped ratio
e^{clamp(log r, ±20)}, and the clamp does not zero the gradient. Its gradient, −A·min(r, c)·∇log π = −A·∇r for
r < c, is the clip form's, token by token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from divclip.theory.forms._form import CLAMP_LOG_RATIO, Form, Param
from divclip.theory.forms._numpy import _shaped, _verl_ratio, clip_bounds, moved_out

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms
    from divclip.theory.spec import ClipSpec


# ------------------------------------------------------------------------------------------ numpy
def weight(spec, q, r, adv):
    """DPPO (form 'gated'): w = min(r, c_tis) on kept tokens, 0 where the bound is crossed in A's direction."""
    ratio, _ = _verl_ratio(r)
    weight = ratio if spec.param("tis_cap") is None else np.minimum(ratio, spec.param("tis_cap"))
    return np.where(moved_out(spec, q, r, adv), 0.0, weight)  # the decision sees the true ratio, as verl's dppo


def interval(spec, q, sign: int):
    """The clip form's ranges without a dual clip: A > 0: (0, hi(q)); A < 0: (lo(q), ∞). The TIS cap truncates
    the weight above c but keeps the gradient, so it does not enter."""
    lo, hi = clip_bounds(spec, q)
    return _shaped(q, 0.0, hi) if sign > 0 else _shaped(q, lo, np.inf)


# ------------------------------------------------------------------------------------------ torch
def loss(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> PolicyTerms:
    """DPPO (verl `dppo_kl`/`dppo_tv`): -A·sg(min(r, c))·log π, zeroed where the bound is crossed in A's
    direction. Its gradient, -A·min(r, c)·∇log π = -A·∇r for r < c, is the clip form's, token by token."""
    import torch

    from divclip.theory.forms._kernels import (
        PolicyTerms,
        _const,
        _decision_ratio,
        _divergence,
        _ratio,
        _WithGradient,
        ratio_bounds,
    )

    with torch.no_grad():
        log_ratio, ratio, _ = _ratio(spec, log_prob, old_log_prob, mask)
        # The decision sees the true ratio (as verl's dppo, which never clamps its D); the IS weight below keeps
        # verl's clamped one. `_decision_ratio` returns the clamped one where no decision can tell them apart.
        true_ratio = _decision_ratio(spec, ratio, log_prob, old_log_prob)
        adv_pos, adv_neg = advantages > 0, advantages < 0  # bool decisions; 0/1 floats only for the metrics
        if spec.measure_name == "binary_tv":
            # Binary TV is |q − p|: decided on q − p as verl's dppo_tv computes it, so a token within an ulp of δ
            # gets verl's verdict (p·|r − 1| rounds differently); NaN counts as outside, as there.
            moved = log_prob.exp().sub_(old_log_prob.exp())  # (B, T) q − p
            high = ~(moved <= spec.delta) & adv_pos
            low = ~(moved >= -spec.delta) & adv_neg
        elif spec.p_dependent:
            divergence, _ = _divergence(spec, true_ratio, old_log_prob, log_prob)
            exceeded = ~(divergence <= spec.delta)  # NaN (a "probability" above 1) counts
            high = (true_ratio > 1.0) & exceeded & adv_pos
            low = (true_ratio < 1.0) & exceeded & adv_neg
        else:
            lo, hi = ratio_bounds(spec)
            high = (true_ratio > hi) & adv_pos
            low = (true_ratio < lo) & adv_neg
        dropped = high | low  # the two are disjoint
        weight = (
            ratio if spec.param("tis_cap") is None else ratio.clamp(max=spec.param("tis_cap"))
        )  # truncated IS weight
        # verl's −A·w·log π·valid in its product order (bit-equal losses, NaN where log π = −inf as there); the
        # gradient −A·w where valid, 0 elsewhere, in closed form (what autograd gives through that product)
        scale = torch.mul(advantages, weight).neg_()  # (−A)·w, as −A then ·w rounds: negation is exact
        value = torch.mul(scale, _const(log_prob)).mul_((~dropped).to(scale.dtype))
        clipped, clipped_low = dropped.to(scale.dtype), low.to(scale.dtype)
        grad = scale.masked_fill_(dropped, 0.0)
    loss = _WithGradient.apply(log_prob, value, grad)
    return PolicyTerms(loss, log_ratio, ratio, clipped, clipped_low, grad=grad)


FORM = Form(
    "gated",
    "hard clip",
    "−A·sg(min(r, c))·log π · 1[D(r, q) ≤ δ or not moved by A]",
    ("arXiv:2602.04879", "verl:dppo_kl", "verl:dppo_tv"),
    weight=weight,
    interval=interval,
    params=(
        CLAMP_LOG_RATIO,
        Param(
            "tis_cap",
            None,
            "truncate the stop-gradient IS weight at this value (verl dppo's clip_ratio_c); None: off",
            above=0.0,
            option="tis",
            label="TIS cap",
        ),
    ),
    example="dppo_kl",
    loss=loss,
)
