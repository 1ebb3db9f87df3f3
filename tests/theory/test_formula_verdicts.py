"""One list of formulas that must be accepted and of formulas that must be refused, each with its reason
(issue: no false refusals). The verdict depends on work (interval boxes), never on the machine's load."""

import time

import numpy as np
import pytest

import divclip.theory.formula as formula_mod
from divclip.theory import measure_from_formula

VALID = [
    "p*(r-1)**2 + (1-p)*log(r)**2",  # D(1) = 0 exactly (log 1 = 0), decided symbolically
    "(r-1)**2/(r+p)",
    "(r-1)**2/p",  # D(1) = 0/p = 0 for every p
    "(r-1)**2 + 1e-12",  # at the documented |D(1)| <= 1e-12 boundary itself
    "(sqrt(r) - 1)**2",
    "r - 1 - log(r)",
    "(r-1)**2/(1+(r-1)**2)",
    "p*(r-1)**2/(r+1)",
    "log(1 + p*(r-1)**2)",
    "abs(r - 1)/2",
]

INVALID = [
    ("log(r)", r"wrong slope on the whole of \(0\.0001, 1\), where D′ must be < 0"),
    ("-(r-1)**2", r"wrong slope on the whole of \(0\.0001, 1\).* and on the whole of \(1, 10000\)"),
    ("(r-1)**2 + 2e-12", r"must satisfy D\(1\) = 0, got D\(1\) = 2e-12"),
    ("r - 1 - log(r) - (r - 1)/1000000", r"D′ changes sign near r = 1\.0000"),
    ("(r-1)**2 - p", r"must satisfy D\(1\) = 0"),
]


@pytest.mark.parametrize("formula", VALID)
def test_valid_formulas_are_accepted(formula):
    m = measure_from_formula(formula)
    args = (0.01, np.array([0.1, 0.3, 0.99])) if m.p_dependent else (0.01,)
    lo, hi = m.bounds(*args)
    assert np.all(np.asarray(lo) < 1) and np.all(np.asarray(hi) > 1)


@pytest.mark.parametrize("formula, reason", INVALID)
def test_invalid_formulas_are_refused_with_their_reason(formula, reason):
    with pytest.raises(ValueError, match=reason):
        measure_from_formula(formula)


def test_the_verdict_counts_boxes_not_seconds(monkeypatch):
    """A slow clock changes nothing: the budget is boxes. (The old 3 s budget refused the first VALID formula
    on a loaded machine and after 3 s of a fake clock.)"""
    real = time.monotonic
    monkeypatch.setattr(time, "monotonic", lambda: real() + 1e6 * (real() % 1))  # a clock jumping ahead
    assert measure_from_formula(VALID[0]).p_dependent
    monkeypatch.setattr(formula_mod, "PROOF_BUDGET_BOXES", 10)
    with pytest.raises(ValueError, match="could not prove within 10 interval boxes"):
        measure_from_formula("p*(r-1)**2/(r+1)")  # needs 546 boxes


def test_huge_integer_literal_is_a_value_error_not_overflow():
    too_large = r"the number 15660115838168849784\.\.\. \(350 digits\) is too large for a float64"
    with pytest.raises(ValueError, match=too_large):
        measure_from_formula("0x" + "f" * 290)
