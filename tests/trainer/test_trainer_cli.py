"""`divclip train`: a very short tiny-arith run through the CLI, and clear errors before any work."""

import argparse
import json

import pytest

from divclip.cli import main, train
from divclip.cli.train import config_from_args

SHORT = [
    "--steps",
    "2",
    "--sft-steps",
    "3",
    "--eval-size",
    "8",
    "--prompts-per-step",
    "2",
    "--group-size",
    "4",
    "--no-progress",
]


def parse(argv):
    parser = argparse.ArgumentParser(prog="divclip")
    train.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_flags_override_the_preset():
    cfg = config_from_args(parse(["train", "--preset", "tiny-arith", "--method", "atr", "--seed", "4", "--no-resume"]))
    assert (cfg.method, cfg.seed, cfg.resume, cfg.sft_steps) == ("atr", 4, False, 1000)
    assert config_from_args(parse(["train"])).model == "tiny"


@pytest.mark.slow
def test_tiny_arith_smoke_run(capsys, tmp_path):
    code = train.run(
        parse(["train", "--preset", "tiny-arith", "--method", "atr", "--json", "--output-dir", str(tmp_path), *SHORT])
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (out["method"], out["seed"], out["steps"], out["preset"]) == ("atr", 0, 2, "tiny-arith")
    assert 0 <= out["accuracy_before"] <= 1 and 0 <= out["accuracy_after"] <= 1
    assert (tmp_path / "metrics.jsonl").is_file() and (tmp_path / "checkpoints" / "latest").is_file()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--group-size", "1"], "TrainerConfig.group_size must be an integer in [2, 1024]"),
        (["--model", "/no/such/model"], "TrainerConfig.model must be 'tiny' or an existing local Hugging Face"),
        (["--method", "trpo"], "TrainerConfig.method must be one of"),
        (
            ["--preset", "big"],
            "preset must be one of ['tiny-arith', 'tiny-arith-offpolicy', 'tiny-countdown-offpolicy', "
            "'tiny-mult-offpolicy'], got 'big'",
        ),
    ],
)
def test_bad_input_is_a_clear_error(capsys, argv, message):
    assert main(["train", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("divclip: error: ") and message in err
