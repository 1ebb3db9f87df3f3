"""Group-relative outcome advantages (docs/theory.md §4), matching verl 0.9.1's GRPO / Dr. GRPO / RLOO estimators.

Responses to one prompt sit next to each other (verl repeats a prompt `n` times with interleave=True), so the
rewards of a batch reshape to (groups, group_size).
"""

from __future__ import annotations

import torch

NORMS = ("std", "none", "rloo")


def group_advantages(rewards, group_size: int, norm: str = "std", epsilon: float = 1e-6):
    """One advantage per response from scalar rewards (N,), N = groups·group_size; returns (N,).

    norm='std'  GRPO: (R - mean_g) / (std_g + ε), std unbiased (torch.std), ε = 1e-6 as verl.
    norm='none' Dr. GRPO: R - mean_g.
    norm='rloo' RLOO: R - mean of the other members = (R - mean_g)·G/(G - 1).
    A group whose rewards are all equal gets exactly 0. verl returns (R - fl(mean))/ε there, which is not 0
    when the mean rounds (eight float32 rewards of 0.1 give -0.0075 each). Groups of one follow verl: mean 0,
    std 1 (so 'std' gives R/(1 + ε), 'none' and 'rloo' give R).
    """
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {list(NORMS)}, got {norm!r}")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be an integer >= 1, got {group_size!r}")
    if not (isinstance(epsilon, (int, float)) and epsilon > 0):
        raise ValueError(f"epsilon must be a number > 0, got {epsilon!r}")
    r = torch.as_tensor(rewards)
    if not r.is_floating_point():
        r = r.to(torch.get_default_dtype())
    elif r.dtype in (torch.float16, torch.bfloat16):
        r = r.float()
    if r.ndim != 1:
        raise ValueError(f"rewards must have shape (N,), one scalar per response, got shape {tuple(r.shape)}")
    if r.numel() % group_size:
        raise ValueError(f"rewards has {r.numel()} entries, not a multiple of group_size={group_size}")
    if bool(torch.isnan(r).any()):
        raise ValueError(f"rewards contains NaN at {int(torch.isnan(r).sum())} positions")
    if group_size == 1:
        return r / (1.0 + epsilon) if norm == "std" else r.clone()

    groups = r.view(-1, group_size)  # (G, n)
    mean = groups.mean(dim=-1, keepdim=True)  # (G, 1)
    if norm == "std":
        adv = (groups - mean) / (groups.std(dim=-1, keepdim=True) + epsilon)
    elif norm == "none":
        adv = groups - mean
    else:  # verl's order of operations: R·n/(n-1) - mean·n/(n-1)
        adv = groups * group_size / (group_size - 1) - mean * group_size / (group_size - 1)
    constant = groups.amax(dim=-1, keepdim=True) == groups.amin(dim=-1, keepdim=True)  # (G, 1)
    return torch.where(constant, torch.zeros_like(adv), adv).reshape(-1)
