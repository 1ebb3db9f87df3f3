"""Tests for theory.symbolic: every step's SymPy check passes, wrong statements fail, rendering,
boundary errors, and the KL3 roots against scipy.special.lambertw and docs/theory.md §2."""

from __future__ import annotations

import dataclasses
import functools
import math
import re

import mpmath
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import lambertw

from divclip.theory import symbolic
from divclip.theory.symbolic import DELTA, CheckResult, R, S, Step

L_SYM, U_SYM = sp.Symbol("l_delta"), sp.Symbol("u_delta")
X = -sp.exp(-1 - DELTA)
KL3 = R - 1 - sp.log(R)

# Every derivation has these steps in this order (KL3 adds its Lambert-W step; test_every_derivation_has_the_
# parametrized_steps holds each derivation to it). The cases are listed from the names alone, so collecting
# this module derives nothing: the derivations are built (once, cached) by the tests that read them.
GENERIC_STEPS = ("Definition", "Minimum", "Roots", "Bracketing", "Series", "Asymmetry", "Gradient")
KL3_STEPS = ("Definition", "Minimum", "Lambert-W", "Roots", "Bracketing", "Series", "Asymmetry", "Gradient")


def step_kinds(name: str) -> tuple[str, ...]:
    return KL3_STEPS if name == "kl3" else GENERIC_STEPS


ALL_STEPS = [(name, i, kind) for name in symbolic.derivable_measures() for i, kind in enumerate(step_kinds(name))]


@functools.cache
def results(name: str) -> tuple[CheckResult, ...]:
    """Each check runs once per session; several tests read the results."""
    return tuple(step.run_check() for step in symbolic.derivation(name))


def kl3_step(title_start: str) -> Step:
    (step,) = [s for s in symbolic.kl3_derivation() if s.title.startswith(title_start)]
    return step


def value(expr: sp.Expr, delta: float) -> float:
    return float(expr.evalf(30, subs={DELTA: sp.Float(str(delta), 30)}))


# ---- every step passes -----------------------------------------------------------------------------


def test_derivable_measures_include_the_brief() -> None:
    assert {"kl3", "k2", "log_ratio", "chi2", "hellinger", "kl3_reverse"} <= set(symbolic.derivable_measures())


@pytest.mark.parametrize("name", symbolic.derivable_measures())
def test_every_derivation_has_the_parametrized_steps(name: str) -> None:
    """test_every_step_check_passes covers every step: one case per step, none left over."""
    assert tuple(s.title.split()[0] for s in symbolic.derivation(name)) == step_kinds(name)


@pytest.mark.parametrize(("name", "index", "kind"), ALL_STEPS, ids=[f"{n}-{i}-{k}" for n, i, k in ALL_STEPS])
def test_every_step_check_passes(name: str, index: int, kind: str) -> None:
    step, result = symbolic.derivation(name)[index], results(name)[index]
    assert step.title.split()[0] == kind
    assert isinstance(step.statement, sp.Basic)
    assert step.title and step.explanation and step.latex
    assert result.passed, f"{name} step {index + 1} {step.title}: {result.method}: {result.detail}"
    assert result.method and result.detail


EXACT = "exact (monotonicity + roots + SAT)"


@pytest.mark.parametrize("name", ["kl3", "kl3_reverse", "ratio", "log_ratio", "k2", "chi2"])
def test_gradient_rule_is_proved_symbolically(name: str) -> None:
    """The last step is proved exactly where SymPy can (see test_symbolic_gradient_rule.py for how)."""
    step, result = symbolic.derivation(name)[-1], results(name)[-1]
    assert step.title.startswith("Gradient rule")
    assert result.passed, result.detail
    assert result.kind == "symbolic" and EXACT in result.method, result.method
    assert "SAT: no truth assignment separates the two sides" in result.detail


def test_hellinger_lower_root_needs_delta_below_one_so_stays_numeric() -> None:
    # √r = 1 - √δ is a root only for δ < 1; SymPy cannot use that, so the check falls back to sampling, labelled.
    result = results("hellinger")[-1]
    assert result.passed and result.kind == "numeric"


def test_kl3_steps_in_the_brief_order() -> None:
    titles = [s.title for s in symbolic.kl3_derivation()]
    expected = ["Definition", "Minimum", "Lambert", "Roots", "Bracketing", "Series", "Asymmetry", "Gradient"]
    assert [t.split()[0].split("-")[0] for t in titles] == expected


def test_check_property_runs_the_verifier_on_the_stored_statement() -> None:
    step = kl3_step("Minimum")
    assert step.check().passed
    assert symbolic.check_step(step).passed


def test_kl3_derivation_is_derivation_kl3() -> None:
    assert symbolic.kl3_derivation() == symbolic.derivation("kl3")


