"""The clip intervals the pages show, gathered from `theory` (the app never computes a bound itself).

`clip_intervals` asks theory for each selected measure's interval at the page's δ (ε_low/ε_high for the
ratio clip, p for per-token measures) and keeps what figures, tables and exports need in one record. A
measure that theory refuses at these inputs becomes a message, not an exception.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass

from divclip import theory
from divclip.app.methods import colour_for, label_for, method_for
from divclip.app.state import format_number
from divclip.theory import Measure, get_measure
from divclip.theory.validation import check_eps


@dataclass(frozen=True)
class ClipInterval:
    """One measure's clip interval [lo, hi] at its budget, with how to draw and name it."""

    measure: Measure
    label: str
    method: str
    colour: str
    delta: float | None  # None for the ratio clip, whose budget is (ε_low, ε_high)
    p: float | None  # old-policy probability for per-token measures
    lo: float
    hi: float
    eps_low: float
    eps_high: float

    @property
    def name(self) -> str:
        return self.measure.name

    @property
    def budget_text(self) -> str:
        if self.delta is None:
            return f"ε = {self.eps_low:g} / {self.eps_high:g}"
        return f"δ = {self.delta:.6g}" + (f", p = {self.p:g}" if self.p is not None else "")


def clip_interval(measure: Measure | str, delta: float, eps_low: float, eps_high: float, p: float) -> ClipInterval:
    """theory's interval for one measure; raises theory's ValueError on inputs it refuses."""
    m = get_measure(measure)
    if m.name == "ratio":  # GRPO/DAPO: a budget per side, the widths ε_low and ε_high, [lo(ε_low), hi(ε_high)]
        lo, hi = m.bounds(check_eps(eps_low, "eps_low"))[0], m.bounds(check_eps(eps_high, "eps_high"))[1]
        return ClipInterval(
            m,
            label_for(m.name),
            method_for(m.name, eps_low, eps_high),
            colour_for(m.name, eps_low, eps_high),
            None,
            None,
            lo,
            hi,
            1.0 - lo,
            hi - 1.0,
        )
    pp = p if m.p_dependent else None
    lo, hi = m.bounds(delta, pp)
    e_low, e_high = theory.equivalent_ratio_clip(m, delta, pp)
    return ClipInterval(
        m, label_for(m.name), method_for(m.name, delta=delta), colour_for(m.name), delta, pp, lo, hi, e_low, e_high
    )


def clip_intervals(
    measures: Sequence[Measure | str], delta: float, eps_low: float, eps_high: float, p: float
) -> tuple[list[ClipInterval], list[str]]:
    """Intervals for every measure theory accepts at these inputs, and one message per refusal."""
    out, errors = [], []
    for measure in measures:
        try:
            out.append(clip_interval(measure, delta, eps_low, eps_high, p))
        except ValueError as exc:
            name = measure if isinstance(measure, str) else measure.name
            errors.append(f"{name}: {exc}")
    return out, errors


# ----------------------------------------------------------------------------------- tables
TABLE_COLUMNS = ("method", "measure", "D(r[, p])", "budget", "p", "l", "u", "ε_low", "ε_high", "ε_high − ε_low")


def format_bound(x: float) -> str:
    """How every page prints a bound or an ε: six decimals (theory is exact to ~1e-12)."""
    return f"{x:.6f}"


def format_gap(x: float) -> str:
    """ε_high − ε_low to six significant digits: at a GSPO-size budget it is ~1e-8, which six decimals show as 0."""
    return f"{x:.6g}"


def table_rows(intervals: Sequence[ClipInterval], formatted: bool = True) -> list[dict]:
    """One row per interval; `formatted=False` keeps full floats (for CSV)."""
    fmt = format_bound if formatted else (lambda x: x)
    rows = []
    for iv in intervals:
        rows.append(
            {
                "method": iv.method,
                # a custom measure's name holds its formula, already in the next column (and not markdown-safe)
                "measure": iv.name if iv.name in theory.MEASURES or not formatted else "custom",
                "D(r[, p])": _formula_text(iv, formatted),
                "budget": iv.budget_text if formatted else (_eps_budget(iv) if iv.delta is None else iv.delta),
                "p": ("" if iv.p is None else (f"{iv.p:g}" if formatted else iv.p)),
                "l": fmt(iv.lo),
                "u": fmt(iv.hi),
                "ε_low": fmt(iv.eps_low),
                "ε_high": fmt(iv.eps_high),
                "ε_high − ε_low": format_gap(iv.eps_high - iv.eps_low) if formatted else iv.eps_high - iv.eps_low,
            }
        )
    return rows


def _eps_budget(iv: ClipInterval) -> str:
    """The ratio clip's budget in a download: its two widths, as the screen says them, at full precision."""
    return f"ε = {full_precision(iv.eps_low)} / {full_precision(iv.eps_high)}"


def _formula_text(iv: ClipInterval, formatted: bool) -> str:
    """The measure's formula; the ratio clip is its interval (|r − 1| ≤ ε holds only for a symmetric ε)."""
    if iv.delta is None:
        return f"1 − {iv.eps_low:g} ≤ r ≤ 1 + {iv.eps_high:g}"
    return f"`{iv.measure.code}`" if formatted else iv.measure.code  # st.table renders markdown


def full_precision(x: float) -> str:
    """A float for a download: 12 significant digits, as the trainer settings and links carry them. theory's
    bounds are exact to ~1e-12, and 12 digits keep float noise out: 1 − 0.2 is 0.8, not repr's
    0.7999999999999999, and 0.28 − 0.2 is 0.08, not 0.08000000000000007."""
    return format_number(x)


def table_csv(intervals: Sequence[ClipInterval]) -> str:
    """The table with full-precision numbers (12 significant digits, see `full_precision`) as CSV text."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=TABLE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in table_rows(intervals, formatted=False):
        writer.writerow({k: (full_precision(v) if isinstance(v, float) else v) for k, v in row.items()})
    return buf.getvalue()
