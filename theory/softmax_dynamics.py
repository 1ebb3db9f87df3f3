"""The clipped policy-gradient step on softmax logits, one epoch and many, through the training loss.

A policy π = softmax(z) over K actions. A group is N sampled tokens (action, advantage[, weight]); each is a
length-1 response, so `divclip.theory.losses.policy_loss` sees tensors of shape (N, 1) and computes exactly the loss
training would. One update is plain gradient descent on the logits, z ← z - lr·∇_z L (no optimiser state).

At r = 1 (the first epoch) no bound is active and, for the exact expected group (every action once, weight
π_old(a), token-sum), ∂L/∂z_j = -π_j (A_j - Σ_a π_a A_a): the logit of a confident action moves by p times
its centred advantage, so the softmax itself already favours confident actions. First-order changes, with
Δz the logit step:
    Δπ_j ≈ π_j (Δz_j - Σ_a π_a Δz_a)                (softmax Jacobian, diag(π) - ππᵀ)
    ΔH  ≈ -Σ_j π_j (log π_j + H) Δz_j = -Cov_π(log π, Δz)
(the second is the covariance form of Cui et al., "The entropy mechanism of RL for reasoning LLMs").
Clipping only acts from the second epoch on (docs/theory.md §5), which is what `multi_epoch_drift` shows: each
epoch re-uses the same batch with π_old fixed, as PPO epochs do, and records which tokens' gradients a bound
zeroed. A zeroed gradient does not freeze the action: the softmax moves it as the other logits move.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import log_softmax

from divclip.theory.losses import LOSS_AGG_MODES, policy_loss
from divclip.theory.reallocation import (
    DEFAULT_BUCKET_EDGES,
    DEFAULT_EPOCHS,
    DEFAULT_LR,
    _ToDict,
    action_bounds,
    check_advantages,
    check_probs,
    entropy,
    kl_divergence,
    make_buckets,
    resolve_spec,
    spec_label,
)
from divclip.theory.validation import as_float_array, require_finite

MAX_EPOCHS = 10_000


# ----------------------------------------------------------------------------------------------- inputs
@dataclass(frozen=True, eq=False)
class Group(_ToDict):
    """The batch one update is computed on: N tokens, each a sampled action with its advantage."""

    actions: np.ndarray  # (N,) int action indices
    advantages: np.ndarray  # (N,)
    weights: np.ndarray | None = None  # (N,) multiplies each token's loss (policy_loss's rollout_is_weights)
    loss_agg_mode: str = "token-mean"  # how policy_loss aggregates the N tokens

    @classmethod
    def sampled(cls, actions, advantages, num_actions: int, loss_agg_mode: str = "token-mean") -> Group:
        """A sampled group, validated against a policy over `num_actions` actions."""
        acts = as_float_array("actions", actions)
        if acts.ndim != 1 or acts.size == 0:
            raise ValueError(f"actions must be a non-empty 1-D list of action indices, got shape {acts.shape}")
        bad = np.flatnonzero(~np.isfinite(acts) | (acts != np.round(acts)) | (acts < 0) | (acts >= num_actions))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"actions[{i}] = {float(acts[i])!r}: actions must be integers in [0, {num_actions - 1}]")
        adv = check_advantages("advantages", advantages, acts.size, "actions")
        if loss_agg_mode not in LOSS_AGG_MODES:
            raise ValueError(f"loss_agg_mode must be one of {list(LOSS_AGG_MODES)}, got {loss_agg_mode!r}")
        return cls(acts.astype(np.int64), adv, None, loss_agg_mode)

    @classmethod
    def expected(cls, probs, adv) -> Group:
        """Every action once with weight π_old(a), summed: the loss is the exact expectation over a ~ π_old,
        whose unclipped surrogate Σ_a π_old(a)·r(a)·A(a) = Σ_a π_new(a)·A(a) is the LP objective."""
        p = check_probs(probs, "probs")
        return cls(np.arange(p.size), check_advantages("adv", adv, p.size, "probs"), p, "token-sum")


def _check_logits(logits, name: str = "logits") -> np.ndarray:
    z = as_float_array(name, logits)
    if z.ndim != 1 or z.size < 2:
        raise ValueError(f"{name} must be a 1-D list of at least 2 logits, got shape {z.shape}")
    return require_finite(name, z)


def _check_group(group, k: int) -> Group:
    if not isinstance(group, Group):
        raise ValueError(f"group must be a softmax_dynamics.Group (Group.sampled / Group.expected), got {group!r}")
    if group.actions.size and (group.actions.min() < 0 or group.actions.max() >= k):
        raise ValueError(f"group.actions must lie in [0, {k - 1}] for {k} logits, got {group.actions.tolist()}")
    return group


MAX_LR = 1e3
"""Largest gradient step on the logits (a larger one overflows the softmax)."""


def _check_lr(lr) -> float:
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not np.isfinite(lr) or not 0 < lr <= MAX_LR:
        raise ValueError(f"lr must be a number in (0, {MAX_LR:g}] (a gradient step on the logits), got {lr!r}")
    return float(lr)


# --------------------------------------------------------------------------------------------- maths
def softmax(z) -> np.ndarray:
    return np.exp(log_softmax(z))


def entropy_gradient(z) -> np.ndarray:
    """∂H/∂z_j = -π_j (log π_j + H) for π = softmax(z)."""
    logp = log_softmax(z)
    p = np.exp(logp)
    return -p * (logp - p @ logp)  # H = -p·log p, so log π_j + H = log π_j - p·log p


def _loss_and_grad(z, z_old, group: Group, spec):
    """policy_loss on the (N, 1) token batch and its gradient with respect to the logits."""
    zt = torch.tensor(z, dtype=torch.float64, requires_grad=True)
    acts = torch.as_tensor(group.actions)
    log_prob = torch.log_softmax(zt, dim=0)[acts].unsqueeze(1)  # (N, 1)
    old_log_prob = torch.log_softmax(torch.tensor(z_old, dtype=torch.float64), dim=0)[acts].unsqueeze(1)  # (N, 1)
    adv = torch.tensor(group.advantages, dtype=torch.float64).unsqueeze(1)  # (N, 1)
    weights = None if group.weights is None else torch.tensor(group.weights, dtype=torch.float64).unsqueeze(1)
    loss, metrics = policy_loss(
        log_prob, old_log_prob, adv, torch.ones_like(adv), spec,
        loss_agg_mode=group.loss_agg_mode, rollout_is_weights=weights,
    )  # fmt: skip
    (grad,) = torch.autograd.grad(loss, zt)
    return loss.item(), grad.numpy(), metrics


def _bounds_or_open(spec, p):
    """The per-action clip interval, or (0, inf) for SAPO's soft gate (it never zeroes a gradient)."""
    if resolve_spec(spec).form == "sapo":
        return np.zeros_like(p), np.full_like(p, np.inf)
    return action_bounds(spec, p)


