"""Read an engine's own definitions of its settings from its source, without importing it.

OpenRLHF builds its argparse parser inside `if __name__ == "__main__":` of a module that imports ray, vLLM and
DeepSpeed; AReaL's config dataclasses live in a module that imports uvloop, hydra and its engine stack; slime is
not on the package index at all. So the keys and defaults of those engines are read from the source text with
`ast`: `argparse_flags` collects every `parser.add_argument(...)` call, `dataclass_fields` every annotated
field of every class. Only literal arguments are evaluated (`ast.literal_eval`); anything else (a name, a call)
is kept as its source text, so nothing of the engine runs.

The tests read the installed packages (OpenRLHF 0.11.2, AReaL 1.0.4) and slime's snapshot through these and
compare with each engine module's KEYS; `known_flags` / `known_keys` snapshots in `divclip.engines` were written
with them.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

_MISSING = object()


@dataclass(frozen=True)
class Flag:
    """One `add_argument` call: its option strings and the keywords divclip checks."""

    names: tuple  # ("--actor.eps_clip",), ("--eps-clip",)
    type: str | None = None  # "float", "int", "str" (the source name of `type=`), None for switches
    default: object = None
    nargs: object = None
    action: str | None = None
    choices: tuple | None = None
    dest: str | None = None


@dataclass(frozen=True)
class Field:
    """One annotated dataclass field: its annotation as source text and its default (or default_factory)."""

    name: str
    annotation: str
    default: object = None
    has_default: bool = False
    factory: str | None = None  # source text of default_factory=
    choices: tuple | None = None  # metadata={"choices": [...]}


@dataclass
class ClassDef:
    name: str
    bases: tuple
    fields: dict = field(default_factory=dict)  # {name: Field}


def _literal(node, default=_MISSING):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return ast.unparse(node) if default is _MISSING else default


def argparse_flags(source: str) -> dict[str, Flag]:
    """{option string: Flag} for every `<x>.add_argument("--name", ...)` or `reset_arg(parser, "--name", ...)`
    call in `source` (slime re-declares Megatron's flags with `reset_arg`); a later declaration wins."""
    out: dict[str, Flag] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
        args = node.args[1:] if name == "reset_arg" else node.args if name == "add_argument" else None
        if args is None:
            continue
        names = tuple(_option_string(a) for a in args if _option_string(a) is not None)
        if not names or not names[0].startswith("-"):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        choices = _literal(kw["choices"]) if "choices" in kw else None
        flag = Flag(
            names=names,
            type=ast.unparse(kw["type"]) if "type" in kw else None,
            default=_literal(kw["default"]) if "default" in kw else None,
            nargs=_literal(kw["nargs"]) if "nargs" in kw else None,
            action=_literal(kw["action"]) if "action" in kw else None,
            choices=tuple(choices) if isinstance(choices, (list, tuple)) else None,
            dest=_literal(kw["dest"]) if "dest" in kw else None,
        )
        for n in names:
            out[n] = flag
    return out


def _option_string(node) -> str | None:
    """A literal option string, or an f-string one as a pattern: f"--{prefix}.adam.lr" -> "--{prefix}.adam.lr"
    (OpenRLHF declares its actor and critic optimizer flags in a loop)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}" for v in node.values
        )
    return None


def flag_pattern(name: str):
    """The regex an option-string pattern ("--{prefix}.adam.lr") stands for: each {…} one word."""
    return re.compile("^" + "[\\w-]+".join(re.escape(p) for p in re.split(r"\{[^}]*\}", name)) + "$")


def dataclass_fields(source: str) -> dict[str, ClassDef]:
    """{class name: ClassDef} with every annotated field of every top-level class of `source`: its default from
    `= value` or `field(default=..., default_factory=..., metadata={"choices": [...]})`."""
    out: dict[str, ClassDef] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        cls = ClassDef(node.name, tuple(ast.unparse(b) for b in node.bases))
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                cls.fields[stmt.target.id] = _field(stmt)
        out[node.name] = cls
    return out


def _field(stmt: ast.AnnAssign) -> Field:
    name, annotation = stmt.target.id, ast.unparse(stmt.annotation)
    value = stmt.value
    if value is None:
        return Field(name, annotation)
    is_field_call = isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field")
    if not is_field_call:
        return Field(name, annotation, _literal(value), True)
    kw = {k.arg: k.value for k in value.keywords if k.arg}
    choices = None
    if isinstance(kw.get("metadata"), ast.Dict):
        meta = {_literal(k): v for k, v in zip(kw["metadata"].keys, kw["metadata"].values, strict=True) if k}
        if "choices" in meta:
            found = _literal(meta["choices"])
            choices = tuple(found) if isinstance(found, (list, tuple)) else None
    if "default" in kw:
        return Field(name, annotation, _literal(kw["default"]), True, choices=choices)
    if "default_factory" in kw:
        return Field(name, annotation, None, False, ast.unparse(kw["default_factory"]), choices)
    return Field(name, annotation, choices=choices)


def all_fields(classes: dict[str, ClassDef], name: str) -> dict[str, Field]:
    """The fields of class `name` with those of its bases in `classes` (a base's field overridden below)."""
    cls = classes[name]
    out: dict[str, Field] = {}
    for base in cls.bases:
        if base in classes:
            out.update(all_fields(classes, base))
    out.update(cls.fields)
    return out


def nested_keys(classes: dict[str, ClassDef], name: str, prefix: str = "", depth: int = 0) -> dict[str, Field]:
    """{dotted key: Field} of every leaf below class `name`, following fields whose annotation names another
    class of `classes` (`PPOActorConfig`, `RejectionSamplingConfig | None`)."""
    out: dict[str, Field] = {}
    for fname, f in all_fields(classes, name).items():
        inner = _class_in(f.annotation, classes)
        if inner is not None and depth < 8:
            out.update(nested_keys(classes, inner, f"{prefix}{fname}.", depth + 1))
        else:
            out[prefix + fname] = f
    return out


def _class_in(annotation: str, classes: dict) -> str | None:
    for part in annotation.replace("Optional[", "").replace("]", "").split("|"):
        part = part.strip().strip("'\"")
        if part in classes:
            return part
    return None


def installed_file(package: str, path: str):
    """The file `path` inside the installed top-level `package`, found without importing it (an engine's
    `__init__` may import a GPU stack); a ValueError when the package or the file is not there."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"package {package!r} is not installed (the engines test extra installs it)")
    found = Path(list(spec.submodule_search_locations)[0]) / path
    if not found.is_file():
        raise ValueError(f"{package} has no file {path!r} (installed at {found.parent})")
    return found
