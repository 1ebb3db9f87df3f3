"""Reallocation analysis: exact LP optimum (vs scipy linprog), feasible box (vs closed forms and brentq), softmax
dynamics through policy_loss (vs an independent numpy derivation), directions of the comparison, validation, CLI."""

import argparse
import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import brentq, linprog

from divclip.cli import realloc
from divclip.theory import get_measure
from divclip.theory.comparison import compare_measures
from divclip.theory.losses import PRESETS, ClipSpec
from divclip.theory.reallocation import (
    constrained_optimum,
    feasible_region,
    headroom_curve,
)
from divclip.theory.softmax_dynamics import Group, entropy_gradient, multi_epoch_drift, softmax_step

SPECS = {
    "grpo": PRESETS["grpo"],
    "dapo": PRESETS["dapo"],
    "atr": PRESETS["atr"],
    "dppo_kl": PRESETS["dppo_kl"],
    "dppo_tv": PRESETS["dppo_tv"],
    "kl3_0.05": ClipSpec("kl3", delta=0.05),
    "chi2_1.5": ClipSpec("chi2", delta=1.5),  # lo = 0: an action may lose all its mass
    "binary_kl_clip": ClipSpec("binary_kl", delta=0.02),
}


def _closed_form_bounds(spec: ClipSpec, p):
    """Interval straight from the measure (not through theory.reallocation)."""
    m = get_measure(spec.measure)
    if spec.measure_name == "ratio":
        lo, hi = 1 - spec.eps_low, 1 + spec.eps_high
        return np.full_like(p, lo), np.full_like(p, hi)
    lo, hi = m.bounds(spec.delta, p if m.p_dependent else None)
    return np.broadcast_to(lo, p.shape).astype(float), np.broadcast_to(hi, p.shape).astype(float)


@st.composite
def instances(draw):
    k = draw(st.integers(2, 8))
    w = np.array(draw(st.lists(st.floats(0.01, 1.0), min_size=k, max_size=k)))
    adv = np.array(draw(st.lists(st.floats(-2.0, 2.0), min_size=k, max_size=k)))
    name = draw(st.sampled_from(sorted(SPECS)))
    return w / w.sum(), adv, name


# ------------------------------------------------------------------------------------------ the LP
@given(instances())
def test_optimum_equals_linprog(inst):
    p, adv, name = inst
    spec = SPECS[name]
    lo, hi = _closed_form_bounds(spec, p)
    bounds = list(zip(lo * p, np.minimum(1.0, hi * p)))
    ref = linprog(-adv, A_eq=np.ones((1, p.size)), b_eq=[1.0], bounds=bounds, method="highs")
    assert ref.status == 0
    opt = constrained_optimum(p, adv, spec)
    assert opt.objective == pytest.approx(-ref.fun, abs=1e-9)
    assert opt.gain >= -1e-15  # q = p is feasible
    if np.diff(np.sort(adv)).min() > 1e-3:  # well-separated advantages: the optimum is unique
        np.testing.assert_allclose(opt.probs_new, ref.x, atol=1e-8)


@given(instances())
def test_optimum_stays_on_simplex_and_in_box(inst):
    p, adv, name = inst
    opt = constrained_optimum(p, adv, SPECS[name])
    f = feasible_region(p, adv, SPECS[name])
    q = opt.probs_new
    assert abs(q.sum() - 1.0) <= 1e-12
    assert np.all(q >= f.q_min - 1e-15) and np.all(q <= f.q_max + 1e-15)
    # The flow plan has the optimum's margins: out of donors, into receivers.
    np.testing.assert_allclose(opt.flow.sum(axis=0) - opt.flow.sum(axis=1), opt.delta, atol=1e-14)
    assert np.all(opt.flow >= 0)


def test_optimum_by_hand():
    # ratio [0.8, 1.2]: everyone starts at 0.8·p, the 0.2 left goes to the best action (room 0.6·0.4 = 0.24).
    opt = constrained_optimum([0.6, 0.3, 0.1], [1, -1, 0.5], "grpo")
    np.testing.assert_allclose(opt.probs_new, [0.68, 0.24, 0.08], atol=1e-15)
    assert opt.at_lower.tolist() == [False, True, True] and not opt.at_upper.any()
    np.testing.assert_allclose(opt.flow[:, 0], [0, 0.06, 0.02], atol=1e-15)
    assert opt.gain == pytest.approx(0.08 * 1 + 0.06 * 1 - 0.02 * 0.5, abs=1e-15)


