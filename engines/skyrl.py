"""SkyRL 0.3.0 (`skyrl` on the package index, `skyrl.train`): its clip keys and defaults, how divclip reads a
SkyRL hydra config (YAML or override list), and how it writes a method, with its plug-in.

Keys and defaults are those of the installed package's typed config (`skyrl/train/config/config.py`,
`SkyRLTrainConfig` and the dataclasses below it), checked by tests/engines/test_skyrl.py; `skyrl_0.3.0_keys.txt`
is every leaf key of that tree (the unknown-key warning: SkyRL's strict parse refuses a key it does not know).

The losses are the `PolicyLossRegistry` functions of `skyrl/backends/skyrl_train/utils/ppo_utils.py`, read one
by one (tests/engines/test_skyrl.py runs each against `divclip.theory.policy_loss` on random tensors):
* `regular`: PPO's clip, r = exp(clamp(log r, ±20)), widths eps_clip_low / eps_high; no dual clip. The exp is
  SkyRL's `safe_exp_delta`, in float32 whatever the input dtype (regular, dual_clip, cispo, dppo, rollout_is):
  in float64 its ratio carries float32 rounding, which divclip's float64 loss does not (a note says so).
* `dual_clip`: the same plus verl's dual clip at `clip_ratio_c` (3.0) for A < 0.
* `gspo`: the sequence ratio sg(s)·π/sg(π), log-clamped at 10 (verl's gspo); no dual clip.
* `cispo`: -sg(clip(r, 1 - cispo_eps_clip_low, 1 + cispo_eps_clip_high))·A·log π; its defaults 0.0 / 5.0 put
  the lower bound at 1, so IS weights below 1 are raised to 1 (read as `ratio:0:5/cispo`, with a warning).
* `sapo`: the soft gate with sapo.tau_pos / tau_neg, as verl's.
* `dppo`: DPPO's binary TV / KL mask (dppo.dppo_type, delta_low / delta_high) on the ratio against the rollout
  log-probs when the generator returns them (π_old otherwise); the IS weight r is not truncated. Its value is
  −r·A·mask with r differentiable: the gated form with surrogate 'ratio' (verl's dppo is surrogate 'logp',
  −A·sg(r)·log π·mask: the same gradient within |log r| <= 20, another value), its mask verl's dppo arithmetic
  (gate 'verl': SkyRL's is a copy of it).
* `clip_cov`, `kl_cov`: the covariance-selected forms (r unclamped), read as divclip's forms of the same name.
  Both see SkyRL's pre-scaled advantages (below): Clip-Cov's covariance window compares (Â − mean Â)(log π − ...)
  with clip_cov_lb/ub on the scaled Â (a different set of tokens than on A), and KL-Cov's κ·|log r| is not
  scaled, so it enters as a token sum; `aggregation` below gives the scale that makes divclip's loss theirs.
* `rollout_is`: REINFORCE weighted by an IcePop band on π_θ/π_rollout: read as the spec `ratio/gpg` with the
  bypass correction `is=token:mask=LO_HI/bypass` (divclip.engines.read_correction); policy_loss with both is
  SkyRL's loss (tests/engines/test_skyrl_rollout_is.py, test_parity_skyrl.py).
* `importance_sampling` (Tinker's): −r·A, r = exp(log π − log π_old) differentiable, plain exp in the input dtype,
  no clip, no off-policy correction: the form importance_sampling, `ratio/importance_sampling/noclamp`.
* `cross_entropy`: SFT, Σ −log π·mask (A, π_old and the correction ignored): no spec (nothing to clip); its loss is
  policy_loss on `ratio/gpg` with A = 1, which the read says and tests/engines/test_parity_skyrl.py checks.
* `divclip_method`: divclip's plug-in (`PLUGIN`), any divclip method string.
Every loss returns Σ mask·ℓ: SkyRL scales the advantages beforehand so that the sum is the `loss_reduction`
(`apply_loss_reduction_to_advantages_minibatch`), and multiplies by its off-policy correction
(`off_policy_correction.*`, a train/inference weight beside the clip). `aggregation(settings, loss_mask)` is that
scale, per row: `policy_loss(log π, log π_old, A·aggregation(...), mask, spec, "token-sum")` is SkyRL's loss for
the spec `read` gives (tests/engines/test_parity_skyrl.py), for every loss_reduction, empty rows, micro-batches
and max_seq_len included.

Updates per batch: `train_batch_size / policy_mini_batch_size` mini-batches (both in prompts) swept
`update_epochs_per_batch` times (`trainer.py`: `train_batch_size // policy_mini_batch_size * epochs`).
"""

from __future__ import annotations

import functools
import math
import shlex
from collections.abc import Mapping
from pathlib import Path

from divclip.engines.base import (
    Difference,
    EngineRead,
    EngineWrite,
    Key,
    as_ratio_clip,
    check_spec,
    dotted_key_score,
    ignored_key_advice,
    is_example_key,
    loss_registered_elsewhere,
    loss_registrar,
    name_loss_terms,
    recipe_aggregation,
    typed_values,
    unknown_keys,
    yaml_tree,
)
from divclip.engines.correction import read_correction
from divclip.engines.errors import ConfigError
from divclip.engines.hydra import resolve_interpolations
from divclip.engines.pitfalls import Pitfall, on_policy_note
from divclip.theory.forms import FORMS
from divclip.theory.forms._numpy import upper_delta
from divclip.theory.spec import AllOf, ClipSpec, is_adaptive, method_string, parse_method

NAME = "skyrl"
VERSION = "0.3.0"
DEFAULTS_FROM = (
    f"skyrl {VERSION}: skyrl/train/config/config.py (SkyRLTrainConfig, AlgorithmConfig) and "
    "skyrl/backends/skyrl_train/utils/ppo_utils.py (PolicyLossRegistry)"
)
FORMATS = ("overrides", "yaml")
COMMAND = "python3 -m skyrl.train.entrypoints.main_base"
PLUGIN = "divclip.trainer.integrations.skyrl"
METHOD_ENV = "DIVCLIP_METHOD"
METHOD_MODE = "divclip_method"
ENTRYPOINT_KEY = "trainer.override_entrypoint"  # main_base imports this module and runs its main()

