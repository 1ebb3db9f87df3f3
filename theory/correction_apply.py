"""The rollout correction in torch: importance weights and a keep mask from π_old and π_rollout (a `Correction`).

verl 0.9.1's semantics (`verl.trainer.ppo.rollout_corr_helper.compute_rollout_correction_and_rejection_mask`):
with l = log ρ = old_log_prob - rollout_log_prob,

* the weight w is exp(l) per token, or exp(Σ_t m_t·l_t) per sequence, each exponent clamped to ±20 (unless
  `clamp_log_ratio=False`, TRL); 0 on padding; then truncated to [c, C] or zeroed outside it ('mask');
  batch normalisation divides by the masked mean (over tokens; over sequences at sequence level);
* each rejection rule keeps a token (token_*) or a whole sequence (seq_*) whose statistic k1 = -l, k2 = l²/2 or
  k3 = e^l - 1 - l (l clamped to ±20), or its sum / mean / max over the sequence, lies within the threshold
  (seq_any_k1, SkyRL's outlier mask: every valid token's k1 within the band, else the whole sequence goes);
  keep_mask = response_mask · Π_rules keep;
* the off-policy sequence mask (TRL's OPSM) multiplies the weights by 0 for a sequence with A < 0 whose mean
  k1 exceeds δ, as TRL multiplies the per-token loss (a zero weight still counts in the loss's denominator; a
  rejected token does not).

* AReaL's filter (`Correction.filter`, areal/utils/functional/functional.py `apply_rejection_sampling`) gives
  its behaviour weight, exp(l) per token or the geometric mean of the sequence (metric ratio at sequence level),
  never clamped in log, non-finite l read as 0, masked (weight 0) or clamped as `Filter` says; the tokens stay
  in keep_mask (AReaL's loss counts them in its denominator);
* OpenRLHF's gate (a `Filter` with seq_weight 'token' or a binary metric) keeps each token's ρ where the
  token's (or its sequence's mean) statistic is inside the band, 0 elsewhere, the tokens kept in keep_mask;
* AReaL's M2PO (`Correction.m2po`, areal/trainer/ppo/actor.py `_apply_m2po_masking`) drops the valid tokens of
  the batch with the largest l² until the mean l² of the rest is below the threshold; the other parts then see
  the reduced mask, as AReaL's loss does.

Means are verl's: Σ m·x / (Σ m + 1e-8).
"""

from __future__ import annotations

import math

import torch

from divclip.theory.correction import Correction, parse_correction

__all__ = ["METRIC_NAMES_AREAL", "METRIC_NAMES_VERL", "SAFETY_BOUND", "rollout_correction"]

SAFETY_BOUND = 20.0
"""verl's clamp on log ρ before exp (exp(20) ≈ 4.9e8)."""

METRIC_NAMES_VERL = {
    "is_weight_mean": "rollout_corr/rollout_is_mean",
    "is_ess": "rollout_corr/rollout_is_eff_sample_size",
    "is_fraction_high": "rollout_corr/rollout_is_ratio_fraction_high",
    "is_fraction_low": "rollout_corr/rollout_is_ratio_fraction_low",
    "rs_masked_fraction": "rollout_corr/rollout_rs_masked_fraction",
    "rs_seq_masked_fraction": "rollout_corr/rollout_rs_seq_masked_fraction",
    "mismatch_k1": "rollout_corr/kl",
    "mismatch_k3": "rollout_corr/k3_kl",
    "chi2_token": "rollout_corr/chi2_token",
}
METRIC_NAMES_AREAL = {
    "filter_fraction": "filtered_fraction",
    "is_weight_mean": "behave_imp_weight",
}
"""divclip's metric -> AReaL's stat of the same number (ppo_actor_loss_fn's `filtered_fraction`; the token mean of
its `behave_imp_weight` over the loss mask)."""
"""divclip's metric -> verl's name for the same number (is_* only when an importance weight is set, rs_* only
with rejection rules). verl's rollout_is_min/max are of the weights at token level but of the unclamped
sequence ratio at sequence level; divclip's is_weight_min/max are always of the weights applied."""


