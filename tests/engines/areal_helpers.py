"""Load AReaL 1.0.4's rejection sampling, loss and M2PO mask from the installed files, unchanged.

AReaL was installed with --no-deps, so `import areal.utils.functional` fails (`areal.utils.logging` needs
colorlog, `areal.api.cli_args` hydra and uvloop). What the correction needs is self-contained: the dataclass
`RejectionSamplingConfig` (areal/api/cli_args.py), `KLEstimator` (areal/utils/data.py), the whole file
areal/utils/functional/functional.py (`apply_rejection_sampling`, `ppo_actor_loss_fn`) and the two M2PO
functions of areal/trainer/ppo/actor.py. `load()` takes those classes and functions by name from the installed
sources (`ast`, their exact text), and runs functional.py itself as a module, its two `from areal... import`
lines served by stand-in modules holding AReaL's own classes (sys.modules is restored afterwards).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
import types

from divclip.engines.source import installed_file


def _definitions(path: str, names: tuple[str, ...], namespace: dict) -> dict:
    """Exec the named top-level classes/functions of AReaL's `path`, in their own text, into a module of their
    own (registered under a private name: dataclasses looks its module up) seeded with `namespace`."""
    module = types.ModuleType("divclip_test_areal_" + path.replace("/", "_").removesuffix(".py"))
    module.__dict__.update(namespace)
    sys.modules[module.__name__] = module
    namespace = module.__dict__
    source = installed_file("areal", path).read_text()
    tree = ast.parse(source)
    found = {n.name: n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name in names}
    missing = set(names) - set(found)
    if missing:
        raise LookupError(f"areal {path} has no {sorted(missing)}")
    lines = source.splitlines(keepends=True)
    for name in names:
        node = found[name]
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])  # with its @dataclass
        text = "".join(lines[first - 1 : node.end_lineno])
        exec(compile(text, f"areal/{path}", "exec"), namespace)  # noqa: S102
    return namespace


@functools.lru_cache(maxsize=1)
def load() -> types.SimpleNamespace:
    """AReaL's RejectionSamplingConfig, apply_rejection_sampling, ppo_actor_loss_fn, _apply_m2po_masking."""
    import dataclasses

    import torch

    cli = _definitions(
        "api/cli_args.py",
        ("RejectionSamplingConfig",),
        {"dataclass": dataclasses.dataclass, "field": dataclasses.field},
    )
    data = _definitions("utils/data.py", ("KLEstimator",), {"torch": torch})
    actor = _definitions("trainer/ppo/actor.py", ("_apply_m2po_masking", "_get_m2po_loss_mask"), {"torch": torch})
    stand_ins = {
        "areal": types.ModuleType("areal"),
        "areal.api": types.ModuleType("areal.api"),
        "areal.api.cli_args": types.ModuleType("areal.api.cli_args"),
        "areal.utils": types.ModuleType("areal.utils"),
        "areal.utils.data": types.ModuleType("areal.utils.data"),
    }
    stand_ins["areal.api.cli_args"].RejectionSamplingConfig = cli["RejectionSamplingConfig"]
    stand_ins["areal.utils.data"].KLEstimator = data["KLEstimator"]
    path = installed_file("areal", "utils/functional/functional.py")
    saved = {name: sys.modules.get(name) for name in stand_ins}
    sys.modules.update(stand_ins)
    try:
        spec = importlib.util.spec_from_file_location("areal_functional_1_0_4", path)
        functional = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(functional)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return types.SimpleNamespace(
        RejectionSamplingConfig=cli["RejectionSamplingConfig"],
        apply_rejection_sampling=functional.apply_rejection_sampling,
        ppo_actor_loss_fn=functional.ppo_actor_loss_fn,
        apply_m2po_masking=actor["_apply_m2po_masking"],
        functional=functional,
        m2po=types.SimpleNamespace(
            _apply_m2po_masking=actor["_apply_m2po_masking"], _get_m2po_loss_mask=actor["_get_m2po_loss_mask"]
        ),
    )


def functional() -> types.ModuleType:
    """The installed `areal/utils/functional/functional.py` as a module (ppo_actor_loss_fn, sapo_loss_fn, ...)."""
    return load().functional


def m2po() -> types.SimpleNamespace:
    """`_apply_m2po_masking` and `_get_m2po_loss_mask` of the installed `areal/trainer/ppo/actor.py`."""
    return load().m2po
