"""`divclip check` on the command line: JSON equals the library's report, text names the warnings, bad
arguments exit 2 with a message."""

import argparse
import json

import pytest
from sanity_helpers import FIXTURES, npz_bytes, random_batch

from divclip.cli import check, main
from divclip.sanity import build_report, jsonable


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_output_is_the_report(capsys):
    code, out, err = run(capsys, "check", str(FIXTURES / "verl_grpo_onpolicy.sh"), "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    assert data == jsonable(build_report(FIXTURES / "verl_grpo_onpolicy.sh"))
    assert data["schema"] == "divclip.check/1"
    assert [w["code"] for w in data["warnings"]] == ["on_policy_clip_inert", "verl_dual_clip_always_on"]
    assert data["config"]["defaults_from"].startswith("verl 0.9.1")


def test_text_output_names_warnings_budget_and_rollouts(capsys, tmp_path):
    batch = tmp_path / "b.npz"
    batch.write_bytes(npz_bytes(**random_batch(seed=12, log_prob=False)))
    code, out, _ = run(
        capsys, "check", str(FIXTURES / "trl_gspo_token_eps.yaml"), "--rollouts", str(batch), "--sigma", "0.01"
    )
    assert code == 0
    assert "[sequence_ratio_token_eps]" in out and "source: GSPO" in out
    assert "KL3: ε_low = 0.2 is δ = 0.0231436" in out
    assert "PREDICTED with the noise model log r ~ N(0, σ²), σ = 0.01" in out
    assert "skipped binary_kl, binary_tv: p-dependent measures have no sequence-level form" in out


def test_hydra_overrides_as_arguments_and_on_top_of_a_file(capsys):
    code, out, _ = run(
        capsys,
        "check",
        "actor_rollout_ref.actor.clip_ratio_low=0.2",
        "actor_rollout_ref.actor.clip_ratio_high=0.28",
        "data.train_batch_size=256",
        "actor_rollout_ref.actor.ppo_mini_batch_size=64",
        "actor_rollout_ref.actor.clip_ratio_c=3",
        "--json",
    )
    assert code == 0 and json.loads(out)["warnings"] == []
    code, out, _ = run(
        capsys,
        "check",
        str(FIXTURES / "verl_dapo_ok.yaml"),
        "actor_rollout_ref.actor.ppo_mini_batch_size=512",
        "--json",
    )
    assert [w["code"] for w in json.loads(out)["warnings"]] == ["on_policy_clip_inert"]


def test_rollouts_only_with_delta_override(capsys, tmp_path):
    batch = tmp_path / "b.npz"
    batch.write_bytes(npz_bytes(**random_batch(seed=13)))
    code, out, _ = run(capsys, "check", "--rollouts", str(batch), "--delta", "kl3=0.05", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["config"] is None and data["budget"]["eps_low"] == 0.2
    kl3 = next(m for m in data["rollouts"]["measures"] if m["measure"] == "kl3")
    assert kl3["budget"] == {"delta": 0.05, "origin": "given"}


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["check"], "nothing to check"),
        (["check", "missing.yaml"], "cannot read config file"),
        (["check", str(FIXTURES / "verl_dapo_ok.yaml"), str(FIXTURES / "trl_cispo.json")], "give one config file"),
        (["check", str(FIXTURES / "verl_dapo_ok.yaml"), "--measure", "kl4"], "measure must be one of"),
        (["check", "--rollouts", "missing.npz"], "cannot read rollout file"),
        (["check", "--rollouts", "x.csv"], "allowed: .npz"),
        (
            ["check", "epsilon=0.2", "--delta", "ratio=0.1", "--rollouts", str(FIXTURES / "rollouts_ragged.jsonl")],
            "not a delta override",
        ),
        (["check", "--rollouts", str(FIXTURES / "rollouts_ragged.jsonl"), "--sigma", "9"], "sigma must be"),
        (["check", str(FIXTURES / "trl_defaults.json"), "--framework", "verl"], "has no verl settings"),
        (["check", "data.train_batch_size=1" + "0" * 400], "train_batch_size must be an integer"),
    ],
)
def test_bad_input_exits_2_with_a_message(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("divclip: error: ") and needle in err


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--eps-low", "nan"],
        ["check", "--delta", "kl3"],
        ["check", "--max-bytes", "0"],
        ["check", "--framework", "jax"],
    ],
)
def test_bad_arguments_are_refused_by_the_parser(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and "error" in capsys.readouterr().err


def test_wiring_into_another_parser():
    parser = argparse.ArgumentParser(prog="divclip")
    sub = parser.add_subparsers(dest="command", required=True)
    check.add_parser(sub)
    args = parser.parse_args(["check", str(FIXTURES / "verl_dapo_ok.yaml"), "--json"])
    assert args.command == "check" and check.run(args) == 0


def test_special_and_oversized_paths_are_refused(capsys, tmp_path):
    batch = tmp_path / "b.npz"
    batch.write_bytes(npz_bytes(**random_batch(seed=14)))
    code, _, err = run(capsys, "check", "--rollouts", str(batch), "--max-bytes", "100")
    assert code == 2 and "over the 100-byte limit (raise it with --max-bytes)" in err
    code, _, err = run(capsys, "check", "--rollouts", str(tmp_path / "dir.npz"))
    assert code == 2 and "cannot read rollout file" in err
    (tmp_path / "dir.yaml").mkdir()
    code, _, err = run(capsys, "check", str(tmp_path / "dir.yaml"))
    assert code == 2 and "is not a regular file" in err
    code, _, err = run(capsys, "check", "/dev/zero")  # a device would never end: refused before reading
    assert code == 2 and "is not a regular file" in err


def test_engine_flag_and_its_old_name_force_the_same_engine(capsys):
    config = str(FIXTURES / "trl_defaults.json")
    new = run(capsys, "check", config, "--engine", "trl", "--json")
    old = run(capsys, "check", config, "--framework", "trl", "--json")
    assert new[0] == old[0] == 0 and json.loads(new[1]) == json.loads(old[1])
    assert json.loads(new[1])["config"]["framework"] == "trl"


def test_strict_exits_1_on_an_unknown_key_after_the_report(capsys, tmp_path):
    typo = tmp_path / "typo.txt"
    typo.write_text("actor_rollout_ref.actor.clip_ratio_hihg=0.28\n")
    code, out, _ = run(capsys, "check", str(typo))
    assert code == 0 and "[unknown_key]" in out and "clip_ratio_high" in out  # a warning, the nearest key named
    code, out, _ = run(capsys, "check", str(typo), "--strict")
    assert code == 1 and "[unknown_key]" in out
    code, out, _ = run(capsys, "check", str(typo), "--strict", "--json")
    assert code == 1 and [w["code"] for w in json.loads(out)["warnings"]].count("unknown_key") == 1
    clean = tmp_path / "clean.txt"
    clean.write_text("actor_rollout_ref.actor.clip_ratio_high=0.28\n")
    code, out, _ = run(capsys, "check", str(clean), "--strict")
    assert code == 0 and "[unknown_key]" not in out


def test_help_gives_the_exit_statuses(capsys):
    with pytest.raises(SystemExit) as done:
        main(["check", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert done.value.code == 0
    assert "exit status: 0 the report was printed" in out and "1 with --strict" in out and "2 bad input" in out


def test_strict_stops_on_a_key_of_another_version_not_on_an_examples_own_key(capsys):
    """--strict exits 1 for a key the modelled engine refuses whatever it is (a key verl 0.9.1 no longer has), and 0
    for a launch of an example whose own config class declares its extra keys (SkyRL's DAPO example)."""
    from pathlib import Path

    corpus = Path(__file__).parents[1] / "fixtures" / "engines" / "corpus"
    code, out, _ = run(capsys, "check", str(corpus / "verl/sapo_trainer__run_qwen30b_sapo.sh"), "--strict", "--json")
    unknown = [w for w in json.loads(out)["warnings"] if w["code"] == "unknown_key"]
    assert code == 1 and [w["key"] for w in unknown] == ["trainer.use_legacy_worker_impl"]
    assert "verl 0.5.0 to 0.8.0.dev had it" in unknown[0]["message"]
    code, out, _ = run(capsys, "check", str(corpus / "skyrl/train__algorithms__dapo__run_dapo_gsm8k.sh"), "--strict")
    assert code == 0 and "[unknown_key]" not in out
