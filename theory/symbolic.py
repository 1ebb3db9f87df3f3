"""Symbolic derivations of divergence-clip bounds, each step checked by SymPy (docs/theory.md §1-3).

`kl3_derivation()` states the published KL3 facts by hand (Lambert-W bounds, their series, the 4δ/3
asymmetry, the gradient rule) and checks every one. `derivation(name)` builds the same kind of step
list for any measure from its formula alone: non-negativity, the minimum at r = 1, the roots of
D(r) = δ from `sympy.solve` (plus the Lambert-W branch solve leaves out), l < 1 < u, the root series,
the ε_high - ε_low asymmetry, and the gradient rule. Each step's check verifies the statement the
step stores, so a wrong statement fails (see `with_statement`, `make_equation_step`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import sympy as sp

from divclip.theory._symbolic_generic import (
    ADV,
    DELTA,
    L_SYM,
    TOL,
    U_SYM,
    CheckResult,
    R,
    S,
    Step,
    compose_at_one,
    evaluate,
    lower_upper_forms,
    make_step,
    solve_roots,
    statement_latex,
    vanishing_order,
    verify_asymptotic,
    verify_log_equivalence,
    verify_nonnegative,
    verify_relations,
    verify_root_series,
    verify_roots,
    with_statement,
)
from divclip.theory.formula import parse_formula
from divclip.theory.measures import MEASURES

__all__ = [
    "ADV",
    "DELTA",
    "R",
    "S",
    "CheckResult",
    "Step",
    "check_step",
    "clip_roots",
    "derivable_measures",
    "derivation",
    "generic_derivation",
    "kl3_derivation",
    "make_equation_step",
    "measure_expression",
    "render",
    "root_series",
    "with_statement",
]

SERIES_ORDER = 5  # roots are stated as polynomials + O(t^5)
_X = -sp.exp(-1 - DELTA)  # Lambert-W argument for KL3, in (-1/e, 0) for δ > 0


def derivable_measures() -> tuple[str, ...]:
    """Every registered measure that does not depend on p (run-time ones included): KL3 first, whose
    derivation also checks the published Lambert-W facts, then the others in registry order."""
    return ("kl3", *(name for name, m in MEASURES.items() if not m.p_dependent and name != "kl3"))


@functools.lru_cache(maxsize=64)
def _expression(code: str) -> sp.Expr:
    return parse_formula(code)[1].doit()  # the safe parser's exact-rational tree, evaluated


def measure_expression(measure_name: str) -> sp.Expr:
    """D(r) as a SymPy expression in `R`, from the measure's code formula (`Measure.code`) via the safe parser."""
    _require_measure(measure_name)
    return _expression(MEASURES[measure_name].code)


def _require_measure(measure_name: object) -> None:
    if not isinstance(measure_name, str) or measure_name not in derivable_measures():
        raise ValueError(f"measure_name={measure_name!r} is not derivable; allowed: {', '.join(derivable_measures())}")


def check_step(step: Step) -> CheckResult:
    return step.run_check()


def make_equation_step(title: str, explanation: str, lhs: sp.Expr, rhs: sp.Expr) -> Step:
    """A step claiming lhs = rhs, checked by simplify((lhs - rhs).doit()) == 0."""
    return make_step(title, explanation, sp.Eq(lhs, rhs, evaluate=False), verify_relations)


# ---- roots and series, derived from the formula --------------------------------------------------


def _add_lambert_branch(roots: list[sp.Expr]) -> list[sp.Expr]:
    """solve returns W_0 only; the same expression on the W_{-1} branch is the other root."""
    extra = [
        root.xreplace({w: sp.LambertW(w.args[0], -1)})
        for root in roots
        for w in root.atoms(sp.LambertW)
        if len(w.args) == 1
    ]
    return roots + [root for root in extra if root not in roots]


def clip_roots(measure: sp.Expr) -> tuple[sp.Expr, sp.Expr]:
    """(l_δ, u_δ): the roots of D(r) = δ below and above 1, told apart at δ = 0.05."""
    probe = sp.Float("0.05")
    lower, upper = [], []
    for root in _add_lambert_branch(solve_roots(measure)):
        value = evaluate(root, {DELTA: probe})
        if value > 0 and abs(evaluate(measure, {R: value, DELTA: probe}) - probe) < TOL:
            (lower if value < 1 else upper).append(root)
    if len(lower) != 1 or len(upper) != 1:
        raise RuntimeError(f"expected one root each side of 1 for {measure}, got {lower}, {upper}")
    return lower[0], upper[0]


