"""Atomic checkpoints: a run killed at any instant leaves either the previous checkpoint or the new one.

Layout under `output_dir/checkpoints/`:
  step-000040/            model (save_pretrained: config.json + safetensors), tokenizer files,
                          trainer_state.pt (optimizer state, step, metrics history, config)
  latest                  the name of the newest complete checkpoint
A checkpoint is written into a hidden temporary directory and renamed into place (a rename is atomic on one
file system); `latest` is replaced the same way. Each checkpoint holds the complete metrics history, so a
resumed run rewrites metrics.jsonl / metrics.csv from it and continues the same step count.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import torch

STATE_FILE = "trainer_state.pt"


def _checkpoint_root(output_dir) -> Path:
    return Path(output_dir) / "checkpoints"


def write_text_atomic(path: Path, text: str):
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@contextlib.contextmanager
def quiet_saving():
    """No 'Writing model shards' bars on stderr for every checkpoint (the run has its own progress bar)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def save_checkpoint(output_dir, step: int, model, tokenizer, optimizer, history: list[dict], config: dict,
                    keep: int = 2, extra: dict | None = None) -> Path:
    """Write checkpoint `step` atomically, point `latest` at it, and prune all but the `keep` newest.
    `extra`: more trainer state (plain lists, numbers, strings), e.g. the adaptive-δ controller's; read it back
    with `load_extra_state`."""
    root = _checkpoint_root(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:06d}"
    final, tmp = root / name, root / f".{name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    with quiet_saving():
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    state = {"step": step, "optimizer": optimizer.state_dict(), "history": history, "config": config,
             "extra": extra or {}}
    torch.save(state, tmp / STATE_FILE)
    if final.exists():  # a rerun of the same step replaces the old copy
        shutil.rmtree(final)
    os.replace(tmp, final)
    write_text_atomic(root / "latest", name)
    for old in sorted(p for p in root.glob("step-*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(output_dir) -> Path | None:
    """The newest complete checkpoint directory, or None."""
    root = _checkpoint_root(output_dir)
    pointer = root / "latest"
    if pointer.is_file():
        path = root / pointer.read_text(encoding="utf-8").strip()
        if (path / STATE_FILE).is_file():
            return path
    done = sorted(p for p in root.glob("step-*") if (p / STATE_FILE).is_file())
    return done[-1] if done else None


# Fields a resumed run may change: they do not alter what steps 1..N compute.
RESUMABLE_CHANGES = frozenset({"steps", "eval_every", "checkpoint_every", "keep_checkpoints", "output_dir", "resume",
                               "progress", "device"})


def check_resumable(path: Path, config: dict):
    """ValueError when the checkpoint at `path` was written by a run with different settings."""
    saved = torch.load(path / STATE_FILE, map_location="cpu", weights_only=True)["config"]
    def same(a, b):
        return (list(a) if isinstance(a, tuple) else a) == (list(b) if isinstance(b, tuple) else b)

    changed = {k: (saved[k], v) for k, v in config.items()
               if k in saved and k not in RESUMABLE_CHANGES and not same(saved[k], v)}
    if changed:
        diffs = ", ".join(f"{k}={new!r} (checkpoint: {old!r})" for k, (old, new) in sorted(changed.items()))
        raise ValueError(f"output_dir {str(path.parents[1])!r} holds a run with other settings: {diffs}; use another "
                         "output_dir, or resume=False (--no-resume) to start over there")


def load_checkpoint(path: Path, model, optimizer, device) -> tuple[int, list[dict]]:
    """Load weights and optimizer state in place; returns (step, metrics history)."""
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(path, dtype=next(model.parameters()).dtype)
    model.load_state_dict(saved.state_dict())
    state = torch.load(path / STATE_FILE, map_location=device, weights_only=True)  # plain tensors, numbers, strings
    optimizer.load_state_dict(state["optimizer"])
    return int(state["step"]), list(state["history"])


def load_extra_state(path: Path) -> dict:
    """The `extra` trainer state saved with checkpoint `path` ({} for checkpoints written without it)."""
    state = torch.load(Path(path) / STATE_FILE, map_location="cpu", weights_only=True)
    return dict(state.get("extra") or {})
