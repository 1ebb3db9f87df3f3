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
    "PARAM_KINDS",
    "CLAMP_LOG_RATIO",
    "DUAL_CLIP_C",
    "EXP_DTYPE",
    "Form",
    "Param",
    "declare_form",
    "declared_params",
    "forms_declaring",
    "forms_with",
    "get_form",
    "is_adaptive",
    "is_intersection",
    "param_names",
]

FAMILIES = ("hard clip", "soft gate", "truncated IS", "penalty", "sequence-level", "batch-selective")
LEVELS = ("token", "sequence")
"""The values of `ClipSpec.level`: the token ratio, or GSPO's length-normalised sequence ratio."""


PARAM_KINDS = ("number", "flag", "choice")
"""The kinds of a form parameter: a finite number (bounded by `above`, `at_least`, `at_most`; a default of None
means off until set), a flag (True or False), or one of `choices` (strings)."""


@dataclass(frozen=True)
class Param:
    """One parameter of a loss form beyond its clip budget, declared by every form that reads it (its `Form.params`)
    and set in `ClipSpec.params`. In a method string it is `/OPTION=VALUE` (OPTION is `option`, or the name); a flag
    with an `option` is the bare `/OPTION`, which sets it to `not default` (`/noclamp`); a flag without one is
    `/NAME=1` or `/NAME=0`; parameters that share an option are written together, `/OPTION=A:B` in declaration
    order (`/tau=τ+:τ−`)."""

    name: str
    default: float | bool | str | None
    doc: str
    above: float = -math.inf
    """number: value must be > above"""
    at_most: float = math.inf
    """number: value must be <= at_most"""
    kind: str = "number"
    """one of PARAM_KINDS"""
    at_least: float = -math.inf
    """number: value must be >= at_least (checked after `above` and `at_most`; `why` says what it protects)"""
    why: str = ""
    """number: the reason for `at_least`, said in its error"""
    choices: tuple[str, ...] = ()
    """choice: the allowed values"""
    option: str = ""
    """its method-string spelling, when not its name (`dual` for dual_clip_c, `noclamp` for clamp_log_ratio)"""
    label: str = ""
    """a short noun for error messages ('dual-clip cap'), where the option is not the name"""

    def __post_init__(self):
        if self.kind not in PARAM_KINDS:
            raise ValueError(f"Param.kind must be one of {list(PARAM_KINDS)}, got {self.kind!r}")
        if self.kind == "choice" and self.default not in self.choices:
            raise ValueError(f"Param {self.name!r}: default {self.default!r} is not one of choices {self.choices!r}")
        if self.kind == "flag" and not isinstance(self.default, bool):
            raise ValueError(f"Param {self.name!r}: a flag's default is True or False, got {self.default!r}")
        if self.kind == "number" and self.default is not None:
            self.check(self.default)

    @property
    def spelling(self) -> str:
        """The method-string option: `option`, or the name."""
        return self.option or self.name

    def check(self, value, owner: str = "ClipSpec"):
        """`value` as the parameter holds it (a float, a bool or a str); a ValueError names the parameter, the
        value and what is allowed."""
        if self.kind == "flag":
            if not isinstance(value, bool):
                raise ValueError(f"{owner}.{self.name} must be True or False, got {value!r}")
            return value
        if self.kind == "choice":
            if not isinstance(value, str) or value not in self.choices:
                raise ValueError(f"{owner}.{self.name} must be one of {list(self.choices)}, got {value!r}")
            return value
        if value is None and self.default is None:
            return None
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or not (self.above < value <= self.at_most):
            if self.above > -math.inf:
                allowed = f"a finite number > {self.above:g}"
            elif self.at_least > -math.inf:
                allowed = f"a finite number >= {self.at_least:g}"
            else:
                allowed = "a finite number"
            if self.at_most < math.inf:
                allowed += f" and <= {self.at_most:g}"
            if self.default is None:
                allowed += " (or None: off)"
            raise ValueError(f"{owner}.{self.name} must be {allowed}, got {value!r}")
        if value < self.at_least:
            if self.at_most < math.inf:
                allowed = f"a finite number in [{self.at_least:g}, {self.at_most:g}]"
            else:
                allowed = f"a finite number >= {self.at_least:g}"
            raise ValueError(
                f"{owner}.{self.name} must be {allowed}{f' ({self.why})' if self.why else ''}, got {value!r}"
            )
        return float(value)


