"""Read settings out of a Python snippet (what `divclip export` prints for TRL and verl), without running it.

The text is parsed with `ast` and never executed; it is refused over MAX_PYTHON_BYTES before parsing (ast holds
about 500 bytes per source byte of a list literal). Settings are taken from:
* keyword arguments of a config class's call (a callee named `...Config`: `GRPOConfig(...)`,
  `DivClipGRPOConfig(...)`), `**{...}` and `**name` of a dict below included; keyword arguments of any other call
  (`torch.nn.HuberLoss(delta=2.0)`) are not settings and are listed as ignored;
* a dict assigned to a name at the top level: `clip = {"epsilon": 0.2}`, `clip_settings = dict(epsilon=0.2)`;
* a list of `"key=value"` strings assigned to a name: verl's `overrides = ["actor_rollout_ref...=0.2", ...]`;
* `os.environ["NAME"] = "value"`: an environment variable the run sets;
* a script that parses its settings from the command line (`TrlParser((ScriptArguments, GRPOConfig, ...))`,
  `parser.parse_args_and_config()`): the launch commands in its module docstring (`accelerate launch
  examples/scripts/gspo.py --epsilon 3e-4 ...`), read as a shell script; with none, the classes alone (the
  engine's defaults, said).
The config classes a script calls or parses into are kept in `Tokens.classes` (`RLOOConfig` picks TRL's RLOO
trainer; a `GRPOConfig` with no literal setting is still TRL's).

A value is read when it is a literal, a name assigned a literal once at the top level (`EPS = 0.3`), or
arithmetic (+ - * /) on those (`0.1 + 0.2`); `float("inf")` and `float("nan")` read as those floats (and typing
then names a NaN). Any other value is named in `Tokens.unread` (a warning: the engine's default is not silently
assumed); `...` (the export's `output_dir=...`) is a placeholder and skipped. Python itself refuses a keyword
given twice in one call; a config class called twice, or a setting given in two places, is refused too.
"""

from __future__ import annotations

import ast
import re

from divclip.engines.errors import ConfigError
from divclip.engines.shell import Tokens, read_script, read_tokens

MAX_NODES = 200_000
MAX_PYTHON_BYTES = 256 * 1024  # a config snippet is a few kB; ast.parse of 256 kB of list literal peaks ~140 MB
MAX_INT = 2**63  # arithmetic beyond this is not a setting (and keeps `10**10**10`-style work out: no ** at all)
_SHOWN = 60  # characters of an unread expression quoted in its warning


class _NotLiteral(Exception):
    pass


def read_python(text: str, name: str) -> Tokens:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_PYTHON_BYTES:
        raise ConfigError(
            f"config {name!r} is {size} bytes of Python, over the {MAX_PYTHON_BYTES}-byte limit for a Python "
            "config (refused before parsing)"
        )
    try:
        tree = ast.parse(text, filename=name)
    except SyntaxError as exc:
        raise ConfigError(f"config {name!r} is not valid Python: {exc.msg} (line {exc.lineno})") from None
    except (RecursionError, MemoryError):
        raise ConfigError(f"config {name!r} is nested too deeply to read as Python") from None
    except ValueError as exc:  # an integer literal of 5000 digits, a NUL byte
        raise ConfigError(f"config {name!r} has a value Python cannot read: {exc}") from None
    for count, _ in enumerate(ast.walk(tree)):
        if count > MAX_NODES:
            raise ConfigError(f"config {name!r} holds more than {MAX_NODES} Python nodes: refused")
    return _Reader(name, tree).out


