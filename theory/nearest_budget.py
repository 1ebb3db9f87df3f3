"""Which divergence budget a method's clip equals, or comes nearest to (docs/theory.md §8).

A method's binding bounds on the atlas's q grid are the top of its A > 0 interval, hi(q), and the bottom of its
A < 0 interval, lo(q) (docs/theory.md §1.1: for A > 0 only hi binds, for A < 0 only lo). A measure D at budget δ
has bounds lo_δ(q), hi_δ(q) (per q where D depends on p). The distance between the two is

    d(δ) = max over q in the grid and over the two binding bounds of |ln b_method(q) − ln b_δ(q)|

with every bound first clamped to [1e-3, 1e3] (a bound beyond that never binds in practice, and lo = 0 or
hi = ∞ become finite), so d = 0.1 means that some bound differs by a factor e^0.1 ≈ 1.105. For each registered
measure δ is fitted to minimise d: over a log grid of δ, plus the exact candidates δ = D(b, q) read off the
method's own bounds (if the method is D at some δ, every candidate is that δ and d = 0 there), then refined by
a bounded 1-D minimisation. A distance below `EQUAL_TOL` counts as equal.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import minimize_scalar

from divclip.theory.measures import MEASURES

CLAMP = (1e-3, 1e3)
EQUAL_TOL = 1e-9
_GRID = np.logspace(-6.0, 1.0, 141)  # δ from 1e-6 to 10


def _log_clamped(x) -> np.ndarray:
    return np.log(np.clip(np.asarray(x, dtype=np.float64), *CLAMP))


def _measure_bounds(measure, deltas: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of shape (len(deltas), len(q)); NaN rows where the measure refuses a δ."""
    d = deltas[:, None]
    try:
        lo, hi = measure.bounds(d, q[None, :]) if measure.p_dependent else measure.bounds(d)
        return np.broadcast_to(lo, (len(deltas), len(q))), np.broadcast_to(hi, (len(deltas), len(q)))
    except ValueError:  # a custom measure may refuse some δ: take them one at a time
        lo, hi = np.full((len(deltas), len(q)), np.nan), np.full((len(deltas), len(q)), np.nan)
        for i, delta in enumerate(deltas):
            try:
                lo[i], hi[i] = measure.bounds(float(delta), q if measure.p_dependent else None)
            except ValueError:
                pass
        return lo, hi


def _distances(measure, deltas, q, log_lo, log_hi) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(d, d on A > 0's bound, d on A < 0's bound) for every δ in `deltas` (inf where the measure refuses)."""
    lo, hi = _measure_bounds(measure, np.asarray(deltas, dtype=np.float64), q)
    with np.errstate(invalid="ignore"):
        d_hi = np.nanmax(np.where(np.isnan(hi), np.inf, np.abs(_log_clamped(hi) - log_hi)), axis=1)
        d_lo = np.nanmax(np.where(np.isnan(lo), np.inf, np.abs(_log_clamped(lo) - log_lo)), axis=1)
    return np.maximum(d_hi, d_lo), d_hi, d_lo


def _candidates(measure, q, lo, hi) -> np.ndarray:
    """δ = D(b, q) at each of the method's binding bounds b inside the clamp range."""
    out = []
    for b in (lo, hi):
        ok = (b > CLAMP[0]) & (b < CLAMP[1]) & (b != 1.0)
        if ok.any():
            with np.errstate(all="ignore"):
                v = measure._value(b[ok], q[ok] if measure.p_dependent else None, np)
            out.extend(float(x) for x in np.atleast_1d(v) if np.isfinite(x) and x > 0)
    return np.asarray(out, dtype=np.float64)


def fit_measure(measure, q, lo, hi) -> dict:
    """The δ of `measure` nearest to the binding bounds (lo for A < 0, hi for A > 0) on the grid q."""
    q, lo, hi = (np.asarray(x, dtype=np.float64) for x in (q, lo, hi))
    log_lo, log_hi = _log_clamped(lo), _log_clamped(hi)
    deltas = np.concatenate([_GRID, _candidates(measure, q, lo, hi)])
    d, _, _ = _distances(measure, deltas, q, log_lo, log_hi)
    best = int(np.argmin(d))
    delta, dist = float(deltas[best]), float(d[best])
    if dist > EQUAL_TOL and math.isfinite(dist):  # refine the minimax between the neighbouring grid points
        f = lambda t: float(_distances(measure, np.array([math.exp(t)]), q, log_lo, log_hi)[0][0])  # noqa: E731
        t0 = math.log(delta)
        res = minimize_scalar(f, bounds=(t0 - 0.06, t0 + 0.06), method="bounded", options={"xatol": 1e-10})
        if res.fun < dist:
            delta, dist = math.exp(float(res.x)), float(res.fun)
    _, d_hi, d_lo = _distances(measure, np.array([delta]), q, log_lo, log_hi)
    return {
        "measure": measure.name,
        "delta": delta,
        "distance": dist,
        "distance_A>0": float(d_hi[0]),
        "distance_A<0": float(d_lo[0]),
        "equal": dist <= EQUAL_TOL,
    }


def nearest_budget(intervals: dict | None) -> dict | None:
    """The registered measure and budget δ nearest to a method's intervals (`atlas.atlas_row`'s "intervals":
    q grid, [lo, hi] per q for A > 0 and A < 0), with the distance; None for a method without intervals or
    whose intervals never bind (it keeps every gradient).
    "others" lists the next measures by distance."""
    if intervals is None:
        return None
    q = np.asarray(intervals["q"], dtype=np.float64)
    hi = np.asarray([b for _, b in intervals["A>0"]], dtype=np.float64)
    lo = np.asarray([a for a, _ in intervals["A<0"]], dtype=np.float64)
    if np.all(hi >= CLAMP[1]) and np.all(lo <= CLAMP[0]):
        return None  # it keeps every gradient (CISPO, GPPO): no budget binds
    fits = sorted((fit_measure(m, q, lo, hi) for m in list(MEASURES.values())), key=lambda f: f["distance"])
    best = dict(fits[0])
    best["others"] = [{k: f[k] for k in ("measure", "delta", "distance")} for f in fits[1:4]]
    return best
