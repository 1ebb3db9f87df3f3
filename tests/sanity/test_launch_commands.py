"""The launch command behind its launcher (issue 31 item 1): only the words after the engine's entry point are
settings; torchrun's, ray's, uv's, accelerate's and the shell's own words are not; `bash -c` is read as a script."""

from __future__ import annotations

import pytest

from divclip.engines.config import read_config
from divclip.engines.launch import parse_launch
from divclip.engines.launchers import engine_words
from divclip.sanity import build_report
from divclip.sanity.errors import SanityInputError

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
        (  # bash's one-letter options joined (-lc), behind setsid (SkyRL's thunder_agent run_stages.sh)
            f"setsid bash -lc 'python3 -m verl.trainer.main_ppo {V}clip_ratio_high=0.28' &\n",
            {f"{V}clip_ratio_high": 0.28},
        ),
        (  # OpenRLHF's idiom: the command read from a heredoc, run by deepspeed --module $training_commands
            "eps=0.28\nread -r -d '' training_commands <<EOF\nopenrlhf.cli.train_ppo_ray \\\n"
            "   --actor.eps_clip_low_high 0.2 $eps \\\n   --train.batch_size 128\nEOF\n"
            'if [[ ${1} != "slurm" ]]; then\n    deepspeed --module $training_commands\nfi\n',
            {"--actor.eps_clip_low_high": [0.2, 0.28], "--train.batch_size": 128},
        ),
        (  # another program's word with '=' that is no config key: its own, not a refusal of the script
            f"mytool out.dir=/x 'odd key=2' ~/y\npython3 -m verl.trainer.main_ppo {V}clip_ratio_high=0.28\n",
            {"out.dir": "/x", f"{V}clip_ratio_high": 0.28},
        ),
        (
            'DEVICE=${DEVICE:-gpu}\nif [ "$DEVICE" != "gpu" ]; then\n  echo "only gpu=1 works" >&2\n  exit 1\nfi\n'
            f"python3 -m verl.trainer.main_ppo {V}clip_ratio_high=0.28\n",
            {"DEVICE": "gpu", f"{V}clip_ratio_high": 0.28},  # capitals: read as the environment (not judged)
        ),
    ],
)
def test_only_the_engines_words_are_settings(script, values):
    assert _values(script) == values


def test_a_program_held_in_a_variable_that_runs_a_module_is_the_launch():
    """`"$PYTHON_BIN" -m MODULE` (SkyRL's thunder_agent run_trainer.sh sets PYTHON_BIN from a function's output):
    only Python takes `-m MODULE`, so the launch and its entry point are found, and the entry's own keys known."""
    script = (
        'PYTHON_BIN="$(command -v python3)"\nENTRY=examples.train.thunder_agent.main_harbor_thunder_agent\n'
        '"$PYTHON_BIN" -m "$ENTRY" trainer.algorithm.eps_clip_high=0.28 max_train_tasks=8 '
        "generator.inference_engine.thunder_agent_mode=tr\n"
    )
    raw = read_config(script.encode(), name="run.sh")
    assert raw.values == {
        "PYTHON_BIN": "$(command -v python3)",  # capitals: the environment (not judged)
        "ENTRY": "examples.train.thunder_agent.main_harbor_thunder_agent",
        "trainer.algorithm.eps_clip_high": 0.28,
        "max_train_tasks": 8,
        "generator.inference_engine.thunder_agent_mode": "tr",
    }
    assert [launch.command for launch in raw.launches] == [
        "$PYTHON_BIN -m examples.train.thunder_agent.main_harbor_thunder_agent"  # as written: a run sets it
    ]
    report = build_report(script.encode(), config_name="run.sh")
    assert report["config"]["framework"] == "skyrl" and report["config"]["budget_high"] == 0.28
    assert not [w for w in report["warnings"] if w["code"] == "unknown_key"]  # the example's own config's keys
    assert f"read from the launch at line 3: {raw.launches[0].command}" in report["notes"]
    # a program that is not one (`$TOOL -x`), or $V without -m, is not taken for a launch
    assert not engine_words(["$TOOL", "-x", "a.b=1"]).entry and not engine_words(["$PY", "train.py"]).entry


def test_the_scripts_own_arguments_are_said_and_not_listed_as_command_words():
    passed = (
        f'set -x\n: "${{D:=/data}}"\nuv run --isolated -m verl.trainer.main_ppo \\\n  {V}clip_ratio_high=0.28 \\\n'
        "  $@\n"
    )
    report = build_report(passed.encode(), config_name="run.sh")
    assert report["config"]["ignored_tokens"] == []  # set -x, `:`, uv's words: not listed in a script
    assert "line 3 passes on the script's own arguments ($@): a setting its caller adds there" in " ".join(
        report["notes"]
    )
    cut = passed.replace(" \\\n  $@", "\n  $@")  # the `\\` missing: bash runs "$@" as a command of its own
    notes = " ".join(build_report(cut.encode(), config_name="run.sh")["notes"])
    assert "line 5 runs the script's own arguments ($@) as a command of its own" in notes
    pasted = build_report(f"python3 -m verl.trainer.main_ppo {V}clip_ratio_high=0.28".encode(), config_name="x.txt")
    assert pasted["config"]["ignored_tokens"] == []  # the launch is said instead
    assert "read from the launch at line 1: python3 -m verl.trainer.main_ppo" in pasted["notes"]
    other = build_report(f"./train.sh {V}clip_ratio_high=0.28 extra".encode(), config_name="x.txt")
    assert other["config"]["ignored_tokens"] == ["./train.sh", "extra"]  # no launch found: the words are listed


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


