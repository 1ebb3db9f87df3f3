"""Adding a measure at run time: one `register_measure` call reaches every surface that lists measures.

    from divclip.theory import measure_from_formula, register_measure
    register_measure(measure_from_formula("abs(r - 1) / 2", name="tv"), label="TV |r−1|/2")

After it, `ClipSpec("tv", delta=0.1)` and the method string 'tv:0.1' clip with its bounds in the loss,
`divclip.theory.symbolic.derivation("tv")` derives them from the formula, `divclip measures` lists it, the app
labels and colours it (`divclip.app.methods`), and the verl plug-in registers the loss mode `divclip_tv`
(`on_register` callbacks; the plug-in also registers every measure present when it is imported).
A p-dependent measure is listed and derived, but the torch loss has per-token bound solvers only for the
built-in binary KL/TV, so `ClipSpec` refuses it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from divclip.theory.formula import parse_formula
from divclip.theory.measures import BUILTIN_NAMES, MEASURES, Measure
from divclip.theory.spec import PRESETS

__all__ = ["on_register", "register_measure", "unregister_measure"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Colours for measures registered without one, in order (tab20's light half: none is a built-in's colour).
SPARE_COLOURS = (
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#c7c7c7",
    "#dbdb8d",
    "#9edae5",
)
FALLBACK_COLOUR = "#111111"  # the app's 'custom' colour, when the spare ones are used up
_CALLBACKS: list[Callable[[Measure], None]] = []
_REMOVED: list[Callable[[Measure], None]] = []


def _colour(requested: str) -> str:
    if requested:
        if not re.fullmatch(r"#[0-9a-fA-F]{6}", requested):
            raise ValueError(f"colour must be '#rrggbb', got {requested!r}")
        return requested
    used = {m.colour.lower() for m in MEASURES.values()}
    return next((c for c in SPARE_COLOURS if c not in used), FALLBACK_COLOUR)


def register_measure(
    measure: Measure,
    *,
    label: str | None = None,
    method: str | None = None,
    colour: str | None = None,
    text: str | None = None,
) -> Measure:
    """Add `measure` (a `Measure` subclass instance, or `measure_from_formula(text, name=...)`) to
    `divclip.theory.MEASURES` and return the stored object, its presentation filled in: label (default the
    name), method (default the label), colour (default an unused one), text (default the code formula).

    The name must be usable in a method string (letters, digits, '_'), new, and not a preset's name; the
    measure's `code` must be a formula `divclip.theory.formula.parse_formula` reads.
    """
    if not isinstance(measure, Measure):
        raise ValueError(
            f"measure must be a divclip.theory.Measure (a subclass instance or measure_from_formula(...)), got "
            f"{type(measure).__name__}"
        )
    name = measure.name
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"measure name must be letters, digits and '_' (it appears in method strings like 'name:0.1'), got "
            f"{name!r}; pass name=... to measure_from_formula"
        )
    if name in MEASURES or name in PRESETS:
        what = "a registered measure" if name in MEASURES else "a preset"
        raise ValueError(f"measure name {name!r} is already {what}; pick another name")
    parse_formula(measure.code)  # the symbolic side derives from this text: it must parse
    fields = {"label": label if label is not None else measure.label or name}
    fields["method"] = method if method is not None else measure.method or fields["label"]
    fields["colour"] = _colour(colour if colour is not None else measure.colour)
    fields["text"] = text if text is not None else measure.text or measure.code
    for key in ("label", "method", "text"):
        if not isinstance(fields[key], str) or not fields[key].strip():
            raise ValueError(f"{key} must be a non-empty string, got {fields[key]!r}")
    stored = dataclasses.replace(measure, **fields)
    MEASURES[name] = stored
    try:
        for callback in list(_CALLBACKS):
            callback(stored)
    except Exception:
        del MEASURES[name]
        raise
    return stored


def unregister_measure(name: str) -> None:
    """Remove a measure added by `register_measure` (built-ins stay); `on_register` removal callbacks run."""
    if name in BUILTIN_NAMES:
        raise ValueError(f"measure {name!r} is built in and cannot be removed")
    if name not in MEASURES:
        raise ValueError(f"measure {name!r} is not registered; registered: {sorted(MEASURES)}")
    measure = MEASURES.pop(name)
    for callback in list(_REMOVED):
        callback(measure)


def on_register(added: Callable[[Measure], None], removed: Callable[[Measure], None] | None = None) -> None:
    """Call `added(measure)` for every measure registered from now on, and `removed(measure)` for every one
    unregistered (plug-ins use this to keep their own registries in step)."""
    _CALLBACKS.append(added)
    if removed is not None:
        _REMOVED.append(removed)
