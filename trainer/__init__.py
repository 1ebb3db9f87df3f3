"""divclip's GRPO-family trainer: TrainerConfig + GRPOTrainer over any `divclip.theory.losses.ClipSpec`.

    from divclip.trainer import TrainerConfig, train
    result = train(TrainerConfig(task="arith", method="atr", sft_steps=1000, lr=1e-4))

The names below are imported on first use, so `import divclip.cli.train` (the `divclip train` parser) stays free of
torch and transformers. Integrations with verl and TRL live in `divclip.trainer.integrations` (imported on demand).
"""

import importlib

_EXPORTS = {
    "TRAIN_PRESETS": "divclip.trainer.config",
    "TrainerConfig": "divclip.trainer.config",
    "from_preset": "divclip.trainer.config",
    "GRPOTrainer": "divclip.trainer.grpo",
    "TrainResult": "divclip.trainer.grpo",
    "train": "divclip.trainer.grpo",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'trainer' has no attribute {name!r}")