def test_tied_advantages_share_in_proportion_to_room():
    # After action 0 reaches 1.2·0.1, the remaining 0.2 - 0.04 is split by the two A = -1 actions' rooms
    # 0.4·0.7 and 0.4·0.2, so both end at the ratio 0.8 + 0.4·0.16/0.36.
    opt = constrained_optimum([0.1, 0.7, 0.2], [1, -1, -1], "grpo")
    r = opt.probs_new / np.array([0.1, 0.7, 0.2])
    np.testing.assert_allclose(r, [1.2, 0.8 + 0.4 * 0.16 / 0.36, 0.8 + 0.4 * 0.16 / 0.36], atol=1e-14)


# ---------------------------------------------------------------------------------- feasible region
def test_feasible_region_p_independent_closed_form():
    p = np.array([0.85, 0.1, 0.05])
    f = feasible_region(p, [1.0, -1.0, 0.0], "dapo")
    np.testing.assert_allclose(f.room_up, np.minimum(0.28 * p, 1 - p), atol=1e-15)  # capped at 1 for p = 0.85
    np.testing.assert_allclose(f.room_down, 0.2 * p, atol=1e-15)
    assert f.max_gain_positive == pytest.approx(min(0.15, 0.2 * 0.15), abs=1e-15)
    assert f.max_release_negative == pytest.approx(min(0.2 * 0.1, 0.15 + 0.28 * 0.05), abs=1e-15)
    np.testing.assert_allclose(f.room_up_by_bucket, [f.room_up[1] + f.room_up[2], 0.0, f.room_up[0]], atol=1e-15)


def test_headroom_peaks_at_one_over_hi_for_p_independent():
    curve = headroom_curve("atr", np.linspace(0.001, 0.999, 9_999))
    hi = PRESETS["atr"].ratio_bounds()[1]
    assert curve.p_max_room_up == pytest.approx(1 / hi, abs=2e-4)
    np.testing.assert_allclose(curve.room_up, np.minimum((hi - 1) * curve.p, 1 - curve.p), atol=1e-15)


def _binary_kl_q_max(p, delta):
    """Largest q with KL(Bern(p)‖Bern(q)) = δ, by brentq in q (independent of theory.bounds)."""

    def f(q):
        return p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q)) - delta

    return brentq(f, p, 1 - 1e-15, xtol=1e-15, rtol=1e-15)


def test_binary_kl_favours_rare_tokens_kl3_confident_ones_at_equal_delta():
    """At the same δ, binary KL's room to gain ≈ sqrt(2δ p(1-p)) beats KL3's ≈ sqrt(2δ)·p for rare tokens and
    loses to it for confident ones; the crossover computed by brentq must match the module's curves."""
    delta = 0.02
    grid = np.array([0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8])
    bkl = headroom_curve(ClipSpec("binary_kl", delta=delta), grid)
    kl3 = headroom_curve(ClipSpec("kl3", delta=delta), grid)
    u = get_measure("kl3").bounds(delta)[1]
    ref_bkl = np.array([_binary_kl_q_max(p, delta) - p for p in grid])
    ref_kl3 = np.minimum(u * grid, 1.0) - grid
    np.testing.assert_allclose(bkl.room_up, ref_bkl, rtol=1e-9)
    expected = np.sign(ref_bkl - ref_kl3)
    assert np.array_equal(np.sign(bkl.room_up - kl3.room_up), expected)
    assert expected[0] > 0 and expected[-1] < 0  # the comparison is not constant over p


# ----------------------------------------------------------------------------- pinned LP directions
def _top_action_lp_gain(spec: ClipSpec, p, top):
    """Closed form: the unique best action takes min(its room up, everyone else's room down)."""
    lo, hi = _closed_form_bounds(spec, p)
    room_up = min(1.0, hi[top] * p[top]) - p[top]
    room_down = np.delete((1 - lo) * p, top).sum()
    return min(room_up, room_down)


