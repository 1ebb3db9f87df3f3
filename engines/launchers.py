"""Which words of one shell command reach the training engine: the arguments after its entry point.

A launch script runs the engine behind a launcher, and the launcher's own flags are not the engine's settings:
`torchrun --nproc_per_node 8 -m verl.trainer.main_ppo a.b=1` passes `a.b=1` only, `python3 -u -m pkg.mod`,
`uv run --with x python3 train.py`, `ray job submit --address A -- python3 -m ...`, `accelerate launch
--num_processes 8 train.py`, `deepspeed --num_gpus 8 train.py` the same; `nohup`, `env`, `exec`, `time` wrap a
command; `bash -c '...'` runs a script of its own (read like the file). Shell keywords (`if`, `then`, `do`, `{`)
lead into the command after them; the arguments of shell builtins and utilities (`[`, `echo`, `exit`, `mkdir`,
`cat`, `ray start`, ...) are never settings. A wrapper with options of its own (`srun --nodes=1 -w "$node"
python3 ...`, `mpirun -np 8 ...`) hands over at the first interpreter or launcher after it. A command with no
recognised launcher (an override list, `./train.sh --x 1`) passes all its words, as before. A program the script
holds in a variable that only running it gives (`"$PYTHON_BIN" -m pkg.mod`, PYTHON_BIN set by `$(...)`) is an
interpreter where `-m MODULE` follows it: only Python takes a module that way.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

SHELL_COMMANDS = frozenset(
    ": [ [[ test echo printf exit return set unset cd pushd popd mkdir rm rmdir cp mv ln cat tee touch chmod chown "
    "source . wait sleep trap shift true false kill pkill ulimit umask read eval ls find grep egrep sed awk cut tr "
    "head tail sort uniq wc xargs date hostname whoami nvidia-smi pip pip3 git wget curl tar unzip du df free "
    "basename dirname realpath readlink which command type alias hash shopt getopts let case esac fi done "
    "function break continue logger mktemp seq yes for select conda scontrol sbatch squeue module".split()
)
"""Commands whose arguments are never an engine's settings."""
KEYWORD_PREFIXES = frozenset("if elif then else do while until ! { } time".split())  # lead into a command
WRAPPERS = frozenset("nohup env exec sudo stdbuf numactl taskset nice ionice srun mpirun setsid".split())
_INTERPRETER = re.compile(r"^python(\d+(\.\d+)*)?$")
_DISTRIBUTED = frozenset(("torchrun", "deepspeed"))
_INTERPRETER_VALUE_OPTIONS = frozenset(("-X", "-W", "-c"))
_UV_VALUE_OPTIONS = frozenset(
    "--with --python -p --project --directory --env-file --group --extra --package --index-url --from".split()
)
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_C_OPTION = re.compile(r"^-[a-z]*c[a-z]*$")  # -c alone or among bash's one-letter options (-lc, -ec, -xc)
_UNRESOLVED_PROGRAM = re.compile(r"^\$(\{?[A-Za-z_]\w*\}?|\(.*\))$")  # $PY, ${PY}, $(command -v python3), as written


NOT_RL_ENTRIES = {
    "verl.trainer.sft_trainer": "verl's SFT trainer",
    "verl.trainer.sft_trainer_ray": "verl's SFT trainer (on Ray)",
    "verl.trainer.fsdp_sft_trainer": "verl's FSDP SFT trainer (before verl 0.9)",
    "verl.trainer.main_eval": "verl's offline evaluation",
    "verl.trainer.main_generation": "verl's generation (before verl 0.9)",
    "verl.trainer.main_generation_server": "verl's generation server",
    "skyrl.train.main_sft": "SkyRL's SFT trainer",
    "skyrl.train.entrypoints.main_generate": "SkyRL's evaluation-only entry point",
    "examples.train.callbacks.main_sft_with_callbacks": "SkyRL's SFT trainer (its callbacks example)",
    "examples.train.rlm.main_rlm_eval": "SkyRL's RLM evaluation",
    "examples.train_integrations.harbor.entrypoints.main_harbor_generate": "SkyRL's Harbor rollout generation",
    "openrlhf.cli.train_sft": "OpenRLHF's SFT trainer",
    "openrlhf.cli.train_rm": "OpenRLHF's reward-model trainer",
    "openrlhf.cli.train_dpo": "OpenRLHF's DPO trainer",
    "openrlhf.cli.train_kto": "OpenRLHF's KTO trainer (before 0.11)",
    "openrlhf.cli.train_prm": "OpenRLHF's process-reward-model trainer (before 0.11)",
    "openrlhf.cli.serve_rm": "OpenRLHF's reward-model server",
}
"""Entry points of the engines (verl 0.9.1 and its 0.8 examples, SkyRL 0.3.0 and its examples, OpenRLHF 0.11) that
train or run no policy-gradient loss: a launch of one has no clip to check (`divclip.sanity.settings`)."""


@dataclass
class Launch:
    """The words of a command that reach the engine: `env` (NAME=value before the command), `args` (after the
    entry point), the launcher's own `skipped` words, and `script` (the text of `bash -c`)."""

    env: list
    args: list
    skipped: list
    script: str | None = None
    entry: bool = False  # an interpreter or launcher was found: `args` are an entry point's arguments


