"""Where probability mass can move, and where the clipped update moves it, on a small categorical policy.

For π_old = p over K actions and a clip spec whose per-action ratio interval is [lo(p), hi(p)] (the measure's
bounds; by the gradient-equivalence theorem D <= δ is exactly this interval, docs/theory.md §1), the new probability
of action a is confined to

    q(a) ∈ [lo(p_a)·p_a, min(1, hi(p_a)·p_a)],   Σ_a q(a) = 1.

By the sign of A:
* A > 0: the action may gain `room_up = min(1, hi·p) - p`. For a p-independent measure (ratio, KL3) that is
  (hi - 1)·p until hi·p reaches 1: confident actions can gain more *absolute* mass, rare ones almost none.
  Binary KL gives rare tokens a wide ratio range, room_up ≈ sqrt(2δ·p(1-p)), so it favours small p instead.
* A < 0: the action may give up `room_down = (1 - lo)·p`, again proportional to p when lo is p-independent.
The simplex couples the two: what the positive actions gain, the others must give up. The box is what the
measure allows as a trust region; per-token PPO clipping does not enforce it (a clipped token loses only its
own gradient and the softmax still moves it), which `divclip.theory.softmax_dynamics` makes visible.

`constrained_optimum` solves the one-step trust-region problem max Σ q·A over that box and simplex exactly
(a fractional knapsack with unit weights: fill the largest advantages first). This module is numpy/scipy only;
`divclip.theory.comparison.compare_measures` puts the feasible region, the optimum and the softmax-logit
dynamics of `divclip.theory.softmax_dynamics` (torch) side by side.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from scipy.special import xlogy

from divclip.theory.measures import get_measure
from divclip.theory.spec import AllOf, ClipSpec, as_spec, is_adaptive, method_string, spec_label
from divclip.theory.validation import as_float_array, require_finite

PROB_SUM_TOL = 1e-6  # how far Σ probs may be from 1 before we refuse (then it is renormalised exactly)
MAX_ACTIONS = 256
"""Most actions of a categorical policy here (the exact LP has K² flow variables)."""
MAX_ABS_ADVANTAGE = 1e6
"""Largest |A| accepted: group advantages are O(1); 1e308 would overflow the gradient step to NaN."""
DEFAULT_BUCKET_EDGES = (0.0, 0.2, 0.5, 1.0)  # confidence buckets of π_old(a): rare, middle, confident
DEFAULT_COMPARE_SPECS = ("grpo", "dapo", "atr", "dppo_kl", "dppo_tv")  # presets in theory.spec.PRESETS
DEFAULT_LR, DEFAULT_EPOCHS = 0.5, 4  # softmax-logit step and PPO epochs of the comparison's dynamics
_TIE = 1e-12  # a new probability within this of a box end is "at the bound"


# ------------------------------------------------------------------------------------------ validation
def check_probs(probs, name: str = "probs") -> np.ndarray:
    """A categorical distribution: K >= 2 finite entries > 0 summing to 1 within PROB_SUM_TOL (renormalised)."""
    arr = as_float_array(name, probs)
    if arr.ndim != 1 or arr.size < 2:
        raise ValueError(f"{name} must be a 1-D list of at least 2 probabilities, got shape {arr.shape}")
    if arr.size > MAX_ACTIONS:
        raise ValueError(
            f"{name} has {arr.size} actions, over the limit of {MAX_ACTIONS} (the exact LP has K² flow variables)"
        )
    nan = np.flatnonzero(np.isnan(arr))
    if nan.size:
        raise ValueError(f"{name} contains NaN at positions {nan.tolist()}; a distribution needs finite numbers")
    bad = np.flatnonzero(~(arr > 0) | ~np.isfinite(arr))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{name}[{i}] = {float(arr[i])!r}: every probability must be a finite number > 0 (a ratio π_new/π_old "
            f"is undefined where π_old = 0)"
        )
    total = float(arr.sum())
    if abs(total - 1.0) > PROB_SUM_TOL:
        raise ValueError(f"{name} must sum to 1 (within {PROB_SUM_TOL:g}), got sum {total!r} for {arr.tolist()}")
    return arr / total


def check_advantages(name: str, value, length: int, other: str) -> np.ndarray:
    """`check_vector` for advantages, each at most MAX_ABS_ADVANTAGE in magnitude."""
    arr = check_vector(name, value, length, other)
    big = np.flatnonzero(np.abs(arr) > MAX_ABS_ADVANTAGE)
    if big.size:
        i = int(big[0])
        raise ValueError(
            f"{name}[{i}] = {float(arr[i])!r}: advantages must lie in [-{MAX_ABS_ADVANTAGE:g}, "
            f"{MAX_ABS_ADVANTAGE:g}] (group advantages are of order 1)"
        )
    return arr


def check_vector(name: str, value, length: int, other: str) -> np.ndarray:
    """A finite 1-D float array of `length` entries, one per entry of the argument called `other`."""
    arr = as_float_array(name, value)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D list of numbers, got shape {arr.shape}")
    if arr.size != length:
        raise ValueError(f"{name} has {arr.size} entries but {other} has {length}: give one per entry of {other}")
    return require_finite(name, arr)


# --------------------------------------------------------------------------------------------- buckets
@dataclass(frozen=True, eq=False)
class Buckets:
    """Confidence buckets of π_old: action a is in bucket i when edges[i] <= p_a < edges[i+1] (last one closed)."""

    edges: np.ndarray  # (B + 1,)
    labels: tuple[str, ...]  # (B,)
    index: np.ndarray  # (K,) bucket of each action

    def sum(self, x) -> np.ndarray:
        """Per-bucket sums of a per-action quantity x (..., K) -> (..., B)."""
        x = np.asarray(x, dtype=np.float64)
        onehot = np.eye(len(self.labels))[self.index]  # (K, B)
        return x @ onehot


def make_buckets(probs: np.ndarray, edges=DEFAULT_BUCKET_EDGES) -> Buckets:
    e = as_float_array("bucket_edges", edges)
    if e.ndim != 1 or e.size < 2 or e[0] != 0.0 or e[-1] != 1.0 or np.any(np.diff(e) <= 0):
        raise ValueError(
            f"bucket_edges must increase strictly from 0 to 1 (e.g. {list(DEFAULT_BUCKET_EDGES)}), got {e.tolist()}"
        )
    index = np.clip(np.searchsorted(e, probs, side="right") - 1, 0, e.size - 2)
    labels = tuple(f"[{a:g}, {b:g}{']' if i == e.size - 2 else ')'}" for i, (a, b) in enumerate(zip(e[:-1], e[1:])))
    return Buckets(e, labels, index)


# ---------------------------------------------------------------------------------------- clip specs
def resolve_spec(spec) -> ClipSpec:
    """A ClipSpec, or the ClipSpec of a method string ('grpo', 'atr', 'kl3:0.02', ...; `divclip.theory.spec`).
    Intersections ('kl3:0.023144&binary_tv:0.2') are accepted; an adaptive δ ('kl3@clipfrac=0.1') is refused:
    a one-step analysis has no training signal to adapt to."""
    s = as_spec(spec)
    if is_adaptive(s):
        raise ValueError(
            f"spec {method_string(s)!r} adapts δ during training; a one-step analysis needs a fixed "
            f"budget: use its starting point {method_string(s.fixed())!r} or another δ"
        )
    return s


def action_bounds(spec, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-action ratio interval (lo, hi), each (K,), of a clip spec at p = π_old (probs already validated)."""
    s = resolve_spec(spec)
    if s.form == "sapo":
        raise ValueError("spec form 'sapo' has no clip interval (a soft gate): pick a spec with form clip/gated/cispo")
    if isinstance(s, AllOf):  # the intersection: per action [max lo, min hi] of the parts
        each = [action_bounds(part, probs) for part in s.parts]
        return np.max([b[0] for b in each], axis=0), np.min([b[1] for b in each], axis=0)
    if s.p_dependent:
        p = np.minimum(probs, np.nextafter(1.0, 0.0))  # as the loss does: p = 1 would make D infinite
        lo, hi = get_measure(s.measure).bounds(s.delta, p)
        return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    lo, hi = s.ratio_bounds()
    return np.full(probs.shape, lo), np.full(probs.shape, hi)


