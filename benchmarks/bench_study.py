"""Cost of `divclip study`: seconds per warm start and per run of a study preset, and what a full grid would take.

    python benchmarks/bench_study.py [--task tiny-arith-offpolicy] [--methods grpo,atr,sapo] [--steps N]
                                     [--grid-methods 12] [--grid-seeds 10] [--workers 1] [--seed 0] [--with-trl]

Times one warm start (`--seed`, default 0) and one run of each of `--methods` from it (with its held-out accuracy and
mean clipped-token fraction), in this process with the preset's
thread count (1), exactly as `divclip study --workers 1` runs them, then projects a grid of `--grid-methods` x
`--grid-seeds` on one task: (seeds x warm start + methods x seeds x mean run) / workers, against the issue's
goal of 3 hours for 12 x 10. `--with-trl` also runs benchmarks/bench_trainer.py (tokens per second of the
trainer against TRL's GRPOTrainer, goal >= 1.0). The machine's load average is printed beside the numbers: on a
shared machine a run takes longer when other jobs compete for the cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from divclip.trainer.study import Study, read_history, run_job  # noqa: E402
from divclip.trainer.study_stats import run_metrics  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="tiny-arith-offpolicy")
    p.add_argument("--methods", default="grpo,atr,sapo")
    p.add_argument("--steps", type=int, default=None, help="RL steps per run (default: the preset's)")
    p.add_argument("--sft-steps", type=int, default=None, help="warm-start steps (default: the preset's)")
    p.add_argument("--grid-methods", type=int, default=12)
    p.add_argument("--grid-seeds", type=int, default=10)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--seed", type=int, default=0, help="the seed of the warm start and the runs")
    p.add_argument("--with-trl", action="store_true")
    args = p.parse_args(argv)
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    overrides = {k: v for k, v in (("steps", args.steps), ("sft_steps", args.sft_steps)) if v is not None}
    with tempfile.TemporaryDirectory() as out:
        study = Study(methods=methods, seeds=(args.seed,), tasks=(args.task,), output_dir=out, overrides=overrides)
        load = os.getloadavg()[0]
        warm = run_job({"kind": "warm", "config": study.warm_config(args.task, args.seed)})["seconds"]
        runs, metrics = {}, {}
        for m in methods:
            start = time.perf_counter()
            run_job({"kind": "run", "config": study.run_config(args.task, m, args.seed)})
            runs[m] = time.perf_counter() - start
            metrics[m] = run_metrics(read_history(study.run_dir(args.task, m, args.seed)))
        start_acc = read_history(study.run_dir(args.task, methods[0], args.seed))[0]["eval/accuracy"]
        steps = study.run_config(args.task, methods[0], args.seed)["steps"]
    print(f"task={args.task} steps={steps} threads=1 load average at start {load:.1f} (cores: {os.cpu_count()})")
    print("| job | seconds | held-out accuracy | clipped tokens (A<0 / A>0 side) |\n|---|---|---|---|")
    print(f"| warm start (seed {args.seed}) | {warm:.1f} | {start_acc:.3f} | |")
    for m, s in runs.items():
        x = metrics[m]
        clip = f"{100 * x['clipfrac']:.2f} % ({100 * x['clipfrac_low']:.2f} / {100 * x['clipfrac_high']:.2f})"
        print(f"| run {m} | {s:.1f} | {x['final_accuracy']:.3f} | {clip} |")
    per_run = sum(runs.values()) / len(runs)
    total = (args.grid_seeds * warm + args.grid_methods * args.grid_seeds * per_run) / args.workers
    print(
        f"projected {args.grid_methods} methods x {args.grid_seeds} seeds, {args.workers} worker(s): "
        f"{total / 3600:.2f} h (goal <= 3 h): {args.grid_seeds} warm starts + "
        f"{args.grid_methods * args.grid_seeds} runs at {per_run:.1f} s"
    )
    if args.with_trl:
        import bench_trainer

        bench_trainer.main([])


if __name__ == "__main__":
    main()
