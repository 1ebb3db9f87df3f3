"""Binary-KL bounds against a high-precision mpmath reference over the whole (δ, p) domain.

The claim tested here (README, "Numerical guarantees"): for δ in [1e-12, 1e3] and p in [1e-12, 1 - 1e-12], the
two roots lo < 1 < hi of D(r, p) = p log(1/r) + (1-p) log((1-p)/(1-rp)) = δ come back within 4 ulps (relative)
of the exact roots wherever those are normal floats, with hi·p < 1 always (D(hi) finite); a lower root below
the smallest normal float comes back as a subnormal or 0 within one subnormal step (2^-1074) of it. The
torch float64 path the loss uses (`theory/forms/_kernels.py`) runs the same solver and is held to the same claim.

Reference: Newton's method at 50 digits (plus the digits of |log lo|) in variables where each root is well posed:
z = log((1-p)/(1-rp)) >= 0 for hi (r = (1 - (1-p)e^{-z})/p, no singularity at r = 1/p) and u = log r for lo.
In these variables D - δ is convex and monotone on each side of r = 1, so Newton started on the far side of a
root walks to it without crossing it. Each root is then certified: D - δ has opposite signs at z(1 ∓ 1e-30)
(resp. u ± 1e-30), each sign confirmed by an evaluation with 30 more digits, so the exact root lies within 1e-25
(relative) of the returned one, far below a float64 ulp (2.2e-16). It shares no code or formula rearrangement
with the solver's fixed points.
"""

import math
import sys

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from divclip.theory import get_measure
from divclip.theory.bounds import binary_kl_bounds_array
from divclip.theory.forms._kernels import _binary_kl_bound

ULPS = 4
NORMAL_MIN = mpmath.mpf(2) ** -1022
TINY = mpmath.mpf(2) ** -1074  # the spacing of subnormal floats
DPS = 50


ETA = mpmath.mpf(10) ** -30  # half-width of the certifying bracket (relative in z, absolute in u = log lo)


def _newton(f, df, x, atol=0, rtol=0):
    """Root of f by Newton from x, where f is convex and monotone between x and the root: the iterates move
    toward the root without crossing it. Stops once a step is below atol + rtol·|x|."""
    for _ in range(200):
        step = f(x) / df(x)
        x -= step
        if abs(step) < atol + rtol * abs(x):
            return x
    raise AssertionError(f"Newton did not converge from {x}")


def _certify(f, a, b):
    """The exact root of f lies in [a, b]: f has opposite signs at a and b, and each end's value is the same to
    10 digits when evaluated again with 30 more digits of working precision (so its sign is not rounding)."""
    fa, fb = f(a), f(b)
    with mpmath.extradps(30):
        fa_more, fb_more = f(a), f(b)
    assert abs(fa - fa_more) < abs(fa_more) * 1e-10 and abs(fb - fb_more) < abs(fb_more) * 1e-10, (a, b, fa, fb)
    assert (fa_more > 0) != (fb_more > 0), (a, b, fa_more, fb_more)


def mp_roots(delta: float, p: float):
    """(lo, hi) of D(r, p) = δ as mpmath numbers (δ, p exact as given), each certified by a sign change."""
    with mpmath.workdps(DPS + 10):
        d, pm = mpmath.mpf(delta), mpmath.mpf(p)
        q = 1 - pm

        def hi_of(z):
            return (1 - q * mpmath.exp(-z)) / pm

        def g(z):  # D(hi(z)) - δ: increasing and convex in z >= 0, g(0) = -δ
            return q * z - pm * mpmath.log(hi_of(z)) - d

        def dg(z):
            return q * (1 - mpmath.exp(-z) / hi_of(z))

        z_max = (d + pm * mpmath.log(1 / pm)) / q + 1  # D(z) >= (1-p) z - p log(1/p) > δ beyond it
        z0 = 2 * mpmath.sqrt(2 * pm * d / q) + 2 * d / q  # twice the quadratic / linear estimates: usually g > 0
        z = _newton(g, dg, z0 if z0 < z_max and g(z0) > 0 else z_max, rtol=ETA * 1e-3)
        hi = hi_of(z)
        _certify(g, z * (1 - ETA), z * (1 + ETA))
        assert hi_of(z * (1 + ETA)) - hi_of(z * (1 - ETA)) < hi * mpmath.mpf(10) ** -25
    u_min = -(delta - (1 - p) * math.log1p(-p)) / p - 1.0  # D(u) > δ + p there
    extra = int(math.log10(abs(u_min))) + 5
    with mpmath.workdps(DPS + extra + 10):
        d, pm = mpmath.mpf(delta), mpmath.mpf(p)
        q = 1 - pm

        def h(u):  # D(e^u) - δ: decreasing and convex in u <= 0, h(0) = -δ
            return -pm * u - q * mpmath.log1p(pm * -mpmath.expm1(u) / q) - d

        def dh(u):
            return -pm + pm * q * mpmath.exp(u) / (q - pm * mpmath.expm1(u))

        u0 = -2 * mpmath.sqrt(2 * q * d / pm) - 2 * d / pm
        u = _newton(h, dh, u0 if u0 > u_min and h(u0) > 0 else mpmath.mpf(u_min), atol=ETA * 1e-3)
        _certify(h, u - ETA, u + ETA)
        lo = mpmath.exp(u)  # within a factor e^(±1e-30) of the exact root
    return lo, hi


def ulps_off(x: float, exact) -> float:
    """|x - exact| in float64 steps at the exact value."""
    return float(abs(mpmath.mpf(x) - exact) / math.ulp(float(exact)))


