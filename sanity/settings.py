"""From a flat config map to the clip settings that matter: which loss, which bound, how many updates per batch.

verl (0.9.1) and TRL (1.16.0) are read with the defaults their installed packages document; a key the config
does not set takes that default and is marked `origin="default"`, so the report can say which numbers the
user chose and which they inherited. The default tables are checked against the installed packages by
`tests/sanity/test_sanity_defaults.py`.

What "updates per batch" means, because it decides whether any clip can bind (docs/theory.md §5):
* verl: the train batch is split into `ceil(train_batch_size / ppo_mini_batch_size)` mini-batches (both
  counted in prompts; verl multiplies both by rollout.n) and swept `ppo_epochs` times. One update in total
  means the ratio is identically 1 when the loss is evaluated (verl #791, #1477).
* TRL: one generation feeds `steps_per_generation` micro-steps, repeated `num_iterations` (μ) times; TRL
  itself skips the old log-probs (old = current, detached) when
  `gradient_accumulation_steps % (steps_per_generation · μ) == 0` (grpo_trainer.py), i.e. when every
  optimizer step sees fresh samples.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from divclip.sanity.config import RawConfig, looks_like_float
from divclip.sanity.errors import ConfigError

VERL_VERSION = "0.9.1"
TRL_VERSION = "1.16.0"
TRANSFORMERS_VERSION = "5.10.4"
VERL_DEFAULTS_FROM = (
    f"verl {VERL_VERSION}: verl/trainer/config/_generated_ppo_trainer.yaml "
    "(actor/actor.yaml, rollout/rollout.yaml, data/legacy_data.yaml, ppo_trainer.yaml)"
)
TRL_DEFAULTS_FROM = (
    f"trl {TRL_VERSION}: trl/trainer/grpo_config.py (GRPOConfig); per_device_train_batch_size and "
    f"gradient_accumulation_steps from transformers {TRANSFORMERS_VERSION} TrainingArguments"
)

_A = "actor_rollout_ref.actor."
MAX_INT = 2**31 - 1  # batch sizes, epochs, steps: anything larger is a typo (and overflows float division)


@dataclass(frozen=True)
class Key:
    """One config key divclip reads: its type, default, and the smallest allowed value."""

    kind: str  # "float" | "int" | "str" | "bool"
    default: object
    nullable: bool = False
    above: float | None = None  # value must be > above
    choices: tuple = ()


VERL_LOSS_MODES = (
    "vanilla", "gspo", "dppo_kl", "dppo_tv", "cispo", "sapo",
    "gpg", "clip_cov", "kl_cov", "geo_mean", "dro", "bypass_mode",
)
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")

VERL_KEYS: dict[str, Key] = {
    _A + "clip_ratio": Key("float", 0.2, above=0.0),
    _A + "clip_ratio_low": Key("float", 0.2, nullable=True, above=0.0),
    _A + "clip_ratio_high": Key("float", 0.2, nullable=True, above=0.0),
    _A + "clip_ratio_c": Key("float", 3.0, above=1.0),  # verl asserts c > 1 (dual-clip PPO)
    _A + "policy_loss.loss_mode": Key("str", "vanilla", choices=VERL_LOSS_MODES),
    _A + "loss_agg_mode": Key("str", "token-mean", choices=LOSS_AGG_MODES),
    _A + "ppo_epochs": Key("int", 1, above=0),
    _A + "ppo_mini_batch_size": Key("int", 256, above=0),
    _A + "use_kl_loss": Key("bool", False),
    _A + "kl_loss_coef": Key("float", 0.001, above=-math.inf),
    _A + "kl_loss_type": Key("str", "low_var_kl"),
    "actor_rollout_ref.rollout.n": Key("int", 1, above=0),
    "data.train_batch_size": Key("int", 1024, above=0),
    "algorithm.adv_estimator": Key("str", "gae"),
}

TRL_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
TRL_KEYS: dict[str, Key] = {
    "epsilon": Key("float", 0.2, above=0.0),
    "epsilon_high": Key("float", None, nullable=True, above=0.0),
    "delta": Key("float", None, nullable=True, above=0.0),
    "num_iterations": Key("int", 1, above=0),
    "steps_per_generation": Key("int", None, nullable=True, above=0),
    "generation_batch_size": Key("int", None, nullable=True, above=0),
    "loss_type": Key("str", "dapo", choices=TRL_LOSS_TYPES),
    "importance_sampling_level": Key("str", "token", choices=("token", "sequence")),
    "beta": Key("float", 0.0, above=-math.inf),
    "num_generations": Key("int", 8, nullable=True, above=0),
    "per_device_train_batch_size": Key("int", 8, above=0),
    "gradient_accumulation_steps": Key("int", 1, above=0),
}
_TRL_MARKERS = set(TRL_KEYS) | {"max_completion_length", "use_vllm", "scale_rewards", "num_generations_eval"}
_VERL_PREFIXES = ("actor_rollout_ref.", "algorithm.", "data.", "trainer.", "critic.", "reward_model.")

# verl loss_mode / TRL loss_type -> (loss form, measure, level); "other" forms are reported but not analysed.
_VERL_FORMS = {
    "vanilla": ("clip", "ratio", "token"),
    "gspo": ("clip", "ratio", "sequence"),
    "dppo_kl": ("gated", "binary_kl", "token"),
    "dppo_tv": ("gated", "binary_tv", "token"),
    "cispo": ("cispo", "ratio", "token"),
    "sapo": ("sapo", None, "token"),
}
_TRL_AGG = {"grpo": "seq-mean-token-mean", "bnpo": "token-mean", "dapo": "token-mean",
            "dr_grpo": "seq-mean-token-sum-norm"}


@dataclass
class ClipSettings:
    """The clip-relevant part of one training config, with every value's origin."""

    framework: str  # "verl" | "trl"
    defaults_from: str
    loss_mode: str  # verl policy_loss.loss_mode or TRL loss_type, as written
    form: str  # "clip" (PPO) | "gated" (DPPO) | "cispo" | "sapo" | "other"
    measure: str | None  # "ratio", "binary_kl", "binary_tv"; None without a hard clip
    level: str  # "token" | "sequence"
    budget_low: float | None  # ratio: ε_low; binary_*: δ_low
    budget_high: float | None  # ratio: ε_high; binary_*: δ_high
    cap: float | None = None  # TRL cispo: absolute cap on the IS weight (epsilon_high)
    dual_clip_c: float | None = None  # verl vanilla clip_ratio_c, TRL delta
    tis_cap: float | None = None  # verl dppo_*: truncation of the IS weight (clip_ratio_c)
    loss_agg_mode: str | None = None
    epochs: int = 1  # verl ppo_epochs / TRL num_iterations
    minibatches: float = 1  # optimizer updates per pass over one rollout batch
    updates_per_batch: float = 1
    on_policy: bool = True  # the ratio is identically 1 when the loss is evaluated
    on_policy_reason: str = ""
    group_size: int | None = None  # rollout.n / num_generations
    kl: dict = field(default_factory=dict)
    keys: dict = field(default_factory=dict)  # {key: {"value": v, "origin": "set" | "default"}}
    notes: list = field(default_factory=list)

    def explicit(self, key: str) -> bool:
        return self.keys.get(key, {}).get("origin") == "set"

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------------------------- typing
def _typed(values: dict, key: str, spec: Key, keys: dict):
    if key not in values:
        keys[key] = {"value": spec.default, "origin": "default"}
        return spec.default
    v = values[key]
    if v is None:
        if not spec.nullable:
            raise ConfigError(f"{key} must be {_expect(spec)}, got null")
        out = None
    elif spec.kind == "float":
        out = _as_float(key, v, spec)
    elif spec.kind == "int":
        out = _as_int(key, v, spec)
    elif spec.kind == "bool":
        if not isinstance(v, bool):
            raise ConfigError(f"{key} must be true or false, got {_show(v)}")
        out = v
    else:
        if not isinstance(v, str):
            raise ConfigError(f"{key} must be a string{_choices(spec)}, got {_show(v)}")
        if spec.choices and v not in spec.choices:
            raise ConfigError(f"{key} must be one of {list(spec.choices)}, got {v!r}")
        out = v
    keys[key] = {"value": out, "origin": "set"}
    return out


