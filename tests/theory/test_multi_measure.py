"""Intersections of clip constraints (`a & b`, `all_of`) and the adaptive-δ controller, against independent
references: the parts' own bounds from `Measure.bounds` (numpy, float64) and hand-computed update sequences."""

import math

import numpy as np
import pytest
import torch

from divclip.theory.adaptive import DeltaController, delta_update
from divclip.theory.forms import FORMS
from divclip.theory.losses import policy_loss
from divclip.theory.measures import get_measure
from divclip.theory.spec import (
    AdaptiveSpec,
    AllOf,
    ClipSpec,
    all_of,
    method_string,
    parse_method,
    parse_methods,
    spec_label,
)

INTERSECTIONS = [
    "kl3:0.023144&binary_tv:0.2",
    "kl3:0.05&binary_kl:0.02",
    "atr&dapo",
    "k2:0.03&chi2:0.1&ratio:0.1:0.3",
    "binary_kl:0.05&binary_tv:0.1",
    "kl3:0.02/dual=3&binary_tv:0.2/dual=3",
]


def _ref_bounds(part: ClipSpec, p: np.ndarray):
    if part.measure_name == "ratio":
        return np.full_like(p, 1 - part.eps_low), np.full_like(p, 1 + part.eps_high)
    m = get_measure(part.measure)
    lo, hi = m.bounds(part.delta, p) if m.p_dependent else m.bounds(part.delta)
    return np.broadcast_to(np.asarray(lo, float), p.shape), np.broadcast_to(np.asarray(hi, float), p.shape)


def _batch(n=4000, seed=0):
    g = np.random.default_rng(seed)
    p = np.exp(g.uniform(np.log(1e-6), np.log(0.999), n))  # rare to sure tokens
    log_r = g.normal(0, 0.4, n)
    adv = g.choice([-1.5, -0.3, 0.0, 0.7, 2.0], n)
    return p, log_r, adv


