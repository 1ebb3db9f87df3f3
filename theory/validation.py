"""Argument checks at the public boundary of `theory`.

Every error names the argument, the offending value and what is allowed, so that a CLI user or an app
user can fix the input without reading the source (STYLE.md, "Errors").
"""

from __future__ import annotations

import math

import numpy as np


def _describe(value) -> str:
    arr = np.asarray(value)
    if arr.ndim == 0:
        return repr(arr.item())
    bad = arr.ravel()[:3].tolist()
    return f"array of shape {arr.shape} (first values {bad})"


def as_float_array(name: str, value) -> np.ndarray:
    """Convert `value` to a float64 array or raise a ValueError naming `name`."""
    if isinstance(value, (str, bytes)):
        raise ValueError(f"{name} must be a number or an array of numbers, got {value!r}")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or an array of numbers, got {value!r}") from None
    return arr


def require_finite(name: str, arr: np.ndarray) -> np.ndarray:
    """`arr` itself if every entry is finite, else a ValueError naming the first bad entry."""
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{name}[{i}] = {float(arr.flat[i])!r}: {name} must contain finite numbers only")
    return arr


def check_delta(delta, name: str = "delta") -> np.ndarray:
    """δ must be finite and > 0."""
    arr = as_float_array(name, delta)
    bad = ~np.isfinite(arr) | (arr <= 0)
    if np.any(bad):
        raise ValueError(
            f"{name} must be a finite number > 0, got {_describe(np.asarray(arr)[bad] if arr.ndim else arr)}"
        )
    return arr


def check_eps(eps, name: str) -> float:
    """A ratio-clip width ε must be a finite scalar > 0."""
    arr = as_float_array(name, eps)
    if arr.ndim != 0:
        raise ValueError(f"{name} must be a scalar, got {_describe(arr)}")
    val = float(arr)
    if not math.isfinite(val) or val <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {eps!r}")
    return val


def check_p(p, name: str = "p") -> np.ndarray:
    """An old-policy probability must lie in the open interval (0, 1)."""
    arr = as_float_array(name, p)
    bad = ~((arr > 0) & (arr < 1))
    if np.any(bad):
        raise ValueError(
            f"{name} must lie in the open interval (0, 1), got {_describe(np.asarray(arr)[bad] if arr.ndim else arr)}"
        )
    return arr


def check_ratio(r, name: str = "r") -> np.ndarray:
    """A probability ratio must be >= 0 and not NaN (inf is allowed: D(inf) = inf)."""
    arr = as_float_array(name, r)
    bad = np.isnan(arr) | (arr < 0)
    if np.any(bad):
        raise ValueError(f"{name} must be a ratio >= 0, got {_describe(np.asarray(arr)[bad] if arr.ndim else arr)}")
    return arr