# ------------------------------------------------------------------------------------ shared helpers
def entropy(probs) -> float:
    """H(π) = -Σ π log π in nats (0·log 0 = 0)."""
    return float(-xlogy(probs, probs).sum())


def kl_divergence(p, q) -> float:
    """KL(p‖q) = Σ p log(p/q); inf where q = 0 < p."""
    with np.errstate(divide="ignore"):
        return float(np.sum(xlogy(p, p) - xlogy(p, q)))


def _jsonable(value):
    if dataclasses.is_dataclass(value):
        return value.to_dict()
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None  # JSON has no inf/NaN: None = infinite/undefined
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


class _ToDict:
    def to_dict(self) -> dict:
        """Plain Python types for JSON; non-finite floats (an infinite KL, hi = inf) become None."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}


# ----------------------------------------------------------------------------------- feasible region
@dataclass(frozen=True, eq=False)
class FeasibleRegion(_ToDict):
    """Per-action box [q_min, q_max] of new probabilities allowed by the clip interval, and its capacity."""

    spec: str
    probs: np.ndarray  # (K,) π_old
    adv: np.ndarray  # (K,) advantage of each action
    lo: np.ndarray  # (K,) ratio lower bound at p
    hi: np.ndarray  # (K,) ratio upper bound at p
    q_min: np.ndarray  # (K,) lo·p
    q_max: np.ndarray  # (K,) min(1, hi·p)
    room_up: np.ndarray  # (K,) q_max - p: most mass the action can gain
    room_down: np.ndarray  # (K,) p - q_min: most mass it can give up
    max_gain_positive: float  # min(Σ_{A>0} room_up, Σ_{A<=0} room_down): the simplex couples gain and loss
    max_release_negative: float  # min(Σ_{A<0} room_down, Σ_{A>=0} room_up)
    bucket_labels: tuple[str, ...]
    bucket_index: np.ndarray  # (K,)
    room_up_by_bucket: np.ndarray  # (B,)
    room_down_by_bucket: np.ndarray  # (B,)


def _inputs(probs, adv, bucket_edges):
    p = check_probs(probs, "probs")
    a = check_advantages("adv", adv, p.size, "probs")
    return p, a, make_buckets(p, bucket_edges)


def feasible_region(probs, adv, spec, bucket_edges=DEFAULT_BUCKET_EDGES) -> FeasibleRegion:
    """Where mass can move in one update under `spec` (a ClipSpec or preset name)."""
    p, a, b = _inputs(probs, adv, bucket_edges)
    return _feasible(p, a, b, spec)


def _feasible(p, a, b: Buckets, spec) -> FeasibleRegion:
    lo, hi = action_bounds(spec, p)
    q_min, q_max = lo * p, np.minimum(1.0, hi * p)
    up, down = q_max - p, p - q_min
    pos, neg = a > 0, a < 0
    return FeasibleRegion(
        spec_label(spec), p, a, lo, hi, q_min, q_max, up, down,
        float(min(up[pos].sum(), down[~pos].sum())), float(min(down[neg].sum(), up[~neg].sum())),
        b.labels, b.index, b.sum(up), b.sum(down),
    )  # fmt: skip


@dataclass(frozen=True, eq=False)
class HeadroomCurve(_ToDict):
    """How an action's room to move depends on its confidence p = π_old(a), for one spec."""

    spec: str
    p: np.ndarray  # (n,) grid of confidences
    lo: np.ndarray  # (n,)
    hi: np.ndarray  # (n,)
    room_up: np.ndarray  # (n,) min(1, hi·p) - p
    room_down: np.ndarray  # (n,) (1 - lo)·p
    p_max_room_up: float  # the grid p where room_up peaks (1/hi for a p-independent measure)


