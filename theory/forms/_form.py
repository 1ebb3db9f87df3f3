"""`Form`, the torch-free description of one loss form, and the catalogue `FORMS` that `declare_form` fills.

A Form carries everything divclip knows about one `ClipSpec.form`: its family and sources, the levels and
parameters it accepts, its numpy gradient weight and keep interval (the atlas's frame, docs/theory.md §1), its
torch `loss` and, where its engine ignores loss_agg_mode, its own `aggregate`. The code that looks a form up by
name (`divclip.theory.losses.policy_loss`, `ClipSpec`, the method-string parser) reads `FORMS` (or `get_form`);
`FORM_NAMES` is its live view of the names. The forms themselves are `divclip.theory.forms`'s modules, one file
each.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "FAMILIES",
    "FORMS",
    "FORM_NAMES",
    "LEVELS",
    "Form",
    "Param",
    "declare_form",
    "forms_with",
    "get_form",
    "param_names",
]

FAMILIES = ("hard clip", "soft gate", "truncated IS", "penalty", "sequence-level", "batch-selective")
LEVELS = ("token", "sequence")
"""The values of `ClipSpec.level`: the token ratio, or GSPO's length-normalised sequence ratio."""


@dataclass(frozen=True)
class Param:
    """One parameter of a loss form beyond its clip budget (written `/name=value` in a method string)."""

    name: str
    default: float
    doc: str
    above: float = -math.inf
    """value must be > above"""
    at_most: float = math.inf
    """value must be <= at_most"""

    def check(self, value, owner: str = "ClipSpec.params") -> float:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or not (self.above < value <= self.at_most):
            allowed = f"a finite number > {self.above:g}" if self.above > -math.inf else "a finite number"
            if self.at_most < math.inf:
                allowed += f" and <= {self.at_most:g}"
            raise ValueError(f"{owner}[{self.name!r}] must be {allowed}, got {value!r}")
        return float(value)


@dataclass(frozen=True)
class Form:
    """A loss form: the torch-free facts about one `ClipSpec.form`."""

    name: str
    family: str
    """one of FAMILIES"""
    summary: str
    """the per-token loss as one line of maths, e.g. 'max(−A·r, −A·clip(r, lo, hi))'"""
    sources: tuple[str, ...] = ()
    """where it comes from: 'arXiv:2505.22617 eq. 7', 'verl:clip_cov', 'trl:luspo'"""
    params: tuple[Param, ...] = ()
    uses_budget: bool = True
    """False: the form takes no clip budget (no eps_low/eps_high/delta), like SAPO's soft gate"""
    token_level: bool = True
    """False for sequence-level and batch-selective forms, whose weight is not a function of (q, r, A) alone"""
    weight: Callable | None = None
    """numpy w(spec, q, r, adv) -> array: ∂ℓ/∂log π = −A·w (docs/theory.md §1); None where not token level"""
    interval: Callable | None = None
    """numpy (spec, q, sign) -> (lo, hi) arrays: the ratio interval where the gradient is kept (w != 0), for A of
    that sign; None where the form has no interval (SAPO: no hard clip)"""
    weight_note: str = ""
    """for a form without `weight`: what w means for it, or why it has none"""
    example: str = ""
    """a method string of this form at its usual (paper or engine default) settings, e.g. 'grpo' or
    'ratio:0.2:0.2/cispo': the atlas's default row and the spec tests/theory/test_atlas.py checks it with
    (a declared form without one fails that test)"""
    check: Callable | None = None
    """(spec) -> None: the form's own checks of a ClipSpec (cross-parameter rules, the measures it accepts), run
    by ClipSpec's validation; raises ValueError naming the offending field"""
    levels: tuple[str, ...] = ("token",)
    """the `ClipSpec.level` values the form accepts: ('token', 'sequence') where level='sequence' swaps in GSPO's
    length-normalised sequence ratio for the token ratio (a sequence-level *family* form such as geo_mean builds
    its sequence weight itself, at level 'token')"""
    dual_clip: bool = False
    """True: the form takes `ClipSpec.dual_clip_c`, a cap c > 1 on −A·r for A < 0 (the clip form and LUSPO)"""
    loss: Callable | None = None
    """torch (log_prob, old_log_prob, advantages, mask, spec) -> `PolicyTerms` of (B, T) tensors
    (`divclip.theory.forms._kernels`), torch imported inside the function; None for a declaration without one"""
    aggregate: Callable | None = None
    """torch (terms, mask, rollout_is_weights, spec) -> scalar loss, or None to aggregate by loss_agg_mode: for a
    form whose engine aggregates it one way whatever loss_agg_mode says (verl's geo_mean and sapo);
    `policy_loss` calls it instead of `aggregate`"""
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"Form.family must be one of {list(FAMILIES)}, got {self.family!r}")
        if not self.levels or any(level not in LEVELS for level in self.levels):
            raise ValueError(f"Form.levels must be a non-empty tuple of {list(LEVELS)}, got {self.levels!r}")
        if not self.token_level and self.weight is not None and not self.weight_note:
            raise ValueError(f"Form {self.name!r} is not token level: say what its weight means (weight_note)")

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise ValueError(
            f"form {self.name!r} has no parameter {name!r}; its parameters: {[p.name for p in self.params] or 'none'}"
        )


_FORMS: dict[str, Form] = {}
FORMS = MappingProxyType(_FORMS)
"""{form name: Form}, read-only; `declare_form` adds to it."""

FORM_NAMES = FORMS.keys()
"""Every form name a ClipSpec accepts: a live view of `FORMS`'s keys (re-exported by spec)."""


def declare_form(form: Form) -> Form:
    """Add `form` to the catalogue, so that `ClipSpec(form=form.name)` and method strings accept it; its torch loss
    and aggregation are `FORMS[name].loss` and `.aggregate`."""
    if not isinstance(form, Form):
        raise ValueError(f"declare_form takes a Form, got {form!r}")
    _FORMS[form.name] = form
    return form


def get_form(name: str) -> Form:
    """The declared `Form` of a form name; a ValueError lists the declared ones."""
    if not isinstance(name, str) or name not in _FORMS:
        raise ValueError(f"loss form must be one of {sorted(_FORMS)}, got {name!r}")
    return _FORMS[name]


def param_names() -> set[str]:
    """Every parameter name of every declared form (the method-string parser's `/name=value` options)."""
    return {p.name for f in _FORMS.values() for p in f.params}


def forms_with(capability: str) -> list[str]:
    """The sorted names of the declared forms with `capability`: 'sequence' (level='sequence' accepted, `levels`)
    or 'dual_clip' (`dual_clip`)."""
    if capability == "sequence":
        return sorted(name for name, form in _FORMS.items() if "sequence" in form.levels)
    if capability == "dual_clip":
        return sorted(name for name, form in _FORMS.items() if form.dual_clip)
    raise ValueError(f"capability must be 'sequence' or 'dual_clip', got {capability!r}")
