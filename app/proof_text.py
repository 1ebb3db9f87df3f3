"""The proof page's words: each derivation step as lecture prose with its maths in $…$ (KaTeX), each check said
in plain words and marked symbolic or numeric, and the whole lecture as one Markdown file.

The statements, their LaTeX and the checks come from `divclip.theory.symbolic`; this module only says them. A
step it has no prose for keeps theory's own explanation, shown literally (nothing is invented for it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import sympy as sp

from divclip.app.page_parts import markdown_text
from divclip.theory.symbolic import CheckResult, Step, measure_expression

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
        return CheckPart(SYMBOLIC, "SymPy found every critical point of D (where D′ = 0) and D's limits at the ends "
                                   "of each interval, and none of these values is negative.")
    if method.startswith("simplify(lhs - rhs)"):
        return CheckPart(SYMBOLIC, "SymPy simplified left side minus right side of each equation to exactly 0.")
    if method == "SymPy sign assumptions":
        which = "the other inequalities" if combined else "the inequality"
        return CheckPart(SYMBOLIC, f"SymPy's sign rules prove {which}: the larger side minus the smaller is "
                                   "positive for every δ > 0.")
    if method == "solveset":
        return CheckPart(SYMBOLIC, "SymPy solved D′(r) < 0 and D′(r) > 0: exactly (0, 1) and (1, ∞), so D falls "
                                   "below r = 1 and rises above it.")
    if method.startswith("numeric at") and "random δ" in method:
        n = _count(r"numeric at (\d+)", method, "several")
        which = "Where SymPy's sign rules could not decide, the inequality" if combined else "The inequality"
        words = (f"{which} holds at {n} random δ between 0.001 and 0.5, computed with {digits}-digit "
                 "arithmetic: evidence, not a proof.")
        if "assumptions said False" in detail:
            words += (" For the W₋₁ bound SymPy 1.14's sign rules even answer False, because they wrongly call W₋₁ "
                      "non-real on (−1/e, 0); that part rests on the numbers.")
        return CheckPart(NUMERIC, words)
    if method.startswith("exact (monotonicity + roots + SAT)"):
        return CheckPart(SYMBOLIC, "Proved exactly: SymPy showed D′ < 0 on (0, 1) and D′ > 0 on (1, ∞), "
                                   "simplified D(l_δ) − δ and D(u_δ) − δ to 0 and proved l_δ < 1 < u_δ for every "
                                   "δ > 0; so D > δ means r < l_δ or r > u_δ, and a SAT solver found no case where "
                                   "the two sides of the ⇔ differ.")
    if method.startswith("numeric set comparison"):
        n = _count(r"over (\d+)", detail, "many")
        bad = _count(r"(\d+) disagreements", detail, "?")
        return CheckPart(NUMERIC, f"Both sides of the ⇔ were evaluated at {n} random (r, A) points: they disagree "
                                  f"at {bad} of them. Evidence, not a proof.")
    if method.startswith("substitute into D"):
        return CheckPart(SYMBOLIC, "SymPy put each series into D and expanded: every coefficient below the "
                                   "truncation order matches δ's, so the series are right to the order stated.")
    if method.startswith("verifier raised"):
        return CheckPart(SYMBOLIC, f"The check could not run: {detail}")
    kind = NUMERIC if "numeric" in method else SYMBOLIC
    return CheckPart(kind, f"{method}.")


def check_parts(result: CheckResult) -> list[CheckPart]:
    """Each way the claim was checked, in plain words (a combined method is split into its halves)."""
    method = result.method
    digits = _count(r"\((\d+) digits\)", method, "40")
    if method.startswith("expand_log + simplify ratio"):
        return [CheckPart(SYMBOLIC, "Taking logs of both equations, SymPy simplified the ratio of the two to a "
                                    "non-zero constant: one holds exactly when the other does."),
                CheckPart(NUMERIC, f"At 5 random (r, δ) on the first equation the second holds to "
                                   f"{digits} digits.")]
    if method.startswith("solve + numeric"):
        hand = "" if "(added by hand): []" in result.detail else " (one root, not returned by solve, added by hand)"
        return [CheckPart(SYMBOLIC, f"sympy.solve returned the roots of D(r) = δ{hand}."),
                CheckPart(NUMERIC, "Each claimed root, evaluated at 5 random δ with "
                                   f"{digits} digits, gives D(root) = δ back and the "
                                   "two roots are distinct.")]
    if method.startswith("root series in δ + numeric limit"):
        return [CheckPart(SYMBOLIC, "From the root series, the difference's leading term is exactly the one stated."),
                CheckPart(NUMERIC, "The closed form minus that term, divided by the next power of δ, stays bounded "
                                   "for δ = 1e-2 … 1e-5 (40-digit arithmetic).")]
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
        return (rf"The measure is $D(r) = {d}$, a function of the probability ratio "
                rf"$r = \pi_\theta(a)/\pi_{{\mathrm{{old}}}}(a)$ alone. It is never negative for $r > 0$: its "
                r"smallest value over the critical points and both ends of $(0, \infty)$ is $0$." + extra)
    if title == "Minimum at r = 1":
        if kl3:
            return (r"$D(1) = 0$ and $D'(1) = 0$, and $D''(r) = 1/r^2 > 0$ everywhere: $D$ is strictly convex, "
                    r"so $r = 1$ (the policy did not move) is its only minimum.")
        return (r"$D(1) = 0$, $D'(1) = 0$ and $D''(1) > 0$: $r = 1$, where the policy did not move, is a strict "
                r"local minimum.")
    if title == "Minimum at r = 1 (a kink)":
        right, left = step.statement.args[1].rhs, step.statement.args[2].rhs
        return (rf"$D(1) = 0$, but $D = {d}$ has a corner at $r = 1$: work on each side. Right of 1 it rises "
                rf"with slope ${sp.latex(right)}$, left of 1 its slope is ${sp.latex(left)}$ (it falls towards "
                r"$r = 1$).")
    if title == "Lambert-W form of D = δ":
        return (r"Exponentiate $r - 1 - \log r = \delta$: it becomes $r e^{-r} = e^{-(1+\delta)}$. With "
                r"$w = -r$ this is $w e^{w} = x$ for $x = -e^{-1-\delta}$, the equation that defines the Lambert "
                r"$W$ function, so the roots are $r = -W(x)$ on its two real branches.")
    if title == "Roots of D(r) = δ":
        lambert = "W_{-1}" in step.explanation
        how = (r"`sympy.solve` returns only the principal branch $W_0$; the second root, on the branch "
               r"$W_{-1}$, is added by hand." if lambert else r"`sympy.solve` returns both of them.")
        return (r"The clip bounds are the two solutions of $D(r) = \delta$: $l_\delta$ below 1 and $u_\delta$ "
                r"above. " + how)
    if title == "Bracketing l < 1 < u":
        if kl3:
            return (r"$x = -e^{-1-\delta}$ lies in $(-1/e, 0)$, where $W_0(x) \in (-1, 0)$ and $W_{-1}(x) < -1$; "
                    r"so $l_\delta = -W_0(x) < 1 < -W_{-1}(x) = u_\delta$.")
        text = (r"One root lies on each side of $r = 1$, so the set $\{r : D(r) \le \delta\}$ is the interval "
                r"$[l_\delta, u_\delta]$.")
        if "δ ≥ 1" in step.explanation:
            text += (r" This holds for $\delta < 1$ (the checks draw $\delta \le 0.5$): for $\delta \ge 1$ there "
                     r"is no lower root and the interval is $(0, u_\delta]$.")
        return text
    if title == "Series of the roots in s = √(2δ)":
        text = (r"$D$ is quadratic at its minimum, so near $\delta = 0$ the bounds move like $\sqrt{\delta}$: "
                r"they are power series in $s = \sqrt{2\delta}$, found by solving $D(r) = \delta$ order by order.")
        if kl3:
            text += r" For KL3: $r = 1 \pm s + \tfrac{s^2}{3} \pm \tfrac{s^3}{36} - \tfrac{s^4}{270} + O(s^5)$."
        return text
    if title == "Series of the roots in δ":
        return (r"At a kink $D$ grows linearly away from 1, so the bounds are power series in $\delta$ itself, "
                r"found by solving $D(r) = \delta$ order by order.")
    if title == "Asymmetry ε_high − ε_low":
        return (r"$\varepsilon_{\mathrm{high}} - \varepsilon_{\mathrm{low}} = (u_\delta - 1) - (1 - l_\delta)$: "
                r"how much looser the upper side is than the lower one. Positive means the measure itself "
                r"derives a clip-higher, where DAPO tunes one by hand.")
    if title == "Gradient rule = ratio clipping on [l, u]":
        return (r"With advantage $A$, a token's gradient is zero exactly when $D(r) > \delta$ and $(r - 1)A > 0$. "
                r"Because $D$ falls on $(0, 1)$ and rises on $(1, \infty)$, that is the same as $r > u_\delta$ "
                r"with $A > 0$ or $r < l_\delta$ with $A < 0$: PPO's ratio clip with bounds $l_\delta$, "
                r"$u_\delta$.")
    return markdown_text(step.explanation)


def lecture_markdown(name: str, label: str, steps: Sequence[Step], results: Sequence[CheckResult],
                     delta: float, rows: Sequence[dict], closed_forms: str) -> str:
    """Every step, its check and the numbers at δ as one Markdown document ($…$ and $$…$$ maths)."""
    out = [f"# The proof: {label} ({name})", "",
           rf"Clip bounds of $D(r) = {sp.latex(measure_expression(name))}$, derived by SymPy; every step is "
           "checked, and each check says whether it is symbolic or numeric.", ""]
    for i, (step, result) in enumerate(zip(steps, results), start=1):
        verdict = "passed" if bool(result.passed) else "FAILED"
        out += [f"## {i}. {step_title(step)}", "", step_prose(step, name), "",
                "$$", rf"\begin{{gathered}}{step.latex}\end{{gathered}}", "$$", "",
                f"**Check {verdict} ({check_kind(result)}).** {check_sentence(result)}", ""]
    out += [f"## The numbers at δ = {delta:.12g}", ""]
    if rows:
        columns = list(rows[0])
        out += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        out += ["| " + " | ".join(str(row[c]) for c in columns) + " |" for row in rows]
        out += ["", "$$", closed_forms, "$$", ""]
    return "\n".join(out)
