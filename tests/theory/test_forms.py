"""The loss-form catalogue (`divclip.theory.forms`) and the ClipSpec parameters it gives method strings."""

import pytest

from divclip.theory import ClipSpec, method_string, parse_method, spec_label
from divclip.theory.forms import FORMS, Form, Param, declare_form, get_form


@pytest.fixture
def demo_form():
    form = declare_form(
        Form(
            "demo_form",
            "hard clip",
            "−A·r",
            ("test:demo",),
            params=(Param("demo_k", 2.0, "a demo parameter", above=0.0, at_most=10.0),),
        )
    )
    yield form
    from divclip.theory import forms

    forms._FORMS.pop("demo_form")


def test_core_forms_are_declared_with_a_family():
    for mode in ("clip", "gated", "cispo", "sapo"):
        assert get_form(mode).name == mode
    assert get_form("sapo").uses_budget is False
    with pytest.raises(ValueError, match="must be one of"):
        get_form("nope")


def test_params_default_set_and_round_trip(demo_form):
    spec = parse_method("ratio:0.2:0.28/demo_form")
    assert spec.form == "demo_form" and spec.params == () and spec.param("demo_k") == 2.0
    spec = parse_method("ratio:0.2:0.28/demo_form/demo_k=3.5")
    assert spec.params == (("demo_k", 3.5),) and spec.param("demo_k") == 3.5
    assert parse_method(method_string(spec)) == spec
    assert "demo_k=3.5" in spec_label(spec)
    assert ClipSpec("ratio", eps_low=0.2, eps_high=0.28, form="demo_form", params={"demo_k": 3.5}) == spec


@pytest.mark.parametrize(
    "text, match",
    [
        ("ratio:0.2:0.28/demo_form/demo_k=0", r"demo_k.*> 0"),
        ("ratio:0.2:0.28/demo_form/demo_k=11", r"<= 10"),
        ("ratio:0.2:0.28/demo_form/demo_k=1/demo_k=2", "given twice"),
        ("ratio:0.2:0.28/demo_k=1", "takes no parameters|has no parameter"),
    ],
)
def test_bad_params_are_refused_by_name(demo_form, text, match):
    with pytest.raises(ValueError, match=match):
        parse_method(text)


def test_forms_is_read_only():
    with pytest.raises(TypeError):
        FORMS["x"] = None  # type: ignore[index]