def _series_coefficients(form: sp.Expr, below: bool, var: sp.Symbol, n: int) -> sp.Expr:
    """r = 1 + a_1 t + … + a_{n-1} t^{n-1} solving D(r) = δ(t) order by order (undetermined
    coefficients); a_1 takes the sign of the side, later a_k enter linearly."""
    m = vanishing_order(form)
    target = S**2 / 2 if var == S else DELTA
    known: list[sp.Expr] = []
    for k in range(1, n):
        a_k = sp.Dummy("a")
        poly = 1 + sum(c * var**j for j, c in enumerate(known + [a_k], start=1))
        equation = compose_at_one(form, poly, var, k + m)[k + m - 1] - target.coeff(var, k + m - 1)
        if k == 1:  # c·a_1^m = target coefficient: pick the root on this side of 1
            known.append(next(a for a in sp.solve(equation, a_k) if (a < 0) == below))
        else:
            slope = equation.coeff(a_k)
            known.append(sp.radsimp(-equation.subs(a_k, 0) / slope))
    return 1 + sum(c * var**j for j, c in enumerate(known, start=1))


def root_series(measure: sp.Expr, n: int = SERIES_ORDER) -> tuple[sp.Expr, sp.Expr, sp.Symbol]:
    """Polynomials (l, u) in t with error O(t^n); t = s = √(2δ) at a smooth minimum, t = δ at a kink."""
    low, high = lower_upper_forms(measure)
    var = S if vanishing_order(high) == 2 else DELTA
    return (_series_coefficients(low, True, var, n), _series_coefficients(high, False, var, n), var)


# ---- generic steps -------------------------------------------------------------------------------


def _nonnegativity_step(measure: sp.Expr, text: str) -> Step:
    return make_step(
        "Definition and non-negativity",
        f"D(r) = {text} is ≥ 0 for every r > 0: its minimum over critical points "
        "and the ends of (0, ∞) (each side of 1 separately for |·|) is 0.",
        sp.Ge(measure, 0, evaluate=False),
        verify_nonnegative,
    )


def _smooth_minimum(measure: sp.Expr) -> sp.Tuple:
    curvature = sp.simplify(sp.diff(measure, R, 2).subs(R, 1))
    second = sp.Subs(sp.Derivative(measure, (R, 2)), R, 1)
    return sp.Tuple(
        sp.Eq(sp.Subs(measure, R, 1), 0, evaluate=False),
        sp.Eq(sp.Subs(sp.Derivative(measure, R), R, 1), 0, evaluate=False),
        sp.Eq(second, curvature, evaluate=False),
        sp.Gt(second, 0, evaluate=False),
    )


def _kink_minimum(measure: sp.Expr) -> sp.Tuple:
    h = sp.Symbol("h", positive=True)
    right = sp.Limit((measure.subs(R, 1 + h) - measure.subs(R, 1)) / h, h, 0, "+")
    left = sp.Limit((measure.subs(R, 1 - h) - measure.subs(R, 1)) / (-h), h, 0, "+")
    return sp.Tuple(
        sp.Eq(sp.Subs(measure, R, 1), 0, evaluate=False),
        sp.Eq(right, right.doit(), evaluate=False),
        sp.Eq(left, left.doit(), evaluate=False),
    )


def _minimum_step(measure: sp.Expr) -> Step:
    if measure.atoms(sp.Abs):
        low, high = lower_upper_forms(measure)
        statement = _kink_minimum(measure)
        return make_step(
            "Minimum at r = 1 (a kink)",
            f"D(1) = 0 but D is not differentiable at 1, so work on each side: D = {high} "
            f"for r > 1 and {low} for r < 1, with one-sided slopes {statement[1].rhs} "
            f"and {statement[2].rhs}.",
            statement,
            verify_relations,
        )
    return make_step(
        "Minimum at r = 1",
        "D(1) = 0, D'(1) = 0 and D''(1) > 0: r = 1 is a strict local minimum.",
        _smooth_minimum(measure),
        verify_relations,
    )


