"""Method names -> `ClipSpec`s for the toy arena: the one method-string format of `divclip.theory.spec`.

Accepted forms (a comma-separated string, or a list of these); the grammar is `divclip.theory.spec`'s:
  grpo, dapo, atr, …        a preset of `divclip.theory.spec.PRESETS`
  kl3, k2, chi2, …          a measure at the δ whose lower bound is 1 - 0.2 (GRPO's ε_low), as ATR does
  kl3:0.05, binary_kl:0.02  a measure at budget δ (p-dependent measures need an explicit δ)
  ratio:0.2, ratio:0.2:0.28 a ratio clip of width ε, or ε_low:ε_high
  …/gated, …/dual=3         options (loss form, dual clip, TIS cap, sequence level)
  ClipSpec / (label, ClipSpec) / {label: ClipSpec}
"""

from __future__ import annotations

from divclip.theory.spec import DEFAULT_EPS_LOW, parse_method, parse_methods, spec_label

__all__ = ["DEFAULT_EPS_LOW", "method_spec", "resolve_methods", "spec_label"]

resolve_methods = parse_methods
"""{label: ClipSpec} in the given order; a ValueError names any entry it cannot read."""

method_spec = parse_method
"""The ClipSpec of one method string."""
