"""The rollout-correction figures (app/correction_figures.py) and their sections on the Atlas and Clip explorer
pages: each drawn number against a closed form or mpmath's Lambert W, not against the code that drew it."""

from __future__ import annotations

from pathlib import Path

import mpmath
import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from divclip.app.correction_figures import (
    DEFAULT_CORRECTIONS,
    interval_table,
    kept_band,
    kept_weight,
    length_figure,
    overlay_figure,
    parse_list,
    weight_figure,
)
from divclip.app.intervals import clip_intervals
from divclip.theory.correction import parse_correction

MAIN = Path(__file__).resolve().parents[2] / "app" / "main.py"
RHO = np.exp(np.linspace(-1.5, 1.5, 301))


def lambert_band(delta: float) -> tuple[float, float]:
    """KL3's {ρ : ρ − 1 − log ρ <= δ} by mpmath's Lambert W (the two real branches)."""
    with mpmath.workdps(30):
        z = -mpmath.exp(-1 - mpmath.mpf(delta))
        return float(-mpmath.lambertw(z, 0)), float(-mpmath.lambertw(z, -1))


@pytest.mark.parametrize("length", [1, 10, 100])
def test_weights_are_the_closed_forms(length):
    """Weight × kept of a constant-ρ sequence: each correction's own definition, written out here."""
    tis = kept_weight(parse_correction("is=token:tis=2.0"), RHO, length)
    np.testing.assert_allclose(tis, np.minimum(RHO, 2.0), rtol=1e-12)
    seq = kept_weight(parse_correction("is=sequence:mask=3.0/noclamp"), RHO, length)
    prod = RHO**length
    np.testing.assert_allclose(seq, np.where(prod <= 3.0, prod, 0.0), rtol=1e-9)
    lo, hi = lambert_band(0.01)
    k3 = kept_weight(parse_correction("rs=token_k3:0.01"), RHO, length)
    inside = (RHO > lo * (1 + 1e-9)) & (RHO < hi * (1 - 1e-9))
    assert np.all(k3[inside] == 1.0) and np.all(k3[(RHO < lo * (1 - 1e-9)) | (RHO > hi * (1 + 1e-9))] == 0.0)
    geo = kept_weight(parse_correction("filter=sequence:ratio:sum:mask:0.5_2.0"), RHO, length)
    keep = (prod >= 0.5 * (1 + 1e-9)) & (prod <= 2.0 * (1 - 1e-9))  # AReaL: Π ρ in band, weight the geometric mean
    np.testing.assert_allclose(geo[keep], RHO[keep], rtol=1e-9)
    assert np.all(geo[(prod < 0.5 * (1 - 1e-9)) | (prod > 2.0 * (1 + 1e-9))] == 0.0)


def test_m2po_keeps_a_uniform_batch_inside_its_root_and_one_token_outside():
    length = 8
    w = kept_weight(parse_correction("m2po=0.04"), RHO, length)
    inside = np.log(RHO) ** 2 < 0.04 * (1 - 1e-9)
    outside = np.log(RHO) ** 2 > 0.04 * (1 + 1e-9)
    assert np.all(w[inside] == 1.0) and np.allclose(w[outside], 1 / length)


def test_opsm_drops_a_negative_advantage_sequence_whose_mean_k1_exceeds_delta():
    w = kept_weight(parse_correction("opsm=0.001"), RHO, 5)
    assert np.all(w[-np.log(RHO) > 0.001 * (1 + 1e-9)] == 0.0) and np.all(w[-np.log(RHO) < 0.001 * (1 - 1e-9)] == 1)


def test_figures_draw_the_numbers():
    corrections, errors = parse_list(DEFAULT_CORRECTIONS)
    assert errors == [] and len(corrections) == 3
    fig = weight_figure(corrections, 10, RHO)
    lines = [t for t in fig.data if t.meta and t.meta["kind"] == "weight"]
    assert [t.name for t in lines] == list(corrections)
    for t, c in zip(lines, corrections.values()):
        np.testing.assert_array_equal(np.asarray(t.y), kept_weight(c, RHO, 10))
    lengths = (1, 10, 100)
    bands = [t for t in length_figure(corrections, lengths).data if t.meta and t.meta.get("kind") == "band"]
    assert len(bands) == 3
    lo, hi = kept_band(corrections["is=sequence:mask=3.0/noclamp"], lengths)
    np.testing.assert_allclose(hi, [3.0 ** (1 / n) for n in lengths], rtol=1e-13)
    assert np.all(lo == 0.0)
    lo, hi = kept_band(corrections["rs=token_k3:0.01"], lengths)
    np.testing.assert_allclose(np.stack([lo, hi], -1), [lambert_band(0.01)] * 3, rtol=1e-12)


def test_sequence_k3_sum_band_is_the_lambert_interval_of_delta_over_l():
    lo, hi = kept_band(parse_correction("rs=seq_sum_k3:0.5"), (1, 50))
    assert (lo[1], hi[1]) == pytest.approx(lambert_band(0.5 / 50), rel=1e-12)
    table = interval_table({"x": parse_correction("rs=seq_sum_k3:0.5/rs=token_k2:0.02")})
    assert [r["correction"] for r in table] == ["x", ""] and table[0]["part"] == "rs=token_k2:0.02"


