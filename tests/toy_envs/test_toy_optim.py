"""The written-out Adam is torch.optim.Adam, bit for bit, and keeps stacked runs independent."""

import torch

from divclip.toy_envs.optim import Adam


def test_matches_torch_adam_bitwise():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, 5, generator=g, dtype=torch.float64).requires_grad_(True)
    y = x.detach().clone().requires_grad_(True)
    ours, ref = Adam([x], lr=0.05), torch.optim.Adam([y], lr=0.05)
    for _ in range(30):
        grad = torch.randn(4, 3, 5, generator=g, dtype=torch.float64)
        grad[1] = 0.0  # a run with no gradient at some steps, as clipped runs have
        x.grad, y.grad = grad.clone(), grad.clone()
        ours.step()
        ref.step()
    assert torch.equal(x, y)


def test_runs_are_independent():
    g = torch.Generator().manual_seed(1)
    grads = [torch.randn(3, 4, generator=g, dtype=torch.float64) for _ in range(10)]
    both = torch.zeros(3, 4, dtype=torch.float64, requires_grad=True)
    alone = torch.zeros(1, 4, dtype=torch.float64, requires_grad=True)
    a, b = Adam([both], lr=0.1), Adam([alone], lr=0.1)
    for grad in grads:
        both.grad, alone.grad = grad.clone(), grad[1:2].clone()
        a.step()
        b.step()
    assert torch.equal(both[1:2], alone)
