"""`divclip measures`: the table of registered divergence measures (or JSON)."""

from __future__ import annotations

import json


def add_parser(subparsers):
    p = subparsers.add_parser("measures", help="table of the registered divergence measures")
    p.add_argument("--json", action="store_true")
    return p


def run(args) -> int:
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
