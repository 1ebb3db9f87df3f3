"""Read a training config into a flat `{dotted.key: value}` map, safely.

Three inputs are accepted, all as text (UTF-8):
* YAML (`.yaml`, `.yml`): parsed with PyYAML's safe loader only, on libyaml (`yaml.CSafeLoader`) when it is
  installed. First the event stream is scanned (by the same parser) so that python tags (`!!python/object…`)
  are refused by name, and anchors/aliases, nesting and the number of nodes are capped while parsing (a
  "billion laughs" document expands exponentially once walked). A mapping that sets one key twice is refused.
* JSON (`.json`): `json.loads`, refusing duplicate keys; a TRL `GRPOConfig.to_json_string()` dump or a
  hand-written file.
* a launch command (`.txt`, `.sh`, anything else that is neither YAML, JSON nor Python, or CLI arguments):
  hydra overrides `key=value`, flags `--name value`, environment variables `NAME=value`
  (`divclip.engines.shell`: kind "overrides", or "flags" when any `--flag` is set). Command words are ignored and
  listed; a config key without its `=` is listed as a stray (a warning in the report).
* Python (`.py`, or text with `import`/`from` lines or `name = ...` assignments): read with `ast`, never run
  (`divclip.engines.pyconfig`): the literal keyword arguments and `os.environ[...]` assignments.
In a YAML file, comment lines `# environment: NAME=value` (what `divclip export --format yaml` writes for a
plug-in's variables) read as that environment variable.

Nested mappings are flattened to dotted keys, so `section: {group: {key: 0.2}}` and the override
`section.group.key=0.2` read the same. Values are kept as parsed; typing happens
in `divclip.sanity.settings`, which knows what each key must be.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from divclip.engines.errors import ConfigError
from divclip.engines.files import DuplicateKeyError, display_name, json_loads_unique, read_capped
from divclip.engines.launchers import task_script
from divclip.engines.pyconfig import read_python
from divclip.engines.registry import get_engine
from divclip.engines.shell import Tokens, looks_like_float, read_script, read_tokens, split_line
from divclip.engines.shell import parse_value as parse_override_value

__all__ = ["RawConfig", "looks_like_float", "parse_override_value", "read_config", "split_overrides"]

MAX_CONFIG_BYTES = 4 * 2**20  # a training config is kilobytes; anything near this is not one
MAX_YAML_ALIASES = 32
MAX_DEPTH = 32
MAX_NODES = 200_000  # YAML events while parsing; mapping entries while flattening (aliases count every time)

CONFIG_SUFFIXES = {
    ".yaml": "yaml",
    ".yml": "yaml",
    ".json": "json",
    ".txt": "overrides",
    ".sh": "overrides",
    ".py": "python",
}
_YAML_KEY_LINE = re.compile(r"^[ \t]*[\w.\-\"']+[ \t]*:(\s|$)", re.MULTILINE)  # [ \t], not \s: one line each
_OVERRIDE_TOKEN = re.compile(r"(^|\s)[+~]*[A-Za-z_][\w\-@/.]*=|(^|\s)--[A-Za-z]")
_PYTHON_LINE = re.compile(r"^(import [\w.]+|from [\w.]+ import |[A-Za-z_]\w* = [\[{(\w'\"])", re.MULTILINE)
_ENV_COMMENT = re.compile(r"^#[ \t]*environment:[ \t]*([A-Z][A-Z0-9_]*)=(.*)$", re.MULTILINE)


@dataclass
class RawConfig:
    """A config as read: where it came from, its flat values, and what was ignored on the way."""

    name: str
    kind: str  # "yaml" | "json" | "overrides" | "flags" | "python"
    values: dict = field(default_factory=dict)  # {dotted.key, --flag or ENV_NAME: parsed value}
    ignored_tokens: list = field(default_factory=list)  # command words of a launch command
    stray_tokens: list = field(default_factory=list)  # [(line, text)]: a config key written without '='
    added: set = field(default_factory=set)  # keys given as +key=value (hydra adds them)
    unread: list = field(default_factory=list)  # [(line, text)]: what looks like a setting but was not read
    notes: list = field(default_factory=list)  # how a script's if/elif/case were decided, functions called
    launches: list = field(default_factory=list)  # [shell.ScriptLaunch]: each command starting an entry point
    common: dict = field(default_factory=dict)  # a script's settings outside its launches (its environment)
    unresolved: dict = field(default_factory=dict)  # {key: (line, value, [(reference, origin)])}: not known
    classes: list = field(default_factory=list)  # Python: the config classes called or parsed (GRPOConfig, ...)
    fields: set = field(default_factory=set)  # Python: the fields of the script's own parsed dataclasses
    first_launch: bool = False  # the launches are alternatives (a docstring's examples): the first is the one


# ------------------------------------------------------------------------------------------- entry points
def read_config(source, name: str | None = None, overrides=(), max_bytes: int = MAX_CONFIG_BYTES) -> RawConfig:
    """Read a config file (path or bytes) and apply hydra `overrides` on top; `source=None` means overrides only.

    `name` (required for bytes) picks the format by its suffix. Raises `ConfigError` for anything unusable.
    """
    if source is None:
        raw = RawConfig(name="<overrides>", kind="overrides")
    else:
        data, name = _read_bytes(source, name, max_bytes)
        raw = parse_config_text(decode_text(data, name), name)
    if overrides:
        found = read_tokens(list(overrides), Tokens(), what="command-line override")
        for key in found.deletions:
            _delete_prefix(raw.values, key)
        _merge(raw, found)
    if not raw.values and not _engine_classes(raw.classes):
        raise ConfigError(f"config {raw.name!r} holds no settings (an empty mapping or no key=value overrides)")
    return raw


def _engine_classes(classes) -> bool:
    """A script that builds an engine's config class with no literal setting (its defaults, or its command line):
    TRL's classes, which its engine module knows (found by name: every engine module imports this reader)."""
    return get_engine("trl").detect_classes(classes)


