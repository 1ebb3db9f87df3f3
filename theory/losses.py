"""The unified clipped policy loss in torch (THEORY.md §1, §3, §4), with verl 0.9.1 semantics.

One `ClipSpec` says how a token's policy gradient is limited; `policy_loss` turns log-probs, advantages and a
mask into a scalar loss and diagnostics. With r = π_θ(a)/π_old(a) and a clip interval [lo, hi] from the
measure (D(r[, p]) <= δ  <=>  lo <= r <= hi, the gradient-equivalence theorem), clipping works by the sign of A:

* A > 0 (make the token likelier): r may rise to hi; above hi the loss is flat, the gradient is 0.
* A < 0 (make it rarer): r may fall to lo; below lo the loss is flat. With dual clip the loss is also capped
  at -A·c, so a token whose ratio already exploded (r > c) stops pushing.
* A token that moved against its advantage ((r - 1)·A < 0) is never clipped: its gradient pulls it back.

Modes (a registry: a new mode is one `@register_mode` function returning `_Terms`):
  clip   PPO/GRPO   max(-A·r, -A·clip(r, lo, hi))            (verl `vanilla`, `gspo` at level="sequence")
  gated  DPPO       -A·sg(min(r, c))·log π · 1[not clipped]  (verl `dppo_kl` / `dppo_tv`, any measure)
  cispo  CISPO      -sg(clip(r, lo, hi))·A·log π            (verl `cispo`; the bound binds whatever A's sign)
  sapo   SAPO       -A·σ(τ(r - 1))·4/τ, τ by the sign of A  (verl `sapo`; no hard clip)

p-independent measures give one scalar (lo, hi) per spec (KL3 by Lambert W), then plain clamps: the same code
as PPO, so KL3 at δ is ratio clipping at the float bounds [l_δ, u_δ] bit for bit. p-dependent measures
(binary KL/TV, p = π_old) evaluate D(r, p) for every token and solve exact float64 bounds only for the tokens
that are clipped.

Speed: the clip mode computes the loss value without autograd and attaches its known gradient, -A·r·∇log π on
kept tokens and 0 on clipped ones, in one multiply (`_WithGradient`); masks are 0/1 floats, never `torch.where`.
Both matter on CPU, where each autograd max/clamp/where backward allocates several (B, T) temporaries.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

import torch

from theory.bounds import _binary_kl_root
from theory.loss_metrics import LOSS_AGG_MODES, agg_loss, aggregate, check_agg, clip_metrics, masked_sum_finite
from theory.measures import MEASURES, Measure, get_measure

__all__ = [
    "LOSS_AGG_MODES",
    "MODES",
    "PRESETS",
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
LOG_RATIO_CLAMP = 20.0  # verl clamps log r to ±20 before exp (token level)
SEQ_LOG_RATIO_MAX = 10.0  # verl's gspo clamps the sequence log-ratio above only


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


# ------------------------------------------------------------------------------------ surrogate pieces
class Surrogate(NamedTuple):
    loss: torch.Tensor  # (B, T) max(-A·r, -A·clip(r)), dual-clipped
    loss_unclipped: torch.Tensor  # (B, T) -A·r
    clipped: torch.Tensor  # (B, T) 1.0 where the clipped branch is strictly larger (gradient 0; verl pg_clipfrac)
    dual: torch.Tensor | None  # (B, T) 1.0 where the dual clip caps the loss (verl vanilla's pg_clipfrac_lower)


def _const(t):
    """t without its autograd history; t itself when it has none (skips an op on the no-grad path)."""
    return t.detach() if t.requires_grad else t


def _flag(compare, a, b):
    """compare(a, b) as 0.0/1.0 in a's dtype (float-valued flags are several times faster than bool on CPU)."""
    return compare(a, b, out=torch.empty_like(a))


