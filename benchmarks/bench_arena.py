"""Arena speed: all seeds in one tensor program versus running seeds one at a time.

    python benchmarks/bench_arena.py            # the issue's cases (a few minutes on 2 busy cores)
    python benchmarks/bench_arena.py --quick    # fewer steps, for a smoke test

Cases (one method, GRPO, unless stated): Bandit K=16, 64 seeds × 1000 steps, group 16, 4 PPO epochs;
TokenSequence L=8, V=8, 32 seeds × 300 steps (registry defaults otherwise). Two per-seed baselines:
  * straightforward loop: `divclip.toy_envs.reference.reference_run` once per seed, the plain single-seed program
    (torch.optim.Adam, a torch.Generator, the env's sampler and exact statistics every step, policy_loss
    with its metrics); tests/toy_envs/test_toy_reference.py checks that it learns what the arena learns.
    The goal's ratio is against this loop.
  * arena per seed: the arena's own code with `seeds=[s]`, the strictest baseline (all of the arena's
    per-step trimming, none of its batching): what batching alone buys.
Per-seed baselines are timed on a subsample of seeds and extrapolated linearly to all seeds (each seed's
run costs the same: same shapes, same number of ops), which the table says. Every timed run is the best of
`--repeats` (wall-clock on a shared machine drifts by ±20 % between runs). "policy_loss alone" is the time
the same number of `divclip.theory.losses.policy_loss` forward + backward calls take at the run's batch shape with
nothing around them (timed over 100 steps' worth of calls, extrapolated).
Goals on a 2-core machine: bandit < 3 s, sequence < 30 s, speed-up ≥ 20× against the straightforward loop.
Wall-clock times depend on the machine's load; the load average is printed with the table.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch

from divclip.theory.spec import parse_methods as resolve_methods
from divclip.toy_envs import make_env, run_arena
from divclip.toy_envs.reference import reference_run
from divclip.toy_envs.registry import ENVS

CASES = [
    # name, env, methods, seeds, steps, settings, loop subsample, goal (s)
    (
        "Bandit K=16",
        "bandit",
        "grpo",
        64,
        1000,
        {"group_size": 16, "prompts_per_step": 1, "ppo_epochs": 4, "env_kwargs": {"arms": 16}},
        4,
        3.0,
    ),
    (
        "TokenSequence L=8 V=8",
        "sequence",
        "grpo",
        32,
        300,
        {"ppo_epochs": 4, "env_kwargs": {"length": 8, "vocab": 8}},
        2,
        30.0,
    ),
    (
        "Bandit K=16, grpo+dapo+atr",
        "bandit",
        "grpo,dapo,atr",
        64,
        1000,
        {"group_size": 16, "prompts_per_step": 1, "ppo_epochs": 4, "env_kwargs": {"arms": 16}},
        2,
        None,
    ),
]


def loss_floor(env, methods, seeds, steps, settings, sample_steps=100) -> float:
    """Seconds the run spends in `policy_loss` forward + backward alone, at the run's batch shape: the
    trainer's loss is called (methods × epochs × steps) times whatever the arena does around it. Timed
    for `sample_steps` steps' worth of calls and extrapolated to `steps`."""
    from divclip.theory.losses import policy_loss

    e = make_env(env, **settings.get("env_kwargs", {}))
    cfg = {**ENVS[env].arena, **settings}
    rows, T = seeds * cfg["prompts_per_step"] * cfg["group_size"], e.horizon
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(rows, T, generator=g, dtype=torch.float64) - 0.05
    adv = torch.randn(rows, T, generator=g, dtype=torch.float64)
    mask = torch.ones(rows, T, dtype=torch.float64)
    specs = list(resolve_methods(methods).values())
    n = min(steps, sample_steps)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    for _ in range(n * cfg["ppo_epochs"]):
        for spec in specs:
            lp = (old + 0.1 * adv).requires_grad_(True)
            policy_loss(lp, old, adv, mask, spec, metrics=False)[0].backward()  # as the arena calls it
    return (time.perf_counter() - t0) * steps / n


def timed(env, methods, seeds, steps, settings, repeats=1) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        run_arena(env, methods, seeds=seeds, steps=steps, **settings)
        best = min(best, time.perf_counter() - t0)
    return best


def timed_reference(env, methods, seed, steps, settings, repeats=1) -> float:
    """One seed of every method with the straightforward loop (the arena's settings, registry defaults)."""
    cfg = {**ENVS[env].arena, **settings}
    e = make_env(env, **cfg.get("env_kwargs", {}))
    specs = resolve_methods(methods).values()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for spec in specs:
            reference_run(
                e, spec, seed, steps, cfg["group_size"], cfg["prompts_per_step"], cfg["ppo_epochs"], cfg["lr"]
            )
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a tenth of the steps (smoke test; not the goals)")
    ap.add_argument("--repeats", type=int, default=3, help="best of this many runs per timing (default 3)")
    args = ap.parse_args(argv)
    timed("bandit", "grpo", 2, 3, {"group_size": 4})  # warm-up: first-call costs are not the arena's
    timed_reference("bandit", "grpo", 0, 2, {"group_size": 4})  # torch.optim's first construction imports dynamo
    rows = []
    for name, env, methods, seeds, steps, settings, sub, goal in CASES:
        steps = max(10, steps // 10) if args.quick else steps
        batched = timed(env, methods, seeds, steps, settings, args.repeats)
        per_seed = sum(timed(env, methods, [s], steps, settings, args.repeats) for s in range(sub)) / sub * seeds
        loop = sum(timed_reference(env, methods, s, steps, settings, args.repeats) for s in range(sub)) / sub * seeds
        floor = loss_floor(env, methods, seeds, steps, settings)
        speedup = loop / batched
        met = []
        if goal is not None and not args.quick:
            met.append(f"< {goal:g} s: {'yes' if batched < goal else 'NO'}")
        if not args.quick:
            met.append(f"≥ 20×: {'yes' if speedup >= 20 else 'NO'}")
        rows.append(
            (
                name,
                f"{seeds} × {steps}",
                f"{batched:.2f}",
                f"{steps / batched:.0f}",
                f"{seeds * steps / batched:.0f}",
                f"{loop:.1f}",
                f"{speedup:.0f}×",
                f"{per_seed:.1f}",
                f"{per_seed / batched:.0f}×",
                f"{sub}",
                f"{floor:.2f}",
                ", ".join(met),
            )
        )
    head = (
        "case",
        "seeds × steps",
        "batched (s)",
        "steps/s",
        "seed-steps/s",
        "straightforward loop (s)",
        "speed-up",
        "arena per seed (s)",
        "speed-up",
        "seeds timed",
        "policy_loss alone (s)",
        "goals",
    )
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("n/a",)
    print(
        f"torch {torch.__version__}, {os.cpu_count()} CPUs, arena threads 1, load average {load[0]:.2f}, "
        f"{platform.machine()}, best of {args.repeats}; per-seed columns extrapolated from 'seeds timed'"
    )
    for r in (head, tuple("-" * w for w in widths), *rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


if __name__ == "__main__":
    main()
