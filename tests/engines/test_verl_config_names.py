"""verl's `--config-name` (issue 31 item 2): a launch that picks one of verl's packaged trainer configs has its keys
checked against that config's tree (the installed `_generated_<name>.yaml`), not ppo_trainer's; an example's own
config is named as not read. Also the unknown-key rules that follow the engines' own config trees."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from divclip.engines import areal, verl
from divclip.sanity import build_report


def _config_dir() -> Path:
    spec = importlib.util.find_spec("verl")
    if spec is None:
        pytest.skip("verl is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"


@pytest.mark.parametrize("name", verl.TRAINER_CONFIGS)
def test_each_packaged_config_tree_is_the_installed_one(name):
    text = (_config_dir() / f"_generated_{name}.yaml").read_text()
    assert verl.config_keys(name) == verl.known_keys_from(text)


def test_the_snapshot_names_every_packaged_trainer_config():
    packaged = {p.name[len("_generated_") : -len(".yaml")] for p in _config_dir().glob("_generated_*_trainer.yaml")}
    assert packaged == set(verl.TRAINER_CONFIGS)


MEGATRON = "actor_rollout_ref.actor.megatron.tensor_model_parallel_size"


@pytest.mark.parametrize("flag", ["--config-name=ppo_megatron_trainer", "--config-name='ppo_megatron_trainer.yaml'"])
def test_a_megatron_launch_knows_the_megatron_keys(flag):
    script = f"python3 -m verl.trainer.main_ppo --config-path=./config {flag} {MEGATRON}=2 data.train_batch_size=64\n"
    report = build_report(script.encode(), config_name="run.sh")
    assert not [w for w in report["warnings"] if w["code"] == "unknown_key"]
    assert any("--config-name ppo_megatron_trainer: keys checked against" in n for n in report["notes"])
    # without the config name the same key is not ppo_trainer's
    plain = build_report(f"python3 -m verl.trainer.main_ppo {MEGATRON}=2\n".encode(), config_name="run.sh")
    assert [w["key"] for w in plain["warnings"] if w["code"] == "unknown_key"] == [MEGATRON]
    # and a key only ppo_trainer has is unknown under megatron's tree
    only_fsdp = sorted(verl.known_keys() - verl.config_keys("ppo_megatron_trainer"))[0]
    mixed = build_report(f"python3 -m verl.trainer.main_ppo {flag} {only_fsdp}=1\n".encode(), config_name="run.sh")
    assert [w["key"] for w in mixed["warnings"] if w["code"] == "unknown_key"] == [only_fsdp]


def test_an_examples_own_config_name_is_said_not_read():
    script = (
        "python3 -m verl.trainer.main_ppo --config-path=examples/config --config-name=gsm8k_multiturn_grpo "
        "data.train_batch_size=8\n"
    )
    report = build_report(script.encode(), config_name="run.sh", framework="verl")
    assert any(
        "gsm8k_multiturn_grpo is the example's own config in --config-path examples/config" in n
        for n in report["notes"]
    )


def test_an_areal_sub_config_set_to_null_is_known():
    section = "ref.optimizer"
    assert any(k.startswith(section + ".") for k in areal.known_keys()) and section not in areal.known_keys()
    s = areal.read({"actor.eps_clip": 0.2, section: None})
    assert s.unknown_keys == []
    s = areal.read({"actor.eps_clip": 0.2, section: 3})  # a value where AReaL wants an OptimizerConfig
    assert [k for k, _ in s.unknown_keys] == [section]


def test_another_programs_flags_in_a_launch_script_are_not_settings():
    script = (
        "huggingface-cli download Qwen/Qwen2-7B --local-dir $HOME/models/q &\n"
        "python3 -m verl.trainer.main_ppo actor_rollout_ref.actor.clip_ratio_high=0.28\n"
    )
    report = build_report(script.encode(), config_name="run.sh")
    assert "--local-dir" not in report["config"]["keys"] and "--local-dir" in report["config"]["ignored_tokens"]
    assert not [w for w in report["warnings"] if w["code"] == "unknown_key"]


def test_flags_cut_off_by_a_missing_backslash_are_read_and_said():
    script = (
        "ARGS=(--eps-clip 0.2 --eps-clip-high 0.28)\n"
        "ray job submit -- python3 train.py \\\n  --colocate\n  ${ARGS[@]} \\\n  --n-samples-per-prompt 8\n"
    )
    report = build_report(script.encode(), config_name="run.sh")
    assert report["config"]["budget_high"] == 0.28
    [w] = [w for w in report["warnings"] if w["code"] == "setting_not_read"]
    assert w["message"].startswith("line 4: this command starts with --eps-clip, not a program")
