"""One-token environments: a K-armed bandit and many prompts with a few rare correct answers.

Both are a table of mean rewards `means` (P, V) and a mask of correct answers `correct` (P, V); the policy
of run r is `logp[r]` (P, V). With π = exp(logp):
    E[R]           = mean_p Σ_a π(a|p) means(p, a)
    P(correct | p) = Σ_a π(a|p) correct(p, a)
    KL(old ‖ new)  = mean_p Σ_a π_old(a|p) (log π_old - log π_new)(a|p).
"""

from __future__ import annotations

import torch

from divclip.toy_envs import rng
from divclip.toy_envs.base import ToyEnv, sample_categorical
from divclip.toy_envs.validation import check_choice, check_int, check_real

MAX_ANSWERS = 65_536
"""Most arms (bandit) or answers per prompt (sparse)."""
MAX_PROMPTS = 65_536
"""Most prompts (sparse)."""
MAX_TABLE = 2**22
"""Largest prompts × answers (the environment's reward and logit tables)."""


class CategoricalEnv(ToyEnv):
    """P prompts, V one-token answers; deterministic rewards `means` unless a subclass adds noise."""

    horizon = 1

    def __init__(self, means: torch.Tensor, correct: torch.Tensor, init_logits: torch.Tensor):
        self.means = means.to(torch.float64)  # (P, V)
        self.correct = correct.to(torch.float64)  # (P, V) 0/1
        self._init_logits = init_logits.to(torch.float64)  # (P, V)
        self.num_prompts, self.vocab = self.means.shape

    def init_logits(self) -> torch.Tensor:
        return self._init_logits.clone()

    def sample(self, logp, prompts, u):
        rows = logp.gather(1, prompts.unsqueeze(-1).expand(-1, -1, self.vocab))  # (R, N, V)
        return sample_categorical(rows.exp(), u[..., 0]).unsqueeze(-1)  # (R, N, 1)

    def token_index(self, prompts, tokens):
        return prompts * self.vocab + tokens[..., 0]  # (R, N) into the (P·V) table

    def _mean_reward(self, prompts, tokens):
        return self.means.flatten()[prompts * self.vocab + tokens[..., 0]]  # (R, N)

    def rewards(self, prompts, tokens, u):
        return self._mean_reward(prompts, tokens)

    def is_correct(self, prompts, tokens):
        return self.correct.flatten()[self.token_index(prompts, tokens)] > 0

    def correct_prob(self, logp):
        return (logp.exp() * self.correct).sum(-1)  # (R, P)

    def expected_reward(self, logp):
        return (logp.exp() * self.means).sum(-1).mean(-1)

    def entropy(self, logp):
        return -(logp.exp() * logp).sum(-1).mean(-1)

    def kl(self, logp_old, logp_new):
        return (logp_old.exp() * (logp_old - logp_new)).sum(-1).mean(-1)

    def exact_stats(self, logp_old, logp_new):
        probs = logp_old.exp()  # (R, P, V), shared by all four statistics
        per_prompt = (probs.unsqueeze(1) * self._stat_weights(logp_old, logp_new)).sum(-1)  # (R, 4, P)
        q = per_prompt[:, 0]
        reward, ent, kl = per_prompt[:, 1:].mean(-1).unbind(1)
        return {"correct_prob": q, "expected_reward": reward, "entropy": ent, "kl": kl}

    def _stat_weights(self, logp_old, logp_new):
        """(R, 4, P, V): what π_old is summed against for P(correct), E[R], entropy and KL."""
        R = logp_old.shape[0]
        fixed = torch.stack([self.correct, self.means]).expand(R, 2, *self.means.shape)
        return torch.cat([fixed, torch.stack([-logp_old, logp_old - logp_new], 1)], 1)

    def best_reward(self) -> float:
        return float(self.means.max(-1).values.mean())


