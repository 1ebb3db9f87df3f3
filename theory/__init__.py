"""divclip theory core: divergence measures, exact clip bounds, δ↔ε maps and the unified clipped loss.

Pure maths (numpy/scipy/sympy); torch appears only in `theory.losses`.
"""

from theory.bounds import kl3_bounds
from theory.conversions import delta_for_eps, equivalent_ratio_clip
from theory.formula import measure_from_formula
from theory.measures import MEASURES, Measure, get_measure

__all__ = [
    "MEASURES",
    "Measure",
    "delta_for_eps",
    "equivalent_ratio_clip",
    "get_measure",
    "kl3_bounds",
    "measure_from_formula",
]
