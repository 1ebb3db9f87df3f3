"""Formulas built to run away: power towers, overflowing constants and slow symbolic work are refused with a
message, at parse time or by the deadline on the LaTeX step, never by hanging."""

import threading

import pytest

import divclip.theory.formula as formula
from divclip.theory import measure_from_formula
from divclip.theory.formula import MAX_EXPONENT, parse_formula, with_deadline

RUNAWAYS = [
    ("(r-1)**2+0**9**9**9", r"the exponent '9 \*\* 9' = 3.8742e\+08 is too large: constant exponents are limited"),
    ("(r-1)**2*2**2**2**2**2", r"the exponent '2 \*\* 2 \*\* 2 \*\* 2' = 65536 is too large"),
    ("(r-1)**2 + 0**(-1000)", r"the exponent '-1000' = -1000 is too large"),
    ("(r-1)**2 + (99**99)**99*0", r"its constant part '\(99 \*\* 99\) \*\* 99' is not a finite number"),
    ("exp(exp(exp(exp(100))))*0 + (r-1)**2", r"its constant part 'exp\(exp\(100\)\)' is not a finite number"),
    ("log(0)*0 + (r-1)**2", r"its constant part 'log\(0\)' is not a finite number \(it evaluates to -inf\)"),
    ("(r-1)**2 + 1e308*10*0", r"its constant part '1e\+308 \* 10' is not a finite number"),
]


@pytest.mark.parametrize("text, message", RUNAWAYS, ids=[t for t, _ in RUNAWAYS])
def test_runaway_formulas_are_refused_at_parse_time(text, message):
    with pytest.raises(ValueError, match=message):
        parse_formula(text)  # the parser refuses: no big-number work is ever started
    with pytest.raises(ValueError, match=message):
        measure_from_formula(text)


def test_exponents_up_to_the_limit_still_work():
    assert parse_formula(f"r**{MAX_EXPONENT}")[0](2.0, None) == 2.0**MAX_EXPONENT
    m = measure_from_formula("(r-1)**2 * 2**2**2**2")  # exponent 2**2**2 = 16, value 65536
    assert m.latex == r"2^{2^{2^{2}}} \left(r - 1\right)^{2}"
    assert m.value(2.0) == pytest.approx(65536.0)


def test_the_latex_step_has_a_deadline(monkeypatch):
    release, finished = threading.Event(), threading.Event()

    def slow(expr):  # symbolic work that outlives the deadline
        release.wait(30)
        finished.set()
        return "never"

    monkeypatch.setattr(formula, "SYMBOLIC_DEADLINE_S", 0.2)
    monkeypatch.setattr(formula.sp, "latex", slow)
    with pytest.raises(ValueError, match=r"rendering formula '\(r-1\)\*\*2' as LaTeX took longer than 0.2 s: refused"):
        measure_from_formula("(r-1)**2")
    assert not finished.is_set()  # the caller was answered while the work was still running
    release.set()


def test_with_deadline_passes_results_and_errors_through():
    assert with_deadline(len, "abc", what="x") == 3
    with pytest.raises(ZeroDivisionError):
        with_deadline(lambda x: 1 / x, 0, what="x")
