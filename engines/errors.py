"""The errors of reading a config: every bad input becomes one of these, a ValueError whose message names it.

`divclip check` prints the message and exits with status 2; the app shows it with `st.error`. Nothing a user can
put in a file should escape as another exception type (a BadZipFile, a YAML error, a RecursionError …): the
readers catch those at the boundary and re-raise them as these (`divclip.sanity.errors` adds the rollout files').
"""

from __future__ import annotations


class SanityInputError(ValueError):
    """A config or rollout file that divclip cannot use."""


class ConfigError(SanityInputError):
    """A config of an engine (YAML, JSON, hydra overrides, a launch script, Python) that is unreadable, unsafe or
    of the wrong shape."""
