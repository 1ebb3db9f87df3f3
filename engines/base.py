"""What every engine module shares: a key's type and default, what a read found, what a write produced.

An engine module (`divclip.engines.verl`, `.trl`, ...) holds everything divclip knows of one training engine:
`NAME`, `VERSION`, `DEFAULTS_FROM` (where its keys and defaults were read), `KEYS` ({key: Key}),
`read(settings) -> EngineRead`, `write(spec, *, recipe=True) -> EngineWrite`, `detect(settings) -> float`,
`FORMATS` (the texts `EngineWrite.text` prints, the first the default), `render(write, fmt) -> [lines]` and
`PLUGIN` (the module that plugs divclip's loss into the engine, or None).

`read(settings, **options)` takes any options (`divclip check` passes num_processes, and `entry`, the module the
launch runs: an example's own config adds keys, `example_keys`) and fills
`EngineRead.roles` ({"eps_low": key, "epochs": key, ...}) so the sanity checks name the engine's own keys, and
`unknown_keys` (with the nearest known key); an engine's own pitfalls go in `EngineRead.advice` as
`divclip.engines.pitfalls.Pitfall(code, message, key, source)` (a module whose pitfalls each have one fixed source
lists them in `CHECK_SOURCES`, which `divclip.sanity.checks.SOURCES` takes in). A module also has
`KNOWN_KEYS_FROM` (the source of the unknown-key warning) and may have `FORMAT_ALIASES` ({"overrides": "flags"}) and
`key_origin(key, entry)` (which other version of the engine, or of the example `entry` a launch runs, had a key
it does not know: the unknown-key warning says it).

Settings are flat mappings of the engine's own names: dotted keys as a YAML file or hydra override writes them
(`actor_rollout_ref.actor.clip_ratio_low`), flags with their dashes as a launch command writes them
(`--actor.eps_clip`), and environment variables in capitals (`DIVCLIP_DELTA`).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import re
import reprlib
from dataclasses import dataclass, field, fields
from pathlib import Path

from divclip.engines.advice import ratio_bounds
from divclip.engines.config import looks_like_float
from divclip.engines.errors import ConfigError
from divclip.engines.pitfalls import Pitfall
from divclip.engines.registry import get_engine
from divclip.theory.method_names import method_for
from divclip.theory.spec import PRESETS, AllOf, ClipSpec, is_adaptive, method_string

MAX_INT = 2**31 - 1  # batch sizes, epochs, steps: anything larger is a typo (and overflows float division)
ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")  # an environment variable a launch command sets in front


@dataclass(frozen=True)
class Key:
    """One setting divclip reads: its type, default, and the values allowed."""

    kind: str  # "float" | "int" | "str" | "bool"
    default: object
    nullable: bool = False
    above: float | None = None  # value must be > above
    choices: tuple = ()
    allow_inf: bool = False  # +inf is a meaningful value (clip_ratio_c = inf: no dual clip)
    doc: str = ""  # what the engine means by it, one line (docs/engines.md's table)


@dataclass(frozen=True)
class Difference:
    """Something of a method the target engine says differently, or cannot say: `what` is named, `nearest` is
    what the engine gets instead, `exact` says whether that is the same clip (KL3 as its exact ratio bounds)."""

    what: str
    nearest: str
    exact: bool = False

    def __str__(self) -> str:
        return f"{self.what}: {self.nearest}" + (" (exact)" if self.exact else "")


@dataclass
class EngineRead:
    """The clip-relevant part of one engine's settings: the method, the batch structure that decides whether a
    clip can bind, and every value's origin ("set" or the engine's "default")."""

    engine: str  # "verl" | "trl" | ...
    defaults_from: str
    loss_mode: str  # the engine's own name of the loss (verl loss_mode, TRL loss_type, ...)
    form: str  # "clip" (PPO) | "divclip" (PPO clip, per-token bounds) | "gated" (DPPO) | "cispo" | "sapo" | "other"
    measure: str | None  # "ratio", "binary_kl", "binary_tv"; None without a hard clip
    level: str  # "token" | "sequence"
    budget_low: float | None  # ratio: ε_low; binary_*: δ_low
    budget_high: float | None  # ratio: ε_high; binary_*: δ_high
    cap: float | None = None  # TRL cispo: absolute cap on the IS weight (epsilon_high)
    dual_clip_c: float | None = None  # verl vanilla clip_ratio_c, TRL delta
    tis_cap: float | None = None  # verl dppo_*: truncation of the IS weight (clip_ratio_c)
    loss_agg_mode: str | None = None  # in verl's names (token-mean, seq-mean-token-mean, ...)
    epochs: int = 1  # passes over one rollout batch (verl ppo_epochs / TRL num_iterations)
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
    advice: list = field(default_factory=list)  # [Advice]: the engine's pitfalls, and what the plug-ins log
    spec: object = None  # the method as a divclip ClipSpec; None where divclip does not model the loss
    unknown_keys: list = field(default_factory=list)  # [(key, nearest known key or None)]
    differences: list = field(default_factory=list)  # [Difference]: what the ClipSpec does not carry
    roles: dict = field(default_factory=dict)  # {role: the engine's key}: eps, eps_low, eps_high, dual_clip,
    # tis_cap, cap, epochs, mini_batch, train_batch (what the checks name in their warnings)
    on_policy_fix: str = ""  # the settings that make the update off-policy, in the engine's words
    entry: str | None = None  # the module the launch runs (`python -m ENTRY`), when the settings come from one
    ratio_anchor: str = "old"  # the ratio's denominator: "old" (π_old) or "rollout" (π_rollout: OpenRLHF's gspo
    # with IS correction on takes log π_θ − log π_rollout, so old_log_prob must be the rollout's)

    def role(self, name: str) -> str | None:
        """The engine's key for a role ('eps_low', 'dual_clip', ...), or None where it has none."""
        return self.roles.get(name)

    def explicit(self, key: str) -> bool:
        return self.keys.get(key, {}).get("origin") == "set"

    def to_dict(self) -> dict:
        skip = {"advice", "spec", "differences", "unknown_keys", "roles"}
        out = {f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name not in skip}
        out["framework"] = self.engine
        out["method"] = None if self.spec is None else method_string(self.spec)
        out["unknown_keys"] = [{"key": k, "nearest": n} for k, n in self.unknown_keys]
        out["differences"] = [str(d) for d in self.differences]
        return out


