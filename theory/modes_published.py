"""Torch implementations of the loss forms declared in `divclip.theory.forms_published` (`register_mode`).

Each mode computes its per-token loss without autograd and attaches the gradient the paper's equation gives,
∂ℓ/∂log π = −A·w (`_WithGradient`), w being the form's numpy `weight` (docs/theory.md §1, §7). No host syncs: no
.item(), no Python branch on a tensor value (BAPO's batch search is tensor ops over its static path). Token log
ratios are clamped to ±20 as verl does, and the clamp stops the gradient of every term that goes through r.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from divclip.theory.forms_published import bapo_path, dcpo_bounds
from divclip.theory.loss_modes import (
    LOG_RATIO_CLAMP,
    PolicyTerms,
    _flag,
    _WithGradient,
    clip_loss_with_bounds,
    ratio_bounds,
    register_mode,
)

if TYPE_CHECKING:
    from divclip.theory.spec import ClipSpec


@torch.no_grad()
def _ratio(log_prob, old_log_prob):
    """(log r clamped to ±20, r, in_range): in_range is 1.0 where |log r| <= 20, where dr/d log π = r."""
    log_ratio = log_prob - old_log_prob  # (B, T)
    in_range = _flag(torch.le, log_ratio.abs(), LOG_RATIO_CLAMP)
    log_ratio.clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return log_ratio, log_ratio.exp(), in_range


def _signs(advantages):
    """(1.0 where A > 0, 1.0 where A < 0), each (B, T)."""
    return _flag(torch.gt, advantages, 0.0), _flag(torch.lt, advantages, 0.0)


def _ppo_terms(log_prob, log_ratio, ratio, in_range, advantages, lo, hi, dual_c=None) -> PolicyTerms:
    """PPO's clipped surrogate at bounds lo, hi (floats, 0-d or (B, T) tensors), with an optional dual clip:
    the loss of the clip mode, gradient −A·r on kept tokens and 0 on clipped ones."""
    with torch.no_grad():
        sur = clip_loss_with_bounds(ratio, advantages, lo, hi, dual_c)
        keep = (1.0 - sur.clipped).mul_(in_range)  # (B, T)
        if sur.dual is not None:
            keep.sub_(sur.dual * in_range)
        grad = sur.loss_unclipped * keep  # d(−A·r)/d log π = −A·r where kept
        clipped_low = _flag(torch.lt, advantages, 0.0).mul_(sur.clipped)
    loss = _WithGradient.apply(log_prob, sur.loss, grad)
    return PolicyTerms(loss, log_ratio, ratio, sur.clipped, clipped_low, sur.dual, grad=grad)


# -------------------------------------------------------------------------------------------------- DCPO
@register_mode("dcpo")
def _dcpo_mode(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> PolicyTerms:
    """DCPO (arXiv:2509.02333 eqs. 4, 8; App. A.6): PPO's clip with per-token bounds from q = π_old,
    lo(q) = ½ + ½√max(1 − 4ε_low/q, 0), hi(q) = min(½ + ½√(1 + 4ε_high/q), r_max), and the loss of A < 0 tokens
    capped at −A·r_max (a dual clip at r_max)."""
    r_max = spec.param("dcpo_r_max")
    with torch.no_grad():
        log_ratio, ratio, in_range = _ratio(log_prob, old_log_prob)
        lo, hi = dcpo_bounds(old_log_prob.exp(), spec.eps_low, spec.eps_high, r_max, xp=torch)  # (B, T) each
    return _ppo_terms(log_prob, log_ratio, ratio, in_range, advantages, lo, hi, r_max)


# -------------------------------------------------------------------------------------------- GPPO, CE-GPPO
def _gppo_terms(log_prob, old_log_prob, advantages, spec, beta_low: float, beta_high: float) -> PolicyTerms:
    """CE-GPPO (arXiv:2509.20712 eq. 8): ℓ = δ·A inside [lo, hi]; β1·lo/sg(δ)·δ·A for A < 0, δ < lo;
    β2·hi/sg(δ)·δ·A for A > 0, δ > hi (the loss is −ℓ). Its gradient (eq. 10) has weight β1·lo, β2·hi or δ."""
    lo, hi = ratio_bounds(spec)  # a compile-time constant under torch.compile
    with torch.no_grad():
        log_ratio, ratio, in_range = _ratio(log_prob, old_log_prob)
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


@register_mode("gppo")
def _gppo_mode(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> PolicyTerms:
    """GPPO (arXiv:2508.07629): CE-GPPO with β1 = β2 = 1; its forward value is the clip mode's."""
    return _gppo_terms(log_prob, old_log_prob, advantages, spec, 1.0, 1.0)


