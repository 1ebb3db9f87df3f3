"""benchmarks/bench_loss.py runs and prints what benchmarks/README.md describes (its numbers are not tested: speed
goals live in the benchmarks, STYLE.md). A tiny batch, so that the script's plumbing, not the machine, is tested."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_loss.py"
FLOOR_ROW = re.compile(
    r"^\| divclip KL3 clip \(atr\), (eager|compiled \(compile \d+ s\)) "
    r"\| [\d.]+ \| [\d.]+x \| [\d.]+ \|$"
)


def _run(*args):
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--batch", "8", "--length", "64", "--repeats", "1", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_floor_table_without_compiling():
    proc = _run("--no-memory", "--no-compile")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "| floor: copy of the same bytes |" in out
    assert "every timed call after a sweep of the caches" in out
    rows = [line for line in out.splitlines() if FLOOR_ROW.match(line)]
    assert [FLOOR_ROW.match(r).group(1) for r in rows] == ["eager"]
    assert "back to back, no sweep" not in out  # that table compares compiled calls only


@pytest.mark.slow
def test_the_floor_table_with_the_compiled_column():
    proc = _run("--no-memory")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [FLOOR_ROW.match(line).group(1) for line in proc.stdout.splitlines() if FLOOR_ROW.match(line)]
    assert rows[0] == "eager" and rows[1].startswith("compiled")
    back = proc.stdout[proc.stdout.index("back to back, no sweep") :]
    assert re.search(r"^\| KL3 gated \| [\d.]+ \| [\d.]+ \| [\d.]+x \|$", back, re.M)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: --device cuda would run")
def test_cuda_without_a_gpu_is_one_error_line():
    proc = _run("--device", "cuda")
    assert proc.returncode == 2
    assert proc.stderr.startswith("divclip: error: --device cuda: no CUDA device is available")
    assert "Traceback" not in proc.stderr


def test_a_batch_that_is_not_whole_groups_is_one_error_line():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--batch", "12"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "divclip: error: --batch must be a positive multiple of 8 (GRPO groups of 8 responses), got 12"
    )
