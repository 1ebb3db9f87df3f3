"""`divclip train`: GRPO-family RL from the command line.

    divclip train --preset tiny-arith --method atr --seed 0

A bad value raises ValueError (naming the field, the value and what is allowed) before any model is built;
`divclip.cli.main` turns it into `divclip: error: …` and status 2. Torch is imported only by `run`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

# CLI flag -> TrainerConfig field, and its parser. Only flags the user gives override the preset.
_OPTIONS: dict[str, tuple[str, type, str]] = {
    "--model": ("model", str, "'tiny' or a local Hugging Face causal-LM directory"),
    "--task": ("task", str, 'arith, mult, countdown, or a JSONL file of {"prompt", "answer"} lines'),
    "--method": ("method", str, "a preset grpo, dapo, atr, dppo_kl, dppo_tv, gspo, sapo, or e.g. kl3:0.02"),
    "--measure": ("measure", str, "replace the preset's divergence measure (needs --delta)"),
    "--delta": ("delta", float, "divergence budget δ (KL3: 0.01-0.05)"),
    "--dual-clip-c": ("dual_clip_c", float, "dual-clip cap c > 1 for A < 0"),
    "--seed": ("seed", int, "seed of init, split, rollouts and shuffles"),
    "--steps": ("steps", int, "RL steps"),
    "--prompts-per-step": ("prompts_per_step", int, "prompts per RL step"),
    "--group-size": ("group_size", int, "G, completions per prompt (>= 2)"),
    "--max-new-tokens": ("max_new_tokens", int, "longest completion"),
    "--temperature": ("temperature", float, "sampling temperature"),
    "--ppo-epochs": ("ppo_epochs", int, "μ, epochs over each rollout batch"),
    "--minibatches": ("minibatches", int, "optimizer steps per epoch"),
    "--staleness": ("staleness", int, "k: rollouts sampled by the policy of k steps ago (0 = the current policy)"),
    "--lr": ("lr", float, "AdamW learning rate (RL)"),
    "--kl-coef": ("kl_coef", float, "reference-KL penalty weight (0 = off)"),
    "--kl-estimator": ("kl_estimator", str, "k1, k2 or k3"),
    "--adv-norm": ("adv_norm", str, "std (GRPO), none (Dr. GRPO), rloo"),
    "--loss-agg-mode": ("loss_agg_mode", str, "token-mean, seq-mean-token-mean, ..."),
    "--sft-steps": ("sft_steps", int, "supervised warm-start steps"),
    "--eval-size": ("eval_size", int, "held-out problems"),
    "--eval-every": ("eval_every", int, "evaluate every N steps"),
    "--device": ("device", str, "auto, cpu or cuda"),
    "--threads": ("threads", int, "torch CPU threads (0 = default)"),
    "--output-dir": (
        "output_dir",
        str,
        "metrics.jsonl, metrics.csv and checkpoints go here (default runs/<preset>-<method>-seed<seed>)",
    ),
    "--checkpoint-every": ("checkpoint_every", int, "checkpoint every N steps (0 = final only)"),
}


class _RangeHelp(argparse.HelpFormatter):
    """Appends each size flag's allowed range from `TrainerConfig`'s own table when the help is printed (the
    table lives beside the checks that enforce it; importing it at parser build time would import torch)."""

    def _get_help_string(self, action):
        from divclip.trainer.config import INT_RANGES, TEMPERATURE_RANGE

        ranges = {**INT_RANGES, "temperature": TEMPERATURE_RANGE}
        if action.dest in ranges:
            low, high = ranges[action.dest]
            show = lambda x: f"{x:g}" if isinstance(x, float) else str(x)  # noqa: E731
            return f"{action.help} (in [{show(low)}, {show(high)}])"
        return action.help


def add_parser(subparsers):
    p = subparsers.add_parser(
        "train",
        help="GRPO-family RL (tiny-arith demo, a local HF model, or a JSONL task)",
        description="Warm-start (optional) and train a causal LM with GRPO-family RL and any divclip clip spec.",
        formatter_class=_RangeHelp,
    )
    p.add_argument(
        "--preset",
        default=None,
        help="a bundle of settings: tiny-arith, or the off-policy study presets tiny-arith-offpolicy, "
        "tiny-mult-offpolicy, tiny-countdown-offpolicy (flags override it)",
    )
    for flag, (dest, kind, help_) in _OPTIONS.items():
        p.add_argument(flag, dest=dest, type=kind, default=None, help=help_)
    p.add_argument(
        "--no-resume",
        action="store_true",
        help="start over: old checkpoints and metrics in --output-dir move to its superseded/ folder",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    return p


def config_from_args(args):
    """The TrainerConfig for parsed `args` (the preset, then every flag that was given)."""
    from divclip.trainer.config import TrainerConfig, default_output_dir, from_preset

    overrides = {dest: getattr(args, dest) for dest, _, _ in _OPTIONS.values() if getattr(args, dest) is not None}
    if args.no_resume:
        overrides["resume"] = False
    if args.no_progress:
        overrides["progress"] = False
    cfg = from_preset(args.preset, **overrides) if args.preset is not None else TrainerConfig(**overrides)
    if cfg.output_dir is None:  # a command-line run always keeps its results
        cfg = cfg.replace(output_dir=default_output_dir(args.preset, cfg.method, cfg.seed))
    return cfg


def run(args) -> int:
    """Handler of `divclip train`: train, print before/after held-out accuracy; returns 0."""
    cfg = config_from_args(args)  # every check runs here, before torch work starts
    from divclip.trainer.grpo import GRPOTrainer

    start = time.perf_counter()
    print(f"divclip train: writing to {cfg.output_dir}", file=sys.stderr)
    result = GRPOTrainer(cfg).train()
    summary = {
        "preset": args.preset,
        "method": cfg.method,
        "seed": cfg.seed,
        "steps": cfg.steps,
        "accuracy_before": result.accuracy_before,
        "accuracy_after": result.accuracy_after,
        "seconds": round(time.perf_counter() - start, 1),
        "output_dir": cfg.output_dir,
    }
    if args.json:
        print(json.dumps(summary))
    else:
        before, after = summary["accuracy_before"], summary["accuracy_after"]
        fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
        print(
            f"method={cfg.method} seed={cfg.seed} steps={cfg.steps}: held-out accuracy "
            f"{fmt(before)} (warm start) -> {fmt(after)} (after RL) in {summary['seconds']} s"
        )
    return 0
