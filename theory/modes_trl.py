"""Torch implementations of the loss forms declared in `divclip.theory.forms_trl` (`register_mode`).

Each is written in TRL 1.16's arithmetic (GRPOTrainer._compute_loss: the same operations in the same order), so
that with `clamp_log_ratio=False` its per-token loss is TRL's bit for bit (tests/theory/test_losses_trl.py). No
host syncs: masks and selections are tensors, never Python branches on tensor values.
"""

from __future__ import annotations

import torch

from divclip.theory.forms_trl import VESPO_LAMBDA_MIN, VESPO_LOG_W_MIN
from divclip.theory.loss_modes import LOG_RATIO_CLAMP, PolicyTerms, _clip_mode, _flag, _ratio, register_mode


@register_mode("cispo_cap")
def _cispo_cap_mode(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """TRL cispo: −sg(min(r, c))·A·log π (r the sequence ratio at level='sequence'). Only the upper cap exists,
    so `clipped` marks r > c and nothing is clipped below."""
    with torch.no_grad():
        log_ratio, ratio, _ = _ratio(spec, log_prob, old_log_prob, mask)
        cap = spec.param("cispo_cap")
        weight = torch.clamp(ratio, max=cap)  # (B, T)
        clipped = _flag(torch.gt, ratio, cap)
    loss = -weight * advantages * log_prob  # TRL's product order
    return PolicyTerms(loss, log_ratio, ratio, clipped, torch.zeros_like(clipped))


@register_mode("luspo")
def _luspo_mode(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """LUSPO (arXiv:2602.05261): per token the clip form (GSPO's at level='sequence'); the length weighting is the
    aggregation, 'seq-mean-token-sum-all' (TRL luspo: Σ_t m·ℓ per sequence, mean over the batch)."""
    return _clip_mode(log_prob, old_log_prob, advantages, mask, spec)


@torch.no_grad()
def _vespo_phi(log_w, w, k: float, lam: float):
    """φ(W) = exp(λ + k·log W − λ·W), per sequence (B, 1); overflow or NaN gives 0, as VESPO's code."""
    lam = max(lam, VESPO_LAMBDA_MIN)
    return torch.exp(lam + k * log_w - lam * w).nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)


@register_mode("vespo")
def _vespo_mode(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """VESPO (arXiv:2602.10693; TRL `vespo`): −sg(φ(W))·A·log π with W = exp(Σ_t log r) over the sequence's tokens
    (token log r clamped to ±20, log W to [log 1e-8, 20]), k and λ by the sign of A (A >= 0: the _pos pair).
    φ is a soft weight, not a clip: no clip flags. `clamp_log_ratio` does not apply (VESPO clamps itself)."""
    with torch.no_grad():
        token_log_ratio = (log_prob - old_log_prob).clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T)
        log_w = torch.sum(token_log_ratio * mask, dim=-1, keepdim=True).clamp_(VESPO_LOG_W_MIN, 20.0)  # (B, 1)
        w = torch.exp(log_w)
        phi_pos = _vespo_phi(log_w, w, spec.param("vespo_k_pos"), spec.param("vespo_lambda_pos"))  # (B, 1)
        phi_neg = _vespo_phi(log_w, w, spec.param("vespo_k_neg"), spec.param("vespo_lambda_neg"))
        phi = torch.where(advantages >= 0, phi_pos, phi_neg)  # (B, T)
    loss = -phi * advantages * log_prob  # TRL's product order
    return PolicyTerms(loss, token_log_ratio, w.expand_as(log_prob), None, None)
