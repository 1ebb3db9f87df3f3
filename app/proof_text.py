"""The proof page's words: each derivation step as lecture prose with its maths in $…$ (KaTeX), each check said
in plain words and marked symbolic or numeric, and the whole lecture as one Markdown file.

The statements, their LaTeX and the checks come from `divclip.theory.symbolic`; this module only says them. A
step it has no prose for keeps theory's own explanation, shown literally (nothing is invented for it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import sympy as sp

from divclip import theory
from divclip.app.page_parts import markdown_text
from divclip.app.sign_of_a import DUAL_CLIP_C, EQUIVALENCE_METHOD, equivalence_check
from divclip.theory.symbolic import CheckResult, Step, measure_expression, statement_latex

SYMBOLIC, NUMERIC, BOTH = "symbolic", "numeric", "symbolic + numeric"


# ------------------------------------------------------------------------------------ the checks
@dataclass(frozen=True)
class CheckPart:
    """One way a step's claim was checked: `kind` is SYMBOLIC or NUMERIC, `words` a plain sentence."""

    kind: str
    words: str


def _count(pattern: str, text: str, default: str) -> str:
    found = re.search(pattern, text)
    return found.group(1) if found else default


def _part(method: str, detail: str, combined: bool = False) -> CheckPart:
    """Plain words for one of theory's check methods (see theory/_symbolic_generic.py's verifiers)."""
    digits = _count(r"\((\d+) digits\)", method, "40")
    if method.startswith("critical points"):
        return CheckPart(
            SYMBOLIC,
            "SymPy found every critical point of D (where D′ = 0) and D's limits at the ends "
            "of each interval, and none of these values is negative.",
        )
    if method.startswith("simplify(lhs - rhs)"):
        return CheckPart(SYMBOLIC, "SymPy simplified left side minus right side of each equation to exactly 0.")
    if method == "SymPy sign assumptions":
        which = "the other inequalities" if combined else "the inequality"
        return CheckPart(
            SYMBOLIC,
            f"SymPy's sign rules prove {which}: the larger side minus the smaller is positive for every δ > 0.",
        )
    if method == "solveset":
        return CheckPart(
            SYMBOLIC,
            "SymPy solved D′(r) < 0 and D′(r) > 0: exactly (0, 1) and (1, ∞), so D falls "
            "below r = 1 and rises above it.",
        )
    if method.startswith("numeric at") and "random δ" in method:
        n = _count(r"numeric at (\d+)", method, "several")
        which = "Where SymPy's sign rules could not decide, the inequality" if combined else "The inequality"
        words = (
            f"{which} holds at {n} random δ between 0.001 and 0.5, computed with {digits}-digit "
            "arithmetic: evidence, not a proof."
        )
        if "assumptions said False" in detail:
            words += (
                " For the W₋₁ bound SymPy 1.14's sign rules even answer False, because they wrongly call W₋₁ "
                "non-real on (−1/e, 0); that part rests on the numbers."
            )
        return CheckPart(NUMERIC, words)
    if method.startswith("exact (monotonicity + roots + SAT)"):
        return CheckPart(
            SYMBOLIC,
            "Proved exactly: SymPy showed D′ < 0 on (0, 1) and D′ > 0 on (1, ∞), "
            "simplified D(l_δ) − δ and D(u_δ) − δ to 0 and proved l_δ < 1 < u_δ for every "
            "δ > 0; so D > δ means r < l_δ or r > u_δ, and a SAT solver found no case where "
            "the two sides of the ⇔ differ.",
        )
    if method.startswith("numeric set comparison"):
        n = _count(r"over (\d+)", detail, "many")
        bad = _count(r"(\d+) disagreements", detail, "?")
        return CheckPart(
            NUMERIC,
            f"Both sides of the ⇔ were evaluated at {n} random (r, A) points: they disagree "
            f"at {bad} of them. Evidence, not a proof.",
        )
    if method.startswith("substitute into D"):
        return CheckPart(
            SYMBOLIC,
            "SymPy put each series into D and expanded: every coefficient below the "
            "truncation order matches δ's, so the series are right to the order stated.",
        )
    if method == EQUIVALENCE_METHOD:
        return CheckPart(
            NUMERIC,
            f"theory's own loss (policy_terms), run for the measure at δ and for the ratio clip "
            f"at [l_δ, u_δ] on the same random tokens: {detail}. Evidence at this δ, not a "
            "proof (the proof is the gradient-rule step).",
        )
    if method.startswith("verifier raised"):
        return CheckPart(SYMBOLIC, f"The check could not run: {detail}")
    kind = NUMERIC if "numeric" in method else SYMBOLIC
    return CheckPart(kind, f"{method}.")


