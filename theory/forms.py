"""The catalogue of loss forms, without torch: what each `ClipSpec.mode` is, its family, source and parameters.

A loss form ("mode") is declared once here (or in a `forms_*` module this one imports) as a `Form`: its name,
its family, where it comes from (arXiv ids and/or `engine:mode`), the parameters it takes beyond the clip
budget, and, where the form is token level, the numpy functions that place it in the one frame of the atlas
(docs/theory.md §1): its gradient weight w(q, r, A), with ∂ℓ/∂log π = −A·w for the per-token loss ℓ, and its
ratio interval by the sign of A. The torch implementation of a form is registered separately with
`divclip.theory.loss_modes.register_mode` (torch is imported only there); `declare_form` is what makes a
torch-free `ClipSpec(mode=...)` and `parse_method('.../mode')` accept the name.

Families (the atlas's columns):
  hard clip        the gradient is zeroed outside an interval (PPO, GRPO, DAPO, KL3, DPPO's gate, dual clip)
  soft gate        a smooth weight replaces the clip (SAPO)
  truncated IS     the importance weight is capped but every token keeps a gradient (CISPO, TOPR, GPPO...)
  penalty          a divergence penalty instead of (or beside) a clip (KL-Cov, DRO)
  sequence-level   one ratio per sequence (GSPO, GMPO)
  batch-selective  which tokens are clipped depends on the whole batch (Clip-Cov, BAPO)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType

from divclip.theory import form_weights as fw

__all__ = ["FAMILIES", "FORMS", "Form", "Param", "declare_form", "get_form"]

FAMILIES = ("hard clip", "soft gate", "truncated IS", "penalty", "sequence-level", "batch-selective")


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
    """A loss form: the torch-free facts about one `ClipSpec.mode`."""

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
    that sign; None where the form has no interval (`divclip.theory.form_weights`)"""
    weight_note: str = ""
    """for a form without `weight`: what w means for it, or why it has none"""
    example: str = ""
    """a method string of this form at its usual (paper or engine default) settings, e.g. 'grpo' or
    'ratio:0.2:0.2/cispo': the atlas's default row and the spec tests/theory/test_atlas.py checks it with
    (a declared form without one fails that test)"""
    check: Callable | None = None
    """(spec) -> None: the form's own checks of a ClipSpec (cross-parameter rules, the measures it accepts), run
    by ClipSpec's validation; raises ValueError naming the offending field"""
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"Form.family must be one of {list(FAMILIES)}, got {self.family!r}")
        if not self.token_level and self.weight is not None and not self.weight_note:
            raise ValueError(f"Form {self.name!r} is not token level: say what its weight means (weight_note)")

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise ValueError(
            f"mode {self.name!r} has no parameter {name!r}; its parameters: {[p.name for p in self.params] or 'none'}"
        )


MODE_NAMES: set[str] = set()
"""Every mode name a ClipSpec accepts: the declared forms, plus modes `register_mode` adds (re-exported by spec)."""

_FORMS: dict[str, Form] = {}
FORMS = MappingProxyType(_FORMS)
"""{mode name: Form}, read-only; `declare_form` adds to it."""


def declare_form(form: Form) -> Form:
    """Add `form` to the catalogue, so that `ClipSpec(mode=form.name)` and method strings accept it."""
    if not isinstance(form, Form):
        raise ValueError(f"declare_form takes a Form, got {form!r}")
    _FORMS[form.name] = form
    MODE_NAMES.add(form.name)
    return form


def get_form(mode: str) -> Form:
    """The declared `Form` of a mode name; a ValueError lists the declared ones."""
    if mode not in _FORMS:
        raise ValueError(f"loss form (mode) must be one of {sorted(_FORMS)}, got {mode!r}")
    return _FORMS[mode]


def param_names() -> set[str]:
    """Every parameter name of every declared form (the method-string parser's `/name=value` options)."""
    return {p.name for f in _FORMS.values() for p in f.params}


def _zero_or_one(spec, name: str):
    if spec.param(name) not in (0.0, 1.0):
        raise ValueError(f"ClipSpec.params[{name!r}] must be 0 or 1, got {spec.param(name)!r}")


# The four forms the loss has had since v1, with their numpy weights and intervals (`form_weights`).
for _form in (
    Form(
        "clip",
        "hard clip",
        "max(−A·r, −A·clip(r, lo, hi)), for A < 0 at most −A·c with a dual clip",
        (
            "arXiv:1707.06347",
            "arXiv:1912.09729 eq. 5",
            "verl:vanilla",
            "trl:grpo",
            "trl:bnpo",
            "trl:dr_grpo",
            "trl:dapo",
        ),
        weight=fw.clip_weight,
        interval=fw.clip_interval,
        example="grpo",
    ),
    Form(
        "gated",
        "hard clip",
        "−A·sg(min(r, c))·log π · 1[D(r, q) ≤ δ or not moved by A]",
        ("arXiv:2602.04879", "verl:dppo_kl", "verl:dppo_tv"),
        weight=fw.gated_weight,
        interval=fw.gated_interval,
        example="dppo_kl",
    ),
    Form(
        "cispo",
        "truncated IS",
        "−sg(clip(r, lo, hi))·A·log π",
        ("arXiv:2506.13585", "verl:cispo"),
        weight=fw.cispo_weight,
        interval=fw.cispo_interval,
        example="ratio:0.2:0.2/cispo",
    ),
    Form(
        "sapo",
        "soft gate",
        "−A·σ(τ(r − 1))·4/τ, τ by the sign of A",
        ("arXiv:2511.20347", "verl:sapo", "trl:sapo"),
        uses_budget=False,
        weight=fw.sapo_weight,
        params=(
            Param(
                "sapo_seq_mean",
                0.0,
                "1: aggregate seq-mean-token-mean whatever loss_agg_mode says, as "
                "verl 0.9.1's sapo does (the spec `from_engine('verl', ...)` reads); 0: honour "
                "loss_agg_mode (TRL's sapo)",
                above=-1e-300,
                at_most=1.0,
            ),
        ),
        check=lambda spec: _zero_or_one(spec, "sapo_seq_mean"),
        weight_note="w = r·4σ(1 − σ), σ = σ(τ(r − 1)): r times the gate's slope; no interval (no hard clip)",
        example="sapo",
    ),
):
    declare_form(_form)
# The forms of divclip.theory.forms_verl, forms_trl and forms_published are declared when divclip.theory.spec
# imports those modules (they import this one, never spec, so there is no cycle).
