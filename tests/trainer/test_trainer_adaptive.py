"""The trainer with an adaptive δ (controller state in checkpoints, restored on resume) and an intersection."""

import math

import pytest

from divclip.theory.adaptive import delta_update
from divclip.theory.spec import parse_method
from divclip.trainer.checkpoint import latest_checkpoint, load_extra_state
from divclip.trainer.grpo import GRPOTrainer


class Crash(Exception):
    pass


def test_adaptive_delta_follows_its_rule_and_survives_crash_and_resume(tiny_config, tmp_path, without_timing):
    method = "kl3:0.02@kl3=0.0005:gain=0.5"
    full = GRPOTrainer(tiny_config(steps=5, method=method)).train().history
    spec = parse_method(method)
    rows = full[1:]
    assert rows[0]["clip/delta"] == 0.02
    for prev, row in zip(rows, rows[1:]):  # δ_{t+1} = the rule applied to step t's measured kl3
        assert row["clip/delta"] == prev["clip/delta_next"]
        assert row["clip/delta"] == pytest.approx(
            float(delta_update(prev["clip/delta"], prev["clip/kl3"], spec)), rel=1e-12
        )
    assert len({r["clip/delta"] for r in rows}) > 1  # it moved

    cfg = tiny_config(steps=5, method=method, output_dir=str(tmp_path), checkpoint_every=2)

    def crash_after_step_3(row):
        if row["step"] == 3:
            raise Crash

    with pytest.raises(Crash):
        GRPOTrainer(cfg).train(on_step=crash_after_step_3)
    state = load_extra_state(latest_checkpoint(tmp_path))["delta_controller"]
    assert state["steps"] == 2 and state["delta"] == [rows[1]["clip/delta_next"]]
    resumed = GRPOTrainer(cfg).train().history
    assert without_timing(resumed) == without_timing(full)  # without the saved δ, step 3 would use δ0


def test_resume_refuses_a_checkpoint_without_controller_state(tiny_config, tmp_path):
    import torch

    cfg = tiny_config(steps=2, method="kl3@clipfrac=0.1", output_dir=str(tmp_path), checkpoint_every=1)
    GRPOTrainer(cfg).train()
    from divclip.trainer.checkpoint import write_manifest

    for ckpt in (tmp_path / "checkpoints").glob("step-*"):  # as a checkpoint from before adaptive δ existed
        state = torch.load(ckpt / "trainer_state.pt", weights_only=True)
        del state["extra"]
        torch.save(state, ckpt / "trainer_state.pt")
        (ckpt / "MANIFEST.json").unlink()
        write_manifest(ckpt)  # an intact checkpoint, just without the controller
    with pytest.raises(ValueError, match="no adaptive-δ controller state"):
        GRPOTrainer(cfg.replace(steps=3)).train()


def test_intersection_trains_and_logs_which_part_clipped(tiny_config):
    hist = GRPOTrainer(tiny_config(steps=2, method="kl3:0.01&binary_tv:0.05")).train().history
    row = hist[-1]
    assert "clip/delta" not in row
    for side in ("low", "high"):
        parts = row[f"clip/clipfrac_{side}_part0"] + row[f"clip/clipfrac_{side}_part1"]
        assert parts >= row[f"clip/clipfrac_{side}"] - 1e-9
    assert math.isfinite(row["loss/policy"])
