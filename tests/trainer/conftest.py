"""Shared tiny settings: every trainer run here takes a second or two on one CPU thread."""

import pytest

from divclip.trainer.config import TrainerConfig

TINY = dict(
    model="tiny",
    task="arith",
    arith_digits=1,
    eval_size=10,
    eval_every=2,
    tiny_n_layer=1,
    tiny_n_embd=32,
    tiny_n_head=2,
    sft_steps=5,
    sft_batch_size=16,
    sft_lr=3e-3,
    steps=4,
    prompts_per_step=4,
    group_size=4,
    max_new_tokens=3,
    ppo_epochs=2,
    minibatches=2,
    lr=1e-3,
    threads=1,
    progress=False,
)


@pytest.fixture
def tiny_config():
    def make(**overrides) -> TrainerConfig:
        return TrainerConfig(**{**TINY, **overrides})

    return make


@pytest.fixture
def without_timing():
    """Drops wall-clock metrics (they differ between runs; everything else must not)."""

    def strip(history):
        return [{k: v for k, v in row.items() if not k.startswith(("time/", "perf/"))} for row in history]

    return strip
