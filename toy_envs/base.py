"""What every toy environment provides: batched sampling, token log-probs, rewards and exact metrics.

All environments are *tabular*: the policy of run r is a table of log-probabilities `logp` of shape
(R, prompts, V) for one-token answers or (R, L, context, V) for sequences, so the expected reward, the
probability of a correct answer, pass@k, the entropy and KL(old‖new) are computed exactly, not estimated.
R = methods × seeds runs share one tensor; nothing here loops over runs.

Shapes: R runs, N responses per run per step (prompts_per_step × group_size, groups contiguous),
T tokens per response (1 for one-token answers, L for sequences), P prompts, V answers / vocabulary.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import torch

PASS_AT_K = (1, 4, 8, 16)


def pass_at_k(q: torch.Tensor, k) -> torch.Tensor:
    """Exact pass@k from per-prompt success probabilities q (R, P): mean_p 1 - (1 - q_p)^k.

    The k samples of one prompt are independent draws from the policy, so at least one of them is correct
    with probability 1 - (1 - q)^k; `-expm1(k log1p(-q))` keeps precision when q is tiny. `k` may be a
    tuple of ints: then the result is (len(k), R), all k at once.
    """
    log_miss = torch.log1p(-q.clamp(max=1.0))  # (R, P)
    if isinstance(k, int):
        return (-torch.expm1(k * log_miss)).mean(-1)
    ks = torch.tensor(k, dtype=q.dtype).view(-1, 1, 1)
    return (-torch.expm1(ks * log_miss)).mean(-1)


def sample_categorical(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw: probs (..., V) and uniforms (...) in (0, 1) -> indices (...) in [0, V)."""
    return sample_from_cdf(probs.cumsum(-1), u)


def sample_from_cdf(cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """`sample_categorical` from precomputed CDFs (..., V): the number of CDF entries below u.

    A CDF is non-decreasing, so that count is searchsorted's left insertion point (half the time of
    comparing against every entry and summing)."""
    idx = torch.searchsorted(cdf, u.unsqueeze(-1).contiguous()).squeeze_(-1)
    return idx.clamp_(max=cdf.shape[-1] - 1)  # u above a cdf that rounds to 1 - 1e-16


class ToyEnv(ABC):
    """A problem whose optimum, and every policy statistic, is known in closed form."""

    name: ClassVar[str]
    num_prompts: int
    horizon: int  # T, tokens per response
    vocab: int  # V

    # -- the policy table ------------------------------------------------------------------------
    @abstractmethod
    def init_logits(self) -> torch.Tensor:
        """Initial logits for one run, (P, V) or (L, V, V); the arena copies them for every run."""

    # -- rollouts --------------------------------------------------------------------------------
    @abstractmethod
    def sample(self, logp: torch.Tensor, prompts: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """tokens (R, N, T) from logp, prompts (R, N) and uniforms u (R, N, T)."""

    @abstractmethod
    def token_index(self, prompts: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """(R, N·T): where each sampled token's log-prob sits in a run's flattened table."""

    def token_log_probs(self, logp: torch.Tensor, prompts: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """log π(token_t | prompt, prefix) (R, N, T), differentiable in logp."""
        return self.gather_log_probs(logp, self.token_index(prompts, tokens)).view(tokens.shape)

    @staticmethod
    def gather_log_probs(logp: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """(R, N·T) log-probs at a precomputed `token_index` (one gather: cheap inside the PPO epochs)."""
        return logp.flatten(1).gather(1, index)

    @abstractmethod
    def rewards(self, prompts: torch.Tensor, tokens: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Verifiable rewards (R, N); u (R, N, 2) are uniforms for the noise of stochastic rewards."""

    @abstractmethod
    def is_correct(self, prompts: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Bool (R, N): the response is a correct answer (the event behind pass@k and `correct_prob`)."""

    # -- exact statistics of a policy table ------------------------------------------------------
    @abstractmethod
    def correct_prob(self, logp: torch.Tensor) -> torch.Tensor:
        """(R, P): probability that one response to prompt p is correct (the quantity behind pass@k)."""

    @abstractmethod
    def expected_reward(self, logp: torch.Tensor) -> torch.Tensor:
        """(R,): E[reward] over uniformly drawn prompts and policy responses."""

    @abstractmethod
    def entropy(self, logp: torch.Tensor) -> torch.Tensor:
        """(R,): mean per-token entropy (nats) under the policy's own prompt/prefix distribution."""

    @abstractmethod
    def kl(self, logp_old: torch.Tensor, logp_new: torch.Tensor) -> torch.Tensor:
        """(R,): KL(π_old ‖ π_new) per response (summed over tokens), averaged over prompts."""

    def exact_stats(self, logp_old: torch.Tensor, logp_new: torch.Tensor) -> dict[str, torch.Tensor]:
        """All exact statistics of one update at once: correct_prob (R, P) and expected_reward, entropy
        of π_old, KL(π_old ‖ π_new), each (R,). Environments override it to share work between them."""
        return {
            "correct_prob": self.correct_prob(logp_old),
            "expected_reward": self.expected_reward(logp_old),
            "entropy": self.entropy(logp_old),
            "kl": self.kl(logp_old, logp_new),
        }

    @abstractmethod
    def config(self) -> dict:
        """Constructor arguments that rebuild this environment (recorded with every run)."""

    def best_reward(self) -> float:
        """The largest achievable expected reward (the known answer)."""
        return 1.0

    def describe(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.config().items())
        return f"{self.name}({args})"
