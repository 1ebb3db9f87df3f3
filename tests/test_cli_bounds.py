"""Every size flag of `divclip toy`, `train`, `realloc` and `check` has a documented upper bound: beyond it the
command exits 2 with one line naming the flag or field, before any work. Also absurd values that used to slip
through (a subnormal temperature, --out at a file or /dev/null, a task file nested 100 000 deep, ±1e308
advantages, a huge δ, an ε far off scale).

The whole corpus runs in process through `divclip.cli.main` (the shared parser and error path); three
representative cases also run as a real subprocess, checked for exit 2 and no traceback.
"""

import json
import subprocess
import sys

import pytest

from divclip.cli import main


def run_main(capsys, argv):
    """(exit status, stderr) of `divclip ARGV`, whether argparse (SystemExit) or a subcommand refused."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bounds")
    (d / "afile").write_text("x")
    (d / "deep.jsonl").write_text('{"prompt": ' + "[" * 100_000 + "]" * 100_000 + ', "answer": 1}\n')
    (d / "long.jsonl").write_text(json.dumps({"prompt": "1" * 20_000_000, "answer": 1}) + "\n")
    return d


K = 10_000  # actions: over realloc's limit of 256
FLAG_CASES = [
    # toy
    (["toy", "--seeds", "1000000000"], "--seeds must be an integer in [1, 4096], got 1000000000"),
    (["toy", "--steps", "1000000000000"], "steps must be an integer in [1, 100000], got 1000000000000"),
    (["toy", "--group-size", "1000000000"], "group_size must be an integer in [2, 4096]"),
    (["toy", "--prompts-per-step", "100000"], "prompts_per_step must be an integer in [1, 4096]"),
    (["toy", "--ppo-epochs", "1000000000"], "ppo_epochs must be an integer in [1, 100], got 1000000000"),
    (["toy", "--env", "bandit", "--env-arg", "arms=1000000000"], "arms must be an integer in [2, 65536]"),
    (
        ["toy", "--env-arg", "prompts=60000", "--env-arg", "answers=60000"],
        "prompts × answers must be at most 4194304, got 60000 × 60000",
    ),
    (["toy", "--env-arg", "logit_std=" + "[" * 100_000], "--env-arg logit_std: the value is 100000 characters"),
    (["toy", "--seeds", "4096", "--steps", "100000"], "this arena is too large: (methods × seeds) × steps"),
    # train
    (["train", "--max-new-tokens", "1000000000"], "TrainerConfig.max_new_tokens must be an integer in [1, 32768]"),
    (["train", "--ppo-epochs", "1000000000"], "TrainerConfig.ppo_epochs must be an integer in [1, 100]"),
    (["train", "--steps", "1000000000000"], "TrainerConfig.steps must be an integer in [1, 1000000]"),
    (["train", "--group-size", "1000000000"], "TrainerConfig.group_size must be an integer in [2, 1024]"),
    (
        ["train", "--prompts-per-step", "4096", "--group-size", "1024"],
        "prompts_per_step must be such that prompts_per_step * group_size <= 65536",
    ),
    (["train", "--seed", str(2**40)], "TrainerConfig.seed must be an integer in [0, 4294967295]"),
    (["train", "--threads", "1000000"], "TrainerConfig.threads must be an integer in [0, 256], got 1000000"),
    (["train", "--temperature", "1e-320"], "TrainerConfig.temperature must be a number in [0.001, 1000], got 1e-320"),
    (["train", "--output-dir", "/dev/null"], "TrainerConfig.output_dir must be None or a directory path (it exists"),
    # realloc
    (
        ["realloc", "--probs", ",".join([f"{1 / K}"] * K), "--adv=" + ",".join(["1"] * K), "--measure", "kl3"],
        f"--probs has {K} actions, over the limit of 256",
    ),
    (
        ["realloc", "--probs", "0.5,0.5", "--adv=1e308,-1e308", "--measure", "kl3"],
        "--adv[0] = 1e+308: advantages must lie in [-1e+06, 1e+06]",
    ),
    (
        ["realloc", "--probs", "0.5,0.5", "--adv=1,-1", "--measure", "kl3", "--epochs", "1000000000"],
        "epochs must be an integer in [1, 10000]",
    ),
    (
        ["realloc", "--probs", "0.5,0.5", "--adv=1,-1", "--measure", "kl3", "--lr", "1e308"],
        "lr must be a number in (0, 1000]",
    ),
    # check
    (["check", "--max-bytes", "1e30"], "--max-bytes must be an integer, got '1e30'"),
    (["check", "--max-bytes", str(10**30)], "--max-bytes must be an integer in [1, 1073741824]"),
    (["check", "--num-processes", str(10**12)], "--num-processes must be an integer in [1, 1048576]"),
    (["check", "--seed", "-1"], "--seed must be an integer in [0, 4294967295], got '-1'"),
]


NO_OUT = "/proc/divclip-no-such-dir"  # --out for toy cases: never creatable, and checked after every flag


@pytest.mark.parametrize("argv, needle", FLAG_CASES, ids=[" ".join(a)[:60] for a, _ in FLAG_CASES])
def test_size_flags_beyond_their_bound_exit_2(capsys, argv, needle):
    code, out, err = run_main(capsys, argv + (["--out", NO_OUT] if argv[0] == "toy" else []))
    assert code == 2 and out == "" and err.startswith("divclip: error: ") and err.count("\n") == 1, err
    assert needle in err


def test_toy_out_is_checked_before_the_run(capsys, files, tmp_path):
    for target in (files / "afile", "/dev/null"):
        code, _, err = run_main(capsys, ["toy", "--out", str(target), "--steps", "2", "--seeds", "1"])
        assert code == 2 and f"--out '{target}' exists and is not a directory" in err
        assert "[toy" not in err  # no step ran
    # A bad flag creates nothing, not even the --out directory.
    code, _, _ = run_main(capsys, ["toy", "--out", str(tmp_path / "new"), "--steps", "0"])
    assert code == 2 and not (tmp_path / "new").exists()


@pytest.mark.parametrize(
    "name, needle",
    [
        ("deep.jsonl", "line 1 is nested too deeply to read"),
        ("long.jsonl", "line 1 has a prompt or answer of 20000000 characters, over the 65536-character limit"),
    ],
)
def test_train_task_files_that_would_exhaust_memory(capsys, files, name, needle):
    code, _, err = run_main(capsys, ["train", "--task", str(files / name), "--no-progress"])
    assert code == 2 and needle in err


def test_bad_delta_is_reported_as_a_delta_or_works(capsys):
    """A huge δ is a valid, absurdly loose budget: the interval is computed (no NaN bounds, no message
    blaming log_prob)."""
    code, out, err = run_main(
        capsys, ["realloc", "--probs", "0.5,0.5", "--adv=1,-1", "--measure", "kl3", "--delta", "1e308", "--json"]
    )
    assert code == 0 and err == ""
    feasible = json.loads(out)["feasible"]
    assert feasible["lo"] == [0.0, 0.0] and all(h > 1e300 for h in feasible["hi"])


def test_check_warns_about_an_eps_far_off_scale(capsys):
    code, out, _ = run_main(capsys, ["check", "actor_rollout_ref.actor.clip_ratio=0.2", "--eps-low", "1e308", "--json"])
    warnings = json.loads(out)["warnings"]
    assert code == 0
    assert any(w["key"] == "--eps-low" and "ε_low = 1e+308" in w["message"] for w in warnings)
    assert any(w["key"] == "--eps-low" and "never binds" in w["message"] for w in warnings)


REPRESENTATIVE = [
    pytest.param(["train", "--temperature", "1e-320"], id="train"),
    pytest.param(["toy", "--seeds", "1000000000", "--out", "unused"], id="toy", marks=pytest.mark.slow),
    pytest.param(
        ["realloc", "--probs", "0.5,0.5", "--adv=1e308,-1e308", "--measure", "kl3"],
        id="realloc",
        marks=pytest.mark.slow,
    ),
]


@pytest.mark.parametrize("argv", REPRESENTATIVE)
def test_representative_cases_in_a_real_process(argv, tmp_path):
    """Each case also runs in process above; here the real interpreter's exit status and stderr are checked (one
    representative in the fast loop: each process imports torch, ~3 s of CPU)."""
    run = subprocess.run(
        [sys.executable, "-m", "divclip.cli", *argv], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert run.returncode == 2 and run.stdout == "" and "Traceback" not in run.stderr
    assert run.stderr.startswith("divclip: error: ") and run.stderr.count("\n") == 1
    assert not list(tmp_path.iterdir())  # nothing written


def test_the_help_documents_each_bound_from_the_code(capsys):
    from divclip.toy_envs import arena
    from divclip.toy_envs.categorical import MAX_ANSWERS
    from divclip.trainer.config import INT_RANGES

    def help_of(cmd):
        with pytest.raises(SystemExit):
            main([cmd, "--help"])
        return " ".join(capsys.readouterr().out.split())

    toy = help_of("toy")
    for text in (
        f"at most {arena.MAX_SEEDS}",
        f"at most {arena.MAX_STEPS}",
        f"in [2, {arena.MAX_GROUP_SIZE}]",
        f"at most {arena.MAX_PROMPTS_PER_STEP}",
        f"at most {arena.MAX_PPO_EPOCHS}",
        f"at most {MAX_ANSWERS}",
    ):
        assert text in toy, text
    train = help_of("train")
    for field in ("steps", "group_size", "max_new_tokens", "ppo_epochs", "threads", "seed"):
        low, high = INT_RANGES[field]
        assert f"(in [{low}, {high}])" in train, field
    assert "(in [0.001, 1000])" in train
    assert "at most 1073741824" in help_of("check")