def _roots_step(measure: sp.Expr, lower: sp.Expr, upper: sp.Expr) -> Step:
    lambert = (lower + upper).has(sp.LambertW)
    return make_step(
        "Roots of D(r) = δ",
        (
            "sympy.solve returns only the W_0 root; the W_{-1} root is added by hand"
            if lambert
            else "sympy.solve returns both roots"
        )
        + "; each solves D = δ at random δ.",
        sp.Tuple(sp.Eq(L_SYM, lower), sp.Eq(U_SYM, upper)),
        functools.partial(verify_roots, measure=measure),
    )


def _lower_root_survives(measure: sp.Expr, lower: sp.Expr, probe: sp.Float = sp.Float(2)) -> bool:
    """Whether the lower root still solves D = δ at a large δ (χ², Hellinger: only for δ < 1)."""
    value = evaluate(lower, {DELTA: probe})
    return bool(value > 0) and abs(evaluate(measure, {R: value, DELTA: probe}) - probe) < TOL


def _bracket_step(lower: sp.Expr, upper: sp.Expr, extra: tuple = (), why: str = "") -> Step:
    statement = sp.Tuple(*extra, sp.Lt(lower, 1, evaluate=False), sp.Lt(1, upper, evaluate=False))
    return make_step(
        "Bracketing l < 1 < u",
        why or "One root lies on each side of r = 1, so {D ≤ δ} = [l_δ, u_δ].",
        statement,
        verify_relations,
    )


def _series_step(measure: sp.Expr, lower: sp.Expr, upper: sp.Expr, var: sp.Symbol, why: str) -> Step:
    order = sp.O(var**SERIES_ORDER)
    statement = sp.Tuple(sp.Eq(L_SYM, lower + order), sp.Eq(U_SYM, upper + order))
    return make_step(
        f"Series of the roots in {'s = √(2δ)' if var == S else 'δ'}",
        why,
        statement,
        functools.partial(verify_root_series, measure=measure),
    )


def _asymmetry_rhs(lower: sp.Expr, upper: sp.Expr, l_series: sp.Expr, u_series: sp.Expr) -> sp.Expr:
    exact = sp.expand((upper - 1) - (1 - lower))  # polynomial only for closed-form algebraic roots
    if exact.is_polynomial(DELTA):
        return exact
    difference = sp.expand((u_series - 1) - (1 - l_series))
    difference = sp.expand(difference.subs(S, sp.sqrt(2 * DELTA)))
    coefficient, power = difference.as_leading_term(DELTA).as_coeff_exponent(DELTA)
    return coefficient * DELTA**power + sp.O(DELTA ** (power + 1))


def _asymmetry_step(
    lower: sp.Expr, upper: sp.Expr, l_series: sp.Expr, u_series: sp.Expr, rhs: sp.Expr | None = None
) -> Step:
    rhs = _asymmetry_rhs(lower, upper, l_series, u_series) if rhs is None else rhs
    latex = r"\varepsilon_{\mathrm{high}} - \varepsilon_{\mathrm{low}} = (u_\delta - 1) - (1 - l_\delta) = " + sp.latex(
        rhs
    )
    return make_step(
        "Asymmetry ε_high − ε_low",
        "The upper clip width minus the lower one; positive means the upper side is looser (a derived clip-higher).",
        sp.Eq(sp.Add(upper - 1, -(1 - lower), evaluate=False), rhs, evaluate=False),
        functools.partial(verify_asymptotic, l_series=l_series, u_series=u_series),
        latex,
    )


def _gradient_step(measure: sp.Expr, lower: sp.Expr, upper: sp.Expr, extra: tuple = ()) -> Step:
    low, high = lower_upper_forms(measure)
    monotone = (
        sp.Eq(
            sp.ConditionSet(R, sp.Lt(sp.diff(low, R), 0, evaluate=False), sp.Interval.open(0, 1)),
            sp.Interval.open(0, 1),
            evaluate=False,
        ),
        sp.Eq(
            sp.ConditionSet(R, sp.Gt(sp.diff(high, R), 0, evaluate=False), sp.Interval.open(1, sp.oo)),
            sp.Interval.open(1, sp.oo),
            evaluate=False,
        ),
    )
    # evaluate=False: SymPy 1.14 wrongly calls W_{-1}(x) non-real for x in (-1/e, 0) and refuses `r > u`.
    zero_gradient = sp.And(sp.Gt(measure, DELTA), sp.Gt((R - 1) * ADV, 0))
    ratio_clip = sp.Or(
        sp.And(ADV > 0, sp.Gt(R, upper, evaluate=False)), sp.And(ADV < 0, sp.Lt(R, lower, evaluate=False))
    )
    named = ratio_clip.xreplace({upper: U_SYM, lower: L_SYM})
    latex = (
        statement_latex(sp.Tuple(*extra, *monotone)) + r" \\ " + sp.latex(zero_gradient) + r" \iff " + sp.latex(named)
    )
    return make_step(
        "Gradient rule = ratio clipping on [l, u]",
        "A token's gradient is zero iff D(r) > δ and (r−1)A > 0; since D falls on (0, 1) "
        "and rises on (1, ∞), that is PPO clipping with bounds l_δ, u_δ.",
        sp.Tuple(*extra, *monotone, sp.Equivalent(zero_gradient, ratio_clip)),
        verify_relations,
        latex,
    )


