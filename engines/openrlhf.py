"""OpenRLHF 0.11.2: its clip flags and defaults, how divclip reads a launch command, and how it writes a method.

Flags and defaults are those of the installed package's `openrlhf/cli/train_ppo_ray.py` (its argparse parser is
built under `__main__`, so it is read with `ast`: `divclip.engines.source.argparse_flags`), checked by
tests/engines/test_openrlhf.py; `openrlhf_0.11.2_flags.txt` is every option string of that parser (the
unknown-flag warning: argparse refuses a flag it does not know).

The loss is `openrlhf/models/loss.py` `PolicyLoss`, read line by line for the mapping onto a ClipSpec:
* `ppo`: r = exp(clamp(log r, ±20)), loss = -min(r·A, clip(r, 1 - ε_low, 1 + ε_high)·A), as verl's vanilla;
  `--actor.dual_clip c` caps the loss at -c·A for A < 0 (off by default, unlike verl where c = 3 always
  applies): ClipSpec('ratio', ε_low, ε_high, dual_clip_c=c).
* `gspo`: r = exp(mean_t log r_t) per sequence, the same clip (and the dual clip, if set), log s not clamped
  (verl and divclip's default clamp it at 10): the spec is '/noclamp'. The gradient runs through the mean
  (`ratio = (log_ratio * action_mask).sum(-1) / ...`), so each token gets its row's mean of the kept −A·s, not
  its own −A·s as in verl: the clip form's `seq_grad_mean` = True (equal to verl's when A is one value per row,
  not with OpenRLHF's default GAE advantages). gspo always aggregates per sample (`token_level_loss = False`).
* Aggregation (`aggregate_loss`): token-mean is Σ m·ℓ / Σ m; the per-sample mean divides each row's sum by its
  integer token count + 1e-8, which rounds back to the count in float32, and averages the non-empty rows:
  divclip's seq-mean-token-mean-noeps exactly (`exact_aggregation`; the `loss_agg_mode` reported keeps verl's
  name). Both are over the optimizer step's tokens or samples (`iter_grad_accum_global_norm`), so the
  micro-batches of one step sum to divclip's loss on the step's whole batch. tests/engines/test_parity_openrlhf.py
  holds them against `PolicyLoss` itself.
* `--actor.eps_clip_low_high LOW HIGH` wins over `--actor.eps_clip` (both sides), as `train_ppo_ray` sets it;
  LOW >= 1 is no lower bound (ratio.clamp(1 - LOW, ...) below 0), LOW = 0 none below 1, as OpenRLHF runs them.
* IS correction (`--algo.advantage.is_correction_*`) multiplies the ppo loss by a clamped or masked
  π_old/π_rollout (train/inference mismatch): a weight outside the ClipSpec, read as a rollout correction by
  `divclip.engines.read_correction` (token ratio: an is= weight; level seq or gating binary_kl / tv: a filter
  whose survivors keep their own ρ, the zeroed tokens kept in the denominator). Under
  gspo it applies no weight at all: the sequence ratio is anchored at π_rollout instead (log_probs −
  rollout_log_probs), `EngineRead.ratio_anchor` = 'rollout': divclip's loss equals it with old_log_prob the
  rollout's log-probs.

Updates per rollout batch: `rollout.batch_size` prompts × `rollout.n_samples_per_prompt` samples are swept
`train.max_epochs` times in optimizer steps of `train.batch_size` samples (`ppo_trainer.py` max_steps).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from pathlib import Path

from divclip.engines.base import (
    Difference,
    EngineRead,
    EngineWrite,
    Key,
    as_ratio_clip,
    check_spec,
    name_loss_terms,
    ratio_clip_spec,
    recipe_aggregation,
    typed_values,
    unknown_keys,
)
from divclip.engines.errors import ConfigError
from divclip.engines.launch import render_launch
from divclip.engines.pitfalls import Pitfall, on_policy_note
from divclip.engines.source import flag_pattern

NAME = "openrlhf"
VERSION = "0.11.2"
ENTRY = "openrlhf/cli/train_ppo_ray.py"
DEFAULTS_FROM = f"openrlhf {VERSION}: {ENTRY} (argparse, read with ast) and openrlhf/models/loss.py (PolicyLoss)"
FORMATS = ("launch",)
COMMAND = "python3 -m openrlhf.cli.train_ppo_ray"
PLUGIN = None
"""OpenRLHF has no loss registry: PolicyLoss is built in `ActorPPOTrainer.__init__`
(docs/engines.md says how to run divclip's loss there)."""

LOSS_TYPES = ("ppo", "gspo")
AGG_MODES = ("token-mean", "seq-mean-token-mean")
IS_FLAGS = "--algo.advantage.is_correction_"

KEYS: dict[str, Key] = {
    "--actor.eps_clip": Key("float", 0.2, above=0.0, doc="ratio clip width ε (both sides)"),
    "--actor.eps_clip_low_high": Key(
        "float", None, nullable=True, above=0.0, doc="two values ε_low ε_high; wins over eps_clip"
    ),
    "--actor.dual_clip": Key("float", None, nullable=True, above=1.0, doc="dual-clip cap c for A < 0 (None: off)"),
    "--actor.policy_loss_type": Key("str", "ppo", choices=LOSS_TYPES, doc="ppo (token ratio) or gspo (sequence)"),
    "--actor.loss_agg_mode": Key("str", "token-mean", choices=AGG_MODES, doc="how token losses are averaged"),
    IS_FLAGS + "level": Key("str", "off", choices=("off", "token", "seq"), doc="train/rollout IS correction"),
    IS_FLAGS + "mode": Key("str", "mask", choices=("mask", "clip"), doc="drop or clamp out-of-band units"),
    IS_FLAGS + "gating": Key("str", "ratio", choices=("ratio", "binary_kl", "tv"), doc="the gated statistic"),
    IS_FLAGS + "threshold": Key("float", [0.5, 5.0], doc="LOW HIGH band (one value: HIGH, LOW = 0)"),
    "--rollout.batch_size": Key("int", 1024, above=0, doc="prompts per rollout batch"),
    "--rollout.n_samples_per_prompt": Key("int", 1, above=0, doc="responses per prompt (group size)"),
    "--train.batch_size": Key("int", 128, above=0, doc="samples per optimizer step"),
    "--train.max_epochs": Key("int", 1, above=0, doc="passes over one rollout batch"),
    "--algo.advantage.estimator": Key("str", "gae", doc="advantage estimator (group_norm is GRPO's)"),
    "--algo.kl.use_loss": Key("bool", False, doc="KL to the reference as a loss term"),
    "--algo.kl.init_coef": Key("float", 0.01, above=-math.inf, doc="KL coefficient"),
    "--algo.kl.estimator": Key("str", "k1", choices=("k1", "k2", "k3"), doc="KL estimator"),
    "--algo.kl.unbiased_gradient": Key("bool", False, doc="KL loss gradient made unbiased"),
    "--actor.entropy_coef": Key("float", None, nullable=True, above=-math.inf, doc="entropy bonus coefficient"),
}
_MULTI = {"--actor.eps_clip_low_high": 2, IS_FLAGS + "threshold": "+"}  # flags that take several values
ROLE_KEYS = {
    "low": "--actor.eps_clip_low_high",
    "high": "--actor.eps_clip_low_high",
    "dual_clip": "--actor.dual_clip",
    "epochs": "--train.max_epochs",
    "minibatch": "--train.batch_size",
}
"""Which flag sets each part of the clip (for warnings that name a key)."""
ON_POLICY_FIX = "set --train.max_epochs > 1 or --train.batch_size < rollout.batch_size × n_samples_per_prompt"
RENAMED = {  # flags of OpenRLHF <= 0.11.0 that 0.11.2's parser refuses
    IS_FLAGS + "enable": IS_FLAGS + "level",
    IS_FLAGS + "type": IS_FLAGS + "mode / " + IS_FLAGS + "gating",
}


def key_origin(key: str, entry: str | None = None) -> str | None:
    """Which other OpenRLHF version had `key` (RENAMED: 0.11.0's parser, OpenRLHF/OpenRLHF v0.11.0
    openrlhf/cli/train_ppo_ray.py), said as the unknown-key warning says it; `entry` (the launch's module) aside."""
    if key not in RENAMED:
        return None
    return f"not a flag of OpenRLHF {VERSION}: OpenRLHF 0.11.0 had it ({VERSION} renamed it {RENAMED[key]})"


KNOWN_FLAGS_FILE = Path(__file__).with_name(f"openrlhf_{VERSION}_flags.txt")
KNOWN_KEYS_FROM = (
    f"openrlhf {VERSION} {ENTRY}: every option string of its argparse parser (snapshot: {KNOWN_FLAGS_FILE.name})"
)


@functools.lru_cache(maxsize=1)
def known_flags() -> frozenset:
    """Every option string of the parser; a name with {…} is a pattern (`--{prefix}.adam.lr`)."""
    lines = KNOWN_FLAGS_FILE.read_text().splitlines()
    return frozenset(ln for ln in lines if ln and not ln.startswith("#"))


@functools.lru_cache(maxsize=1)
def _patterns() -> tuple:
    return tuple(flag_pattern(n) for n in known_flags() if "{" in n)


def is_known(key: str) -> bool:
    """A flag OpenRLHF's parser accepts (an environment variable is not a flag)."""
    return not key.startswith("--") or key in known_flags() or any(p.match(key) for p in _patterns())


def detect(settings: Mapping) -> float:
    """How many settings are OpenRLHF flags (dotted `--group.name`, unique to it among the engines)."""
    flags = (k for k in settings if isinstance(k, str) and k.startswith("--"))
    return float(sum(1 for k in flags if is_known(k) or k in RENAMED))


# ------------------------------------------------------------------------------------------------ read
def read(settings: Mapping, **_options) -> EngineRead:
    """The clip settings of an OpenRLHF launch command ({flag: value}, `divclip.engines.launch`)."""
    single = {k: v for k, v in KEYS.items() if k not in _MULTI}
    g, keys = typed_values(settings, single)
    for flag, n in _MULTI.items():
        g[flag] = _floats(settings, flag, n, keys)
    eps = g["--actor.eps_clip"]
    low, high = g["--actor.eps_clip_low_high"] or (eps, eps)
    loss_type, dual = g["--actor.policy_loss_type"], g["--actor.dual_clip"]
    agg = "seq-mean-token-mean" if loss_type == "gspo" else g["--actor.loss_agg_mode"]
    samples = g["--rollout.batch_size"] * g["--rollout.n_samples_per_prompt"]
    train, epochs = g["--train.batch_size"], g["--train.max_epochs"]
    minibatches = max(1, math.ceil(samples / train))
    updates = epochs * minibatches
    s = EngineRead(
        engine=NAME,
        defaults_from=DEFAULTS_FROM,
        loss_mode=loss_type,
        form="clip",
        measure="ratio",
        level="sequence" if loss_type == "gspo" else "token",
        budget_low=low,
        budget_high=high,
        dual_clip_c=dual,
        loss_agg_mode=agg,
        epochs=epochs,
        minibatches=minibatches,
        updates_per_batch=updates,
        on_policy=updates == 1,
        on_policy_reason=(
            f"train.max_epochs={epochs} × {minibatches} step(s) (rollout.batch_size × "
            f"n_samples_per_prompt = {samples} samples / train.batch_size={train}) = {updates} "
            "update(s) per rollout batch"
        ),
        group_size=g["--rollout.n_samples_per_prompt"],
        kl={
            "use_loss": g["--algo.kl.use_loss"],
            "init_coef": g["--algo.kl.init_coef"],
            "estimator": g["--algo.kl.estimator"],
            "adv_estimator": g["--algo.advantage.estimator"],
        },
        keys=keys,
        ratio_bounds=[1.0 - low, 1.0 + high],
        unknown_keys=unknown_keys(settings, is_known, known_flags()),
    )
    s.spec = _spec(s)
    if agg == "seq-mean-token-mean":
        s.notes.append(
            "aggregation exactly: seq-mean-token-mean-noeps (OpenRLHF's per-sample mean has no 1e-8 in the counts)"
        )
    _pitfalls(s, settings, g)
    name_loss_terms(s, loss_terms(g))
    return s


def loss_terms(g: dict) -> list[tuple[str, str]]:
    """OpenRLHF's terms beside the clipped policy loss (trainer/ray/ppo_actor.py; the reward KL in
    trainer/ppo_utils/experience_maker.py): a reference model and its KL whenever --algo.kl.init_coef > 0."""
    out, coef = [], g["--algo.kl.init_coef"]
    if coef > 0:
        est = g["--algo.kl.estimator"]
        if g["--algo.kl.use_loss"]:
            unbiased = ", --algo.kl.unbiased_gradient" if g["--algo.kl.unbiased_gradient"] else ""
            out.append(
                (
                    f"--algo.kl.init_coef {coef:g}, --algo.kl.use_loss, --algo.kl.estimator {est}{unbiased}",
                    "a KL-to-reference term added to the actor loss",
                )
            )
        else:
            out.append(
                (
                    f"--algo.kl.init_coef {coef:g} (--algo.kl.use_loss off), --algo.kl.estimator {est}",
                    "a KL penalty to the reference subtracted from the reward before the advantages",
                )
            )
    entropy = g["--actor.entropy_coef"]
    if entropy:
        out.append((f"--actor.entropy_coef {entropy:g}", "an entropy bonus, the actor loss less entropy_coef·H"))
    return out


def _floats(settings: Mapping, flag: str, n, keys: dict):
    """A flag of several floats (argparse nargs=2 or '+'), typed; its default when absent."""
    default = KEYS[flag].default
    if flag not in settings:
        keys[flag] = {"value": default, "origin": "default"}
        return default
    raw = settings[flag]
    values = raw if isinstance(raw, (list, tuple)) else [raw] if raw is not True else []
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError):
        out = []
    ok = out and all(math.isfinite(v) for v in out) and (len(out) == n if isinstance(n, int) else len(out) <= 2)
    if not ok:
        want = f"{n} numbers" if isinstance(n, int) else "one or two numbers (HIGH, or LOW HIGH)"
        raise ConfigError(f"{flag} takes {want}, got {raw!r}")
    if flag == "--actor.eps_clip_low_high" and not (out[0] >= 0 and out[1] > 0):
        raise ConfigError(f"{flag} takes two widths, ε_low >= 0 and ε_high > 0 (ε_low ε_high), got {raw!r}")
    if flag == IS_FLAGS + "threshold" and len(out) == 1:
        out = [0.0, out[0]]  # train_ppo_ray: a single value is an upper bound only
    keys[flag] = {"value": out, "origin": "set"}
    return tuple(out)


