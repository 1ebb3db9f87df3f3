"""slime (624b824a) as it computes (issue 35): `policy_loss` on `from_engine('slime', settings)`, aggregated by
`slime.exact_aggregation`, with `read_correction`'s TIS weight, equals slime's own `loss_function` /
`policy_loss_function` (its source at the pinned commit, executed in process: tests/engines/slime_helpers.py):
the loss the optimizer sees and its gradient in log π, float64 to 1e-12 relative and float32 to float32
rounding, on inputs with |log r| up to 30, a row whose mean log-ratio is above verl's GSPO clamp (10),
token-varying and per-row advantages, padding and an empty (removed) sample.

PARITY_ROWS (engine, setting, status, note) is what tests/engines/parity_report.py turns into docs/engines.md's
table; every 'exact' row is a case of `test_policy_loss_equals_slimes_own_loss`, on a batch with an empty sample and
on one where every sample is empty.
"""

from __future__ import annotations

import pytest
import slime_helpers
import torch
from parity_inputs import (
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

from divclip import engines
from divclip.engines import slime
from divclip.engines.errors import ConfigError
from divclip.theory.correction_apply import rollout_correction
from divclip.theory.losses import policy_loss

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
    "--eps-clip 0 --eps-clip-high 0.28 (no room below 1)": {"--eps-clip": "0", "--eps-clip-high": "0.28"},
    "reinforce_plus_plus (the same clip)": {"--advantage-estimator": "reinforce_plus_plus"},
    "--advantage-estimator ppo --eps-clip-c 2 (the same clip)": {"--advantage-estimator": "ppo", "--eps-clip-c": "2"},
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
    "--use-rollout-logprobs (ratio to π_rollout)": {"--use-rollout-logprobs": True, "--eps-clip-c": "3"},
    "--use-rollout-logprobs --use-tis": {"--use-rollout-logprobs": True, "--use-tis": True},
    "--use-opsm --opsm-delta 0.01": {"--use-opsm": True, "--opsm-delta": "0.01"},
    "gspo, --use-opsm, per-token loss": {**GSPO, "--use-opsm": True, "--calculate-per-token-loss": True},
}
NOTES = {
    "grpo, defaults (per-sample mean)": "/noclamp; aggregated seq-mean-token-mean-all (every sample counts)",
    "--calculate-per-token-loss": "aggregated token-mean-min1 (an empty sample counts one token)",
    "--eps-clip 1 (no lower bound)": "ratio.clamp(0, ...): no lower bound",
    "--eps-clip 1.5 (> 1)": "ratio.clamp(-0.5, ...): no lower bound",
    "gspo, 3e-4 / 4e-4": "/noclamp/seq_grad_mean=1: log s unclamped, the gradient through the sequence mean",
    "cispo, --eps-clip 1 --eps-clip-high 4 (canonical)": "/cispo/noclamp",
}
for _name, _settings in SETTINGS.items():  # the correction each read gives, as its string
    if not _settings.get("--use-opsm") and (_c := engines.read_correction("slime", _settings)) is not None:
        NOTES[_name] = f"read_correction: {_c}" + (
            ", the TIS weights inside seq_grad_mean's gradient" if "gspo" in _name else ""
        )
NOTES["--use-rollout-logprobs (ratio to π_rollout)"] = "ratio_anchor 'rollout': old_log_prob = the rollout's log-probs"
NOTES["--use-rollout-logprobs --use-tis"] = (
    "ratio_anchor 'rollout', and the TIS weight of the recomputed π_old as rollout_is_weights (the read's recipe)"
)
for _name, _settings in SETTINGS.items():
    if _settings.get("--use-opsm"):
        NOTES[_name] = "the recipe the read's warning (opsm_not_modelled) gives: correction opsm=δ, rollout = π_old"
PARITY_ROWS = [("slime", name, "exact", NOTES.get(name, "")) for name in SETTINGS] + [
    (
        "slime",
        "--use-opsm with --use-tis",
        "named",
        "the read warns: two anchors (π_old, π_rollout), one correction",
    ),
    ("slime", "--custom-pg-loss-reducer-function-path", "named", "the read warns (custom_reducer_not_modelled)"),
    ("slime", "--custom-tis-function-path", "not modelled", "read_correction refuses it: a custom function is code"),
    (
        "slime",
        "--use-tis or --use-opsm on a batch with no loss token",
        "named",
        "divclip's correction raises a ValueError (as verl does); slime's loss is 0 (--use-opsm's recipe too)",
    ),
]

