"""Load AReaL 1.0.4's loss code in process, without its engine stack.

`areal/__init__.py` imports AReaL's infrastructure (ray, colorlog, the inference clients), which this environment
does not install (AReaL is installed with --no-deps: its declared dependencies need a GPU). The loss functions do
not need it: `functional()` runs the installed `areal/utils/functional/functional.py` as a module of its own, its
two imports of AReaL names (`RejectionSamplingConfig`, only an annotation on the paths used here, and
`KLEstimator`, only on the rejection-sampling kl_* path) bound to stand-ins that refuse to be used; `m2po()` runs
the installed `areal/trainer/ppo/actor.py`'s two M2PO masking functions, taken from the file by `ast`. Both are
AReaL's own code, unchanged: the text of the installed files, executed.
"""

from __future__ import annotations

import ast
import functools
import sys
import types

from divclip.engines.source import installed_file

FUNCTIONAL = "utils/functional/functional.py"
ACTOR = "trainer/ppo/actor.py"
_AREAL_IMPORTS = {"areal.api.cli_args", "areal.utils.data"}


def _stand_in(name: str):
    class StandIn(type):
        def __getattr__(cls, attr):
            raise RuntimeError(
                f"areal_helpers: AReaL's {name}.{attr} is not loaded (its module imports AReaL's engine)"
            )

        def __or__(cls, other):
            return cls

        __ror__ = __or__

    return StandIn(name, (), {})


def _module(name: str, tree: ast.Module, path, globals_: dict) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__file__ = str(path)
    mod.__dict__.update(globals_)
    sys.modules[name] = mod  # dataclasses look their module up there
    exec(compile(tree, str(path), "exec"), mod.__dict__)  # noqa: S102 - the installed engine's own source
    return mod


@functools.lru_cache(maxsize=1)
def functional() -> types.ModuleType:
    """The installed `areal/utils/functional/functional.py` (ppo_actor_loss_fn, sapo_loss_fn, ...)."""
    path = installed_file("areal", FUNCTIONAL)
    tree = ast.parse(path.read_text())
    kept, names = [], {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module in _AREAL_IMPORTS:
            names.update({a.asname or a.name: _stand_in(a.name) for a in node.names})
            continue
        kept.append(node)
    tree.body = kept
    return _module("divclip_tests_areal_functional", tree, path, names)


@functools.lru_cache(maxsize=1)
def m2po() -> types.ModuleType:
    """`_apply_m2po_masking` and `_get_m2po_loss_mask` of the installed `areal/trainer/ppo/actor.py`."""
    import torch

    path = installed_file("areal", ACTOR)
    tree = ast.parse(path.read_text())
    wanted = {"_apply_m2po_masking", "_get_m2po_loss_mask"}
    tree.body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert {n.name for n in tree.body} == wanted, "AReaL's actor.py no longer has its M2PO functions"
    return _module("divclip_tests_areal_m2po", tree, path, {"torch": torch})
