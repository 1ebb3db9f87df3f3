"""KL3 and KL3-reverse bounds and ε maps against a high-precision mpmath reference, over all of float64.

The claim tested here (README, "Numerical guarantees"): for every finite δ > 0, each of l_δ, u_δ, 1 - l_δ,
u_δ - 1, 1/l_δ (KL3) and 1/u_δ, 1/l_δ (KL3-reverse) is within 4 ulps of the exact value where that value is a
normal float, and is the correctly rounded float (a subnormal, 0 or inf) where it is not. No NaN anywhere.
`delta_for_eps` and `equivalent_ratio_clip` are each within 4 ulps of their exact values at their float inputs
for ε_low in [1e-15, 1 - 1e-15] and ε_high in [1e-15, 1e15]; the round trip ε -> δ -> ε is within 4·(1 + κ) ulps,
κ = |δ/ε · dε/dδ| the condition number (1/2 near ε = 0; largest, ~35, for KL3-reverse at ε_high = 1e15).

Reference: mpmath at 60 + |log10 δ| digits (80 + |log10 δ| in the slow sweep). Up to δ = 50 it is Lambert W
(l = -W_0(-e^{-1-δ}), u = -W_{-1}(-e^{-1-δ})); above, where mpmath's W of e^{-δ} is very slow, it solves the
defining equations: Newton on u - 1 - δ - log u = 0 (to the working precision, then the residual is checked)
and the iteration l = exp(l - 1 - δ), a contraction there (factor l < e^-50).
"""

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from divclip.theory import delta_for_eps, equivalent_ratio_clip, get_measure, kl3_bounds
from divclip.theory.bounds import kl3_roots

ULPS = 4
TINY = mpmath.mpf(2) ** -1074  # smallest positive subnormal


def mp_roots(delta: float, dps: int = 60):
    """(l, u) of r - 1 - log r = δ as mpmath numbers, at dps + |log10 δ| digits (δ exact as given)."""
    extra = int(abs(math.log10(delta))) + 5
    with mpmath.workdps(dps + extra):
        d = mpmath.mpf(delta)
        if d <= 50:
            z = -mpmath.exp(-1 - d)
            lo, hi = -mpmath.lambertw(z, 0).real, -mpmath.lambertw(z, -1).real
        else:
            hi = 1 + d + mpmath.log(1 + d)
            for _ in range(60):  # Newton on u - 1 - δ - log u (convex, increasing): quadratic, from above
                step = (hi - 1 - d - mpmath.log(hi)) / (1 - 1 / hi)
                hi -= step
                if abs(step) < hi * mpmath.eps * 4:
                    break
            else:
                raise AssertionError(f"no convergence at δ={delta!r}")
            assert abs(hi - 1 - d - mpmath.log(hi)) < hi * mpmath.eps * 8  # relative error ~8 eps: digits spare
            if d > 800:  # l < e^{-801}: below half the smallest subnormal, so the float is 0
                lo = mpmath.mpf(0)
            else:
                lo = mpmath.mpf(0)
                for _ in range(5):
                    lo = mpmath.exp(lo - 1 - d)
        return +lo, +hi


def nearest_float(x) -> float:
    """The correctly rounded float64 of the mpmath number x (Fraction division rounds correctly)."""
    if x == 0:
        return 0.0
    sign, man, exp, _ = x._mpf_
    try:
        v = float(Fraction(man) * Fraction(2) ** exp)
    except OverflowError:
        v = math.inf
    return -v if sign else v


def check(got: float, exact, what: str, ulps: float = ULPS):
    """got within `ulps` of exact where exact is a normal float, else exactly its correctly rounded float."""
    assert not math.isnan(got), f"{what}: NaN"
    ref = nearest_float(exact) if exact < mpmath.mpf(2) ** 1100 else math.inf
    if ref == 0 or not math.isfinite(ref) or abs(ref) < 2.2250738585072014e-308:
        assert got == ref, f"{what}: got {got!r}, correctly rounded {ref!r}"
        return
    with mpmath.workdps(100):
        err = float(abs(mpmath.mpf(got) - exact) / mpmath.mpf(math.ulp(ref)))
    assert err <= ulps, f"{what}: got {got!r}, exact {mpmath.nstr(exact, 20)}: {err:.2f} ulps"


