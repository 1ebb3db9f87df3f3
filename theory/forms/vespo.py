"""VESPO (form 'vespo'; arXiv:2602.10693, TRL `vespo`): −sg(φ(W))·A·log π, φ(W) = e^λ·W^k·e^(−λW), W the sequence's
weight exp(Σ_t log r), (k, λ) by the sign of A.

In TRL 1.16's arithmetic (GRPOTrainer._compute_loss, `get_gamma_weights`), bit for bit with TRL's per-token loss
(tests/theory/test_losses_trl.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from divclip.theory.forms._form import Form, Param

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms

VESPO_LOG_W_MIN = float(np.log(1e-8))
"""VESPO clamps the sequence log-weight to [log 1e-8, 20] (as its reference code; TRL 1.16 `get_gamma_weights`)."""
VESPO_LOG_W_MAX = 20.0
"""The upper end of that clamp (VESPO's own, not verl's log-ratio clamp, though both are 20)."""
VESPO_LAMBDA_MIN = float(np.float32(1e-4))
"""VESPO's decay λ is used as max(λ, 1e-4), 1e-4 in float32 as TRL 1.16 `get_gamma_weights` clamps it."""


# ------------------------------------------------------------------------------------------ torch
def _vespo_phi(log_w, w, k: float, lam: float):
    """φ(W) = exp(λ + k·log W − λ·W), per sequence (B, 1); overflow or NaN gives 0, as VESPO's code."""
    import torch

    lam = max(lam, VESPO_LAMBDA_MIN)
    return torch.exp(lam + k * log_w - lam * w).nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)


def loss(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """VESPO (arXiv:2602.10693; TRL `vespo`): −sg(φ(W))·A·log π with W = exp(Σ_t log r) over the sequence's tokens
    (token log r clamped to ±20, log W to [log 1e-8, 20]), k and λ by the sign of A (A >= 0: the _pos pair).
    φ is a soft weight, not a clip: no clip flags. `clamp_log_ratio` does not apply (VESPO clamps itself)."""
    import torch

    from divclip.theory.forms._kernels import LOG_RATIO_CLAMP, PolicyTerms

    with torch.no_grad():
        token_log_ratio = (log_prob - old_log_prob).clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T)
        log_w = torch.sum(token_log_ratio * mask, dim=-1, keepdim=True).clamp_(
            VESPO_LOG_W_MIN, VESPO_LOG_W_MAX
        )  # (B, 1)
        w = torch.exp(log_w)
        phi_pos = _vespo_phi(log_w, w, spec.param("vespo_k_pos"), spec.param("vespo_lambda_pos"))  # (B, 1)
        phi_neg = _vespo_phi(log_w, w, spec.param("vespo_k_neg"), spec.param("vespo_lambda_neg"))
        phi = torch.where(advantages >= 0, phi_pos, phi_neg)  # (B, T)
    loss = -phi * advantages * log_prob  # TRL's product order
    return PolicyTerms(loss, token_log_ratio, w.expand_as(log_prob), None, None)


FORM = Form(
    "vespo",
    "sequence-level",
    "−sg(φ(W))·A·log π, φ(W) = e^λ·W^k·e^(−λW), W = exp(Σ_t log r) the sequence weight (no length "
    "normalisation), (k, λ) by the sign of A",
    ("arXiv:2602.10693", "trl:vespo"),
    params=(
        Param("vespo_k_pos", 2.0, "power k of φ for A >= 0 (down-weights W < 1)"),
        Param("vespo_lambda_pos", 3.0, "decay λ of φ for A >= 0 (down-weights W > 1); used as max(λ, 1e-4)", above=0.0),
        Param("vespo_k_neg", 3.0, "power k of φ for A < 0"),
        Param("vespo_lambda_neg", 2.0, "decay λ of φ for A < 0; used as max(λ, 1e-4)", above=0.0),
    ),
    uses_budget=False,
    token_level=False,
    weight_note="w = φ(W) for every token of a sequence, W the product of its token ratios: a function of the "
    "whole sequence, not of one token's (q, r)",
    example="ratio/vespo",
    loss=loss,
)