def _clip_flags(form: str, r, adv, lo, hi):
    """Per token: did the lower / upper bound change its term? (the meaning of policy_loss's clipfrac_low/high)"""
    if form == "cispo":  # the IS weight is clipped whatever the sign of A
        return r < lo, r > hi
    return (adv < 0) & (r < lo), (adv > 0) & (r > hi)


# ---------------------------------------------------------------------------------------- one step
@dataclass(frozen=True, eq=False)
class SoftmaxStep(_ToDict):
    """One gradient step on the logits: the exact change and its first-order prediction."""

    spec: str
    lr: float
    loss: float
    metrics: dict  # policy_loss's diagnostics (clipfrac, kl3, ratio_mean, …)
    logits: np.ndarray  # (K,) before
    grad: np.ndarray  # (K,) ∂L/∂z
    logits_new: np.ndarray  # (K,) z - lr·grad
    probs_old: np.ndarray  # (K,) π_old (the ratio's denominator; buckets are by π_old)
    probs: np.ndarray  # (K,) π before the step
    probs_new: np.ndarray  # (K,) π after
    dprob_exact: np.ndarray  # (K,)
    dprob_first: np.ndarray  # (K,) J·Δz
    entropy: float  # H before
    dentropy_exact: float
    dentropy_first: float  # ∇H·Δz
    bucket_labels: tuple[str, ...]
    dprob_exact_by_bucket: np.ndarray  # (B,)
    dprob_first_by_bucket: np.ndarray  # (B,)


def softmax_step(
    logits, group: Group, spec, lr: float, *, old_logits=None, bucket_edges=DEFAULT_BUCKET_EDGES
) -> SoftmaxStep:
    """One clipped policy-gradient step z ← z - lr·∇L, with π_old = softmax(old_logits) (default: logits)."""
    z = _check_logits(logits)
    z_old = z if old_logits is None else _check_logits(old_logits, "old_logits")
    if z_old.size != z.size:
        raise ValueError(f"old_logits has {z_old.size} entries but logits has {z.size}")
    g = _check_group(group, z.size)
    spec, lr = resolve_spec(spec), _check_lr(lr)
    p_old, p = softmax(z_old), softmax(z)
    b = make_buckets(p_old, bucket_edges)
    loss, grad, metrics = _loss_and_grad(z, z_old, g, spec)
    dz = -lr * grad
    z_new = z + dz
    p_new = softmax(z_new)
    d_first = p * dz - p * (p @ dz)  # (diag(π) - ππᵀ)·Δz
    d_exact = p_new - p
    h = entropy(p)
    return SoftmaxStep(
        spec_label(spec), lr, loss, metrics, z, grad, z_new, p_old, p, p_new, d_exact, d_first,
        h, entropy(p_new) - h, float(entropy_gradient(z) @ dz), b.labels, b.sum(d_exact), b.sum(d_first),
    )  # fmt: skip