@pytest.mark.parametrize("method", INTERSECTIONS)
def test_intersection_clips_each_token_exactly_at_max_lo_min_hi(method):
    spec = parse_method(method)
    assert isinstance(spec, AllOf)
    p, log_r, adv = _batch()
    los, his = zip(*(_ref_bounds(part, p) for part in spec.parts))
    lo, hi = np.max(los, axis=0), np.min(his, axis=0)
    # tokens placed right at, just inside and just outside the combined bounds, both sides
    k = len(p) // 5
    log_r[:k] = np.log(hi[:k]) + np.tile([-1e-9, 1e-9, 1e-3, -1e-3], k // 4 + 1)[:k]
    log_r[k : 2 * k] = np.log(np.maximum(lo[k : 2 * k], 1e-300)) + np.tile([-1e-9, 1e-9, 1e-3, -1e-3], k // 4 + 1)[:k]
    log_r = np.clip(log_r, -19.0, 19.0)  # inside verl's ±20 log-ratio clamp, which the loss applies first
    r = np.exp(log_r)
    ref = np.maximum(-adv * r, -adv * np.clip(r, lo, hi))
    if spec.param("dual_clip_c", None) is not None:
        ref = np.where(adv < 0, np.minimum(ref, -adv * spec.param("dual_clip_c", None)), ref)
    t = lambda x: torch.tensor(x, dtype=torch.float64).view(1, -1)  # noqa: E731
    old = t(np.log(p))
    lp = (old + t(log_r)).requires_grad_(True)
    terms = FORMS["clip"].loss(lp, old, t(adv), torch.ones_like(old), spec)
    np.testing.assert_allclose(terms.loss.detach().numpy()[0], ref, rtol=1e-12, atol=1e-300)
    # the gradient is -A·r on kept tokens, 0 on clipped ones, and the clipped set is the reference's
    clipped_ref = (-adv * np.clip(r, lo, hi)) > (-adv * r)
    terms.loss.sum().backward()
    grad = lp.grad.numpy()[0]
    if spec.param("dual_clip_c", None) is None:
        np.testing.assert_array_equal(grad == 0, clipped_ref | (adv == 0))
    np.testing.assert_array_equal(terms.clipped.numpy()[0] == 1, clipped_ref)
    # attribution: part i clipped a low (high) token iff its lo is the max (its hi the min)
    for (low_i, high_i), lo_i, hi_i in zip(terms.by_part, los, his):
        np.testing.assert_array_equal(low_i.numpy()[0] == 1, clipped_ref & (adv < 0) & (lo_i >= lo))
        np.testing.assert_array_equal(high_i.numpy()[0] == 1, clipped_ref & (adv > 0) & (hi_i <= hi))


def test_intersection_metrics_name_the_part_that_clipped():
    p, log_r, adv = _batch(seed=3)
    t = lambda x: torch.tensor(x, dtype=torch.float64).view(1, -1)  # noqa: E731
    old = t(np.log(p))
    spec = parse_method("kl3:0.023144&binary_tv:0.2")
    _, m = policy_loss(old + t(log_r), old, t(adv), torch.ones_like(old), spec)
    # binary TV at δ = 0.2: lo = 1 - 0.2/p <= 0.8 = KL3's lo for every p, so KL3 alone binds below; its
    # hi = 1 + 0.2/p is below KL3's 1.2308 for p > 0.867, so above, TV binds for likely tokens, KL3 for the rest
    assert m["clipfrac_low_part0"] == m["clipfrac_low"] > 0 and m["clipfrac_low_part1"] == 0
    assert m["clipfrac_high_part0"] > 0 and m["clipfrac_high_part1"] > 0
    assert m["clipfrac_low_part0"] + m["clipfrac_low_part1"] >= m["clipfrac_low"] - 1e-12
    assert m["clipfrac_high_part0"] + m["clipfrac_high_part1"] >= m["clipfrac_high"] - 1e-12
    # against the per-part loss alone: a token clipped by the intersection at KL3's bound is clipped by KL3 alone
    _, m_kl3 = policy_loss(old + t(log_r), old, t(adv), torch.ones_like(old), spec.parts[0])
    assert m["clipfrac_high_part0"] <= m_kl3["clipfrac_high"] + 1e-12
    assert m["clipfrac"] >= m_kl3["clipfrac"] - 1e-12  # the intersection is tighter than either part


def test_intersection_in_float32_and_bf16_matches_float64():
    p, log_r, adv = _batch(n=500, seed=5)
    spec = parse_method("kl3:0.023144&binary_tv:0.2")
    t = lambda x, d: torch.tensor(x, dtype=d).view(1, -1)  # noqa: E731
    losses = {}
    for d in (torch.float64, torch.float32, torch.bfloat16):
        old = t(np.log(p), d)
        loss, _ = policy_loss(old + t(log_r, d), old, t(adv, d), torch.ones_like(old), spec)
        assert math.isfinite(loss.item())
        losses[d] = loss.item()
    assert losses[torch.float32] == pytest.approx(losses[torch.float64], rel=1e-4)


def test_all_of_and_operator_and_strings_agree():
    a, b = parse_method("kl3:0.023144"), parse_method("binary_tv:0.2")
    assert (
        (a & b) == all_of(a, b) == all_of("kl3:0.023144", "binary_tv:0.2") == parse_method("kl3:0.023144&binary_tv:0.2")
    )
    assert all_of(a & b, "dapo").parts == (a, b, parse_method("dapo"))  # flattened
    for m in [
        *INTERSECTIONS,
        "kl3@clipfrac=0.1",
        "kl3:0.01@kl3=0.002:gain=0.5:min=0.001:max=0.2",
        "binary_tv:0.2@entropy=0.5:dir=1",
        "k2:0.03/dual=3@clipfrac=0.2",
    ]:
        spec = parse_method(m)
        assert parse_method(method_string(spec)) == spec
        assert "," not in spec_label(spec)
    assert spec_label("kl3:0.023144&binary_tv:0.2") == "kl3 δ=0.02314 ∧ binary_tv δ=0.2"
    assert spec_label("kl3@clipfrac=0.1") == "kl3 δ0=0.02314 @clipfrac=0.1"
    assert list(parse_methods("atr,kl3:0.023144&binary_tv:0.2,kl3@clipfrac=0.1")) == [
        "atr",
        "kl3:0.023144&binary_tv:0.2",
        "kl3@clipfrac=0.1",
    ]
    assert parse_method("atr&dapo").ratio_bounds() == (0.8, min(parse_method("atr").ratio_bounds()[1], 1.28))


@pytest.mark.parametrize(
    "bad, match",
    [
        ("kl3&sapo", r"AllOf.parts\[1\] has form='sapo'.*refused"),
        ("kl3/cispo&binary_tv:0.2", r"parts\[0\] has form='cispo'"),
        ("kl3:0.02/dual=3&binary_tv:0.2", r"disagree on dual_clip_c"),
        ("gspo&atr", r"token-level only"),
        ("kl3&", r"empty part around '&'"),
        ("kl3@clipfrac=0.1&atr", r"one '@' on a single measure"),
        ("grpo@clipfrac=0.1", r"needs a divergence measure with a budget"),
        ("kl3@speed=0.1", r"SIGNAL=TARGET with SIGNAL in"),
        ("kl3@clipfrac=1.5", r"AdaptiveSpec.target must be .*<= 1"),
        ("kl3@kl3=0.002:gain=0", r"AdaptiveSpec.gain must be"),
        ("kl3@kl3=0.002:dir=2", r"dir must be \+1 or -1"),
        ("kl3@kl3=0.002:speed=2", r"unknown or repeated adaptive option"),
        ("kl3@kl3=0.002:gain=1:gain=2", r"unknown or repeated adaptive option"),
        ("kl3:0.02@kl3=0.002:min=0.05", r"delta_min <= delta <= delta_max"),
    ],
)
def test_bad_combinations_are_refused_with_the_string(bad, match):
    with pytest.raises(ValueError, match=match):
        parse_method(bad)


def test_controller_follows_a_hand_computed_sequence():
    spec = parse_method("kl3:0.02@clipfrac=0.1:gain=0.5:min=0.01:max=0.04")
    assert (spec.direction, spec.delta_min, spec.delta_max) == (-1, 0.01, 0.04)
    c = DeltaController(spec, runs=2)
    # clipfrac 0.2 = 2x target: e = -1, δ ← δ·exp(-1·0.5·-1) = δ·e^0.5 ; run 1 at 0.05: e = 0.5, δ·e^-0.25
    d = c.update([0.2, 0.05])
    assert d[0] == pytest.approx(0.02 * math.exp(0.5), rel=1e-15)
    assert d[1] == pytest.approx(0.02 * math.exp(-0.25), rel=1e-15)
    d = c.update([0.5, math.nan])  # e clamped at -1; 0.02·e^1 > max → 0.04; NaN leaves δ alone
    assert d[0] == 0.04 and d[1] == pytest.approx(0.02 * math.exp(-0.25), rel=1e-15)
    d = c.update([0.0, 0.0])  # e = +1: δ·e^-0.5, clamped below at 0.01
    assert d[0] == pytest.approx(0.04 * math.exp(-0.5), rel=1e-15) and d[1] == 0.01  # 0.02·e^-0.75 < min
    assert c.steps == 3 and c.spec_for(0) == ClipSpec("kl3", delta=d[0])
    # kl3 signal: dir +1 (a wider budget moves further)
    k = DeltaController(parse_method("kl3:0.02@kl3=0.002:gain=0.3"))
    assert k.update(0.001)[0] == pytest.approx(0.02 * math.exp(0.3 * 0.5))
    assert delta_update(0.02, 0.004, k.spec) == pytest.approx(0.02 * math.exp(-0.3))


def test_controller_state_round_trips_and_refuses_other_methods():
    spec = parse_method("kl3@clipfrac=0.1")
    c = DeltaController(spec, runs=3)
    c.update([0.3, 0.0, 0.1])
    state = c.state_dict()
    torch_state = torch.load(_save(state), weights_only=True)  # checkpoints load with weights_only
    c2 = DeltaController(spec, runs=3)
    c2.load_state_dict(torch_state)
    np.testing.assert_array_equal(c2.delta, c.delta)
    assert c2.steps == 1
    with pytest.raises(ValueError, match="is for method"):
        DeltaController(parse_method("kl3@clipfrac=0.2"), runs=3).load_state_dict(state)
    with pytest.raises(ValueError, match="expected 2 finite values"):
        DeltaController(spec, runs=2).load_state_dict(state)
    with pytest.raises(ValueError, match="must be an AdaptiveSpec"):
        DeltaController(ClipSpec("kl3", delta=0.02))


def _save(obj):
    import io

    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


def test_adaptive_spec_is_the_fixed_spec_at_delta0_for_the_loss():
    spec = parse_method("kl3@clipfrac=0.1")
    assert isinstance(spec, AdaptiveSpec) and spec.fixed() == parse_method("atr")
    assert spec.ratio_bounds() == parse_method("atr").ratio_bounds()