def check_parts(result: CheckResult) -> list[CheckPart]:
    """Each way the claim was checked, in plain words (a combined method is split into its halves)."""
    method = result.method
    digits = _count(r"\((\d+) digits\)", method, "40")
    if method.startswith("expand_log + simplify ratio"):
        return [
            CheckPart(
                SYMBOLIC,
                "Taking logs of both equations, SymPy simplified the ratio of the two to a "
                "non-zero constant: one holds exactly when the other does.",
            ),
            CheckPart(NUMERIC, f"At 5 random (r, δ) on the first equation the second holds to {digits} digits."),
        ]
    if method.startswith("solve + numeric"):
        hand = "" if "(added by hand): []" in result.detail else " (one root, not returned by solve, added by hand)"
        return [
            CheckPart(SYMBOLIC, f"sympy.solve returned the roots of D(r) = δ{hand}."),
            CheckPart(
                NUMERIC,
                "Each claimed root, evaluated at 5 random δ with "
                f"{digits} digits, gives D(root) = δ back and the "
                "two roots are distinct.",
            ),
        ]
    if method.startswith("root series in δ + numeric limit"):
        return [
            CheckPart(SYMBOLIC, "From the root series, the difference's leading term is exactly the one stated."),
            CheckPart(
                NUMERIC,
                "The closed form minus that term, divided by the next power of δ, stays bounded "
                "for δ = 1e-2 … 1e-5 (40-digit arithmetic).",
            ),
        ]
    pieces = [m.strip() for m in method.split(";") if m.strip()]
    return [_part(piece, result.detail, combined=len(pieces) > 1) for piece in pieces]


def check_kind(result: CheckResult) -> str:
    """SYMBOLIC, NUMERIC or BOTH: theory's own label where it has one, else what the check's methods say."""
    kinds = {part.kind for part in check_parts(result)}
    label = getattr(result, "kind", None)
    if isinstance(label, str) and label:
        # theory's label says whether the verdict leans on sample points ('numeric' when any part does); the
        # parts say which halves were symbolic, so a label of 'numeric' beside a symbolic half reads 'both'.
        text = label.lower()
        if "symbolic" in text or "mixed" in text:
            kinds.add(SYMBOLIC)
        if "numeric" in text or "mixed" in text:
            kinds.add(NUMERIC)
        elif "symbolic" in text:
            kinds.discard(NUMERIC)
    return BOTH if kinds == {SYMBOLIC, NUMERIC} else kinds.pop()


def check_sentence(result: CheckResult) -> str:
    """The check as one paragraph of plain text (no markdown)."""
    return " ".join(part.words for part in check_parts(result))


