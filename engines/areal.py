"""AReaL 1.0.4: its clip keys and defaults, how divclip reads an AReaL YAML (or its `key=value` overrides), and
how it writes a method.

Keys and defaults are those of the installed package's config dataclasses (`areal/api/cli_args.py`:
`GRPOConfig`, `PPOActorConfig`, `RejectionSamplingConfig`, ...; that module imports AReaL's engine stack, so it is
read with `ast`: `divclip.engines.source.nested_keys`), checked by tests/engines/test_areal.py;
`areal_1.0.4_keys.txt` is every leaf key of `GRPOConfig` (the unknown-key warning).

The loss is `areal/utils/functional/functional.py` `ppo_actor_loss_fn` (and `sapo_loss_fn`), called from
`areal/trainer/ppo/actor.py` `grpo_loss_fn`, read line by line:
* the ratio r = exp(log π_θ - log π_prox) is not clamped (verl clamps log r at ±20; the spec read here has
  clamp_log_ratio=False, '/noclamp'); the clip is
  [1 - eps_clip, 1 + (eps_clip_higher or eps_clip)], and `c_clip` (None: off) caps the loss at c·|A|, which
  binds for A < 0 only: verl's dual clip.
* `importance_sampling_level: sequence` is GSPO's geometric-mean ratio, with the advantage averaged per sequence
  too (`_compute_sequence_level_ratio_and_advantages`; `loss_advantages` below); the loss is a token mean, not
  GSPO's sequence mean. Its gradient through the mean is then the same as divclip's −Ā·s per token.
* the loss is always one token mean over the mini-batch (`loss_weight_fn = loss_mask.count_nonzero()`): verl's
  token-mean; AReaL has no per-sequence mean.
* `use_sapo_loss` replaces the clip with SAPO's gate (sapo_tau_pos / sapo_tau_neg).
* `use_decoupled_loss`: π_prox (recomputed) is the PPO anchor and `rejection_sampling` masks or clamps the
  behaviour weight π_prox/π_behave (the train/inference and staleness correction, `behav_imp_weight_cap` of
  older AReaL); without it π_old is the inference engine's log-probs unless `recompute_logprob`.

Updates per batch: `ppo_n_minibatches` optimizer steps, one pass (`PPOActor.ppo_update`). AReaL is
asynchronous: with `rollout.max_head_offpolicyness` > 0 a batch may come from a policy that many versions old.
"""

from __future__ import annotations

import functools
import math
import re
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
    name_loss_terms,
    recipe_for,
    typed_values,
    unknown_keys,
)
from divclip.engines.errors import ConfigError
from divclip.engines.hydra import resolve_interpolations
from divclip.engines.pitfalls import Pitfall, on_policy_note

NAME = "areal"
VERSION = "1.0.4"
DEFAULTS_FROM = (
    f"areal {VERSION}: areal/api/cli_args.py (GRPOConfig, PPOActorConfig, RejectionSamplingConfig; "
    "read with ast) and areal/utils/functional/functional.py (ppo_actor_loss_fn)"
)
FORMATS = ("yaml", "overrides")
PLUGIN = None
"""AReaL's actor calls its `grpo_loss_fn` directly (no registry); docs/engines.md shows the subclass to write."""