def _read_bytes(source, name, max_bytes) -> tuple[bytes, str]:
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if name is None:
            raise ConfigError("a config given as bytes needs a file name (its suffix picks YAML, JSON or overrides)")
    elif isinstance(source, (str, Path)):
        path = Path(source)
        name = display_name(name or path.name)
        data = read_capped(path, max_bytes, "config file", ConfigError, " for a config")
    else:
        raise ConfigError(f"config source must be a path or bytes, got {type(source).__name__}")
    if len(data) > max_bytes:
        raise ConfigError(_too_big(name, len(data), max_bytes))
    return data, name


def _too_big(name, size, limit) -> str:
    return f"config file {name!r} is {size} bytes, over the {limit}-byte limit for a config"


def decode_text(data: bytes, name: str) -> str:
    """UTF-8 text (a BOM is dropped); a ConfigError names the first bad byte otherwise."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {name!r} is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}"
        ) from None
    if "\x00" in text:
        raise ConfigError(f"config file {name!r} contains NUL bytes: it is binary, not a YAML/JSON/override text")
    if not text.strip():
        raise ConfigError(f"config file {name!r} is empty")
    return text


def parse_config_text(text: str, name: str) -> RawConfig:
    kind = config_kind(name, text)
    if kind in ("overrides", "python"):
        found = read_script(text, name) if kind == "overrides" else read_python(text, name)
        if not found.values and found.unread:  # its only settings need code: nothing divclip can read
            line, text = found.unread[0]
            raise ConfigError(f"config {name!r} has no settings divclip can read: line {line}: {text}")
        if not found.values and not _engine_classes(found.classes):
            raise ConfigError(
                f"config {name!r} has no settings: no key=value overrides, --flag value arguments or, in Python, "
                "literal keyword arguments. divclip reads verl, TRL, OpenRLHF, AReaL, SkyRL and slime configs as "
                "YAML/JSON files, launch commands (overrides or flags) and Python snippets"
            )
        raw = RawConfig(name, "flags" if kind == "overrides" and found.flags else kind)
        _merge(raw, found)
        refuse_invalid_unicode(raw.values, name)
        return raw
    tree = _load_json(text, name) if kind == "json" else _load_yaml(text, name)
    script = task_script(tree) if kind == "yaml" else None
    if script is not None:  # a SkyPilot task: the command is in its run: block
        raw = parse_config_text(script, name + " (its run: block)")
        raw.name = name
        raw.notes.insert(
            0,
            "a SkyPilot task: its run: block is read as the launch script, with envs: as its environment "
            "(line numbers are the block's, its envs: first)",
        )
        return raw
    if not isinstance(tree, dict):
        raise ConfigError(f"config {name!r} must be a mapping of settings at the top level, got {_kind_of(tree)}")
    raw = RawConfig(name, kind, flatten(tree, name))
    refuse_invalid_unicode(raw.values, name)
    if kind == "yaml":
        for var, value in _ENV_COMMENT.findall(text):
            raw.values.setdefault(var, value.strip())
    return raw


def refuse_invalid_unicode(values: dict, name: str) -> None:
    """A key or string value holding a lone surrogate (a JSON or YAML "\\ud800" escape, not a character) is
    refused naming it, before any report tries to print it ("utf-8 codec can't encode", naming nothing)."""
    for key, value in values.items():
        items = value if isinstance(value, (list, tuple)) else (value,)
        for what, text in (("key", key), *((f"value of {ascii(key)}", v) for v in items[:MAX_NODES])):
            if isinstance(text, str) and not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise ConfigError(
                        f"config {name!r} has a {what} {ascii(text)[:80]} that is not valid Unicode: "
                        f"{text[exc.start]!r} at position {exc.start} is a lone surrogate (an escape such as "
                        "\\ud800 without its pair); write the character itself"
                    ) from None


def _merge(raw: RawConfig, found: Tokens) -> None:
    raw.values.update(found.values)
    raw.ignored_tokens.extend(found.ignored)
    raw.stray_tokens.extend(found.stray)
    raw.unread.extend(found.unread)
    raw.notes.extend(found.notes)
    raw.added |= found.added
    raw.launches.extend(getattr(found, "launches", []))
    raw.common.update(getattr(found, "common", {}))
    raw.unresolved.update(getattr(found, "unresolved", {}))
    raw.classes.extend(getattr(found, "classes", []))
    raw.fields |= getattr(found, "fields", set())
    raw.first_launch = raw.first_launch or getattr(found, "first_launch", False)


def config_kind(name: str, text: str) -> str:
    """ "yaml", "json", "python" or "overrides" (a launch command): by the suffix, else by the text."""
    suffix = Path(name).suffix.lower()
    if suffix in CONFIG_SUFFIXES:
        return CONFIG_SUFFIXES[suffix]
    if text.lstrip().startswith("{"):
        return "json"
    if _PYTHON_LINE.search(text):
        return "python"
    if _YAML_KEY_LINE.search(text) or not _OVERRIDE_TOKEN.search(text):
        return "yaml"
    return "overrides"


def _kind_of(value) -> str:
    return {list: "a list", str: "a string", type(None): "null"}.get(type(value), f"a {type(value).__name__}")


# ---------------------------------------------------------------------------------------------- YAML
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~50x faster than the pure-Python parser
YAML_PARSER = "libyaml" if _SafeLoader is not yaml.SafeLoader else "pure Python"


class _UniqueKeyLoader(_SafeLoader):
    """The safe loader, refusing a mapping that sets one key twice (PyYAML keeps the last silently). Keys a
    merge (`<<: *base`) brings in may be overridden: that is what a merge is for."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise DuplicateKeyError(key, f"lines {seen[key]} and {line}")
            seen[key] = line
        return super().construct_mapping(node, deep)


