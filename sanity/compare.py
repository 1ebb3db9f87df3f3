"""Compare atlas methods on the user's own tokens (`divclip check --rollouts FILE --methods dcpo,grpo`).

For every method (an atlas name or a method string, `divclip.theory.atlas`) and every masked token, the
gradient weight w = `gradient_weight(method, q, r, A)` (docs/theory.md §8) against the unclipped PPO weight r:

  clipfrac        share of the masked tokens whose gradient the method zeroes (w = 0, A != 0): `policy_loss`'s
                  clipfrac for a hard clip
  removed         share of the batch's |gradient| the method removes: 1 − Σ|A·w| / Σ|A·r|; negative where it adds
                  (a truncated-IS weight above r, as CISPO's lower cap)
by old-probability bucket (`rollouts.P_EDGES`) and sign of A, and the entropy side of what is clipped.

Entropy side. Under a policy-gradient step the policy's entropy changes by minus the covariance of log π and the
advantage (arXiv 2505.22617, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models": a
high-probability action with high advantage lowers entropy, a rare action with high advantage raises it; the
same paper's Clip-Cov, verl's `clip_cov`, ranks tokens by this centred product). A token's share of it is
(log q − mean log q)·(A − mean A) over the batch's masked tokens: a clipped token with a negative product (rare
with A above the mean, or likely with A below it) would have raised entropy, one with a positive product would
have lowered it. So a method that clips mostly "raise" tokens pushes entropy down.

Ratios are the rollout report's (`rollouts._log_prob`: the file's log_prob, else the same seeded noise model).
At level='sequence' (GSPO) the weight is read at the sequence's s = exp(mean log r) for every token.
"""

from __future__ import annotations

import numpy as np

from divclip.sanity.errors import SanityInputError
from divclip.sanity.loaders import Rollouts
from divclip.sanity.rollouts import P_EDGES, RolloutOptions, _log_prob
from divclip.theory.atlas import atlas_row, find_method, gradient_weight
from divclip.theory.spec import parse_method

MAX_METHODS = 8
ENTROPY_SOURCE = "arXiv 2505.22617 (entropy change = −Cov(log π, A) under policy gradient; Clip-Cov)"


def parse_methods(methods) -> list[str]:
    """The method list from 'dcpo,grpo' or a list; each must be an atlas name or a method string."""
    names = [m.strip() for m in (methods.split(",") if isinstance(methods, str) else methods) if m.strip()]
    if not names or len(names) > MAX_METHODS:
        raise SanityInputError(f"--methods must name 1 to {MAX_METHODS} methods (e.g. dcpo,grpo), got {methods!r}")
    for name in names:
        try:
            find_method(name)
        except ValueError as exc:
            raise SanityInputError(f"--methods: {exc}") from None
    return list(dict.fromkeys(names))


