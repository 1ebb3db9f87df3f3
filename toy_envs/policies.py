"""Batched policies: R independent runs stored as one stacked parameter per tensor.

Both policies produce the environment's normalised log-probability table (R, *rows, V), so every exact
statistic of the environment applies to either.

* `TabularPolicy`: the table *is* the parameter, one logit per (row, answer), started at the env's logits.
* `MLPPolicy`: logits = env init + MLP(one-hot row), one hidden layer per run (batched matmul). A row is a
  prompt, or a (position, previous token) pair for sequences; the hidden layer shares statistical strength
  across rows, so updating one context moves others, like a (very) small language model. The output layer
  starts at zero, so every run starts exactly at the environment's initial policy; the hidden layer's
  random weights come from each run's own seed.

Seeds stay independent under Adam on the stacked tensors (`divclip.toy_envs.optim`, torch.optim.Adam's update):
Adam's moments and update are elementwise, and run r's entries only ever receive run r's gradient (its loss
term touches only its rows).
Anything that mixes entries across runs — a global gradient-norm clip, weight statistics — would couple
the seeds and is deliberately absent.
"""

from __future__ import annotations

import math

import torch

from divclip.toy_envs import rng

_INIT_STREAM = 7


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """Normalise the last dim, exact to ~1 ulp, each row independently of the others (so a seed trains the
    same alone or batched: the branch depends on V only, and a row's value on that row only).

    On short rows (V < 16: the sequence env's (R, L, V, V) table) torch's CPU log_softmax and logsumexp spend
    most of their time in max-shift reductions over a few numbers, so log Σ e^x is taken without the shift.
    That is exact wherever |log Σ e^x| < 700 (no overflow, no fully underflowed row); rows outside, checked
    in one read, get the shifted logsumexp.
    """
    if logits.shape[-1] >= 16:
        return torch.log_softmax(logits, -1)
    log_norm = logits.exp().sum(-1, keepdim=True).log()
    if not log_norm.detach().abs().max().item() < 700.0:  # rare: some row needs the shift (or holds NaN)
        log_norm = torch.where(log_norm.abs() < 700.0, log_norm, torch.logsumexp(logits, -1, keepdim=True))
    return logits - log_norm


class TabularPolicy:
    def __init__(self, init_logits: torch.Tensor, runs: int, keys: torch.Tensor):
        self.logits = init_logits.unsqueeze(0).repeat(runs, *([1] * init_logits.dim())).requires_grad_(True)

    def parameters(self) -> list[torch.Tensor]:
        return [self.logits]

    def log_probs(self) -> torch.Tensor:
        return log_softmax(self.logits)


class MLPPolicy:
    def __init__(self, init_logits: torch.Tensor, runs: int, keys: torch.Tensor, hidden: int = 32):
        *rows_shape, V = init_logits.shape
        self.rows_shape, self.vocab = tuple(rows_shape), V
        n_rows = math.prod(rows_shape)
        # Row features: one-hot of each index along every row axis (prompt; or position and context).
        feats = [
            torch.nn.functional.one_hot(ix.flatten(), n).to(torch.float64)
            for ix, n in zip(torch.meshgrid(*[torch.arange(n) for n in rows_shape], indexing="ij"), rows_shape)
        ]
        self.x = torch.cat(feats, -1)  # (rows, F)
        F = self.x.shape[1]
        self.base = init_logits.reshape(n_rows, V)
        u = rng.uniform(keys, 0, 2 * F * hidden, stream=_INIT_STREAM).view(runs, 2, F, hidden)
        w1 = rng.normal_from_uniform(u[:, 0], u[:, 1]) / math.sqrt(F)
        self.w1 = w1.requires_grad_(True)  # (R, F, H)
        self.b1 = torch.zeros(runs, 1, hidden, dtype=torch.float64, requires_grad=True)
        self.w2 = torch.zeros(runs, hidden, V, dtype=torch.float64, requires_grad=True)
        self.b2 = torch.zeros(runs, 1, V, dtype=torch.float64, requires_grad=True)

    def parameters(self) -> list[torch.Tensor]:
        return [self.w1, self.b1, self.w2, self.b2]

    def log_probs(self) -> torch.Tensor:
        h = torch.tanh(torch.matmul(self.x, self.w1) + self.b1)  # (R, rows, H)
        logits = self.base + torch.matmul(h, self.w2) + self.b2  # (R, rows, V)
        return log_softmax(logits).reshape(-1, *self.rows_shape, self.vocab)


POLICIES = {"tabular": TabularPolicy, "mlp": MLPPolicy}
