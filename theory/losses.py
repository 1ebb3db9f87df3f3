"""The unified clipped policy loss in torch (docs/theory.md §1, §3, §4), with verl 0.9.1 semantics.

One `ClipSpec` says how a token's policy gradient is limited; `policy_loss` turns log-probs, advantages and a
mask into a scalar loss and diagnostics. With r = π_θ(a)/π_old(a) and a clip interval [lo, hi] from the
measure (D(r[, p]) <= δ  <=>  lo <= r <= hi, the gradient-equivalence theorem), clipping works by the sign of A:

* A > 0 (make the token likelier): r may rise to hi; above hi the loss is flat, the gradient is 0.
* A < 0 (make it rarer): r may fall to lo; below lo the loss is flat. With dual clip the loss is also capped
  at -A·c, so a token whose ratio already exploded (r > c) stops pushing.
* A token that moved against its advantage ((r - 1)·A < 0) is never clipped: its gradient pulls it back.

The loss forms (clip, gated, cispo, sapo) and PPO's surrogate live in `divclip.theory.loss_modes`; this module holds
the spec, its presets and the validated entry point.
"""
from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import torch

from divclip.theory.loss_metrics import LOSS_AGG_MODES, agg_loss, aggregate, check_agg, clip_metrics, masked_sum_finite
from divclip.theory.loss_modes import (
    _TORCH_BOUNDS,
    LOG_RATIO_CLAMP,
    MODES,
    SEQ_LOG_RATIO_MAX,
    Surrogate,
    _const,
    clip_loss_with_bounds,
    clipped_surrogate,
    register_mode,
)
from divclip.theory.measures import MEASURES, Measure, get_measure

__all__ = [
    "LOG_RATIO_CLAMP",
    "LOSS_AGG_MODES",
    "MODES",
    "PRESETS",
    "SEQ_LOG_RATIO_MAX",
    "ClipSpec",
    "Surrogate",
    "agg_loss",
    "clip_loss_with_bounds",
    "clipped_surrogate",
    "policy_loss",
    "preset",
    "register_mode",
]

LEVELS = ("token", "sequence")


