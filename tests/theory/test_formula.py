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
        ("r - 1", "must decrease"),
        ("abs(r - 1) - 0.5*abs(r - 1)**2", "must decrease"),
        ("log(r)**2 * (r - 2)", "must decrease"),
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