def _masked_mean(x, m, dim=None):
    return (x * m).sum() / (m.sum() + 1e-8) if dim is None else (x * m).sum(dim) / (m.sum(dim) + 1e-8)


def _check(old_log_prob, rollout_log_prob, response_mask, advantages, correction):
    named = {"old_log_prob": old_log_prob, "rollout_log_prob": rollout_log_prob, "response_mask": response_mask}
    if advantages is not None:
        named["advantages"] = advantages
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor of shape (batch, length), got {type(t).__name__}")
        if t.ndim != 2:
            raise ValueError(f"{name} must have shape (batch, length), got shape {tuple(t.shape)}")
        if t.shape != old_log_prob.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)} but old_log_prob has {tuple(old_log_prob.shape)}")
        if name != "response_mask" and not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    valid = response_mask.bool()
    for name in ("old_log_prob", "rollout_log_prob"):
        bad = torch.isnan(named[name]) & valid
        if bool(bad.any()):
            raise ValueError(f"{name} contains NaN at {int(bad.sum())} unmasked positions")
    if correction.opsm is not None and advantages is None:
        raise ValueError(f"correction {correction} has an off-policy sequence mask (opsm=): pass advantages=")


def _weights(log_ratio, mask, c: Correction, metrics: dict | None):
    """(B, T) importance weights; fills the is_* metrics."""
    clamp = (lambda x: x.clamp(-SAFETY_BOUND, SAFETY_BOUND)) if c.clamp_log_ratio else (lambda x: x)
    if c.exp_dtype == "float32":  # SkyRL's safe_exp_delta: exp in float32, cast back to the inputs' dtype
        exp = lambda x: torch.exp(x.to(torch.float32)).to(x.dtype)  # noqa: E731
    else:
        exp = torch.exp
    if c.is_level == "token":
        raw = exp(clamp(log_ratio))  # (B, T)
    else:
        seq = (log_ratio * mask).sum(-1, keepdim=True)  # (B, 1): log Π_t ρ_t
        raw = exp(clamp(seq)).expand_as(log_ratio)
    raw = raw * mask
    if c.is_mode == "truncate":
        w = raw.clamp(min=c.is_floor, max=c.is_cap) * mask
    else:
        keep = torch.ones_like(raw, dtype=torch.bool)
        if c.is_floor is not None:
            keep &= raw >= c.is_floor
        if c.is_cap is not None:
            keep &= raw <= c.is_cap
        w = torch.where(keep, raw, torch.zeros_like(raw))
    if metrics is not None:
        _weight_metrics(w, raw, log_ratio, mask, c, metrics)
    if c.batch_normalize:
        if c.is_level == "token":
            mean = _masked_mean(w, mask)
        else:
            seq_mask = (mask.sum(-1) > 0).to(w.dtype)
            mean = (_masked_mean(w, mask, -1) * seq_mask).sum() / seq_mask.sum().clamp_min(1e-8)
        w = w / torch.where(mean > 1e-8, mean, torch.ones_like(mean))  # verl leaves a ~0 mean alone
        if metrics is not None:
            metrics["is_batch_norm_factor"] = float(mean) if float(mean) > 1e-8 else 1.0
    return w


def _weight_metrics(w, raw, log_ratio, mask, c: Correction, metrics: dict) -> None:
    valid = mask.bool()
    metrics["is_weight_mean"] = float(_masked_mean(w, mask))
    metrics["is_weight_min"] = float(w[valid].min())
    metrics["is_weight_max"] = float(w[valid].max())
    # verl's ESS: 1 / mean(ŵ²) with ŵ = w / mean(w) over tokens, a fraction in (0, 1]; w capped at C first.
    # Every weight 0 (a mask that drops all): ESS 0, where verl divides by zero.
    capped = w if c.is_cap is None else w.clamp(min=0.0, max=c.is_cap)
    normalised = capped / (_masked_mean(capped, mask) + 1e-8)
    second = float(_masked_mean(normalised.square(), mask))
    metrics["is_ess"] = 1.0 / second if second > 0 else 0.0
    cap = math.inf if c.is_cap is None else c.is_cap
    floor = c.is_floor if c.is_floor is not None else (1.0 / cap if c.is_cap is not None else 0.0)
    if c.is_level == "token":
        metrics["is_fraction_high"] = float(_masked_mean((raw > cap).to(w.dtype), mask))
        metrics["is_fraction_low"] = float(_masked_mean((raw < floor).to(w.dtype), mask))
    else:  # one ratio per sequence, compared in log space over every row (verl's convention)
        seq = (log_ratio * mask).sum(-1)
        metrics["is_fraction_high"] = float((seq > math.log(cap)).to(w.dtype).mean())
        metrics["is_fraction_low"] = float((seq < (math.log(floor) if floor > 0 else -math.inf)).to(w.dtype).mean())


