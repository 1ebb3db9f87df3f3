"""Loss forms from published papers that no engine ships (torch-free: family, source, parameters, numpy weight
and interval). docs/theory.md §7 lists them with their formulas; each cites the paper's own equation.

  dcpo    DCPO, probability-dependent bounds        arXiv:2509.02333 eq. 4 (eq. 27), App. A.6 (r_max = 10)
  gppo    GPPO, gradient-preserving clip            arXiv:2508.07629 (GPPO objective); = cegppo at β1 = β2 = 1
  cegppo  CE-GPPO, scaled gradient-preserving clip  arXiv:2509.20712 eq. 8 (loss), eq. 10 (gradient)
  aspo    ASPO, flipped IS weight for A > 0         arXiv:2510.06062 §6 (Steps 1-3, eq. 3)
  topr    TOPR, tapered IS by the sign of A         arXiv:2503.14286 §3 (eqs. 7-8)
  bapo    BAPO, batch-adaptive bounds               arXiv:2510.18927 eq. 8, Algorithm 1
Dual-clip PPO (arXiv:1912.09729 eq. 5) is mode 'clip' with `dual_clip_c`. The dynamic entropy-control clip of
arXiv:2602.09782 is left out: its lower-bound function and parameter values were not in any copy we could read.

Each form is one `declare_form(Form(...))`; its torch implementation is registered in
`divclip.theory.modes_published`. `weight(spec, q, r, adv)` is the gradient weight w of docs/theory.md §1
(∂ℓ/∂log π = −A·w, numpy, broadcasting); `interval(spec, q, sign)` is the ratio interval (lo, hi) where w ≠ 0 for
A of that sign. Parameter names carry the method's prefix (`dcpo_r_max`, `bapo_rho0`, ...). This module never
imports `divclip.theory.spec` (spec imports it).
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np

from divclip.theory.forms import FORMS, Form, Param, declare_form

__all__ = ["PUBLISHED_METHODS", "bapo_path", "dcpo_bounds"]

_LOG_RATIO_CLAMP = 20.0  # verl's clamp of log r (divclip.theory.form_weights.LOG_RATIO_CLAMP)
BAPO_MAX_PATH = 10_000
"""The most bound pairs BAPO's Algorithm 1 may visit (a larger movable range / step ratio is refused)."""


class _AtLeastZero(Param):
    """A parameter that may be 0 (Param's `above` is strict): CE-GPPO's β = 0 is PPO, TOPR's a⁻ = 0 is canonical."""

    def check(self, value, owner: str = "ClipSpec.params") -> float:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or not (0.0 <= value <= self.at_most):
            allowed = "a finite number >= 0" + (f" and <= {self.at_most:g}" if self.at_most < math.inf else "")
            raise ValueError(f"{owner}[{self.name!r}] must be {allowed}, got {value!r}")
        return float(value)


def _arrays(*xs):
    """float64 numpy arrays broadcast to one shape."""
    return np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in xs))


# ------------------------------------------------------------------------------------------ the measure rule
def _ratio_only(mode: str):
    """Form.check of a form whose budget is a ratio clip's ε_low/ε_high (they enter its own formula)."""

    def check(spec):
        if spec.measure_name != "ratio":
            raise ValueError(
                f"mode {mode!r} takes the ratio clip widths eps_low/eps_high (method "
                f"'ratio:EPS_LOW:EPS_HIGH/{mode}'), got measure={spec.measure_name!r}"
            )

    return check


def _p_free(mode: str):
    """Form.check of a form built on a scalar clip interval [lo, hi]: any p-independent measure gives one."""

    def check(spec):
        if spec.p_dependent:
            raise ValueError(
                f"mode {mode!r} needs one clip interval [lo, hi] for every token: a p-independent "
                f"measure (ratio, kl3, ...), got measure={spec.measure_name!r}"
            )

    return check


