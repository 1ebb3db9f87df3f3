"""The unified clipped policy loss in torch (docs/theory.md §1, §3, §4), with verl 0.9.1 semantics.

One `ClipSpec` says how a token's policy gradient is limited; `policy_loss` turns log-probs, advantages and a
mask into a scalar loss and diagnostics. With r = π_θ(a)/π_old(a) and a clip interval [lo, hi] from the
measure (D(r[, p]) <= δ  <=>  lo <= r <= hi, the gradient-equivalence theorem), clipping works by the sign of A:

* A > 0 (make the token likelier): r may rise to hi; above hi the loss is flat, the gradient is 0.
* A < 0 (make it rarer): r may fall to lo; below lo the loss is flat. With dual clip the loss is also capped
  at -A·c, so a token whose ratio already exploded (r > c) stops pushing.
* A token that moved against its advantage ((r - 1)·A < 0) is never clipped: its gradient pulls it back.

The loss forms (clip, gated, cispo, sapo, ...) live in `divclip.theory.forms`, one module each, and PPO's
surrogate with the kernels they share in `divclip.theory.forms._kernels`; the spec,
its presets and the method strings live in the torch-free `divclip.theory.spec` (re-exported here); this
module holds the validated entry point.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from divclip.theory.correction import Correction, parse_correction
from divclip.theory.forms import FORMS
from divclip.theory.forms._kernels import (
    LOG_RATIO_CLAMP,
    SEQ_LOG_RATIO_MAX,
    PolicyTerms,
    Surrogate,
    _const,
    clip_loss_with_bounds,
    clipped_surrogate,
    masked_sum_closed_form,
    with_token_ratio,
)
from divclip.theory.loss_metrics import (
    LOSS_AGG_MODES,
    METRIC_NAMES,
    agg_loss,
    aggregate,
    check_agg,
    clip_stats,
    masked_sum_finite,
    metrics_from_stats,
)
from divclip.theory.spec import LEVELS, PRESETS, ClipSpec, as_spec, preset  # noqa: F401  (re-exported)

__all__ = [
    "LOG_RATIO_CLAMP",
    "LOSS_AGG_MODES",
    "PRESETS",
    "PolicyTerms",
    "SEQ_LOG_RATIO_MAX",
    "ClipSpec",
    "Surrogate",
    "agg_loss",
    "clip_loss_with_bounds",
    "clipped_surrogate",
    "policy_loss",
    "policy_terms",
    "preset",
]


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


def _terms(named: dict, spec, fill: str) -> tuple[PolicyTerms, torch.Tensor, torch.Tensor]:
    """(terms, mask and log_prob in the compute dtype) after validating `named` (policy_terms, policy_loss).
    fill: what to fill in where a form left its metric-only log-ratio and ratio None (`with_token_ratio`):
    'none' (the loss alone), 'log_ratio' (what `clip_stats` needs) or 'ratio' (both)."""
    spec = spec if isinstance(spec, ClipSpec) else as_spec(spec)
    _check_inputs(named)
    dtype = _compute_dtype(named["log_prob"])
    lp = _as(named["log_prob"], dtype)  # (B, T); keeps the autograd link to a bf16/fp16 leaf
    old, adv, mask = (_as(_const(named[k]), dtype) for k in ("old_log_prob", "advantages", "response_mask"))
    loss = FORMS[spec.form].loss
    if loss is None:
        raise ValueError(f"form {spec.form!r} is declared without a torch loss (Form.loss): it cannot run")
    terms = loss(lp, old, adv, mask, spec)
    if fill != "none":
        terms = with_token_ratio(terms, _const(lp), old, ratio=fill == "ratio")
    return terms, mask, lp


def policy_terms(log_prob, old_log_prob, advantages, response_mask, spec: ClipSpec | str) -> PolicyTerms:
    """The per-token terms `policy_loss` aggregates: loss, ratio, log-ratio and the 0/1 clip flags.

    Same inputs, validation and compute dtype as `policy_loss` (float32 for bf16/fp16/float32, float64 for
    float64). Returns a `PolicyTerms` of (B, T) tensors: `loss` (differentiable in log_prob; neither masked nor
    weighted), `ratio` (the sequence ratio at level='sequence'), `log_ratio` (token log r, clamped to ±20),
    and the flags `clipped`, `clipped_low`, `clipped_high`, `dual` (1.0 where the lower bound, the upper bound
    or the dual clip changed the token's term; not masked; None where the loss form has no such bound), and
    `grad`, ∂loss/∂log π per token in closed form (detached; None where the form leaves it to autograd).
    The plug-ins and the sanity check read their per-token clip decisions from here.
    """
    named = {
        "log_prob": log_prob,
        "old_log_prob": old_log_prob,
        "advantages": advantages,
        "response_mask": response_mask,
        "rollout_is_weights": None,
    }
    return _terms(named, spec, "ratio")[0]


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
    metrics: bool | tuple[str, ...] | list[str] | set[str] = True,
    rollout_log_prob=None,
    correction=None,
):
    """Clipped policy loss and diagnostics; all tensors (B, T), `spec` a ClipSpec or a method string
    (`divclip.theory.spec.parse_method`: a preset name such as 'grpo', or e.g. 'kl3:0.02').

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
      clipfrac_low_part{i}, clipfrac_high_part{i}   intersections (`AllOf`) only: the tokens clipped at part
                     i's bound, i.e. where part i's lo is the max (low) or its hi the min (high) of the parts'
                     bounds; a tie counts for every tied part, so these may sum to more than clipfrac_low/high
    The gradient is taken with respect to log_prob; old_log_prob, advantages and rollout_is_weights are
    constants of the update (detached).

    metrics=True reads everything on the host in one transfer (one `.tolist()` of a tensor holding every
    diagnostic and the loss), and raises a ValueError naming the input when the loss is not finite: a NaN input
    reaches the scalar loss even under the mask, and only then are the inputs inspected.
    metrics given as names (a list, tuple or set from METRIC_NAMES) computes only those diagnostics, with the same
    one host transfer and the same finite check; an empty one computes none but still checks (what an engine
    function that returns no metrics, such as verl's gpg, is compared with in benchmarks/bench_loss_forms.py).
    The values are those of metrics=True, bit for bit; the per-part intersection metrics and the rollout
    correction's come with metrics=True only.
    metrics=False returns (loss, {}) and reads nothing on the host: no `.item()`, no data-dependent branch, so
    on a GPU there is no stream synchronisation and `torch.compile(fullgraph=True)` traces the whole call. A
    non-finite input is then reported by the loss itself, which comes out NaN (or ±inf) under the same condition
    that raises with metrics=True; test it where a host read is cheap (`torch.isfinite(loss)`, or a training
    loop's own non-finite check). The loss and its gradient are bit for bit the same either way. Exception on
    the CPU only: p-dependent clip bounds pick the clipped tokens on the host (`forms._kernels._compact_on_host`).

    rollout_log_prob and correction (a `divclip.theory.correction.Correction` or its string) apply the rollout
    correction (`divclip.theory.rollout_correction`): its weights multiply the per-token loss as
    rollout_is_weights do and its rejected tokens leave response_mask. Decoupled (verl's default): the correction
    is of π_old/π_rollout. Bypass (`bypass` in the correction; old_log_prob is then the rollout's, as verl sets
    it): of π_θ/π_rollout from log_prob, detached; a REINFORCE loss (form gpg) takes its weights, any other form
    only its rejection (verl's PPO-clip bypass, whose ratio is already to π_rollout). An off-policy sequence
    mask (opsm=) compares π_θ with π_rollout in either mode, as TRL does. Its metrics join the others with the
    prefix 'rollout_corr/'.
    """
    check_agg(loss_agg_mode, loss_scale_factor)
    names = _metric_names(metrics)
    if correction is not None or rollout_log_prob is not None:
        return _corrected_loss(
            log_prob,
            old_log_prob,
            advantages,
            response_mask,
            spec,
            loss_agg_mode,
            rollout_is_weights,
            dict(loss_scale_factor=loss_scale_factor, metrics=metrics),
            rollout_log_prob,
            correction,
        )
    named = {
        "log_prob": log_prob,
        "old_log_prob": old_log_prob,
        "advantages": advantages,
        "response_mask": response_mask,
        "rollout_is_weights": rollout_is_weights,
    }
    spec = spec if isinstance(spec, ClipSpec) else as_spec(spec)
    needs_log_ratio = names is not None and bool(set(names) & LOG_RATIO_METRICS)
    terms, mask, lp = _terms(named, spec, "log_ratio" if needs_log_ratio else "none")
    weights = None if rollout_is_weights is None else rollout_is_weights.detach().to(lp.dtype)
    own_aggregation = FORMS[spec.form].aggregate  # a form whose engine ignores loss_agg_mode (geo_mean)
    loss = None if own_aggregation is None else own_aggregation(terms, mask, weights, spec)
    if loss is None:
        loss_mat = terms.loss if weights is None else terms.loss * weights  # (B, T)
        masked_sum = masked_sum_finite
        if weights is None and terms.grad is not None:  # the same sum, its gradient straight from terms.grad
            masked_sum = lambda values, m: masked_sum_closed_form(terms, lp, m)  # noqa: E731
        loss = aggregate(loss_mat, mask, loss_agg_mode, loss_scale_factor, masked_sum)
    if names is None:
        return loss, {}  # no host read: a non-finite input shows as a non-finite loss (see the docstring)
    by_part = () if terms.by_part is None or metrics is not True else terms.by_part  # which part's bound clipped
    stats = clip_stats(terms, mask, extra=[f for pair in by_part for f in pair], names=names)
    stats = torch.cat([stats, loss.detach().reshape(1).to(stats.dtype)]).tolist()  # the one host transfer
    if not math.isfinite(stats[-1]):  # NaN anywhere (even under the mask) reaches the sum
        _raise_non_finite(named)
    out = metrics_from_stats(stats, names)
    n_names = len(names)
    parts = stats[n_names + 1 : -1]
    for i in range(len(by_part)):
        out[f"clipfrac_low_part{i}"], out[f"clipfrac_high_part{i}"] = parts[2 * i] + 0.0, parts[2 * i + 1] + 0.0
    return loss, out


LOG_RATIO_METRICS = frozenset({"ppo_kl", "kl3", "ratio_mean", "ratio_min", "ratio_max"})
"""The diagnostics that read the log-ratio (a form that leaves it None gets it filled in for them)."""


def _metric_names(metrics) -> tuple[str, ...] | None:
    """policy_loss's `metrics` as the diagnostics to compute, in METRIC_NAMES' order: None for False (no host
    read), METRIC_NAMES for True, else the given names (a list, tuple or set; empty: only the finite check)."""
    if metrics is True:
        return METRIC_NAMES
    if metrics is False:
        return None
    if isinstance(metrics, (str, bytes)) or not isinstance(metrics, (list, tuple, set, frozenset)):
        raise ValueError(
            f"metrics must be True or False, got {metrics!r} (or a list, tuple or set of names from {METRIC_NAMES})"
        )
    unknown = [m for m in metrics if m not in METRIC_NAMES]
    if unknown:
        raise ValueError(f"metrics names {unknown!r} are not diagnostics of policy_loss; allowed: {METRIC_NAMES}")
    return tuple(m for m in METRIC_NAMES if m in set(metrics))


def _corrected_loss(lp, old, adv, mask, spec, agg, weights, kw, rollout_log_prob, correction):
    """policy_loss with the rollout correction applied (see its docstring)."""
    from divclip.theory.correction_apply import rollout_correction

    if correction is None or rollout_log_prob is None:
        given = "correction" if rollout_log_prob is None else "rollout_log_prob"
        missing = "rollout_log_prob" if rollout_log_prob is None else "correction"
        raise ValueError(f"policy_loss: {given} was given without {missing}; pass both (or neither)")
    if weights is not None:
        raise ValueError(
            "policy_loss: pass rollout_is_weights or a correction, not both (the weight would count twice)"
        )
    c = parse_correction(correction)
    spec = spec if isinstance(spec, ClipSpec) else as_spec(spec)
    if not isinstance(lp, torch.Tensor):
        raise ValueError(f"log_prob must be a torch.Tensor of shape (batch, length), got {type(lp).__name__}")
    anchor = lp.detach() if c.bypass else old
    w, keep, cmetrics = rollout_correction(
        anchor, rollout_log_prob, mask, dataclasses.replace(c, opsm=None), metrics=kw["metrics"] is True
    )
    if c.bypass and spec.form != "gpg":
        w = None  # verl bypass ppo_clip: the ratio π_θ/π_rollout already carries the weight
    if c.opsm is not None:  # TRL's off-policy mask compares π_θ (its per_token_logps) with π_rollout
        gate = rollout_correction(lp.detach(), rollout_log_prob, mask, Correction(opsm=c.opsm), advantages=adv)[0]
        w = gate if w is None else w * gate
    loss, out = policy_loss(lp, old, adv, keep, spec, agg, w, **kw)
    out.update({f"rollout_corr/{k}": v for k, v in cmetrics.items()})
    return loss, out
