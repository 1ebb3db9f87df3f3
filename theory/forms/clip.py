"""PPO/GRPO's clipped surrogate (form 'clip'): max(−A·r, −A·clip(r, lo, hi)), with an optional dual clip.

The form of PPO (arXiv:1707.06347), GRPO, DAPO, KL3 (ATR-GRPO) and every other clip budget, verl `vanilla` and
TRL grpo/bnpo/dr_grpo/dapo; GSPO (verl `gspo`) at level='sequence'. Numpy weight (docs/theory.md §1):

  w = r on kept tokens, 0 on clipped ones: A > 0 and r > hi(q), A < 0 and r < lo(q), A < 0 and r > c with a
  dual clip, and |log r| > 20 (verl's log-ratio clamp stops the gradient; not with clamp_log_ratio False, as
  TRL, slime and OpenRLHF's gspo run). At level='sequence' (GSPO) r is the sequence's length-normalised ratio s,
  every token of the sequence gets w(s), and the clamp is log s <= 10.

Parameter `seq_grad_mean` (a flag, level='sequence' only; default False): True differentiates s = exp(mean_t log r_t)
through the mean, as OpenRLHF 0.11.2 and slime compute GSPO, instead of verl's sg(s)·π_θ/sg(π_θ): the value is
the same, but each token's gradient is its row's mean of −A·s over the kept tokens (divided by the row's
token count, at least 1) rather than its own −A·s. With one advantage per row the two are equal; with
token-varying advantages (OpenRLHF's default GAE) they are not (one row, A = (1, −1), both kept: (0, 0), where
verl gives (−s/2, +s/2) after the row's mean).

Torch: `loss` dispatches to two hand-fused fast paths, `_interval_clip_mode` (token level, one p-free
interval) and `_sequence_clip_mode` (GSPO), and otherwise to `_general_clip_mode`, the readable path through
`clipped_surrogate` that handles every spec and is the reference the fast paths are tested equal to
(tests/theory/test_loss_fast_paths.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from divclip.theory.forms._form import CLAMP_LOG_RATIO, DUAL_CLIP_C, EXP_DTYPE, Form, Param, is_intersection
from divclip.theory.forms._numpy import SEQ_LOG_RATIO_MAX, _shaped, _spec_ratio, clip_bounds, moved_out

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms
    from divclip.theory.spec import ClipSpec


# ------------------------------------------------------------------------------------------ numpy
def weight(spec, q, r, adv):
    """PPO/GRPO/DAPO/KL3/dual clip (form 'clip'): w = r where kept, else 0; GSPO's s at level='sequence'."""
    if spec.level == "sequence":
        with np.errstate(divide="ignore"):
            in_range = (np.log(r) <= SEQ_LOG_RATIO_MAX) | (not spec.param("clamp_log_ratio"))
        ratio = r
    else:
        ratio, in_range = _spec_ratio(spec, r)
    keep = ~moved_out(spec, q, ratio, adv) & in_range
    if spec.param("dual_clip_c") is not None:
        keep &= ~((adv < 0) & (ratio > spec.param("dual_clip_c")))  # the loss is capped at −A·c: flat, no gradient
    return np.where(keep, ratio, 0.0)


def interval(spec, q, sign: int):
    """A > 0: (0, hi(q)), only the upper bound binds; A < 0: (lo(q), c) with a dual clip, else (lo(q), ∞)."""
    lo, hi = clip_bounds(spec, q)
    if sign > 0:
        return _shaped(q, 0.0, hi)
    return _shaped(q, lo, np.inf if spec.param("dual_clip_c") is None else spec.param("dual_clip_c"))