A = "trainer.algorithm."
OPC = A + "off_policy_correction."
LOSS_TYPES = (
    "regular",
    "dual_clip",
    "gspo",
    "cispo",
    "rollout_is",
    "clip_cov",
    "kl_cov",
    "sapo",
    "cross_entropy",
    "importance_sampling",
    "dppo",
    METHOD_MODE,
)
REDUCTIONS = {
    "token_mean": "token-mean",
    "sequence_mean": "seq-mean-token-mean",
    "seq_mean_token_sum_norm": "seq-mean-token-sum-norm",
    "token_mean_legacy": "token-mean-legacy",
    "prompt_mean": None,
}
"""SkyRL loss_reduction -> divclip's loss_agg_mode: verl's names, and token-mean-legacy (a token mean per micro-batch
of micro_train_batch_size_per_gpu rows, their mean: `policy_loss`'s loss_scale_factor is that row count);
prompt_mean, a token mean per prompt group, has none."""

KEYS: dict[str, Key] = {
    A + "policy_loss_type": Key("str", "regular", choices=LOSS_TYPES, doc="the policy loss (a registry name)"),
    A + "eps_clip_low": Key("float", 0.2, above=0.0, doc="ε_low: r >= 1 - ε_low"),
    A + "eps_clip_high": Key("float", 0.2, above=0.0, doc="ε_high: r <= 1 + ε_high"),
    A + "clip_ratio_c": Key("float", 3.0, above=1.0, doc="dual_clip only: the cap c for A < 0"),
    A + "loss_reduction": Key("str", "token_mean", choices=tuple(REDUCTIONS), doc="how token losses are averaged"),
    "trainer.fully_async.enabled": Key("bool", False, doc="fully async: generation runs ahead of training"),
    "trainer.fully_async.max_staleness_steps": Key("int", 4, above=-1, doc="fully async: how stale a rollout may be"),
    A + "sapo.tau_pos": Key("float", 1.0, above=0.0, doc="sapo: gate temperature for A > 0"),
    A + "sapo.tau_neg": Key("float", 1.05, above=0.0, doc="sapo: gate temperature for A <= 0"),
    A + "cispo.cispo_eps_clip_low": Key("float", 0.0, above=-math.inf, doc="cispo: IS weight >= 1 - this"),
    A + "cispo.cispo_eps_clip_high": Key("float", 5.0, above=0.0, doc="cispo: IS weight <= 1 + this"),
    A + "dppo.dppo_type": Key("str", "binary_tv", choices=("binary_tv", "binary_kl"), doc="dppo: the divergence"),
    A + "dppo.delta_low": Key("float", 0.2, above=0.0, doc="dppo: δ for A < 0"),
    A + "dppo.delta_high": Key("float", 0.2, above=0.0, doc="dppo: δ for A > 0"),
    A + "clip_cov.clip_ratio": Key("float", 0.0002, above=0.0, doc="clip_cov: share of tokens cut"),
    A + "clip_cov.clip_cov_lb": Key("float", 1.0, above=-math.inf, doc="clip_cov: covariance window low"),
    A + "clip_cov.clip_cov_ub": Key("float", 5.0, above=-math.inf, doc="clip_cov: covariance window high"),
    A + "kl_cov.kl_cov_frac": Key("float", 0.2, above=0.0, doc="kl_cov: share of tokens penalised"),
    A + "kl_cov.ppo_kl_coef": Key("float", 1.0, above=0.0, doc="kl_cov: penalty coefficient"),
    OPC + "tis_ratio_type": Key(
        "str", None, nullable=True, choices=("token", "sequence"), doc="train/rollout IS weight"
    ),
    OPC + "token_tis_ratio_clip_high": Key("float", 2.0, above=0.0, doc="its cap (token)"),
    OPC + "sequence_tis_ratio_clip_high": Key("float", 5.0, above=0.0, doc="its cap (sequence)"),
    OPC + "sequence_mask_metric": Key(
        "str", None, nullable=True, choices=("product", "geometric"), doc="mask sequences by their IS ratio"
    ),
    OPC + "token_mask_is_threshold_low": Key("float", None, nullable=True, above=-math.inf, doc="token IS mask low"),
    OPC + "token_mask_is_threshold_high": Key("float", None, nullable=True, above=-math.inf, doc="token IS mask high"),
    OPC + "outlier_token_is_threshold_low": Key(
        "float", None, nullable=True, above=-math.inf, doc="drop a sequence with a token IS ratio below this"
    ),
    OPC + "outlier_token_is_threshold_high": Key(
        "float", None, nullable=True, above=-math.inf, doc="drop a sequence with a token IS ratio above this"
    ),
    A + "use_tis": Key("bool", False, doc="deprecated: tis_ratio_type=token"),
    A + "tis_imp_ratio_cap": Key("float", -1.0, above=-math.inf, doc="deprecated: its cap"),
    A + "advantage_estimator": Key("str", "grpo", doc="advantage estimator"),
    A + "advantage_batch_normalize": Key("bool", False, doc="whiten the advantages over the batch (trainer.py)"),
    A + "zero_variance_filter": Key("bool", False, doc="loss-mask prompts whose rewards are all equal"),
    A + "use_kl_loss": Key("bool", True, doc="KL to the reference as a loss term"),
    A + "kl_loss_coef": Key("float", 0.001, above=-math.inf, doc="its coefficient"),
    A + "kl_estimator_type": Key("str", "k3", doc="its estimator"),
    "trainer.micro_train_batch_size_per_gpu": Key("int", 1, above=0, doc="sequences per micro-batch"),
    A + "use_kl_in_reward": Key("bool", False, doc="KL penalty in the reward (exclusive with use_kl_loss)"),
    A + "use_entropy_loss": Key("bool", False, doc="entropy bonus in the loss"),
    A + "entropy_loss_coef": Key("float", 0.01, above=-math.inf, doc="its coefficient"),
    "trainer.update_epochs_per_batch": Key("int", 1, above=0, doc="passes over one training batch"),
    "trainer.train_batch_size": Key("int", 1024, above=0, doc="prompts per training batch"),
    "trainer.policy_mini_batch_size": Key("int", 256, above=0, doc="prompts per optimizer step"),
    "generator.n_samples_per_prompt": Key("int", 5, above=0, doc="responses per prompt (group size)"),
}
ROLE_KEYS = {
    "low": A + "eps_clip_low",
    "high": A + "eps_clip_high",
    "dual_clip": A + "clip_ratio_c",
    "epochs": "trainer.update_epochs_per_batch",
    "minibatch": "trainer.policy_mini_batch_size",
}
ON_POLICY_FIX = "set trainer.update_epochs_per_batch > 1 or policy_mini_batch_size < train_batch_size"
KNOWN_KEYS_FILE = Path(__file__).with_name(f"skyrl_{VERSION}_keys.txt")
KNOWN_KEYS_FROM = (
    f"skyrl {VERSION} skyrl/train/config/config.py SkyRLTrainConfig: every leaf key (its strict "
    f"parse refuses others; snapshot: {KNOWN_KEYS_FILE.name})"
)
_UNIQUE_PREFIXES = ("trainer.algorithm.", "generator.", "environment.", "trainer.placement.", "trainer.policy.")


