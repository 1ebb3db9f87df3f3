"""Boundary checks for the toy arena: every ValueError names the argument, the value and what is allowed."""

from __future__ import annotations

import math
import numbers


def check_int(name: str, value, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer (not a bool, not a float) within [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    v = int(value)
    if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
        lo = "-inf" if minimum is None else minimum
        hi = "inf" if maximum is None else maximum
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")
    return v


def check_real(
    name: str, value, minimum: float | None = None, maximum: float | None = None, open_interval: bool = False
) -> float:
    """A finite real number within [minimum, maximum] (or the open interval when `open_interval`)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    v = float(value)
    below = minimum is not None and (v <= minimum if open_interval else v < minimum)
    above = maximum is not None and (v >= maximum if open_interval else v > maximum)
    if below or above:
        lo = "-inf" if minimum is None else minimum
        hi = "inf" if maximum is None else maximum
        interval = f"({lo}, {hi})" if open_interval else f"[{lo}, {hi}]"
        raise ValueError(f"{name} must lie in {interval}, got {value!r}")
    return v


def check_choice(name: str, value, allowed) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
    return value