# ------------------------------------------------------------------------------------------------ spec
def _positive(name: str, value, above: float = 0.0, at_most: float | None = None) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and value > above
    if ok and at_most is not None:
        ok = value <= at_most
    if not ok:
        allowed = f"a finite number > {above:g}" + ("" if at_most is None else f" and <= {at_most:g}")
        raise ValueError(f"ClipSpec.{name} must be {allowed}, got {value!r}")
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
    dual_clip_c: float | None = None
    """mode 'clip': dual-clip cap c > 1 on -A·r for A < 0 (verl `clip_ratio_c`, 3.0); None = off."""
    level: str = "token"
    """'token', or 'sequence' for GSPO's length-normalised sequence ratio (mode 'clip', p-free measures)."""
    mode: str = "clip"
    """Loss form: 'clip' (PPO), 'gated' (DPPO mask), 'cispo' or 'sapo'; see `MODES`."""
    tis_cap: float | None = None
    """mode 'gated': truncate the stop-gradient IS weight at this value (verl dppo `clip_ratio_c`); None = off."""
    tau_pos: float = 1.0
    """mode 'sapo': gate temperature for A > 0."""
    tau_neg: float = 1.05
    """mode 'sapo': gate temperature for A <= 0."""

    def __post_init__(self):
        if not isinstance(self.measure, Measure) and self.measure not in MEASURES:
            raise ValueError(f"ClipSpec.measure must be one of {sorted(MEASURES)} (or a Measure), got {self.measure!r}")
        if self.mode not in MODES:
            raise ValueError(f"ClipSpec.mode must be one of {sorted(MODES)}, got {self.mode!r}")
        if self.level not in LEVELS:
            raise ValueError(f"ClipSpec.level must be one of {list(LEVELS)}, got {self.level!r}")
        self._check_budget()
        if self.dual_clip_c is not None:
            if self.mode != "clip":
                raise ValueError(f"ClipSpec.dual_clip_c applies to mode='clip' only, got mode={self.mode!r}")
            _positive("dual_clip_c", self.dual_clip_c, above=1.0)
        if self.tis_cap is not None:
            if self.mode != "gated":
                raise ValueError(f"ClipSpec.tis_cap applies to mode='gated' only, got mode={self.mode!r}")
            _positive("tis_cap", self.tis_cap)
        _positive("tau_pos", self.tau_pos)
        _positive("tau_neg", self.tau_neg)
        if self.mode != "sapo" and (self.tau_pos, self.tau_neg) != (1.0, 1.05):
            raise ValueError(f"ClipSpec.tau_pos/tau_neg apply to mode='sapo' only, got mode={self.mode!r}")
        if self.level == "sequence":
            if self.mode != "clip":
                raise ValueError(f"ClipSpec.level='sequence' (GSPO) needs mode='clip', got mode={self.mode!r}")
            if self.p_dependent:
                raise ValueError(
                    f"ClipSpec.level='sequence' needs a p-independent measure (a sequence has no single p), "
                    f"got measure={self.measure_name!r}"
                )
        if self.p_dependent and self.measure_name not in _TORCH_BOUNDS:
            raise ValueError(
                f"ClipSpec.measure={self.measure_name!r} is p-dependent without a torch bound solver; "
                f"p-dependent measures supported in the loss: {sorted(_TORCH_BOUNDS)}"
            )

    def _check_budget(self):
        if self.mode == "sapo":
            if (self.delta, self.eps_low, self.eps_high) != (None, None, None):
                raise ValueError(
                    "mode='sapo' uses the soft gate (tau_pos, tau_neg), not a clip budget: "
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
            _positive("eps_low", self.eps_low, at_most=1.0)
            _positive("eps_high", self.eps_high)
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
                self.ratio_bounds()  # a custom measure may refuse this δ: fail here, not mid-training

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


@functools.lru_cache(maxsize=256)
def _scalar_bounds(spec: ClipSpec) -> tuple[float, float]:
    m = get_measure(spec.measure)
    if m is MEASURES["ratio"]:
        return m.bounds(eps_low=spec.eps_low, eps_high=spec.eps_high)
    lo, hi = m.bounds(spec.delta)
    return float(lo), float(hi)


# ------------------------------------------------------------------------------------------ the loss
def _compute_dtype(t):
    return torch.float64 if t.dtype == torch.float64 else torch.float32  # bf16/fp16 are computed in float32


def _as(t, dtype):
    """t in `dtype`, contiguous; t itself when it already is (no op dispatched: small batches notice)."""
    if t.dtype != dtype:
        t = t.to(dtype)
    return t if t.is_contiguous() else t.contiguous()


def _check_inputs(named: dict):
    ref = named["log_prob"]
    for name, t in named.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor of shape (batch, length), got {type(t).__name__}")
        if t.ndim != 2:
            raise ValueError(f"{name} must have shape (batch, length), got shape {tuple(t.shape)}")
        if t.shape != ref.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)} but log_prob has shape {tuple(ref.shape)}")
        if name != "response_mask" and not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")


def _raise_non_finite(named: dict):
    """Called only when the loss came out non-finite: name the input that caused it."""
    for name, t in named.items():
        if t is not None and t.is_floating_point() and bool(torch.isnan(t).any()):
            raise ValueError(f"{name} contains NaN at {int(torch.isnan(t).sum())} positions")
    for name in ("advantages", "rollout_is_weights"):
        t = named[name]
        if t is not None and not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name} contains ±inf at {int((~torch.isfinite(t)).sum())} positions")
    raise ValueError(
        "the policy loss is not finite: log_prob/old_log_prob contain ±inf where the loss form needs finite "
        "log-probs (gated/cispo multiply by log π), or advantages are too large for the compute dtype"
    )