DUAL_CLIP_C = Param(
    "dual_clip_c",
    None,
    "dual-clip cap c > 1 on −A·r for A < 0 (verl vanilla's dual-clip constant, 3 by default there); None: off",
    above=1.0,
    option="dual",
    label="dual-clip cap",
)
"""The dual clip (arXiv:1912.09729 eq. 5), declared by the forms that clip with it (clip, luspo)."""
CLAMP_LOG_RATIO = Param(
    "clamp_log_ratio",
    True,
    "True: log r is clamped to ±20 before exp (GSPO's log s to <= 10), as verl does; False ('/noclamp'): r = "
    "exp(log r) unclamped, as TRL does (the metrics still see log r clamped to ±20)",
    kind="flag",
    option="noclamp",
)
"""verl's ±20 clamp of log r before exp, declared by the forms whose loss takes exp(log r) through it."""
EXP_DTYPE = Param(
    "exp_dtype",
    "input",
    "input: r = exp(log r) in the input's dtype; float32: exp in float32 whatever the input dtype, cast back (SkyRL's "
    "safe_exp_delta), and a gradient through r, −A·r, rounded as autograd through that float32 exp rounds it",
    kind="choice",
    choices=("input", "float32"),
)
"""SkyRL 0.3.0's float32 exp of the token ratio, declared by the forms SkyRL's safe_exp_delta losses read as
(clip, cispo, gated); token level only."""


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
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"Form {self.name!r} declares a parameter twice: {names}")

    @property
    def dual_clip(self) -> bool:
        """True: the form declares the dual clip `dual_clip_c` (the clip form and LUSPO)."""
        return any(p.name == "dual_clip_c" for p in self.params)

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
    for p in form.params:  # one parameter, one declaration: the forms that read it list the same Param
        for other in _FORMS.values():
            if other.name != form.name and any(q.name == p.name and q != p for q in other.params):
                raise ValueError(
                    f"Form {form.name!r} declares parameter {p.name!r} differently from form {other.name!r}: "
                    "list the same Param in both (docs/CONTRIBUTING.md, Adding a form parameter)"
                )
    _FORMS[form.name] = form
    return form


def get_form(name: str) -> Form:
    """The declared `Form` of a form name; a ValueError lists the declared ones."""
    if not isinstance(name, str) or name not in _FORMS:
        raise ValueError(f"loss form must be one of {sorted(_FORMS)}, got {name!r}")
    return _FORMS[name]


def param_names() -> set[str]:
    """Every parameter name of every declared form."""
    return {p.name for f in _FORMS.values() for p in f.params}


def declared_params() -> dict[str, Param]:
    """{name: Param} over every declared form (a name declared by several forms is one Param: the first form's)."""
    out: dict[str, Param] = {}
    for form in _FORMS.values():
        for p in form.params:
            out.setdefault(p.name, p)
    return out


def forms_declaring(name: str) -> list[str]:
    """The names of the declared forms that declare parameter `name`, in declaration order."""
    return [f.name for f in _FORMS.values() if any(p.name == name for p in f.params)]


def forms_with(capability: str) -> list[str]:
    """The sorted names of the declared forms with `capability`: 'sequence' (level='sequence' accepted, `levels`)
    or 'dual_clip' (`dual_clip`)."""
    if capability == "sequence":
        return sorted(name for name, form in _FORMS.items() if "sequence" in form.levels)
    if capability == "dual_clip":
        return sorted(name for name, form in _FORMS.items() if form.dual_clip)
    raise ValueError(f"capability must be 'sequence' or 'dual_clip', got {capability!r}")


# ------------------------------------------------------------------------------------------ kinds of spec
# `divclip.theory.spec` defines ClipSpec and its two kinds, and imports this package to check a spec's form: a form
# module cannot import spec back, so it tells the kinds apart by the field each kind alone has.
def is_intersection(spec) -> bool:
    """True for an intersection of clip budgets (`divclip.theory.spec.AllOf`, the spec with `parts`)."""
    return getattr(spec, "parts", None) is not None


def is_adaptive(spec) -> bool:
    """True for a spec whose δ a controller sets each step (`divclip.theory.spec.AdaptiveSpec`, the spec with a
    `signal`)."""
    return getattr(spec, "signal", None) is not None
