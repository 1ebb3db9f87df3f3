"""`divclip atlas`: every clip objective in one frame (docs/theory.md §8).

    divclip atlas                                  # every named method and loss form
    divclip atlas --methods dcpo,grpo              # two of them side by side (names or method strings)
    divclip atlas --methods dapo,kl3:0.05 --at 0.01,1.5 --json
    divclip atlas --correction is=sequence:tis=3.0/rs=token_k3:0.01   # a rollout correction's ρ intervals by length

Per method: family, sources (arXiv id and/or engine:mode), loss aggregation, parameters with their defaults,
the keep interval at q in {0.001, 0.01, 0.1, 0.5, 0.9, 0.99} for A > 0 and A < 0, and the divergence budget it
equals or comes nearest to (`divclip.theory.nearest_budget`); where a method string carries an engine's arithmetic
('/noclamp', GSPO's `seq_grad_mean`, the gated form's `delta_high` and `gate`) a section says where it changes w
or the gradient against verl's, with the numbers (`divclip.theory.atlas.arithmetic`), and `--at` adds verl's w.
`--at Q,R` adds the gradient weight w of a token with old probability Q and ratio R (∂ℓ/∂log π = −A·w; 0 means
clipped). `--json` prints the same as strict JSON (an unbounded interval end, ∞, is null); `--markdown` prints
the method table of README.md and docs/theory.md §8.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from divclip.theory.atlas import Q_GRID, catalogue, gradient_weight, verl_arithmetic
from divclip.theory.correction import parse_correction
from divclip.theory.correction_bounds import correction_intervals
from divclip.theory.nearest_budget import CLAMP


def _token(text: str) -> tuple[float, float]:
    q_text, sep, r_text = text.partition(",")
    try:
        q, r = float(q_text), float(r_text)
    except ValueError:
        q = r = math.nan
    if not sep or not (0 < q <= 1) or not (math.isfinite(r) and r >= 0):
        raise argparse.ArgumentTypeError(
            f"--at must be Q,R with Q the old probability in (0, 1] and R the ratio >= 0 (e.g. 0.01,1.5), got {text!r}"
        )
    return q, r


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "atlas",
        help="every clip objective (verl, TRL, papers) in one frame: family, source, intervals, nearest budget",
        description="Every method divclip knows: its family, source, parameters, the ratio interval where it "
        "keeps a token's gradient by old probability q and sign of A, and the divergence budget it equals or "
        "comes nearest to.",
    )
    p.add_argument(
        "--methods",
        metavar="LIST",
        help="comma-separated names (see the full listing) or method strings, e.g. dcpo,grpo",
    )
    p.add_argument(
        "--at",
        type=_token,
        action="append",
        default=[],
        metavar="Q,R",
        help="also print the gradient weight w of a token with old probability Q and ratio R (repeatable)",
    )
    p.add_argument(
        "--correction",
        metavar="STRING",
        help="instead: the ρ = π_old/π_rollout interval each part of a rollout correction keeps, by sequence "
        "length (e.g. is=sequence:tis=3.0/rs=token_k3:0.01, or AReaL's filter=sequence:kl_k3:sum:mask:0.5/m2po=0.04; "
        "docs/theory.md, 'The three policies')",
    )
    p.add_argument(
        "--lengths",
        metavar="LIST",
        default="1,10,100,1000",
        help="with --correction: the sequence lengths (default 1,10,100,1000)",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print strict JSON")
    out.add_argument(
        "--markdown",
        action="store_true",
        help="print the method table of README.md and docs/theory.md §8 (name, family, sources, "
        "method string, aggregation)",
    )
    return p


def _num(x) -> str:
    return "∞" if x is None or x == math.inf else f"{x:.5g}"


def _interval_text(lo, hi) -> str:
    return f"[{_num(lo)}, {_num(hi)}{')' if hi in (None, math.inf) else ']'}"


def _weights(row: dict, tokens) -> list[dict]:
    out = []
    for q, r in tokens:
        entry = {"q": q, "r": r, "feasible": q * r <= 1.0}  # π_θ = q·r must be a probability
        try:
            entry["A>0"] = float(gradient_weight(row["method"], q, r, 1.0))
            entry["A<0"] = float(gradient_weight(row["method"], q, r, -1.0))
            if row.get("arithmetic"):  # an engine's arithmetic: the same token under verl's (`verl_arithmetic`)
                verl = verl_arithmetic(row["method"])
                entry["verl"] = {
                    "A>0": float(gradient_weight(verl, q, r, 1.0)),
                    "A<0": float(gradient_weight(verl, q, r, -1.0)),
                }
        except ValueError as exc:  # a sequence-level or batch-selective form: say why there is no w
            entry["error"] = str(exc)
        out.append(entry)
    return out


def _jsonable(x):
    """inf -> None (strict JSON), recursively."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_jsonable(v) for v in x]
    return x