def _statistic(log_ratio, estimator):
    safe = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    if estimator == "k1":
        return -safe
    if estimator == "k2":
        return 0.5 * safe**2
    return torch.exp(safe) - 1.0 - safe


def _pooled(stat, mask, aggregation):
    """(B,) the sequence statistic; for 'max' a sequence without a valid token gets 0 (verl)."""
    if aggregation == "sum":
        return (stat * mask).sum(-1)
    if aggregation == "mean":
        return _masked_mean(stat, mask, -1)
    top = stat.masked_fill(~mask.bool(), -math.inf).max(-1).values
    return torch.where(top == -math.inf, torch.zeros_like(top), top)


def _keep(log_ratio, mask, c: Correction, metrics: dict | None):
    """(B, T) 0/1: the tokens every rejection rule keeps (1 on padding)."""
    keep = torch.ones_like(log_ratio, dtype=torch.bool)
    for r in c.rejections:
        stat = _statistic(log_ratio, r.estimator)
        if r.level == "sequence" and r.aggregation != "any":
            stat = _pooled(stat, mask, r.aggregation)[:, None].expand_as(log_ratio)
        if r.is_k1:
            ok = (stat >= math.log(r.lower)) & (stat <= math.log(r.upper))
        else:
            ok = stat <= r.upper
        if r.aggregation == "any":  # SkyRL's outlier mask: a sequence is kept when every valid token is in band
            ok = (ok | ~mask.bool()).all(-1, keepdim=True).expand_as(log_ratio)
        keep &= ok
        if metrics is not None:
            metrics[f"rs_{r.option}_masked_fraction"] = float(_masked_mean((~ok).to(mask.dtype), mask))
    if metrics is not None:
        valid = mask.bool()
        metrics["rs_masked_fraction"] = float(_masked_mean((~keep).to(mask.dtype), mask))
        metrics["rs_seq_masked_fraction"] = float((~keep & valid).any(-1).to(mask.dtype).mean())
    return keep


def _opsm(log_ratio, mask, advantages, delta):
    """(B, T) 0/1: TRL's get_off_policy_mask, keep where A >= 0 or the sequence's mean k1 <= δ."""
    mean_k1 = (-log_ratio * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)  # TRL's mean
    return ((advantages >= 0) | (mean_k1 <= delta)).to(log_ratio.dtype)


def _m2po_keep(log_ratio, mask, threshold):
    """(B, T) bool: AReaL's M2PO mask. Of the valid tokens sorted by l² (descending), the first k are dropped,
    k the first index whose suffix mean is below the threshold (every one but the last when none is)."""
    valid = mask.bool()
    m2 = log_ratio.square()
    selected = m2[valid]
    keep = valid.clone()
    n = selected.numel()
    if n == 0:
        return keep
    ordered, order = torch.sort(selected, descending=True)  # AReaL's own sort (ties as torch breaks them)
    counts = torch.arange(n, 0, -1, dtype=ordered.dtype, device=ordered.device)
    suffix_mean = ordered.flip(0).cumsum(0).flip(0) / counts
    below = torch.nonzero(suffix_mean < threshold)
    dropped = int(below[0, 0]) if below.numel() else n - 1
    kept_sorted = torch.ones(n, dtype=torch.bool, device=keep.device)
    kept_sorted[:dropped] = False
    kept = torch.empty_like(kept_sorted)
    kept[order] = kept_sorted
    keep[valid] = kept
    return keep