@pytest.mark.parametrize(
    "probs, adv, column, top",
    [
        ((0.55, 0.3, 0.15), (1.0, -1.0, -0.5), "lp_gain_high_pos", 0),  # confident positive action
        ((0.1, 0.6, 0.3), (1.0, -1.0, -1.0), "lp_gain_low_pos", 0),  # rare positive action
    ],
)
def test_lp_comparison_direction_follows_closed_form(probs, adv, column, top):
    names = ("grpo", "dapo", "atr", "dppo_kl", "dppo_tv")
    comp = compare_measures(probs, adv, names, epochs=1)
    got = {r.label: getattr(r, column) for r in comp.rows}
    want = {n: _top_action_lp_gain(PRESETS[n], np.array(probs), top) for n in names}
    for n in names:
        assert got[n] == pytest.approx(want[n], abs=1e-12)
    for a in names:
        for b in names:
            d = want[a] - want[b]
            expected = 0 if abs(d) < 1e-12 else np.sign(d)
            diff = got[a] - got[b]
            assert (0 if abs(diff) < 1e-12 else np.sign(diff)) == expected, (a, b)
    ranking = sorted(names, key=lambda n: -want[n])
    assert comp.order(column)[0] in [n for n in names if abs(want[n] - want[ranking[0]]) < 1e-12]
    if column == "lp_gain_high_pos":
        # p = 0.55 > ε_low/(ε_low + ε_high): the donors' lower bounds bind, so the looser upper bound of KL3
        # and DAPO buys the confident action nothing over GRPO in one exact step.
        assert want["grpo"] == pytest.approx(want["atr"]) == pytest.approx(want["dapo"])
    else:
        assert want["dapo"] > want["atr"] > want["grpo"]  # the rare action's own upper bound binds


# ------------------------------------------------------------------------------------ softmax step
Z = np.log(np.array([0.6, 0.3, 0.1]))
ADV = np.array([1.0, -1.0, 0.5])


def test_entropy_gradient_matches_finite_difference():
    z = np.array([0.3, -1.2, 2.0, 0.1])
    h = 1e-6
    fd = []
    for j in range(z.size):
        e = np.zeros_like(z)
        e[j] = h
        fd.append((_entropy(z + e) - _entropy(z - e)) / (2 * h))
    np.testing.assert_allclose(entropy_gradient(z), fd, atol=1e-9)


def _entropy(z):
    p = np.exp(z - z.max())
    p /= p.sum()
    return -(p * np.log(p)).sum()


@pytest.mark.parametrize("name", ["grpo", "atr", "dppo_kl"])
def test_first_order_entropy_change_matches_finite_difference(name):
    step = softmax_step(Z, Group.expected(np.exp(Z), ADV), name, lr=0.3)
    dz = step.logits_new - step.logits
    h = 1e-5
    fd = (_entropy(Z + h * dz) - _entropy(Z - h * dz)) / (2 * h)
    assert step.dentropy_first == pytest.approx(fd, rel=1e-7, abs=1e-12)
    # Cui et al.: ΔH ≈ -Cov_π(log π, Δz)
    p = np.exp(Z)
    cov = p @ (np.log(p) * dz) - (p @ np.log(p)) * (p @ dz)
    assert step.dentropy_first == pytest.approx(-cov, rel=1e-10)
    assert abs(step.probs_new.sum() - 1) <= 1e-12 and abs(step.dprob_first.sum()) <= 1e-15


@pytest.mark.parametrize("name", ["grpo", "dapo", "atr", "dppo_kl", "dppo_tv"])
def test_first_epoch_gradient_is_the_softmax_closed_form(name):
    """At r = 1 no bound is active: ∂L/∂z_j = -π_j (A_j - Σ π A) for the expected group, in every mode."""
    p = np.exp(Z)
    step = softmax_step(Z, Group.expected(p, ADV), name, lr=0.1)
    np.testing.assert_allclose(step.grad, -p * (ADV - p @ ADV), atol=1e-15)
    assert step.metrics["clipfrac"] == 0.0


