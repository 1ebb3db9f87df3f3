"""OpenRLHF 0.11.2 as it computes (issue 35): `policy_loss` on `from_engine('openrlhf', settings)`, aggregated by
`openrlhf.exact_aggregation`, with `read_correction`'s correction and `ratio_anchor`'s old log-probs, equals
OpenRLHF's own `PolicyLoss` (loaded in process: tests/engines/openrlhf_helpers.py) built from the same settings as
`ActorPPOTrainer.__init__` builds it, called with `get_loss_batch_info`'s normalisers as `training_step` calls it:
the loss value and its gradient in log π, float64 to 1e-12 relative and float32 to float32 rounding, on inputs
with |log r| up to 30, a row whose mean log-ratio is above verl's GSPO clamp (10), token-varying and per-row
advantages, padding and an empty row.

PARITY_ROWS (engine, setting, status, note) is what tests/engines/parity_report.py turns into docs/engines.md's
table; every 'exact' setting is a case of `test_policy_loss_equals_openrlhfs_own_loss` (one micro-batch per
optimizer step). With several, OpenRLHF normalises each by the step's token (sample) totals
(`iter_grad_accum_global_norm`), so the micro-batch losses sum to divclip's on the step's whole batch
(`test_micro_batches_of_one_step_sum_to_divclips_loss_of_the_step`).
"""

from __future__ import annotations

import pytest
import torch

from divclip import engines
from divclip.engines import openrlhf
from divclip.theory.losses import policy_loss

pytest.importorskip("openrlhf")
from openrlhf_helpers import load, loss_utils  # noqa: E402
from parity_inputs import (  # noqa: E402
    LOW_DTYPES,
    LOW_IDS,
    assert_fp16_overflow_is_the_engines,
    assert_low_precision,
    assert_same,
    inputs,
    low_precision_rows,
    low_precision_runs,
    moderate,
    value_and_grad,
)

IS = openrlhf.IS_FLAGS
SETTINGS = {
    "ppo, defaults (token-mean)": {},
    "ppo, --actor.loss_agg_mode seq-mean-token-mean": {"--actor.loss_agg_mode": "seq-mean-token-mean"},
    "ppo, --actor.eps_clip_low_high 0.2 0.28": {"--actor.eps_clip_low_high": ["0.2", "0.28"]},
    "ppo, --actor.dual_clip 3": {"--actor.dual_clip": "3"},
    "ppo, ε_low = 1 (no lower bound)": {"--actor.eps_clip_low_high": ["1.0", "0.28"]},
    "ppo, ε_low = 1.5 (> 1)": {"--actor.eps_clip_low_high": ["1.5", "0.28"]},
    "ppo, ε_low = 0": {"--actor.eps_clip_low_high": ["0", "0.28"], "--actor.loss_agg_mode": "seq-mean-token-mean"},
    "ppo, IS correction token clip [0.5, 2]": {
        IS + "level": "token",
        IS + "mode": "clip",
        IS + "threshold": ["0.5", "2"],
    },
    "ppo, IS correction token mask [0.5, 5] (defaults)": {IS + "level": "token"},
    "ppo, IS correction seq mask [0.5, 5]": {IS + "level": "seq"},
    "ppo, IS correction seq mask [0.8, 1.25], per-sample mean": {
        IS + "level": "seq",
        IS + "threshold": ["0.8", "1.25"],
        "--actor.loss_agg_mode": "seq-mean-token-mean",
    },
    "ppo, IS correction seq mask, one threshold 1.1 ([0, 1.1])": {IS + "level": "seq", IS + "threshold": ["1.1"]},
    "ppo, IS correction token gating binary_kl 0.01": {
        IS + "level": "token",
        IS + "gating": "binary_kl",
        IS + "threshold": ["0.01"],
    },
    "ppo, IS correction token gating tv 0.05, dual clip 3": {
        IS + "level": "token",
        IS + "gating": "tv",
        IS + "threshold": ["0.05"],
        "--actor.dual_clip": "3",
    },
    "ppo, IS correction seq gating binary_kl 0.005": {
        IS + "level": "seq",
        IS + "gating": "binary_kl",
        IS + "threshold": ["0.005"],
    },
    "ppo, IS correction seq gating tv -1 0.03, per-sample mean": {
        IS + "level": "seq",
        IS + "gating": "tv",
        IS + "threshold": ["-1", "0.03"],
        "--actor.loss_agg_mode": "seq-mean-token-mean",
    },
    "gspo, defaults (ε 0.2)": {"--actor.policy_loss_type": "gspo"},
    "gspo, ε 3e-4 / 4e-4, dual clip 3": {
        "--actor.policy_loss_type": "gspo",
        "--actor.eps_clip_low_high": ["3e-4", "4e-4"],
        "--actor.dual_clip": "3",
    },
    "gspo, --actor.loss_agg_mode token-mean (ignored: per sample)": {
        "--actor.policy_loss_type": "gspo",
        "--actor.loss_agg_mode": "token-mean",
    },
    "gspo, IS correction on (ratio anchored at π_rollout, no weight)": {
        "--actor.policy_loss_type": "gspo",
        IS + "level": "token",
    },
}
NOTES = {
    "ppo, defaults (token-mean)": "log r clamped at ±20, as verl",
    "ppo, --actor.loss_agg_mode seq-mean-token-mean": "aggregated seq-mean-token-mean-noeps (no 1e-8 in the counts)",
    "ppo, ε_low = 1 (no lower bound)": "ratio.clamp(0, ...): no lower bound",
    "ppo, ε_low = 1.5 (> 1)": "ratio.clamp(-0.5, ...): no lower bound",
    "gspo, defaults (ε 0.2)": "/noclamp/seq_grad_mean=1: log s unclamped, the gradient through the sequence mean",
    "gspo, --actor.loss_agg_mode token-mean (ignored: per sample)": "the read warns (ignored_key)",
    "gspo, IS correction on (ratio anchored at π_rollout, no weight)": "ratio_anchor 'rollout': old_log_prob = the "
    "rollout's log-probs, no correction (the read warns)",
}
for _name, _settings in SETTINGS.items():  # the correction each read gives, as its string
    if (_c := engines.read_correction("openrlhf", _settings)) is not None:
        NOTES[_name] = f"read_correction: {_c}"
