"""`divclip derive`: the SymPy derivation of a measure's clip bounds, each step with its check."""

from __future__ import annotations

import sys

from divclip.theory import symbolic


def add_parser(subparsers):
    p = subparsers.add_parser("derive", help="the SymPy derivation of a measure's clip bounds, step by step")
    p.add_argument("measure", nargs="?", default="kl3")
    p.add_argument("--format", choices=("markdown", "latex"), default="markdown")
    return p


def run(args) -> int:
    steps = symbolic.derivation(args.measure)
    print(symbolic.render(steps, args.format))
    failed = [s.title for s in steps if not s.run_check().passed]
    if failed:
        print(f"divclip: error: checks failed: {failed}", file=sys.stderr)
        return 1
    return 0
