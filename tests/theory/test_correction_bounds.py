"""The rollout-correction options as ρ intervals: against mpmath's Lambert W and against the correction itself.

Each interval is checked from both sides on the torch `rollout_correction`: a sequence of L tokens at a constant
ρ just inside the interval is kept (or its weight left untouched), just outside it is rejected (or truncated).
"""

import json
import math

import mpmath
import pytest
import torch

from divclip.cli import main
from divclip.theory.correction import RS_OPTIONS, Rejection, parse_correction
from divclip.theory.correction_apply import rollout_correction
from divclip.theory.correction_bounds import correction_intervals, rejection_interval

LENGTHS = (1, 7, 100, 1000)


@pytest.mark.parametrize("delta", [1e-4, 0.01, 0.05, 0.5])
def test_token_k3_threshold_is_the_lambert_w_interval(delta):
    with mpmath.workdps(40):  # local: other tests set their own precision
        z = -mpmath.exp(-1 - mpmath.mpf(delta))
        ref_lo, ref_hi = float(-mpmath.lambertw(z, 0)), float(-mpmath.lambertw(z, -1))
    lo, hi = rejection_interval(Rejection("token_k3", delta))
    assert lo == pytest.approx(ref_lo, rel=1e-13)
    assert hi == pytest.approx(ref_hi, rel=1e-13)


def test_token_k2_and_k1_closed_forms():
    lo, hi = rejection_interval(Rejection("token_k2", 0.02))
    assert (lo, hi) == pytest.approx((math.exp(-math.sqrt(0.04)), math.exp(math.sqrt(0.04))), rel=1e-14)
    assert rejection_interval(Rejection("token_k1", 1.25, 0.8)) == pytest.approx((0.8, 1.25), rel=1e-15)


def kept_at(c, rho, length):
    """(kept, weight) of one sequence of `length` tokens, each at ratio rho, under correction c."""
    old = torch.full((1, length), math.log(0.3), dtype=torch.float64)
    rollout = old - math.log(rho)
    w, keep, _ = rollout_correction(old, rollout, torch.ones_like(old), c)
    return bool(keep.all()), None if w is None else float(w[0, 0])


THRESHOLDS = {"k1": "0.9_1.2", "k2": 0.01, "k3": 0.02}


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("option", RS_OPTIONS)
def test_each_rejection_interval_is_what_the_rule_keeps(option, length):
    c = parse_correction(f"rs={option}:{THRESHOLDS[option[-2:]]}")
    (row,) = correction_intervals(c, LENGTHS)
    lo, hi = row["by_length"][length]
    for edge, inside, outside in ((lo, lo * (1 + 1e-6), lo * (1 - 1e-6)), (hi, hi * (1 - 1e-6), hi * (1 + 1e-6))):
        assert kept_at(c, inside, length)[0], (option, length, edge)
        assert not kept_at(c, outside, length)[0], (option, length, edge)


@pytest.mark.parametrize("length", LENGTHS)
def test_sequence_weight_interval_shrinks_as_the_length_grows(length):
    c = parse_correction("is=sequence:mask=0.5_3.0")
    (row,) = correction_intervals(c, LENGTHS)
    lo, hi = row["by_length"][length]
    assert hi == pytest.approx(3.0 ** (1 / length), rel=1e-14) and lo == pytest.approx(0.5 ** (1 / length), rel=1e-14)
    assert kept_at(c, hi * (1 - 1e-6), length)[1] > 0 and kept_at(c, hi * (1 + 1e-6), length)[1] == 0
    assert kept_at(c, lo * (1 + 1e-6), length)[1] > 0 and kept_at(c, lo * (1 - 1e-6), length)[1] == 0
    tis = parse_correction("is=sequence:tis=3.0")
    w = kept_at(tis, hi * (1 + 1e-3), length)[1]
    assert w == pytest.approx(3.0, rel=1e-12)  # truncated just past C^{1/L}


def test_the_issue_length_trap_in_numbers():
    """A drift of 0.012 log ρ per token: inside TRL's cap 3.0 at 91 tokens, outside at 92."""
    (row,) = correction_intervals("is=sequence:mask=3.0/noclamp", (91, 92))
    rho = math.exp(0.012)
    assert row["by_length"][91][1] > rho > row["by_length"][92][1]


