"""divclip's losses as verl 0.9.1 policy-loss modes (`actor_rollout_ref.actor.policy_loss.loss_mode=...`).

Importing this module registers, with verl's `register_policy_loss`:

  atr_kl3            ATR-GRPO. ε convention: the user gives GRPO's lower width ε_low in `clip_ratio_low`
                     (falling back to `clip_ratio`, verl's rule); divclip sets δ = KL3(1 - ε_low)
                     = -ε_low - log(1 - ε_low) and clips r to [1 - ε_low, u_δ], u_δ the KL3 root above 1
                     (Lambert W_{-1}). `clip_ratio_high` is ignored: the upper width follows from δ. ε_low = 0.2
                     gives δ = 0.023144 and u_δ = 1.23084: verl's `vanilla` with clip_ratio_low=0.2 and
                     clip_ratio_high=u_δ - 1 (the same loss bit for bit, gradients equal to rounding).
  divclip_<measure>  one mode per measure in `theory.MEASURES` (ratio, log_ratio, k2, kl3, kl3_reverse, binary_kl,
                     binary_tv, chi2, hellinger, and any added with `theory.register_measure`, before or after
                     this import), clipping r to [lo(δ_low), hi(δ_high)] of D(r[, p]) <= δ. δ comes
                     from the environment variable DIVCLIP_DELTA ("δ" or "δ_low,δ_high"), which verl cannot
                     default; clip_ratio_low/high are then ignored. Without DIVCLIP_DELTA, δ_low = clip_ratio_low
                     and δ_high = clip_ratio_high (each falling back to clip_ratio, as verl's dppo_kl/dppo_tv), and a
                     budget equal to verl's default 0.2 is refused: for a divergence it is a ratio width (KL3 at
                     δ = 0.2 is [0.49, 1.77]). For 'ratio' the budgets are the widths ε (divclip_ratio is `vanilla`).

  divclip_method     any divclip method string (`divclip.theory.spec`), read from the environment variable
                     DIVCLIP_METHOD in each worker: e.g. 'kl3:0.02', an intersection 'kl3:0.023144&binary_tv:0.2'
                     (per-part clip fractions as actor/clipfrac_{low,high}_part{i}) or an adaptive δ
                     'kl3@clipfrac=0.1'. The string is the whole spec: verl's clip_ratio, clip_ratio_low/high and
                     clip_ratio_c are ignored (a warning says so once; put a dual clip in the string, '/dual=3').

Warnings (each logged once per process, with the code `divclip check` reports): a key the mode ignores
(`clip_ratio_high` under atr_kl3 unless it is u_δ - 1; clip_ratio_* under DIVCLIP_DELTA), a budget at the scale of
a ratio width, a clip that cannot bind.

Adaptive δ without patching verl: verl calls the policy loss once per micro-batch in each actor worker and
keeps no state for it, so `divclip_method` keeps one `DeltaController` per process and method string
(`CONTROLLERS`), steps it after every call from that micro-batch's own signal (the clip fraction, or the
per-token k3 against π_old; verl does not hand the policy loss the entropy, so '@entropy=' is refused), and
logs actor/divclip_delta. What this cannot do without patching verl: (1) all-reduce the signal, so each
data-parallel rank adapts its own δ from its own micro-batches (they drift apart; ranks see similar batches,
so they stay close, but not equal); (2) save δ in verl's checkpoints: a resumed run restarts at δ0;
(3) step once per optimizer step: it steps per micro-batch (ppo_epochs × micro-batches per step).

All modes use PPO's clipped form max(-A·r, -A·clip(r)) with verl's dual clip at `clip_ratio_c` for A < 0 (as
`vanilla`; `clip_ratio_c` = inf turns it off), multiply by `rollout_is_weights`, and aggregate with verl's own
`agg_loss(..., **config.global_batch_info)`, so dp/global-token normalisation is verl's. Metrics use verl's names
(`actor/pg_clipfrac`, `actor/ppo_kl`, `actor/pg_clipfrac_lower` = the dual-clip fraction, as in `vanilla`)
plus `actor/clipfrac_low` (A < 0 and r below the lower bound) and `actor/clipfrac_high` (A > 0 and r above the
upper bound).

Enable in a verl run: `VERL_USE_EXTERNAL_MODULES=divclip.trainer.integrations.verl` (verl/__init__.py imports every
comma-separated module in it whenever `verl` is imported, in the driver and in each Ray worker that inherits the
variable) and `actor_rollout_ref.actor.policy_loss.loss_mode=atr_kl3`. See docs/trainer.md.
"""

from __future__ import annotations

