"""The derivation's last step (gradient rule = ratio clipping on [l, u]) is proved exactly where SymPy can.

The proof rests on four facts SymPy settles exactly (D' < 0 on (0, 1) and > 0 on (1, ∞) by solveset,
D(l) = D(u) = δ by simplify, l < 1 < u by sign and Lambert-branch ranges) and a SAT check of the resulting
propositional equivalence; such a check is labelled symbolic. A wrong interval must make it fail.

That each registered measure's gradient step is proved this way (symbolic for kl3, kl3_reverse, ratio,
log_ratio, k2, chi2; numeric, labelled, for hellinger) is asserted in test_symbolic.py
(test_gradient_rule_is_proved_symbolically), on the step results its other tests share rather than a second run.
"""

from __future__ import annotations

import pytest
import sympy as sp

from divclip.theory import symbolic
from divclip.theory.symbolic import DELTA, R

KL3 = R - 1 - sp.log(R)
X = -sp.exp(-1 - DELTA)


def gradient_result(measure: sp.Expr, lower: sp.Expr, upper: sp.Expr):
    return symbolic._gradient_step(measure, lower, upper).run_check()


@pytest.mark.parametrize(
    "lower,upper,needle",
    [
        (1 - sp.sqrt(2 * DELTA), 1 + sp.sqrt(DELTA), "D(u) - δ"),  # upper root of (r-1)²/2 = δ/2, not δ
        (1 - sp.sqrt(DELTA), 1 + sp.sqrt(2 * DELTA), "D(l) - δ"),
        (1 + sp.sqrt(2 * DELTA), 1 - sp.sqrt(2 * DELTA), "is false"),  # the two roots swapped
    ],
)
def test_wrong_interval_fails_exactly(lower, upper, needle) -> None:
    result = gradient_result((R - 1) ** 2 / 2, lower, upper)
    assert not result.passed
    assert result.kind == "symbolic" and needle in result.detail, result.detail


def test_swapped_lambert_branches_fail() -> None:
    result = gradient_result(KL3, -sp.LambertW(X, -1), -sp.LambertW(X))
    assert not result.passed, result.detail


def test_kl3_upper_root_off_by_a_constant_fails() -> None:
    result = gradient_result(KL3, -sp.LambertW(X), -sp.LambertW(X, -1) + sp.Rational(1, 10))
    assert not result.passed, result.detail