# -------------------------------------------------------------------------------------------------- DCPO
def dcpo_bounds(q, eps_low: float, eps_high: float, r_max: float, xp=np):
    """DCPO's ratio bounds at old probability q (arXiv:2509.02333 eq. 4, derived from |(r − 1)·p| ≤ ε with
    p = r·q, eq. 3): lo = ½ + ½·√max(1 − 4ε_low/q, 0), hi = ½ + ½·√(1 + 4ε_high/q), hi capped at r_max (App. A.6).
    `xp` is numpy (arrays) or torch (tensors); q = 0 gives lo = ½, hi = r_max."""
    if xp is np:
        q = np.asarray(q, dtype=np.float64)
        with np.errstate(divide="ignore"):
            return _dcpo_bounds(q, eps_low, eps_high, r_max, np)
    return _dcpo_bounds(q, eps_low, eps_high, r_max, xp)


def _dcpo_bounds(q, eps_low, eps_high, r_max, xp):
    lo = 0.5 + 0.5 * xp.sqrt((1.0 - 4.0 * eps_low / q).clip(min=0.0))
    hi = 0.5 + 0.5 * xp.sqrt(1.0 + 4.0 * eps_high / q)
    return lo, hi.clip(max=r_max)


def _dcpo_weight(spec, q, r, adv):
    q, r, adv = _arrays(q, r, adv)
    lo, hi = dcpo_bounds(q, spec.eps_low, spec.eps_high, spec.param("dcpo_r_max"))
    kept_pos = r <= hi  # A > 0: the upper bound zeroes the gradient above hi (eq. 8's min)
    kept_neg = (r >= lo) & (r <= spec.param("dcpo_r_max"))  # A < 0: below lo, and above r_max (dual clip)
    kept = np.where(adv > 0, kept_pos, np.where(adv < 0, kept_neg, True))
    return r * kept * (np.abs(np.log(r)) <= _LOG_RATIO_CLAMP)  # verl's ±20 clamp stops the gradient too


def _dcpo_interval(spec, q, sign):
    r_max = spec.param("dcpo_r_max")
    lo, hi = dcpo_bounds(q, spec.eps_low, spec.eps_high, r_max)
    return (np.zeros_like(hi), hi) if sign > 0 else (lo, np.full_like(lo, r_max))


declare_form(
    Form(
        "dcpo",
        "hard clip",
        "max(−A·r, −A·clip(r, lo(q), min(hi(q), r_max))), for A < 0 at most −A·r_max; "
        "lo(q) = ½ + ½√max(1 − 4ε_low/q, 0), hi(q) = ½ + ½√(1 + 4ε_high/q)",
        ("arXiv:2509.02333 eq. 4", "arXiv:2509.02333 eq. 8", "arXiv:2509.02333 App. A.6"),
        params=(
            Param(
                "dcpo_r_max",
                10.0,
                "the hard ceiling on the ratio for both signs of A (App. A.6: r_max = 10; "
                "for A > 0 it caps hi(q), for A < 0 it is a dual clip)",
                above=1.0,
            ),
        ),
        weight=_dcpo_weight,
        interval=_dcpo_interval,
        check=_ratio_only("dcpo"),
    )
)


# -------------------------------------------------------------------------------------------- GPPO, CE-GPPO
def _gppo_weight(spec, q, r, adv, beta_low: float, beta_high: float):
    """CE-GPPO's F (arXiv:2509.20712 eq. 10): β1·lo below lo for A < 0, β2·hi above hi for A > 0, else r."""
    q, r, adv = _arrays(q, r, adv)
    lo, hi = spec.ratio_bounds()
    w = np.where((adv < 0) & (r < lo), beta_low * lo, r)
    w = np.where((adv > 0) & (r > hi), beta_high * hi, w)
    return w * (np.abs(np.log(r)) <= _LOG_RATIO_CLAMP)  # verl's ±20 clamp stops the gradient too


def _gppo_interval(spec, q, sign, beta_low: float, beta_high: float):
    """Where w ≠ 0: everywhere, except beyond a bound whose β is 0 (β = 0 is PPO's zero gradient there)."""
    q = np.asarray(q, dtype=np.float64)
    lo, hi = spec.ratio_bounds()
    if sign > 0:
        return np.zeros_like(q), np.full_like(q, hi if beta_high == 0 else math.inf)
    return np.full_like(q, lo if beta_low == 0 else 0.0), np.full_like(q, math.inf)


