"""What a clip setting means as a divergence budget under every registered measure (docs/theory.md §2, §3).

For a ratio clip [1 - ε_low, 1 + ε_high] and a measure D, the budget whose lower bound is 1 - ε_low is
δ = D(1 - ε_low) (`theory.delta_for_eps`), and that δ's upper bound gives the ε_high the measure implies; the
same the other way round from ε_high. Example: ε_low = 0.2 is KL3 δ = 0.023144, which implies ε_high = 0.2308
(DAPO tunes 0.28). p-dependent measures (binary KL/TV) answer per token, so their rows are given at a few
old-token probabilities p. Nothing here computes a bound itself: every number comes from `theory`.
"""

from __future__ import annotations

import numpy as np

from divclip.theory import MEASURES, delta_for_eps, equivalent_ratio_clip, get_measure

REFERENCE_P = (0.01, 0.1, 0.5, 0.9)  # old-token probabilities at which p-dependent measures are tabulated


def equivalent_budgets(eps_low: float | None, eps_high: float | None, p_grid=REFERENCE_P) -> list[dict]:
    """One row per measure (per p for p-dependent ones): the δ matching each ε, and the other ε it implies."""
    rows = []
    with np.errstate(all="ignore"):  # extreme widths overflow D(r) to inf: reported as a problem, not a warning
        for m in MEASURES.values():
            for p in p_grid if m.p_dependent else (None,):
                rows.append(_row(m.name, eps_low, eps_high, p))
    return rows


def _row(name: str, eps_low, eps_high, p) -> dict:
    row = {
        "measure": name,
        "p": p,
        "delta_from_eps_low": None,
        "implied_eps_high": None,
        "delta_from_eps_high": None,
        "implied_eps_low": None,
        "problems": [],
    }
    # Each given width fixes δ on its own side; the interval at that δ implies the other side's width.
    for side, other, eps, other_index in (("low", "high", eps_low, 1), ("high", "low", eps_high, 0)):
        if eps is None:
            continue
        try:
            d = delta_for_eps(name, p=p, **{f"eps_{side}": eps})
            row[f"delta_from_eps_{side}"] = d
            row[f"implied_eps_{other}"] = equivalent_ratio_clip(name, d, p)[other_index]
        except ValueError as exc:
            row["problems"].append(str(exc))
    return row


def divergence_intervals(measure: str, delta_low: float, delta_high: float, p_grid=REFERENCE_P) -> list[dict]:
    """Per-token ratio intervals of a p-dependent budget (verl dppo_*: δ_low sets lo, δ_high sets hi)."""
    m = get_measure(measure)
    rows = []
    for p in p_grid if m.p_dependent else (None,):
        lo = m.bounds(delta_low, p)[0]
        hi = m.bounds(delta_high, p)[1]
        rows.append({"measure": m.name, "p": p, "lo": lo, "hi": hi, "eps_low": 1.0 - lo, "eps_high": hi - 1.0})
    return rows


def implied_eps_high(measure: str, eps_low: float) -> float | None:
    """ε_high that a p-independent `measure` pairs with `eps_low` (None where no budget matches)."""
    try:
        return equivalent_ratio_clip(measure, delta_for_eps(measure, eps_low=eps_low))[1]
    except ValueError:
        return None