def _plain(v):
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


@dataclass(frozen=True)
class EngineWrite:
    """One method as one engine's settings: environment variables, keys in order, comment lines, and what the
    engine says differently or not at all."""

    engine: str
    label: str
    env: dict  # {VAR: value} the launch command needs in front (a plug-in hook, DIVCLIP_DELTA)
    settings: dict  # {the engine's own key or flag: value}, in order
    comments: tuple  # what the reader must know, one line each
    config_class: str = ""  # TRL: "DivClipGRPOConfig" or "GRPOConfig"
    differences: tuple = ()  # (Difference, ...)

    def flat(self) -> dict:
        """Environment and settings in one flat mapping, as `read` takes them."""
        return {**self.env, **self.settings}

    def text(self, fmt: str | None = None) -> str:
        """The block in one of the engine's FORMATS (default: its first), with the label and comments on top."""
        module = get_engine(self.engine)
        fmt = module.FORMATS[0] if fmt is None else getattr(module, "FORMAT_ALIASES", {}).get(fmt, fmt)
        if fmt not in module.FORMATS:
            raise ValueError(f"format for {self.engine} must be one of {list(module.FORMATS)}, got {fmt!r}")
        notes = [*self.comments, *(f"differs: {d}" for d in self.differences)]
        head = [f"# {self.label}", *(f"# {c}" for c in notes)]
        return "\n".join(head + module.render(self, fmt)) + "\n"


# --------------------------------------------------------------------------------- loss terms beside the clip
def name_loss_terms(s: EngineRead, terms) -> None:
    """Note each term of the engine's loss beside the clip that the settings turn on: `terms` holds, for each, the
    engine's own setting as written (`key = value`, several joined by ', ') and what it adds to the loss. divclip
    models the clip; an entropy bonus, a KL term, a token filter or a reward penalty change the update too, so
    `divclip check` names every one that is on (default or set) instead of leaving it out in silence."""
    for setting, what in terms:
        s.notes.append(f"beside the clip: {setting}: {what} (not part of divclip's clip analysis)")


# ------------------------------------------------------------------------------------------ recipes
@dataclass(frozen=True)
class Recipe:
    """What a named method sets beyond its clip, in verl's names (an engine writes it in its own)."""

    loss_agg_mode: str
    source: str


