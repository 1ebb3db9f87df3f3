"""Launch scripts as bash runs them (issue 31 item 1): `case` on environment variables, functions reached where
called, `(( ))` and `for` loops, wrappers with options of their own, several launches each reported, and values
only running the script knows named with where they come from (the engine's default goes on, said).

The reference for what a launch receives is bash itself: each script is run by /usr/bin/bash with the entry points
(`python3`, `srun`, ...) replaced by a function that prints its arguments, in an empty environment, and the words
divclip reads must be the ones bash passed. divclip itself never runs anything.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from divclip.engines.config import read_config
from divclip.engines.shellwords import expand_script
from divclip.sanity import build_report
from divclip.sanity.text import format_report

V = "actor_rollout_ref.actor."
BASH = shutil.which("bash")
# bash prints each command's arguments, NUL-separated, one command per line, instead of running it
_STUBS = "".join(
    f'{name}() {{ printf "%s\\0" {name} "$@"; printf "\\n"; }}\n' for name in ("python3", "srun", "nproc", "echo")
)


def _bash_launches(script: str) -> list[list[str]]:
    """The argument lists bash hands to `python3` (and the stubbed commands) running `script`."""
    done = subprocess.run(
        [BASH, "--noprofile", "--norc", "-c", _STUBS + script],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    return [line.split("\0")[:-1] for line in done.stdout.splitlines() if line.startswith("python3\0")]


def _divclip_launches(script: str) -> list[list[str]]:
    return [words for _, words, _ in expand_script(script, "t.sh").commands if words[:1] == ["python3"]]


CASE = """DEVICE=${DEVICE:-gpu}
case "$DEVICE" in
  npu|ascend) CLIP_HIGH=0.4 ;;
  gpu)
    CLIP_HIGH=0.28
    ;;
  *) CLIP_HIGH=9 ;;
esac
python3 -m verl.trainer.main_ppo actor_rollout_ref.actor.clip_ratio_high=$CLIP_HIGH
"""
CASE_GLOB = """MODEL=Qwen/Qwen2.5-7B
case $MODEL in
  (*0.5B*) N=16 ;;
  *7B|*14B) N=8 ;&
  *) N=4 ;;
esac
python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.n=$N
"""
FUNCTIONS = """run() {
    local name=$1
    shift
    python3 -m verl.trainer.main_ppo trainer.experiment_name="$name" "$@"
}
function twice {
  run "$1-a" x.y=1
  run "$1-b" x.y=2 "${@:2}"
}
twice exp actor_rollout_ref.actor.clip_ratio_high=0.28
"""
ARITH = """n=3
for ((i = 1; i <= n; i++)); do
  echo $i
