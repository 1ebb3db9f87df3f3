"""The app's intervals, tables and exports carry theory's numbers unchanged."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest

from divclip import theory
from divclip.app.export import interval_spec, method_export
from divclip.app.intervals import clip_intervals, format_bound, table_csv, table_rows
from divclip.app.methods import METHOD_COLOURS, colour_for, label_for, method_for
from divclip.app.presets import ATR_DELTA, DELTA_MAX, DELTA_MIN, PRESETS, kl3_delta_matching, matching_preset

REPO = Path(__file__).resolve().parents[2]


def test_intervals_are_theorys_bounds():
    ivs, errors = clip_intervals(list(theory.MEASURES), 0.02, 0.2, 0.28, 0.3)
    assert errors == []
    by_name = {iv.name: iv for iv in ivs}
    assert (by_name["kl3"].lo, by_name["kl3"].hi) == theory.kl3_bounds(0.02)
    assert (by_name["ratio"].lo, by_name["ratio"].hi) == (0.8, 1.28)
    assert (by_name["binary_kl"].lo, by_name["binary_kl"].hi) == theory.get_measure("binary_kl").bounds(0.02, p=0.3)
    for name in ("kl3", "chi2", "hellinger", "binary_tv"):
        iv = by_name[name]
        p = 0.3 if iv.measure.p_dependent else None
        assert (iv.eps_low, iv.eps_high) == theory.equivalent_ratio_clip(name, 0.02, p)
        assert iv.p == p


def test_refused_inputs_become_messages():
    custom = theory.measure_from_formula("(r - 1)**2 / (1 + (r - 1)**2)")  # D < 1/2 on [1e-4, 1e4]
    ivs, errors = clip_intervals([custom, "kl3"], 0.5, 0.2, 0.2, 0.1)
    assert [iv.name for iv in ivs] == ["kl3"]
    assert len(errors) == 1 and "delta must be below" in errors[0]


def test_table_and_csv_hold_the_same_numbers():
    ivs, _ = clip_intervals(["kl3", "ratio", "binary_kl"], 0.05, 0.2, 0.28, 0.01)
    rows = table_rows(ivs)
    lo, hi = theory.kl3_bounds(0.05)
    assert rows[0]["l"] == format_bound(lo) == f"{lo:.6f}" and rows[0]["u"] == format_bound(hi)
    parsed = list(csv.DictReader(io.StringIO(table_csv(ivs))))
    assert [r["measure"] for r in parsed] == ["kl3", "ratio", "binary_kl"]
    # full precision (12 significant digits, theory's accuracy), not the 6 shown
    assert float(parsed[0]["l"]) == pytest.approx(lo, rel=1e-11)
    assert float(parsed[0]["u"]) == pytest.approx(hi, rel=1e-11)
    assert parsed[0]["l"] == f"{lo:.12g}" and len(parsed[0]["l"].replace("0.", "", 1)) == 12
    # the ratio row's budget is its two widths, as the screen shows them (it was empty)
    assert float(parsed[2]["p"]) == 0.01 and parsed[1]["budget"] == "ε = 0.2 / 0.28" == rows[1]["budget"]


@pytest.mark.parametrize(("delta", "method"), [(ATR_DELTA, "ATR-GRPO"), (0.05, "KL3 clip"), (4.5e-8, "KL3 clip")])
def test_kl3_is_atr_grpo_only_at_its_budget(delta, method):
    (iv,), _ = clip_intervals(["kl3"], delta, 0.2, 0.2, 0.1)
    assert iv.method == method and iv.colour == METHOD_COLOURS["ATR-GRPO"]


def test_asymmetry_column_keeps_significant_digits_at_gspo_size_budgets():
    """ε_high − ε_low of KL3 at δ = 4.5e-8 is 4δ/3 ≈ 6e-8: six decimals showed 0.000000."""
    ivs, _ = clip_intervals(["kl3"], 4.5e-8, 0.2, 0.2, 0.1)
    lo, hi = theory.equivalent_ratio_clip("kl3", 4.5e-8)
    shown = table_rows(ivs)[0]["ε_high − ε_low"]
    assert shown == f"{hi - lo:.6g}" and float(shown) == pytest.approx(4 * 4.5e-8 / 3, rel=1e-3)


@pytest.mark.parametrize(("eps_low", "eps_high"), [(0.2, 0.28), (0.1, 0.1), (0.3, 0.7), (3e-4, 4e-4)])
def test_csv_and_table_have_no_float_noise(eps_low, eps_high):
    """1 − 0.2 is 0.8 in the table and the CSV, never repr's 0.7999999999999999 or 0.19999999999999996."""
    ivs, _ = clip_intervals(["ratio", "kl3"], 0.05, eps_low, eps_high, 0.1)
    text = table_csv(ivs)
    assert not re.search(r"9999999|0000000\d", text), text
    ratio = list(csv.DictReader(io.StringIO(text)))[0]
    assert float(ratio["l"]) == pytest.approx(1 - eps_low, rel=1e-11)
    assert float(ratio["ε_low"]) == eps_low and ratio["method"] == method_for("ratio", eps_low, eps_high)
    assert ratio["D(r[, p])"] == f"1 − {eps_low:g} ≤ r ≤ 1 + {eps_high:g}"  # not abs(r - 1): asymmetric ε