def generic_derivation(measure: sp.Expr, text: str | None = None) -> list[Step]:
    """The step list for any D(r) with D(1) = 0, from its SymPy expression alone."""
    lower, upper = clip_roots(measure)
    l_series, u_series, var = root_series(measure)
    why = f"Solving D(r) = δ order by order in {'s = √(2δ)' if var == S else 'δ'}; checked by substituting back into D."
    bracket_why = (
        ""
        if _lower_root_survives(measure, lower)
        else (
            "One root lies on each side of r = 1, so {D ≤ δ} = [l_δ, u_δ], for δ < 1 (the checks draw "
            "δ ≤ 0.5): for δ ≥ 1 there is no lower root and the interval is (0, u_δ]."
        )
    )
    return [
        _nonnegativity_step(measure, text or str(measure)),
        _minimum_step(measure),
        _roots_step(measure, lower, upper),
        _bracket_step(lower, upper, why=bracket_why),
        _series_step(measure, l_series, u_series, var, why),
        _asymmetry_step(lower, upper, l_series, u_series),
        _gradient_step(measure, lower, upper),
    ]


# ---- KL3, stated by hand from docs/theory.md §2 -------------------------------------------------------


def _kl3_lambert_step(measure: sp.Expr) -> Step:
    statement = sp.Equivalent(sp.Eq(measure, DELTA), sp.Eq(R * sp.exp(-R), sp.exp(-1 - DELTA)))
    latex = r"r - 1 - \log r = \delta \iff r e^{-r} = e^{-(1+\delta)}"
    return make_step(
        "Lambert-W form of D = δ",
        "Exponentiating r - 1 - log r = δ gives r e^{-r} = e^{-(1+δ)}, the Lambert-W "
        "equation w e^w = x with w = -r and x = -e^{-1-δ}.",
        statement,
        verify_log_equivalence,
        latex,
    )


def _kl3_steps() -> list[Step]:
    measure = measure_expression("kl3")
    lower, upper = -sp.LambertW(_X), -sp.LambertW(_X, -1)
    l_series = 1 - S + S**2 / 3 - S**3 / 36 - S**4 / 270
    u_series = 1 + S + S**2 / 3 + S**3 / 36 - S**4 / 270
    minimum = sp.Tuple(
        sp.Eq(sp.Subs(measure, R, 1), 0, evaluate=False),
        sp.Eq(sp.Subs(sp.Derivative(measure, R), R, 1), 0, evaluate=False),
        sp.Eq(sp.Derivative(measure, (R, 2)), 1 / R**2, evaluate=False),
        sp.Gt(1 / R**2, 0, evaluate=False),
    )
    steps = [
        make_step(
            "Definition and non-negativity",
            "D(r) = r - 1 - log r ≥ 0 for r > 0, i.e. log r ≤ r - 1: the only critical point "
            "is r = 1 where D = 0, and D → ∞ at both ends.",
            sp.Ge(measure, 0, evaluate=False),
            verify_nonnegative,
        ),
        make_step(
            "Minimum at r = 1",
            "D(1) = 0, D'(1) = 0 and D''(r) = 1/r² > 0: D is strictly convex.",
            minimum,
            verify_relations,
        ),
        _kl3_lambert_step(measure),
        _roots_step(measure, lower, upper),
        _bracket_step(
            lower,
            upper,
            (sp.Lt(-sp.exp(-1), _X, evaluate=False), sp.Lt(_X, 0, evaluate=False)),
            "x = -e^{-1-δ} lies in (-1/e, 0), where W_0 ∈ (-1, 0) and W_{-1} < -1, "
            "so l_δ = -W_0(x) < 1 < -W_{-1}(x) = u_δ.",
        ),
        _series_step(
            measure,
            l_series,
            u_series,
            S,
            "With s = √(2δ): r = 1 ± s + s²/3 ± s³/36 − s⁴/270 + O(s⁵), checked by "
            "D(series) − s²/2 = O(s⁶) for both signs.",
        ),
    ]
    derived_l, derived_u, _ = root_series(measure)
    return steps + [
        _asymmetry_step(lower, upper, derived_l, derived_u, 4 * DELTA / 3 + sp.O(DELTA**2)),
        _gradient_step(measure, lower, upper, (sp.Eq(sp.Derivative(measure, R), (R - 1) / R, evaluate=False),)),
    ]