def policy_loss(
    log_prob,
    old_log_prob,
    advantages,
    response_mask,
    spec: ClipSpec | str,
    loss_agg_mode: str = "token-mean",
    rollout_is_weights=None,
    *,
    loss_scale_factor=None,
    metrics: bool = True,
):
    """Clipped policy loss and diagnostics; all tensors (B, T), `spec` a ClipSpec or a preset name.

    Returns (loss, metrics): a scalar tensor (float32 for bf16/fp16/float32 inputs, float64 for float64) and
    Python floats, masked means over `response_mask`:
      clipfrac       tokens whose term a bound changed (clip/gated: gradient zeroed; cispo: weight clipped).
                     Equals verl's `pg_clipfrac` for clip, gspo and cispo. verl's dppo `pg_clipfrac` also
                     counts A = 0 tokens whose ratio left the interval downwards; here they do not count.
      clipfrac_low   the lower bound binds (clip/gated: A < 0 and r < lo)
      clipfrac_high  the upper bound binds (clip/gated: A > 0 and r > hi)
      dual_clipfrac  capped by the dual clip (A < 0, -A·r > -A·c). This is what verl calls `pg_clipfrac_lower`
                     in `vanilla`; verl's dppo `pg_clipfrac_lower` is instead the TIS-truncated fraction.
      ppo_kl         mean k1 = mean(old_log_prob - log_prob), log r clamped at ±20 (verl's `ppo_kl`; its gspo
                     alone does not clamp)
      kl3            mean k3 = r - 1 - log r of KL(π_old‖π_θ) (always >= 0; token ratios, log r clamped at ±20)
      ratio_mean, ratio_min, ratio_max   of the ratio the loss used (1.0 when the mask is empty)
    The gradient is taken with respect to log_prob; old_log_prob, advantages and rollout_is_weights are
    constants of the update (detached). NaN inputs raise a ValueError naming the input, even under the mask: the
    check is one read of the scalar loss, which any NaN reaches, and only a failed check inspects the inputs.
    metrics=False skips the diagnostics and returns (loss, {}): on small batches they cost about a quarter of
    the call (the toy arena's inner PPO epochs); the loss and its gradient are the same either way.
    """
    spec = preset(spec) if isinstance(spec, str) else spec
    if not isinstance(spec, ClipSpec):
        raise ValueError(f"spec must be a ClipSpec or a preset name in {sorted(PRESETS)}, got {spec!r}")
    check_agg(loss_agg_mode, loss_scale_factor)
    if not isinstance(metrics, bool):
        raise ValueError(f"metrics must be True or False, got {metrics!r}")
    named = {
        "log_prob": log_prob,
        "old_log_prob": old_log_prob,
        "advantages": advantages,
        "response_mask": response_mask,
        "rollout_is_weights": rollout_is_weights,
    }
    _check_inputs(named)
    dtype = _compute_dtype(log_prob)
    lp = _as(log_prob, dtype)  # (B, T); keeps the autograd link to a bf16/fp16 leaf
    old, adv, mask = (_as(_const(t), dtype) for t in (old_log_prob, advantages, response_mask))

    terms = MODES[spec.mode](lp, old, adv, mask, spec)
    loss_mat = terms.loss  # (B, T)
    if rollout_is_weights is not None:
        loss_mat = loss_mat * rollout_is_weights.detach().to(dtype)
    loss = aggregate(loss_mat, mask, loss_agg_mode, loss_scale_factor, masked_sum_finite)
    if not math.isfinite(loss.item()):  # NaN anywhere (even under the mask) reaches the sum
        _raise_non_finite(named)
    return loss, (clip_metrics(terms, mask) if metrics else {})


# -------------------------------------------------------------------------------------------- presets
def _presets() -> dict[str, ClipSpec]:
    return {
        "grpo": ClipSpec("ratio", eps_low=0.2, eps_high=0.2),
        "dapo": ClipSpec("ratio", eps_low=0.2, eps_high=0.28),
        # ATR-GRPO: the KL3 budget whose lower bound is GRPO's 0.8, δ = KL3(0.8) = 0.023144 (docs/theory.md §2).
        "atr": ClipSpec("kl3", delta=get_measure("kl3").value(0.8)),
        # DPPO (arXiv 2602.04879, verl dppo_*): verl reuses `clip_ratio` (default 0.2, a PPO width) as δ; 0.05 for
        # binary KL and 0.2 for binary TV are the values validated in SkyRL's DPPO port. The TIS cap is verl's
        # in-code fallback 20 ("a large threshold is recommended"); an ActorConfig's default clip_ratio_c is 3.
        "dppo_kl": ClipSpec("binary_kl", delta=0.05, mode="gated", tis_cap=20.0),
        "dppo_tv": ClipSpec("binary_tv", delta=0.2, mode="gated", tis_cap=20.0),
        "gspo": ClipSpec("ratio", eps_low=3e-4, eps_high=4e-4, level="sequence"),
        "sapo": ClipSpec(mode="sapo"),
    }


PRESETS: Mapping[str, ClipSpec] = MappingProxyType(_presets())


def preset(name: str) -> ClipSpec:
    """The named `ClipSpec`: grpo, dapo, atr (KL3, δ = 0.023144), dppo_kl, dppo_tv, gspo, sapo."""
    if name not in PRESETS:
        raise ValueError(f"preset name must be one of {sorted(PRESETS)}, got {name!r}")
    return PRESETS[name]