import logging
import math
import os
import warnings

import torch
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, agg_loss, register_policy_loss

from divclip.engines import advice
from divclip.engines import verl as engine
from divclip.theory.adaptive import process_controller
from divclip.theory.forms._numpy import LOG_RATIO_CLAMP
from divclip.theory.loss_metrics import PLUGIN_METRICS, clip_metrics
from divclip.theory.losses import ClipSpec, policy_terms
from divclip.theory.measures import MEASURES, get_measure
from divclip.theory.registry import on_register
from divclip.theory.spec import is_adaptive, parse_method
from divclip.trainer.integrations.verl_names import METHOD_ENV  # noqa: E402

CONTROLLERS: dict = {}
"""divclip_method's adaptive-δ controllers in this process, by method string (see the module docstring)."""
_WARNED_METHODS: set = set()

LOSS_MODES: list[str] = []
"""Every loss mode this module registered with verl."""

logger = logging.getLogger("divclip.verl")
_WARNED: set = set()


def warn_once(items) -> None:
    """Log each advice once per process (the loss runs every micro-batch)."""
    for a in items:
        if (a.code, a.key, a.message) not in _WARNED:
            _WARNED.add((a.code, a.key, a.message))
            logger.warning(a.log_line())


def side_budgets(config) -> tuple[float, float]:
    """(low, high) from clip_ratio_low / clip_ratio_high, each falling back to clip_ratio (verl's rule)."""
    base = config.clip_ratio
    low = config.clip_ratio_low if config.clip_ratio_low is not None else base
    high = config.clip_ratio_high if config.clip_ratio_high is not None else base
    for name, v in (("clip_ratio_low", low), ("clip_ratio_high", high)):
        if isinstance(v, bool) or not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"actor.{name} (or actor.clip_ratio) must be a finite number > 0, got {v!r}")
    return float(low), float(high)


def dual_clip_c(config) -> float | None:
    """verl's `clip_ratio_c` (default 3.0); inf or None means no dual clip."""
    c = config.get("clip_ratio_c", 3.0)
    if c is None or c == math.inf:
        return None
    if isinstance(c, bool) or not (isinstance(c, (int, float)) and math.isfinite(c) and c > 1):
        raise ValueError(f"actor.clip_ratio_c must be a number > 1 (inf: no dual clip), got {c!r}")
    return float(c)


def atr_kl3_bounds(eps_low: float) -> tuple[float, float, float]:
    """(lo, hi, δ) of atr_kl3 for ε_low = actor.clip_ratio_low (divclip.engines.advice.atr_kl3_bounds)."""
    return advice.atr_kl3_bounds(eps_low, "actor.clip_ratio_low")


def atr_kl3_spec(config) -> ClipSpec:
    """The ClipSpec atr_kl3 runs for a verl actor config. By the gradient-equivalence theorem KL3 clipping at δ
    is ratio clipping at [l_δ, u_δ]; writing it with widths (1 - lo, hi - 1) makes the bounds verl's
    1 - clip_ratio_low and u_δ exactly (u_δ - 1 is exact in float64 for u_δ in [1, 2])."""
    low, high = side_budgets(config)
    lo, hi, _ = atr_kl3_bounds(low)
    if not math.isclose(high, hi - 1.0, rel_tol=1e-6):
        warn_once(
            [
                advice.ignored_key_advice(
                    "atr_kl3",
                    "actor.clip_ratio_high",
                    high,
                    f"the upper bound is u_δ = {hi:.7g} from clip_ratio_low "
                    f"= {low:g} (set clip_ratio_high = {hi - 1.0!r} "
                    "to silence this)",
                )
            ]
        )
    return ClipSpec("ratio", eps_low=1.0 - lo, eps_high=hi - 1.0, params={"dual_clip_c": dual_clip_c(config)})


