"""TRL 1.16: GRPOConfig's clip fields and defaults, how divclip reads a GRPOConfig, and how it writes one.

Defaults are those of the installed TRL's `GRPOConfig` (and transformers' `TrainingArguments` for the batch
fields), checked by tests/engines/test_trl.py; the known fields (for the unknown-key warning) are every field
of GRPOConfig, TrainingArguments and divclip's `DivClipGRPOConfig` (`known_fields.txt`, a snapshot checked the
same way).

What "updates per batch" means: one generation feeds `steps_per_generation` micro-steps, repeated
`num_iterations` (μ) times; TRL itself skips the old log-probs (old = current, detached) when
`gradient_accumulation_steps % (steps_per_generation · μ) == 0` (grpo_trainer.py), i.e. when every optimizer
step sees fresh samples.

`loss_type` names both the loss form (cispo, sapo, vespo; the others are PPO's clip) and the aggregation
(`AGGREGATION`, in verl's names). divclip's plug-in `DivClipGRPOConfig` adds `clip_measure`/`clip_delta` (a
divergence clip) and `clip_method` (any divclip method string).
"""

from __future__ import annotations

import functools
import math
import shlex
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from divclip.engines import advice
from divclip.engines.base import (
    Difference,
    EngineRead,
    EngineWrite,
    Key,
    check_keys,
    check_spec,
    ignored_key_advice,
    name_loss_terms,
    recipe_for,
    typed_values,
    unknown_keys,
)
from divclip.engines.errors import ConfigError
from divclip.engines.pitfalls import Pitfall, on_policy_note
from divclip.theory.conversions import delta_for_eps
from divclip.theory.forms import get_form
from divclip.theory.measures import MEASURES, get_measure
from divclip.theory.spec import AllOf, ClipSpec, is_adaptive, method_string, parse_method

NAME = "trl"
VERSION = "1.16.0"
TRANSFORMERS_VERSION = "5.10.4"
DEFAULTS_FROM = (
    f"trl {VERSION}: trl/trainer/grpo_config.py (GRPOConfig); per_device_train_batch_size and "
    f"gradient_accumulation_steps from transformers {TRANSFORMERS_VERSION} TrainingArguments"
)
FORMATS = ("python", "yaml", "flags")
FORMAT_ALIASES = {"overrides": "flags"}  # `divclip export --format overrides`: an engine's command line
PLUGIN = "divclip.trainer.integrations.trl"
DEFAULT_WIDTH = (0.2, "verl's clip_ratio and GRPO's ε")  # advice.budget_advice's `default`: TRL's epsilon too

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
KEYS: dict[str, Key] = {
    "epsilon": Key("float", 0.2, above=0.0, doc="ε_low (and ε_high when epsilon_high is None)"),
    "epsilon_high": Key("float", None, nullable=True, above=0.0, doc="ε_high; cispo: the absolute IS-weight cap"),
    "delta": Key("float", None, nullable=True, above=0.0, doc="two-sided clip: caps r for the unclipped term"),
    "num_iterations": Key("int", 1, above=0, doc="μ: passes over one generation"),
    "steps_per_generation": Key("int", None, nullable=True, above=0, doc="micro-steps one generation feeds"),
    "generation_batch_size": Key("int", None, nullable=True, above=0, doc="sequences per generation"),
    "loss_type": Key("str", "dapo", choices=LOSS_TYPES, doc="the loss form and its aggregation"),
    "importance_sampling_level": Key("str", "token", choices=("token", "sequence"), doc="token, or GSPO's sequence"),
    "sapo_temperature_pos": Key("float", 1.0, above=0.0, doc="sapo: gate temperature for A > 0"),
    "sapo_temperature_neg": Key("float", 1.05, above=0.0, doc="sapo: gate temperature for A <= 0"),
    "vespo_k_pos": Key("float", 2.0, above=-math.inf, doc="vespo: power k of the gamma kernel for A >= 0"),
    "vespo_lambda_pos": Key("float", 3.0, above=0.0, doc="vespo: decay λ of the gamma kernel for A >= 0"),
    "vespo_k_neg": Key("float", 3.0, above=-math.inf, doc="vespo: power k for A < 0"),
    "vespo_lambda_neg": Key("float", 2.0, above=0.0, doc="vespo: decay λ for A < 0"),
    "max_completion_length": Key("int", 512, nullable=True, above=0, doc="dr_grpo's normaliser B · this"),
    "beta": Key("float", 0.0, above=-math.inf, doc="KL coefficient"),
    "use_bias_correction_kl": Key("bool", True, doc="the KL term weighted by the IS ratio"),
    "entropy_coef": Key("float", 0.0, above=-math.inf, doc="entropy bonus: the loss less entropy_coef·H"),
    "use_adaptive_entropy": Key("bool", False, doc="entropy_coef adapted each step (Skywork-OR1)"),
    "top_entropy_quantile": Key("float", 1.0, above=-math.inf, doc="policy loss kept on the top-ρ entropy tokens only"),
    "mask_truncated_completions": Key(
        "bool", False, doc="completions cut at max_completion_length left out of the loss"
    ),
    "num_generations": Key("int", 8, nullable=True, above=0, doc="completions per prompt (group size)"),
    "per_device_train_batch_size": Key("int", 8, above=0, doc="sequences per device per micro-step"),
    "gradient_accumulation_steps": Key("int", 1, above=0, doc="micro-steps per optimizer step"),
}
# Read only by divclip's TRL plug-in, not TRL defaults: DivClipGRPOConfig's fields.
PLUGIN_KEYS: dict[str, Key] = {
    "clip_measure": Key("str", "ratio", choices=tuple(MEASURES), doc="divclip: the clip's divergence measure"),
    "clip_delta": Key("float", None, nullable=True, above=0.0, doc="divclip: its budget δ"),
    "clip_method": Key("str", None, nullable=True, doc="divclip: a whole method string"),
}
MARKERS = set(KEYS) | set(PLUGIN_KEYS) | {"max_completion_length", "use_vllm", "scale_rewards", "num_generations_eval"}

