"""Ready-to-paste trainer settings for the intervals on screen (verl 0.9.1 Hydra overrides, TRL GRPOConfig).

By the gradient-equivalence theorem (docs/theory.md §1) a measure that does not depend on p *is* a ratio clip
[1 − ε_low, 1 + ε_high], so any trainer with asymmetric ratio clipping reproduces it exactly: verl's
`clip_ratio_low/high`, TRL's `epsilon/epsilon_high`. Per-token measures are not a fixed ratio clip: verl has
them as policy losses (`dppo_kl`, `dppo_tv`) whose `clip_ratio_low/high` are read as the divergence
threshold δ; TRL has no equivalent, so its lines are commented out and hold only for tokens with that p.
"""

from __future__ import annotations

from collections.abc import Sequence

from divclip.app.intervals import ClipInterval
from divclip.app.state import format_number

VERL_PREFIX = "actor_rollout_ref.actor."
# verl 0.9.1 policy losses whose clip_ratio_low/high are the divergence threshold δ (core_algos.py).
VERL_LOSS_MODE = {"binary_kl": "dppo_kl", "binary_tv": "dppo_tv"}


def _header(iv: ClipInterval) -> str:
    return f"# {iv.method} — {iv.name}: D(r) = {iv.measure.code}, {iv.budget_text}"


def verl_lines(iv: ClipInterval) -> list[str]:
    """Hydra overrides for one interval (no header)."""
    if iv.name in VERL_LOSS_MODE:
        d = format_number(iv.delta)
        return [f"{VERL_PREFIX}policy_loss.loss_mode={VERL_LOSS_MODE[iv.name]}",
                f"{VERL_PREFIX}clip_ratio_low={d}",
                f"{VERL_PREFIX}clip_ratio_high={d}"]
    if iv.p is not None:
        return [f"# per-token measure with no verl loss mode; at p = {iv.p:g} only:",
                f"# {VERL_PREFIX}clip_ratio_low={format_number(iv.eps_low)}",
                f"# {VERL_PREFIX}clip_ratio_high={format_number(iv.eps_high)}"]
    return [f"{VERL_PREFIX}clip_ratio_low={format_number(iv.eps_low)}",
            f"{VERL_PREFIX}clip_ratio_high={format_number(iv.eps_high)}"]


def trl_lines(iv: ClipInterval) -> list[str]:
    """GRPOConfig keyword arguments for one interval (no header)."""
    if iv.p is not None:
        return [f"# TRL has no per-token divergence clip; the ratio clip below holds at p = {iv.p:g} only:",
                f"# epsilon={format_number(iv.eps_low)}",
                f"# epsilon_high={format_number(iv.eps_high)}"]
    return [f"epsilon={format_number(iv.eps_low)}", f"epsilon_high={format_number(iv.eps_high)}"]


def verl_overrides(intervals: Sequence[ClipInterval]) -> str:
    """One block of verl Hydra overrides per interval, e.g. `actor_rollout_ref.actor.clip_ratio_low=0.2`."""
    return "\n\n".join("\n".join([_header(iv), *verl_lines(iv)]) for iv in intervals) + "\n"


def trl_settings(intervals: Sequence[ClipInterval]) -> str:
    """One block of TRL `GRPOConfig(...)` arguments per interval, e.g. `epsilon=0.2`."""
    return "\n\n".join("\n".join([_header(iv), *trl_lines(iv)]) for iv in intervals) + "\n"
