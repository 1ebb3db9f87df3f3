"""Config reading and warnings: realistic verl/TRL fixtures give exactly the expected warnings; correct ones none."""

import pytest
from sanity_helpers import FIXTURES

from divclip.engines.config import parse_override_value
from divclip.sanity import ConfigError, build_report, check_settings, clip_settings, read_config
from divclip.sanity.checks import SOURCES
from divclip.theory import delta_for_eps, equivalent_ratio_clip

EXPECTED = {
    "verl_dapo_ok.yaml": [],
    "verl_gspo_ok.yaml": [],
    "trl_dapo_ok.json": [],
    "trl_gspo_ok.yaml": [],
    "verl_grpo_onpolicy.sh": ["on_policy_clip_inert", "verl_dual_clip_always_on"],
    "verl_gspo_token_eps.yaml": ["sequence_ratio_token_eps", "sequence_ratio_token_eps"],
    "verl_clip_ratio_only.txt": ["clip_ratio_shadowed"],
    "verl_dppo_kl.yaml": ["dppo_budget_from_ppo_default", "dppo_tis_cap_small"],
    "verl_inverted_wide.yaml": ["outside_published_range", "outside_published_range", "asymmetric_contradicts_measure"],
    "trl_defaults.json": ["on_policy_clip_inert"],
    "trl_gspo_token_eps.yaml": ["sequence_ratio_token_eps", "sequence_ratio_token_eps"],
    "trl_token_gspo_eps.yaml": ["token_ratio_sequence_eps", "token_ratio_sequence_eps"],
    "trl_cispo.json": ["trl_cispo_cap_is_absolute"],
    "trl_delta_low.yaml": ["trl_delta_below_upper_clip"],
    "verl_two_runs.sh": ["several_launches", "verl_dual_clip_always_on"],
}


def settings_of(name, **kw):
    return clip_settings(read_config(FIXTURES / name), **kw)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_gives_exactly_the_expected_warnings(name):
    report = build_report(FIXTURES / name)
    codes = sorted(w["code"] for w in report["warnings"])
    assert codes == sorted(EXPECTED[name])
    for w in report["warnings"]:
        assert w["source"] == SOURCES[w["code"]] and w["message"] and w["key"]


def test_every_fixture_file_is_covered():
    configs = {p.name for p in FIXTURES.iterdir() if not p.name.startswith("rollouts")}
    assert configs == set(EXPECTED)


def test_every_warning_code_is_exercised_or_has_its_own_test():
    seen = {c for codes in EXPECTED.values() for c in codes}
    own_tests = {"minibatch_larger_than_batch", "rollouts_on_policy", "override_without_equals", "setting_not_read"}
    assert set(SOURCES) == seen | own_tests


def test_verl_settings_from_the_onpolicy_script():
    s = settings_of("verl_grpo_onpolicy.sh")
    assert (s.engine, s.loss_mode, s.form, s.measure, s.level) == ("verl", "vanilla", "clip", "ratio", "token")
    assert (s.budget_low, s.budget_high, s.dual_clip_c) == (0.2, 0.2, 3.0)
    assert (s.updates_per_batch, s.on_policy, s.group_size) == (1, True, 5)
    assert s.keys["data.train_batch_size"] == {"value": 1024, "origin": "set"}
    assert s.keys["actor_rollout_ref.actor.clip_ratio_c"] == {"value": 3.0, "origin": "default"}
    assert s.kl["use_kl_loss"] is True and s.defaults_from.startswith("verl 0.9.1")


def test_verl_dapo_counts_sixteen_minibatches_and_reads_nested_yaml():
    s = settings_of("verl_dapo_ok.yaml")
    assert (s.minibatches, s.updates_per_batch, s.on_policy) == (16, 16, False)
    assert (s.budget_low, s.budget_high, s.dual_clip_c, s.group_size) == (0.2, 0.28, 10.0, 16)


def test_yaml_3e_minus_4_is_read_as_a_float_as_omegaconf_does():
    s = settings_of("verl_gspo_ok.yaml")
    assert (s.level, s.budget_low, s.budget_high, s.dual_clip_c) == ("sequence", 3e-4, 4e-4, None)
    t = settings_of("trl_gspo_ok.yaml")
    assert (t.level, t.budget_low, t.budget_high) == ("sequence", 3e-4, 4e-4)


def test_trl_on_policy_rule_is_trls_own():
    # TRL skips old log-probs when gradient_accumulation_steps % (steps_per_generation · μ) == 0.
    base = {"epsilon": 0.2}
    cases = [
        ({}, True),
        ({"num_iterations": 2}, False),
        ({"steps_per_generation": 4}, False),
        ({"gradient_accumulation_steps": 4, "steps_per_generation": 2}, True),
        ({"generation_batch_size": 32, "per_device_train_batch_size": 8}, False),
    ]
    for extra, on_policy in cases:
        raw = read_config(None, overrides=[f"{k}={v}" for k, v in {**base, **extra}.items()])
        assert clip_settings(raw).on_policy is on_policy, extra


