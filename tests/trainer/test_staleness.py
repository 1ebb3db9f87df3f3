"""Stale rollouts (`TrainerConfig.staleness` = k): step s samples with the policy after step s-1-k.

Staleness 0 reproduces, bit for bit, histories the trainer wrote before the setting existed (a committed fixture);
k > 0 is checked directly: the sampler's weights are the policy's of k steps before, the completions are what that
policy samples with the step's seed, log π_old is its log-probability, and a resumed run continues the same.
"""

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from divclip.trainer.checkpoint import latest_checkpoint, load_extra_state
from divclip.trainer.config import TrainerConfig
from divclip.trainer.grpo import GRPOTrainer, _step_seed
from divclip.trainer.rollout import encode_prompts, sample, token_log_probs

pytestmark = pytest.mark.slow  # every test here trains a (tiny) model

FIXTURE = Path(__file__).parents[1] / "fixtures" / "trainer" / "history_before_staleness.json"
LEARNS = dict(sft_steps=100)  # a warm start whose groups get mixed rewards, so the updates move the policy


@pytest.fixture(scope="module")
def before():
    return json.loads(FIXTURE.read_text())


@pytest.mark.parametrize("case", ["grpo", "atr_kl"])
def test_staleness_zero_is_the_history_from_before_the_setting(before, case, without_timing):
    want = before["cases"][case]
    cfg = TrainerConfig(**{**before["config"], **want["overrides"]})
    assert cfg.staleness == 0
    got = without_timing(GRPOTrainer(cfg).train().history)
    _assert_same_history(got, want["history"])
    # the fixture exercises real updates and clipping, so a change in the update path shows here
    assert any(r.get("grad/norm", 0) > 0 for r in want["history"])
    assert any(r.get("clip/clipfrac", 0) > 0 for r in want["history"])
    assert all("rollout/policy_lag" not in r for r in got)


def _assert_same_history(got, want):
    """Every step's keys and every count, reward and accuracy exactly; the float metrics to 0.5% relative. The
    fixture was recorded on one CPU, and another CPU's vector kernels round differently: at step 0 the SFT loss
    differs in its sixth digit, and ppo_kl (a mean of near-cancelling log-ratios) moves by up to 0.16% in the
    steps after. A changed update path moves the losses and gradient norms by far more."""
    assert [sorted(r) for r in got] == [sorted(r) for r in want]
    for g, w in zip(got, want):
        for key, value in w.items():
            if isinstance(value, float) and not float(value).is_integer():
                assert g[key] == pytest.approx(value, rel=5e-3, abs=1e-7), (w["step"], key)
            else:
                assert g[key] == value, (w["step"], key)


def _state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same_weights(model, state) -> bool:
    return all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


def _record_rollouts(trainer):
    """Wraps trainer._rollout: per step, the learner's weights then (θ_{s-1}), the sampler's, and the batch."""
    seen = {}
    inner = trainer._rollout

    def rollout(rng, sampler):
        step = trainer.step
        batch = inner(rng, sampler)
        seen[step] = {"current": _state(trainer.model), "sampler": _state(sampler), "batch": batch}
        return batch

    trainer._rollout = rollout
    return seen


@pytest.mark.parametrize("k", [1, 2])
def test_stale_rollouts_come_from_the_policy_of_k_steps_ago(tiny_config, k):
    cfg = tiny_config(**LEARNS, steps=5, staleness=k)
    trainer = GRPOTrainer(cfg)
    seen = _record_rollouts(trainer)
    history = trainer.train().history
    theta = {s - 1: seen[s]["current"] for s in seen}  # θ_j: the policy after step j (θ_0: the warm start)
    assert not all(_same_weights_dicts(theta[0], theta[j]) for j in theta)  # the policy did move
    probe = copy.deepcopy(trainer.model)
    for s, rec in seen.items():
        j = max(0, s - 1 - k)
        assert _same_weights_dicts(rec["sampler"], theta[j]), (s, j)
        assert history[s]["rollout/policy_lag"] == s - 1 - j
        # the completions are what θ_j samples with step s's seeds, and log π_old is θ_j's log-probability
        probe.load_state_dict(theta[j])
        batch = rec["batch"]
        rng = np.random.default_rng([cfg.seed, s])
        examples = trainer.task.sample(cfg.prompts_per_step, rng)
        ids, mask = encode_prompts(trainer.tokenizer, [e.prompt for e in examples], trainer.device)
        ids, mask = ids.repeat_interleave(cfg.group_size, 0), mask.repeat_interleave(cfg.group_size, 0)
        torch.manual_seed(_step_seed(cfg.seed, s))
        comp = sample(
            probe, trainer.tokenizer, ids, mask, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature
        )
        assert torch.equal(batch["input_ids"], torch.cat([ids, comp], dim=1))
        T = comp.shape[1]
        with torch.no_grad():
            old = token_log_probs(probe, batch["input_ids"], batch["attention"], T, cfg.temperature)
        assert torch.equal(old, batch["old_log_prob"])
        if not _same_weights_dicts(theta[j], theta[s - 1]):  # a stale sampler differs from the learner's policy
            probe.load_state_dict(theta[s - 1])
            with torch.no_grad():
                now = token_log_probs(probe, batch["input_ids"], batch["attention"], T, cfg.temperature)
            assert not torch.equal(now, batch["old_log_prob"])