# ------------------------------------------------------------------------------------ the steps
_TITLES = {
    "Definition and non-negativity": "Definition and non-negativity",
    "Minimum at r = 1": "Minimum at $r = 1$",
    "Minimum at r = 1 (a kink)": "Minimum at $r = 1$ (a kink)",
    "Lambert-W form of D = δ": r"Lambert-W form of $D(r) = \delta$",
    "Roots of D(r) = δ": r"Roots of $D(r) = \delta$",
    "Bracketing l < 1 < u": r"Bracketing $l_\delta < 1 < u_\delta$",
    "Series of the roots in s = √(2δ)": r"Series of the roots in $s = \sqrt{2\delta}$",
    "Series of the roots in δ": r"Series of the roots in $\delta$",
    "Asymmetry ε_high − ε_low": r"Asymmetry $\varepsilon_{\mathrm{high}} - \varepsilon_{\mathrm{low}}$",
    "Gradient rule = ratio clipping on [l, u]": r"Gradient rule $=$ ratio clipping on $[l_\delta, u_\delta]$",
}


# Why the sides differ, for the two measures the lecture folds (the mirror figure draws D(1 + x) against D(1 − x)).
_WHY_ASYMMETRIC = {
    "kl3": (
        r" Why: fold the two sides onto one axis $x = |r - 1|$. $D(1 + x) = x - \log(1 + x)$ and "
        r"$D(1 - x) = -x - \log(1 - x)$ share the $x^2/2$ term, but $-\log r$ grows without bound as "
        r"$r \to 0$: $D(1 - x) - D(1 + x) = \log\frac{1+x}{1-x} - 2x > 0$, so the lower side reaches "
        r"$\delta$ first and is the tighter one."
    ),
    "kl3_reverse": (
        r" Why: fold the two sides onto $x = |r - 1|$. Here $+\log r$ works the other way, pulling "
        r"$D$ down as $r \to 0$, but $1/r$ rises faster still: $D(1 - x) - D(1 + x) = "
        r"\frac{2x}{1 - x^2} - \log\frac{1+x}{1-x} > 0$, so the lower side is again the tighter one, by "
        r"about twice KL3's margin. In $\log r$ the two are mirror images: KL3's interval is the wider "
        r"below 1, reverse KL3's above."
    ),
}


def step_title(step: Step) -> str:
    """The step's title as markdown with its maths rendered."""
    return _TITLES.get(step.title) or markdown_text(step.title)


