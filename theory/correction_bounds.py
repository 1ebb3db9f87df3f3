"""Each rollout-correction option as an interval in ρ = π_old/π_rollout (docs/theory.md, "The three policies").

A token option keeps (or leaves untruncated) the tokens whose ρ lies in an interval of the seed theorem: a k3
threshold δ is KL3's [l_δ, u_δ] (Lambert W, `divclip.theory.bounds.kl3_bounds`, through the 'kl3' measure), a k2
threshold is [e^{-√(2δ)}, e^{√(2δ)}] (the 'k2' measure), a k1 band lo_hi is [1/hi, 1/lo] (verl bounds
-log ρ). A sequence option bounds a pooled quantity: seq_mean_k1 the geometric mean of ρ, seq_sum_k1 and the
sequence weight the product Π ρ_t, seq_sum_k2/k3 the sum of the token divergences. For a sequence of L tokens
that all drift by the same ρ these become intervals in ρ that depend on L: Π ρ_t = ρ^L ∈ [c, C] is
ρ ∈ [c^{1/L}, C^{1/L}], and L·k3(ρ) <= δ is ρ ∈ [l_{δ/L}, u_{δ/L}] — the length trap: at fixed thresholds the
interval closes on 1 as answers grow. seq_mean and seq_max options keep the token interval at every L.

AReaL's filter bounds its own statistics (`divclip.theory.correction`): ratio ρ itself, kl_k1 = log ρ (ρ in
[e^lo, e^hi]), kl_k2 as the 'k2' measure, kl_k3 = k3 of 1/ρ (ρ in [1/u_δ, 1/l_δ]); its sum over L tokens divides
the KL bound by L (ratio and kl_k1: the L-th root). A lower bound on kl_k2 or kl_k3 also drops a middle band
around ρ = 1; the interval given is the outer one. M2PO keeps a batch drifting uniformly by ρ where (log ρ)² is
below its threshold τ: ρ in [e^{-√τ}, e^{√τ}] at every L (a batch statistic: in a mixed batch it drops the
largest (log ρ)² first).

OpenRLHF's binary gates bound divclip's binary_kl and binary_tv measures D(ρ, p) with p = π_rollout
(`divclip.theory.measures`): the ρ interval depends on p, so it is given at p = `BINARY_P` (0.5; the measure's
`bounds(δ, p)` gives any other), the same at every L for a token or a sequence mean.
"""

from __future__ import annotations

import math

from divclip.theory.correction import Correction, Filter, Rejection, parse_correction
from divclip.theory.measures import get_measure

__all__ = ["DEFAULT_LENGTHS", "correction_intervals", "filter_interval", "rejection_interval"]

DEFAULT_LENGTHS = (1, 10, 100, 1000)
BINARY_P = 0.5
"""π_rollout at which a binary_kl / binary_tv filter's ρ interval is given (module docstring)."""


def _divergence_interval(estimator: str, delta: float) -> tuple[float, float]:
    """The ρ interval of D(ρ) <= δ for k2 ('k2' measure) or k3 ('kl3' measure: Lambert W)."""
    lo, hi = get_measure("k2" if estimator == "k2" else "kl3").bounds(delta)
    return float(lo), float(hi)


def _root(x: float, length: int) -> float:
    return x ** (1.0 / length) if x > 0 else 0.0


def rejection_interval(r: Rejection, length: int = 1) -> tuple[float, float]:
    """(lo, hi): the per-token ρ, constant over a sequence of `length` tokens, that rule `r` keeps."""
    if r.is_k1:  # verl's k1 statistic is -log ρ: exp(stat) in [lo, hi] is ρ in [1/hi, 1/lo]
        lo, hi = 1.0 / r.upper, 1.0 / r.lower
        return (_root(lo, length), _root(hi, length)) if r.aggregation == "sum" else (lo, hi)
    delta = r.upper / length if r.aggregation == "sum" else r.upper
    return _divergence_interval(r.estimator, delta)


