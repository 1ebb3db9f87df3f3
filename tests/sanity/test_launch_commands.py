"""The launch command behind its launcher (issue 31 item 1): only the words after the engine's entry point are
settings; torchrun's, ray's, uv's, accelerate's and the shell's own words are not; `bash -c` is read as a script."""

from __future__ import annotations

import pytest

from divclip.engines.launch import parse_launch
from divclip.sanity import build_report
from divclip.sanity.config import read_config
from divclip.sanity.launchers import engine_words

V = "actor_rollout_ref.actor."


def _values(script: str) -> dict:
    return read_config(script.encode(), name="run.sh").values


@pytest.mark.parametrize(
    "script, values",
    [
        (
            f"torchrun --nproc_per_node 8 --standalone -m verl.trainer.main_ppo {V}clip_ratio_high=0.28\n",
            {f"{V}clip_ratio_high": 0.28},
        ),
        (
            f"nohup python3 -u -m verl.trainer.main_ppo {V}clip_ratio_high=0.28 > log.txt 2>&1 &\n",
            {f"{V}clip_ratio_high": 0.28},
        ),
        (
            'ray job submit --address=http://127.0.0.1:8265 --runtime-env-json=\'{"working_dir": "/x"}\' '
            "-- python3 -m openrlhf.cli.train_ppo_ray --actor.eps_clip 0.3\n",
            {"--actor.eps_clip": 0.3},
        ),
        ("uv run --with vllm --python 3.11 python3 train.py --eps-clip 0.3\n", {"--eps-clip": 0.3}),
        ("accelerate launch --num_processes 8 train_grpo.py --epsilon 0.3\n", {"--epsilon": 0.3}),
        (f"bash -c 'python3 -m verl.trainer.main_ppo {V}clip_ratio_high=0.28'\n", {f"{V}clip_ratio_high": 0.28}),
        (
            'DEVICE=${DEVICE:-gpu}\nif [ "$DEVICE" != "gpu" ]; then\n  echo "only gpu=1 works" >&2\n  exit 1\nfi\n'
            f"python3 -m verl.trainer.main_ppo {V}clip_ratio_high=0.28\n",
            {"DEVICE": "gpu", f"{V}clip_ratio_high": 0.28},  # capitals: read as the environment (not judged)
        ),
    ],
)
def test_only_the_engines_words_are_settings(script, values):
    assert _values(script) == values


def test_a_lowercase_shell_variable_is_no_setting_and_an_environment_variable_is():
    script = (
        "clip_low=${ACTOR_CLIP_RATIO_LOW:-0.2}\nexport VERL_USE_EXTERNAL_MODULES=divclip.trainer.integrations.verl\n"
        f"python3 -m verl.trainer.main_ppo {V}clip_ratio_low=$clip_low {V}clip_ratio_high=0.28\n"
    )
    assert _values(script) == {
        "VERL_USE_EXTERNAL_MODULES": "divclip.trainer.integrations.verl",
        f"{V}clip_ratio_low": 0.2,
        f"{V}clip_ratio_high": 0.28,
    }
    report = build_report(script.encode(), config_name="run.sh")
    assert not [w for w in report["warnings"] if w["code"] == "unknown_key"]


def test_an_override_list_without_a_launcher_is_read_whole():
    assert _values(f"{V}clip_ratio_high=0.28 data.train_batch_size=256\n") == {
        f"{V}clip_ratio_high": 0.28,
        "data.train_batch_size": 256,
    }


def test_the_launch_reader_skips_the_launchers_flags_too():
    script = "ray job submit --address=http://x:8265 -- python3 -m openrlhf.cli.train_ppo_ray --actor.eps_clip 0.3\n"
    assert parse_launch(script) == {"--actor.eps_clip": "0.3"}


def test_engine_words_names_what_it_skipped():
    launch = engine_words(["torchrun", "--nproc_per_node", "8", "-m", "verl.trainer.main_ppo", "a.b=1"])
    assert (launch.args, launch.skipped, launch.entry) == (
        ["a.b=1"],
        ["torchrun", "--nproc_per_node", "8", "-m", "verl.trainer.main_ppo"],
        True,
    )
    assert engine_words(["echo", "epsilon=0.9"]).args == [] and engine_words(["A=1"]).env == ["A=1"]