@register_mode("cegppo")
def _cegppo_mode(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> PolicyTerms:
    """CE-GPPO (arXiv:2509.20712 eqs. 8, 10) with β1 = cegppo_beta1, β2 = cegppo_beta2."""
    betas = spec.param("cegppo_beta1"), spec.param("cegppo_beta2")
    return _gppo_terms(log_prob, old_log_prob, advantages, spec, *betas)


# -------------------------------------------------------------------------------------------------- ASPO
@register_mode("aspo")
def _aspo_mode(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> PolicyTerms:
    """ASPO (arXiv:2510.06062 §6). A > 0: Step 1 masks r > hi; Step 2 flips the weight, r̂ = π_old·π/sg(π²)
    (eq. 3), whose value is 1/r and whose gradient weight is 1/r (App. A.2 eq. 12); Step 3's soft dual clip caps
    the weight at c where 1/r > c, as CISPO does: loss −A·sg(c)·log π. A < 0: GRPO's max(−A·r, −A·lo), and the
    same soft cap where r > c. The soft cap on both signs follows the authors' code (Archer2.0's
    compute_policy_loss_archer), which the paper names as its implementation."""
    lo, hi = ratio_bounds(spec)  # a compile-time constant under torch.compile
    c = spec.param("aspo_dual_c")
    with torch.no_grad():
        log_ratio, ratio, in_range = _ratio(log_prob, old_log_prob)
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


# -------------------------------------------------------------------------------------------------- TOPR
@register_mode("topr")
def _topr_mode(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> PolicyTerms:
    """TOPR (arXiv:2503.14286 §3 eqs. 7-8): −sg(w)·A·log π per token, w = clip(π(τ)/μ(τ), a⁺, b⁺) for A >= 0
    and clip(π(τ)/μ(τ), a⁻, b⁻) for A < 0, with π(τ)/μ(τ) = exp(Σ_t log r_t) over the sequence's unmasked
    tokens (each log r_t clamped to ±20). Summed over a sequence's tokens this is the paper's
    w·R(τ)·∇log π(τ); the aggregation (`loss_agg_mode`) scales it as for any form. `ratio` in the terms is the
    token ratio (for the metrics); `clipped` marks tokens whose sequence ratio the truncation changed."""
    (a_pos, b_pos), (a_neg, b_neg) = (
        (spec.param("topr_pos_low"), spec.param("topr_pos_high")),
        (spec.param("topr_neg_low"), spec.param("topr_neg_high")),
    )
    with torch.no_grad():
        log_ratio, ratio, _ = _ratio(log_prob, old_log_prob)
        seq_log = (log_ratio * mask).sum(dim=-1, keepdim=True)  # (B, 1) log π(τ)/μ(τ)
        adv_nonneg = _flag(torch.ge, advantages, 0.0)
        w_pos = _tapered(seq_log, a_pos, b_pos).expand_as(advantages)  # (B, T)
        w_neg = _tapered(seq_log, a_neg, b_neg).expand_as(advantages)
        weight = torch.lerp(w_neg, w_pos, adv_nonneg)  # exactly w_pos where A >= 0, w_neg elsewhere
        below = torch.lerp(
            _flag(torch.lt, seq_log, _log(a_neg)).expand_as(advantages),
            _flag(torch.lt, seq_log, _log(a_pos)).expand_as(advantages),
            adv_nonneg,
        )
        above = torch.lerp(
            _flag(torch.gt, seq_log, _log(b_neg)).expand_as(advantages),
            _flag(torch.gt, seq_log, _log(b_pos)).expand_as(advantages),
            adv_nonneg,
        )
        grad = -advantages * weight
        loss_value = grad * log_prob
    loss = _WithGradient.apply(log_prob, loss_value, grad)
    return PolicyTerms(loss, log_ratio, ratio, below + above, below, grad=grad)


def _log(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf


def _tapered(seq_log, low: float, high: float):
    """clip(exp(seq_log), low, high), computed in log space so a long sequence's ratio never overflows."""
    return seq_log.clamp(_log(low), _log(high)).exp()


# -------------------------------------------------------------------------------------------------- BAPO
@register_mode("bapo")
def _bapo_mode(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> PolicyTerms:
    """BAPO (arXiv:2510.18927 eq. 8, Algorithm 1): PPO's clip at (c_low, c_high), the first pair on Algorithm 1's
    path (`bapo_path`) whose positive contribution ρ = P/(P + N) reaches ρ0 over the batch's unmasked tokens,
    P = Σ_{A>0} A·min(r, c_high), N = Σ_{A<0} |A|·max(r, c_low) (eq. 8, the min(r·A, clip(r)·A) terms); the
    path's last pair if none does. A batch without nonzero advantages has ρ = 1 (the start pair). Every
    candidate is evaluated and the first passing one picked with argmax: no host sync. The batch is what this
    call sees (one micro-batch; the authors' code all-reduces P and N across data-parallel ranks first)."""
    path = bapo_path(spec)
    with torch.no_grad():
        log_ratio, ratio, in_range = _ratio(log_prob, old_log_prob)
        adv_pos = (advantages.clamp(min=0.0) * mask).reshape(-1)  # (B·T,) A⁺ on unmasked tokens
        adv_neg = ((-advantages).clamp(min=0.0) * mask).reshape(-1)  # |A⁻|
        flat = ratio.reshape(-1)
        pos = {h: torch.dot(flat.clamp(max=h), adv_pos) for h in sorted({h for _, h in path})}
        neg = {lo: torch.dot(flat.clamp(min=lo), adv_neg) for lo in sorted({lo for lo, _ in path})}
        p = torch.stack([pos[h] for _, h in path])  # (J,) P along the path
        n = torch.stack([neg[lo] for lo, _ in path])  # (J,) N along the path
        total = p + n
        rho = torch.where(total > 0, p / torch.where(total > 0, total, 1.0), 1.0)
        reached = rho >= spec.param("bapo_rho0")
        reached[-1] = True  # the loop also ends at the path's last pair
        pick = torch.argmax(reached.to(torch.uint8))  # the first True
        bounds = torch.tensor(path, dtype=ratio.dtype, device=ratio.device)  # (J, 2)
        c_low, c_high = bounds.index_select(0, pick.reshape(1))[0]  # 0-d tensors (a tensor index: no sync)
    return _ppo_terms(log_prob, log_ratio, ratio, in_range, advantages, c_low, c_high)