def _cegppo_betas(spec):
    return spec.param("cegppo_beta1"), spec.param("cegppo_beta2")


declare_form(
    Form(
        "gppo",
        "truncated IS",
        "−A·r inside [lo, hi]; −A·lo·r/sg(r) for A < 0, r < lo; −A·hi·r/sg(r) for A > 0, r > hi: clipped tokens keep "
        "gradient weight lo or hi",
        ("arXiv:2508.07629", "arXiv:2509.20712 eq. 8 (β1 = β2 = 1)"),
        weight=lambda spec, q, r, adv: _gppo_weight(spec, q, r, adv, 1.0, 1.0),
        interval=lambda spec, q, sign: _gppo_interval(spec, q, sign, 1.0, 1.0),
        check=_p_free("gppo"),
    )
)

declare_form(
    Form(
        "cegppo",
        "truncated IS",
        "−A·r inside [lo, hi]; −β1·A·lo·r/sg(r) for A < 0, r < lo; −β2·A·hi·r/sg(r) for A > 0, r > hi",
        ("arXiv:2509.20712 eq. 8", "arXiv:2509.20712 eq. 10"),
        params=(
            _AtLeastZero(
                "cegppo_beta1",
                0.75,
                "β1: scale of the gradient kept below lo for A < 0 (NA&LP tokens); "
                "0 is PPO there. 0.75 and 0.5 are the paper's settings (Table 1), 0.75 its best at 7B",
            ),
            _AtLeastZero(
                "cegppo_beta2",
                1.0,
                "β2: scale of the gradient kept above hi for A > 0 (PA&LP tokens); 0 is PPO there (Table 1: 1)",
            ),
        ),
        weight=lambda spec, q, r, adv: _gppo_weight(spec, q, r, adv, *_cegppo_betas(spec)),
        interval=lambda spec, q, sign: _gppo_interval(spec, q, sign, *_cegppo_betas(spec)),
        check=_p_free("cegppo"),
    )
)


# -------------------------------------------------------------------------------------------------- ASPO
def _aspo_weight(spec, q, r, adv):
    """A > 0: 1/r (eq. 3's flipped weight), 0 above hi (Step 1), c below 1/c (Step 3's soft dual clip);
    A < 0: GRPO's r, 0 below lo, c above c."""
    q, r, adv = _arrays(q, r, adv)
    lo, hi = spec.ratio_bounds()
    c = spec.param("aspo_dual_c")
    with np.errstate(divide="ignore"):
        pos = np.where(r > hi, 0.0, np.where(r < 1.0 / c, c, 1.0 / r))
    neg = np.where(r < lo, 0.0, np.where(r > c, c, r))
    return np.where(adv > 0, pos, np.where(adv < 0, neg, r))


def _aspo_interval(spec, q, sign):
    q = np.asarray(q, dtype=np.float64)
    lo, hi = spec.ratio_bounds()
    return (np.zeros_like(q), np.full_like(q, hi)) if sign > 0 else (np.full_like(q, lo), np.full_like(q, math.inf))


declare_form(
    Form(
        "aspo",
        "hard clip",
        "A > 0: −A·r_old/r (weight 1/r), 0 above hi, soft cap c below 1/c; A < 0: max(−A·r, −A·lo), soft cap c "
        "above c (soft cap: −A·sg(c)·log π)",
        ("arXiv:2510.06062 §6 eq. 3", "arXiv:2510.06062 App. A.2 eq. 12"),
        params=(
            Param(
                "aspo_dual_c",
                3.0,
                "the soft dual-clip cap c on the IS weight (Step 3; 3 in the authors' "
                "code, github.com/wizard-III/Archer2.0): A > 0 tokens with r < 1/c and A < 0 tokens with r > c "
                "keep weight c",
                above=1.0,
            ),
        ),
        weight=_aspo_weight,
        interval=_aspo_interval,
        check=_p_free("aspo"),
    )
)


