"""URL state: every bad value falls back with a message, good values round-trip through the query string."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from divclip.app.presets import EXPLORER_SPEC, PRESETS
from divclip.app.state import (
    ChoiceListParam,
    ChoiceParam,
    FloatParam,
    IntParam,
    TextParam,
    defaults,
    encode_query,
    parse_query,
)

DELTA = FloatParam("delta", "δ", 0.02, 0.001, 0.5)
MEASURES = ChoiceListParam("measures", "measure", ("kl3",), ("kl3", "ratio", "binary_kl"))
SPEC = (DELTA, MEASURES, ChoiceParam("measure", "m", "kl3", ("kl3", "k2")), TextParam("formula", "f", "r", 20))


def test_absent_parameters_are_defaults_without_warnings():
    values, warnings = parse_query(SPEC, {})
    assert values == defaults(SPEC) and warnings == []


@pytest.mark.parametrize(
    ("raw", "value", "message"),
    [
        ("abc", 0.02, "delta='abc' is not a number; using the default 0.02"),
        ("nan", 0.02, "is not a finite number"),
        ("inf", 0.02, "is not a finite number"),
        ("-1", 0.001, "delta=-1 is outside the allowed range [0.001, 0.5] for δ; using 0.001"),
        ("0", 0.001, "outside the allowed range"),
        ("7", 0.5, "using 0.5"),
        ("", 0.02, "is not a number"),
    ],
)
def test_bad_floats_fall_back_and_say_so(raw, value, message):
    values, warnings = parse_query(SPEC, {"delta": raw})
    assert values["delta"] == value
    assert len(warnings) == 1 and message in warnings[0]


def test_unknown_measures_are_dropped_and_named():
    values, warnings = parse_query(SPEC, {"measures": "kl3,foo,kl3,ratio"})
    assert values["measures"] == ("kl3", "ratio")
    assert "'foo'" in warnings[0] and "allowed: kl3, ratio, binary_kl" in warnings[0]


def test_no_known_measure_falls_back_to_the_default():
    values, warnings = parse_query(SPEC, {"measures": "foo"})
    assert values["measures"] == ("kl3",)
    assert "'foo'" in warnings[0] and "using kl3" in warnings[0]


def test_choice_and_text_and_unknown_keys():
    values, warnings = parse_query(SPEC, {"measure": "nope", "formula": "x" * 21, "dleta": "0.1", "embed": "true"})
    assert values["measure"] == "kl3" and values["formula"] == "r"
    assert any("measure='nope' is not one of kl3, k2" in w for w in warnings)
    assert any("21 characters long" in w for w in warnings)
    assert any("Unknown URL parameter 'dleta'" in w for w in warnings)
    assert not any("embed" in w for w in warnings)  # Streamlit's own parameter


def test_repeated_keys_take_the_last_like_st_query_params():
    values, _ = parse_query(SPEC, {"delta": ["0.1", "0.2"]})
    assert values["delta"] == 0.2


@pytest.mark.slow  # 60 examples; test_every_preset_is_a_valid_url_state round-trips in the fast loop
@given(
    delta=st.floats(0.001, 0.5),
    eps=st.floats(0.01, 0.9),
    p=st.floats(0.001, 0.999),
    measures=st.lists(st.sampled_from(["kl3", "ratio", "binary_kl", "chi2", "k2"]), min_size=1, unique=True),
)
def test_explorer_state_round_trips_through_the_url(delta, eps, p, measures):
    values = {"delta": delta, "eps_low": eps, "eps_high": eps, "p": p, "measures": tuple(measures)}
    back, warnings = parse_query(EXPLORER_SPEC, encode_query(EXPLORER_SPEC, values))
    assert warnings == []
    assert back["measures"] == values["measures"]
    for key in ("delta", "eps_low", "eps_high", "p"):
        assert math.isclose(back[key], values[key], rel_tol=1e-11)


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_is_a_valid_url_state(name):
    values, warnings = parse_query(EXPLORER_SPEC, encode_query(EXPLORER_SPEC, PRESETS[name].values))
    assert warnings == []
    assert values["measures"] == PRESETS[name].values["measures"]


@pytest.mark.parametrize(
    ("raw", "value", "message"),
    [
        ("3", 3, None),
        (" 7 ", 7, None),
        ("0", 1, "step=0 is outside the allowed range [1, 20]"),
        ("99", 20, "using 20"),
        ("2.5", 4, "is not a whole number"),
        ("x", 4, "not a whole number"),
    ],
)
def test_int_param(raw, value, message):
    param = IntParam("step", "lecture step", 4, 1, 20)
    got, warning = param.parse(raw)
    assert got == value and (warning is None if message is None else message in warning)
    assert param.encode(got) == str(value)