def test_first_order_error_is_second_order_in_lr():
    g = Group.expected(np.exp(Z), ADV)
    errs = []
    for lr in (0.1, 0.05, 0.025):
        s = softmax_step(Z, g, "grpo", lr=lr)
        errs.append((np.abs(s.dprob_exact - s.dprob_first).max(), abs(s.dentropy_exact - s.dentropy_first)))
    errs = np.array(errs)
    np.testing.assert_allclose(errs[:-1] / errs[1:], 4.0, rtol=0.15)  # halving lr quarters the error
    np.testing.assert_allclose(s.dprob_exact_by_bucket, [s.dprob_exact[2], s.dprob_exact[1], s.dprob_exact[0]])


# ------------------------------------------------------------------------------------ many epochs
def _reference_drift(p, adv, lo, hi, lr, epochs):
    """Expected-group clipped PG on logits from calculus: L = -Σ_{a unclipped} π_old(a)·r_a·A_a, and
    ∂(π_old(a) r_a)/∂z_j = π_a (δ_aj - π_j). Independent of theory.losses."""
    z = np.log(p)
    traj, flags = [p], []
    for _ in range(epochs):
        pi = np.exp(z - z.max())
        pi /= pi.sum()
        r = pi / p
        clip_lo, clip_hi = (adv < 0) & (r < lo), (adv > 0) & (r > hi)
        w = adv * pi * ~(clip_lo | clip_hi)
        z = z + lr * (w - pi * w.sum())
        q = np.exp(z - z.max())
        traj.append(q / q.sum())
        flags.append((clip_lo, clip_hi))
    return np.array(traj), flags


@pytest.mark.parametrize("name", ["grpo", "dapo", "atr", "dppo_kl", "binary_kl_clip"])
def test_drift_matches_reference_and_metrics(name):
    p = np.exp(Z)
    d = multi_epoch_drift(Z, Group.expected(p, ADV), SPECS[name], lr=0.5, epochs=8)
    lo, hi = _closed_form_bounds(SPECS[name], p)
    traj, flags = _reference_drift(p, ADV, lo, hi, 0.5, 8)
    np.testing.assert_allclose(d.probs, traj, atol=1e-12)
    assert np.all(np.abs(d.probs.sum(axis=1) - 1) <= 1e-12)
    assert d.clipped_low.tolist() == [f[0].tolist() for f in flags]
    assert d.clipped_high.tolist() == [f[1].tolist() for f in flags]
    np.testing.assert_allclose(d.clipfrac_low, d.clipped_low.sum(axis=1) / 3, atol=1e-12)
    np.testing.assert_allclose(d.clipfrac_high, d.clipped_high.sum(axis=1) / 3, atol=1e-12)
    moved = d.probs[1:] - p
    np.testing.assert_allclose(d.net_mass_by_bucket, moved[:, [2, 1, 0]], atol=1e-15)
    assert np.all(d.kl_old_new >= 0) and d.clipped_tokens.sum() > 0


def test_clip_does_not_freeze_a_clipped_action():
    """A zeroed gradient leaves the action to the softmax coupling: the A<0 action keeps falling below lo."""
    d = multi_epoch_drift(Z, Group.expected(np.exp(Z), ADV), "grpo", lr=0.2, epochs=6)
    e = int(np.argmax(d.clipped_low[:, 1]))
    assert d.clipped_low[e, 1] and d.ratio[-1, 1] < d.ratio[e, 1] < d.lo[1]