done
for s in 0.2 0.3; do echo $s; done
max_len=$((1024 * 2))
python3 -m verl.trainer.main_ppo data.max_response_length=$max_len
"""


@pytest.mark.skipif(BASH is None, reason="bash is the reference")
@pytest.mark.parametrize("script", [CASE, CASE_GLOB, FUNCTIONS, ARITH], ids=["case", "case_glob", "functions", "arith"])
def test_the_launches_are_the_words_bash_passes(script):
    expected = _bash_launches(script)
    if script is FUNCTIONS:  # ${@:2} is a string operation divclip leaves as written (said): not compared
        expected[-1] = expected[-1][:-1]
        got = _divclip_launches(script)
        assert got[-1][-1] == "${@:2}"
        got[-1] = got[-1][:-1]
        assert got == expected
        return
    assert expected and _divclip_launches(script) == expected


def test_a_case_is_decided_with_the_scripts_defaults_and_said():
    raw = read_config(CASE.encode(), name="run.sh")
    assert raw.values[f"{V}clip_ratio_high"] == 0.28
    assert any("`case` on 'gpu'" in n and "`gpu)`" in n and "only it is read" in n for n in raw.notes)
    npu = read_config(CASE.replace("${DEVICE:-gpu}", "${DEVICE:-npu}").encode(), name="run.sh")
    assert npu.values[f"{V}clip_ratio_high"] == 0.4


def test_a_case_on_what_only_running_knows_reads_every_branch_and_says_so():
    script = CASE.replace("DEVICE=${DEVICE:-gpu}\n", "").replace('"$DEVICE"', '"$(hostname)"')
    raw = read_config(script.encode(), name="run.sh")
    assert raw.values[f"{V}clip_ratio_high"] == 9  # every branch read: the last assignment stands
    assert any("depends on what only running the script knows" in n and "every branch" in n for n in raw.notes)


def test_a_function_is_read_where_it_is_called_with_its_arguments():
    raw = read_config(FUNCTIONS.encode(), name="run.sh")
    assert [launch.values.get("x.y") for launch in raw.launches] == [1, 2]
    assert raw.launches[0].values["trainer.experiment_name"] == "exp-a"
    # listed at the line of the call, the command's own line said
    assert [launch.line for launch in raw.launches] == [10, 10] and "(in a function, line 4)" in raw.launches[0].command
    assert sum("is called: its body is read here" in n for n in raw.notes) == 3  # twice, then run twice


def test_a_function_never_called_is_named_not_read():
    script = "train() {\n  python3 -m verl.trainer.main_ppo actor_rollout_ref.actor.clip_ratio_high=0.28\n}\n"
    script += f"python3 -m verl.trainer.main_ppo {V}clip_ratio_low=0.2\n"
    report = build_report(script.encode(), config_name="run.sh")
    assert report["config"]["keys"][f"{V}clip_ratio_high"]["origin"] == "default"
    [w] = [w for w in report["warnings"] if w["code"] == "setting_not_read"]
    assert "the function train (lines 1-3) is never called" in w["message"]


def test_a_wrapper_with_options_hands_over_to_the_entry_point():
    script = (
        'srun --overlap --nodes=1 --ntasks=1 -w "$head_node" python -m verl.trainer.main_ppo '
        f"{V}clip_ratio_high=0.28\nray start --head --port=6379 --block\n"
        "uv run --isolated --extra fsdp -m skyrl.train.entrypoints.main_base trainer.algorithm.eps_clip_high=0.3\n"
    )
    assert read_config(script.encode(), name="run.sh").values == {
        f"{V}clip_ratio_high": 0.28,
        "trainer.algorithm.eps_clip_high": 0.3,
    }


def test_several_launches_are_each_reported():
    script = (
        'python3 examples/data_preprocess/gsm8k.py --local_save_dir "$HOME/data"\n'
        f"python3 -m verl.trainer.main_ppo {V}clip_ratio_high=0.2 actor_rollout_ref.rollout.n=8\n"
        f"python3 -m verl.trainer.main_ppo {V}clip_ratio_high=0.28 actor_rollout_ref.rollout.n=16\n"
    )
    report = build_report(script.encode(), config_name="run.sh")
    rows = report["launches"]
    got = [(r["line"], r["read"], r["summary"]) for r in rows]
    assert got == [(1, False, False), (2, True, False), (3, True, True)]
    assert [(r["budget_high"], r["group_size"]) for r in rows[1:]] == [(0.2, 8), (0.28, 16)]
    assert "helper or data script" in rows[0]["why"]
    # the summary is the last run alone: the data script's flag is not one of its settings
    assert report["config"]["kind"] == "overrides" and report["config"]["group_size"] == 16
    assert "--local_save_dir" not in report["config"]["keys"]
    [w] = [w for w in report["warnings"] if w["code"] == "several_launches"]
    assert "lines 2, 3" in w["message"]
    text = format_report(report)
    section = text.split("Launches (3, in the order the script runs them):")[1].split("\n\n")[0]
    assert section.count("\n  line ") == 3 and "0.28" in section and "<- the summary above" in section


def test_one_launch_gives_no_launches_section():
    report = build_report(f"python3 -m verl.trainer.main_ppo {V}clip_ratio_high=0.28\n".encode(), config_name="r.sh")
    assert report["launches"] == [] and "Launches" not in format_report(report)


@pytest.mark.parametrize(
    "value, origin",
    [
        ("$CLIP_LOW", "$CLIP_LOW is not set in the script: it comes from the environment of the run"),
        ("$(python3 -c 'print(0.1)')", "is the output of a command: only running the script gives it"),
        ("${CLIP_LOW%x}", "is a string operation on $CLIP_LOW"),
    ],
)
def test_an_unresolved_value_is_named_and_the_engine_default_goes_on(value, origin):
    script = f"python3 -m verl.trainer.main_ppo {V}clip_ratio_low={value} {V}clip_ratio_high=0.28 trainer.nnodes=$N\n"
    report = build_report(script.encode(), config_name="run.sh")
    key = f"{V}clip_ratio_low"
    assert report["config"]["keys"][key] == {"value": 0.2, "origin": "default"}  # verl 0.9.1 actor.yaml
    [w] = [w for w in report["warnings"] if w["code"] == "setting_not_read"]
    assert w["key"] == key and origin in w["message"] and "verl's default 0.2" in w["message"]
    assert "line 1" in w["message"]
    # a setting the loss does not read keeps its text, and is named in one note
    assert any("trainer.nnodes=$N" in n for n in report["notes"])


def test_an_override_list_without_a_launch_still_types_the_value_as_written():
    from divclip.sanity import ConfigError

    with pytest.raises(ConfigError, match="clip_ratio_low must be a finite number"):
        build_report(f"{V}clip_ratio_low=$CLIP\n".encode(), config_name="c.sh")


SKYPILOT = """resources:
  accelerators: H100:8
