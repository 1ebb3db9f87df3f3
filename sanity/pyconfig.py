"""Read settings out of a Python snippet (what `divclip export` prints for TRL and verl), without running it.

The text is parsed with `ast` and never executed. Settings are taken from literal values only:
* keyword arguments of any call: `dict(epsilon=0.2, ...)`, `GRPOConfig(...)`;
* string keys of a dict literal assigned to a name: `clip = {"epsilon": 0.2}`;
* a list of `"key=value"` strings assigned to a name: verl's `overrides = ["actor_rollout_ref...=0.2", ...]`;
* `os.environ["NAME"] = "value"`: an environment variable the run sets.
A value that is not a literal (`output_dir=...`, a variable) is skipped; `float("inf")` reads as inf.
"""

from __future__ import annotations

import ast
import math

from divclip.sanity.errors import ConfigError
from divclip.sanity.shell import Tokens, read_tokens

MAX_NODES = 200_000


def read_python(text: str, name: str) -> Tokens:
    try:
        tree = ast.parse(text, filename=name)
    except SyntaxError as exc:
        raise ConfigError(f"config {name!r} is not valid Python: {exc.msg} (line {exc.lineno})") from None
    except (RecursionError, MemoryError, ValueError):
        raise ConfigError(f"config {name!r} is nested too deeply to read as Python") from None
    out = Tokens()
    for count, node in enumerate(ast.walk(tree)):
        if count > MAX_NODES:
            raise ConfigError(f"config {name!r} holds more than {MAX_NODES} Python nodes: refused")
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                _take(out.values, kw.arg, kw.value)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            _assignment(node.targets[0], node.value, out, name)
    return out


def _assignment(target, value, out: Tokens, name: str) -> None:
    if _is_environ(target):
        key = _literal(target.slice)
        if isinstance(key, str):
            _take(out.values, key, value)
    elif isinstance(value, ast.Dict):
        for k, v in zip(value.keys, value.values):
            _take(out.values, _literal(k) if k is not None else None, v)
    elif isinstance(value, ast.List) and value.elts and all(isinstance(_literal(e), str) for e in value.elts):
        read_tokens([_literal(e) for e in value.elts], out, what=f"override in {name!r}")


def _is_environ(node) -> bool:
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "environ"
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "os"
    )


_MISSING = object()


def _take(values: dict, key, node) -> None:
    if not isinstance(key, str):
        return
    value = _literal(node)
    if value is not _MISSING and value is not Ellipsis:
        values[key] = value


def _literal(node, depth: int = 0):
    """The value of a literal node (constants, lists, tuples, dicts, -x, float("inf")); _MISSING otherwise."""
    if node is None or depth > 32:
        return _MISSING
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand, depth + 1)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
        return _MISSING
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_literal(e, depth + 1) for e in node.elts]
        return _MISSING if _MISSING in items else (items if isinstance(node, ast.List) else tuple(items))
    if isinstance(node, ast.Dict):
        pairs = [(_literal(k, depth + 1), _literal(v, depth + 1)) for k, v in zip(node.keys, node.values)]
        if any(k is _MISSING or v is _MISSING or not isinstance(k, (str, int, float)) for k, v in pairs):
            return _MISSING
        return dict(pairs)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "float"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and not node.keywords
    ):
        try:
            value = float(node.args[0].value)  # float("inf")
        except (TypeError, ValueError):
            return _MISSING
        return _MISSING if math.isnan(value) else value
    return _MISSING