def headroom_curve(spec, p_grid=None) -> HeadroomCurve:
    """room_up(p) and room_down(p) on a grid in (0, 1) (default 199 points, 0.005 … 0.995)."""
    p = np.linspace(0.005, 0.995, 199) if p_grid is None else as_float_array("p_grid", p_grid)
    if p.ndim != 1 or p.size == 0 or np.any(~((p > 0) & (p < 1))):
        bad = p.ravel()[~((p.ravel() > 0) & (p.ravel() < 1))][:3].tolist() if p.size else p.tolist()
        raise ValueError(f"p_grid must be a non-empty 1-D list of confidences in (0, 1), got shape {p.shape}: {bad}")
    lo, hi = action_bounds(spec, p)
    up = np.minimum(1.0, hi * p) - p
    return HeadroomCurve(spec_label(spec), p, lo, hi, up, (1.0 - lo) * p, float(p[np.argmax(up)]))


# -------------------------------------------------------------------------- one-step constrained optimum
@dataclass(frozen=True, eq=False)
class Optimum(_ToDict):
    """argmax_q Σ q·A over the clip box and the simplex: the best a single trust-region step can do."""

    spec: str
    probs: np.ndarray  # (K,) π_old
    probs_new: np.ndarray  # (K,) the optimal q
    delta: np.ndarray  # (K,) q - p
    at_lower: np.ndarray  # (K,) bool: q = lo·p
    at_upper: np.ndarray  # (K,) bool: q = min(1, hi·p)
    flow: np.ndarray  # (K, K) flow[i, j] = mass moved from action i to action j
    objective: float  # Σ q·A
    gain: float  # Σ (q - p)·A, >= 0 since q = p is feasible
    entropy_change: float  # H(q) - H(p)
    kl_old_new: float  # KL(p‖q); inf if some q = 0
    bucket_labels: tuple[str, ...]
    net_mass_by_bucket: np.ndarray  # (B,) Σ_{a in bucket} (q - p)


