"""The loss forms: one module per form, each the whole of what divclip knows about one `ClipSpec.form`.

A loss form is one file here. It holds:

* `FORM`, its `Form` (`divclip.theory.forms._form`): name, family, summary, sources (arXiv ids and/or
  `engine:mode`), the levels and parameters it accepts beyond the clip budget, a method string at its usual
  settings (`example`), and its own checks of a spec;
* its numpy gradient weight w(q, r, A), with ∂ℓ/∂log π = −A·w for the per-token loss ℓ, and its keep interval by
  the sign of A (`weight`, `interval`: the one frame of the atlas, docs/theory.md §1); a form whose weight is not a
  function of (q, r, A) alone (sequence-level, batch-selective) says why in `weight_note` instead;
* its torch `loss(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms`, with torch imported inside the
  function, so that `import divclip.theory` (and this package) stays torch-free; the kernels several forms share
  are in `divclip.theory.forms._kernels` (torch) and `divclip.theory.forms._numpy` (numpy);
* optionally its own `aggregate(terms, mask, rollout_is_weights, spec)`, for a form whose engine ignores
  loss_agg_mode (verl's geo_mean and sapo).

Adding a form is one file here plus its test plus the engine rows that read it: write `theory/forms/NAME.py`
with those parts, add NAME to `FORM_MODULES` below, add its tests (tests/theory/test_form_files.py checks every
file has the parts; tests/theory/test_atlas.py checks its weight against autograd through its loss;
tests/theory/test_loss_nosync.py compiles its loss), and, where an engine ships it, the engine's rows in
`divclip.engines` (docs/CONTRIBUTING.md). `FORMS` is the catalogue (a form's torch loss is `FORMS[name].loss`, its
aggregation `FORMS[name].aggregate`) and `FORM_NAMES` its names; nothing declares a form as a side effect of
importing another module: the forms are declared here, from `FORM_MODULES`, in that order (the atlas lists them
so).

Families (the atlas's columns):
  hard clip        the gradient is zeroed outside an interval (PPO, GRPO, DAPO, KL3, DPPO's gate, dual clip)
  soft gate        a smooth weight replaces the clip (SAPO)
  truncated IS     the importance weight is capped but every token keeps a gradient (CISPO, TOPR, GPPO...)
  penalty          a divergence penalty instead of (or beside) a clip (KL-Cov, DRO)
  sequence-level   one ratio per sequence (GSPO, GMPO)
  batch-selective  which tokens are clipped depends on the whole batch (Clip-Cov, BAPO)
"""

from __future__ import annotations

import importlib
from types import MappingProxyType

from divclip.theory.forms._form import (
    _FORMS,  # noqa: F401  (the catalogue's dict, for tests' clean-up)
    CLAMP_LOG_RATIO,
    DUAL_CLIP_C,
    EXP_DTYPE,
    FAMILIES,
    FORM_NAMES,
    FORMS,
    LEVELS,
    PARAM_KINDS,
    Form,
    Param,
    declare_form,
    declared_params,
    forms_declaring,
    forms_with,
    get_form,
    param_names,
)

__all__ = [
    "CLAMP_LOG_RATIO",
    "DUAL_CLIP_C",
    "EXP_DTYPE",
    "FAMILIES",
    "FORMS",
    "FORM_MODULES",
    "FORM_NAMES",
    "LEVELS",
    "PARAM_KINDS",
    "PUBLISHED_METHODS",
    "Form",
    "Param",
    "declare_form",
    "declared_params",
    "forms_declaring",
    "forms_with",
    "get_form",
    "param_names",
]

FORM_MODULES = (
    # the forms the loss has had since v1
    "clip",
    "gated",
    "cispo",
    "sapo",
    # published papers no engine ships (docs/theory.md §7)
    "dcpo",
    "gppo",
    "cegppo",
    "aspo",
    "topr",
    "bapo",
    # TRL's own (docs/theory.md §1)
    "cispo_cap",
    "luspo",
    "vespo",
    # verl's own (docs/theory.md §4.1)
    "gpg",
    "dro",
    "clip_cov",
    "kl_cov",
    "geo_mean",
    "reinforce_is",
    "reinforce_seq_is",
    # SkyRL's own (Tinker's importance_sampling loss)
    "importance_sampling",
)
"""The form modules of this package, declared in this order; a form file not listed here is an error
(tests/theory/test_form_files.py)."""

for _name in FORM_MODULES:
    declare_form(importlib.import_module(f"{__name__}.{_name}").FORM)

PUBLISHED_METHODS = MappingProxyType(
    {name: form.example for name, form in FORMS.items() if all(s.startswith("arXiv:") for s in form.sources)}
)
"""Each published form no engine ships (its sources are papers only) at its paper's settings, as a method string
(docs/theory.md §7)."""

del _name
