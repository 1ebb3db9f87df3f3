"""User formulas: parsed by a whitelist, never evaluated; shape checks; bounds against closed forms."""

import numpy as np
import pytest
import sympy as sp

from divclip.theory import get_measure, measure_from_formula
from divclip.theory.formula import parse_formula


def test_hellinger_formula_matches_builtin_closed_form():
    m = measure_from_formula("(sqrt(r) - 1)**2")
    for delta in (1e-6, 0.02, 0.5):
        lo, hi = m.bounds(delta)
        ref_lo, ref_hi = get_measure("hellinger").bounds(delta)
        assert lo == pytest.approx(ref_lo, rel=1e-12)
        assert hi == pytest.approx(ref_hi, rel=1e-12)


def test_kl3_formula_matches_lambert_w_bounds():
    m = measure_from_formula("r - 1 - log(r)")
    lo, hi = m.bounds(np.array([0.01, 0.1]))
    ref_lo, ref_hi = get_measure("kl3").bounds(np.array([0.01, 0.1]))
    np.testing.assert_allclose(lo, ref_lo, rtol=1e-12)
    np.testing.assert_allclose(hi, ref_hi, rtol=1e-12)


def test_p_dependent_formula_matches_binary_tv():
    m = measure_from_formula("abs(p*(r - 1))")
    assert m.p_dependent
    lo, hi = m.bounds(0.05, 0.5)
    assert (lo, hi) == pytest.approx((0.9, 1.1), rel=1e-12)
    with pytest.raises(ValueError, match="p is required"):
        m.bounds(0.05)


def test_caret_power_and_latex():
    m = measure_from_formula("(r-1)^2")
    assert m.bounds(0.04) == pytest.approx((0.8, 1.2), rel=1e-12)
    assert m.latex == sp.latex(sp.Pow(sp.Symbol("r") - 1, 2))
    assert isinstance(m.expr, sp.Expr)


HOSTILE = [
    ('__import__("os").system("id")', "only calls to"),
    ("().__class__.__bases__[0].__subclasses__()", "not allowed"),
    ("r.__class__", "not allowed"),
    ("open('/etc/passwd').read()", "only calls to"),
    ("lambda r: r", "not allowed"),
    ("[r for r in range(10)]", "not allowed"),
    ("r if r > 1 else 1/r", "not allowed"),
    ("exec('1')", "only calls to"),
    ("log(r, 2)", "exactly one argument"),
    ("log(x=r)", "exactly one argument"),
    ("'abc'", "not allowed"),
    ("r; import os", "not a valid expression"),
    ("x - 1", "unknown name 'x'"),
    ("", "must not be empty"),
    ("r" + " + 0" * 400, "at most"),
    ("(r - 1", "not a valid expression"),
    ("r == 1", "not allowed"),
    ("r @ r", "not allowed"),
    ("True + r", "not allowed"),
]


@pytest.mark.parametrize("formula,needle", HOSTILE)
def test_hostile_or_ill_formed_formulas_are_refused(formula, needle):
    with pytest.raises(ValueError, match=needle):
        measure_from_formula(formula)


@pytest.mark.parametrize(
    "formula,needle",
    [
        ("r**2", r"D\(1\) = 0"),
        ("r - 1", "wrong slope on the whole of"),
        ("abs(r - 1) - 0.5*abs(r - 1)**2", "must decrease"),
        ("log(r)**2 * (r - 2)", "wrong slope on the whole of"),
        ("1/(r - 1)", r"D\(1\) = 0"),
    ],
)
def test_formulas_without_a_clip_interval_are_refused(formula, needle):
    with pytest.raises(ValueError, match=needle):
        measure_from_formula(formula)


def test_huge_powers_are_refused_at_parse_time():
    # sympy would compute 9**9**9 as an exact integer when printing; the parser refuses the exponent 9**9.
    with pytest.raises(ValueError, match=r"the exponent '9 \*\* 9' = 3.8742e\+08 is too large"):
        parse_formula("(r - 1)**2 * 9**9**9")


def test_delta_beyond_the_search_range_is_refused():
    m = measure_from_formula("abs(log(r))")
    with pytest.raises(ValueError, match="delta must be below"):
        m.bounds(50.0)


def test_non_string_formula():
    with pytest.raises(ValueError, match="formula must be a string"):
        measure_from_formula(42)


# -- the shape proof: accepted only when {D <= δ} is provably one interval around 1 ---------------------------


def _witness(message):
    """(r, p or None) named by a refusal."""
    import re

    m = re.search(r"near r = ([0-9.e+-]+)(?:, p = ([0-9.e+-]+))?", message)
    assert m, message
    return float(m.group(1)), (float(m.group(2)) if m.group(2) else None)


