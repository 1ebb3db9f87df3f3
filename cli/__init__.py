"""The `divclip` command line: one parser, one error path, one module per subcommand.

    divclip measures | bounds | derive | realloc | check | export | translate | toy | train | atlas | study  [options]

Each subcommand is a module here with the same two functions: `add_parser(subparsers)` adds its argparse
parser, `run(args) -> int` runs it and returns the exit status. `SUBCOMMANDS` below lists them; follow a flag
from there to its module. Subcommand modules import divclip's torch-free layers (theory, engines, sanity) at the
top; torch and transformers (the trainer, the toy arena) are imported inside `run`, so `divclip --help` and
`divclip bounds` load no torch (tests/test_layers.py holds every other import at the top).

Errors take one path, `main`: a bad argument (argparse) or a ValueError raised by a subcommand prints one line,
`divclip: error: …`, naming the argument, its value and what is allowed, on stderr, and the status is 2.
Argument errors leave through SystemExit(2) (argparse's convention); ValueErrors make `main` return 2.
"""

from __future__ import annotations

import argparse
import sys

from divclip.cli import atlas, bounds, check, derive, export, measures, realloc, study, toy, train, translate

SUBCOMMANDS = (measures, bounds, derive, realloc, check, export, translate, toy, train, atlas, study)


class Parser(argparse.ArgumentParser):
    """argparse with divclip's one-line errors: `divclip: error: argument --x: …` and SystemExit(2)."""

    def error(self, message: str):
        self.exit(2, f"divclip: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> Parser:
    """The whole `divclip` parser: every subcommand's `add_parser`, its `run` stored as the `run` default."""
    parser = Parser(prog="divclip", description="Divergence-based policy-loss clipping: theory explorer and toolkit.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in SUBCOMMANDS:
        module.add_parser(sub).set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (default sys.argv[1:]), run the subcommand, return its exit status (2 for bad input)."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        return args.run(args)
    except BrokenPipeError:  # `divclip derive | head`: the reader left, nothing is wrong
        sys.stderr.close()
        return 0
    except UnicodeEncodeError as exc:  # output that cannot be printed: name the text, not the codec
        bad = ascii(exc.object[max(exc.start - 20, 0) : exc.end + 20]) if isinstance(exc.object, str) else "?"
        print(
            f"divclip: error: cannot print {bad}: it holds a lone surrogate, not valid Unicode (from a file name "
            "that is not UTF-8, or a \\ud800-style escape in the input); rename the file or fix the text",
            file=sys.stderr,
        )
        return 2
    except ValueError as exc:
        print(f"divclip: error: {exc}", file=sys.stderr)
        return 2
    except (MemoryError, RecursionError) as exc:  # an input past a limit no check foresaw: still one line
        print(
            f"divclip: error: the input is too large or too deeply nested ({type(exc).__name__}: {exc})",
            file=sys.stderr,
        )
        return 2