@pytest.mark.parametrize(
    "probs, adv, column, action, strict",
    [
        # Confident positive action: it reaches hi, so the looser hi keeps its gradient longer.
        ((0.6, 0.3, 0.1), (1.0, -1.0, 0.5), "dyn_gain_high_pos", 0, True),
        # Rare positive action: its ratio jumps past 1.2, 1.23 and 1.28 in the same epoch and then keeps rising
        # through the softmax coupling to the falling A<0 action, so the three presets tie exactly.
        ((0.1, 0.7, 0.2), (1.0, -1.0, -1.0), "dyn_gain_low_pos", 0, False),
    ],
)
def test_dynamics_direction_follows_reference(probs, adv, column, action, strict):
    """Which preset moves the most mass to the positive action after 8 epochs, derived from the numpy
    reference drift (not from theory.losses)."""
    p, a = np.array(probs), np.array(adv)
    names = ("grpo", "atr", "dapo")
    comp = compare_measures(p, a, names, lr=0.5, epochs=8)
    want = {}
    for n in names:
        lo, hi = _closed_form_bounds(PRESETS[n], p)
        want[n] = _reference_drift(p, a, lo, hi, 0.5, 8)[0][-1, action] - p[action]
    got = {r.label: getattr(r, column) for r in comp.rows}
    for x in names:
        assert got[x] == pytest.approx(want[x], abs=1e-12)
        for y in names:
            d = want[x] - want[y]
            assert np.sign(round(got[x] - got[y], 12)) == np.sign(round(d, 12)), (x, y)
    distinct = len({round(v, 9) for v in want.values()})
    if strict:
        assert distinct == 3 and comp.order(column) == sorted(names, key=lambda n: -want[n])
        assert comp.order(column) == ["dapo", "atr", "grpo"]
    else:
        assert distinct == 1
        hi_room = [(PRESETS[n].ratio_bounds()[1] - 1) * p[action] for n in names]
        assert min(want.values()) > 4 * max(hi_room)  # the gain is far beyond any upper bound's room


def test_sampled_group_uses_token_mean_and_counts_clips():
    g = Group.sampled([0, 0, 1, 2, 1], [1.0, 0.5, -1.0, 0.5, -0.2], num_actions=3)
    d = multi_epoch_drift(Z, g, "grpo", lr=2.0, epochs=5)
    r_tok = d.ratio[:-1][:, g.actions]  # (E, N)
    lo_tok = (g.advantages < 0) & (r_tok < 0.8)
    hi_tok = (g.advantages > 0) & (r_tok > 1.2)
    np.testing.assert_allclose(d.clipfrac_low, lo_tok.mean(axis=1), atol=1e-12)
    np.testing.assert_allclose(d.clipfrac_high, hi_tok.mean(axis=1), atol=1e-12)
    assert d.clipped_tokens.tolist() == (lo_tok.sum(1) + hi_tok.sum(1)).tolist() and d.clipped_tokens.sum() > 0


# --------------------------------------------------------------------------------------- to_dict
def test_everything_is_strict_json():
    comp = compare_measures([0.5, 0.3, 0.2], [1, -1, 0], ["grpo", ClipSpec("chi2", delta=1.5)], epochs=2)
    text = json.dumps(comp.to_dict(details=True), allow_nan=False)
    back = json.loads(text)
    assert back["columns"][0] == "label" and len(back["rows"]) == 2
    assert back["rows"][1]["optimum"]["kl_old_new"] is None  # chi2 δ = 1.5 has lo = 0: KL(old‖new) = inf
    assert {r["label"] for r in comp.table()} == {"grpo", "chi2 δ=1.5"}


# ------------------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "probs, adv, fragment",
    [
        ([0.5, -0.1, 0.6], [1, 1, 1], "probs[1] = -0.1"),
        ([0.5, 0.0, 0.5], [1, 1, 1], "probs[1] = 0.0"),
        ([0.5, 0.4], [1, 1], "must sum to 1"),
        ([0.5, float("nan"), 0.5], [1, 1, 1], "probs contains NaN at positions [1]"),
        ([1.0], [1], "at least 2"),
        ([[0.5, 0.5]], [1, 1], "1-D"),
        ([0.5, 0.5], [1, 1, 1], "adv has 3 entries but probs has 2"),
        ([0.5, 0.5], [1, float("nan")], "adv[1] = nan"),
        ("0.5,0.5", [1, 1], "probs must be a number"),
    ],
)
def test_invalid_distributions_name_argument_and_value(probs, adv, fragment):
    for fn in (feasible_region, constrained_optimum):
        with pytest.raises(ValueError, match=None) as exc:
            fn(probs, adv, "grpo")
        assert fragment in str(exc.value)


