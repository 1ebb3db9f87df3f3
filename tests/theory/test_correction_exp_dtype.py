"""Correction.exp_dtype: the is= weight's exp in float32 whatever the inputs' dtype (SkyRL's safe_exp_delta), read
from SkyRL's settings; rounding only, so it does not enter equality. The reference is torch's own float32 exp of the
clamped log-ratio, cast back (what SkyRL's safe_exp_delta computes); SkyRL's own functions are compared in
tests/engines/test_parity_skyrl.py."""

from __future__ import annotations

import pytest
import torch

from divclip.engines import read_correction
from divclip.theory.correction import Correction, correction_string, parse_correction
from divclip.theory.correction_apply import rollout_correction


def inputs():
    g = torch.Generator().manual_seed(4)
    old = -torch.rand(4, 12, generator=g, dtype=torch.float64) * 3
    rollout = old + 0.7 * torch.randn(4, 12, generator=g, dtype=torch.float64)
    rollout[0, 0] = old[0, 0] - 25.0  # beyond the ±20 clamp
    mask = torch.ones(4, 12, dtype=torch.float64)
    mask[1, 6:] = 0
    return old, rollout, mask


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_the_weight_is_the_float32_exp_cast_back(level):
    old, rollout, mask = inputs()
    c = parse_correction(f"is={level}:tis=5.0/exp_dtype=float32")
    w, _, _ = rollout_correction(old, rollout, mask, c)
    log_ratio = old - rollout
    x = log_ratio if level == "token" else (log_ratio * mask).sum(-1, keepdim=True).expand_as(log_ratio)
    want = torch.exp(x.clamp(-20, 20).to(torch.float32)).to(torch.float64).clamp(max=5.0) * mask
    assert torch.equal(w, want)
    plain, _, _ = rollout_correction(old, rollout, mask, parse_correction(f"is={level}:tis=5.0"))
    assert not torch.equal(plain, w) and torch.allclose(plain, w, rtol=1e-6, atol=0)  # rounding, no more


def test_it_reads_writes_and_compares_as_rounding():
    c = parse_correction("is=token:tis=2.0/exp_dtype=float32")
    assert c.exp_dtype == "float32" and correction_string(c) == "is=token:tis=2.0/exp_dtype=float32"
    assert parse_correction(correction_string(c)).exp_dtype == "float32"
    assert c == parse_correction("is=token:tis=2.0")  # equality ignores it
    assert Correction().exp_dtype == "input"
    with pytest.raises(ValueError, match=r"Correction.exp_dtype must be one of \['input', 'float32'\], got 'half'"):
        parse_correction("is=token:tis=2.0/exp_dtype=half")


def test_skyrls_read_carries_it():
    tis = read_correction("skyrl", {"trainer.algorithm.off_policy_correction.tis_ratio_type": "token"})
    assert tis.exp_dtype == "float32"
    assert read_correction("verl", {"algorithm.rollout_correction.rollout_is": "token"}).exp_dtype == "input"
