"""The form importance_sampling (−A·r, r differentiable, no clip): against SkyRL 0.3.0's own
`importance_sampling_loss` (loaded in process, tests/engines/skyrl_helpers.py) with /noclamp, against autograd through
the plain −A·exp(clamp(log r, ±20)) under the clamp, and its numpy weight against both."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from divclip.theory import gradient_weight, parse_method  # noqa: E402
from divclip.theory.losses import policy_loss  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engines"))
from parity_inputs import KINDS, assert_same, batch, value_and_grad  # noqa: E402


def _ours(method, lp, old, adv, mask):
    return value_and_grad(lambda x: policy_loss(x, old, adv, mask, method, "token-sum", metrics=False)[0], lp)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("kind", KINDS)
def test_noclamp_is_skyrls_importance_sampling_loss(kind, dtype):
    helpers = pytest.importorskip("skyrl_helpers")
    ppo_utils, algorithm_config = helpers.load()
    fn = ppo_utils.PolicyLossRegistry.get("importance_sampling")
    cfg = algorithm_config()

    def theirs(d):
        lp, old, adv, mask = batch(kind, d)
        return value_and_grad(lambda x: fn(x, old, adv, config=cfg, loss_mask=mask)[0], lp)

    lp, old, adv, mask = batch(kind, dtype)
    ref = None if dtype == torch.float64 else theirs(torch.float64)
    assert_same(_ours("ratio/importance_sampling/noclamp", lp, old, adv, mask), theirs(dtype), dtype, ref)


def test_the_clamp_is_autograd_through_the_clamped_exp():
    """Under the default clamp: −A·exp(clamp(log r, ±20)), whose gradient is 0 where |log r| > 20."""
    lp, old, adv, mask = batch("token")
    ours = _ours("ratio/importance_sampling", lp, old, adv, mask)
    plain = value_and_grad(lambda x: (-(x - old).clamp(-20, 20).exp() * adv * mask).sum(), lp)
    assert_same(ours, plain, torch.float64)
    cut = ((lp - old).abs() > 20) & (mask > 0)
    assert bool(cut.any()) and bool((ours[1][cut] == 0).all())
    raw = _ours("ratio/importance_sampling/noclamp", lp, old, adv, mask)
    assert bool((raw[1][cut] != 0).all())


@pytest.mark.parametrize("method", ["ratio/importance_sampling", "ratio/importance_sampling/noclamp"])
def test_the_numpy_weight_is_the_autograd_weight(method):
    spec = parse_method(method)
    q = 0.3
    for log_r in (-25.0, -1.0, 0.0, 0.5, 25.0):
        for a in (1.0, -2.0):
            old = torch.tensor([[math.log(q)]], dtype=torch.float64)
            lp = old + log_r
            _, grad = _ours(method, lp, old, torch.tensor([[a]], dtype=torch.float64), torch.ones_like(old))
            w = float(gradient_weight(spec, q, math.exp(log_r), a))
            assert w == pytest.approx(float(-grad[0, 0]) / a, rel=1e-12, abs=1e-300), (method, log_r, a)
            clamps = spec.param("clamp_log_ratio") and abs(log_r) > 20
            assert w == (0.0 if clamps else pytest.approx(math.exp(log_r), rel=1e-12))
    assert np.all(gradient_weight(spec, np.array([0.1, 0.9]), np.array([1.0, 2.0]), 1.0) > 0)


def test_bad_values_are_refused_by_name():
    with pytest.raises(ValueError, match="importance_sampling"):
        parse_method("ratio:0.2:0.2/importance_sampling/tis=2")
