"""What a method is, without torch: `ClipSpec`, the named presets, the method-string format and its label.

Every caller that names a method (the toy arena, `divclip realloc`, the trainer, the app, the plug-ins) goes
through this module: `parse_method` reads a string, `PRESETS` holds the named specs, `spec_label` prints a spec
and `method_string` writes the string that parses back to it. None of it imports torch; the loss that consumes
a spec is `divclip.theory.losses.policy_loss`.

Method strings (whitespace around the whole string is ignored; nothing else is):

    method  := base ("/" option)*
    base    := PRESET                        grpo, dapo, atr, dppo_kl, dppo_tv, gspo, sapo
             | MEASURE                       a p-independent measure at the δ that puts its lower bound at
                                             1 - 0.2 (GRPO's ε_low), as ATR-GRPO does; 'ratio' is ε = 0.2
             | MEASURE ":" NUMBER            budget δ (for 'ratio': a symmetric clip width ε)
             | "ratio:" NUMBER ":" NUMBER    ratio clip ε_low:ε_high (DAPO's clip-higher is ratio:0.2:0.28)
    option  := FORM                                the loss form (default clip; a preset keeps its own): clip,
                                                 gated, cispo, sapo, or any form in `divclip.theory.forms`
             | NAME "=" NUMBER                     a parameter of the loss form (`Form.params`), e.g.
                                                 '/clip_cov_ratio=0.0002'; unset ones take the form's default
             | "seq"                               GSPO's sequence-level ratio
             | "noclamp"                           exp of the raw log-ratio, as TRL (verl clamps log r to ±20)
             | "dual=" NUMBER                      dual-clip cap c > 1 (form clip)
             | "tis=" NUMBER                       truncated IS weight cap (form gated)
             | "tau=" NUMBER ":" NUMBER            SAPO gate temperatures for A > 0 and A <= 0

Examples: `kl3`, `kl3:0.023144`, `ratio:0.2:0.28`, `binary_kl:0.05/gated/tis=20`, `dapo/dual=3`, `ratio:3e-4:4e-4/seq`.
A preset followed by options is that preset with those fields replaced. NUMBER is a finite Python float.
`,` separates methods in a list (`parse_methods`).

Two combinators extend a method (docs/future_work.md):

    method   := part ("&" part)*                 intersection (`AllOf`): per token, r is clipped to
                                                 [max of the parts' lo, min of their hi]
              | part "@" SIGNAL "=" NUMBER ( ":" KEY "=" NUMBER )*     adaptive δ (`AdaptiveSpec`)
    SIGNAL   := "clipfrac" | "kl3" | "entropy"   the signal held at the target NUMBER
    KEY      := "gain"                           step size g of the log-space update (default 0.3)
              | "min" | "max"                    bounds on δ (default δ0/100 and 100·δ0)
              | "dir"                            +1 or -1: the assumed sign of d(signal)/dδ (defaults:
                                                 clipfrac -1, kl3 +1, entropy -1)

An intersection's parts are form 'clip' at token level (dual clip allowed when every part has the same cap):
e.g. `kl3:0.023144&binary_tv:0.2`, a global KL3 budget that also protects rare tokens. An adaptive part is a
measure with a budget δ (not 'ratio', not sapo, not an intersection); its δ0 is the part's δ, and after each
step δ <- clamp(δ·exp(dir·gain·clamp((target - signal)/target, -1, 1)), min, max) (`divclip.theory.adaptive`):
e.g. `kl3@clipfrac=0.1`, `kl3:0.01@kl3=0.002:gain=0.5:max=0.2`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from divclip.theory.conversions import delta_for_eps
from divclip.theory.forms import FORM_NAMES, FORMS, LEVELS, declared_params, forms_declaring, forms_with
from divclip.theory.forms._form import is_adaptive
from divclip.theory.forms._numpy import upper_delta
from divclip.theory.measures import MEASURES, Measure, get_measure
from divclip.theory.methods import preset_methods

__all__ = [
    "DEFAULT_EPS_LOW",
    "LEVELS",
    "PRESETS",
    "AdaptiveSpec",
    "AllOf",
    "ClipSpec",
    "all_of",
    "is_adaptive",
    "method_string",
    "parse_method",
    "parse_methods",
    "preset",
    "spec_label",
]

MAX_METHOD_ECHO = 80
"""A method string longer than this is shown cut, with its length, in error messages."""
DEFAULT_EPS_LOW = 0.2
"""A bare measure name means the budget whose lower bound is 1 - DEFAULT_EPS_LOW (GRPO's ε_low), as ATR-GRPO."""

# Loss-form names (`divclip.theory.forms.FORM_NAMES`): the declared forms.
# What a form accepts (level='sequence', a dual clip) is its Form's `levels` and `dual_clip` (`forms_with`).
# p-dependent measures the torch loss can solve per-token bounds for (`divclip.theory.forms._kernels._TORCH_BOUNDS`).
LOSS_P_DEPENDENT = frozenset({"binary_kl", "binary_tv"})


# ------------------------------------------------------------------------------------------------ spec
_REQUIRED = object()


def _undeclared(name: str, form_name: str, form) -> str:
    """Why `name` is refused on form `form_name`: the forms that declare it, or the form's own parameters."""
    takers = forms_declaring(name)
    if not takers:
        own = [p.name for p in form.params]
        return f"form {form_name!r} has no parameter {name!r}; its parameters: {own or 'none'}"
    param = declared_params()[name]
    group = [p.name for p in declared_params().values() if param.option and p.option == param.option]
    names = "/".join(group) if len(group) > 1 else name
    verb = "apply" if len(group) > 1 else "applies"
    others = f" (and {', '.join(repr(t) for t in takers[1:])})" if len(takers) > 1 else ""
    return (
        f"ClipSpec.{names} {verb} to form={takers[0]!r} only{others}, got form={form_name!r} (form {form_name!r} "
        f"has no parameter {name!r})"
    )


def _positive(name: str, value, above: float = 0.0, at_most: float | None = None, owner: str = "ClipSpec") -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and value > above
    if ok and at_most is not None:
        ok = value <= at_most
    if not ok:
        allowed = f"a finite number > {above:g}" + ("" if at_most is None else f" and <= {at_most:g}")
        raise ValueError(f"{owner}.{name} must be {allowed}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class ClipSpec:
    """How a token's policy gradient is limited: a divergence measure, its budget, and the loss form."""

    measure: str | Measure = "ratio"
    """Divergence measure: a name in `theory.MEASURES` (or a `Measure`); 'ratio' is PPO's |r - 1|."""
    delta: float | None = None
    """Budget δ of D(r[, p]) <= δ for every measure except 'ratio' (KL3: 0.01–0.05 is sane)."""
    eps_low: float | None = None
    """'ratio' only: lower clip width, r >= 1 - eps_low (GRPO/DAPO 0.2; GSPO 3e-4)."""
    eps_high: float | None = None
    """'ratio' only: upper clip width, r <= 1 + eps_high (GRPO 0.2, DAPO 0.28; GSPO 4e-4)."""
    level: str = "token"
    """'token', or 'sequence' for GSPO's length-normalised sequence ratio (form 'clip', p-free measures)."""
    form: str = "clip"
    """Loss form: 'clip' (PPO), 'gated' (DPPO mask), 'cispo', 'sapo', ...: a module of `divclip.theory.forms`."""
    params: tuple = ()
    """The form's parameters beyond the budget (its `Form.params`), given as a dict or (name, value) pairs and kept
    as sorted pairs of the values that differ from the form's defaults; read one with `spec.param(name)`. E.g.
    dual_clip_c (forms clip, luspo: '/dual=3'), tis_cap (gated: '/tis=20'), tau_pos/tau_neg (sapo: '/tau=1:1.05'),
    clamp_log_ratio (the forms that clamp log r to ±20 before exp, as verl: '/noclamp' is TRL's raw exp),
    clip_cov_ratio (clip_cov). Declared in `divclip.theory.forms` (docs/CONTRIBUTING.md)."""

    def __post_init__(self):
        if not isinstance(self.measure, Measure) and self.measure not in MEASURES:
            raise ValueError(f"ClipSpec.measure must be one of {sorted(MEASURES)} (or a Measure), got {self.measure!r}")
        if self.form not in FORM_NAMES:
            raise ValueError(f"ClipSpec.form must be one of {sorted(FORM_NAMES)}, got {self.form!r}")
        if self.level not in LEVELS:
            raise ValueError(f"ClipSpec.level must be one of {list(LEVELS)}, got {self.level!r}")
        self._check_params()
        self._check_budget()
        if self.level == "sequence":
            if self.form not in forms_with("sequence"):
                raise ValueError(
                    f"ClipSpec.level='sequence' (GSPO) needs a form in {forms_with('sequence')}, got form={self.form!r}"
                )
            if self.p_dependent:
                raise ValueError(
                    f"ClipSpec.level='sequence' needs a p-independent measure (a sequence has no single p), "
                    f"got measure={self.measure_name!r}"
                )
        if self.p_dependent and self.measure_name not in LOSS_P_DEPENDENT:
            raise ValueError(
                f"ClipSpec.measure={self.measure_name!r} is p-dependent without a torch bound solver; "
                f"p-dependent measures supported in the loss: {sorted(LOSS_P_DEPENDENT)}"
            )

    def _check_params(self):
        params = self.params
        if isinstance(params, Mapping):
            params = tuple(params.items())
        if not isinstance(params, tuple) or not all(isinstance(kv, tuple) and len(kv) == 2 for kv in params):
            raise ValueError(f"ClipSpec.params must be a dict or (name, value) pairs, got {self.params!r}")
        form = FORMS[self.form]
        declared = {p.name: p for p in form.params}
        checked = {}
        for name, value in params:
            if name in checked:
                raise ValueError(f"ClipSpec.params names {name!r} twice")
            if name not in declared:
                other = declared_params().get(name)
                if other is not None and value == other.default:
                    continue  # another form's parameter at its default: the same spec as leaving it out
                raise ValueError(_undeclared(name, self.form, form))
            value = declared[name].check(value)
            checked[name] = value
        values = {p.name: checked.get(p.name, p.default) for p in form.params}
        object.__setattr__(
            self, "params", tuple(sorted((k, v) for k, v in checked.items() if v != declared[k].default))
        )
        object.__setattr__(self, "_values", values)
        if form.check is not None:
            form.check(self)  # the form's own rules (divclip.theory.forms.Form.check)

    def param(self, name: str, default=_REQUIRED):
        """The value of the form's parameter `name`: the one set in `params`, else the form's default. A name the
        form does not declare is a ValueError, or `default` where one is given (`spec.param("dual_clip_c", None)`
        for a reader that takes any form)."""
        try:
            return self._values[name]
        except KeyError:
            if default is not _REQUIRED:
                return default
            raise ValueError(
                f"form {self.form!r} has no parameter {name!r}; its parameters: {sorted(self._values) or 'none'}"
            ) from None

    def _check_budget(self):
        form = FORMS.get(self.form)
        if form is not None and not form.uses_budget:
            if (self.delta, self.eps_low, self.eps_high) != (None, None, None):
                raise ValueError(
                    f"form={self.form!r} takes no clip budget ({form.summary}): "
                    f"got delta={self.delta!r}, eps_low={self.eps_low!r}, eps_high={self.eps_high!r}"
                )
            return
        if self.measure_name == "ratio":
            if self.delta is not None:
                raise ValueError(
                    f"measure 'ratio' takes clip widths eps_low and eps_high, not delta (got delta={self.delta!r})"
                )
            if self.eps_low is None or self.eps_high is None:
                raise ValueError(
                    f"measure 'ratio' needs both eps_low and eps_high, got eps_low={self.eps_low!r}, "
                    f"eps_high={self.eps_high!r}"
                )
            # ε_low >= 0 of any size: 0 keeps no room below 1 (SkyRL's CISPO floor at 1, AReaL's M2PO), ε_low >= 1
            # no lower bound at all (verl's CISPO without a floor, DeepSeekMath's ε = 10)
            _positive("eps_low", self.eps_low, above=-math.inf)
            if self.eps_low < 0:
                raise ValueError(f"ClipSpec.eps_low must be a finite number >= 0, got {self.eps_low!r}")
            _positive("eps_high", self.eps_high)
            for name, value, bound in (("eps_high", self.eps_high, 1.0 + self.eps_high),):
                if bound == 1.0:
                    raise ValueError(
                        f"ClipSpec.{name}={value!r} underflows: 1 {'-' if name == 'eps_low' else '+'} "
                        f"{value!r} rounds to 1 in float64 (use a width of at least ~1.2e-16)"
                    )
        else:
            if self.eps_low is not None or self.eps_high is not None:
                raise ValueError(
                    f"eps_low/eps_high are clip widths for measure 'ratio'; measure {self.measure_name!r} takes "
                    f"delta (got eps_low={self.eps_low!r}, eps_high={self.eps_high!r})"
                )
            if self.delta is None:
                raise ValueError(f"measure {self.measure_name!r} needs a budget delta > 0, got delta=None")
            _positive("delta", self.delta)
            if not self.p_dependent:
                lo, hi = self.ratio_bounds()  # a custom measure may refuse this δ: fail here, not mid-training
                if lo == 1.0 or hi == 1.0:
                    side = "lower" if lo == 1.0 else "upper"
                    raise ValueError(
                        f"ClipSpec.delta={self.delta!r} is too small for {self.measure_name!r}: its {side} bound "
                        f"rounds to 1 in float64 (the clip interval underflows to [{lo!r}, {hi!r}], every moved token "
                        "would be clipped); use a budget whose bounds differ from 1 by at least ~1e-15"
                    )

    @property
    def measure_name(self) -> str:
        return self.measure.name if isinstance(self.measure, Measure) else self.measure

    @property
    def p_dependent(self) -> bool:
        return get_measure(self.measure).p_dependent

    def ratio_bounds(self) -> tuple[float, float]:
        """The scalar clip interval (lo, hi) of a p-independent measure (computed once per spec)."""
        if self.p_dependent:
            raise ValueError(f"measure {self.measure_name!r} depends on p = π_old(a): its bounds are per token")
        return _scalar_bounds(self)

    def __and__(self, other):
        """`a & b`: the per-token intersection of the two clip intervals (`AllOf`)."""
        if not isinstance(other, ClipSpec):
            return NotImplemented
        return all_of(self, other)


# -------------------------------------------------------------------------------------- intersection
@dataclass(frozen=True)
class AllOf(ClipSpec):
    """The intersection of clip constraints: a token's ratio is clipped to [max_i lo_i, min_i hi_i], the
    interval where every part's D_i(r[, p]) <= δ_i holds. Build it with `all_of(a, b, ...)` or `a & b`.

    Parts are form 'clip' at token level; the gated, cispo and sapo forms are refused (their gates and
    weights are not a clip interval to intersect). The inherited fields other than `form` and `params` (the dual_clip_c
    the parts share) are unused."""

    parts: tuple = ()
    """The ClipSpecs intersected (>= 2, none itself an AllOf or adaptive)."""

    def __post_init__(self):
        parts = self.parts
        if not isinstance(parts, tuple) or len(parts) < 2:
            raise ValueError(f"AllOf.parts must be a tuple of at least 2 ClipSpecs, got {parts!r}")
        for i, part in enumerate(parts):
            if not isinstance(part, ClipSpec) or isinstance(part, AllOf):
                raise ValueError(f"AllOf.parts[{i}] must be a plain ClipSpec, got {part!r}")
            if isinstance(part, AdaptiveSpec):
                raise ValueError(
                    f"AllOf.parts[{i}] is adaptive ({method_string(part)!r}): an intersection "
                    "takes fixed budgets; adapt a single measure instead"
                )
            if part.form != "clip":
                raise ValueError(
                    f"AllOf.parts[{i}] has form={part.form!r}: an intersection intersects clip "
                    "intervals, so every part must be form 'clip' (gated, cispo and sapo mixes are "
                    "refused)"
                )
            if part.level != "token":
                raise ValueError(f"AllOf.parts[{i}] has level={part.level!r}: intersections are token-level only")
        caps = {part.param("dual_clip_c") for part in parts}
        if len(caps) > 1:
            raise ValueError(
                f"AllOf.parts disagree on dual_clip_c {sorted(caps, key=str)}: give every part the same cap (or none)"
            )
        extra = {k: getattr(self, k) for k in ("delta", "eps_low", "eps_high") if getattr(self, k) is not None}
        cap = parts[0].param("dual_clip_c")
        given = dict(self.params) if isinstance(self.params, (Mapping, tuple)) else {"params": self.params}
        defaults = {p.name: p.default for p in FORMS["clip"].params} | {"dual_clip_c": cap}
        own = {k: v for k, v in given.items() if k not in defaults or v != defaults[k]}  # the parts' values: fine
        if own:
            extra["params"] = own
        if extra or self.measure != "ratio" or self.level != "token":
            raise ValueError(f"AllOf takes only `parts`; its budget is the parts', got {extra or self.measure!r}")
        object.__setattr__(self, "form", "clip")
        object.__setattr__(self, "params", () if cap is None else (("dual_clip_c", cap),))
        object.__setattr__(self, "_values", {p.name: p.default for p in FORMS["clip"].params} | dict(self.params))

    @property
    def measure_name(self) -> str:
        return "&".join(part.measure_name for part in self.parts)

    @property
    def p_dependent(self) -> bool:
        return any(part.p_dependent for part in self.parts)

    def ratio_bounds(self) -> tuple[float, float]:
        """(max lo, min hi) over the parts, when none depends on p."""
        if self.p_dependent:
            raise ValueError(f"intersection {self.measure_name!r} has a p-dependent part: its bounds are per token")
        bounds = [part.ratio_bounds() for part in self.parts]
        return max(b[0] for b in bounds), min(b[1] for b in bounds)


def all_of(*specs) -> AllOf:
    """The intersection of ClipSpecs (or method strings): per token, r in [max lo, min hi]. Nested
    intersections are flattened; see `AllOf` for what the parts may be."""
    if len(specs) == 1 and isinstance(specs[0], (list, tuple)):
        specs = tuple(specs[0])
    parts: list[ClipSpec] = []
    for spec in specs:
        spec = as_spec(spec)
        parts.extend(spec.parts if isinstance(spec, AllOf) else [spec])
    return AllOf(parts=tuple(parts))


# -------------------------------------------------------------------------------------- adaptive δ
SIGNALS = ("clipfrac", "kl3", "entropy")
DEFAULT_GAIN = 0.3
DEFAULT_DIR = {"clipfrac": -1, "kl3": 1, "entropy": -1}


@dataclass(frozen=True)
class AdaptiveSpec(ClipSpec):
    """A ClipSpec whose budget δ a controller (`divclip.theory.adaptive.DeltaController`) resets every step
    to hold `signal` at `target`. `delta` is the starting budget δ0; used as a plain ClipSpec (e.g. by
    `policy_loss`) it is the fixed spec at that δ. Update rule (log space, bounded):

        δ <- clamp(δ · exp(dir · gain · clamp((target - signal) / target, -1, 1)), delta_min, delta_max)

    dir is the sign of d(signal)/dδ: a wider budget clips less (clipfrac: -1) and lets the policy move
    further (kl3: +1); for entropy the default -1 assumes bigger steps collapse entropy faster."""

    signal: str = "clipfrac"
    """'clipfrac' (batch clip fraction, mean over the PPO epochs), 'kl3' (mean per-token r - 1 - log r of the
    update against π_old) or 'entropy' (mean per-token entropy of the rollout policy, nats)."""
    target: float = 0.1
    gain: float = DEFAULT_GAIN
    delta_min: float | None = None
    """Lower bound on δ; None: δ0/100."""
    delta_max: float | None = None
    """Upper bound on δ; None: 100·δ0."""
    direction: int | None = None
    """+1 or -1; None: the signal's default (clipfrac -1, kl3 +1, entropy -1)."""

    def __post_init__(self):
        super().__post_init__()
        if self.signal not in SIGNALS:
            raise ValueError(f"AdaptiveSpec.signal must be one of {list(SIGNALS)}, got {self.signal!r}")
        if self.form == "sapo" or self.measure_name == "ratio" or self.delta is None:
            raise ValueError(
                f"an adaptive δ needs a divergence measure with a budget δ (not 'ratio', not sapo), "
                f"got measure={self.measure_name!r}, form={self.form!r}"
            )
        _positive("target", self.target, at_most=1.0 if self.signal == "clipfrac" else None, owner="AdaptiveSpec")
        _positive("gain", self.gain, owner="AdaptiveSpec")
        own = "AdaptiveSpec"
        lo = self.delta / 100.0 if self.delta_min is None else _positive("delta_min", self.delta_min, owner=own)
        hi = self.delta * 100.0 if self.delta_max is None else _positive("delta_max", self.delta_max, owner=own)
        if not lo <= self.delta <= hi:
            raise ValueError(
                f"AdaptiveSpec needs delta_min <= delta <= delta_max, got {lo!r} <= {self.delta!r} <= {hi!r}"
            )
        d = DEFAULT_DIR[self.signal] if self.direction is None else self.direction
        if d not in (1, -1) or isinstance(d, bool):
            raise ValueError(f"AdaptiveSpec.direction must be +1 or -1, got {self.direction!r}")
        object.__setattr__(self, "delta_min", float(lo))
        object.__setattr__(self, "delta_max", float(hi))
        object.__setattr__(self, "direction", int(d))
        if not self.p_dependent:
            get_measure(self.measure).bounds(hi)  # a measure that refuses the widest δ fails now

    def fixed(self, delta: float | None = None) -> ClipSpec:
        """The plain ClipSpec at budget `delta` (default δ0): what one step's loss uses."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(ClipSpec)}
        fields["delta"] = self.delta if delta is None else float(delta)
        return ClipSpec(**fields)


@functools.lru_cache(maxsize=256)
def _scalar_bounds(spec: ClipSpec) -> tuple[float, float]:
    if spec.measure_name == "ratio" and spec.eps_low is not None:  # asymmetric widths: [1 - ε_low, 1 + ε_high]
        return max(1.0 - float(spec.eps_low), 0.0), 1.0 + float(spec.eps_high)
    lo, hi = get_measure(spec.measure).bounds(spec.delta)
    if upper_delta(spec) != spec.delta:  # the upper side's own budget (the gated form's delta_high)
        _, hi = get_measure(spec.measure).bounds(upper_delta(spec))
    return float(lo), float(hi)


# -------------------------------------------------------------------------------------------- presets
_PRESETS: dict[str, ClipSpec] = {}
PRESETS: Mapping[str, ClipSpec] = MappingProxyType(_PRESETS)
"""The named specs of the method-string grammar: the catalogue's presets (`divclip.theory.methods`, `preset=True`),
each its method string parsed (filled when this module has loaded, below)."""


def preset(name: str) -> ClipSpec:
    """The named `ClipSpec`: grpo, dapo, atr (KL3, δ = 0.023144), dppo_kl, dppo_tv, gspo, sapo."""
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(f"preset name must be one of {sorted(PRESETS)}, got {name!r}")
    return PRESETS[name]


# ------------------------------------------------------------------------------------- method strings
_RESERVED = {",": "a list separator (use parse_methods)"}
_ADAPT_KEYS = {"gain": "gain", "min": "delta_min", "max": "delta_max", "dir": "direction"}


def _spellings() -> dict[str, list]:
    """{method-string option: the Params it sets}, from every declared form's `Form.params` (`tau`: tau_pos and
    tau_neg, in declaration order)."""
    out: dict[str, list] = {}
    for p in declared_params().values():
        out.setdefault(p.spelling, []).append(p)
    return out


def _param_options() -> list[str]:
    out = []
    for key, group in _spellings().items():
        if group[0].kind == "flag" and group[0].option:
            out.append(f"'/{key}'")
        elif len(group) > 1:
            out.append(f"'/{key}={':'.join(p.name.upper() for p in group)}'")
        elif group[0].option:
            out.append(f"'/{key}=VALUE'")
    return out


def _allowed() -> str:
    named = sorted(p.name for p in declared_params().values() if not p.option)
    return (
        f"a preset {sorted(PRESETS)} or a measure {sorted(MEASURES)}, optionally ':delta' ('ratio:eps' or "
        f"'ratio:eps_low:eps_high'), then options '/FORM' (a loss form: {sorted(FORM_NAMES)}), '/seq', "
        f"{', '.join(_param_options())}, '/NAME=VALUE' (a loss form's parameter: {named}) "
        f"(e.g. 'kl3:0.023144', 'ratio:0.2:0.28', 'binary_kl:0.05/gated'); "
        f"'A&B' intersects methods, 'M@SIGNAL=TARGET[:gain=G][:min=D][:max=D][:dir=±1]' adapts δ with SIGNAL "
        f"in {list(SIGNALS)} (e.g. 'kl3:0.023144&binary_tv:0.2', 'kl3@clipfrac=0.1')"
    )


def _number(text: str, what: str, method: str) -> float:
    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not math.isfinite(x):
        raise ValueError(
            f"method {_echo(method)}: {what} must be a finite number, got {_echo(text)}; allowed: {_allowed()}"
        )
    return x


def _param_value(param, text: str, method: str):
    """The value of `param` written `text` in a method string: a number, 1/0 for a flag, a choice's name."""
    if param.kind == "flag":
        if text not in ("1", "0", "1.0", "0.0"):
            raise ValueError(
                f"method {_echo(method)}: {param.name} is a flag: '/{param.spelling}=1' or '=0', got {_echo(text)}"
            )
        return text in ("1", "1.0")
    if param.kind == "choice":
        if text not in param.choices:
            raise ValueError(
                f"method {_echo(method)}: {param.name} must be one of {list(param.choices)}, got {_echo(text)}"
            )
        return text
    if param.label:
        what = f"the {param.label} after '{param.spelling}='"
    else:
        what = param.name if param.option else f"the value of {param.name!r}"
    return _number(text, what, method)


def _apply_option(fields: dict, given: set, option: str, method: str) -> None:
    """Set the field or form parameters `option` (one '/...' of a method string) names; `given` holds the options
    already read, so that a repeated one is refused (`grpo/dual=2/dual=3` would otherwise keep the last in
    silence)."""
    key, eq, value = option.partition("=")
    is_form = not eq and key in FORM_NAMES  # '/cispo_cap' is the form, '/cispo_cap=5' its parameter
    group = [] if is_form else _spellings().get(key, [])
    bare_flag = bool(group) and group[0].kind == "flag" and bool(group[0].option)
    known = (not eq and (is_form or key == "seq" or bare_flag)) or (eq and group and not bare_flag)
    if not known:
        raise ValueError(f"method {_echo(method)}: unknown option {_echo('/' + option)}; allowed: {_allowed()}")
    slot = "form" if is_form else key
    if slot in given:
        what = "a loss form ('/FORM')" if slot == "form" else repr("/" + key)
        raise ValueError(
            f"method {_echo(method)}: {what} is given twice (at {_echo('/' + option)}): keep one, since the last "
            "would silently win"
        )
    given.add(slot)
    if is_form:
        fields["form"] = key
    elif key == "seq":
        fields["level"] = "sequence"
    else:
        params = fields.setdefault("params", {})
        if bare_flag:
            params[group[0].name] = not group[0].default
            return
        texts = value.split(":") if len(group) > 1 else [value]
        if len(texts) != len(group):  # '/tau=1': the option is '/tau=TAU_POS:TAU_NEG' (listed in `_allowed`)
            raise ValueError(f"method {_echo(method)}: unknown option {_echo('/' + option)}; allowed: {_allowed()}")
        for p, text in zip(group, texts):
            params[p.name] = _param_value(p, text, method)


def _budget_free(name: str | None) -> bool:
    form = FORMS.get(name) if name else None
    return form is not None and not form.uses_budget


def _base_fields(base: str, method: str, form: str | None) -> dict | ClipSpec:
    """The preset (a ClipSpec) or the measure's fields of `base` ('kl3', 'kl3:0.02', 'ratio:0.2:0.28')."""
    if base in PRESETS:
        return PRESETS[base]
    head, *nums = base.split(":")
    if head not in MEASURES:
        # a typo gets one short line with the nearest name, not the whole grammar (issue 34)
        raise ValueError(
            f"unknown method {_echo(method)}: {_echo(head)} is neither a preset nor a measure; allowed: a preset "
            f"{sorted(PRESETS)} or a measure {sorted(MEASURES)}{did_you_mean(head, [*PRESETS, *MEASURES])}"
        )
    values = [_number(x, f"the budget after '{head}:'", method) for x in nums]
    if head == "ratio":
        if len(values) > 2:
            raise ValueError(
                f"method {_echo(method)}: a ratio clip is 'ratio', 'ratio:eps' or 'ratio:eps_low:eps_high'"
            )
        if _budget_free(form) and not values:
            return {"measure": "ratio"}
        lo, hi = (values[0], values[-1]) if values else (DEFAULT_EPS_LOW, DEFAULT_EPS_LOW)
        return {"measure": "ratio", "eps_low": lo, "eps_high": hi}
    if len(values) > 1:
        raise ValueError(f"method {_echo(method)}: a divergence measure takes one budget, '{head}:delta'")
    if values:
        return {"measure": head, "delta": values[0]}
    if _budget_free(form):
        return {"measure": head}
    if MEASURES[head].p_dependent:
        raise ValueError(
            f"method {_echo(method)}: the p-dependent measure {_echo(head)} needs a budget, e.g. '{head}:0.05'"
        )
    return {"measure": head, "delta": delta_for_eps(head, eps_low=DEFAULT_EPS_LOW)}


MAX_METHOD_CHARS = 2000
"""Longest method string accepted (an intersection of a dozen parts fits in a few hundred)."""
MAX_METHODS = 100
"""Most methods one list of method strings (`parse_methods`) takes."""


def did_you_mean(value, choices) -> str:
    """ "; did you mean 'atr'?" for the choice nearest `value` (difflib's ratio ≥ 0.6), or "" when none is near:
    the hint every unknown method name gets, from the CLI (`--methods`) and the app's method boxes alike."""
    import difflib

    if not isinstance(value, str) or len(value) > MAX_METHOD_ECHO:
        return ""
    near = difflib.get_close_matches(value.strip(), sorted(set(choices)), n=1, cutoff=0.6)
    return f"; did you mean {near[0]!r}?" if near else ""


def _echo(value) -> str:
    """repr(value), cut to MAX_METHOD_ECHO characters with the length said, so that an error never echoes a
    million-character string."""
    text = repr(value)
    if len(text) <= MAX_METHOD_ECHO:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} characters as text"
    return f"{text[: MAX_METHOD_ECHO - 10]}... ({size})"


