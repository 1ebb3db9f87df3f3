"""GRPO's clipped-token fraction on a study preset under variants of its loop (how the harder presets were tuned).

    python benchmarks/bench_offpolicy_clip.py --task tiny-mult-offpolicy --steps 20 --out runs/tune \
        '{}' '{"staleness": 2}' '{"sft_steps": 2000, "prompts_per_step": 8, "group_size": 16, "staleness": 2}'

Each argument is a JSON object of TrainerConfig fields applied on top of the preset. Runs share a warm start
(seed `--seed`, kept under OUT/warm-...) when they agree on every field the warm start depends on
(`divclip.trainer.grpo.WARM_START_FIELDS`); a variant that changes one (e.g. sft_steps) gets its own. Each variant
is one GRPO run of `--steps` steps from it, and prints one JSON line: the mean clipped-token fraction over the
steps (as `divclip study` reports it) by side, the warm start's and the final greedy held-out accuracy, the mean
sampled reward, each step's clip fraction, the wall time and the load average. A benchmark, not a test: minutes
per variant on a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from divclip.trainer.config import from_preset  # noqa: E402
from divclip.trainer.grpo import WARM_START_FIELDS, GRPOTrainer  # noqa: E402
from divclip.trainer.study_stats import run_metrics  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="tiny-mult-offpolicy", help="a study preset")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/offpolicy-clip", help="warm starts are kept here between invocations")
    p.add_argument("variants", nargs="*", default=["{}"], help="JSON objects of TrainerConfig fields")
    args = p.parse_args(argv)
    for text in args.variants:
        overrides = json.loads(text)
        if not isinstance(overrides, dict):
            raise SystemExit(f"each variant must be a JSON object of TrainerConfig fields, got {text!r}")
        base = from_preset(args.task, method="grpo", seed=args.seed, progress=False, **overrides)
        warm_fields = {k: v for k, v in overrides.items() if k in WARM_START_FIELDS}
        warm = from_preset(args.task, method="grpo", seed=args.seed, progress=False, **warm_fields)
        key = hashlib.sha256(json.dumps({k: warm.to_dict()[k] for k in WARM_START_FIELDS}).encode()).hexdigest()
        warm_dir = Path(args.out) / f"warm-{args.task}-seed{args.seed}-{key[:10]}"
        t0 = time.perf_counter()
        GRPOTrainer(warm.replace(output_dir=str(warm_dir))).prepare()  # made once, then resumed
        warm_s = time.perf_counter() - t0
        cfg = base.replace(
            steps=args.steps, eval_every=args.steps, warm_start_from=str(warm_dir / "checkpoints" / "step-000000")
        )
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        history = GRPOTrainer(cfg).train().history
        m = run_metrics(history)
        row = {
            "task": args.task,
            "seed": args.seed,
            "steps": args.steps,
            "overrides": overrides,
            "warm_s": round(warm_s, 1),
            "run_s": round(time.perf_counter() - t0, 1),
            "load": round(load, 1),
            "clipfrac_pct": round(100 * m["clipfrac"], 2),
            "low_pct": round(100 * m["clipfrac_low"], 2),
            "high_pct": round(100 * m["clipfrac_high"], 2),
            "accuracy_warm": history[0].get("eval/accuracy"),
            "accuracy_final": m["final_accuracy"],
            "reward_mean": round(m["reward_mean"], 3),
            "clipfrac_per_step_pct": [round(100 * r["clip/clipfrac"], 1) for r in history[1:]],
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
