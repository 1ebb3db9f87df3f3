"""One dataclass holds every knob of a GRPO-family run; `TRAIN_PRESETS` names tuned bundles of them.

Validation happens in `__post_init__`, so a bad value fails when the config is built, before any model is
loaded or any step runs. Each error names the field, the value and what is allowed (STYLE.md, "Errors").
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from divclip.theory.advantages import NORMS
from divclip.theory.loss_metrics import KL_ESTIMATORS, LOSS_AGG_MODES
from divclip.theory.spec import PRESETS, ClipSpec, parse_method
from divclip.trainer.tasks import BUILTIN_TASKS

DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class TrainerConfig:
    """Hyperparameters of one run: model, task, sampling, the clipped loss, the optimiser, logging."""

    # -- model and task
    model: str = "tiny"
    """'tiny' builds a tiny GPT-2 and a character tokenizer in code; otherwise a local Hugging Face causal-LM
    directory (config.json + weights + tokenizer files). Nothing is ever downloaded."""
    task: str = "arith"
    """Generated in code: 'arith' (addition), 'mult' (multiplication), 'countdown' (four numbers 1-9, reach the
    target with + - *; any correct expression scores); or a path to a JSONL file of {"prompt", "answer"} lines
    scored by the numeric / \\boxed{} verifier."""
    arith_digits: int = 2
    """'arith' and 'mult': operands have this many digits (zero-padded), so 2 gives 10^4 problems "07+35=" -> "42"."""
    eval_size: int = 200
    """Held-out problems (never trained on) for greedy-decoding accuracy; 0 disables evaluation."""
    eval_every: int = 25
    """Evaluate every this many RL steps (and always before the first and after the last step)."""
    pass_k: int = 0
    """k > 0: at the warm start and after the last step also sample k completions per held-out problem (at
    `temperature`) and log eval/pass@k (any of the k correct) and eval/pass@1_sampled (their mean); 0 skips it."""
    # -- tiny model ('tiny' only)
    tiny_n_layer: int = 2
    """Transformer blocks of the tiny GPT-2."""
    tiny_n_embd: int = 64
    """Hidden width of the tiny GPT-2."""
    tiny_n_head: int = 4
    """Attention heads of the tiny GPT-2 (must divide tiny_n_embd)."""
    # -- supervised warm start
    sft_steps: int = 0
    """Supervised steps on the task's reference answers before RL (a warm start); 0 skips it."""
    warm_start_from: str | None = None
    """A step-0 checkpoint directory (checkpoints/step-000000 of a run with the same model, task, seed and sft_*
    settings): its weights and its row 0 replace running the warm start, so many methods share one warm start.
    The result is the same as running the warm start here (same seed, device and threads)."""
    sft_batch_size: int = 64
    """Examples per supervised step."""
    sft_lr: float = 3e-3
    """AdamW learning rate of the warm start."""
    # -- sampling (rollouts)
    steps: int = 100
    """RL steps; each samples a fresh batch, then runs `ppo_epochs` epochs over it."""
    prompts_per_step: int = 16
    """Distinct prompts per step; the rollout batch holds prompts_per_step * group_size completions."""
    group_size: int = 8
    """G, completions sampled per prompt; GRPO's advantage needs G >= 2 (a group of one has no baseline)."""
    max_new_tokens: int = 8
    """Longest completion; a completion ends at the first EOS (which is scored and trained on)."""
    temperature: float = 1.0
    """Sampling temperature; log-probs for the loss use the same temperature, so π_old is the sampler."""
    # -- the loss
    method: str = "grpo"
    """A method string (`divclip.theory.spec`): a preset grpo, dapo, atr (KL3, δ = 0.023144), dppo_kl, dppo_tv,
    gspo, sapo, or e.g. 'kl3:0.02', 'ratio:0.2:0.28', 'binary_kl:0.05/gated/tis=20'."""
    measure: str | None = None
    """Replace the preset's divergence measure (a `theory.MEASURES` name other than 'ratio'); needs `delta`."""
    delta: float | None = None
    """Budget δ of D(r[, p]) <= δ; overrides the preset's δ (non-ratio measures; KL3: 0.01-0.05 is sane)."""
    dual_clip_c: float | None = None
    """Dual-clip cap c > 1 for A < 0 (verl's default c = 3); None keeps the preset's (off for all presets)."""
    adv_norm: str = "std"
    """Group advantage: 'std' (GRPO), 'none' (Dr. GRPO, no std division), 'rloo' (leave-one-out)."""
    loss_agg_mode: str = "token-mean"
    """verl's aggregation: token-mean (DAPO), seq-mean-token-mean (original GRPO), seq-mean-token-sum[-norm],
    token-sum."""
    ppo_epochs: int = 2
    """μ, passes over each rollout batch. With 1 epoch and 1 minibatch r == 1 and no clip bound acts."""
    minibatches: int = 2
    """Optimizer steps per epoch; the rollout batch is shuffled and split into this many equal parts."""
    staleness: int = 0
    """k, stale rollouts: step s samples with the policy after step s-1-k (the warm start while s-1-k < 0), as an
    asynchronous trainer whose rollouts lag k updates behind does; that sampler is π_old, so the ratio is already
    off 1 at the first minibatch. 0 samples with the current policy."""
    kl_coef: float = 0.0
    """Weight of the KL penalty to the frozen warm-start (reference) policy; 0 disables it (and the ref model)."""
    kl_estimator: str = "k3"
    """Per-token KL(π_θ‖π_ref) estimate in the penalty: k1, k2 or k3 (verl's low_var_kl, clamped to ±10)."""
    # -- optimiser
    lr: float = 1e-6
    """AdamW learning rate of the RL phase (1e-6 is typical for 1-8B models; the tiny preset uses 1e-4)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    adam_betas: tuple[float, float] = (0.9, 0.999)
    """AdamW (β1, β2)."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this before each optimizer step; 0 disables clipping."""
    # -- runtime
    seed: int = 0
    """Seeds the model init, the task split, every rollout and every shuffle: same seed, same CPU metrics."""
    device: str = "auto"
    """'cpu', 'cuda', or 'auto' (cuda when available)."""
    threads: int = 0
    """CPU threads for torch during the run (torch.set_num_threads); 0 keeps torch's default. Tiny models run
    fastest on 1 thread, and a fixed count keeps CPU runs bit-reproducible."""
    bf16: bool = True
    """On CUDA, run forward passes under bf16 autocast (weights and the loss stay float32). Ignored on CPU."""
    output_dir: str | None = None
    """Where metrics.jsonl, metrics.csv and checkpoints go; None keeps everything in memory."""
    checkpoint_every: int = 50
    """Write a checkpoint every this many steps (and after the warm start and the last step); 0 writes only
    those two."""
    keep_checkpoints: int = 2
    """How many of the newest checkpoints to keep on disk (damaged ones are never pruned)."""
    resume: bool = True
    """Continue from the newest checkpoint in output_dir when there is one (its settings must match, except
    steps, eval/checkpoint cadence and device). False starts over; output_dir's old checkpoints and metrics are
    moved to output_dir/superseded/, never deleted."""
    progress: bool = True
    """Show a progress bar on stderr."""

    def __post_init__(self):
        _check_paths(self)
        _check_ints(self)
        _check_floats(self)
        _check_choices(self)
        object.__setattr__(self, "adam_betas", tuple(self.adam_betas))
        self.clip_spec()  # a bad measure/δ combination fails here, not at the first loss call

    def clip_spec(self) -> ClipSpec:
        """The ClipSpec of `method`, with `measure`, `delta` and `dual_clip_c` applied on top."""
        spec = parse_method(self.method)
        changes = {}
        if self.measure is not None:
            changes.update(measure=self.measure, eps_low=None, eps_high=None)
        if self.delta is not None:
            changes["delta"] = self.delta
        if self.dual_clip_c is not None:
            changes["params"] = {**dict(spec.params), "dual_clip_c": self.dual_clip_c}
        if not changes:
            return spec
        try:
            return dataclasses.replace(spec, **changes)
        except ValueError as exc:
            where = f"method={self.method!r} with measure={self.measure!r}, delta={self.delta!r}"
            raise ValueError(f"{where}: {exc}") from None

    def replace(self, **changes) -> TrainerConfig:
        """A copy with `changes` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _fail(name, value, allowed):
    raise ValueError(f"TrainerConfig.{name} must be {allowed}, got {value!r}")


def _check_paths(cfg: TrainerConfig):
    if not isinstance(cfg.model, str) or not cfg.model:
        _fail("model", cfg.model, "'tiny' or a local Hugging Face model directory")
    if cfg.model != "tiny":
        path = Path(cfg.model)
        if not path.is_dir():
            _fail("model", cfg.model, "'tiny' or an existing local Hugging Face model directory (no such directory)")
        if not (path / "config.json").is_file():
            _fail("model", cfg.model, "a Hugging Face model directory containing config.json (none found there)")
    builtin = " or ".join(map(repr, BUILTIN_TASKS))
    if not isinstance(cfg.task, str) or not cfg.task:
        _fail("task", cfg.task, f"{builtin} or the path of a .jsonl file")
    if cfg.task not in BUILTIN_TASKS and not Path(cfg.task).is_file():
        _fail("task", cfg.task, f"{builtin} or the path of an existing .jsonl file (no such file)")
    if cfg.warm_start_from is not None:
        where = "None or a step-0 checkpoint directory (checkpoints/step-000000 of a run)"
        if not isinstance(cfg.warm_start_from, str) or not Path(cfg.warm_start_from).is_dir():
            _fail("warm_start_from", cfg.warm_start_from, f"{where}; no such directory")
    if cfg.output_dir is not None:
        if not isinstance(cfg.output_dir, str) or not cfg.output_dir:
            _fail("output_dir", cfg.output_dir, "None or a directory path")
        if Path(cfg.output_dir).exists() and not Path(cfg.output_dir).is_dir():
            _fail("output_dir", cfg.output_dir, "None or a directory path (it exists and is not a directory)")


# (smallest, largest) of every integer field. The upper bounds are far past any sensible run and keep a typo
# (1e9 steps, a 1e9-token completion) from hanging or exhausting memory: they fail here, before any work.
INT_RANGES: Mapping[str, tuple[int, int]] = MappingProxyType(
    {
        "arith_digits": (1, 4),
        "eval_size": (0, 100_000),
        "eval_every": (1, 10**6),
        "pass_k": (0, 1024),
        "tiny_n_layer": (1, 48),
        "tiny_n_embd": (1, 4096),
        "tiny_n_head": (1, 64),
        "sft_steps": (0, 10**6),
        "sft_batch_size": (1, 65_536),
        "steps": (1, 10**6),
        "prompts_per_step": (1, 4096),
        "group_size": (2, 1024),
        "max_new_tokens": (1, 32_768),
        "ppo_epochs": (1, 100),
        "minibatches": (1, 65_536),
        "staleness": (0, 100),
        "seed": (0, 2**32 - 1),
        "threads": (0, 256),
        "checkpoint_every": (0, 10**6),
        "keep_checkpoints": (1, 1000),
    }
)
MAX_ROLLOUT_SEQUENCES = 65_536
"""Largest rollout batch prompts_per_step * group_size."""
TEMPERATURE_RANGE = (1e-3, 1e3)
"""Sampling temperatures accepted (logits are divided by it: 1e-320 overflows them to inf)."""


def _check_ints(cfg: TrainerConfig):
    for name, (low, high) in INT_RANGES.items():
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            why = " (a group of one has no baseline: GRPO needs G >= 2)" if name == "group_size" else ""
            _fail(name, v, f"an integer in [{low}, {high}]{why}")
    if cfg.tiny_n_embd % cfg.tiny_n_head:
        _fail("tiny_n_head", cfg.tiny_n_head, f"a divisor of tiny_n_embd={cfg.tiny_n_embd}")
    batch = cfg.prompts_per_step * cfg.group_size
    if batch > MAX_ROLLOUT_SEQUENCES:
        _fail(
            "prompts_per_step",
            cfg.prompts_per_step,
            f"such that prompts_per_step * group_size <= {MAX_ROLLOUT_SEQUENCES} (group_size={cfg.group_size})",
        )
    if cfg.minibatches > batch:
        _fail("minibatches", cfg.minibatches, f"at most the rollout batch prompts_per_step*group_size = {batch}")


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_floats(cfg: TrainerConfig):
    for name in ("sft_lr", "lr"):
        v = getattr(cfg, name)
        if not (_finite(v) and v > 0):
            _fail(name, v, "a finite number > 0")
    low, high = TEMPERATURE_RANGE
    if not (_finite(cfg.temperature) and low <= cfg.temperature <= high):
        _fail("temperature", cfg.temperature, f"a number in [{low:g}, {high:g}]")
    for name in ("weight_decay", "kl_coef", "max_grad_norm"):
        v = getattr(cfg, name)
        if not (_finite(v) and v >= 0):
            _fail(name, v, "a finite number >= 0")
    betas = cfg.adam_betas
    if not (isinstance(betas, (tuple, list)) and len(betas) == 2 and all(_finite(b) and 0 <= b < 1 for b in betas)):
        _fail("adam_betas", betas, "two numbers in [0, 1)")
    if cfg.delta is not None and not (_finite(cfg.delta) and cfg.delta > 0):
        _fail("delta", cfg.delta, "None or a finite number > 0")
    if cfg.dual_clip_c is not None and not (_finite(cfg.dual_clip_c) and cfg.dual_clip_c > 1):
        _fail("dual_clip_c", cfg.dual_clip_c, "None or a finite number > 1")


def _check_choices(cfg: TrainerConfig):
    choices = {
        "adv_norm": list(NORMS),
        "loss_agg_mode": list(LOSS_AGG_MODES),
        "kl_estimator": ["k1", "k2", "k3"],
        "device": list(DEVICES),
    }
    for name, allowed in choices.items():
        if getattr(cfg, name) not in allowed:
            _fail(name, getattr(cfg, name), f"one of {allowed}")
    assert set(choices["kl_estimator"]) <= set(KL_ESTIMATORS)
    if not isinstance(cfg.method, str):
        _fail("method", cfg.method, "a method string such as 'grpo', 'atr' or 'kl3:0.02'")
    try:
        parse_method(cfg.method)
    except ValueError as exc:
        _fail("method", cfg.method, f"one of {sorted(PRESETS)} or a method string ({exc})")
    if cfg.measure is not None and cfg.delta is None:
        _fail("delta", cfg.delta, f"a budget > 0 when measure={cfg.measure!r} is given")
    for name in ("bf16", "resume", "progress"):
        if not isinstance(getattr(cfg, name), bool):
            _fail(name, getattr(cfg, name), "True or False")


# The tiny-arith demo: a 2-layer GPT-2 learns 2-digit addition. 1000 supervised steps take every seed past the
# point where carries are learnt (300 leave some seeds at ~10 % accuracy, too sparse a reward for RL to sharpen),
# but not to perfect; RL then sharpens what sampling already finds. 2 epochs x 2 minibatches make clipping act.
TRAIN_PRESETS: Mapping[str, Mapping] = MappingProxyType(
    {
        "tiny-arith": MappingProxyType(
            dict(
                model="tiny",
                task="arith",
                arith_digits=2,
                eval_size=500,
                eval_every=25,
                sft_steps=1000,
                sft_batch_size=64,
                sft_lr=3e-3,
                steps=100,
                prompts_per_step=16,
                group_size=8,
                max_new_tokens=5,
                temperature=1.0,
                ppo_epochs=2,
                minibatches=2,
                lr=1e-4,
                max_grad_norm=1.0,
                loss_agg_mode="token-mean",
                threads=1,
            )
        ),
    }
)
# The off-policy regime of the study (`divclip study`): μ = 4 epochs x 4 minibatches at a 3x larger rate, so every
# rollout batch takes 16 (or 32) optimizer steps and GRPO clips about 5-6 % of tokens (measured: `divclip study` prints
# each task's GRPO clip fraction), where the choice of clip can matter. Multiplication and Countdown are harder:
# their reward is sparse but reachable by sampling, and a token whose group's rewards are all equal (A = 0) is
# never clipped, so the clip fraction there is bounded by the share of groups with a success. Each harder preset
# is tuned until GRPO clips >= 5 % of tokens (docs/evidence.md, "Harder tasks": command, numbers, wall time).
_OFF_POLICY = dict(ppo_epochs=4, minibatches=4, lr=3e-4, steps=60, eval_every=10, eval_size=300, pass_k=8)
_STUDY_PRESETS = {
    "tiny-arith-offpolicy": {**TRAIN_PRESETS["tiny-arith"], **_OFF_POLICY},
    # After 1000 warm-start steps the greedy held-out accuracy is about 5 %, the sampled reward about 2 %: most
    # groups have no success and GRPO clipped 2.1 % at 8 minibatches, 2.2-2.8 % with stale rollouts (k = 1-4),
    # 2.6-3.0 % with 16 minibatches or 8 epochs. 2000 warm-start steps (reward about 7 %), groups of 16 (same
    # batch of 128) and rollouts 2 steps stale: 7.3 %.
    "tiny-mult-offpolicy": {
        **TRAIN_PRESETS["tiny-arith"],
        **_OFF_POLICY,
        "task": "mult",
        "max_new_tokens": 5,
        "minibatches": 8,
        "sft_steps": 2000,
        "prompts_per_step": 8,
        "group_size": 16,
        "staleness": 2,
    },
    # longer answers and a sparser reward clip less at 4 minibatches (3.7 % measured), so 8; 5.0 % on-policy,
    # 5.7 % with rollouts 2 steps stale
    "tiny-countdown-offpolicy": {
        **TRAIN_PRESETS["tiny-arith"],
        **_OFF_POLICY,
        "task": "countdown",
        "max_new_tokens": 8,
        "minibatches": 8,
        "staleness": 2,
    },
}
TRAIN_PRESETS = MappingProxyType({**TRAIN_PRESETS, **{k: MappingProxyType(v) for k, v in _STUDY_PRESETS.items()}})


def default_output_dir(preset: str | None, method: str, seed: int) -> str:
    """Where `divclip train` writes when no --output-dir is given: runs/<preset>-<method>-seed<seed> (the same
    command run again resumes there)."""
    return str(Path("runs") / f"{preset or 'train'}-{method}-seed{seed}")


def from_preset(name: str, **overrides) -> TrainerConfig:
    """The TrainerConfig of preset `name` (see TRAIN_PRESETS) with `overrides` applied."""
    if name not in TRAIN_PRESETS:
        raise ValueError(f"preset must be one of {sorted(TRAIN_PRESETS)}, got {name!r}")
    unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(TrainerConfig)})
    if unknown:
        raise ValueError(f"unknown TrainerConfig fields {unknown}")
    return TrainerConfig(**{**TRAIN_PRESETS[name], **overrides})


__all__ = ["INT_RANGES", "TRAIN_PRESETS", "TrainerConfig", "default_output_dir", "from_preset"]