def _filter_weights(old, rollout, mask, f, metrics: dict | None):
    """(B, T) AReaL's behaviour weight of `f` (a `Filter`): 0 on padding and where masked."""
    raw = old - rollout
    log_ratio = torch.where(torch.isfinite(raw), raw, torch.zeros_like(raw))  # AReaL's sanitising
    valid = mask.bool()
    if f.metric == "ratio":
        stat = torch.exp(log_ratio)
    elif f.metric == "kl_k1":  # AReaL's KLEstimator(log π_prox, log π_behave), unclamped, on the raw difference
        stat = raw
    elif f.metric == "kl_k2":
        stat = raw.square() / 2.0
    elif f.metric == "kl_k3":
        stat = torch.exp(-raw) - 1 + raw
    else:  # OpenRLHF's gating statistics, in its arithmetic (PolicyLoss.forward; divclip.theory.correction)
        p = rollout.exp().clamp(1e-6, 1 - 1e-6)
        q = old.exp().clamp(1e-6, 1 - 1e-6)
        if f.metric == "binary_kl":
            stat = p * (p / q).log() + (1 - p) * ((1 - p) / (1 - q)).log()
        else:
            stat = (p - q).abs()

    def inside(x):
        return (x >= f.lower) & (x <= f.upper) if f.lower is not None else x <= f.upper

    w = torch.exp(log_ratio)
    original = w
    floor = 0.0 if f.lower is None else f.lower
    if f.level == "sequence":
        ratio = f.metric == "ratio"
        values = log_ratio if ratio else stat
        masked = torch.where(valid, values, torch.zeros_like(values))
        count = mask.sum(-1, keepdim=True).clamp(min=1)
        if ratio and f.seq_weight == "geometric":  # AReaL; OpenRLHF's seq gate keeps each token's ρ
            w = torch.exp(masked.sum(-1, keepdim=True) / count).expand_as(log_ratio)
            original = w
        if f.agg == "sum":
            pooled = masked.sum(-1, keepdim=True)
        elif f.agg == "mean":
            pooled = masked.sum(-1, keepdim=True) / count
        else:
            pooled = values.masked_fill(~valid, -math.inf).max(-1, keepdim=True)[0]
            pooled = torch.where(mask.sum(-1, keepdim=True) == 0, torch.zeros_like(pooled), pooled)
        ok = inside(torch.exp(pooled) if ratio else pooled).expand_as(log_ratio)
        if f.action == "clamp":
            w = torch.where(~ok, w.clamp(min=floor, max=f.upper), w)
    elif f.action == "mask":
        ok = inside(stat)
    else:
        w = w.clamp(min=floor, max=f.upper)
    kept = valid & ok if f.action == "mask" else valid
    changed = (valid & ~ok) if f.action == "mask" else (valid & (original != w))  # AReaL's filtered_fraction
    w = torch.where(kept, w, torch.zeros_like(w))
    if metrics is not None:
        metrics["filter_fraction"] = float(changed.sum()) / max(1, int(valid.sum()))
        metrics["is_weight_mean"] = float(_masked_mean(w, mask))
        metrics["is_weight_min"] = float(w[valid].min()) if bool(valid.any()) else 0.0
        metrics["is_weight_max"] = float(w[valid].max()) if bool(valid.any()) else 0.0
        normalised = w / (_masked_mean(w, mask) + 1e-8)
        second = float(_masked_mean(normalised.square(), mask))
        metrics["is_ess"] = 1.0 / second if second > 0 else 0.0
    return w


def _mismatch_metrics(log_ratio, mask, metrics: dict) -> None:
    """verl's off-policy diagnostics of π_rollout vs π_old (compute_offpolicy_metrics)."""
    metrics["mismatch_k1"] = float(_masked_mean(-log_ratio, mask))
    metrics["mismatch_k3"] = float(_masked_mean(torch.exp(log_ratio) - log_ratio - 1, mask))
    rho = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    metrics["chi2_token"] = float(_masked_mean(rho.square(), mask) - 1.0)


