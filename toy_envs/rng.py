"""Counter-based random numbers, batched over runs: one tensor program for all seeds, no Python loop.

A run's numbers at step t are a hash of (its seed, t, stream, index), so they depend only on its own seed,
never on which other seeds share the batch: seed 3 draws the same rollouts whether it runs alone or among
64 seeds, and every method given seed 3 sees the same prompts and uniforms at each step (common random
numbers: the first batch is identical across methods, later differences come from the losses alone).

The hash is a 32-bit xorshift-multiply finaliser (the shape of MurmurHash3's fmix32: two multiplies, three
xorshifts) with odd multipliers below 2^31, so that x·c < 2^63 never overflows int64; each draw goes
through it twice, keyed by the run (statistical checks in tests/toy_envs/test_toy_rng.py).
The same function runs on Python ints for the per-step part of the key, which costs no tensor ops.
"""

from __future__ import annotations

import math

import torch

_MASK32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9  # 2^32 / φ: spreads consecutive counters over the 32-bit range
_MULTIPLIERS = (0x7FEB352D, 0x2C1B3C6D)  # odd, < 2^31


def _mix32(x):
    """A bijection of 32-bit integers with full avalanche; works on int64 tensors and Python ints alike."""
    for c in _MULTIPLIERS:
        x = ((x ^ (x >> 16)) * c) & _MASK32
    return x ^ (x >> 15)


def seed_keys(seeds) -> torch.Tensor:
    """(R,) 32-bit keys of non-negative int64 seeds (both halves of a 64-bit seed count)."""
    s = torch.as_tensor(seeds, dtype=torch.int64)
    return _mix32((s & _MASK32) ^ _mix32((s >> 32) + _GOLDEN))


def _salt(step: int, stream: int) -> int:
    return _mix32((_mix32(step & _MASK32) ^ (step >> 32) ^ (stream * _GOLDEN)) & _MASK32)  # a Python int


def uniform(keys: torch.Tensor, step: int, n: int, stream: int = 0) -> torch.Tensor:
    """(R, n) float64 uniforms in the open interval (0, 1), resolution 2^-32, for runs with `keys`."""
    return uniform_steps(keys, step, 1, n, stream)[:, 0]


def uniform_steps(keys: torch.Tensor, first_step: int, count: int, n: int, stream: int = 0) -> torch.Tensor:
    """(R, count, n): `uniform(keys, step, n, stream)` for steps first_step, ..., first_step + count - 1 at once,
    bit for bit (the same integer ops per entry), in one pass instead of `count`."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be an integer >= 1, got {count!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    salts = torch.tensor([_salt(first_step + i, stream) for i in range(count)], dtype=torch.int64)  # (count,)
    k = keys.view(-1, 1, 1) ^ salts.view(1, -1, 1)  # (R, count, 1)
    ctr = (torch.arange(n, dtype=torch.int64) * _GOLDEN) & _MASK32  # (n,)
    h = _mix32(_mix32(k ^ ctr) ^ k)  # (R, count, n)
    return (h.to(torch.float64) + 0.5) * 2.0**-32


def normal_from_uniform(u1: torch.Tensor, u2: torch.Tensor) -> torch.Tensor:
    """Standard normals by Box–Muller from two independent uniform tensors of the same shape."""
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)