def test_solve_returns_only_the_w0_root_for_kl3() -> None:
    (root,) = sp.solve(KL3 - DELTA, R)
    assert root == -sp.LambertW(X)
    detail = results("kl3")[3].detail
    assert "added by hand" in detail and "LambertW(-exp(-delta - 1), -1)" in detail


def test_generic_machinery_reproduces_the_hand_written_kl3_facts() -> None:
    lower, upper = symbolic.clip_roots(KL3)
    assert (lower, upper) == (-sp.LambertW(X), -sp.LambertW(X, -1))
    l_series, u_series, var = symbolic.root_series(KL3)
    assert var == S
    assert sp.expand(u_series - (1 + S + S**2 / 3 + S**3 / 36 - S**4 / 270)) == 0
    assert sp.expand(l_series - u_series.subs(S, -S)) == 0


@pytest.mark.parametrize(
    ("name", "lower", "upper"),
    [
        ("k2", sp.exp(-sp.sqrt(2 * DELTA)), sp.exp(sp.sqrt(2 * DELTA))),  # docs/theory.md §3
        ("log_ratio", sp.exp(-DELTA), sp.exp(DELTA)),
        ("chi2", 1 - sp.sqrt(DELTA), 1 + sp.sqrt(DELTA)),
        ("hellinger", (1 - sp.sqrt(DELTA)) ** 2, (1 + sp.sqrt(DELTA)) ** 2),
        ("kl3_reverse", 1 / -sp.LambertW(X, -1), 1 / -sp.LambertW(X)),  # [1/u, 1/l] of KL3
    ],
)
def test_generic_roots_match_closed_forms(name: str, lower: sp.Expr, upper: sp.Expr) -> None:
    derived = symbolic.clip_roots(symbolic.measure_expression(name))
    for delta in (0.003, 0.02, 0.3):
        assert value(derived[0], delta) == pytest.approx(value(lower, delta), rel=1e-12)
        assert value(derived[1], delta) == pytest.approx(value(upper, delta), rel=1e-12)


@pytest.mark.parametrize(
    ("name", "leading"),
    [
        ("kl3", 4 * DELTA / 3),
        ("kl3_reverse", 8 * DELTA / 3),
        ("k2", 2 * DELTA),
        ("log_ratio", DELTA**2),
        ("chi2", 0),
        ("hellinger", 2 * DELTA),
    ],
)
def test_asymmetry_leading_terms(name: str, leading: sp.Expr) -> None:
    (step,) = [s for s in symbolic.derivation(name) if s.title.startswith("Asymmetry")]
    rhs = step.statement.rhs
    assert sp.expand(rhs.removeO() - leading) == 0  # removeO is the identity on exact (chi2, hellinger)


# ---- numbers against independent references ---------------------------------------------------------


@pytest.mark.parametrize(
    ("delta", "l_ref", "u_ref"),
    [  # docs/theory.md §2 table (10 decimals)
        (0.01, 0.8651652489, 1.1481651224),
        (0.02, 0.8131051152, 1.2135497072),
        (0.05, 0.7161894552, 1.3504032560),
        (0.1, 0.6168168318, 1.5162211614),
    ],
)
def test_kl3_roots_match_theory_table_and_scipy(delta: float, l_ref: float, u_ref: float) -> None:
    lower, upper = (eq.rhs for eq in kl3_step("Roots").statement.args)
    x = -math.exp(-1 - delta)
    assert value(lower, delta) == pytest.approx(-lambertw(x, 0).real, rel=1e-12)
    assert value(upper, delta) == pytest.approx(-lambertw(x, -1).real, rel=1e-12)
    # The table is rounded to 10 decimals: within half a unit of its last place.
    assert abs(value(lower, delta) - l_ref) < 5e-11
    assert abs(value(upper, delta) - u_ref) < 5e-11


def test_kl3_roots_at_delta_002_to_five_decimals() -> None:
    lower, upper = (eq.rhs for eq in kl3_step("Roots").statement.args)
    with mpmath.workdps(30):
        x = -mpmath.exp(-1 - mpmath.mpf("0.02"))
        assert round(value(lower, 0.02), 5) == round(float(-mpmath.lambertw(x, 0).real), 5) == 0.81311
        assert round(value(upper, 0.02), 5) == round(float(-mpmath.lambertw(x, -1).real), 5) == 1.21355


@settings(max_examples=25, deadline=None)
@given(st.floats(min_value=1e-6, max_value=5.0))
def test_kl3_roots_solve_the_equation_for_any_delta(delta: float) -> None:
    lower, upper = (eq.rhs for eq in kl3_step("Roots").statement.args)
    with mpmath.workdps(30):
        for root in (value(lower, delta), value(upper, delta)):
            r = mpmath.mpf(root)
            assert abs(r - 1 - mpmath.log(r) - delta) < 1e-12 * max(1.0, delta)
    assert value(lower, delta) < 1 < value(upper, delta)


