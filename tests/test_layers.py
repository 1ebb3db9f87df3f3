"""Layers point one way (issue 30 item 3): theory <- engines <- sanity <- cli / app, and no import cycles.

Every import in every module of the package (module level and inside functions alike) is read with `ast`, never
by importing: `divclip.theory` imports none of engines, sanity, cli, app, trainer, toy_envs; `divclip.engines`
none of sanity, cli, app; `divclip.sanity` none of cli, app. The module-level imports of the whole package form
no cycle (a function-level import is lazy by design: torch, an optional engine)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {  # top-level folder -> installed name
    "theory": "divclip.theory",
    "engines": "divclip.engines",
    "sanity": "divclip.sanity",
    "cli": "divclip.cli",
    "app": "divclip.app",
    "trainer": "divclip.trainer",
    "toy_envs": "divclip.toy_envs",
}
FORBIDDEN = {
    "theory": ("engines", "sanity", "cli", "app", "trainer", "toy_envs"),
    "engines": ("sanity", "cli", "app"),
    "sanity": ("cli", "app"),
}


def _module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    head = PACKAGES[parts[0]]
    rest = [p for p in parts[1:] if p != "__init__"]
    return ".".join([head, *rest])


def _modules(root: Path = ROOT):
    for folder in PACKAGES:
        for path in sorted((root / folder).rglob("*.py")):
            if "examples" in path.parts:
                continue
            yield path


def _imports(path: Path, module_level_only: bool, root: Path = ROOT) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    if module_level_only:  # module level, including under `if`/`try` at the top
        nodes = [n for top in tree.body for n in ast.walk(top) if not isinstance(top, (ast.FunctionDef, ast.ClassDef))]
    out = set()
    own = _module_name(path, root)
    package = own if path.name == "__init__.py" else own.rsplit(".", 1)[0]
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            out.add(name)
            out |= {f"{name}.{a.name}" for a in node.names}  # `from divclip.engines import advice` is a module
    return {n for n in out if n.startswith("divclip.")}


def _layer(name: str) -> str | None:
    for folder, installed in PACKAGES.items():
        if name == installed or name.startswith(installed + "."):
            return folder
    return None


def _layer_violations(layer: str, root: Path = ROOT) -> list[str]:
    bad = []
    for path in _modules(root):
        if path.relative_to(root).parts[0] != layer:
            continue
        for name in sorted(_imports(path, module_level_only=False, root=root)):
            if _layer(name) in FORBIDDEN[layer]:
                bad.append(f"{path.relative_to(root)} imports {name}")
    return bad


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(layer):
    bad = _layer_violations(layer)
    assert not bad, "\n".join(bad)


def _cycles(root: Path = ROOT) -> list[str]:
    known = {_module_name(p, root): p for p in _modules(root)}
    graph = {}
    for name, path in known.items():
        deps = set()
        for imported in _imports(path, module_level_only=True, root=root):
            while imported and imported not in known:  # `divclip.engines.base.Key` -> divclip.engines.base
                imported = imported.rsplit(".", 1)[0] if "." in imported else ""
            if imported and imported != name:
                deps.add(imported)
        graph[name] = deps
    cycles, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == "open":
                cycles.append(" -> ".join(stack[stack.index(dep) :] + [dep]))
            elif dep not in state:
                visit(dep, stack)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return cycles


def test_no_import_cycles_at_module_level():
    cycles = _cycles()
    assert not cycles, "\n".join(cycles)


def test_the_checks_see_a_planted_violation_and_a_planted_cycle(tmp_path):
    """The checks can fail: in a small tree of their own, a theory module importing the app inside a function is
    caught, and so are two modules importing each other at module level."""
    (tmp_path / "theory").mkdir()
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "methods.py").write_text("X = 1\n")
    (tmp_path / "theory" / "probe.py").write_text("def f():\n    from divclip.app.methods import X\n    return X\n")
    (tmp_path / "theory" / "a.py").write_text("from divclip.theory import b\n")
    (tmp_path / "theory" / "b.py").write_text("import divclip.theory.a\n")
    assert _layer_violations("theory", tmp_path)[0] == "theory/probe.py imports divclip.app.methods"
    assert _cycles(tmp_path) == ["divclip.theory.a -> divclip.theory.b -> divclip.theory.a"]