def engine_words(words: list[str]) -> Launch:
    """Split one expanded command into what reaches the engine and what the launcher or the shell keeps."""
    env, skipped, i, n = [], [], 0, len(words)
    while i < n:
        word = words[i]
        base = word.rsplit("/", 1)[-1]
        if _ASSIGN.match(word):
            env.append(word)
            i += 1
        elif base in WRAPPERS and (k := _handover(words, i + 1)) is not None:  # srun -w "$node" python3 ...
            skipped += words[i:k]
            i = k
        elif base in KEYWORD_PREFIXES or base in WRAPPERS:
            skipped.append(word)
            i += 1
            while base in WRAPPERS and i < n and words[i].startswith("-"):  # nohup/srun/env options
                skipped.append(words[i])
                i += 1
        elif base in SHELL_COMMANDS:
            return Launch(env, [], skipped + words[i:])
        elif base in ("bash", "sh") and (c := next((w for w in words[i + 1 : i + 3] if _C_OPTION.match(w)), None)):
            k = words.index(c, i) + 1  # bash -c, bash -lc, bash -ec, sh -xc: the script is the next word
            return Launch(env, [], skipped + words[i:k], words[k] if k < n else "")
        elif base == "uv" and words[i + 1 : i + 2] == ["run"]:
            i = _skip_options(words, i + 2, skipped + words[i : i + 2], _UV_VALUE_OPTIONS, skipped)
            if skipped[-1:] == ["-m"] and i < n:  # uv run ... -m MODULE: the module's arguments follow
                return Launch(env, words[i + 1 :], skipped + words[i : i + 1], entry=True)
        elif base == "ray" and words[i + 1 : i + 3] == ["job", "submit"]:
            if "--" not in words[i:]:
                return Launch(env, [], skipped + words[i:])
            k = words.index("--", i)
            skipped += words[i : k + 1]
            i = k + 1
        elif base == "ray":  # ray start / stop / status: the cluster's own commands, no engine settings
            return Launch(env, [], skipped + words[i:])
        elif _INTERPRETER.match(base) or base in _DISTRIBUTED or (base == "accelerate" and i + 1 < n):
            return _entry_point(words, i, env, skipped)
        elif _UNRESOLVED_PROGRAM.match(word) and words[i + 1 : i + 2] in (["-m"], ["--module"]) and i + 2 < n:
            return Launch(env, words[i + 3 :], skipped + words[i : i + 3], entry=True)  # "$PYTHON_BIN" -m pkg.mod
        else:  # an override list or an unknown program: every word, as before
            return Launch(env, words[i:], skipped)
    return Launch(env, [], skipped)


def _handover(words, i) -> int | None:
    """The index of the first interpreter or launcher in `words[i:]` (what a wrapper with options runs), or None."""
    for k in range(i, len(words)):
        base = words[k].rsplit("/", 1)[-1]
        if _INTERPRETER.match(base) or base in _DISTRIBUTED or base in ("bash", "sh", "uv", "ray", "accelerate"):
            return k
    return None


def _skip_options(words, i, head, value_options, skipped) -> int:
    skipped[:] = head
    while i < len(words) and words[i].startswith("-"):
        skipped.append(words[i])
        if words[i] in ("-m", "--module", "--"):
            return i + 1
        takes_value = words[i] in value_options and i + 1 < len(words)
        i += 2 if takes_value else 1
        if takes_value:
            skipped.append(words[i - 1])
    return i


def _entry_point(words, i, env, skipped) -> Launch:
    """After an interpreter or a distributed launcher: its options, then `-m MODULE` or a script, then the
    engine's arguments."""
    n, start = len(words), i
    interpreter = _INTERPRETER.match(words[i].rsplit("/", 1)[-1]) is not None
    i += 2 if words[i].rsplit("/", 1)[-1] == "accelerate" and words[i + 1] == "launch" else 1
    while i < n:
        word = words[i]
        if word in ("-m", "--module") and i + 1 < n:
            return Launch(env, words[i + 2 :], skipped + words[start : i + 2], entry=True)
        if not word.startswith("-"):
            if interpreter or word.endswith(".py") or _INTERPRETER.match(word.rsplit("/", 1)[-1]):
                if _INTERPRETER.match(word.rsplit("/", 1)[-1]):  # accelerate launch python3 ...: go on
                    return _entry_point(words, i, env, skipped + words[start:i])
                return Launch(env, words[i + 1 :], skipped + words[start : i + 1], entry=True)
            i += 1  # a launcher option's value (`--nproc_per_node 8`)
            continue
        if interpreter and word in _INTERPRETER_VALUE_OPTIONS:
            i += 1
        i += 1
    return Launch(env, [], skipped + words[start:])


# --------------------------------------------------------------------------------------------- task files
SKYPILOT_KEYS = frozenset(("resources", "setup", "num_nodes", "envs", "workdir", "file_mounts", "secrets", "name"))


def task_script(tree) -> str | None:
    """The launch script inside a launcher's task YAML, or None when `tree` is not one.

    A SkyPilot task (`run:` text beside `resources:`, `setup:`, `num_nodes:`, `envs:` ...) runs its `run:` block
    with `envs:` in the environment: the script is those variables (as defaults the block can override, not
    exported values) followed by the block, so the shell reader finds the command in it like in any script."""
    if not isinstance(tree, dict) or not isinstance(tree.get("run"), str) or not SKYPILOT_KEYS & set(tree):
        return None
    envs = tree.get("envs") if isinstance(tree.get("envs"), dict) else {}
    lines = [
        f"export {k}={shlex.quote(str(v).lower() if isinstance(v, bool) else str(v))}"
        for k, v in envs.items()
        if isinstance(k, str) and re.fullmatch(r"[A-Za-z_]\w*", k) and v is not None and not isinstance(v, dict)
    ]
    return "\n".join([*lines, tree["run"]])
