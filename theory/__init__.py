"""divclip theory core: divergence measures, exact clip bounds, δ↔ε maps and the unified clipped loss.

The numpy/scipy/sympy core, including the method spec (`ClipSpec`, presets, method strings; `spec`), is
imported eagerly. The torch parts (`losses`, `loss_metrics`, `advantages`, and
`reallocation` / `softmax_dynamics`, which call the loss) are exported lazily, so `import divclip.theory` does
not pay for torch until a torch name is used.
"""

from __future__ import annotations

import importlib

from divclip.theory.atlas import gradient_weight, interval
from divclip.theory.bounds import kl3_bounds
from divclip.theory.conversions import delta_for_eps, equivalent_ratio_clip
from divclip.theory.correction import Correction, Filter, Rejection, correction_string, parse_correction
from divclip.theory.formula import measure_from_formula
from divclip.theory.measures import MEASURES, Measure, get_measure
from divclip.theory.registry import on_register, register_measure, unregister_measure
from divclip.theory.spec import PRESETS, ClipSpec, method_string, parse_method, parse_methods, preset, spec_label

_LAZY = {
    "divclip.theory.losses": (
        "policy_loss",
        "policy_terms",
        "PolicyTerms",
        "agg_loss",
        "LOSS_AGG_MODES",
        "clip_loss_with_bounds",
        "clipped_surrogate",
    ),
    "divclip.theory.loss_metrics": ("kl_penalty",),
    "divclip.theory.correction_apply": ("rollout_correction",),
    "divclip.theory.advantages": ("group_advantages",),
    "divclip.theory.reallocation": (
        "FeasibleRegion",
        "HeadroomCurve",
        "Optimum",
        "constrained_optimum",
        "feasible_region",
        "headroom_curve",
        "mass_flow",
    ),
    "divclip.theory.comparison": ("Comparison", "ComparisonRow", "compare_measures"),
    "divclip.theory.softmax_dynamics": (
        "Drift",
        "Group",
        "SoftmaxStep",
        "entropy_gradient",
        "multi_epoch_drift",
        "softmax_step",
    ),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'divclip.theory' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "MEASURES",
    "PRESETS",
    "ClipSpec",
    "Correction",
    "Filter",
    "Measure",
    "Rejection",
    "correction_string",
    "delta_for_eps",
    "equivalent_ratio_clip",
    "get_measure",
    "gradient_weight",
    "interval",
    "kl3_bounds",
    "measure_from_formula",
    "method_string",
    "parse_method",
    "parse_methods",
    "parse_correction",
    "on_register",
    "preset",
    "register_measure",
    "spec_label",
    "unregister_measure",
    *_WHERE,
]
