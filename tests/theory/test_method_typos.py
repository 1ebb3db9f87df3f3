"""A method typo gets one short line with the nearest valid name (issue 34): `theory.spec.did_you_mean`, used by
`parse_method` (presets and measures) and `theory.atlas.find_method` (atlas names and loss forms too)."""

from __future__ import annotations

import pytest

from divclip.theory.atlas import find_method
from divclip.theory.spec import did_you_mean, parse_method, parse_methods


@pytest.mark.parametrize(
    ("typo", "near"), [("atrr", "atr"), ("dapoo", "dapo"), ("kl4", "kl3"), ("hellinge", "hellinger")]
)
def test_parse_method_names_the_nearest_preset_or_measure(typo, near):
    with pytest.raises(ValueError) as info:
        parse_method(f"{typo}/cispo")
    text = str(info.value)
    assert text.endswith(f"did you mean {near!r}?") and len(text) < 400 and "\n" not in text


def test_parse_methods_names_the_bad_entry_and_its_nearest_name():
    with pytest.raises(ValueError, match=r"unknown method 'atrr'.*did you mean 'atr'\?$"):
        parse_methods("grpo,atrr")


def test_find_method_suggests_atlas_names_too():
    with pytest.raises(ValueError, match=r"did you mean 'dcpo'\?$"):
        find_method("dcpoo")  # an atlas method, not a preset


def test_nothing_near_gives_no_hint_and_long_input_is_not_searched():
    assert did_you_mean("xyzzy", ["atr", "dapo"]) == ""
    assert did_you_mean("a" * 10_000, ["a"]) == ""
    assert did_you_mean(None, ["atr"]) == ""
    with pytest.raises(ValueError) as info:
        parse_method("xyzzy")
    assert "did you mean" not in str(info.value)
