"""The TRL plug-in: real training steps on CPU, and the same loss as stock GRPOTrainer for the ratio measure."""

import copy

import pytest
import torch

pytest.importorskip("trl")
from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from divclip.theory.measures import get_measure  # noqa: E402
from divclip.trainer.integrations.trl import DivClipGRPOConfig, DivClipGRPOTrainer  # noqa: E402
from divclip.trainer.tiny import ARITH_ALPHABET, char_tokenizer, tiny_gpt2  # noqa: E402

COMMON = dict(
    per_device_train_batch_size=4,
    num_generations=4,
    max_completion_length=4,
    logging_steps=1,
    save_strategy="no",
    report_to="none",
    use_cpu=True,
    learning_rate=1e-2,
    disable_tqdm=True,
    seed=0,
)


def digits_reward(completions, **kwargs):
    """A reward that varies across a group even for a random model: the share of digits in the completion."""
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


@pytest.fixture(scope="module")
def tiny():
    tok = char_tokenizer(ARITH_ALPHABET)
    model = tiny_gpt2(
        len(tok), n_layer=1, n_embd=32, n_head=2, seed=0, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id
    )
    data = Dataset.from_dict({"prompt": ["07+35=", "12+30=", "01+01=", "50+50="]})
    return model, tok, data


def make(cls, args_cls, tiny, tmp_path, **kw):
    model, tok, data = tiny
    args = args_cls(output_dir=str(tmp_path), **{**COMMON, **kw})
    return cls(
        model=copy.deepcopy(model), reward_funcs=digits_reward, args=args, train_dataset=data, processing_class=tok
    )


@pytest.mark.slow
def test_two_real_training_steps(tiny, tmp_path):
    trainer = make(
        DivClipGRPOTrainer,
        DivClipGRPOConfig,
        tiny,
        tmp_path,
        clip_measure="kl3",
        max_steps=2,
        num_iterations=2,
        loss_type="dapo",
    )
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 2
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2
    for h in logs:
        for key in ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "divclip/kl3", "entropy"):
            assert key in h
    assert logs[1]["divclip/kl3"] > 0  # the second step reuses the first step's generations: r != 1
    assert any(not torch.equal(p, b) for p, b in zip(trainer.model.parameters(), before))


def batch(tok, seed=0, B=8, T=5):
    g = torch.Generator().manual_seed(seed)
    prompt = tok(["07+35="] * B, return_tensors="pt", add_special_tokens=False)
    completion_ids = torch.randint(3, len(tok), (B, T), generator=g)
    completion_mask = (torch.arange(T)[None] < torch.randint(1, T + 1, (B, 1), generator=g)).long()
    return {
        "prompt_ids": prompt["input_ids"],
        "prompt_mask": prompt["attention_mask"],
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.randn(B, generator=g),
        "num_items_in_batch": completion_mask.sum(),
    }


def loss_and_grad(trainer, model, inputs):
    model.zero_grad()
    loss = trainer._compute_loss(model, inputs)
    loss.backward()
    return loss.detach(), torch.cat([p.grad.reshape(-1) for p in model.parameters()])


@pytest.mark.slow
@pytest.mark.parametrize("loss_type, beta", [("grpo", 0.0), ("bnpo", 0.04), ("dr_grpo", 0.0), ("dapo", 0.04)])
def test_ratio_measure_is_stock_grpo(tiny, tmp_path, loss_type, beta):
    _, tok, _ = tiny
    kw = dict(loss_type=loss_type, epsilon=0.2, epsilon_high=0.28)
    ours = make(DivClipGRPOTrainer, DivClipGRPOConfig, tiny, tmp_path / "a", clip_measure="ratio", **kw)
    stock = make(GRPOTrainer, GRPOConfig, tiny, tmp_path / "b", **kw)
    inputs = batch(tok)
    m = ours.model.train()  # one model (with TRL's fused log-prob head) scored by both trainers
    with torch.no_grad():  # old log-probs of a perturbed policy, so that some ratios leave [0.8, 1.28]
        lp, _, _ = ours._get_per_token_logps_and_entropies(
            m,
            torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1),
            inputs["completion_ids"].shape[1],
        )
    g = torch.Generator().manual_seed(1)
    inputs["old_per_token_logps"] = lp + 0.5 * torch.randn(lp.shape, generator=g)
    inputs["ref_per_token_logps"] = lp + 0.2 * torch.randn(lp.shape, generator=g)
    for t in (ours, stock):
        t.beta, t.current_gradient_accumulation_steps = beta, 2
    loss, grad = loss_and_grad(ours, m, inputs)
    ref_loss, ref_grad = loss_and_grad(stock, m, inputs)
    assert torch.equal(loss, ref_loss) and loss != 0
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-7)
    for key in ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"):
        assert ours._metrics["train"][key] == stock._metrics["train"][key], key
    assert stock._metrics["train"]["clip_ratio/region_mean"][-1] > 0


