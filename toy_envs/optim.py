"""Adam for stacked per-run parameters, written out in five in-place ops.

The update is torch.optim.Adam's single-tensor algorithm (β = (0.9, 0.999), ε = 1e-8, no weight decay), op
for op, so it matches it to the last bit (tests/toy_envs/test_optim.py). It is written out because
torch.optim's first construction imports torch._dynamo (~1.5 s, longer than a whole bandit run) and its
per-step wrapper costs more than the update itself on these tiny tensors.

Adam is elementwise: every entry of a stacked (runs, …) parameter has its own moments and step, so run r
is updated from run r's gradient alone and seeds stay independent.
"""

from __future__ import annotations

import math

import torch


class Adam:
    def __init__(self, params: list[torch.Tensor], lr: float, betas=(0.9, 0.999), eps: float = 1e-8):
        self.params, self.lr, self.betas, self.eps = list(params), lr, betas, eps
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        self.t = 0

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        b1, b2 = self.betas
        step_size = self.lr / (1 - b1**self.t)
        bc2_sqrt = math.sqrt(1 - b2**self.t)
        for p, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq):
            g = p.grad
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            p.addcdiv_(m, (v.sqrt() / bc2_sqrt).add_(self.eps), value=-step_size)