@functools.lru_cache(maxsize=1)
def known_keys() -> frozenset:
    lines = KNOWN_KEYS_FILE.read_text().splitlines()
    return frozenset(ln for ln in lines if ln and not ln.startswith("#"))


def is_known(key: str) -> bool:
    """A key SkyRL's config accepts: a leaf of SkyRLTrainConfig, one below a dict-valued leaf, or the entrypoint."""
    known = known_keys()
    if key.startswith("-"):  # a launcher's own flag (`uv run --isolated`): hydra settings are key=value
        return True
    if key in known or key == ENTRYPOINT_KEY:
        return True
    parts = key.split(".")
    return any(".".join(parts[:i]) in known for i in range(1, len(parts)))


def detect(settings: Mapping) -> float:
    """SkyRL's keys in the settings, those under its own sections (trainer.algorithm., generator., ...) twice:
    verl shares the `trainer.` and `data.` prefixes but has no `trainer.algorithm.`."""
    return dotted_key_score(settings, is_known, _UNIQUE_PREFIXES)


# ------------------------------------------------------------------------------------------------ read
def read(settings: Mapping, *, entry: str | None = None, **_options) -> EngineRead:
    """The clip settings of a flat SkyRL config ({dotted key or ENV_VAR: value})."""
    settings = resolve_interpolations(settings)
    own = settings.get(A + "policy_loss_type")
    registrar = loss_registrar(own, LOSS_TYPES, entry, "skyrl.")  # an example's main registers its own loss
    if registrar is not None:  # typed as SkyRL's default, then put back: the loss is the example's
        settings = {k: v for k, v in settings.items() if k != A + "policy_loss_type"}
    g, keys = typed_values(settings, KEYS)
    if registrar is not None:
        g[A + "policy_loss_type"] = own
        keys[A + "policy_loss_type"] = {"value": own, "origin": "set"}
    loss = g[A + "policy_loss_type"]
    train, mini, epochs = (
        g["trainer." + k] for k in ("train_batch_size", "policy_mini_batch_size", "update_epochs_per_batch")
    )
    if mini > train:
        raise ConfigError(
            f"trainer.policy_mini_batch_size = {mini} > trainer.train_batch_size = {train}: SkyRL "
            "refuses this (validate_batch_sizes)"
        )
    minibatches = train // mini
    updates = epochs * minibatches
    s = EngineRead(
        engine=NAME,
        defaults_from=DEFAULTS_FROM,
        loss_mode=loss,
        form="other",
        measure=None,
        level="token",
        budget_low=None,
        budget_high=None,
        loss_agg_mode=REDUCTIONS[g[A + "loss_reduction"]],
        epochs=epochs,
        minibatches=minibatches,
        updates_per_batch=updates,
        on_policy=updates == 1,
        on_policy_reason=(
            f"update_epochs_per_batch={epochs} × {minibatches} mini-batch(es) (train_batch_size="
            f"{train} / policy_mini_batch_size={mini}) = {updates} update(s) per training batch"
        ),
        group_size=g["generator.n_samples_per_prompt"],
        kl={
            "use_kl_loss": g[A + "use_kl_loss"],
            "kl_loss_coef": g[A + "kl_loss_coef"],
            "kl_estimator_type": g[A + "kl_estimator_type"],
            "adv_estimator": g[A + "advantage_estimator"],
        },
        keys=keys,
        # `entry`: the module the launch runs; an example's own AlgorithmConfig subclass adds keys (example_keys.txt)
        unknown_keys=unknown_keys(settings, lambda k: is_known(k) or is_example_key(k, NAME, entry), known_keys()),
    )
    READERS.get(loss, _other)(s, g, settings, keys)
    if registrar is not None:
        s.advice.append(
            loss_registered_elsewhere(
                NAME,
                VERSION,
                A + "policy_loss_type",
                own,
                registrar + " (PolicyLossRegistry.register)",
                [t for t in LOSS_TYPES if t != METHOD_MODE],
                f"skyrl {VERSION} skyrl/backends/skyrl_train/utils/ppo_utils.py PolicyLossRegistry",
            )
        )
    _arithmetic_notes(s, g)
    _fully_async(s, g)
    if s.form in ("clip", "cispo") and s.measure == "ratio" and s.budget_low is not None:
        s.ratio_bounds = [max(1.0 - s.budget_low, 0.0), 1.0 + s.budget_high]
    g[A + "max_seq_len"] = settings.get(A + "max_seq_len")  # only named in a warning: as written (often `$((...))`)
    _pitfalls(s, g)
    s.advice += ignored_key_advice(s, IGNORED_BY_LOSS, f"skyrl {VERSION} ppo_utils (sapo_policy_loss)")
    name_loss_terms(s, loss_terms(g))
    return s


def _fully_async(s: EngineRead, g: dict) -> None:
    """trainer.fully_async.enabled: generation runs ahead of training (fully_async_trainer.py), and the loss takes
    the ratio against the rollout log-probs (its trainer refuses the losses that recompute them): off-policy."""
    if not g["trainer.fully_async.enabled"]:
        return
    s.on_policy = False
    s.on_policy_reason = (
        f"fully async (trainer.fully_async.enabled): trajectories come from policies up to "
        f"trainer.fully_async.max_staleness_steps = {g['trainer.fully_async.max_staleness_steps']} step(s) old and "
        f"the ratio is against their rollout log-probs (skyrl {VERSION} fully_async_trainer.py): not 1 at the first "
        f"update; {s.on_policy_reason}"
    )


