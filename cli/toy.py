"""`divclip toy`: train clipping methods side by side on a toy problem and write the report.

    divclip toy --env sparse --methods grpo,dapo,atr --seeds 64 --steps 500 --out DIR

writes DIR/metrics.csv (one row per method, seed, step), DIR/report.html (self-contained Plotly charts:
mean and the middle 95 % of seeds) and DIR/claims.md (the per-method table and whether the paper's
direction holds). Options left unset take the environment's registry defaults (`divclip.toy_envs.registry.ENVS`).

Importing this module does not import torch; `run` does.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

from divclip.theory.spec import parse_methods
from divclip.toy_envs.validation import check_int

ENV_NAMES = ("bandit", "sparse", "sequence")  # checked against divclip.toy_envs.registry.ENVS in the tests
REPORT_FILES = ("metrics.csv", "report.html", "claims.md")
"""What a run writes into --out; an earlier run's copies move to --out/superseded/<time>-toy/ first."""


def add_parser(subparsers):
    p = subparsers.add_parser(
        "toy",
        help="train clipping methods side by side on a toy problem (CSV, HTML charts, claims table)",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--env", default="sparse", help=f"environment: one of {', '.join(ENV_NAMES)} (default sparse)")
    p.add_argument(
        "--methods",
        default="grpo,dapo,atr",
        help="comma-separated presets (grpo, dapo, atr, dppo_kl, …), measures ('kl3', 'k2:0.03') or "
        "ratio clips ('ratio:0.2:0.28'), intersections ('kl3:0.023144&binary_tv:0.2') or adaptive "
        "budgets ('kl3@clipfrac=0.1'); quote the list in a shell; default grpo,dapo,atr",
    )
    p.add_argument(
        "--baseline",
        help="method the claims and paired tables compare against (default grpo if listed, else the first)",
    )
    p.add_argument("--seeds", type=int, default=16, help="number of seeds (runs per method), at most 4096; default 16")
    p.add_argument("--seed-start", type=int, default=0, help="first seed; seeds are seed-start … +seeds-1")
    p.add_argument("--steps", type=int, help="training steps (GRPO iterations), at most 100000; default: the env's")
    p.add_argument("--group-size", type=int, help="responses per prompt, in [2, 4096]; default: the env's")
    p.add_argument("--prompts-per-step", type=int, help="prompts per step, at most 4096; default: the env's")
    p.add_argument("--ppo-epochs", type=int, help="μ, passes over each batch, at most 100 (>= 2 lets clipping bind)")
    p.add_argument("--lr", type=float, help="Adam learning rate; default: the env's")
    p.add_argument("--loss-agg-mode", default="token-mean", help="policy_loss aggregation (default token-mean)")
    p.add_argument("--adv-norm", default="std", help="group advantage: std (GRPO), none (Dr. GRPO) or rloo")
    p.add_argument("--policy", default="tabular", help="tabular (default) or mlp")
    p.add_argument(
        "--env-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment constructor argument, repeatable (e.g. --env-arg arms=8; arms, prompts and "
        "answers at most 65536); VALUE is JSON",
    )
    p.add_argument(
        "--out",
        required=True,
        help="output directory (created; checked before the run); an earlier "
        "run's files there move to superseded/, never overwritten",
    )
    p.add_argument("--every", type=int, default=50, help="print progress every N steps (default 50)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def _env_kwargs(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--env-arg must look like KEY=VALUE (e.g. arms=8), got {pair!r}")
        if len(value) > 10_000:
            raise ValueError(f"--env-arg {key}: the value is {len(value)} characters, over the 10000-character limit")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value  # a bare word such as reward=gaussian
        except RecursionError:
            raise ValueError(f"--env-arg {key}: the value is nested too deeply to read") from None
    return out


def check_out_dir(out: str) -> Path:
    """The --out directory, created now: a file, /dev/null or an unwritable place fails before the run."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {out!r} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--out {out!r} cannot be created: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out!r} is not writable")
    return path


def command_line(args, config: dict | None = None) -> str:
    """The command that reproduces this run; `config` (the result's) makes the env's defaults explicit."""
    parts = ["divclip toy", f"--env {args.env}", f"--methods {shlex.quote(args.methods)}", f"--seeds {args.seeds}"]
    if args.seed_start:
        parts.append(f"--seed-start {args.seed_start}")
    for flag in ("steps", "group_size", "prompts_per_step", "ppo_epochs", "lr"):
        value = (config or {}).get(flag, getattr(args, flag))
        if value is not None:
            parts.append(
                f"--{flag.replace('_', '-')} {value:g}"
                if isinstance(value, float)
                else f"--{flag.replace('_', '-')} {value}"
            )
    for flag, default in (("loss_agg_mode", "token-mean"), ("adv_norm", "std"), ("policy", "tabular")):
        if getattr(args, flag) != default:
            parts.append(f"--{flag.replace('_', '-')} {getattr(args, flag)}")
    if getattr(args, "baseline", None):
        parts.append(f"--baseline {shlex.quote(args.baseline)}")
    parts += [f"--env-arg {shlex.quote(a)}" for a in args.env_arg]
    parts.append(f"--out {args.out}")
    return " ".join(parts)


def run(args) -> int:
    """Run the arena and write the report; a ValueError names any bad option (the CLI exits 2)."""
    from divclip.toy_envs.arena import MAX_SEEDS, iter_arena
    from divclip.toy_envs.report import claims_markdown, write_report

    if args.env not in ENV_NAMES:
        raise ValueError(f"--env must be one of {list(ENV_NAMES)}, got {args.env!r}")
    n = check_int("--seeds", args.seeds, minimum=1, maximum=MAX_SEEDS)
    start = check_int("--seed-start", args.seed_start, minimum=0, maximum=2**62 - n)
    every = check_int("--every", args.every, minimum=1)
    baseline = getattr(args, "baseline", None)
    if baseline is not None and baseline not in parse_methods(args.methods):
        raise ValueError(
            f"--baseline must be one of the --methods labels {list(parse_methods(args.methods))}, got {baseline!r}"
        )
    env_kwargs = _env_kwargs(args.env_arg)
    runs = iter_arena(
        args.env,
        args.methods,
        list(range(start, start + n)),
        args.steps,
        args.group_size,
        args.prompts_per_step,
        args.ppo_epochs,
        args.lr,
        loss_agg_mode=args.loss_agg_mode,
        adv_norm=args.adv_norm,
        policy=args.policy,
        every=every,
        env_kwargs=env_kwargs,
    )
    check_out_dir(args.out)  # after every other check (nothing is created for a bad flag), before any step
    t0 = time.perf_counter()
    result = None
    for result in runs:
        if not args.quiet:
            means = "  ".join(
                f"{m} {v:.4f}" for m, v in zip(result.methods, result.metrics["expected_reward"][:, :, -1].mean(1))
            )
            print(
                f"[toy {args.env}] step {result.steps_done}/{result.total_steps}  E[R]: {means}  "
                f"({time.perf_counter() - t0:.1f} s)",
                file=sys.stderr,
            )
    command = command_line(args, result.config)
    from divclip.trainer.checkpoint import set_aside

    set_aside(
        args.out,
        list(REPORT_FILES),
        "toy",  # an earlier run's report is kept, never overwritten
        announce=lambda line: print(f"divclip toy: {line}", file=sys.stderr, flush=True),
    )
    paths = write_report(result, args.out, command, baseline=baseline)
    print(claims_markdown(result, command, baseline))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0
