"""The budget table, and the claim behind `asymmetric_contradicts_measure`: no p-independent measure has a
tighter upper side, while binary KL does for confident tokens."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from divclip.sanity.budget import equivalent_budgets
from divclip.theory import MEASURES, delta_for_eps, equivalent_ratio_clip

P_FREE = [m.name for m in MEASURES.values() if not m.p_dependent]


@given(eps_low=st.floats(1e-3, 0.9), name=st.sampled_from(P_FREE))
def test_no_p_independent_measure_is_tighter_above(eps_low, name):
    lo_w, hi_w = equivalent_ratio_clip(name, delta_for_eps(name, eps_low=eps_low))
    assert hi_w >= lo_w * (1 - 1e-9)


def test_binary_kl_is_tighter_above_for_confident_tokens():
    lo_w, hi_w = equivalent_ratio_clip("binary_kl", 0.02, p=0.9)
    assert hi_w < lo_w


@given(eps_low=st.floats(0.01, 0.5), eps_high=st.floats(0.01, 0.5))
def test_rows_round_trip_through_theory(eps_low, eps_high):
    rows = equivalent_budgets(eps_low, eps_high)
    assert {r["measure"] for r in rows} == set(MEASURES)
    for r in rows:
        if r["p"] is None:
            assert r["delta_from_eps_low"] == delta_for_eps(r["measure"], eps_low=eps_low)
            back = delta_for_eps(r["measure"], eps_high=r["implied_eps_high"])
            assert back == pytest.approx(r["delta_from_eps_low"], rel=1e-9)


def test_impossible_sides_are_reported_not_raised():
    rows = equivalent_budgets(0.2, 0.28, p_grid=(0.9,))
    bkl = next(r for r in rows if r["measure"] == "binary_kl")
    assert bkl["delta_from_eps_high"] is None and "must stay below 1" in bkl["problems"][0]
    ratio = next(r for r in equivalent_budgets(1.5, 0.2) if r["measure"] == "ratio")
    assert ratio["delta_from_eps_low"] is None and "eps_low must lie in (0, 1)" in ratio["problems"][0]