def constrained_optimum(probs, adv, spec, bucket_edges=DEFAULT_BUCKET_EDGES) -> Optimum:
    """Exact solution of max Σ q·A s.t. lo·p <= q <= min(1, hi·p), Σ q = 1.

    Start every action at its lower end and hand the remaining mass 1 - Σ lo·p to the actions in decreasing
    order of A, each up to its upper end (greedy is optimal: the constraint matrix is one row of ones, so
    this is a fractional knapsack with unit weights). Actions with equal A share their level's mass in
    proportion to their room, so with a p-independent interval tied actions end at one common ratio.
    """
    p, a, b = _inputs(probs, adv, bucket_edges)
    return _optimum(_feasible(p, a, b, spec), b)


def _optimum(f: FeasibleRegion, b: Buckets) -> Optimum:
    p, a = f.probs, f.adv
    caps = f.q_max - f.q_min  # (K,)
    _, level = np.unique(-a, return_inverse=True)  # level 0 = the largest advantage
    level_cap = np.bincount(level, weights=caps)  # (L,) room of each advantage level
    left = max(1.0 - f.q_min.sum(), 0.0)
    level_take = np.clip(left - (np.cumsum(level_cap) - level_cap), 0.0, level_cap)  # best levels first
    share = np.divide(level_take, level_cap, out=np.zeros_like(level_cap), where=level_cap > 0)
    q = f.q_min + share[level] * caps
    d = q - p
    return Optimum(
        f.spec, p, q, d, q <= f.q_min + _TIE, q >= f.q_max - _TIE, mass_flow(p, q),
        float(q @ a), float(d @ a), entropy(q) - entropy(p), kl_divergence(p, q), b.labels, b.sum(d),
    )  # fmt: skip


def mass_flow(p, q) -> np.ndarray:
    """flow[i, j]: mass moved from donor i to receiver j, split in proportion (out_i · in_j / total).

    The optimum fixes only the net change q - p; every transport plan with these margins is equally optimal.
    The proportional plan is the one that does not depend on the order of the actions.
    """
    out, inn = np.maximum(p - q, 0.0), np.maximum(q - p, 0.0)
    total = out.sum()
    return np.outer(out, inn) / total if total > 0 else np.zeros((p.size, p.size))
