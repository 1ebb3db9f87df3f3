"""The clip that divclip's own verl modes and TRL plug-in run, and the warnings `divclip check` and the plug-ins share.

Torch-free and framework-free: `divclip check` reads configs with it, and `divclip.trainer.integrations.verl` /
`.trl` compute their bounds and log their run-time warnings with the same functions, so the numbers and the
words agree (docs/trainer.md, docs/theory.md §2-§3).

verl modes (registered by divclip.trainer.integrations.verl):
  atr_kl3         ε_low = clip_ratio_low (else clip_ratio) -> δ = KL3(1 - ε_low), r in [1 - ε_low, u_δ];
                  clip_ratio_high is ignored (a warning when it is not u_δ - 1).
  divclip_<m>     δ from the environment variable DIVCLIP_DELTA ("δ" or "δ_low,δ_high"); without it, δ_low and
                  δ_high are read from clip_ratio_low / clip_ratio_high, and a budget equal to verl's default 0.2
                  is refused (for a divergence it is a ratio width, e.g. KL3 [0.49, 1.77]).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from divclip.theory.bounds import kl3_bounds
from divclip.theory.conversions import delta_for_eps
from divclip.theory.measures import MEASURES, get_measure

DELTA_ENV = "DIVCLIP_DELTA"
PLUGIN_ENV = "VERL_USE_EXTERNAL_MODULES"
PLUGIN_MODULE = "divclip.trainer.integrations.verl"
VERL_DEFAULT_BUDGET = 0.2  # verl 0.9.1 actor.yaml: clip_ratio, clip_ratio_low and clip_ratio_high
REFERENCE_P = (0.01, 0.1, 0.5, 0.9)  # old-token probabilities at which p-dependent bounds are tabulated
RATIO_SCALE_DELTA = 0.1  # a quadratic divergence's budget this large is the size of a ratio width ε
ATR_MODE = "atr_kl3"
DIVCLIP_MODES = tuple(f"divclip_{m}" for m in MEASURES)
VERL_MODES = (ATR_MODE, *DIVCLIP_MODES)

SOURCES = {
    "ignored_key": "docs/trainer.md (divclip's verl modes and TRL plug-in): atr_kl3 derives its upper bound from "
    "clip_ratio_low; a divergence measure derives both bounds from δ",
    "divergence_budget_verl_default": "verl 0.9.1 trainer/config/actor/actor.yaml: clip_ratio, clip_ratio_low and "
    "clip_ratio_high default to 0.2, a ratio width; docs/theory.md §2",
    "divergence_budget_ratio_scale": "docs/theory.md §2: near r = 1 a quadratic divergence is about (r - 1)²/2, so "
    "the budget matching a ratio width ε is about ε²/2 (ε = 0.2: KL3 δ = 0.0231)",
    "clip_cannot_bind": "docs/theory.md §2: a budget at or above D(0+) puts the lower bound at 0, and one whose "
    "upper root does not exist puts the upper bound at infinity",
    "divclip_delta_from_clip_ratio": f"docs/trainer.md: {DELTA_ENV} gives divclip_* modes their δ directly",
}


@dataclass(frozen=True)
class Advice:
    """One warning, as `divclip check` reports it and the plug-ins log it: stable code, message, key."""

    code: str
    message: str
    key: str | None = None

    @property
    def source(self) -> str:
        return SOURCES[self.code]

    def to_dict(self) -> dict:
        return {**asdict(self), "source": self.source}

    def log_line(self) -> str:
        return f"divclip [{self.code}] {self.message}"


# ------------------------------------------------------------------------------------------------ bounds
def atr_kl3_bounds(eps_low: float) -> tuple[float, float, float]:
    """(lo, hi, δ) of atr_kl3 for a lower width ε_low in (0, 1): δ = KL3(1 - ε_low), lo = 1 - ε_low, hi = u_δ."""
    if isinstance(eps_low, bool) or not (isinstance(eps_low, (int, float)) and 0 < eps_low < 1):
        raise ValueError(f"actor.clip_ratio_low must lie in (0, 1) for atr_kl3 (it is ε_low), got {eps_low!r}")
    lo = 1.0 - eps_low  # computed exactly as verl's vanilla computes 1 - cliprange_low
    delta = float(get_measure("kl3").value(lo))
    return lo, float(kl3_bounds(delta)[1]), delta


def parse_delta(text, name: str = DELTA_ENV) -> tuple[float, float]:
    """(δ_low, δ_high) from "δ" or "δ_low,δ_high" (each a finite number > 0); ValueError naming `name`."""
    parts = str(text).split(",")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) not in (1, 2) or not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"{name} must be a budget δ > 0 or 'δ_low,δ_high' (e.g. 0.0231443 or 0.02,0.03), "
                         f"got {text!r}")
    return values[0], values[-1]


def measure_bounds(measure: str, d_low: float, d_high: float, p: float | None = None) -> tuple[float, float]:
    """(lo, hi): the lower root of D(r[, p]) = δ_low and the upper root of D(r[, p]) = δ_high."""
    m = get_measure(measure)
    if measure == "ratio":
        return 1.0 - d_low, 1.0 + d_high
    return float(m.bounds(d_low, p)[0]), float(m.bounds(d_high, p)[1])


def ratio_bounds(measure: str, d_low: float, d_high: float):
    """[lo, hi] for a p-independent measure; a per-p table [{p, lo, hi}] for a p-dependent one."""
    if not get_measure(measure).p_dependent:
        return list(measure_bounds(measure, d_low, d_high))
    return [{"p": p, "lo": lo, "hi": hi} for p in REFERENCE_P for lo, hi in [measure_bounds(measure, d_low, d_high, p)]]


# ---------------------------------------------------------------------------------------------- warnings
def _order_near_one(measure: str) -> float:
    """The power of (r - 1) in D near r = 1 (1 for ratio-like, 2 for KL-like), measured at p = 0.5."""
    m = get_measure(measure)
    p = 0.5 if m.p_dependent else None
    return math.log10(float(m.value(1.1, p)) / float(m.value(1.01, p)))


def budget_advice(measure: str, budgets, owner: str, default: float | None = VERL_DEFAULT_BUDGET) -> list[Advice]:
    """Warnings for divergence budgets [(key, δ), ...] of `measure` under `owner` (a mode or option name):
    δ equal to verl's/GRPO's default width 0.2, a quadratic measure's δ at the scale of a ratio width."""
    if measure in ("ratio",):
        return []
    out = []
    p = 0.5 if get_measure(measure).p_dependent else None
    at = " at p = 0.5" if p is not None else ""
    for key, d in budgets:
        lo, hi = measure_bounds(measure, d, d, p)
        if default is not None and d == default:
            want = _eps_match(measure, default)
            out.append(Advice(
                "divergence_budget_verl_default",
                f"{owner}: the {measure} budget δ = {d:g} ({key}) is the default ratio width 0.2 of verl's "
                f"clip_ratio and GRPO's ε, not a {measure} budget: it allows r in [{lo:.4g}, {hi:.4g}]{at}"
                f"{want}. Give δ explicitly.", key))
        elif d >= RATIO_SCALE_DELTA and _order_near_one(measure) > 1.5:
            out.append(Advice(
                "divergence_budget_ratio_scale",
                f"{owner}: the {measure} budget δ = {d:g} ({key}) looks like a ratio width ε: {measure} grows like "
                f"(r - 1)²/2 near r = 1, so it allows r in [{lo:.4g}, {hi:.4g}]{at}{_eps_match(measure, d)}.",
                key))
    return out


