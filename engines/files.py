"""Reading a user's file without trusting it: a regular file only, at most `max_bytes`, checked before reading."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

from divclip.engines.errors import SanityInputError

STDIN_NAMES = ("-", "/dev/stdin")


def read_capped(path: Path, max_bytes: int, what: str, error: type[SanityInputError], hint: str = "") -> bytes:
    """The bytes of `path`; `error` names the file if it is missing, not a regular file (a FIFO or /dev/zero
    would block or never end), or larger than `max_bytes` (checked on the size, then on what was read).
    `-` or /dev/stdin is the standard input, named explicitly (`divclip export … | divclip check /dev/stdin`),
    capped the same way."""
    if str(path) in STDIN_NAMES:
        data = sys.stdin.buffer.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise error(f"{what} on standard input is over the {max_bytes}-byte limit{hint}")
        return data
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{what} {str(path)!r} is not a regular file")
        if info.st_size > max_bytes:
            raise error(f"{what} {path.name!r} is {info.st_size} bytes, over the {max_bytes}-byte limit{hint}")
        with path.open("rb") as fh:
            data = fh.read(max_bytes + 1)  # a file that grew since stat() is still capped
    except (OSError, ValueError) as exc:  # missing, unreadable, a name too long or with a NUL byte
        raise error(f"cannot read {what} {str(path)!r}: {getattr(exc, 'strerror', None) or exc}") from None
    if len(data) > max_bytes:
        raise error(f"{what} {path.name!r} is over the {max_bytes}-byte limit{hint}")
    return data


def display_name(name: str) -> str:
    """A file name as text every output can print: a name that is not UTF-8 (Python holds its bytes as lone
    surrogates, '\\udcff') shows each such byte as \\xff, and any other lone surrogate as \\udXXX."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape" if _only_escaped(name) else "backslashreplace").decode(
            "utf-8", "backslashreplace"
        )


def _only_escaped(name: str) -> bool:
    return all(not 0xD800 <= ord(c) <= 0xDFFF or 0xDC80 <= ord(c) <= 0xDCFF for c in name)


class DuplicateKeyError(ValueError):
    """A JSON object or YAML mapping that sets one key twice (the last would silently win)."""

    def __init__(self, key, detail: str):
        self.key = key
        super().__init__(f"sets {key!r} twice ({detail}): refused, since the last value would silently win; keep one")


def _unique_pairs(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(key, f"{_short(out[key])}, then {_short(value)}")
        out[key] = value
    return out


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def json_loads_unique(text: str):
    """`json.loads` that refuses duplicate keys (DuplicateKeyError, a ValueError) instead of keeping the last."""
    return json.loads(text, object_pairs_hook=_unique_pairs)


def json_object_line(line: str, where: str, error: type[Exception] = ValueError, hint: str = "") -> dict:
    """One line of a JSON-lines file as a dict; anything else is `error` starting with `where` (the file and line)
    and ending with `hint` (what every line must be). Duplicate keys, bad syntax, nesting beyond Python's
    recursion limit and integers too long to convert are all refused with a message, never a traceback."""
    try:
        obj = json_loads_unique(line)
    except DuplicateKeyError as exc:
        raise error(f"{where} {exc}") from None
    except json.JSONDecodeError as exc:
        raise error(f"{where} is not valid JSON: {exc.msg} (column {exc.colno}){hint}") from None
    except RecursionError:
        raise error(f"{where} is nested too deeply to read{hint}") from None
    except ValueError as exc:  # an integer of 5000 digits
        raise error(f"{where} has a value JSON cannot read: {exc}{hint}") from None
    if not isinstance(obj, dict):
        raise error(f"{where} is {type(obj).__name__}, not a JSON object{hint}")
    return obj