A = "actor."
RS = A + "rejection_sampling."
KEYS: dict[str, Key] = {
    A + "eps_clip": Key("float", 0.2, above=-math.inf, doc="ratio clip width ε_low (and ε_high when unset); >= 0"),
    A + "eps_clip_higher": Key("float", None, nullable=True, above=0.0, doc="ε_high (None: eps_clip)"),
    A + "c_clip": Key("float", None, nullable=True, above=1.0, doc="dual-clip cap c for A < 0 (None: off)"),
    A + "importance_sampling_level": Key("str", "token", choices=("token", "sequence"), doc="sequence: GSPO"),
    A + "use_sapo_loss": Key("bool", False, doc="SAPO's soft gate instead of the clip"),
    A + "sapo_tau_pos": Key("float", 1.0, above=0.0, doc="SAPO gate temperature for A > 0"),
    A + "sapo_tau_neg": Key("float", 1.05, above=0.0, doc="SAPO gate temperature for A <= 0"),
    A + "ppo_n_minibatches": Key("int", 4, above=0, doc="optimizer steps per batch"),
    A + "recompute_logprob": Key("bool", False, doc="π_old recomputed by the trainer"),
    A + "use_decoupled_loss": Key("bool", False, doc="PPO against π_prox, behaviour weight separately"),
    A + "m2_threshold": Key("float", None, nullable=True, above=0.0, doc="M2PO second-moment mask"),
    RS + "level": Key("str", "token", choices=("token", "sequence"), doc="behaviour-weight filter granularity"),
    RS + "action": Key("str", "mask", choices=("mask", "clamp"), doc="drop or clamp"),
    RS + "metric": Key("str", "ratio", choices=("ratio", "kl_k1", "kl_k2", "kl_k3"), doc="the filtered statistic"),
    RS + "agg": Key("str", "mean", choices=("sum", "mean", "max"), doc="sequence aggregation"),
    RS + "upper": Key("float", 5.0, above=-math.inf, doc="upper bound"),
    RS + "lower": Key("float", None, nullable=True, above=-math.inf, doc="lower bound"),
    A + "kl_ctl": Key("float", 0.1, above=-math.inf, doc="KL coefficient"),
    A + "kl_estimator": Key("str", "k1", choices=("k1", "k2", "k3"), doc="KL estimator"),
    "gconfig.n_samples": Key("int", 1, above=0, doc="responses per prompt (group size)"),
    "train_dataset.batch_size": Key("int", 1, above=0, doc="prompts per batch"),
    "rollout.max_head_offpolicyness": Key("int", 0, above=-1, doc="policy versions a batch may lag"),
}
ROLE_KEYS = {
    "low": A + "eps_clip",
    "high": A + "eps_clip_higher",
    "dual_clip": A + "c_clip",
    "epochs": A + "ppo_n_minibatches",
    "minibatch": A + "ppo_n_minibatches",
}
ON_POLICY_FIX = "set actor.ppo_n_minibatches > 1"
KNOWN_KEYS_FILE = Path(__file__).with_name(f"areal_{VERSION}_keys.txt")
KNOWN_KEYS_FROM = f"areal {VERSION} areal/api/cli_args.py GRPOConfig: every leaf key (snapshot: {KNOWN_KEYS_FILE.name})"
_UNIQUE = (
    "actor.eps_clip",
    "actor.ppo_n_minibatches",
    "gconfig.",
    "train_dataset.",
    "rollout.max_head_offpolicyness",
    "actor.use_decoupled_loss",
    "actor.rejection_sampling",
)


@functools.lru_cache(maxsize=1)
def known_keys() -> frozenset:
    lines = KNOWN_KEYS_FILE.read_text().splitlines()
    return frozenset(ln for ln in lines if ln and not ln.startswith("#"))


def is_known(key: str) -> bool:
    """A key of GRPOConfig, or one below a leaf that takes a mapping or list (scheduling_spec, env_vars, ...)."""
    known = known_keys()
    if key.startswith("-"):  # a launcher's own flag (`uv run --isolated`): hydra settings are key=value
        return True
    if key in known:
        return True
    parts = key.split(".")
    return any(".".join(parts[:i]) in known for i in range(1, len(parts)))


@functools.lru_cache(maxsize=1)
def _sections() -> frozenset:
    """Every dotted prefix of a known key (a sub-config: `ref.optimizer`)."""
    return frozenset(k.rsplit(".", i)[0] for k in known_keys() for i in range(1, k.count(".") + 1))


_NODE_REFERENCE = re.compile(r"^\$\{([A-Za-z_][\w.]*)\}$")


def is_known_setting(key: str, value) -> bool:
    """`is_known`, and a sub-config set to null (`ref.optimizer: null`: an `OptimizerConfig | None` field) or to
    another sub-config by interpolation (`critic.optimizer: ${actor.optimizer}`: OmegaConf, which AReaL's
    load_expr_config merges the YAML with, takes a node's interpolation and resolves it to that node)."""
    if is_known(key):
        return True
    if key not in _sections():
        return False
    reference = _NODE_REFERENCE.match(value) if isinstance(value, str) else None
    return value is None or (reference is not None and reference.group(1) in _sections())


