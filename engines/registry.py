"""The engines divclip knows, by name: `ENGINES`, and `get_engine(name)`, the module of one.

An engine module is found by its name when it is first asked for (`importlib`), so that this module imports none
of them: `divclip.engines.base` and the config reader, which every engine module imports, look engines up here,
and `divclip.engines` re-exports both names.
"""

from __future__ import annotations

from importlib import import_module

__all__ = ["ENGINES", "available_engines", "get_engine"]

ENGINES = ("verl", "trl", "openrlhf", "areal", "skyrl", "slime")
"""Every engine divclip reads and writes, in the order the CLI and the app list them."""


def get_engine(name: str):
    """The module of engine `name` (NAME, VERSION, DEFAULTS_FROM, KEYS, read, write, detect, FORMATS, render,
    PLUGIN); a ValueError lists the engines."""
    if name not in ENGINES:
        raise ValueError(f"engine must be one of {list(ENGINES)}, got {name!r}")
    try:
        return import_module(f"divclip.engines.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"divclip.engines.{name}":
            raise
        raise ValueError(f"engine {name!r} is not available in this divclip build") from None


def available_engines() -> tuple[str, ...]:
    """The engines of ENGINES whose module is present."""
    out = []
    for name in ENGINES:
        try:
            get_engine(name)
        except ValueError:
            continue
        out.append(name)
    return tuple(out)
