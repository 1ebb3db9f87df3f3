"""Binary-KL bounds against a high-precision mpmath reference over the whole (δ, p) domain.

The claim tested here (README, "Numerical guarantees"): for δ in [1e-12, 1e3] and p in [1e-12, 1 - 1e-12], the
two roots lo < 1 < hi of D(r, p) = p log(1/r) + (1-p) log((1-p)/(1-rp)) = δ come back within 4 ulps (relative)
of the exact roots wherever those are normal floats, with hi·p < 1 always (D(hi) finite); a lower root below
the smallest normal float comes back as a subnormal or 0 within one subnormal step (2^-1074) of it. The
torch float64 path the loss uses (`theory/loss_modes.py`) runs the same solver and is held to the same claim.

Reference: bisection at 50 digits (plus the digits of |log lo|) in variables where each root is well posed:
z = log((1-p)/(1-rp)) >= 0 for hi (r = (1 - (1-p)e^{-z})/p, no singularity at r = 1/p) and u = log r for lo.
It shares no code or formula rearrangement with the solver's fixed points.
"""

import math

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from divclip.theory import get_measure
from divclip.theory.bounds import binary_kl_bounds_array
from divclip.theory.loss_modes import _binary_kl_bound

ULPS = 4
NORMAL_MIN = mpmath.mpf(2) ** -1022
TINY = mpmath.mpf(2) ** -1074  # the spacing of subnormal floats
DPS = 50


def _bisect(f, a, b, n_bits):
    """Root of f in [a, b] (sign change), halving n_bits times."""
    fa_pos = f(a) > 0
    for _ in range(n_bits):
        m = (a + b) / 2
        if (f(m) > 0) == fa_pos:
            a = m
        else:
            b = m
    return (a + b) / 2


def mp_roots(delta: float, p: float):
    """(lo, hi) of D(r, p) = δ as mpmath numbers (δ, p exact as given)."""
    with mpmath.workdps(DPS + 10):
        d, pm = mpmath.mpf(delta), mpmath.mpf(p)
        q = 1 - pm

        def hi_of(z):
            return (1 - q * mpmath.exp(-z)) / pm

        z_max = (d + pm * mpmath.log(1 / pm)) / q + 1  # D(z) >= (1-p) z - p log(1/p) > δ beyond it
        z = _bisect(lambda z: q * z - pm * mpmath.log(hi_of(z)) - d, mpmath.mpf(0), z_max,
                    int((DPS + 5) * 3.33 + mpmath.log(z_max, 2)) + 8)
        hi = hi_of(z)
    u_min = -(delta - (1 - p) * math.log1p(-p)) / p - 1.0  # D(u) > δ + p there
    extra = int(math.log10(abs(u_min))) + 5
    with mpmath.workdps(DPS + extra + 10):
        d, pm = mpmath.mpf(delta), mpmath.mpf(p)
        q = 1 - pm
        u = _bisect(lambda u: -pm * u - q * mpmath.log1p(pm * -mpmath.expm1(u) / q) - d, mpmath.mpf(u_min),
                    mpmath.mpf(0), int((DPS + extra + 5) * 3.33) + 8)
        lo = mpmath.exp(u)
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
EDGE = [(1e-12, 1e-12), (1e-12, 1 - 1e-12), (1e3, 1e-12), (1e3, 1 - 1e-12), (1e-12, 0.5), (1e3, 0.5),
        (353.9, 1.25e-10), (61.14, 0.389), (0.05, 0.9999), (0.05, 1e-4), (708.0, 1.0 - 1e-12), (708.4, 0.9999),
        (740.0, 0.999), (745.0, 0.9999), (745.2, 1.0 - 1e-12), (3.0, 1e-6), (0.5, 0.3678794411714423),
        (1.0, 0.05), (20.0, 0.05), (1e-6, 1e-3), (700.0, 1.0 - 1e-9), (744.0, 1.0 - 1e-12)]


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
