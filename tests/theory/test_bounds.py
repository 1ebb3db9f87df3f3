"""Clip bounds against independent references: 50-digit mpmath roots and per-element scipy root finding."""

import math

import mpmath
import numpy as np
import pytest
from scipy.optimize import brentq

from divclip.theory import get_measure, kl3_bounds
from divclip.theory.bounds import binary_kl_bounds_array, binary_kl_value

mpmath.mp.dps = 50
DELTAS = np.geomspace(1e-8, 10, 41)


def _mp_kl3_roots(delta):
    d = mpmath.mpf(delta)
    z = -mpmath.exp(-1 - d)
    lo = -mpmath.lambertw(z, 0)
    hi = -mpmath.lambertw(z, -1)
    # Polish on the defining equation itself so the reference does not rest on lambertw alone.
    f = lambda r: r - 1 - mpmath.log(r) - d  # noqa: E731
    return mpmath.findroot(f, lo.real), mpmath.findroot(f, hi.real)


@pytest.mark.parametrize("delta", DELTAS)
def test_kl3_bounds_match_50_digit_mpmath(delta):
    lo, hi = kl3_bounds(delta)
    ref_lo, ref_hi = _mp_kl3_roots(delta)
    assert abs(lo - float(ref_lo)) <= 1e-12 * float(ref_lo)
    assert abs(hi - float(ref_hi)) <= 1e-12 * float(ref_hi)
    assert lo < 1 < hi


def test_kl3_reference_table_of_docs_theory_md():
    # docs/theory.md §2, printed to 10 decimals (each digit checked against mpmath in tests/docs), so the
    # code must agree to half a unit in the 10th place.
    table = {
        0.01: (0.8651652489, 1.1481651224),
        0.02: (0.8131051152, 1.2135497072),
        0.05: (0.7161894552, 1.3504032560),
        0.1: (0.6168168318, 1.5162211614),
    }
    for delta, (lo_ref, hi_ref) in table.items():
        lo, hi = kl3_bounds(delta)
        assert lo == pytest.approx(lo_ref, abs=5e-11)
        assert hi == pytest.approx(hi_ref, abs=5e-11)


def test_kl3_bounds_vectorised_equals_scalar():
    lo, hi = kl3_bounds(DELTAS)
    assert lo.shape == hi.shape == DELTAS.shape
    for d, a, b in zip(DELTAS, lo, hi):
        assert (a, b) == kl3_bounds(float(d))


def _within_ulps_of_root(f, x, delta, ulps=2):
    """True when the exact root of f = δ lies within `ulps` float64 steps of x (sign change across)."""
    a = np.nextafter(x, -np.inf)
    b = x
    for _ in range(ulps):
        a = np.nextafter(a, -np.inf)
        b = np.nextafter(b, np.inf)
    fa, fb = f(a) - delta, f(b) - delta
    return fa == 0 or fb == 0 or (fa > 0) != (fb > 0)


def _accurate(measure, x, delta, p=None):
    """|D(x) - δ| <= 1e-12 max(1, δ), or x is the float64 root to 2 ulps where D is too steep for that."""
    f = lambda r: measure.value(r, p)  # noqa: E731
    if abs(f(x) - delta) <= 1e-12 * max(1.0, delta):
        return True
    return _within_ulps_of_root(f, x, delta)


P_GRID = [None, 1e-3, 0.01, 0.3, 0.5, 0.9, 0.999]


@pytest.mark.parametrize(
    "name", ["log_ratio", "k2", "kl3", "kl3_reverse", "binary_kl", "binary_tv", "chi2", "hellinger", "ratio"]
)
def test_bounds_solve_d_equals_delta(name):
    m = get_measure(name)
    for p in P_GRID[1:] if m.p_dependent else [None]:
        for delta in DELTAS:
            lo, hi = m.bounds(delta, p)
            assert lo < 1 < hi
            assert _accurate(m, hi, delta, p), (name, p, delta, hi, m.value(hi, p))
            if lo > 0:
                assert _accurate(m, lo, delta, p), (name, p, delta, lo, m.value(lo, p))
            else:  # no root below 1: the whole of (0, 1) is within budget
                assert m.value(np.nextafter(0, 1), p) <= delta or math.isinf(m.value(np.nextafter(0, 1), p))


