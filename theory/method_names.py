"""The name of the training method a measure and its budget stand for (GRPO, DAPO, GSPO, ATR-GRPO, "ratio clip").

Every measure carries its method's name (`divclip.theory.measures`, field `method`). The ratio measure is named by
its ε: GRPO at 0.2 / 0.2, DAPO at 0.2 / 0.28, GSPO at 3e-4 / 4e-4, otherwise a plain "ratio clip"; KL3 is ATR-GRPO
only at ATR-GRPO's budget (the δ whose lower bound is GRPO's 0.8, docs/theory.md §2), any other δ a "KL3 clip".
The engines' descriptions and the app's labels and colours (`divclip.app.methods`) take the names from here.
"""

from __future__ import annotations

import functools

from divclip.theory.conversions import delta_for_eps
from divclip.theory.measures import MEASURES
from divclip.theory.methods import preset_methods

__all__ = ["CUSTOM", "DAPO", "KL3_CLIP", "RATIO_CLIP", "RATIO_METHODS", "atr_delta", "method_for"]

DAPO = "DAPO"
CUSTOM = "custom"


def _ratio_methods() -> dict[tuple[float, float], str]:
    out = {}
    for m in preset_methods():  # 'ratio:EPS_LOW:EPS_HIGH[/...]' presets of the clip form (grpo, dapo, gspo)
        head, *options = m.method.split("/")
        parts = head.split(":")
        if parts[0] == "ratio" and len(parts) == 3 and set(options) <= {"seq"}:
            out[(float(parts[1]), float(parts[2]))] = m.label
    return out


RATIO_METHODS: dict[tuple[float, float], str] = _ratio_methods()
"""The ratio clip's published settings (ε_low, ε_high) -> method, from the catalogue's presets (GRPO, DAPO, GSPO);
any other ε is a plain "ratio clip"."""
if RATIO_METHODS.get((0.2, 0.28)) != DAPO:
    raise RuntimeError("the catalogue's DAPO preset must be the ratio clip 0.2/0.28 (divclip.theory.methods)")
RATIO_CLIP = "ratio clip"
KL3_CLIP = "KL3 clip"


@functools.lru_cache(maxsize=1)
def atr_delta() -> float:
    """ATR-GRPO's KL3 budget: the δ whose lower bound is GRPO's 1 − 0.2 (0.023143551314209757)."""
    return delta_for_eps("kl3", eps_low=0.2)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b))


def method_for(
    measure_name: str, eps_low: float | None = None, eps_high: float | None = None, delta: float | None = None
) -> str:
    """The method a measure stands for; the ratio measure is named by its ε (GRPO, DAPO, GSPO or "ratio clip"),
    KL3 given its δ by that δ (ATR-GRPO at ATR-GRPO's budget, else "KL3 clip"); unknown: 'custom'."""
    m = MEASURES.get(measure_name)
    if m is None:
        return CUSTOM
    if m.name == "kl3" and delta is not None:
        return m.method if _close(delta, atr_delta()) else KL3_CLIP
    if m.name == "ratio" and eps_low is not None and eps_high is not None:
        for (lo, hi), method in RATIO_METHODS.items():
            if _close(eps_low, lo) and _close(eps_high, hi):
                return method
        return RATIO_CLIP
    return m.method