def test_other_invalid_inputs():
    with pytest.raises(ValueError, match="sapo"):
        feasible_region([0.5, 0.5], [1, -1], "sapo")
    with pytest.raises(ValueError, match="bucket_edges must increase"):
        feasible_region([0.5, 0.5], [1, -1], "grpo", bucket_edges=(0, 0.6, 0.5, 1))
    with pytest.raises(ValueError, match=r"actions\[1\] = 3.0"):
        Group.sampled([0, 3], [1, 1], num_actions=3)
    with pytest.raises(ValueError, match=r"lr must be a number in \(0, 1000\]"):
        softmax_step(Z, Group.expected(np.exp(Z), ADV), "grpo", lr=0.0)
    with pytest.raises(ValueError, match="epochs must be an integer"):
        multi_epoch_drift(Z, Group.expected(np.exp(Z), ADV), "grpo", lr=0.1, epochs=0)
    with pytest.raises(ValueError, match=r"logits\[0\] = inf"):
        softmax_step([np.inf, 0.0], Group.expected([0.5, 0.5], [1, -1]), "grpo", lr=0.1)
    with pytest.raises(ValueError, match="spec must be a ClipSpec or a method string"):
        constrained_optimum([0.5, 0.5], [1, -1], 0.2)
    with pytest.raises(ValueError, match="unknown method 'kl9'"):
        constrained_optimum([0.5, 0.5], [1, -1], "kl9")


# -------------------------------------------------------------------------------------------- CLI
def _cli(capsys, *argv):
    parser = argparse.ArgumentParser(prog="divclip")
    realloc.add_parser(parser.add_subparsers(dest="command", required=True))
    code = realloc.run(parser.parse_args(["realloc", *argv]))
    return code, capsys.readouterr().out


def test_cli_json_equals_library(capsys):
    argv = ("--probs", "0.6,0.3,0.1", "--adv", "1,-1,0.5", "--measure", "kl3", "--delta", "0.02", "--epochs", "3")
    code, out = _cli(capsys, *argv, "--json")
    assert code == 0
    data = json.loads(out)
    spec = ClipSpec("kl3", delta=0.02)
    opt = constrained_optimum([0.6, 0.3, 0.1], [1, -1, 0.5], spec)
    assert data["optimum"]["probs_new"] == opt.to_dict()["probs_new"]
    assert data["feasible"]["hi"][0] == get_measure("kl3").bounds(0.02)[1]
    assert len(data["drift"]["kl_old_new"]) == 3 and "comparison" not in data
    code, out = _cli(capsys, *argv, "--compare")
    assert code == 0 and "One-step optimum" in out and "dppo_kl" in out and "kl3 δ=0.02" in out


def test_cli_presets_and_ratio_width(capsys):
    _, out = _cli(capsys, "--probs", "0.5,0.5", "--adv=-1,1", "--measure", "ratio", "--delta", "0.2", "--json")
    assert json.loads(out)["feasible"]["hi"] == [1.2, 1.2]
    _, out = _cli(capsys, "--probs", "0.5,0.5", "--adv=-1,1", "--measure", "dapo", "--json")
    assert json.loads(out)["spec"] == "dapo"


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (("--probs", "0.6,x", "--adv", "1,1", "--measure", "atr"), "--probs must be comma-separated numbers"),
        (("--probs", "0.6,0.3", "--adv", "1,1", "--measure", "atr"), "--probs must sum to 1"),
        (("--probs", "0.6,0.4", "--adv", "1,1,1", "--measure", "atr"), "--adv has 3 entries but --probs has 2"),
        (("--probs", "0.6,0.4", "--adv", "1,1", "--measure", "kl9"), "--measure must be a measure"),
        (("--probs", "0.6,0.4", "--adv", "1,1", "--measure", "binary_kl"), "'binary_kl' needs a budget"),
        (("--probs", "0.6,0.4", "--adv", "1,1", "--measure", "atr", "--delta", "0.1"), "is a preset"),
    ],
)
def test_cli_errors_name_the_flag(capsys, argv, fragment):
    with pytest.raises(ValueError) as exc:
        _cli(capsys, *argv)
    assert fragment in str(exc.value)
