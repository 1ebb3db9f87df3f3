"""docs/theory.md's reference tables are right to every printed digit.

Each table row is recomputed here from the measure's definition alone, with mpmath at 50 significant digits:
the bounds are the roots of D(r[, p]) = δ found by bisection on (0, 1) and on (1, ∞) (D decreases below 1 and
increases above; lo = 0 where D(0+) <= δ), never from divclip's closed forms. Every printed number must equal
that value rounded to the printed number of decimals, and divclip's float bounds must agree with it.

`python tests/docs/test_theory_doc.py` prints the tables as they belong in the doc.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import mpmath as mp
import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "theory.md"
DECIMALS = 10
mp.mp.dps = 50


# ------------------------------------------------------------------------- references (mpmath only)
def _definition(name: str, p):
    """D(r) for one measure, written from its formula in docs/theory.md §3, in mpmath."""
    log, sqrt = mp.log, mp.sqrt
    return {
        "ratio": lambda r: abs(r - 1),
        "log_ratio": lambda r: abs(log(r)),
        "k2": lambda r: log(r) ** 2 / 2,
        "kl3": lambda r: r - 1 - log(r),
        "kl3_reverse": lambda r: 1 / r - 1 + log(r),
        "binary_kl": lambda r: p * log(1 / r) + (1 - p) * log((1 - p) / (1 - r * p)),
        "binary_tv": lambda r: abs(p * (r - 1)),
        "chi2": lambda r: (r - 1) ** 2,
        "hellinger": lambda r: (sqrt(r) - 1) ** 2,
    }[name]


def _bisect(f, a, b, steps: int = 200):
    """The root of the increasing-or-decreasing f on (a, b), f(a) and f(b) of opposite signs (not evaluated)."""
    rising = f((a + b) / 2) > f(a + (b - a) / 4)
    for _ in range(steps):  # 2**-200 of the bracket: far below 50 digits
        mid = (a + b) / 2
        if (f(mid) > 0) == rising:
            b = mid
        else:
            a = mid
    return (a + b) / 2


def reference_interval(name: str, delta, p=None) -> tuple[mp.mpf, mp.mpf]:
    """(lo, hi) = the roots of D(r) = δ below and above 1, at 50 digits; lo = 0 where D(0+) <= δ."""
    delta = mp.mpf(delta)
    p = None if p is None else mp.mpf(p)
    D = _definition(name, p)
    g = lambda r: D(r) - delta  # noqa: E731
    tiny = mp.mpf(10) ** -45
    try:
        at_zero = D(tiny / 10**20)  # D(0+), for measures whose D stays finite at 0
    except (ZeroDivisionError, ValueError):
        at_zero = mp.inf
    lo = mp.mpf(0) if at_zero <= delta else _bisect(g, tiny / 10**20, mp.mpf(1))
    top = 1 / p - tiny if name == "binary_kl" else mp.mpf(2)  # binary KL: D -> inf as r -> 1/p
    while name != "binary_kl" and g(top) <= 0:
        top *= 2
    hi = _bisect(g, mp.mpf(1), top)
    assert abs(g(hi)) < mp.mpf(10) ** -40 and (lo == 0 or abs(g(lo)) < mp.mpf(10) ** -40)
    return lo, hi


def rounded(x, decimals: int = DECIMALS) -> str:
    """x rounded half-even to `decimals` places, as printed in the doc."""
    exact = Decimal(mp.nstr(x, 45, strip_zeros=False))
    return format(exact.quantize(Decimal(1).scaleb(-decimals), ROUND_HALF_EVEN), "f")


# --------------------------------------------------------------------------------- the doc's tables
def _table(marker: str) -> list[list[str]]:
    """The rows (cells, stripped) of the markdown table right after `<!-- reference-table: marker -->`."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"<!-- reference-table: {marker} -->")
    lines = text[start:].splitlines()[1:]
    rows = []
    for line in lines:
        if not line.startswith("|"):
            if rows:
                break
            continue
        rows.append([c.strip().strip("`") for c in line.strip().strip("|").split("|")])
    assert len(rows) > 2 and set(rows[1][0]) <= set("-: "), f"no table after the {marker} marker"
    return rows[2:]


_EXACT_DELTA = re.compile(r"^([\d.]+) \(= (−?[\d.]+) − log ([\d.]+)\)$")


def _delta(cell: str):
    """(δ at 50 digits, digits printed): a plain number, or 'x.xxx (= a − log b)' meaning exactly a − log b."""
    m = _EXACT_DELTA.match(cell)
    if m:
        exact = mp.mpf(m.group(2).replace("−", "-")) - mp.log(mp.mpf(m.group(3)))
        return exact, m.group(1)
    return mp.mpf(cell), None


def _decimals(cell: str) -> int:
    return len(cell.partition(".")[2])


KL3_ROWS = _table("kl3") if DOC.exists() else []  # a missing doc fails the coverage test below
MEASURE_ROWS = _table("measures") if DOC.exists() else []