def filter_interval(f: Filter, length: int = 1) -> tuple[float, float]:
    """(lo, hi): the per-token ρ, constant over a sequence of `length` tokens, that AReaL's filter `f` keeps
    (mask) or leaves unclamped (clamp)."""
    pooled = length if f.level == "sequence" and f.agg == "sum" else 1
    if f.metric in ("binary_kl", "binary_tv"):  # D(ρ, p) at p = BINARY_P; the sum over L tokens divides δ by L
        lo, hi = get_measure(f.metric).bounds(f.upper / pooled, BINARY_P)
        return float(lo), float(hi)
    if f.metric == "ratio":  # Π ρ_t = ρ^L at sum, ρ itself at mean (geometric) and max
        lo = 0.0 if f.lower is None else f.lower
        return _root(lo, pooled), _root(f.upper, pooled)
    if f.metric == "kl_k1":  # Σ log ρ_t = L·log ρ in [lower, upper]
        lo = 0.0 if f.lower is None else math.exp(f.lower / pooled)
        return lo, math.exp(f.upper / pooled)
    lo, hi = _divergence_interval("k2" if f.metric == "kl_k2" else "k3", f.upper / pooled)
    return (lo, hi) if f.metric == "kl_k2" else (1.0 / hi, 1.0 / lo)  # AReaL's k3 is of 1/ρ


def _weight_interval(c: Correction, length: int) -> tuple[float, float]:
    lo = 0.0 if c.is_floor is None else c.is_floor
    hi = math.inf if c.is_cap is None else c.is_cap
    if c.is_level == "sequence":
        return _root(lo, length), (math.inf if hi == math.inf else _root(hi, length))
    return lo, hi


def correction_intervals(correction, lengths=DEFAULT_LENGTHS) -> list[dict]:
    """One row per part of `correction` (a Correction or its string): what it bounds, and by length L the
    interval of a constant per-token ρ it keeps ('weight': left untruncated/unmasked) and the whole part's
    interval (for token options the same at every L)."""
    c = parse_correction(correction)
    lengths = tuple(lengths)
    if not lengths or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in lengths):
        raise ValueError(f"lengths must be integers >= 1, got {lengths!r}")
    rows = []
    if c.is_level is not None:
        kind = "truncated to" if c.is_mode == "truncate" else "zeroed outside"
        what = "ρ per token" if c.is_level == "token" else "Π ρ_t over the sequence"
        rows.append(
            {
                "part": f"is={c.is_level}",
                "bounds": f"{what}, {kind} [{c.is_floor or 0:g}, {c.is_cap if c.is_cap is not None else math.inf:g}]",
                "by_length": {n: _weight_interval(c, n) for n in lengths},
            }
        )
    for r in c.rejections:
        pooled = {
            "token": "ρ per token",
            "mean": "the geometric mean of ρ" if r.is_k1 else f"the mean token {r.estimator}",
            "sum": "Π ρ_t" if r.is_k1 else f"the sum of token {r.estimator}",
            "max": f"every token's {r.estimator}",
            "any": "ρ of every token (one out drops the sequence)",
        }[r.aggregation]
        rows.append(
            {
                "part": f"rs={r.option}:{r.threshold}",
                "bounds": pooled,
                "by_length": {n: rejection_interval(r, n) for n in lengths},
            }
        )
    if c.filter is not None:
        f = c.filter
        owner = "AReaL's" if f.areal else "OpenRLHF's"
        at = f" at π_rollout = {BINARY_P:g}" if f.metric in ("binary_kl", "binary_tv") else ""
        if f.level == "token":
            stat = "ρ per token" if f.metric == "ratio" else f"{owner} token {f.metric}{at}"
        elif f.metric == "ratio":
            stat = {"sum": "Π ρ_t", "mean": "the geometric mean of ρ", "max": "the largest ρ_t"}[f.agg]
            stat += " (each token weighted by its own ρ)" if f.seq_weight == "token" else ""
        else:
            stat = f"the {f.agg} of {owner} token {f.metric}{at}"
        band = f"outside [{f.lower:g}, {f.upper:g}]" if f.lower is not None else f"above {f.upper:g}"
        act = "weight 0" if f.action == "mask" else "weight clamped"
        rows.append(
            {
                "part": f"filter={f}",
                "bounds": f"{stat}: {act} {band}",
                "by_length": {n: filter_interval(f, n) for n in lengths},
            }
        )
    if c.m2po is not None:
        edge = math.sqrt(c.m2po)
        rows.append(
            {
                "part": f"m2po={c.m2po:g}",
                "bounds": "the batch's mean (log ρ)² (tokens with the largest dropped first)",
                "by_length": {n: (math.exp(-edge), math.exp(edge)) for n in lengths},
            }
        )
    if c.opsm is not None:  # A < 0 only: mean(log π_rollout - log π_θ) <= δ is a geometric mean of ρ >= e^{-δ}
        rows.append(
            {
                "part": f"opsm={c.opsm:g}",
                "bounds": "the geometric mean of π_θ/π_rollout, for A < 0 only",
                "by_length": {n: (math.exp(-c.opsm), math.inf) for n in lengths},
            }
        )
    return rows
