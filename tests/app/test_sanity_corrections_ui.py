"""The Sanity page's rollout-correction section: the shipped bf16-mismatch example renders its table and two
figures; the figure functions place the report's numbers (no computation of their own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from divclip.sanity import figures
from divclip.sanity.corrections import correction_rows
from divclip.sanity.report import report_from_uploads

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "app" / "examples" / "rollouts_mismatch.jsonl"
CORRECTIONS = "is=sequence:mask=3.0/noclamp,rs=seq_mean_k1:0.999_1.001"


@pytest.fixture(scope="module")
def report():
    return report_from_uploads(rollouts=(EXAMPLE.name, EXAMPLE.read_bytes()), corrections=CORRECTIONS)


def test_figures_place_the_reports_numbers(report):
    section = report["corrections"]
    kept = figures.correction_kept_figure(section)
    assert [t.name for t in kept.data] == CORRECTIONS.split(",")
    geo = section["corrections"][1]
    trace = kept.data[1]
    assert list(trace.marker.color) == geo["per_sequence"]["kept"] and list(trace.x) == geo["per_sequence"]["length"]
    # the geometric band keeps a sequence whole or not at all, and keeps fewer than all of them here
    assert set(geo["per_sequence"]["kept"]) <= {0.0, 1.0} and 0 < sum(geo["per_sequence"]["kept"]) < len(trace.x)
    assert sum(geo["per_sequence"]["kept"]) / len(geo["per_sequence"]["kept"]) == pytest.approx(
        geo["kept_seq_fraction"]
    )
    weights = figures.correction_weight_figure(section)
    assert len(weights.data) == 1  # only the importance weight has weights
    assert sum(weights.data[0].y) == section["mismatch"]["tokens"]
    rows = correction_rows(section)
    assert rows[0]["ESS"] == section["corrections"][0]["weight"]["ess"] and rows[1]["ESS"] is None


@pytest.mark.slow
def test_the_mismatch_example_renders_the_corrections():
    from test_sanity_ui import sanity_page, subheaders

    at = sanity_page()
    at.button(key="sanity.example.Rollouts with a bf16 mismatch").click().run()
    assert not at.exception and not at.error
    heads = subheaders(at)
    assert any(h.startswith("Rollout corrections: ") for h in heads)
    keys = {c.proto.id for c in at.get("plotly_chart")}
    assert len(at.get("plotly_chart")) == 4 + 2 and keys


@pytest.mark.browser
@pytest.mark.slow
def test_browser_renders_the_correction_figures(browser, app_url, artifacts):
    from browser_helpers import assert_no_exception, open_page, wait_idle

    context = browser.new_context(viewport={"width": 1280, "height": 800}, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(60_000)
    try:
        open_page(page, app_url, "sanity_check")
        page.get_by_role("button", name="Rollouts with a bf16 mismatch").click()
        wait_idle(page)
        assert_no_exception(page)
        assert "Rollout corrections:" in page.locator('[data-testid="stMain"]').inner_text()
        charts = page.locator('[data-testid="stPlotlyChart"]')
        assert charts.count() == 6  # the rollout section's four, then kept-by-length and the weights
        for index, name in ((4, "kept"), (5, "weights")):
            chart = charts.nth(index)
            chart.scroll_into_view_if_needed()
            assert chart.locator(".main-svg").count() >= 1
            chart.screenshot(path=str(artifacts / f"sanity-correction-{name}.png"))
    finally:
        context.close()