def _as_float(key, v, spec: Key) -> float:
    if isinstance(v, str) and looks_like_float(v):
        v = float(v)  # YAML 1.1 reads 3e-4 as a string; verl (OmegaConf) and TRL (argparse) read a float
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"{key} must be {_expect(spec)}, got {_show(v)}")
    v = float(v)
    if not math.isfinite(v) or (spec.above is not None and not v > spec.above):
        raise ConfigError(f"{key} must be {_expect(spec)}, got {v!r}")
    return v


def _as_int(key, v, spec: Key) -> int:
    if isinstance(v, str) and v.strip().lstrip("+").isdigit() and len(v) < 20:
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"{key} must be {_expect(spec)}, got {_show(v)}")
    if (spec.above is not None and not v > spec.above) or v > MAX_INT:
        raise ConfigError(f"{key} must be {_expect(spec)}, got {_show(v)}")
    return v


def _expect(spec: Key) -> str:
    what = {"float": "a finite number", "int": "an integer", "str": "a string", "bool": "true or false"}[spec.kind]
    if spec.above is not None and math.isfinite(spec.above):
        what += f" > {spec.above:g}"
    if spec.kind == "int":
        what += f" and <= {MAX_INT}"
    return what + (" or null" if spec.nullable else "")


def _choices(spec: Key) -> str:
    return f" (one of {list(spec.choices)})" if spec.choices else ""


