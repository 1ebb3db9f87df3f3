"""One catalogue of methods (issue 30 item 2): `divclip.theory.methods.METHODS` is the single home of the named
methods; the grammar's presets, the atlas rows, the ratio clips' names, the measures' method names, the study's
labels and the clip explorer's presets all derive from it, and no other module defines a list of methods."""

import ast
from pathlib import Path

import pytest

from divclip.theory import MEASURES, PRESETS, atlas, parse_method
from divclip.theory.method_names import RATIO_METHODS
from divclip.theory.methods import METHODS, PRESET_ORDER, Method, declare_method, preset_methods

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = ("theory", "engines", "sanity", "trainer", "toy_envs", "app", "cli")
HOME = ROOT / "theory" / "methods.py"


def test_the_presets_are_the_catalogues_preset_entries():
    assert list(PRESETS) == list(PRESET_ORDER) == [m.name for m in preset_methods()]
    for m in preset_methods():
        assert PRESETS[m.name] == parse_method(m.method)
        assert m.method.split("/")[0].split(":")[0] in MEASURES  # written in the base grammar, no preset name
    assert {m.name for m in METHODS.values() if m.preset} == set(PRESETS)


def test_the_atlas_rows_are_the_catalogue():
    assert atlas.METHODS is METHODS and atlas.Method is Method
    names = atlas.catalogue_names()
    assert names[: len(METHODS)] == list(METHODS)
    assert all(name in atlas.FORMS for name in names[len(METHODS) :])  # then the forms no entry uses


def test_names_and_labels_derive_from_the_catalogue():
    ratio_presets = {
        (PRESETS[m.name].eps_low, PRESETS[m.name].eps_high): m.label
        for m in preset_methods()
        if PRESETS[m.name].measure_name == "ratio" and PRESETS[m.name].form == "clip"
    }
    assert RATIO_METHODS == ratio_presets == {(0.2, 0.2): "GRPO", (0.2, 0.28): "DAPO", (3e-4, 4e-4): "GSPO"}
    by_measure = {"ratio": "grpo", "kl3": "atr", "binary_kl": "dppo_kl", "binary_tv": "dppo_tv"}
    for measure, name in by_measure.items():
        assert MEASURES[measure].method == METHODS[name].label


def test_the_study_and_the_explorer_take_the_catalogues_labels():
    from divclip.app.presets import PRESETS as EXPLORER
    from divclip.trainer.study import DEFAULT_METHODS, LABELS

    assert set(DEFAULT_METHODS) <= set(METHODS)
    assert LABELS == {name: METHODS[name].label for name in DEFAULT_METHODS}
    labels = {m.label: m.name for m in METHODS.values()}
    assert set(EXPLORER) <= set(labels)
    for label, preset in EXPLORER.items():
        spec = PRESETS[labels[label]]
        if spec.measure_name == "ratio" and label != "ATR-GRPO":
            assert (preset.values["eps_low"], preset.values["eps_high"]) == (spec.eps_low, spec.eps_high)
        if spec.measure_name != "ratio":
            assert preset.values["delta"] == pytest.approx(spec.delta) or label == "DPPO-Binary-KL"


def test_a_preset_cannot_be_declared_at_run_time():
    with pytest.raises(ValueError, match=r"presets are the catalogue's own entries"):
        declare_method(Method("demo", "kl3:0.01", ("test:demo",), preset=True))
    assert "demo" not in METHODS


def _modules():
    for folder in PACKAGE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path != HOME:
                yield path, ast.parse(path.read_text(encoding="utf-8"))


def _called(node, name):
    f = node.func
    return isinstance(node, ast.Call) and (getattr(f, "id", None) == name or getattr(f, "attr", None) == name)


def _a_method(text: str) -> bool:
    """A catalogue label ('GRPO') or a method string: what a table of methods maps its names to (an engine's
    table keyed by its own loss names maps them to aggregations or measures)."""
    if text in {m.label for m in METHODS.values()}:
        return True
    try:
        parse_method(text)
    except ValueError:
        return False
    return True


def _scan(where, tree) -> list[str]:
    """What in one module defines methods: a `Method` built at module level or declared, a module-level constant
    holding ClipSpecs, or a module-level {catalogue name: label or method string} table (a selection such as the
    study's DEFAULT_METHODS, a tuple of names, is fine)."""
    names = set(METHODS)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node, "declare_method"):
            found.append(f"{where}:{node.lineno}: declare_method(...)")
    for stmt in tree.body:
        for node in ast.walk(stmt) if not isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) else ():
            if isinstance(node, ast.Call) and _called(node, "Method"):  # an entry (a function's ad-hoc row is not)
                found.append(f"{where}:{node.lineno}: Method(...)")
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
            continue
        if any(isinstance(n, ast.Call) and _called(n, "ClipSpec") for n in ast.walk(stmt.value)):
            found.append(f"{where}:{stmt.lineno}: a module-level ClipSpec")
        if isinstance(stmt.value, ast.Dict):
            keys = [k.value for k in stmt.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            values = [v.value for v in stmt.value.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
            if len(set(keys) & names) >= 2 and len(values) == len(keys) and all(map(_a_method, values)):
                found.append(f"{where}:{stmt.lineno}: a table of methods {sorted(set(keys) & names)}")
    return found


def test_nothing_else_defines_a_method_list():
    found = [hit for path, tree in _modules() for hit in _scan(path.relative_to(ROOT), tree)]
    assert found == []


def test_the_scan_finds_a_method_list():
    """The scan is not vacuous: each kind of table this issue moved into the catalogue is reported."""
    source = (
        'LABELS = {"grpo": "GRPO", "dapo": "DAPO"}\n'
        'PRESETS = {"grpo": ClipSpec("ratio", eps_low=0.2, eps_high=0.2)}\n'
        'declare_method(Method("x", "grpo", ("a",)))\n'
        'DEFAULT = ("grpo", "dapo")\n'
    )
    found = _scan("demo.py", ast.parse(source))
    assert sorted(hit.split(": ", 1)[1] for hit in found) == [
        "Method(...)",
        "a module-level ClipSpec",
        "a table of methods ['dapo', 'grpo']",
        "declare_method(...)",
    ]
    assert _scan("home", ast.parse(HOME.read_text(encoding="utf-8")))  # the catalogue itself is what it finds