def detect(settings: Mapping) -> float:
    """AReaL's keys in the settings, those only AReaL has (actor.eps_clip, gconfig., ...) twice."""
    return dotted_key_score(settings, is_known, _UNIQUE)


# ------------------------------------------------------------------------------------------------ read
def read(settings: Mapping, *, entry: str | None = None, **_options) -> EngineRead:
    """The clip settings of a flat AReaL config ({dotted key: value})."""
    settings = resolve_interpolations(settings)
    g, keys = typed_values(settings, KEYS)
    prox, prox_keys = typed_values(settings, PROX_KEYS)  # its default is a constant's name in cli_args.py
    g.update(prox)
    keys.update(prox_keys)
    low = g[A + "eps_clip"]
    if low < 0:
        raise ConfigError(f"{A}eps_clip must be a number >= 0 (AReaL clips r to [1 - eps_clip, 1 + ...]), got {low!r}")
    high = g[A + "eps_clip_higher"] if g[A + "eps_clip_higher"] is not None else low
    sapo = g[A + "use_sapo_loss"]
    level = g[A + "importance_sampling_level"]
    n = g[A + "ppo_n_minibatches"]
    s = EngineRead(
        engine=NAME,
        defaults_from=DEFAULTS_FROM,
        loss_mode="sapo" if sapo else "ppo",
        form="sapo" if sapo else "clip",
        measure=None if sapo else "ratio",
        level=level,
        budget_low=None if sapo else low,
        budget_high=None if sapo else high,
        dual_clip_c=None if sapo else g[A + "c_clip"],
        loss_agg_mode="token-mean",
        epochs=1,
        minibatches=n,
        updates_per_batch=n,
        group_size=g["gconfig.n_samples"],
        keys=keys,
        kl={"kl_ctl": g[A + "kl_ctl"], "kl_estimator": g[A + "kl_estimator"]},
        unknown_keys=unknown_keys(
            settings,
            lambda k: is_known_setting(k, settings[k]) or is_example_key(k, NAME, entry),
            known_keys(),
        ),
    )
    _structure(s, g)
    s.spec = _spec(s, g)
    if s.spec is not None and s.form == "clip":
        s.ratio_bounds = [max(1.0 - low, 0.0), 1.0 + high]
    if level == "sequence":
        s.differences.append(
            Difference(
                "sequence level",
                "AReaL averages the advantage per sequence and takes a "
                "token mean of the loss (GSPO and divclip: a mean over sequences)",
            )
        )
        s.notes.append(
            "importance_sampling_level = sequence: AReaL replaces each token's advantage by its sequence's mean "
            "before the clip (functional.py _compute_sequence_level_ratio_and_advantages), so a sequence with "
            "advantages of both signs is clipped by the sign of their mean; divclip's loss is AReaL's on "
            "divclip.engines.areal.loss_advantages(...) (loss_agg_mode token-mean)"
        )
    _pitfalls(s, settings, g)
    s.advice += ignored_key_advice(s, IGNORED_BY_LOSS, f"areal {VERSION} areal/trainer/ppo/actor.py (use_sapo_loss)")
    name_loss_terms(s, loss_terms(g, settings))
    return s


def loss_advantages(settings: Mapping, advantages, loss_mask):
    """The advantages AReaL's loss uses for these settings: at importance_sampling_level sequence each row's mean
    over its loss tokens, on those tokens (0 elsewhere), as `_compute_sequence_level_ratio_and_advantages` does;
    at token level `advantages` itself. With them, `policy_loss(lp, old, loss_advantages(...), mask, read.spec,
    "token-mean")` is AReaL's `ppo_actor_loss_fn` / `sapo_loss_fn` (tests/engines/test_parity_areal.py). The row
    mean is taken in policy_loss's compute dtype (float32 for bf16/fp16 advantages, which it returns in float32)."""
    import torch

    g, _ = typed_values(resolve_interpolations(settings), KEYS)
    if g[A + "importance_sampling_level"] != "sequence":
        return advantages
    advantages = advantages if advantages.dtype == torch.float64 else advantages.to(torch.float32)
    mask = loss_mask.to(advantages.dtype)
    row = (advantages * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1)
    return torch.where(loss_mask.bool(), row.expand_as(advantages), torch.zeros_like(advantages))


