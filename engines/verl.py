"""verl 0.9.1: its clip keys and defaults, how divclip reads a verl config, and how it writes a method for verl.

Keys and defaults are those of the installed verl's merged config (`_generated_ppo_trainer.yaml`), checked by
tests/engines/test_verl.py; `known_keys.txt` is that file's every leaf key (a snapshot of the same file, for the
unknown-key warning: verl's own Hydra refuses a key it does not know).

What "updates per batch" means, because it decides whether any clip can bind (docs/theory.md §5): the train
batch is split into `ceil(train_batch_size / ppo_mini_batch_size)` mini-batches (both counted in prompts; verl
multiplies both by rollout.n) and swept `ppo_epochs` times. One update in total means the ratio is identically
1 when the loss is evaluated (verl #791, #1477).

Loss modes: `SPEC_FROM_MODE` maps a `policy_loss.loss_mode` to the ClipSpec it runs (a function of the typed
settings); `WRITERS` maps a ClipSpec form to the keys that run it. A form without a row is reported, not
modelled. divclip's own modes (`atr_kl3`, `divclip_<measure>`, `divclip_method`) need the plug-in `PLUGIN`,
loaded by verl from `VERL_USE_EXTERNAL_MODULES`.
"""

from __future__ import annotations

import functools
import json
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
    check_spec,
    example_keys,
    ignored_key_advice,
    loss_registered_elsewhere,
    loss_registrar,
    name_loss_terms,
    recipe_aggregation,
    typed,
    typed_values,
    unknown_keys,
    yaml_tree,
)
from divclip.engines.errors import ConfigError
from divclip.engines.pitfalls import Pitfall
from divclip.theory.agg_modes import ENGINE_AGG_MODES, LOSS_AGG_MODES, TRL_AGG_MODES
from divclip.theory.forms import get_form
from divclip.theory.forms._numpy import upper_delta
from divclip.theory.forms.cispo_cap import cispo_cap_as_cispo
from divclip.theory.measures import MEASURES, get_measure
from divclip.theory.spec import AllOf, ClipSpec, is_adaptive, method_string, parse_method

NAME = "verl"
VERSION = "0.9.1"
DEFAULTS_FROM = (
    f"verl {VERSION}: verl/trainer/config/_generated_ppo_trainer.yaml "
    "(actor/actor.yaml, rollout/rollout.yaml, data/legacy_data.yaml, ppo_trainer.yaml)"
)
FORMATS = ("overrides", "yaml", "python")
PLUGIN = "divclip.trainer.integrations.verl"
PLUGIN_ENV = "VERL_USE_EXTERNAL_MODULES"  # verl/__init__.py imports every module named in it
DELTA_ENV = "DIVCLIP_DELTA"  # divclip_<measure>'s budget: "δ" or "δ_low,δ_high"
METHOD_ENV = "DIVCLIP_METHOD"  # as divclip.trainer.integrations.verl_names (importable without torch)
METHOD_MODE = "divclip_method"
ATR_MODE = "atr_kl3"
DIVCLIP_MODES = (ATR_MODE, *(f"divclip_{m}" for m in MEASURES))
"""The loss modes the plug-in registers beside divclip_method: atr_kl3 (ε_low = clip_ratio_low, δ = KL3(1 - ε_low),
clip_ratio_high ignored) and divclip_<measure> (δ from DELTA_ENV, else δ_low/δ_high from clip_ratio_low/high)."""
DEFAULT_BUDGET = 0.2  # actor.yaml: clip_ratio, clip_ratio_low and clip_ratio_high
DEFAULT_WIDTH = (DEFAULT_BUDGET, "verl's clip_ratio and GRPO's ε")  # advice.budget_advice's `default`

A = "actor_rollout_ref.actor."
PL = A + "policy_loss."
RC = "algorithm.rollout_correction."  # verl's trainer copies it into policy_loss when bypass_mode is true
PREFIXES = ("actor_rollout_ref.", "algorithm.", "data.", "trainer.", "critic.", "reward_model.")

LOSS_MODES = (
    "vanilla",
    "gspo",
    "dppo_kl",
    "dppo_tv",
    "cispo",
    "sapo",
    "gpg",
    "clip_cov",
    "kl_cov",
    "geo_mean",
    "dro",
    "bypass_mode",
    *DIVCLIP_MODES,  # divclip's plug-in (PLUGIN_ENV=PLUGIN)
    METHOD_MODE,  # the plug-in's method-string mode ($DIVCLIP_METHOD)
)

KEYS: dict[str, Key] = {
    A + "clip_ratio": Key("float", 0.2, above=0.0, doc="ratio clip width ε, where clip_ratio_low/high are null"),
    A + "clip_ratio_low": Key("float", 0.2, nullable=True, above=0.0, doc="ε_low: r >= 1 - ε_low (dppo_*: δ)"),
    A + "clip_ratio_high": Key("float", 0.2, nullable=True, above=0.0, doc="ε_high: r <= 1 + ε_high (dppo_*: δ)"),
    A + "clip_ratio_c": Key(
        "float",
        3.0,
        above=1.0,
        allow_inf=True,  # verl asserts c > 1; inf: no cap
        doc="vanilla: dual-clip cap c for A < 0; dppo_*: IS-weight truncation",
    ),
    A + "policy_loss.loss_mode": Key("str", "vanilla", choices=LOSS_MODES, doc="the policy loss"),
    A + "loss_agg_mode": Key("str", "token-mean", choices=LOSS_AGG_MODES, doc="how token losses are averaged"),
    PL + "clip_cov_ratio": Key("float", 0.0002, above=0.0, doc="clip_cov: share of tokens whose gradient is removed"),
    PL + "clip_cov_lb": Key("float", 1.0, doc="clip_cov: the covariance window's lower bound"),
    PL + "clip_cov_ub": Key("float", 5.0, doc="clip_cov: the covariance window's upper bound"),
    PL + "kl_cov_ratio": Key("float", 0.0002, above=0.0, doc="kl_cov: share of tokens that get the |log r| penalty"),
    PL + "ppo_kl_coef": Key("float", 0.1, doc="kl_cov: the penalty's coefficient κ"),
    PL + "dro_beta": Key("float", None, nullable=True, above=0.0, doc="dro: β of ½β·(log r)²; verl requires it"),
    RC + "bypass_mode": Key("bool", False, doc="old_log_prob = rollout_log_prob; verl then runs loss_mode bypass_mode"),
    RC + "loss_type": Key(
        "str", "ppo_clip", choices=("ppo_clip", "reinforce"), doc="bypass_mode: PPO clip or REINFORCE with IS weights"
    ),
    RC + "rollout_is": Key(
        "str",
        None,
        nullable=True,
        choices=("token", "sequence"),
        doc="IS weight per token or per sequence (null: none)",
    ),
    RC + "rollout_is_batch_normalize": Key("bool", False, doc="divide the IS weights by their batch mean"),
    RC + "rollout_rs": Key("str", None, nullable=True, doc="rejection sampling by the rollout ratio (not modelled)"),
    A + "tau_pos": Key("float", 1.0, above=0.0, doc="sapo: gate temperature for A > 0"),
    A + "tau_neg": Key("float", 1.05, above=0.0, doc="sapo: gate temperature for A <= 0"),
    A + "ppo_epochs": Key("int", 1, above=0, doc="passes over one rollout batch"),
    A + "ppo_mini_batch_size": Key("int", 256, above=0, doc="prompts per optimizer update"),
    A + "use_kl_loss": Key("bool", False, doc="KL to the reference policy as a loss term"),
    A + "kl_loss_coef": Key("float", 0.001, above=-math.inf, doc="its coefficient"),
    A + "kl_loss_type": Key("str", "low_var_kl", doc="its estimator"),
    A + "entropy_coeff": Key("float", 0, above=-math.inf, doc="entropy bonus: the loss less entropy_coeff·H"),
    "algorithm.use_kl_in_reward": Key("bool", False, doc="KL penalty in the reward"),
    "algorithm.kl_penalty": Key("str", "kl", doc="its estimator"),
    "algorithm.kl_ctrl.kl_coef": Key("float", 0.001, above=-math.inf, doc="its (initial) coefficient"),
    "actor_rollout_ref.rollout.n": Key("int", 1, above=0, doc="responses per prompt (group size)"),
    "data.train_batch_size": Key("int", 1024, above=0, doc="prompts per rollout batch"),
    "algorithm.adv_estimator": Key(
        "str", "gae", nullable=True, doc="advantage estimator (grpo, gae, ...); null: a recipe's trainer forms its own"
    ),
}