def check_all(delta: float, dps: int = 60):
    lo, hi = mp_roots(delta, dps)
    with mpmath.workdps(dps + 400):
        inv_lo = 1 / lo if lo > 0 else mpmath.inf
        exact = {"l": lo, "u": hi, "1-l": 1 - lo, "u-1": hi - 1, "1/l": inv_lo, "1/u": 1 / hi}
    roots = kl3_roots(np.float64(delta))
    got = {"l": roots.lo, "u": roots.hi, "1-l": roots.eps_lo, "u-1": roots.eps_hi, "1/l": roots.inv_lo}
    for k, v in got.items():
        if exact[k] == mpmath.inf:
            assert float(v) == math.inf, f"{k} at δ={delta!r}: {v!r}, exact inf"
        else:
            check(float(v), exact[k], f"{k} at δ={delta!r}")
    pub = kl3_bounds(delta)
    assert pub == (float(roots.lo), float(roots.hi))
    rev_lo, rev_hi = get_measure("kl3_reverse").bounds(delta)
    check(rev_lo, exact["1/u"], f"kl3_reverse lo at δ={delta!r}")
    if exact["1/l"] == mpmath.inf:
        assert rev_hi == math.inf
    else:
        check(rev_hi, exact["1/l"], f"kl3_reverse hi at δ={delta!r}")


# Edges: near the branch point, the split points of the solver, the subnormal/overflow band, the extremes.
EDGE_DELTAS = [
    5e-324,
    1e-320,
    2.2250738585072014e-308,
    1e-300,
    1e-200,
    1e-100,
    1e-60,
    1e-33,
    1e-31,
    1e-30,
    1e-20,
    1e-16,
    5e-9,
    1e-9,
    1e-4,
    0.023144,
    math.log(2) - 0.5,
    0.19314718,
    0.19314719,
    1 - math.log(2),
    0.306852,
    0.306853,
    1.0,
    2.0,
    50.0,
    50.000001,
    700.0,
    706.5,
    706.9,
    707.0,
    708.0,
    708.4,
    708.8,
    709.0,
    709.8,
    720.0,
    740.0,
    744.0,
    744.13,
    744.2,
    745.0,
    745.2,
    746.0,
    800.0,
    1e4,
    1e15,
    1e100,
    1e300,
    1.7976931348623157e308,
]


@pytest.mark.parametrize("delta", EDGE_DELTAS)
def test_kl3_roots_at_edges(delta):
    check_all(delta)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.floats(min_value=-300.0, max_value=300.0))
def test_kl3_roots_over_the_whole_float_range(log10_delta):
    check_all(10.0**log10_delta)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.floats(min_value=0.05, max_value=760.0))
def test_kl3_roots_where_the_solver_switches_and_the_lower_bound_underflows(delta):
    check_all(delta)


def test_kl3_roots_arrays_equal_scalars_and_never_nan():
    d = np.array(EDGE_DELTAS)
    roots = kl3_roots(d)
    for k, arr in zip(roots._fields, roots):
        assert not np.isnan(arr).any(), k
        assert [float(x) for x in arr] == [float(getattr(kl3_roots(np.float64(x)), k)) for x in d], k
    lo, hi = kl3_bounds(d)
    assert np.all(lo <= 1) and np.all(hi >= 1)  # both round to 1.0 once √(2δ) is below half an ulp of 1


# ------------------------------------------------------------------------------------------- ε maps
def _mp_delta(measure: str, x: float):
    with mpmath.workdps(60 + int(abs(math.log10(abs(x)))) * 2):
        r = 1 + mpmath.mpf(x)
        return (r - 1 - mpmath.log(r)) if measure == "kl3" else (1 / r - 1 + mpmath.log(r))


def _condition(measure: str, x: float, delta: float) -> float:
    """κ = |δ/ε · dε/dδ| at r = 1 + x: how many ulps of ε one ulp of δ moves (dε/dδ = 1/|D'(r)|)."""
    with mpmath.workdps(60):
        r = 1 + mpmath.mpf(x)
        slope = (r - 1) / r if measure == "kl3" else (r - 1) / r**2
        return float(abs(mpmath.mpf(delta) / (abs(mpmath.mpf(x)) * slope)))


def _round_trip(measure: str, side: str, eps: float):
    """Each map to ULPS of its exact value at its float input; the round trip to ULPS·(1 + κ): a float δ carries
    a rounding of its own, which the inverse map multiplies by the condition number κ (about 1/2 for small ε,
    up to ~35 for KL3-reverse at ε_high = 1e15, where 1/l_δ ~ e^δ)."""
    x = -eps if side == "low" else eps
    delta = delta_for_eps(measure, **{f"eps_{side}": eps})
    check(delta, _mp_delta(measure, x), f"{measure} δ for ε_{side}={eps!r}")
    k = 0 if side == "low" else 1
    back = equivalent_ratio_clip(measure, delta)[k]
    lo, hi = mp_roots(delta)
    with mpmath.workdps(100):
        if measure == "kl3":
            exact_back = 1 - lo if k == 0 else hi - 1
        else:
            exact_back = 1 - 1 / hi if k == 0 else (1 / lo - 1 if lo > 0 else mpmath.inf)
    if exact_back == mpmath.inf:
        assert back == math.inf
    else:
        check(back, exact_back, f"{measure} ε_{side} at δ={delta!r}")
    tol = ULPS * (1 + _condition(measure, x, delta))
    with mpmath.workdps(60):
        check(back, mpmath.mpf(eps), f"{measure} ε_{side}={eps!r} round trip", tol)