num_nodes: 2
envs:
  CLIP_HIGH: 0.28
  LOGGER: wandb
  WANDB_API_KEY: null
setup: |
  pip install verl
run: |
  if [ "$SKYPILOT_NODE_RANK" = "0" ]; then
    python3 -m verl.trainer.main_ppo \\
      actor_rollout_ref.actor.clip_ratio_high=$CLIP_HIGH \\
      trainer.logger=$LOGGER
  else
    ray start --address "$HEAD_IP:6379"
  fi
"""


def test_a_skypilot_task_is_read_through_its_run_block_with_its_envs():
    raw = read_config(SKYPILOT.encode(), name="task.yaml")
    assert raw.kind == "overrides"
    assert raw.values[f"{V}clip_ratio_high"] == 0.28 and raw.values["trainer.logger"] == "wandb"
    assert "setup" not in raw.values and "resources.accelerators" not in raw.values
    assert raw.notes[0].startswith("a SkyPilot task: its run: block is read as the launch script")
    report = build_report(SKYPILOT.encode(), config_name="task.yaml")
    assert report["config"]["framework"] == "verl" and report["config"]["budget_high"] == 0.28


def test_a_yaml_without_a_launcher_task_is_a_config():
    text = "run: fast\nactor_rollout_ref:\n  actor:\n    clip_ratio_high: 0.28\n"
    assert read_config(text.encode(), name="c.yaml").values == {"run": "fast", f"{V}clip_ratio_high": 0.28}


def test_a_rollout_correction_is_named_beside_the_clip_with_its_keys():
    from divclip.engines import read_correction

    key = "algorithm.rollout_correction.rollout_is"
    script = f"python3 -m verl.trainer.main_ppo {key}=token {V}clip_ratio_high=0.28\n"
    report = build_report(script.encode(), config_name="run.sh")
    found = read_correction("verl", {key: "token"})
    assert found is not None and report["config"]["correction"] == str(found)
    [note] = [n for n in report["notes"] if n.startswith("beside the clip: the rollout correction")]
    assert f"{key} = 'token'" in note and str(found) in note


def test_function_calls_are_bounded_before_they_multiply():
    from divclip.engines.shellwords import MAX_WORDS
    from divclip.sanity import ConfigError

    lines = ["f0() { :; }"] + [f"f{i}() {{ {'; '.join([f'f{i - 1}'] * 10)}; }}" for i in range(1, 8)] + ["f7"]
    with pytest.raises(ConfigError, match=f"runs more than {MAX_WORDS} commands through its function calls"):
        expand_script("\n".join(lines) + "\n", "t.sh")