def _print_table(header, rows) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in (header, tuple("-" * w for w in widths), *rows):
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())


def _nearest_text(n: dict | None) -> str:
    if n is None:
        return "none (no interval)"
    delta = f"ε={n['delta']:.4g}" if n["measure"] == "ratio" else f"δ={n['delta']:.4g}"
    return f"{n['measure']} {delta} " + ("(equal)" if n["equal"] else f"(d={n['distance']:.3g})")


def _value_text(value) -> str:
    """A parameter's value: a number as %g, a flag as on/off, a choice as its word."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def _params_text(row: dict) -> str:
    parts = []
    for p in row["parameters"]:
        same = p["default"] is None or p["default"] == p["value"]
        default = "" if same else f" (default {_value_text(p['default'])})"
        parts.append(f"{p['name']}={_value_text(p['value'])}{default}")
    return " ".join(parts) or "-"


def print_text(rows: list[dict], tokens) -> None:
    _print_table(
        ("method", "family", "method string", "agg", "parameters", "sources", "nearest budget"),
        [
            (
                r["name"],
                r["family"],
                r["method"],
                r["agg"] or "-",
                _params_text(r),
                ", ".join(r["sources"]),
                _nearest_text(r["nearest"]),
            )
            for r in rows
        ],
    )
    print("\nKeep interval of r by old probability q (A > 0: r may rise to hi; A < 0: r may fall to lo):")
    lines, moot = [], False
    for r in rows:
        iv = r["intervals"]
        for sign in ("A>0", "A<0"):
            cells = [_interval_text(*iv[sign][i]) for i in range(len(Q_GRID))] if iv else ["none"] * len(Q_GRID)
            if iv and sign == "A>0":  # hi above 1/q: no probability reaches it, so the upper clip cannot bind
                marks = [hi is not None and hi > 1.0 / q for q, (_, hi) in zip(Q_GRID, iv[sign])]
                cells, moot = [c + "*" if m else c for c, m in zip(cells, marks)], moot or any(marks)
            lines.append((r["name"], sign, *cells))
    _print_table(("method", "A", *(f"q={q:g}" for q in Q_GRID)), lines)
    if moot:
        print("* hi > 1/q: r = π_θ/q is at most 1/q, so at that q the upper clip cannot bind")
    notes = [f"  {r['name']}: {r['weight_note'] or 'see docs/theory.md §8'}" for r in rows if not r["intervals"]]
    if notes:
        print("\nNo interval:\n" + "\n".join(notes))
    arith = [(r["name"], a) for r in rows for a in r.get("arithmetic", [])]
    if arith:
        print(
            "\nEngine arithmetic the method strings carry, and what it changes in w or the gradient (docs/engines.md):"
        )
        for name, a in arith:
            print(f"  {name}: {a['option']}, where {a['where']}: {a['text']}")
            print(f"      verl: {a['verl']}")
            if a["example"]:
                print(f"      numbers: {_example_text(a)}")
    if tokens:
        print("\nGradient weight w at a token (∂ℓ/∂log π = −A·w; 0: clipped, r: an unclipped PPO token):")
        wl = []
        for r in rows:
            for w in r["weights"]:
                cells = [w["error"]] * 2 if "error" in w else [f"{w['A>0']:.4g}", f"{w['A<0']:.4g}"]
                verl = w.get("verl")
                cells += [f"{verl['A>0']:.4g}", f"{verl['A<0']:.4g}"] if verl else ["-", "-"]
                wl.append((r["name"], f"{w['q']:g}", f"{w['r']:g}", *cells, "" if w["feasible"] else "q·r > 1"))
        _print_table(("method", "q", "r", "w (A>0)", "w (A<0)", "verl w (A>0)", "verl w (A<0)", "note"), wl)
        for q, r in tokens:
            if q * r > 1.0:
                print(
                    f"warning: --at {q:g},{r:g}: q·r = {q * r:.4g} > 1, so π_θ = q·r is not a probability and no "
                    "token has this ratio; its w is the formula's, not a token's",
                    file=sys.stderr,
                )
    print(
        f"\nnearest budget: the registered measure and δ minimising d = max over the q grid of |ln b − ln b'| on "
        f"the binding bounds (hi for A > 0, lo for A < 0), bounds clamped to [{CLAMP[0]:g}, {CLAMP[1]:g}]; "
        "d = 0 is equal (docs/theory.md §8)."
    )


def _example_text(a: dict) -> str:
    """The numbers of one `divclip.theory.atlas.arithmetic` entry, short."""
    ex = a["example"]
    if "log_r" in ex and "A<0" in ex:
        return (
            "; ".join(
                f"log r = {x:+g}: w {ex['A>0'][i]:.4g} / {ex['A<0'][i]:.4g}, verl {ex['verl A>0'][i]:.4g} / "
                f"{ex['verl A<0'][i]:.4g} (A>0 / A<0)"
                for i, x in enumerate(ex["log_r"])
            )
            + f" at q = {ex['q']:g}"
        )
    if "gradient" in ex:
        fmt = lambda v: "(" + ", ".join(f"{x:+.4g}" for x in v) + ")"  # noqa: E731
        return f"A = {fmt(ex['A'])}, s = {ex['s']:g}: ∂ℓ/∂log π {fmt(ex['gradient'])}, verl {fmt(ex['verl gradient'])}"
    if "hi" in ex:
        return "hi " + ", ".join(
            f"{h:.4g} (δ: {h1:.4g}) at q={q:g}" for q, h, h1 in zip(ex["q"], ex["hi"], ex["hi at δ"])
        )
    return "-"


def markdown_table(rows: list[dict]) -> str:
    """The method table README.md and docs/theory.md §8 carry between their `atlas:methods` markers."""
    lines = ["| method | family | source | method string | aggregation |", "|---|---|---|---|---|"]
    for r in rows:
        cells = (f"`{r['name']}`", r["family"], ", ".join(r["sources"]), f"`{r['method']}`", r["agg"] or "any")
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    if getattr(args, "correction", None) is not None:
        return _run_correction(args)
    if args.methods is not None and not args.methods.strip(" ,"):
        raise ValueError(f"--methods must name at least one method (e.g. dcpo,grpo), got {args.methods!r}")
    if args.markdown:
        print(markdown_table(catalogue(args.methods, with_nearest=False)), end="")
        return 0
    rows = catalogue(args.methods)
    for row in rows:
        row["weights"] = _weights(row, args.at)
    if args.json:
        doc = {
            "q_grid": list(Q_GRID),
            "distance": {
                "definition": "max over q_grid of |ln b - ln b'| on the binding bounds (hi for A > 0, lo for A < 0)",
                "clamp": list(CLAMP),
            },
            "methods": rows,
        }
        print(json.dumps(_jsonable(doc), indent=2, ensure_ascii=False, allow_nan=False))
    else:
        print_text(rows, args.at)
    return 0


def _lengths(text: str) -> tuple[int, ...]:
    try:
        out = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        out = ()
    if not out or any(n < 1 or n > 10**7 for n in out):
        raise ValueError(f"--lengths must be comma-separated integers in [1, 1e7], e.g. 1,10,100, got {text!r}")
    return out


def _run_correction(args) -> int:
    """`divclip atlas --correction`: `divclip.theory.correction_bounds.correction_intervals` as text or JSON."""
    if args.markdown or args.methods is not None or args.at:
        raise ValueError("--correction prints a correction's intervals alone: drop --methods, --at and --markdown")
    c = parse_correction(args.correction)
    lengths = _lengths(args.lengths)
    rows = correction_intervals(c, lengths)
    if args.json:
        doc = {"correction": str(c), "ratio": "π_old/π_rollout", "lengths": list(lengths), "parts": rows}
        doc["parts"] = [{**r, "by_length": {str(n): list(v) for n, v in r["by_length"].items()}} for r in rows]
        print(json.dumps(_jsonable(doc), indent=2, ensure_ascii=False, allow_nan=False))
        return 0
    print(f"Correction {c}: the per-token ρ = π_old/π_rollout it keeps, constant over a sequence of L tokens")
    header = ["part", "bounds", *(f"L={n}" for n in lengths)]
    table = [[r["part"], r["bounds"], *(_pair(*r["by_length"][n]) for n in lengths)] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table)]
    for row in (header, ["-" * w for w in widths], *table):
        print("  " + "  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())
    return 0


def _pair(lo: float, hi: float) -> str:
    return f"[{lo:.6g}, {'∞' if math.isinf(hi) else format(hi, '.6g')}]"