def clipped_surrogate(ratio, clipped_ratio, advantages, dual_clip_c=None) -> Surrogate:
    """PPO's per-token loss max(-A·r, -A·clip(r)), and for A < 0 at most -A·c (dual clip). Shapes (B, T).

    Plain autograd: differentiate it and the gradient is -A·∇r on unclipped tokens and 0 on clipped ones.
    """
    neg_adv = -advantages  # (B, T)
    loss_unclipped = neg_adv * ratio  # -A·r
    loss_clipped = neg_adv * clipped_ratio  # -A·clip(r)
    loss = torch.maximum(loss_unclipped, loss_clipped)  # the pessimistic (larger-loss) branch
    clipped = _flag(torch.gt, _const(loss_clipped), _const(loss_unclipped))
    dual = None
    if dual_clip_c is not None:
        cap = neg_adv * dual_clip_c  # -A·c
        dual = _flag(torch.gt, _const(loss), _const(cap)).mul_(_flag(torch.lt, _const(advantages), 0.0))
        loss = torch.lerp(loss, cap, dual)  # exactly where(A < 0, min(loss, cap), loss), without a slow where
    return Surrogate(loss, loss_unclipped, clipped, dual)


def clip_loss_with_bounds(ratio, advantages, lo, hi, dual_clip_c=None) -> Surrogate:
    """`clipped_surrogate` with clip(r) = clamp(r, lo, hi); lo, hi scalars or per-token (B, T) tensors."""
    if isinstance(lo, torch.Tensor) or isinstance(hi, torch.Tensor):
        lo = torch.as_tensor(lo, dtype=ratio.dtype, device=ratio.device)
        hi = torch.as_tensor(hi, dtype=ratio.dtype, device=ratio.device)
    return clipped_surrogate(ratio, torch.clamp(ratio, lo, hi), advantages, dual_clip_c)


class _WithGradient(torch.autograd.Function):
    """`value` (computed without autograd) whose derivative with respect to log_prob is `coef`, elementwise.

    Autograd through max/clamp/where costs several (B, T) temporaries per op on the way back; the gradient
    of a clipped loss is known in closed form (THEORY.md §1), so the loss modes hand it over directly.
    """

    @staticmethod
    def forward(ctx, log_prob, value, coef):
        ctx.save_for_backward(coef)
        return value

    @staticmethod
    def backward(ctx, grad):
        (coef,) = ctx.saved_tensors
        return grad * coef, None, None


def _in_range(x, lo: float, hi: float):
    """None when every entry lies in [lo, hi] (the usual case: one reduction, two reads), else 0/1 flags."""
    if x.numel() == 0:
        return None
    x_min, x_max = torch.aminmax(x)
    if x_min.item() >= lo and x_max.item() <= hi:  # False for NaN, which then goes through the flags
        return None
    return _flag(torch.ge, x, lo).mul_(_flag(torch.le, x, hi))