# -------------------------------------------------------------------------------------------------- TOPR
def _topr_limits(spec):
    return (
        (spec.param("topr_pos_low"), spec.param("topr_pos_high")),
        (spec.param("topr_neg_low"), spec.param("topr_neg_high")),
    )


def _topr_weight(spec, q, r, adv):
    """r is the sequence ratio π(τ)/μ(τ): w = clip(r, a⁺, b⁺) for A ≥ 0, clip(r, a⁻, b⁻) for A < 0."""
    q, r, adv = _arrays(q, r, adv)
    (a_pos, b_pos), (a_neg, b_neg) = _topr_limits(spec)
    return np.where(adv >= 0, np.clip(r, a_pos, b_pos), np.clip(r, a_neg, b_neg))


def _topr_check(spec):
    for sign, (a, b) in zip(("pos", "neg"), _topr_limits(spec)):
        if a > b:
            raise ValueError(f"mode 'topr' needs topr_{sign}_low <= topr_{sign}_high, got {a!r} > {b!r}")


declare_form(
    Form(
        "topr",
        "truncated IS",
        "−sg(w)·A·log π with w = clip(π(τ)/μ(τ), a⁺, b⁺) for A ≥ 0 and clip(π(τ)/μ(τ), a⁻, b⁻) for A < 0, "
        "π(τ)/μ(τ) the sequence's ratio (canonical a⁺ = b⁺ = 1, a⁻ = 0, b⁻ = 1)",
        ("arXiv:2503.14286 §3 eq. 7", "arXiv:2503.14286 §3 eq. 8"),
        params=(
            _AtLeastZero("topr_pos_low", 1.0, "a⁺: lower truncation of the ratio for A >= 0 (§3: 1, SFT on positives)"),
            _AtLeastZero("topr_pos_high", 1.0, "b⁺: upper truncation of the ratio for A >= 0 (§3: 1)"),
            _AtLeastZero("topr_neg_low", 0.0, "a⁻: lower truncation of the ratio for A < 0 (§3: 0)"),
            _AtLeastZero("topr_neg_high", 1.0, "b⁻: upper truncation of the ratio for A < 0 (§3: 1)"),
        ),
        uses_budget=False,
        token_level=False,
        weight=_topr_weight,
        weight_note="TOPR weights a token by its whole sequence's ratio π(τ)/μ(τ) = Π_t r_t: here r is that sequence "
        "ratio (a one-token sequence's r is the token's), and every token keeps a gradient unless a "
        "truncation limit is 0 and the ratio reaches it",
        check=_topr_check,
    )
)


# -------------------------------------------------------------------------------------------------- BAPO
_BAPO_PARAMS = ("bapo_low_start", "bapo_low_max", "bapo_high_start", "bapo_high_max", "bapo_high_step", "bapo_low_step")


def bapo_path(spec) -> list[tuple[float, float]]:
    """The (c_low, c_high) pairs Algorithm 1 of arXiv:2510.18927 visits in order while ρ < ρ0: c_high rises from
    a⁺ by δ1 while c_high + δ1 <= b⁺, then c_low rises from a⁻ by δ2; the loop runs only while
    c_low + δ2 <= b⁻. Step counts are floor((b − a)/δ + 1e-9), so a range that is a whole number of steps ends
    exactly on b (repeated float additions would stop one step short)."""
    a_low, b_low, a_high, b_high, d_high, d_low = (spec.param(n) for n in _BAPO_PARAMS)
    n_low = math.floor((b_low - a_low) / d_low + 1e-9)
    if n_low < 1:  # the loop's condition c_low + δ2 <= b⁻ fails at once: the bounds stay at their start
        return [(a_low, a_high)]
    n_high = math.floor((b_high - a_high) / d_high + 1e-9)
    c_high = [round(a_high + k * d_high, 12) for k in range(n_high + 1)]  # round: 0.6 + 15·0.02 is 0.9, not 0.8999…
    return [(a_low, h) for h in c_high] + [(round(a_low + k * d_low, 12), c_high[-1]) for k in range(1, n_low + 1)]


