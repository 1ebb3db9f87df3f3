"""Machinery behind `divclip.theory.symbolic`: derivation steps whose checks re-derive their own statement.

A `Step` stores a SymPy statement and a verifier. The verifier receives the *stored* statement, so a
step whose statement is replaced (`with_statement`, or `dataclasses.replace(step, statement=...)`)
is checked as written and fails when it is wrong. Verifiers never return a hard-coded verdict: each
one simplifies to zero, compares series coefficients, calls `solve`/`solveset`, or evaluates at
seeded random δ with mpmath at `DIGITS` digits.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import sympy as sp

R = sp.Symbol("r", positive=True)  # probability ratio π_θ/π_old
DELTA = sp.Symbol("delta", positive=True)  # divergence budget δ
S = sp.Symbol("s", positive=True)  # series variable s = √(2δ)
ADV = sp.Symbol("A", real=True)  # advantage
L_SYM = sp.Symbol("l_delta")  # lower clip bound l_δ
U_SYM = sp.Symbol("u_delta")  # upper clip bound u_δ

DIGITS = 40  # mpmath precision for numeric checks (the brief asks for ≥ 30)
TOL = sp.Float("1e-25")  # |D(root) - δ| allowed at DIGITS digits
SEED = 20260211  # every random δ / r / A sample is drawn from this seed


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    method: str  # how it was checked, e.g. "simplify(lhs - rhs) == 0"
    detail: str  # what was computed, human readable

    @property
    def kind(self) -> str:
        """'numeric' when any part of the check evaluates at sample points (then it can miss a counterexample
        between them), else 'symbolic' (an exact SymPy argument). Every method string that samples says so."""
        text = self.method.lower()
        return "numeric" if any(w in text for w in ("numeric", "sample", "random")) else "symbolic"


@dataclass(frozen=True)
class Step:
    title: str
    explanation: str
    statement: sp.Basic
    latex: str
    verify: Callable[[sp.Basic], CheckResult] = field(repr=False, compare=False)

    @property
    def check(self) -> Callable[[], CheckResult]:
        """Zero-argument check bound to the statement this step stores."""
        return functools.partial(self.verify, self.statement)

    def run_check(self) -> CheckResult:
        # A statement the verifier cannot even process (wrong shape, unsolvable) is a failed check.
        try:
            return self.verify(self.statement)
        except Exception as exc:  # noqa: BLE001 - reported, never hidden
            return CheckResult(False, "verifier raised", f"{type(exc).__name__}: {exc}")


def statement_latex(statement: sp.Basic) -> str:
    """LaTeX of a statement; a Tuple of facts becomes one fact per line."""
    if isinstance(statement, sp.Tuple):
        return r" \\ ".join(statement_latex(part) for part in statement.args)
    return sp.latex(statement).replace(r"W\left(", r"W_{0}\left(")  # SymPy prints the W_0 branch as bare W


def make_step(
    title: str,
    explanation: str,
    statement: sp.Basic,
    verify: Callable[[sp.Basic], CheckResult],
    latex: str | None = None,
) -> Step:
    return Step(title, explanation, statement, latex or statement_latex(statement), verify)


def with_statement(step: Step, statement: sp.Basic) -> Step:
    """The same step claiming `statement` instead (LaTeX regenerated); its check verifies the new claim."""
    return replace(step, statement=statement, latex=statement_latex(statement))


# ---- numbers -------------------------------------------------------------------------------------


def sample_deltas(n: int = 5, lo: float = 1e-3, hi: float = 0.5, seed: int = SEED) -> list[sp.Float]:
    """n log-uniform δ in [lo, hi]; hi < 1 keeps χ² and Hellinger lower roots positive."""
    rng = random.Random(seed)
    draws = (math.exp(rng.uniform(math.log(lo), math.log(hi))) for _ in range(n))
    return [sp.Float(f"{d:.12g}", DIGITS) for d in draws]


def evaluate(expr: sp.Expr, subs: dict) -> sp.Float:
    """Real value of expr at DIGITS digits (mpmath underneath); raises if it is not real."""
    value = sp.sympify(expr).evalf(DIGITS, subs=subs)
    re, im = value.as_real_imag()
    if not (im == 0 or abs(im) < sp.Float(10) ** (-DIGITS + 5)) or not re.is_Number:
        raise ValueError(f"expected a real number, got {value}")
    return re


def side_forms(expr: sp.Expr) -> tuple[tuple[sp.Expr, sp.Interval], ...]:
    """expr without Abs on (0, 1) and on (1, ∞); one piece on (0, ∞) when expr has no Abs.

    Each |g(r)| is replaced by ±g(r) with the sign g has at r = 1/2 or r = 2, which is valid on the
    whole side only because g has no zero in (0, ∞) other than r = 1 (checked here).
    """
    abs_terms = expr.atoms(sp.Abs)
    if not abs_terms:
        return ((expr, sp.Interval.open(0, sp.oo)),)
    low, high = {}, {}
    for term in abs_terms:
        inner = term.args[0]
        zeros = sp.solveset(inner, R, sp.Interval.open(0, sp.oo))
        if not zeros.is_subset(sp.FiniteSet(1)):
            raise ValueError(f"|{inner}| changes sign away from r = 1 (zeros {zeros})")
        low[term] = sp.sign(inner.subs(R, sp.Rational(1, 2))) * inner
        high[term] = sp.sign(inner.subs(R, 2)) * inner
    return ((expr.xreplace(low), sp.Interval.open(0, 1)), (expr.xreplace(high), sp.Interval.open(1, sp.oo)))


def lower_upper_forms(measure: sp.Expr) -> tuple[sp.Expr, sp.Expr]:
    forms = side_forms(measure)
    return forms[0][0], forms[-1][0]


def vanishing_order(form: sp.Expr) -> int:
    """Order of the first non-zero derivative of form at r = 1 (2 for a smooth minimum, 1 for a kink)."""
    for k in range(1, 6):
        if sp.simplify(sp.diff(form, R, k).subs(R, 1)) != 0:
            return k
    raise ValueError(f"{form} is flat to 5th order at r = 1")


def compose_at_one(form: sp.Expr, poly: sp.Expr, var: sp.Symbol, top: int) -> list[sp.Expr]:
    """Coefficients of var^0 … var^(top-1) in D(poly), for a polynomial poly with poly(0) = 1.

    poly - 1 = O(var), so D's Taylor polynomial at r = 1 to degree top - 1 fixes every coefficient
    below var^top; powers of (poly - 1) are truncated as they are built. (SymPy's own series of
    log or sqrt of a polynomial is much slower and, for sqrt, can hang.)
    """
    inner = [sp.expand(poly - 1).coeff(var, j) for j in range(top)]
    result, power, derivative = [sp.S.Zero] * top, [sp.S.One] + [sp.S.Zero] * (top - 1), form
    for j in range(top):
        c_j = derivative.subs(R, 1) / sp.factorial(j)
        result = [sp.expand(a + c_j * b) for a, b in zip(result, power)]
        power = [sp.expand(sum(power[i] * inner[k - i] for i in range(k + 1))) for k in range(top)]
        derivative = sp.diff(derivative, R)
    return result


def solve_roots(measure: sp.Expr) -> list[sp.Expr]:
    """What `sympy.solve` returns for D(r) = δ, side by side for |·| measures (nothing added)."""
    return list(_solve_roots(measure))


@functools.cache  # solve is the slow part (~0.5 s for Lambert); derivation and check share it
def _solve_roots(measure: sp.Expr) -> tuple[sp.Expr, ...]:
    roots: list[sp.Expr] = []
    for form, _ in side_forms(measure):
        roots += [root for root in sp.solve(form - DELTA, R) if root not in roots]
    return tuple(roots)


# ---- verifiers -----------------------------------------------------------------------------------


def _parts(statement: sp.Basic) -> tuple[sp.Basic, ...]:
    return statement.args if isinstance(statement, sp.Tuple) else (statement,)


def _verify_equality(rel: sp.Eq) -> tuple[bool, str, str]:
    if isinstance(rel.lhs, sp.ConditionSet):
        found = sp.solveset(rel.lhs.condition, rel.lhs.sym, rel.lhs.base_set)
        return found == rel.rhs, "solveset", f"{{{rel.lhs.condition}}} on {rel.lhs.base_set} = {found}"
    diff = sp.simplify((rel.lhs - rel.rhs).doit())
    return diff == 0, "simplify(lhs - rhs) == 0", f"{rel.lhs} - ({rel.rhs}) -> {diff}"


def _verify_inequality(rel: sp.Rel) -> tuple[bool, str, str]:
    gap = sp.simplify((rel.gts - rel.lts).doit())  # must be > 0 (or ≥ 0)
    strict = rel.rel_op in (">", "<")
    decided = gap.is_positive if strict else gap.is_nonnegative
    if decided:
        return True, "SymPy sign assumptions", f"{rel.gts} - ({rel.lts}) = {gap}: positive"
    # Only a True from the assumptions is trusted: SymPy 1.14 calls W_{-1}(x) non-real on (-1/e, 0),
    # so it "decides" 1 < -W_{-1}(x) is False. Anything else is settled numerically.
    if not gap.free_symbols <= {DELTA}:
        return False, "undecided", f"cannot decide the sign of {gap}"
    margins = [evaluate(gap, {DELTA: d}) for d in sample_deltas()]
    ok = all(m > 0 if strict else m >= 0 for m in margins)
    note = " (SymPy assumptions said False)" if decided is False else ""
    return ok, f"numeric at {len(margins)} random δ ({DIGITS} digits)", f"{rel}: min margin {min(margins):.3e}{note}"


def _lambert_rewrite(expr: sp.Expr) -> sp.Expr:
    """Rewrite with W(z)·e^{W(z)} = z, valid on both real branches for z in (-1/e, 0) (where W < 0, so -W > 0):
    log(-W) = log(-z) - W and e^{±W} = (z/W)^{±1}. Used only for the z = -e^{-1-δ} (δ > 0) of the clip roots."""
    expr = sp.expand(expr, power_exp=True, mul=False, multinomial=False)
    for w in expr.atoms(sp.LambertW):
        z = w.args[0]
        expr = expr.xreplace(
            {sp.log(-w): sp.log(-z) - w, sp.log(w): sp.log(-z) - w + sp.I * sp.pi, sp.exp(w): z / w, sp.exp(-w): w / z}
        )
    return expr


def _lambert_simplify(expr: sp.Expr) -> sp.Expr:
    """_lambert_rewrite and expand_log, repeated (expanding a log can expose a new log(W)), then simplify."""
    for _ in range(3):
        expr = sp.expand_log(_lambert_rewrite(expr), force=True)
    expr = _lambert_rewrite(expr)
    return sp.simplify(expr)


def _in_branch_domain(z: sp.Expr) -> bool:
    """z in (-1/e, 0) for every δ > 0, proved by solveset (both real Lambert branches exist there)."""
    if z.free_symbols - {DELTA}:
        return False
    pos = sp.Interval.open(0, sp.oo)
    return all(sp.solveset(cond, DELTA, pos) == pos for cond in (z < 0, z > -sp.exp(-1)))


def _gap_positive(gap: sp.Expr) -> bool | None:
    """Exact sign of gap for all δ > 0: True when proved positive, False when proved non-positive, None when
    SymPy cannot tell. Lambert W terms are first rewritten with W e^W = z, then replaced by their branch
    ranges on (-1/e, 0): W_0 = -1/(1 + a), W_{-1} = -1 - a with a > 0 (a sufficient condition)."""
    g = sp.simplify(gap)
    if g.is_positive or g.is_nonpositive:
        return bool(g.is_positive)
    if g.atoms(sp.LambertW):
        g = _lambert_simplify(g)
        subs = {}
        for i, w in enumerate(g.atoms(sp.LambertW)):
            if not _in_branch_domain(w.args[0]):
                return None
            a = sp.Symbol(f"a{i}", positive=True)
            branch = w.args[1] if len(w.args) > 1 else 0
            subs[w] = -1 - a if branch == -1 else (-1 / (1 + a) if branch == 0 else None)
            if subs[w] is None:
                return None
        g = sp.simplify(g.xreplace(subs))
        return True if g.is_positive else (False if g.is_nonpositive else None)
    if g.free_symbols <= {DELTA}:
        pos = sp.Interval.open(0, sp.oo)
        if sp.solveset(g > 0, DELTA, pos) == pos:
            return True
    return None


def _root_residual(measure: sp.Expr, root: sp.Expr) -> sp.Expr:
    """D(root) - δ, simplified (exact): 0 proves root is a root of D = δ."""
    diff = sp.simplify(measure.subs(R, root) - DELTA)
    if diff != 0 and diff.atoms(sp.LambertW):
        diff = _lambert_simplify(diff)
    return diff


def _clip_shape(rel: sp.Equivalent):
    """(D, l, u) when rel is `D > δ ∧ (r-1)A > 0 ⇔ (A > 0 ∧ r > u) ∨ (A < 0 ∧ r < l)`, else None."""
    gate, clip = rel.args
    if not (isinstance(gate, sp.And) and isinstance(clip, sp.Or) and len(clip.args) == 2):
        return None
    measure = next((a.lhs for a in gate.args if isinstance(a, sp.StrictGreaterThan) and a.rhs == DELTA), None)
    sign_part = sp.Gt((R - 1) * ADV, 0)
    upper = lower = None
    for branch in clip.args:
        for atom in branch.args if isinstance(branch, sp.And) else ():
            if isinstance(atom, sp.StrictGreaterThan) and atom.lhs == R and sp.Gt(ADV, 0) in branch.args:
                upper = atom.rhs
            if isinstance(atom, sp.StrictLessThan) and atom.lhs == R and sp.Lt(ADV, 0) in branch.args:
                lower = atom.rhs
    if measure is None or upper is None or lower is None or set(gate.args) != {sp.Gt(measure, DELTA), sign_part}:
        return None
    return measure, lower, upper


def _prove_clip_equivalence(rel: sp.Equivalent) -> tuple[bool, str, str] | None:
    """Exact proof of the gradient rule from four facts, each proved by SymPy: D' < 0 on (0, 1) and D' > 0 on
    (1, ∞) (solveset), D(l) = D(u) = δ (simplify), l < 1 < u (sign assumptions). Then {r < 1: D > δ} = (0, l)
    and {r > 1: D > δ} = (u, ∞), and the two sides are compared as propositional formulas over the atoms
    r > u, r < l, r > 1, r < 1, A > 0, A < 0 with those facts as constraints (SymPy's SAT solver: no
    assignment makes them differ). Returns (False, ...) when a fact is refuted, None when SymPy cannot
    decide one (the caller then compares the sets numerically)."""
    shape = _clip_shape(rel)
    if shape is None:
        return None
    measure, lower, upper = shape
    details = []
    for form, interval, sign in (
        (lower_upper_forms(measure)[0], sp.Interval.open(0, 1), -1),
        (lower_upper_forms(measure)[1], sp.Interval.open(1, sp.oo), 1),
    ):
        cond = sp.diff(form, R) < 0 if sign < 0 else sp.diff(form, R) > 0
        if sp.solveset(cond, R, interval) != interval:
            return None
    details.append("D' < 0 on (0, 1), D' > 0 on (1, ∞)")
    for name, root in (("l", lower), ("u", upper)):
        res = _root_residual(measure, root)
        if res != 0:
            if res.is_zero is False or (not res.free_symbols and res.evalf() != 0):
                return False, "exact (monotonicity + roots + SAT)", f"D({name}) - δ = {res}, not 0"
            return None
        details.append(f"D({name}) = δ")
    for a, b, text in ((lower, 1, "l < 1"), (1, upper, "1 < u")):
        sign = _gap_positive(b - a)
        if sign is not True:
            if sign is False:
                return False, "exact (monotonicity + roots + SAT)", f"{text} is false for δ > 0"
            return None
        details.append(text)
    gt_u, lt_l, gt_1, lt_1, a_pos, a_neg = sp.symbols("gt_u lt_l gt_1 lt_1 a_pos a_neg")
    facts = sp.And(sp.Implies(gt_u, gt_1), sp.Implies(lt_l, lt_1), ~(gt_1 & lt_1), ~(a_pos & a_neg))
    d_above = (gt_1 & gt_u) | (lt_1 & lt_l)  # D > δ, by the monotonicity and the roots
    lhs = d_above & ((gt_1 & a_pos) | (lt_1 & a_neg))  # and (r - 1)A > 0
    rhs = (a_pos & gt_u) | (a_neg & lt_l)
    counterexample = sp.logic.inference.satisfiable(facts & ~sp.Equivalent(lhs, rhs))
    ok = counterexample is False
    details.append("SAT: no truth assignment separates the two sides" if ok else f"differ at {counterexample}")
    return ok, "exact (monotonicity + roots + SAT)", ", ".join(details)


def _verify_equivalence(rel: sp.Equivalent) -> tuple[bool, str, str]:
    """Two conditions on (r, A) at fixed δ define the same set: proved exactly for the gradient rule where
    SymPy can settle every fact it rests on, else compared on a seeded sample."""
    proof = _prove_clip_equivalence(rel)
    if proof is not None:
        return proof
    rng = np.random.default_rng(SEED)
    mismatches, points, deltas = 0, 0, sample_deltas(3)
    for d in deltas:
        sides = []
        for side in rel.args:
            side = side.subs(DELTA, d)
            side = side.xreplace({w: w.evalf(DIGITS) for w in side.atoms(sp.LambertW)})
            sides.append(sp.lambdify((R, ADV), side, "numpy"))
        r = np.exp(rng.uniform(-1.5, 1.5, 4000))
        adv = np.where(rng.random(4000) < 0.05, 0.0, rng.normal(size=4000))
        results = [np.asarray(f(r, adv), dtype=bool) for f in sides]
        mismatches += int(np.sum(results[0] != results[1]))
        points += r.size
    detail = f"{mismatches} disagreements over {points} (r, A) points at {len(deltas)} random δ"
    return mismatches == 0, "numeric set comparison on seeded (r, A) samples", detail


def verify_relations(statement: sp.Basic) -> CheckResult:
    """Each part: Eq by simplify/solveset, inequalities by sign or numerically, ⇔ on samples."""
    outcomes = []
    for part in _parts(statement):
        if isinstance(part, sp.Equality):
            outcomes.append(_verify_equality(part))
        elif isinstance(part, sp.Equivalent):
            outcomes.append(_verify_equivalence(part))
        elif isinstance(part, sp.Rel):
            outcomes.append(_verify_inequality(part))
        else:
            outcomes.append((False, "unsupported", f"cannot check a {type(part).__name__}"))
    methods = list(dict.fromkeys(method for _, method, _ in outcomes))
    return CheckResult(
        all(ok for ok, _, _ in outcomes), "; ".join(methods), "; ".join(detail for _, _, detail in outcomes)
    )


def verify_nonnegative(statement: sp.GreaterThan) -> CheckResult:
    """f ≥ 0 on (0, ∞): f at every critical point (solveset f' = 0) and its limits at each end ≥ 0."""
    f = statement.lhs - statement.rhs
    candidates = []
    for form, interval in side_forms(f):
        critical = sp.solveset(sp.diff(form, R), R, interval)
        if not (isinstance(critical, sp.FiniteSet) or critical is sp.S.EmptySet):
            return CheckResult(False, "critical points", f"cannot enumerate f' = 0 on {interval}: {critical}")
        candidates += [(f"f({c})", sp.simplify(form.subs(R, c))) for c in critical]
        candidates += [
            (f"f({interval.start}+)", sp.limit(form, R, interval.start, "+")),
            (f"f({interval.end}-)", sp.limit(form, R, interval.end, "-")),
        ]
    ok = all(value.is_nonnegative or value == sp.oo for _, value in candidates)
    return CheckResult(
        ok,
        "critical points (solveset f' = 0) and one-sided limits at the ends",
        ", ".join(f"{name} = {value}" for name, value in candidates),
    )


def verify_log_equivalence(statement: sp.Equivalent) -> CheckResult:
    """a = b ⇔ c = d for positive c, d: log c - log d must be a non-zero constant times (a - b)."""
    first, second = sorted(statement.args, key=lambda eq: eq.has(sp.log), reverse=True)
    if not (second.lhs.is_positive and second.rhs.is_positive):
        return CheckResult(False, "take logs", f"{second} is not between positive quantities")
    logged = sp.expand_log(sp.log(second.lhs) - sp.log(second.rhs), force=True)
    ratio = sp.simplify(logged / (first.lhs - first.rhs))
    symbolic = ratio.is_number and ratio != 0
    rng = random.Random(SEED)
    worst = sp.Float(0)
    (delta_of_r,) = sp.solve(first, DELTA)  # the δ at which a given r solves the first equation
    for _ in range(5):  # random r on the first equation's solution set must satisfy the second
        r = sp.Float(rng.uniform(0.2, 3.0), DIGITS)
        worst = max(worst, abs(evaluate(logged, {R: r, DELTA: evaluate(delta_of_r, {R: r})})))
    detail = f"(log lhs - log rhs)/(D - δ) simplifies to {ratio}; max residual at 5 random (r, δ) {worst:.1e}"
    return CheckResult(
        bool(symbolic) and worst < TOL,
        f"expand_log + simplify ratio, numeric at 5 random (r, δ) ({DIGITS} digits)",
        detail,
    )


def verify_roots(statement: sp.Tuple, measure: sp.Expr) -> CheckResult:
    """Claimed roots: contain what `solve` returns, solve D = δ numerically, and are two distinct."""
    claimed = [eq.rhs for eq in statement.args]
    returned = solve_roots(measure)
    deltas = sample_deltas()
    values = [[evaluate(root, {DELTA: d}) for d in deltas] for root in claimed]
    residual = max(abs(evaluate(measure, {R: v, DELTA: d}) - d) for row in values for v, d in zip(row, deltas))
    gap = float(
        min(
            (abs(a - b) for i, row in enumerate(values) for other in values[i + 1 :] for a, b in zip(row, other)),
            default=0,
        )
    )  # float: an exact 0 (coinciding roots) formats
    residual = float(residual)
    # Branch order: the first claimed root must be the lower one (l_δ < 1) and the second the upper (u_δ > 1)
    # at every sampled δ, e.g. W_0 for l and W_{-1} for u in KL3; a swapped branch fails here.
    ordered = len(values) == 2 and all(a < 1 < b for a, b in zip(values[0], values[1]))

    def matches(root: sp.Expr) -> list[int]:
        row = [evaluate(root, {DELTA: d}) for d in deltas]
        return [i for i, c in enumerate(values) if all(abs(a - b) < TOL for a, b in zip(row, c))]

    found = {i for root in returned for i in matches(root)}
    by_hand = [claimed[i] for i in range(len(claimed)) if i not in found]
    ok = len(claimed) == 2 and gap > 1e-6 and residual < TOL and ordered and all(matches(root) for root in returned)
    detail = (
        f"solve returned {returned}; not returned by solve (added by hand): {by_hand}; "
        f"max |D(root) - δ| = {residual:.1e}; min distance between roots = {gap:.3e}; "
        f"lower root < 1 < upper root at every δ: {ordered}"
    )
    return CheckResult(ok, f"solve + numeric at {len(deltas)} random δ ({DIGITS} digits), branch order", detail)


def _series_target(var: sp.Symbol) -> sp.Expr:
    return S**2 / 2 if var == S else DELTA  # δ in terms of the series variable


def verify_root_series(statement: sp.Tuple, measure: sp.Expr) -> CheckResult:
    """Substitute each claimed series into D and expand: D(series) - δ vanishes below the order
    that the truncation can reach, i.e. O(t^(n+m-1)) for r = poly + O(t^n) and a zero of order m."""
    details, ok = [], True
    for eq, form, below in zip(statement.args, lower_upper_forms(measure), (True, False)):
        order = eq.rhs.getO()
        var = order.variables[0]
        n, poly = sp.degree(order.expr, var), eq.rhs.removeO()
        top = n + vanishing_order(form) - 1
        target = sp.Poly(_series_target(var), var).all_coeffs()[::-1] + [0] * top
        coefficients = compose_at_one(form, poly, var, top)
        rest = sp.Add(*(sp.simplify(c - target[j]) * var**j for j, c in enumerate(coefficients)))
        side = evaluate(poly, {var: sp.Float("1e-3")}) < 1
        ok = ok and var in (S, DELTA) and poly.subs(var, 0) == 1 and rest == 0 and side == below
        details.append(
            f"D({eq.lhs} series) - δ = {rest or 0} + O({var}^{top}); {'below' if side else 'above'} 1 at {var} = 1e-3"
        )
    return CheckResult(
        ok, f"substitute into D, expand in {var}, coefficients below the order vanish", "; ".join(details)
    )


def verify_asymptotic(statement: sp.Eq, l_series: sp.Expr, u_series: sp.Expr) -> CheckResult:
    """(u - 1) - (1 - l) = rhs: exact by simplify, or rhs + O(δ^k) by the root series and by the
    error/δ^k of the closed form staying bounded as δ → 0 (mpmath)."""
    lhs, rhs = statement.lhs, statement.rhs
    order = rhs.getO() if isinstance(rhs, sp.Expr) else None
    if order is None:
        return verify_relations(statement)
    k, main = sp.degree(order.expr, DELTA), rhs.removeO()
    var = (l_series.free_symbols | u_series.free_symbols).pop()
    from_series = sp.expand((u_series - 1) - (1 - l_series))
    if var == S:
        from_series = sp.expand(from_series.subs(S, sp.sqrt(2 * DELTA)))
    leftover = sp.expand(sp.series(from_series - main, DELTA, 0, k).removeO())
    deltas = [sp.Float(f"1e-{j}", DIGITS) for j in range(2, 6)]
    scaled = [abs(evaluate(lhs - main, {DELTA: d})) / d**k for d in deltas]
    ratios = [evaluate(lhs / main, {DELTA: d}) for d in deltas]
    bounded = all(b <= 2 * a + sp.Float("1e-20") for a, b in zip(scaled, scaled[1:]))
    ok = leftover == 0 and bounded and abs(ratios[-1] - 1) < 1e-3
    detail = (
        f"series of the roots: difference - ({main}) = {leftover or 0} + O(δ^{k}); "
        f"|lhs - main|/δ^{k} at δ = 1e-2..1e-5: {', '.join(f'{x:.3g}' for x in scaled)}; "
        f"lhs/main: {', '.join(f'{x:.6f}' for x in ratios)}"
    )
    return CheckResult(ok, f"root series in δ + numeric limit δ → 0 ({DIGITS} digits)", detail)