def test_trl_dapo_dump_with_both_generation_fields_uses_steps():
    s = settings_of("trl_dapo_ok.json")
    assert (s.minibatches, s.updates_per_batch, s.on_policy) == (4, 4, False)
    assert (s.loss_agg_mode, s.budget_high, s.dual_clip_c) == ("token-mean", 0.28, None)


def test_trl_cispo_cap_is_the_absolute_epsilon_high():
    s = settings_of("trl_cispo.json")
    assert (s.form, s.cap, s.budget_low, s.budget_high) == ("cispo", 0.2, None, None)


def test_dppo_budget_and_tis_cap():
    s = settings_of("verl_dppo_kl.yaml")
    assert (s.form, s.measure, s.budget_low, s.tis_cap, s.dual_clip_c) == ("gated", "binary_kl", 0.2, 3.0, None)
    report = build_report(FIXTURES / "verl_dppo_kl.yaml")
    rows = report["budget"]["intervals"]
    assert [r["p"] for r in rows] == [0.01, 0.1, 0.5, 0.9]
    from divclip.theory import get_measure

    assert rows[2]["lo"] == get_measure("binary_kl").bounds(0.2, 0.5)[0]


def test_budget_reports_kl3_delta_and_implied_eps_high_from_theory():
    report = build_report(FIXTURES / "verl_dapo_ok.yaml")
    kl3 = report["budget"]["kl3"]
    assert kl3["delta_from_eps_low"] == delta_for_eps("kl3", eps_low=0.2)
    assert kl3["delta_from_eps_low"] == pytest.approx(0.023144, abs=1e-6)  # docs/theory.md §2 table
    assert kl3["implied_eps_high"] == pytest.approx(0.23084, abs=1e-5)
    d_high = delta_for_eps("kl3", eps_high=0.28)
    assert kl3["delta_from_eps_high"] == d_high
    assert kl3["implied_eps_low"] == equivalent_ratio_clip("kl3", d_high)[0]


def test_intended_measure_flags_an_asymmetry_it_does_not_imply():
    s = settings_of("verl_dapo_ok.yaml")
    codes = [f.code for f in check_settings(s, "kl3")]
    assert codes == ["asymmetric_contradicts_measure"]  # KL3 at ε_low 0.2 implies 0.2308, not 0.28
    kl3_high = equivalent_ratio_clip("kl3", delta_for_eps("kl3", eps_low=0.2))[1]
    exact = read_config(
        None,
        overrides=[
            "data.train_batch_size=512",
            "actor_rollout_ref.actor.ppo_mini_batch_size=64",
            "actor_rollout_ref.actor.clip_ratio_c=3",
            "actor_rollout_ref.actor.clip_ratio_low=0.2",
            f"actor_rollout_ref.actor.clip_ratio_high={kl3_high!r}",
        ],
    )
    assert check_settings(clip_settings(exact), "kl3") == []
    with pytest.raises(ValueError, match="measure must be one of"):
        check_settings(s, "kl4")


def test_minibatch_larger_than_batch():
    a = "actor_rollout_ref.actor."
    raw = read_config(
        None,
        overrides=["data.train_batch_size=64", a + "ppo_mini_batch_size=128", a + "ppo_epochs=2", a + "clip_ratio_c=3"],
    )
    assert [f.code for f in check_settings(clip_settings(raw))] == ["minibatch_larger_than_batch"]


def test_command_line_overrides_apply_on_top_of_a_file():
    raw = read_config(
        FIXTURES / "verl_dapo_ok.yaml", overrides=["actor_rollout_ref.actor.clip_ratio_high=0.3", "~trainer"]
    )
    assert raw.values["actor_rollout_ref.actor.clip_ratio_high"] == 0.3
    assert not any(k.startswith("trainer.") for k in raw.values)


@pytest.mark.parametrize(
    "text,value",
    [
        ("0.2", 0.2),
        ("3e-4", 3e-4),
        ("1", 1),
        ("true", True),
        ("False", False),
        ("null", None),
        ("'0.2'", "0.2"),
        ('"a b"', "a b"),
        ("grpo", "grpo"),
        ("[a,b]", "[a,b]"),
        ("-1.5E+2", -150.0),
    ],
)
def test_override_values_parse_like_hydra(text, value):
    got = parse_override_value(text)
    assert got == value and type(got) is type(value)


def test_framework_detection_and_forcing():
    raw = read_config(None, overrides=["epsilon=0.2", "actor_rollout_ref.actor.clip_ratio=0.2"])
    with pytest.raises(ConfigError, match="mixes verl keys"):
        clip_settings(raw)
    assert clip_settings(raw, framework="trl").engine == "trl"
