"""`divclip study`: train a grid of methods x seeds x tasks with the thin trainer and compare them over seeds.

    divclip study --methods grpo,atr,dapo --seeds 10 --tasks tiny-arith-offpolicy --output-dir runs/study

Each run is a `divclip train` run directory under OUTPUT_DIR/runs/<task>/<method>/seed<k>/; running the same
command again skips finished runs and resumes partial ones. The summary table (Markdown) goes to stdout, the
numbers to OUTPUT_DIR/summary.json (`--json` prints that instead). Torch is imported only by `run`.
"""

from __future__ import annotations

import json
import sys

from divclip.trainer.study import DEFAULT_METHODS, Study, run_study, summary_table, total_wall_s


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _seeds(text: str) -> list[int]:
    """'10' -> seeds 0-9; '3,5,8' -> those; '0-9' -> a range."""
    try:
        if "," not in text and "-" not in text:
            return list(range(int(text)))
        if "," not in text and text.count("-") == 1:
            lo, hi = (int(x) for x in text.split("-"))
            return list(range(lo, hi + 1))
        return [int(x) for x in _csv(text)]
    except ValueError:
        raise ValueError(
            f"--seeds must be a count ('10' is seeds 0-9), a range '0-9' or a list '1,4,7', got {text!r}"
        ) from None


def _override(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise ValueError(f"--set must be FIELD=VALUE (a TrainerConfig field), got {text!r}")
    key, value = text.split("=", 1)
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    return key.strip(), parsed


def add_parser(subparsers):
    p = subparsers.add_parser(
        "study",
        help="train many methods x seeds x tasks side by side; paired confidence intervals against the baseline",
        description="Train every method on every task and seed with the thin trainer (shared warm start per seed), "
        "then compare each method with the first one over seeds: bootstrap intervals, Holm-adjusted sign-flip "
        "tests, the smallest detectable effect.",
    )
    p.add_argument(
        "--methods",
        default=None,
        help="comma-separated atlas names or method strings; the first is the baseline (default: grpo, dapo, atr, "
        "dual_clip, dppo_kl, dppo_tv, cispo, sapo, gspo, verl:geo_mean, verl:clip_cov, verl:kl_cov)",
    )
    p.add_argument("--seeds", default="10", help="a count (10 = seeds 0-9), a range 0-9, or a list 1,4,7")
    p.add_argument(
        "--tasks",
        default="tiny-arith-offpolicy",
        help="comma-separated presets: tiny-arith-offpolicy, tiny-mult-offpolicy, tiny-countdown-offpolicy, tiny-arith",
    )
    p.add_argument("--output-dir", default="runs/study", help="where the warm starts, runs and summary go")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a TrainerConfig field for every run, e.g. --set steps=30 (repeatable)",
    )
    p.add_argument("--workers", type=int, default=1, help="local processes running runs at once")
    p.add_argument("--ray", dest="ray_address", default=None, help="a Ray cluster address ('auto', or 'local')")
    p.add_argument("--alpha", type=float, default=0.05, help="family-wise error rate of the comparisons")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print summary.json instead of the table")
    return p


def study_from_args(args):
    return Study(
        methods=DEFAULT_METHODS if args.methods is None else tuple(_csv(args.methods)),
        seeds=tuple(_seeds(args.seeds)),
        tasks=tuple(_csv(args.tasks)),
        output_dir=args.output_dir,
        overrides=dict(_override(o) for o in args.overrides),
        workers=args.workers,
        ray_address=args.ray_address,
        alpha=args.alpha,
        progress=not args.no_progress,
    )


def run(args) -> int:
    """Handler of `divclip study`: run (or resume) the grid, print the summary table; returns 0."""
    study = study_from_args(args)  # every check runs here, before any training
    n = len(study.methods) * len(study.seeds) * len(study.tasks)
    print(f"divclip study: {n} runs into {study.output_dir}", file=sys.stderr)
    summary = run_study(study)
    if args.json:
        with open(f"{study.output_dir}/summary.json", encoding="utf-8") as f:
            print(f.read(), end="")
        return 0
    print(summary_table(summary))
    cost = summary["cost"]
    per_run = cost["seconds_per_run"]
    earlier = cost["earlier_invocations"]
    print(
        f"{cost['runs_trained']} runs trained, {cost['runs_skipped']} already done, "
        f"{cost['warm_starts_trained']} warm starts; wall {cost['wall_s']:.0f} s"
        + (f", {per_run:.1f} s per run" if per_run else "")
        + (f"; with {len(earlier)} earlier invocation(s) {total_wall_s(summary):.0f} s in all" if earlier else "")
    )
    return 0
