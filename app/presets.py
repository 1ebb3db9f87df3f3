"""The clip explorer's parameters, defaults and the published methods as presets.

Each preset is a full set of explorer values, so choosing one is the same as opening its link; its name and clip
widths are the method catalogue's (`divclip.theory.methods`: label, and the preset's ε or δ). ATR-GRPO's
δ is the KL3 budget whose lower bound is GRPO's 1 − 0.2 (δ = 0.023144, docs/theory.md §2): KL3 then derives
ε_high = 0.231 where DAPO tunes 0.28 by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from divclip import theory
from divclip.app.state import ChoiceListParam, FloatParam, IntParam, TextParam
from divclip.theory.methods import METHODS

# δ and ε span GSPO's sequence-level 3e-4 up to very loose clips; their sliders are log-scale.
DELTA_MIN, DELTA_MAX = 1e-8, 0.5
EPS_MIN, EPS_MAX = 1e-4, 0.9
P_MIN, P_MAX = 0.001, 0.999

ATR_DELTA = theory.PRESETS["atr"].delta  # 0.023143551314209757
ATR_EPS_HIGH = theory.equivalent_ratio_clip("kl3", ATR_DELTA)[1]  # 0.2308422097842591
GSPO_EPS = (theory.PRESETS["gspo"].eps_low, theory.PRESETS["gspo"].eps_high)  # 3e-4 / 4e-4 (Zheng et al. 2025)
GSPO_DELTA = theory.delta_for_eps("kl3", eps_low=GSPO_EPS[0])


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    values: Mapping[str, Any]


def _values(delta: float, eps_low: float, eps_high: float, p: float, measures: tuple[str, ...]) -> dict:
    return {"delta": delta, "eps_low": eps_low, "eps_high": eps_high, "p": p, "measures": measures}


def _label(name: str) -> str:
    return METHODS[name].label


def _widths(name: str) -> tuple[float, float]:
    return theory.PRESETS[name].eps_low, theory.PRESETS[name].eps_high


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            _label("grpo"),
            "PPO/GRPO ratio clip, ε = 0.2 on both sides; KL3 at the δ with the same lower side.",
            _values(ATR_DELTA, *_widths("grpo"), 0.1, ("ratio", "kl3")),
        ),
        Preset(
            _label("dapo"),
            "DAPO's clip-higher: ε_low = 0.2, ε_high = 0.28, tuned by hand; KL3 at the δ with the "
            "same lower side for comparison.",
            _values(ATR_DELTA, *_widths("dapo"), 0.1, ("ratio", "kl3")),
        ),
        Preset(
            _label("atr"),
            "KL3 with δ = 0.023144, chosen so that ε_low = 0.2: the derived ε_high is 0.2308 "
            "(DAPO tunes 0.28 by hand). The ratio row is the same clip as ε = 0.2 / 0.2308, "
            "what a trainer's ratio clip needs to reproduce it.",
            _values(ATR_DELTA, 0.2, round(ATR_EPS_HIGH, 6), 0.1, ("kl3", "ratio")),
        ),
        Preset(
            _label("gspo"),
            "GSPO's sequence-level ratio clip ε = 3e-4 / 4e-4, next to KL3 at the δ with the same "
            "lower side: at so small a budget KL3 is almost symmetric.",
            _values(GSPO_DELTA, *GSPO_EPS, 0.1, ("ratio", "kl3")),
        ),
        Preset(
            _label("dppo_kl"),
            "Binary-KL trust region per token (DPPO, verl dppo_kl; TRGPPO) at "
            "δ = 0.02: wide for rare tokens, tight for confident ones. Move p to see it.",
            _values(0.02, 0.2, 0.2, 0.01, ("binary_kl", "binary_tv", "kl3")),
        ),
    )
}


DEFAULT_PRESET = _label("atr")
_DEFAULT = PRESETS[DEFAULT_PRESET].values

# The clip explorer's URL parameters; its defaults are the ATR-GRPO preset.
EXPLORER_SPEC = (
    FloatParam("delta", "δ (divergence budget)", _DEFAULT["delta"], DELTA_MIN, DELTA_MAX),
    FloatParam("eps_low", "ε_low (ratio clip, lower side)", _DEFAULT["eps_low"], EPS_MIN, EPS_MAX),
    FloatParam("eps_high", "ε_high (ratio clip, upper side)", _DEFAULT["eps_high"], EPS_MIN, EPS_MAX),
    FloatParam("p", "p = π_old(a) (per-token measures)", _DEFAULT["p"], P_MIN, P_MAX),
    ChoiceListParam("measures", "measure", _DEFAULT["measures"], tuple(theory.MEASURES)),
    # a rollout correction beside the clips (the third policy): off, and out of the URL, until one is typed
    TextParam("correction", "rollout correction", "", max_chars=400, omit_default=True),
    IntParam("L", "sequence length L", 100, 1, 10_000, omit_default=True),
)


def kl3_delta_matching(eps_low: float | None = None, eps_high: float | None = None) -> tuple[float, str | None]:
    """The KL3 budget whose lower bound is 1 − ε_low (docs/theory.md §2), or whose upper bound is 1 + ε_high
    (exactly one of the two), clamped to δ's range, and a message when it had to be clamped."""
    if (eps_low is None) == (eps_high is None):
        raise ValueError(f"give exactly one of eps_low, eps_high; got eps_low={eps_low}, eps_high={eps_high}")
    delta = theory.delta_for_eps("kl3", eps_low=eps_low, eps_high=eps_high)
    if DELTA_MIN <= delta <= DELTA_MAX:
        return delta, None
    clamped = min(max(delta, DELTA_MIN), DELTA_MAX)
    side, eps = ("ε_low", eps_low) if eps_high is None else ("ε_high", eps_high)
    return clamped, (
        f"{side} = {eps:g} needs δ = {delta:.6g} under KL3, outside δ's range "
        f"[{DELTA_MIN:g}, {DELTA_MAX:g}]; δ is set to {clamped:g}."
    )


def matching_preset(values: Mapping[str, Any]) -> str | None:
    """The preset whose values are exactly these, if any."""
    for preset in PRESETS.values():
        if all(_same(values.get(k), v) for k, v in preset.values.items()):
            return preset.name
    return None


def _same(a, b) -> bool:
    if isinstance(b, float):
        return isinstance(a, (int, float)) and abs(a - b) <= 1e-9 * max(1.0, abs(b))
    return tuple(a) == tuple(b) if isinstance(b, tuple) and a is not None else a == b