@pytest.mark.slow
def test_kl3_measure_is_stock_grpo_at_its_derived_widths(tiny, tmp_path):
    """Gradient equivalence inside TRL: KL3 at δ = KL3(0.8) clips like epsilon=0.2, epsilon_high=u_δ - 1."""
    _, tok, _ = tiny
    ours = make(
        DivClipGRPOTrainer, DivClipGRPOConfig, tiny, tmp_path / "a", clip_measure="kl3", epsilon=0.2, loss_type="grpo"
    )
    lo, hi = get_measure("kl3").bounds(ours.clip_spec.delta)
    assert lo == pytest.approx(0.8, abs=1e-12) and hi == pytest.approx(1.23084, abs=1e-5)
    stock = make(GRPOTrainer, GRPOConfig, tiny, tmp_path / "b", epsilon=1 - lo, epsilon_high=hi - 1, loss_type="grpo")
    inputs = batch(tok, seed=2)
    inputs["old_per_token_logps"] = torch.zeros(inputs["completion_ids"].shape) - 2.7  # ratios spread widely
    m = ours.model.train()
    for t in (ours, stock):
        t.current_gradient_accumulation_steps = 1
    loss, grad = loss_and_grad(ours, m, inputs)
    ref_loss, ref_grad = loss_and_grad(stock, m, inputs)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-7)


def test_config_errors(tmp_path):
    with pytest.raises(ValueError, match=r"clip_measure must be one of .* got 'js'"):
        DivClipGRPOConfig(output_dir=str(tmp_path), clip_measure="js", report_to="none", use_cpu=True)
    with pytest.raises(ValueError, match=r"depends on p .* give clip_delta"):
        DivClipGRPOConfig(output_dir=str(tmp_path), clip_measure="binary_kl", report_to="none", use_cpu=True)
    with pytest.raises(ValueError, match=r"clip_delta must be None or a finite number > 0, got -1"):
        DivClipGRPOConfig(output_dir=str(tmp_path), clip_measure="kl3", clip_delta=-1, report_to="none", use_cpu=True)
    args = DivClipGRPOConfig(output_dir=str(tmp_path), clip_measure="kl3", epsilon=0.2, report_to="none", use_cpu=True)
    assert args.clip_spec().delta == pytest.approx(0.0231436, abs=1e-7)


def test_unsupported_loss_type_is_refused(tiny, tmp_path):
    with pytest.raises(ValueError, match=r"supports loss_type in \['grpo', 'bnpo', 'dr_grpo', 'dapo'\], got 'sapo'"):
        make(DivClipGRPOTrainer, DivClipGRPOConfig, tiny, tmp_path, loss_type="sapo")