def check_pair(delta: float, p: float, lo: float, hi: float):
    exact_lo, exact_hi = mp_roots(delta, p)
    assert math.isfinite(lo) and math.isfinite(hi)
    assert 0.0 <= lo < 1.0 < hi and hi * p < 1.0, (delta, p, lo, hi)
    assert ulps_off(hi, exact_hi) <= ULPS, (delta, p, hi, exact_hi)
    if exact_lo >= NORMAL_MIN:
        assert ulps_off(lo, exact_lo) <= ULPS, (delta, p, lo, exact_lo)
    else:  # underflow: a subnormal or 0 within one step of the subnormal grid
        assert abs(mpmath.mpf(lo) - exact_lo) <= TINY, (delta, p, lo, exact_lo)


def _p_values():
    small = st.floats(-12.0, math.log10(0.5)).map(lambda e: 10.0**e)
    return st.one_of(small, small.map(lambda s: 1.0 - s))


@settings(max_examples=60, deadline=None)
@given(st.floats(-12.0, 3.0).map(lambda e: 10.0**e), _p_values())
def test_roots_within_4_ulps_of_mpmath(delta, p):
    lo, hi = get_measure("binary_kl").bounds(delta, p)
    check_pair(delta, p, float(np.asarray(lo)), float(np.asarray(hi)))


# Edges of the domain and of the solver's regimes: roots next to 1/p (large δ, any p; p -> 1), r = e and
# r = 1/e (where the fixed-point finishes start), lower roots that are subnormal or 0 (δ/p >~ 708).
EDGE = [
    (1e-12, 1e-12),
    (1e-12, 1 - 1e-12),
    (1e3, 1e-12),
    (1e3, 1 - 1e-12),
    (1e-12, 0.5),
    (1e3, 0.5),
    (353.9, 1.25e-10),
    (61.14, 0.389),
    (0.05, 0.9999),
    (0.05, 1e-4),
    (708.0, 1.0 - 1e-12),
    (708.4, 0.9999),
    (740.0, 0.999),
    (745.0, 0.9999),
    (745.2, 1.0 - 1e-12),
    (3.0, 1e-6),
    (0.5, 0.3678794411714423),
    (1.0, 0.05),
    (20.0, 0.05),
    (1e-6, 1e-3),
    (700.0, 1.0 - 1e-9),
    (744.0, 1.0 - 1e-12),
]


@pytest.mark.parametrize("delta,p", EDGE)
def test_roots_at_domain_edges(delta, p):
    lo, hi = binary_kl_bounds_array(np.array([delta]), np.array([p]))
    check_pair(delta, p, float(lo[0]), float(hi[0]))


def test_torch_loss_path_is_the_same_solver_and_as_exact():
    """The loss's per-token bounds run the same code in torch; torch's and numpy's exp/log1p may differ by
    an ulp, so the torch floats are held to the same 4-ulp claim against mpmath, and to numpy's within 4 ulps."""
    deltas = [1e-12, 1e-3, 0.05, 10.0, 1e3]
    ps = [1e-12, 1e-6, 1e-3, 0.3, 0.7, 1 - 1e-3, 1 - 1e-6, 1 - 1e-12]
    pt = torch.tensor(ps, dtype=torch.float64)
    for delta in deltas:
        lo_t, hi_t = _binary_kl_bound(delta, pt, -1).numpy(), _binary_kl_bound(delta, pt, +1).numpy()
        lo, hi = binary_kl_bounds_array(np.full(len(ps), delta), np.array(ps))
        assert np.all(np.abs(hi_t - hi) <= ULPS * np.spacing(hi))
        assert np.all(np.abs(lo_t - lo) <= ULPS * np.spacing(lo))
        for i, p in enumerate(ps):
            check_pair(delta, p, float(lo_t[i]), float(hi_t[i]))


def test_a_wrong_root_is_caught():
    """The checker is not vacuous: moving a correct root by 5 ulps fails it."""
    lo, hi = binary_kl_bounds_array(np.array([10.0]), np.array([1e-3]))
    bad_hi = float(hi[0])
    for _ in range(ULPS + 1):
        bad_hi = math.nextafter(bad_hi, 0.0)
    with pytest.raises(AssertionError):
        check_pair(10.0, 1e-3, float(lo[0]), bad_hi)


@pytest.mark.parametrize("wrong", ["hi", "lo"])
def test_a_wrong_reference_fails_its_certification(monkeypatch, wrong):
    """The reference is not vacuous: a root moved by 1e-25 (relative in z, resp. in u = log lo: 1e5 times the
    certifying bracket, yet far below an ulp) fails the sign-change check."""
    exact, calls = _newton, []

    def off(*args, **kw):  # mp_roots solves for hi (z) first, then lo (u)
        calls.append("hi" if not calls else "lo")
        x = exact(*args, **kw)
        return x * (1 + mpmath.mpf(10) ** -25) if calls[-1] == wrong else x

    monkeypatch.setattr(sys.modules[__name__], "_newton", off)
    with pytest.raises(AssertionError):
        mp_roots(10.0, 1e-3)
    assert calls[-1] == wrong


@pytest.mark.slow
def test_roots_on_a_log_grid_over_the_whole_domain():
    """41 δ in [1e-12, 1e3] x 50 p in [1e-12, 1 - 1e-12] (log-spaced toward both ends of p), 2050 pairs."""
    deltas = 10.0 ** np.linspace(-12, 3, 41)
    half = 10.0 ** np.linspace(-12, math.log10(0.5), 25)
    ps = np.concatenate([half, 1.0 - half[::-1]])
    d, p = (a.ravel() for a in np.meshgrid(deltas, ps))
    lo, hi = binary_kl_bounds_array(d, p)
    for i in range(d.size):
        check_pair(float(d[i]), float(p[i]), float(lo[i]), float(hi[i]))