def _d_prime_at(formula, r, p):
    """D′(r, p) from SymPy's derivative, evaluated at 50 digits (independent of the interval code)."""
    import mpmath

    _, expr, _ = parse_formula(formula)
    rs, ps = sp.Symbol("r", positive=True), sp.Symbol("p", positive=True)
    d = sp.diff(expr, rs).subs({rs: sp.Rational(repr(r)), ps: sp.Rational(repr(p if p is not None else 0.5))})
    with mpmath.workdps(50):
        return float(sp.N(d, 50))


@pytest.mark.parametrize("name", ["ratio", "log_ratio", "k2", "kl3", "kl3_reverse", "binary_tv", "chi2", "hellinger"])
def test_builtin_measure_formulas_are_proven_and_match(name):
    builtin = get_measure(name)
    m = measure_from_formula(builtin.code)
    p = 0.3 if builtin.p_dependent else None
    assert m.bounds(0.01, p) == pytest.approx(builtin.bounds(0.01, p), rel=1e-9)


def test_binary_kl_formula_is_refused_outside_its_domain():
    # Its domain is r < 1/p; the custom solver works on [1e-4, 1e4], so the shape cannot hold there.
    with pytest.raises(ValueError, match="not finite"):
        measure_from_formula(get_measure("binary_kl").code)


@pytest.mark.parametrize(
    "formula",
    [
        "(r - 1)**2 / (1 + (r - 1)**2)",
        "r*log(r) - r + 1",
        "(r - 1)**4",
        "abs(r - 1)**1.5 + log(r)**2",
        "p*(r - 1)**2",
        "(1 + p)*(sqrt(r) - 1)**2 + abs(log(r))",
    ],
)
def test_typical_user_formulas_are_proven(formula):
    m = measure_from_formula(formula)
    lo, hi = m.bounds(0.01, 0.4 if m.p_dependent else None)
    assert lo < 1 < hi


REFUSED_SHAPES = [
    # narrow Gaussian bump between the grid points at r = 1.5: D′ < 0 just above 1.5
    ("(r-1)**2 + 0.5*exp(-((r-1.5)/0.001)**2)", 1.5, None, +1),
    # a narrow dip at r = 2 (D(2) = 0.1 < D(1.999)): D′ < 0 just below 2
    ("(r-1)**2*(1 - 0.9*exp(-((r-2)/0.0005)**2))", 2.0, None, +1),
    # a dip left of 1 (D′ > 0 just above r = 0.505)
    ("(r-1)**2*(1 - 0.9*exp(-((r-0.505)/0.0002)**2))", 0.505, None, -1),
    # a bump only for p near 0.3: monotone at every probe p (0.01, 0.1, 0.5, 0.9, 0.99), not between
    ("(r-1)**2 + 0.3*exp(-((r-1.5)/0.05)**2)*exp(-((p-0.3)/0.01)**2)*(r-1)**2", 1.5, 0.3, +1),
]


@pytest.mark.parametrize("formula,r_near,p_near,sigma", REFUSED_SHAPES)
def test_non_interval_shapes_are_refused_with_a_witness(formula, r_near, p_near, sigma):
    from divclip.theory.formula import _check_shape

    fn, _, uses_p = parse_formula(formula)
    _check_shape(formula, fn, uses_p)  # the old 400-point grid (and 5 probe p) check passes: it cannot see these
    with pytest.raises(ValueError, match="D′ changes sign near") as info:
        measure_from_formula(formula)
    r, p = _witness(str(info.value))
    assert abs(r - r_near) < 0.1
    if p_near is not None:
        assert abs(p - p_near) < 0.03
    # The witness is real: an independent 50-digit evaluation of SymPy's D′ has the wrong sign there.
    assert sigma * _d_prime_at(formula, r, p) < 0


def test_a_proof_that_cannot_finish_refuses(monkeypatch):
    import divclip.theory.formula as formula_mod

    monkeypatch.setattr(formula_mod, "PROOF_BUDGET_BOXES", 0)
    with pytest.raises(ValueError, match="could not prove within 0 interval boxes"):
        measure_from_formula("(r - 1)**2 / (1 + (r - 1)**2)")


def test_wrong_sign_at_one_is_refused():
    # D(1) = 0 but D′(1) = -1 (r - 1 - log r shifted by a linear term): D < 0 just right of 1.
    with pytest.raises(ValueError, match="must decrease"):
        measure_from_formula("r - 1 - log(r) - (r - 1)/1000000")


def test_p_below_the_proven_range_is_refused():
    m = measure_from_formula("p*(r - 1)**2")
    with pytest.raises(ValueError, match=r"p must be at least 1e-300"):
        m.bounds(0.01, 1e-310)
