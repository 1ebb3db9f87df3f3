"""benchmarks/ab_floor.py, the interleaved A/B of bench_loss's floor rotation between two trees (benchmarks/README.md,
"Issue 31 item 7, third round"): its pipeline on tiny inputs, eager only, with this tree on both sides (no timing is
asserted), and its refusals."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "ab_floor.py"


def _run(*args: str):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.mark.slow
def test_two_runs_alternate_the_trees_and_print_a_row_per_case():
    args = ("--before", str(ROOT), "--runs", "2", "--repeats", "1", "--batch", "8", "--length", "64", "--no-compile")
    done = _run(*args, "--case", "KL3 clip (atr)", "--case", "cispo")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split(" | ") for line in done.stdout.splitlines() if re.match(r"\| \d", line)]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        (f"| {run}", tree, case)
        for run in ("1", "2")
        for tree in ("before", "after")
        for case in ("KL3 clip (atr)", "cispo")
    ]
    for row in rows:
        assert row[3] == "-"  # not compiled
        assert all(float(row[k].rstrip("x")) > 0 for k in (4, 5, 6))


def test_an_unknown_case_and_a_bad_tree_are_refused(tmp_path):
    done = _run(
        "--before",
        str(ROOT),
        "--runs",
        "1",
        "--repeats",
        "1",
        "--batch",
        "8",
        "--length",
        "64",
        "--no-compile",
        "--case",
        "nope",
    )
    assert done.returncode != 0 and "--case must be one of" in done.stderr and "'nope'" in done.stderr
    done = _run("--before", str(tmp_path))
    assert done.returncode != 0 and "--before must be a divclip checkout" in done.stderr
    done = _run("--before", str(ROOT), "--batch", "12")
    assert done.returncode != 0 and "--batch a positive multiple of 8" in done.stderr
