"""DPPO's gated form (form 'gated'): −A·sg(min(r, c))·log π, zeroed where the bound is crossed in A's direction.

DPPO (arXiv:2602.04879; verl `dppo_kl`/`dppo_tv`), with any measure as the gate. Numpy weight: w = min(r, c_tis)
on kept tokens (the clip form's keep rule without dual clip), 0 on clipped ones; r is verl's clamped ratio
e^{clamp(log r, ±20)} (the raw r with clamp_log_ratio False), and the clamp does not zero the gradient. Its
gradient, −A·min(r, c)·∇log π = −A·∇r for r < c, is the clip form's, token by token.

Two parameters make every verl dppo setting a spec (docs/theory.md §4.1):

* `delta_high`, δ_high, the budget of the upper side where it differs from δ (verl's upper clip width beside
  its lower one under dppo_*): a token with r > 1 and A > 0 is gated by D <= δ_high, one with r < 1 and A < 0 by D <= δ.
  None (the default) means δ for both sides. The bounds every consumer reads (`ClipSpec.ratio_bounds`,
  `_numpy.clip_bounds`) take the upper root at δ_high (`_numpy.upper_delta`).
* `gate`, how the decision is computed: 'exact' (divclip's methods) on the exact D, from the log-probabilities
  (binary KL p·(log p − log q) + (1 − p)·(log(1 − p) − log(1 − q)), no ratio formed), 'verl' with verl 0.9.1's
  own arithmetic, what `from_engine('verl', ...)` reads: prob = e^{log π}, binary KL
  p·(log p_old − log π) + (1 − p)·log((1 − p + 1e-8)/(1 − q + 1e-8)), the side by q <= p / q >= p, and the
  negative-side mask for A = 0 tokens as verl's `torch.where(A > 0, ...)` (so `clipfrac` is verl's pg_clipfrac).
  Its decisions are verl's bit for bit in float32 and float64, also on tokens within an ulp of the root and on
  inputs that are not log-probabilities (log π > 0, as torch.randn gives), where the exact D is NaN.
* `surrogate`, what the kept token's loss value is: 'logp' (the default, verl's dppo) −A·sg(r)·log π, or 'ratio'
  (SkyRL 0.3.0's dppo_policy_loss, what `from_engine('skyrl', ...)` reads) −A·r with r differentiable. Where
  |log r| <= 20 the two have one gradient, −A·r·∇log π, and different values; beyond it 'ratio' takes the
  gradient through the clamped e^{±20}, which is 0 (as SkyRL's safe_exp_delta; with `/noclamp` r = exp(log r)
  keeps it), while 'logp' keeps −A·e^{±20}. So w(q, r) differs there: r·1[|log r| <= 20] against r clamped.
  'ratio' takes no `tis_cap` (no engine truncates a differentiable ratio's weight).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from divclip.theory.forms._form import CLAMP_LOG_RATIO, EXP_DTYPE, Form, Param, is_adaptive
from divclip.theory.forms._numpy import _shaped, _verl_ratio, clip_bounds, moved_out, upper_delta

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms
    from divclip.theory.spec import ClipSpec

VERL_GATE_MEASURES = ("binary_kl", "binary_tv")
"""The measures of verl's dppo losses: the ones `gate=verl` (verl's arithmetic) applies to."""
VERL_EPS = 1e-8
"""verl 0.9.1 compute_policy_loss_dppo_kl adds 1e-8 to 1 − p and 1 − q inside its binary KL's log."""


def verl_gate(spec) -> bool:
    """True where the spec decides with verl's dppo arithmetic (`gate` = 'verl')."""
    return spec.param("gate") == "verl"


# ------------------------------------------------------------------------------------------ numpy
def _verl_moved_out(spec, q, r, adv):
    """verl's dppo invalid mask in float64 (q = π_old, q·r = π_θ): where(A > 0, not valid_positive, not
    valid_negative), with verl's binary KL (its +1e-8) or its TV difference."""
    q, r, adv = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (q, r, adv)))
    prob = q * r
    delta_low, delta_high = spec.delta, upper_delta(spec)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if spec.measure_name == "binary_tv":
            keep_pos, keep_neg = prob - q <= delta_high, prob - q >= -delta_low
        else:
            binary_kl = q * -np.log(r) + (1 - q) * np.log((1.0 - q + VERL_EPS) / (1.0 - prob + VERL_EPS))
            keep_pos = (binary_kl <= delta_high) | (prob <= q)
            keep_neg = (binary_kl <= delta_low) | (prob >= q)
    return ~np.where(adv > 0, keep_pos, keep_neg)