PARITY_ROWS = [("openrlhf", name, "exact", NOTES.get(name, "")) for name in SETTINGS] + [
    ("openrlhf", "an all-empty batch", "named", "OpenRLHF divides 0 by 0 (NaN); divclip's loss is 0 (agg_loss)"),
]
LOW = [
    "ppo, defaults (token-mean)",
    "ppo, --actor.loss_agg_mode seq-mean-token-mean",
    "ppo, IS correction token clip [0.5, 2]",
    "ppo, IS correction seq mask [0.5, 5]",
    "ppo, IS correction token gating binary_kl 0.01",
    "gspo, defaults (ε 0.2)",
]
"""The settings of the bf16 / fp16 rows (`test_low_precision_inputs_are_openrlhfs_own_loss`)."""
LOW_NOTE = (
    "divclip computes in float32 (bf16/fp16 in, a float32 loss out), OpenRLHF in the input dtype: equal to "
    "PolicyLoss on the same {dtype} values run in float64 to float32 rounding (the gradient to one {dtype} ulp), "
    "and to PolicyLoss's own {dtype} run to its rounding (parity_inputs.assert_low_precision)"
)
LOW_ROWS, LOW_PARITY = low_precision_rows(
    "openrlhf",
    "ppo token / sample mean, IS clip, seq gate, binary_kl gate; gspo",
    LOW_NOTE,
    "OpenRLHF's fp16 ratio overflows (e^25 > 65504): its loss is inf or NaN",
    "PolicyLoss",
)
PARITY_ROWS += LOW_PARITY
MICRO = "micro-batches of one optimizer step (ppo token/sample mean, gspo)"
PARITY_ROWS.insert(
    len(SETTINGS), ("openrlhf", MICRO, "exact", "their sum (the step's normalisers) is divclip's loss on the step")
)


