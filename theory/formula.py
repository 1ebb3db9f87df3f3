"""User-defined measures from a formula string, parsed with a whitelist and never evaluated as code.

The text is parsed by `ast.parse(mode="eval")` into a syntax tree (parsing runs no code), every node is
checked against a whitelist (numbers, the names `r` and `p`, + - * / ** and the functions log, exp, sqrt,
abs), and the tree is compiled into a numpy closure and a SymPy expression built node by node with
`evaluate=False` (no `sympify` on raw text, and no huge integer powers evaluated eagerly). Every constant part
(no r, no p) must be a finite float64 and every constant exponent at most MAX_EXPONENT in magnitude, so a power
tower like 9**9**9 (hundreds of millions of digits) or exp(exp(exp(100))) is refused at parse time: SymPy would
otherwise compute it exactly when printing. The LaTeX step runs under a deadline as a last guard.

`measure_from_formula` then proves the shape the clipping framework needs, so that for every δ the set
{r in [R_MIN, R_MAX] : D(r) <= δ} is one interval containing 1 (for every p in [P_MIN, 1] if `p` appears):
|D(1)| <= 1e-12, D′ < 0 on [R_MIN, 1) and D′ > 0 on (1, R_MAX]. D′ is SymPy's exact derivative; its sign is
proven by mpmath interval arithmetic (outward-rounded) on boxes bisected adaptively over r and p, and next to
r = 1 (where D′(1) = 0) by Taylor's theorem: when D′, ..., D^(k)(1) vanish exactly, the sign of D^(k+1) on the
box decides. A box whose midpoint has the wrong sign is a witness: the formula is refused naming that r (and p).
A proof that runs out of its budget or of precision refuses too: nothing unproven is accepted. The budget
counts work, not seconds (PROOF_BUDGET_BOXES interval boxes over both sides), so a formula gets the same
verdict on an idle and on a loaded machine. D(1) is decided symbolically where SymPy evaluates it to a number
(exactly 0 for p*(r-1)**2 + (1-p)*log(r)**2), so |D(1)| <= 1e-12 holds at the boundary itself.
A 400-point grid check runs first to refuse the obvious cases quickly; a derivative with the wrong sign on a
whole side (log(r), -(r-1)**2) is refused with that reason.
"""

from __future__ import annotations

import ast
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import sympy as sp
from mpmath import iv

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


def _short_literal(node: ast.Constant) -> str:
    digits = len(str(node.value)) if isinstance(node.value, int) and node.value.bit_length() < 10_000 else None
    text = ast.unparse(node)
    return f"{text[:20]}... ({digits} digits)" if len(text) > 24 else text


def _compile(node: ast.AST, formula: str):
    """(numpy closure f(r, p), sympy expr, uses_p) for one whitelisted node."""
    out = _compile_node(node, formula)
    _constant_value(node, out[0], formula)
    return out


