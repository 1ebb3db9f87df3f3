"""The inputs of the engine parity tests (tests/engines/test_parity_*.py) and their tolerances."""

from __future__ import annotations

import torch

TOL = {torch.float64: 1e-12, torch.float32: 2e-5}
"""Relative tolerance of a parity: float64 to 1e-12; float32 to float32 rounding (the engine and divclip sum the
same terms in another order, over values up to e^20·|A|)."""


def inputs(advantages: str, dtype, seed: int = 0):
    """(log π leaf, log π_old, A, bool mask, log π_rollout), (6, 9): rows of 9, 5, 0 (empty), 7, 1 and 9 tokens;
    |log r| up to 30 on some tokens, row 5's mean log r 12 (> GSPO's clamp 10), the rest ~ N(0, 0.3²)."""
    g = torch.Generator().manual_seed(seed)
    rows, width = 6, 9
    lengths = torch.tensor([9, 5, 0, 7, 1, 9])
    mask = torch.arange(width)[None, :] < lengths[:, None]
    log_r = 0.3 * torch.randn(rows, width, generator=g, dtype=torch.float64)
    log_r[0, 2], log_r[0, 5], log_r[3, 1], log_r[3, 4], log_r[1, 0] = 30.0, -30.0, 25.0, -22.0, -0.25
    log_r[5] = 12.0 + 0.5 * torch.randn(width, generator=g, dtype=torch.float64)
    lp = -torch.rand(rows, width, generator=g, dtype=torch.float64) * 3 - 0.05
    old = lp - log_r
    rollout = old - 0.4 * torch.randn(rows, width, generator=g, dtype=torch.float64)
    rollout[0, 3] = old[0, 3] + 25.0
    if advantages == "token":
        adv = torch.randn(rows, width, generator=g, dtype=torch.float64)
    else:
        adv = torch.randn(rows, 1, generator=g, dtype=torch.float64).expand(rows, width).clone()
    cast = [t.to(dtype) for t in (lp, old, adv, rollout)]
    return cast[0].requires_grad_(True), cast[1], cast[2], mask, cast[3]