def loss_terms(g: dict, settings: Mapping) -> list[tuple[str, str]]:
    """AReaL's terms beside the clipped loss: a reference model, and its KL in the reward, when actor.kl_ctl > 0
    and the config has a `ref` section (trainer/rl_trainer.py; the penalty in trainer/ppo/actor.py)."""
    has_ref = any(isinstance(k, str) and k.startswith("ref.") for k in settings)
    if g[A + "kl_ctl"] > 0 and has_ref:
        return [
            (
                f"{A}kl_ctl = {g[A + 'kl_ctl']:g} with a ref model, kl_estimator = {g[A + 'kl_estimator']}",
                "a KL penalty to the reference, -kl_ctl·KL, in the reward before the advantages",
            )
        ]
    return []


PROX_KEYS = {
    A + "prox_logp_method": Key(
        "str", "recompute", choices=("recompute", "loglinear", "metrics"), doc="π_prox recomputed or approximated"
    ),
}
"""PPOActorConfig.prox_logp_method (default PROX_LOGP_METHOD_RECOMPUTE, areal/utils/constants.py ProxLogpMethod)."""

IGNORED_BY_LOSS = {"sapo": (A + "eps_clip", A + "eps_clip_higher", A + "c_clip")}
"""Keys AReaL's sapo_loss_fn never gets (the actor passes it tau_pos/tau_neg, not the clip widths)."""


def _structure(s: EngineRead, g: dict) -> None:
    n, lag = g[A + "ppo_n_minibatches"], g["rollout.max_head_offpolicyness"]
    # PPOActorConfig.should_compute_prox_logp: prox_logp_method loglinear skips the forward pass (π_prox approximated)
    approximated = g[A + "use_decoupled_loss"] and g[A + "prox_logp_method"] == "loglinear"
    recomputed = (g[A + "recompute_logprob"] or g[A + "use_decoupled_loss"]) and not approximated
    anchor = (
        "π_prox approximated by log-linear interpolation between the behaviour policy and the current one, not "
        "recomputed (use_decoupled_loss, prox_logp_method loglinear): the ratio is not 1"
        if approximated
        else "π_prox recomputed before the update (use_decoupled_loss)"
        if g[A + "use_decoupled_loss"]
        else "π_old recomputed by the trainer (recompute_logprob)"
        if recomputed
        else "π_old = the inference engine's log-probs (recompute_logprob false)"
    )
    s.on_policy = n == 1 and recomputed
    s.on_policy_reason = f"ppo_n_minibatches={n} step(s) per batch, one pass; the ratio's anchor is {anchor}" + (
        f"; batches may lag {lag} policy version(s) (rollout.max_head_offpolicyness)" if lag else ""
    )


def _spec(s: EngineRead, g: dict):
    from divclip.theory.spec import ClipSpec

    m2 = g[A + "m2_threshold"]
    if m2 is not None:  # M2PO: a batch mask before the clip, the rollout correction's m2po (engines/correction.py)
        if g[A + "use_decoupled_loss"]:
            s.notes.append(
                f"{A}m2_threshold = {m2:g}: M2PO drops the tokens of the batch with the largest second moment "
                "(log π_old − log π_prox)² until the mean of the rest is below it (areal/trainer/ppo/actor.py "
                f"_apply_m2po_masking), then applies the clip; divclip reads it as the rollout correction m2po={m2!r} "
                "(divclip.engines.read_correction), which translate carries or names"
            )
        else:
            s.notes.append(
                f"{A}m2_threshold = {m2:g} has no effect without use_decoupled_loss: AReaL sets π_prox = π_old "
                "(areal/trainer/ppo/actor.py compute_advantages), so M2PO's (log π_old − log π_prox)² is 0"
            )
    try:
        if s.form == "sapo":  # at sequence level the gate of the sequence ratio, A its row mean (loss_advantages)
            return ClipSpec(
                form="sapo",
                level=s.level,
                params={"tau_pos": g[A + "sapo_tau_pos"], "tau_neg": g[A + "sapo_tau_neg"], "clamp_log_ratio": False},
            )
        return ClipSpec(
            "ratio",
            eps_low=s.budget_low,
            eps_high=s.budget_high,
            level=s.level,
            params={"dual_clip_c": s.dual_clip_c, "clamp_log_ratio": False},
        )
    except ValueError as exc:
        s.notes.append(f"no divclip method says this exactly: {exc}")
        return None


