"""A page's whole state in the URL, so that a copied link reproduces the view.

A page declares its parameters once (`FloatParam`, `ChoiceParam`, `ChoiceListParam`, `TextParam`). The pure
half (`parse_query`, `encode_query`) turns a query string into valid values plus human-readable warnings and
back; a bad value never raises, it falls back (clamped or default) and says so. The Streamlit half
(`PageState`) seeds each widget's session-state key from the URL on a session's first visit (later from the
last values the page saw, so navigating away and back keeps them), and writes the current values back into
`st.query_params` after the widgets ran. A link from another page of the same session (a query the page did
not write itself) is read again, so "open this measure's proof" carries its values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from divclip.theory.atlas import find_method

# Query parameters Streamlit itself uses; never reported as unknown.
_RESERVED = ("embed", "embed_options")


def _last(raw: str | Sequence[str]) -> str:
    """st.query_params keeps the last of repeated keys; AppTest hands lists through."""
    if isinstance(raw, str):
        return raw
    return str(raw[-1]) if len(raw) else ""


def format_number(x: float) -> str:
    """Short but precise enough for a URL or a config line: 12 significant digits."""
    return f"{x:.12g}"


@dataclass(frozen=True)
class FloatParam:
    """A number in [lo, hi]; out of range is clamped, non-numbers fall back to the default."""

    key: str
    label: str
    default: float
    lo: float
    hi: float

    def parse(self, raw: str) -> tuple[float, str | None]:
        try:
            value = float(raw)
        except ValueError:
            return self.default, f"{self.key}={raw!r} is not a number; using the default {self.default:g}."
        if not math.isfinite(value):
            return self.default, f"{self.key}={raw!r} is not a finite number; using the default {self.default:g}."
        if value < self.lo or value > self.hi:
            clamped = min(max(value, self.lo), self.hi)
            return clamped, (
                f"{self.key}={raw} is outside the allowed range [{self.lo:g}, {self.hi:g}] for {self.label}; "
                f"using {clamped:g}."
            )
        return value, None

    def encode(self, value: float) -> str:
        return format_number(float(value))


@dataclass(frozen=True)
class IntParam:
    """A whole number in [lo, hi] (a lecture's step); out of range is clamped, non-numbers fall back."""

    key: str
    label: str
    default: int
    lo: int
    hi: int
    omit_default: bool = False
    """True: left out of the URL while at its default (a section off by default keeps the page's links as
    they were)."""

    def parse(self, raw: str) -> tuple[int, str | None]:
        try:
            value = int(raw.strip())
        except ValueError:
            return self.default, f"{self.key}={raw!r} is not a whole number; using the default {self.default}."
        if value < self.lo or value > self.hi:
            clamped = min(max(value, self.lo), self.hi)
            return clamped, (
                f"{self.key}={raw} is outside the allowed range [{self.lo}, {self.hi}] for "
                f"{self.label}; using {clamped}."
            )
        return value, None

    def encode(self, value: int) -> str:
        return str(int(value))


@dataclass(frozen=True)
class BoolParam:
    """An on/off flag (a toggle): 1/true/on and 0/false/off in the URL, written as 1 or 0."""

    key: str
    label: str
    default: bool = False

    def parse(self, raw: str) -> tuple[bool, str | None]:
        word = raw.strip().lower()
        if word in ("1", "true", "on", "yes"):
            return True, None
        if word in ("0", "false", "off", "no"):
            return False, None
        return self.default, (
            f"{self.key}={raw!r} is not 1 or 0 (on or off) for {self.label}; using {int(self.default)}."
        )

    def encode(self, value: bool) -> str:
        return "1" if value else "0"


@dataclass(frozen=True)
class ChoiceParam:
    """One name out of a fixed tuple of choices."""

    key: str
    label: str
    default: str
    choices: tuple[str, ...]

    def parse(self, raw: str) -> tuple[str, str | None]:
        if raw in self.choices:
            return raw, None
        return self.default, (f"{self.key}={raw!r} is not one of {', '.join(self.choices)}; using {self.default}.")

    def encode(self, value: str) -> str:
        return value


@dataclass(frozen=True)
class ChoiceListParam:
    """A comma-separated list of names out of a fixed tuple; unknown names are dropped with a warning."""

    key: str
    label: str
    default: tuple[str, ...]
    choices: tuple[str, ...]

    def parse(self, raw: str) -> tuple[tuple[str, ...], str | None]:
        names = [n.strip() for n in raw.split(",") if n.strip()]
        known = tuple(dict.fromkeys(n for n in names if n in self.choices))
        unknown = [n for n in names if n not in self.choices]
        problems = []
        if unknown:
            problems.append(
                f"{self.key}: unknown {'name' if len(unknown) == 1 else 'names'} {', '.join(map(repr, unknown))} "
                f"ignored (allowed: {', '.join(self.choices)})."
            )
        if not known:
            problems.append(f"{self.key}={raw!r} names no known {self.label}; using {', '.join(self.default)}.")
            known = self.default
        return known, (" ".join(problems) or None)

    def encode(self, value: Sequence[str]) -> str:
        return ",".join(value)


@dataclass(frozen=True)
class TextParam:
    """Free text (a formula); validated later by whoever uses it, so it is taken as is."""

    key: str
    label: str
    default: str
    max_chars: int = 1000
    omit_default: bool = False
    """True: left out of the URL while at its default (see IntParam)."""

    def parse(self, raw: str) -> tuple[str, str | None]:
        if len(raw) > self.max_chars:
            return self.default, (
                f"{self.key} is {len(raw)} characters long, more than {self.max_chars}; using the default."
            )
        return raw, None

    def encode(self, value: str) -> str:
        return value


@dataclass(frozen=True)
class MethodListParam:
    """Up to `max_items` methods, comma-separated: atlas names ('dcpo', 'verl:vanilla') or method strings
    ('kl3:0.05/cispo'); one that `divclip.theory.atlas.find_method` cannot read is dropped with a warning."""

    key: str
    label: str
    default: tuple[str, ...]
    max_items: int = 4

    def parse(self, raw: str) -> tuple[tuple[str, ...], str | None]:
        names, problems = [], []
        for name in dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()):
            try:
                find_method(name)
            except ValueError as exc:
                problems.append(f"{self.key}: {exc}")
                continue
            names.append(name)
        if len(names) > self.max_items:
            problems.append(f"{self.key}: at most {self.max_items} {self.label}; using the first {self.max_items}.")
            names = names[: self.max_items]
        if not names:
            problems.append(f"{self.key}={raw!r} names no known {self.label}; using {', '.join(self.default)}.")
        return tuple(names) or self.default, (" ".join(problems) or None)

    def encode(self, value: Sequence[str]) -> str:
        return ",".join(value)