@functools.lru_cache(maxsize=64)
def _cached_derivation(measure_name: str, code: str, text: str) -> tuple[Step, ...]:
    if measure_name == "kl3":
        return tuple(_kl3_steps())
    return tuple(generic_derivation(_expression(code), text))


def kl3_derivation() -> list[Step]:
    return derivation("kl3")


def derivation(measure_name: str) -> list[Step]:
    """The checked steps for a registered p-independent measure, derived from its code formula."""
    _require_measure(measure_name)
    m = MEASURES[measure_name]
    return list(_cached_derivation(measure_name, m.code, m.text or m.code))


# ---- rendering -----------------------------------------------------------------------------------

_TEXT_TO_LATEX = {
    "δ": r"$\delta$",
    "ε": r"$\varepsilon$",
    "≤": r"$\le$",
    "≥": r"$\ge$",
    "∞": r"$\infty$",
    "±": r"$\pm$",
    "→": r"$\to$",
    "∈": r"$\in$",
    "√": r"$\surd$",
    "−": "-",
    "‖": r"$\|$",
    "²": r"$^2$",
    "⁴": r"$^4$",
    "⁵": r"$^5$",
    "⁶": r"$^6$",
    "³": r"$^3$",
    "π": r"$\pi$",
    "θ": r"$\theta$",
    "⇔": r"$\iff$",
}


def _latex_text(text: str) -> str:
    escaped = "".join(
        {
            "\\": r"\textbackslash{}",
            "&": r"\&",
            "%": r"\%",
            "$": r"\$",
            "#": r"\#",
            "_": r"\_",
            "{": r"\{",
            "}": r"\}",
            "~": r"\~{}",
            "^": r"\^{}",
        }.get(c, c)
        for c in text
    )
    return "".join(_TEXT_TO_LATEX.get(c, c) for c in escaped)


def _verdict(result: CheckResult) -> str:
    return "PASSED" if result.passed else "FAILED"


def _markdown(steps: Sequence[Step], results: Sequence[CheckResult]) -> str:
    sections = [
        f"## {i}. {step.title}\n\n{step.explanation}\n\n"
        f"$$\n\\begin{{gathered}}{step.latex}\\end{{gathered}}\n$$\n\n"
        f"check ({res.kind}): {_verdict(res)} ({res.method}) {res.detail}\n"
        for i, (step, res) in enumerate(zip(steps, results), start=1)
    ]
    return "\n".join(sections)


def _latex(steps: Sequence[Step], results: Sequence[CheckResult]) -> str:
    items = [
        f"  \\item \\textbf{{{_latex_text(step.title)}.}} {_latex_text(step.explanation)}\n"
        f"  \\begin{{gather*}}{step.latex}\\end{{gather*}}\n"
        f"  Check ({res.kind}): {_verdict(res)} ({_latex_text(res.method)}): {_latex_text(res.detail)}\n"
        for step, res in zip(steps, results)
    ]
    return "\\begin{enumerate}\n" + "".join(items) + "\\end{enumerate}\n"


def render(steps: Sequence[Step], fmt: str = "markdown", results: Sequence[CheckResult] | None = None) -> str:
    """Steps with their checks as Markdown ($$…$$ math) or a LaTeX enumerate body.

    `results` reuses check results already computed (one per step); otherwise every check runs."""
    renderers = {"markdown": _markdown, "latex": _latex}
    if fmt not in renderers:
        raise ValueError(f"fmt={fmt!r} is not a render format; allowed: {', '.join(renderers)}")
    if results is None:
        results = [step.run_check() for step in steps]
    if len(results) != len(steps):
        raise ValueError(f"results has {len(results)} entries for {len(steps)} steps")
    return renderers[fmt](list(steps), list(results))
