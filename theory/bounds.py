"""Exact clip intervals {r : D(r[, p]) <= δ} for divergence measures.

* KL3 in closed form with both Lambert W branches (docs/theory.md §2):
  r - 1 - log r = δ  <=>  r e^{-r} = e^{-(1+δ)}  <=>  r = -W_k(-e^{-1-δ}),  k = 0 (l_δ < 1), k = -1 (u_δ > 1).
* Binary KL (DPPO-Binary-KL, TRGPPO) has no closed form: a vectorised, bracketed Newton solver in u = log r
  finds both roots for millions of (δ, p) pairs at once. D is convex in u, so Newton converges monotonically
  once on the far side of the root, and the bracket catches the one overshoot that convexity allows.
* Custom measures (user formulas) use a derivative-free vectorised bisection in log r.

The array functions here take an `xp` namespace (numpy, or torch from `divclip.theory.losses`) so the same maths
serves the numpy API and the per-token bounds inside the torch loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.special import lambertw

from divclip.theory.validation import check_delta

_EPS = np.finfo(np.float64).eps


# --------------------------------------------------------------------------------------------- KL3
def kl3_bounds(delta):
    """(l_δ, u_δ) with l_δ - 1 - log l_δ = δ = u_δ - 1 - log u_δ, l_δ < 1 < u_δ.

    Closed form l = -W_0(-e^{-1-δ}), u = -W_{-1}(-e^{-1-δ}), then two Newton steps on
    g(v) = expm1(v) - v - δ in v = log r (well conditioned near r = 1, where the Lambert W argument sits
    next to the branch point -1/e). Scalars in, floats out; arrays in, arrays out.
    """
    d = check_delta(delta)
    lo, hi = _kl3_bounds(d)
    if np.ndim(d) == 0:
        return float(lo), float(hi)
    return lo, hi


_KL3_ASYMPTOTIC = 600.0  # above this δ, e^{-1-δ} nears underflow: start Newton from the asymptotic roots


def _kl3_bounds(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z = -np.exp(-1.0 - d)
    big = d > _KL3_ASYMPTOTIC
    # l - 1 - log l = δ has log l -> -1 - δ, and u - 1 - log u = δ has log u -> log(1 + δ + log(1 + δ)).
    far = (-1.0 - d, np.log1p(d + np.log1p(d)))
    roots = []
    for branch, start in zip((0, -1), far):
        with np.errstate(divide="ignore", invalid="ignore"):
            r = -lambertw(np.where(big, -np.exp(-1.0 - _KL3_ASYMPTOTIC), z), branch).real
            v = np.where(big, start, np.log(r))
        for _ in range(2):
            g = np.expm1(v) - v - d
            dg = np.expm1(v)
            with np.errstate(divide="ignore", invalid="ignore"):
                step = np.where(dg != 0, g / dg, 0.0)
            v = v - step
        roots.append(np.exp(v))
    return roots[0], roots[1]


# ----------------------------------------------------------------------------------- binary KL
def binary_kl_value(r, p, xp=np):
    """D(r, p) = p log(1/r) + (1-p) log((1-p)/(1-rp)), KL(Bern(p) || Bern(rp)).

    Written with log1p around r = 1 so that D(1 ± 1e-8) keeps full relative precision. Infinite for
    r >= 1/p (the new probability would reach 1) and at r = 0.
    """
    x = r - 1.0
    arg = -p * x / (1.0 - p)
    inside = arg > -1.0
    safe = xp.where(inside, arg, xp.zeros_like(arg))
    with np.errstate(divide="ignore"):  # log(0) = -inf is the right limit at r = 0 (numpy only; torch is silent)
        val = -p * xp.log(r) - (1.0 - p) * xp.log1p(safe)
    return xp.where(inside, val, xp.full_like(val, math.inf))


def _binary_kl_u(u, p, xp):
    """D and dD/du in u = log r: D(u) = -p u - (1-p) log1p(-p expm1(u)/(1-p)), D'(u) = p(e^u-1)/(1-p e^u)."""
    em1 = xp.expm1(u)
    one_minus_q = (1.0 - p) - p * em1  # 1 - r p, computed without cancellation near r = 1
    d = -p * u - (1.0 - p) * xp.log1p(-p * em1 / (1.0 - p))
    dd = p * em1 / one_minus_q
    return d, dd