def test_kl3_series_error_shrinks_like_s5() -> None:
    lower, upper = (eq.rhs for eq in kl3_step("Roots").statement.args)
    l_series, u_series = (eq.rhs.removeO() for eq in kl3_step("Series").statement.args)
    for delta in (1e-3, 1e-4, 1e-5):
        s = math.sqrt(2 * delta)
        assert abs(value(upper, delta) - float(u_series.subs(S, s))) < s**5
        assert abs(value(lower, delta) - float(l_series.subs(S, s))) < s**5


# ---- wrong statements fail ---------------------------------------------------------------------------


def assert_fails(step: Step) -> None:
    result = step.run_check()
    assert isinstance(result, CheckResult)
    assert not result.passed, f"wrong statement passed: {step.statement} ({result.detail})"


def test_wrong_series_coefficient_fails() -> None:
    step = kl3_step("Series")
    wrong_u = 1 + S + S**2 / 4 + S**3 / 36 - S**4 / 270 + sp.O(S**5)
    assert_fails(symbolic.with_statement(step, sp.Tuple(step.statement[0], sp.Eq(U_SYM, wrong_u))))


def test_swapped_series_sides_fail() -> None:
    step = kl3_step("Series")
    lower, upper = step.statement.args
    assert_fails(symbolic.with_statement(step, sp.Tuple(sp.Eq(L_SYM, upper.rhs), sp.Eq(U_SYM, lower.rhs))))


def test_w0_twice_fails_the_distinct_roots_check() -> None:
    step = kl3_step("Roots")
    both_w0 = step.statement.xreplace({sp.LambertW(X, -1): sp.LambertW(X)})
    assert_fails(dataclasses.replace(step, statement=both_w0))


def test_swapped_lambert_branches_fail_the_branch_order_check() -> None:
    """W_{-1} claimed as the lower root and W_0 as the upper: both solve D = δ and are distinct, so only the
    branch-order check (l < 1 < u at every sampled δ) catches it."""
    step = kl3_step("Roots")
    lower, upper = step.statement.args
    result = symbolic.with_statement(step, sp.Tuple(sp.Eq(L_SYM, upper.rhs), sp.Eq(U_SYM, lower.rhs))).run_check()
    assert not result.passed and "lower root < 1 < upper root at every δ: False" in result.detail


def test_coinciding_roots_fail_without_raising() -> None:
    step = kl3_step("Roots")
    upper = step.statement[1].rhs
    result = symbolic.with_statement(step, sp.Tuple(sp.Eq(L_SYM, upper), sp.Eq(U_SYM, upper))).run_check()
    assert not result.passed and "verifier raised" not in result.method
    assert "min distance between roots = 0.000e+00" in result.detail and result.kind == "numeric"


def test_check_kinds_are_labelled() -> None:
    kinds = {step.title: res.kind for step, res in zip(symbolic.derivation("kl3"), results("kl3"))}
    assert set(kinds.values()) == {"symbolic", "numeric"}
    assert CheckResult(True, "simplify(lhs - rhs) == 0", "").kind == "symbolic"
    assert CheckResult(True, "numeric set comparison on seeded (r, A) samples", "").kind == "numeric"


def test_missing_w0_root_fails() -> None:  # solve's root must be among the claimed ones
    step = kl3_step("Roots")
    upper = step.statement[1].rhs
    assert_fails(symbolic.with_statement(step, sp.Tuple(sp.Eq(L_SYM, upper), sp.Eq(U_SYM, upper))))


def test_wrong_equation_step_fails_and_right_one_passes() -> None:
    second = sp.Derivative(KL3, (R, 2))
    assert symbolic.make_equation_step("D''", "second derivative", second, 1 / R**2).run_check().passed
    assert_fails(symbolic.make_equation_step("D''", "second derivative", second, 1 / R))


def test_wrong_curvature_fails() -> None:
    step = symbolic.derivation("k2")[1]
    parts = list(step.statement.args)
    parts[2] = sp.Eq(parts[2].lhs, 2, evaluate=False)  # D''(1) = 1 for ½ log² r
    assert_fails(symbolic.with_statement(step, sp.Tuple(*parts)))


def test_negative_function_fails_non_negativity() -> None:
    step = kl3_step("Definition")
    assert_fails(symbolic.with_statement(step, sp.Ge(R - 2 - sp.log(R), 0, evaluate=False)))