def step_prose(step: Step, name: str) -> str:
    """The step as a lecturer says it: markdown with every formula in $…$."""
    d = sp.latex(measure_expression(name))
    kl3 = name == "kl3"
    title = step.title
    if title == "Definition and non-negativity":
        extra = r" Equivalently $\log r \le r - 1$, the inequality behind every KL estimator." if kl3 else ""
        return (
            rf"The measure is $D(r) = {d}$, a function of the probability ratio "
            rf"$r = \pi_\theta(a)/\pi_{{\mathrm{{old}}}}(a)$ alone. It is never negative for $r > 0$: its "
            r"smallest value over the critical points and both ends of $(0, \infty)$ is $0$." + extra
        )
    if title == "Minimum at r = 1":
        if kl3:
            return (
                r"$D(1) = 0$ and $D'(1) = 0$, and $D''(r) = 1/r^2 > 0$ everywhere: $D$ is strictly convex, "
                r"so $r = 1$ (the policy did not move) is its only minimum."
            )
        return (
            r"$D(1) = 0$, $D'(1) = 0$ and $D''(1) > 0$: $r = 1$, where the policy did not move, is a strict "
            r"local minimum."
        )
    if title == "Minimum at r = 1 (a kink)":
        right, left = step.statement.args[1].rhs, step.statement.args[2].rhs
        return (
            rf"$D(1) = 0$, but $D = {d}$ has a corner at $r = 1$: work on each side. Right of 1 it rises "
            rf"with slope ${sp.latex(right)}$, left of 1 its slope is ${sp.latex(left)}$ (it falls towards "
            r"$r = 1$)."
        )
    if title == "Lambert-W form of D = δ":
        return (
            r"Exponentiate $r - 1 - \log r = \delta$: it becomes $r e^{-r} = e^{-(1+\delta)}$. With "
            r"$w = -r$ this is $w e^{w} = x$ for $x = -e^{-1-\delta}$, the equation that defines the Lambert "
            r"$W$ function, so the roots are $r = -W(x)$ on its two real branches."
        )
    if title == "Roots of D(r) = δ":
        lambert = "W_{-1}" in step.explanation
        how = (
            r"`sympy.solve` returns only the principal branch $W_0$; the second root, on the branch "
            r"$W_{-1}$, is added by hand."
            if lambert
            else r"`sympy.solve` returns both of them."
        )
        return (
            r"The clip bounds are the two solutions of $D(r) = \delta$: $l_\delta$ below 1 and $u_\delta$ "
            r"above. " + how
        )
    if title == "Bracketing l < 1 < u":
        if kl3:
            return (
                r"$x = -e^{-1-\delta}$ lies in $(-1/e, 0)$, where $W_0(x) \in (-1, 0)$ and $W_{-1}(x) < -1$; "
                r"so $l_\delta = -W_0(x) < 1 < -W_{-1}(x) = u_\delta$."
            )
        text = (
            r"One root lies on each side of $r = 1$, so the set $\{r : D(r) \le \delta\}$ is the interval "
            r"$[l_\delta, u_\delta]$."
        )
        if "δ ≥ 1" in step.explanation:
            text += (
                r" This holds for $\delta < 1$ (the checks draw $\delta \le 0.5$): for $\delta \ge 1$ there "
                r"is no lower root and the interval is $(0, u_\delta]$."
            )
        return text
    if title == "Series of the roots in s = √(2δ)":
        text = (
            r"$D$ is quadratic at its minimum, so near $\delta = 0$ the bounds move like $\sqrt{\delta}$: "
            r"they are power series in $s = \sqrt{2\delta}$, found by solving $D(r) = \delta$ order by order."
        )
        if kl3:
            text += r" For KL3: $r = 1 \pm s + \tfrac{s^2}{3} \pm \tfrac{s^3}{36} - \tfrac{s^4}{270} + O(s^5)$."
        return text
    if title == "Series of the roots in δ":
        return (
            r"At a kink $D$ grows linearly away from 1, so the bounds are power series in $\delta$ itself, "
            r"found by solving $D(r) = \delta$ order by order."
        )
    if title == "Asymmetry ε_high − ε_low":
        return (
            r"$\varepsilon_{\mathrm{high}} - \varepsilon_{\mathrm{low}} = (u_\delta - 1) - (1 - l_\delta)$: "
            r"how much looser the upper side is than the lower one. Positive means the measure itself "
            r"derives a clip-higher, where DAPO tunes one by hand." + _WHY_ASYMMETRIC.get(name, "")
        )
    if title == SIGN_TITLE:
        return step.explanation  # written as markdown by `sign_step`
    if title == "Gradient rule = ratio clipping on [l, u]":
        return (
            r"With advantage $A$, a token's gradient is zero exactly when $D(r) > \delta$ and $(r - 1)A > 0$. "
            r"Because $D$ falls on $(0, 1)$ and rises on $(1, \infty)$, that is the same as $r > u_\delta$ "
            r"with $A > 0$ or $r < l_\delta$ with $A < 0$: PPO's ratio clip with bounds $l_\delta$, "
            r"$u_\delta$."
        )
    return markdown_text(step.explanation)


def lecture_markdown(
    name: str,
    label: str,
    steps: Sequence[Step],
    results: Sequence[CheckResult],
    delta: float,
    rows: Sequence[dict],
    closed_forms: str,
) -> str:
    """Every step, its check and the numbers at δ as one Markdown document ($…$ and $$…$$ maths)."""
    out = [
        f"# The proof: {label} ({name})",
        "",
        rf"Clip bounds of $D(r) = {sp.latex(measure_expression(name))}$, derived by SymPy; every step is "
        "checked, and each check says whether it is symbolic or numeric.",
        "",
    ]
    for i, (step, result) in enumerate(zip(steps, results), start=1):
        verdict = "passed" if bool(result.passed) else "FAILED"
        out += [
            f"## {i}. {step_title(step)}",
            "",
            step_prose(step, name),
            "",
            "$$",
            rf"\begin{{gathered}}{step.latex}\end{{gathered}}",
            "$$",
            "",
            f"**Check {verdict} ({check_kind(result)}).** {check_sentence(result)}",
            "",
        ]
    out += [f"## The numbers at δ = {delta:.12g}", ""]
    if rows:
        columns = list(rows[0])
        out += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        out += ["| " + " | ".join(str(row[c]) for c in columns) + " |" for row in rows]
        out += ["", "$$", closed_forms, "$$", ""]
    return "\n".join(out)


