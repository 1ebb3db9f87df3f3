"""The proof page's numeric illustration: theory's symbolic roots and series, evaluated at one δ.

The closed forms and root series come from `divclip.theory.symbolic` (the same `clip_roots` / `root_series` the
derivation checks); they are evaluated with mpmath at 30 digits next to theory's float64 bounds, so the
reader sees the derivation and the numerical solver agree, and how good the truncated series is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mpmath
import sympy as sp

from divclip.theory import get_measure
from divclip.theory.symbolic import DELTA, S, clip_roots, measure_expression, root_series

DIGITS = 30


@dataclass(frozen=True)
class SymbolicRoots:
    """l_δ and u_δ in closed form and as series in t (t = s = √(2δ), or t = δ at a kink)."""

    name: str
    lower: sp.Expr
    upper: sp.Expr
    lower_series: sp.Expr
    upper_series: sp.Expr
    variable: sp.Symbol

    @property
    def series_variable_text(self) -> str:
        return "s = √(2δ)" if self.variable == S else "δ"

    @property
    def series_label(self) -> str:
        """How the numbers step names the series row: its own variable, never a generic t."""
        return "series to O(s⁵), s = √(2δ)" if self.variable == S else "series to O(δ⁵) in δ"


def symbolic_roots(name: str) -> SymbolicRoots:
    """SymPy's roots and series for a derivable measure (a second or two: callers cache it)."""
    expr = measure_expression(name)
    lower, upper = clip_roots(expr)
    l_series, u_series, var = root_series(expr)
    return SymbolicRoots(name, lower, upper, l_series, u_series, var)


def _at(expr: sp.Expr, subs: dict) -> mpmath.mpf:
    with mpmath.workdps(DIGITS):
        value = sp.N(expr.subs(subs), DIGITS)
        return mpmath.mpf(str(sp.re(value)))


def illustration_rows(roots: SymbolicRoots, delta: float) -> list[dict[str, str]]:
    """Rows (quantity, l_δ, u_δ) comparing closed form, theory's float64 bounds and the series at δ."""
    measure = get_measure(roots.name)
    lo, hi = measure.bounds(delta)
    d = sp.Float(repr(delta), DIGITS)
    l_exact, u_exact = _at(roots.lower, {DELTA: d}), _at(roots.upper, {DELTA: d})
    t = sp.sqrt(2 * d) if roots.variable == S else d
    l_series, u_series = _at(roots.lower_series, {roots.variable: t}), _at(roots.upper_series, {roots.variable: t})
    res_lo, res_hi = measure.value(lo) - delta, measure.value(hi) - delta

    def num(x, digits: int = 15) -> str:
        return (
            mpmath.nstr(x, digits, min_fixed=-math.inf, max_fixed=math.inf)
            if isinstance(x, mpmath.mpf)
            else f"{x:.15g}"
        )

    return [
        {"quantity": f"closed form (SymPy, {DIGITS} digits)", "l_δ": num(l_exact, DIGITS), "u_δ": num(u_exact, DIGITS)},
        {"quantity": "theory's float64 bound", "l_δ": num(lo), "u_δ": num(hi)},
        {
            "quantity": "|float64 − closed form|",
            "l_δ": f"{float(abs(mpmath.mpf(lo) - l_exact)):.2e}",
            "u_δ": f"{float(abs(mpmath.mpf(hi) - u_exact)):.2e}",
        },
        {"quantity": roots.series_label, "l_δ": num(l_series, 10), "u_δ": num(u_series, 10)},
        {"quantity": "D(bound) − δ", "l_δ": f"{res_lo:.2e}", "u_δ": f"{res_hi:.2e}"},
        {"quantity": "ε = distance from 1", "l_δ": f"{1 - lo:.6f}", "u_δ": f"{hi - 1:.6f}"},
    ]
