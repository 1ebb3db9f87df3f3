"""`divclip measures`: the table of registered divergence measures (or JSON)."""

from __future__ import annotations

import json

from divclip.theory.measures import LISTING_DELTA, LISTING_P, measure_listing


def add_parser(subparsers):
    p = subparsers.add_parser("measures", help="table of the registered divergence measures")
    p.add_argument("--json", action="store_true")
    return p


def run(args) -> int:
    listing = measure_listing()  # every registered measure, built in or added with theory.register_measure
    rows = [(r["name"], r["formula"], "yes" if r["p_dependent"] else "no",
             "[{:.4f}, {:.4f}]".format(*r["interval"]), r["source"]) for r in listing]  # fmt: skip
    if args.json:
        keys = ("name", "formula", "p_dependent", f"interval_at_{LISTING_DELTA:g}", "source")
        print(json.dumps([dict(zip(keys, r)) for r in rows], indent=2))
        return 0
    header = ("measure", "D(r[, p])", "per-token", f"interval (δ={LISTING_DELTA:g}, p={LISTING_P:g})", "source")
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in (header, tuple("-" * w for w in widths), *rows):
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())
    return 0
