"""divclip's loss as a SkyRL 0.3.0 policy loss: `trainer.algorithm.policy_loss_type=divclip_method`.

SkyRL looks its policy losses up by name in `PolicyLossRegistry` (skyrl/backends/skyrl_train/utils/ppo_utils.py)
and registers new ones with `register_policy_loss(name)`; a registry function takes
`(log_probs, old_log_probs, advantages, config, loss_mask, rollout_logprobs)` and returns `(loss, metrics)`.
`register(method)` registers `divclip_method`: the per-token loss of the divclip method string `method`
(`divclip.theory.spec`: 'kl3:0.02', 'binary_kl:0.05', an intersection 'kl3:0.023144&binary_tv:0.2', an adaptive
δ 'kl3@clipfrac=0.1'), from `divclip.theory.losses.policy_terms`, then SkyRL's own off-policy correction
(`apply_off_policy_correction`, the `trainer.algorithm.off_policy_correction.*` keys) and SkyRL's `reduce_loss`
(Σ mask·ℓ: SkyRL scales the advantages by the `loss_reduction` before the loss, so the sum is the mean it
asks for). The method is bound at registration (a `functools.partial`), so it travels to the Ray workers with
the function when SkyRL syncs its registry (`sync_registries`), whatever the workers' environment.
SkyRL's `eps_clip_*` and `clip_ratio_c` are ignored: the method string is the whole spec ('/dual=3' for a dual
clip).

Run it without a fork: SkyRL's `main_base` imports the module named by `trainer.override_entrypoint` and runs its
`main()`; this module's `main()` registers `$DIVCLIP_METHOD` and runs main_base's own steps:

    DIVCLIP_METHOD='kl3:0.02' python3 -m skyrl.train.entrypoints.main_base \\
        trainer.override_entrypoint=divclip.trainer.integrations.skyrl \\
        trainer.algorithm.policy_loss_type=divclip_method ...

(or `python3 -m divclip.trainer.integrations.skyrl ...` with the same overrides). A script of your own calls
`register('kl3:0.02')` before SkyRL's `initialize_ray`.

Metrics (SkyRL averages them over micro-batches): `clip_ratio` (= divclip's clipfrac, SkyRL's name),
`clipfrac_low`, `clipfrac_high`, `dual_clipfrac`, `ppo_kl`, and `divclip_delta` for an adaptive δ, whose
controller (one per process and method, `CONTROLLERS`) steps after every call from that micro-batch's clip
fraction or k3, as the verl plug-in's does (each rank adapts its own δ; a resumed run restarts at δ0).

SkyRL 0.3.0 needs Python >= 3.12 to import `skyrl.backends` (its Tinker types use `typing.TypedDict`, which
pydantic refuses before 3.12); tests/engines/test_skyrl.py loads the loss module on 3.11 without that package
`__init__`.
"""

from __future__ import annotations

import functools
import os
import sys

import torch
from skyrl.backends.skyrl_train.utils.off_policy_correction_utils import apply_off_policy_correction
from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry, reduce_loss, register_policy_loss

from divclip.theory.adaptive import process_controller
from divclip.theory.loss_metrics import PLUGIN_METRICS, clip_metrics
from divclip.theory.losses import policy_terms
from divclip.theory.spec import method_string, parse_method

METHOD_ENV = "DIVCLIP_METHOD"
LOSS_NAME = "divclip_method"
ENTRYPOINT_KEY = "trainer.override_entrypoint"
CONTROLLERS: dict = {}
"""Adaptive-δ controllers in this process, by method string."""


@functools.lru_cache(maxsize=64)
def _spec(method: str):
    return parse_method(method)


REPORTED_METRICS = PLUGIN_METRICS  # what divclip_policy_loss computes and reports (a module name the tests can swap)


def divclip_policy_loss(
    log_probs, old_log_probs, advantages, config=None, loss_mask=None, rollout_logprobs=None, *, method: str
):
    """SkyRL's policy-loss signature; `method` is bound by `register`. Returns (Σ mask·ℓ, metrics)."""
    spec, ctrl = process_controller(CONTROLLERS, method, _spec(method))
    # SkyRL's FSDP worker hands bf16 log-probs with fp32 old ones: one dtype for the ratio, as its own losses
    dtype = torch.promote_types(log_probs.dtype, old_log_probs.dtype)
    log_probs, old_log_probs = log_probs.to(dtype), old_log_probs.to(dtype)
    mask = torch.ones_like(log_probs) if loss_mask is None else loss_mask  # (B, T)
    terms = policy_terms(log_probs, old_log_probs, advantages, mask, spec)
    # only the diagnostics reported below (and kl3 for a controller adapting to it): no pass for the others
    names = REPORTED_METRICS + (("kl3",) if ctrl is not None and ctrl.signal != "clipfrac" else ())
    m = clip_metrics(terms, mask.to(terms.loss.dtype), names)
    loss = terms.loss  # (B, T), not yet masked
    metrics = {
        "clip_ratio": m["clipfrac"],
        "clipfrac_low": m["clipfrac_low"],
        "clipfrac_high": m["clipfrac_high"],
        "dual_clipfrac": m["dual_clipfrac"],
        "ppo_kl": m["ppo_kl"],
    }
    if config is not None:
        loss, mask, correction = apply_off_policy_correction(
            loss, old_log_probs, rollout_logprobs, mask, config.off_policy_correction
        )
        metrics.update(correction)
    if spec.delta is not None:
        metrics["divclip_delta"] = float(spec.delta)
    if ctrl is not None:
        ctrl.update(metrics["clip_ratio"] if ctrl.signal == "clipfrac" else m["kl3"])
    return reduce_loss(loss, mask), metrics


def register(method: str | None = None, name: str = LOSS_NAME) -> str:
    """Register `method` (default: $DIVCLIP_METHOD) with SkyRL's PolicyLossRegistry as `name`; returns the
    method string. A name registered before (an earlier call) is replaced."""
    text = os.environ.get(METHOD_ENV) if method is None else method
    if not isinstance(text, str) or not text.strip():
        raise ValueError(
            f"the SkyRL plug-in needs a divclip method string: pass one or set {METHOD_ENV} "
            f"(e.g. 'kl3:0.02'), got {text!r}"
        )
    spec = parse_method(text)  # a ValueError names a bad string here, not in a Ray worker
    if getattr(spec, "signal", None) == "entropy":
        raise ValueError("SkyRL does not hand the policy loss the entropy: adapt to clipfrac or kl3 for SkyRL")
    text = method_string(spec)
    if name in PolicyLossRegistry.list_available():
        PolicyLossRegistry.unregister(name)
    register_policy_loss(name)(functools.partial(divclip_policy_loss, method=text))
    return text


def skyrl_args(argv: list) -> list:
    """The overrides of `argv` (program name first) for SkyRL's parser: all but trainer.override_entrypoint."""
    return [a for a in argv[1:] if not a.startswith(ENTRYPOINT_KEY + "=")]


def main() -> None:
    """SkyRL's main_base with divclip's loss registered: what `trainer.override_entrypoint` runs."""
    import ray
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.entrypoints.main_base import skyrl_entrypoint, validate_cfg
    from skyrl.train.utils import initialize_ray

    register()
    cfg = SkyRLTrainConfig.from_cli_overrides(skyrl_args(sys.argv))
    validate_cfg(cfg)
    initialize_ray(cfg)  # syncs the registry, divclip_method included, to SkyRL's Ray actor
    ray.get(skyrl_entrypoint.remote(cfg))


if __name__ == "__main__":
    main()