def _pitfalls(s: EngineRead, settings: Mapping, g: dict) -> None:
    actor = f"areal {VERSION} areal/trainer/ppo/actor.py"
    if s.on_policy:
        s.advice.append(
            Pitfall(
                "on_policy_clip_inert",
                on_policy_note(NAME, s.on_policy_reason, ON_POLICY_FIX),
                A + "ppo_n_minibatches",
                f"{actor} PPOActor.ppo_update (one pass over ppo_n_minibatches mini-batches); docs/theory.md §5",
            )
        )
    elif not (g[A + "recompute_logprob"] or g[A + "use_decoupled_loss"]):
        s.advice.append(
            Pitfall(
                "clip_on_inference_logprobs",
                "π_old is the inference engine's log-probs (recompute_logprob and use_decoupled_loss are false): the "
                "clip acts on the train/inference mismatch and, with max_head_offpolicyness > 0, on policy staleness, "
                "not only on this update's own step",
                A + "recompute_logprob",
                f"{actor} PPOActor.compute_advantages",
            )
        )
    rs_set = any(k.startswith(RS) or k == A + "rejection_sampling" for k in settings)
    if rs_set and settings.get(A + "rejection_sampling", 0) is not None:
        if not g[A + "use_decoupled_loss"]:
            s.advice.append(
                Pitfall(
                    "ignored_key",
                    "actor.rejection_sampling is ignored without actor.use_decoupled_loss: true",
                    A + "rejection_sampling",
                    f"areal {VERSION} areal/api/cli_args.py PPOActorConfig.__post_init__",
                )
            )
        else:
            lower, upper, level, metric = g[RS + "lower"], g[RS + "upper"], g[RS + "level"], g[RS + "metric"]
            band = f"outside [{lower:g}, {upper:g}]" if lower is not None else f"above {upper:g}"
            pooled = f" ({g[RS + 'agg']} over the sequence)" if level == "sequence" else ""
            if g[RS + "action"] == "mask":
                what = f"{level}-level mask where {metric}{pooled} is {band}"
            else:
                what = f"{level}-level clamp of the weight to [{lower if lower is not None else 0:g}, {upper:g}]" + (
                    f" in a sequence whose {metric}{pooled} is {band}" if level == "sequence" else ""
                )
            weight = (
                "the geometric mean of ρ = π_prox/π_behave over its sequence"
                if level == "sequence" and metric == "ratio"
                else "ρ = π_prox/π_behave"
            )
            act = (
                "set to 0 there (the token stays in the loss's denominator)"
                if g[RS + "action"] == "mask"
                else "clamped"
            )
            s.notes.append(f"rejection sampling: {what} on the behaviour weight π_prox/π_behave, beside the clip")
            if g[RS + "action"] == "mask" and g[A + "importance_sampling_level"] == "sequence":
                s.notes.append(
                    "rejection sampling (mask) with importance_sampling_level = sequence: AReaL's GSPO ratio and its "
                    "per-sequence advantage are means over the tokens the filter kept (ppo_actor_loss_fn hands them "
                    "the filtered loss_mask), while its denominator counts every token; divclip's policy_loss with "
                    "this correction averages over every valid token, so the two losses differ where a sequence has "
                    "masked tokens (tests/engines/test_correction_areal.py)"
                )
            s.advice.append(
                Pitfall(
                    "is_correction_threshold",
                    f"behaviour importance weight ({what}): every token's loss is weighted by {weight}, {act}, "
                    "beside the PPO clip; divclip reads it as a rollout correction (divclip.engines.read_correction), "
                    "which translate carries or names",
                    RS + "upper",
                    f"areal {VERSION} areal/utils/functional/functional.py apply_rejection_sampling",
                )
            )
    elif g[A + "use_decoupled_loss"]:
        s.advice.append(
            Pitfall(
                "decoupled_without_weight",
                "use_decoupled_loss without rejection_sampling: AReaL applies no behaviour importance weight at all "
                "(the pre-1.0 default behave_imp_weight_cap = 5 is gone)",
                A + "rejection_sampling",
                f"areal {VERSION} areal/api/cli_args.py PPOActorConfig.__post_init__ (its warning)",
            )
        )
    if s.form == "sapo" and g[A + "use_decoupled_loss"]:
        s.advice.append(
            Pitfall(
                "incompatible_keys",
                "use_sapo_loss with use_decoupled_loss: AReaL refuses to start",
                A + "use_sapo_loss",
                f"areal {VERSION} areal/api/cli_args.py PPOActorConfig",
            )
        )