@pytest.mark.parametrize("measure", ["kl3", "kl3_reverse"])
@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.floats(min_value=-15.0, max_value=0.0), st.booleans())
def test_eps_low_round_trip(measure, log10_eps, from_one):
    eps = 1.0 - 10.0**log10_eps if from_one else 10.0**log10_eps  # both ends: 1e-15 and 1 - 1e-15
    eps = min(max(eps, 1e-15), 1 - 1e-15)
    _round_trip(measure, "low", eps)


@pytest.mark.parametrize("measure", ["kl3", "kl3_reverse"])
@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.floats(min_value=-15.0, max_value=15.0))
def test_eps_high_round_trip(measure, log10_eps):
    _round_trip(measure, "high", 10.0**log10_eps)


@pytest.mark.parametrize("measure", ["kl3", "kl3_reverse"])
@pytest.mark.parametrize("eps", [1e-15, 1e-10, 1e-4, 0.2, 0.5, 0.9, 1 - 1e-15])
def test_eps_low_round_trip_edges(measure, eps):
    _round_trip(measure, "low", eps)


@pytest.mark.parametrize("measure", ["kl3", "kl3_reverse"])
@pytest.mark.parametrize("eps", [1e-15, 1e-10, 0.28, 1.0, 700.0, 1e4, 1e15])
def test_eps_high_round_trip_edges(measure, eps):
    _round_trip(measure, "high", eps)


def test_issue_examples():
    """δ = 1e-10 gave hi = 1.19 (scipy's W_{-1} at the branch point); δ = 1e-16 and 745 gave NaN."""
    lo, hi = kl3_bounds(1e-10)
    assert hi == pytest.approx(1 + math.sqrt(2e-10) + 2e-10 / 3, rel=1e-15)
    assert lo == pytest.approx(1 - math.sqrt(2e-10) + 2e-10 / 3, rel=1e-15)
    for d in (1e-16, 745.0, 1e4):
        assert not any(math.isnan(v) for v in kl3_bounds(d))


# ------------------------------------------------------------------------- the reviewer's sweep
@pytest.mark.slow
def test_80_digit_sweep_over_1e_minus_300_to_1e300():
    deltas = np.concatenate([np.geomspace(1e-300, 1e300, 1201), np.linspace(690.0, 750.0, 121)])
    for d in deltas:
        check_all(float(d), dps=80)


# ------------------------------------------------------------------ δ of a width: correctly rounded
@pytest.mark.parametrize("measure", ["kl3", "kl3_reverse"])
def test_delta_for_eps_is_correctly_rounded(measure):
    """δ = D(1 ± ε) to half an ulp, over 13 decades of ε on both sides and around ε_high = 1, where KL3-reverse's
    float64 difference log1p(x) - x/(1+x) was 4.6 ulps off (ε_high = 1.000691014168259, found by Hypothesis)."""
    rng = np.random.default_rng(7)
    highs = np.concatenate([10.0 ** rng.uniform(-13, 3, 150), rng.uniform(0.5, 3.0, 150), [1.000691014168259]])
    lows = np.concatenate([10.0 ** rng.uniform(-13, 0, 150), 1 - 10.0 ** rng.uniform(-13, -0.3, 50)])
    for side, widths in (("high", highs), ("low", lows)):
        for eps in widths:
            eps = float(eps)
            got = delta_for_eps(measure, **{f"eps_{side}": eps})
            check(got, _mp_delta(measure, eps if side == "high" else -eps), f"{measure} ε_{side}={eps!r}", 0.5)


def test_kl3_x_within_five_ulps():
    """The float64 KL3(1 + x) behind the roots' Newton step (`kl3_x`), against mpmath: series and direct branches."""
    from divclip.theory.bounds import kl3_x

    rng = np.random.default_rng(8)
    xs = np.concatenate(
        [10.0 ** rng.uniform(-15, 3, 400), -(10.0 ** rng.uniform(-15, -0.05, 300)), rng.uniform(-0.6, 1.2, 300)]
    )
    for x in xs:
        check(float(kl3_x(float(x))), _mp_delta("kl3", float(x)), f"kl3_x({x!r})", 5)
