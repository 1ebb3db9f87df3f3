"""KL-Cov (form 'kl_cov'; arXiv:2505.22617 §4, verl `kl_cov`): −A·r everywhere (r unclamped, no clip), plus
κ·|log r| on the ⌊ρ·N⌋ tokens of largest covariance (A − Ā)(log π − mean log π).

The selection is a (B, T) 0/1 mask computed once from the whole batch (a top-k without a host read), after which
the loss is per token and `agg_loss` applies as usual.

Reproduces verl 0.9.1's `kl_cov` (`verl.trainer.ppo.core_algos`), value and gradient, for every `loss_agg_mode`
(tests/theory/test_losses_verl_atlas.py calls verl's own function): the per-token loss is built from verl's
floating-point operations in verl's order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from divclip.theory.forms._form import Form, Param

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms

_FAR = 1e30  # below any covariance of finite log-probs and advantages


# ------------------------------------------------------------------------------------------ torch
def _kl_cov_select(log_prob, advantages, mask, rho):
    """0/1 (B, T): the ⌊ρ·N⌋ ∨ 1 unmasked tokens of largest covariance (A − Ā)(log π − mean log π), N the
    unmasked count, means over the unmasked tokens (verl's top-k, without a host read: ⌊ρ·N⌋ <= ⌊ρ·B·T⌋, a
    static bound, so one top-k of that size, then the first ⌊ρ·N⌋ ∨ 1 of it).

    verl takes the means of the compacted unmasked entries (`x[mask].mean()`), here Σ m·x / Σ m: the two can
    differ in the last bit, which moves every covariance by about an ulp; the selection then differs from
    verl's only where two covariances within that rounding straddle the k-th place."""
    import torch

    from divclip.theory.forms._kernels import _flag

    with torch.no_grad():
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


def loss(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """KL-Cov (verl `kl_cov`, arXiv:2505.22617 §4): −A·r everywhere (r unclamped, no clip), and −A·r + κ·|log r|
    on the top-k covariance tokens. Plain autograd through verl's ops, so value and gradient are verl's.
    No token is clipped (`clipped` is None); the penalised share is ⌊ρ·N⌋ ∨ 1 tokens by construction."""
    import torch

    from divclip.theory.forms._kernels import LOG_RATIO_CLAMP, PolicyTerms

    log_ratio = log_prob - old_log_prob  # (B, T)
    ratio = torch.exp(log_ratio)
    loss_plain = -advantages * ratio
    selected = _kl_cov_select(log_prob.detach(), advantages, mask, spec.param("kl_cov_ratio"))  # (B, T) 0/1
    loss = loss_plain + selected * (spec.param("kl_cov_coef") * log_ratio.abs())  # verl's sums where selected
    metric_log_ratio = log_ratio.detach().clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return PolicyTerms(loss, metric_log_ratio, ratio.detach(), None, None)


FORM = Form(
    "kl_cov",
    "penalty",
    "−A·r, plus κ·|log r| on the ⌊ρ·N⌋ tokens of largest (A − Ā)(log π − mean log π)",
    ("arXiv:2505.22617", "verl:kl_cov"),
    params=(
        Param(
            "kl_cov_ratio",
            2e-4,
            "ρ: the share of the batch's tokens that get the penalty (at least one)",
            above=0.0,
            at_most=1.0,
        ),
        Param("kl_cov_coef", 0.1, "κ, the penalty's coefficient (verl's kl_cov κ)", above=0.0),
    ),
    uses_budget=False,
    token_level=False,
    weight_note="w = r off the selected tokens and r − κ·sign(log r)/A on them; the selection is the batch's "
    "top-k covariance, so w is not a function of (q, r, A) alone",
    example="ratio/kl_cov",
    loss=loss,
)