# The aggregation each published method trains with: written with its clip, so an export is the whole recipe.
RECIPES = {
    "grpo": Recipe(
        "seq-mean-token-mean",
        "GRPO (arXiv 2402.03300, eq. 3): 1/G Σ_i 1/|o_i| Σ_t, the mean over sequences of each sequence's token mean",
    ),
    "dapo": Recipe(
        "token-mean",
        "DAPO (arXiv 2503.14476, §3.3): token-level policy-gradient loss, one mean over every token of the batch",
    ),
    "gspo": Recipe(
        "seq-mean-token-mean",
        "GSPO (arXiv 2507.18071): one length-normalised ratio per sequence, averaged over sequences",
    ),
}


def recipe_for(spec) -> Recipe | None:
    """The published recipe of `spec` when it is a named method (a preset), else None. The float32 exp of SkyRL's
    read (`exp_dtype`) is rounding, not another method: `grpo/exp_dtype=float32` has GRPO's recipe."""
    if type(spec) is ClipSpec and spec.param("exp_dtype", "input") != "input":
        spec = dataclasses.replace(spec, params=tuple(kv for kv in spec.params if kv[0] != "exp_dtype"))
    for name, known in PRESETS.items():
        if known == spec and name in RECIPES:
            return RECIPES[name]
    return None


# ----------------------------------------------------------------------------------- ratio equivalent
def as_ratio_clip(spec):
    """(ratio ClipSpec, Difference): a p-independent divergence clip at δ as the ratio clip on its exact
    interval [l_δ, u_δ] (docs/theory.md §2). A ValueError says why a spec has no ratio equivalent."""
    if is_adaptive(spec):
        raise ValueError(f"{method_string(spec)!r} adapts δ during training: a fixed ratio clip cannot follow it")
    if spec.form != "clip":
        raise ValueError(f"{method_string(spec)!r} is the {spec.form!r} loss form, not a clip interval")
    if spec.measure_name == "ratio" and not isinstance(spec, AllOf):
        return spec, None
    if spec.p_dependent:
        raise ValueError(
            f"{method_string(spec)!r} clips each token by its own p = π_old(a) (a per-token "
            f"{spec.measure_name} interval): no single ratio clip equals it"
        )
    lo, hi = spec.ratio_bounds()
    eps_low, eps_high = float(format(1.0 - lo, ".15g")), hi - 1.0
    ratio = ClipSpec(
        "ratio",
        eps_low=eps_low,
        eps_high=eps_high,
        level=spec.level,
        params={"dual_clip_c": spec.param("dual_clip_c", None)},
    )
    return ratio, Difference(
        f"{method_string(spec)} ({spec.measure_name} clip)",
        f"the ratio clip on its interval [{lo:.10g}, {hi:.10g}], ε_low = {eps_low:.10g}, ε_high = {eps_high:.10g}",
        exact=True,
    )


# ---------------------------------------------------------------------------------------------- typing
def ratio_clip_spec(s: EngineRead, *, clamp_log_ratio: bool):
    """The ratio clip an engine's read describes (widths, level, dual clip), for the engines whose sequence level
    differentiates through the mean (OpenRLHF and slime GSPO: the clip form's `seq_grad_mean`); None with a note
    where no divclip method says it exactly."""
    params = {"dual_clip_c": s.dual_clip_c, "clamp_log_ratio": clamp_log_ratio}
    if s.level == "sequence":
        params["seq_grad_mean"] = True
    try:
        return ClipSpec("ratio", eps_low=s.budget_low, eps_high=s.budget_high, level=s.level, params=params)
    except ValueError as exc:
        s.notes.append(f"no divclip method says this exactly: {exc}")
        return None


def check_keys(values) -> None:
    """Refuse a settings mapping with a key that is not a string (an engine's keys, flags and variables are all
    names): a ConfigError naming the key, before any reader calls a string method on it."""
    for key in values:
        if not isinstance(key, str):
            raise ConfigError(
                f"settings keys must be strings (the engine's own key, flag or variable names), got {show(key)}"
            )


def typed_values(values, keys: dict) -> tuple[dict, dict]:
    """({key: typed value or default}, {key: {"value", "origin"}}) of `keys` in the flat `values`."""
    check_keys(values)
    seen: dict = {}
    return {k: typed(values, k, spec, seen) for k, spec in keys.items()}, seen