def _module(policy_loss_cls, settings: dict):
    """PolicyLoss(...) as ActorPPOTrainer.__init__ builds it from these flags (see `openrlhf_loss`)."""

    def flag(name):
        value = settings.get(name, openrlhf.KEYS[name].default)
        return value

    eps = float(flag("--actor.eps_clip"))
    low, high = (float(v) for v in settings.get("--actor.eps_clip_low_high", (eps, eps)))
    dual = flag("--actor.dual_clip")
    threshold = [float(v) for v in flag(IS + "threshold")]
    module = policy_loss_cls(
        clip_eps_low=low,
        clip_eps_high=high,
        dual_clip=None if dual is None else float(dual),
        token_level_loss=flag("--actor.loss_agg_mode") == "token-mean",
        policy_loss_type=flag("--actor.policy_loss_type"),
        is_correction_level=flag(IS + "level"),
        is_correction_mode=flag(IS + "mode"),
        is_correction_gating=flag(IS + "gating"),
        is_correction_threshold=threshold if len(threshold) == 2 else [0.0, threshold[0]],
    )
    return module


def openrlhf_loss(settings: dict, lp, old, adv, mask, rollout):
    """OpenRLHF's PolicyLoss with the arguments ActorPPOTrainer.__init__ (trainer/ray/ppo_actor.py) passes, from
    the flags at their train_ppo_ray defaults (openrlhf.KEYS, checked against its parser by test_openrlhf.py;
    eps_clip_low_high unset is (eps_clip, eps_clip)), called as training_step calls it."""
    policy_loss_cls, batch_info = load()
    module = _module(policy_loss_cls, settings)
    loss = module(lp, old, adv, action_mask=mask, rollout_log_probs=rollout, **batch_info(None, mask))[0]
    return loss


def divclip_loss(settings: dict, lp, old, adv, mask, rollout):
    read = engines.read("openrlhf", settings)
    spec = engines.from_engine("openrlhf", settings)
    correction = engines.read_correction("openrlhf", settings)
    anchor = rollout if read.ratio_anchor == "rollout" else old
    kw = {} if correction is None else {"rollout_log_prob": rollout, "correction": correction}
    loss, _ = policy_loss(lp, anchor, adv, mask, spec, openrlhf.exact_aggregation(read), **kw)
    return loss


def _both(settings, kind, dtype):
    lp, old, adv, mask, rollout = inputs(kind, dtype)
    theirs = value_and_grad(lambda x: openrlhf_loss(settings, x, old, adv, mask, rollout), lp)
    ours = value_and_grad(lambda x: divclip_loss(settings, x, old, adv, mask, rollout), lp)
    return ours, theirs


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("kind", ["token", "row"])
@pytest.mark.parametrize("name", list(SETTINGS))
def test_policy_loss_equals_openrlhfs_own_loss(name, kind, dtype):
    ours, theirs = _both(SETTINGS[name], kind, dtype)
    engine64 = None if dtype == torch.float64 else _both(SETTINGS[name], kind, torch.float64)[1]
    assert_same(ours, theirs, dtype, engine64)


@pytest.mark.parametrize(
    "name", ["ppo, defaults (token-mean)", "ppo, --actor.loss_agg_mode seq-mean-token-mean", "gspo, defaults (ε 0.2)"]
)
def test_micro_batches_of_one_step_sum_to_divclips_loss_of_the_step(name):
    """Two micro-batches per optimizer step (gas 2): OpenRLHF's own `iter_grad_accum_global_norm` gives each the
    step's token (sample) totals over gas, DeepSpeed scales each backward by 1/gas; the sum is divclip's loss on
    the step's whole batch (gas 2: the float32 totals/2 are exact, so float64 to 1e-12)."""
    settings, gas = SETTINGS[name], 2
    lp, old, adv, mask, rollout = inputs("token", torch.float64)
    parts = [slice(0, 3), slice(3, 6)]  # rows 9, 5, 0 | 7, 1, 9 tokens: unequal micro-batches

    def theirs(x):
        items = [(x[p], old[p], adv[p], mask[p], rollout[p]) for p in parts]
        total = 0.0
        for item, info in loss_utils().iter_grad_accum_global_norm(iter(items), None, gas, lambda it: it[3]):
            policy_loss_cls, _ = load()
            total = total + _module(policy_loss_cls, settings)(*item[:3], action_mask=item[3], **info)[0] / gas
        return total

    ours = value_and_grad(lambda x: divclip_loss(settings, x, old, adv, mask, rollout), lp)
    assert_same(ours, value_and_grad(theirs, lp), torch.float64)