def measure_budgets(name: str, config) -> tuple[float, float]:
    """(δ_low, δ_high) of divclip_<name>: DIVCLIP_DELTA when set, else clip_ratio_low/high (0.2 refused)."""
    mode = f"divclip_{name}"
    env = os.environ.get(engine.DELTA_ENV)
    if env is not None and env.strip():
        low, high = advice.parse_delta(env, engine.DELTA_ENV)
        cfg_low, cfg_high = side_budgets(config)
        ignored = [
            (k, v)
            for k, v, d in (("actor.clip_ratio_low", cfg_low, low), ("actor.clip_ratio_high", cfg_high, high))
            if v != d
        ]
        warn_once(
            advice.ignored_key_advice(mode, k, v, f"δ comes from {engine.DELTA_ENV}={env.strip()}") for k, v in ignored
        )
    else:
        low, high = side_budgets(config)
        if name != "ratio" and engine.DEFAULT_BUDGET in (low, high):
            key = "clip_ratio_low" if low == engine.DEFAULT_BUDGET else "clip_ratio_high"
            raise ValueError(
                f"{mode} would read its {name} budget δ from actor.{key} = {engine.DEFAULT_BUDGET:g}, verl's "
                f"default ratio width (KL3 at δ = 0.2 allows r in [0.49, 1.77]); give δ with the environment "
                f"variable {engine.DELTA_ENV} (e.g. {engine.DELTA_ENV}=0.0231443, the KL3 budget of ε_low = 0.2) "
                f"or set clip_ratio_low/clip_ratio_high to the budget"
            )
    keys = (
        ("actor.clip_ratio_low", "actor.clip_ratio_high")
        if env is None or not env.strip()
        else (engine.DELTA_ENV, engine.DELTA_ENV)
    )
    budgets = [(keys[0], low)] + ([(keys[1], high)] if high != low else [])
    warn_once(advice.budget_advice(name, budgets, mode, engine.DEFAULT_WIDTH))
    warn_once(advice.cannot_bind_advice(name, low, high, mode, keys))
    return low, high


def measure_specs(name: str, config) -> tuple[ClipSpec, ClipSpec | None]:
    """(spec, None) when one spec covers both sides; else (lower-side spec, upper-side spec)."""
    low, high = measure_budgets(name, config)
    c = dual_clip_c(config)
    if name == "ratio":
        return ClipSpec("ratio", eps_low=low, eps_high=high, params={"dual_clip_c": c}), None
    if low == high:
        return ClipSpec(name, delta=low, params={"dual_clip_c": c}), None
    m = get_measure(name)
    if not m.p_dependent:  # one interval [lo(δ_low), hi(δ_high)], written as ratio widths
        lo, hi = advice.measure_bounds(name, low, high)
        return ClipSpec("ratio", eps_low=1.0 - lo, eps_high=hi - 1.0, params={"dual_clip_c": c}), None
    return ClipSpec(name, delta=low, params={"dual_clip_c": c}), ClipSpec(name, delta=high, params={"dual_clip_c": c})


REPORTED_METRICS = PLUGIN_METRICS  # what the losses below compute and report (a module name the tests can swap)


def _upper_side_metrics(reported):
    """What the upper spec of a two-budget pair is asked for: its clip counts only (ppo_kl is the same log-ratio's,
    already taken from the lower spec's terms)."""
    return tuple(name for name in reported if name != "ppo_kl")


def _loss_and_metrics(
    specs, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights
):
    """Per-token loss from theory's clip form, aggregated by verl's agg_loss with its global batch info."""
    # verl's FSDP engine hands bf16 log-probs (mixed precision) with fp32 old log-probs; vanilla's
    # `log_prob - old_log_prob` promotes, and so does this (one dtype for the ratio, mask and metrics).
    dtype = torch.promote_types(log_prob.dtype, old_log_prob.dtype)
    log_prob, old_log_prob = log_prob.to(dtype), old_log_prob.to(dtype)
    spec, upper = specs
    terms = policy_terms(log_prob, old_log_prob, advantages, response_mask, spec)
    mask = response_mask.to(terms.loss.dtype)
    m = clip_metrics(terms, mask, REPORTED_METRICS)
    pg_losses = terms.loss  # (B, T)
    if upper is not None:
        # Per-token bounds with a different budget on each side: r < 1 only ever meets the lower bound and
        # r > 1 only the upper one, so each side takes the loss (and clip counts) of its own spec.
        up = policy_terms(log_prob, old_log_prob, advantages, response_mask, upper)
        pg_losses = torch.where(terms.ratio < 1, terms.loss, up.loss)
        m_up = clip_metrics(up, mask, _upper_side_metrics(REPORTED_METRICS))
        m.update(
            clipfrac_high=m_up["clipfrac_high"],
            dual_clipfrac=m_up["dual_clipfrac"],
            clipfrac=m["clipfrac_low"] + m_up["clipfrac_high"],
        )
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(
        loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **config.global_batch_info
    )
    metrics = {
        "actor/pg_clipfrac": m["clipfrac"],
        "actor/ppo_kl": m["ppo_kl"],
        "actor/pg_clipfrac_lower": m["dual_clipfrac"],
        "actor/clipfrac_low": m["clipfrac_low"],
        "actor/clipfrac_high": m["clipfrac_high"],
    }
    for i, (low, high) in enumerate(terms.by_part or ()):
        n = mask.sum().clamp(min=1.0)
        metrics[f"actor/clipfrac_low_part{i}"] = float((low * mask).sum() / n)
        metrics[f"actor/clipfrac_high_part{i}"] = float((high * mask).sum() / n)
    return pg_loss, metrics


