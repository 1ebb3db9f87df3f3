"""slime (624b824a) as it computes (issue 35): `policy_loss` on `from_engine('slime', settings)`, aggregated by
`slime.exact_aggregation`, with `read_correction`'s TIS weight, equals slime's own `loss_function` /
`policy_loss_function` (its source at the pinned commit, executed in process: tests/engines/slime_helpers.py):
the loss the optimizer sees and its gradient in log π, float64 to 1e-12 relative and float32 to float32
rounding, on inputs with |log r| up to 30, a row whose mean log-ratio is above verl's GSPO clamp (10),
token-varying and per-row advantages, padding and an empty (removed) sample.

PARITY_ROWS (engine, setting, status) is what docs/engines.md's table says per setting; every 'exact' row is a
case of `test_policy_loss_equals_slimes_own_loss`.
"""

from __future__ import annotations

import pytest
import slime_helpers
import torch
from parity_inputs import TOL, inputs

from divclip import engines
from divclip.engines import slime

WHY = slime_helpers.available()
pytestmark = pytest.mark.skipif(WHY is not None, reason=WHY or "")

GSPO = {"--advantage-estimator": "gspo", "--eps-clip": "3e-4", "--eps-clip-high": "4e-4"}
SETTINGS = {
    "grpo, defaults (per-sample mean)": {},
    "--eps-clip 0.2 --eps-clip-high 0.28": {"--eps-clip": "0.2", "--eps-clip-high": "0.28"},
    "--eps-clip-c 3 (dual clip)": {"--eps-clip-c": "3"},
    "--calculate-per-token-loss": {"--calculate-per-token-loss": True, "--eps-clip-c": "3"},
    "--eps-clip 1 (no lower bound)": {"--eps-clip": "1.0", "--eps-clip-high": "0.28"},
    "--eps-clip 1.5 (> 1)": {"--eps-clip": "1.5", "--eps-clip-high": "0.28", "--calculate-per-token-loss": True},
    "reinforce_plus_plus (the same clip)": {"--advantage-estimator": "reinforce_plus_plus"},
    "gspo, 3e-4 / 4e-4": GSPO,
    "gspo, ε 0.2": {"--advantage-estimator": "gspo"},
    "gspo, --eps-clip-c 3, per-token loss": {**GSPO, "--eps-clip-c": "3", "--calculate-per-token-loss": True},
    "cispo, --eps-clip 1 --eps-clip-high 4 (canonical)": {
        "--advantage-estimator": "cispo",
        "--eps-clip": "1.0",
        "--eps-clip-high": "4",
    },
    "cispo, 0.2 / 0.28, per-token loss": {
        "--advantage-estimator": "cispo",
        "--eps-clip-high": "0.28",
        "--calculate-per-token-loss": True,
    },
    "--use-tis (clamp 0..2)": {"--use-tis": True},
    "--use-tis --tis-clip-low 0.5 --tis-clip 3, per-token": {
        "--use-tis": True,
        "--tis-clip-low": "0.5",
        "--tis-clip": "3",
        "--calculate-per-token-loss": True,
    },
    "gspo with --use-tis (the weights inside the sequence mean's gradient)": {**GSPO, "--use-tis": True},
}
PARITY_ROWS = [("slime", name, "exact") for name in SETTINGS] + [
    ("slime", "--use-opsm", "warned (opsm_not_modelled): the mask is not in the spec"),
    ("slime", "--custom-pg-loss-reducer-function-path", "warned (custom_reducer_not_modelled)"),
    ("slime", "--custom-tis-function-path", "refused by read_correction: a custom function is code"),
]


def divclip_loss(settings: dict, lp, old, adv, mask, rollout):
    read = engines.read("slime", settings)
    spec = engines.from_engine("slime", settings)
    correction = engines.read_correction("slime", settings)
    kw = {} if correction is None else {"rollout_log_prob": rollout, "correction": correction}
    from divclip.theory.losses import policy_loss

    return policy_loss(lp, old, adv, mask, spec, slime.exact_aggregation(read), **kw)[0]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("advantages", ["token", "row"])
@pytest.mark.parametrize("name", [name for _, name, status in PARITY_ROWS if status == "exact"])
def test_policy_loss_equals_slimes_own_loss(name, advantages, dtype):
    settings = SETTINGS[name]
    lp, old, adv, mask, rollout = inputs(advantages, dtype)
    theirs, _ = slime_helpers.run(settings, lp, old, adv, mask, rollout)
    (their_grad,) = torch.autograd.grad(theirs, lp)
    ours = divclip_loss(settings, lp, old, adv, mask, rollout)
    (our_grad,) = torch.autograd.grad(ours, lp)
    rel = TOL[dtype]
    assert torch.isfinite(theirs) and bool(torch.isfinite(their_grad).all())
    assert ours.item() == pytest.approx(theirs.item(), rel=rel, abs=rel * 1e-3)
    scale = float(their_grad.abs().max())
    torch.testing.assert_close(our_grad, their_grad, rtol=rel, atol=rel * max(scale, 1e-30))


def test_slimes_default_reducer_counts_the_empty_sample():
    """slime's per-sample mean divides by every sample (the removed one too), verl's seq-mean-token-mean by the
    non-empty ones: on the inputs above (one empty row of six) the two differ by 6/5, and exact_aggregation's
    seq-mean-token-mean-all is slime's."""
    lp, old, adv, mask, rollout = inputs("row", torch.float64)
    theirs, _ = slime_helpers.run({}, lp, old, adv, mask, rollout)
    from divclip.theory.losses import policy_loss

    spec = engines.from_engine("slime", {})
    verl_name = policy_loss(lp, old, adv, mask, spec, engines.read("slime", {}).loss_agg_mode)[0]
    assert verl_name.item() == pytest.approx(theirs.item() * 6 / 5, rel=1e-7)  # verl adds 1e-8 to each count


def test_use_opsm_is_named_with_what_it_does():
    r = engines.read("slime", {"--use-opsm": True, "--opsm-delta": "0.01"})
    (advice,) = [a for a in r.advice if a.code == "opsm_not_modelled"]
    assert "A < 0" in advice.message and "0.01" in advice.message and slime.COMMIT[:8] in advice.source
    assert "opsm_not_modelled" not in {a.code for a in engines.read("slime", {}).advice}
    lp, old, adv, mask, rollout = inputs("token", torch.float64)
    with_mask, _ = slime_helpers.run({"--use-opsm": True, "--opsm-delta": "0.01"}, lp, old, adv, mask, rollout)
    without, _ = slime_helpers.run({}, lp, old, adv, mask, rollout)
    assert with_mask.item() != without.item()  # the setting changes slime's loss: it must not be silent
