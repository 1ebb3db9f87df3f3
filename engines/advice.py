"""Engine-neutral warnings about a divergence clip's budget, shared by `divclip check` and divclip's plug-ins.

Torch-free and engine-free: an engine module (`divclip.engines.verl`, `.trl`) reads its own settings, names its own
keys and calls these functions with them; its plug-in (`divclip.trainer.integrations.*`) logs the same `Advice`
at run time, so the numbers and the words agree (docs/trainer.md, docs/theory.md §2-§3). What one engine's
settings alone can get wrong is that engine's (`divclip.engines.<name>`, as `divclip.engines.pitfalls.Pitfall`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from divclip.theory.bounds import kl3_bounds
from divclip.theory.conversions import delta_for_eps
from divclip.theory.measures import get_measure

DEFAULT_RATIO_WIDTH = 0.2  # GRPO's ε (arXiv 2402.03300), and the ratio-clip default of verl and TRL
REFERENCE_P = (0.01, 0.1, 0.5, 0.9)  # old-token probabilities at which p-dependent bounds are tabulated
RATIO_SCALE_DELTA = 0.1  # a quadratic divergence's budget this large is the size of a ratio width ε
# DPPO's budgets (arXiv 2602.04879) as validated in SkyRL's port, and the range divclip accepts without a warning
# ("far outside": a factor of 4 either side)
DPPO_VALIDATED = {"binary_kl": 0.05, "binary_tv": 0.2}
DPPO_DELTA_RANGE = {"binary_kl": (0.0125, 0.2), "binary_tv": (0.05, 0.8)}

PUBLISHED_RANGES = (
    "PPO (arXiv 1707.06347): ε 0.1–0.3; DAPO (arXiv 2503.14476): 0.2/0.28; GSPO (arXiv 2507.18071): "
    "3e-4/4e-4; dual-clip PPO (arXiv 1912.09729): c = 3; DPPO (arXiv 2602.04879) as validated in "
    "SkyRL's port: δ = 0.05 (binary KL), 0.2 (binary TV)"
)
"""The source of `outside_published_range`, whichever check (engine-neutral or an engine's) raises it."""

SOURCES = {
    "ignored_key": "docs/trainer.md (divclip's verl modes and TRL plug-in): ATR's KL3 clip derives its upper bound "
    "from ε_low; a divergence measure derives both bounds from δ",
    "divergence_budget_verl_default": "docs/theory.md §2: 0.2 is a ratio width (GRPO's ε, arXiv 2402.03300, and the "
    "default of verl's and TRL's ratio clip), not a divergence budget",
    "divergence_budget_ratio_scale": "docs/theory.md §2: near r = 1 a quadratic divergence is about (r - 1)²/2, so "
    "the budget matching a ratio width ε is about ε²/2 (ε = 0.2: KL3 δ = 0.0231)",
    "clip_cannot_bind": "docs/theory.md §2: a budget at or above D(0+) puts the lower bound at 0, and one whose "
    "upper root does not exist puts the upper bound at infinity",
}
"""The source of each code these functions return (an engine's `Pitfall` may cite its own file instead)."""


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
def atr_kl3_bounds(eps_low: float, key: str = "eps_low") -> tuple[float, float, float]:
    """(lo, hi, δ) of ATR's KL3 clip for a lower width ε_low in (0, 1): δ = KL3(1 - ε_low), lo = 1 - ε_low,
    hi = u_δ; a ValueError names `key` (the setting that holds ε_low)."""
    if isinstance(eps_low, bool) or not (isinstance(eps_low, (int, float)) and 0 < eps_low < 1):
        raise ValueError(f"{key} must lie in (0, 1) for atr_kl3 (it is ε_low), got {eps_low!r}")
    lo = 1.0 - eps_low  # computed exactly as a ratio clip computes 1 - ε_low
    delta = float(get_measure("kl3").value(lo))
    return lo, float(kl3_bounds(delta)[1]), delta


def parse_delta(text, name: str) -> tuple[float, float]:
    """(δ_low, δ_high) from "δ" or "δ_low,δ_high" (each a finite number > 0); ValueError naming `name`."""
    parts = str(text).split(",")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) not in (1, 2) or not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"{name} must be a budget δ > 0 or 'δ_low,δ_high' (e.g. 0.0231443 or 0.02,0.03), got {text!r}")
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


def budget_advice(measure: str, budgets, owner: str, default: tuple[float, str] | None = None) -> list[Advice]:
    """Warnings for divergence budgets [(key, δ), ...] of `measure` under `owner` (a mode or option name): δ equal
    to a default ratio width (`default` = (width, whose default it is, in the engine's words)), a quadratic
    measure's δ at the scale of a ratio width."""
    if measure in ("ratio",):
        return []
    out = []
    p = 0.5 if get_measure(measure).p_dependent else None
    at = " at p = 0.5" if p is not None else ""
    for key, d in budgets:
        lo, hi = measure_bounds(measure, d, d, p)
        if default is not None and d == default[0]:
            want = _eps_match(measure, default[0])
            out.append(
                Advice(
                    "divergence_budget_verl_default",
                    f"{owner}: the {measure} budget δ = {d:g} ({key}) is the default ratio width {default[0]:g} of "
                    f"{default[1]}, not a {measure} budget: it allows r in [{lo:.4g}, {hi:.4g}]{at}"
                    f"{want}. Give δ explicitly.",
                    key,
                )
            )
        elif d >= RATIO_SCALE_DELTA and _order_near_one(measure) > 1.5:
            out.append(
                Advice(
                    "divergence_budget_ratio_scale",
                    f"{owner}: the {measure} budget δ = {d:g} ({key}) looks like a ratio width ε: {measure} grows like "
                    f"(r - 1)²/2 near r = 1, so it allows r in [{lo:.4g}, {hi:.4g}]{at}{_eps_match(measure, d)}.",
                    key,
                )
            )
    return out


def _eps_match(measure: str, eps: float) -> str:
    """ ", while the ε = eps ratio clip's lower side is δ = ..." where that exists."""
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
        out.append(
            Advice(
                "clip_cannot_bind",
                f"{owner}: the {measure} budget δ_low = {d_low:g} puts the lower "
                f"bound at 0: no ratio is ever clipped below (D(0+) <= δ).",
                keys[0],
            )
        )
    if all(not math.isfinite(hi) for _, hi in bounds):
        out.append(
            Advice(
                "clip_cannot_bind",
                f"{owner}: the {measure} budget δ_high = {d_high:g} puts the upper "
                f"bound at infinity: no ratio is ever clipped above.",
                keys[1],
            )
        )
    return out


def ignored_key_advice(owner: str, key: str, value, used: str) -> Advice:
    return Advice("ignored_key", f"{owner} ignores {key} = {value!r}: {used}.", key)
