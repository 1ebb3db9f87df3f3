"""`divclip export`: one method's complete, paste-safe verl or TRL settings, the text the explorer offers.

    divclip export --method atr --engine verl                     # a verl command line (the default format)
    divclip export --method kl3:0.02 --engine verl --format yaml  # the same as actor config YAML
    divclip export --method dapo --engine trl                     # DivClipGRPOConfig arguments (Python)
    divclip export --method atr --engine verl > f && divclip check f --json    # config.ratio_bounds [0.8, 1.2308…]

Every key appears once and `loss_mode` is always explicit, so a block pasted after another method's leaves
nothing of it in force; divclip's verl modes come with the plug-in hook (VERL_USE_EXTERNAL_MODULES) and, for
divclip_*, DIVCLIP_DELTA. A method an engine cannot express is a one-line error (exit 2).
"""

from __future__ import annotations

DEFAULT_FORMAT = {"verl": "overrides", "trl": "python"}


def add_parser(subparsers):
    p = subparsers.add_parser(
        "export",
        help="one method's complete verl/TRL settings (paste-safe; `divclip check` reads them back)",
        description="One method's clip as complete verl (command line, YAML, Python) or TRL (Python, YAML, "
        "command line) settings: every key once, loss_mode explicit, the plug-in hook where needed.",
    )
    p.add_argument("--method", required=True, metavar="SPEC",
                   help="a method string (divclip.theory.spec): a preset (grpo, dapo, atr, dppo_kl, dppo_tv, "
                        "gspo, sapo), a measure (kl3), 'measure:delta' (kl3:0.02), 'ratio:eps_low:eps_high', "
                        "with options such as /dual=3 or /gated/tis=20")
    p.add_argument("--engine", required=True, choices=("verl", "trl"))
    p.add_argument("--format", choices=("overrides", "yaml", "python"),
                   help="verl default: overrides (a command line); TRL default: python")
    return p


def run(args) -> int:
    from divclip.app.export import method_export
    from divclip.theory.spec import parse_method

    spec = parse_method(args.method)
    text = method_export(spec, args.engine).text(args.format or DEFAULT_FORMAT[args.engine])
    print(text, end="")
    return 0