def loss_terms(g: dict) -> list[tuple[str, str]]:
    """SkyRL's terms beside the policy loss (backends/skyrl_train/workers/worker.py; the reward KL in
    train/trainer.py). use_kl_loss is on by default."""
    out, est, coef = [], g[A + "kl_estimator_type"], g[A + "kl_loss_coef"]
    if g[A + "use_kl_loss"] and coef:
        out.append(
            (
                f"{A}use_kl_loss = true, kl_loss_coef = {coef:g}, kl_estimator_type = {est}",
                "a KL-to-reference term (a token mean per sequence, then a batch mean) added to the loss",
            )
        )
    if g[A + "use_kl_in_reward"]:
        out.append(
            (
                f"{A}use_kl_in_reward = true, kl_estimator_type = {est}",
                "a KL penalty to the reference subtracted from the reward before the advantages",
            )
        )
    if g[A + "use_entropy_loss"] and g[A + "entropy_loss_coef"]:
        out.append(
            (
                f"{A}use_entropy_loss = true, entropy_loss_coef = {g[A + 'entropy_loss_coef']:g}",
                "an entropy bonus, the loss less entropy_loss_coef·H",
            )
        )
    return out


IGNORED_BY_LOSS = {"sapo": (A + "eps_clip_low", A + "eps_clip_high", A + "clip_ratio_c")}
"""Keys SkyRL's sapo loss never reads (the gate takes sapo.tau_pos / tau_neg only)."""


def _ratio(s, g, settings, keys):
    s.form, s.measure = "clip", "ratio"
    s.budget_low, s.budget_high = g[A + "eps_clip_low"], g[A + "eps_clip_high"]
    s.level = "sequence" if s.loss_mode == "gspo" else "token"
    s.dual_clip_c = g[A + "clip_ratio_c"] if s.loss_mode == "dual_clip" else None
    params = {"dual_clip_c": s.dual_clip_c}
    if s.loss_mode in SAFE_EXP_LOSSES:  # regular, dual_clip: safe_exp_delta's float32 exp (gspo has its own)
        params["exp_dtype"] = "float32"
    s.spec = _try(
        s, lambda: ClipSpec("ratio", eps_low=s.budget_low, eps_high=s.budget_high, level=s.level, params=params)
    )


def _cispo(s, g, settings, keys):
    s.form, s.measure = "cispo", "ratio"
    s.budget_low, s.budget_high = g[A + "cispo.cispo_eps_clip_low"], g[A + "cispo.cispo_eps_clip_high"]
    s.spec = _try(
        s,
        lambda: ClipSpec(
            "ratio", eps_low=s.budget_low, eps_high=s.budget_high, form="cispo", params={"exp_dtype": "float32"}
        ),
    )


def _sapo(s, g, settings, keys):
    s.form = "sapo"
    s.spec = _try(
        s, lambda: ClipSpec(form="sapo", params={"tau_pos": g[A + "sapo.tau_pos"], "tau_neg": g[A + "sapo.tau_neg"]})
    )


def _dppo(s, g, settings, keys):
    s.form, s.measure = "gated", g[A + "dppo.dppo_type"]
    s.budget_low, s.budget_high = g[A + "dppo.delta_low"], g[A + "dppo.delta_high"]
    s.differences.append(
        Difference(
            "dppo's behaviour policy",
            "SkyRL's dppo masks and weights by the ratio to "
            "the rollout log-probs when the generator returns them (π_old otherwise)",
        )
    )
    # δ_high where it differs from δ_low: the gated form's delta_high (divclip.theory.forms.gated); SkyRL's loss
    # value −r·A·mask with r differentiable (through its ±20 clamp): surrogate 'ratio'; its mask is verl's dppo
    # arithmetic op for op (prob = exp(log π), the binary KL's +1e-8, strict prob_diff tests): gate 'verl'
    params = {"surrogate": "ratio", "gate": "verl", "exp_dtype": "float32"}
    s.ratio_anchor = "rollout"  # mu_log_probs = rollout_logprobs where the generator returns them
    if s.budget_high != s.budget_low:
        params["delta_high"] = s.budget_high
    s.spec = _try(s, lambda: ClipSpec(s.measure, delta=s.budget_low, form="gated", params=params))


def _covariance(s, g, settings, keys):
    """clip_cov / kl_cov: divclip's form of the same name, with SkyRL's parameters under the form's names."""
    mode = s.loss_mode
    form = FORMS.get(mode)
    if form is None:
        s.notes.append(f"{mode} is reported, not modelled: this divclip has no {mode!r} loss form")
        return
    names = {
        "clip_cov": {
            "clip_cov_ratio": "clip_cov.clip_ratio",
            "clip_cov_lb": "clip_cov.clip_cov_lb",
            "clip_cov_ub": "clip_cov.clip_cov_ub",
        },
        "kl_cov": {"kl_cov_ratio": "kl_cov.kl_cov_frac", "kl_cov_coef": "kl_cov.ppo_kl_coef"},
    }[mode]
    declared = {p.name for p in form.params}
    params = tuple((name, g[A + key]) for name, key in names.items() if name in declared)
    s.form = "clip" if form.uses_budget else "other"  # as verl reads its own clip_cov / kl_cov
    if form.uses_budget:
        s.measure, s.budget_low, s.budget_high = "ratio", g[A + "eps_clip_low"], g[A + "eps_clip_high"]
        s.spec = _try(
            s, lambda: ClipSpec("ratio", eps_low=s.budget_low, eps_high=s.budget_high, form=mode, params=params)
        )
    else:
        s.spec = _try(s, lambda: ClipSpec(form=mode, params=params))


