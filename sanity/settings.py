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

from divclip.sanity import advice
from divclip.sanity.config import RawConfig, looks_like_float
from divclip.sanity.errors import ConfigError
from divclip.theory.conversions import delta_for_eps
from divclip.theory.measures import MEASURES, get_measure

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
    allow_inf: bool = False  # +inf is a meaningful value (clip_ratio_c = inf: no dual clip)


VERL_LOSS_MODES = (
    "vanilla", "gspo", "dppo_kl", "dppo_tv", "cispo", "sapo",
    "gpg", "clip_cov", "kl_cov", "geo_mean", "dro", "bypass_mode",
    *advice.VERL_MODES,  # divclip's plug-in (VERL_USE_EXTERNAL_MODULES=divclip.trainer.integrations.verl)
    "divclip_method",  # the plug-in's method-string mode ($DIVCLIP_METHOD): reported, not analysed
)
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")

VERL_KEYS: dict[str, Key] = {
    _A + "clip_ratio": Key("float", 0.2, above=0.0),
    _A + "clip_ratio_low": Key("float", 0.2, nullable=True, above=0.0),
    _A + "clip_ratio_high": Key("float", 0.2, nullable=True, above=0.0),
    _A + "clip_ratio_c": Key("float", 3.0, above=1.0, allow_inf=True),  # verl asserts c > 1; inf: no cap
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

# Read only by divclip's TRL plug-in, not TRL defaults: DivClipGRPOConfig's two fields. (The verl plug-in's
# DIVCLIP_DELTA is an environment variable, read where a command writes `DIVCLIP_DELTA=...` in front.)
DIVCLIP_TRL_KEYS: dict[str, Key] = {
    "clip_measure": Key("str", "ratio", choices=tuple(MEASURES)),
    "clip_delta": Key("float", None, nullable=True, above=0.0),
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
_TRL_MARKERS = set(TRL_KEYS) | set(DIVCLIP_TRL_KEYS) | {"max_completion_length", "use_vllm", "scale_rewards",
                                                        "num_generations_eval"}
_VERL_PREFIXES = ("actor_rollout_ref.", "algorithm.", "data.", "trainer.", "critic.", "reward_model.")

# verl loss_mode / TRL loss_type -> (loss form, measure, level); "other" forms are reported but not analysed.
_VERL_FORMS = {
    "vanilla": ("clip", "ratio", "token"),
    "gspo": ("clip", "ratio", "sequence"),
    "dppo_kl": ("gated", "binary_kl", "token"),
    "dppo_tv": ("gated", "binary_tv", "token"),
    "cispo": ("cispo", "ratio", "token"),
    "sapo": ("sapo", None, "token"),
    # divclip's modes: PPO's clip; _verl_divclip turns the budgets into the bounds the plug-in uses
    **{mode: ("clip", "ratio", "token") for mode in advice.VERL_MODES},
}
_TRL_AGG = {"grpo": "seq-mean-token-mean", "bnpo": "token-mean", "dapo": "token-mean",
            "dr_grpo": "seq-mean-token-sum-norm"}


@dataclass
class ClipSettings:
    """The clip-relevant part of one training config, with every value's origin."""

    framework: str  # "verl" | "trl"
    defaults_from: str
    loss_mode: str  # verl policy_loss.loss_mode or TRL loss_type, as written
    form: str  # "clip" (PPO) | "divclip" (PPO clip, per-token bounds) | "gated" (DPPO) | "cispo" | "sapo" | "other"
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
    # divclip's plug-ins: the divergence measure and budgets behind the clip (a p-independent one is reported as
    # its equivalent ratio widths in budget_low/high), and the clip itself as ratio bounds: [lo, hi], or for a
    # p-dependent measure a table [{p, lo, hi}]; None where the loss has no hard ratio clip.
    clip_measure: str | None = None
    delta_low: float | None = None
    delta_high: float | None = None
    ratio_bounds: list | None = None
    advice: list = field(default_factory=list)  # [advice.Advice]: warnings the plug-ins log at run time too

    def explicit(self, key: str) -> bool:
        return self.keys.get(key, {}).get("origin") == "set"

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("advice")
        return out


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
    if spec.allow_inf and v == math.inf:
        return v
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
    return what + (" or inf" if spec.allow_inf else "") + (" or null" if spec.nullable else "")


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
    c = None if c == math.inf else c  # min(-A·c, ·) with c = inf caps nothing: no dual clip / IS truncation
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
    if mode in advice.VERL_MODES:
        _verl_divclip(s, values, g, keys)
    elif form == "clip":
        s.ratio_bounds = [1.0 - low, 1.0 + high]
    elif form == "gated":
        s.ratio_bounds = advice.ratio_bounds(measure, low, high)
    if form == "other":
        s.notes.append(f"loss_mode {mode!r} is reported but not analysed: divclip models vanilla, gspo, dppo_kl, "
                       "dppo_tv, cispo, sapo and its own modes (atr_kl3, divclip_<measure>; divclip_method runs the "
                       "method string in $DIVCLIP_METHOD: `divclip realloc --measure` shows its bounds)")
    return s


def _verl_divclip(s: ClipSettings, values: dict, g: dict, keys: dict) -> None:
    """atr_kl3 / divclip_<m>: the bounds the verl plug-in computes, and the warnings it logs."""
    mode = s.loss_mode
    c = g[_A + "clip_ratio_c"]
    s.dual_clip_c = None if c == math.inf else c  # divclip's modes apply vanilla's dual clip
    low, high = s.budget_low, s.budget_high
    high_key = _A + "clip_ratio_high" if s.explicit(_A + "clip_ratio_high") else _A + "clip_ratio"
    if mode == advice.ATR_MODE and advice.PLUGIN_MODULE not in str(values.get(advice.PLUGIN_ENV, "")):
        s.notes.append(f"{mode} is registered by divclip's verl plug-in: the run needs "
                       f"{advice.PLUGIN_ENV}={advice.PLUGIN_MODULE} in its environment")
    if mode == advice.ATR_MODE:
        try:
            lo, hi, delta = advice.atr_kl3_bounds(low)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        s.clip_measure, s.delta_low, s.delta_high = "kl3", delta, delta
        s.budget_low, s.budget_high, s.ratio_bounds = 1.0 - lo, hi - 1.0, [lo, hi]
        if (s.explicit(_A + "clip_ratio_high") or s.explicit(_A + "clip_ratio")) and not math.isclose(
                high, hi - 1.0, rel_tol=1e-6):
            s.advice.append(advice.ignored_key_advice(
                mode, high_key, high, f"the upper bound is u_δ = {hi:.7g} from clip_ratio_low = {low:g} "
                f"(set clip_ratio_high = {hi - 1.0!r} to silence this)"))
        s.notes.append(f"atr_kl3: δ = KL3(1 - ε_low) = {delta:.6g}, r clipped to [{lo:.7g}, {hi:.7g}]")
        return
    name = mode[len("divclip_"):]
    if advice.PLUGIN_MODULE not in str(values.get(advice.PLUGIN_ENV, "")):
        s.notes.append(f"{mode} is registered by divclip's verl plug-in: the run needs "
                       f"{advice.PLUGIN_ENV}={advice.PLUGIN_MODULE} in its environment")
    env = values.get(advice.DELTA_ENV)  # "0.02" or "0.02,0.03": the override parser may have made it a number
    if env is not None:
        if isinstance(env, bool) or not isinstance(env, (str, int, float)):
            raise ConfigError(f"{advice.DELTA_ENV} must be a budget δ > 0 or 'δ_low,δ_high', got {env!r}")
        env = str(env)
    keys[advice.DELTA_ENV] = {"value": env, "origin": "set" if env is not None else "default"}
    budget_keys = (_A + "clip_ratio_low", _A + "clip_ratio_high")
    if env is not None and str(env).strip():
        try:
            d_low, d_high = advice.parse_delta(env)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        for key, v, d in ((budget_keys[0], low, d_low), (budget_keys[1], high, d_high)):
            if (s.explicit(key) or s.explicit(_A + "clip_ratio")) and v != d:
                s.advice.append(advice.ignored_key_advice(mode, key, v, f"δ comes from {advice.DELTA_ENV}={env}"))
        budget_keys = (advice.DELTA_ENV, advice.DELTA_ENV)
        from_env = True
    else:
        d_low, d_high, from_env = low, high, False
    s.clip_measure, s.delta_low, s.delta_high = name, d_low, d_high
    p_dependent = get_measure(name).p_dependent
    if name != "ratio":
        budgets = [(budget_keys[0], d_low)] + ([(budget_keys[1], d_high)] if d_high != d_low else [])
        found = advice.budget_advice(name, budgets, mode)
        if not from_env:
            found = [a if a.code != "divergence_budget_verl_default" else advice.Advice(
                a.code, a.message + f" The verl plug-in refuses it at run time unless {advice.DELTA_ENV} is set.",
                a.key) for a in found]
        s.advice += found
        s.advice += advice.cannot_bind_advice(name, d_low, d_high, mode, budget_keys)
    s.ratio_bounds = advice.ratio_bounds(name, d_low, d_high)
    if p_dependent:
        s.form, s.measure, s.budget_low, s.budget_high = "divclip", name, d_low, d_high
    else:
        lo, hi = s.ratio_bounds
        s.budget_low, s.budget_high = 1.0 - lo, hi - 1.0
    s.notes.append(f"{mode}: {name} budget δ_low = {d_low:.6g}, δ_high = {d_high:.6g} (from "
                   f"{advice.DELTA_ENV if from_env else 'clip_ratio_low/high'})")


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
    if form == "clip":
        _trl_divclip(s, values, g, keys, steps)
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


def _trl_divclip(s: ClipSettings, values: dict, g: dict, keys: dict, steps: int) -> None:
    """DivClipGRPOConfig's clip_measure / clip_delta (absent from a stock GRPOConfig: the ratio clip)."""
    d = {k: _typed(values, k, spec, keys) for k, spec in DIVCLIP_TRL_KEYS.items()}
    name, clip_delta = d["clip_measure"], d["clip_delta"]
    found = advice.trl_advice(name, clip_delta, g["epsilon"], g["epsilon_high"], g["num_iterations"], steps,
                              g["gradient_accumulation_steps"])
    s.advice += [a for a in found if a.code != "on_policy_clip_inert"]  # the on-policy check reports that
    if name == "ratio":
        if clip_delta is not None:
            raise ConfigError(f"clip_measure='ratio' uses epsilon/epsilon_high, so clip_delta must be None, "
                              f"got {clip_delta!r}")
        s.ratio_bounds = [1.0 - s.budget_low, 1.0 + s.budget_high]
        return
    m = get_measure(name)
    if clip_delta is None:
        if m.p_dependent:
            raise ConfigError(f"clip_measure={name!r} depends on p = π_old(a): give clip_delta explicitly, got "
                              "clip_delta=None")
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
    s.notes.append(f"clip_measure={name!r}: budget δ = {clip_delta:.6g}"
                   + (" (derived from epsilon as δ = D(1 - epsilon))" if d["clip_delta"] is None else ""))
