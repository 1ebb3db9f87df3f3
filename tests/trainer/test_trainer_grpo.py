"""Real (tiny) runs of the trainer: a smoke run, seeded determinism, crash + resume, KL, any ClipSpec, HF dirs."""

import csv
import json
import math

import pytest
import torch

import divclip.trainer.grpo as grpo
from divclip.trainer.checkpoint import latest_checkpoint
from divclip.trainer.grpo import GRPOTrainer

pytestmark = pytest.mark.slow  # every test here trains a (tiny) model


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_smoke_run_logs_every_metric_and_checkpoints(tiny_config, tmp_path):
    cfg = tiny_config(steps=2, output_dir=str(tmp_path), checkpoint_every=1)
    result = GRPOTrainer(cfg).train()
    hist = result.history
    assert [r["step"] for r in hist] == [0, 1, 2]
    assert "sft/loss" in hist[0] and 0 <= result.accuracy_before <= 1 and 0 <= result.accuracy_after <= 1
    for row in hist[1:]:
        for key in (
            "reward/mean",
            "loss/policy",
            "clip/clipfrac",
            "clip/clipfrac_low",
            "clip/clipfrac_high",
            "clip/ppo_kl",
            "clip/kl3",
            "grad/norm",
            "policy/entropy",
            "rollout/tokens",
            "perf/tokens_per_s",
        ):
            assert math.isfinite(row[key]), key
        assert row["rollout/tokens"] > 0 and row["clip/kl3"] >= 0
    assert read_jsonl(tmp_path / "metrics.jsonl") == hist
    with open(tmp_path / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [0, 1, 2] and float(rows[2]["reward/mean"]) == hist[2]["reward/mean"]
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt.name == "step-000002" and (ckpt / "config.json").is_file()
    assert len(list((tmp_path / "checkpoints").glob("step-*"))) == 2  # keep_checkpoints


def test_same_seed_same_metrics_and_different_seed_differs(tiny_config, without_timing):
    a = GRPOTrainer(tiny_config(steps=3)).train().history
    b = GRPOTrainer(tiny_config(steps=3)).train().history
    c = GRPOTrainer(tiny_config(steps=3, seed=1)).train().history
    assert without_timing(a) == without_timing(b)
    assert without_timing(a) != without_timing(c)


class Crash(Exception):
    pass


def test_crash_and_resume_continue_the_same_history(tiny_config, tmp_path, without_timing):
    full = GRPOTrainer(tiny_config(steps=6, kl_coef=0.05)).train().history

    cfg = tiny_config(steps=6, kl_coef=0.05, output_dir=str(tmp_path), checkpoint_every=2)

    def crash_after_step_3(row):
        if row["step"] == 3:
            raise Crash

    with pytest.raises(Crash):
        GRPOTrainer(cfg).train(on_step=crash_after_step_3)
    assert latest_checkpoint(tmp_path).name == "step-000002"
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0, 1, 2, 3]  # step 3 was logged

    resumed = GRPOTrainer(cfg)  # a fresh process would build exactly this
    result = resumed.train()
    assert [r["step"] for r in result.history] == list(range(7))
    assert without_timing(result.history) == without_timing(full)
    assert without_timing(read_jsonl(tmp_path / "metrics.jsonl")) == without_timing(full)
    # A finished run resumes to a no-op.
    assert without_timing(GRPOTrainer(cfg).train().history) == without_timing(full)


def test_one_epoch_one_minibatch_never_clips(tiny_config):
    """docs/theory.md §5: with μ = 1 and a single minibatch the ratio is 1 at the only update."""
    hist = GRPOTrainer(tiny_config(steps=2, ppo_epochs=1, minibatches=1, method="atr")).train().history
    for row in hist[1:]:
        assert row["clip/clipfrac"] == 0.0 and abs(row["clip/ratio_max"] - 1) < 1e-5


@pytest.mark.parametrize(
    "method, extra",
    [
        ("dapo", {}),
        ("dppo_kl", {}),
        ("sapo", {}),
        ("grpo", {"measure": "binary_tv", "delta": 0.05}),
        ("atr", {"kl_coef": 0.1, "kl_estimator": "k1", "adv_norm": "rloo", "loss_agg_mode": "seq-mean-token-sum-norm"}),
    ],
)
def test_every_loss_family_runs(tiny_config, method, extra):
    hist = GRPOTrainer(tiny_config(steps=1, sft_steps=0, eval_size=0, method=method, **extra)).train().history
    assert math.isfinite(hist[-1]["loss/policy"])
    assert ("loss/kl" in hist[-1]) == ("kl_coef" in extra)