class _Reader:
    def __init__(self, name: str, tree: ast.Module):
        self.name, self.out, self.where = name, Tokens(), {}  # where: {key: line it was set on}
        self.constants, self.dicts = _top_level_names(tree)
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                self._assignment(stmt.targets[0], stmt.value)
        self._config_calls(tree)
        self._parsed_classes(tree)

    def _parsed_classes(self, tree) -> None:
        """TrlParser((..., GRPOConfig, ...)): the settings come from the command line, written in the docstring."""
        tuples = {}  # {name: [class names]} of `name = (A, B, ...)` anywhere
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                if isinstance(node.value, (ast.Tuple, ast.List)):
                    tuples[node.targets[0].id] = _names(node.value.elts)
        parsed = []
        for node in ast.walk(tree):
            if _callee(node) in _PARSERS and node.args:
                arg = node.args[0]
                parsed += tuples.get(arg.id, []) if isinstance(arg, ast.Name) else _names(getattr(arg, "elts", [arg]))
        defined = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        for name in list(parsed):  # a dataclass of the script's own (GRPOScriptArguments): its fields, its bases
            if name in defined:
                self.out.fields |= {
                    st.target.id
                    for st in defined[name].body
                    if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
                }
                parsed += [b for b in _names(defined[name].bases) if b not in parsed]
        if not any(c.endswith("Config") for c in parsed):
            return
        self.out.classes += [c for c in parsed if c not in self.out.classes]
        found = read_script(_command_blocks(ast.get_docstring(tree) or ""), self.name + " (its docstring)")
        launches = found.launches
        self.out.first_launch = True  # the docstring's commands are alternatives: the first is the example
        where = f"{_PARSERS[0]}(({', '.join(parsed)})) parses its settings from the command line"
        if not launches:
            self.out.notes.append(f"{where}; the file shows no launch command: read with the classes' defaults")
            return
        for launch in launches:
            self.out.values.update(launch.values)
        self.out.launches += launches
        self.out.notes.append(
            f"{where}: read from the launch command{'s' if len(launches) > 1 else ''} in its docstring "
            f"(line{'s' if len(launches) > 1 else ''} {', '.join(str(x.line) for x in launches)} of the docstring)"
        )

    def _assignment(self, target, value) -> None:
        if _is_environ(target):
            key = _constant(target.slice)
            if isinstance(key, str):
                self._take(key, value)
        elif isinstance(target, ast.Name) and target.id in self.dicts:
            for key, node in _dict_items(value):
                self._take(key, node)
        elif isinstance(target, ast.Name) and _dict_items(value):
            self._unread(value.lineno, f"the dict {target.id} (assigned more than once)")
        elif isinstance(value, ast.List) and value.elts and all(isinstance(_constant(e), str) for e in value.elts):
            read_tokens([_constant(e) for e in value.elts], self.out, what=f"override in {self.name!r}")

    def _config_calls(self, tree) -> None:
        seen: dict = {}  # {callee: line}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            callee = _callee(node)
            if callee is None or not callee.endswith("Config"):
                if node.keywords and callee is not None:
                    self.out.ignored.append(f"{callee}(...) (its keyword arguments are not settings)")
                continue
            if callee in seen:
                raise ConfigError(
                    f"config {self.name!r} calls {callee}(...) twice (lines {seen[callee]} and {node.lineno}): "
                    "refused, since which one the run uses is only known by running it; keep one"
                )
            seen[callee] = node.lineno
            self.out.classes.append(callee)
            self._keywords(node, callee)

    def _keywords(self, call: ast.Call, callee: str) -> None:
        given: set = set()
        for kw in call.keywords:
            if kw.arg is None:  # **{...}, **dict(...), **name
                if isinstance(kw.value, ast.Name) and kw.value.id in self.dicts:
                    continue  # its keys were read with its assignment
                items = _dict_items(kw.value)
                if not items and not isinstance(kw.value, ast.Dict):
                    self._unread(kw.value.lineno, f"**{_shown(kw.value)} in {callee}(...)")
                for key, node in items:
                    self._take(key, node)
                continue
            if kw.arg in given:  # Python refuses this file: "keyword argument repeated"
                raise ConfigError(
                    f"config {self.name!r} gives {callee}(...) the keyword {kw.arg!r} twice (line {kw.lineno}): "
                    "Python refuses this call"
                )
            given.add(kw.arg)
            self._take(kw.arg, kw.value)

    def _take(self, key, node) -> None:
        if not isinstance(key, str):
            return
        if isinstance(node, ast.Constant) and node.value is Ellipsis:
            return  # the export's placeholder (output_dir=...)
        try:
            value = _value(node, self.constants)
        except _NotLiteral:
            self._unread(node.lineno, f"{key}={_shown(node)}")
            return
        if key in self.where:
            raise ConfigError(
                f"config {self.name!r} sets {key!r} twice (lines {self.where[key]} and {node.lineno}): refused, "
                "since the last value would silently win; keep one"
            )
        self.where[key] = node.lineno
        self.out.values[key] = value

    def _unread(self, line: int, text: str) -> None:
        self.out.unread.append((line, f"{text} is not a literal: divclip does not run code, so it did not read it"))


