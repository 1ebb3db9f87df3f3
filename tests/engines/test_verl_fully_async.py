"""verl's fully asynchronous trainer (verl.experimental.fully_async_policy.fully_async_main): its packaged configs'
keys and defaults (bypass_mode true among them) as the installed verl 0.9.1 ships them, data.train_batch_size not
read (its recipes set 0), and whether the clipped ratio can differ from 1, from FullyAsyncTrainer's schedule."""

from __future__ import annotations

import json

import pytest
import yaml

from divclip.engines import verl
from divclip.engines.source import installed_file
from divclip.sanity import build_report

A = "actor_rollout_ref.actor."
LAUNCH = "python3 -m verl.experimental.fully_async_policy.fully_async_main {args}\n"


def _leaves(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


@pytest.mark.parametrize(
    "where, name",
    [
        ("fully_async_policy", "fully_async_ppo_trainer"),
        ("fully_async_policy", "fully_async_ppo_megatron_trainer"),
        ("one_step_off_policy", "one_step_off_ppo_trainer"),
        ("one_step_off_policy", "one_step_off_ppo_megatron_trainer"),
    ],
)
def test_the_snapshot_is_the_installed_configs_keys_and_values(where, name):
    tree = yaml.safe_load(installed_file("verl", f"experimental/{where}/config/{name}.yaml").read_text())
    base = tree.pop("defaults")[0]
    tree.pop("hydra")
    want = {k: json.loads(json.dumps(v)) for k, v in _leaves(tree)}
    assert verl.fully_async_configs()[name] == (base, want)
    assert want["algorithm.rollout_correction.bypass_mode"] is True  # π_old: the rollout's log-probs, by default
    assert len(verl.fully_async_configs()) == 4


def _read(args: str):
    report = build_report(LAUNCH.format(args=args).encode(), config_name="run.sh")
    return report, report["config"]


def test_the_default_config_is_bypass_mode_never_on_policy_and_knows_its_keys():
    report, config = _read(f"data.train_batch_size=0 {A}ppo_mini_batch_size=32 async_training.staleness_threshold=0.5")
    assert config["loss_mode"] == "bypass_mode" and config["on_policy"] is False
    assert config["keys"]["algorithm.rollout_correction.bypass_mode"] == {"value": True, "origin": "default"}
    assert config["keys"]["data.train_batch_size"] == {"value": 0, "origin": "set, not read by the fully async trainer"}
    assert config["updates_per_batch"] == 1 and "π_old is the rollout's log-probs" in config["on_policy_reason"]
    codes = ("unknown_key", "on_policy_clip_inert", "minibatch_larger_than_batch")  # 32 > 0: not read there
    assert not [w for w in report["warnings"] if w["code"] in codes]
    assert any("fully_async_main's default config fully_async_ppo_trainer" in n for n in report["notes"])


@pytest.mark.parametrize(
    "args, updates, on_policy",
    [
        ("async_training.trigger_parameter_sync_step=1", 1, True),  # each step syncs: π_old = π_θ at its one update
        ("async_training.trigger_parameter_sync_step=4", 1, False),  # steps 2-4 train on π_old of step 1's params
        ("async_training.trigger_parameter_sync_step=1 async_training.require_batches=4", 4, False),
        (f"async_training.trigger_parameter_sync_step=1 {A}ppo_epochs=2", 2, False),
    ],
)
def test_without_bypass_only_one_update_per_synced_step_is_on_policy(args, updates, on_policy):
    report, config = _read(f"algorithm.rollout_correction.bypass_mode=false {args}")
    assert config["loss_mode"] == "vanilla" and (config["updates_per_batch"], config["on_policy"]) == (
        updates,
        on_policy,
    )
    assert "recomputed with the sync cycle's first parameters" in config["on_policy_reason"]
    told = [w["key"] for w in report["warnings"] if w["code"] == "on_policy_clip_inert"]
    assert len(told) == int(on_policy)  # the clip cannot bind: said once


def test_one_step_off_policy_is_off_policy_with_bypass_and_the_ppo_schedule_without():
    launch = "python3 -m verl.experimental.one_step_off_policy.main_ppo rollout.nnodes=1 {}\n"
    report = build_report(launch.format(f"{A}ppo_mini_batch_size=1024").encode(), config_name="run.sh")
    config = report["config"]
    assert (config["loss_mode"], config["updates_per_batch"], config["on_policy"]) == ("bypass_mode", 1, False)
    assert "rollouts come from the previous step's parameters" in config["on_policy_reason"]
    assert not [w for w in report["warnings"] if w["code"] in ("unknown_key", "on_policy_clip_inert")]
    plain = launch.format(f"{A}ppo_mini_batch_size=1024 algorithm.rollout_correction.bypass_mode=false")
    config = build_report(plain.encode(), config_name="run.sh")["config"]
    assert (config["loss_mode"], config["updates_per_batch"], config["on_policy"]) == ("vanilla", 1, True)


def test_main_ppo_still_refuses_a_train_batch_size_of_zero():
    with pytest.raises(ValueError, match="data.train_batch_size must be an integer > 0"):
        build_report(b"python3 -m verl.trainer.main_ppo data.train_batch_size=0\n", config_name="run.sh")