ROLES = {
    "eps": A + "clip_ratio",
    "eps_low": A + "clip_ratio_low",
    "eps_high": A + "clip_ratio_high",
    "dual_clip": A + "clip_ratio_c",
    "tis_cap": A + "clip_ratio_c",
    "epochs": A + "ppo_epochs",
    "mini_batch": A + "ppo_mini_batch_size",
    "train_batch": "data.train_batch_size",
}
"""{role: key}: the keys the sanity checks name (see EngineRead.roles)."""
KNOWN_KEYS_FROM = (
    f"verl {VERSION} trainer/config/_generated_ppo_trainer.yaml: every leaf key (verl's Hydra "
    "refuses any other unless it is added with +key=)"
)

_DPPO = {"dppo_kl": "binary_kl", "dppo_tv": "binary_tv"}
# loss_mode -> (loss form, measure, level) as the sanity checks read it; "other" forms are reported only.
FORMS = {
    "vanilla": ("clip", "ratio", "token"),
    "gspo": ("clip", "ratio", "sequence"),
    "dppo_kl": ("gated", "binary_kl", "token"),
    "dppo_tv": ("gated", "binary_tv", "token"),
    "cispo": ("cispo", "ratio", "token"),
    "sapo": ("sapo", None, "token"),
    "clip_cov": ("clip", "ratio", "token"),  # PPO's clip, and a few high-covariance tokens lose their gradient
    # divclip's modes: PPO's clip; _divclip turns the budgets into the bounds the plug-in uses
    **{mode: ("clip", "ratio", "token") for mode in DIVCLIP_MODES},
}


# ------------------------------------------------------------------------------------------ known keys
KNOWN_KEYS_FILE = Path(__file__).with_name(f"verl_{VERSION}_keys.txt")


@functools.lru_cache(maxsize=1)
def known_keys() -> frozenset:
    """Every leaf key of verl's merged config (an empty mapping or null leaf may take keys below it)."""
    lines = KNOWN_KEYS_FILE.read_text().splitlines()
    return frozenset(ln for ln in lines if ln and not ln.startswith("#"))


def known_keys_from(generated_yaml: str) -> set:
    """The leaf keys of a `_generated_ppo_trainer.yaml` text (what `known_keys` is a snapshot of)."""
    import yaml

    out: set = set()

    def walk(node, prefix):
        for k, v in node.items():
            if isinstance(v, dict) and v:
                walk(v, f"{prefix}{k}.")
            else:
                out.add(f"{prefix}{k}")

    walk(yaml.safe_load(generated_yaml), "")
    return out


# verl keys of other versions: OTHER_VERSIONS_FILE lists the leaf keys of earlier verl releases' trainer configs
# (ppo_trainer and ppo_megatron_trainer, `git show <tag>:verl/trainer/config/_generated_<name>.yaml`, ppo_trainer.yaml
# itself for 0.4.1) that no trainer config of verl VERSION accepts, each with the versions that have it.
OTHER_VERSIONS = ("0.4.1", "0.5.0", "0.6.0", "0.6.1", "0.7.0", "0.8.0.dev")
"""The releases OTHER_VERSIONS_FILE was read from (0.8.0.dev: volcengine/verl b178a3cd, the corpus's examples)."""
OTHER_VERSIONS_FILE = Path(__file__).with_name(f"verl_{VERSION}_other_versions_keys.txt")


def other_versions_lines(configs: Mapping, recipes: Mapping | None = None) -> list[str]:
    """The lines of OTHER_VERSIONS_FILE: `key version ...` for every leaf key of {version: [config yaml texts]}
    that no trainer config of verl VERSION (TRAINER_CONFIGS) accepts, in key order; then `MODULE:key version ...`
    for every own key of a recipe's hydra config ({version: {recipe module: its config text}}, verl's recipe/ up
    to 0.7.0) that neither those configs nor the recipe's config now (EXAMPLE_KEYS_FILE) accept."""
    now = frozenset().union(*(config_keys(name) for name in TRAINER_CONFIGS))
    found: dict = {}

    def add(name: str, version: str) -> None:
        if version not in found.setdefault(name, []):
            found[name].append(version)

    for version, texts in configs.items():
        for text in texts:
            for key in known_keys_from(text):
                if not is_known(key, now):
                    add(key, version)
    plain = sorted(found)
    for version, by_module in (recipes or {}).items():
        for module, text in by_module.items():
            for key in recipe_keys_from(text)[1]:
                if not is_known(key, now | example_keys(NAME, module)):
                    add(f"{module}:{key}", version)
    return [f"{key} {' '.join(found[key])}" for key in plain + sorted(set(found) - set(plain))]


@functools.lru_cache(maxsize=1)
def _other_versions() -> dict:
    out = {}
    for line in OTHER_VERSIONS_FILE.read_text().splitlines():
        if line and not line.startswith("#"):
            key, *versions = line.split()
            out[key] = tuple(versions)
    return out


def _span(versions: tuple) -> str:
    order = [OTHER_VERSIONS.index(v) for v in versions]
    if len(versions) > 2 and order == list(range(order[0], order[-1] + 1)):
        return f"{versions[0]} to {versions[-1]}"
    return ", ".join(versions)


def key_origin(key: str, entry: str | None = None) -> str | None:
    """Which earlier verl releases had `key` (or a key it sits below) in their trainer configs, or, for a launch of
    the recipe `entry`, in that recipe's own config then; said as the unknown-key warning says it."""
    parts = key.split(".")
    table = _other_versions()
    prefixes = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
    hit = next((p for p in prefixes if p in table), None)
    if hit is not None:
        return f"not a key of verl {VERSION}: verl {_span(table[hit])} had it"
    hit = next((f"{entry}:{p}" for p in prefixes if entry and f"{entry}:{p}" in table), None)
    if hit is not None:
        return f"{entry}'s config in verl {_span(table[hit])} (verl's recipe/ then) had it"
    return None


def recipe_keys_from(recipe_yaml: str) -> tuple[str, list[str]]:
    """(the packaged config a verl recipe's hydra config builds on, its own leaf keys that config lacks): what
    EXAMPLE_KEYS_FILE lists for `python -m recipe.<name>.main_<x>` (a recipe's `@hydra.main(config_name=...)`)."""
    import yaml

    tree = yaml.safe_load(recipe_yaml) or {}
    bases = [d for d in tree.get("defaults", []) if isinstance(d, str) and d != "_self_"]
    base = bases[0] if bases and bases[0] in TRAINER_CONFIGS else "ppo_trainer"
    body = {k: v for k, v in tree.items() if k not in ("defaults", "hydra")}
    own = known_keys_from(yaml.safe_dump(body)) if body else set()
    return base, sorted(k for k in own if not is_known(k, config_keys(base)))


HYDRA_FLAGS = frozenset(
    "--help -h --hydra-help --version --cfg -c --resolve --package -p --run -r --multirun -m --shell-completion -sc "
    "--config-path -cp --config-name -cn --config-dir -cd --experimental-rerun --info -i".split()
)
"""The flags of verl's entry point, a hydra app (hydra/_internal/utils.py get_args_parser): any other dashed flag
is refused by its argparse ("unrecognized arguments")."""