_PARSERS = ("TrlParser", "HfArgumentParser")
_COMMAND_START = re.compile(
    r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python\d*(?:\.\d+)?|accelerate|torchrun|deepspeed|uv|trl)\s"
)


def _command_blocks(doc: str) -> str:
    """The launch commands of a docstring: each run of lines from one that starts a command (`python ...`,
    `accelerate launch ...`, `CUDA_VISIBLE_DEVICES=0 trl grpo ...`) to the next blank line; prose is left out (an
    apostrophe in a sentence is no shell quote)."""
    out, keep = [], False
    for line in doc.splitlines():
        if not line.strip() or line.strip().startswith(("```", "~~~")):  # a blank line or a markdown fence
            keep = False
            line = ""
        elif _COMMAND_START.match(line.strip()):
            keep = True
        out.append(line if keep else "")  # blank lines keep the docstring's line numbers
    return "\n".join(out) + "\n"


def _names(nodes) -> list[str]:
    return [n.id if isinstance(n, ast.Name) else n.attr for n in nodes if isinstance(n, (ast.Name, ast.Attribute))]


def _top_level_names(tree: ast.Module) -> tuple[dict, set]:
    """({NAME: literal value} of names assigned once at the top level, {names assigned a dict there})."""
    counts: dict = {}
    for node in ast.walk(tree):  # every binding anywhere: a name rebound in a loop or a function is not constant
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            counts[node.id] = counts.get(node.id, 0) + 1
    constants, dicts = {}, set()
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            continue
        name = stmt.targets[0].id
        if counts.get(name) != 1:
            continue  # assigned (or rebound) more than once: its value at a given line needs running the code
        if isinstance(stmt.value, ast.Dict) or _callee(stmt.value) == "dict":
            dicts.add(name)
            continue
        try:
            constants[name] = _value(stmt.value, constants)
        except _NotLiteral:
            pass
    return constants, dicts


def _dict_items(node) -> list:
    """[(key, value node)] of a dict literal with constant keys, or of `dict(k=v, ...)`; [] otherwise."""
    if isinstance(node, ast.Dict):
        return [(_constant(k), v) for k, v in zip(node.keys, node.values) if k is not None]
    if _callee(node) == "dict" and not node.args:
        return [(kw.arg, kw.value) for kw in node.keywords if kw.arg is not None]
    return []


def _callee(node) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    if isinstance(node.func, ast.Name):
        return node.func.id
    return node.func.attr if isinstance(node.func, ast.Attribute) else None


def _is_environ(node) -> bool:
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "environ"
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "os"
    )


def _constant(node):
    return node.value if isinstance(node, ast.Constant) else None


def _shown(node) -> str:
    text = ast.unparse(node)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


_ARITHMETIC = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b}


def _value(node, constants: dict, depth: int = 0):
    """The value of a literal node: constants, names of top-level constants, -x, + - * / of numbers, lists,
    tuples, dicts, dict(k=v), float("..."); _NotLiteral otherwise."""
    if depth > 32:
        raise _NotLiteral
    sub = lambda n: _value(n, constants, depth + 1)  # noqa: E731
    if isinstance(node, ast.Constant) and node.value is not Ellipsis:
        return node.value
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _number(sub(node.operand))
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and (type(node.op) in _ARITHMETIC or isinstance(node.op, ast.Div)):
        a, b = _number(sub(node.left)), _number(sub(node.right))
        if isinstance(node.op, ast.Div):
            if b == 0:
                raise _NotLiteral
            return _number(a / b)
        return _number(_ARITHMETIC[type(node.op)](a, b))
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [sub(e) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Dict) or _callee(node) == "dict":
        pairs = _dict_items(node)
        if len(pairs) != len(getattr(node, "keys", None) or getattr(node, "keywords", ())):
            raise _NotLiteral
        return {k: sub(v) for k, v in pairs if isinstance(k, (str, int, float))}
    if _callee(node) == "float" and isinstance(node.func, ast.Name) and len(node.args) == 1 and not node.keywords:
        arg = sub(node.args[0])
        if isinstance(arg, bool) or not isinstance(arg, (str, int, float)):
            raise _NotLiteral
        try:
            return float(arg)  # float("inf"), float("nan"): typing names a NaN
        except (ValueError, OverflowError):
            raise _NotLiteral from None
    raise _NotLiteral


def _number(x):
    if isinstance(x, bool) or not isinstance(x, (int, float)) or (isinstance(x, int) and abs(x) > MAX_INT):
        raise _NotLiteral
    return x
