"""One form, one file: every module of `divclip.theory.forms` (bar the shared `_*` ones) is one loss form with
its parts, and the package declares exactly those modules (docs/CONTRIBUTING.md, `divclip.theory.forms`)."""

from __future__ import annotations

import ast
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import divclip.theory.forms as forms
from divclip.theory.forms import FORM_MODULES, FORM_NAMES, FORMS

FORMS_DIR = Path(forms.__file__).parent
FILES = sorted(m.name for m in pkgutil.iter_modules([str(FORMS_DIR)]) if not m.name.startswith("_"))


def _module(name):
    return __import__(f"divclip.theory.forms.{name}", fromlist=["FORM"])


def test_every_form_file_is_declared_and_nothing_else():
    assert len(FILES) >= 20
    assert sorted(FORM_MODULES) == FILES  # a form file left out of FORM_MODULES is never declared
    assert list(FORMS) == list(FORM_MODULES)  # declared from the list, in its order, and by nothing else


@pytest.mark.parametrize("name", FILES)
def test_a_form_file_has_its_parts(name):
    module = _module(name)
    form = module.FORM
    assert form.name == name and FORMS[name] is form
    # the numpy frame: a weight (and usually an interval), or a stated reason why the form has none
    if form.weight is None:
        assert form.weight_note.strip(), f"{name}: no numpy weight and no weight_note saying why"
    if form.interval is None:
        assert form.weight is None or form.weight_note.strip(), f"{name}: no interval and no note saying why"
    assert all(fn is None or callable(fn) for fn in (form.weight, form.interval))  # may be a shared `_numpy` one
    # the torch loss, defined in the file itself, with torch imported inside it
    assert callable(form.loss) and form.loss.__module__ == module.__name__
    assert name in FORM_NAMES
    params = list(inspect.signature(form.loss).parameters)
    assert params[:5] == ["log_prob", "old_log_prob", "advantages", "mask", "spec"]
    assert form.aggregate is None or callable(form.aggregate)
    assert form.example and form.sources


@pytest.mark.parametrize("name", FILES)
def test_a_form_file_imports_torch_only_inside_functions(name):
    tree = ast.parse((FORMS_DIR / f"{name}.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Import):
            assert not any(a.name.split(".")[0] == "torch" for a in node.names), f"{name}: top-level import torch"
        elif isinstance(node, ast.ImportFrom):
            assert not (node.module or "").startswith(("torch", "divclip.theory.forms._kernels")), name
            assert node.module not in ("divclip.theory.losses", "divclip.theory.loss_metrics"), name


def test_the_forms_package_is_torch_free():
    code = (
        "import sys, divclip.theory.forms as f\n"
        "assert len(f.FORMS) >= 20\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