def typed(values, key: str, spec: Key, seen: dict):
    """The value of `key` as `spec` types it (its default when absent); records its origin in `seen`."""
    if key not in values:
        seen[key] = {"value": spec.default, "origin": "default"}
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
        out = _as_bool(key, v)
    else:
        if not isinstance(v, str):
            raise ConfigError(f"{key} must be a string{_choices(spec)}, got {show(v)}")
        if spec.choices and v not in spec.choices:
            raise ConfigError(f"{key} must be one of {list(spec.choices)}, got {show(v)}")
        out = v
    seen[key] = {"value": out, "origin": "set"}
    return out


def _as_float(key, v, spec: Key) -> float:
    if isinstance(v, str) and looks_like_float(v):
        v = float(v)  # YAML 1.1 reads 3e-4 as a string; verl (OmegaConf) and argparse read a float
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"{key} must be {_expect(spec)}, got {show(v)}")
    try:
        v = float(v)
    except OverflowError:  # an integer of hundreds of digits: beyond float64
        raise ConfigError(f"{key} must be {_expect(spec)}, got an integer of {len(str(v))} digits") from None
    if spec.allow_inf and v == math.inf:
        return v
    if not math.isfinite(v) or (spec.above is not None and not v > spec.above):
        raise ConfigError(f"{key} must be {_expect(spec)}, got {v!r}")
    return v


def _as_int(key, v, spec: Key) -> int:
    if isinstance(v, str) and v.strip().lstrip("+").isdigit() and len(v) < 20:
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"{key} must be {_expect(spec)}, got {show(v)}")
    if (spec.above is not None and not v > spec.above) or v > MAX_INT:
        raise ConfigError(f"{key} must be {_expect(spec)}, got {show(v)}")
    return v


def _as_bool(key, v) -> bool:
    if isinstance(v, str) and v.lower() in ("true", "false"):  # a command-line flag's text
        return v.lower() == "true"
    if not isinstance(v, bool):
        raise ConfigError(f"{key} must be true or false, got {show(v)}")
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


# A repr that stops early: a config value can be a list aliased into 2^31 leaves (YAML anchors), whose full repr
# would take minutes and gigabytes; this one looks at a few items per level, a few levels deep.
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict = 3, 4, 4, 4
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 60, 60, 40


def show(v) -> str:
    """A one-line, size-bounded picture of a config value and its type, for error messages."""
    text = _SHORT.repr(v)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(v).__name__})"


# ----------------------------------------------------------------------------------------- ignored keys
def ignored_key_advice(s: EngineRead, ignored: dict, cite: str) -> list:
    """An "ignored_key" Pitfall for each key of `ignored[s.loss_mode]` ({loss_mode: (key, ...)}) that the settings
    set explicitly: the chosen loss never reads it, so the value the user wrote has no effect."""
    return [
        Pitfall(
            "ignored_key",
            f"{key} = {s.keys[key]['value']!r} is ignored: the {s.engine} loss {s.loss_mode!r} does not read it",
            key,
            cite,
        )
        for key in ignored.get(s.loss_mode, ())
        if s.explicit(key)
    ]


# ----------------------------------------------------------------------------------------- unknown keys
MAX_NEAREST = 50  # unknown keys matched to a nearest known one (divclip check lists 50 one by one)


def nearest_key(key: str, known) -> str | None:
    """The known key closest to a misspelled one (difflib's ratio >= 0.75), or None."""
    found = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    return found[0] if found else None


def unknown_keys(values, is_known, candidates) -> list[tuple[str, str | None]]:
    """[(key, nearest)] for every key of `values` that `is_known(key)` refuses (environment variables are not
    keys); `candidates` are the names a misspelling is matched against."""
    out = []
    for key in values:
        if ENV_NAME.match(key) or is_known(key):
            continue
        # difflib against hundreds of known keys is ~4 ms a key: only the keys a report lists get their nearest
        out.append((key, nearest_key(key, candidates) if len(out) < MAX_NEAREST else None))
    return out


