"""Repository-wide rules: every import goes through the divclip namespace, and nothing cites a file that is
not in the repository (the maths reference is docs/theory.md)."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP_LEVEL = {"theory", "app", "trainer", "toy_envs", "sanity", "cli"}  # folders installed as divclip.<name>
_SKIP_DIRS = {"__pycache__", "build", "dist", "node_modules"}


def repo_files(*suffixes: str) -> list[Path]:
    """Every file under the repository root with one of `suffixes`, outside .git, virtual environments,
    caches and build output (hidden folders and *.egg-info are skipped)."""
    out = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS and not d.endswith(".egg-info")]
        out += [Path(folder, f) for f in files if not suffixes or f.endswith(suffixes)]
    return out


_CODE_IMPORT = re.compile(
    r"(?:^|[;\n(]|\s)(?:import\s+([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)"
    r"|from\s+([A-Za-z_][\w.]*)\s+import\b)"
)


def _bare(names) -> list[str]:
    return [n for n in names if n and n.split(".")[0] in TOP_LEVEL]


def bare_imports(path: Path) -> list[str]:
    """`file:line: name` for each import of a bare top-level folder name, in code and in code held in strings
    (`python -c "import theory"`, docstring examples)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for many, one in _CODE_IMPORT.findall(node.value):
                names += [n.strip() for n in many.split(",")] if many else [one]
        found += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in _bare(names)]
    return found


def test_no_module_imports_a_bare_top_level_name():
    files = repo_files(".py")
    assert len(files) > 50 and ROOT / "cli" / "__init__.py" in files
    offenders = [hit for f in files for hit in bare_imports(f)]
    assert offenders == []


def test_the_bare_import_scan_catches_what_it_should(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    sample = tmp_path / "sample.py"
    text = (
        "import os, {t}.bounds\nfrom {a}.cli import main\nfrom . import x\nimport divclip.theory\n"
        "code = 'import sys, {tr}; print(1)'\ndoc = '''>>> from {te} import run_arena'''\n"
    )
    sample.write_text(text.format(t="theory", a="app", tr="trainer", te="toy_envs"), encoding="utf-8")
    assert [h.split(": ")[1] for h in bare_imports(sample)] == ["theory.bounds", "app.cli", "trainer", "toy_envs"]


def test_no_file_cites_the_old_theory_file():
    needle = "THEORY" + ".md"  # spelled so that this file does not contain it
    files = repo_files()
    assert ROOT / "docs" / "theory.md" in files
    hits = []
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        hits += [f"{f.relative_to(ROOT)}:{i}" for i, line in enumerate(text.splitlines(), 1) if needle in line]
    assert hits == []