def test_any_clip_spec_can_be_passed(tiny_config):
    from divclip.theory.losses import ClipSpec

    spec = ClipSpec("hellinger", delta=0.01, form="cispo")
    t = GRPOTrainer(tiny_config(steps=1, sft_steps=0, eval_size=0), spec=spec)
    assert t.spec is spec and math.isfinite(t.train().history[-1]["loss/policy"])
    with pytest.raises(ValueError, match="spec must be a theory.losses.ClipSpec or None, got str"):
        GRPOTrainer(tiny_config(), spec="atr")


def test_rl_moves_the_policy(tiny_config):
    t = GRPOTrainer(tiny_config(steps=1, sft_steps=0, eval_size=0))
    before = [p.detach().clone() for p in t.model.parameters()]
    row = t.train().history[-1]
    moved = sum(float((p.detach() - b).abs().max()) for p, b in zip(t.model.parameters(), before))
    assert (moved > 0) == (row["reward/constant_group_frac"] < 1)


def test_local_hf_model_directory(tiny_config, tmp_path):
    src = GRPOTrainer(tiny_config(steps=1))
    src.model.save_pretrained(tmp_path / "m")
    src.tokenizer.save_pretrained(tmp_path / "m")
    t = GRPOTrainer(tiny_config(model=str(tmp_path / "m"), steps=1, sft_steps=0))
    assert type(t.model).__name__ == "GPT2LMHeadModel"
    for p, q in zip(t.model.parameters(), src.model.parameters()):
        assert torch.equal(p, q)
    assert len(t.train().history) == 2


def test_bad_jsonl_fails_before_any_model_is_built(tiny_config, tmp_path, monkeypatch):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": "2+2="}\n')

    def no_model(*a, **k):
        raise AssertionError("model built before the task was checked")

    monkeypatch.setattr(grpo, "build_model", no_model)
    with pytest.raises(ValueError, match=r"bad.jsonl' line 2 has no 'answer'"):
        GRPOTrainer(tiny_config(task=str(bad)))


def test_jsonl_task_trains(tiny_config, tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text("".join(json.dumps({"prompt": f"{a}+{a}=", "answer": 2 * a}) + "\n" for a in range(20)))
    hist = GRPOTrainer(tiny_config(task=str(f), steps=1, eval_size=4, max_new_tokens=4)).train().history
    assert 0 <= hist[-1]["eval/accuracy"] <= 1


def test_resuming_with_other_settings_is_refused(tiny_config, tmp_path):
    GRPOTrainer(tiny_config(steps=1, output_dir=str(tmp_path))).train()
    with pytest.raises(ValueError, match=r"holds a run with other settings: method='atr' \(checkpoint: 'grpo'\)"):
        GRPOTrainer(tiny_config(steps=2, method="atr", output_dir=str(tmp_path))).train()
    # More steps is a continuation; resume=False starts over in the same directory.
    assert len(GRPOTrainer(tiny_config(steps=2, output_dir=str(tmp_path))).train().history) == 3
    fresh = GRPOTrainer(tiny_config(steps=1, method="atr", output_dir=str(tmp_path), resume=False)).train()
    assert len(fresh.history) == 2 and latest_checkpoint(tmp_path).name == "step-000001"
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*")) == ["step-000000", "step-000001"]
    (old,) = (tmp_path / "superseded").iterdir()  # the first run is moved aside, not deleted
    assert sorted(p.name for p in (old / "checkpoints").glob("step-*")) == ["step-000001", "step-000002"]


def test_warm_start_on_answers_longer_than_a_completion(tiny_config):
    """Countdown's reference answers ('2+3*5-7' + EOS) are longer than max_new_tokens=3: the tiny model's positions
    cover the warm start's answers too (this was an IndexError in the position embedding)."""
    t = GRPOTrainer(tiny_config(task="countdown", max_new_tokens=3, sft_steps=2, steps=1, eval_size=4))
    longest = max(len(e.prompt) for e in t.task.train + t.task.eval)
    answer = max(len(e.answer) for e in t.task.train + t.task.eval)
    assert answer + 1 > 3 and t.model.config.n_positions == longest + answer + 1 + 1
    hist = t.train().history
    assert math.isfinite(hist[0]["sft/loss"]) and hist[-1]["step"] == 1