# verl's packaged trainer configs beside ppo_trainer (`--config-name ppo_megatron_trainer`): each one's leaf keys as
# a difference from ppo_trainer's ("NAME +key" / "NAME -key" lines), a snapshot of their _generated_*.yaml that
# tests/engines/test_verl_config_names.py checks against the installed verl. Their defaults of KEYS are ppo_trainer's.
TRAINER_CONFIGS = ("ppo_trainer", "ppo_megatron_trainer", "ppo_torchtitan_trainer", "ppo_veomni_trainer")
TRAINER_CONFIGS_FILE = Path(__file__).with_name(f"verl_{VERSION}_trainer_configs.txt")
CONFIG_NAME_FLAGS = ("--config-name", "-cn")


@functools.lru_cache(maxsize=len(TRAINER_CONFIGS))
def config_keys(name: str) -> frozenset:
    """The leaf keys of one of verl's packaged trainer configs (`TRAINER_CONFIGS`)."""
    if name == "ppo_trainer":
        return known_keys()
    plus, minus = set(), set()
    for line in TRAINER_CONFIGS_FILE.read_text().splitlines():
        if line and not line.startswith("#") and line.split()[0] == name:
            key = line.split()[1]
            (plus if key[0] == "+" else minus).add(key[1:])
    return frozenset((known_keys() - minus) | plus)


def config_name(settings: Mapping) -> str | None:
    """The `--config-name` a launch gives verl's entry point (its `.yaml` suffix dropped), or None."""
    for flag in CONFIG_NAME_FLAGS:
        value = settings.get(flag)
        if isinstance(value, str) and value:
            return value.strip("'\"").removesuffix(".yaml")
    return None


FULLY_ASYNC_ENTRY = "verl.experimental.fully_async_policy.fully_async_main"
ONE_STEP_OFF_ENTRY = "verl.experimental.one_step_off_policy.main_ppo"
ASYNC_ENTRIES = {FULLY_ASYNC_ENTRY: "fully_async_ppo_trainer", ONE_STEP_OFF_ENTRY: "one_step_off_ppo_trainer"}
"""verl's asynchronous entry points and the config each one's `@hydra.main` names by default."""
FULLY_ASYNC_FILE = Path(__file__).with_name(f"verl_{VERSION}_async_configs.txt")
FULLY_ASYNC_SOURCE = f"verl {VERSION} experimental/fully_async_policy/fully_async_trainer.py"


@functools.cache
def fully_async_configs() -> dict:
    """{NAME: (its base trainer config, {leaf key: the value NAME sets})} of verl's asynchronous trainers' configs,
    fully async and one step off-policy (FULLY_ASYNC_FILE, a snapshot of verl/experimental/*/config/NAME.yaml)."""
    out: dict = {}
    for line in FULLY_ASYNC_FILE.read_text().splitlines():
        if line and not line.startswith("#"):
            name, base, key, value = line.split(" ", 3)
            out.setdefault(name, (base, {}))[1][key] = json.loads(value)
    return out


def _fully_async(settings: Mapping, entry: str | None) -> str | None:
    """The asynchronous trainer's config a launch runs: its --config-name when it is one, else the entry point's
    own default (`@hydra.main(config_name="fully_async_ppo_trainer")`, ASYNC_ENTRIES); None otherwise."""
    name = config_name(settings)
    if name in fully_async_configs():
        return name
    return ASYNC_ENTRIES.get(entry) if name is None else None


def _config_tree(settings: Mapping, asynchronous: str | None = None) -> tuple[frozenset, str]:
    """(the keys verl's config accepts for this launch, a note): a packaged --config-name's keys (`asynchronous`:
    the fully async config a launch of fully_async_main runs, its --config-name or its default), else
    ppo_trainer's."""
    name = asynchronous or config_name(settings)
    if name in fully_async_configs():
        base, own = fully_async_configs()[name]
        entry = next((e for e, n in ASYNC_ENTRIES.items() if name.startswith(n.removesuffix("ppo_trainer"))), "")
        named = f"--config-name {name}" if config_name(settings) else f"{entry}'s default config {name}"
        return config_keys(base) | frozenset(own), (
            f"{named}: verl {VERSION}'s {_async_kind(name)} trainer config on {base}; keys checked against "
            f"both, and its defaults of the settings read here are its own where it sets them, else {base}'s"
        )
    if name is None or name == "ppo_trainer":
        return known_keys(), ""
    if name in TRAINER_CONFIGS:
        return config_keys(name), (
            f"--config-name {name}: keys checked against verl {VERSION}'s {name} (_generated_{name}.yaml); "
            "its defaults of the settings read here are ppo_trainer's"
        )
    path = settings.get("--config-path") or settings.get("-cp")
    where = f" in --config-path {path}" if isinstance(path, str) else ""
    return known_keys(), (
        f"--config-name {name} is the example's own config{where}, not one verl {VERSION} packages: divclip has not "
        "read it, so its defaults are taken as ppo_trainer's and a key it adds may be named as unknown"
    )


def is_known(key: str, known: frozenset | None = None) -> bool:
    """A key verl's Hydra accepts: a leaf of its config (`known`: ppo_trainer's unless a --config-name picks another),
    or a key below an open (empty/null) leaf, or one of hydra's own options (`--config-name`, `hydra.*`)."""
    known = known_keys() if known is None else known
    if key in known or key in HYDRA_FLAGS or key.startswith("hydra."):
        return True
    parts = key.split(".")
    return any(".".join(parts[:i]) in known for i in range(1, len(parts)))


def detect(settings: Mapping) -> float:
    """A score of how much the settings look like verl's: 1 per key of verl's config, 0.5 per other key under
    one of its sections (a misspelling; another hydra engine's `trainer.*` keys score higher there)."""
    score = 0.0
    for k in settings:
        if isinstance(k, str) and k.startswith(PREFIXES):
            score += 1.0 if is_known(k) else 0.5
    return score