# ------------------------------------------------------------------------------------ many epochs
@dataclass(frozen=True, eq=False)
class Drift(_ToDict):
    """μ PPO epochs on one batch with π_old fixed; row e of the (E+1, ·) arrays is after epoch e (0 = start)."""

    spec: str
    lr: float
    epochs: int
    probs_old: np.ndarray  # (K,)
    lo: np.ndarray  # (K,) ratio interval of each action at π_old
    hi: np.ndarray  # (K,)
    probs: np.ndarray  # (E+1, K)
    ratio: np.ndarray  # (E+1, K) π_e / π_old
    clipped_low: np.ndarray  # (E, K) bool: in epoch e some token of this action had its gradient zeroed at lo
    clipped_high: np.ndarray  # (E, K) bool: … at hi
    clipped_tokens: np.ndarray  # (E,) int: tokens whose term a bound changed in epoch e
    outside_low: np.ndarray  # (E, K) bool: after epoch e the ratio is below lo (overshoot, or pulled by others)
    outside_high: np.ndarray  # (E, K) bool: … above hi
    clipfrac_low: np.ndarray  # (E,) policy_loss's metric, for cross-checking the flags
    clipfrac_high: np.ndarray  # (E,)
    loss: np.ndarray  # (E,)
    bucket_labels: tuple[str, ...]
    mass_to_bucket: np.ndarray  # (E, B) cumulative Σ_{a in bucket} max(π_e - π_old, 0)
    mass_from_bucket: np.ndarray  # (E, B) cumulative Σ_{a in bucket} max(π_old - π_e, 0)
    net_mass_by_bucket: np.ndarray  # (E, B) to - from
    kl_old_new: np.ndarray  # (E,) KL(π_old‖π_e)
    entropy: np.ndarray  # (E+1,)


def multi_epoch_drift(
    logits,
    group: Group,
    spec,
    lr: float = DEFAULT_LR,
    epochs: int = DEFAULT_EPOCHS,
    *,
    bucket_edges=DEFAULT_BUCKET_EDGES,
) -> Drift:
    """Repeat the clipped update `epochs` times on one batch, π_old = softmax(logits) held fixed."""
    z_old = _check_logits(logits)
    g = _check_group(group, z_old.size)
    spec, lr = resolve_spec(spec), _check_lr(lr)
    if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or not 1 <= epochs <= MAX_EPOCHS:
        raise ValueError(f"epochs must be an integer in [1, {MAX_EPOCHS}], got {epochs!r}")
    p_old = softmax(z_old)
    b = make_buckets(p_old, bucket_edges)
    lo, hi = _bounds_or_open(spec, p_old)
    k = z_old.size
    probs = [p_old]
    c_lo, c_hi, n_clip, fr_lo, fr_hi, losses = [], [], [], [], [], []
    z = z_old
    for _ in range(epochs):
        r_tok = (softmax(z) / p_old)[g.actions]  # (N,) the ratio each token's clip decision sees
        low, high = _clip_flags(spec.form, r_tok, g.advantages, lo[g.actions], hi[g.actions])
        c_lo.append(np.bincount(g.actions[low], minlength=k) > 0)
        c_hi.append(np.bincount(g.actions[high], minlength=k) > 0)
        n_clip.append(int(low.sum() + high.sum()))
        loss, grad, metrics = _loss_and_grad(z, z_old, g, spec)
        fr_lo.append(metrics["clipfrac_low"])
        fr_hi.append(metrics["clipfrac_high"])
        losses.append(loss)
        z = z - lr * grad
        probs.append(softmax(z))
    probs = np.array(probs)  # (E+1, K)
    ratio = probs / p_old
    moved = probs[1:] - p_old  # (E, K)
    to, frm = b.sum(np.maximum(moved, 0.0)), b.sum(np.maximum(-moved, 0.0))
    return Drift(
        spec_label(spec), lr, int(epochs), p_old, lo, hi, probs, ratio,
        np.array(c_lo), np.array(c_hi), np.array(n_clip), ratio[1:] < lo, ratio[1:] > hi,
        np.array(fr_lo), np.array(fr_hi), np.array(losses), b.labels, to, frm, to - frm,
        np.array([kl_divergence(p_old, q) for q in probs[1:]]), np.array([entropy(q) for q in probs]),
    )  # fmt: skip