def _load_yaml(text: str, name: str):
    _scan_yaml_events(text, name)
    try:
        loader = _UniqueKeyLoader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except DuplicateKeyError as exc:
        raise ConfigError(f"config {name!r} {exc}") from None
    except TypeError as exc:  # an unhashable key reaching a mapping
        raise ConfigError(f"config {name!r} is not valid YAML: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {name!r} is not valid YAML: {_yaml_problem(exc)}") from None
    except RecursionError:
        raise ConfigError(f"config {name!r} is nested too deeply to read") from None
    except ValueError as exc:  # a scalar the constructor refuses, e.g. an integer of 5000 digits
        raise ConfigError(f"config {name!r} has a value YAML cannot read: {exc}") from None


def _scan_yaml_events(text: str, name: str) -> None:
    """Refuse python tags, alias bombs, deep nesting and huge documents before anything is constructed."""
    aliases = depth = 0
    try:
        for count, event in enumerate(yaml.parse(text, Loader=_SafeLoader)):
            if count > MAX_NODES:
                raise ConfigError(
                    f"config {name!r} holds more than {MAX_NODES} YAML nodes: refused (a training config has hundreds)"
                )
            tag = getattr(event, "tag", None)
            if tag and ("python/" in tag or tag.startswith("!python")):
                raise ConfigError(
                    f"config {name!r} uses the YAML tag {tag!r}: python tags are refused "
                    "(divclip reads configs with yaml.safe_load and never builds Python objects)"
                )
            if isinstance(event, yaml.AliasEvent):
                aliases += 1
                if aliases > MAX_YAML_ALIASES:
                    raise ConfigError(
                        f"config {name!r} uses more than {MAX_YAML_ALIASES} YAML aliases (*ref): refused, "
                        "since aliases can expand exponentially (a 'billion laughs' document)"
                    )
            elif isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ConfigError(f"config {name!r} nests mappings/lists deeper than {MAX_DEPTH} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {name!r} is not valid YAML: {_yaml_problem(exc)}") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{problem}{where}"


