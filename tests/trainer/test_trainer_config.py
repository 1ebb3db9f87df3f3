"""TrainerConfig validation: every bad value is a ValueError naming the field, the value and what is allowed."""

import dataclasses

import pytest

from divclip.theory.losses import preset
from divclip.trainer.config import TRAIN_PRESETS, TrainerConfig, from_preset


@pytest.mark.parametrize(
    "field, value, allowed",
    [
        ("group_size", 1, "integer in [2, 1024]"),
        ("group_size", 0, "integer in [2, 1024]"),
        ("group_size", 10**9, "integer in [2, 1024]"),
        ("steps", 0, "integer in [1, 1000000]"),
        ("steps", 10**12, "integer in [1, 1000000]"),
        ("ppo_epochs", 2.5, "integer in [1, 100]"),
        ("ppo_epochs", 10**9, "integer in [1, 100]"),
        ("max_new_tokens", 10**9, "integer in [1, 32768]"),
        ("threads", 10**6, "integer in [0, 256]"),
        ("seed", 2**40, "integer in [0, 4294967295]"),
        ("temperature", 1e-320, "number in [0.001, 1000]"),
        ("temperature", 0.0, "number in [0.001, 1000]"),
        ("lr", -1e-3, "finite number > 0"),
        ("lr", float("nan"), "finite number > 0"),
        ("kl_coef", -0.1, "finite number >= 0"),
        ("method", "ppo2", "one of ["),
        ("kl_estimator", "k4", "one of ['k1', 'k2', 'k3']"),
        ("loss_agg_mode", "mean", "one of ["),
        ("device", "tpu", "one of ['auto', 'cpu', 'cuda']"),
        ("delta", 0.0, "finite number > 0"),
        ("dual_clip_c", 1.0, "finite number > 1"),
        ("minibatches", 1000, "at most the rollout batch"),
        ("tiny_n_head", 3, "a divisor of tiny_n_embd"),
    ],
)
def test_bad_values_name_field_value_and_range(field, value, allowed):
    with pytest.raises(ValueError) as err:
        TrainerConfig(**{field: value})
    msg = str(err.value)
    assert f"TrainerConfig.{field}" in msg and repr(value) in msg and allowed in msg


def test_group_of_one_explains_the_baseline():
    with pytest.raises(ValueError, match=r"group_size must be an integer in \[2, 1024\] .*baseline.*got 1"):
        TrainerConfig(group_size=1)


def test_missing_model_directory(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(ValueError, match=r"TrainerConfig.model .*no such directory.*no-such-model"):
        TrainerConfig(model=str(missing))
    with pytest.raises(ValueError, match=r"containing config.json"):
        TrainerConfig(model=str(tmp_path))  # exists, but is not a model directory


def test_missing_task_file(tmp_path):
    with pytest.raises(ValueError, match=r"TrainerConfig.task .*no such file"):
        TrainerConfig(task=str(tmp_path / "x.jsonl"))


def test_clip_spec_follows_method_and_overrides():
    assert TrainerConfig(method="atr").clip_spec() == preset("atr")
    assert TrainerConfig(method="dapo").clip_spec() == preset("dapo")
    spec = TrainerConfig(method="atr", delta=0.05, dual_clip_c=3.0).clip_spec()
    assert (spec.measure, spec.delta, spec.param("dual_clip_c", None)) == ("kl3", 0.05, 3.0)
    spec = TrainerConfig(method="grpo", measure="binary_kl", delta=0.02).clip_spec()
    assert (spec.measure, spec.delta, spec.eps_low, spec.form) == ("binary_kl", 0.02, None, "clip")


def test_bad_measure_combinations():
    with pytest.raises(ValueError, match=r"delta must be a budget > 0 when measure='kl3'"):
        TrainerConfig(measure="kl3")
    with pytest.raises(ValueError, match=r"method='atr' with measure='ratio'"):
        TrainerConfig(method="atr", measure="ratio", delta=0.1)
    with pytest.raises(ValueError, match=r"measure must be one of"):
        TrainerConfig(measure="js", delta=0.1)


def test_presets_build_and_reject_unknown_fields():
    cfg = from_preset("tiny-arith", seed=3, method="atr")
    assert cfg.seed == 3 and cfg.clip_spec() == preset("atr")
    assert cfg.sft_steps == TRAIN_PRESETS["tiny-arith"]["sft_steps"]
    with pytest.raises(
        ValueError, match=r"preset must be one of \['tiny-arith', 'tiny-arith-offpolicy', .*\], got 'huge'"
    ):
        from_preset("huge")
    with pytest.raises(ValueError, match=r"unknown TrainerConfig fields \['epochs'\]"):
        from_preset("tiny-arith", epochs=3)


def test_every_field_is_documented():
    import ast
    import inspect

    import divclip.trainer.config as mod

    tree = ast.parse(inspect.getsource(mod.TrainerConfig))
    body = tree.body[0].body
    documented = {
        stmt.target.id
        for stmt, nxt in zip(body, body[1:])
        if isinstance(stmt, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
    }
    assert documented == {f.name for f in dataclasses.fields(TrainerConfig)}