LOW = [
    "grpo, defaults (per-sample mean)",
    "--calculate-per-token-loss",
    "gspo, 3e-4 / 4e-4",
    "cispo, --eps-clip 1 --eps-clip-high 4 (canonical)",
    "--use-tis (clamp 0..2)",
]
"""The settings of the bf16 / fp16 rows (`test_low_precision_inputs_are_slimes_own_loss`)."""
LOW_NOTE = (
    "divclip computes in float32 (bf16/fp16 in, a float32 loss out), slime in the input dtype: equal to slime's "
    "loss_function on the same {dtype} values run in float64 to float32 rounding (the gradient to one {dtype} "
    "ulp), and to its own {dtype} run to its rounding (parity_inputs.assert_low_precision)"
)
LOW_ROWS, LOW_PARITY = low_precision_rows(
    "slime",
    "grpo per-sample / per-token, gspo, cispo, --use-tis",
    LOW_NOTE,
    "slime's unclamped fp16 ratio overflows (e^30 > 65504): its loss is inf",
    "slime",
)
PARITY_ROWS += LOW_PARITY


def divclip_loss(settings: dict, lp, old, adv, mask, rollout):
    read = engines.read("slime", settings)
    spec = engines.from_engine("slime", settings)
    if read.ratio_anchor == "rollout":  # --use-rollout-logprobs: π_old is the rollout's
        correction = engines.read_correction("slime", settings)
        weights = None
        if correction is not None:  # the is_correction_threshold warning's recipe: the recomputed π_old's weight
            assert "rollout_is_weights" in next(a.message for a in read.advice if a.code == "is_correction_threshold")
            weights = rollout_correction(old, rollout, mask, correction, metrics=False)[0]
        return policy_loss(lp, rollout, adv, mask, spec, slime.exact_aggregation(read), weights)[0]
    if settings.get("--use-opsm"):  # the opsm_not_modelled warning's recipe: slime's OPSM compares with π_old
        assert "rollout_log_prob = π_old" in next(a.message for a in read.advice if a.code == "opsm_not_modelled")
        kw = {"rollout_log_prob": old, "correction": f"opsm={read.keys['--opsm-delta']['value']:g}"}
    else:
        correction = engines.read_correction("slime", settings)
        kw = {} if correction is None else {"rollout_log_prob": rollout, "correction": correction}
    return policy_loss(lp, old, adv, mask, spec, slime.exact_aggregation(read), **kw)[0]


def _both(settings, kind, dtype):
    lp, old, adv, mask, rollout = inputs("token" if kind == "empty" else kind, dtype)
    if kind == "empty":
        mask = torch.zeros_like(mask)
    theirs = value_and_grad(lambda x: slime_helpers.run(settings, x, old, adv, mask, rollout)[0], lp)
    ours = value_and_grad(lambda x: divclip_loss(settings, x, old, adv, mask, rollout), lp)
    return ours, theirs


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("kind", ["token", "row", "empty"])
@pytest.mark.parametrize("name", list(SETTINGS))
def test_policy_loss_equals_slimes_own_loss(name, kind, dtype):
    corrected = "--use-tis" in SETTINGS[name] or "--use-opsm" in SETTINGS[name]
    if kind == "empty" and corrected and "--use-rollout-logprobs" not in SETTINGS[name]:  # (its weights: no check)
        with pytest.raises(ValueError, match="no valid token"):  # the named row above
            _both(SETTINGS[name], kind, dtype)
        return
    ours, theirs = _both(SETTINGS[name], kind, dtype)
    engine64 = None if dtype == torch.float64 else _both(SETTINGS[name], kind, torch.float64)[1]
    assert_same(ours, theirs, dtype, engine64)


def test_a_negative_eps_clip_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"--eps-clip must be a number >= 0.*got -0.1"):
        engines.read("slime", {"--eps-clip": "-0.1"})


def test_every_setting_is_a_row():
    assert [row[1] for row in PARITY_ROWS if row[2] == "exact"] == [*SETTINGS, *LOW_ROWS]
    assert set(NOTES) <= set(SETTINGS) and len({row[1] for row in PARITY_ROWS}) == len(PARITY_ROWS)


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


def _low_runs(name, dtype, bound=None):
    settings = SETTINGS[name]
    lp, old, adv, mask, rollout = inputs("token", torch.float64)
    if bound:
        lp, rollout = moderate(lp, old, rollout)
    return low_precision_runs(
        lambda x, *a: divclip_loss(settings, x, *a),
        lambda x, *a: slime_helpers.run(settings, x, *a)[0],
        lp,
        (old, adv, mask, rollout),
        dtype,
    )


@pytest.mark.parametrize("dtype", LOW_DTYPES, ids=LOW_IDS)
@pytest.mark.parametrize("name", LOW)
def test_low_precision_inputs_are_slimes_own_loss(name, dtype):
    """log π, log π_old, A and log π_rollout in bf16 (|log r| to 30) or fp16 (|log r| <= 3: `moderate`), as a
    bf16 / fp16 run hands them to slime's loss (parity_inputs.assert_low_precision states the tolerance)."""
    assert_low_precision(*_low_runs(name, dtype, bound=dtype == torch.float16), dtype)


def test_fp16_with_extreme_log_ratios_overflows_in_slime_not_in_divclip():
    assert_fp16_overflow_is_the_engines(*_low_runs("grpo, defaults (per-sample mean)", torch.float16))