@torch.no_grad()
def _token_ratio(log_prob, old_log_prob):
    """(log r clamped to ±20 as verl, r, flags of |log r| <= 20 or None): the clamp stops the gradient."""
    log_ratio = log_prob - old_log_prob  # (B, T)
    in_range = _in_range(log_ratio, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    if in_range is not None:  # else every entry is within the clamp already
        log_ratio.clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return log_ratio, log_ratio.exp(), in_range


@torch.no_grad()
def _sequence_ratio(log_prob, old_log_prob, mask):
    """GSPO (verl `gspo`): s = exp(mean_t log r) per sequence, used for every token. verl writes it as
    sg[s]·π_θ/sg[π_θ], whose gradient is s·∇log π per token; clamped at log s <= 10 as verl."""
    log_ratio = log_prob - old_log_prob  # (B, T)
    seq_lengths = torch.sum(mask, dim=-1).clamp(min=1)  # (B,)
    seq_log_ratio = (torch.sum(log_ratio * mask, dim=-1) / seq_lengths).unsqueeze(-1)  # (B, 1) log s
    in_range = _in_range(seq_log_ratio, -math.inf, SEQ_LOG_RATIO_MAX)
    ratio = torch.exp(torch.clamp(seq_log_ratio, max=SEQ_LOG_RATIO_MAX)).expand_as(log_ratio).contiguous()
    log_ratio.clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # token log r, for the metrics only
    return log_ratio, ratio, in_range


def _binary_kl_bound(delta: float, p, side: int):
    return torch.exp(_binary_kl_root(torch.full_like(p, delta), p, torch, side=side, maxiter=200))


def _binary_tv_bound(delta: float, p, side: int):
    return (1.0 - delta / p).clamp_(min=0.0) if side < 0 else 1.0 + delta / p


# One root of D(r, p) = δ per entry, float64 torch in and out: side -1 gives lo < 1, side +1 gives hi > 1.
_TORCH_BOUNDS: dict[str, Callable] = {"binary_kl": _binary_kl_bound, "binary_tv": _binary_tv_bound}


@torch.no_grad()
def _divergence(spec: ClipSpec, ratio, old_log_prob):
    """D(r, p) per token for a p-dependent measure, p = π_old(a) kept below 1 (log p rounds to 0 for sure
    tokens); in the input's dtype, on its device. Returns (D, p)."""
    p = old_log_prob.exp().clamp_(max=1.0 - torch.finfo(old_log_prob.dtype).eps)
    return get_measure(spec.measure)._value(ratio, p, torch), p


@torch.no_grad()
def _per_token_clip(spec: ClipSpec, ratio, old_log_prob, select):
    """clip(r) with exact per-token bounds, solved (float64) only where D > δ and `select` holds, else r.

    A selected token with r > 1 gets its upper root hi(p), one with r < 1 its lower root lo(p).
    """
    divergence, p = _divergence(spec, ratio, old_log_prob)
    which = divergence > spec.delta
    if select is not None:
        which &= select
    idx = which.reshape(-1).nonzero().squeeze(1)  # (K,) flat indices of the tokens to clip
    if idx.numel() == 0:
        return ratio
    r, p64 = ratio.reshape(-1)[idx], p.reshape(-1)[idx].double()  # (K,)
    up = r > 1
    bound = torch.empty_like(p64)
    solve = _TORCH_BOUNDS[spec.measure_name]
    if bool(up.any()):
        bound[up] = solve(spec.delta, p64[up], +1)
    if not bool(up.all()):
        bound[~up] = solve(spec.delta, p64[~up], -1)
    clipped_ratio = ratio.clone(memory_format=torch.contiguous_format)
    clipped_ratio.view(-1)[idx] = bound.to(ratio.dtype)
    return clipped_ratio


# ---------------------------------------------------------------------------------------------- modes
class _Terms(NamedTuple):
    loss: torch.Tensor  # (B, T) per-token loss, differentiable in log_prob
    log_ratio: torch.Tensor  # (B, T) token log r clamped to ±20, for ppo_kl and kl3
    ratio: torch.Tensor  # (B, T) the ratio the loss used (the sequence ratio at level='sequence')
    clipped: torch.Tensor | None  # (B, T) 1.0 where a bound changed this token's term
    clipped_low: torch.Tensor | None  # (B, T) 1.0 where that bound was the lower one
    dual: torch.Tensor | None = None  # (B, T) 1.0 where the dual clip capped the loss


MODES: dict[str, Callable[..., _Terms]] = {}


def register_mode(name: str):
    """Register `fn(log_prob, old_log_prob, advantages, mask, spec) -> _Terms` as loss mode `name`."""

    def deco(fn):
        MODES[name] = fn
        return fn

    return deco


@register_mode("clip")
def _clip_mode(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> _Terms:
    """PPO: max(-A·r, -A·clip(r, lo, hi)); GSPO's sequence ratio at level='sequence'.

    The value is `clipped_surrogate`'s; the gradient is the rule it implies, -A·r·∇log π on kept tokens.
    """
    with torch.no_grad():
        if spec.level == "sequence":
            log_ratio, ratio, in_range = _sequence_ratio(log_prob, old_log_prob, mask)
        else:
            log_ratio, ratio, in_range = _token_ratio(log_prob, old_log_prob)
        if spec.p_dependent:
            moved = (ratio - 1.0) * advantages > 0  # only a token pushed past a bound by its own A is clipped
            clipped_ratio = _per_token_clip(spec, ratio, old_log_prob, moved)
        else:
            clipped_ratio = torch.clamp(ratio, *spec.ratio_bounds())
        sur = clipped_surrogate(ratio, clipped_ratio, advantages, spec.dual_clip_c)
        keep = 1.0 - sur.clipped  # (B, T) 1.0 where the token keeps its gradient
        if sur.dual is not None:
            keep.sub_(sur.dual)
        if in_range is not None:
            keep.mul_(in_range)  # verl's log-ratio clamp also stops the gradient
        grad = sur.loss_unclipped.mul_(keep)  # d(-A·r)/d log π = -A·r where kept, else 0
        clipped_low = _flag(torch.lt, advantages, 0.0).mul_(sur.clipped)
    loss = _WithGradient.apply(log_prob, sur.loss, grad)
    return _Terms(loss, log_ratio, ratio, sur.clipped, clipped_low, sur.dual)


@register_mode("gated")
def _gated_mode(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> _Terms:
    """DPPO (verl `dppo_kl`/`dppo_tv`): -A·sg(min(r, c))·log π, zeroed where the bound is crossed in A's
    direction. Its gradient, -A·min(r, c)·∇log π = -A·∇r for r < c, is the clip mode's, token by token."""
    with torch.no_grad():
        log_ratio, ratio, _ = _token_ratio(log_prob, old_log_prob)
        adv_pos, adv_neg = _flag(torch.gt, advantages, 0.0), _flag(torch.lt, advantages, 0.0)
        if spec.p_dependent:
            divergence, _ = _divergence(spec, ratio, old_log_prob)
            exceeded = _flag(torch.gt, divergence, spec.delta)
            clipped_high = _flag(torch.gt, ratio, 1.0).mul_(exceeded).mul_(adv_pos)
            clipped_low = _flag(torch.lt, ratio, 1.0).mul_(exceeded).mul_(adv_neg)
        else:
            lo, hi = spec.ratio_bounds()
            clipped_high = _flag(torch.gt, ratio, hi).mul_(adv_pos)
            clipped_low = _flag(torch.lt, ratio, lo).mul_(adv_neg)
        clipped = clipped_high.add_(clipped_low)  # the two are disjoint
        valid = 1.0 - clipped  # (B, T) 1.0 = keeps its gradient
        weight = ratio if spec.tis_cap is None else ratio.clamp(max=spec.tis_cap)  # truncated IS weight
    loss = -advantages * weight * log_prob * valid  # verl's product order, for bit-equal losses
    return _Terms(loss, log_ratio, ratio, clipped, clipped_low)


@register_mode("cispo")
def _cispo_mode(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> _Terms:
    """CISPO (verl `cispo`): -sg(clip(r, lo, hi))·A·log π. Clipping bounds the IS weight only, on both sides
    whatever the sign of A, so every token keeps a gradient."""
    with torch.no_grad():
        log_ratio, ratio, _ = _token_ratio(log_prob, old_log_prob)
        if spec.p_dependent:
            clipped_ratio = _per_token_clip(spec, ratio, old_log_prob, None)
        else:
            clipped_ratio = torch.clamp(ratio, *spec.ratio_bounds())
        clipped, clipped_low = _flag(torch.ne, clipped_ratio, ratio), _flag(torch.gt, clipped_ratio, ratio)
    loss = -clipped_ratio * advantages * log_prob  # verl's product order
    return _Terms(loss, log_ratio, ratio, clipped, clipped_low)


@register_mode("sapo")
def _sapo_mode(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> _Terms:
    """SAPO (verl `sapo`): -A·f(r), f(r) = σ(τ(r - 1))·4/τ with τ = tau_pos for A > 0 else tau_neg. The soft
    gate's slope f'(r) = 4σ(1 - σ) is 1 at r = 1 and decays smoothly: no hard clip, so no clip fractions.
    verl's `sapo` always aggregates with seq-mean-token-mean, whatever loss_agg_mode says; here it is honoured."""
    with torch.no_grad():
        log_ratio, ratio_value, in_range = _token_ratio(log_prob, old_log_prob)
        tau_neg = torch.full_like(advantages, spec.tau_neg)
        tau_pos = torch.full((), spec.tau_pos, dtype=advantages.dtype, device=advantages.device)
        taus = tau_neg.lerp_(tau_pos, _flag(torch.gt, advantages, 0.0))  # (B, T) exact tau_pos or tau_neg
        dratio = ratio_value if in_range is None else ratio_value * in_range  # dr/d log π, 0 where clamped
    ratio = _WithGradient.apply(log_prob, ratio_value, dratio)
    gates = torch.sigmoid(taus * (ratio - 1.0)) * (4.0 / taus)
    return _Terms(-gates * advantages, log_ratio, ratio_value, None, None)


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
        # ATR-GRPO: the KL3 budget whose lower bound is GRPO's 0.8, δ = KL3(0.8) = 0.023144 (THEORY.md §2).
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
