"""Every Python snippet in README.md runs as pasted (issue 26 item 8: the loss snippet raised NameError)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M)


def test_the_readme_has_python_snippets():
    assert len(BLOCKS) >= 4
    assert any("policy_loss(" in b for b in BLOCKS)


@pytest.mark.slow
@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i + 1}" for i in range(len(BLOCKS))])
def test_each_snippet_runs_as_pasted(code, tmp_path):
    """Each block in a fresh interpreter, from an empty directory (nothing of the repository on its path but the
    installed divclip), as a reader pasting it would run it."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, f"snippet failed:\n{code}\n--- stderr ---\n{out.stderr[-3000:]}"


def test_readme_says_which_torch_build_the_pinned_line_gives_and_how_to_get_the_cpu_one():
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert "on a machine with only the public package index (PyPI), Linux x86_64 gets the **CUDA build**" in text
    assert 'make run TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"' in text
    makefile = (README.parent / "Makefile").read_text(encoding="utf-8")
    assert '"$(TORCH_SPEC)" $(TORCH_PIP_ARGS)' in makefile  # the README's make line really reaches pip
