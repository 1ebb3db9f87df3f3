"""`divclip bounds`: the exact clip interval of a measure at a budget δ, or at the δ matching an ε."""

from __future__ import annotations

import json
import math

from divclip.cli.options import finite_float
from divclip.theory import delta_for_eps, equivalent_ratio_clip, get_measure


def add_parser(subparsers):
    p = subparsers.add_parser("bounds", help="exact clip interval of a measure at a budget")
    p.add_argument("--measure", required=True)
    p.add_argument("--delta", type=finite_float("--delta"), help="divergence budget δ (ratio: its width ε)")
    p.add_argument("--eps-low", type=finite_float("--eps-low"), help="find δ whose lower bound is 1 - ε_low")
    p.add_argument("--eps-high", type=finite_float("--eps-high"), help="find δ whose upper bound is 1 + ε_high")
    p.add_argument("--p", type=finite_float("--p"), help="old-policy probability (p-dependent measures)")
    p.add_argument("--json", action="store_true")
    return p


def run(args) -> int:
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
        print(
            json.dumps(
                {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()},
                allow_nan=False,
            )
        )
    else:
        where = f" at p={p:g}" if p is not None else ""
        print(f"{m.name}: D(r) = {m.code}{where}")
        print(f"  delta    = {delta:.10g}")
        print(f"  interval = [{lo:.10g}, {hi:.10g}]")
        print(f"  eps_low  = {eps_low:.10g}    eps_high = {eps_high:.10g}")
    return 0
