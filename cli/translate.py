"""`divclip translate`: the same method in another engine, and what that engine says differently.

    divclip translate run_grpo.sh --to trl                       # verl command line -> TRL (Python)
    divclip translate run_grpo.sh --to openrlhf --format flags   # -> an OpenRLHF launch command's flags
    divclip translate args.yaml --from trl --to verl --json      # {"settings": {...}, "differences": [...]}

The config is read as `divclip check` reads it (any engine, any format; the engine detected from its keys
unless --from names it): the method as a ClipSpec, with its aggregation. It is written for the target with the
same aggregation. What the target says differently is named, with the nearest it can say (`# differs:` lines;
KL3 in an engine with only ratio clipping becomes its exact ε_low/ε_high); where nothing close exists the
command exits 2 with one line naming what is missing.
"""

from __future__ import annotations

import dataclasses
import json

from divclip.cli.export import FORMATS
from divclip.engines import ENGINES


def add_parser(subparsers):
    p = subparsers.add_parser(
        "translate",
        help="a config's clip method in another engine, naming what that engine says differently",
        description="Read a config of any engine (as `divclip check` does) and write the same method, with the "
        "same aggregation, for another engine; differences are named, and a method the target cannot express "
        "is an error (exit 2).",
    )
    p.add_argument(
        "config",
        metavar="CONFIG",
        help="a config file (YAML, JSON, launch script, Python snippet); - or /dev/stdin for standard input",
    )
    p.add_argument("--to", required=True, choices=ENGINES, dest="target", help="the engine to write for")
    p.add_argument("--from", choices=ENGINES, dest="source", help="the config's engine (default: detected)")
    p.add_argument("--format", choices=FORMATS, help="the target's first format by default")
    p.add_argument("--json", action="store_true", help="print {settings, env, differences, ...} as JSON")
    return p


def run(args) -> int:
    from divclip.engines import get_engine, translation_differences
    from divclip.engines.config import read_config
    from divclip.sanity.settings import clip_settings

    raw = read_config(args.config)
    found = clip_settings(raw, args.source)
    if found.spec is None:
        raise ValueError(
            f"config {raw.name!r} runs {found.engine} loss {found.loss_mode!r}, which divclip does not "
            f"model, so it has no translation: {'; '.join(found.notes)}"
        )
    out = get_engine(args.target).write(
        found.spec,
        recipe=False,
        loss_agg_mode=found.loss_agg_mode,
        label=f"from {found.engine} {raw.name}: {found.loss_mode}",
    )
    differences = translation_differences(found, out)
    keys, more = _correction(found.engine, raw, args.target)
    differences += more
    out = dataclasses.replace(
        out, settings={**out.settings, **keys}, differences=tuple(differences[len(found.differences) :])
    )
    if args.json:
        print(
            json.dumps(
                {
                    "from": found.engine,
                    "to": args.target,
                    "env": out.env,
                    "settings": out.settings,
                    "differences": [str(d) for d in differences],
                    "comments": list(out.comments),
                },
                indent=2,
                ensure_ascii=False,
                default=_json_value,
            )
        )
    else:
        print(out.text(args.format), end="")
    return 0


def _correction(engine: str, raw, target: str) -> tuple[dict, list]:
    """The source's rollout correction in the target's keys, and a Difference per part the target cannot say (or
    for a correction divclip does not model): the third policy travels as `divclip.engines.translate` carries it."""
    from divclip.engines import read_correction, write_correction
    from divclip.engines.base import Difference
    from divclip.sanity.report import _field_names

    try:
        correction = read_correction(engine, _field_names(engine, raw.values))
    except ValueError as exc:
        return {}, [Difference("rollout correction (not modelled)", f"not carried: {exc}")]
    if correction is None:
        return {}, []
    keys, cannot = write_correction(correction, target)
    return keys, [Difference(f"rollout correction {correction}", f"{target}: {why}") for why in cannot]


def _json_value(v):
    return str(v)