def _compile_node(node: ast.AST, formula: str):
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        try:
            v = float(node.value)
        except OverflowError:  # an int literal beyond float64 (0x followed by 290 f)
            _refuse(formula, f"the number {_short_literal(node)} is too large for a float64 (at most ~1.8e308)")
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
                _refuse(
                    formula,
                    f"the exponent {ast.unparse(node.right)!r} = {e:.6g} is too large: constant exponents "
                    f"are limited to ±{MAX_EXPONENT} (a power tower like 9**9**9 has hundreds of millions of "
                    "digits)",
                )
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
        if p is not None and np.any(p < P_MIN):
            raise ValueError(
                f"p must be at least {P_MIN:g} for the custom measure {self.name!r} (its shape is "
                f"proven for p in [{P_MIN:g}, 1]); got {float(np.min(p))!r}"
            )
        d_max = float(np.min(np.minimum(self._value(np.float64(R_MIN), p, np), self._value(np.float64(R_MAX), p, np))))
        if np.any(d >= d_max):
            raise ValueError(
                f"delta must be below {d_max:.6g}, the smallest of D(r_min={R_MIN:g}) and D(r_max={R_MAX:g}) "
                f"for formula {self.code!r}; got {float(np.max(d))!r}"
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
    for p in _PROBE_P if uses_p else (None,):
        at = "" if p is None else f" at p={p}"
        with np.errstate(all="ignore"):
            d1 = float(np.asarray(fn(np.float64(1.0), p), dtype=np.float64))
            dl = np.broadcast_to(np.asarray(fn(left, p), dtype=np.float64), left.shape)
            dr = np.broadcast_to(np.asarray(fn(right, p), dtype=np.float64), right.shape)
        if not (math.isfinite(d1) and abs(d1) <= 1e-12):
            raise ValueError(f"formula {name!r} must satisfy D(1) = 0{at}, got D(1) = {d1!r}")
        if not (np.all(np.isfinite(dl[:-1])) and np.all(np.isfinite(dr[1:]))):
            raise ValueError(f"formula {name!r} is not finite on r in [{R_MIN:g}, {R_MAX:g}]{at}")
        bad_l, bad_r = np.flatnonzero(~(np.diff(dl) < 0)), np.flatnonzero(~(np.diff(dr) > 0))
        whole = [
            side
            for side, bad, n in (
                (f"({R_MIN:g}, 1), where D′ must be < 0", bad_l, dl.size - 1),
                (f"(1, {R_MAX:g}), where D′ must be > 0", bad_r, dr.size - 1),
            )
            if bad.size == n
        ]
        if whole:
            raise ValueError(
                f"formula {name!r} has the wrong slope on the whole of {' and on the whole of '.join(whole)}{at}: "
                "a clip measure must fall to D(1) = 0 and rise again, so that D <= δ is an interval around r = 1"
            )
        if bad_l.size or bad_r.size:
            r_bad = left[bad_l[0] + 1] if bad_l.size else right[bad_r[0]]
            raise ValueError(
                f"formula {name!r} must decrease on ({R_MIN:g}, 1) and increase on (1, {R_MAX:g}){at} "
                f"so that D <= δ is an interval around r = 1, but D′ changes sign near r = {r_bad:.6g}"
            )


# -- the shape proof --------------------------------------------------------------------------------------------

P_MIN = 1e-300
"""Smallest p the shape proof covers for a p-dependent formula (p in [P_MIN, 1]); smaller p are refused."""
PROOF_BUDGET_BOXES = 20_000
"""Interval boxes the shape proof may evaluate (both sides together) before the formula is refused as not
provably interval-shaped. Work, not time: every formula divclip's tests accept needs at most a few hundred
(p*(r-1)**2/(r+1): 546); 20 000 take about 3 s on one idle core."""
PROOF_SAFETY_S = 60.0
"""Wall-clock guard around the whole proof, far above what the box budget allows on an idle machine: it only
stops a single pathological interval evaluation; the verdict is the box budget's."""
MAX_FACTOR_DEGREE = 24
"""D′ is put over one factored fraction only when its numerator and denominator have total degree at most this
(a deterministic guard instead of a time limit: factor() is fast at such degrees)."""
_MAX_TAYLOR = 3
_TAYLOR_S = 1.0 / 16
"""A box [0, b] next to r = 1 is split in s alone until b <= _TAYLOR_S, then in s and p alternately."""
_SIGN_FUNCS = (sp.sign, sp.DiracDelta, sp.Heaviside, sp.Derivative)
"""Atoms whose value at a point is not their one-sided limit (so a zero there proves nothing)."""
_S = sp.Symbol("s", positive=True)


class _NotProven(ValueError):
    """The shape proof ran out of budget or precision (no witness of a wrong sign was found)."""


class _Unprovable(Exception):
    """A node the interval evaluator does not know (the proof refuses rather than guesses)."""


def _is_zero(expr) -> bool:
    """True only when `expr` (in p, no sign-like atoms) is shown to be 0 for every p in [P_MIN, 1]: either SymPy
    evaluates it to 0, or its interval enclosure is exactly [0, 0] (e.g. log(1), p*(1 - 1)). No simplify():
    it can take minutes on exp(-1000000*(r - 3/2)**2)."""
    if expr == 0:
        return True
    if expr.has(*_SIGN_FUNCS):
        return False
    try:
        v = _IV().compile(expr)((iv.mpf(0), iv.mpf([P_MIN, 1]), False))
        return bool(v.a == 0 and v.b == 0)
    except (_Unprovable, ValueError, ZeroDivisionError, OverflowError, TypeError):
        return False


def _iv_const(x):
    """An interval enclosing the constant x: exact for rationals, else its 40-digit value widened by 1e-30
    relative and 1e-300 absolute."""
    if x.is_Rational:  # exact (outward-rounded where p/q is not a binary float)
        return iv.mpf(int(x.p)) / iv.mpf(int(x.q))
    v = sp.Float(x.evalf(40), 40)
    pad = abs(v) * sp.Float("1e-30") + sp.Float("1e-300")
    return iv.mpf([str(sp.Float(v - pad, 40)), str(sp.Float(v + pad, 40))])


class _IV:
    """Compiles a SymPy expression in s (and p) into an interval function of a box (s-interval, p-interval,
    open_at_0). `open_at_0` means the box is (0, b]: a sign(g) with g(0) = 0 is then decided by the sign of g′."""

    def __init__(self):
        self._cache = {}

    def compile(self, e):
        if e in self._cache:
            return self._cache[e]
        f = self._build(e)
        self._cache[e] = f
        return f

    def _sign_of(self, g):
        fg = self.compile(g)
        g0_zero = None
        fdg = None

        def sgn(box):
            nonlocal g0_zero, fdg
            v = fg(box)
            if v.a > 0:
                return 1
            if v.b < 0:
                return -1
            if box[2]:
                if g0_zero is None:
                    g0_zero = _is_zero(g.subs(_S, 0))
                    fdg = self.compile(sp.diff(g, _S)) if g0_zero else None
                if fdg is not None:
                    d = fdg(box)
                    if d.a > 0:
                        return 1
                    if d.b < 0:
                        return -1
            return 0

        return sgn

    def _build(self, e):
        if e.is_number:
            c = _iv_const(e)
            return lambda box: c
        if e == _S:
            return lambda box: box[0]
        if e == _SYMBOLS["p"]:
            return lambda box: box[1]
        args = None if isinstance(e, _SIGN_FUNCS) else [self.compile(a) for a in e.args]
        if isinstance(e, sp.Add):

            def add(box):
                out = args[0](box)
                for a in args[1:]:
                    out = out + a(box)
                return out

            return add
        if isinstance(e, sp.Mul):

            def mul(box):
                out = args[0](box)
                for a in args[1:]:
                    out = out * a(box)
                return out

            return mul
        if isinstance(e, sp.Pow):
            base, ex = args
            k = e.args[1]
            if k.is_Integer:
                n = int(k)
                return lambda box: base(box) ** n
            if k == sp.Rational(1, 2):
                return lambda box: iv.sqrt(base(box))
            return lambda box: iv.exp(ex(box) * iv.log(base(box)))
        if isinstance(e, sp.exp):
            return lambda box: iv.exp(args[0](box))
        if isinstance(e, sp.log):
            return lambda box: iv.log(args[0](box))
        if isinstance(e, sp.Abs):
            return lambda box: abs(args[0](box))
        if isinstance(e, sp.sign):
            sg = self._sign_of(e.args[0])
            return lambda box: (lambda k: iv.mpf(k) if k else iv.mpf([-1, 1]))(sg(box))
        if isinstance(e, (sp.DiracDelta, sp.Heaviside)) or (
            isinstance(e, sp.Derivative) and isinstance(e.expr, sp.sign)
        ):
            inner = e.args[0] if not isinstance(e, sp.Derivative) else e.expr.args[0]
            sg = self._sign_of(inner)
            if isinstance(e, sp.Heaviside):
                return lambda box: (lambda k: iv.mpf(1 if k > 0 else 0) if k else iv.mpf([0, 1]))(sg(box))
            return lambda box: iv.mpf(0) if sg(box) else iv.mpf(["-inf", "inf"])
        raise _Unprovable(f"{type(e).__name__}")


def _split(a: float, b: float) -> float:
    if a > 0 and b > 4 * a:
        return math.sqrt(a) * math.sqrt(b)
    return a + (b - a) / 2


class _Budget:
    """The boxes left to the shape proof (shared by both sides)."""

    def __init__(self, boxes: int):
        self.left = boxes


def _prove_side(name: str, forms: list, sigma: int, s_max: float, uses_p: bool, budget: _Budget, ivc: _IV):
    """Prove sigma·f(s, p) > 0 for all s in (0, s_max] (and p in [P_MIN, 1]), where f(s) = D′(1 ∓ s).

    Boxes are bisected (alternately in s and p); a box [0, b] touching r = 1 is proven with Taylor's theorem:
    when f(0) = … = f^(k-1)(0) = 0 symbolically, f(s) = s^k/k!·f^(k)(ξ), so the sign of f^(k) on the box suffices.
    A box whose midpoint has the wrong sign is a witness (ValueError naming r, p); running out of budget or of
    precision refuses too, naming where the proof got stuck."""
    side = "left" if sigma < 0 else "right"
    comp = []  # per form of D′: f, f′, ... while the lower derivatives vanish at s = 0
    for form in forms:
        derivs = [form]
        comp.append((0, ivc.compile(form)))
        for k in range(1, _MAX_TAYLOR + 1):
            if not _is_zero(derivs[-1].subs(_S, 0)):
                break
            derivs.append(sp.diff(derivs[-1], _S))
            comp.append((k, ivc.compile(derivs[-1])))
    first = comp[0][1]

    def positive(fn, box) -> bool:
        try:
            v = fn(box) * sigma
            return bool(v.a > 0)
        except (ValueError, ZeroDivisionError, OverflowError, TypeError):
            return False

    def where(s: float, p: float | None) -> str:
        r = 1 - s if sigma < 0 else 1 + s
        return f"r = {r:.9g}" + ("" if p is None else f", p = {p:.6g}")

    stack = [(0.0, s_max, P_MIN, 1.0, 0)]
    boxes = 0
    while stack:
        a, b, pa, pb, depth = stack.pop()
        boxes += 1
        pmid = _split(pa, pb) if uses_p else None
        budget.left -= 1
        if budget.left < 0:
            raise _NotProven(
                f"formula {name!r}: could not prove within {PROOF_BUDGET_BOXES} interval boxes that D must decrease on "
                f"({R_MIN:g}, 1) and increase on (1, {R_MAX:g}) (stuck near {where(b, pmid)}); refused, since "
                "D <= δ might not be one interval around r = 1"
            )
        box = (iv.mpf([a, b]), iv.mpf([pa, pb]), a == 0)
        if any(positive(fn, box) for k, fn in comp if k == 0 or a == 0):
            continue
        sm = _split(a, b)
        pm = pmid if uses_p else 0.5
        try:
            v = first((iv.mpf(sm), iv.mpf(pm), False)) * sigma
            bad = v.b < 0
            val = float(v.mid) * sigma
        except (ValueError, ZeroDivisionError, OverflowError, TypeError):
            bad, val = True, float("nan")
        if bad:
            want = "< 0 (D must decrease left of 1)" if sigma < 0 else "> 0 (D must increase right of 1)"
            raise ValueError(
                f"formula {name!r} must decrease on ({R_MIN:g}, 1) and increase on (1, {R_MAX:g}) so that D <= δ "
                f"is one interval around r = 1, but D′ changes sign near {where(sm, pm if uses_p else None)}: "
                f"D′ = {val:.6g} there, where D′ {want}"
            )
        # Near r = 1 (a box [0, b]) the Taylor bound needs a short s-interval first: splitting p there too would
        # double the [0, b] boxes at every other level (2^18 of them before s gets small from s_max = 1e4).
        split_p = uses_p and depth % 2 == 1 and pb - pa > 1e-12 * pb and (a > 0 or b <= _TAYLOR_S)
        if not split_p and (b - a <= 1e-13 * b or depth > 400):
            raise _NotProven(
                f"formula {name!r}: could not prove that D must decrease on ({R_MIN:g}, 1) and increase on "
                f"(1, {R_MAX:g}): the {side} side is unresolved near {where(b, pmid)} (D′ too close to 0 for "
                "interval arithmetic); refused, since D <= δ might not be one interval around r = 1"
            )
        if split_p:
            stack += [(a, b, pa, pm, depth + 1), (a, b, pm, pb, depth + 1)]
        else:
            stack += [(a, sm, pa, pb, depth + 1), (sm, b, pa, pb, depth + 1)]
    return boxes


def _tiny(e) -> bool:
    """|e| <= 1e-12 for every p in [P_MIN, 1], by interval arithmetic (e.g. exp(-250000)/2)."""
    try:
        v = abs(_IV().compile(e.subs(_SYMBOLS["r"], 1))((iv.mpf(0), iv.mpf([P_MIN, 1]), False)))
        return bool(v.b <= 1e-12)
    except (_Unprovable, ValueError, ZeroDivisionError, OverflowError, TypeError):
        return False


def _exactly_tiny(e) -> bool:
    """|D(1)| <= 1e-12 decided exactly, where SymPy evaluates D(1) (built unevaluated) to a rational number."""
    try:
        v = e.subs(_SYMBOLS["r"], 1).doit()
    except (ValueError, TypeError, ZeroDivisionError, OverflowError):
        return False
    return bool(v.is_Rational) and abs(v) <= sp.Rational(1, 10**12)


def _factored(d):
    """D′ as one factored fraction when it is rational of total degree <= MAX_FACTOR_DEGREE, else None."""
    try:
        num, den = sp.fraction(sp.together(d))
        if (
            max(sp.Poly(num, *_SYMBOLS.values()).total_degree(), sp.Poly(den, *_SYMBOLS.values()).total_degree())
            > MAX_FACTOR_DEGREE
        ):
            return None
        return sp.factor(sp.together(d))
    except (sp.PolynomialError, sp.GeneratorsNeeded, ValueError, TypeError):
        return None


def _prove_shape(name: str, expr, uses_p: bool) -> int:
    """Proof that D(1) = 0, D′ < 0 on [R_MIN, 1) and D′ > 0 on (1, R_MAX] (for every p in [P_MIN, 1]), so that for
    every δ the set {r in [R_MIN, R_MAX] : D(r) <= δ} is one interval containing 1. Returns the boxes used."""
    r = _SYMBOLS["r"]
    budget = _Budget(PROOF_BUDGET_BOXES)
    d1 = expr.subs(r, 1)
    if not (_is_zero(d1) or _exactly_tiny(d1) or _tiny(d1)):
        raise ValueError(
            f"formula {name!r} must satisfy D(1) = 0"
            + (" for every p" if uses_p else "")
            + f"; interval arithmetic could not show |D(1)| <= 1e-12 (D(1) = {d1})"
        )
    d = sp.diff(expr, r)
    forms = [d]
    if not d.has(sp.exp, sp.log, sp.Abs):
        # A rational D′ as one factored fraction: (r-1)**2/(1+(r-1)**2) gives 2(r-1)/(1+(r-1)**2)**2, free of
        # the cancellation that defeats interval arithmetic at large r. Never on exp/log terms: factor() treats
        # exp(-1000000*r**2) as a polynomial of degree 10**6; and only at low degree (MAX_FACTOR_DEGREE).
        g = _factored(d)
        if g is not None and g != d:
            forms.append(g)
    ivc = _IV()
    sides = ((-1, 1 - _S, math.nextafter(1 - R_MIN, 2.0)), (1, 1 + _S, math.nextafter(R_MAX - 1, math.inf)))
    n, stuck = 0, None
    for sigma, at, s_max in sides:
        try:
            n += _prove_side(name, [f.subs(r, at) for f in forms], sigma, s_max, uses_p, budget, ivc)
        except _Unprovable as exc:
            raise ValueError(
                f"formula {name!r}: its derivative uses {exc}, which the interval proof of the shape "
                "does not support; refused"
            ) from None
        except _NotProven as exc:  # look for a witness on the other side before refusing
            stuck = stuck or exc
            budget.left = max(budget.left, PROOF_BUDGET_BOXES // 3)
    if stuck is not None:
        raise stuck
    return n


def measure_from_formula(formula: str, name: str | None = None) -> CustomMeasure:
    """A `Measure` from a formula in `r` (and optionally `p`), e.g. "(sqrt(r) - 1)**2".

    >>> m = measure_from_formula("(sqrt(r) - 1)**2")
    >>> round(m.bounds(0.04)[1], 6)
    1.44
    """
    fn, expr, uses_p = parse_formula(formula)
    _check_shape(formula, fn, uses_p)
    with_deadline(
        lambda e: _prove_shape(formula, e, uses_p),
        expr,
        what=f"proving the shape of {formula.strip()!r}",
        seconds=PROOF_SAFETY_S,
    )
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
