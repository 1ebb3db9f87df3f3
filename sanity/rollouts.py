"""Which tokens a clip setting would clip on a real rollout batch, under every measure.

Three layers of numbers, each from the library rather than re-derived:
* headline fractions per measure: `divclip.theory.losses.policy_loss(...)[1]` on the file's tensors (its dtype), so
  `clipfrac`, `clipfrac_low`, `clipfrac_high` are exactly what the loss reports during training;
* the breakdown by old-token probability p = π_old(a) and advantage sign: the per-token clip flags of the loss
  itself (`divclip.theory.losses.policy_terms`, the terms `policy_loss` aggregates), so the breakdown adds up to
  the headline counts by construction;
* the δ sweep: the same rule for a grid of budgets, by sorting D once per measure (float64).

Ratios. With `log_prob` in the file they are the file's. Without it (or with an explicit σ) they come from a
noise model, stated in the output: log r ~ N(0, σ²), i.i.d. per token, so log π_θ = log π_old + σ·z with
z ~ N(0, 1) drawn with `seed`. The model ignores that π_θ ≤ 1 (for p near 1 a binary measure then sees
r·p > 1 and clips the token). With `log_prob` present, σ defaults to the file's masked std of log r.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from divclip.sanity.errors import SanityInputError
from divclip.sanity.loaders import Rollouts
from divclip.theory import MEASURES, delta_for_eps, get_measure
from divclip.theory.forms._numpy import LOG_RATIO_CLAMP
from divclip.theory.spec import ClipSpec

DEFAULT_SIGMA = 0.05  # a typical per-token |log r| after one off-policy mini-batch step; an assumption
P_EDGES = (0.0, 1e-3, 1e-2, 0.1, 0.5, 0.9, 0.99, 1.0)
SIGNS = ("A<0", "A=0", "A>0")
SWEEP_POINTS = 41


@dataclass(frozen=True)
class RolloutOptions:
    """How to turn one clip setting into a ClipSpec per measure, and how to get ratios."""

    eps_low: float = 0.2
    """Ratio-clip lower width; the other measures get the budget δ that matches it (verl default 0.2)."""
    eps_high: float = 0.2
    """Ratio-clip upper width."""
    deltas: dict = field(default_factory=dict)
    """Per-measure budget overrides {name: δ}."""
    dual_clip_c: float | None = None
    """Dual-clip cap c (verl vanilla's, 3 by default); None = off."""
    level: str = "token"
    """'token', or 'sequence' for GSPO's length-normalised sequence ratio (p-dependent measures skipped)."""
    sigma: float | None = None
    """Noise-model σ of log r; None = the file's ratios when log_prob is present, else DEFAULT_SIGMA."""
    seed: int = 0
    """Seed of the noise model."""
    reference_p: float = 0.5
    """p at which a p-dependent measure's budget is matched to eps_low."""

    def __post_init__(self):
        if not _finite(self.eps_low) or self.eps_low < 0:  # 0: no room below 1; >= 1: no lower bound (CISPO)
            raise SanityInputError(f"eps_low must be a finite number >= 0, got {self.eps_low!r}")
        if not _finite(self.eps_high) or self.eps_high < 0:  # 0: an engine's degenerate clip, reported per row
            raise SanityInputError(f"eps_high must be a finite number >= 0, got {self.eps_high!r}")
        if self.sigma is not None and not (_finite(self.sigma) and 0 <= self.sigma <= 5):
            raise SanityInputError(f"sigma must be a number in [0, 5] (std of log r), got {self.sigma!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise SanityInputError(f"seed must be an integer >= 0, got {self.seed!r}")
        if self.level not in ("token", "sequence"):
            raise SanityInputError(f"level must be 'token' or 'sequence', got {self.level!r}")
        if not (_finite(self.reference_p) and 0 < self.reference_p < 1):
            raise SanityInputError(f"reference_p must lie in (0, 1), got {self.reference_p!r}")
        for name, d in self.deltas.items():
            get_measure(name)
            if name == "ratio":
                raise SanityInputError("the ratio measure's budget is eps_low/eps_high, not a delta override")
            if not _finite(d) or d <= 0:
                raise SanityInputError(f"delta for {name} must be a finite number > 0, got {d!r}")


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# ---------------------------------------------------------------------------------------------- specs
def rollout_specs(opts: RolloutOptions) -> list[dict]:
    """[{measure, spec (ClipSpec or None), budget, problem}] for every registered measure."""
    out = []
    for m in MEASURES.values():
        row = {"measure": m.name, "spec": None, "budget": None, "problem": None}
        try:
            if m.name == "ratio":
                row["budget"] = {"eps_low": opts.eps_low, "eps_high": opts.eps_high}
                row["spec"] = ClipSpec(
                    "ratio",
                    eps_low=min(opts.eps_low, 1.0),
                    eps_high=opts.eps_high,
                    level=opts.level,
                    params={"dual_clip_c": opts.dual_clip_c},
                )
            elif m.p_dependent and opts.level == "sequence":
                row["problem"] = "p-dependent measures have no sequence-level form (a sequence has no single p)"
            else:
                delta = opts.deltas.get(m.name)
                origin = "given"
                if delta is None:
                    p = opts.reference_p if m.p_dependent else None
                    delta = delta_for_eps(m.name, eps_low=opts.eps_low, p=p)
                    origin = f"matches eps_low = {opts.eps_low:g}" + (f" at p = {p:g}" if p is not None else "")
                row["budget"] = {"delta": delta, "origin": origin}
                row["spec"] = ClipSpec(m.name, delta=delta, level=opts.level, params={"dual_clip_c": opts.dual_clip_c})
        except ValueError as exc:
            row["problem"] = str(exc)
        out.append(row)
    return out


# ------------------------------------------------------------------------------------------- analysis
def analyse_rollouts(r: Rollouts, opts: RolloutOptions = RolloutOptions()) -> dict:
    """The rollout section of the report (plain Python values, JSON-ready)."""
    import torch

    from divclip.theory.losses import policy_loss

    old = torch.from_numpy(r.old_log_prob)
    adv = torch.from_numpy(r.advantages)
    mask = torch.from_numpy(r.response_mask)
    log_prob, ratios = _log_prob(r, opts)
    lp = torch.from_numpy(log_prob)
    inside = r.response_mask > 0
    n = int(inside.sum())
    p_old = np.exp(r.old_log_prob.astype(np.float64))
    cells = _cells(p_old, r.advantages, inside)
    measures, sweep = [], {"grid": _sweep_grid(opts.level).tolist(), "measures": {}}
    for row in rollout_specs(opts):
        entry = {"measure": row["measure"], "budget": row["budget"], "problem": row["problem"]}
        spec = row["spec"]
        if spec is not None:
            metrics = policy_loss(lp, old, adv, mask, spec)[1]
            flags = _clip_flags(spec, lp, old, adv, mask)
            entry.update(_measure_entry(spec, metrics, flags, cells, n))
            sweep["measures"][row["measure"]] = _sweep(
                spec, flags["ratio"], p_old, r.advantages, inside, np.asarray(sweep["grid"]), n
            )
        measures.append(entry)
    log_r = (log_prob.astype(np.float64) - r.old_log_prob.astype(np.float64))[inside]
    return {
        "file": r.name,
        "format": r.format,
        "shape": list(r.shape),
        "dtype": str(r.old_log_prob.dtype),
        "n_tokens": n,
        "advantage_signs": {s: int(c) for s, c in zip(SIGNS, cells["sign_counts"])},
        "ratios": ratios,
        "level": opts.level,
        "dual_clip_c": opts.dual_clip_c,
        "measures": measures,
        "histogram": log_ratio_histogram(np.clip(log_r, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP), measures),
        "sweep": sweep,
        "notes": list(r.notes),
        "on_policy": ratios["source"] == "file" and bool(np.all(log_r == 0)),
    }


def sequence_spread(log_ratio: np.ndarray, inside: np.ndarray) -> dict | None:
    """How much less GSPO's sequence ratio moves than token ratios on this batch: the std of token log r over the
    masked tokens against the std of the per-sequence mean log r (the log of the length-normalised sequence
    ratio). None with fewer than two sequences that have tokens, or when the sequences do not move at all."""
    lengths = inside.sum(axis=1)
    rows = lengths > 0
    if rows.sum() < 2:
        return None
    seq = np.where(inside, log_ratio, 0.0).sum(axis=1)[rows] / lengths[rows]  # (B',) log s per sequence
    token_std, seq_std = float(np.std(log_ratio[inside])), float(np.std(seq))
    if seq_std == 0.0 or token_std == 0.0:
        return None
    return {
        "token_std": token_std,
        "sequence_std": seq_std,
        "ratio": token_std / seq_std,
        "mean_length": float(lengths[rows].mean()),
    }


def _log_prob(r: Rollouts, opts: RolloutOptions) -> tuple[np.ndarray, dict]:
    """(log π_θ array, description of where the ratios come from)."""
    inside = r.response_mask > 0
    sigma_file = None
    if r.log_prob is not None:
        lr = r.log_prob.astype(np.float64) - r.old_log_prob.astype(np.float64)
        sigma_file = float(np.std(lr[inside]))
        if opts.sigma is None:
            return r.log_prob, {
                "source": "file",
                "sigma_file": sigma_file,
                "sequence_spread": sequence_spread(lr, inside),
                "text": f"ratios from the file's log_prob (std of log r = {sigma_file:.4g})",
            }
    sigma = opts.sigma if opts.sigma is not None else DEFAULT_SIGMA
    z = np.random.default_rng(opts.seed).standard_normal(r.shape)
    lp = (r.old_log_prob.astype(np.float64) + sigma * z).astype(r.old_log_prob.dtype)
    why = "σ was given" if opts.sigma is not None else f"the file has no log_prob; default σ = {DEFAULT_SIGMA:g}"
    return lp, {
        "source": "noise model",
        "model": "log r ~ N(0, σ²), i.i.d. per token: log_prob = old_log_prob + σ·z, z ~ N(0, 1)",
        "sigma": sigma,
        "seed": opts.seed,
        "sigma_file": sigma_file,
        "text": f"PREDICTED with the noise model log r ~ N(0, σ²), σ = {sigma:g}, seed {opts.seed} ({why})",
    }


def _clip_flags(spec, lp, old, adv, mask) -> dict:
    """Per-token low/high clip flags (numpy bool, inside the mask) and the ratio (float64) of the loss itself
    (`divclip.theory.losses.policy_terms`, the terms `policy_loss` aggregates), for one spec."""
    import torch

    from divclip.theory.losses import policy_terms

    with torch.no_grad():
        terms = policy_terms(lp, old, adv, mask, spec)
    inside = mask.numpy() > 0
    return {
        "low": (terms.clipped_low.numpy() > 0) & inside,
        "high": (terms.clipped_high.numpy() > 0) & inside,
        "ratio": terms.ratio.double().numpy(),
    }


def _cells(p_old, adv, inside) -> dict:
    bucket = np.clip(np.searchsorted(P_EDGES, p_old, side="right") - 1, 0, len(P_EDGES) - 2)
    sign = (np.sign(adv) + 1).astype(np.int64)  # 0: A<0, 1: A=0, 2: A>0
    cell = bucket * 3 + sign
    size = (len(P_EDGES) - 1) * 3
    tokens = np.bincount(cell[inside], minlength=size)
    return {"cell": cell, "size": size, "tokens": tokens, "sign_counts": np.bincount(sign[inside], minlength=3)}


def _measure_entry(spec, metrics: dict, flags: dict, cells: dict, n: int) -> dict:
    low = np.bincount(cells["cell"][flags["low"]], minlength=cells["size"])
    high = np.bincount(cells["cell"][flags["high"]], minlength=cells["size"])
    rows = []
    for b in range(len(P_EDGES) - 1):
        for s, sign in enumerate(SIGNS):
            i = b * 3 + s
            t = int(cells["tokens"][i])
            rows.append(
                {
                    "p_bucket": f"[{P_EDGES[b]:g}, {P_EDGES[b + 1]:g})"
                    if b < len(P_EDGES) - 2
                    else f"[{P_EDGES[b]:g}, 1]",
                    "sign": sign,
                    "tokens": t,
                    "clipped_low": int(low[i]),
                    "clipped_high": int(high[i]),
                    "frac_low": low[i] / t if t else 0.0,
                    "frac_high": high[i] / t if t else 0.0,
                }
            )
    interval = None if spec.p_dependent else list(spec.ratio_bounds())
    return {
        "interval": interval,
        "clipfrac": metrics["clipfrac"],
        "clipfrac_low": metrics["clipfrac_low"],
        "clipfrac_high": metrics["clipfrac_high"],
        "dual_clipfrac": metrics["dual_clipfrac"],
        "ppo_kl": metrics["ppo_kl"],
        "kl3": metrics["kl3"],
        "ratio_min": metrics["ratio_min"],
        "ratio_max": metrics["ratio_max"],
        "buckets": rows,
    }


# --------------------------------------------------------------------------------------- sweep, histogram
def _sweep_grid(level: str) -> np.ndarray:
    return np.geomspace(1e-6 if level == "sequence" else 1e-4, 1.0, SWEEP_POINTS)


def _sweep(spec, ratio, p_old, adv, inside, grid, n) -> dict:
    """Clip fractions at every budget of `grid` (δ; for the ratio measure a symmetric ε)."""
    m = get_measure(spec.measure)
    p = np.minimum(p_old, 1.0 - np.finfo(np.float64).eps) if m.p_dependent else None
    with np.errstate(all="ignore"):
        d = m._value(ratio, p, np)  # float64 D(r[, p]) per token
    up = inside & (adv > 0) & (ratio > 1)
    down = inside & (adv < 0) & (ratio < 1)
    out = {}
    for side, sel in (("clipfrac_high", up), ("clipfrac_low", down)):
        sorted_d = np.sort(d[sel])
        out[side] = ((len(sorted_d) - np.searchsorted(sorted_d, grid, side="right")) / n).tolist()
    out["clipfrac"] = [a + b for a, b in zip(out["clipfrac_low"], out["clipfrac_high"])]
    return out


def log_ratio_histogram(log_r: np.ndarray, measures: list[dict], bins: int = 60) -> dict:
    """Counts of masked log r on a symmetric range wide enough for the data's 99.9 % and every bound."""
    bounds = {
        e["measure"]: [math.log(x) if x > 0 else None for x in e["interval"]] for e in measures if e.get("interval")
    }
    widest = max([abs(x) for pair in bounds.values() for x in pair if x is not None] + [0.0])
    q = float(np.quantile(np.abs(log_r), 0.999)) if log_r.size else 0.0
    target = max(q, 1.2 * widest)
    half = next((v for v in (0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0) if v >= target), 20.0)
    edges = np.linspace(-half, half, bins + 1)
    counts, _ = np.histogram(log_r, bins=edges)
    return {
        "edges": edges.tolist(),
        "counts": counts.astype(int).tolist(),
        "underflow": int((log_r < -half).sum()),
        "overflow": int((log_r > half).sum()),
        "log_bounds": bounds,
    }