def _spec(s: EngineRead):
    # GSPO (sequence level): no clamp of log s, the gradient through the mean (module doc string)
    return ratio_clip_spec(s, clamp_log_ratio=s.level != "sequence")


def _pitfalls(s: EngineRead, settings: Mapping, g: dict) -> None:
    loss = "openrlhf/models/loss.py PolicyLoss"
    if s.on_policy:
        s.advice.append(
            Pitfall(
                "on_policy_clip_inert",
                on_policy_note(NAME, s.on_policy_reason, ON_POLICY_FIX),
                "--train.max_epochs",
                f"openrlhf {VERSION} trainer/ppo_trainer.py (max_steps) and "
                "trainer/ray/ppo_actor.py ppo_train; docs/theory.md §5",
            )
        )
    if s.loss_mode == "gspo" and s.explicit("--actor.loss_agg_mode") and g["--actor.loss_agg_mode"] != s.loss_agg_mode:
        s.advice.append(
            Pitfall(
                "ignored_key",
                "--actor.loss_agg_mode token-mean is ignored under gspo: OpenRLHF's "
                "PolicyLoss sets token_level_loss = False (seq-mean-token-mean)",
                "--actor.loss_agg_mode",
                f"openrlhf {VERSION} {loss}.__init__",
            )
        )
    if s.explicit("--actor.eps_clip") and s.explicit("--actor.eps_clip_low_high"):
        s.advice.append(
            Pitfall(
                "ignored_key",
                f"--actor.eps_clip {g['--actor.eps_clip']:g} is ignored: --actor.eps_clip_low_high sets both sides",
                "--actor.eps_clip",
                f"openrlhf {VERSION} {ENTRY} (eps_clip_low_high defaults to (eps_clip, eps_clip) only when unset)",
            )
        )
    _is_correction(s, g)
    for old, new in RENAMED.items():
        if old in settings:
            s.advice.append(
                Pitfall(
                    "renamed_flag",
                    f"{old} is a flag of OpenRLHF <= 0.11.0; {VERSION}'s parser refuses it: use {new}",
                    old,
                    f"openrlhf {VERSION} {ENTRY}",
                )
            )