def _method(s, g, settings, keys):
    text = settings.get(METHOD_ENV)
    keys[METHOD_ENV] = {"value": text, "origin": "set" if text is not None else "default"}
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(
            f"policy_loss_type {METHOD_MODE} runs the method string in {METHOD_ENV}, which the config "
            f"does not set (got {text!r}): set {METHOD_ENV}='kl3:0.02' (a divclip method string)"
        )
    try:
        s.spec = parse_method(text)
    except ValueError as exc:
        raise ConfigError(f"{METHOD_ENV}: {exc}") from None
    # form stays "other", as verl's divclip_method: the report shows the method string, not one ratio interval
    s.notes.append(
        f"{METHOD_MODE} runs {METHOD_ENV}={text!r} through divclip's SkyRL plug-in ({PLUGIN}); "
        "SkyRL's eps_clip_* and clip_ratio_c are ignored"
    )
    if settings.get(ENTRYPOINT_KEY) != PLUGIN:
        s.notes.append(f"{METHOD_MODE} is registered by the plug-in: the command needs {ENTRYPOINT_KEY}={PLUGIN}")


def _rollout_is(s, g, settings, keys):
    """rollout_is (ppo_utils.rollout_is_policy_loss): −sg(f(r))·A·log π with r = π_θ/π_rollout and f(r) = r on
    (1 − eps_clip_low, 1 + eps_clip_high), else 0: the REINFORCE form gpg under the bypass correction
    `read_correction` gives (is=token:mask=LO_HI/bypass); the band is open in SkyRL, closed in divclip (they differ
    only for an r exactly on a bound)."""
    s.budget_low, s.budget_high = g[A + "eps_clip_low"], g[A + "eps_clip_high"]
    s.spec = parse_method("ratio/gpg")
    try:
        read_correction(NAME, settings)
    except ConfigError as exc:  # an off_policy_correction beside it: two rollout ratios, one divclip correction
        s.notes.append(
            f"rollout_is with an off_policy_correction: {exc}; policy_loss on ratio/gpg with the rollout_is band "
            "alone is SkyRL's loss without that correction"
        )
    s.notes.append(
        f"rollout_is: SkyRL's loss is REINFORCE (−A·log π, the form gpg) weighted by r = π_θ/π_rollout where r is "
        f"inside (1 − eps_clip_low, 1 + eps_clip_high) = ({1 - s.budget_low:g}, {1 + s.budget_high:g}), 0 outside: "
        "the spec ratio/gpg with the bypass correction divclip.engines.read_correction('skyrl', ...) gives "
        "(policy_loss(..., rollout_log_prob=π_rollout, correction=...))"
    )


def _importance_sampling(s, g, settings, keys):
    """importance_sampling (ppo_utils.importance_sampling_loss, Tinker's): −exp(log π − log π_old)·A summed over the
    mask, plain exp in the input dtype (no clamp, no float32), no off-policy correction: the form
    importance_sampling with /noclamp."""
    s.spec = parse_method("ratio/importance_sampling/noclamp")
    s.notes.append(
        "importance_sampling: SkyRL's loss is −r·A with r = exp(log π − log π_old) differentiable, not clamped and "
        "not clipped (Tinker's importance_sampling): the spec ratio/importance_sampling/noclamp; it applies no "
        "off_policy_correction"
    )


def _cross_entropy(s, g, settings, keys):
    """cross_entropy (ppo_utils.cross_entropy_loss): SFT, Σ −log π·mask, ignoring A, π_old and the correction."""
    s.notes.append(
        "cross_entropy is SkyRL's supervised loss (Tinker's cross_entropy): Σ −log π·mask, ignoring the advantages, "
        "π_old and any off_policy_correction: no ratio and no clip, so nothing here for a clip to check; its value "
        "and gradient are policy_loss on ratio/gpg with A = 1 on every token, loss_agg_mode token-sum"
    )


def _other(s, g, settings, keys):
    s.notes.append(
        f"policy_loss_type {s.loss_mode!r} is reported, not modelled (divclip reads " + ", ".join(READERS) + ")"
    )


READERS = {
    "regular": _ratio,
    "dual_clip": _ratio,
    "gspo": _ratio,
    "cispo": _cispo,
    "sapo": _sapo,
    "dppo": _dppo,
    "clip_cov": _covariance,
    "kl_cov": _covariance,
    "rollout_is": _rollout_is,
    "importance_sampling": _importance_sampling,
    "cross_entropy": _cross_entropy,
    METHOD_MODE: _method,
}
"""{policy_loss_type: fn(read, typed values, settings, keys)}: what sets the read's form and ClipSpec."""


NO_CORRECTION_LOSSES = ("importance_sampling", "cross_entropy")
"""The registry losses that never call apply_off_policy_correction."""
SAFE_EXP_LOSSES = ("regular", "dual_clip", "cispo", "dppo", "rollout_is")
"""The registry losses whose ratio is `safe_exp_delta`: exp in float32 of log r clamped to ±20, cast back."""


