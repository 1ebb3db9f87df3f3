"""Sampling completions with `generate` and scoring tokens under a policy.

Prompts are left-padded so every completion starts in the same column P; positions follow the attention mask
(position = number of real tokens before it), which is what `generate` uses, so a forward pass over
prompt + completion reproduces the sampler's distribution.
"""

from __future__ import annotations

import contextlib

import torch
from transformers import GenerationConfig


def autocast(device: torch.device, bf16: bool):
    """bf16 autocast on CUDA when asked; a no-op context elsewhere."""
    if device.type == "cuda" and bf16:
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def encode_prompts(tokenizer, prompts: list[str], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded (ids, attention_mask), both (N, P)."""
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


def encode_completions(tokenizer, texts: list[str], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded completion ids ending in EOS, and their mask, both (N, T) (supervised warm start)."""
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return ids.to(device), mask.to(device)


def completion_mask(completion_ids: torch.Tensor, eos_token_id: int) -> torch.Tensor:
    """(N, T) long: 1 up to and including the first EOS (all T tokens when there is none)."""
    is_eos = completion_ids == eos_token_id  # (N, T)
    after_eos = (is_eos.cumsum(-1) - is_eos.long()) > 0  # strictly after the first EOS
    return (~after_eos).long()


@torch.no_grad()
def sample(
    model, tokenizer, prompt_ids, prompt_mask, *, max_new_tokens: int, temperature: float = 1.0, greedy: bool = False
) -> torch.Tensor:
    """(N, T) completion ids, T <= max_new_tokens, padded after EOS. Pure sampling (no top-k/top-p), so the
    sampler is exactly softmax(logits / temperature), the policy the loss calls π_old."""
    config = GenerationConfig(
        do_sample=not greedy,
        temperature=None if greedy else temperature,
        top_k=None if greedy else 0,
        top_p=None if greedy else 1.0,
        max_new_tokens=max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    out = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, generation_config=config)
    return out[:, prompt_ids.shape[1] :]


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def token_log_probs(
    model, input_ids, attention_mask, completion_len: int, temperature: float = 1.0, with_entropy: bool = False
):
    """Log-probs (N, T) of the last `completion_len` tokens of `input_ids` (N, P+T), in float32, and optionally
    the entropy (N, T) of each next-token distribution. Only the T+1 last logits are materialised."""
    logits = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids(attention_mask),
        logits_to_keep=completion_len + 1,
    ).logits[:, :-1]  # (N, T, V): logits at position t predict token t + 1
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    log_probs = torch.log_softmax(logits, dim=-1)  # (N, T, V)
    targets = input_ids[:, -completion_len:]  # (N, T)
    chosen = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (N, T)
    if not with_entropy:
        return chosen
    with torch.no_grad():
        entropy = -(log_probs.exp() * log_probs).sum(-1)  # (N, T)
    return chosen, entropy


def decode(tokenizer, completion_ids: torch.Tensor, mask: torch.Tensor) -> list[str]:
    """Completion texts without special tokens (EOS and padding dropped)."""
    lengths = mask.sum(-1).tolist()
    return tokenizer.batch_decode(
        [row[:n] for row, n in zip(completion_ids.tolist(), lengths)], skip_special_tokens=True
    )
