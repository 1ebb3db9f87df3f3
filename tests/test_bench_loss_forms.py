"""benchmarks/bench_loss_forms.py --plugin runs and prints its table (its numbers are not tested: speed goals live in
the benchmarks, STYLE.md). A tiny batch, so that the script's plumbing, not the machine, is tested."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_loss_forms.py"
ROW = re.compile(
    r"^\| (atr_kl3 \(ε_low 0\.2\)|divclip_kl3 \(δ 0\.023144\)) "
    r"\| [\d.]+ \(median \d+\) \| [\d.]+ \(median \d+\) \| [\d.]+x \|$"
)


def test_the_plugin_table_has_one_row_per_plugin_mode():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--plugin", "--batch", "8", "--length", "64", "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [ROW.match(line) for line in proc.stdout.splitlines()]
    assert [m.group(1) for m in rows if m] == ["atr_kl3 (ε_low 0.2)", "divclip_kl3 (δ 0.023144)"]
    assert "| plug-in loss_mode (its metrics) |" in proc.stdout