def test_clip_method_intersection_matches_theory_loss_and_logs_parts(tiny, tmp_path):
    """clip_method='kl3:0.02&binary_tv:0.05' is divclip's intersection loss: the same per-token terms as
    divclip.theory.losses.policy_loss (token-sum), aggregated by TRL's bnpo (masked token mean)."""
    from divclip.theory.losses import policy_loss

    _, tok, _ = tiny
    ours = make(
        DivClipGRPOTrainer, DivClipGRPOConfig, tiny, tmp_path, clip_method="kl3:0.02&binary_tv:0.05", loss_type="bnpo"
    )
    inputs = batch(tok, seed=3)
    inputs["old_per_token_logps"] = torch.zeros(inputs["completion_ids"].shape) - 1.5
    m = ours.model.train()
    ours.current_gradient_accumulation_steps = 1
    loss, _ = loss_and_grad(ours, m, inputs)
    with torch.no_grad():
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
        att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
        lp, _, _ = ours._get_per_token_logps_and_entropies(m, ids, att, inputs["completion_ids"].shape[1])
    mask = inputs["completion_mask"].float()
    adv = inputs["advantages"].unsqueeze(1).expand_as(lp)
    ref, info = policy_loss(lp, inputs["old_per_token_logps"], adv, mask, "kl3:0.02&binary_tv:0.05", "token-mean")
    torch.testing.assert_close(loss, ref.float(), rtol=1e-5, atol=1e-7)
    logged = ours._metrics["train"]
    assert logged["divclip/clipfrac_high_part1"][-1] == pytest.approx(info["clipfrac_high_part1"], abs=1e-6)
    assert logged["clip_ratio/high_mean"][-1] == pytest.approx(info["clipfrac_high"], abs=1e-6)


def test_clip_method_adaptive_delta_steps(tiny, tmp_path):
    from divclip.theory.adaptive import delta_update

    _, tok, _ = tiny
    method = "kl3:0.02@kl3=0.0005:gain=0.5"
    ours = make(DivClipGRPOTrainer, DivClipGRPOConfig, tiny, tmp_path / "unit", clip_method=method, loss_type="bnpo")
    inputs = batch(tok, seed=4)
    inputs["old_per_token_logps"] = torch.zeros(inputs["completion_ids"].shape) - 2.0
    m = ours.model.train()
    ours.current_gradient_accumulation_steps = 1
    loss_and_grad(ours, m, inputs)
    kl3 = ours._metrics["train"]["divclip/kl3"][-1]
    assert ours._metrics["train"]["divclip/delta"][-1] == 0.02
    assert ours.delta_controller.delta[0] == pytest.approx(float(delta_update(0.02, kl3, ours.clip_spec)), rel=1e-12)
    assert ours.delta_controller.delta[0] != 0.02


@pytest.mark.slow  # two short real trainings; the step rule itself is checked fast above
def test_clip_method_adaptive_delta_resumes_from_checkpoints(tiny, tmp_path):
    import json

    method = "kl3:0.02@kl3=0.0005:gain=0.5"
    run = dict(clip_method=method, num_iterations=2, loss_type="dapo", save_strategy="steps", save_steps=1)
    first = make(DivClipGRPOTrainer, DivClipGRPOConfig, tiny, tmp_path / "run", max_steps=1, **run)
    first.train()
    saved = json.loads((tmp_path / "run" / "checkpoint-1" / "divclip_delta.json").read_text())
    assert saved["method"] == method and saved["steps"] >= 1 and saved["delta"] == first.delta_controller.delta.tolist()
    assert any("divclip/delta" in h for h in first.state.log_history)
    resumed = make(DivClipGRPOTrainer, DivClipGRPOConfig, tiny, tmp_path / "run", max_steps=2, **run)
    resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-1"))
    assert resumed.delta_controller.steps == 2 * saved["steps"]  # continued from the saved state, not from δ0