@pytest.mark.parametrize("p", np.concatenate([np.geomspace(1e-6, 0.5, 12), 1 - np.geomspace(1e-6, 0.5, 12)]))
@pytest.mark.parametrize("delta", [1e-6, 1e-3, 0.02, 0.2, 1.0])
def test_binary_kl_bounds_match_scalar_brentq(p, delta):
    """Reference: scipy's brentq, one root at a time, in variables where D has no singularity.

    Lower root in u = log r. Upper root in z = log((1-p)/(1-q)), q = r p in (p, 1): there
    D(z) = p log(p/q) + (1-p) z is finite for every z >= 0, so the bracket never touches r = 1/p.
    """
    lo, hi = get_measure("binary_kl").bounds(delta, p)

    def d_of_u(u):
        return float(binary_kl_value(np.exp(u), p)) - delta

    def d_of_z(z):
        q = p - (1.0 - p) * math.expm1(-z)
        return p * math.log(p / q) + (1.0 - p) * z - delta

    u_far = -(delta - (1 - p) * math.log1p(-p)) / p - 1.0
    lo_ref = math.exp(brentq(d_of_u, u_far, 0.0, xtol=1e-300, rtol=1e-15, maxiter=500))
    z_far = (delta - p * math.log(p)) / (1 - p) + 1.0
    z_ref = brentq(d_of_z, 0.0, z_far, xtol=1e-300, rtol=1e-15, maxiter=500)
    hi_ref = (p - (1.0 - p) * math.expm1(-z_ref)) / p
    assert lo == pytest.approx(lo_ref, rel=1e-10, abs=1e-300)
    assert hi == pytest.approx(hi_ref, rel=1e-12)
    assert hi * p < 1


def test_binary_kl_examples_from_theory_md():
    m = get_measure("binary_kl")
    for p, (lo_ref, hi_ref) in {0.01: (0.053, 4.43), 0.5: (0.802, 1.198), 0.99: (0.965, 1.0096)}.items():
        lo, hi = m.bounds(0.02, p)
        assert lo == pytest.approx(lo_ref, abs=1e-3)
        assert hi == pytest.approx(hi_ref, abs=1e-2 if p < 0.9 else 1e-4)


@pytest.mark.slow
def test_binary_kl_solver_handles_a_million_pairs():
    rng = np.random.default_rng(0)
    n = 1_000_000
    delta = rng.uniform(1e-4, 0.2, n)
    p = rng.uniform(1e-4, 1 - 1e-4, n)
    lo, hi = get_measure("binary_kl").bounds(delta, p)
    assert lo.shape == hi.shape == (n,)
    assert np.all((lo < 1) & (hi > 1) & (hi * p < 1))
    sub = rng.choice(n, 5000, replace=False)
    for x in (lo[sub], hi[sub]):
        d_x = binary_kl_value(x, p[sub])
        close = np.abs(d_x - delta[sub]) <= 1e-12
        # Where D is too steep for that in float64 (upper root within ulps of 1/p), the root must lie
        # within 2 ulps of x: D changes sign across [x - 2 ulp, x + 2 ulp].
        below, above = x, x
        for _ in range(2):
            below, above = np.nextafter(below, 0), np.nextafter(above, np.inf)
        brackets = (binary_kl_value(below, p[sub]) > delta[sub]) != (binary_kl_value(above, p[sub]) > delta[sub])
        assert np.all(close | brackets)
        assert np.mean(close) > 0.95  # the rest: lower roots that underflow to 0 or steep upper roots


def test_binary_kl_solver_runs_in_torch_float64():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    p = rng.uniform(0.01, 0.99, 500)
    d = rng.uniform(1e-3, 0.5, 500)
    lo_np, hi_np = binary_kl_bounds_array(d, p)
    lo_t, hi_t = binary_kl_bounds_array(torch.tensor(d), torch.tensor(p), xp=torch)
    np.testing.assert_allclose(lo_t.numpy(), lo_np, rtol=1e-14)
    np.testing.assert_allclose(hi_t.numpy(), hi_np, rtol=1e-14)


def test_closed_forms_of_simple_measures():
    d = 0.3
    assert get_measure("log_ratio").bounds(d) == pytest.approx((math.exp(-d), math.exp(d)), rel=1e-15)
    s = math.sqrt(2 * d)
    assert get_measure("k2").bounds(d) == pytest.approx((math.exp(-s), math.exp(s)), rel=1e-15)
    l3, u3 = kl3_bounds(d)
    assert get_measure("kl3_reverse").bounds(d) == pytest.approx((1 / u3, 1 / l3), rel=1e-15)
    assert get_measure("binary_tv").bounds(d, 0.6) == pytest.approx((0.5, 1.5), rel=1e-15)
    assert get_measure("chi2").bounds(0.04) == pytest.approx((0.8, 1.2), rel=1e-15)
    assert get_measure("hellinger").bounds(0.04) == pytest.approx((0.64, 1.44), rel=1e-15)
    assert get_measure("ratio").bounds(0.2) == pytest.approx((0.8, 1.2), rel=1e-15)  # δ is the width ε
    assert get_measure("ratio").bounds(1.5) == (0.0, 2.5)