class Bandit(CategoricalEnv):
    """K arms, one prompt. Arm means are evenly spaced in [0.1, 0.9] and shuffled by `env_seed`.

    Rewards are Bernoulli(μ_a) or μ_a + N(0, noise_std²). The 'correct answer' is the best arm, so
    pass@k is the chance that k pulls include it. The policy starts uniform.
    """

    name = "bandit"

    def __init__(
        self, arms: int = 16, reward: str = "bernoulli", noise_std: float = 0.5, means=None, env_seed: int = 0
    ):
        self.arms = check_int("arms", arms, minimum=2, maximum=MAX_ANSWERS)
        self.reward_kind = check_choice("reward", reward, ("bernoulli", "gaussian"))
        self.noise_std = check_real("noise_std", noise_std, minimum=0.0)
        self.env_seed = check_int("env_seed", env_seed, minimum=0)
        if means is None:
            g = torch.Generator().manual_seed(self.env_seed)
            mu = torch.linspace(0.1, 0.9, self.arms, dtype=torch.float64)[torch.randperm(self.arms, generator=g)]
        else:
            mu = torch.as_tensor(means, dtype=torch.float64).flatten()
            if mu.numel() != self.arms or not torch.isfinite(mu).all():
                raise ValueError(f"means must be {self.arms} finite numbers (one per arm), got {means!r}")
            if self.reward_kind == "bernoulli" and ((mu < 0) | (mu > 1)).any():
                raise ValueError(f"Bernoulli arm means must lie in [0, 1], got {mu.tolist()}")
        best = mu == mu.max()
        super().__init__(mu[None, :], best[None, :], torch.zeros(1, self.arms))

    @property
    def arm_means(self) -> torch.Tensor:
        return self.means[0]

    def rewards(self, prompts, tokens, u):
        mu = self._mean_reward(prompts, tokens)  # (R, N)
        if self.reward_kind == "bernoulli":
            return (u[..., 0] < mu).to(torch.float64)
        return mu + self.noise_std * rng.normal_from_uniform(u[..., 0], u[..., 1])

    def config(self) -> dict:
        return {
            "arms": self.arms,
            "reward": self.reward_kind,
            "noise_std": self.noise_std,
            "means": [round(x, 6) for x in self.arm_means.tolist()],
            "env_seed": self.env_seed,
        }


class SparseCategorical(CategoricalEnv):
    """Many prompts × V answers; `correct_per_prompt` answers per prompt earn reward 1, the rest 0.

    The correct answers start rare: wrong answers get logits N(0, logit_std²) and the correct ones share
    total probability `init_correct_prob`, so a method must keep sampling unlikely answers to find them.
    """

    name = "sparse"

    def __init__(
        self,
        prompts: int = 32,
        answers: int = 64,
        correct_per_prompt: int = 1,
        init_correct_prob: float = 0.005,
        logit_std: float = 1.0,
        env_seed: int = 0,
    ):
        self.prompts = check_int("prompts", prompts, minimum=1, maximum=MAX_PROMPTS)
        self.answers = check_int("answers", answers, minimum=2, maximum=MAX_ANSWERS)
        if self.prompts * self.answers > MAX_TABLE:
            raise ValueError(f"prompts × answers must be at most {MAX_TABLE}, got {self.prompts} × {self.answers}")
        self.correct_per_prompt = check_int(
            "correct_per_prompt", correct_per_prompt, minimum=1, maximum=self.answers - 1
        )
        self.init_correct_prob = check_real(
            "init_correct_prob", init_correct_prob, minimum=0.0, maximum=1.0, open_interval=True
        )
        self.logit_std = check_real("logit_std", logit_std, minimum=0.0)
        self.env_seed = check_int("env_seed", env_seed, minimum=0)
        g = torch.Generator().manual_seed(self.env_seed)
        P, V, c = self.prompts, self.answers, self.correct_per_prompt
        order = torch.rand(P, V, generator=g).argsort(-1)
        correct = torch.zeros(P, V, dtype=torch.bool).scatter_(1, order[:, :c], True)
        logits = self.logit_std * torch.randn(P, V, generator=g, dtype=torch.float64)
        wrong_mass = torch.where(correct, 0.0, logits.exp()).sum(-1, keepdim=True)  # W = Σ_wrong e^w
        # c·e^x / (c·e^x + W) = q  <=>  e^x = q·W / (c·(1 - q))
        q = self.init_correct_prob
        correct_logit = torch.log(q * wrong_mass / (c * (1.0 - q)))
        logits = torch.where(correct, correct_logit, logits)
        super().__init__(correct.to(torch.float64), correct, logits)

    def config(self) -> dict:
        return {
            "prompts": self.prompts,
            "answers": self.answers,
            "correct_per_prompt": self.correct_per_prompt,
            "init_correct_prob": self.init_correct_prob,
            "logit_std": self.logit_std,
            "env_seed": self.env_seed,
        }
