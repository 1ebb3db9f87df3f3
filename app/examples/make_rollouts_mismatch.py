"""Writes app/examples/rollouts_mismatch.jsonl: a real bf16-vs-float32 rollout/trainer mismatch from a tiny model.

    .venv/bin/python app/examples/make_rollouts_mismatch.py          # rewrites the file (deterministic on CPU)

The model is a 2-layer GPT-2 built from a config in code (random weights, seed 0; initializer_range 0.2 so that
its next-token distributions are peaked like a trained model's). The "inference engine" is that model cast to
bfloat16: it samples the responses and its log-probs (bf16 logits, log-softmax in float32, as vLLM returns them)
are `rollout_log_prob`. The "trainer" is the same weights in float32: its log-probs of the same tokens are
`old_log_prob`. The only difference between the two is the precision, so ρ = π_old/π_rollout is the mismatch a
bf16 rollout engine gives. Responses of 8 prompts x 4 samples end at a per-sequence length drawn in [24, 160];
the advantages are GRPO's group-normalised reward, the reward being the share of even token ids (a toy task).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

OUT = Path(__file__).with_name("rollouts_mismatch.jsonl")
PROMPTS, GROUP, PROMPT_LEN, MIN_LEN, MAX_LEN = 8, 4, 8, 24, 160


def tiny_model():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=512,
        n_positions=256,
        n_embd=64,
        n_layer=2,
        n_head=2,
        initializer_range=0.2,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel(config).eval()


@torch.no_grad()
def sample(model_bf16, prompts, lengths, g):
    """Token-by-token sampling from the bf16 model; returns (tokens (B, P + T), rollout log-probs (B, T))."""
    seq = prompts
    logps = []
    for _ in range(int(lengths.max())):
        logits = model_bf16(seq).logits[:, -1].float()  # bf16 forward; vLLM's log-softmax is in float32
        lp = torch.log_softmax(logits, -1)
        nxt = torch.multinomial(lp.exp(), 1, generator=g)
        logps.append(lp.gather(-1, nxt))
        seq = torch.cat([seq, nxt], dim=1)
    return seq, torch.cat(logps, dim=1)


@torch.no_grad()
def trainer_log_probs(model, seq, t):
    logits = model(seq).logits[:, -t - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, seq[:, -t:, None])[..., 0]


def main():
    torch.set_num_threads(1)
    model = tiny_model()
    model_bf16 = tiny_model().to(torch.bfloat16)
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(0, 512, (PROMPTS, PROMPT_LEN), generator=g).repeat_interleave(GROUP, 0)
    lengths = torch.randint(MIN_LEN, MAX_LEN + 1, (PROMPTS * GROUP,), generator=g)
    seq, rollout = sample(model_bf16, prompts, lengths, g)
    t = rollout.shape[1]
    old = trainer_log_probs(model, seq, t)
    tokens = seq[:, -t:]
    mask = torch.arange(t)[None, :] < lengths[:, None]
    reward = ((tokens % 2 == 0) & mask).sum(-1) / lengths
    r = reward.view(PROMPTS, GROUP)
    adv = ((r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-6)).view(-1)
    with OUT.open("w") as f:
        for i in range(PROMPTS * GROUP):
            n = int(lengths[i])
            row = {
                "old_log_prob": [round(float(x), 6) for x in old[i, :n]],
                "rollout_log_prob": [round(float(x), 6) for x in rollout[i, :n]],
                "advantages": round(float(adv[i]), 6),
            }
            f.write(json.dumps(row) + "\n")
    lr = (old - rollout)[mask]
    print(f"wrote {OUT.name}: {int(mask.sum())} tokens, mean log ρ {float(lr.mean()):+.4g}, std {float(lr.std()):.4g}")


if __name__ == "__main__":
    main()