def test_verl_and_trl_settings_for_one_interval():
    ivs, _ = clip_intervals(["kl3", "ratio", "binary_kl", "binary_tv"], ATR_DELTA, 0.2, 0.28, 0.1)
    kl3, ratio, bkl, btv = (method_export(interval_spec(iv), "verl").text("overrides") for iv in ivs)
    lo, hi = theory.get_measure("kl3").bounds(ATR_DELTA)
    assert "loss_mode=atr_kl3" in kl3 and "clip_ratio_low=0.2 " in kl3
    assert abs(float(kl3.split("clip_ratio_high=")[1].split()[0]) - (hi - 1)) < 1e-12
    assert "loss_mode=vanilla" in ratio and "clip_ratio_low=0.2 " in ratio and "clip_ratio_high=0.28 " in ratio
    # verl's dppo losses read clip_ratio_low/high as the divergence threshold δ itself.
    assert "policy_loss.loss_mode=dppo_kl" in bkl and f"clip_ratio_high={ATR_DELTA!r}" in bkl
    assert "policy_loss.loss_mode=dppo_tv" in btv
    trl_kl3 = method_export(interval_spec(ivs[0]), "trl").settings
    assert trl_kl3 == {
        "loss_type": "dapo",
        "clip_measure": "kl3",
        "clip_delta": ATR_DELTA,
        "epsilon_high": None,
        "delta": None,
    }  # loss_type explicit (TRL's default dapo): a pasted block leaves no other
    assert method_export(interval_spec(ivs[1]), "trl").settings["epsilon_high"] == 0.28
    with pytest.raises(ValueError, match="TRL has no 'gated' loss form"):
        method_export(interval_spec(ivs[2]), "trl")


def test_atr_preset_is_grpo_lower_side_under_kl3():
    assert ATR_DELTA == theory.delta_for_eps("kl3", eps_low=0.2)
    assert abs(theory.kl3_bounds(ATR_DELTA)[0] - 0.8) < 1e-12
    for name, preset in PRESETS.items():
        assert matching_preset(preset.values) == name
    assert matching_preset({**PRESETS["DAPO"].values, "eps_high": 0.3}) is None


def test_kl3_delta_matching_clamps_with_a_message():
    assert kl3_delta_matching(0.2) == (ATR_DELTA, None)
    delta, notice = kl3_delta_matching(0.9)  # D(0.1) = 1.40: beyond the slider
    assert delta == DELTA_MAX and "1.40259" in notice
    delta, notice = kl3_delta_matching(1e-4)  # D(0.9999) = 5.0e-9: below it
    assert delta == DELTA_MIN and notice


def test_method_colours_match_streamlit_config():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    config = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text())
    assert config["theme"]["chartCategoricalColors"] == list(METHOD_COLOURS.values())
    assert config["browser"]["gatherUsageStats"] is False
    assert len(set(METHOD_COLOURS.values())) == len(METHOD_COLOURS)


@pytest.mark.parametrize(
    ("name", "method"), [("kl3", "ATR-GRPO"), ("binary_kl", "DPPO-Binary-KL"), ("custom: r", "custom")]
)
def test_methods(name, method):
    assert method_for(name) == method and colour_for(name) == METHOD_COLOURS[method]


def test_ratio_is_grpo_when_symmetric_and_dapo_with_clip_higher():
    assert method_for("ratio", 0.2, 0.2) == "GRPO" and method_for("ratio", 0.2, 0.28) == "DAPO"


@pytest.mark.parametrize(
    ("eps", "method", "colour"),
    [
        ((0.1, 0.1), "ratio clip", "GRPO"),
        ((0.2, 0.3), "ratio clip", "DAPO"),
        ((3e-4, 4e-4), "GSPO", "DAPO"),
        ((0.3, 0.2), "ratio clip", "GRPO"),
        ((0.2 + 1e-7, 0.2), "ratio clip", "GRPO"),
    ],
)
def test_ratio_clip_is_named_by_its_eps(eps, method, colour):
    """Only GRPO's, DAPO's and GSPO's published ε carry their names; any other ε is a plain ratio clip."""
    assert method_for("ratio", *eps) == method and colour_for("ratio", *eps) == METHOD_COLOURS[colour]
    assert label_for("ratio") == "ratio clip"


def test_presets_are_distinct():
    values = [
        tuple(sorted((k, tuple(v) if isinstance(v, tuple) else v) for k, v in p.values.items()))
        for p in PRESETS.values()
    ]
    assert len(set(values)) == len(values)
    numbers = [tuple(p.values[k] for k in ("delta", "eps_low", "eps_high", "p")) for p in PRESETS.values()]
    assert len(set(numbers)) == len(numbers), "two presets differ only in which measures they show"
    assert PRESETS["ATR-GRPO"].values["eps_high"] == pytest.approx(theory.kl3_bounds(ATR_DELTA)[1] - 1, abs=1e-6)
    assert PRESETS["GSPO"].values["eps_low"] == 3e-4 and PRESETS["GSPO"].values["eps_high"] == 4e-4


def test_kl3_delta_matching_eps_high():
    delta, notice = kl3_delta_matching(eps_high=0.28)
    assert notice is None and theory.kl3_bounds(delta)[1] == pytest.approx(1.28, abs=1e-12)
    with pytest.raises(ValueError, match="exactly one of eps_low, eps_high"):
        kl3_delta_matching(0.2, 0.28)