def test_wrong_lambert_form_fails() -> None:
    step = kl3_step("Lambert")
    wrong = sp.Equivalent(sp.Eq(KL3, DELTA), sp.Eq(R * sp.exp(-R), sp.exp(-DELTA)))
    assert_fails(symbolic.with_statement(step, wrong))


def test_swapped_bracket_fails() -> None:
    step = kl3_step("Bracketing")
    lower, upper = (eq.rhs for eq in kl3_step("Roots").statement.args)
    wrong = sp.Tuple(sp.Lt(upper, 1, evaluate=False), sp.Lt(1, lower, evaluate=False))
    assert_fails(symbolic.with_statement(step, wrong))


def test_wrong_asymmetry_fails() -> None:
    step = kl3_step("Asymmetry")
    wrong = sp.Eq(step.statement.lhs, 2 * DELTA / 3 + sp.O(DELTA**2), evaluate=False)
    assert_fails(symbolic.with_statement(step, wrong))


@pytest.mark.parametrize("wrong_upper", [-sp.LambertW(X), sp.Rational(6, 5)])
def test_wrong_clip_bound_in_gradient_rule_fails(wrong_upper: sp.Expr) -> None:
    step = kl3_step("Gradient")
    upper = kl3_step("Roots").statement[1].rhs
    assert_fails(symbolic.with_statement(step, step.statement.xreplace({upper: wrong_upper})))


def test_wrong_derivative_in_gradient_rule_fails() -> None:
    step = kl3_step("Gradient")
    parts = list(step.statement.args)
    parts[0] = sp.Eq(parts[0].lhs, (R + 1) / R, evaluate=False)
    assert_fails(symbolic.with_statement(step, sp.Tuple(*parts)))


def test_unsupported_statement_fails_instead_of_raising() -> None:
    step = kl3_step("Minimum")
    assert_fails(symbolic.with_statement(step, sp.Tuple(sp.Symbol("x"))))


# ---- rendering and boundary errors -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["kl3", "log_ratio"])
def test_render_markdown_has_every_title_latex_and_verdict(name: str) -> None:
    steps = symbolic.derivation(name)
    text = symbolic.render(steps, "markdown", results=results(name))
    for i, step in enumerate(steps, start=1):
        assert f"## {i}. {step.title}" in text
        assert step.explanation in text and step.latex in text
    assert len(re.findall(r"check \((symbolic|numeric)\): PASSED \(", text)) == len(steps) and "FAILED" not in text


@pytest.mark.parametrize("name", ["kl3", "hellinger"])
def test_render_latex_has_every_title_and_latex(name: str) -> None:
    steps = symbolic.derivation(name)
    text = symbolic.render(steps, "latex", results=results(name))
    assert text.startswith(r"\begin{enumerate}") and text.rstrip().endswith(r"\end{enumerate}")
    assert text.count(r"\item") == len(steps)
    assert len(re.findall(r"Check \((symbolic|numeric)\): PASSED", text)) == len(steps)
    for step in steps:
        assert step.latex in text
        assert all(word in text for word in re.findall(r"[A-Za-z]{3,}", step.title))
    assert "_low" not in text.replace(r"\_low", "")  # underscores in text are escaped


def test_render_runs_checks_and_reports_failures() -> None:
    wrong = symbolic.make_equation_step("Wrong curvature", "deliberately wrong", sp.Derivative(KL3, (R, 2)), 1 / R)
    text = symbolic.render([kl3_step("Minimum"), wrong])
    assert "check (symbolic): PASSED" in text and "check (symbolic): FAILED" in text and "Wrong curvature" in text


def test_render_rejects_an_unknown_format() -> None:
    with pytest.raises(ValueError, match=r"fmt='html'.*markdown.*latex"):
        symbolic.render(symbolic.kl3_derivation(), "html")


def test_render_rejects_mismatched_results() -> None:
    with pytest.raises(ValueError, match="results"):
        symbolic.render(symbolic.kl3_derivation(), "markdown", results=results("kl3")[:2])


@pytest.mark.parametrize("bad", ["kl4", "KL3", "", 3])
def test_unknown_measure_name_raises(bad: object) -> None:
    allowed = "kl3, ratio, log_ratio, k2, kl3_reverse, chi2, hellinger"  # KL3, then the p-free measures
    with pytest.raises(ValueError, match=rf"measure_name=.*allowed: {allowed}$") as info:
        symbolic.derivation(bad)  # type: ignore[arg-type]
    assert repr(bad) in str(info.value)


def test_check_results_are_not_constant() -> None:  # guards against hard-coded verdicts
    details = {r.detail for name in symbolic.derivable_measures() for r in results(name)}
    assert len(details) > len(ALL_STEPS) // 2
    assert np.unique([r.method for name in symbolic.derivable_measures() for r in results(name)]).size > 4