ROLES = {
    "eps_low": "epsilon",
    "eps_high": "epsilon_high",
    "dual_clip": "delta",
    "cap": "epsilon_high",
    "epochs": "num_iterations",
}
"""{role: key}: the keys the sanity checks name (see EngineRead.roles)."""
KNOWN_KEYS_FROM = (
    f"trl {VERSION} GRPOConfig and transformers {TRANSFORMERS_VERSION} TrainingArguments fields, "
    "with divclip's DivClipGRPOConfig (GRPOConfig(**kwargs) and HfArgumentParser refuse any other)"
)

# loss_type -> aggregation in verl's names (grpo_trainer.py's per-loss_type normalisation)
AGGREGATION = {
    "grpo": "seq-mean-token-mean",
    "sapo": "seq-mean-token-mean",
    "bnpo": "token-mean",
    "dapo": "token-mean",
    "cispo": "token-mean",
    "vespo": "token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
    "luspo": "seq-mean-token-sum",
}
# loss_type -> the divclip loss_agg_mode that is TRL's normalisation exactly (divclip.theory.loss_metrics): a TRL
# sequence mean counts every sequence of the micro-batch (an empty one as 0), and dr_grpo / dapo / cispo / vespo
# divide the token sum by a constant (`loss_scale_factor`: B · max_completion_length, or the generation batch's
# token count per accumulation window, TRL's num_items_in_batch). tests/theory/test_losses_trl.py holds it exact.
EXACT_AGGREGATION = {
    "grpo": "seq-mean-token-mean-all",
    "sapo": "seq-mean-token-mean-all",
    "bnpo": "token-mean",
    "luspo": "seq-mean-token-sum-all",
    "dr_grpo": "token-sum-norm",
    "dapo": "token-sum-norm",
    "cispo": "token-sum-norm",
    "vespo": "token-sum-norm",
}
# aggregation -> the clip loss_type that runs PPO's clip with it
CLIP_LOSS_TYPE = {"token-mean": "dapo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}
_CLIPPED = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")


# ------------------------------------------------------------------------------------------ trainers
# The trainer a TRL script builds its config for (the class it calls, or hands to TrlParser): each reads
# GRPOConfig's clip fields, with its own defaults and fields (tests/engines/test_trl_trainers.py holds both equal to
# the installed classes), and what its loss or schedule changes is said.
TRAINERS = {
    "GRPOConfig": "grpo",
    "DivClipGRPOConfig": "grpo",
    "GMPOConfig": "gmpo",  # trl.experimental.gmpo
    "RLOOConfig": "rloo",
    "AsyncGRPOConfig": "async_grpo",  # trl.experimental.async_grpo
}
TRAINER_DEFAULTS = {
    "grpo": {},
    "gmpo": {"epsilon": 0.4},  # log-space widths: log r clipped to [-0.4, 0.4]
    "rloo": {"num_generations": 2, "beta": 0.05},
    "async_grpo": {"max_completion_length": 2048},
}
TRAINER_FIELDS_FILE = Path(__file__).with_name(f"trl_{VERSION}_trainer_fields.txt")


def trainer_of(classes) -> str:
    """The trainer of the first TRL config class among `classes` (class names a script uses); GRPO if none."""
    return next((TRAINERS[c] for c in classes or () if c in TRAINERS), "grpo")


def detect_classes(classes) -> bool:
    """Whether a script's config classes are TRL's (a GRPOConfig built with no literal settings is still TRL's)."""
    return any(c in TRAINERS for c in classes or ())


@functools.lru_cache(maxsize=4)
def trainer_fields(trainer: str) -> frozenset:
    """Every field of the trainer's config class (with TrainingArguments'): GRPOConfig's for grpo and gmpo (GMPOConfig
    adds none), else the snapshot `trl_<version>_trainer_fields.txt` ("ClassName field" lines)."""
    if trainer in ("grpo", "gmpo"):
        return known_keys()
    cls = next(c for c, t in TRAINERS.items() if t == trainer)
    lines = TRAINER_FIELDS_FILE.read_text().splitlines()
    return frozenset(ln.split()[1] for ln in lines if ln and not ln.startswith("#") and ln.split()[0] == cls)


def parser_fields(classes) -> frozenset:
    """The fields of the TRL argument classes a parser takes beside the trainer's config (ScriptArguments,
    ModelConfig, DatasetMixtureConfig: the snapshot's lines for them)."""
    wanted = set(classes or ()) & set(PARSER_CLASSES)
    if not wanted:
        return frozenset()
    lines = TRAINER_FIELDS_FILE.read_text().splitlines()
    return frozenset(ln.split()[1] for ln in lines if ln and not ln.startswith("#") and ln.split()[0] in wanted)


PARSER_CLASSES = ("ScriptArguments", "ModelConfig", "DatasetMixtureConfig")


# ------------------------------------------------------------------------------------------ known keys
KNOWN_FIELDS_FILE = Path(__file__).with_name(f"trl_{VERSION}_fields.txt")


@functools.lru_cache(maxsize=1)
def known_keys() -> frozenset:
    """Every field of GRPOConfig, TrainingArguments and DivClipGRPOConfig (a snapshot)."""
    lines = KNOWN_FIELDS_FILE.read_text().splitlines()
    return frozenset(ln for ln in lines if ln and not ln.startswith("#"))


def field_name(key: str) -> str:
    """A command-line flag as the field it sets: '--num-iterations' -> 'num_iterations' (HfArgumentParser
    accepts both spellings)."""
    return key.lstrip("-").replace("-", "_") if key.startswith("--") else key


def _fields(settings: Mapping) -> dict:
    check_keys(settings)
    out: dict = {}
    for key, v in settings.items():
        name = field_name(key)
        if name in out:
            raise ConfigError(f"the TRL config sets {name!r} twice (as {key!r} and as another spelling)")
        out[name] = v
    return out


def detect(settings: Mapping) -> float:
    """How many of the settings are GRPOConfig fields divclip reads (or their flags)."""
    return float(sum(1 for k in settings if isinstance(k, str) and field_name(k) in MARKERS))


# ------------------------------------------------------------------------------------------------ read
def read(settings: Mapping, *, num_processes: int = 1, classes=(), fields=frozenset(), **_options) -> EngineRead:
    """The clip settings of a flat GRPOConfig (fields or `--field value` flags); `classes`, the config classes the
    script uses, pick the trainer (RLOOConfig, GMPOConfig, AsyncGRPOConfig: `TRAINERS`), and with `fields` (those of
    the script's own dataclasses) say which keys its parser knows (ModelConfig's, ScriptArguments', ...)."""
    if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
        raise ConfigError(f"num_processes must be an integer >= 1, got {num_processes!r}")
    trainer = trainer_of(classes)
    values = _fields(settings)
    table = {k: replace(KEYS[k], default=v) if k in KEYS else v for k, v in TRAINER_DEFAULTS[trainer].items()}
    g, keys = typed_values(values, {**KEYS, **table})
    known = trainer_fields(trainer) | parser_fields(classes) | frozenset(fields)
    loss_type, level = g["loss_type"], g["importance_sampling_level"]
    eps = g["epsilon"]
    eps_high = g["epsilon_high"] if g["epsilon_high"] is not None else eps
    per_step = g["per_device_train_batch_size"] * num_processes
    gas, mu = g["gradient_accumulation_steps"], g["num_iterations"]
    steps = _steps_per_generation(g, per_step)
    generate_every = steps * mu
    form, measure, low, high, cap = _form(loss_type, eps, eps_high)
    s = EngineRead(
        engine=NAME,
        defaults_from=DEFAULTS_FROM,
        loss_mode=loss_type,
        form=form,
        measure=measure,
        level=level,
        budget_low=low,
        budget_high=high,
        cap=cap,
        dual_clip_c=g["delta"] if form == "clip" else None,
        loss_agg_mode=AGGREGATION.get(loss_type),
        epochs=mu,
        minibatches=steps / gas,
        updates_per_batch=generate_every / gas,
        on_policy=gas % generate_every == 0,
        on_policy_reason=(
            f"num_iterations={mu} × steps_per_generation={steps} = {generate_every} micro-step(s) per generation, "
            f"gradient_accumulation_steps={gas}: TRL reuses a generation across optimizer steps only when "
            f"{gas} % {generate_every} != 0"
        ),
        group_size=g["num_generations"],
        kl={"beta": g["beta"]},
        keys=keys,
        unknown_keys=unknown_keys(values, lambda k: k in known, known),
        roles=ROLES,
        on_policy_fix="num_iterations > 1 or steps_per_generation > gradient_accumulation_steps",
    )
    if trainer != "grpo":
        return _other_trainer(s, trainer, g, values)
    if form == "clip":
        _divclip(s, values, g, keys, steps)
    if num_processes == 1 and g["generation_batch_size"] is not None and g["steps_per_generation"] is None:
        s.notes.append(
            "steps_per_generation derived from generation_batch_size assuming 1 process "
            "(pass --num-processes for multi-GPU runs)"
        )
    _read_spec(s, g)
    name_loss_terms(s, loss_terms(g))
    s.advice[:0] = pitfalls(s)  # before the plug-in's own advice, as `divclip check` has always listed them
    s.advice += ignored_key_advice(s, IGNORED_BY_LOSS, f"TRL {VERSION} grpo_trainer.py GRPOTrainer._compute_loss")
    return s


def _clip_inert(s: EngineRead) -> None:
    """GMPO's and RLOO's clips see a ratio of 1 too when the update is on-policy; their form is 'other' (no ratio
    clip's widths to judge), which the generic on-policy check leaves alone, so it is said here."""
    if s.on_policy:
        fix = "use num_iterations > 1 (or steps_per_generation > gradient_accumulation_steps)"
        s.advice.append(
            Pitfall(
                "on_policy_clip_inert",
                on_policy_note(NAME, s.on_policy_reason, fix),
                "num_iterations",
                ON_POLICY_SOURCE,
            )
        )


def _other_trainer(s: EngineRead, trainer: str, g: dict, values: dict) -> EngineRead:
    """GMPO, RLOO and async GRPO: GRPOConfig's fields read with their trainer's defaults, then what differs."""
    eps = g["epsilon"]
    high = g["epsilon_high"] if g["epsilon_high"] is not None else eps
    if trainer == "gmpo":  # gmpo_trainer.py: log r clipped in A's direction, exp of the mean per sequence
        s.loss_mode, s.form, s.measure, s.loss_agg_mode = "gmpo", "other", None, None
        s.budget_low = s.budget_high = s.dual_clip_c = None
        s.spec = ClipSpec(form="geo_mean", params={"gmpo_eps_low": eps, "gmpo_eps_high": high})
        s.notes.append(
            f"TRL's GMPOTrainer (trl.experimental.gmpo): epsilon = {eps:g}, epsilon_high = {high:g} are log-space "
            f"widths, log r clipped to [-{eps:g}, {high:g}] in A's direction, then the geometric mean per "
            "sequence: divclip's geo_mean"
        )
        _clip_inert(s)
    elif trainer == "rloo":  # rloo_trainer.py: one sequence ratio, the KL in the reward
        s.loss_mode, s.form, s.measure, s.loss_agg_mode, s.spec = "rloo", "other", None, None, None
        s.level, s.dual_clip_c = "sequence", None
        s.notes.append(
            f"TRL's RLOOTrainer (RLOOConfig): leave-one-out advantages over num_generations = "
            f"{g['num_generations']} completions, one sequence ratio clipped at epsilon = {eps:g}, "
            f"epsilon_high = {high:g}: this loss is not modelled by divclip (no method string), the settings "
            "around it are read"
        )
        _clip_inert(s)
        if g["beta"]:
            s.notes.append(
                f"beside the clip: beta = {g['beta']:g}: RLOOTrainer subtracts β·KL to the reference from the "
                "reward (not a loss term; not part of divclip's clip analysis)"
            )
        return s
    else:  # async_grpo_trainer.py: the ratio against the vLLM server's log-probs
        s.loss_mode, s.loss_agg_mode = "async_grpo", None
        s.spec = ClipSpec("ratio", eps_low=eps, eps_high=high, level=s.level, params={"clamp_log_ratio": False})
        staleness = values.get("max_staleness", 4)
        s.on_policy = False
        s.on_policy_reason = (
            f"TRL's AsyncGRPOTrainer: rollouts come from a vLLM server up to max_staleness = {staleness} weight "
            "versions old and the ratio is taken against the server's log-probs, so it is not 1 even at the "
            "first update (and num_iterations / steps_per_generation are not AsyncGRPOConfig fields)"
        )
    name_loss_terms(s, loss_terms(g))
    return s


def loss_terms(g: dict) -> list[tuple[str, str]]:
    """TRL's terms beside the clipped policy loss (GRPOTrainer._compute_loss)."""
    out = []
    if g["beta"]:
        bias = g["use_bias_correction_kl"]
        out.append(
            (
                f"beta = {g['beta']:g}, use_bias_correction_kl = {bias}",
                "a KL-to-reference term β·KL (k3 estimator) added per token"
                + (", weighted by the IS ratio" if bias else ""),
            )
        )
    if g["entropy_coef"] or g["use_adaptive_entropy"]:
        out.append(
            (
                f"entropy_coef = {g['entropy_coef']:g}, use_adaptive_entropy = {g['use_adaptive_entropy']}",
                "an entropy bonus, the loss less entropy_coef·H"
                + (" (adapted each step)" if g["use_adaptive_entropy"] else ""),
            )
        )
    if g["mask_truncated_completions"]:
        out.append(
            (
                "mask_truncated_completions = True",
                "completions cut at max_completion_length (no EOS) are left out of the loss",
            )
        )
    if g["top_entropy_quantile"] < 1.0:
        out.append(
            (
                f"top_entropy_quantile = {g['top_entropy_quantile']:g}",
                "only the tokens in the top quantile of entropy keep their policy-loss term (arXiv 2506.01939), "
                "the rest are masked out",
            )
        )
    return out


IGNORED_BY_LOSS = {"sapo": ("epsilon", "epsilon_high", "delta"), "cispo": ("delta",)}
"""Fields a TRL loss_type never reads in its loss (sapo: the temperatures only; cispo: epsilon_high as its cap)."""


def _form(loss_type: str, eps: float, eps_high: float):
    """(form, measure, budget_low, budget_high, cap) of a loss_type."""
    if loss_type in _CLIPPED:
        return "clip", "ratio", eps, eps_high, None
    if loss_type == "cispo":
        # TRL's CISPO clamps the IS weight at epsilon_high itself (an absolute cap, ScaleRL's ε_max = 5).
        return "cispo", "ratio", None, (eps_high - 1.0 if eps_high > 1.0 else None), eps_high
    if loss_type == "sapo":
        return "sapo", None, None, None, None
    return "other", None, None, None, None


def _read_spec(s: EngineRead, g: dict) -> None:
    if s.spec is not None:
        return  # clip_method: the method string is the spec
    if s.loss_mode not in SPEC_FROM_LOSS_TYPE:
        s.notes.append(
            f"loss_type {s.loss_mode!r} is reported but not modelled yet: divclip reads "
            f"{', '.join(SPEC_FROM_LOSS_TYPE)}"
        )
        return
    try:
        s.spec = SPEC_FROM_LOSS_TYPE[s.loss_mode](s, g)
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        s.notes.append(f"loss_type {s.loss_mode!r}: no divclip method says this exactly: {exc}")


# Every TRL method is '/noclamp' (the form parameter clamp_log_ratio=False): TRL exponentiates the raw log-ratio,
# where verl (and divclip's default) clamp it to ±20. In float32 the specs below are TRL's loss bit for bit; in
# float64 TRL's sapo temperatures and VESPO's k, λ are float32 values (torch.where on Python floats), a 1e-8
# relative difference.
def _clip_spec(s: EngineRead, g: dict):
    form = "luspo" if s.loss_mode == "luspo" else "clip"
    c = s.dual_clip_c
    if c is not None and s.clip_measure in (None, "ratio") and c < 1.0 + s.budget_high:
        raise ValueError(
            f"delta = {c:g} is below 1 + epsilon_high = {1.0 + s.budget_high:g}: TRL's two-sided clip "
            "then also caps tokens with A > 0 inside the clip, which divclip's dual clip does not"
        )
    if s.clip_measure not in (None, "ratio"):
        return ClipSpec(s.clip_measure, delta=s.delta_low, params={"dual_clip_c": c, "clamp_log_ratio": False})
    return ClipSpec(
        "ratio",
        eps_low=s.budget_low,
        eps_high=s.budget_high,
        level=s.level,
        form=form,
        params={"dual_clip_c": c, "clamp_log_ratio": False},
    )


def _cispo_spec(s: EngineRead, g: dict):
    # an absolute cap on the IS weight, no lower bound (ScaleRL's ε_max): the cispo_cap form, at any cap
    return ClipSpec(form="cispo_cap", level=s.level, params={"cispo_cap": s.cap, "clamp_log_ratio": False})


def _sapo_spec(s: EngineRead, g: dict):
    return ClipSpec(
        form="sapo",
        level=s.level,
        params={"tau_pos": g["sapo_temperature_pos"], "tau_neg": g["sapo_temperature_neg"], "clamp_log_ratio": False},
    )


def _vespo_spec(s: EngineRead, g: dict):
    """VESPO forms its own sequence weight (Σ log r, clamped): importance_sampling_level does not change its loss."""
    names = ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")
    form = get_form("vespo")  # its defaults are GRPOConfig's: only the ones set differently go in the method
    return ClipSpec(form="vespo", params={k: g[k] for k in names if g[k] != form.param(k).default})


SPEC_FROM_LOSS_TYPE = {
    **{t: _clip_spec for t in _CLIPPED},
    "cispo": _cispo_spec,
    "sapo": _sapo_spec,
    "vespo": _vespo_spec,
}
"""{TRL loss_type: fn(read, typed values) -> ClipSpec}: the method each loss_type runs."""


def loss_scale_factor(
    settings: Mapping, *, batch_size: int, num_items_in_batch: float | None = None, num_processes: int = 1
) -> float | None:
    """`policy_loss`'s loss_scale_factor for TRL's EXACT_AGGREGATION of these settings, on one micro-batch of
    `batch_size` sequences: dr_grpo's B · max_completion_length; dapo/cispo/vespo's max(num_items_in_batch, 1) /
    num_processes · gradient_accumulation_steps / steps_per_generation (TRL's train-mode normaliser); None for the
    others. TRL further divides the grpo/sapo/bnpo/dr_grpo/luspo loss by the gradient-accumulation steps."""
    found = read(settings, num_processes=num_processes)
    mode = EXACT_AGGREGATION[found.loss_mode]
    if found.loss_mode == "dr_grpo":
        return float(batch_size * found.keys["max_completion_length"]["value"])
    if mode != "token-sum-norm":
        return None
    if num_items_in_batch is None:
        raise ValueError(
            f"loss_type {found.loss_mode!r} divides by the generation batch's token count: give num_items_in_batch"
        )
    gas = found.keys["gradient_accumulation_steps"]["value"]
    steps = found.minibatches * gas
    return max(float(num_items_in_batch), 1.0) / num_processes * gas / steps


def _steps_per_generation(g: dict, per_step: int) -> int:
    """steps_per_generation exactly as GRPOConfig.__post_init__ derives it."""
    steps, gbs = g["steps_per_generation"], g["generation_batch_size"]
    if steps is not None:
        return steps  # a dumped GRPOConfig carries both fields after __post_init__: steps wins
    if gbs is None:
        return g["gradient_accumulation_steps"]
    if gbs % per_step != 0:
        raise ConfigError(
            f"generation_batch_size ({gbs}) must be divisible by the global batch size "
            f"per_device_train_batch_size × num_processes ({per_step}), as TRL {VERSION} requires"
        )
    return gbs // per_step


def _divclip(s: EngineRead, values: dict, g: dict, keys: dict, steps: int) -> None:
    """DivClipGRPOConfig's clip_measure / clip_delta / clip_method (absent from a stock GRPOConfig: the ratio clip)."""
    d, seen = typed_values(values, PLUGIN_KEYS)
    keys.update(seen)
    if d["clip_method"] is not None:
        _method(s, d["clip_method"])
        return
    name, clip_delta = d["clip_measure"], d["clip_delta"]
    found = plugin_advice(
        name, clip_delta, g["epsilon_high"], g["num_iterations"], steps, g["gradient_accumulation_steps"]
    )
    s.advice += [a for a in found if a.code != "on_policy_clip_inert"]  # the on-policy check reports that
    if name == "ratio":
        if clip_delta is not None:
            raise ConfigError(
                f"clip_measure='ratio' uses epsilon/epsilon_high, so clip_delta must be None, got {clip_delta!r}"
            )
        s.ratio_bounds = [1.0 - s.budget_low, 1.0 + s.budget_high]
        return
    m = get_measure(name)
    if clip_delta is None:
        if m.p_dependent:
            raise ConfigError(
                f"clip_measure={name!r} depends on p = π_old(a): give clip_delta explicitly, got clip_delta=None"
            )
        try:
            clip_delta = delta_for_eps(name, eps_low=g["epsilon"])
        except ValueError as exc:
            raise ConfigError(f"epsilon = {g['epsilon']!r} has no {name} budget: {exc}") from None
    s.clip_measure, s.delta_low, s.delta_high = name, clip_delta, clip_delta
    s.ratio_bounds = advice.ratio_bounds(name, clip_delta, clip_delta)
    if m.p_dependent:
        s.form, s.measure, s.budget_low, s.budget_high = "divclip", name, clip_delta, clip_delta
    else:
        lo, hi = s.ratio_bounds
        s.budget_low, s.budget_high = 1.0 - lo, hi - 1.0
    s.notes.append(
        f"clip_measure={name!r}: budget δ = {clip_delta:.6g}"
        + (" (derived from epsilon as δ = D(1 - epsilon))" if d["clip_delta"] is None else "")
    )


def _method(s: EngineRead, text: str) -> None:
    try:
        s.spec = parse_method(text)
    except ValueError as exc:
        raise ConfigError(f"clip_method: {exc}") from None
    s.notes.append(
        f"clip_method={text!r} is the whole method: epsilon, epsilon_high, delta and clip_measure are ignored"
    )
    spec = s.spec
    if not _combined(spec) and spec.form == "clip" and spec.measure_name == "ratio":  # a dual clip below 1 + ε_high
        s.form, s.measure, s.level, s.dual_clip_c = "clip", "ratio", spec.level, spec.param("dual_clip_c", None)
        s.budget_low, s.budget_high = spec.eps_low, spec.eps_high
        s.ratio_bounds = [1.0 - spec.eps_low, 1.0 + spec.eps_high]


# -------------------------------------------------------------------------------------------- pitfalls
CHECK_SOURCES = {
    "trl_cispo_cap_is_absolute": f"TRL {VERSION[:4]} grpo_config.py (epsilon_high help: for cispo it is ScaleRL's "
    "ε_max, recommended 5.0) and grpo_trainer.py: torch.clamp(coef_1, max=epsilon_high)",
    "trl_delta_below_upper_clip": f"TRL {VERSION[:4]} grpo_config.py (delta: 'Recommended to be greater than 1 + ε'; "
    "INTELLECT-2, arXiv 2505.07291)",
}
"""The source of each warning only TRL's settings raise (`divclip.sanity.checks.SOURCES` lists them too)."""
ON_POLICY_SOURCE = (
    f"docs/theory.md §5; TRL {VERSION[:4]} grpo_trainer.py uses the current log-probs, detached, as "
    "the old ones when gradient_accumulation_steps is a multiple of steps_per_generation × "
    "num_iterations"
)
CISPO_CAP_MIN = 1.5  # a cap this close to 1 down-weights every token that moved up at all
CISPO_CAP_RECOMMENDED = 5.0  # ScaleRL's ε_max, GRPOConfig's help for epsilon_high under cispo


def pitfalls(s: EngineRead) -> list[Pitfall]:
    """What TRL's own fields get wrong: `delta` at or below the upper clip bound, cispo's absolute cap."""
    out = []
    if (
        s.explicit("delta")
        and s.dual_clip_c is not None
        and s.budget_high is not None
        and s.dual_clip_c <= 1.0 + s.budget_high
    ):
        out.append(
            Pitfall(
                "trl_delta_below_upper_clip",
                f"delta = {s.dual_clip_c:g} caps the ratio at or below the upper clip bound 1 + ε_high = "
                f"{1 + s.budget_high:g}; TRL recommends delta > 1 + ε (INTELLECT-2 used 4).",
                "delta",
                CHECK_SOURCES["trl_delta_below_upper_clip"],
            )
        )
    if s.form == "cispo" and s.cap < CISPO_CAP_MIN:
        set_it = "epsilon_high" if s.explicit("epsilon_high") else "epsilon_high (unset, so epsilon)"
        out.append(
            Pitfall(
                "trl_cispo_cap_is_absolute",
                f"TRL's cispo clamps the importance weight at {set_it} = {s.cap:g} itself, not at 1 + ε: every weight "
                f"is capped at {s.cap:g}{' < 1, so even unchanged tokens are down-weighted' if s.cap < 1 else ''}. "
                f"ScaleRL recommends epsilon_high = {CISPO_CAP_RECOMMENDED}.",
                "epsilon_high",
                CHECK_SOURCES["trl_cispo_cap_is_absolute"],
            )
        )
    return out


def plugin_advice(
    measure: str,
    clip_delta,
    epsilon_high,
    num_iterations: int,
    steps_per_generation: int | None,
    gradient_accumulation_steps: int,
) -> list[Pitfall]:
    """Warnings for DivClipGRPOConfig's fields (the TRL plug-in logs them; `divclip check` reports them)."""
    out: list = []
    owner = f"clip_measure={measure!r}"
    if measure != "ratio":
        if epsilon_high is not None:
            out.append(
                advice.ignored_key_advice(
                    owner, "epsilon_high", epsilon_high, "the upper bound follows from the budget δ"
                )
            )
        if clip_delta is not None:
            out += advice.budget_advice(measure, [("clip_delta", clip_delta)], owner, DEFAULT_WIDTH)
            out += advice.cannot_bind_advice(measure, clip_delta, clip_delta, owner, ("clip_delta", "clip_delta"))
    steps = steps_per_generation if steps_per_generation is not None else gradient_accumulation_steps
    if gradient_accumulation_steps % (steps * num_iterations) == 0:
        out.append(
            Pitfall(
                "on_policy_clip_inert",
                f"num_iterations={num_iterations} × steps_per_generation={steps} divides gradient_accumulation_steps="
                f"{gradient_accumulation_steps}: TRL uses the current log-probs as the old ones, the ratio is "
                f"identically 1 and no clip has any effect. Use num_iterations > 1 (or steps_per_generation > "
                f"gradient_accumulation_steps) if the clip is meant to matter.",
                "num_iterations",
                ON_POLICY_SOURCE,
            )
        )
    return out


# ----------------------------------------------------------------------------------------------- write
def _num(x) -> float:
    return float(x)


_ON_POLICY = (
    "TRL's default num_iterations=1 makes every update on-policy, where no clip has any effect: set num_iterations > 1"
)


def write(spec, *, recipe: bool = True, loss_agg_mode: str | None = None, label: str | None = None) -> EngineWrite:
    """`spec` as GRPOConfig / DivClipGRPOConfig fields, every clip field once and loss_type explicit; a
    ValueError says what TRL cannot express."""
    spec, label = check_spec(spec, label)
    notes = [_ON_POLICY]
    diffs: list = []
    agg = loss_agg_mode if loss_agg_mode is not None else _recipe_agg(spec, recipe, notes)
    if _combined(spec) or _dual_below_upper(spec):  # DivClipGRPOConfig(clip_method=...): divclip's own loss
        if not _combined(spec):
            notes.append(_DUAL_NOTE.format(c=spec.param("dual_clip_c", None), hi=1.0 + spec.eps_high))
        notes.append("clip_method replaces clip_measure/clip_delta/epsilon_high; TRL's epsilon is ignored")
        fields = {"loss_type": _clip_loss_type(agg, diffs), "clip_method": method_string(spec)}
        return EngineWrite(NAME, label, {}, fields, tuple(notes), "DivClipGRPOConfig", tuple(diffs))
    if spec.form not in WRITERS:
        name = spec.measure_name
        raise ValueError(
            f"TRL has no {spec.form!r} loss form (DPPO's mask is verl's dppo_kl/dppo_tv); for a PPO "
            f"clip by {name} use the method '{name}:{spec.delta:g}'"
            if spec.form == "gated"
            else f"TRL has no {spec.form!r} loss form (TRL's loss_type: {', '.join(LOSS_TYPES)})"
        )
    fields, config_class = WRITERS[spec.form](spec, agg, notes, diffs)
    return EngineWrite(NAME, label, {}, fields, tuple(notes), config_class, tuple(diffs))


def _recipe_agg(spec, recipe: bool, notes: list) -> str | None:
    found = recipe_for(spec) if recipe else None
    if found is None:
        return None
    notes.append(f"aggregation {found.loss_agg_mode}: {found.source}")
    return found.loss_agg_mode


def _clip_loss_type(agg: str | None, diffs: list) -> str:
    """The clip loss_type with aggregation `agg` (TRL's default dapo when none is asked)."""
    if agg is None:
        return "dapo"
    if agg in CLIP_LOSS_TYPE:
        return CLIP_LOSS_TYPE[agg]
    diffs.append(
        Difference(
            f"aggregation {agg}",
            "TRL's loss_types aggregate token-mean (dapo), "
            "seq-mean-token-mean (grpo) or seq-mean-token-sum-norm (dr_grpo): written as dapo",
        )
    )
    return "dapo"


def _write_clip(spec, agg, notes: list, diffs: list):
    name = spec.measure_name
    delta = None if spec.param("dual_clip_c", None) is None else _num(spec.param("dual_clip_c", None))
    loss_type = _clip_loss_type(agg, diffs)
    if spec.level == "sequence":
        if name != "ratio":
            raise ValueError(
                f"TRL has no sequence-level {name} clip (importance_sampling_level='sequence' clips the "
                f"sequence ratio), got {name!r}"
            )
        return {
            "loss_type": loss_type,
            "importance_sampling_level": "sequence",
            "epsilon": _num(spec.eps_low),
            "epsilon_high": _num(spec.eps_high),
            "delta": delta,
        }, "GRPOConfig"
    if name == "ratio":
        fields = {
            "loss_type": loss_type,
            "clip_measure": "ratio",
            "clip_delta": None,
            "epsilon": _num(spec.eps_low),
            "epsilon_high": _num(spec.eps_high),
            "delta": delta,
        }
    else:
        fields = {
            "loss_type": loss_type,
            "clip_measure": name,
            "clip_delta": _num(spec.delta),
            "epsilon_high": None,
            "delta": delta,
        }
        notes.append("a divergence measure sets both bounds from clip_delta: epsilon_high must stay None")
    return fields, "DivClipGRPOConfig"


def _write_cispo(spec, agg, notes: list, diffs: list):
    if spec.measure_name != "ratio" or spec.level != "token":
        raise ValueError(f"TRL's cispo caps the token ratio, got measure {spec.measure_name!r}, level {spec.level!r}")
    if spec.eps_low < 1.0:
        diffs.append(
            Difference(
                f"cispo's lower bound 1 - ε_low = {1 - spec.eps_low:g}",
                "TRL's cispo caps the IS weight above only (no lower bound)",
            )
        )
    if agg not in (None, "token-mean"):
        diffs.append(Difference(f"aggregation {agg}", "TRL's cispo aggregates token-mean"))
    return {"loss_type": "cispo", "epsilon_high": 1.0 + _num(spec.eps_high)}, "GRPOConfig"


def _write_sapo(spec, agg, notes: list, diffs: list):
    if agg not in (None, "seq-mean-token-mean"):
        diffs.append(Difference(f"aggregation {agg}", "TRL's sapo aggregates seq-mean-token-mean"))
    return {
        "loss_type": "sapo",
        "sapo_temperature_pos": _num(spec.param("tau_pos")),
        "sapo_temperature_neg": _num(spec.param("tau_neg")),
        **_level(spec),
    }, "GRPOConfig"


def _level(spec) -> dict:
    return {"importance_sampling_level": "sequence"} if spec.level == "sequence" else {}


def _write_cispo_cap(spec, agg, notes: list, diffs: list):
    if agg not in (None, "token-mean"):
        diffs.append(Difference(f"aggregation {agg}", "TRL's cispo aggregates token-mean"))
    return {"loss_type": "cispo", "epsilon_high": _num(spec.param("cispo_cap")), **_level(spec)}, "GRPOConfig"


def _write_luspo(spec, agg, notes: list, diffs: list):
    if spec.measure_name != "ratio":
        raise ValueError(f"TRL's luspo clips the ratio with epsilon / epsilon_high, got measure {spec.measure_name!r}")
    delta = None if spec.param("dual_clip_c", None) is None else _num(spec.param("dual_clip_c", None))
    return {
        "loss_type": "luspo",
        "epsilon": _num(spec.eps_low),
        "epsilon_high": _num(spec.eps_high),
        "delta": delta,
        **_level(spec),
    }, "GRPOConfig"


def _write_vespo(spec, agg, notes: list, diffs: list):
    names = ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")
    return {"loss_type": "vespo", **{k: _num(spec.param(k)) for k in names}}, "GRPOConfig"


WRITERS = {
    "clip": _write_clip,
    "cispo": _write_cispo,
    "sapo": _write_sapo,
    "cispo_cap": _write_cispo_cap,
    "luspo": _write_luspo,
    "vespo": _write_vespo,
}
"""{ClipSpec.form: fn(spec, aggregation, notes, differences) -> (fields, config class)}."""


_DUAL_NOTE = (
    "a dual clip c = {c:g} below 1 + ε_high = {hi:g}: TRL's delta would cap the ratio of every token at c (A > 0 "
    "too), so the method is written as divclip's clip_method, which caps only A < 0"
)


def _dual_below_upper(spec) -> bool:
    """A ratio clip whose dual-clip cap c is below 1 + ε_high: TRL's `delta` is min(r, delta) on every token, the
    same as a dual clip only when delta >= 1 + ε_high (for A > 0 the clip already caps r there)."""
    c = spec.param("dual_clip_c", None)
    if c is None or spec.form != "clip" or spec.measure_name != "ratio" or not c < 1.0 + spec.eps_high:
        return False
    if spec.level != "token":  # the plug-in's clip_method runs token-level clips only
        raise ValueError(
            f"TRL's delta caps the ratio of every token at delta (A > 0 too), and a dual clip c = {c:g} is below "
            f"1 + ε_high = {1.0 + spec.eps_high:g}, where the two differ; divclip's clip_method, which would say "
            f"it exactly, runs token-level clips only, and this is the {spec.level}-level ratio"
        )
    return True


def _combined(spec) -> bool:
    return isinstance(spec, AllOf) or is_adaptive(spec)


# ---------------------------------------------------------------------------------------------- render
def _value(v, inf: str) -> str:
    if v is None:
        return "null"
    if isinstance(v, float):
        return inf if v == math.inf else repr(v)
    return str(v)


def _py_value(v) -> str:
    if isinstance(v, float) and v == math.inf:
        return 'float("inf")'
    return repr(v)


def render(w: EngineWrite, fmt: str) -> list[str]:
    """The body of `w` as Python ('python'), a YAML of fields ('yaml') or `--field value` flags ('flags')."""
    if fmt == "python":
        module = PLUGIN if w.config_class == "DivClipGRPOConfig" else "trl"
        trainer = w.config_class.replace("Config", "Trainer")
        out = [f"from {module} import {w.config_class}, {trainer}", "", "clip_settings = dict("]
        out += [f"    {k}={_py_value(v)}," for k, v in w.settings.items()]
        return out + [")", f"args = {w.config_class}(output_dir=..., **clip_settings)"]
    if fmt == "yaml":
        return [f"{k}: {_value(v, '.inf')}" for k, v in w.settings.items()]
    unset = [k for k, v in w.settings.items() if v is None]
    out = [f"# command-line flags of a script that parses {w.config_class} with transformers' HfArgumentParser"]
    if unset:  # HfArgumentParser cannot take None: these must not be given at all
        out.append(f"# leave unset (None): {', '.join(unset)}")
    # quoted for the shell: a clip_method's '&' would otherwise end the command there
    return out + [" ".join(f"--{k} {shlex.quote(_value(v, 'inf'))}" for k, v in w.settings.items() if v is not None)]