def weight(spec, q, r, adv):
    """DPPO (form 'gated'): w = min(r, c_tis) on kept tokens, 0 where the bound is crossed in A's direction."""
    # verl's clamped e^{clamp(log r, ±20)}, which keeps the gradient; the raw r with clamp_log_ratio False (SkyRL
    # dppo read with '/noclamp'), as the torch loss's `_ratio`
    clamps = spec.param("clamp_log_ratio", True)
    ratio, kept = _verl_ratio(r) if clamps else (np.asarray(r, dtype=np.float64), True)
    weight = ratio if spec.param("tis_cap", None) is None else np.minimum(ratio, spec.param("tis_cap", None))
    if spec.param("surrogate") == "ratio":  # −A·r through the clamp: its gradient is 0 beyond |log r| = 20
        weight = np.where(kept, weight, 0.0)
    out = _verl_moved_out(spec, q, r, adv) if verl_gate(spec) else moved_out(spec, q, r, adv)
    return np.where(out, 0.0, weight)  # the decision sees the true ratio, as verl's dppo


def interval(spec, q, sign: int):
    """The clip form's ranges without a dual clip: A > 0: (0, hi(q)); A < 0: (lo(q), ∞), hi at δ_high. The TIS
    cap truncates the weight above c but keeps the gradient, so it does not enter. With gate=verl these are the
    exact roots still: verl's +1e-8 moves its own by less than 1e-8/(1 − q) in D."""
    lo, hi = clip_bounds(spec, q)
    return _shaped(q, 0.0, hi) if sign > 0 else _shaped(q, lo, np.inf)


def check(spec):
    """delta_high: a δ-budget measure at a fixed δ; gate 'verl' only for verl's two measures."""
    if upper_delta(spec) != spec.delta:
        if spec.measure_name == "ratio":
            raise ValueError(
                f"ClipSpec.params['delta_high'] is the upper budget of a divergence measure; measure 'ratio' takes "
                f"eps_high for that side, got delta_high={upper_delta(spec)!r}"
            )
        if is_adaptive(spec):
            raise ValueError(
                f"ClipSpec.params['delta_high']={upper_delta(spec)!r}: an adaptive δ moves one budget; give the "
                "gated form one δ (no delta_high) to adapt it"
            )
    if spec.param("surrogate") == "ratio" and spec.param("tis_cap") is not None:
        raise ValueError(
            f"ClipSpec.params['tis_cap']={spec.param('tis_cap')!r} truncates the stop-gradient weight of "
            "surrogate 'logp'; surrogate 'ratio' (−A·r, r differentiable) takes none: drop one of the two"
        )
    if verl_gate(spec) and (spec.measure_name not in VERL_GATE_MEASURES or spec.level != "token"):
        raise ValueError(
            f"ClipSpec.params['gate']='verl' decides with verl's dppo_kl/dppo_tv arithmetic: it needs measure "
            f"{' or '.join(VERL_GATE_MEASURES)} at level 'token', got measure={spec.measure_name!r}, "
            f"level={spec.level!r}"
        )


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
        exp_float32,
        ratio_bounds,
        ratio_gradient,
    )

    with torch.no_grad():
        log_ratio, ratio, in_range = _ratio(spec, log_prob, old_log_prob, mask)
        delta_low, delta_high = spec.delta, upper_delta(spec)  # δ_high: the upper side's own budget, else δ
        adv_pos = advantages > 0  # bool decisions; 0/1 floats only for the metrics
        if verl_gate(spec):
            # verl's own arithmetic, op for op (compute_policy_loss_dppo_kl/tv), so every decision is its decision;
            # A = 0 (and NaN) tokens take the negative side's mask, as its torch.where(advantages > 0, ...)
            prob, old_prob = log_prob.exp(), old_log_prob.exp()
            if spec.measure_name == "binary_tv":
                keep_pos = (prob - old_prob) <= delta_high
                keep_neg = (prob - old_prob) >= -delta_low
            else:
                binary_kl = old_prob * (old_log_prob - log_prob) + (1 - old_prob) * torch.log(
                    (1.0 - old_prob + VERL_EPS) / (1.0 - prob + VERL_EPS)
                )
                keep_pos = (binary_kl <= delta_high) | (prob <= old_prob)
                keep_neg = (binary_kl <= delta_low) | (prob >= old_prob)
            high = ~keep_pos & adv_pos
            low = ~keep_neg & ~adv_pos
        else:
            adv_neg = advantages < 0
            # The decision sees the true ratio (as verl's dppo, which never clamps its D); the IS weight below keeps
            # verl's clamped one. `_decision_ratio` returns the clamped one where no decision can tell them apart.
            true_ratio = _decision_ratio(spec, ratio, log_prob, old_log_prob)
            if spec.measure_name == "binary_tv":
                # Binary TV is |q − p|: decided on q − p as verl's dppo_tv computes it, so a token within an ulp of
                # δ gets verl's verdict (p·|r − 1| rounds differently); NaN counts as outside, as there.
                moved = log_prob.exp().sub_(old_log_prob.exp())  # (B, T) q − p
                high = ~(moved <= delta_high) & adv_pos
                low = ~(moved >= -delta_low) & adv_neg
            elif spec.p_dependent:
                divergence, _ = _divergence(spec, true_ratio, old_log_prob, log_prob)
                # NaN (a "probability" above 1) counts as outside
                high = (true_ratio > 1.0) & ~(divergence <= delta_high) & adv_pos
                low = (true_ratio < 1.0) & ~(divergence <= delta_low) & adv_neg
            else:
                lo, hi = ratio_bounds(spec)  # hi at δ_high (`ClipSpec.ratio_bounds`)
                high = (true_ratio > hi) & adv_pos
                low = (true_ratio < lo) & adv_neg
        dropped = high | low  # the two are disjoint
        weight = (
            ratio if spec.param("tis_cap") is None else ratio.clamp(max=spec.param("tis_cap"))
        )  # truncated IS weight
        scale = torch.mul(advantages, weight).neg_()  # (−A)·w, as −A then ·w rounds: negation is exact
        if spec.param("surrogate") == "ratio":
            # SkyRL's −(r·A·mask) (r·A = A·r; negation exact); its gradient −A·r·mask, 0 where the ±20 clamp
            # cut log r (autograd through SkyRL's safe_exp_delta clamp; kept with /noclamp, in_range None)
            value = scale.mul((~dropped).to(scale.dtype))
            if exp_float32(spec):  # the gradient through SkyRL's float32 exp, rounded as its autograd rounds it
                exp_of = log_ratio if spec.param("clamp_log_ratio") else log_prob - old_log_prob
                scale = ratio_gradient(advantages, exp_of, True)
            grad = scale.masked_fill_(dropped, 0.0)
            if in_range is not None:
                grad = grad.mul_(in_range)
        else:
            # verl's −A·w·log π·valid in its product order (bit-equal losses, NaN where log π = −inf as there);
            # the gradient −A·w where valid, 0 elsewhere, in closed form (what autograd gives through that product)
            value = torch.mul(scale, _const(log_prob)).mul_((~dropped).to(scale.dtype))
            grad = scale.masked_fill_(dropped, 0.0)
        clipped, clipped_low = dropped.to(scale.dtype), low.to(scale.dtype)
    loss = _WithGradient.apply(log_prob, value, grad)
    return PolicyTerms(loss, log_ratio, ratio, clipped, clipped_low, grad=grad)


