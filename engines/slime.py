"""slime (THUDM/slime, a snapshot at commit 624b824a): its clip flags, how divclip reads a launch command, and how
it writes a method.

slime is not on the package index, so its flags and defaults come from its public source at a pinned commit:
`slime/utils/arguments.py` at 624b824a898ab0ec1fcb4d373004c7f3852bf515 (SOURCE below). The KEYS table is
checked by tests/engines/test_slime.py against an excerpt of that file's `add_argument` calls kept in
tests/fixtures/engines/slime/ (read with `ast`); `slime_624b824a_flags.txt` lists every flag slime itself declares
at that commit. A snapshot: a later slime may differ, and this module says which commit it read.

The loss is `slime/utils/ppo_utils.py` and `slime/backends/megatron_utils/loss.py` `policy_loss_function`:
* `--advantage-estimator` picks the loss too: gspo -> the sequence ratio (`compute_gspo_kl`: the per-sequence
  mean of log r, exp'd, on every token), cispo -> `compute_cispo_loss` (-sg(clip(r, 1 - ε, 1 + ε_high))·A·log π),
  anything else -> `compute_policy_loss`, PPO's clip with `--eps-clip` / `--eps-clip-high` (None: eps-clip) and
  the dual clip `--eps-clip-c` (off by default). r = exp(log π - log π_old) unclamped (verl clamps log r at ±20):
  every spec read here is '/noclamp' (the form parameter clamp_log_ratio=False), gspo's log s too. gspo differentiates s
  through the per-sequence mean (the clip form's `seq_grad_mean` = True: each token gets its row's mean of the kept
  −A·s). ε_low = --eps-clip >= 1 is no lower bound (ratio.clamp(1 - ε, ...) below 0), as slime runs it.
* The loss is summed per sample over its tokens and divided by the sample's (rollout's) token count, at least 1
  (`get_sum_of_sample_mean`), and `loss_function` divides the sum over samples by the step's sample count,
  empty (removed) samples included: divclip's seq-mean-token-mean-all exactly (`exact_aggregation`; verl's
  seq-mean-token-mean, the `loss_agg_mode` reported, skips empty rows). `--calculate-per-token-loss`: the token
  sum over `loss_function`'s num_tokens, each sample's count at least 1: token-mean-min1 exactly (token-mean
  when no sample is empty). tests/engines/test_parity_slime.py holds both against slime's own `loss_function`.
* `--use-opsm` multiplies the loss by OPSM's mask (`compute_opsm_mask`: 0 on the tokens with A < 0 of a sample
  whose mean log(π_old/π_θ) exceeds `--opsm-delta`), the denominators unchanged: not in the spec; the warning
  gives the exact recipe, divclip's correction 'opsm=δ' with rollout_log_prob = π_old (TRL's OPSM compares with
  π_rollout, so read_correction does not return it).
* `--use-tis` multiplies the loss by clamp(π_old/π_rollout, tis-clip-low, tis-clip) (`vanilla_tis_function`); a
  custom function (`--custom-tis-function-path`, e.g. ICEPOP's mask) may replace it. A weight beside the clip.
* `--use-rollout-logprobs` takes the inference engine's log-probs as π_old: then even one step per rollout sees
  a ratio other than 1 (the train/inference mismatch), and the clip acts on that mismatch
  (`EngineRead.ratio_anchor` = 'rollout': divclip's loss equals it with old_log_prob the rollout's log-probs;
  --use-tis then still weighs by the recomputed π_old over π_rollout, which that call cannot see: named).

Updates per rollout: `rollout_batch_size × n_samples_per_prompt` samples in steps of `global_batch_size`
(or `--num-steps-per-rollout` steps), one pass (slime has no PPO epochs).
"""

from __future__ import annotations

import difflib
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
    ignored_key_advice,
    name_loss_terms,
    ratio_clip_spec,
    recipe_aggregation,
    typed_values,
)
from divclip.engines.errors import ConfigError
from divclip.engines.launch import render_launch
from divclip.engines.pitfalls import Pitfall, on_policy_note
from divclip.theory.forms.cispo_cap import cispo_cap_as_cispo
from divclip.theory.spec import ClipSpec

