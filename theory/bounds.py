"""Exact clip intervals {r : D(r[, p]) <= δ} for divergence measures.

* KL3 in closed form with both Lambert W branches (docs/theory.md §2):
  r - 1 - log r = δ  <=>  r e^{-r} = e^{-(1+δ)}  <=>  r = -W_k(-e^{-1-δ}),  k = 0 (l_δ < 1), k = -1 (u_δ > 1);
  evaluated not through a W routine (inaccurate next to the branch point and NaN beyond e^{-745}) but by
  `kl3_roots`: series starts and Newton in the variable where each root is well conditioned, to 4 ulps.
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

from divclip.theory.validation import check_delta

_EPS = np.finfo(np.float64).eps


# --------------------------------------------------------------------------------------------- KL3
def kl3_bounds(delta):
    """(l_δ, u_δ) with l_δ - 1 - log l_δ = δ = u_δ - 1 - log u_δ, l_δ < 1 < u_δ.

    Mathematically l = -W_0(-e^{-1-δ}), u = -W_{-1}(-e^{-1-δ}); numerically each root is solved in the variable
    where it is well conditioned (see `kl3_roots`), to a few ulps for every finite δ > 0. Scalars in, floats
    out; arrays in, arrays out.
    """
    d = check_delta(delta)
    roots = kl3_roots(d)
    lo, hi = roots.lo, roots.hi
    if np.ndim(d) == 0:
        return float(lo), float(hi)
    return lo, hi


def _kl3_bounds(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    roots = kl3_roots(d)
    return roots.lo, roots.hi


# Series of x - log1p(x) in t = x/(2+x) (log1p(x) = 2 atanh t): 2t²/(1-t) - 2 Σ_{k>=1} t^{2k+1}/(2k+1). No
# cancellation for t in [-1/3, 1/3] (x in [-1/2, 1]); 22 terms reach 2^-53 at |t| = 1/3.
_ATANH_TERMS = 22


def _kl3_series(x, sign: float, xp):
    """The atanh series of KL3(1 + x) (sign +1) or KL3-reverse(1 + x) (sign -1), for -1/2 <= x <= 1.

    With t = x/(2+x): x - log1p(x) = 2t²/(1-t) - 2 Σ_{k>=1} t^{2k+1}/(2k+1), and log1p(x) - x/(1+x) is the same
    series at -t. Neither cancels on this range (|t| <= 1/3)."""
    t = sign * x / (2.0 + x)
    t2 = t * t
    acc = xp.zeros_like(t)
    for k in range(_ATANH_TERMS, 0, -1):  # Horner in t²: Σ_k t^{2k}/(2k+1)
        acc = (acc + 1.0 / (2 * k + 1)) * t2
    return 2.0 * t2 / (1.0 - t) - 2.0 * t * acc


def kl3_x(x, xp=np):
    """x - log1p(x) = KL3(1 + x) for every x > -1 within 5 ulps (tests/theory/test_kl3_exact.py sweeps it against
    mpmath), including |x| ~ 1e-150, where the direct difference cancels completely: an atanh series
    for -1/2 <= x <= 1, the direct difference elsewhere. The roots' Newton step uses it; the δ of a given width
    (`divclip.theory.conversions.delta_for_eps`) is evaluated in mpmath instead, correctly rounded."""
    x = xp.asarray(x, dtype=xp.float64) if xp is np else x
    small = (x >= -0.5) & (x <= 1.0)
    series = _kl3_series(xp.where(small, x, xp.zeros_like(x)), 1.0, xp)
    with np.errstate(divide="ignore", invalid="ignore"):
        direct = x - xp.log1p(x)
    return xp.where(small, series, direct)


class KL3Roots(tuple):
    """Both KL3 roots and the quantities derived from them, each computed without cancellation:
    lo, hi (the roots), eps_lo = 1 - lo, eps_hi = hi - 1, inv_lo = 1/lo (inf where lo underflows)."""

    __slots__ = ()
    _fields = ("lo", "hi", "eps_lo", "eps_hi", "inv_lo")

    def __new__(cls, *values):
        return tuple.__new__(cls, values)

    lo = property(lambda self: self[0])
    hi = property(lambda self: self[1])
    eps_lo = property(lambda self: self[2])
    eps_hi = property(lambda self: self[3])
    inv_lo = property(lambda self: self[4])


_E_INV = math.exp(-1.0)
_LO_SPLIT = math.log(2.0) - 0.5  # δ at which l_δ = 1/2: below it solve for x = l - 1, above it for l itself
_HI_SPLIT = 1.0 - math.log(2.0)  # δ at which u_δ = 2: below it solve for x = u - 1, above it for u itself
_SUBNORMAL_BAND = (700.0, 745.0)  # l_δ (and 1/l_δ) near the edges of float64's range: exact arithmetic
_SERIES_ONLY = 1e-30  # s = √(2δ) below this: the four-term branch-point series is exact to float64
# Series of the roots of r - 1 - log r = s²/2 (δ = s²/2): r = 1 + s + s²/3 + s³/36 - s⁴/270 + s⁵/4320 + O(s⁶); s > 0
# gives u_δ, s < 0 gives l_δ (the same series `divclip derive kl3` checks symbolically).
_BRANCH_COEF = (1.0, 1.0 / 3.0, 1.0 / 36.0, -1.0 / 270.0, 1.0 / 4320.0)


def _branch_series(s):
    acc = np.zeros_like(s)
    for c in reversed(_BRANCH_COEF):
        acc = (acc + c) * s
    return acc


def _newton_x(x, d, iters=6):
    """Newton on kl3_x(x) = δ (derivative x/(1+x)), x from the branch-point series: quadratic from the start."""
    for _ in range(iters):
        with np.errstate(divide="ignore", invalid="ignore"):
            step = (kl3_x(x) - d) * (1.0 + x) / x
        x = x - np.where(np.isfinite(step), step, 0.0)
    return x


def kl3_roots(d) -> KL3Roots:
    """Both roots of r - 1 - log r = δ (arrays; δ > 0 finite, unchecked), to a few ulps for every δ.

    * Near the branch point (l_δ >= 1/2, u_δ <= 2) the unknown is x = r - 1, started from the branch-point
      series in s = √(2δ) and polished by Newton on x - log1p(x) = δ, evaluated without cancellation
      (`kl3_x`): the root x is well conditioned in δ (relative condition number about 1/2).
    * l_δ < 1/2: l = e^{-δ}·e^{l-1} (the equation itself, exponentiated), solved by Newton from l = e^{-1-δ};
      e^{-δ} of the exact input δ keeps the relative error at an ulp or two where log-space would lose |log l|
      ulps. For δ in [700, 745], where l_δ or 1/l_δ leaves the normal range, 40-digit mpmath gives the
      correctly rounded float (subnormal, 0, or inf); above 745, l_δ = 0 and 1/l_δ = inf exactly.
    * u_δ > 2: Newton on (u - δ) - 1 - log u = 0 from the asymptotic start u = a + log a + log(a)/a, a = 1 + δ;
      u - δ is exact there (Sterbenz) once δ >= 2, and the step g/(1 - 1/u) never overflows, even at δ = 1e308.
    """
    d = np.asarray(d, dtype=np.float64)
    with np.errstate(all="ignore"):
        s = np.sqrt(2.0 * d)
        # ---- lower root
        near = d <= _LO_SPLIT
        s_lo = np.where(near, -s, -1.0)
        x_lo = _branch_series(s_lo)
        x_lo = np.where(s < _SERIES_ONLY, x_lo, _newton_x(x_lo, np.where(near, d, _LO_SPLIT)))
        lo_near = 1.0 + x_lo
        dd = np.where(near, 1.0, d)
        e = np.exp(-dd)
        lo = e * _E_INV  # below the root: Newton on the concave l - e^{-δ}e^{l-1} climbs to it monotonically
        for _ in range(8):
            f = e * np.exp(lo - 1.0)
            lo = lo - (lo - f) / (1.0 - f)
        lo = e * np.exp(lo - 1.0)  # final fixed-point step: contracts the previous error by l <= 1/2
        inv_lo_far = np.exp(dd) * np.exp(1.0 - lo)
        lo_far, eps_lo_far = lo, 1.0 - lo
        lo = np.where(near, lo_near, lo_far)
        eps_lo = np.where(near, -x_lo, eps_lo_far)
        inv_lo = np.where(near, 1.0 / lo_near, inv_lo_far)
        # ---- upper root
        near_hi = d <= _HI_SPLIT
        x_hi = _branch_series(np.where(near_hi, s, 1.0))
        x_hi = np.where(s < _SERIES_ONLY, x_hi, _newton_x(x_hi, np.where(near_hi, d, _HI_SPLIT)))
        dh = np.where(near_hi, 1.0, d)
        a = 1.0 + dh
        u = a + np.log(a) + np.log(a) / a
        for _ in range(8):
            g = (u - dh) - 1.0 - np.log(u)
            u = u - g / (1.0 - 1.0 / u)
        hi = np.where(near_hi, 1.0 + x_hi, u)
        eps_hi = np.where(near_hi, x_hi, u - 1.0)
    band = (d >= _SUBNORMAL_BAND[0]) & (d <= _SUBNORMAL_BAND[1])
    if np.any(band):
        lo, eps_lo, inv_lo = (np.array(v, dtype=np.float64, copy=True) for v in (lo, eps_lo, inv_lo))
        for i in zip(*np.nonzero(band)) if d.ndim else [()]:
            lo[i], inv_lo[i] = _kl3_lo_exact(float(d[i]))
            eps_lo[i] = 1.0 - lo[i]
    far = d > _SUBNORMAL_BAND[1]
    if np.any(far):
        lo, eps_lo, inv_lo = np.where(far, 0.0, lo), np.where(far, 1.0, eps_lo), np.where(far, np.inf, inv_lo)
    return KL3Roots(lo, hi, eps_lo, eps_hi, inv_lo)


def _mpf_to_float(x) -> float:
    """The float64 nearest the mpmath number x (correctly rounded, subnormals and overflow included)."""
    from fractions import Fraction

    if x == 0:
        return 0.0
    sign, man, exp, _ = x._mpf_
    try:
        v = float(Fraction(man) * Fraction(2) ** exp)
    except OverflowError:
        v = math.inf
    return -v if sign else v


def _kl3_lo_exact(delta: float) -> tuple[float, float]:
    """(l_δ, 1/l_δ) correctly rounded for δ >= 700, where l_δ < 1e-304: l = exp(l - 1 - δ) and l's own
    contribution l·e^{-1-δ} is below 1e-600 relative, so one fixed-point step from l = 0 is exact to 40 digits."""
    import mpmath

    with mpmath.workdps(40):
        d = mpmath.mpf(delta)
        lo = mpmath.exp(mpmath.exp(-1 - d) - 1 - d)
        return _mpf_to_float(lo), _mpf_to_float(1 / lo)


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
    if xp is np:
        with np.errstate(divide="ignore"):  # log(0) = -inf is the right limit at r = 0 (numpy only warns)
            val = -p * xp.log(r) - (1.0 - p) * xp.log1p(safe)
    else:  # torch is silent, and torch.compile cannot trace np.errstate
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
    return binary_kl_root(delta, p, xp, side=-1, maxiter=maxiter), binary_kl_root(
        delta, p, xp, side=+1, maxiter=maxiter
    )


_REFINE_STEPS = 8  # fixed-point steps after Newton (at most, upper root): each shrinks the error by 2 or more
_LO_STEPS = 4  # lower root: each step shrinks the error by 1/e or more
_SPLIT = 134217729.0  # 2^27 + 1, Veltkamp's splitter for float64


def _two_prod(a, b):
    """(x, y) with x = fl(a·b) and x + y = a·b exactly (Dekker), for |a|, |b| well below 1e290."""
    ta = _SPLIT * a
    a_hi = ta - (ta - a)
    a_lo = a - a_hi
    tb = _SPLIT * b
    b_hi = tb - (tb - b)
    b_lo = b - b_hi
    x = a * b
    y = ((a_hi * b_hi - x) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    return x, y


def binary_kl_root(delta, p, xp, side: int, maxiter: int = 200):
    """One root r of D(r, p) = δ per entry (side -1: r < 1, side +1: r > 1), float64 in and out.

    Newton in u = log r finds the root to a few ulps of u; that is not a few ulps of r = e^u once |u| > 1
    (an ulp of u = 30 is 30 ulps of r). So the far roots are finished by a fixed-point form in which r is
    well conditioned:

    - r > e or 1 - rp < (1-p)r/2 (hi): in z = log((1-p)/(1-rp)) >= 0, D = (1-p)·z - p·log r, so
      z = (δ + p log r)/(1-p) and
      r = 1 + (1-p)(1-e^{-z})/p. One step maps an error ε in log r to ε·(1-rp)/((1-p)r) < ε/2, and every
      term is a sum of positives: no cancellation, however close r is to 1/p.
    - r < 1/e (lo): u = -δ/p - ((1-p)/p)·log1p(p(1-r)/(1-p)), a step shrinks an error in u by
      (1-p)r/(1-rp) < 1/e; δ/p is carried as a double-double (it is |u|-sized, up to 1e15 and more) and
      r = e^{u_hi}(1 + u_lo), so r's relative error stays a few ulps when |u| is large.
    """
    u = _binary_kl_root(delta, p, xp, side=side, maxiter=maxiter)
    r = xp.exp(u)
    shape = r.shape
    r, u, d, pp = r.reshape(-1), u.reshape(-1), delta.reshape(-1), p.reshape(-1)
    if side > 0:  # far from 1 or close to 1/p: where a fixed-point step contracts by at least 2
        far = (u > 1.0) | ((1.0 - r * pp) < 0.5 * (1.0 - pp) * r)
    else:
        far = u < -1.0
    if bool(far.any()):
        idx = xp.nonzero(far)[0] if xp is np else xp.nonzero(far).reshape(-1)
        r[idx] = (_hi_fixed_point if side > 0 else _lo_fixed_point)(r[idx], u[idx], d[idx], pp[idx], xp)
    return r.reshape(shape)


def _hi_fixed_point(r, u, d, p, xp):
    """Iterate z = (δ + p log r)/(1-p), r = 1 + (1-p)(1-e^{-z})/p until r stops changing (at most
    _REFINE_STEPS times), iterating only the entries that still move; then keep r·p < 1."""
    p_all, q = p, 1.0 - p
    out = r.clone() if xp is not np else r.copy()
    idx = xp.arange(r.shape[0]) if xp is np else xp.arange(r.shape[0], device=r.device)
    for _ in range(_REFINE_STEPS):
        z = (d + p * xp.log(r)) / q
        r_new = 1.0 + (q * -xp.expm1(-z)) / p
        out[idx] = r_new
        moved = r_new != r
        if not bool(moved.any()):
            break
        idx, r, d, p, q = idx[moved], r_new[moved], d[moved], p[moved], q[moved]
    # Where the root sits within an ulp of 1/p, rounding may land on r·p >= 1 (D = inf): step back below.
    for _ in range(4):
        out = xp.where(out * p_all >= 1.0, xp.nextafter(out, xp.zeros_like(out)), out)
    return out


def _lo_fixed_point(r, u, d, p, xp):
    """u = -(δ/p) - ((1-p)/p)·log1p(p(1-e^u)/(1-p)) with δ/p and u as double-doubles; r = e^{u_hi}(1 + u_lo)."""
    q = 1.0 - p
    q_hi = d / p  # δ/p = q_hi + q_lo to ~2^-106 relative
    x, y = _two_prod(q_hi, p)
    q_lo = ((d - x) - y) / p
    q_lo = xp.where(xp.isfinite(q_lo), q_lo, xp.zeros_like(q_lo))
    for _ in range(_LO_STEPS):
        t = q * xp.log1p(p * -xp.expm1(u) / q) / p
        u = -q_hi - t  # the double-double sum -(q_hi + q_lo) - t, rounded, ...
        bb = u + q_hi
        u_lo = ((-q_hi - (u - bb)) + (-t - bb)) - q_lo  # ... plus its exact rounding error (TwoSum)
    e = xp.exp(u)
    return e + e * u_lo


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
