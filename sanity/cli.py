"""`divclip check`: the sanity check of a clip setting, on the command line.

    divclip check run.yaml                                   # a verl config (or TRL GRPOConfig .json/.yaml)
    divclip check actor_rollout_ref.actor.clip_ratio_low=0.2 data.train_batch_size=512   # hydra overrides
    divclip check overrides.txt --rollouts batch.npz --json  # plus predicted clip fractions on a batch
    divclip check --rollouts batch.parquet --sigma 0.05      # no config: ε 0.2/0.2, noise-model ratios

Wired into `divclip.app.cli` with `add_check_command(subparsers)` and `run_check(args)`. Bad input prints
`divclip: error: …` on stderr and returns 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from divclip.app.cli import finite_float
from divclip.sanity.errors import ConfigError
from divclip.sanity.loaders import Limits


def _positive_int(name: str):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {text!r}")
        return v

    return parse


def _delta_pair(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--delta must look like MEASURE=VALUE (e.g. kl3=0.02), got {text!r}")
    return name.strip(), finite_float("--delta value")(value)


def add_check_command(subparsers) -> argparse.ArgumentParser:
    """Add `check` to an argparse subparsers object; dispatch it to `run_check(args)`."""
    p = subparsers.add_parser(
        "check",
        help="sanity-check a verl/TRL clip setting (and a rollout batch) before a long run",
        description="What a clip setting means as a divergence budget, whether it can bind, which tokens it "
        "clips, and what KL3 (or any measure) would do instead.",
    )
    p.add_argument("inputs", nargs="*", metavar="CONFIG",
                   help="a config file (.yaml/.yml/.json, or .txt/.sh of hydra overrides) and/or key=value overrides")
    p.add_argument("--rollouts", metavar="FILE", help="per-token rollout data: .npz, .parquet, .jsonl, .safetensors")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--framework", choices=("verl", "trl"), help="skip detection from the keys")
    p.add_argument("--measure", help="the divergence the clip is meant to express (asymmetry check), e.g. kl3")
    p.add_argument("--eps-low", type=finite_float("--eps-low"), help="override the ratio clip's lower width")
    p.add_argument("--eps-high", type=finite_float("--eps-high"), help="override the ratio clip's upper width")
    p.add_argument("--delta", type=_delta_pair, action="append", default=[], metavar="MEASURE=VALUE",
                   help="budget for one measure in the rollout report (repeatable)")
    p.add_argument("--sigma", type=finite_float("--sigma", 0.0),
                   help="noise model std of log r (default: the file's log_prob, else 0.05)")
    p.add_argument("--seed", type=int, default=0, help="seed of the noise model")
    p.add_argument("--num-processes", type=_positive_int("--num-processes"), default=1,
                   help="TRL world size (to derive steps_per_generation from generation_batch_size)")
    p.add_argument("--max-bytes", type=_positive_int("--max-bytes"), default=Limits().max_bytes,
                   help="largest rollout file (and decoded payload) accepted, in bytes")
    return p


def split_inputs(inputs: list[str]) -> tuple[str | None, list[str]]:
    """(config path or None, hydra override tokens) from the positional arguments."""
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


def run_check(args: argparse.Namespace) -> int:
    """Run `divclip check`; 0 on success, 2 with a message on stderr for any bad input."""
    from divclip.sanity.report import build_report
    from divclip.sanity.text import format_report

    try:
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
        )
    except (ValueError, MemoryError, RecursionError) as exc:
        print(f"divclip: error: {exc or type(exc).__name__}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(jsonable(report), indent=2, ensure_ascii=False))
    else:
        print(format_report(report), end="")
    return 0


def jsonable(x):
    """The report with non-finite floats as null, so the output is strict JSON."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m divclip.sanity.cli check …`), the same parser `divclip check` uses."""
    parser = argparse.ArgumentParser(prog="divclip")
    add_check_command(parser.add_subparsers(dest="command", required=True))
    return run_check(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
