"""Properties every registered measure must have (hypothesis), and input validation."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from divclip.theory import MEASURES, delta_for_eps, equivalent_ratio_clip, get_measure
from divclip.theory.measures import value_at_zero

deltas = st.floats(1e-8, 10.0)
probs = st.floats(1e-4, 1 - 1e-4)
NAMES = sorted(MEASURES)


def _root_accurate(m, x, delta, p):
    """D(x) = δ to 1e-12 relative, or (where D is too steep for float64) the root lies within 2 ulps of x."""
    if abs(m.value(x, p) - delta) <= 1e-12 * max(1.0, delta):
        return True
    a, b = np.nextafter(np.nextafter(x, 0), 0), np.nextafter(np.nextafter(x, np.inf), np.inf)
    return (m.value(a, p) > delta) != (m.value(b, p) > delta)


def _p(m, p):
    return p if m.p_dependent else None


@pytest.mark.parametrize("name", NAMES)
@given(delta=deltas, p=probs)
def test_interval_contains_one_and_solves_d(name, delta, p):
    m = get_measure(name)
    pp = _p(m, p)
    lo, hi = m.bounds(delta, pp)
    assert 0 <= lo < 1 < hi
    assert _root_accurate(m, hi, delta, pp)
    if lo > 0 and delta < value_at_zero(m, pp):
        assert _root_accurate(m, lo, delta, pp)
    # Inside the interval D <= δ, just outside D > δ.
    mid_hi = 1 + 0.5 * (hi - 1)
    assert m.value(mid_hi, pp) <= delta


@pytest.mark.parametrize("name", NAMES)
@given(d1=deltas, d2=deltas, p=probs)
def test_bounds_monotone_in_delta(name, d1, d2, p):
    m = get_measure(name)
    pp = _p(m, p)
    small, large = sorted((d1, d2))
    lo_s, hi_s = m.bounds(small, pp)
    lo_l, hi_l = m.bounds(large, pp)
    assert lo_l <= lo_s and hi_l >= hi_s


@pytest.mark.parametrize("name", NAMES)
@given(delta=st.floats(1e-6, 0.5), p=st.floats(0.01, 0.99))
def test_delta_for_eps_round_trips(name, delta, p):
    """ε -> δ -> ε returns the same interval. δ -> ε -> δ is checked where D is not too steep for float64
    (near r·p -> 1 a binary-KL upper root sits within a few ulps of 1/p and δ is ill-conditioned in ε)."""
    m = get_measure(name)
    pp = _p(m, p)
    eps_low, eps_high = equivalent_ratio_clip(name, delta, pp)
    d_high = delta_for_eps(name, eps_high=eps_high, p=pp)
    assert equivalent_ratio_clip(name, d_high, pp)[1] == pytest.approx(eps_high, rel=1e-9)
    if 1e-3 < eps_low < 0.99:
        d_low = delta_for_eps(name, eps_low=eps_low, p=pp)
        assert equivalent_ratio_clip(name, d_low, pp)[0] == pytest.approx(eps_low, rel=1e-9)
    if not m.p_dependent:
        assert d_high == pytest.approx(delta, rel=1e-8)
        if 1e-3 < eps_low < 0.99:
            assert d_low == pytest.approx(delta, rel=1e-8)


def test_kl3_at_grpo_eps_low_matches_theory_md():
    delta = delta_for_eps("kl3", eps_low=0.2)
    assert delta == pytest.approx(-0.2 - math.log(0.8), rel=1e-14)
    eps_low, eps_high = equivalent_ratio_clip("kl3", delta)
    assert eps_low == pytest.approx(0.2, rel=1e-12)
    assert eps_high == pytest.approx(0.23084, abs=1e-5)  # docs/theory.md §2: u = 1.23084 (DAPO uses 1.28)


def test_kl3_is_asymmetric_clip_higher():
    for delta in np.geomspace(1e-6, 1, 20):
        eps_low, eps_high = equivalent_ratio_clip("kl3", delta)
        assert eps_high > eps_low
        if delta < 1e-3:  # ε_high - ε_low = 4δ/3 + O(δ²)
            assert (eps_high - eps_low) == pytest.approx(4 * delta / 3, rel=5 * delta)


def test_value_vectorised_and_known_values():
    r = np.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(get_measure("kl3").value(r), r - 1 - np.log(r), rtol=1e-15)
    np.testing.assert_allclose(get_measure("chi2").value(r), (r - 1) ** 2)
    assert get_measure("binary_kl").value(1.0, 0.3) == 0.0
    assert math.isinf(get_measure("binary_kl").value(1 / 0.3 + 1e-9, 0.3))


BAD = [
    ("kl3", dict(delta=0.0), "delta"),
    ("kl3", dict(delta=-1.0), "delta"),
    ("kl3", dict(delta=float("nan")), "delta"),
    ("kl3", dict(delta=float("inf")), "delta"),
    ("kl3", dict(delta="0.1"), "delta"),
    ("binary_kl", dict(delta=0.1), "p is required"),
    ("binary_kl", dict(delta=0.1, p=0.0), "p must lie in the open interval"),
    ("binary_kl", dict(delta=0.1, p=1.0), "p must lie in the open interval"),
    ("binary_tv", dict(delta=0.1, p=1.5), "1.5"),
    ("binary_kl", dict(delta=0.1, p=float("nan")), "p must"),
]


@pytest.mark.parametrize("name,kwargs,needle", BAD)
def test_bad_bounds_input_raises_named_value_error(name, kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        get_measure(name).bounds(**kwargs)


def test_bad_names_and_ratio_api():
    with pytest.raises(ValueError, match=r"measure must be one of .*got 'kl4'"):
        get_measure("kl4")
    ratio = get_measure("ratio")  # the same bounds(delta, p=None) as every measure; δ is the width ε
    assert ratio.bounds(0.25, 0.3) == (0.75, 1.25)  # p is accepted (checked) and ignored
    with pytest.raises(TypeError):
        ratio.bounds(eps_low=0.2, eps_high=0.3)
    with pytest.raises(ValueError, match="delta must be a finite number > 0, got -0.1"):
        ratio.bounds(-0.1)
    with pytest.raises(ValueError, match=r"p must lie in the open interval \(0, 1\), got 1.5"):
        ratio.bounds(0.2, 1.5)
    with pytest.raises(ValueError, match="exactly one"):
        delta_for_eps("kl3", eps_low=0.2, eps_high=0.2)
    with pytest.raises(ValueError, match=r"eps_low must lie in \(0, 1\)"):
        delta_for_eps("kl3", eps_low=1.5)
    with pytest.raises(ValueError, match="eps_high"):
        delta_for_eps("binary_kl", eps_high=5.0, p=0.5)
    with pytest.raises(ValueError, match="r must be a ratio >= 0"):
        get_measure("kl3").value(-1.0)
