"""divclip's GRPO-family trainer: TrainerConfig + GRPOTrainer over any `theory.losses.ClipSpec`.

    from trainer import TrainerConfig, train
    result = train(TrainerConfig(task="arith", method="atr", sft_steps=1000, lr=1e-4))

The names below are imported on first use, so `import trainer.cli` (the `divclip train` parser) stays free of
torch and transformers. Integrations with verl and TRL live in `trainer.integrations` (imported on demand).
"""

import importlib

_EXPORTS = {
    "TRAIN_PRESETS": "trainer.config", "TrainerConfig": "trainer.config", "from_preset": "trainer.config",
    "GRPOTrainer": "trainer.grpo", "TrainResult": "trainer.grpo", "train": "trainer.grpo",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'trainer' has no attribute {name!r}")
