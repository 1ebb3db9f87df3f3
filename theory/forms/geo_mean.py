"""GMPO (form 'geo_mean'; arXiv:2507.20673, verl `geo_mean`): −Ā·exp(mean_t clip(log r)) per sequence, the mean over
sequences.

verl averages one loss per sequence over all rows, whatever `loss_agg_mode` says. The per-token loss here carries
the sequence's loss on the first token (0 on the others), and the form aggregates itself (`aggregate`): the mean
over rows of the row sums, empty rows counting as 0 as in verl.

Reproduces verl 0.9.1's `geo_mean` (`verl.trainer.ppo.core_algos`), value and gradient, for every `loss_agg_mode`
(tests/theory/test_losses_verl_atlas.py calls verl's own function): the per-token loss is built from verl's
floating-point operations in verl's order. log r is unclamped, as in verl's geo_mean.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from divclip.theory.forms._form import Form, Param
from divclip.theory.forms._numpy import _broadcast

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms


# ------------------------------------------------------------------------------------------ numpy
def interval(spec, q, sign):
    """Each token's log r is clipped in A's direction before the geometric mean: kept for r <= e^ε_high when
    A > 0, r >= e^−ε_low when A < 0."""
    (q,) = _broadcast(q)
    if sign > 0:
        return np.zeros_like(q), np.full_like(q, np.exp(spec.param("gmpo_eps_high")))
    return np.full_like(q, np.exp(-spec.param("gmpo_eps_low"))), np.full_like(q, np.inf)


# ------------------------------------------------------------------------------------------ torch
def loss(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """GMPO (verl `geo_mean`, arXiv:2507.20673): per sequence, L = −Ā·exp(mean_t x̃_t) with x̃ = log r clipped to
    [−ε_low, ε_high] in A's direction (sgn(A)·min(sgn(A)·x, sgn(A)·clip(x))), Ā the sequence's mean advantage;
    L in verl's operations, so it is bit-equal. Its gradient, ∂L/∂log π_t = L·m_t/(|y| + 1e-8) on tokens the min
    did not clip and A ≠ 0 (0 elsewhere), is attached in closed form.

    The per-token loss carries the sequence's L on its first token and 0 on the others; the form aggregates
    itself (`aggregate`: the mean over rows of the row sums), as verl ignores loss_agg_mode.
    Flags: `clipped` marks the tokens the min clipped (A > 0 above ε_high, A < 0 below −ε_low); `by_part` has
    verl's own count, every token outside [−ε_low, ε_high] split by the sign of A (part 0: low = A < 0 is
    verl's pg_clipfrac_lower, high = A > 0 its pg_clipfrac)."""
    import torch

    from divclip.theory.forms._kernels import LOG_RATIO_CLAMP, PolicyTerms, _flag, _WithGradient

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


def aggregate(terms, mask, rollout_is_weights, spec):
    """verl's geo_mean loss: the mean over all B rows of the sequence losses (an empty row is −0·1 = 0 and
    counts), whatever loss_agg_mode says; rollout IS weights enter as verl's per-sequence geometric mean,
    exp(Σ m·log(w + 1e-10) / (Σ m + 1e-8))."""
    import torch

    seq_loss = terms.loss.sum(dim=-1)  # (B,) exactly L: the other entries are 0
    if rollout_is_weights is not None:
        seq_loss = seq_loss * torch.exp(
            (torch.log(rollout_is_weights + 1e-10) * mask).sum(dim=-1) / (mask.sum(dim=-1) + 1e-8)
        )
    return torch.mean(seq_loss)


FORM = Form(
    "geo_mean",
    "sequence-level",
    "−Ā·exp(mean_t sgn(A)·min(sgn(A)·log r, sgn(A)·clip(log r, −ε_low, ε_high))) per sequence, mean over sequences",
    ("arXiv:2507.20673", "verl:geo_mean"),
    params=(
        Param(
            "gmpo_eps_low",
            0.4,
            "log-space lower clip width: log r >= −ε_low (GMPO's paper recommends "
            "0.4, §4; verl takes its lower clip width)",
            above=0.0,
        ),
        Param(
            "gmpo_eps_high",
            0.4,
            "log-space upper clip width: log r <= ε_high (verl: its upper clip width)",
            above=0.0,
        ),
    ),
    uses_budget=False,
    token_level=False,
    interval=interval,
    weight_note="the gradient of token t is −Ā·s/|y|·∇log π on kept tokens, s the sequence's geometric-mean "
    "ratio: it depends on the whole sequence, not on (q, r, A) alone; the per-token clip interval "
    "is [e^−ε_low, e^ε_high] in A's direction",
    extra={"aggregation": "mean over sequences (verl's geo_mean ignores loss_agg_mode)"},
    example="ratio/geo_mean",
    loss=loss,
    aggregate=aggregate,
)
