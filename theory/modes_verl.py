"""Torch implementations of the loss forms declared in `divclip.theory.forms_verl` (`register_mode`).

Each mode reproduces the verl 0.9.1 function it is named after (`verl.trainer.ppo.core_algos`), value and
gradient, for every `loss_agg_mode` (tests/theory/test_losses_verl_atlas.py calls verl's own functions):
the per-token loss is built from verl's floating-point operations in verl's order, so that `policy_loss`'s
aggregation of it is verl's `agg_loss` of verl's loss matrix. Three forms are not a per-token sum aggregated
by `agg_loss` in verl, and say how divclip reproduces them:

* sapo: verl's aggregates seq-mean-token-mean whatever `loss_agg_mode` says; the spec read from verl sets
  `sapo_seq_mean=1`, and the form then aggregates itself that way (`_sapo_aggregate`).
* geo_mean: verl averages one loss per sequence over all rows, whatever `loss_agg_mode` says. Its per-token
  loss here carries the sequence's loss on the first token (0 on the others), and the form aggregates itself
  (`register_aggregation`): the mean over rows of the row sums, empty rows counting as 0 as in verl.
* kl_cov and clip_cov choose tokens from the whole batch (a top-k, a random pick); the choice is a (B, T) 0/1
  mask computed once, after which the loss is per token and `agg_loss` applies as usual.

No form reads a tensor's value on the host (no .item(), no data-dependent Python branch), with one
documented exception: Clip-Cov's random pick in eager mode, which must call `torch.randperm(K)` with K the
number of candidate tokens to draw exactly verl's tokens (`_clip_cov_pick`).

The diagnostics' `log_ratio` is log r clamped to ±20 (divclip's `ppo_kl`); verl's clip_cov, kl_cov,
geo_mean and dro do not clamp their ratio, so their losses here do not either.
"""

from __future__ import annotations

import torch

from divclip.theory.loss_metrics import (
    aggregate,
    masked_mean_verl,
    masked_sum_finite,
    masked_sum_verl,
    register_aggregation,
)
from divclip.theory.loss_modes import LOG_RATIO_CLAMP, PolicyTerms, _flag, _WithGradient, ratio_bounds, register_mode

IS_SAFETY_BOUND = 20.0  # verl rollout_corr_helper.SAFETY_BOUND: log IS weights are clamped to ±20 before exp
_FAR = 1e30  # below any covariance of finite log-probs and advantages


@torch.no_grad()
def _metric_ratio(log_prob, old_log_prob):
    """(log r clamped to ±20, r) for the diagnostics (ppo_kl, kl3, ratio_*), without a host read."""
    log_ratio = (log_prob - old_log_prob).clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T)
    return log_ratio, log_ratio.exp()


def _p_free_bounds(spec):
    if spec.p_dependent:
        raise ValueError(
            f"mode {spec.mode!r} clips with one scalar interval: it needs a p-independent measure, "
            f"got measure={spec.measure_name!r}"
        )
    return ratio_bounds(spec)  # a compile-time constant under torch.compile