def _show(v) -> str:
    text = repr(v)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(v).__name__})"


# ---------------------------------------------------------------------------------------- detection
def detect_framework(raw: RawConfig) -> str:
    verl = sorted(k for k in raw.values if k.startswith(_VERL_PREFIXES))
    trl = sorted(k for k in raw.values if k in _TRL_MARKERS)
    if verl and trl:
        raise ConfigError(
            f"config {raw.name!r} mixes verl keys ({', '.join(verl[:3])}) and TRL GRPOConfig fields "
            f"({', '.join(trl[:3])}); pass --framework verl or --framework trl"
        )
    if verl:
        return "verl"
    if trl:
        return "trl"
    raise ConfigError(
        f"config {raw.name!r} has no verl keys (actor_rollout_ref.actor.*, data.*, algorithm.*) and no TRL "
        f"GRPOConfig fields (epsilon, num_iterations, loss_type, ...); got keys {sorted(raw.values)[:5]}"
    )


def clip_settings(raw: RawConfig, framework: str | None = None, num_processes: int = 1) -> ClipSettings:
    """The clip settings of a verl or TRL config (framework detected from the keys unless given)."""
    framework = framework or detect_framework(raw)
    present = {"verl": any(k.startswith(_VERL_PREFIXES) for k in raw.values),
               "trl": any(k in _TRL_MARKERS for k in raw.values)}
    if framework in present and not present[framework]:
        raise ConfigError(f"config {raw.name!r} has no {framework} settings to read "
                          f"(keys: {sorted(raw.values)[:5]}); is --framework right?")
    if framework == "verl":
        return _verl(raw.values)
    if framework == "trl":
        if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
            raise ConfigError(f"num_processes must be an integer >= 1, got {num_processes!r}")
        return _trl(raw.values, num_processes)
    raise ConfigError(f"framework must be 'verl' or 'trl', got {framework!r}")


# --------------------------------------------------------------------------------------------- verl
def _verl(values: dict) -> ClipSettings:
    keys: dict = {}
    g = {k: _typed(values, k, spec, keys) for k, spec in VERL_KEYS.items()}
    mode = g[_A + "policy_loss.loss_mode"]
    form, measure, level = _VERL_FORMS.get(mode, ("other", None, "token"))
    clip = g[_A + "clip_ratio"]
    low = g[_A + "clip_ratio_low"] if g[_A + "clip_ratio_low"] is not None else clip
    high = g[_A + "clip_ratio_high"] if g[_A + "clip_ratio_high"] is not None else clip
    c = g[_A + "clip_ratio_c"]
    train, mini, epochs = g["data.train_batch_size"], g[_A + "ppo_mini_batch_size"], g[_A + "ppo_epochs"]
    minibatches = max(1, math.ceil(train / mini))
    updates = epochs * minibatches
    s = ClipSettings(
        framework="verl",
        defaults_from=VERL_DEFAULTS_FROM,
        loss_mode=mode,
        form=form,
        measure=measure,
        level=level,
        budget_low=low if measure else None,
        budget_high=high if measure else None,
        dual_clip_c=c if mode == "vanilla" else None,
        tis_cap=c if form == "gated" else None,
        loss_agg_mode=g[_A + "loss_agg_mode"],
        epochs=epochs,
        minibatches=minibatches,
        updates_per_batch=updates,
        on_policy=updates == 1,
        on_policy_reason=(
            f"ppo_epochs={epochs} × {minibatches} mini-batch(es) (data.train_batch_size={train} / "
            f"ppo_mini_batch_size={mini}) = {updates} update(s) per rollout batch"
        ),
        group_size=g["actor_rollout_ref.rollout.n"],
        kl={
            "use_kl_loss": g[_A + "use_kl_loss"],
            "kl_loss_coef": g[_A + "kl_loss_coef"],
            "kl_loss_type": g[_A + "kl_loss_type"],
            "adv_estimator": g["algorithm.adv_estimator"],
        },
        keys=keys,
    )
    if form == "other":
        s.notes.append(f"loss_mode {mode!r} is reported but not analysed: divclip models vanilla, gspo, dppo_kl, "
                       "dppo_tv, cispo and sapo")
    return s


