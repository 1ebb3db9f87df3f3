"""Every "looser above/below" said of a measure, in the docs or in a measure's own description, agrees with the
sign of ε_high − ε_low that divclip computes (docs/theory.md §3 once said `kl3_reverse` is looser below; its
upper side is the looser one, ε_high − ε_low ≈ 8δ/3)."""

import re
from pathlib import Path

import pytest

from divclip.theory import MEASURES

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CLAIM = re.compile(r"looser (above|below)")
DELTAS = (1e-3, 0.02, 0.5)


def _side(name: str) -> str:
    """'above' or 'below': where the measure's clip interval is wider, at every δ in DELTAS (both must agree)."""
    signs = set()
    for d in DELTAS:
        lo, hi = MEASURES[name].bounds(d)
        signs.add("above" if (hi - 1) - (1 - lo) > 0 else "below")
    assert len(signs) == 1, f"{name}: the looser side changes with δ"
    return signs.pop()


def _doc_claims():
    """(file:line, measure, side) for each line that names exactly one measure in backticks and says 'looser X'."""
    out = []
    names = {n for n, m in MEASURES.items() if not m.p_dependent and n != "ratio"}
    for path in DOCS:
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            said = CLAIM.findall(line)
            named = [n for n in names if f"`{n}`" in line]
            if said and len(named) == 1:
                out.append((f"{path.name}:{i}", named[0], said[0]))
    return out


CLAIMS = _doc_claims()


def test_the_scan_finds_the_claims_it_is_meant_to_check():
    assert {m for _, m, _ in CLAIMS} >= {"kl3_reverse", "hellinger"}


@pytest.mark.parametrize("where, measure, side", CLAIMS, ids=[c[0] for c in CLAIMS])
def test_doc_claims_agree_with_the_computed_bounds(where, measure, side):
    assert side == _side(measure), f"{where} says {measure} is looser {side}"


@pytest.mark.parametrize("name", [n for n, m in MEASURES.items() if CLAIM.search(m.description)])
def test_measure_descriptions_agree_with_the_computed_bounds(name):
    assert CLAIM.search(MEASURES[name].description).group(1) == _side(name)


def test_kl3_reverse_asymmetry_is_8_delta_over_3():
    for d in (1e-4, 1e-3):
        lo, hi = MEASURES["kl3_reverse"].bounds(d)
        assert ((hi - 1) - (1 - lo)) / d == pytest.approx(8 / 3, rel=5 * d)