NAME = "slime"
COMMIT = "624b824a898ab0ec1fcb4d373004c7f3852bf515"
VERSION = f"git {COMMIT[:8]} (snapshot)"
SOURCE = f"github.com/THUDM/slime at {COMMIT}: slime/utils/arguments.py"
DEFAULTS_FROM = (
    f"slime {SOURCE} (a snapshot of the public source; slime is not on the package index) and "
    "slime/utils/ppo_utils.py, slime/backends/megatron_utils/loss.py"
)
FORMATS = ("launch",)
COMMAND = "python3 train.py"
PLUGIN = None
"""slime loads a custom loss by path (`--loss-type custom_loss --custom-loss-function-path module:fn`); divclip
ships no slime loss: docs/engines.md shows the wrapper to write."""

ESTIMATORS = ("grpo", "gspo", "cispo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "ppo")
KEYS: dict[str, Key] = {
    "--eps-clip": Key("float", 0.2, above=-math.inf, doc="ratio clip width ε_low (and ε_high when unset); >= 0"),
    "--eps-clip-high": Key("float", None, nullable=True, above=0.0, doc="ε_high (None: eps-clip)"),
    "--eps-clip-c": Key("float", None, nullable=True, above=1.0, doc="dual-clip cap c for A < 0 (None: off)"),
    "--advantage-estimator": Key("str", "grpo", choices=ESTIMATORS, doc="advantages, and the loss: gspo, cispo"),
    "--loss-type": Key("str", "policy_loss", choices=("policy_loss", "sft_loss", "custom_loss"), doc="the loss"),
    "--custom-loss-function-path": Key("str", None, nullable=True, doc="module:function of a custom loss"),
    "--calculate-per-token-loss": Key("bool", None, nullable=True, doc="token-mean (else per-sample mean)"),
    "--use-tis": Key("bool", False, doc="weight the loss by clamp(π_old/π_rollout)"),
    "--tis-clip": Key("float", 2.0, above=0.0, doc="its upper clamp"),
    "--tis-clip-low": Key("float", 0.0, above=-math.inf, doc="its lower clamp"),
    "--custom-tis-function-path": Key("str", None, nullable=True, doc="a custom IS/rejection function"),
    "--use-rollout-logprobs": Key("bool", False, doc="π_old = the inference engine's log-probs"),
    "--rollout-batch-size": Key("int", None, nullable=True, above=0, doc="prompts per rollout (required)"),
    "--n-samples-per-prompt": Key("int", 1, above=0, doc="responses per prompt (group size)"),
    "--global-batch-size": Key("int", None, nullable=True, above=0, doc="samples per optimizer step"),
    "--num-steps-per-rollout": Key("int", None, nullable=True, above=0, doc="optimizer steps per rollout"),
    "--use-kl-loss": Key("bool", False, doc="KL to the reference as a loss term"),
    "--kl-loss-coef": Key("float", 0.0, above=-math.inf, doc="its coefficient"),
    "--kl-loss-type": Key("str", "k1", choices=("k1", "k2", "k3", "low_var_kl"), doc="its estimator"),
    "--use-unbiased-kl": Key("bool", False, doc="the KL loss's unbiased estimate"),
    "--custom-pg-loss-reducer-function-path": Key("str", None, nullable=True, doc="a user function reduces pg_loss"),
    "--use-opsm": Key("bool", False, doc="Off-Policy Sequence Masking of the A < 0 tokens of far-off samples"),
    "--opsm-delta": Key("float", 1e-4, above=-math.inf, doc="OPSM's threshold on the sample's mean log(π_old/π_θ)"),
    "--kl-coef": Key("float", 0.0, above=-math.inf, doc="KL penalty in the reward"),
    "--entropy-coef": Key("float", 0.0, above=-math.inf, doc="entropy bonus: the loss less entropy_coef·H"),
}
ROLE_KEYS = {
    "low": "--eps-clip",
    "high": "--eps-clip-high",
    "dual_clip": "--eps-clip-c",
    "epochs": "--num-steps-per-rollout",
    "minibatch": "--global-batch-size",
}
ON_POLICY_FIX = "set --global-batch-size below rollout-batch-size × n-samples-per-prompt"
TYPO_CUTOFF = 0.85  # difflib ratio: "--eps-clip-hgh" is 0.96 from "--eps-clip-high"
KNOWN_FLAGS_FILE = Path(__file__).with_name(f"slime_{COMMIT[:8]}_flags.txt")
KNOWN_KEYS_FROM = (
    f"slime {SOURCE}: the flags divclip reads, and a flag one slip from one of them "
    "(Megatron-LM's own flags are passed through and not checked)"
)


@functools.lru_cache(maxsize=1)
def known_flags() -> frozenset:
    """The flags slime declares at COMMIT (Megatron-LM's are not among them)."""
    lines = KNOWN_FLAGS_FILE.read_text().splitlines()
    return frozenset(ln for ln in lines if ln and not ln.startswith("#"))


def detect(settings: Mapping) -> float:
    """How many settings are slime's own dashed flags (`--eps-clip`, `--rollout-batch-size`, ...)."""
    known = known_flags()
    return float(sum(1 for k in settings if isinstance(k, str) and k in known))


# ------------------------------------------------------------------------------------------------ read
def read(settings: Mapping, **_options) -> EngineRead:
    """The clip settings of a slime launch command ({flag: value}, `divclip.engines.launch`)."""
    g, keys = typed_values(settings, KEYS)
    low = g["--eps-clip"]
    if low < 0:
        raise ConfigError(f"--eps-clip must be a number >= 0 (slime clamps r to [1 - eps_clip, 1 + ...]), got {low!r}")
    high = g["--eps-clip-high"] if g["--eps-clip-high"] is not None else low
    est, loss_type = g["--advantage-estimator"], g["--loss-type"]
    form = "clip" if loss_type == "policy_loss" else "other"
    if form == "clip" and est == "cispo":
        form = "cispo"
    per_token = bool(g["--calculate-per-token-loss"])
    s = EngineRead(
        engine=NAME,
        defaults_from=DEFAULTS_FROM,
        loss_mode=est if loss_type == "policy_loss" else loss_type,
        form=form,
        measure="ratio" if form != "other" else None,
        level="sequence" if est == "gspo" and form == "clip" else "token",
        budget_low=low if form != "other" else None,
        budget_high=high if form != "other" else None,
        dual_clip_c=g["--eps-clip-c"] if form == "clip" else None,
        loss_agg_mode="token-mean" if per_token else "seq-mean-token-mean",
        group_size=g["--n-samples-per-prompt"],
        keys=keys,
        kl={
            "use_kl_loss": g["--use-kl-loss"],
            "kl_loss_coef": g["--kl-loss-coef"],
            "kl_loss_type": g["--kl-loss-type"],
            "adv_estimator": est,
        },
        unknown_keys=_typos(settings),
    )
    _structure(s, g)
    if g["--use-rollout-logprobs"]:
        s.ratio_anchor = "rollout"  # policy_loss_function: old_log_probs = batch["rollout_log_probs"]
    if form != "other":
        s.ratio_bounds = [max(1.0 - low, 0.0), 1.0 + high]
        s.spec = _spec(s)
    else:
        s.notes.append(
            f"--loss-type {loss_type} is reported, not modelled"
            + (f" (custom loss {g['--custom-loss-function-path']})" if loss_type == "custom_loss" else "")
        )
    if form != "other":
        s.notes.append(
            f"aggregation exactly: {exact_aggregation(s)} (slime counts an empty sample: "
            + ("as one token" if per_token else "as 0, over every sample")
            + f"; {s.loss_agg_mode} where no sample is empty)"
        )
    _pitfalls(s, g)
    s.advice += ignored_key_advice(s, IGNORED_BY_LOSS, f"slime {VERSION} slime/utils/ppo_utils.py compute_cispo_loss")
    name_loss_terms(s, loss_terms(g))
    return s


def loss_terms(g: dict) -> list[tuple[str, str]]:
    """slime's terms beside the policy loss (slime/backends/megatron_utils/loss.py at the pinned commit)."""
    out = []
    if g["--use-kl-loss"] and g["--kl-loss-coef"]:
        unbiased = ", --use-unbiased-kl" if g["--use-unbiased-kl"] else ""
        out.append(
            (
                f"--use-kl-loss, --kl-loss-coef {g['--kl-loss-coef']:g}, "
                f"--kl-loss-type {g['--kl-loss-type']}{unbiased}",
                "a KL-to-reference term added to the loss",
            )
        )
    if g["--kl-coef"]:
        out.append(
            (
                f"--kl-coef {g['--kl-coef']:g}",
                "a KL penalty to the reference added to the token rewards (reward shaping)",
            )
        )
    if g["--entropy-coef"]:
        out.append((f"--entropy-coef {g['--entropy-coef']:g}", "an entropy bonus, the loss less entropy_coef·H"))
    return out


IGNORED_BY_LOSS = {"cispo": ("--eps-clip-c",)}
"""Flags slime's cispo loss never reads (compute_cispo_loss has no dual clip)."""


MAX_TYPO_SCAN = 2000  # undeclared flags matched against KEYS for a typo


def _typos(settings: Mapping) -> list:
    """Flags that slime does not declare but that are one slip away from a flag divclip reads (KEYS): a flag
    far from those may be one of Megatron-LM's, which slime passes through, so it is not reported."""
    known = known_flags()
    out = []
    unknown = [k for k in settings if isinstance(k, str) and k.startswith("--") and k not in known]
    for key in unknown[:MAX_TYPO_SCAN]:  # difflib per flag: a script of 50 000 made-up flags is not scanned whole
        near = difflib.get_close_matches(key, list(KEYS), n=1, cutoff=TYPO_CUTOFF)
        if near:
            out.append((key, near[0]))
    return out


def _structure(s: EngineRead, g: dict) -> None:
    prompts, n = g["--rollout-batch-size"], g["--n-samples-per-prompt"]
    gbs, steps = g["--global-batch-size"], g["--num-steps-per-rollout"]
    rollout_lp = g["--use-rollout-logprobs"]
    if prompts is None or (gbs is None and steps is None):
        s.minibatches = s.updates_per_batch = math.nan
        s.on_policy = False
        s.on_policy_reason = (
            "--rollout-batch-size and --global-batch-size (or --num-steps-per-rollout) decide the "
            "steps per rollout; the config does not set them, so divclip cannot count them"
        )
        return
    samples = prompts * n
    count = steps if steps is not None else max(1, samples // gbs)
    how = (
        f"--num-steps-per-rollout={steps}"
        if steps is not None
        else f"rollout-batch-size × n-samples-per-prompt = {samples} samples / global-batch-size={gbs}"
    )
    s.minibatches = s.updates_per_batch = count
    s.on_policy = count == 1 and not rollout_lp
    s.on_policy_reason = f"{how} = {count} step(s) per rollout, one pass" + (
        "; π_old is the inference engine's log-probs (--use-rollout-logprobs), so the ratio carries the "
        "train/inference mismatch even on the first step"
        if rollout_lp
        else ""
    )


def _spec(s: EngineRead):
    # slime exponentiates the raw log-ratio (compute_policy_loss, compute_cispo_loss): no clamp
    if s.form != "cispo":
        return ratio_clip_spec(s, clamp_log_ratio=False)
    try:
        return ClipSpec(
            "ratio", eps_low=s.budget_low, eps_high=s.budget_high, form="cispo", params={"clamp_log_ratio": False}
        )
    except ValueError as exc:
        s.notes.append(f"no divclip method says this exactly: {exc}")
        return None


def _pitfalls(s: EngineRead, g: dict) -> None:
    loss = "slime/backends/megatron_utils/loss.py policy_loss_function"
    if s.on_policy and s.form != "other":
        s.advice.append(
            Pitfall(
                "on_policy_clip_inert",
                on_policy_note(NAME, s.on_policy_reason, ON_POLICY_FIX),
                "--global-batch-size",
                f"slime {SOURCE} (global_batch_size: 'if you hope to train 1 "
                "step for each rollout, the global_bach_size should be set as rollout_batch_size * "
                "n_samples_per_prompt'); docs/theory.md §5",
            )
        )
    if g["--custom-pg-loss-reducer-function-path"]:
        s.advice.append(
            Pitfall(
                "custom_reducer_not_modelled",
                f"--custom-pg-loss-reducer-function-path {g['--custom-pg-loss-reducer-function-path']}: the policy "
                "loss is reduced by that user function (clip fractions and the KL metric keep slime's "
                "sum_of_sample_mean), so divclip's aggregation "
                f"{s.loss_agg_mode} is not what the run computes; divclip never loads or runs it",
                "--custom-pg-loss-reducer-function-path",
                f"slime {COMMIT[:8]} {loss} (pg_loss_reducer)",
            )
        )
    if g["--use-opsm"] and s.form != "other":
        s.advice.append(
            Pitfall(
                "opsm_not_modelled",
                f"--use-opsm: slime multiplies the policy loss by OPSM's mask, 0 on every token with A < 0 of a "
                f"sample whose mean log(π_old/π_θ) exceeds --opsm-delta {g['--opsm-delta']:g} (the denominators "
                "keep those tokens); divclip's spec does not carry it: policy_loss with the correction "
                f"'opsm={g['--opsm-delta']:g}' and rollout_log_prob = π_old (not π_rollout) computes it"
                + (
                    " (with --use-tis too, whose weight is of π_old/π_rollout, no one correction does)"
                    if g["--use-tis"]
                    else ""
                ),
                "--use-opsm",
                f"slime {COMMIT[:8]} slime/utils/ppo_utils.py compute_opsm_mask, {loss}",
            )
        )
    if g["--use-tis"] or g["--custom-tis-function-path"]:
        what = (
            f"clamp(π_old/π_rollout, {g['--tis-clip-low']:g}, {g['--tis-clip']:g})"
            if not g["--custom-tis-function-path"]
            else f"{g['--custom-tis-function-path']}'s weight"
        )
        s.notes.append(f"--use-tis: the loss is weighted by {what}, beside the clip")
        s.advice.append(
            Pitfall(
                "is_correction_threshold",
                f"TIS on: every token's loss is weighted by {what} (train/inference mismatch), beside the PPO clip; "
                "divclip reads it as a rollout correction (divclip.engines.read_correction), which "
                "translate carries or names"
                + (
                    "; with --use-rollout-logprobs the ratio is π_θ/π_rollout while the weight stays the recomputed "
                    "π_old's over π_rollout: give policy_loss old_log_prob = π_rollout and that correction's weights "
                    "(of π_old, rollout_correction) as rollout_is_weights"
                    if g["--use-rollout-logprobs"]
                    else ""
                ),
                "--use-tis",
                f"slime {COMMIT[:8]} {loss} (vanilla_tis_function, icepop_function)",
            )
        )
    if s.form == "cispo" and s.budget_low < 1.0:
        s.advice.append(
            Pitfall(
                "cispo_lower_bound_active",
                f"cispo with --eps-clip {s.budget_low:g} keeps the lower clip 1 - ε = {1 - s.budget_low:g} on the IS "
                "weight; canonical CISPO (arXiv 2506.13585) clips only above: --eps-clip 1.0",
                "--eps-clip",
                f"slime {SOURCE} (parse_args warns: 'CISPO is canonically single-sided')",
            )
        )


# ----------------------------------------------------------------------------------------------- write
def write(spec, *, recipe: bool = True, loss_agg_mode: str | None = None, label: str | None = None) -> EngineWrite:
    """`spec` as slime flags; a ValueError names what slime cannot express without a custom loss."""
    spec, label = check_spec(spec, label)
    notes: list = []
    diffs: list = []
    if spec.form == "cispo_cap":  # TRL's cispo: slime's cispo at --eps-clip 1 (no lower bound)
        spec = cispo_cap_as_cispo(spec)
    if spec.form == "cispo":
        settings = _write_cispo(spec, notes)
    elif spec.form == "clip":
        settings = _write_clip(spec, notes, diffs)
    else:
        raise ValueError(
            f"slime ({VERSION}) has no {spec.form!r} loss form (its losses: the PPO clip, gspo, "
            "cispo); a custom loss (--custom-loss-function-path) could run divclip's, see docs/engines.md"
        )
    agg = _aggregation(spec, recipe, loss_agg_mode, notes)
    if agg == "token-mean":
        settings["--calculate-per-token-loss"] = True
    elif agg not in (None, "seq-mean-token-mean"):
        diffs.append(
            Difference(
                f"aggregation {agg}",
                "slime has a per-sample mean (default) and token-mean "
                "(--calculate-per-token-loss) only; the per-sample mean stands",
            )
        )
    return EngineWrite(NAME, label, {}, settings, tuple(notes), differences=tuple(diffs))


def exact_aggregation(read: EngineRead) -> str:
    """The divclip loss_agg_mode that is slime's reduction of the policy loss exactly (module doc string):
    seq-mean-token-mean-all by default, token-mean-min1 with --calculate-per-token-loss. `read.loss_agg_mode`
    keeps verl's nearest name (seq-mean-token-mean, token-mean), equal when no sample is empty."""
    return "token-mean-min1" if read.loss_agg_mode == "token-mean" else "seq-mean-token-mean-all"


def _write_clip(spec, notes: list, diffs: list) -> dict:
    try:
        ratio, diff = as_ratio_clip(spec)
    except ValueError as exc:
        raise ValueError(f"slime ({VERSION}) clips the ratio only: {exc}") from None
    if diff is not None:
        diffs.append(diff)
    est = "gspo" if ratio.level == "sequence" else "grpo"
    notes.append(
        f"--advantage-estimator {est} also selects the loss ("
        + ("the sequence ratio" if est == "gspo" else "PPO's clip; gspo and cispo select theirs")
        + ")"
    )
    settings = {
        "--advantage-estimator": est,
        "--eps-clip": float(ratio.eps_low),
        "--eps-clip-high": float(ratio.eps_high),
    }
    if ratio.param("dual_clip_c", None) is not None:
        settings["--eps-clip-c"] = float(ratio.param("dual_clip_c", None))
    else:
        notes.append("no --eps-clip-c: slime's default is no dual clip")
    return settings


def _write_cispo(spec, notes: list) -> dict:
    if spec.measure_name != "ratio":
        raise ValueError(f"slime's cispo clips the ratio by widths ε, got measure {spec.measure_name!r}")
    return {
        "--advantage-estimator": "cispo",
        "--eps-clip": float(spec.eps_low),
        "--eps-clip-high": float(spec.eps_high),
    }


def _aggregation(spec, recipe: bool, loss_agg_mode, notes: list) -> str | None:
    return recipe_aggregation(
        spec,
        recipe,
        loss_agg_mode,
        notes,
        lambda found: (
            f"aggregation {found.loss_agg_mode}: {found.source}"
            + (" (slime's default per-sample mean)" if found.loss_agg_mode == "seq-mean-token-mean" else "")
        ),
    )


def render(w: EngineWrite, fmt: str) -> list[str]:
    """The body of `w` as a launch command ('launch'); `divclip check` reads it back."""
    if fmt != "launch":
        raise ValueError(f"format for {NAME} must be one of {list(FORMATS)}, got {fmt!r}")
    return render_launch(COMMAND, w.env, w.settings)