def closed_form_latex(expr: sp.Expr) -> str:
    """A closed form as the steps print it: SymPy's bare W is written W_0, the branch the roots step names."""
    return statement_latex(expr)


# ------------------------------------------------------------------------------------ formulas that fit
# tried in this order: a row is cut before the last of the first kind that leaves a head that fits
_BREAK_AT = (r"\iff", r"\vee", "=", r"\quad", " + ", " - ")
_WIDE = re.compile(r"\\(?:left|right|middle|bigl|bigr|Bigl|Bigr|substack|mathrm|operatorname)\b|[{}]|\\[,;! ]")


def _visible_length(tex: str) -> int:
    """About how many glyphs a row of TeX draws: a command counts as one, braces and sizing as none."""
    return len(re.sub(r"\\[A-Za-z]+", "x", _WIDE.sub("", tex)).replace(" ", ""))


def _top_level_cuts(row: str, token: str) -> list[int]:
    """Offsets of `token` in `row` outside every brace and \\left…\\right pair."""
    cuts, depth, i = [], 0, 0
    while i < len(row):
        if row.startswith(r"\left", i) or row[i] == "{":
            depth += 1
        elif row.startswith(r"\right", i) or row[i] == "}":
            depth -= 1
        elif depth == 0 and row.startswith(token, i) and i > 0:
            after = row[i + len(token) : i + len(token) + 1]
            if not (token[0] == "\\" and after.isalpha()):  # \iff, not \iffoo
                cuts.append(i)
        i += 1
    return cuts


def wrap_rows(latex: str, width: int = 38) -> str:
    """`latex` (rows split by \\\\, for a gathered block) with every row longer than about `width` glyphs cut
    before a top-level ⟺, ∨, = or \\quad, the row's first half kept as long as fits. KaTeX does not break a
    display formula, and a row wider than the column is cut at its edge (issue 34: the theorem's gradient half
    was never seen)."""
    out = []
    for row in (r.strip() for r in latex.split(r"\\")):
        while _visible_length(row) > width:
            cut = None
            for token in _BREAK_AT:
                fits = [c for c in _top_level_cuts(row, token) if 4 <= _visible_length(row[:c]) <= width]
                cut = cut or (fits[-1] if fits else None)
                if cut:
                    break
            if cut is None:  # nothing fits: take the first top-level break at all
                every = sorted(c for token in _BREAK_AT for c in _top_level_cuts(row, token))
                cut = every[0] if every else None
            if cut is None:
                break
            head, row = row[:cut].strip(), row[cut:].strip()
            out.append(head)
            if row.startswith(r"\quad"):
                row = row[len(r"\quad") :].strip()
        out.append(row)
    return r" \\ ".join(out)


# ------------------------------------------------------------------------------------ the sign of A
SIGN_TITLE = "The sign of A: which bound binds"
_TITLES[SIGN_TITLE] = "The sign of $A$: which bound binds"


