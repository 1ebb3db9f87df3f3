"""The Atlas page in headless chromium: a deep link draws the heatmaps (four panels for two methods, one colour
scale) and the cross-section, hover shows the numbers, and a typed q goes into the URL. Screenshot in
test-artifacts/atlas.png."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
from browser_helpers import assert_no_exception, open_page, screenshot, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PLOTS = """() => [...document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot')].map(p => ({
    heatmaps: p._fullData.filter(t => t.type === 'heatmap').length,
    axes: [...new Set(p._fullData.filter(t => t.type === 'heatmap').map(t => t.coloraxis))],
    title: p._fullLayout.title.text,
    xlog: p._fullLayout.xaxis.type === 'log',
    ylog: p._fullLayout.yaxis.type === 'log'}))"""


def query_of(page) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlparse(page.url).query).items()}


def test_atlas_deep_link_heatmaps_hover_and_url(page, app_url, artifacts):
    open_page(page, app_url, "atlas", {"methods": "grpo,dppo_tv", "q": "0.05", "rmax": "20", "colour": "w"})
    assert_no_exception(page)
    plots = page.evaluate(PLOTS)
    cross, maps = plots
    assert "Cross-section at q = 0.05" in cross["title"] and cross["heatmaps"] == 0
    assert maps["heatmaps"] == 4 and maps["axes"] == ["coloraxis"] and maps["xlog"] and maps["ylog"]
    assert query_of(page) == {"methods": "grpo,dppo_tv", "q": "0.05", "rmax": "20", "colour": "w"}
    table = page.locator('[data-testid="stTable"] table').first.inner_text()
    assert "[0, 1.2]" in table and "[0, 5]" in table  # A > 0 at q = 0.05: GRPO 1.2, binary TV 1 + 0.2/0.05

    heat = page.locator('[data-testid="stPlotlyChart"]').nth(1).locator(".nsewdrag").first
    heat.scroll_into_view_if_needed()
    box = heat.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.4, box["y"] + box["height"] * 0.6)
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.6)
    hover = page.locator(".hoverlayer .hovertext").first
    hover.wait_for(timeout=10_000)
    text = hover.text_content()
    assert "grpo" in text and "w = " in text and "q = " in text and "r = " in text

    box_q = page.get_by_role("spinbutton", name="cross-section at q")
    box_q.fill("0.2")
    box_q.press("Enter")
    page.wait_for_function("() => new URLSearchParams(window.location.search).get('q') === '0.2'")
    wait_idle(page)
    assert "Cross-section at q = 0.2" in page.evaluate(PLOTS)[0]["title"]
    screenshot(page, artifacts / "atlas.png")