# --------------------------------------------------------------------------- a loss another module registers
def loss_registrar(own, choices, entry: str | None, engine_module: str, plugin_modules: str = "") -> str | None:
    """What may register a loss name that is none of the engine's (`choices`): the launched module when it is not
    the engine's own (`engine_module`, e.g. "verl."; a recipe's main, an example's), or the modules a plugin
    variable names (`plugin_modules`, as "VERL_USE_EXTERNAL_MODULES names (a.b)"); None where nothing can, so
    the engine refuses the name as divclip does: a launch of its own entry point, or a bare config."""
    if not isinstance(own, str) or own in choices:
        return None
    if entry and not entry.startswith(engine_module):
        return f"the launched {entry}"
    return f"one of the modules {plugin_modules}" if plugin_modules else None


def loss_registered_elsewhere(engine: str, version: str, key: str, own: str, registrar: str, choices, source: str):
    """The warning of a loss name `registrar` registers: read as not modelled (no clip analysis applies)."""
    near = nearest_key(own, choices)
    return Pitfall(
        "loss_registered_elsewhere",
        f"{key} = {own!r} is none of {engine} {version}'s registered losses: {engine}'s own entry point refuses it, "
        f"and {registrar} must register it; divclip does not model this loss, so no clip analysis below applies "
        f"to it. {engine}'s own are {', '.join(choices)}"
        + (f" (if {own!r} is a typo, the nearest is {near!r})" if near else ""),
        key,
        source,
    )


# ------------------------------------------------------------------------------------- the examples' own keys
EXAMPLE_KEYS_FILE = Path(__file__).with_name("example_keys.txt")


@functools.lru_cache(maxsize=1)
def _example_rows() -> tuple:
    """(engine, entry module, where it is declared, key) per line of EXAMPLE_KEYS_FILE."""
    rows = []
    for line in EXAMPLE_KEYS_FILE.read_text().splitlines():
        if line and not line.startswith("#"):
            engine, entry, source, key = line.split()
            rows.append((engine, entry, source, key))
    return tuple(rows)


def _under(key: str, declared: str) -> bool:
    """`key` is `declared` or below it (`agent_run_args.max_turns` under a dict field `agent_run_args`)."""
    return key == declared or key.startswith(declared + ".")


def example_keys(engine: str, entry: str | None) -> frozenset:
    """The keys an engine's own example entry point (`entry`, the module a launch runs: `python -m ENTRY`) adds to
    the engine's config, with its own hydra config or config class (EXAMPLE_KEYS_FILE); empty for any other entry."""
    if not entry:
        return frozenset()
    return frozenset(key for e, module, _, key in _example_rows() if e == engine and module == entry)


def is_example_key(key: str, engine: str, entry: str | None) -> bool:
    """`key` is one `entry`'s own config declares (or a key below one it declares as an open dict)."""
    return any(_under(key, declared) for declared in example_keys(engine, entry))


def example_origin_parts(engine: str, key: str, entry: str | None = None) -> tuple[str | None, str | None]:
    """(that the launched example `entry` has a config of its own and it lacks `key`, which of the engine's own
    examples declare `key` instead: EXAMPLE_KEYS_FILE), each None where it does not apply."""
    found = sorted({(module, source) for e, module, source, k in _example_rows() if e == engine and _under(key, k)})
    own = sorted({source for e, module, source, _ in _example_rows() if e == engine and module == entry})
    launched = f"the launched {entry}'s own config ({own[0]}) does not declare it" if own else None
    if not found:
        return launched, None
    if len(found) == 1:
        module, source = found[0]
        return launched, f"the engine's own example {module} declares it ({source}): only its launch accepts it"
    named = [f"{module} ({source})" for module, source in found[:3]]
    named += [f"{len(found) - 3} more"] if len(found) > 3 else []
    return launched, (
        f"the engine's own examples {', '.join(named[:-1])} and {named[-1]} declare it: only their launches accept it"
    )


_MODULE_WORD = re.compile(r"^[A-Za-z_][\w.]*$")


def entry_module(command: str | None) -> str | None:
    """The module a launch command runs: the word after its last `-m` (or `--module`), or a `.py` script's path as a
    module (`python3 examples/tir/train_tir.py` -> examples.tir.train_tir); None when neither."""
    words = ["-m" if w == "--module" else w for w in (command or "").split()]  # deepspeed --module pkg.mod
    if "-m" in words:
        i = len(words) - 1 - words[::-1].index("-m")
        module = words[i + 1] if i + 1 < len(words) else ""
        return module if _MODULE_WORD.match(module) else None
    scripts = [w for w in words if w.endswith(".py")]
    if not scripts:
        return None
    module = scripts[-1].removeprefix("./").removesuffix(".py").replace("/", ".")
    return module if _MODULE_WORD.match(module) else None


