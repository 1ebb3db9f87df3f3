"""Supervised warm start: maximise log π(answer + EOS | prompt) on the task's training split."""

from __future__ import annotations

import numpy as np
import torch

from divclip.trainer.rollout import autocast, encode_completions, encode_prompts, token_log_probs

SFT_STREAM = 1_000_000_007  # the warm start's RNG stream, disjoint from the RL steps' [seed, step]


def warm_start(
    model,
    tokenizer,
    task,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    device,
    bf16: bool = True,
    max_grad_norm: float = 1.0,
    on_step=None,
) -> dict:
    """`steps` AdamW steps of teacher forcing; returns the mean loss of the last 10 % of steps.
    `on_step(loss)` is called after each step (the trainer's progress bar)."""
    if steps == 0:
        return {}
    rng = np.random.default_rng([seed, SFT_STREAM])
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        batch = task.sample(batch_size, rng)
        prompt_ids, prompt_mask = encode_prompts(tokenizer, [e.prompt for e in batch], device)
        comp_ids, comp_mask = encode_completions(tokenizer, [e.answer for e in batch], device)
        input_ids = torch.cat([prompt_ids, comp_ids], dim=1)  # (B, P+T)
        attention = torch.cat([prompt_mask, comp_mask], dim=1)
        with autocast(device, bf16):
            log_probs = token_log_probs(model, input_ids, attention, comp_ids.shape[1])  # (B, T)
        mask = comp_mask.float()
        loss = -(log_probs * mask).sum() / mask.sum()
        loss.backward()
        if max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if on_step is not None:
            on_step(losses[-1])
    tail = losses[-max(1, steps // 10) :]
    return {"sft/loss": sum(tail) / len(tail), "sft/steps": steps}