def _same_weights_dicts(a, b) -> bool:
    return all(torch.equal(v, b[k]) for k, v in a.items())


def test_stale_rollouts_clip_even_with_one_update_per_batch(tiny_config):
    """With μ = 1 and one minibatch the ratio is π_θ/π_old at the policy the batch starts from (docs/theory.md §5):
    1 on-policy, but π_{θ_{s-1}}/π_{θ_{s-1-k}} with stale rollouts."""
    cfg = tiny_config(**LEARNS, steps=4, staleness=1, ppo_epochs=1, minibatches=1, method="grpo")
    trainer = GRPOTrainer(cfg)
    seen = _record_rollouts(trainer)
    history = trainer.train().history
    probe = copy.deepcopy(trainer.model)
    assert history[1]["clip/ratio_max"] == 1.0 and history[1]["clip/clipfrac"] == 0.0  # sampler = learner = θ_0
    moved = 0
    for s in range(2, cfg.steps + 1):
        batch = seen[s]["batch"]
        probe.load_state_dict(seen[s]["current"])
        T = batch["mask"].shape[1]
        with torch.no_grad():
            now = token_log_probs(probe, batch["input_ids"], batch["attention"], T, cfg.temperature)
        ratio = torch.exp(now - batch["old_log_prob"])[batch["mask"] > 0]
        assert math.isclose(history[s]["clip/ratio_max"], float(ratio.max()), rel_tol=1e-6)
        assert math.isclose(history[s]["clip/ratio_min"], float(ratio.min()), rel_tol=1e-6)
        # GRPO's ε = 0.2 on both sides: a token is clipped when its ratio is outside [0.8, 1.2] on the side
        # its advantage pushes (A > 0 above 1.2, A < 0 below 0.8)
        adv = batch["advantages"].unsqueeze(1).expand_as(batch["mask"])[batch["mask"] > 0]
        clipped = ((adv > 0) & (ratio > 1.2)) | ((adv < 0) & (ratio < 0.8))
        assert math.isclose(history[s]["clip/clipfrac"], float(clipped.float().mean()), abs_tol=1e-6)
        moved += float(ratio.max()) != 1.0
    assert moved > 0


def test_resumed_stale_run_continues_the_same_history(tiny_config, tmp_path, without_timing):
    full = GRPOTrainer(tiny_config(**LEARNS, steps=6, staleness=2)).train().history
    cfg = tiny_config(**LEARNS, steps=6, staleness=2, output_dir=str(tmp_path), checkpoint_every=2)

    class Crash(Exception):
        pass

    def crash_after_step_3(row):
        if row["step"] == 3:
            raise Crash

    with pytest.raises(Crash):
        GRPOTrainer(cfg).train(on_step=crash_after_step_3)
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt.name == "step-000002"
    saved = load_extra_state(ckpt)["stale_policies"]
    assert saved["steps"] == [0, 1] and len(saved["weights"]) == 2  # θ_0 and θ_1, each once
    assert without_timing(GRPOTrainer(cfg).train().history) == without_timing(full)
    with pytest.raises(ValueError, match=r"staleness=1 \(checkpoint: 2\)"):
        GRPOTrainer(cfg.replace(staleness=1)).train()


def test_warm_start_checkpoint_holds_one_copy_of_the_warm_start(tiny_config, tmp_path):
    trainer = GRPOTrainer(tiny_config(staleness=3, output_dir=str(tmp_path)))
    trainer.prepare()
    saved = load_extra_state(latest_checkpoint(tmp_path))["stale_policies"]
    assert saved["steps"] == [0, 0, 0] and len(saved["weights"]) == 1
    assert _same_weights(trainer.model, saved["weights"][0])


def test_checkpoint_without_stale_policies_is_refused(tiny_config, tmp_path, monkeypatch):
    cfg = tiny_config(steps=2, staleness=2, output_dir=str(tmp_path))
    trainer = GRPOTrainer(cfg)
    monkeypatch.setattr(trainer, "_extra_state", lambda: {})  # as a checkpoint written without them would be
    trainer.prepare()
    with pytest.raises(ValueError, match=r"holds no 2 stale policies to sample from, but staleness=2; resume=False"):
        GRPOTrainer(cfg).train()


@pytest.mark.parametrize("value", [-1, 101, 1.5, True])
def test_bad_staleness_names_the_field_and_the_range(value):
    with pytest.raises(ValueError) as err:
        TrainerConfig(staleness=value)
    msg = str(err.value)
    assert "TrainerConfig.staleness" in msg and repr(value) in msg and "integer in [0, 100]" in msg


def test_cli_flag_sets_staleness():
    import argparse

    from divclip.cli import train as cli_train

    parser = argparse.ArgumentParser()
    cli_train.add_parser(parser.add_subparsers())
    args = parser.parse_args(["train", "--preset", "tiny-arith", "--staleness", "3", "--output-dir", "x"])
    assert cli_train.config_from_args(args).staleness == 3