def test_clip_method_errors(tmp_path):
    kw = dict(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    with pytest.raises(ValueError, match=r"clip_method: method 'kl3&dppo_kl': AllOf.parts\[1\] has form='gated'"):
        DivClipGRPOConfig(clip_method="kl3&dppo_kl", **kw)
    with pytest.raises(ValueError, match=r"replaces clip_measure/clip_delta"):
        DivClipGRPOConfig(clip_method="kl3", clip_delta=0.1, **kw)
    with pytest.raises(ValueError, match=r"token-level clip, gated or cispo forms, got form='sapo'"):
        DivClipGRPOConfig(clip_method="sapo", **kw)


def test_default_is_the_stock_trl_clip(tmp_path):
    """Switching GRPOConfig -> DivClipGRPOConfig changes no clip: epsilon_high=0.28 stays DAPO's 0.28."""
    args = DivClipGRPOConfig(output_dir=str(tmp_path), epsilon=0.2, epsilon_high=0.28, report_to="none", use_cpu=True)
    spec = args.clip_spec()
    assert args.clip_measure == "ratio"
    assert (spec.measure, spec.eps_low, spec.eps_high) == ("ratio", 0.2, 0.28)
    assert [a.code for a in args.divclip_advice()] == ["on_policy_clip_inert"]  # TRL's num_iterations=1


def _trl_codes(caplog):
    return [r.getMessage().split("]")[0].split("[")[1] for r in caplog.records if r.name == "divclip.trl"]


def test_trainer_logs_ignored_keys_budgets_and_inert_clip_once(tiny, tmp_path, caplog):
    caplog.set_level("WARNING", logger="divclip.trl")
    make(
        DivClipGRPOTrainer,
        DivClipGRPOConfig,
        tiny,
        tmp_path / "a",
        clip_measure="kl3",
        clip_delta=0.2,
        epsilon_high=0.28,
        num_iterations=1,
    )
    assert _trl_codes(caplog) == ["ignored_key", "divergence_budget_verl_default", "on_policy_clip_inert"]
    text = [r.getMessage() for r in caplog.records]
    assert "clip_measure='kl3' ignores epsilon_high = 0.28" in text[0]
    assert "num_iterations=1" in text[2]
    caplog.clear()
    make(DivClipGRPOTrainer, DivClipGRPOConfig, tiny, tmp_path / "b", clip_measure="kl3", num_iterations=2)
    assert _trl_codes(caplog) == []  # δ derived from epsilon, clip live: nothing to say


@pytest.mark.parametrize("delta", [None, 2.0])
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_ratio_measure_is_stock_grpo_beyond_log_ratio_20(loss_type, delta):
    """clip_measure='ratio' is TRL's loss bit for bit at log r = ±25 and ±40 too (verl's ±20 clamp gave 4.9e8 where
    TRL gives 7.2e10 at log r = 25, A = -1). Both trainers' `_compute_loss` on the same log-probs, in process."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "theory"))
    from trl_helpers import grpo_config, trainer_for, trl_loss

    kw = dict(loss_type=loss_type, epsilon=0.2, epsilon_high=0.28, delta=delta, max_completion_length=16)
    stock = trainer_for(grpo_config(**kw))
    args = DivClipGRPOConfig(output_dir="unused", report_to="none", use_cpu=True, clip_measure="ratio", **kw)
    ours = trainer_for(args, DivClipGRPOTrainer)
    ours.clip_spec, ours.delta_controller = args.clip_spec(), None  # what DivClipGRPOTrainer.__init__ adds
    g = torch.Generator().manual_seed(7)
    old = torch.empty(6, 5).uniform_(-6.0, -0.01, generator=g)
    log_prob = old + 0.3 * torch.randn(6, 5, generator=g)
    log_prob[:, 0] = old[:, 0] + torch.tensor([25.0, -25.0, 40.0, -40.0, 25.0, 0.0])
    adv = torch.tensor([-1.0, 1.0, -0.5, 0.7, 1.0, -2.0])
    mask = torch.ones(6, 5)
    mask[5] = 0.0  # an empty sequence
    mask[2, 3:] = 0.0
    loss, grad = trl_loss(ours, log_prob, old, adv, mask, float(mask.sum()))
    ref_loss, ref_grad = trl_loss(stock, log_prob, old, adv, mask, float(mask.sum()))
    assert torch.equal(loss, ref_loss)
    torch.testing.assert_close(grad, ref_grad, rtol=4e-7, atol=4e-7 * float(ref_grad.abs().max()))
    if delta is None:
        assert float(ref_loss) > 1e9  # −A·e^25 (and e^40) reach the loss unclamped
