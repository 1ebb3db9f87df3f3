"""The explorer's export: which method an explorer interval stands for, and its text for any engine.

The engines' settings are written by `divclip.engines` (one module per engine), the same text `divclip export`
prints; this module only maps the page's choices onto it: an interval to its ClipSpec, and the page's format
choice ("overrides" = the engine's command line, "yaml", "python") to the engine's own format name.
"""

from __future__ import annotations

from divclip.app.intervals import ClipInterval
from divclip.engines import describe, write
from divclip.theory.spec import ClipSpec

__all__ = ["DPPO_TIS_CAP", "FORMATS", "describe", "engine_format", "interval_spec", "method_export"]

_DPPO = ("binary_kl", "binary_tv")
DPPO_TIS_CAP = 20.0  # verl's in-code fallback for dppo_*'s IS truncation, as divclip's dppo presets
FORMATS = ("overrides", "yaml", "python")
"""The page's format choice: 'overrides' is each engine's command line (verl overrides, TRL/OpenRLHF flags)."""
_COMMAND_LINES = ("overrides", "flags")


def interval_spec(iv: ClipInterval):
    """The method an explorer interval stands for: the ratio clip at (ε_low, ε_high), DPPO's mask for binary KL/TV
    (the method the page names), else the PPO clip by that measure at δ (p only places the drawing)."""
    if iv.delta is None:  # the widths come back as 1 - lo, hi - 1 (0.19999999999999996): 15 digits are the slider's
        return ClipSpec("ratio", eps_low=float(f"{iv.eps_low:.15g}"), eps_high=float(f"{iv.eps_high:.15g}"))
    if iv.name in _DPPO:
        return ClipSpec(iv.name, delta=iv.delta, form="gated", params={"tis_cap": DPPO_TIS_CAP})
    return ClipSpec(iv.name, delta=iv.delta)


def engine_format(engine_formats: tuple, fmt: str) -> str | None:
    """The engine's own name for the page's format choice, or None where the engine has no such text."""
    if fmt == "overrides":
        return next((f for f in engine_formats if f in _COMMAND_LINES), None)
    return fmt if fmt in engine_formats else None


def method_export(spec, engine: str, label: str | None = None):
    """`spec` as complete settings for `engine` (`divclip.engines.EngineWrite`: .settings, .env, .text(fmt));
    a ValueError says what the engine cannot express."""
    return write(spec, engine, label=label)
