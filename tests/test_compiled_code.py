"""benchmarks/compiled_code.py dumps the kernels torch.compile makes for bench_loss's floor cases, from this tree or
from another checkout (--tree), so that two trees can be compared with `diff -r` (benchmarks/README.md). Checked
here on one case: the same tree read both ways gives the same files, two different forms different ones."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "compiled_code.py"


def _run(out: Path, *args: str):
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(out), *args], capture_output=True, text=True, timeout=600, cwd=ROOT
    )


@pytest.mark.slow
def test_the_same_tree_gives_the_same_kernels(tmp_path):
    here = _run(tmp_path / "here", "--case", "KL3 clip (atr)", "--case", "cispo")
    assert here.returncode == 0, here.stderr[-2000:]
    there = _run(tmp_path / "there", "--case", "KL3 clip (atr)", "--tree", str(ROOT))
    assert there.returncode == 0, there.stderr[-2000:]
    assert "divclip-tree-" in there.stdout  # the loss came through the linked namespace, not the install
    kl3 = (tmp_path / "here" / "KL3_clip_atr.py").read_text()
    assert "def call" in kl3 and kl3.count("cpp_fused") >= 2  # forward and backward kernels
    assert (tmp_path / "there" / "KL3_clip_atr.py").read_text() == kl3
    assert (tmp_path / "here" / "cispo.py").read_text() != kl3


def test_an_unknown_case_and_a_bad_tree_are_refused(tmp_path):
    proc = _run(tmp_path, "--case", "nope")
    assert proc.returncode != 0 and "--case must be one of" in proc.stderr and "'nope'" in proc.stderr
    proc = _run(tmp_path, "--tree", str(tmp_path))
    assert proc.returncode != 0 and "--tree must be a divclip checkout" in proc.stderr
