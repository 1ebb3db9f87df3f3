"""A task with a verifiable reward: `Example`s (prompt, answer), a train and a held-out split, and its verifier.

The task builders (`divclip.trainer.tasks`, `divclip.trainer.puzzles`) both import these; `tasks`, which picks a
built-in task by name, imports `puzzles`, so the types live below both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["Example", "Task", "exact_match"]


@dataclass(frozen=True)
class Example:
    prompt: str
    answer: str


@dataclass(frozen=True)
class Task:
    name: str
    train: tuple[Example, ...]
    eval: tuple[Example, ...]
    score: Callable[[str, str], float]
    """Verifier: score(completion_text, answer) -> 1.0 or 0.0."""

    def sample(self, n: int, rng: np.random.Generator) -> list[Example]:
        """n training examples drawn uniformly with replacement."""
        return [self.train[i] for i in rng.integers(0, len(self.train), size=n)]


def exact_match(completion: str, answer: str) -> float:
    return float(completion.strip() == answer.strip())