def test_atlas_prints_the_intervals(capsys):
    assert main(["atlas", "--correction", "is=sequence:tis=3.0/rs=token_k3:0.01", "--lengths", "1,100", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["correction"] == "is=sequence:tis=3.0/rs=token_k3:0.01"
    parts = {p["part"]: p["by_length"] for p in doc["parts"]}
    assert parts["is=sequence"]["100"][1] == pytest.approx(3.0**0.01, rel=1e-14)
    assert main(["atlas", "--correction", "rs=seq_sum_k3:0.5"]) == 0
    assert "the sum of token k3" in capsys.readouterr().out


def test_bad_lengths_are_named():
    with pytest.raises(ValueError, match="lengths"):
        correction_intervals("is=token", (0,))


BANDS = (("ratio", "0.8_1.3"), ("ratio", "1.3"), ("kl_k1", "-0.1_0.2"), ("kl_k2", "0.02"), ("kl_k3", "0.02"))
FILTERS = [
    f"filter={level}:{metric}:{agg}mask:{band}"
    for level in ("token", "sequence")
    for agg in (("sum:", "mean:", "max:") if level == "sequence" else ("",))
    for metric, band in BANDS
] + ["filter=token:ratio:clamp:0.8_1.3", "filter=sequence:ratio:mean:clamp:0.8_1.3"]


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("text", FILTERS)
def test_each_areal_filter_interval_is_what_the_filter_keeps(text, length):
    """Inside the interval the weight is the unmasked, unclamped one; just outside it is 0 (mask) or clamped."""
    c = parse_correction(text)
    (row,) = correction_intervals(c, LENGTHS)
    lo, hi = row["by_length"][length]
    edges = [(hi, hi * (1 - 1e-6), hi * (1 + 1e-6))] + ([(lo, lo * (1 + 1e-6), lo * (1 - 1e-6))] if lo > 0 else [])
    for edge, inside, outside in edges:
        w_in, w_out = kept_at(c, inside, length)[1], kept_at(c, outside, length)[1]
        assert w_in == pytest.approx(inside, rel=1e-9), (text, length, edge)
        if c.filter.action == "mask":
            assert w_out == 0.0, (text, length, edge)
        else:
            assert w_out == pytest.approx(c.filter.upper if edge == hi else c.filter.lower, rel=1e-9)


@pytest.mark.parametrize("tau", [1e-4, 0.04])
def test_m2po_interval_for_a_uniform_batch(tau):
    (row,) = correction_intervals(f"m2po={tau!r}", LENGTHS)
    lo, hi = row["by_length"][100]
    assert (lo, hi) == pytest.approx((math.exp(-math.sqrt(tau)), math.exp(math.sqrt(tau))), rel=1e-14)
    c = parse_correction(f"m2po={tau!r}")
    assert kept_at(c, hi * (1 - 1e-6), 50)[0] and kept_at(c, lo * (1 + 1e-6), 50)[0]
    old = torch.full((1, 50), math.log(0.3), dtype=torch.float64)
    _, keep, _ = rollout_correction(old, old - math.log(hi * (1 + 1e-6)), torch.ones_like(old), c)
    assert int(keep.sum()) == 1  # outside: AReaL drops all but one token


@pytest.mark.parametrize("length", (1, 7))
@pytest.mark.parametrize(
    "text",
    [
        "filter=token:binary_kl:mask:0.0_0.05",
        "filter=token:binary_tv:mask:0.1",
        "filter=sequence:binary_kl:mean:mask:0.02",
        "filter=sequence:binary_tv:sum:mask:0.3",
    ],
)
def test_binary_gate_interval_is_the_measures_at_the_stated_rollout_probability(text, length):
    """OpenRLHF's binary gates: the interval is divclip's binary_kl / binary_tv measure bounds at π_rollout =
    BINARY_P (δ/L for a sum); a sequence of tokens at π_rollout = BINARY_P, each at ρ just inside, keeps its
    weights ρ; just outside, weight 0."""
    from divclip.theory.correction_bounds import BINARY_P
    from divclip.theory.measures import get_measure

    c = parse_correction(text)
    (row,) = correction_intervals(c, LENGTHS + (length,))
    pooled = length if c.filter.agg == "sum" and c.filter.level == "sequence" else 1
    ref = get_measure(c.filter.metric).bounds(c.filter.upper / pooled, BINARY_P)
    assert row["by_length"][length] == pytest.approx(tuple(float(x) for x in ref), rel=1e-15)
    assert "OpenRLHF" in row["bounds"]
    rollout = torch.full((1, length), math.log(BINARY_P), dtype=torch.float64)
    for edge in row["by_length"][length]:
        for factor, kept in ((1 - 1e-6, edge > 1), (1 + 1e-6, edge < 1)):
            rho = edge * factor
            w, _, _ = rollout_correction(rollout + math.log(rho), rollout, torch.ones_like(rollout), c)
            assert float(w[0, 0]) == (pytest.approx(rho, rel=1e-12) if kept else 0.0), (text, edge, factor)
