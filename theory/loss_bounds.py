"""Per-token binary-KL clip bounds for the torch loss without host synchronisation (docs/theory.md §3).

`divclip.theory.bounds.binary_kl_root` solves one side for a set of tokens with a safeguarded Newton that drops
converged entries and stops when none is left: each of those decisions reads a tensor on the host (a stream
synchronisation on a GPU, a graph break under torch.compile). Here every token is solved with the same fixed
number of steps and no data-dependent control flow, on the side `up` selects (the upper root where up, the
lower one elsewhere), so the loss can run on an accelerator and compile whole.

Both sides are Newton iterations on a convex function of one variable t, with D = δ:
  upper root, t = -z, z = log((1-p)/(1-q)) >= 0 (q = r·p the new probability):
      D = (1-p)·φ(-z) + p·ψ(x),  x = r - 1 = (1-p)(1 - e^{-z})/p
  lower root, t = u = log r <= 0:
      D = p·φ(u) + (1-p)·ψ(w),   w = -p(e^u - 1)/(1-p)
with φ(t) = e^t - 1 - t >= 0 and ψ(a) = a - log(1 + a) >= 0. Both are one expm1 and one log1p of the same t and
a = -c1·expm1(t)/c2 (c1, c2 = 1-p, p for the upper root, p, 1-p for the lower), so one loop serves both sides.
Writing D as a sum of two non-negative terms, each a difference of nearly equal numbers that subtracts exactly,
keeps D's rounding error at about one ulp of p·|t|, which makes the root accurate near r = 1 (the plain form
-p·u - (1-p)·log1p(w) loses two or three more ulps there). dD/dt = c1·e/(c2 - c1·e) with e = expm1(t).
A convex D is approached monotonically after at most one overshoot, and from these starts (the quadratic
approximation near r = 1, capped by the upper root's asymptote z∞ = (δ - p log p)/(1-p)) every (δ, p) in
[1e-12, 1e3] × [1e-12, 1 - 1e-12] reaches the rounding floor within 5 steps. An entry stops moving once a step
is below 4 ulps of t; near r = 1 (t ≈ 0) the last steps may still move it at the rounding floor.
The finishes are the numpy solver's: r = 1 + x for the upper root (well conditioned in z, then kept below 1/p),
and the double-double fixed point of `divclip.theory.bounds` for lower roots below 1/e.
"""

from __future__ import annotations

import numpy as np
import torch

from divclip.theory.bounds import _lo_fixed_point

NEWTON_STEPS = 6  # 5 reach the rounding floor on the grid of tests/theory/test_loss_nosync.py; one is margin
_EPS = torch.finfo(torch.float64).eps


def _newton_start(delta: float, p, up, xp=torch):
    """t0 per token: -min(quadratic start, z∞) for the upper root, the quadratic start -√(2δ(1-p)/p) for the
    lower one (D ≈ (1-p)/(2p)·z² resp. p/(2(1-p))·u² near r = 1)."""
    q1 = 1.0 - p
    z0 = xp.minimum(xp.sqrt((2.0 * delta) * p / q1), (delta - p * xp.log(p)) / q1)
    u0 = xp.sqrt((2.0 * delta) * q1 / p)
    return -xp.where(up, z0, u0)


@torch.no_grad()
def binary_kl_root_nosync(delta: float, p, up, steps: int = NEWTON_STEPS, xp=torch):
    """Per token, the root of D(r, p) = δ above 1 where `up`, below 1 elsewhere. `p` float64 in (0, 1) (B, T)
    or any shape, `up` a bool tensor of p's shape; returns float64 r. Within 3 ulps of the exact roots where the
    numpy solver is within 4 (tests/theory/test_loss_nosync.py); no host synchronisation. With xp=np the same
    steps on numpy arrays (`divclip.theory.forms._kernels.binary_kl_clip_signed`, the CPU's host solve)."""
    q1 = 1.0 - p
    c1 = xp.where(up, q1, p)  # weight of φ(t)
    c2 = xp.where(up, p, q1)  # weight of ψ(a)
    t = _newton_start(delta, p, up, xp)
    live = xp.ones_like(up)
    for _ in range(steps):
        if xp is np and not live.any():  # on the host: every entry has stopped moving, the rest are no-ops
            break
        e = xp.expm1(t)
        a = -c1 * e / c2
        f = (c1 * (e - t) + c2 * (a - xp.log1p(a))) - delta
        step = f * (c2 - c1 * e) / (c1 * e)
        t_new = t - step
        t = xp.where(live, t_new, t)
        live = live & (xp.abs(step) > (4.0 * _EPS) * xp.abs(t_new))
    upper = 1.0 + (-q1 * xp.expm1(t) / p)  # r = 1 + x at z = -t
    for _ in range(4):  # rounding may land on r·p >= 1 (D = inf) when the root is within an ulp of 1/p
        upper = xp.where(upper * p >= 1.0, xp.nextafter(upper, xp.zeros_like(upper)), upper)
    lower = xp.exp(t)
    far = t < -1.0
    if xp is np:  # the fixed point on the far lower roots only (numpy has no lazy where either)
        lower[far] = _lo_fixed_point(lower[far], t[far], np.full(int(far.sum()), delta), p[far], np)
    else:
        lower = torch.where(far, _lo_fixed_point(lower, t, torch.full_like(p, delta), p, torch), lower)
    return xp.where(up, upper, lower)