def check_is_flags(level: str, mode: str, gating: str, low: float, high: float) -> None:
    """The is_correction combinations `PolicyLoss.__init__` refuses, as a ConfigError naming the flags."""
    cite = f"openrlhf {VERSION} openrlhf/models/loss.py PolicyLoss.__init__"
    if mode == "clip" and (level == "seq" or gating != "ratio"):
        raise ConfigError(
            f"{IS_FLAGS}mode clip needs {IS_FLAGS}level token and gating ratio, got level {level!r}, "
            f"gating {gating!r}: OpenRLHF refuses this ({cite})"
        )
    if gating != "ratio" and level != "off" and low > 0:
        raise ConfigError(
            f"{IS_FLAGS}gating {gating} takes an upper bound only (one threshold, a δ), got "
            f"{low:g} {high:g}: OpenRLHF refuses this ({cite})"
        )


def _is_correction(s: EngineRead, g: dict) -> None:
    level, mode, gating = (g[IS_FLAGS + k] for k in ("level", "mode", "gating"))
    low, high = g[IS_FLAGS + "threshold"]
    check_is_flags(level, mode, gating, low, high)
    if level == "off":
        return
    if s.loss_mode == "gspo":
        s.ratio_anchor = "rollout"
        s.notes.append(
            f"IS correction ({level}, {mode}, {gating}) under gspo: no weight and no mask is applied; the sequence "
            "ratio is anchored at π_rollout instead, s = exp(mean(log π_θ − log π_rollout)) (divclip's loss with "
            "old_log_prob = the rollout's log-probs), so the clip acts on the train/inference mismatch too"
        )
        s.advice.append(
            Pitfall(
                "is_correction_threshold",
                f"IS correction on under gspo ({level}-level {mode} on {gating}, band [{low:g}, {high:g}]): "
                "OpenRLHF's PolicyLoss applies no IS weight or mask to gspo; it takes the sequence ratio to "
                "π_rollout (log_probs − rollout_log_probs) instead of π_old, so the band is never used and the "
                "clip bounds π_θ/π_rollout; a translation to another engine keeps π_old as the anchor",
                IS_FLAGS + "level",
                f"openrlhf {VERSION} openrlhf/models/loss.py PolicyLoss.forward (policy_loss_type gspo)",
            )
        )
        return
    if level == "token" and gating == "ratio":
        what = "clamped into" if mode == "clip" else "zeroed outside"
        weight = f"π_old/π_rollout, {what} [{low:g}, {high:g}]"
    else:
        unit = "its sequence's mean" if level == "seq" else "the token's"
        stat = {"ratio": "exp(mean log ρ)", "binary_kl": "binary KL", "tv": "binary TV"}[gating]
        if level == "token":
            stat = {"binary_kl": "binary KL", "tv": "binary TV"}[gating]
        gate = f"{stat} of π_rollout vs π_old" if gating != "ratio" else stat
        weight = f"π_old/π_rollout, zeroed where {unit} {gate} leaves [{low:g}, {high:g}]"
    s.notes.append(
        f"IS correction ({level}, {mode}, {gating}): the loss is multiplied by {weight} (zeroed tokens stay in "
        "the denominator): a train/inference-mismatch weight beside the clip, not part of it"
    )
    s.advice.append(
        Pitfall(
            "is_correction_threshold",
            f"IS correction on ({level}-level {mode} on {gating}, band [{low:g}, {high:g}]): every token's loss is "
            "weighted by π_old/π_rollout beside the PPO clip; divclip reads it as a rollout correction "
            "(divclip.engines.read_correction), which translate carries or names",
            IS_FLAGS + "level",
            f"openrlhf {VERSION} openrlhf/models/loss.py PolicyLoss.forward",
        )
    )


