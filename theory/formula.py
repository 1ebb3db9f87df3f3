"""User-defined measures from a formula string, parsed with a whitelist and never evaluated as code.

The text is parsed by `ast.parse(mode="eval")` into a syntax tree (parsing runs no code), every node is
checked against a whitelist (numbers, the names `r` and `p`, + - * / ** and the functions log, exp, sqrt,
abs), and the tree is compiled into a numpy closure and a SymPy expression built node by node with
`evaluate=False` (no `sympify` on raw text, and no huge integer powers evaluated eagerly). Every constant part
(no r, no p) must be a finite float64 and every constant exponent at most MAX_EXPONENT in magnitude, so a power
tower like 9**9**9 (hundreds of millions of digits) or exp(exp(exp(100))) is refused at parse time: SymPy would
otherwise compute it exactly when printing. The LaTeX step runs under a deadline as a last guard.

`measure_from_formula` then checks the two properties the clipping framework needs: D(1) = 0, and D
decreasing on (r_min, 1) and increasing on (1, r_max), on a grid (and for each probe p if `p` appears).
"""

from __future__ import annotations

import ast
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from divclip.theory.bounds import bisect_bounds
from divclip.theory.measures import Measure

MAX_FORMULA_CHARS = 300
MAX_NODES = 200
MAX_EXPONENT = 100
"""Largest magnitude of a constant exponent (r**100 is already far outside any clip's use)."""
SYMBOLIC_DEADLINE_S = 5.0
"""Longest the LaTeX step may take before the formula is refused."""
R_MIN, R_MAX = 1e-4, 1e4
_PROBE_P = (0.01, 0.1, 0.5, 0.9, 0.99)

_FUNCS: dict[str, tuple[Callable, Callable]] = {
    "log": (np.log, sp.log),
    "exp": (np.exp, sp.exp),
    "sqrt": (np.sqrt, sp.sqrt),
    "abs": (np.abs, sp.Abs),
}
_BINOPS = {
    ast.Add: (np.add, lambda a, b: sp.Add(a, b, evaluate=False)),
    ast.Sub: (np.subtract, lambda a, b: sp.Add(a, sp.Mul(-1, b, evaluate=False), evaluate=False)),
    ast.Mult: (np.multiply, lambda a, b: sp.Mul(a, b, evaluate=False)),
    ast.Div: (np.divide, lambda a, b: sp.Mul(a, sp.Pow(b, -1, evaluate=False), evaluate=False)),
    ast.Pow: (np.power, lambda a, b: sp.Pow(a, b, evaluate=False)),
}
_SYMBOLS = {"r": sp.Symbol("r", positive=True), "p": sp.Symbol("p", positive=True)}


def _refuse(formula: str, why: str):
    raise ValueError(
        f"formula {formula!r} is not allowed: {why}. Allowed: numbers, r, p, + - * / ** (or ^), "
        f"and the functions {', '.join(sorted(_FUNCS))}"
    )


def _constant_value(node: ast.AST, f: Callable, formula: str) -> float | None:
    """The float64 value of a part without r or p (None for parts with them); refuses a non-finite one."""
    if any(isinstance(n, ast.Name) and n.id in _SYMBOLS for n in ast.walk(node)):
        return None
    with np.errstate(all="ignore"):
        v = float(np.asarray(f(1.0, 0.5), dtype=np.float64))
    if not math.isfinite(v):
        _refuse(formula, f"its constant part {ast.unparse(node)!r} is not a finite number (it evaluates to {v!r})")
    return v


def _compile(node: ast.AST, formula: str):
    """(numpy closure f(r, p), sympy expr, uses_p) for one whitelisted node."""
    out = _compile_node(node, formula)
    _constant_value(node, out[0], formula)
    return out


def _compile_node(node: ast.AST, formula: str):
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        v = float(node.value)
        if not math.isfinite(v):
            _refuse(formula, f"the number {ast.unparse(node)!r} is not finite")
        # Exact rationals: 0.5 is 1/2 (its shortest decimal), so a code formula and its SymPy form agree exactly.
        s = sp.Integer(node.value) if isinstance(node.value, int) and abs(node.value) < 10**6 else sp.Rational(repr(v))
        return (lambda r, p: v), s, False
    if isinstance(node, ast.Name):
        if node.id not in _SYMBOLS:
            _refuse(formula, f"unknown name {node.id!r}")
        if node.id == "r":
            return (lambda r, p: r), _SYMBOLS["r"], False
        return (lambda r, p: p), _SYMBOLS["p"], True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        f, s, up = _compile(node.operand, formula)
        if isinstance(node.op, ast.USub):
            return (lambda r, p: -f(r, p)), sp.Mul(-1, s, evaluate=False), up
        return f, s, up
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        fa, sa, ua = _compile(node.left, formula)
        fb, sb, ub = _compile(node.right, formula)
        if isinstance(node.op, ast.Pow):
            e = _constant_value(node.right, fb, formula)
            if e is not None and abs(e) > MAX_EXPONENT:
                _refuse(formula, f"the exponent {ast.unparse(node.right)!r} = {e:.6g} is too large: constant exponents "
                        f"are limited to ±{MAX_EXPONENT} (a power tower like 9**9**9 has hundreds of millions of "
                        "digits)")
        np_op, sp_op = _BINOPS[type(node.op)]
        return (lambda r, p: np_op(fa(r, p), fb(r, p))), sp_op(sa, sb), ua or ub
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS:
            _refuse(formula, f"only calls to {sorted(_FUNCS)} are allowed, found {ast.unparse(node.func)!r}")
        if len(node.args) != 1 or node.keywords:
            _refuse(formula, f"{node.func.id}() takes exactly one argument")
        f, s, up = _compile(node.args[0], formula)
        np_fn, sp_fn = _FUNCS[node.func.id]
        return (lambda r, p: np_fn(f(r, p))), sp_fn(s, evaluate=False), up
    _refuse(formula, f"{type(node).__name__} expressions are not allowed ({ast.unparse(node)!r})")


