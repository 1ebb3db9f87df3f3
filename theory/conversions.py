"""Maps between a divergence budget δ and ratio-clip widths (ε_low, ε_high).

Because every registered measure is decreasing below 1 and increasing above, the budget that puts the lower
bound at 1 - ε_low is simply δ = D(1 - ε_low), and the budget that puts the upper bound at 1 + ε_high is
δ = D(1 + ε_high). Example (docs/theory.md §2): KL3 with ε_low = 0.2 needs δ = D(0.8) = -0.2 - log 0.8 = 0.023144,
whose upper bound is u_δ = 1.2308, i.e. ε_high = 0.231 (DAPO tunes 0.28 by hand).
"""

from __future__ import annotations

import math

import numpy as np

from divclip.theory.bounds import kl3_roots
from divclip.theory.measures import Measure, get_measure
from divclip.theory.validation import check_delta, check_eps


def _kl3_at(x, mp):
    return x - mp.log1p(x)  # KL3(1 + x) = r - 1 - log r


def _kl3_reverse_at(x, mp):
    return mp.log1p(x) - x / (1 + x)  # KL3-reverse(1 + x) = 1/r - 1 + log r


# D(1 + x) from x itself, without forming r (measures with an exact inverse in `kl3_roots`); `_exact_budget`
# evaluates them in mpmath.
_EXACT_X = {"kl3": _kl3_at, "kl3_reverse": _kl3_reverse_at}


def _exact_budget(name: str, x: float) -> float:
    """D(1 + x), correctly rounded to a float, for the measures in `_EXACT_X`: evaluated in mpmath with 30 digits
    beyond the ones the difference cancels (D ~ x²/2 near 0 loses about 2·|log10 x| digits). In float64 the
    difference of two rounded terms is off by up to ~6 ulps (log1p(x) - x/(1+x) near x = 1, where both terms are
    several times D); a δ that is off moves the bound it was meant to place."""
    import mpmath  # a dependency of sympy; one scalar evaluation per call

    with mpmath.workdps(30 + 2 * max(0, -math.floor(math.log10(abs(x))))):
        return float(_EXACT_X[name](mpmath.mpf(x), mpmath))  # float() rounds to nearest


def delta_for_eps(measure, eps_low=None, eps_high=None, p=None) -> float:
    """The δ at which `measure`'s lower bound is 1 - eps_low (or its upper bound 1 + eps_high).

    Give exactly one of eps_low / eps_high. For p-dependent measures `p` is required. For the ratio
    measure δ *is* the width, so the answer is the ε you passed.
    """
    m = get_measure(measure)
    if (eps_low is None) == (eps_high is None):
        raise ValueError(f"give exactly one of eps_low / eps_high, got eps_low={eps_low!r}, eps_high={eps_high!r}")
    pp = m._check_p(p)
    if eps_low is not None:
        e = check_eps(eps_low, "eps_low")
        if e >= 1:
            raise ValueError(f"eps_low must lie in (0, 1) (a ratio below 0 does not exist), got {eps_low!r}")
        r = 1.0 - e
    else:
        e = check_eps(eps_high, "eps_high")
        r = 1.0 + e
    x = -e if eps_low is not None else e  # r - 1, exactly as given (1 ± ε itself would round ε away)
    with np.errstate(divide="ignore", invalid="ignore"):
        if m.name in _EXACT_X:
            d = _exact_budget(m.name, x)
        else:
            d = float(m._value(np.float64(r), pp, np))
    if not (math.isfinite(d) and d > 0):
        hint = f"; at p={float(pp):g} the new probability r·p must stay below 1" if pp is not None else ""
        raise ValueError(
            f"eps_{'low' if eps_low is not None else 'high'}={e!r} gives no finite budget for measure "
            f"{m.name!r}: D({r!r}) = {d!r}{hint}"
        )
    return d


def equivalent_ratio_clip(measure, delta, p=None):
    """(ε_low, ε_high) = (1 - lo, hi - 1) of the clip interval of `measure` at budget δ (and p).

    For KL3 and KL3-reverse both widths are computed from the roots' own well-conditioned forms, never as
    1 - lo or hi - 1 of rounded bounds, so a width of 1e-15 keeps its full relative precision and the round trip
    with `delta_for_eps` closes to a few ulps (tests/theory/test_kl3_exact.py).
    """
    m: Measure = get_measure(measure)
    if m.name in _EXACT_X:
        m._check_p(p)
        d = check_delta(delta, "delta")
        roots = kl3_roots(d)
        if m.name == "kl3":
            eps = roots.eps_lo, roots.eps_hi
        else:  # [1/u, 1/l]: 1 - 1/u = (u - 1)/u and 1/l - 1 = (1 - l)/l, l = 0 gives inf
            with np.errstate(divide="ignore", invalid="ignore"):
                eps = roots.eps_hi / roots.hi, np.where(roots.lo > 0, roots.eps_lo * roots.inv_lo, np.inf)
        return (float(eps[0]), float(eps[1])) if np.ndim(d) == 0 else eps
    lo, hi = m.bounds(delta, p)
    return 1.0 - lo, hi - 1.0