def test_the_tables_cover_what_the_doc_promises():
    from divclip.theory import MEASURES

    assert DOC.exists() and len(KL3_ROWS) >= 5
    assert {row[0] for row in MEASURE_ROWS} == set(MEASURES)
    for row in KL3_ROWS + MEASURE_ROWS:
        numbers = [c for c in row if re.fullmatch(r"-?\d+\.\d+", c)]
        assert all(_decimals(c) == DECIMALS for c in numbers[-2:]), row


@pytest.mark.parametrize("row", KL3_ROWS, ids=[r[0] for r in KL3_ROWS])
def test_kl3_table_every_digit(row):
    delta, printed_delta = _delta(row[0])
    if printed_delta is not None:
        assert printed_delta == rounded(delta, _decimals(printed_delta))
    lo, hi = reference_interval("kl3", delta)
    # the closed form of §2 is a different route to the same numbers
    w_lo = -mp.lambertw(-mp.exp(-1 - delta), 0).real
    w_hi = -mp.lambertw(-mp.exp(-1 - delta), -1).real
    assert abs(w_lo - lo) < mp.mpf(10) ** -40 and abs(w_hi - hi) < mp.mpf(10) ** -40
    expected = [
        rounded(lo, _decimals(row[1])),
        rounded(hi, _decimals(row[2])),
        rounded(1 - lo, _decimals(row[3])),
        rounded(hi - 1, _decimals(row[4])),
    ]
    assert row[1:5] == expected


@pytest.mark.parametrize("row", MEASURE_ROWS, ids=[f"{r[0]}-{r[1]}-{r[2]}" for r in MEASURE_ROWS])
def test_measures_table_every_digit_and_the_code_agrees(row):
    from divclip.theory import get_measure

    name, delta_cell, p_cell, lo_cell, hi_cell = row[:5]
    delta, _ = _delta(delta_cell)
    p = None if p_cell in ("", "—") else mp.mpf(p_cell)
    lo, hi = reference_interval(name, delta, p)
    assert [lo_cell, hi_cell] == [rounded(lo, _decimals(lo_cell)), rounded(hi, _decimals(hi_cell))]
    code_lo, code_hi = get_measure(name).bounds(float(delta), None if p is None else float(p))
    assert code_lo == pytest.approx(float(lo), rel=1e-12, abs=1e-15)
    assert code_hi == pytest.approx(float(hi), rel=1e-12)


def test_kl3_series_of_section_2():
    """u, l = 1 ± s + s²/3 ± s³/36 − s⁴/270 ± s⁵/4320 + O(s⁶), s = √(2δ): the error shrinks like s⁶."""
    for delta in ("1e-4", "1e-6"):
        lo, hi = reference_interval("kl3", delta)
        s = mp.sqrt(2 * mp.mpf(delta))
        series = lambda t: 1 + t + t**2 / 3 + t**3 / 36 - t**4 / 270 + t**5 / 4320  # noqa: E731
        assert abs(series(s) - hi) < s**6 and abs(series(-s) - lo) < s**6


def test_the_reference_is_not_fooled_by_a_wrong_digit():
    """The comparison is exact: one unit in the last printed place off is caught."""
    lo, _ = reference_interval("kl3", "0.02")
    good = rounded(lo)
    bad = str(Decimal(good) + Decimal(1).scaleb(-DECIMALS))
    assert good == "0.8131051152" and bad != rounded(lo)


if __name__ == "__main__":  # print the tables as they belong in docs/theory.md
    deltas = ["0.01", "0.02", "(= −0.2 − log 0.8)", "(= 0.28 − log 1.28)", "0.05", "0.1", "0.2"]
    print("| δ | l_δ | u_δ | ε_low = 1 − l_δ | ε_high = u_δ − 1 |\n|---|---|---|---|---|")
    for cell in deltas:
        if cell.startswith("("):
            a, b = re.match(r"\(= (−?[\d.]+) − log ([\d.]+)\)", cell).groups()
            d = mp.mpf(a.replace("−", "-")) - mp.log(mp.mpf(b))
            cell = f"{rounded(d)} {cell}"
        else:
            d = mp.mpf(cell)
        lo, hi = reference_interval("kl3", d)
        print(f"| {cell} | {rounded(lo)} | {rounded(hi)} | {rounded(1 - lo)} | {rounded(hi - 1)} |")
    print("\n| measure | δ | p | lo | hi |\n|---|---|---|---|---|")
    for name, d, ps in [
        ("ratio", "0.2", [None]),
        ("log_ratio", "0.02", [None]),
        ("k2", "0.02", [None]),
        ("kl3", "0.02", [None]),
        ("kl3_reverse", "0.02", [None]),
        ("binary_kl", "0.02", ["0.01", "0.5", "0.99"]),
        ("binary_tv", "0.02", ["0.01", "0.5", "0.99"]),
        ("chi2", "0.02", [None]),
        ("chi2", "1.5", [None]),
        ("hellinger", "0.02", [None]),
    ]:
        for p in ps:
            lo, hi = reference_interval(name, d, p)
            print(f"| {name} | {d} | {p or '—'} | {rounded(lo)} | {rounded(hi)} |")