def test_a_correction_of_one_part_does_not_repeat_itself_as_its_part():
    both = ("rs=token_k3:0.01", "is=token:tis=2.0/rs=token_k2:0.02")
    table = interval_table({c: parse_correction(c) for c in both})
    assert [(r["correction"], r["part"]) for r in table] == [
        ("rs=token_k3:0.01", "—"),
        ("is=token:tis=2.0/rs=token_k2:0.02", "is=token"),
        ("", "rs=token_k2:0.02"),
    ]
    single = interval_table({c: parse_correction(c) for c in ("rs=token_k3:0.01", "is=token:tis=2.0")})
    assert [list(r)[:2] for r in single] == [["correction", "bounds"]] * 2  # no part column at all


def test_the_overlay_puts_a_token_k3_rejection_on_kl3s_clip():
    """The seed theorem for the third policy: k3 <= δ on ρ is KL3's clip interval at the same δ."""
    delta = 0.0231436
    intervals, errors = clip_intervals(("kl3",), delta, 0.2, 0.28, 0.5)
    assert errors == []
    fig = overlay_figure(intervals, parse_correction(f"rs=token_k3:{delta}/is=sequence:tis=2.0"), 100)
    bars = {t.y[0]: t.meta for t in fig.data}
    (kl3,) = [m for label, m in bars.items() if label.startswith("ATR-GRPO") or "δ" in label]
    k3 = bars[f"rs=token_k3:{delta}, L = 100"]
    assert (k3["lo"], k3["hi"]) == pytest.approx((kl3["lo"], kl3["hi"]), rel=1e-12)
    assert bars["is=sequence, L = 100"]["hi"] == pytest.approx(2.0 ** (1 / 100), rel=1e-13)


def test_bad_and_too_many_corrections_are_named():
    out, errors = parse_list(
        "is=token:tis=2.0, rs=bogus:1, none, m2po=0.1, opsm=0.1, rs=token_k2:0.1, filter=token:ratio:mask:2"
    )
    assert list(out) == ["is=token:tis=2.0", "m2po=0.1", "opsm=0.1", "rs=token_k2:0.1"]
    text = " ".join(errors)
    assert "rs= takes one of" in text and "does nothing" in text and "at most 4" in text


# ------------------------------------------------------------------------------------------------ pages
def start(page: str, query: dict) -> AppTest:
    at = AppTest.from_file(str(MAIN), default_timeout=120)
    at.query_params.update(query)
    at.switch_page(page)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_atlas_draws_the_corrections_from_the_url_and_names_a_bad_one():
    at = start("views/atlas.py", {"corrections": "is=token:tis=2.0, rs=seq_sum_k3:0.5", "L": "50"})
    assert len(at.get("plotly_chart")) == 4  # cross-section, heatmaps, weight over ρ, band over L
    rows = at.table[1].value.to_dict("records")
    assert [r["correction"] for r in rows] == ["is=token:tis=2.0", "rs=seq_sum_k3:0.5"] and "part" not in rows[0]
    lo, hi = lambert_band(0.5 / 100)
    assert rows[1]["L = 100"] == f"[{lo:.4g}, {hi:.4g}]"
    at.text_input(key="atlas.corrections").set_value("rs=nope:1").run()
    assert any("rs= takes one of" in e.value for e in at.error)
    assert dict(at.query_params)["corrections"] in ("rs=nope:1", ["rs=nope:1"])


def test_atlas_default_has_no_correction_until_asked():
    at = start("views/atlas.py", {})
    assert len(at.get("plotly_chart")) == 2 and "corrections" not in dict(at.query_params)
    at.button(key="atlas.corrections_default").click().run()
    assert len(at.get("plotly_chart")) == 4


def test_explorer_overlay_from_the_url():
    at = start("views/clip_explorer.py", {"correction": "rs=token_k3:0.0231436", "L": "20"})
    assert len(at.get("plotly_chart")) == 5
    at = start("views/clip_explorer.py", {})
    assert len(at.get("plotly_chart")) == 4
    at.button(key="explorer.correction_example").click().run()
    assert len(at.get("plotly_chart")) == 5


@pytest.mark.parametrize(
    "text", ["filter=token:binary_tv:mask:0.0_0.1", "filter=sequence:binary_kl:mean:mask:0.0_0.02"]
)
def test_openrlhfs_binary_gates_are_drawn_at_the_rollout_probability_of_their_band(text):
    """The weight curve and the kept band of a binary gate hold the same π_rollout (0.5): ρ inside the binary
    measure's bounds at p = 0.5 (divclip.theory.measures), 0 outside."""
    from divclip.theory.measures import get_measure

    c = parse_correction(text)
    lo, hi = (float(x) for x in get_measure(c.filter.metric).bounds(c.filter.upper, 0.5))
    w = kept_weight(c, RHO, 3)
    inside = (RHO > lo * (1 + 1e-9)) & (RHO < hi * (1 - 1e-9))
    np.testing.assert_allclose(w[inside], RHO[inside], rtol=1e-12)
    assert np.all(w[(RHO < lo * (1 - 1e-9)) | (RHO > hi * (1 + 1e-9))] == 0.0)
    band = kept_band(c, (1, 3))
    np.testing.assert_allclose([band[0][1], band[1][1]], [lo, hi], rtol=1e-12)
