"""`divclip toy`: the parser plugs into any sub-parsers object, writes the report, and rejects bad input."""

import argparse
import csv
import subprocess
import sys

import pytest

from divclip.cli import main
from divclip.cli.toy import ENV_NAMES, add_parser


def test_env_names_match_the_registry():
    from divclip.toy_envs import ENVS

    assert sorted(ENV_NAMES) == sorted(ENVS)


def test_importing_the_cli_module_does_not_import_torch():
    code = "import sys, divclip.cli.toy; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_add_parser_builds_the_toy_subparser():
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["toy", "--env", "bandit", "--out", "x"])
    assert args.command == "toy" and args.methods == "grpo,dapo,atr" and args.steps is None


def test_toy_run_writes_csv_html_and_claims(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "toy",
            "--env",
            "bandit",
            "--methods",
            "grpo,atr",
            "--seeds",
            "2",
            "--steps",
            "5",
            "--group-size",
            "4",
            "--env-arg",
            "arms=4",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    stdout = capsys.readouterr().out
    assert code == 0
    with open(out / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * 2 * 5 and {r["method"] for r in rows} == {"grpo", "atr"}
    assert (out / "report.html").stat().st_size > 1_000_000
    claims = (out / "claims.md").read_text()
    assert "divclip toy --env bandit --methods grpo,atr --seeds 2 --steps 5 --group-size 4" in claims
    assert "--env-arg arms=4" in claims and "ATR-GRPO has lower across-seed variance" in claims
    assert "| atr |" in stdout


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--env", "maze"], "--env"),
        (["--methods", "grpo,nope"], "nope"),
        (["--seeds", "0"], "--seeds"),
        (["--steps", "0"], "steps"),
        (["--group-size", "1"], "group_size"),
        (["--env-arg", "arms"], "--env-arg"),
        (["--env-arg", "colour=3"], "colour"),
    ],
)
def test_bad_input_exits_2_with_a_message(tmp_path, capsys, argv, needle):
    code = main(["toy", "--env", "bandit", "--steps", "3", "--seeds", "1", "--out", str(tmp_path), "--quiet", *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("divclip: error:") and needle in err


def test_a_second_run_into_the_same_out_keeps_the_first(tmp_path, capsys):
    out = tmp_path / "run"
    base = [
        "toy",
        "--env",
        "bandit",
        "--seeds",
        "2",
        "--steps",
        "3",
        "--group-size",
        "4",
        "--env-arg",
        "arms=4",
        "--out",
        str(out),
        "--quiet",
    ]
    assert main([*base, "--methods", "grpo"]) == 0
    first = (out / "metrics.csv").read_text()
    capsys.readouterr()
    assert main([*base, "--methods", "dapo"]) == 0
    assert "divclip toy: moved metrics.csv, report.html, claims.md to superseded/" in capsys.readouterr().err
    (kept,) = (out / "superseded").iterdir()
    assert kept.name.endswith("-toy")
    assert (kept / "metrics.csv").read_text() == first
    assert sorted(p.name for p in kept.iterdir()) == ["claims.md", "metrics.csv", "report.html"]
    assert "dapo" in (out / "metrics.csv").read_text() and "dapo" not in first


def test_the_arena_bounds_actions_times_batch_before_allocating(capsys):
    """arms=65536 with group size 4096 asked torch for 100 GB; the bound refuses it before any tensor exists."""
    from divclip.toy_envs.arena import MAX_BATCH_LOGITS

    code = main(
        [
            "toy",
            "--env",
            "bandit",
            "--env-arg",
            "arms=65536",
            "--group-size",
            "4096",
            "--steps",
            "2",
            "--out",
            "never-created",
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert f"× actions = 48 × 4096 × 1 × 65536 = 12884901888, over the limit of {MAX_BATCH_LOGITS}" in err
    assert err.count("\n") == 1
