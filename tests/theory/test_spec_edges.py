"""Errors, not tracebacks, from the method-string API: refused at parse time with the user's own value."""

import subprocess
import sys

import pytest

from divclip.theory import parse_method
from divclip.theory.forms.sapo import TAU_MAX, TAU_MIN
from divclip.theory.spec import MAX_METHOD_ECHO, method_string, parse_methods


@pytest.mark.parametrize(
    "text, match",
    [
        ("sapo/tau=1e-300:1e300", r"tau_pos must be a finite number in \[1e-06, 1e\+06\].*got 1e-300"),
        ("sapo/tau=1:1e300", r"tau_neg must be a finite number > 0 and <= 1e\+06, got 1e\+300"),
        ("kl3:1e-320", r"delta=1e-320 is too small for 'kl3': its lower bound rounds to 1 in float64"),
        ("log_ratio:1e-300", r"delta=1e-300 is too small for 'log_ratio'"),
        ("ratio:0.2:1e-17", r"eps_high=1e-17 underflows: 1 \+ 1e-17 rounds to 1"),
    ],
)
def test_degenerate_budgets_are_refused_at_parse_time(text, match):
    with pytest.raises(ValueError, match=match):
        parse_method(text)


def test_the_tau_range_is_usable_at_its_ends():
    assert parse_method(f"sapo/tau={TAU_MIN!r}:{TAU_MAX!r}").param("tau_neg") == TAU_MAX


@pytest.mark.parametrize("text", ["x" * 1_000_000, "kl3/" + "z" * 5000, "nope" * 300, "kl3:" + "9" * 400 + "x"])
def test_a_huge_method_string_is_not_echoed_whole(text):
    with pytest.raises(ValueError) as info:
        parse_method(text)
    message = str(info.value)
    assert len(message) < 2000 + 3 * MAX_METHOD_ECHO  # the grammar help plus short echoes, never the input
    assert f"({len(text)} characters)" in message or "characters)" in message


def test_parse_methods_does_not_echo_a_huge_entry():
    with pytest.raises(ValueError) as info:
        parse_methods(["grpo", "y" * 100_000])
    assert len(str(info.value)) < 3000


def test_export_names_the_users_delta_not_a_key_they_never_gave():
    out = subprocess.run(
        [sys.executable, "-m", "divclip.cli", "export", "--method", "kl3:1e-320", "--engine", "verl"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert "kl3:1e-320" in out.stderr and "delta=1e-320" in out.stderr
    assert "clip_ratio_low" not in out.stderr


@pytest.mark.parametrize(
    "text, match",
    [
        ("grpo/dual=2/dual=3", r"'/dual' is given twice \(at '/dual=3'\)"),
        ("kl3/gated/clip", r"a loss form \('/FORM'\) is given twice \(at '/clip'\)"),
        ("sapo/tau=1:2/tau=3:4", r"'/tau' is given twice \(at '/tau=3:4'\)"),
        ("kl3/gated/tis=2/tis=3", r"'/tis' is given twice"),
        ("gspo/seq/seq", r"'/seq' is given twice"),
        ("grpo/noclamp/noclamp", r"'/noclamp' is given twice"),
        ("kl3:0.02&grpo/dual=2/dual=3", r"'/dual' is given twice"),
    ],
)
def test_a_repeated_option_is_refused_as_a_repeated_form_parameter_is(text, match):
    """Issue 36: the last of a repeated option used to win in silence."""
    with pytest.raises(ValueError, match=match):
        parse_method(text)


def test_options_given_once_still_combine():
    spec = parse_method("kl3/gated/tis=2/noclamp")
    assert (spec.form, spec.param("tis_cap", None), spec.param("clamp_log_ratio")) == ("gated", 2.0, False)
    assert parse_method("ratio:0.2/seq/dual=3").level == "sequence"
    assert (
        parse_method("sapo/tau=1:2").param("tau_neg") == 2.0
        and parse_method("grpo/dual=3").param("dual_clip_c", None) == 3.0
    )


def test_a_list_of_methods_is_capped_before_parsing():
    from divclip.theory.spec import MAX_METHODS

    with pytest.raises(ValueError, match=rf"at most {MAX_METHODS} methods, got 3000"):
        parse_methods(",".join(["grpo"] * 3000))
    with pytest.raises(ValueError, match=rf"at most {MAX_METHODS} methods, got {MAX_METHODS + 1}"):
        parse_methods([(f"m{i}", "grpo") for i in range(MAX_METHODS + 1)])
    assert len(parse_methods(",".join(f"ratio:0.{i + 1}" for i in range(9)))) == 9


@pytest.mark.parametrize(
    "text,lo", [("ratio:0:0.2", 1.0), ("ratio:1e-17:0.2", 1.0), ("ratio:1:0.2", 0.0), ("ratio:10:0.28", 0.0)]
)
def test_a_lower_width_of_zero_or_at_least_one_is_a_ratio_clip(text, lo):
    """ε_low = 0 keeps no room below 1 (SkyRL's CISPO floor, AReaL's M2PO eps_clip 0) and ε_low >= 1 no lower bound
    (verl's CISPO with clip_ratio_low >= 1, DeepSeekMath's ε = 10): both are clips the engines run (issue 31 item 4,
    issue 35 item 4); a tiny ε_low is the same clip as 0."""
    spec = parse_method(text)
    assert spec.ratio_bounds() == (lo, 1.0 + spec.eps_high)
    assert parse_method(method_string(spec)) == spec