def parse_method(text: str) -> ClipSpec:
    """The `ClipSpec` of one method string (grammar in the module doc string); a ValueError names the string.
    'a&b' gives an `AllOf`, 'm@signal=target' an `AdaptiveSpec`."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"method must be a non-empty string: {_allowed()}; got {_echo(text)}")
    method = text.strip()
    if len(method) > MAX_METHOD_CHARS:
        raise ValueError(f"method must be at most {MAX_METHOD_CHARS} characters, got {_echo(method)}")
    for ch, meaning in _RESERVED.items():
        if ch in method:
            raise ValueError(f"method {_echo(method)}: {ch!r} ({meaning}) is not supported here; allowed: {_allowed()}")
    if "@" in method:
        return _parse_adaptive(method)
    if "&" in method:
        parts = [_parse_part(p.strip(), method) if p.strip() else None for p in method.split("&")]
        if None in parts:
            raise ValueError(f"method {_echo(method)}: an empty part around '&'; allowed: {_allowed()}")
        try:
            return all_of(*parts)
        except ValueError as exc:
            raise ValueError(f"method {_echo(method)}: {exc}") from None
    return _parse_part(method, method)


def _parse_adaptive(method: str) -> AdaptiveSpec:
    head, _, tail = method.partition("@")
    if "@" in tail or "&" in method:
        raise ValueError(
            f"method {_echo(method)}: an adaptive δ takes one '@' on a single measure (no '&'); allowed: {_allowed()}"
        )
    base = _parse_part(head.strip(), method)
    target_text, *opts = tail.split(":")
    signal, eq, value = target_text.partition("=")
    if not eq or signal.strip() not in SIGNALS:
        raise ValueError(
            f"method {_echo(method)}: after '@' comes SIGNAL=TARGET with SIGNAL in {list(SIGNALS)}, got {_echo(tail)}"
        )
    fields = {"signal": signal.strip(), "target": _number(value, "the target after '='", method)}
    for opt in opts:
        key, eq, value = opt.partition("=")
        if not eq or key not in _ADAPT_KEYS or _ADAPT_KEYS[key] in fields:
            raise ValueError(
                f"method {_echo(method)}: unknown or repeated adaptive option {_echo(opt)}; allowed: "
                f"{sorted(_ADAPT_KEYS)} as ':key=value'"
            )
        x = _number(value, f"the value of {key!r}", method)
        if key == "dir":
            if x not in (1.0, -1.0):
                raise ValueError(f"method {_echo(method)}: dir must be +1 or -1, got {value!r}")
            x = int(x)
        fields[_ADAPT_KEYS[key]] = x
    base_fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(ClipSpec)}
    try:
        return AdaptiveSpec(**base_fields, **fields)
    except ValueError as exc:
        raise ValueError(f"method {_echo(method)}: {exc}") from None


def _parse_part(part: str, method: str) -> ClipSpec:
    base, *options = part.split("/")
    fields: dict = {}
    given: set = set()
    for option in options:
        _apply_option(fields, given, option, method)
    found = _base_fields(base, method, fields.get("form"))
    try:
        if isinstance(found, ClipSpec):
            if "params" in fields:  # a preset's parameters, with those the options set replaced
                fields["params"] = {**dict(found.params), **fields["params"]}
            return dataclasses.replace(found, **fields) if fields else found
        return ClipSpec(**found, **fields)
    except ValueError as exc:
        raise ValueError(f"method {_echo(method)}: {exc}") from None


def parse_methods(methods) -> dict[str, ClipSpec]:
    """{label: ClipSpec} in order, from 'grpo,dapo,kl3:0.05', a list of method strings / ClipSpecs /
    (label, spec) pairs, or a {label: spec} mapping. A string is its own label; a ClipSpec gets `spec_label`.
    A ValueError names the entry it cannot read, or the repeated label."""
    if isinstance(methods, str):
        if methods.count(",") >= MAX_METHODS:
            raise ValueError(f"methods must name at most {MAX_METHODS} methods, got {methods.count(',') + 1}")
        methods = [m.strip() for m in methods.split(",") if m.strip()]
    items = list(methods.items()) if isinstance(methods, Mapping) else list(methods or [])
    if not items:
        raise ValueError(f"methods must name at least one method (e.g. 'grpo,dapo,atr'), got {_echo(methods)}")
    if len(items) > MAX_METHODS:
        raise ValueError(f"methods must name at most {MAX_METHODS} methods, got {len(items)}")
    out: dict[str, ClipSpec] = {}
    for item in items:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            label, spec = item
            if not isinstance(spec, ClipSpec):
                spec = parse_method(spec)
        elif isinstance(item, ClipSpec):
            label, spec = spec_label(item), item
        elif isinstance(item, str):
            label, spec = item.strip(), parse_method(item)
        else:
            raise ValueError(f"methods entries must be names, ClipSpecs or (label, ClipSpec) pairs, got {_echo(item)}")
        if not label or "," in label or label in out:
            raise ValueError(f"method labels must be non-empty, unique and comma-free, got {_echo(label)}")
        out[label] = spec
    return out


def as_spec(spec) -> ClipSpec:
    """`spec` itself if a ClipSpec, else the ClipSpec of the method string `spec` (a preset name is one)."""
    if isinstance(spec, ClipSpec):
        return spec
    if isinstance(spec, str):
        return parse_method(spec)
    raise ValueError(f"spec must be a ClipSpec or a method string ({_allowed()}), got {_echo(spec)}")


def _options(spec: ClipSpec, fmt) -> list[str]:
    """The options after the base, from the form's declarations: the form, 'seq', then its parameters that differ
    from their defaults: those with their own spelling ('/noclamp', '/dual=', '/tau=') in declaration order, then
    the others ('/NAME=VALUE') by name."""
    out = [] if spec.form == "clip" else [spec.form]
    if spec.level == "sequence":
        out.append("seq")
    form = FORMS[spec.form]
    changed = dict(spec.params)
    spelled: dict[str, list] = {}
    for p in form.params:
        if p.option:
            spelled.setdefault(p.option, []).append(p)
    for key, group in spelled.items():
        if not any(p.name in changed for p in group):
            continue
        if group[0].kind == "flag":
            out.append(key)
        else:
            out.append(f"{key}=" + ":".join(fmt(spec.param(p.name)) for p in group))
    for name, value in spec.params:
        if not form.param(name).option:
            text = value if isinstance(value, str) else fmt(int(value) if isinstance(value, bool) else value)
            out.append(f"{name}={text}")
    return out


def method_string(spec) -> str:
    """The method string that `parse_method` reads back to exactly `spec` (a preset's name when it is one)."""
    spec = as_spec(spec)
    if isinstance(spec, AllOf):
        return "&".join(method_string(part) for part in spec.parts)
    if isinstance(spec, AdaptiveSpec):
        adapt = f"{spec.signal}={spec.target!r}"
        for key, name in _ADAPT_KEYS.items():
            value = getattr(spec, name)
            if value != getattr(AdaptiveSpec(**_plain_fields(spec), signal=spec.signal, target=spec.target), name):
                adapt += f":{key}={value!r}"
        return f"{method_string(spec.fixed())}@{adapt}"
    for name, known in PRESETS.items():
        if known == spec:
            return name
    if _budget_free(spec.form):
        base = spec.measure_name
    elif spec.measure_name == "ratio":
        base = f"ratio:{spec.eps_low!r}:{spec.eps_high!r}"
    else:
        base = f"{spec.measure_name}:{spec.delta!r}"
    return "/".join([base, *_options(spec, repr)])


def _plain_fields(spec: ClipSpec) -> dict:
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(ClipSpec)}


