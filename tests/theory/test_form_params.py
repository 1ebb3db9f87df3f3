"""Form parameters (issue 30 item 2): the settings a loss form reads beyond the clip budget are `Param`s declared by
the forms that read them, kept in `ClipSpec.params`, and the method-string options are generated from them."""

import dataclasses

import pytest

from divclip.theory import ClipSpec, method_string, parse_method, spec_label
from divclip.theory.forms import (
    _FORMS,
    CLAMP_LOG_RATIO,
    DUAL_CLIP_C,
    FORMS,
    Form,
    Param,
    declare_form,
    declared_params,
    forms_declaring,
)


def test_clipspec_holds_the_budget_level_and_form_only():
    assert [f.name for f in dataclasses.fields(ClipSpec)] == [
        "measure",
        "delta",
        "eps_low",
        "eps_high",
        "level",
        "form",
        "params",
    ]


@pytest.mark.parametrize(
    "name, forms",
    [
        ("dual_clip_c", ["clip", "luspo"]),
        ("tis_cap", ["gated"]),
        ("tau_pos", ["sapo"]),
        ("tau_neg", ["sapo"]),
        ("clamp_log_ratio", ["clip", "gated", "cispo", "sapo", "cispo_cap", "luspo", "importance_sampling"]),
    ],
)
def test_the_former_fields_are_declared_by_the_forms_that_read_them(name, forms):
    assert forms_declaring(name) == forms
    assert len({id(FORMS[f].param(name)) for f in forms}) == 1  # one Param object, listed by each form
    assert FORMS["clip"].dual_clip == ("dual_clip_c" in [p.name for p in FORMS["clip"].params])


def test_shared_declarations_and_kinds():
    assert FORMS["clip"].param("dual_clip_c") is DUAL_CLIP_C and FORMS["luspo"].param("dual_clip_c") is DUAL_CLIP_C
    assert CLAMP_LOG_RATIO.kind == "flag" and CLAMP_LOG_RATIO.default is True and CLAMP_LOG_RATIO.option == "noclamp"
    flags = sorted(p.name for p in declared_params().values() if p.kind == "flag")
    assert flags == [
        "clamp_log_ratio",
        "rollout_is_batch_normalize",
        "sapo_seq_mean",
        "seq_grad_mean",
    ]  # booleans: flags


@pytest.mark.parametrize(
    "text, name, value",
    [
        ("grpo/dual=3", "dual_clip_c", 3.0),
        ("kl3/gated/tis=7.5", "tis_cap", 7.5),
        ("sapo/tau=0.5:2", "tau_neg", 2.0),
        ("sapo/tau=0.5:2", "tau_pos", 0.5),
        ("kl3/noclamp", "clamp_log_ratio", False),
        ("sapo/sapo_seq_mean=1", "sapo_seq_mean", True),
        ("ratio/reinforce_is/rollout_is_batch_normalize=1", "rollout_is_batch_normalize", True),
        ("ratio:0.2:0.28/clip_cov/clip_cov_ratio=0.001", "clip_cov_ratio", 0.001),
    ],
)
def test_options_set_the_declared_parameter_and_round_trip(text, name, value):
    spec = parse_method(text)
    assert spec.param(name) == value and type(spec.param(name)) is type(value)
    assert dict(spec.params)[name] == value
    assert parse_method(method_string(spec)) == spec
    assert ClipSpec(**{**{f.name: getattr(spec, f.name) for f in dataclasses.fields(ClipSpec)}}) == spec


def test_a_default_value_is_the_same_spec_as_leaving_it_out():
    assert ClipSpec(form="sapo", params={"tau_pos": 1.0, "tau_neg": 1.05}) == parse_method("sapo")
    assert parse_method("grpo/dual=3").params == (("dual_clip_c", 3.0),)
    assert ClipSpec("ratio", eps_low=0.2, eps_high=0.2, params={"dual_clip_c": None, "clamp_log_ratio": True}) == (
        parse_method("grpo")
    )
    # another form's parameter at its default is no parameter of this one, so it is no error either
    assert ClipSpec("kl3", delta=0.05, form="gated", params={"dual_clip_c": None}).params == ()
    assert method_string(parse_method("ratio/cispo_cap/cispo_cap=5")) == "ratio/cispo_cap"