def sign_prose(name: str, lo: float, hi: float) -> str:
    label = "KL3" if name == "kl3" else f"`{name}`"
    return (
        r"Write the loss as $\max(-A\,r,\ -A\,\mathrm{clip}(r, l_\delta, u_\delta))$ and split it by the sign of "
        r"the advantage (docs/theory.md §1.1). For $A > 0$ only the upper bound can bind: above "
        rf"$u_\delta = {hi:.4f}$ the surrogate is flat and the gradient is zero; a token below $l_\delta$ "
        r"keeps its gradient and is pushed back up. For $A < 0$ only the lower bound binds, below "
        rf"$l_\delta = {lo:.4f}$, and verl's dual clip $c$ also stops a token whose ratio exploded past $c$. "
        rf"**The equivalence theorem:** {label} at $\delta$ and ratio clipping at $[l_\delta, u_\delta]$ give the "
        r"same loss and the same gradient, token by token; the figure draws both, and they are one curve."
    )


_THEOREM = (
    r"\max\bigl(-A\,r,\; -A\,\mathrm{clip}_{D \le \delta}(r)\bigr) = "
    r"\max\bigl(-A\,r,\; -A\,\mathrm{clip}(r, l_\delta, u_\delta)\bigr) \quad \text{and the same }"
    r"\nabla_{\log\pi} \text{ for every } (r, A)"
)


def sign_step(name: str, delta: float) -> Step:
    """The lecture's step after the gradient rule: the case split by the sign of A and the equivalence theorem,
    checked at this δ by theory's own loss (`divclip.app.sign_of_a.equivalence_check`)."""
    lo, hi = theory.get_measure(name).bounds(delta)
    statement = sp.Eq(sp.Symbol("loss_D"), sp.Symbol("loss_ratio"))
    return Step(
        SIGN_TITLE, sign_prose(name, lo, hi), statement, _THEOREM, lambda _statement: equivalence_check(name, delta)
    )


def sign_table(lo: float, hi: float, c: float = DUAL_CLIP_C) -> str:
    """docs/theory.md §1.1's table with this δ's bounds filled in (markdown)."""
    u, ell = f"u_\\delta = {hi:.4f}", f"l_\\delta = {lo:.4f}"
    return "\n".join(
        [
            "| advantage | loss | gradient is zero (clipped) when | the clip that acts | otherwise |",
            "|---|---|---|---|---|",
            rf"| $A > 0$ | $-A\min(r, u_\delta)$ for $r \ge l_\delta$, "
            rf"$-A\,r$ below | ${{r > {u}}}$ | upper bound only "
            r"| $-A\,r\,\nabla\log\pi$ |",
            rf"| $A < 0$ | $-A\max(r, l_\delta)$ for $r \le u_\delta$, $-A\,r$ above | ${{r < {ell}}}$; with the dual "
            rf"clip also $r > c = {c:g}$ | lower bound (and $c$) | $-A\,r\,\nabla\log\pi$ |",
            r"| $A = 0$ | $0$ | always (nothing to learn) | none | — |",
        ]
    )


# ------------------------------------------------------------------------------------ prediction questions
def _moves(name: str, delta: float) -> tuple[float, float]:
    """How far l_δ and u_δ move when δ grows by 10 % (theory's bounds)."""
    m = theory.get_measure(name)
    (l0, u0), (l1, u1) = m.bounds(delta), m.bounds(1.1 * delta)
    return l0 - l1, u1 - u0