def _bapo_check(spec):
    a_low, b_low, a_high, b_high, d_high, d_low = (spec.param(n) for n in _BAPO_PARAMS)
    if not a_low <= b_low <= 1.0 <= a_high <= b_high:
        raise ValueError(
            f"mode 'bapo' needs bapo_low_start <= bapo_low_max <= 1 <= bapo_high_start <= "
            f"bapo_high_max, got {a_low!r}, {b_low!r}, {a_high!r}, {b_high!r}"
        )
    steps = (b_high - a_high) / d_high + (b_low - a_low) / d_low
    if steps > BAPO_MAX_PATH:
        raise ValueError(
            f"mode 'bapo': bapo_high_step={d_high!r} and bapo_low_step={d_low!r} give {steps:.0f} "
            f"candidate bounds over the movable ranges; at most {BAPO_MAX_PATH} are allowed"
        )


declare_form(
    Form(
        "bapo",
        "batch-selective",
        "max(−A·r, −A·clip(r, c_low, c_high)); (c_low, c_high) the first pair of Algorithm 1's path whose positive "
        "contribution ρ = P/(P + N) reaches ρ0 in the batch, P = "
        "Σ_{A>0} A·min(r, c_high), N = Σ_{A<0} |A|·max(r, c_low)",
        ("arXiv:2510.18927 eq. 8", "arXiv:2510.18927 Algorithm 1", "arXiv:2510.18927 §5.1"),
        params=(
            Param(
                "bapo_rho0",
                0.4,
                "ρ0: target share of the positive-advantage tokens in the loss (§5.1: 0.4)",
                above=0.0,
                at_most=1.0,
            ),
            Param("bapo_low_start", 0.6, "a⁻: c_low's start (§5.1: 0.6)", above=0.0),
            Param("bapo_low_max", 0.9, "b⁻: c_low's largest value (§5.1: 0.9)", above=0.0),
            Param("bapo_high_start", 1.2, "a⁺: c_high's start (§5.1: 1.2)", above=0.0),
            Param("bapo_high_max", 3.0, "b⁺: c_high's largest value (§5.1: 3.0)", above=0.0),
            Param("bapo_high_step", 0.05, "δ1: c_high's step (§5.1: 0.05)", above=0.0),
            Param("bapo_low_step", 0.02, "δ2: c_low's step (§5.1: 0.02)", above=0.0),
        ),
        uses_budget=False,
        token_level=False,
        weight_note="BAPO's bounds are chosen from the whole batch (eq. 8), so a token's w is not a function of "
        "(q, r, A): for the chosen (c_low, c_high) it is PPO's w = r on kept tokens and 0 on clipped ones, "
        "with c_low in [bapo_low_start, bapo_low_max] and c_high in [bapo_high_start, bapo_high_max]",
        check=_bapo_check,
    )
)


PUBLISHED_METHODS = {
    "dcpo": "ratio:0.16:0.2/dcpo",  # App. A.9: ε_low = 0.16, ε_high = 0.2 (r_max = 10)
    "gppo": "ratio:0.2:0.28/gppo",  # the authors' recipe widths (github.com/suu990901/KlearReasoner)
    "cegppo": "ratio:0.2:0.2/cegppo",  # §4.1: ε = 0.2; β1 = 0.75, β2 = 1 (Table 1)
    "aspo": "ratio:0.2:0.2/aspo",  # App. B: ε = 0.2
    "topr": "ratio/topr",  # §3: a⁺ = b⁺ = 1, a⁻ = 0, b⁻ = 1
    "bapo": "ratio/bapo",  # §5.1
}
"""Each published form at its paper's settings, as a method string (docs/theory.md §7)."""

# Form.example, the spec the atlas lists and tests each form with (tests/theory/test_atlas.py): its paper's setting.
for _name, _method in PUBLISHED_METHODS.items():
    declare_form(dataclasses.replace(FORMS[_name], example=_method))