# ------------------------------------------------------------------------------------------ torch
def loss(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> PolicyTerms:
    """PPO: max(-A·r, -A·clip(r, lo, hi)); GSPO's sequence ratio at level='sequence'.

    The value is `clipped_surrogate`'s; the gradient is the rule it implies, -A·r·∇log π on kept tokens.
    """
    simple = not is_intersection(spec)  # one interval: p-free, or a p-dependent measure's per-token roots
    if simple and spec.level == "token":
        return _interval_clip_mode(log_prob, old_log_prob, advantages, spec)
    if simple and spec.level == "sequence" and spec.param("dual_clip_c", None) is None:
        terms = _sequence_clip_mode(log_prob, old_log_prob, advantages, mask, spec)
    else:
        terms = _general_clip_mode(log_prob, old_log_prob, advantages, mask, spec)
    if spec.level == "sequence" and spec.form == "clip" and not is_intersection(spec) and spec.param("seq_grad_mean"):
        terms = _through_the_mean(terms, log_prob, mask)
    return terms


def _through_the_mean(terms: PolicyTerms, log_prob, mask) -> PolicyTerms:
    """`seq_grad_mean`: the gradient of s = exp(Σ_t m·log r_t / max(Σ m, 1)) taken through the mean (OpenRLHF,
    slime): ∂s/∂log π_t = s·m_t / max(Σ m, 1), so whatever weighs the token terms downstream (an aggregation, a
    rollout-correction weight), token t gets m_t / max(Σ m, 1) · Σ_t' u_t'·(−A_t'·s)·[kept_t'], u being each
    term's weight (`_SequenceMeanGradient`). The value is unchanged. `grad` becomes the row's masked mean of the
    kept −A·s: the per-token gradient when a row's tokens weigh alike (every loss_agg_mode, no weights)."""
    import torch

    from divclip.theory.forms._kernels import _SequenceMeanGradient

    with torch.no_grad():
        rows = torch.sum(mask, dim=-1, keepdim=True).clamp(min=1)  # (B, 1)
        grad = (torch.sum(terms.grad * mask, dim=-1, keepdim=True) / rows) * mask  # (B, T)
    loss = _SequenceMeanGradient.apply(log_prob, terms.loss.detach(), terms.grad, mask, rows)
    return terms._replace(loss=loss, grad=grad)


def _check(spec) -> None:
    """`seq_grad_mean` only at level='sequence' (a token ratio has no sequence mean)."""
    if spec.param("exp_dtype") != "input" and spec.level != "token":
        raise ValueError(
            f"ClipSpec.exp_dtype = {spec.param('exp_dtype')!r} rounds the token ratio's exp (SkyRL's safe_exp_delta): "
            f"it needs level='token', got level={spec.level!r}"
        )
    if spec.param("seq_grad_mean") and spec.level != "sequence":
        raise ValueError(
            f"ClipSpec.seq_grad_mean = True needs level='sequence' (GSPO's sequence ratio), got level={spec.level!r}"
        )


def _sequence_clip_mode(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> PolicyTerms:
    """Fast path of `loss` at level='sequence' for one p-free interval and no dual clip (GSPO; TRL's sequence-level
    importance sampling), from (B, 1) quantities: with s the sequence ratio, the token's loss is −A·w with
    w = min(s, hi) for A > 0 and max(s, lo) for A < 0 (the same floats as max(−A·s, −A·clip(s)): rounding is
    monotone), kept (gradient −A·s) where s <= hi, resp. s >= lo. Per token only the sign of A is read, so the
    (B, T) work is a few multiplies instead of a clamp, a max and the flags of every token. An s beyond the
    largest float (log s > 88 in float32, TRL without the clamp) counts as that largest float.

    Replaces `_general_clip_mode` there; held equal to it (loss, gradient, ratio and flags, torch.equal) by
    tests/theory/test_loss_fast_paths.py::test_sequence_fast_path_equals_the_general_clip."""
    import torch

    from divclip.theory.forms._kernels import (
        PolicyTerms,
        _by_sign,
        _flag,
        _sequence_ratio,
        _WithGradient,
        ratio_bounds,
        sequence_column,
    )

    with torch.no_grad():
        log_ratio, ratio, in_range = _sequence_ratio(log_prob, old_log_prob, mask, spec.param("clamp_log_ratio"))
        s = sequence_column(ratio)  # (B, 1)
        lo, hi = ratio_bounds(spec)
        big = torch.finfo(s.dtype).max
        pos, neg = _flag(torch.gt, advantages, 0.0), _flag(torch.lt, advantages, 0.0)  # (B, T)
        value = _by_sign(pos, neg, -torch.clamp(s, max=hi), -torch.clamp(s, min=lo, max=big)).mul_(advantages)
        above, below = _flag(torch.gt, s, hi), _flag(torch.lt, s, lo)  # (B, 1) clipped for A > 0, A < 0
        kept = s.clamp(max=big) if in_range is None else s.clamp(max=big) * in_range  # (B, 1) dr/d log π
        grad = _by_sign(pos, neg, (above - 1.0) * kept, (below - 1.0) * kept).mul_(advantages)  # −A·s where kept
        clipped_low = neg.mul_(below)  # (B, T)
        clipped = torch.addcmul(clipped_low, pos, above)
    loss = _WithGradient.apply(log_prob, value, grad)
    return PolicyTerms(loss, log_ratio, ratio, clipped, clipped_low, grad=grad)


def _interval_clip_mode(log_prob, old_log_prob, advantages, spec: ClipSpec) -> PolicyTerms:
    """Fast path of `loss` at token level for one interval (PPO, GRPO, DAPO, KL3, every ratio-clip method: one
    p-free [lo, hi]; binary KL/TV: the exact per-token roots of `_per_token_clip`, on the CPU for binary KL those of
    `folded_binary_kl_clip`, which also folds verl's clamp flag into its sign), dual clip or not:
    `clipped_surrogate`'s floats in the fewest (B, T) operations. The decisions stay
    bool and the gradient is one select, -A·r where kept and 0 elsewhere; compiled, this is one fused pass whose
    cost is its arithmetic on a CPU (0/1 float flags cost a conversion and a multiply each). The float flags the
    metrics read are converted at the end (dropped as dead code when a compiled loss does not return them).

    Replaces `_general_clip_mode` (through `clipped_surrogate`) there; held equal to it (loss, gradient, ratio and
    flags, torch.equal) by tests/theory/test_loss_fast_paths.py::test_interval_fast_path_equals_the_general_clip,
    and test_the_clip_mode_takes_the_fast_paths checks the dispatch reaches it."""
    import torch

    from divclip.theory.forms._kernels import (
        LOG_RATIO_CLAMP,
        PolicyTerms,
        _decision_ratio,
        _exp,
        _per_token_clip,
        _WithGradient,
        exp_float32,
        folded_binary_kl_clip,
        host_solves_bounds,
        ratio_bounds,
        ratio_gradient,
    )

    with torch.no_grad():
        folded = spec.p_dependent and host_solves_bounds(spec, log_prob)  # binary KL on the CPU, decided whole
        raw = log_prob - old_log_prob  # (B, T)
        log_ratio = raw.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        # verl's clamp stops the gradient (folded: the sign of `signed` says it)
        out_of_range = (log_ratio != raw) if spec.param("clamp_log_ratio") and not folded else None
        exp32 = exp_float32(spec)  # SkyRL: exp in float32 whatever the dtype (`exp_dtype`)
        exp_of = log_ratio if spec.param("clamp_log_ratio") else raw
        ratio = _exp(exp_of, exp32)
        del raw
        # -(A·r) is (-A)·r to the bit (a float product's sign is the XOR of its factors'), without a -A tensor
        loss_unclipped = torch.mul(advantages, ratio).neg_()  # -A·r
        if folded:
            signed = folded_binary_kl_clip(spec, ratio, old_log_prob, log_prob, advantages)
            loss = torch.mul(advantages, signed.abs()).neg_()  # -A·clip(r)
            clipped = loss > loss_unclipped  # (metrics only) the clipped branch is strictly larger: gradient 0
            drop = torch.signbit(signed)  # clipped, or outside the clamp
            # a kept token's loss is -A·r, r itself, so its gradient: a copy, as `loss` may still take the dual clip
            loss_unclipped = loss.clone()
        else:
            if spec.p_dependent:  # only a token pushed past a bound by its own A is clipped (`_general_clip_mode`)
                true_ratio = _decision_ratio(spec, ratio, log_prob, old_log_prob)
                clipped_ratio = _per_token_clip(spec, ratio, old_log_prob, advantages, true_ratio, log_prob, log_prob)
            else:
                clipped_ratio = ratio.clamp(*ratio_bounds(spec))
            # -A·clip(r); in place on the clamp's own tensor (`_per_token_clip` may hand back `ratio` itself)
            loss_clipped = (
                torch.mul(clipped_ratio, advantages) if spec.p_dependent else clipped_ratio.mul_(advantages)
            ).neg_()
            loss = torch.maximum(loss_unclipped, loss_clipped)
            clipped = loss_clipped > loss_unclipped  # the clipped branch is strictly larger: gradient 0
            del loss_clipped
            drop = clipped
        negative = advantages < 0
        dual = None
        if spec.param("dual_clip_c") is not None:
            cap = advantages * -spec.param("dual_clip_c")  # -A·c
            dual = (loss > cap) & negative
            loss = torch.where(dual, cap, loss)
            drop = drop | dual
        if out_of_range is not None:
            drop = drop | out_of_range  # (NaN drops too)
        # d(-A·r)/d log π = -A·r where kept, else 0 (rounded as through a float32 exp with exp32)
        grad = (ratio_gradient(advantages, exp_of, True) if exp32 else loss_unclipped).masked_fill_(drop, 0.0)
        dtype = ratio.dtype
        flags = clipped.to(dtype), (clipped & negative).to(dtype), None if dual is None else dual.to(dtype)
    return PolicyTerms(_WithGradient.apply(log_prob, loss, grad), log_ratio, ratio, *flags, None, grad)


def _general_clip_mode(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> PolicyTerms:
    """`loss` for any spec: intersections, p-dependent bounds, a dual-clipped sequence ratio; the reference
    the two fast paths above are tested against (tests/theory/test_loss_fast_paths.py)."""
    import torch

    from divclip.theory.forms._kernels import (
        PolicyTerms,
        _decision_ratio,
        _flag,
        _intersection_clip,
        _per_token_clip,
        _ratio,
        _WithGradient,
        clipped_surrogate,
        exp_float32,
        ratio_bounds,
        ratio_gradient,
    )

    with torch.no_grad():
        log_ratio, ratio, in_range = _ratio(spec, log_prob, old_log_prob, mask)
        each = None
        if is_intersection(spec):
            clipped_ratio, each, lo, hi = _intersection_clip(spec, ratio, old_log_prob)
        elif spec.p_dependent:
            true_ratio = _decision_ratio(spec, ratio, log_prob, old_log_prob)  # moved tokens only: by their own A
            clipped_ratio = _per_token_clip(spec, ratio, old_log_prob, advantages, true_ratio, log_prob, log_prob)
        else:
            clipped_ratio = torch.clamp(ratio, *ratio_bounds(spec))
        sur = clipped_surrogate(ratio, clipped_ratio, advantages, spec.param("dual_clip_c"))
        keep = 1.0 - sur.clipped  # (B, T) 1.0 where the token keeps its gradient
        if sur.dual is not None:
            keep.sub_(sur.dual)
        if in_range is not None:  # None only where the spec does not clamp (TRL): a static choice
            keep.mul_(in_range)  # verl's log-ratio clamp also stops the gradient
        if exp_float32(spec):  # the gradient through SkyRL's float32 exp, rounded as its autograd rounds it
            raw = log_prob - old_log_prob
            exp_of = log_ratio if spec.param("clamp_log_ratio") else raw
            grad = ratio_gradient(advantages, exp_of, True).mul_(keep)
        else:
            grad = sur.loss_unclipped.mul_(keep)  # d(-A·r)/d log π = -A·r where kept, else 0
        clipped_low = _flag(torch.lt, advantages, 0.0).mul_(sur.clipped)
        by_part = None
        if each is not None:  # which part's bound bound: its lo is the max / its hi the min
            clipped_high = sur.clipped - clipped_low
            by_part = tuple(
                (
                    clipped_low * torch.as_tensor(lo_i >= lo, dtype=ratio.dtype, device=ratio.device),
                    clipped_high * torch.as_tensor(hi_i <= hi, dtype=ratio.dtype, device=ratio.device),
                )
                for lo_i, hi_i in each
            )
    loss = _WithGradient.apply(log_prob, sur.loss, grad)
    return PolicyTerms(loss, log_ratio, ratio, sur.clipped, clipped_low, sur.dual, by_part, grad)


FORM = Form(
    "clip",
    "hard clip",
    "max(−A·r, −A·clip(r, lo, hi)), for A < 0 at most −A·c with a dual clip",
    (
        "arXiv:1707.06347",
        "arXiv:1912.09729 eq. 5",
        "verl:vanilla",
        "trl:grpo",
        "trl:bnpo",
        "trl:dr_grpo",
        "trl:dapo",
    ),
    weight=weight,
    interval=interval,
    example="grpo",
    levels=("token", "sequence"),
    loss=loss,
    params=(
        CLAMP_LOG_RATIO,
        EXP_DTYPE,
        DUAL_CLIP_C,
        Param(
            "seq_grad_mean",
            False,
            "True ('/seq_grad_mean=1'): GSPO's gradient through the sequence mean (OpenRLHF, slime): each token gets "
            "its row's mean of the kept −A·s; False: verl's sg(s)·π/sg(π), each token its own −A·s (level "
            "'sequence' only)",
            kind="flag",
        ),
    ),
    check=_check,
    extra={"params_at_level": {"seq_grad_mean": "sequence"}},  # a parameter shown (atlas) only at that level
)