def test_an_all_empty_batch_is_nan_in_openrlhf_and_zero_in_divclip():
    lp, old, adv, mask, rollout = inputs("token", torch.float64)
    mask = torch.zeros_like(mask)
    assert openrlhf_loss({}, lp, old, adv, mask, rollout).isnan()
    assert divclip_loss({}, lp, old, adv, mask, rollout).item() == 0.0


def test_every_setting_is_a_row():
    assert [row[1] for row in PARITY_ROWS if row[2] == "exact"] == [*SETTINGS, MICRO, *LOW_ROWS]
    assert set(NOTES) <= set(SETTINGS) and len({row[1] for row in PARITY_ROWS}) == len(PARITY_ROWS)


def test_gspo_gradient_differs_from_verls_with_token_advantages():
    """The case the issue names: one row, A = (1, −1), r = 1: OpenRLHF gives (0, 0); verl's form (−½, +½)."""
    policy_loss_cls, _ = load()
    lp = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
    adv, mask = torch.tensor([[1.0, -1.0]], dtype=torch.float64), torch.ones(1, 2, dtype=torch.bool)
    theirs = policy_loss_cls(policy_loss_type="gspo")(lp, lp.detach(), adv, action_mask=mask)[0]
    assert torch.equal(torch.autograd.grad(theirs, lp)[0], torch.zeros(1, 2, dtype=torch.float64))
    spec = engines.from_engine("openrlhf", {"--actor.policy_loss_type": "gspo"})
    ours = policy_loss(lp, lp.detach(), adv, mask, spec, "seq-mean-token-mean-noeps")[0]
    assert torch.equal(torch.autograd.grad(ours, lp)[0], torch.zeros(1, 2, dtype=torch.float64))
    verl_form = policy_loss(lp, lp.detach(), adv, mask, "ratio:0.2:0.2/seq", "seq-mean-token-mean")[0]
    torch.testing.assert_close(torch.autograd.grad(verl_form, lp)[0], torch.tensor([[-0.5, 0.5]], dtype=torch.float64))


def test_gspo_with_is_correction_is_named_as_anchored_at_the_rollout():
    r = engines.read("openrlhf", {"--actor.policy_loss_type": "gspo", IS + "level": "token"})
    assert (
        r.ratio_anchor == "rollout"
        and engines.read_correction("openrlhf", {"--actor.policy_loss_type": "gspo"}) is None
    )
    (advice,) = [a for a in r.advice if a.code == "is_correction_threshold"]
    assert "no IS weight" in advice.message and "π_rollout" in advice.message
    assert engines.read("openrlhf", {IS + "level": "token"}).ratio_anchor == "old"


@pytest.mark.parametrize("dtype", LOW_DTYPES, ids=LOW_IDS)
@pytest.mark.parametrize("name", LOW)
def test_low_precision_inputs_are_openrlhfs_own_loss(name, dtype):
    """log π, log π_old, A and log π_rollout in bf16 (|log r| to 30) or fp16 (|log r| <= 3: `moderate`), as a
    bf16 / fp16 actor hands them to PolicyLoss (parity_inputs.assert_low_precision states the tolerance)."""
    settings = SETTINGS[name]
    lp, old, adv, mask, rollout = inputs("token", torch.float64)
    if dtype == torch.float16:
        lp, rollout = moderate(lp, old, rollout)
    runs = low_precision_runs(
        lambda x, *a: divclip_loss(settings, x, *a),
        lambda x, *a: openrlhf_loss(settings, x, *a),
        lp,
        (old, adv, mask, rollout),
        dtype,
    )
    assert_low_precision(*runs, dtype)


def test_fp16_with_extreme_log_ratios_overflows_in_openrlhf_not_in_divclip():
    settings = SETTINGS["ppo, defaults (token-mean)"]
    lp, old, adv, mask, rollout = inputs("token", torch.float64)
    runs = low_precision_runs(
        lambda x, *a: divclip_loss(settings, x, *a),
        lambda x, *a: openrlhf_loss(settings, x, *a),
        lp,
        (old, adv, mask, rollout),
        torch.float16,
    )
    assert_fp16_overflow_is_the_engines(*runs)
