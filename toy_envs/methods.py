"""Method names -> `ClipSpec`s: the presets of `divclip.theory.losses`, or any registered measure.

Accepted forms (a comma-separated string, or a list of these):
  grpo, dapo, atr, …        a preset of `divclip.theory.losses.PRESETS`
  kl3, k2, chi2, …          a measure at the δ whose lower bound is 1 - 0.2 (GRPO's ε_low), as ATR does
  kl3:0.05, binary_kl:0.02  a measure at budget δ (p-dependent measures need an explicit δ)
  ratio:0.2, ratio:0.2:0.28 a ratio clip of width ε, or ε_low:ε_high
  ClipSpec / (label, ClipSpec) / {label: ClipSpec}
"""

from __future__ import annotations

from collections.abc import Mapping

DEFAULT_EPS_LOW = 0.2


def resolve_methods(methods) -> dict:
    """{label: ClipSpec} in the given order; a ValueError names any entry it cannot read."""
    from divclip.theory.losses import ClipSpec

    if isinstance(methods, str):
        methods = [m.strip() for m in methods.split(",") if m.strip()]
    items = list(methods.items()) if isinstance(methods, Mapping) else list(methods or [])
    if not items:
        raise ValueError(f"methods must name at least one method (e.g. 'grpo,dapo,atr'), got {methods!r}")
    out: dict = {}
    for item in items:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            label, spec = item
            if not isinstance(spec, ClipSpec):
                spec = method_spec(spec)
        elif isinstance(item, ClipSpec):
            label, spec = spec_label(item), item
        elif isinstance(item, str):
            label, spec = item, method_spec(item)
        else:
            raise ValueError(f"methods entries must be names, ClipSpecs or (label, ClipSpec) pairs, got {item!r}")
        if not label or "," in label or label in out:
            raise ValueError(f"method labels must be non-empty, unique and comma-free, got {label!r}")
        out[label] = spec
    return out


def method_spec(name: str):
    """The ClipSpec of one method string (see the module doc string for the forms)."""
    from divclip.theory import MEASURES, delta_for_eps
    from divclip.theory.losses import PRESETS, ClipSpec, preset

    allowed = (f"a preset {sorted(PRESETS)}, a measure {sorted(MEASURES)}, 'measure:delta', "
               f"'ratio:eps' or 'ratio:eps_low:eps_high'")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"method must be {allowed}, got {name!r}")
    name = name.strip()
    if name in PRESETS:
        return preset(name)
    head, *nums = name.split(":")
    if head not in MEASURES:
        raise ValueError(f"unknown method {name!r}: use {allowed}")
    try:
        values = [float(x) for x in nums]
    except ValueError:
        raise ValueError(f"method {name!r}: the numbers after ':' must be floats ({allowed})") from None
    if head == "ratio":
        if len(values) not in (1, 2):
            raise ValueError(f"method {name!r}: a ratio clip needs 'ratio:eps' or 'ratio:eps_low:eps_high'")
        lo, hi = values[0], values[-1]
        return ClipSpec("ratio", eps_low=lo, eps_high=hi)
    if len(values) > 1:
        raise ValueError(f"method {name!r}: a divergence measure takes one budget, 'measure:delta'")
    if values:
        return ClipSpec(head, delta=values[0])
    if MEASURES[head].p_dependent:
        raise ValueError(f"method {name!r}: the p-dependent measure {head!r} needs a budget, e.g. '{head}:0.02'")
    return ClipSpec(head, delta=delta_for_eps(head, eps_low=DEFAULT_EPS_LOW))


def spec_label(spec) -> str:
    """A short readable label for a ClipSpec ('ratio 0.2/0.28', 'kl3 δ=0.02314')."""
    if spec.measure == "ratio":
        return f"ratio {spec.eps_low:g}/{spec.eps_high:g}"
    return f"{spec.measure} δ={spec.delta:.4g}"