def rollout_correction(
    old_log_prob,
    rollout_log_prob,
    response_mask,
    correction: Correction | str,
    *,
    advantages=None,
    metrics: bool = True,
):
    """(is_weights or None, keep_mask, metrics) of `correction` (a `Correction` or its string), all (B, T).

    old_log_prob is the trainer's log π_old (π_θ's in bypass mode), rollout_log_prob the inference engine's;
    response_mask the 0/1 valid tokens; advantages (B, T) only for an off-policy sequence mask (opsm=).
    Computed in float64 for float64 inputs, else float32. is_weights is None when the correction has neither an
    importance weight nor an opsm; keep_mask is response_mask with the rejected tokens set to 0, in its dtype.
    Tensors are detached (a correction changes the measure, not the objective).

    With a filter (AReaL) the weights are its behaviour weight and its metrics filter_fraction (AReaL's
    filtered_fraction), is_weight_mean/min/max, is_ess; with m2po the dropped tokens leave keep_mask
    (m2po_masked_fraction: the share of valid tokens dropped).

    metrics (floats; {} with metrics=False, which reads nothing on the host): mismatch_k1, mismatch_k3 and
    chi2_token of ρ; with a weight is_weight_mean/min/max (before batch normalisation), is_ess (verl's,
    a fraction in (0, 1]), is_fraction_high/low (raw ρ above C / below c, or 1/C without c), is_batch_norm_factor;
    with rules rs_masked_fraction, rs_seq_masked_fraction and rs_{option}_masked_fraction; always
    kept_token_fraction (valid tokens kept with a weight > 0) and kept_seq_fraction (valid sequences with every
    token kept). verl's names for these: `METRIC_NAMES_VERL`. An empty response_mask raises (verl's "Expected at
    least one valid token").
    """
    c = parse_correction(correction)
    if not isinstance(metrics, bool):
        raise ValueError(f"metrics must be True or False, got {metrics!r}")
    _check(old_log_prob, rollout_log_prob, response_mask, advantages, c)
    if metrics and not bool(response_mask.bool().any()):
        raise ValueError("response_mask has no valid token: a correction needs at least one (verl raises too)")
    dtype = torch.float64 if old_log_prob.dtype == torch.float64 else torch.float32
    with torch.no_grad():
        old, rollout = old_log_prob.detach().to(dtype), rollout_log_prob.detach().to(dtype)
        mask = response_mask.detach().to(dtype)
        log_ratio = old - rollout  # (B, T): log ρ = log π_old - log π_rollout
        out: dict | None = {} if metrics else None
        full_mask, m2_keep = mask, None
        if c.m2po is not None:  # first: the other parts see the mask AReaL's loss sees
            m2_keep = _m2po_keep(log_ratio, mask, c.m2po)
            mask = mask * m2_keep.to(dtype)
            if out is not None:
                out["m2po_masked_fraction"] = float((full_mask.bool() & ~m2_keep).sum()) / max(
                    1, int(full_mask.bool().sum())
                )
        w = _weights(log_ratio, mask, c, out) if c.is_level is not None else None
        if c.filter is not None:
            w = _filter_weights(old, rollout, mask, c.filter, out)
        keep = _keep(log_ratio, mask, c, out) if c.rejections else None
        if m2_keep is not None:
            keep = m2_keep if keep is None else (keep & m2_keep)
        if c.opsm is not None:
            gate = _opsm(log_ratio, mask, advantages.detach().to(dtype), c.opsm)
            w = gate if w is None else w * gate
        keep_mask = response_mask if keep is None else (response_mask * keep.to(response_mask.dtype))
        if out is None:
            return w, keep_mask, {}
        _mismatch_metrics(log_ratio, full_mask, out)
        _kept_metrics(w, keep, full_mask, out)
    return w, keep_mask, out


def _kept_metrics(w, keep, mask, out: dict) -> None:
    valid = mask.bool()
    kept = valid if keep is None else (valid & keep)
    if w is not None:
        kept = kept & (w > 0)
    out["kept_token_fraction"] = float(kept.sum()) / max(1, int(valid.sum()))
    rows = valid.any(-1)
    full = ((kept | ~valid).all(-1)) & rows
    out["kept_seq_fraction"] = float(full.sum()) / max(1, int(rows.sum()))
