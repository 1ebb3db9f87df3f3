"""Which training method each measure stands for, with one fixed colour per method: read from the measures.

Every name, label and colour lives on the measure itself (`divclip.theory.measures`, fields label, method,
colour), so a measure added with `divclip.theory.register_measure` is labelled and coloured here too. The only
method that is not a measure is DAPO: the ratio measure with clip-higher (ε_high > ε_low). `.streamlit/config.toml`
lists the built-in colours in the order of `METHOD_COLOURS` as `theme.chartCategoricalColors` (a test keeps the
two in step). The ratio measure is named by its ε: GRPO at 0.2 / 0.2, DAPO at 0.2 / 0.28, GSPO at 3e-4 / 4e-4,
otherwise just "ratio clip" (coloured as GRPO when symmetric, as DAPO when ε_high > ε_low); its label is "ratio
clip", since |r − 1| ≤ ε holds only for a symmetric ε.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from divclip.theory.measures import MEASURES
from divclip.theory.method_names import CUSTOM, DAPO, KL3_CLIP, RATIO_CLIP, RATIO_METHODS, method_for

__all__ = [
    "CUSTOM",
    "DAPO",
    "KL3_CLIP",
    "METHOD_COLOURS",
    "RATIO_CLIP",
    "RATIO_METHODS",
    "colour_for",
    "label_for",
    "method_for",
]

DAPO_COLOUR = "#ff7f0e"
CUSTOM_COLOUR = "#111111"


def _method_colours() -> dict[str, str]:
    """{method: colour}: the ratio measure's method (GRPO), DAPO, every other measure's, then 'custom'."""
    measures = list(MEASURES.values())
    out = {measures[0].method: measures[0].colour, DAPO: DAPO_COLOUR}
    out.update((m.method, m.colour) for m in measures[1:])
    out[CUSTOM] = CUSTOM_COLOUR
    return out


class _Live(Mapping):
    """A read-only {method: colour} that follows the measure registry."""

    def __getitem__(self, key: str) -> str:
        return _method_colours()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(_method_colours())

    def __len__(self) -> int:
        return len(_method_colours())

    def __repr__(self) -> str:
        return f"METHOD_COLOURS({_method_colours()!r})"


METHOD_COLOURS: Mapping[str, str] = _Live()
"""{method name: '#rrggbb'} for every registered measure's method, DAPO and 'custom'."""


def colour_for(measure_name: str, eps_low: float | None = None, eps_high: float | None = None) -> str:
    m = MEASURES.get(measure_name)
    if m is not None and m.name == "ratio":  # every ratio clip has GRPO's colour, a clip-higher one DAPO's
        higher = eps_low is not None and eps_high is not None and eps_high > eps_low
        return DAPO_COLOUR if higher else m.colour
    return METHOD_COLOURS[method_for(measure_name, eps_low, eps_high)]


def label_for(measure_name: str) -> str:
    """The measure's short legend name; the name itself for a measure that is not registered."""
    if measure_name == "ratio":
        return RATIO_CLIP  # not theory's "ratio |r−1|": the clip may be asymmetric
    m = MEASURES.get(measure_name)
    return m.label if m is not None else measure_name