@register_policy_loss("atr_kl3")
def compute_policy_loss_atr_kl3(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    """ATR-GRPO in verl: KL3 clipping with δ = KL3(1 - clip_ratio_low); see the module docstring."""
    if config is None:
        raise ValueError("atr_kl3 needs verl's actor config (clip_ratio_low, clip_ratio_c, global_batch_info)")
    return _loss_and_metrics(
        (atr_kl3_spec(config), None),
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        loss_agg_mode,
        config,
        rollout_is_weights,
    )


LOSS_MODES.append("atr_kl3")


def method_spec() -> str:
    """The method string of divclip_method: $DIVCLIP_METHOD, validated (a ValueError says what is allowed)."""
    method = os.environ.get(METHOD_ENV)
    if not method:
        raise ValueError(
            f"loss_mode divclip_method reads its method string from ${METHOD_ENV} (e.g. "
            f"{METHOD_ENV}='kl3:0.023144&binary_tv:0.2'), which is unset or empty"
        )
    try:
        spec = parse_method(method)
    except ValueError as exc:
        raise ValueError(f"${METHOD_ENV}: {exc}") from None
    if spec.form == "sapo" or spec.level != "token":
        raise ValueError(
            f"${METHOD_ENV}={method!r}: divclip_method runs token-level clip, gated or cispo modes "
            f"(verl has its own sapo and gspo), got form={spec.form!r}, level={spec.level!r}"
        )
    if is_adaptive(spec) and spec.signal == "entropy":
        raise ValueError(
            f"${METHOD_ENV}={method!r}: verl does not pass the entropy to the policy loss; adapt to "
            f"'clipfrac' or 'kl3' instead"
        )
    return method


@register_policy_loss("divclip_method")
def compute_policy_loss_divclip_method(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    """Any divclip method string from $DIVCLIP_METHOD, adaptive δ included (see the module docstring)."""
    if config is None:
        raise ValueError("divclip_method needs verl's actor config (global_batch_info)")
    method = method_spec()
    if method not in _WARNED_METHODS:
        _WARNED_METHODS.add(method)
        warnings.warn(
            f"divclip_method runs {method!r}: verl's clip_ratio, clip_ratio_low/high and clip_ratio_c are "
            "ignored (the method string is the whole spec)",
            stacklevel=2,
        )
    spec, ctrl = process_controller(CONTROLLERS, method, parse_method(method))
    loss, metrics = _loss_and_metrics(
        (spec, None), old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights
    )
    if spec.delta is not None:
        metrics["actor/divclip_delta"] = float(spec.delta)
    if ctrl is not None:
        with torch.no_grad():
            mask = response_mask.to(torch.float64)
            lr = (log_prob.detach() - old_log_prob).to(torch.float64).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
            kl3 = float(((torch.expm1(lr) - lr) * mask).sum() / mask.sum().clamp(min=1.0))
        ctrl.update(metrics["actor/pg_clipfrac"] if ctrl.signal == "clipfrac" else kl3)
    return loss, metrics


LOSS_MODES.append("divclip_method")


def _register_measure(name: str):
    mode = f"divclip_{name}"

    @register_policy_loss(mode)
    def compute_policy_loss(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        loss_agg_mode="token-mean",
        config=None,
        rollout_is_weights=None,
    ):
        if config is None:
            raise ValueError(f"{mode} needs verl's actor config (clip_ratio_c, global_batch_info)")
        return _loss_and_metrics(
            measure_specs(name, config),
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            loss_agg_mode,
            config,
            rollout_is_weights,
        )

    compute_policy_loss.__name__ = f"compute_policy_loss_{mode}"
    compute_policy_loss.__doc__ = f"Clip by {name}: δ_low = clip_ratio_low, δ_high = clip_ratio_high (see module)."
    if mode not in LOSS_MODES:
        LOSS_MODES.append(mode)


for _name in MEASURES:  # every measure registered so far (built in, or theory.register_measure before this import)
    _register_measure(_name)


def _unregister_measure(measure) -> None:
    mode = f"divclip_{measure.name}"
    POLICY_LOSS_REGISTRY.pop(mode, None)
    if mode in LOSS_MODES:
        LOSS_MODES.remove(mode)


on_register(lambda measure: _register_measure(measure.name), _unregister_measure)  # and every one added later