# ------------------------------------------------------------------------------------------------ read
def read(settings: Mapping, *, entry: str | None = None, **_options) -> EngineRead:
    """The clip settings of a flat verl config ({dotted key or ENV_VAR: value}); `entry`, the module the launch
    runs, adds a recipe's own keys (`python -m recipe.entropy.main_entropy`: example_keys.txt). A loss_mode none
    of verl's is refused, as verl's own main_ppo refuses it, unless something else may register it: the launched
    module is not verl's (a recipe's main: `recipe.gvpo.gvpo_main_ppo` registers "gvpo") or PLUGIN_ENV names
    modules; then the loss is read as not modelled, and a warning says so (`loss_registered_elsewhere`)."""
    own = settings.get(A + "policy_loss.loss_mode")
    plugins = str(settings.get(PLUGIN_ENV) or "").strip()
    registrar = loss_registrar(own, LOSS_MODES, entry, "verl.", plugins and f"{PLUGIN_ENV} names ({plugins})")
    if registrar is not None:  # typed as verl's default, then put back: the loss is the registrar's
        settings = {k: v for k, v in settings.items() if k != A + "policy_loss.loss_mode"}
    asynchronous = _fully_async(settings, entry)
    async_defaults: dict = {}
    if asynchronous is not None:  # the config's own defaults (bypass_mode: true among them), then the launch's
        own_keys = fully_async_configs()[asynchronous][1]
        async_defaults = {k: v for k, v in own_keys.items() if k in KEYS and k not in settings}
        # data.train_batch_size is not read by the fully async trainer (its recipes set it to 0): kept out of the typing
        train_written = settings.get("data.train_batch_size")
        fully = _async_kind(asynchronous) == "fully async"
        settings = {
            **async_defaults,
            **{k: v for k, v in settings.items() if k != "data.train_batch_size" or not fully},
        }
    g, keys = typed_values(settings, KEYS)
    for key in async_defaults:
        keys[key]["origin"] = "default"
    if registrar is not None:
        g[A + "policy_loss.loss_mode"] = own
        keys[A + "policy_loss.loss_mode"] = {"value": own, "origin": "set"}
    mode = "bypass_mode" if g[RC + "bypass_mode"] else g[A + "policy_loss.loss_mode"]  # apply_bypass_mode sets it
    runs = "vanilla" if mode == "bypass_mode" and g[RC + "loss_type"] == "ppo_clip" else mode  # what the loss is
    form, measure, level = FORMS.get(runs, ("other", None, "token"))
    clip = g[A + "clip_ratio"]
    low = g[A + "clip_ratio_low"] if g[A + "clip_ratio_low"] is not None else clip
    high = g[A + "clip_ratio_high"] if g[A + "clip_ratio_high"] is not None else clip
    c = g[A + "clip_ratio_c"]
    c = None if c == math.inf else c  # min(-A·c, ·) with c = inf caps nothing: no dual clip / IS truncation
    train, mini, epochs = g["data.train_batch_size"], g[A + "ppo_mini_batch_size"], g[A + "ppo_epochs"]
    known, config_note = _config_tree(settings, asynchronous)
    recipe = example_keys(NAME, entry)
    if recipe:
        known = known | recipe
        config_note = (config_note + "; " if config_note else "") + (
            f"{entry}: keys checked against verl {VERSION}'s packaged config and the recipe's own hydra config "
            "(divclip.engines example_keys.txt); its defaults of the settings read here are ppo_trainer's"
        )
    minibatches = max(1, math.ceil(train / mini))
    updates = epochs * minibatches
    s = EngineRead(
        engine=NAME,
        defaults_from=DEFAULTS_FROM,
        loss_mode=mode,
        form=form,
        measure=measure,
        level=level,
        budget_low=low if measure else None,
        budget_high=high if measure else None,
        dual_clip_c=c if runs == "vanilla" else None,
        tis_cap=c if form == "gated" else None,
        loss_agg_mode=g[A + "loss_agg_mode"],
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
            "use_kl_loss": g[A + "use_kl_loss"],
            "kl_loss_coef": g[A + "kl_loss_coef"],
            "kl_loss_type": g[A + "kl_loss_type"],
            "adv_estimator": g["algorithm.adv_estimator"],
        },
        keys=keys,
        unknown_keys=unknown_keys(settings, lambda k: is_known(k, known), known),
        roles=ROLES,
        on_policy_fix="ppo_epochs > 1 or ppo_mini_batch_size < train_batch_size",
    )
    if asynchronous is not None:
        if fully:
            _fully_async_schedule(s, settings, asynchronous, epochs, mini, train_written)
        elif s.keys[RC + "bypass_mode"]["value"]:
            s.on_policy = False
            s.on_policy_reason = (
                f"verl's one step off-policy trainer ({asynchronous}): rollouts come from the previous step's "
                "parameters, and with rollout_correction.bypass_mode "
                f"({'set' if s.keys[RC + 'bypass_mode']['origin'] == 'set' else 'the config default'}) π_old is their "
                "log-probs: "
                f"the ratio is not 1 even at the first update; {s.on_policy_reason}"
            )
    if config_note:
        s.notes.append(config_note)
    if mode == "sapo" and s.loss_agg_mode != "seq-mean-token-mean":
        s.notes.append(
            f"verl {VERSION}'s sapo aggregates seq-mean-token-mean whatever loss_agg_mode says ({s.loss_agg_mode})"
        )
        s.loss_agg_mode = "seq-mean-token-mean"
    if mode == "geo_mean":
        s.notes.append(
            f"verl {VERSION}'s geo_mean averages one loss per sequence over all rows whatever "
            f"loss_agg_mode says ({s.loss_agg_mode}); divclip's geo_mean does the same"
        )
    if mode in DIVCLIP_MODES:
        _divclip(s, settings, g, keys)
    elif form == "clip":
        s.ratio_bounds = [1.0 - low, 1.0 + high]
    elif form == "gated":
        s.ratio_bounds = advice.ratio_bounds(measure, low, high)
    _read_spec(s, settings, g, keys)
    name_loss_terms(s, loss_terms(g))
    s.advice = [*pitfalls(s), *map(_cited, s.advice)]  # the pitfalls first, as `divclip check` has listed them
    if registrar is not None and mode == own:
        s.advice.append(
            loss_registered_elsewhere(
                NAME,
                VERSION,
                A + "policy_loss.loss_mode",
                own,
                registrar + " (@register_policy_loss)",
                [m for m in LOSS_MODES if m not in DIVCLIP_MODES and m != METHOD_MODE],
                f"verl {VERSION} trainer/ppo/core_algos.py get_policy_loss_fn (POLICY_LOSS_REGISTRY)",
            )
        )
    s.advice += ignored_key_advice(s, IGNORED_BY_LOSS, f"verl {VERSION} core_algos.compute_policy_loss_{s.loss_mode}")
    return s


def _async_kind(name: str) -> str:
    return "one step off-policy" if name.startswith("one_step_off") else "fully async"


def _fully_async_schedule(s: EngineRead, settings: Mapping, name: str, epochs: int, mini: int, train) -> None:
    """verl's fully async trainer: each step trains on ppo_mini_batch_size × require_batches prompts (data.
    train_batch_size is not read), trigger_parameter_sync_step steps per parameter sync. With bypass_mode (the
    fully async configs' default) π_old is the rollout's log-probs, from a policy up to staleness_threshold old: the
    ratio is never identically 1; without it π_old is recomputed with the sync cycle's first parameters
    (FullyAsyncTrainer._compute_old_log_prob), so only the cycle's first step can see a ratio of 1."""
    own = fully_async_configs()[name][1]
    spec = {"trigger_parameter_sync_step": Key("int", None, above=0), "require_batches": Key("int", None, above=0)}
    found = {}
    for field, key in spec.items():
        full = "async_training." + field
        value = typed(settings, full, replace(key, default=own[full]), {})
        found[field] = value
        s.keys[full] = {"value": value, "origin": "set" if full in settings else "default"}
    trigger, batches = found["trigger_parameter_sync_step"], found["require_batches"]
    s.minibatches, s.updates_per_batch = batches, epochs * batches
    bypass = s.keys[RC + "bypass_mode"]["value"]
    steps = f"ppo_epochs={epochs} × require_batches={batches} mini-batch(es) of ppo_mini_batch_size={mini}"
    if bypass:
        s.on_policy = False
        s.on_policy_reason = (
            f"verl's fully async trainer ({name}): {steps} per step, and with rollout_correction.bypass_mode "
            f"({'set' if s.keys[RC + 'bypass_mode']['origin'] == 'set' else 'the config default'}) π_old is the "
            "rollout's log-probs, from a policy up to async_training.staleness_threshold old: the ratio is not 1 "
            f"even at the first update ({FULLY_ASYNC_SOURCE})"
        )
    else:
        s.on_policy = s.updates_per_batch == 1 and trigger == 1
        s.on_policy_reason = (
            f"verl's fully async trainer ({name}): {steps} per step, trigger_parameter_sync_step={trigger} steps per "
            "parameter sync, π_old recomputed with the sync cycle's first parameters "
            f"({FULLY_ASYNC_SOURCE} _compute_old_log_prob)"
        )
    s.on_policy_fix = "require_batches > 1, ppo_epochs > 1 or trigger_parameter_sync_step > 1"
    s.keys["data.train_batch_size"] = {
        "value": train if train is not None else s.keys["data.train_batch_size"]["value"],
        "origin": ("set" if train is not None else "default") + ", not read by the fully async trainer",
    }


def loss_terms(g: dict) -> list[tuple[str, str]]:
    """verl's terms beside the policy loss (workers/utils/losses.py ppo_loss; the reward KL in ray_trainer)."""
    out = []
    if g[A + "entropy_coeff"]:
        out.append(
            (f"{A}entropy_coeff = {g[A + 'entropy_coeff']:g}", "an entropy bonus, the actor loss less entropy_coeff·H")
        )
    if g[A + "use_kl_loss"]:
        out.append(
            (
                f"{A}use_kl_loss = true, kl_loss_coef = {g[A + 'kl_loss_coef']:g}, "
                f"kl_loss_type = {g[A + 'kl_loss_type']}",
                "a KL-to-reference term added to the actor loss",
            )
        )
    if g["algorithm.use_kl_in_reward"]:
        out.append(
            (
                f"algorithm.use_kl_in_reward = true, kl_penalty = {g['algorithm.kl_penalty']}, "
                f"kl_ctrl.kl_coef = {g['algorithm.kl_ctrl.kl_coef']:g}",
                "a KL penalty subtracted from the reward before the advantages",
            )
        )
    return out