def spec_label(spec) -> str:
    """A short readable label, comma-free: 'ratio 0.2/0.28', 'kl3 δ=0.02314', 'binary_kl δ=0.05 gated tis=20',
    'ratio 0.0003/0.0004 seq', 'sapo τ=1/1.05', 'kl3 δ=0.02314 ∧ binary_tv δ=0.2',
    'kl3 δ0=0.02314 @clipfrac=0.1'. Accepts a ClipSpec or a method string."""
    s = as_spec(spec)
    if isinstance(s, AllOf):
        return " ∧ ".join(spec_label(part) for part in s.parts)
    if isinstance(s, AdaptiveSpec):
        return spec_label(s.fixed()).replace("δ=", "δ0=", 1) + f" @{s.signal}={s.target:g}"
    flags = [o for o in _options(s, str) if o in ("seq", "noclamp")]
    if s.form == "sapo":
        return " ".join([f"sapo τ={s.param('tau_pos'):g}/{s.param('tau_neg'):g}", *flags])
    if _budget_free(s.form):
        return " ".join([s.form, *(o for o in _options(s, lambda x: f"{x:g}") if o != s.form)])
    budget = f"{s.eps_low:g}/{s.eps_high:g}" if s.measure_name == "ratio" else f"δ={s.delta:.4g}"
    extra = [o for o in _options(s, lambda x: f"{x:g}") if not o.startswith("tau=")]
    return " ".join([s.measure_name, budget, *extra])


# -------------------------------------------------------------------------- the presets, from the catalogue
for _m in preset_methods():
    _PRESETS[_m.name] = parse_method(_m.method)  # written in the base grammar: no preset is needed to read it
del _m