def dotted_key_score(settings, is_known, unique_prefixes) -> float:
    """An engine's `detect` score for dotted config keys: 1 per key `is_known` accepts, 2 where it starts with one
    of `unique_prefixes` (sections no other engine has); flags (`-...`) and non-string keys score nothing."""
    score = 0.0
    for k in settings:
        if isinstance(k, str) and not k.startswith("-") and is_known(k):
            score += 2.0 if k.startswith(unique_prefixes) else 1.0
    return score


# ---------------------------------------------------------------------------------------------- labels
def check_spec(spec, label: str | None = None):
    """(spec, label) for a write: `spec` must be a ClipSpec; the label defaults to 'method — description'."""
    if not isinstance(spec, ClipSpec):
        raise ValueError(f"spec must be a ClipSpec, got {type(spec).__name__}")
    return spec, label if label is not None else f"{method_string(spec)} — {describe(spec)}"


def describe(spec) -> str:
    """'ATR-GRPO: PPO clip by kl3, δ = 0.0231436, r in [0.8, 1.230842]' — the method, its budget and its clip."""
    if isinstance(spec, AllOf):
        return "intersection, per token [max lo, min hi] of: " + "; ".join(describe(p) for p in spec.parts)
    if is_adaptive(spec):
        return (
            f"adaptive δ holding {spec.signal} at {spec.target:g} (gain {spec.gain:g}, δ in "
            f"[{spec.delta_min:.4g}, {spec.delta_max:.4g}]), from {describe(spec.fixed())}"
        )
    name = spec.measure_name
    if spec.form == "sapo":
        return f"SAPO: soft gate, τ+ = {spec.param('tau_pos'):g}, τ- = {spec.param('tau_neg'):g}"
    if spec.delta is None and spec.eps_low is None:  # a form without a clip budget
        return f"{spec.form} loss form" + "".join(f", {k} = {v:g}" for k, v in spec.params)
    if name == "ratio":
        what = "GSPO" if spec.level == "sequence" else method_for("ratio", spec.eps_low, spec.eps_high)
        form = "ratio clip" if spec.form == "clip" else f"{spec.form} with ratio widths"
        return f"{what}: {form} [{1 - spec.eps_low:.7g}, {1 + spec.eps_high:.7g}] ({spec.level} level)"
    bounds = ratio_bounds(name, spec.delta, spec.delta)
    where = (
        f"r in [{bounds[0]:.7g}, {bounds[1]:.7g}]"
        if not isinstance(bounds[0], dict)
        else "r in " + ", ".join(f"[{b['lo']:.4g}, {b['hi']:.4g}] at p = {b['p']:g}" for b in bounds)
    )
    form = {"gated": "DPPO mask", "clip": "PPO clip"}.get(spec.form, spec.form)
    return f"{method_for(name, delta=spec.delta)}: {form} by {name}, δ = {spec.delta:.6g}, {where}"


def yaml_tree(settings: dict, value) -> list[str]:
    """Flat dotted `settings` as nested YAML lines (two spaces a level); `value(v)` writes a leaf in the engine's
    own spelling (verl and SkyRL differ on booleans and infinity)."""
    tree: dict = {}
    for key, v in settings.items():
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = v
    out: list[str] = []

    def walk(node, depth):
        for k, v in node.items():
            if isinstance(v, dict):
                out.append("  " * depth + f"{k}:")
                walk(v, depth + 1)
            else:
                out.append("  " * depth + f"{k}: {value(v)}")

    walk(tree, 0)
    return out


def recipe_aggregation(spec, recipe: bool, loss_agg_mode, notes: list, note) -> str | None:
    """The aggregation a write uses: `loss_agg_mode` when given, else the method's recipe's (`recipe_for`) when
    `recipe`, with `note(found)` appended to `notes` (each engine words it in its own terms), else None."""
    if loss_agg_mode is not None:
        return loss_agg_mode
    found = recipe_for(spec) if recipe else None
    if found is None:
        return None
    notes.append(note(found))
    return found.loss_agg_mode
