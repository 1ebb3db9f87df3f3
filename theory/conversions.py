"""Maps between a divergence budget δ and ratio-clip widths (ε_low, ε_high).

Because every registered measure is decreasing below 1 and increasing above, the budget that puts the lower
bound at 1 - ε_low is simply δ = D(1 - ε_low), and the budget that puts the upper bound at 1 + ε_high is
δ = D(1 + ε_high). Example (docs/theory.md §2): KL3 with ε_low = 0.2 needs δ = D(0.8) = -0.2 - log 0.8 = 0.023144,
whose upper bound is u_δ = 1.2308, i.e. ε_high = 0.231 (DAPO tunes 0.28 by hand).
"""

from __future__ import annotations

import math

import numpy as np

from divclip.theory.measures import Measure, get_measure
from divclip.theory.validation import check_eps


def delta_for_eps(measure, eps_low=None, eps_high=None, p=None) -> float:
    """The δ at which `measure`'s lower bound is 1 - eps_low (or its upper bound 1 + eps_high).

    Give exactly one of eps_low / eps_high. For p-dependent measures `p` is required. For the ratio
    measure δ *is* the width, so the answer is the ε you passed.
    """
    m = get_measure(measure)
    if (eps_low is None) == (eps_high is None):
        raise ValueError(
            f"give exactly one of eps_low / eps_high, got eps_low={eps_low!r}, eps_high={eps_high!r}"
        )
    pp = m._check_p(p)
    if eps_low is not None:
        e = check_eps(eps_low, "eps_low")
        if e >= 1:
            raise ValueError(f"eps_low must lie in (0, 1) (a ratio below 0 does not exist), got {eps_low!r}")
        r = 1.0 - e
    else:
        e = check_eps(eps_high, "eps_high")
        r = 1.0 + e
    with np.errstate(divide="ignore", invalid="ignore"):
        d = float(m._value(np.float64(r), pp, np))
    if not (math.isfinite(d) and d > 0):
        hint = f"; at p={float(pp):g} the new probability r·p must stay below 1" if pp is not None else ""
        raise ValueError(
            f"eps_{'low' if eps_low is not None else 'high'}={e!r} gives no finite budget for measure "
            f"{m.name!r}: D({r!r}) = {d!r}{hint}"
        )
    return d


def equivalent_ratio_clip(measure, delta, p=None):
    """(ε_low, ε_high) = (1 - lo, hi - 1) of the clip interval of `measure` at budget δ (and p)."""
    m: Measure = get_measure(measure)
    lo, hi = m.bounds(delta, p)
    return 1.0 - lo, hi - 1.0