def _eps_match(measure: str, eps: float) -> str:
    """", while the ε = eps ratio clip's lower side is δ = ..." where that exists."""
    if not 0 < eps < 1:
        return ""
    try:
        d = delta_for_eps(measure, eps_low=eps, p=0.5 if get_measure(measure).p_dependent else None)
    except ValueError:
        return ""
    return f", while a ratio clip with ε_low = {eps:g} is δ = {d:.6g}"


def cannot_bind_advice(measure: str, d_low: float, d_high: float, owner: str, keys) -> list[Advice]:
    """The clip cannot bind on a side whose bound is 0 (below) or infinite (above), at every p tabulated."""
    m = get_measure(measure)
    out = []
    grid = REFERENCE_P if m.p_dependent else (None,)
    bounds = [measure_bounds(measure, d_low, d_high, p) for p in grid]
    if all(lo <= 0 for lo, _ in bounds):
        out.append(Advice("clip_cannot_bind", f"{owner}: the {measure} budget δ_low = {d_low:g} puts the lower "
                          f"bound at 0: no ratio is ever clipped below (D(0+) <= δ).", keys[0]))
    if all(not math.isfinite(hi) for _, hi in bounds):
        out.append(Advice("clip_cannot_bind", f"{owner}: the {measure} budget δ_high = {d_high:g} puts the upper "
                          f"bound at infinity: no ratio is ever clipped above.", keys[1]))
    return out


def ignored_key_advice(owner: str, key: str, value, used: str) -> Advice:
    return Advice("ignored_key", f"{owner} ignores {key} = {value!r}: {used}.", key)


SOURCES["on_policy_clip_inert"] = (
    "docs/theory.md §5; TRL 1.16 grpo_trainer.py uses the current log-probs, detached, as the old ones when "
    "gradient_accumulation_steps is a multiple of steps_per_generation × num_iterations")


def trl_advice(measure: str, clip_delta, epsilon: float, epsilon_high, num_iterations: int,
               steps_per_generation: int | None, gradient_accumulation_steps: int) -> list[Advice]:
    """Warnings for DivClipGRPOConfig's fields (the TRL plug-in logs them; `divclip check` reports them)."""
    out = []
    owner = f"clip_measure={measure!r}"
    if measure != "ratio":
        if epsilon_high is not None:
            out.append(ignored_key_advice(owner, "epsilon_high", epsilon_high,
                                          "the upper bound follows from the budget δ"))
        if clip_delta is not None:
            out += budget_advice(measure, [("clip_delta", clip_delta)], owner)
            out += cannot_bind_advice(measure, clip_delta, clip_delta, owner, ("clip_delta", "clip_delta"))
    steps = steps_per_generation if steps_per_generation is not None else gradient_accumulation_steps
    generate_every = steps * num_iterations
    if gradient_accumulation_steps % generate_every == 0:
        out.append(Advice(
            "on_policy_clip_inert",
            f"num_iterations={num_iterations} × steps_per_generation={steps} divides gradient_accumulation_steps="
            f"{gradient_accumulation_steps}: TRL uses the current log-probs as the old ones, the ratio is "
            f"identically 1 and no clip has any effect. Use num_iterations > 1 (or steps_per_generation > "
            f"gradient_accumulation_steps) if the clip is meant to matter.", "num_iterations"))
    return out
