"""`divclip check`: the sanity check of a clip setting, on the command line.

    divclip check run.yaml                                   # a verl config (or TRL GRPOConfig .json/.yaml)
    divclip check train_ppo.sh                               # a launch script (OpenRLHF/slime flags, verl overrides)
    divclip check KEY=VALUE KEY=VALUE ...                    # hydra overrides: an engine's own dotted keys
    divclip check overrides.txt --rollouts batch.npz --json  # plus predicted clip fractions on a batch
    divclip check --rollouts batch.parquet --sigma 0.05      # no config: ε 0.2/0.2, noise-model ratios
    divclip check --rollouts batch.npz --methods dcpo,grpo   # atlas methods compared on the file's tokens
    divclip check run.yaml --rollouts batch.jsonl --corrections is=sequence:tis=3.0,rs=token_k3:0.01
                                                             # rollout corrections on the file's rollout_log_prob

Every bad input raises a ValueError (`divclip.sanity.SanityInputError`) naming the problem.

Exit status: 0 the report was printed; 1 with `--strict`, the report was printed and the config holds keys its
engine does not know (warning `unknown_key`: a typo a launch script should stop on); 2 bad input (one line on
stderr).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from divclip.cli.options import bounded_int, finite_float
from divclip.engines import ENGINES
from divclip.sanity.validation import MAX_BYTES_CAP, Limits


def _delta_pair(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--delta must look like MEASURE=VALUE (e.g. kl3=0.02), got {text!r}")
    return name.strip(), finite_float("--delta value")(value)


EXIT_STATUS = (
    "exit status: 0 the report was printed (warnings included); 1 with --strict, the report was printed and the "
    "config holds a key its engine does not know (warning unknown_key: a typo, or a key of another version of the "
    "engine or of an example's own config that this launch does not run, each said in the warning); 2 bad input "
    "(one line on stderr)"
)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "check",
        help="sanity-check a training engine's clip setting (and a rollout batch) before a long run",
        description="What a clip setting means as a divergence budget, whether it can bind, which tokens it "
        "clips, and what KL3 (or any measure) would do instead.",
        epilog=EXIT_STATUS,
    )
    p.add_argument(
        "inputs",
        nargs="*",
        metavar="CONFIG",
        help="a config file (.yaml/.yml/.json; a launch script .sh/.txt of overrides or --flags; a "
        ".py snippet, read never run) and/or key=value overrides",
    )
    p.add_argument("--rollouts", metavar="FILE", help="per-token rollout data: .npz, .parquet, .jsonl, .safetensors")
    p.add_argument(
        "--methods",
        metavar="LIST",
        help="with --rollouts: compare atlas methods (names or method strings, e.g. dcpo,grpo) on the "
        "file's tokens: clip fraction, share of |gradient| removed, entropy side",
    )
    p.add_argument(
        "--corrections",
        metavar="LIST",
        help="with --rollouts holding rollout_log_prob: check these rollout corrections (comma-separated "
        "correction strings, e.g. is=sequence:tis=3.0,rs=seq_mean_k1:0.999_1.001) beside the config's own",
    )
    p.add_argument(
        "--max-masked",
        type=finite_float("--max-masked", 0.0),
        metavar="FRACTION",
        help="warn when a correction drops more than this fraction of the tokens (default 0.5)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--engine",
        "--framework",
        dest="framework",
        choices=ENGINES,
        help="the config's engine (default: detected from its keys; --framework is its old name, kept for one release)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when the config holds a key the engine does not know (a typo), after printing the report",
    )
    p.add_argument("--measure", help="the divergence the clip is meant to express (asymmetry check), e.g. kl3")
    p.add_argument("--eps-low", type=finite_float("--eps-low"), help="override the ratio clip's lower width")
    p.add_argument("--eps-high", type=finite_float("--eps-high"), help="override the ratio clip's upper width")
    p.add_argument(
        "--delta",
        type=_delta_pair,
        action="append",
        default=[],
        metavar="MEASURE=VALUE",
        help="budget for one measure in the rollout report (repeatable)",
    )
    p.add_argument(
        "--sigma",
        type=finite_float("--sigma", 0.0),
        help="noise model std of log r (default: the file's log_prob, else 0.05)",
    )
    p.add_argument(
        "--seed", type=bounded_int("--seed", 0, 2**32 - 1), default=0, help="seed of the noise model (0 to 2^32-1)"
    )
    p.add_argument(
        "--num-processes",
        type=bounded_int("--num-processes", 1, 2**20),
        default=1,
        help="TRL world size (TRL derives its micro-steps per generation from the generation batch "
        "size and it; at most 2^20)",
    )
    p.add_argument(
        "--max-bytes",
        type=bounded_int("--max-bytes", 1, MAX_BYTES_CAP),
        default=Limits().max_bytes,
        help=f"largest rollout file (and decoded payload) accepted, in bytes (default {Limits().max_bytes}, "
        f"at most {MAX_BYTES_CAP})",
    )
    return p


def split_inputs(inputs: list[str]) -> tuple[str | None, list[str]]:
    """(config path or None, hydra override tokens) from the positional arguments."""
    from divclip.sanity.errors import ConfigError

    path, overrides = None, []
    for item in inputs:
        if "=" in item and not _is_file(item):
            overrides.append(item)
        elif path is None:
            path = item
        else:
            raise ConfigError(f"give one config file, got {path!r} and {item!r} (overrides look like key=value)")
    return path, overrides


def _is_file(item: str) -> bool:
    try:
        return Path(item).is_file()
    except (OSError, ValueError):  # a name too long for the file system, or with a NUL byte
        return False


def run(args: argparse.Namespace) -> int:
    """Run `divclip check`: print the report (text or JSON) and return 0 (1 under --strict with unknown keys);
    bad input raises ValueError."""
    from divclip.sanity.report import build_report, jsonable
    from divclip.sanity.text import format_report

    path, overrides = split_inputs(list(args.inputs))
    report = build_report(
        config=path,
        rollouts=args.rollouts,
        overrides=overrides,
        framework=args.framework,
        intended_measure=args.measure,
        eps_low=args.eps_low,
        eps_high=args.eps_high,
        deltas=dict(args.delta),
        sigma=args.sigma,
        seed=args.seed,
        num_processes=args.num_processes,
        limits=Limits(max_bytes=args.max_bytes),
        methods=args.methods,
        corrections=args.corrections,
        max_masked=args.max_masked,
    )
    if args.json:
        print(json.dumps(jsonable(report), indent=2, ensure_ascii=False))
    else:
        print(format_report(report), end="")
    if args.strict and any(w["code"] == "unknown_key" for w in report["warnings"]):
        return 1
    return 0