def test_param_reads_with_and_without_a_default():
    spec = parse_method("dppo_kl")
    assert spec.param("tis_cap") == 20.0 and spec.param("clamp_log_ratio") is True
    assert spec.param("dual_clip_c", None) is None  # a reader that takes any form
    with pytest.raises(ValueError, match=r"form 'gated' has no parameter 'dual_clip_c'; its parameters: \["):
        spec.param("dual_clip_c")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(form="sapo", params={"sapo_seq_mean": 1.0}), r"ClipSpec.sapo_seq_mean must be True or False, got 1.0"),
        (dict(params={"clamp_log_ratio": "no"}), r"ClipSpec.clamp_log_ratio must be True or False, got 'no'"),
        (dict(params={"dual_clip_c": float("inf")}), r"ClipSpec.dual_clip_c must be a finite number > 1 \(or None"),
        (dict(form="sapo", params={"tau_pos": 1e-9}), r"tau_pos must be a finite number in \[1e-06, 1e\+06\] \(the"),
        (dict(form="cegppo", params={"cegppo_beta1": -0.5}), r"ClipSpec.cegppo_beta1 must be a finite number >= 0"),
        (dict(form="dro", params={"clamp_log_ratio": False}), r"clamp_log_ratio applies to form='clip' only \(and"),
        (dict(params={"nope": 1.0}), r"form 'clip' has no parameter 'nope'; its parameters: \['clamp_log_ratio'"),
        (dict(params=[("dual_clip_c", 2.0)]), r"ClipSpec.params must be a dict or \(name, value\) pairs"),
    ],
)
def test_bad_parameter_values_are_refused_by_name(kwargs, match):
    fields = {"measure": "ratio", "eps_low": 0.2, "eps_high": 0.2} if kwargs.get("form", "clip") == "clip" else {}
    if kwargs.get("form") in ("cegppo",):
        fields = {"measure": "ratio", "eps_low": 0.2, "eps_high": 0.2}
    with pytest.raises(ValueError, match=match):
        ClipSpec(**fields, **kwargs)


@pytest.mark.parametrize(
    "text, match",
    [
        ("sapo/sapo_seq_mean=2", r"sapo_seq_mean is a flag: '/sapo_seq_mean=1' or '=0', got '2'"),
        ("grpo/noclamp=0", r"unknown option '/noclamp=0'"),
        ("kl3/dro/noclamp", r"got form='dro' \(form 'dro' has no parameter 'clamp_log_ratio'\)"),
        ("grpo/tis=3", r"ClipSpec.tis_cap applies to form='gated' only, got form='clip'"),
    ],
)
def test_bad_options_are_refused_by_name(text, match):
    with pytest.raises(ValueError, match=match):
        parse_method(text)


@pytest.fixture
def choice_form():
    form = declare_form(
        Form(
            "demo_choice",
            "hard clip",
            "−A·r",
            ("test:demo",),
            params=(
                CLAMP_LOG_RATIO,
                Param("demo_side", "both", "which side is clipped", kind="choice", choices=("both", "upper")),
                Param("demo_on", False, "a demo flag", kind="flag"),
            ),
        )
    )
    yield form
    _FORMS.pop("demo_choice")


def test_a_new_form_gets_its_parameters_options_from_the_declaration(choice_form):
    spec = parse_method("ratio:0.2:0.2/demo_choice/demo_side=upper/demo_on=1/noclamp")
    assert (spec.param("demo_side"), spec.param("demo_on"), spec.param("clamp_log_ratio")) == ("upper", True, False)
    assert method_string(spec) == "ratio:0.2:0.2/demo_choice/noclamp/demo_on=1/demo_side=upper"
    assert parse_method(method_string(spec)) == spec
    assert spec_label(spec) == "ratio 0.2/0.2 demo_choice noclamp demo_on=1 demo_side=upper"
    with pytest.raises(ValueError, match=r"demo_side must be one of \['both', 'upper'\], got 'lower'"):
        parse_method("ratio:0.2:0.2/demo_choice/demo_side=lower")
    with pytest.raises(ValueError, match=r"ClipSpec.demo_side must be one of \['both', 'upper'\], got 3"):
        ClipSpec("ratio", eps_low=0.2, eps_high=0.2, form="demo_choice", params={"demo_side": 3})


def test_a_second_different_declaration_of_a_parameter_is_refused():
    twin = Param("dual_clip_c", None, "another dual clip", above=2.0, option="dual")
    with pytest.raises(ValueError, match=r"declares parameter 'dual_clip_c' differently from form 'clip'"):
        declare_form(Form("demo_twin", "hard clip", "−A·r", ("test:demo",), params=(twin,)))
    assert "demo_twin" not in FORMS


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(kind="switch"), r"Param.kind must be one of \['number', 'flag', 'choice'\], got 'switch'"),
        (dict(kind="flag", default=1), r"a flag's default is True or False, got 1"),
        (dict(kind="choice", default="c", choices=("a", "b")), r"default 'c' is not one of choices"),
        (dict(default=-1.0, above=0.0), r"ClipSpec.demo must be a finite number > 0, got -1.0"),
    ],
)
def test_bad_declarations_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Param(**{"name": "demo", "default": 1.0, "doc": "demo", **kwargs})
