"""`divclip translate`: a verl GRPO launch script in every other engine, differences named, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from divclip import engines
from divclip.cli import main
from divclip.sanity import build_report

GRPO_SCRIPT = Path(__file__).parent / "sanity" / "fixtures" / "verl_grpo_onpolicy.sh"
TARGETS = [e for e in engines.available_engines() if e != "verl"]


@pytest.mark.parametrize("target", TARGETS)
def test_verl_grpo_recipe_translates_with_the_same_clip_or_a_named_difference(target, capsys):
    assert main(["translate", str(GRPO_SCRIPT), "--to", target, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["from"], out["to"]) == ("verl", target)
    source = build_report(GRPO_SCRIPT)["config"]
    back = engines.read(target, {**out["env"], **out["settings"]})
    if out["differences"]:  # each names what and the nearest the target has
        assert all(": " in d for d in out["differences"])
    else:
        assert back.spec is not None and back.ratio_bounds == pytest.approx(source["ratio_bounds"], rel=1e-12)
        assert (back.spec.form, back.spec.level, back.dual_clip_c) == ("clip", "token", source["dual_clip_c"])
        assert back.loss_agg_mode == source["loss_agg_mode"]


def test_translate_text_reads_back_through_check(tmp_path, capsys):
    assert main(["translate", str(GRPO_SCRIPT), "--to", "trl", "--format", "yaml"]) == 0
    f = tmp_path / "args.yaml"
    f.write_text(capsys.readouterr().out)
    c = build_report(f)["config"]
    assert (c["framework"], c["ratio_bounds"], c["dual_clip_c"]) == ("trl", [0.8, 1.2], 3.0)


def test_a_method_the_target_cannot_express_exits_2_naming_it(tmp_path, capsys):
    f = tmp_path / "dppo.sh"
    f.write_text(
        "python3 -m verl.trainer.main_ppo actor_rollout_ref.actor.policy_loss.loss_mode=dppo_kl "
        "actor_rollout_ref.actor.clip_ratio_low=0.05 actor_rollout_ref.actor.clip_ratio_high=0.05\n"
    )
    assert main(["translate", str(f), "--to", "trl"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "TRL has no 'gated' loss form" in err


def test_an_unmodelled_loss_has_no_translation(tmp_path, capsys):
    f = tmp_path / "gpg.sh"
    f.write_text("actor_rollout_ref.actor.policy_loss.loss_mode=gpg\n")
    if engines.read("verl", {"actor_rollout_ref.actor.policy_loss.loss_mode": "gpg"}).spec is not None:
        pytest.skip("gpg is modelled now")
    assert main(["translate", str(f), "--to", "trl"]) == 2
    assert "does not model" in capsys.readouterr().err


def test_translate_names_a_misspelled_key_and_the_structure_the_target_changes(capsys, tmp_path):
    """issue 31: `clip_ratio_hihg=0.28` became SkyRL's eps_clip_high = 0.2 with no word, and `differences` was []
    while SkyRL's defaults changed the group size (16 -> 5) and the updates per batch (16 -> 4)."""
    config = tmp_path / "run.txt"
    config.write_text(
        "actor_rollout_ref.rollout.n=16\nactor_rollout_ref.actor.clip_ratio_hihg=0.28\n"
        "data.train_batch_size=1024\nactor_rollout_ref.actor.ppo_mini_batch_size=64\n"
    )
    assert main(["translate", str(config), "--to", "skyrl", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["settings"]["trainer.algorithm.eps_clip_high"] == 0.2  # the typo is not a setting: the default
    assert data["differences"] == [
        "actor_rollout_ref.actor.clip_ratio_hihg (not a verl setting, nearest actor_rollout_ref.actor.clip_ratio_high)"
        ": dropped, not written",
        "group size (responses per prompt) 16 in the verl config: skyrl's default gives 5; set it in the skyrl "
        "launch to keep it",
        "optimizer updates per rollout batch 16 in the verl config: skyrl's default gives 4; set it in the skyrl "
        "launch to keep it",
    ]
    assert main(["translate", str(config), "--to", "skyrl"]) == 0
    text = capsys.readouterr().out
    assert text.count("# differs: ") == 3 and "clip_ratio_hihg" in text


def test_translate_between_the_same_structure_names_no_structure_difference(capsys, tmp_path):
    config = tmp_path / "run.txt"
    config.write_text("trainer.algorithm.eps_clip_high=0.28\n")  # SkyRL's own defaults, to SkyRL
    assert main(["translate", str(config), "--to", "skyrl", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["differences"] == []


def test_the_rollout_correction_travels_or_is_named(tmp_path, capsys):
    """`divclip translate` carries the source's rollout correction as `engines.translate` does: OpenRLHF's
    seq-level tv gate, which verl cannot say, is named for verl (and verl's correction written off); to OpenRLHF
    itself it is carried and reads back the same."""
    flags = "--algo.advantage.is_correction_"
    f = tmp_path / "orl.sh"
    f.write_text(
        f"python3 -m openrlhf.cli.train_ppo_ray {flags}level seq {flags}gating tv {flags}threshold 0.1 "
        "--train.max_epochs 2\n"
    )
    source = engines.read_correction(
        "openrlhf", {flags + "level": "seq", flags + "gating": "tv", flags + "threshold": "0.1"}
    )
    assert main(["translate", str(f), "--to", "verl", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any(d.startswith(f"rollout correction {source}: verl:") for d in out["differences"])
    assert engines.read_correction("verl", out["settings"]) is None  # written as verl's 'off', and said
    assert main(["translate", str(f), "--to", "openrlhf", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert engines.read_correction("openrlhf", out["settings"]) == source
    assert not any("rollout correction" in d for d in out["differences"])