def step_question(title: str, name: str, delta: float) -> tuple[str, str]:
    """(the question to ask before moving δ, its answer with theory's numbers at this δ) for one step."""
    m = theory.get_measure(name)
    lo, hi = m.bounds(delta)
    d_lo, d_hi = _moves(name, delta)
    more = "u_δ" if d_hi > d_lo else "l_δ"
    moves = (
        f"**{more}**: raising δ by 10 % moves l_δ down by {d_lo:.3g} and u_δ up by {d_hi:.3g}, "
        f"so {more} moves {max(d_lo, d_hi) / max(min(d_lo, d_hi), 1e-300):.3g} times as far."
    )
    if title == "Definition and non-negativity":
        l2, u2 = m.bounds(2 * delta)
        return (
            "Before you move δ: if you double it, do the roots move away from 1 or towards it?",
            f"**Away**: D ≥ 0 rises on both sides of its minimum, so a larger budget reaches further. At "
            f"δ = {delta:.4g} the interval is [{lo:.4f}, {hi:.4f}], at 2δ it is [{l2:.4f}, {u2:.4f}].",
        )
    if title.startswith("Minimum at r = 1"):
        if "kink" in title:
            return (
                "Near δ = 0, does the clip's width grow like δ or like √δ?",
                f"**Like δ**: D has a corner at 1 and rises linearly, so the roots are 1 ± (slope)·δ + …. "
                f"Width at this δ: {hi - lo:.4g}.",
            )
        return (
            "Near δ = 0, does the clip's width grow like δ or like √δ?",
            f"**Like √δ**: D is quadratic at its minimum, D ≈ D″(1)(r − 1)²/2, so |r − 1| ≈ √(2δ/D″(1)). "
            f"Width at this δ: {hi - lo:.4g}; √(2δ)·2 = {2 * math.sqrt(2 * delta):.4g}.",
        )
    if title == "Lambert-W form of D = δ":
        return (
            "For δ > 0 the line e^(−(1+δ)) lies below r·e^(−r)'s peak 1/e. How many r solve r·e^(−r) = e^(−(1+δ))?",
            f"**Two**: r·e^(−r) rises on (0, 1) to 1/e at r = 1 and falls after it, so a level below 1/e is "
            f"crossed once on each side: r = {lo:.6f} and r = {hi:.6f}.",
        )
    if title == "Roots of D(r) = δ":
        l_small, u_small = m.bounds(1e-6)
        return (
            "Let δ shrink to 0. Where do the two roots go"
            + (", and where do the two branches of W meet?" if name == "kl3" else "?"),
            (
                "**Both to 1**: −e^(−1−δ) tends to −1/e, the branch point where W₀ = W₋₁ = −1."
                if name == "kl3"
                else "**Both to 1**: D(1) = 0 is the only zero of D."
            )
            + f" At δ = 1e-6 the roots are {l_small:.6f} and {u_small:.6f}; at this δ, {lo:.6f} and {hi:.6f}.",
        )
    if title == "Asymmetry ε_high − ε_low":
        return ("Before you move δ: which bound moves more, l_δ or u_δ?", moves)
    if title == "Bracketing l < 1 < u":
        d0 = float(m.value(1e-300))
        answer = (
            "**No**: D(r) → ∞ as r → 0, so D = δ always has a root below 1."
            if not math.isfinite(d0)
            else f"**Yes**, once δ ≥ D(0+) = {d0:.4g}: then no ratio below 1 breaks the budget and l_δ = 0."
        )
        return ("Can the lower bound l_δ ever reach 0?", answer)
    if title.startswith("Series of the roots"):
        return (
            "Does the series get better or worse as δ grows?",
            "**Worse**: the first power it leaves out grows with δ; the right panel shows the distance "
            "rising along δ, by the slope of that power on log axes.",
        )
    if title == "Gradient rule = ratio clipping on [l, u]":
        return (
            "A token with A > 0 sits at r < l_δ, outside the budget. Is its gradient zero?",
            "**No**: it moved against its advantage, (r − 1)·A < 0, so it keeps its gradient −A·r·∇log π, "
            "which pulls it back towards 1. Only a token that broke the budget in A's direction is clipped.",
        )
    if title == SIGN_TITLE:
        return (
            "For A < 0, which bound binds: l_δ or u_δ?",
            f"**Only l_δ = {lo:.4f}** (and the dual clip c): for A < 0 the surrogate is flat below l_δ, while "
            f"a token above u_δ = {hi:.4f} keeps its gradient, which pulls its probability back down.",
        )
    return (
        "How many digits of the 30-digit closed form does theory's float64 bound get right?",
        "**About 15 to 16**, float64's precision: see |float64 − closed form| in the table.",
    )
