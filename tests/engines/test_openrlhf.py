"""OpenRLHF 0.11.2: flags and defaults from the installed package's parser (read with ast), reads of launch
commands (the repository's own example), writes and round trips, and what OpenRLHF cannot express."""

from pathlib import Path

import pytest

from divclip.engines import openrlhf
from divclip.engines.launch import parse_launch
from divclip.engines.source import argparse_flags, installed_file
from divclip.theory.spec import parse_method

FIXTURES = Path(__file__).parents[1] / "fixtures" / "engines" / "openrlhf"
TYPES = {"float": "float", "int": "int", "str": "str", "bool": None}


@pytest.fixture(scope="module")
def parser():
    return argparse_flags(installed_file("openrlhf", openrlhf.ENTRY.removeprefix("openrlhf/")).read_text())


def test_known_flags_snapshot_is_the_installed_parser(parser):
    assert set(parser) == set(openrlhf.known_flags())


def test_keys_types_and_defaults_are_the_installed_parsers(parser):
    for flag, key in openrlhf.KEYS.items():
        found = parser[flag]
        assert found.default == key.default, flag
        assert found.type == TYPES[key.kind], flag
        if key.kind == "bool":
            assert found.action == "store_true", flag
        if found.choices is not None and key.choices:
            assert set(found.choices) == set(key.choices), flag
    assert parser["--actor.eps_clip_low_high"].nargs == 2
    assert parser["--algo.advantage.is_correction_threshold"].nargs == "+"


def test_loss_types_are_policy_loss_s():
    """PolicyLoss accepts exactly the two loss types divclip reads (its forward raises on others)."""
    source = installed_file("openrlhf", "models/loss.py").read_text()
    for t in openrlhf.LOSS_TYPES:
        assert f'self.policy_loss_type == "{t}"' in source


def test_repository_example_reads_as_dapo_clip_with_eight_updates():
    r = openrlhf.read(parse_launch((FIXTURES / "train_dapo_ray_hybrid_engine.sh").read_text()))
    assert r.spec == parse_method("ratio:0.2:0.27")
    assert (r.minibatches, r.updates_per_batch, r.group_size, r.on_policy) == (8, 8, 8, False)
    assert r.kl == {"use_loss": True, "init_coef": 1e-3, "estimator": "k3", "adv_estimator": "group_norm"}
    assert r.unknown_keys == [("--algo.advantage.is_correction_enable", "--algo.advantage.is_correction_level")]
    assert [a.code for a in r.advice] == ["renamed_flag"] and "0.11.2" in r.advice[0].source


def test_defaults_dual_clip_gspo_and_is_correction():
    r = openrlhf.read({})
    assert r.spec == parse_method("grpo") and r.dual_clip_c is None  # unlike verl, no dual clip by default
    assert (r.minibatches, r.updates_per_batch) == (8, 8)  # 1024 prompts × 1 sample / 128
    r = openrlhf.read(
        {
            "--actor.policy_loss_type": "gspo",
            "--actor.eps_clip": "3e-4",
            "--actor.dual_clip": "3",
            "--actor.loss_agg_mode": "token-mean",
        }
    )
    assert r.spec == parse_method("ratio:3e-4:3e-4/seq/dual=3/noclamp/seq_grad_mean=1")  # OpenRLHF's gspo
    assert r.loss_agg_mode == "seq-mean-token-mean"
    assert [a.code for a in r.advice] == ["ignored_key"]
    r = openrlhf.read(
        {
            "--algo.advantage.is_correction_level": "token",
            "--algo.advantage.is_correction_mode": "clip",
            "--algo.advantage.is_correction_threshold": "3",
            "--rollout.batch_size": "16",
            "--train.batch_size": "16",
        }
    )
    assert r.on_policy and {a.code for a in r.advice} == {"on_policy_clip_inert", "is_correction_threshold"}
    assert r.keys["--algo.advantage.is_correction_threshold"]["value"] == [0.0, 3.0]


@pytest.mark.parametrize(
    "settings,match",
    [
        ({"--actor.eps_clip_low_high": ["0.2"]}, "takes 2 numbers"),
        ({"--actor.eps_clip_low_high": ["0.2", "x"]}, "takes 2 numbers"),
        ({"--actor.policy_loss_type": "cispo"}, "must be one of"),
        ({"--algo.advantage.is_correction_level": "seq", "--algo.advantage.is_correction_mode": "clip"}, "refuses"),
        (
            {"--algo.advantage.is_correction_level": "token", "--algo.advantage.is_correction_gating": "tv"},
            "upper bound",
        ),
    ],
)
def test_bad_settings_are_refused_by_name(settings, match):
    with pytest.raises(ValueError, match=match):
        openrlhf.read(settings)


@pytest.mark.parametrize(
    "method", ["grpo", "dapo", "atr", "kl3:0.05", "gspo", "dapo/dual=3", "gspo/dual=2", "hellinger:0.01"]
)
def test_write_then_read_back_through_the_launch_text(method):
    spec = parse_method(method)
    w = openrlhf.write(spec)
    back = openrlhf.read(parse_launch(w.text()))
    assert back.spec.ratio_bounds() == pytest.approx(spec.ratio_bounds(), rel=1e-12)
    assert (back.spec.level, back.spec.param("dual_clip_c", None), back.spec.form) == (
        spec.level,
        spec.param("dual_clip_c", None),
        spec.form,
    )
    assert back.unknown_keys == []
    assert all(d.exact for d in w.differences) and bool(w.differences) == (spec.measure_name != "ratio")


@pytest.mark.parametrize(
    "method,missing",
    [
        ("binary_kl:0.05", "no single ratio clip"),
        ("sapo", "'sapo'"),
        ("dppo_kl", "'gated'"),
        ("ratio:0.2:0.28/cispo", "'cispo'"),
        ("kl3@clipfrac=0.1", "adapts"),
    ],
)
def test_what_openrlhf_cannot_express_is_named(method, missing):
    with pytest.raises(ValueError, match=missing):
        openrlhf.write(parse_method(method))


def test_recipe_aggregation():
    assert openrlhf.write(parse_method("grpo")).settings["--actor.loss_agg_mode"] == "seq-mean-token-mean"
    w = openrlhf.write(parse_method("dapo"), loss_agg_mode="seq-mean-token-sum-norm")
    assert "--actor.loss_agg_mode" not in w.settings and "seq-mean-token-sum-norm" in str(w.differences[0])
