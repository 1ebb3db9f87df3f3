"""The engine arithmetic divclip declares beside verl's (issue 35): the clip form's `seq_grad_mean`, the aggregations
seq-mean-token-mean-noeps and token-mean-min1, and the unclamped ratio in the numpy weight the atlas draws.
References: plain Python sums over rows (the aggregations), autograd through the sequence mean written out
(seq_grad_mean), and divclip's own torch gradient (the numpy weight w, ∂ℓ/∂log π = −A·w). The engines' own code is
the reference in tests/engines/test_parity_openrlhf.py and test_parity_slime.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from divclip.theory.forms import get_form
from divclip.theory.loss_metrics import agg_loss
from divclip.theory.losses import policy_loss
from divclip.theory.spec import ClipSpec, method_string, parse_method

ROWS = [[0.5, -1.0, 2.0], [3.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.5, 0.25, 0.0]]
MASK = [[1, 1, 1], [1, 0, 0], [0, 0, 0], [1, 1, 0]]


def test_the_engine_aggregations_against_plain_sums():
    loss, mask = torch.tensor(ROWS, dtype=torch.float64), torch.tensor(MASK, dtype=torch.float64)
    counts = [sum(m) for m in MASK]
    sums = [sum(x * m for x, m in zip(row, ms)) for row, ms in zip(ROWS, MASK)]
    noeps = sum(s / n for s, n in zip(sums, counts) if n) / sum(1 for n in counts if n)
    min1 = sum(sums) / sum(max(n, 1) for n in counts)
    assert agg_loss(loss, mask, "seq-mean-token-mean-noeps").item() == noeps  # exactly: no 1e-8 anywhere
    assert agg_loss(loss, mask, "token-mean-min1").item() == pytest.approx(min1, rel=1e-15)
    assert agg_loss(loss, mask, "seq-mean-token-mean").item() != noeps  # verl's 1e-8 in each count


@pytest.mark.parametrize("micro", [1, 2, 3, 4, 5])
def test_token_mean_legacy_against_plain_sums(micro):
    """SkyRL's token_mean_legacy: the token mean of each whole micro-batch of `micro` rows, their mean; rows past the
    last whole one count nothing, and with none whole the loss is 0 (SkyRL's own function: test_parity_skyrl.py)."""
    loss, mask = torch.tensor(ROWS, dtype=torch.float64), torch.tensor(MASK, dtype=torch.float64)
    counts = [sum(m) for m in MASK]
    sums = [sum(x * m for x, m in zip(row, ms)) for row, ms in zip(ROWS, MASK)]
    whole = len(ROWS) // micro
    cuts = [range(i * micro, (i + 1) * micro) for i in range(whole)]
    means = [sum(sums[i] for i in c) / max(sum(counts[i] for i in c), 1) for c in cuts]
    want = sum(means) / whole if whole else 0.0
    got = agg_loss(loss, mask, "token-mean-legacy", micro).item()
    assert got == pytest.approx(want, rel=1e-15, abs=0)
    if micro == 2:  # the second micro-batch (an empty row and 2 tokens) weighs as much as the first (4 tokens)
        assert got != pytest.approx(agg_loss(loss, mask, "token-mean").item(), rel=1e-3)


@pytest.mark.parametrize("mode", ["seq-mean-token-mean-noeps", "token-mean-min1", "token-mean-legacy"])
def test_the_engine_aggregations_of_an_empty_mask_are_zero_and_bf16_is_finite(mode):
    empty = torch.zeros(2, 3)
    assert agg_loss(torch.ones(2, 3), empty, mode).item() == 0.0
    assert agg_loss(torch.ones(0, 3), torch.zeros(0, 3), mode).item() == 0.0
    lp = torch.full((2, 3), -1.0, dtype=torch.bfloat16, requires_grad=True)
    loss, _ = policy_loss(lp, lp.detach() - 30.0, torch.ones(2, 3), torch.ones(2, 3), "grpo/noclamp", mode)
    assert math.isfinite(loss.item())


def test_seq_grad_mean_is_autograd_through_the_sequence_mean():
    """value: GSPO's; gradient: autograd of −min(s·A, clip(s)·A) with s = exp(Σ m·log r / max(Σ m, 1)), written
    out here, weighted by token weights (the upstream a rollout correction gives) and aggregated per row."""
    g = torch.Generator().manual_seed(3)
    log_r = 0.2 * torch.randn(4, 5, generator=g, dtype=torch.float64)
    adv = torch.randn(4, 5, generator=g, dtype=torch.float64)
    weights = torch.rand(4, 5, generator=g, dtype=torch.float64) + 0.5
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.float64)
    lp = log_r.clone().requires_grad_(True)
    s = torch.exp((lp * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1))
    ref = -torch.minimum(s * adv, s.clamp(0.8, 1.2) * adv) * weights
    ref = ((ref * mask).sum(-1) / mask.sum(-1).clamp(min=1)).sum() / 4
    (ref_grad,) = torch.autograd.grad(ref, lp)
    spec = parse_method("ratio:0.2:0.2/seq/seq_grad_mean=1")
    lp2 = log_r.clone().requires_grad_(True)
    ours, _ = policy_loss(lp2, torch.zeros_like(lp2), adv, mask, spec, "seq-mean-token-mean-all", weights)
    (our_grad,) = torch.autograd.grad(ours, lp2)
    assert ours.item() == pytest.approx(ref.item(), rel=1e-13)
    torch.testing.assert_close(our_grad, ref_grad, rtol=1e-12, atol=1e-15)
    verl, _ = policy_loss(
        lp2, torch.zeros_like(lp2), adv, mask, "ratio:0.2:0.2/seq", "seq-mean-token-mean-all", weights
    )
    assert not torch.allclose(torch.autograd.grad(verl, lp2)[0], ref_grad)  # verl's form: each token its own −A·s