def exact_aggregation(read: EngineRead) -> str:
    """The divclip loss_agg_mode that is OpenRLHF's `aggregate_loss` exactly, on the optimizer step's whole batch
    (module doc string): token-mean, or seq-mean-token-mean-noeps for the per-sample mean (gspo's too).
    `read.loss_agg_mode` keeps verl's name, which adds 1e-8 to each row's count."""
    return "seq-mean-token-mean-noeps" if read.loss_agg_mode == "seq-mean-token-mean" else read.loss_agg_mode


# ----------------------------------------------------------------------------------------------- write
def write(spec, *, recipe: bool = True, loss_agg_mode: str | None = None, label: str | None = None) -> EngineWrite:
    """`spec` as OpenRLHF flags; a ValueError names what OpenRLHF 0.11.2 cannot express (it has no plug-in)."""
    spec, label = check_spec(spec, label)
    notes: list = []
    diffs: list = []
    if spec.form != "clip":
        raise ValueError(
            f"OpenRLHF {VERSION} has no {spec.form!r} loss form: its PolicyLoss runs the PPO clip "
            f"(policy_loss_type ppo or gspo) and has no plug-in for divclip's loss"
        )
    try:
        ratio, diff = as_ratio_clip(spec)
    except ValueError as exc:
        raise ValueError(f"OpenRLHF {VERSION} clips the ratio only and has no plug-in: {exc}") from None
    if diff is not None:
        diffs.append(diff)
    loss_type = "gspo" if ratio.level == "sequence" else "ppo"
    settings = {
        "--actor.policy_loss_type": loss_type,
        "--actor.eps_clip_low_high": [float(ratio.eps_low), float(ratio.eps_high)],
    }
    if ratio.param("dual_clip_c", None) is not None:
        settings["--actor.dual_clip"] = float(ratio.param("dual_clip_c", None))
    else:
        notes.append("no --actor.dual_clip: OpenRLHF's default is no dual clip")
    agg = _aggregation(spec, recipe, loss_agg_mode, notes)
    if loss_type == "gspo":
        notes.append("gspo aggregates seq-mean-token-mean and does not clamp the sequence log-ratio at 10")
        if agg not in (None, "seq-mean-token-mean"):
            diffs.append(Difference(f"aggregation {agg}", "OpenRLHF's gspo always aggregates seq-mean-token-mean"))
    elif agg is not None:
        if agg in AGG_MODES:
            settings["--actor.loss_agg_mode"] = agg
        else:
            diffs.append(
                Difference(
                    f"aggregation {agg}", f"OpenRLHF has {' and '.join(AGG_MODES)} only; its default token-mean stands"
                )
            )
    return EngineWrite(NAME, label, {}, settings, tuple(notes), differences=tuple(diffs))


def _aggregation(spec, recipe: bool, loss_agg_mode, notes: list) -> str | None:
    return recipe_aggregation(
        spec, recipe, loss_agg_mode, notes, lambda found: f"loss_agg_mode={found.loss_agg_mode}: {found.source}"
    )


def render(w: EngineWrite, fmt: str) -> list[str]:
    """The body of `w` as a launch command ('launch'); `divclip check` reads it back."""
    if fmt != "launch":
        raise ValueError(f"format for {NAME} must be one of {list(FORMATS)}, got {fmt!r}")
    return render_launch(COMMAND, w.env, w.settings)
