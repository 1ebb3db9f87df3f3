"""`divclip export`: one method's complete, paste-safe settings for a training engine, the text the explorer offers.

    divclip export --method atr --engine verl                     # a verl command line (the default format)
    divclip export --method kl3:0.02 --engine verl --format yaml  # the same as actor config YAML
    divclip export --method dapo --engine trl                     # DivClipGRPOConfig arguments (Python)
    divclip export --method dapo --engine trl | divclip check /dev/stdin        # every format reads back
    divclip export --method atr --engine verl > f && divclip check f --json    # config.ratio_bounds [0.8, 1.2308…]

Every key appears once and the loss is always explicit, so a block pasted after another method's leaves nothing
of it in force; a published method comes with its recipe beyond the clip (DAPO: token-mean aggregation; --clip-only
leaves it out); divclip's plug-in modes come with their hook (VERL_USE_EXTERNAL_MODULES, DIVCLIP_DELTA). What the
engine says differently is a `# differs:` line; a method it cannot express is a one-line error (exit 2).
"""

from __future__ import annotations

from divclip.engines import ENGINES, write
from divclip.theory.spec import parse_method

FORMATS = ("overrides", "flags", "yaml", "python")
"""Every engine's formats together; 'overrides' also names an engine's command line where it has flags."""


def add_parser(subparsers):
    p = subparsers.add_parser(
        "export",
        help="one method's complete settings for a training engine (paste-safe; `divclip check` reads them back)",
        description="One method's clip, and its published recipe, as complete settings of verl (command line, "
        "YAML, Python), TRL (Python, YAML, flags) or another engine: every key once, the loss explicit, the "
        "plug-in hook where needed.",
    )
    p.add_argument(
        "--method",
        required=True,
        metavar="SPEC",
        help="a method string (divclip.theory.spec): a preset (grpo, dapo, atr, dppo_kl, dppo_tv, "
        "gspo, sapo), a measure (kl3), 'measure:delta' (kl3:0.02), 'ratio:eps_low:eps_high', "
        "with options such as /dual=3 or /gated/tis=20",
    )
    p.add_argument("--engine", required=True, choices=ENGINES)
    p.add_argument(
        "--format", choices=FORMATS, help="the engine's first format by default (verl: overrides; TRL: python)"
    )
    p.add_argument(
        "--clip-only",
        action="store_true",
        help="write the clip alone, not the method's published recipe (its aggregation)",
    )
    return p


def run(args) -> int:
    spec = parse_method(args.method)
    print(write(spec, args.engine, recipe=not args.clip_only).text(args.format), end="")
    return 0
