"""The `divclip` command line: measures, bounds, derivations (and later toy runs, reallocation, checks).

Every subcommand validates at the boundary: a bad value prints `divclip: error: …` naming the argument,
the value and what is allowed, and exits with status 2. Heavy imports happen inside the subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from collections.abc import Callable

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def command(name: str):
    def register(fn):
        COMMANDS[name] = fn
        return fn

    return register


# ------------------------------------------------------------------------------------- measures
@command("measures")
def cmd_measures(args) -> int:
    from divclip.theory import MEASURES

    rows = []
    for m in MEASURES.values():
        if m.name == "ratio":
            lo, hi = m.bounds(eps_low=0.2, eps_high=0.2)
        else:
            lo, hi = m.bounds(0.02, 0.5 if m.p_dependent else None)
        rows.append((m.name, m.code, "yes" if m.p_dependent else "no", f"[{lo:.4f}, {hi:.4f}]", m.source))
    if args.json:
        keys = ("name", "formula", "p_dependent", "interval_at_0.02", "source")
        print(json.dumps([dict(zip(keys, r)) for r in rows], indent=2))
        return 0
    header = ("measure", "D(r[, p])", "per-token", "interval (δ=0.02, p=0.5; ratio ε=0.2)", "source")
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in (header, tuple("-" * w for w in widths), *rows):
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())
    return 0


# --------------------------------------------------------------------------------------- bounds
@command("bounds")
def cmd_bounds(args) -> int:
    from divclip.theory import delta_for_eps, equivalent_ratio_clip, get_measure

    m = get_measure(args.measure)
    given = [x is not None for x in (args.delta, args.eps_low, args.eps_high)]
    if sum(given) != 1:
        raise ValueError(
            f"give exactly one of --delta, --eps-low, --eps-high (got delta={args.delta}, "
            f"eps_low={args.eps_low}, eps_high={args.eps_high})"
        )
    p = args.p
    if args.delta is not None:
        delta = args.delta
    else:
        # For the ratio measure D = |r - 1|, so this δ is the width itself: a symmetric clip.
        delta = delta_for_eps(m.name, eps_low=args.eps_low, eps_high=args.eps_high, p=p)
    lo, hi = m.bounds(delta, p)
    eps_low, eps_high = equivalent_ratio_clip(m, delta, p)  # without the cancellation of 1 - lo, hi - 1
    out = {"measure": m.name, "delta": delta, "p": p, "lo": lo, "hi": hi, "eps_low": eps_low, "eps_high": eps_high}
    if args.json:
        # JSON has no inf/NaN: a bound that overflows (KL3-reverse's hi for δ > 708.8) is printed as null.
        print(json.dumps({k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                          for k, v in out.items()}, allow_nan=False))
    else:
        where = f" at p={p:g}" if p is not None else ""
        print(f"{m.name}: D(r) = {m.code}{where}")
        print(f"  delta    = {delta:.10g}")
        print(f"  interval = [{lo:.10g}, {hi:.10g}]")
        print(f"  eps_low  = {eps_low:.10g}    eps_high = {eps_high:.10g}")
    return 0


# --------------------------------------------------------------------------------------- derive
@command("derive")
def cmd_derive(args) -> int:
    from divclip.theory import symbolic

    steps = symbolic.derivation(args.measure)
    print(symbolic.render(steps, args.format))
    failed = [s.title for s in steps if not s.run_check().passed]
    if failed:
        print(f"divclip: error: checks failed: {failed}", file=sys.stderr)
        return 1
    return 0


def finite_float(name: str, minimum: float | None = None):
    """An argparse type: a finite float (optionally >= minimum), the error naming the flag and the text."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not math.isfinite(v) or (minimum is not None and v < minimum):
            at_least = "" if minimum is None else f" >= {minimum:g}"
            raise argparse.ArgumentTypeError(f"{name} must be a finite number{at_least}, got {text!r}")
        return v

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="divclip", description="Divergence-based policy-loss clipping: theory explorer and toolkit."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("measures", help="table of the registered divergence measures")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("bounds", help="exact clip interval of a measure at a budget")
    p.add_argument("--measure", required=True)
    p.add_argument("--delta", type=finite_float("--delta"), help="divergence budget δ (ratio: its width ε)")
    p.add_argument("--eps-low", type=finite_float("--eps-low"), help="find δ whose lower bound is 1 - ε_low")
    p.add_argument("--eps-high", type=finite_float("--eps-high"), help="find δ whose upper bound is 1 + ε_high")
    p.add_argument("--p", type=finite_float("--p"), help="old-policy probability (p-dependent measures)")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("derive", help="the SymPy derivation of a measure's clip bounds, step by step")
    p.add_argument("measure", nargs="?", default="kl3")
    p.add_argument("--format", choices=("markdown", "latex"), default="markdown")

    return parser


# Subcommands that import torch or heavy extras live in their own modules: (module, add-parser fn, handler).
# Only the module of the command being run is imported, so `divclip bounds` stays fast.
EXTENSIONS: dict[str, tuple[str, str, str]] = {
    "realloc": ("divclip.theory.realloc_cli", "add_realloc_command", "run_realloc"),
    "check": ("divclip.sanity.cli", "add_check_command", "run_check"),
    "toy": ("divclip.toy_envs.cli", "add_toy_command", "cmd_toy"),
    "train": ("divclip.trainer.cli", "add_train_command", "run_train"),
}


def _wanted_extensions(argv: list[str]) -> list[str]:
    first = next((a for a in argv if not a.startswith("-")), None)
    if first in EXTENSIONS:
        return [first]
    if first in COMMANDS:
        return []
    return list(EXTENSIONS)  # --help, no command or a typo: list every command


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in _wanted_extensions(argv):
        module_name, add_fn, handler = EXTENSIONS[name]
        module = importlib.import_module(module_name)
        getattr(module, add_fn)(sub)
        COMMANDS[name] = getattr(module, handler)
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except BrokenPipeError:  # `divclip derive | head`: the reader left, nothing is wrong
        sys.stderr.close()
        return 0
    except ValueError as exc:
        print(f"divclip: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
