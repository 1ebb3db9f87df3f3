"""Environments by name, with defaults that show the methods diverging within a few hundred steps.

`ENVS[name].arena` holds the recommended `run_arena` settings for that environment (the app's defaults
when a user picks it from a selectbox; the CLI uses them for every option left unset).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from divclip.toy_envs.base import ToyEnv
from divclip.toy_envs.categorical import Bandit, SparseCategorical
from divclip.toy_envs.sequence import TokenSequence


@dataclass(frozen=True)
class EnvInfo:
    cls: type
    summary: str
    arena: dict = field(default_factory=dict)


ENVS: dict[str, EnvInfo] = {
    "bandit": EnvInfo(
        Bandit,
        "16-armed Bernoulli bandit, arm means evenly spaced in [0.1, 0.9]; the answer is the best arm.",
        {"steps": 300, "group_size": 16, "prompts_per_step": 1, "ppo_epochs": 4, "lr": 0.05},
    ),
    "sparse": EnvInfo(
        SparseCategorical,
        "32 prompts × 64 answers, one correct answer per prompt starting at probability 0.005 (exploration).",
        {"steps": 500, "group_size": 8, "prompts_per_step": 4, "ppo_epochs": 4, "lr": 0.1},
    ),
    "sequence": EnvInfo(
        TokenSequence,
        "8 tokens over a vocabulary of 8, reward 1 iff the token sum is 0 mod 13 (token-level ratios).",
        {"steps": 200, "group_size": 8, "prompts_per_step": 2, "ppo_epochs": 4, "lr": 0.05},
    ),
}


def make_env(name: str, **kwargs) -> ToyEnv:
    """Build the environment registered as `name`; keyword arguments go to its constructor."""
    if name not in ENVS:
        raise ValueError(f"env must be one of {sorted(ENVS)}, got {name!r}")
    try:
        return ENVS[name].cls(**kwargs)
    except TypeError as exc:  # unknown keyword: name the env and the bad argument
        raise ValueError(f"bad arguments for env {name!r}: {exc}") from None