_WIDTHS = (A + "clip_ratio", A + "clip_ratio_low", A + "clip_ratio_high")
IGNORED_BY_LOSS = {"sapo": (*_WIDTHS, A + "clip_ratio_c"), "gspo": (A + "clip_ratio_c",)}
"""Keys a verl loss_mode never reads (compute_policy_loss_sapo takes tau_pos/tau_neg only; gspo has no dual clip)."""


def _read_spec(s: EngineRead, settings, g: dict, keys: dict) -> None:
    mode = s.loss_mode
    if mode not in SPEC_FROM_MODE:
        s.notes.append(
            f"loss_mode {mode!r} is reported but not modelled yet: divclip reads "
            f"{', '.join(SPEC_FROM_MODE)} (`divclip realloc --measure` shows a divclip method's bounds)"
        )
        return
    try:
        s.spec = SPEC_FROM_MODE[mode](s, settings, g, keys)
    except ValueError as exc:  # a setting the ClipSpec cannot hold (δ_low != δ_high for one measure, ...)
        if isinstance(exc, ConfigError):
            raise
        s.notes.append(f"loss_mode {mode!r}: no divclip method says this exactly: {exc}")


# --------------------------------------------------------------------------- loss_mode -> ClipSpec
def _vanilla(s, settings, g, keys):
    return ClipSpec("ratio", eps_low=s.budget_low, eps_high=s.budget_high, params={"dual_clip_c": s.dual_clip_c})


def _gspo(s, settings, g, keys):
    return ClipSpec("ratio", eps_low=s.budget_low, eps_high=s.budget_high, level="sequence")


def _dppo_spec(s, settings, g, keys):
    # δ_high where clip_ratio_high differs; verl's own gate arithmetic (its +1e-8, prob <= old_prob), so that
    # every decision is verl's (divclip.theory.forms.gated)
    params = {"gate": "verl", **({"delta_high": s.budget_high} if s.budget_high != s.budget_low else {})}
    return ClipSpec(s.measure, delta=s.budget_low, form="gated", params={**dict(params), "tis_cap": s.tis_cap})


def _cispo(s, settings, g, keys):
    return ClipSpec("ratio", eps_low=s.budget_low, eps_high=s.budget_high, form="cispo")


def _sapo(s, settings, g, keys):
    # verl's sapo aggregates seq-mean-token-mean whatever loss_agg_mode says: the spec does too (sapo_seq_mean)
    return ClipSpec(
        form="sapo", params={"sapo_seq_mean": True, "tau_pos": g[A + "tau_pos"], "tau_neg": g[A + "tau_neg"]}
    )


def _divclip_spec(s, settings, g, keys):
    if s.delta_low == s.delta_high:
        if s.clip_measure == "ratio":
            return ClipSpec("ratio", eps_low=s.delta_low, eps_high=s.delta_high, params={"dual_clip_c": s.dual_clip_c})
        return ClipSpec(s.clip_measure, delta=s.delta_low, params={"dual_clip_c": s.dual_clip_c})
    raise ValueError(f"δ_low = {s.delta_low:g} and δ_high = {s.delta_high:g}: a divclip spec has one δ per measure")


def _method(s, settings, g, keys):
    text = settings.get(METHOD_ENV)
    keys[METHOD_ENV] = {"value": text, "origin": "set" if text is not None else "default"}
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(
            f"loss_mode {METHOD_MODE} runs the method string in {METHOD_ENV}, which the config does "
            f"not set (got {text!r}): set {METHOD_ENV}='kl3:0.02' (a divclip method string)"
        )
    try:
        spec = parse_method(text)
    except ValueError as exc:
        raise ConfigError(f"{METHOD_ENV}: {exc}") from None
    s.notes.append(f"{METHOD_MODE} runs {METHOD_ENV}={text!r}; verl's clip_ratio* keys are ignored")
    return spec


def _params(form_name: str, values: dict) -> dict:
    """The form's parameters that differ from its defaults (so the method string names only those)."""
    form = get_form(form_name)
    return {name: v for name, v in values.items() if v != form.param(name).default}


def _gpg(s, settings, g, keys):
    return ClipSpec(form="gpg")


def _dro(s, settings, g, keys):
    beta = g[PL + "dro_beta"]
    if beta is None:
        raise ConfigError(
            f"loss_mode dro needs {PL}dro_beta > 0 (verl {VERSION} has no default and raises without one)"
        )
    return ClipSpec(form="dro", params=_params("dro", {"dro_beta": beta}))


