"""Errors of `divclip check`: the readers' (`divclip.engines.errors`) and the rollout files'.

The CLI prints the message and exits with status 2; the app shows it with `st.error`.
"""

from __future__ import annotations

from divclip.engines.errors import ConfigError, SanityInputError

__all__ = ["ConfigError", "RolloutFileError", "SanityInputError"]


class RolloutFileError(SanityInputError):
    """A rollout file (.npz, .parquet, .jsonl, .safetensors) that is unreadable, unsafe or has a bad field."""
