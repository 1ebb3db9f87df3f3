"""Per-token binary-KL clip bounds: divclip's vectorised solver vs a plain per-element scipy loop.

    python benchmarks/bench_bounds.py [--tokens 1000000] [--sample 2000]

The loop (scipy.optimize.brentq per token and per side) is timed on a random subsample and its time per
token extrapolated to all tokens; both solve the same (δ, p) pairs, and the table also reports the largest
disagreement between them on the subsample.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy.optimize import brentq

from divclip.theory import get_measure
from divclip.theory.bounds import binary_kl_value


def scalar_loop(delta, p):
    lo = np.empty_like(delta)
    hi = np.empty_like(delta)
    for i, (d, q) in enumerate(zip(delta, p)):
        g = lambda u, d=d, q=q: float(binary_kl_value(math.exp(u), q)) - d  # noqa: E731
        lo[i] = math.exp(brentq(g, -(d - (1 - q) * math.log1p(-q)) / q - 1.0, 0.0, rtol=1e-15))
        # Upper root in z = log((1-p)/(1-q)), q = r p: finite for all z >= 0, no singularity at r = 1/p.
        h = lambda z, d=d, q=q: q * math.log(q / (q - (1 - q) * math.expm1(-z))) + (1 - q) * z - d  # noqa: E731
        z = brentq(h, 0.0, (d - q * math.log(q)) / (1 - q) + 1.0, rtol=1e-15)
        hi[i] = (q - (1 - q) * math.expm1(-z)) / q
    return lo, hi


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=1_000_000)
    ap.add_argument("--sample", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    # Realistic old-policy probabilities of sampled tokens: most near 1, a long tail of rare tokens.
    p = np.clip(np.exp(-rng.exponential(1.0, args.tokens)), 1e-4, 1 - 1e-4)
    delta = np.full(args.tokens, 0.05)
    m = get_measure("binary_kl")
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        lo, hi = m.bounds(delta, p)
        times.append(time.perf_counter() - t0)
    t_vec = float(np.median(times))
    sub = rng.choice(args.tokens, args.sample, replace=False)
    t0 = time.perf_counter()
    lo_ref, hi_ref = scalar_loop(delta[sub], p[sub])
    t_loop = (time.perf_counter() - t0) / args.sample * args.tokens
    diff = max(np.max(np.abs(lo[sub] - lo_ref) / lo_ref), np.max(np.abs(hi[sub] - hi_ref) / hi_ref))
    print(f"binary-KL bounds, δ = 0.05, {args.tokens:,} tokens (p ~ exp(-Exp(1)), clipped to [1e-4, 1-1e-4])")
    print(f"| method | seconds for {args.tokens:,} tokens | tokens/s | speed-up |")
    print("|---|---|---|---|")
    print(
        f"| divclip vectorised (numpy, median of {args.repeats}) | {t_vec:.3f} | {args.tokens / t_vec:,.0f} "
        f"| {t_loop / t_vec:.1f}x |"
    )
    print(
        f"| scipy brentq loop (timed on {args.sample:,}, extrapolated) | {t_loop:.1f} | "
        f"{args.tokens / t_loop:,.0f} | 1.0x |"
    )
    print(f"max relative difference on the subsample: {diff:.2e}")


if __name__ == "__main__":
    main()
