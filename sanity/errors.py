"""Errors of `divclip check`: every bad input becomes one of these, a ValueError whose message names the problem.

The CLI prints the message and exits with status 2; the app shows it with `st.error`. Nothing a user can put
in a file should escape as another exception type (a BadZipFile, a YAML error, a RecursionError …): the loaders
catch those at the boundary and re-raise them as the subclasses below.
"""

from __future__ import annotations


class SanityInputError(ValueError):
    """A config or rollout file that `divclip check` cannot use."""


class ConfigError(SanityInputError):
    """A verl/TRL config (YAML, JSON or hydra overrides) that is unreadable, unsafe or of the wrong shape."""


class RolloutFileError(SanityInputError):
    """A rollout file (.npz, .parquet, .jsonl, .safetensors) that is unreadable, unsafe or has a bad field."""
