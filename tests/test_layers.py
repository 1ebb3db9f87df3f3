"""Layers point one way (issue 30 item 3): theory <- engines <- sanity <- cli / app, no import cycles, and an import
inside a function only where the module it imports must stay lazy.

Every import in every module of the package (module level and inside functions alike) is read with `ast`, never
by importing: `divclip.theory` imports none of engines, sanity, cli, app, trainer, toy_envs; `divclip.engines`
none of sanity, cli, app; `divclip.sanity` none of cli, app. The module-level imports of the whole package form
no cycle.

The rule for function-level imports (docs/CONTRIBUTING.md, "Layers and imports"): a divclip module may be imported
inside a function only when it imports one of `LAZY_PACKAGES` (torch, transformers, an optional engine: verl, TRL,
OpenRLHF, AReaL, SkyRL, ray; the app's streamlit and plotly, ...) at module level, directly or through its own
module-level divclip imports (the transitive closure; an `if TYPE_CHECKING:` block imports nothing when the code
runs, so it counts for neither). Every other divclip import sits at the top of its module, and a cycle is broken by
moving the shared code down to a module both sides can import, not by a lazy import. `import torch` (or any other
package) inside a function is always fine; `divclip.theory` itself stays torch-free to import
(tests/theory/test_spec.py). A module loaded by its name (`importlib.import_module`: the forms package's
`FORM_MODULES`, the engine registry's `get_engine`, `divclip.toy_envs`'s lazy names) is not an import statement and
is outside these checks: those catalogues load their entries on demand by design."""

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
LAZY_PACKAGES = (
    "torch",
    "transformers",
    "safetensors",
    "tokenizers",
    "datasets",
    "pyarrow",
    "tqdm",
    "verl",
    "trl",
    "openrlhf",
    "areal",
    "skyrl",
    "skyrl_train",
    "slime",
    "ray",
    "streamlit",
    "plotly",
    "playwright",
)
"""The packages whose import is heavy (torch and what builds on it) or optional (an engine, the app's, a training
extra): the only reasons for a divclip module to be imported inside a function."""
LAZY_CHECKED = tuple(PACKAGES)
"""The layers whose function-level imports the rule checks: every one."""
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


def _type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _import_nodes(path: Path) -> tuple[list, list]:
    """(the imports that run when the module is imported, those inside a function), by ast: module level is the
    top of the file and its `if`/`try` blocks and class bodies, less `if TYPE_CHECKING:`; a function is a def or a
    lambda at any depth."""
    run, inside = [], []

    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            if not in_function and _type_checking(child):
                continue
            function = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                (inside if in_function else run).append(child)
            walk(child, function)

    walk(ast.parse(path.read_text()), False)
    return run, inside


def _targets(node, own: str, is_package: bool, known) -> tuple[list[str], set[str]]:
    """(the divclip modules an import node loads, each the most specific module of the tree it names; the other
    packages it names, by their top-level name)."""

    def module(name):
        while name and name not in known:  # `divclip.theory.spec.ClipSpec` -> divclip.theory.spec
            name = name.rsplit(".", 1)[0] if "." in name else ""
        return name

    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = own if is_package else own.rsplit(".", 1)[0]
            package = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            base = f"{package}.{node.module}" if node.module else package
        names = [f"{base}.{a.name}" for a in node.names]
    ours = [module(n) for n in names if n.startswith("divclip.")]
    return [m for m in ours if m], {n.split(".")[0] for n in names if not n.startswith("divclip.")}


def _lazy_modules(root: Path = ROOT) -> set[str]:
    """The divclip modules that import a `LAZY_PACKAGES` package when they are imported: at module level, directly
    or through their module-level divclip imports."""
    paths = {_module_name(p, root): p for p in _modules(root)}
    deps, lazy = {}, set()
    for name, path in paths.items():
        run, _ = _import_nodes(path)
        deps[name] = set()
        for node in run:
            ours, others = _targets(node, name, path.name == "__init__.py", paths)
            deps[name] |= set(ours) - {name}
            if others & set(LAZY_PACKAGES):
                lazy.add(name)
    grown = True
    while grown:
        grown = False
        for name, needs in deps.items():
            if name not in lazy and needs & lazy:
                lazy.add(name)
                grown = True
    return lazy


def _needless_lazy_imports(layers=LAZY_CHECKED, root: Path = ROOT) -> list[str]:
    paths = {_module_name(p, root): p for p in _modules(root)}
    lazy = _lazy_modules(root)
    bad = []
    for name, path in paths.items():
        if path.relative_to(root).parts[0] not in layers:
            continue
        _, inside = _import_nodes(path)
        for node in inside:
            ours, _ = _targets(node, name, path.name == "__init__.py", paths)
            for target in sorted(set(ours) - lazy):
                bad.append(f"{path.relative_to(root)}:{node.lineno} imports {target} inside a function")
    return bad


def test_a_function_level_import_is_lazy_for_a_reason():
    """Only a module that imports torch or an optional package (`LAZY_PACKAGES`) is imported inside a function;
    every other import sits at the top of its module."""
    bad = _needless_lazy_imports()
    assert not bad, "these import no lazy package at module level; import them at the top:\n" + "\n".join(bad)


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


def test_the_lazy_rule_sees_a_planted_needless_import(tmp_path):
    """The rule can fail: a module that imports numpy, or torch only under `if TYPE_CHECKING:`, imported inside a
    function is caught; one importing torch itself or through another module, and torch inside a function, are
    not."""
    (tmp_path / "theory").mkdir()
    files = {
        "light.py": "import numpy\n",
        "typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n",
        "heavy.py": "import torch\n",
        "through.py": "from . import heavy\n",
        "user.py": (
            "def f():\n    import torch\n    from divclip.theory.through import x\n"
            "    from divclip.theory import heavy, light\n"
            "def g():\n    from .typed import y\n    return lambda: __import__('os')\n"
        ),
    }
    for name, text in files.items():
        (tmp_path / "theory" / name).write_text(text)
    assert _lazy_modules(tmp_path) == {"divclip.theory.heavy", "divclip.theory.through"}
    assert _needless_lazy_imports(("theory",), tmp_path) == [
        "theory/user.py:4 imports divclip.theory.light inside a function",
        "theory/user.py:6 imports divclip.theory.typed inside a function",
    ]
    assert _needless_lazy_imports(("app",), tmp_path) == []  # a layer not checked