def _arithmetic_notes(s: EngineRead, g: dict) -> None:
    """What SkyRL computes differently from the spec's loss under `loss_agg_mode`, each named (issue 35): the
    float32 exp, dppo's value, the covariance forms on pre-scaled advantages, prompt_mean, the batch whitening."""
    where = f"skyrl {VERSION} ppo_utils"
    if s.loss_mode in SAFE_EXP_LOSSES and s.spec is not None:
        if s.spec.param("exp_dtype", None) == "float32":
            s.notes.append(
                f"{s.loss_mode}: SkyRL computes r = exp(log r) in float32 whatever the input dtype ({where}."
                "safe_exp_delta, log r clamped to ±20): the spec's exp_dtype=float32 does the same, so with float64 "
                "log-probs its ratio and gradient carry SkyRL's float32 rounding (about 6e-8 relative)"
            )
        else:
            s.notes.append(
                f"{s.loss_mode}: SkyRL computes r = exp(log r) in float32 whatever the input dtype ({where}."
                "safe_exp_delta, log r clamped to ±20): with float64 log-probs its ratio carries float32 rounding "
                "(about 6e-8 relative) that divclip's float64 loss does not (its rollout correction's weight is exp "
                "in the input dtype)"
            )
    if s.loss_mode == "dppo" and s.spec is not None:
        s.notes.append(
            "dppo: SkyRL's loss value is −r·A·mask with r differentiable, read as the gated form's surrogate 'ratio' "
            "(verl's dppo is −A·sg(r)·log π·mask, surrogate 'logp': the same gradient −A·r·mask where |log r| <= 20,"
            " another value); beyond |log r| = 20 SkyRL's clamp zeroes the gradient, as the spec's does "
            f"({where}.dppo_policy_loss)"
        )
    differs = []  # (message, key): where the spec under the read's loss_agg_mode is not SkyRL's loss
    if s.loss_mode == "clip_cov":
        differs.append(
            (
                "clip_cov: SkyRL's covariance (Â − mean Â)(log π − mean log π) is of the advantages after its "
                "loss_reduction pre-scaling (Â = A/N for token_mean: ~N times smaller), so clip_cov_lb/ub select "
                "another set of tokens than on A; divclip's loss is SkyRL's on those scaled advantages "
                "(divclip.engines.skyrl.aggregation, loss_agg_mode token-sum)",
                A + "clip_cov.clip_cov_lb",
            )
        )
    if s.loss_mode == "kl_cov":
        differs.append(
            (
                "kl_cov: SkyRL's penalty kl_cov.ppo_kl_coef·|log r| is not pre-scaled like its advantages, so it "
                "enters the loss as a token sum (N times its token mean); divclip's loss is SkyRL's on the scaled "
                "advantages (divclip.engines.skyrl.aggregation, loss_agg_mode token-sum)",
                A + "kl_cov.ppo_kl_coef",
            )
        )
    if g[A + "loss_reduction"] == "prompt_mean":
        differs.append(
            (
                "loss_reduction=prompt_mean: a token mean within each prompt's group of responses, then the mean over "
                "the mini-batch's prompts; verl has no such loss_agg_mode, so none is given: "
                "divclip.engines.skyrl.aggregation gives its exact weights (a token-sum of the scaled advantages)",
                A + "loss_reduction",
            )
        )
    if g[A + "zero_variance_filter"]:
        differs.append(
            (
                f"{A}zero_variance_filter = true: SkyRL empties the loss mask of every prompt whose responses' "
                "rewards are all equal (skyrl/train/trainer.py): their rows become empty rows, so token_mean divides "
                "by the other prompts' tokens only, and sequence_mean still counts the emptied rows",
                A + "zero_variance_filter",
            )
        )
    for message, key in differs:
        s.advice.append(Pitfall("skyrl_loss_differs", message, key, f"{where} (PolicyLossRegistry, loss reduction)"))
    if g[A + "advantage_batch_normalize"]:
        s.notes.append(
            f"{A}advantage_batch_normalize = true: SkyRL whitens the advantages over the whole batch "
            "(A − mean)/std before the loss (skyrl/train/trainer.py): the scale of A the clip sees changes"
        )


def aggregation(settings: Mapping, loss_mask, prompt_boundaries=None):
    """The (B, 1) factor SkyRL multiplies each row's advantages by before its loss sums over one mini-batch's tokens
    (ppo_utils.apply_loss_reduction_to_advantages_minibatch, called per mini-batch by skyrl/train/trainer.py), so
    that `policy_loss(lp, old, A * aggregation(settings, mask), mask, spec, "token-sum")` is SkyRL's loss:

      token_mean               1 / max(N, 1), N the mini-batch's loss tokens (verl's token-mean)
      token_mean_legacy        1 / (max(N_m, 1)·M) in micro-batch m of micro_train_batch_size_per_gpu rows, M the
                               whole micro-batches; rows past the last whole one get 0, as in SkyRL
      sequence_mean            1 / (B·max(n_i, 1)): every row counts, empty ones included
      seq_mean_token_sum_norm  1 / (B·max_seq_len), trainer.algorithm.max_seq_len (not the tensor's width)
      prompt_mean              1 / (P·max(N_p, 1)) for the rows of prompt p of P; `prompt_boundaries`
                               [(start, end), ...] default to consecutive groups of generator.n_samples_per_prompt

    `loss_mask` is one mini-batch's (B, T) mask; the result is float64 on its device."""
    import torch

    settings = resolve_interpolations(settings)
    g, _ = typed_values(settings, KEYS)
    reduction = g[A + "loss_reduction"]
    if not isinstance(loss_mask, torch.Tensor) or loss_mask.ndim != 2:
        raise ValueError(f"loss_mask must be a (batch, length) torch.Tensor, got {loss_mask!r:.80}")
    mask = loss_mask.to(torch.float64)
    rows = mask.shape[0]
    tokens = mask.sum(-1, keepdim=True)  # (B, 1)
    if reduction == "token_mean":
        return torch.full_like(tokens, 1.0) / tokens.sum().clamp(min=1)
    if reduction == "sequence_mean":
        return 1.0 / (rows * tokens.clamp(min=1))
    if reduction == "seq_mean_token_sum_norm":
        return torch.full_like(tokens, 1.0 / (rows * _max_seq_len(settings)))
    scale = torch.zeros_like(tokens)
    if reduction == "token_mean_legacy":
        micro = g["trainer.micro_train_batch_size_per_gpu"]
        count = rows // micro
        groups = [(i * micro, (i + 1) * micro) for i in range(count)]
    else:  # prompt_mean
        n = g["generator.n_samples_per_prompt"]
        groups = list(prompt_boundaries) if prompt_boundaries is not None else [(i, i + n) for i in range(0, rows, n)]
        count = len(groups)
    for start, end in groups:
        scale[start:end] = 1.0 / (count * tokens[start:end].sum().clamp(min=1))
    return scale


def _max_seq_len(settings: Mapping) -> int:
    value = settings.get(A + "max_seq_len")
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = None
    if n is None or n <= 0 or (isinstance(value, float) and value != n) or isinstance(value, bool):
        raise ConfigError(
            f"{A}max_seq_len must be a whole number > 0 for loss_reduction=seq_mean_token_sum_norm (SkyRL divides "
            f"each sequence's token sum by it), got {value!r}"
        )
    return n


def _try(s: EngineRead, build):
    try:
        return build()
    except ValueError as exc:
        s.notes.append(f"no divclip method says this exactly: {exc}")
        return None