# ---------------------------------------------------------------------------------------------- GPG
@register_mode("gpg")
def _gpg_mode(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """GPG (verl `gpg`, and `bypass_mode` REINFORCE without IS weights): −log π·A, gradient −A·∇log π."""
    with torch.no_grad():
        neg_adv = -advantages  # (B, T) the gradient −A; log π·(−A) is verl's (−log π)·A bit for bit
        value = log_prob * neg_adv
    loss = _WithGradient.apply(log_prob, value, neg_adv)  # −(g·A) = g·(−A) exactly
    return PolicyTerms(loss, None, None, None, None, grad=neg_adv)  # the token ratio: for the metrics only


# ---------------------------------------------------------------------------------------------- DRO
@register_mode("dro")
def _dro_mode(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """DRO (verl `dro`): −(log π·A − ½β·(log r)²), log r unclamped, in verl's operations (the value is bit-equal);
    its gradient −A + β·log r is attached in closed form."""
    beta = spec.param("dro_beta")
    with torch.no_grad():
        log_ratio = log_prob - old_log_prob  # (B, T)
        value = -(log_prob * advantages - 0.5 * beta * log_ratio.square())
        grad = torch.add(-advantages, log_ratio, alpha=beta)  # −A + β·log r
        metric_log_ratio = log_ratio.clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # reused: the diagnostics' log r
    loss = _WithGradient.apply(log_prob, value, grad)
    return PolicyTerms(loss, metric_log_ratio, None, None, None, grad=grad)  # ratio None: exp(log r), if asked


# ----------------------------------------------------------------------------------------- Clip-Cov
def _batch_covariance(log_prob, advantages, mask):
    """(A − Ā)(log π − mean log π) with verl's masked means (Σ m·x / (Σ m + 1e-8)), no autograd. (B, T)"""
    return (advantages - masked_mean_verl(advantages, mask)) * (log_prob - masked_mean_verl(log_prob, mask))


def _pick_like_verl(candidates, mask, rho):
    """verl's draw: the candidates in row-major order, `torch.randperm(K)` on the default CPU generator, the
    first min(⌊ρ·N⌋ ∨ 1, K). K (a count of tensor entries) is read on the host: the one host read of the
    verl forms, needed because randperm's output depends on K."""
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
    flat = candidates.reshape(-1)  # (B·T,)
    k_max = min(max(int(rho * flat.numel()), 1), flat.numel())
    clip_num = torch.floor(rho * mask.sum(dtype=torch.float64)).clamp_(min=1.0)  # verl's max(int(ρ·N), 1)
    keys = torch.rand(flat.shape, device=flat.device).masked_fill_(~flat, 2.0)  # candidates in [0, 1)
    order = torch.topk(keys, k_max, largest=False).indices  # (k_max,) smallest keys first
    take = torch.arange(k_max, device=flat.device) < clip_num  # the first clip_num of them
    picked = torch.zeros_like(flat).scatter_(0, order, take)
    return (picked & flat).reshape(candidates.shape)


@torch.no_grad()
def _clip_cov_pick(log_prob, advantages, mask, clipped_by_ratio, spec):
    """bool (B, T): the tokens whose gradient Clip-Cov removes. Candidates are unmasked tokens the ratio clip
    left alone whose covariance lies strictly inside (lb, ub); a random ⌊ρ·N⌋ ∨ 1 of them are picked."""
    cov = _batch_covariance(log_prob, advantages, mask)
    candidates = (cov < spec.param("clip_cov_ub")) & (cov > spec.param("clip_cov_lb"))
    candidates &= (mask > 0) & ~clipped_by_ratio
    rho = spec.param("clip_cov_ratio")
    if torch.compiler.is_compiling():
        return _pick_without_sync(candidates, mask, rho)
    return _pick_like_verl(candidates, mask, rho)


@register_mode("clip_cov")
def _clip_cov_mode(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """Clip-Cov (verl `clip_cov`, arXiv:2505.22617 §4): PPO's max(−A·r, −A·clip(r)) with r unclamped, times 0
    on the picked tokens. Gradient −A·r·∇log π on tokens neither clipped nor picked.

    Flags: `clipped` marks both kinds of removed tokens; `by_part` splits them, part 0 the ratio clip and part
    1 the covariance pick (verl's `pg_clipfrac` is part 1's fraction, low + high)."""
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


# ------------------------------------------------------------------------------------------- KL-Cov
@torch.no_grad()
def _kl_cov_select(log_prob, advantages, mask, rho):
    """0/1 (B, T): the ⌊ρ·N⌋ ∨ 1 unmasked tokens of largest covariance (A − Ā)(log π − mean log π), N the
    unmasked count, means over the unmasked tokens (verl's top-k, without a host read: ⌊ρ·N⌋ <= ⌊ρ·B·T⌋, a
    static bound, so one top-k of that size, then the first ⌊ρ·N⌋ ∨ 1 of it).

    verl takes the means of the compacted unmasked entries (`x[mask].mean()`), here Σ m·x / Σ m: the two can
    differ in the last bit, which moves every covariance by about an ulp; the selection then differs from
    verl's only where two covariances within that rounding straddle the k-th place."""
    valid = _flag(torch.gt, mask, 0.0)  # (B, T) 0/1 floats: bool masks and `where` are slow on CPU
    count = valid.sum()
    # x·valid holds where(valid, x, 0)'s numbers (the inputs are finite), so the sums are the same floats
    cov = (advantages - (advantages * valid).sum() / count) * (log_prob - (log_prob * valid).sum() / count)
    # padding out of the top-k's reach: −1e30 (finite: a lerp from −inf would give NaN at weight 1)
    cov = torch.lerp(torch.full((), -_FAR, dtype=cov.dtype, device=cov.device), cov, valid).reshape(-1)
    k_max = min(max(int(rho * cov.numel()), 1), cov.numel())
    k = torch.floor(rho * count.to(torch.float64)).clamp_(min=1.0)  # verl's max(1, int(N·ρ))
    top = torch.topk(cov, k_max).indices  # (k_max,) largest first
    take = torch.arange(k_max, device=cov.device, dtype=valid.dtype) < k
    chosen = torch.zeros_like(valid.reshape(-1)).scatter_(0, top, take.to(valid.dtype))
    return chosen.reshape(valid.shape).mul_(valid)  # (B, T) 0/1


@register_mode("kl_cov")
def _kl_cov_mode(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """KL-Cov (verl `kl_cov`, arXiv:2505.22617 §4): −A·r everywhere (r unclamped, no clip), and −A·r + κ·|log r|
    on the top-k covariance tokens. Plain autograd through verl's ops, so value and gradient are verl's.
    No token is clipped (`clipped` is None); the penalised share is ⌊ρ·N⌋ ∨ 1 tokens by construction."""
    log_ratio = log_prob - old_log_prob  # (B, T)
    ratio = torch.exp(log_ratio)
    loss_plain = -advantages * ratio
    selected = _kl_cov_select(log_prob.detach(), advantages, mask, spec.param("kl_cov_ratio"))  # (B, T) 0/1
    loss = loss_plain + selected * (spec.param("kl_cov_coef") * log_ratio.abs())  # verl's sums where selected
    metric_log_ratio = log_ratio.detach().clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return PolicyTerms(loss, metric_log_ratio, ratio.detach(), None, None)


# --------------------------------------------------------------------------------------------- GMPO
@register_mode("geo_mean")
def _geo_mean_mode(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """GMPO (verl `geo_mean`, arXiv:2507.20673): per sequence, L = −Ā·exp(mean_t x̃_t) with x̃ = log r clipped to
    [−ε_low, ε_high] in A's direction (sgn(A)·min(sgn(A)·x, sgn(A)·clip(x))), Ā the sequence's mean advantage;
    L in verl's operations, so it is bit-equal. Its gradient, ∂L/∂log π_t = L·m_t/(|y| + 1e-8) on tokens the min
    did not clip and A ≠ 0 (0 elsewhere), is attached in closed form.

    The per-token loss carries the sequence's L on its first token and 0 on the others; the form aggregates
    itself (`_geo_mean_aggregate`: the mean over rows of the row sums), as verl ignores loss_agg_mode.
    Flags: `clipped` marks the tokens the min clipped (A > 0 above ε_high, A < 0 below −ε_low); `by_part` has
    verl's own count, every token outside [−ε_low, ε_high] split by the sign of A (part 0: low = A < 0 is
    verl's pg_clipfrac_lower, high = A > 0 its pg_clipfrac)."""
    eps_low, eps_high = spec.param("gmpo_eps_low"), spec.param("gmpo_eps_high")
    with torch.no_grad():
        log_ratio = log_prob - old_log_prob  # (B, T), unclamped as in verl
        sign = torch.sign(advantages)
        clamped = torch.clamp(log_ratio, -eps_low, eps_high)
        log_ratio_min = sign * torch.min(sign * log_ratio, sign * clamped)
        denom = mask.sum(dim=-1) + 1e-8  # (B,)
        seq_ratio = torch.exp((log_ratio_min * mask).sum(dim=-1) / denom)  # (B,)
        seq_loss = -((advantages * mask).sum(dim=-1) / denom) * seq_ratio  # (B,) −Ā·s
        pos, neg = _flag(torch.gt, advantages, 0.0), _flag(torch.lt, advantages, 0.0)
        clipped_high = _flag(torch.gt, log_ratio, eps_high).mul_(pos)
        clipped_low = _flag(torch.lt, log_ratio, -eps_low).mul_(neg)
        clipped = clipped_high.add_(clipped_low)
        keep = (pos + neg).sub_(clipped)  # A ≠ 0 and not clipped
        grad = keep.mul_(mask).mul_((seq_loss / denom).unsqueeze(-1))  # (B, T)
        value = torch.zeros_like(log_ratio)
        value[:, :1] = seq_loss.unsqueeze(-1)
        outside = _flag(torch.ne, log_ratio, clamped)
        by_part = ((outside * neg, outside.mul_(pos)),)
        ratio = seq_ratio.unsqueeze(-1).expand_as(log_ratio)
        metric_log_ratio = log_ratio.clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    loss = _WithGradient.apply(log_prob, value, grad)
    return PolicyTerms(loss, metric_log_ratio, ratio, clipped, clipped_low, None, by_part, grad)


@register_aggregation("geo_mean")
def _geo_mean_aggregate(terms, mask, rollout_is_weights, spec):
    """verl's geo_mean loss: the mean over all B rows of the sequence losses (an empty row is −0·1 = 0 and
    counts), whatever loss_agg_mode says; rollout IS weights enter as verl's per-sequence geometric mean,
    exp(Σ m·log(w + 1e-10) / (Σ m + 1e-8))."""
    seq_loss = terms.loss.sum(dim=-1)  # (B,) exactly L: the other entries are 0
    if rollout_is_weights is not None:
        seq_loss = seq_loss * torch.exp(
            (torch.log(rollout_is_weights + 1e-10) * mask).sum(dim=-1) / (mask.sum(dim=-1) + 1e-8)
        )
    return torch.mean(seq_loss)


# --------------------------------------------------------------------------------------------- SAPO
@register_aggregation("sapo")
def _sapo_aggregate(terms, mask, rollout_is_weights, spec):
    """verl's sapo (`sapo_seq_mean=1`, what `from_engine('verl', ...)` reads): seq-mean-token-mean of the per-token
    loss times the rollout IS weights, whatever loss_agg_mode says. A plain sapo (TRL's) returns None: it honours
    loss_agg_mode."""
    if spec.param("sapo_seq_mean") == 0.0:
        return None
    loss_mat = terms.loss if rollout_is_weights is None else terms.loss * rollout_is_weights  # (B, T)
    return aggregate(loss_mat, mask, "seq-mean-token-mean", None, masked_sum_finite)


# ------------------------------------------------------------------------- bypass_mode REINFORCE + IS
def _check_flag(spec, name):
    value = spec.param(name)
    if value not in (0.0, 1.0):
        raise ValueError(f"ClipSpec.params[{name!r}] must be 0 or 1, got {value!r}")
    return bool(value)


@torch.no_grad()
def _rollout_is_weights(log_prob, old_log_prob, mask, spec, level: str):
    """(w, raw) (B, T): verl's `compute_rollout_correction_weights` with old_log_prob the rollout's (bypass
    mode): raw = exp(clamp(log r, ±20))·m per token, or exp(clamp(Σ_t m·log r, ±20))·m per sequence; w = raw
    truncated at C (TIS) or zeroed outside [c, C] (IcePop); optionally divided by its batch mean where that
    mean exceeds 1e-8 (verl's Python `if`, here a torch.where)."""
    cap, floor = spec.param("rollout_is_threshold"), spec.param("rollout_is_threshold_lower")
    normalize = _check_flag(spec, "rollout_is_batch_normalize")
    log_ratio = log_prob - old_log_prob  # (B, T)
    if level == "token":
        raw = torch.exp(torch.clamp(log_ratio, min=-IS_SAFETY_BOUND, max=IS_SAFETY_BOUND))
    else:
        seq = masked_sum_verl(log_ratio, mask, dim=-1).unsqueeze(-1)  # (B, 1)
        raw = torch.exp(torch.clamp(seq, min=-IS_SAFETY_BOUND, max=IS_SAFETY_BOUND)).expand_as(log_ratio)
    raw = raw * mask
    if floor > 0:
        weights = torch.where((raw >= floor) & (raw <= cap), raw, torch.zeros_like(raw))
    else:
        weights = raw.clamp(max=cap)
    if normalize:
        if level == "token":
            mean = masked_mean_verl(weights, mask)
        else:
            seq_weights = masked_sum_verl(weights, mask, dim=-1) / (mask.sum(dim=-1) + 1e-8)  # (B,)
            seq_mask = (mask.sum(dim=-1) > 0).to(dtype=weights.dtype)
            mean = (seq_weights * seq_mask).sum() / seq_mask.sum().clamp_min(1e-8)
        weights = torch.where(mean > 1e-8, weights / mean, weights)
    return weights, raw


def _reinforce_is(log_prob, old_log_prob, advantages, mask, spec, level) -> PolicyTerms:
    weights, raw = _rollout_is_weights(log_prob, old_log_prob, mask, spec, level)
    loss = -advantages * log_prob * weights  # verl's compute_policy_loss_reinforce, its product order
    with torch.no_grad():
        cap, floor = spec.param("rollout_is_threshold"), spec.param("rollout_is_threshold_lower")
        clipped_low = _flag(torch.lt, raw, floor) if floor > 0 else torch.zeros_like(raw)
        clipped = _flag(torch.gt, raw, cap).add_(clipped_low)  # truncated (or zeroed) above C, zeroed below c
    if level == "sequence":
        log_ratio, ratio = _metric_ratio(log_prob, old_log_prob)
        return PolicyTerms(loss, log_ratio, raw.detach(), clipped, clipped_low)
    return PolicyTerms(loss, None, None, clipped, clipped_low)  # the token ratio, formed only for the metrics


@register_mode("reinforce_is")
def _reinforce_is_mode(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """verl `bypass_mode` REINFORCE, IS weight per token: −A·log π·sg(w), w = min(r, C) per token."""
    return _reinforce_is(log_prob, old_log_prob, advantages, mask, spec, "token")


@register_mode("reinforce_seq_is")
def _reinforce_seq_is_mode(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """verl `bypass_mode` REINFORCE, IS weight per sequence: w = min(Π_t r_t, C) on every token.
    `ratio` is that (untruncated, clamped) sequence weight."""
    return _reinforce_is(log_prob, old_log_prob, advantages, mask, spec, "sequence")