# ----------------------------------------------------------------------------------------------- write
def write(spec, *, recipe: bool = True, loss_agg_mode: str | None = None, label: str | None = None) -> EngineWrite:
    """`spec` as AReaL actor settings; a ValueError names what AReaL cannot express (it has no plug-in)."""
    spec, label = check_spec(spec, label)
    notes: list = []
    diffs: list = []
    if spec.form == "sapo":
        keys = {
            "use_sapo_loss": True,
            "sapo_tau_pos": float(spec.param("tau_pos")),
            "sapo_tau_neg": float(spec.param("tau_neg")),
            "importance_sampling_level": spec.level,
            "use_decoupled_loss": False,
        }
        notes.append("SAPO needs use_decoupled_loss: false in AReaL")
        if spec.param("clamp_log_ratio"):
            notes.append("AReaL's SAPO gates r = exp(log π - log π_old) without verl's ±20 clamp on log r")
    elif spec.form == "clip":
        keys = _write_clip(spec, notes, diffs)
    else:
        raise ValueError(
            f"AReaL {VERSION} has no {spec.form!r} loss form: its actor runs the PPO clip (token or "
            "sequence ratio) or SAPO, and has no plug-in for divclip's loss"
        )
    agg = (
        loss_agg_mode
        if loss_agg_mode is not None
        else (recipe_for(spec).loss_agg_mode if recipe and recipe_for(spec) else None)
    )
    if agg not in (None, "token-mean"):
        diffs.append(Difference(f"aggregation {agg}", "AReaL always takes one token mean over the mini-batch"))
    return EngineWrite(NAME, label, {}, {A + k: v for k, v in keys.items()}, tuple(notes), differences=tuple(diffs))


def _write_clip(spec, notes: list, diffs: list) -> dict:
    try:
        ratio, diff = as_ratio_clip(spec)
    except ValueError as exc:
        raise ValueError(f"AReaL {VERSION} clips the ratio only and has no plug-in: {exc}") from None
    if diff is not None:
        diffs.append(diff)
    if ratio.level == "sequence":
        diffs.append(
            Difference(
                "sequence level",
                "AReaL averages the advantage per sequence and takes a token "
                "mean of the loss (GSPO and divclip: a mean over sequences)",
            )
        )
    keys = {
        "eps_clip": float(ratio.eps_low),
        "eps_clip_higher": float(ratio.eps_high),
        "c_clip": None if ratio.param("dual_clip_c", None) is None else float(ratio.param("dual_clip_c", None)),
        "importance_sampling_level": ratio.level,
        "use_sapo_loss": False,
    }
    notes.append("AReaL clips r = exp(log π - log π_prox) without verl's ±20 clamp on log r")
    return keys


# ---------------------------------------------------------------------------------------------- render
def _value(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def render(w: EngineWrite, fmt: str) -> list[str]:
    """The body of `w` as AReaL YAML ('yaml') or `key=value` command-line overrides ('overrides')."""
    if fmt == "overrides":
        return [" ".join(f"{k}={_value(v)}" for k, v in w.settings.items())]
    if fmt != "yaml":
        raise ValueError(f"format for {NAME} must be one of {list(FORMATS)}, got {fmt!r}")
    out = ["actor:"]
    out += [f"  {k[len(A) :]}: {_value(v)}" for k, v in w.settings.items()]
    return out