def parse_formula(formula: str):
    """Parse `formula` into (numpy closure, SymPy expression, uses_p); ValueError on anything else."""
    if not isinstance(formula, str):
        raise ValueError(f"formula must be a string, got {formula!r}")
    text = formula.strip()
    if not text:
        raise ValueError("formula must not be empty; example: (sqrt(r) - 1)**2")
    if len(text) > MAX_FORMULA_CHARS:
        raise ValueError(f"formula must be at most {MAX_FORMULA_CHARS} characters, got {len(text)}")
    try:
        tree = ast.parse(text.replace("^", "**"), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"formula {formula!r} is not a valid expression: {exc.msg}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise ValueError(f"formula {formula!r} is too long: at most {MAX_NODES} syntax nodes")
    return _compile(tree.body, formula)


@dataclass(frozen=True)
class CustomMeasure(Measure):
    """A measure from a user formula; bounds by bisection in log r on [R_MIN, R_MAX]."""

    fn: Callable = field(default=None, repr=False, compare=False)
    expr: sp.Expr = field(default=None, compare=False)

    def _value(self, r, p, xp):
        if xp is not np:
            raise ValueError(f"custom measure {self.name!r} is evaluated in numpy only")
        with np.errstate(all="ignore"):
            out = self.fn(np.asarray(r, dtype=np.float64), p)
        return np.broadcast_to(np.asarray(out, dtype=np.float64), np.broadcast(r, p if p is not None else 0).shape)

    def _bounds(self, d, p):
        d_max = float(np.min(np.minimum(self._value(np.float64(R_MIN), p, np), self._value(np.float64(R_MAX), p, np))))
        if np.any(d >= d_max):
            raise ValueError(
                f"delta must be below {d_max:.6g}, the smallest of D(r_min={R_MIN:g}) and D(r_max={R_MAX:g}) "
                f"for formula {self.code!r}; got {np.max(d)!r}"
            )
        return bisect_bounds(lambda r, pp: self._value(r, pp, np), d, p, R_MIN, R_MAX)


def with_deadline(fn: Callable, arg, *, what: str, seconds: float | None = None):
    """fn(arg), or a ValueError when it takes longer than `seconds` (default SYMBOLIC_DEADLINE_S).

    SymPy cannot be interrupted, so the call runs in a daemon thread that is abandoned on timeout: the caller
    (a CLI, a page visit) gets its answer on time. The parse-time limits keep known runaways from getting here."""
    seconds = SYMBOLIC_DEADLINE_S if seconds is None else seconds
    box: dict = {}

    def run():
        try:
            box["value"] = fn(arg)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True, name="divclip-symbolic")
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise ValueError(f"{what} took longer than {seconds:g} s: refused (simplify the formula)")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _check_shape(name: str, fn: Callable, uses_p: bool):
    """D(1) = 0 and D strictly decreasing below 1, increasing above, on a log grid (and each probe p)."""
    left = np.geomspace(R_MIN, 1.0, 400)
    right = np.geomspace(1.0, R_MAX, 400)
    for p in (_PROBE_P if uses_p else (None,)):
        at = "" if p is None else f" at p={p}"
        with np.errstate(all="ignore"):
            d1 = float(np.asarray(fn(np.float64(1.0), p), dtype=np.float64))
            dl = np.broadcast_to(np.asarray(fn(left, p), dtype=np.float64), left.shape)
            dr = np.broadcast_to(np.asarray(fn(right, p), dtype=np.float64), right.shape)
        if not (math.isfinite(d1) and abs(d1) <= 1e-12):
            raise ValueError(f"formula {name!r} must satisfy D(1) = 0{at}, got D(1) = {d1!r}")
        if not (np.all(np.isfinite(dl[:-1])) and np.all(np.isfinite(dr[1:]))):
            raise ValueError(f"formula {name!r} is not finite on r in [{R_MIN:g}, {R_MAX:g}]{at}")
        if not (np.all(np.diff(dl) < 0) and np.all(np.diff(dr) > 0)):
            raise ValueError(
                f"formula {name!r} must decrease on ({R_MIN:g}, 1) and increase on (1, {R_MAX:g}){at} "
                f"so that D <= δ is an interval around r = 1"
            )


def measure_from_formula(formula: str, name: str | None = None) -> CustomMeasure:
    """A `Measure` from a formula in `r` (and optionally `p`), e.g. "(sqrt(r) - 1)**2".

    >>> m = measure_from_formula("(sqrt(r) - 1)**2")
    >>> round(m.bounds(0.04)[1], 6)
    1.44
    """
    fn, expr, uses_p = parse_formula(formula)
    _check_shape(formula, fn, uses_p)
    return CustomMeasure(
        name=name or f"custom: {formula.strip()}",
        latex=with_deadline(sp.latex, expr, what=f"rendering formula {formula.strip()!r} as LaTeX"),
        code=formula.strip(),
        p_dependent=uses_p,
        source="user formula",
        description="User-defined measure; bounds by bisection in log r.",
        fn=fn,
        expr=expr,
    )