Param = FloatParam | IntParam | BoolParam | ChoiceParam | ChoiceListParam | TextParam | MethodListParam


def defaults(spec: Sequence[Param]) -> dict[str, Any]:
    return {param.key: param.default for param in spec}


def parse_query(spec: Sequence[Param], query: Mapping[str, str | Sequence[str]]) -> tuple[dict[str, Any], list[str]]:
    """Values for every parameter (defaults where absent) and one warning per bad or unknown parameter."""
    values = defaults(spec)
    warnings: list[str] = []
    known = {param.key for param in spec}
    for param in spec:
        if param.key in query:
            values[param.key], warning = param.parse(_last(query[param.key]))
            if warning:
                warnings.append(warning)
    unknown = [k for k in query if k not in known and k not in _RESERVED]
    if unknown:
        warnings.append(
            f"Unknown URL {'parameter' if len(unknown) == 1 else 'parameters'} {', '.join(map(repr, unknown))} "
            f"ignored; this page reads {', '.join(sorted(known))}."
        )
    return values, warnings


def encode_query(spec: Sequence[Param], values: Mapping[str, Any]) -> dict[str, str]:
    """Every parameter as a string, in declaration order (so links read the same every time); one marked
    `omit_default` only when it is given and not at its default."""
    return {
        param.key: param.encode(values[param.key])
        for param in spec
        if not (getattr(param, "omit_default", False) and values.get(param.key, param.default) == param.default)
    }


# ------------------------------------------------------------------------------- Streamlit glue
def _normalise(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


class PageState:
    """Widget keys `<page>.<param>` seeded from the URL and mirrored back into it.

    Call `init()` before the widgets (it returns the warnings to show), give each widget
    `key=state.key(name)` and no `value=`, then call `sync()` after them. Buttons change values through
    `set()` in an `on_click` callback, which runs before the next script run builds the widgets.
    """

    def __init__(self, page: str, spec: Sequence[Param]):
        self.page = page
        self.spec = tuple(spec)

    def key(self, name: str) -> str:
        return f"{self.page}.{name}"

    @property
    def _saved_key(self) -> str:
        return f"{self.page}._saved"

    @property
    def _parsed_key(self) -> str:
        return f"{self.page}._parsed"

    @property
    def _written_key(self) -> str:
        return f"{self.page}._written"

    def init(self) -> list[str]:
        import streamlit as st

        ss = st.session_state
        query = st.query_params.to_dict()
        # Read the URL on the session's first visit to this page, and again when a link from another page
        # brought a query this page did not write itself (an empty query is plain navigation: keep the values).
        linked = bool(query) and self._parsed_key in ss and query != ss.get(self._written_key)
        if self._parsed_key not in ss or linked:
            values, warnings = parse_query(self.spec, query)
            ss[self._parsed_key] = (values, warnings)
            ss[self._saved_key] = values
            if linked:
                self.set(values)
        # Widgets not drawn in a run lose their keys (another page was open): restore the last values.
        saved = ss[self._saved_key]
        for param in self.spec:
            if self.key(param.key) not in ss:
                self.set({param.key: saved[param.key]})
        parsed_values, warnings = ss[self._parsed_key]
        # The URL's warnings stay visible until the user changes something.
        return list(warnings) if self.values() == parsed_values else []

    def values(self) -> dict[str, Any]:
        import streamlit as st

        # multiselect hands back lists; values compare and encode as tuples
        return {param.key: _normalise(st.session_state[self.key(param.key)]) for param in self.spec}

    def set(self, values: Mapping[str, Any]) -> None:
        import streamlit as st

        for name, value in values.items():
            st.session_state[self.key(name)] = list(value) if isinstance(value, tuple) else value

    def reset(self) -> None:
        self.set(defaults(self.spec))

    def sync(self) -> dict[str, str]:
        """Save the current values and write them into the URL; returns the query written."""
        import streamlit as st

        values = self.values()
        st.session_state[self._saved_key] = values
        query = encode_query(self.spec, values)
        st.session_state[self._written_key] = query
        if st.query_params.to_dict() != query:
            st.query_params.from_dict(query)
        return query
