"""Clip-Cov (form 'clip_cov'; arXiv:2505.22617 §4, verl `clip_cov`): PPO's clip, and a random few tokens of high
covariance (A − Ā)(log π − mean log π) lose their gradient.

The choice is a (B, T) 0/1 mask computed once from the whole batch, after which the loss is per token and
`agg_loss` applies as usual. The one host read of the verl forms is here: Clip-Cov's random pick in eager mode
calls `torch.randperm(K)` with K the number of candidate tokens, to draw exactly verl's tokens (`_clip_cov_pick`);
under torch.compile a sync-free draw of the same size is used (`_pick_without_sync`).

Reproduces verl 0.9.1's `clip_cov` (`verl.trainer.ppo.core_algos`), value and gradient, for every `loss_agg_mode`
(tests/theory/test_losses_verl_atlas.py calls verl's own function): the per-token loss is built from verl's
floating-point operations in verl's order. r is unclamped, as in verl's clip_cov.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from divclip.theory.forms._form import Form, Param
from divclip.theory.forms._numpy import _ppo_interval

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms


# ------------------------------------------------------------------------------------------ torch
def _batch_covariance(log_prob, advantages, mask):
    """(A − Ā)(log π − mean log π) with verl's masked means (Σ m·x / (Σ m + 1e-8)), no autograd. (B, T)"""
    from divclip.theory.loss_metrics import masked_mean_verl

    return (advantages - masked_mean_verl(advantages, mask)) * (log_prob - masked_mean_verl(log_prob, mask))


def _pick_like_verl(candidates, mask, rho):
    """verl's draw: the candidates in row-major order, `torch.randperm(K)` on the default CPU generator, the
    first min(⌊ρ·N⌋ ∨ 1, K). K (a count of tensor entries) is read on the host: the one host read of the
    verl forms, needed because randperm's output depends on K."""
    import torch

    idx = torch.nonzero(candidates)  # (K, 2)
    clip_num = max(int(rho * mask.sum().item()), 1)
    picked = torch.zeros_like(candidates)
    if len(idx) > 0:
        perm = torch.randperm(len(idx))
        idx = idx[perm[: min(clip_num, len(idx))]]
        picked[idx[:, 0], idx[:, 1]] = True
    return picked


def _pick_without_sync(candidates, mask, rho):
    """The same number of uniformly random candidates, drawn without a host read (under torch.compile): every
    candidate gets a uniform key, the ⌊ρ·N⌋ ∨ 1 smallest keys are taken. ⌊ρ·N⌋ <= ⌊ρ·B·T⌋, a bound known from
    the shape, so one top-k of that static size suffices. Same tokens as verl when every candidate is
    picked; otherwise a different (equally uniform) draw."""
    import torch

    flat = candidates.reshape(-1)  # (B·T,)
    k_max = min(max(int(rho * flat.numel()), 1), flat.numel())
    clip_num = torch.floor(rho * mask.sum(dtype=torch.float64)).clamp_(min=1.0)  # verl's max(int(ρ·N), 1)
    keys = torch.rand(flat.shape, device=flat.device).masked_fill_(~flat, 2.0)  # candidates in [0, 1)
    order = torch.topk(keys, k_max, largest=False).indices  # (k_max,) smallest keys first
    take = torch.arange(k_max, device=flat.device) < clip_num  # the first clip_num of them
    picked = torch.zeros_like(flat).scatter_(0, order, take)
    return (picked & flat).reshape(candidates.shape)


def _clip_cov_pick(log_prob, advantages, mask, clipped_by_ratio, spec):
    """bool (B, T): the tokens whose gradient Clip-Cov removes. Candidates are unmasked tokens the ratio clip
    left alone whose covariance lies strictly inside (lb, ub); a random ⌊ρ·N⌋ ∨ 1 of them are picked."""
    import torch

    cov = _batch_covariance(log_prob, advantages, mask)
    candidates = (cov < spec.param("clip_cov_ub")) & (cov > spec.param("clip_cov_lb"))
    candidates &= (mask > 0) & ~clipped_by_ratio
    rho = spec.param("clip_cov_ratio")
    if torch.compiler.is_compiling():
        return _pick_without_sync(candidates, mask, rho)
    return _pick_like_verl(candidates, mask, rho)


def loss(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """Clip-Cov (verl `clip_cov`, arXiv:2505.22617 §4): PPO's max(−A·r, −A·clip(r)) with r unclamped, times 0
    on the picked tokens. Gradient −A·r·∇log π on tokens neither clipped nor picked.

    Flags: `clipped` marks both kinds of removed tokens; `by_part` splits them, part 0 the ratio clip and part
    1 the covariance pick (verl's `pg_clipfrac` is part 1's fraction, low + high)."""
    import torch

    from divclip.theory.forms._kernels import LOG_RATIO_CLAMP, PolicyTerms, _flag, _p_free_bounds, _WithGradient

    lo, hi = _p_free_bounds(spec)
    with torch.no_grad():
        log_ratio = log_prob - old_log_prob  # (B, T)
        ratio = log_ratio.exp()  # unclamped, as verl's clip_cov
        loss_unclipped = -advantages * ratio
        loss_clipped = -advantages * torch.clamp(ratio, lo, hi)
        by_ratio = loss_clipped > loss_unclipped  # (B, T) bool
        picked = _clip_cov_pick(log_prob, advantages, mask, by_ratio & (mask > 0), spec)  # never by_ratio
        pick_flag = picked.to(ratio.dtype)
        value = torch.maximum(loss_unclipped, loss_clipped).mul_(1.0 - pick_flag)  # verl's max(·)·corr
        ratio_flag = by_ratio.to(ratio.dtype)
        clipped = ratio_flag + pick_flag  # disjoint: the two ways a token loses its gradient
        grad = loss_unclipped.mul_(1.0 - clipped)  # d(−A·r)/d log π where kept
        neg = _flag(torch.lt, advantages, 0.0)
        ratio_low, pick_low = ratio_flag * neg, pick_flag * neg
        by_part = ((ratio_low, ratio_flag.sub_(ratio_low)), (pick_low, pick_flag.sub_(pick_low)))
        metric_log_ratio = log_ratio.clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    loss = _WithGradient.apply(log_prob, value, grad)
    return PolicyTerms(loss, metric_log_ratio, ratio, clipped, clipped * neg, None, by_part, grad)


FORM = Form(
    "clip_cov",
    "batch-selective",
    "max(−A·r, −A·clip(r, lo, hi))·c, c = 0 on a random ⌊ρ·N⌋ of the unclipped tokens whose "
    "(A − Ā)(log π − mean log π) lies in (lb, ub)",
    ("arXiv:2505.22617", "verl:clip_cov"),
    params=(
        Param(
            "clip_cov_ratio",
            2e-4,
            "ρ: the share of the batch's tokens whose gradient is removed (at least one)",
            above=0.0,
            at_most=1.0,
        ),
        Param("clip_cov_lb", 1.0, "lower bound of the covariance window the picked tokens come from"),
        Param("clip_cov_ub", 5.0, "upper bound of that window"),
    ),
    token_level=False,
    interval=_ppo_interval,
    weight_note="PPO's w on the tokens not picked, 0 on the picked ones; which tokens are picked depends on "
    "the whole batch (the covariance uses batch means) and on a random draw, so w is not a "
    "function of (q, r, A); the interval is the PPO clip's",
    example="ratio:0.2:0.2/clip_cov",
    loss=loss,
)