def _load_json(text: str, name: str):
    try:
        return json_loads_unique(text)
    except DuplicateKeyError as exc:
        raise ConfigError(f"config {name!r} {exc}") from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise ConfigError(f"config {name!r} is not valid JSON: {exc.msg} ({where})") from None
    except RecursionError:
        raise ConfigError(f"config {name!r} is nested too deeply to read") from None
    except ValueError as exc:  # an integer of 5000 digits
        raise ConfigError(f"config {name!r} has a value JSON cannot read: {exc}") from None


def flatten(tree: dict, name: str) -> dict:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists and scalars are leaves. Visits at most MAX_NODES entries."""
    out: dict = {}
    budget = [MAX_NODES]

    def walk(node: dict, prefix: str, depth: int):
        if depth > MAX_DEPTH:
            raise ConfigError(f"config {name!r} nests mappings deeper than {MAX_DEPTH} levels")
        for key, value in node.items():
            budget[0] -= 1
            if budget[0] < 0:
                raise ConfigError(
                    f"config {name!r} expands to more than {MAX_NODES} settings (aliased mappings count each time)"
                )
            k = f"{prefix}{key}"
            if k in out:
                raise ConfigError(
                    f"config {name!r} sets {k!r} twice (once nested, once as a dotted key): refused, "
                    "since the last value would silently win; keep one"
                )
            if isinstance(value, dict):
                walk(value, k + ".", depth + 1)
            else:
                out[k] = value

    walk(tree, "", 0)
    return out


# ----------------------------------------------------------------------------------- hydra overrides
def split_overrides(text: str, name: str = "overrides") -> list[str]:
    """Override tokens from free text (the app's text box): shell-style splitting, `#` comments."""
    if not isinstance(text, str):
        raise ConfigError(f"{name} must be text, got {type(text).__name__}")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{name} is over the {MAX_CONFIG_BYTES}-byte limit for a config")
    return split_line(text.replace("\\\r\n", " ").replace("\\\n", " "), name)


def _delete_prefix(values: dict, key: str) -> None:
    for k in [k for k in values if k == key or k.startswith(key + ".")]:
        del values[k]