@pytest.mark.parametrize(
    "params, level, match",
    [
        ({"seq_grad_mean": True}, "token", "needs level='sequence'"),
        ({"seq_grad_mean": 0.5}, "sequence", "seq_grad_mean must be True or False, got 0.5"),
        ({"seq_grad_mean": 1.0}, "sequence", "seq_grad_mean must be True or False"),
    ],
)
def test_seq_grad_mean_refuses_what_it_cannot_mean(params, level, match):
    with pytest.raises(ValueError, match=match):
        ClipSpec("ratio", eps_low=0.2, eps_high=0.2, level=level, params=params)


def test_seq_grad_mean_method_string_round_trips():
    spec = ClipSpec("ratio", eps_low=3e-4, eps_high=4e-4, level="sequence", params={"seq_grad_mean": True})
    assert parse_method(method_string(spec)) == spec and "seq_grad_mean=1" in method_string(spec)


@pytest.mark.parametrize("method", ["grpo/noclamp", "ratio:1.0:0.28/noclamp", "ratio:1.0:4/cispo/noclamp", "grpo"])
def test_the_numpy_weight_sees_the_ratio_the_torch_loss_uses(method):
    """w(q, r, A), which the atlas and the token explainer draw, is the torch gradient over −A at log r up to ±30:
    unclamped where the spec is '/noclamp' (slime, TRL), zero beyond ±20 where it clamps (verl)."""
    spec = parse_method(method)
    log_r = np.array([-30.0, -21.0, -0.5, 0.0, 0.1, 21.0, 30.0])
    for a in (1.0, -1.0):
        lp = torch.tensor(log_r[None, :], dtype=torch.float64, requires_grad=True)
        adv = torch.full_like(lp, a)
        loss, _ = policy_loss(lp, torch.zeros_like(lp), adv, torch.ones_like(lp), spec, "token-sum")
        (grad,) = torch.autograd.grad(loss, lp)
        w = get_form(spec.form).weight(spec, np.full_like(log_r, 0.3), np.exp(log_r), np.full_like(log_r, a))
        np.testing.assert_allclose(w, -grad[0].numpy() / a, rtol=1e-12, atol=0.0)
