"""SkyRL's loss reductions where they are not the verl aggregation divclip reads them as (issue 35 item 3): each
is named in the read, and each claim is checked here against SkyRL's own reduction and verl's own agg_loss."""

import pytest
import torch
from skyrl_helpers import load

from divclip import engines

A = "trainer.algorithm."
verl_core = pytest.importorskip("verl.trainer.ppo.core_algos")


def _skyrl_reduce(loss, mask, reduction, micro=2, max_seq_len=None):
    """SkyRL's reduction of a per-token loss that is linear in A (ppo_utils: the advantages are pre-scaled, then
    the masked loss is summed): the pre-scaling applied to `loss` itself, then SkyRL's reduce_loss."""
    ppo_utils, _ = load()
    scaled = ppo_utils.apply_loss_reduction_to_advantages_minibatch(loss, mask, reduction, micro, max_seq_len)
    return ppo_utils.reduce_loss(scaled, mask)


def _warning(settings) -> str:
    found = [a for a in engines.read("skyrl", settings).advice if a.code == "skyrl_reduction_differs"]
    assert len(found) == 1
    return found[0].message


def _batch():
    g = torch.Generator().manual_seed(0)
    loss = torch.randn(4, 6, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0]])
    return loss, mask.to(torch.float64)


def test_sequence_mean_divides_by_the_empty_rows_too():
    assert "empty rows (no loss token) included" in _warning({A + "loss_reduction": "sequence_mean"})
    loss, mask = _batch()
    skyrl = _skyrl_reduce(loss, mask, "sequence_mean")
    verl = verl_core.agg_loss(loss, mask, "seq-mean-token-mean")
    rows = mask.sum(-1)
    per_row = (loss * mask).sum(-1) / rows.clamp(min=1)
    assert skyrl.item() == pytest.approx(per_row.sum().item() / 4, rel=1e-12)  # all 4 rows
    assert verl.item() == pytest.approx(per_row.sum().item() / 3, rel=1e-7)  # 3 rows with a token (verl: +1e-8)
    assert skyrl.item() != pytest.approx(verl.item(), rel=1e-3)


def test_token_mean_legacy_is_a_mean_of_micro_batch_token_means():
    msg = _warning({A + "loss_reduction": "token_mean_legacy", "trainer.micro_train_batch_size_per_gpu": 2})
    assert "micro_train_batch_size_per_gpu = 2" in msg
    loss, mask = _batch()
    skyrl = _skyrl_reduce(loss, mask, "token_mean_legacy", micro=2)
    halves = [(loss[i : i + 2] * mask[i : i + 2]).sum() / mask[i : i + 2].sum() for i in (0, 2)]
    assert skyrl.item() == pytest.approx(sum(halves).item() / 2, rel=1e-12)
    assert skyrl.item() != pytest.approx(verl_core.agg_loss(loss, mask, "token-mean").item(), rel=1e-3)


def test_seq_mean_token_sum_norm_divides_by_max_seq_len_not_the_width():
    msg = _warning({A + "loss_reduction": "seq_mean_token_sum_norm", A + "max_seq_len": 10})
    assert "max_seq_len = 10" in msg
    assert "unset: SkyRL requires it" in _warning({A + "loss_reduction": "seq_mean_token_sum_norm"})
    loss, mask = _batch()  # width 6
    skyrl = _skyrl_reduce(loss, mask, "seq_mean_token_sum_norm", max_seq_len=10)
    assert skyrl.item() == pytest.approx(((loss * mask).sum() / (4 * 10)).item(), rel=1e-12)
    assert skyrl.item() != pytest.approx(((loss * mask).sum() / (4 * 6)).item(), rel=1e-3)


def test_token_mean_and_prompt_mean_raise_no_reduction_warning():
    for reduction in ("token_mean", "prompt_mean"):
        found = engines.read("skyrl", {A + "loss_reduction": reduction}).advice
        assert "skyrl_reduction_differs" not in {a.code for a in found}


def test_token_mean_legacy_is_read_by_name_and_translated_or_named():
    settings = {A + "loss_reduction": "token_mean_legacy", "trainer.micro_train_batch_size_per_gpu": 4}
    assert engines.read("skyrl", settings).loss_agg_mode == "token-mean-legacy"
    flat, _ = engines.translate(settings, "skyrl", "skyrl")
    assert flat[A + "loss_reduction"] == "token_mean_legacy"
    for dst in ("verl", "trl", "openrlhf", "areal", "slime"):  # none has it: each names the aggregation it drops
        _, diffs = engines.translate(settings, "skyrl", dst)
        assert any(str(d).startswith("aggregation token-mean-legacy") for d in diffs), dst