def binary_kl_bounds_array(delta, p, xp=np, maxiter: int = 200):
    """Both roots of D(r, p) = δ for arrays (δ, p broadcast together), without validation.

    Returns (lo, hi) with lo < 1 < hi < 1/p. Roots below the smallest positive float64 come back as 0.
    """
    delta, p = xp.broadcast_tensors(delta, p) if xp is not np else np.broadcast_arrays(delta, p)
    lo_u = _binary_kl_root(delta, p, xp, side=-1, maxiter=maxiter)
    hi_u = _binary_kl_root(delta, p, xp, side=+1, maxiter=maxiter)
    hi = xp.exp(hi_u)
    # Where the root sits within an ulp of 1/p, exp may round onto r·p >= 1 (D = inf): step back below.
    for _ in range(4):
        hi = xp.where(hi * p >= 1.0, xp.nextafter(hi, xp.zeros_like(hi)), hi)
    return xp.exp(lo_u), hi


def _binary_kl_root(delta, p, xp, side: int, maxiter: int):
    """Safeguarded Newton in u = log r on one side of 0, compacting the set of unconverged entries."""
    shape = delta.shape
    d = delta.reshape(-1)
    pp = p.reshape(-1)
    n = d.shape[0]
    # Bracket [a, b] with g(a) > 0 >= g(b) in the direction away from u = 0 (side -1: a < b; +1: a > b).
    # The lower root lies in (-inf, 0): start the far end where D >= δ is certain, D(u) >= -p u for u < 0.
    if side < 0:
        # D(u) > -p u + (1-p) log(1-p) for u < 0, so D(a) > δ + p at this a.
        a = -(d - (1.0 - pp) * xp.log1p(-pp)) / pp - 1.0
        b = xp.zeros_like(d)
    else:
        a = -xp.log(pp)  # u_max: D = +inf there
        b = xp.zeros_like(d)
    # Quadratic start: D ~ p/(1-p) u^2 / 2 near u = 0.
    u = side * xp.sqrt(2.0 * d * (1.0 - pp) / pp)
    out = xp.zeros_like(d)
    idx = np.arange(n) if xp is np else xp.arange(n, device=d.device)
    for _ in range(maxiter):
        inside = (u - a) * (u - b) < 0
        u = xp.where(inside, u, 0.5 * (a + b))
        g, dg = _binary_kl_u(u, pp, xp)
        g = g - d
        pos = g > 0
        a = xp.where(pos, u, a)
        b = xp.where(pos, b, u)
        step = g / dg
        u_new = u - step
        done = (xp.abs(step) <= 4 * _EPS * xp.abs(u)) | (g == 0) | (xp.abs(a - b) <= 4 * _EPS * xp.abs(u))
        settled = xp.where((u_new - a) * (u_new - b) <= 0, u_new, u)
        out[idx[done]] = settled[done]
        keep = ~done
        if not bool(keep.any()):
            break
        idx, u, a, b, d, pp = idx[keep], u_new[keep], a[keep], b[keep], d[keep], pp[keep]
    else:
        out[idx] = u  # did not meet the tolerance; best iterate (never reached in the tests)
    return out.reshape(shape)


# ---------------------------------------------------------------------------- generic (custom D)
def bisect_bounds(value: Callable, delta, p=None, r_min: float = 1e-6, r_max: float = 1e6, iters: int = 120):
    """Roots of value(r, p) = δ on (r_min, 1) and (1, r_max) by vectorised bisection in log r.

    For measures without a derivative (user formulas). Requires value decreasing on (r_min, 1) and increasing
    on (1, r_max), checked by the caller. Where D(r_min) <= δ the lower bound is r_min (no root in range),
    likewise r_max for the upper bound.
    """
    d = np.asarray(delta, dtype=np.float64)
    pp = None if p is None else np.asarray(p, dtype=np.float64)
    if pp is not None:
        d, pp = np.broadcast_arrays(d, pp)
    out = []
    for lo_end, hi_end in ((math.log(r_min), 0.0), (0.0, math.log(r_max))):
        a = np.full(d.shape, lo_end)
        b = np.full(d.shape, hi_end)
        lower_side = lo_end < 0
        for _ in range(iters):
            m = 0.5 * (a + b)
            with np.errstate(all="ignore"):
                above = value(np.exp(m), pp) > d
            # Lower side: D decreasing, so D(m) > δ means the root is to the right of m.
            move_a = above if lower_side else ~above
            a = np.where(move_a, m, a)
            b = np.where(move_a, b, m)
        out.append(np.exp(0.5 * (a + b)))
    return out[0], out[1]