def _ratio_for(spec, log_r: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Token ratios, or at level='sequence' each sequence's s = exp(masked mean log r) on all its tokens."""
    if spec.level != "sequence":
        return np.exp(log_r)
    mean = (log_r * mask).sum(-1, keepdims=True) / np.maximum(mask.sum(-1, keepdims=True), 1)  # (B, 1)
    return np.broadcast_to(np.exp(mean), log_r.shape)


def _share(removed: np.ndarray, total: np.ndarray) -> float | None:
    t = float(total.sum())
    return None if t == 0 else float(removed.sum()) / t


def _method_entry(name: str, q, log_r, adv, inside, cells, centred) -> dict:
    method = find_method(name)
    spec = parse_method(method.method)
    row = atlas_row(method, with_nearest=False)
    entry = {"method": name, "method_string": row["method"], "family": row["family"], "problem": None}
    ratio = _ratio_for(spec, log_r, inside)
    try:
        w = gradient_weight(spec, q, ratio, adv)
    except ValueError as exc:
        return {**entry, "problem": str(exc)}
    moving = inside & (adv != 0)
    clipped = moving & (w == 0)
    full, kept = np.abs(adv * ratio), np.abs(adv * w)  # |A·r| without the clip, |A·w| with it
    gone = np.where(inside, full - kept, 0.0)
    entry["clipfrac"] = float(clipped.sum()) / max(int(inside.sum()), 1)
    entry["removed"] = _share(gone, np.where(inside, full, 0.0))
    entry["buckets"] = [
        _cell(b, s, moving & (cells == b) & (np.sign(adv) == s), clipped, gone, full)
        for b in range(len(P_EDGES) - 1)
        for s in (-1, 1)
    ]
    raise_, lower = clipped & (centred < 0), clipped & (centred > 0)
    total_clipped = max(int(clipped.sum()), 1)
    entry["entropy"] = {
        side: {
            "tokens": int(sel.sum()),
            "share_of_clipped": float(sel.sum()) / total_clipped,
            "removed": _share(np.where(sel, gone, 0.0), np.where(inside, full, 0.0)),
        }
        for side, sel in (("would_raise", raise_), ("would_lower", lower))
    }
    return entry


def _cell(b: int, sign: int, sel, clipped, gone, full) -> dict:
    """One old-probability bucket and sign of A: its tokens, clip fraction and share of |gradient| removed."""
    n = int(sel.sum())
    last = b == len(P_EDGES) - 2
    return {
        "p_bucket": f"[{P_EDGES[b]:g}, {P_EDGES[b + 1]:g}{']' if last else ')'}",
        "sign": "A>0" if sign > 0 else "A<0",
        "tokens": n,
        "clipfrac": float((clipped & sel).sum()) / n if n else 0.0,
        "removed": _share(np.where(sel, gone, 0.0), np.where(sel, full, 0.0)),
    }


def compare_methods(data: Rollouts, methods, opts: RolloutOptions = RolloutOptions()) -> dict:
    """The comparison section of the check report (plain Python values, JSON-ready)."""
    names = parse_methods(methods)
    log_prob, ratios = _log_prob(data, opts)
    old = data.old_log_prob.astype(np.float64)
    log_r = log_prob.astype(np.float64) - old  # (B, T)
    adv = data.advantages.astype(np.float64)
    inside = data.response_mask > 0
    q = np.clip(np.exp(old), np.finfo(np.float64).tiny, 1.0)
    bucket = np.clip(np.searchsorted(P_EDGES, q, side="right") - 1, 0, len(P_EDGES) - 2)
    cells = np.where(inside, bucket, -1)
    n = max(int(inside.sum()), 1)
    centred = np.where(inside, (old - old[inside].sum() / n) * (adv - adv[inside].sum() / n), 0.0)
    entries = [_method_entry(name, q, np.clip(log_r, -700.0, 700.0), adv, inside, cells, centred) for name in names]
    return {"ratios": ratios["text"], "entropy_rule": ENTROPY_SOURCE, "methods": entries}


# ------------------------------------------------------------------------------------------ tables
def compare_rows(section: dict) -> list[dict]:
    """One row per method for the page's table: clip fraction, |gradient| removed, the entropy side."""
    rows = []
    for m in section["methods"]:
        e = m.get("entropy") or {}
        rows.append(
            {
                "method": m["method"],
                "family": m["family"],
                "clipfrac": m.get("clipfrac"),
                "removed": m.get("removed"),
                "clipped, would raise entropy": (e.get("would_raise") or {}).get("tokens"),
                "clipped, would lower entropy": (e.get("would_lower") or {}).get("tokens"),
                "problem": m["problem"],
            }
        )
    return rows


def compare_bucket_rows(section: dict) -> list[dict]:
    """Every method's cells with tokens: old-probability bucket, sign of A, clip fraction, |gradient| removed."""
    return [
        {"method": m["method"], **b}
        for m in section["methods"]
        if m["problem"] is None
        for b in m["buckets"]
        if b["tokens"]
    ]
