"""Interleaved A/B of bench_loss.py's floor rotation: two divclip trees, alternating, each run in a process of its own.

    python benchmarks/ab_floor.py --before PATH [--after PATH] [--case NAME ...] [--runs 3] [--repeats 7]

Each run times the floor rotation of `bench_loss.time_floor_cases` (the floor copy, verl's function, divclip eager,
divclip compiled; each call after a cache sweep) for the chosen cases, first from the --before tree and then from the
--after one (this checkout by default). The two alternate `--runs` times, so a slow spell of a shared machine weighs
on both sides alike. A tree other than this one is loaded through `compiled_code.use_tree`: its folders take the
place of the installed divclip, so no second environment is needed (e.g. `git worktree add /tmp/before <commit>`).
Prints one markdown row per run and case: compiled and eager x the floor, eager over verl's function, the floor copy
in ms and the load average. The tables of benchmarks/README.md "Issue 31 item 7, third round" come from
`--case "KL3 clip (atr)" --case "binary KL clip, exact bounds"` with --before at df01ac0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def child(tree: Path, cases: list[str], repeats: int, batch: int, length: int, compile_: bool) -> dict:
    sys.path.insert(0, str(HERE / "benchmarks"))
    import compiled_code

    if tree != HERE:
        compiled_code.use_tree(tree)
    bench = compiled_code.load_bench(tree)
    names = [name for name, _, _ in bench.FLOOR_CASES]
    unknown = [c for c in cases if c not in names]
    if unknown:
        raise SystemExit(f"--case must be one of {names}, got {unknown}")
    bench.FLOOR_CASES = [c for c in bench.FLOOR_CASES if c[0] in cases]
    rows = bench.time_floor_cases(bench.make_inputs(batch, length), repeats, compile_)
    return {
        name: {
            "floor_ms": row["floor"] * 1e3,
            "compiled": None if row["compiled"] is None else row["ratio"]["compiled"],
            "eager": row["ratio"]["eager"],
            "eager_over_verl": row["eager"] / row["verl"],
        }
        for name, row in rows.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="the divclip checkout to compare against")
    ap.add_argument("--after", type=Path, default=HERE, help="the checkout compared (default: this one)")
    ap.add_argument("--case", action="append", help="a floor case by its name in bench_loss.py; repeatable")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--length", type=int, default=8192)
    ap.add_argument("--no-compile", action="store_true", help="eager only (a quick check of the pipeline)")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    cases = args.case or ["KL3 clip (atr)", "binary KL clip, exact bounds"]
    if args.runs < 1 or args.repeats < 1 or args.batch < 8 or args.batch % 8 or args.length < 8:
        raise SystemExit(
            "--runs and --repeats must be at least 1, --batch a positive multiple of 8 and --length at least 8, got "
            f"{args.runs}, {args.repeats}, {args.batch}, {args.length}"
        )
    if args.child:
        out = child(args.child.resolve(), cases, args.repeats, args.batch, args.length, not args.no_compile)
        print(json.dumps(out))
        return
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    for label, tree in trees.items():
        if not (tree / "theory").is_dir() or not (tree / "benchmarks" / "bench_loss.py").is_file():
            raise SystemExit(
                f"--{label} must be a divclip checkout with theory/ and benchmarks/bench_loss.py, got {tree}"
            )
    print("| run | tree | case | compiled x floor | eager x floor | eager / verl | floor ms | load |")
    print("|---|---|---|---|---|---|---|---|")
    for run in range(1, args.runs + 1):
        for label, tree in trees.items():
            cmd = [sys.executable, __file__, "--child", str(tree), "--repeats", str(args.repeats)]
            cmd += ["--batch", str(args.batch), "--length", str(args.length), "--before", str(tree)]
            cmd += [arg for c in cases for arg in ("--case", c)] + (["--no-compile"] if args.no_compile else [])
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE)
            if done.returncode:
                raise SystemExit(f"the {label} tree ({tree}) failed:\n{done.stderr[-3000:]}")
            rows = json.loads(done.stdout.strip().splitlines()[-1])
            load = f"{os.getloadavg()[0]:.1f}"
            for name, row in rows.items():
                compiled = "-" if row["compiled"] is None else f"{row['compiled']:.2f}x"
                print(
                    f"| {run} | {label} | {name} | {compiled} | {row['eager']:.2f}x | {row['eager_over_verl']:.2f}x | "
                    f"{row['floor_ms']:.2f} | {load} |"
                )


if __name__ == "__main__":
    main()