FORM = Form(
    "gated",
    "hard clip",
    "−A·sg(min(r, c))·log π · 1[D(r, q) ≤ δ or not moved by A]",
    ("arXiv:2602.04879", "verl:dppo_kl", "verl:dppo_tv"),
    params=(
        CLAMP_LOG_RATIO,
        EXP_DTYPE,
        Param(
            "tis_cap",
            None,
            "truncate the stop-gradient IS weight at this value (verl dppo's dual-clip constant); None: off",
            above=0.0,
            option="tis",
            label="TIS cap",
        ),
        Param(
            "delta_high",
            None,
            "δ_high: the upper side's budget (r > 1, A > 0) where it differs from δ, as verl's upper clip width "
            "beside its lower one under dppo_*; None: δ for both sides",
            above=0.0,
        ),
        Param(
            "gate",
            "exact",
            "exact: decide on the exact D (divclip's methods); verl: with verl 0.9.1's dppo arithmetic (its "
            "+1e-8, prob <= old_prob, A = 0 on the negative side), bit for bit its decisions: the spec "
            "`from_engine('verl', ...)` reads",
            kind="choice",
            choices=("exact", "verl"),
        ),
        Param(
            "surrogate",
            "logp",
            "logp: the kept token's loss is −A·sg(r)·log π (verl's dppo); ratio: −A·r with r differentiable "
            "(SkyRL's dppo): the same gradient where |log r| <= 20, another value, and gradient 0 beyond the ±20 "
            "clamp (unless /noclamp)",
            kind="choice",
            choices=("logp", "ratio"),
        ),
    ),
    check=check,
    weight=weight,
    interval=interval,
    example="dppo_kl",
    loss=loss,
)
