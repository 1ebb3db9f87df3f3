"""divclip.toy_envs.policies.log_softmax: torch's log_softmax to ~1 ulp, row by row, with extreme logits too."""

import pytest
import torch

from divclip.toy_envs.policies import log_softmax


@pytest.mark.parametrize("vocab", [2, 8, 15, 16, 64])
def test_matches_torch_log_softmax_values_and_gradients(vocab):
    g = torch.Generator().manual_seed(vocab)
    x = (3.0 * torch.randn(6, 5, vocab, generator=g, dtype=torch.float64)).requires_grad_(True)
    w = torch.randn(6, 5, vocab, generator=g, dtype=torch.float64)
    ours = log_softmax(x)
    (grad_ours,) = torch.autograd.grad((ours * w).sum(), x)
    ref = torch.log_softmax(x, -1)
    (grad_ref,) = torch.autograd.grad((ref * w).sum(), x)
    torch.testing.assert_close(ours, ref, rtol=0, atol=4e-15)
    torch.testing.assert_close(grad_ours, grad_ref, rtol=0, atol=1e-14)


def test_rows_beyond_the_unshifted_range_fall_back_to_the_shifted_form():
    x = torch.tensor([[800.0, 799.0, 0.0], [-900.0, -901.0, -950.0], [0.5, -0.5, 0.0]], dtype=torch.float64)
    out = log_softmax(x)
    assert torch.isfinite(out).all()
    # x - log Σ e^x rounds at the scale of x (ulp(950) = 1.1e-13), torch's (x - max) - log Σ e^(x - max) does not
    torch.testing.assert_close(out, torch.log_softmax(x, -1), rtol=0, atol=4 * 1.2e-13)


def test_a_row_gets_the_same_bits_alone_or_next_to_extreme_rows():
    g = torch.Generator().manual_seed(0)
    rows = torch.randn(4, 8, generator=g, dtype=torch.float64)
    batch = torch.cat([rows, torch.full((1, 8), 1e3, dtype=torch.float64) + torch.arange(8)])
    assert torch.equal(log_softmax(batch)[:4], log_softmax(rows))
    for i in range(4):
        assert torch.equal(log_softmax(rows[i : i + 1]), log_softmax(rows)[i : i + 1])