# ------------------------------------------------------------------------------------------- if / elif / else
IF_SCRIPT = """DEVICE=${{DEVICE:-{device}}}
if [ "$DEVICE" = "npu" ]; then
  python3 -m verl.trainer.main_ppo {V}clip_ratio_high=0.4
elif [ "$DEVICE" == "gpu" ]; then
  python3 -m verl.trainer.main_ppo {V}clip_ratio_high=0.28
else
  python3 -m verl.trainer.main_ppo {V}clip_ratio_high=0.5
fi
"""


@pytest.mark.parametrize("device, high", [("gpu", 0.28), ("npu", 0.4), ("cpu", 0.5)])
def test_an_if_on_the_scripts_own_default_reads_the_branch_bash_takes(device, high):
    script = IF_SCRIPT.format(device=device, V=V)
    assert _values(script)[f"{V}clip_ratio_high"] == high
    notes = build_report(script.encode(), config_name="run.sh")["notes"]
    assert f"line 2: `[ {device} = npu ]` is {str(device == 'npu').lower()} with the script's own values" in " ".join(
        notes
    )


def test_an_if_that_needs_running_the_script_reads_every_branch_and_says_so():
    script = f"if [ -f /data/x ]; then\n  A=1\nfi\npython3 -m verl.trainer.main_ppo {V}clip_ratio_high=0.28\n"
    notes = build_report(script.encode(), config_name="run.sh")["notes"]
    assert any("`[ -f /data/x ]` depends on what only running the script knows" in n for n in notes)


@pytest.mark.parametrize(
    "words, value",
    [
        (["[", "a", "=", "a", "]"], True),
        (["[", "a", "!=", "a", "]"], False),
        (["[[", "a", "==", "b", "]]"], False),
        (["[", "-z", "", "]"], True),
        (["[", "-n", "", "]"], False),
        (["!", "[", "x", "]"], False),
        (["test", "a", "=", "a"], True),
        (["[", "$X", "=", "a", "]"], None),
        (["[", "-f", "file", "]"], None),
        (["grep", "-q", "x", "f"], None),
    ],
)
def test_conditions(words, value):
    from divclip.engines.shellbranches import evaluate

    assert evaluate(words) is value


# ------------------------------------------------------------------------------------- entry points with no RL loss
@pytest.mark.parametrize(
    "script, what",
    [
        (
            "torchrun --nproc_per_node 8 -m verl.trainer.sft_trainer data.train_batch_size=8 model.path=m\n",
            "verl's SFT trainer",
        ),
        (
            "uv run --isolated python -m skyrl.train.main_sft strategy=fsdp model.path=m batch_size=4\n",
            "SkyRL's SFT trainer",
        ),
        (
            "deepspeed --module openrlhf.cli.train_dpo --pretrain m --beta 0.1 --train_batch_size 128\n",
            "OpenRLHF's DPO trainer",
        ),
    ],
)
def test_a_launch_of_an_engines_sft_dpo_or_eval_entry_point_is_refused_by_name(script, what):
    """verl's SFT example was reported as 'vanilla PPO clip, bounds [0.8, 1.2]' (the keys it shares with PPO)."""
    with pytest.raises(SanityInputError, match=rf"launches {what}: \S+ at line 1 runs no policy-gradient loss"):
        build_report(script.encode(), config_name="run.sh")


def test_an_sft_launch_before_the_rl_one_is_listed_and_the_rl_one_read():
    script = (
        "python3 -m verl.trainer.sft_trainer data.train_batch_size=8\n"
        f"python3 -m verl.trainer.main_ppo {V}clip_ratio_high=0.28\n"
    )
    report = build_report(script.encode(), config_name="run.sh")
    assert report["config"]["budget_high"] == 0.28
    first, second = report["launches"]
    assert not first["read"] and "verl's SFT trainer" in first["why"] and second["read"] and second["summary"]


def test_the_installed_engines_have_the_entry_points_named_as_not_rl():
    from divclip.engines.launchers import NOT_RL_ENTRIES
    from divclip.engines.source import installed_file

    installed = [m for m, what in NOT_RL_ENTRIES.items() if "before" not in what and not m.startswith("examples.")]
    assert len(installed) >= 9
    for module in installed:
        package, _, rest = module.partition(".")
        assert installed_file(package, rest.replace(".", "/") + ".py"), module