def _pitfalls(s: EngineRead, g: dict) -> None:
    cfg = f"skyrl {VERSION} skyrl/train/config/config.py AlgorithmConfig"
    if s.on_policy and s.form != "other":
        s.advice.append(
            Pitfall(
                "on_policy_clip_inert",
                on_policy_note(NAME, s.on_policy_reason, ON_POLICY_FIX),
                "trainer.update_epochs_per_batch",
                f"skyrl {VERSION} skyrl/train/trainer.py (train_batch_size // policy_mini_batch_size"
                " * update_epochs_per_batch); docs/theory.md §5",
            )
        )
    if s.loss_mode == "regular" and s.explicit(A + "clip_ratio_c"):
        s.advice.append(
            Pitfall(
                "ignored_key",
                f"clip_ratio_c = {g[A + 'clip_ratio_c']:g} is ignored: only "
                "policy_loss_type=dual_clip applies the dual clip",
                A + "clip_ratio_c",
                f"skyrl {VERSION} ppo_utils.ppo_policy_loss",
            )
        )
    if s.loss_mode == "cispo" and s.budget_low is not None and s.budget_low <= 0:
        s.advice.append(
            Pitfall(
                "cispo_lower_bound_active",
                f"cispo_eps_clip_low = {s.budget_low:g} puts the lower clip of the IS weight at {1 - s.budget_low:g}: "
                "every weight below that is raised to it (tokens the policy moved away from keep weight 1); canonical "
                "CISPO (arXiv 2506.13585) clips only above: set cispo_eps_clip_low = 1.0",
                A + "cispo.cispo_eps_clip_low",
                f"{cfg} (CISPOConfig) and ppo_utils.compute_policy_loss_cispo",
            )
        )
    if s.loss_mode in ("gspo", "sapo") and g[A + "loss_reduction"] != "sequence_mean":
        s.advice.append(
            Pitfall(
                "reduction_not_sequence_mean",
                f"{s.loss_mode} with loss_reduction={g[A + 'loss_reduction']}: SkyRL logs a warning "
                "and recommends sequence_mean, the paper's",
                A + "loss_reduction",
                f"skyrl {VERSION} ppo_utils.{s.loss_mode}_policy_loss",
            )
        )
    _reduction_pitfalls(s, g)
    tis = g[OPC + "tis_ratio_type"] or ("token" if g[A + "use_tis"] else None)
    masks = [
        k
        for k in (
            "sequence_mask_metric",
            "token_mask_is_threshold_low",
            "token_mask_is_threshold_high",
            "outlier_token_is_threshold_low",
            "outlier_token_is_threshold_high",
        )
        if g[OPC + k] is not None
    ]
    if tis or masks:
        cap = g[OPC + f"{tis}_tis_ratio_clip_high"] if tis else None
        if g[A + "use_tis"] and g[A + "tis_imp_ratio_cap"] > 0:
            cap = g[A + "tis_imp_ratio_cap"]
        what = (f"{tis}-level TIS capped at {cap:g}" if tis else "") + (
            (", " if tis else "") + "masks " + ", ".join(masks) if masks else ""
        )
        if s.loss_mode in NO_CORRECTION_LOSSES:
            s.advice.append(
                Pitfall(
                    "ignored_key",
                    f"off-policy correction set ({what}) but policy_loss_type={s.loss_mode} never applies it "
                    "(it calls no apply_off_policy_correction): the loss is unweighted",
                    OPC + "tis_ratio_type",
                    f"skyrl {VERSION} ppo_utils.{s.loss_mode}_loss",
                )
            )
            return
        s.notes.append(
            f"off-policy correction: {what}: a train/inference weight beside the clip"
            + ("; its TIS weight is exp in float32 whatever the input dtype (safe_exp_delta)" if tis else "")
        )
        s.advice.append(
            Pitfall(
                "is_correction_threshold",
                f"off-policy correction on ({what}): every token's "
                f"loss is weighted by π_old/π_rollout beside the clip; "
                + (
                    "with policy_loss_type rollout_is SkyRL also weights by π_θ/π_rollout, and one divclip "
                    "correction holds one of the two: divclip.engines.read_correction refuses the pair by name"
                    if s.loss_mode == "rollout_is"
                    else "divclip reads it as a rollout correction (divclip.engines.read_correction), which "
                    "translate carries or names"
                ),
                OPC + "tis_ratio_type",
                f"skyrl {VERSION} skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py",
            )
        )


def _reduction_pitfalls(s: EngineRead, g: dict) -> None:
    """Where SkyRL's loss_reduction (ppo_utils.apply_loss_reduction_to_advantages_minibatch, which pre-scales the
    advantages so that a sum gives the reduction) differs from the verl aggregation divclip reads it as."""
    reduction, where = (
        g[A + "loss_reduction"],
        f"skyrl {VERSION} ppo_utils.apply_loss_reduction_to_advantages_minibatch",
    )
    micro = g["trainer.micro_train_batch_size_per_gpu"]
    if reduction == "token_mean_legacy":
        s.advice.append(
            Pitfall(
                "skyrl_reduction_differs",
                f"loss_reduction=token_mean_legacy takes a token mean within each micro-batch of "
                f"micro_train_batch_size_per_gpu = {micro} sequences, then the mean over micro-batches (rows past "
                "the last whole micro-batch get no weight): verl's token-mean of the mini-batch only when every "
                f"micro-batch holds as many tokens; divclip reads it as token-mean-legacy, exact with policy_loss's "
                f"loss_scale_factor = {micro} (divclip.engines.skyrl.aggregation gives the same weights)",
                A + "loss_reduction",
                where,
            )
        )
    elif reduction == "seq_mean_token_sum_norm":
        n = g[A + "max_seq_len"]
        s.advice.append(
            Pitfall(
                "skyrl_reduction_differs",
                "loss_reduction=seq_mean_token_sum_norm divides each sequence's token sum by max_seq_len = "
                + (f"{n!s}" if n is not None else "(unset: SkyRL requires it)")
                + ", not by the padded width of the batch, and the sum over sequences by the mini-batch's row count"
                " (divclip.engines.skyrl.aggregation gives its exact weights)",
                A + "max_seq_len",
                where,
            )
        )
    elif reduction == "sequence_mean":
        s.advice.append(
            Pitfall(
                "skyrl_reduction_differs",
                "loss_reduction=sequence_mean divides by every row of the mini-batch, empty rows (no loss token) "
                "included, where verl's seq-mean-token-mean averages only the rows that have a token"
                " (divclip.engines.skyrl.aggregation gives its exact weights)",
                A + "loss_reduction",
                where,
            )
        )


