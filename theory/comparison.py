"""Clip specs side by side on one categorical policy: feasible box, exact one-step optimum and softmax drift.

The LP side comes from `divclip.theory.reallocation` (numpy/scipy), the multi-epoch softmax policy gradient
from `divclip.theory.softmax_dynamics` (torch, through the training loss). This module imports both; neither of
them imports it, so there is no import cycle.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from divclip.theory.reallocation import (
    DEFAULT_BUCKET_EDGES,
    DEFAULT_COMPARE_SPECS,
    DEFAULT_EPOCHS,
    DEFAULT_LR,
    FeasibleRegion,
    Optimum,
    _feasible,
    _inputs,
    _jsonable,
    _optimum,
    _ToDict,
    resolve_spec,
)
from divclip.theory.softmax_dynamics import Drift, Group, multi_epoch_drift
from divclip.theory.spec import ClipSpec, spec_label

__all__ = ["COMPARISON_COLUMNS", "Comparison", "ComparisonRow", "compare_measures"]


# --------------------------------------------------------------------------------------- comparison
COMPARISON_COLUMNS = (
    "label", "measure", "form", "lo_min", "hi_max", "max_gain_positive", "max_release_negative",
    "lp_gain_high_pos", "lp_gain_low_pos", "lp_entropy_change", "lp_kl",
    "dyn_gain_high_pos", "dyn_gain_low_pos", "dyn_entropy_change", "dyn_kl", "dyn_clipped_tokens",
)  # fmt: skip


@dataclass(frozen=True, eq=False)
class ComparisonRow(_ToDict):
    """One spec: its feasible region, one-step optimum and multi-epoch softmax drift, summarised."""

    label: str
    measure: str
    form: str
    lo_min: float  # smallest ratio lower bound over the actions
    hi_max: float  # largest ratio upper bound over the actions
    max_gain_positive: float
    max_release_negative: float
    lp_gain_high_pos: float  # optimum: net mass gained by A > 0 actions in the most confident bucket
    lp_gain_low_pos: float  # … in the least confident bucket
    lp_entropy_change: float
    lp_kl: float
    dyn_gain_high_pos: float  # softmax PG after all epochs: the same two quantities
    dyn_gain_low_pos: float
    dyn_entropy_change: float
    dyn_kl: float
    dyn_clipped_tokens: int  # tokens whose gradient a bound zeroed, summed over epochs
    feasible: FeasibleRegion
    optimum: Optimum
    drift: Drift


@dataclass(frozen=True, eq=False)
class Comparison:
    """A table, one row per spec, for one π_old and advantage vector (see `compare_measures`)."""

    probs: np.ndarray
    adv: np.ndarray
    bucket_labels: tuple[str, ...]
    high_pos_actions: tuple[int, ...]  # A > 0 actions in the most confident bucket
    low_pos_actions: tuple[int, ...]  # A > 0 actions in the least confident bucket
    lr: float
    epochs: int
    rows: tuple[ComparisonRow, ...]

    def table(self) -> list[dict]:
        """One flat dict of scalars per row, keys COMPARISON_COLUMNS (a DataFrame's records)."""
        return [{c: _jsonable(getattr(r, c)) for c in COMPARISON_COLUMNS} for r in self.rows]

    def order(self, column: str, descending: bool = True) -> list[str]:
        """Row labels sorted by a numeric column (stable: ties keep the spec order)."""
        if column not in COMPARISON_COLUMNS[3:]:
            raise ValueError(f"column must be one of {list(COMPARISON_COLUMNS[3:])}, got {column!r}")
        rows = sorted(self.rows, key=lambda r: -getattr(r, column) if descending else getattr(r, column))
        return [r.label for r in rows]

    def to_dict(self, details: bool = False) -> dict:
        out = {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "rows"}
        out["columns"] = list(COMPARISON_COLUMNS)
        out["rows"] = [r.to_dict() for r in self.rows] if details else self.table()
        return out


def _spec_items(specs) -> list[tuple[str, ClipSpec]]:
    if specs is None:
        specs = DEFAULT_COMPARE_SPECS
    if isinstance(specs, dict):
        items = [(str(k), resolve_spec(v)) for k, v in specs.items()]
    elif isinstance(specs, (list, tuple)):
        items = [(s if isinstance(s, str) else spec_label(s), resolve_spec(s)) for s in specs]
    else:
        raise ValueError(f"specs must be a list of ClipSpecs/preset names or a dict label -> spec, got {specs!r}")
    if not items:
        raise ValueError("specs must name at least one spec, got an empty collection")
    return items


def compare_measures(
    probs,
    adv,
    specs=None,
    *,
    lr: float = DEFAULT_LR,
    epochs: int = DEFAULT_EPOCHS,
    group=None,
    bucket_edges=DEFAULT_BUCKET_EDGES,
) -> Comparison:
    """Feasible region, one-step optimum and `epochs` PPO epochs of softmax PG for each spec, side by side.

    specs: preset names / ClipSpecs (labelled by name), or a dict label -> spec; default
    DEFAULT_COMPARE_SPECS = GRPO ratio 0.2, DAPO 0.2/0.28, ATR KL3 at GRPO's ε_low (δ = 0.023144), DPPO binary
    KL (δ = 0.05) and binary TV (δ = 0.2). group: a `softmax_dynamics.Group`; default the exact expected
    group (every action once, weighted by π_old), whose surrogate is the LP's objective Σ π_new·A.
    """
    p, a, b = _inputs(probs, adv, bucket_edges)
    items = _spec_items(specs)
    g = Group.expected(p, a) if group is None else group
    pos = a > 0
    high = pos & (b.index == len(b.labels) - 1)
    low = pos & (b.index == 0)
    rows = []
    for label, spec in items:
        f = _feasible(p, a, b, spec)
        o = _optimum(f, b)
        d = multi_epoch_drift(np.log(p), g, spec, lr=lr, epochs=epochs, bucket_edges=bucket_edges)
        moved = d.probs[-1] - p
        rows.append(ComparisonRow(
            label, spec.measure_name, spec.form, float(f.lo.min()), float(f.hi.max()),
            f.max_gain_positive, f.max_release_negative,
            float(o.delta[high].sum()), float(o.delta[low].sum()), o.entropy_change, o.kl_old_new,
            float(moved[high].sum()), float(moved[low].sum()), float(d.entropy[-1] - d.entropy[0]),
            float(d.kl_old_new[-1]), int(d.clipped_tokens.sum()), f, o, d,
        ))  # fmt: skip
    return Comparison(
        p, a, b.labels, tuple(np.flatnonzero(high).tolist()), tuple(np.flatnonzero(low).tolist()),
        float(lr), int(epochs), tuple(rows),
    )  # fmt: skip