def _clip_cov(s, settings, g, keys):
    params = {name: g[PL + name] for name in ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub")}
    return ClipSpec(
        "ratio", eps_low=s.budget_low, eps_high=s.budget_high, form="clip_cov", params=_params("clip_cov", params)
    )


def _kl_cov(s, settings, g, keys):
    return ClipSpec(
        form="kl_cov",
        params=_params("kl_cov", {"kl_cov_ratio": g[PL + "kl_cov_ratio"], "kl_cov_coef": g[PL + "ppo_kl_coef"]}),
    )


def _geo_mean(s, settings, g, keys):
    """GMPO clips log r to [−clip_ratio_low, clip_ratio_high]: verl's widths are log-space widths here."""
    clip = g[A + "clip_ratio"]
    low = g[A + "clip_ratio_low"] if g[A + "clip_ratio_low"] is not None else clip
    high = g[A + "clip_ratio_high"] if g[A + "clip_ratio_high"] is not None else clip
    return ClipSpec(form="geo_mean", params=_params("geo_mean", {"gmpo_eps_low": low, "gmpo_eps_high": high}))


def _bypass(s, settings, g, keys):
    """bypass_mode: loss_type ppo_clip is vanilla on the rollout log-probs (its IS weights feed metrics only);
    reinforce is −A·log π, weighted by the truncated rollout IS weight when rollout_is is set."""
    if g[RC + "rollout_rs"] is not None and g[RC + "loss_type"] != "ppo_clip":
        raise ValueError(
            f"{RC}rollout_rs={g[RC + 'rollout_rs']!r} with loss_type reinforce: divclip models the rejection as a "
            "rollout correction (divclip.engines.read_correction) beside a ppo_clip bypass only; with reinforce, "
            "policy_loss(..., correction=...) and method 'ratio/gpg' give verl's loss"
        )
    if g[RC + "loss_type"] == "ppo_clip":  # rollout_rs: the correction's mask (divclip.engines.read_correction)
        return _vanilla(s, settings, g, keys)
    threshold = _is_threshold(settings, keys)
    if g[RC + "rollout_is"] is None or threshold is None:  # verl computes no weights: plain REINFORCE
        return ClipSpec(form="gpg")
    cap, floor = threshold
    form = "reinforce_is" if g[RC + "rollout_is"] == "token" else "reinforce_seq_is"
    return ClipSpec(
        form=form,
        params=_params(
            form,
            {
                "rollout_is_threshold": cap,
                "rollout_is_threshold_lower": floor,
                "rollout_is_batch_normalize": bool(g[RC + "rollout_is_batch_normalize"]),
            },
        ),
    )


def _is_threshold(settings, keys):
    """(C, c) of rollout_is_threshold: a number C (TIS, c = 0) or the string 'c_C' (IcePop); None for null."""
    key = RC + "rollout_is_threshold"
    raw = settings.get(key, 2.0)
    keys[key] = {"value": raw, "origin": "set" if key in settings else "default"}
    if raw is None:
        return None
    pair = raw.strip().split("_", 1) if isinstance(raw, str) else [raw]
    try:
        if isinstance(raw, bool):
            raise TypeError
        floor, cap = (float(pair[0]), float(pair[1])) if len(pair) == 2 else (0.0, float(pair[0]))
        ok = math.isfinite(cap) and cap > 0 and math.isfinite(floor) and (len(pair) == 1 or 0 < floor <= cap)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ConfigError(f"{key} must be a number C > 0 or a string 'c_C' with 0 < c <= C, got {raw!r}")
    return cap, floor


SPEC_FROM_MODE = {
    "vanilla": _vanilla,
    "gspo": _gspo,
    "dppo_kl": _dppo_spec,
    "dppo_tv": _dppo_spec,
    "cispo": _cispo,
    "sapo": _sapo,
    "gpg": _gpg,
    "dro": _dro,
    "clip_cov": _clip_cov,
    "kl_cov": _kl_cov,
    "geo_mean": _geo_mean,
    "bypass_mode": _bypass,
    **{mode: _divclip_spec for mode in DIVCLIP_MODES},
    METHOD_MODE: _method,
}
"""{verl loss_mode: fn(read, settings, typed values, keys) -> ClipSpec}: the method each mode runs."""


# ------------------------------------------------------------------------------- divclip's own modes
def _divclip(s: EngineRead, values, g: dict, keys: dict) -> None:
    """atr_kl3 / divclip_<m>: the bounds the verl plug-in computes, and the warnings it logs."""
    mode = s.loss_mode
    c = g[A + "clip_ratio_c"]
    s.dual_clip_c = None if c == math.inf else c  # divclip's modes apply vanilla's dual clip
    if PLUGIN not in str(values.get(PLUGIN_ENV, "")):
        s.notes.append(
            f"{mode} is registered by divclip's verl plug-in: the run needs {PLUGIN_ENV}={PLUGIN} in its environment"
        )
    if mode == ATR_MODE:
        _atr(s, g)
    else:
        _divergence(s, values, keys)


def _atr(s: EngineRead, g: dict) -> None:
    low, high = s.budget_low, s.budget_high
    high_key = A + "clip_ratio_high" if s.explicit(A + "clip_ratio_high") else A + "clip_ratio"
    try:
        lo, hi, delta = advice.atr_kl3_bounds(low, A + "clip_ratio_low")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    s.clip_measure, s.delta_low, s.delta_high = "kl3", delta, delta
    s.budget_low, s.budget_high, s.ratio_bounds = 1.0 - lo, hi - 1.0, [lo, hi]
    if (s.explicit(A + "clip_ratio_high") or s.explicit(A + "clip_ratio")) and not math.isclose(
        high, hi - 1.0, rel_tol=1e-6
    ):
        s.advice.append(
            advice.ignored_key_advice(
                s.loss_mode,
                high_key,
                high,
                f"the upper bound is u_δ = {hi:.7g} from clip_ratio_low = {low:g} "
                f"(set clip_ratio_high = {hi - 1.0!r} to silence this)",
            )
        )
    s.notes.append(f"atr_kl3: δ = KL3(1 - ε_low) = {delta:.6g}, r clipped to [{lo:.7g}, {hi:.7g}]")


def _divergence(s: EngineRead, values, keys: dict) -> None:
    mode, low, high = s.loss_mode, s.budget_low, s.budget_high
    name = mode[len("divclip_") :]
    env = values.get(DELTA_ENV)  # "0.02" or "0.02,0.03": the override parser may have made it a number
    if env is not None:
        if isinstance(env, bool) or not isinstance(env, (str, int, float)):
            raise ConfigError(f"{DELTA_ENV} must be a budget δ > 0 or 'δ_low,δ_high', got {env!r}")
        env = str(env)
    keys[DELTA_ENV] = {"value": env, "origin": "set" if env is not None else "default"}
    budget_keys = (A + "clip_ratio_low", A + "clip_ratio_high")
    from_env = env is not None and bool(env.strip())
    if from_env:
        try:
            d_low, d_high = advice.parse_delta(env, DELTA_ENV)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        for key, v, d in ((budget_keys[0], low, d_low), (budget_keys[1], high, d_high)):
            if (s.explicit(key) or s.explicit(A + "clip_ratio")) and v != d:
                s.advice.append(advice.ignored_key_advice(mode, key, v, f"δ comes from {DELTA_ENV}={env}"))
        budget_keys = (DELTA_ENV, DELTA_ENV)
    else:
        d_low, d_high = low, high
    s.clip_measure, s.delta_low, s.delta_high = name, d_low, d_high
    if name != "ratio":
        budgets = [(budget_keys[0], d_low)] + ([(budget_keys[1], d_high)] if d_high != d_low else [])
        found = advice.budget_advice(name, budgets, mode, DEFAULT_WIDTH)
        if not from_env:
            found = [
                a
                if a.code != "divergence_budget_verl_default"
                else advice.Advice(
                    a.code, a.message + f" The verl plug-in refuses it at run time unless {DELTA_ENV} is set.", a.key
                )
                for a in found
            ]
        s.advice += found
        s.advice += advice.cannot_bind_advice(name, d_low, d_high, mode, budget_keys)
    s.ratio_bounds = advice.ratio_bounds(name, d_low, d_high)
    if get_measure(name).p_dependent:
        s.form, s.measure, s.budget_low, s.budget_high = "divclip", name, d_low, d_high
    else:
        lo, hi = s.ratio_bounds
        s.budget_low, s.budget_high = 1.0 - lo, hi - 1.0
    s.notes.append(
        f"{mode}: {name} budget δ_low = {d_low:.6g}, δ_high = {d_high:.6g} (from "
        f"{DELTA_ENV if from_env else 'clip_ratio_low/high'})"
    )


# -------------------------------------------------------------------------------------------- pitfalls
CHECK_SOURCES = {
    "verl_dual_clip_always_on": f"verl {VERSION} core_algos.compute_policy_loss_vanilla (dual-clip PPO, Ye et al. "
    "2019, arXiv 1912.09729; clip_ratio_c defaults to 3.0 in actor.yaml); docs/theory.md §3, §5",
    "clip_ratio_shadowed": f"verl {VERSION} actor/actor.yaml sets clip_ratio_low/high to 0.2 (not null), and "
    "core_algos falls back to clip_ratio only where they are null",
    "dppo_tis_cap_small": f"verl {VERSION} core_algos.compute_policy_loss_dppo_kl/tv: clip_ratio_c truncates the IS "
    "weight, 'a large threshold is recommended' (DPPO arXiv 2602.04879 §5.4; in-code fallback 20)",
    "dppo_budget_from_ppo_default": f"verl {VERSION} core_algos.compute_policy_loss_dppo_kl: 'the clip_ratio is "
    "different from the standard PPO, it is the KL divergence threshold'",
    "minibatch_larger_than_batch": f"verl {VERSION} ActorConfig.validate: train_batch_size must be >= "
    "ppo_mini_batch_size",
}
"""The source of each warning only verl's settings raise (`divclip.sanity.checks.SOURCES` lists them too)."""
PLUGIN_SOURCES = {
    "ignored_key": "docs/trainer.md (divclip's verl modes and TRL plug-in): atr_kl3 derives its upper bound from "
    "clip_ratio_low; a divergence measure derives both bounds from δ",
    "divergence_budget_verl_default": f"verl {VERSION} trainer/config/actor/actor.yaml: clip_ratio, clip_ratio_low "
    "and clip_ratio_high default to 0.2, a ratio width; docs/theory.md §2",
}
"""The source of the plug-in's warnings that verl's own settings explain (the others keep advice.SOURCES)."""
DUAL_CLIP_MIN = 1.5  # a cap c this close to 1 removes the gradient of most tokens with A < 0 that moved up
TIS_CAP_MIN = 10.0  # DPPO's IS truncation: "a large threshold is recommended"


def _pitfall(code: str, message: str, key: str) -> Pitfall:
    return Pitfall(code, message, key, CHECK_SOURCES[code])


def _cited(found: advice.Advice) -> advice.Advice:
    """The plug-in's advice with verl's source where verl's settings explain it."""
    if found.code not in PLUGIN_SOURCES:
        return found
    return Pitfall(found.code, found.message, found.key, PLUGIN_SOURCES[found.code])


def pitfalls(s: EngineRead) -> list[Pitfall]:
    """What verl's own settings get wrong: the always-on dual clip, clip_ratio shadowed by its sides' defaults,
    DPPO's budget and IS cap read from PPO's keys, a mini-batch larger than the batch."""
    return [*_dppo_pitfalls(s), *_dual_clip(s), *_shadowed(s), *_minibatch(s)]


def _dual_clip(s: EngineRead) -> list[Pitfall]:
    if s.loss_mode != "vanilla":
        return []
    key, c, out = A + "clip_ratio_c", s.dual_clip_c, []
    if not s.explicit(key):
        out.append(
            _pitfall(
                "verl_dual_clip_always_on",
                f"verl's vanilla loss always applies dual-clip PPO: for A < 0 the loss is capped at -A·c with "
                f"c = clip_ratio_c = {c:g} (default), so tokens with "
                f"r > {c:g} stop pushing down. It cannot be switched "
                "off (set a large clip_ratio_c to make it inert), and verl's pg_clipfrac_lower reports this dual-clip "
                "fraction, not the lower-bound clip fraction.",
                key,
            )
        )
    if c is not None and c < DUAL_CLIP_MIN:
        out.append(
            Pitfall(
                "outside_published_range",
                f"clip_ratio_c = {c:g} is far below the dual-clip PPO value 3: every token with A < 0 whose ratio "
                f"exceeds {c:g} loses its gradient.",
                key,
                advice.PUBLISHED_RANGES,
            )
        )
    return out


def _dppo_pitfalls(s: EngineRead) -> list[Pitfall]:
    if s.form != "gated":
        return []
    out = []
    validated = advice.DPPO_VALIDATED[s.measure]
    if (
        not any(s.explicit(A + k) for k in ("clip_ratio", "clip_ratio_low", "clip_ratio_high"))
        and s.budget_low != validated
    ):
        out.append(
            _pitfall(
                "dppo_budget_from_ppo_default",
                f"{s.loss_mode} takes its {s.measure} budget δ from clip_ratio_low/high, which you did not set: it is "
                f"PPO's width default {s.budget_low:g}, not a divergence chosen for {s.measure} (validated: "
                f"{validated:g}).",
                A + "clip_ratio_low",
            )
        )
    if s.tis_cap is not None and s.tis_cap < TIS_CAP_MIN:
        key = A + "clip_ratio_c"
        out.append(
            _pitfall(
                "dppo_tis_cap_small",
                f"{s.loss_mode} truncates the importance weight at clip_ratio_c = {s.tis_cap:g} "
                f"({'your setting' if s.explicit(key) else 'the actor.yaml default'}); the DPPO authors recommend a "
                "large threshold (verl's in-code fallback is 20).",
                key,
            )
        )
    return out


def _shadowed(s: EngineRead) -> list[Pitfall]:
    key = A + "clip_ratio"
    ratio = s.keys[key]["value"]
    sides = [
        side
        for side in ("low", "high")
        if not s.explicit(f"{key}_{side}") and s.keys[f"{key}_{side}"]["value"] not in (None, ratio)
    ]
    if not s.explicit(key) or not sides:
        return []
    used = ", ".join(f"clip_ratio_{side} = {s.keys[f'{key}_{side}']['value']:g}" for side in sides)
    return [
        _pitfall(
            "clip_ratio_shadowed",
            f"clip_ratio = {ratio:g} is set but has no effect on the {'/'.join(sides)} side: verl's actor.yaml "
            f"defaults {used}, and the loss falls back to clip_ratio only where those are null. Set "
            "clip_ratio_low/clip_ratio_high instead.",
            key,
        )
    ]


def _minibatch(s: EngineRead) -> list[Pitfall]:
    train, mini = s.keys["data.train_batch_size"]["value"], s.keys[A + "ppo_mini_batch_size"]["value"]
    if mini <= train or "not read" in s.keys["data.train_batch_size"]["origin"]:  # the fully async trainer
        return []
    return [
        _pitfall(
            "minibatch_larger_than_batch",
            f"ppo_mini_batch_size = {mini} > data.train_batch_size = {train}: verl refuses to start (without "
            "use_dynamic_bsz); divclip counts one mini-batch.",
            A + "ppo_mini_batch_size",
        )
    ]


# ----------------------------------------------------------------------------------------------- write
def _num(x) -> float:
    return float(x)


def _write_clip(spec, env: dict, notes: list) -> dict:
    name = spec.measure_name
    c = _num(spec.param("dual_clip_c", None)) if spec.param("dual_clip_c", None) is not None else math.inf
    if spec.level == "sequence":
        if name != "ratio":
            raise ValueError(f"verl has no sequence-level {name} clip (gspo clips the sequence ratio), got {name!r}")
        return {
            "policy_loss.loss_mode": "gspo",
            "clip_ratio_low": _num(spec.eps_low),
            "clip_ratio_high": _num(spec.eps_high),
        }
    if name == "ratio":
        return {
            "policy_loss.loss_mode": "vanilla",
            "clip_ratio_low": _num(spec.eps_low),
            "clip_ratio_high": _num(spec.eps_high),
            "clip_ratio_c": c,
        }
    if name == "kl3":
        lo, _ = advice.measure_bounds("kl3", _num(spec.delta), _num(spec.delta))
        # the root finder's l_δ carries ~1e-16 of noise (0.8 comes back as 0.8000000000000000444): 15 digits give
        # ATR's ε_low = 0.2 exactly, and atr_kl3 recomputes δ = KL3(1 - ε_low) and u_δ from it
        eps_low = float(format(1.0 - lo, ".15g"))
        hi = advice.atr_kl3_bounds(eps_low, A + "clip_ratio_low")[1]
        env[PLUGIN_ENV] = PLUGIN
        notes.append("atr_kl3 takes ε_low = clip_ratio_low and sets δ = KL3(1 - ε_low); clip_ratio_high = u_δ - 1")
        return {
            "policy_loss.loss_mode": ATR_MODE,
            "clip_ratio_low": eps_low,
            "clip_ratio_high": hi - 1.0,
            "clip_ratio_c": c,
        }
    d = _num(spec.delta)
    env[PLUGIN_ENV] = PLUGIN
    env[DELTA_ENV] = repr(d)
    notes.append(f"divclip_{name} reads δ from {DELTA_ENV}; clip_ratio_low/high carry the same δ")
    return {"policy_loss.loss_mode": f"divclip_{name}", "clip_ratio_low": d, "clip_ratio_high": d, "clip_ratio_c": c}


def _write_gated(spec, env: dict, notes: list) -> dict:
    name = spec.measure_name
    modes = {m: mode for mode, m in _DPPO.items()}
    if name not in modes:
        raise ValueError(f"verl has DPPO masks for binary_kl and binary_tv only, got measure {name!r}")
    notes.append("dppo_*: clip_ratio_low/high are the δ of the mask, clip_ratio_c truncates the IS weight")
    return {
        "policy_loss.loss_mode": modes[name],
        "clip_ratio_low": _num(spec.delta),
        "clip_ratio_high": _num(upper_delta(spec)),
        "clip_ratio_c": _num(spec.param("tis_cap", None)) if spec.param("tis_cap", None) is not None else math.inf,
    }


def _write_cispo(spec, env: dict, notes: list) -> dict:
    if spec.measure_name != "ratio":
        raise ValueError(f"verl's cispo clips the ratio by widths ε, got measure {spec.measure_name!r}")
    return {
        "policy_loss.loss_mode": "cispo",
        "clip_ratio_low": _num(spec.eps_low),
        "clip_ratio_high": _num(spec.eps_high),
    }


def _write_sapo(spec, env: dict, notes: list) -> dict:
    notes.append("verl 0.9.1's sapo aggregates seq-mean-token-mean whatever loss_agg_mode says")
    return {
        "policy_loss.loss_mode": "sapo",
        "tau_pos": _num(spec.param("tau_pos")),
        "tau_neg": _num(spec.param("tau_neg")),
    }


def _write_cispo_cap(spec, env: dict, notes: list) -> dict:
    """TRL's cispo (`cispo_cap`: the IS weight capped at c, no lower bound) is verl's cispo at clip_ratio_low = 1."""
    return _write_cispo(cispo_cap_as_cispo(spec), env, notes)


def _write_gpg(spec, env: dict, notes: list) -> dict:
    return {"policy_loss.loss_mode": "gpg"}


def _write_dro(spec, env: dict, notes: list) -> dict:
    return {"policy_loss.loss_mode": "dro", "policy_loss.dro_beta": _num(spec.param("dro_beta"))}


def _write_clip_cov(spec, env: dict, notes: list) -> dict:
    if spec.measure_name != "ratio":
        raise ValueError(f"verl's clip_cov clips the ratio by widths ε, got measure {spec.measure_name!r}")
    return {
        "policy_loss.loss_mode": "clip_cov",
        "clip_ratio_low": _num(spec.eps_low),
        "clip_ratio_high": _num(spec.eps_high),
        **{f"policy_loss.{k}": _num(spec.param(k)) for k in ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub")},
    }


def _write_kl_cov(spec, env: dict, notes: list) -> dict:
    return {
        "policy_loss.loss_mode": "kl_cov",
        "policy_loss.kl_cov_ratio": _num(spec.param("kl_cov_ratio")),
        "policy_loss.ppo_kl_coef": _num(spec.param("kl_cov_coef")),
    }


def _write_geo_mean(spec, env: dict, notes: list) -> dict:
    notes.append(
        "geo_mean: clip_ratio_low/high are log-space widths (log r in [−low, high]); verl averages its "
        "sequence losses whatever loss_agg_mode says"
    )
    return {
        "policy_loss.loss_mode": "geo_mean",
        "clip_ratio_low": _num(spec.param("gmpo_eps_low")),
        "clip_ratio_high": _num(spec.param("gmpo_eps_high")),
    }


def _write_reinforce_is(spec, env: dict, notes: list) -> dict:
    cap, floor = _num(spec.param("rollout_is_threshold")), _num(spec.param("rollout_is_threshold_lower"))
    notes.append(
        "bypass_mode uses the rollout's log-probs as old_log_prob: the rollout must return them "
        "(actor_rollout_ref.rollout.calculate_log_probs=true)"
    )
    return {
        RC + "bypass_mode": True,
        RC + "loss_type": "reinforce",
        RC + "rollout_is": "token" if spec.form == "reinforce_is" else "sequence",
        RC + "rollout_is_threshold": f"{floor!r}_{cap!r}" if floor > 0 else cap,
        RC + "rollout_is_batch_normalize": bool(spec.param("rollout_is_batch_normalize")),
    }


WRITERS = {
    "clip": _write_clip,
    "gated": _write_gated,
    "cispo": _write_cispo,
    "sapo": _write_sapo,
    "gpg": _write_gpg,
    "dro": _write_dro,
    "clip_cov": _write_clip_cov,
    "kl_cov": _write_kl_cov,
    "geo_mean": _write_geo_mean,
    "reinforce_is": _write_reinforce_is,
    "reinforce_seq_is": _write_reinforce_is,
    "cispo_cap": _write_cispo_cap,
}
"""{ClipSpec.form: fn(spec, env, notes) -> {key below actor_rollout_ref.actor. (or a whole `algorithm.` key):
value}}: the keys that run it."""


def write(spec, *, recipe: bool = True, loss_agg_mode: str | None = None, label: str | None = None) -> EngineWrite:
    """`spec` as complete verl settings: every key the clip reads once, loss_mode explicit, the plug-in hook where
    needed; `recipe` adds the method's published aggregation (`loss_agg_mode` given here wins). A ValueError says
    what verl cannot express."""
    spec, label = check_spec(spec, label)
    env: dict = {}
    notes: list = []
    diffs: list = []
    if _combined(spec):  # intersections and adaptive δ: the divclip_method mode reads the whole method string
        keys = _write_method(spec, env, notes)
    elif spec.form in WRITERS:
        keys = WRITERS[spec.form](spec, env, notes)
    else:
        raise ValueError(
            f"verl has no loss_mode for the {spec.form!r} loss form (verl modes divclip writes: "
            f"{', '.join(WRITERS)} forms)"
        )
    if keys.get("clip_ratio_c") == math.inf:
        notes.append("clip_ratio_c=inf: no dual clip / IS truncation (this method has none; verl's default is 3.0)")
    # always written (verl's default when the method names none), so a block pasted after another leaves
    # nothing of the other's aggregation in force
    agg = _aggregation(spec, recipe, loss_agg_mode, notes) or (
        "seq-mean-token-mean" if spec.form == "sapo" else KEYS[A + "loss_agg_mode"].default
    )
    if agg in ENGINE_AGG_MODES + TRL_AGG_MODES:  # another engine's arithmetic: verl's default, named
        diffs.append(
            Difference(
                f"aggregation {agg}",
                f"verl has {', '.join(LOSS_AGG_MODES)} only (divclip.theory.agg_modes); its default "
                f"{KEYS[A + 'loss_agg_mode'].default} is written",
            )
        )
        agg = KEYS[A + "loss_agg_mode"].default
    if agg not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode must be one of {list(LOSS_AGG_MODES)}, got {agg!r}")
    keys["loss_agg_mode"] = agg
    if spec.form == "sapo" and agg != "seq-mean-token-mean" and loss_agg_mode is not None:
        diffs.append(Difference(f"aggregation {agg}", "verl's sapo always aggregates seq-mean-token-mean"))
    if keys.get("policy_loss.loss_mode") == "gspo" and spec.param("dual_clip_c", None) is not None:
        diffs.append(
            Difference(
                f"the dual clip c = {spec.param('dual_clip_c', None):g}",
                "verl's gspo has none (compute_policy_loss_gspo reads no clip_ratio_c): written without it",
            )
        )
    settings = {(k if k.startswith("algorithm.") else A + k): v for k, v in keys.items()}
    return EngineWrite(NAME, label, env, settings, tuple(notes), differences=tuple(diffs))


def _aggregation(spec, recipe: bool, loss_agg_mode, notes: list) -> str | None:
    return recipe_aggregation(
        spec, recipe, loss_agg_mode, notes, lambda found: f"loss_agg_mode={found.loss_agg_mode}: {found.source}"
    )


def _combined(spec) -> bool:
    return isinstance(spec, AllOf) or is_adaptive(spec)


def _write_method(spec, env: dict, notes: list) -> dict:
    if getattr(spec, "signal", None) == "entropy":
        raise ValueError("verl does not hand the policy loss the entropy: adapt to clipfrac or kl3 for verl")
    env.update({PLUGIN_ENV: PLUGIN, METHOD_ENV: method_string(spec)})
    notes.append(f"{METHOD_MODE} reads the whole method from {METHOD_ENV}; verl's clip_ratio* keys are ignored")
    return {"policy_loss.loss_mode": METHOD_MODE}


# ---------------------------------------------------------------------------------------------- render
def _override_value(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, float):
        return "inf" if v == math.inf else repr(v)
    return str(v)


def _yaml_value(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, float):
        return ".inf" if v == math.inf else repr(v)
    return str(v)


def render(w: EngineWrite, fmt: str) -> list[str]:
    """The body of `w` as a verl command line ('overrides'), actor config YAML ('yaml') or a Python list of
    overrides ('python'); `divclip check` reads each back."""
    if fmt == "overrides":
        lines = [f"{k}={shlex.quote(str(v))}" for k, v in w.env.items()] + ["python3 -m verl.trainer.main_ppo"]
        lines += [f"    {k}={_override_value(v)}" for k, v in w.settings.items()]
        return [line + " \\" for line in lines[:-1]] + lines[-1:]
    if fmt == "yaml":
        return [f"# environment: {k}={v}" for k, v in w.env.items()] + yaml_tree(w.settings, _yaml_value)
    out = ["import os", ""] if w.env else []
    out += [f"os.environ[{k!r}] = {v!r}" for k, v in w.env.items()]
    out += ["overrides = ["] + [f"    {f'{k}={_override_value(v)}'!r}," for k, v in w.settings.items()] + ["]"]
    return out