# ---------------------------------------------------------------------------------------------- TRL
def _trl(values: dict, num_processes: int) -> ClipSettings:
    keys: dict = {}
    g = {k: _typed(values, k, spec, keys) for k, spec in TRL_KEYS.items()}
    loss_type, level = g["loss_type"], g["importance_sampling_level"]
    eps = g["epsilon"]
    eps_high = g["epsilon_high"] if g["epsilon_high"] is not None else eps
    per_step = g["per_device_train_batch_size"] * num_processes
    gas, mu = g["gradient_accumulation_steps"], g["num_iterations"]
    steps = _trl_steps_per_generation(g, per_step)
    generate_every = steps * mu
    on_policy = gas % generate_every == 0
    if loss_type in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):
        form, measure, low, high, cap = "clip", "ratio", eps, eps_high, None
    elif loss_type == "cispo":
        # TRL's CISPO clamps the IS weight at epsilon_high itself (an absolute cap, ScaleRL's ε_max = 5).
        form, measure, low, cap = "cispo", "ratio", None, eps_high
        high = eps_high - 1.0 if eps_high > 1.0 else None
    elif loss_type == "sapo":
        form, measure, low, high, cap = "sapo", None, None, None, None
    else:
        form, measure, low, high, cap = "other", None, None, None, None
    s = ClipSettings(
        framework="trl",
        defaults_from=TRL_DEFAULTS_FROM,
        loss_mode=loss_type,
        form=form,
        measure=measure,
        level=level,
        budget_low=low,
        budget_high=high,
        cap=cap,
        dual_clip_c=g["delta"] if form == "clip" else None,
        loss_agg_mode=_TRL_AGG.get(loss_type),
        epochs=mu,
        minibatches=steps / gas,
        updates_per_batch=generate_every / gas,
        on_policy=on_policy,
        on_policy_reason=(
            f"num_iterations={mu} × steps_per_generation={steps} = {generate_every} micro-step(s) per generation, "
            f"gradient_accumulation_steps={gas}: TRL reuses a generation across optimizer steps only when "
            f"{gas} % {generate_every} != 0"
        ),
        group_size=g["num_generations"],
        kl={"beta": g["beta"]},
        keys=keys,
    )
    if num_processes == 1 and g["generation_batch_size"] is not None and g["steps_per_generation"] is None:
        s.notes.append("steps_per_generation derived from generation_batch_size assuming 1 process "
                       "(pass --num-processes for multi-GPU runs)")
    if form == "other":
        s.notes.append(f"loss_type {loss_type!r} is reported but not analysed (divclip models the clipped "
                       "losses grpo/bnpo/dr_grpo/dapo/luspo, cispo and sapo)")
    return s


def _trl_steps_per_generation(g: dict, per_step: int) -> int:
    """steps_per_generation exactly as GRPOConfig.__post_init__ derives it."""
    steps, gbs = g["steps_per_generation"], g["generation_batch_size"]
    if steps is not None:
        return steps  # a dumped GRPOConfig carries both fields after __post_init__: steps wins
    if gbs is None:
        return g["gradient_accumulation_steps"]
    if gbs % per_step != 0:
        raise ConfigError(
            f"generation_batch_size ({gbs}) must be divisible by the global batch size "
            f"per_device_train_batch_size × num_processes ({per_step}), as TRL {TRL_VERSION} requires"
        )
    return gbs // per_step
