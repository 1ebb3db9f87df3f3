"""DPPO with δ_low != δ_high (SkyRL dppo.delta_low/delta_high, verl dppo_* clip_ratio_low/high) is two budgets of
one measure, which the engines compute and the spec carries (the gated form's delta_high): the check does not call
it a contradiction (`asymmetric_contradicts_measure`), and the spec's bounds are the engine's two widths (binary TV:
1 − δ_low/q and 1 + δ_high/q in closed form). A ratio clip with ε_high < ε_low still gets the warning."""

from __future__ import annotations

import numpy as np

from divclip.engines import skyrl
from divclip.sanity import check_settings, clip_settings, read_config
from divclip.theory.atlas import arithmetic, interval

A = "actor_rollout_ref.actor."
Q = np.array([0.01, 0.1, 0.5, 0.9])


def _verl(*overrides):
    return clip_settings(
        read_config(None, overrides=["data.train_batch_size=512", A + "ppo_mini_batch_size=64", *overrides])
    )


def _codes(s):
    return [f.code for f in check_settings(s)]


def _two_widths(spec, low, high):
    lo = interval(spec, Q, -1)[0]
    hi = interval(spec, Q, 1)[1]
    np.testing.assert_allclose(hi, 1.0 + high / Q, rtol=1e-14)
    np.testing.assert_allclose(lo, np.maximum(1.0 - low / Q, 0.0), rtol=1e-14, atol=1e-15)
    assert [a["option"] for a in arithmetic(spec)][0] == f"delta_high={high:g}"


def test_skyrl_dppo_two_deltas_is_not_a_contradiction():
    s = skyrl.read(
        {
            "trainer.algorithm.policy_loss_type": "dppo",
            "trainer.algorithm.dppo.dppo_type": "binary_tv",
            "trainer.algorithm.dppo.delta_low": 0.1,
            "trainer.algorithm.dppo.delta_high": 0.3,
        }
    )
    assert (s.form, s.budget_low, s.budget_high) == ("gated", 0.1, 0.3)
    assert "asymmetric_contradicts_measure" not in _codes(s)
    _two_widths(s.spec, 0.1, 0.3)


def test_verl_dppo_tv_two_deltas_is_not_a_contradiction():
    s = _verl(A + "policy_loss.loss_mode=dppo_tv", A + "clip_ratio_low=0.15", A + "clip_ratio_high=0.25")
    assert (s.form, s.budget_low, s.budget_high) == ("gated", 0.15, 0.25)
    assert "asymmetric_contradicts_measure" not in _codes(s)
    _two_widths(s.spec, 0.15, 0.25)


def test_an_inverted_ratio_clip_still_warns():
    s = _verl(A + "clip_ratio_low=0.3", A + "clip_ratio_high=0.2")
    assert _codes(s).count("asymmetric_contradicts_measure") == 1


def test_one_delta_has_no_two_widths():
    s = _verl(A + "policy_loss.loss_mode=dppo_tv", A + "clip_ratio_low=0.2", A + "clip_ratio_high=0.2")
    assert "asymmetric_contradicts_measure" not in _codes(s)
    assert [a["option"] for a in arithmetic(s.spec)] == ["gate=verl"]  # verl's own dppo arithmetic, one δ
