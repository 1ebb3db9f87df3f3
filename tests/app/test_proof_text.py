"""The proof page's words: every check of every derivable measure said in plain words and labelled by how it was
checked, theory's own label preferred where it has one; step prose keeps its maths inside $…$."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from apptest_helpers import slow_after

from divclip.app.proof_text import BOTH, NUMERIC, SYMBOLIC, check_kind, check_parts, check_sentence, step_prose
from divclip.theory.symbolic import CheckResult, derivable_measures, derivation


@pytest.fixture(scope="module")
def checked():
    return {name: [(step, step.run_check()) for step in derivation(name)] for name in derivable_measures()}


@pytest.mark.slow  # `checked` runs every check of every measure: seconds of SymPy
def test_every_check_has_plain_words_and_a_kind(checked):
    for name, pairs in checked.items():
        for step, result in pairs:
            parts = check_parts(result)
            assert parts and all(p.kind in (SYMBOLIC, NUMERIC) for p in parts), (name, step.title)
            words = check_sentence(result)
            # plain words: no SymPy code, no raw method string
            assert not re.search(r"simplify\(|LambertW\(|Subs\(|solveset f'|\*\*", words), (name, words)
            kinds = {p.kind for p in parts}
            assert check_kind(result) == (BOTH if len(kinds) == 2 else kinds.pop())


@pytest.mark.slow
def test_numeric_only_checks_say_so(checked):
    """A check settled only by random-δ numbers is labelled numeric, never presented as a symbolic pass."""
    bracket = {name: r for name, pairs in checked.items() for s, r in pairs if s.title.startswith("Bracketing")}
    for name in ("k2", "log_ratio", "kl3_reverse"):
        assert bracket[name].method.startswith("numeric at")  # what theory did
        assert check_kind(bracket[name]) == NUMERIC and "evidence, not a proof" in check_sentence(bracket[name])
    assert check_kind(bracket["chi2"]) == SYMBOLIC  # √δ > 0 by SymPy's sign rules
    kl3 = check_sentence(bracket["kl3"])
    assert check_kind(bracket["kl3"]) == BOTH and "answer False" in kl3 and "rests on the numbers" in kl3


def test_a_failed_numeric_check_is_not_called_symbolic():
    result = CheckResult(
        False, "numeric at 5 random δ (40 digits)", "x < 1: min margin -1e-3 (SymPy assumptions said False)"
    )
    assert check_kind(result) == NUMERIC and "SymPy assumptions said False" not in check_sentence(result)


@dataclass(frozen=True)
class Labelled:
    """A check result carrying theory's own symbolic/numeric label (as theory may add)."""

    passed: bool
    method: str
    detail: str
    kind: str


@pytest.mark.parametrize(
    ("label", "kind"), [("symbolic", SYMBOLIC), ("numeric", BOTH), ("mixed", BOTH), ("symbolic+numeric", BOTH)]
)
def test_theorys_label_joins_the_method_text(label, kind):
    """A symbolic method whose verdict theory labels numeric reads 'both': neither half is hidden."""
    result = Labelled(True, "simplify(lhs - rhs) == 0", "x - (x) -> 0", label)
    assert check_kind(result) == kind


# chi2 first: its derivation is the quickest, and the fast loop runs that one
@pytest.mark.parametrize("name", slow_after(1, sorted(derivable_measures(), key=lambda name: name != "chi2")))
def test_prose_keeps_its_maths_in_dollars(name):
    for step in derivation(name):
        prose = step_prose(step, name)
        assert prose.count("$") % 2 == 0, prose
        outside = re.sub(r"\$[^$]*\$|`[^`]*`", "", prose)
        assert not re.search(r"\\[a-z]|\^|_\{|W_", outside), (step.title, outside)


def test_wrap_rows_cuts_long_rows_at_top_level_relations_only():
    from divclip.app.proof_text import wrap_rows

    row = r"A \left(r - 1\right) > 0 \wedge D > \delta \iff \left(A > 0 \wedge r > u\right) \vee \left(A < 0\right)"
    rows = wrap_rows(row, 20).split(r" \\ ")
    assert rows[0] == r"A \left(r - 1\right) > 0 \wedge D > \delta" and rows[1].startswith(r"\iff")
    assert "".join(rows).replace(" ", "") == row.replace(" ", "")  # nothing lost, nothing added
    assert wrap_rows(r"\left(a = b\right)", 3) == r"\left(a = b\right)"  # never inside a \left…\right pair
    assert wrap_rows("x = 1", 40) == "x = 1"