# ----------------------------------------------------------------------------------------------- write
def write(spec, *, recipe: bool = True, loss_agg_mode: str | None = None, label: str | None = None) -> EngineWrite:
    """`spec` as SkyRL overrides: its own loss where one says it exactly, else divclip's plug-in."""
    spec, label = check_spec(spec, label)
    env: dict = {}
    notes: list = []
    diffs: list = []
    keys = _write_native(spec, notes, diffs)
    if keys is None:
        keys = _write_plugin(spec, env, notes)
    agg = _aggregation(spec, recipe, loss_agg_mode, notes)
    if agg is not None:
        reduction = {v: k for k, v in REDUCTIONS.items() if v}.get(agg)
        if reduction is None:
            diffs.append(
                Difference(
                    f"aggregation {agg}",
                    "SkyRL has token_mean, token_mean_legacy, sequence_mean, "
                    "seq_mean_token_sum_norm and prompt_mean; its default token_mean stands",
                )
            )
        else:
            keys["loss_reduction"] = reduction
            if reduction == "seq_mean_token_sum_norm":
                notes.append("seq_mean_token_sum_norm needs trainer.algorithm.max_seq_len set")
    settings = {A + k: v for k, v in keys.items()}
    if keys["policy_loss_type"] == METHOD_MODE:
        settings[ENTRYPOINT_KEY] = PLUGIN
    return EngineWrite(NAME, label, env, settings, tuple(notes), differences=tuple(diffs))


def _write_native(spec, notes: list, diffs: list) -> dict | None:
    """SkyRL's own loss for `spec`, or None when only the plug-in runs it."""
    if isinstance(spec, AllOf) or is_adaptive(spec):
        return None
    if spec.form == "sapo":
        return {
            "policy_loss_type": "sapo",
            "sapo.tau_pos": float(spec.param("tau_pos")),
            "sapo.tau_neg": float(spec.param("tau_neg")),
        }
    if spec.form == "cispo" and spec.measure_name == "ratio":
        return {
            "policy_loss_type": "cispo",
            "cispo.cispo_eps_clip_low": float(spec.eps_low),
            "cispo.cispo_eps_clip_high": float(spec.eps_high),
        }
    if spec.form == "gated" and spec.measure_name in ("binary_kl", "binary_tv"):
        if spec.param("tis_cap", None) is not None:
            diffs.append(
                Difference(
                    f"IS-weight truncation at {spec.param('tis_cap', None):g} (tis_cap)",
                    "SkyRL's dppo does not truncate the IS weight",
                )
            )
        if spec.param("surrogate", None) != "ratio":
            diffs.append(
                Difference(
                    f"loss value −A·sg(r)·log π (surrogate {spec.param('surrogate', None)!r})",
                    "SkyRL's dppo is −r·A·mask with r differentiable (surrogate 'ratio'): the same gradient "
                    "where |log r| <= 20, 0 beyond",
                )
            )
        diffs.append(
            Difference(
                "behaviour policy",
                "SkyRL's dppo uses the rollout log-probs where the generator returns them (π_old otherwise)",
            )
        )
        return {
            "policy_loss_type": "dppo",
            "dppo.dppo_type": spec.measure_name,
            "dppo.delta_low": float(spec.delta),
            "dppo.delta_high": float(upper_delta(spec)),
        }
    if spec.form != "clip":
        return None
    try:
        ratio, diff = as_ratio_clip(spec)
    except ValueError:
        return None  # a per-token divergence clip: the plug-in runs it exactly
    if ratio.level == "sequence" and ratio.param("dual_clip_c", None) is not None:
        return None  # SkyRL's gspo has no dual clip
    if diff is not None:
        diffs.append(diff)
    keys = {
        "policy_loss_type": "gspo"
        if ratio.level == "sequence"
        else "dual_clip"
        if ratio.param("dual_clip_c", None) is not None
        else "regular",
        "eps_clip_low": float(ratio.eps_low),
        "eps_clip_high": float(ratio.eps_high),
    }
    if ratio.param("dual_clip_c", None) is not None:
        keys["clip_ratio_c"] = float(ratio.param("dual_clip_c", None))
    return keys


def _write_plugin(spec, env: dict, notes: list) -> dict:
    if getattr(spec, "signal", None) == "entropy":
        raise ValueError("SkyRL does not hand the policy loss the entropy: adapt to clipfrac or kl3 for SkyRL")
    env[METHOD_ENV] = method_string(spec)
    notes.append(
        f"{METHOD_MODE} is divclip's plug-in ({PLUGIN}): SkyRL's main_base runs it through "
        f"{ENTRYPOINT_KEY}={PLUGIN}, which registers the loss with PolicyLossRegistry; it reads the whole "
        f"method from {METHOD_ENV}"
    )
    return {"policy_loss_type": METHOD_MODE}


def _aggregation(spec, recipe: bool, loss_agg_mode, notes: list) -> str | None:
    return recipe_aggregation(
        spec, recipe, loss_agg_mode, notes, lambda found: f"aggregation {found.loss_agg_mode}: {found.source}"
    )


# ---------------------------------------------------------------------------------------------- render
def _value(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def render(w: EngineWrite, fmt: str) -> list[str]:
    """The body of `w` as a hydra command line ('overrides') or config YAML ('yaml'); `divclip check` reads both."""
    settings = dict(w.settings)
    if fmt == "overrides":
        lines = [f"{k}={shlex.quote(str(v))}" for k, v in w.env.items()] + [COMMAND]
        lines += [f"    {k}={_value(v)}" for k, v in settings.items()]
        return [line + " \\" for line in lines[:-1]] + lines[-1:]
    if fmt != "yaml":
        raise ValueError(f"format for {NAME} must be one of {list(FORMATS)}, got {fmt!r}")
    out = [f"# environment: {k}={v}" for k, v in w.env.items()]
    if ENTRYPOINT_KEY in settings:
        out.append(f"# on the command line: {ENTRYPOINT_KEY}={settings.pop(ENTRYPOINT_KEY)}")
    return out + yaml_tree(settings, _value)
