"""Headless chromium, as a lecturer and a phone user: the proof steps with Next/Previous, the explorer takes typed
values, links carry state between pages, figures download as PNG and SVG, examples on the Sanity check page,
and the layout at 390 px (controls reachable, toolbars clear of titles, wide tables scroll).

Screenshots of every page at 1400 px and 390 px land in test-artifacts/ for a human to look at.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from browser_helpers import assert_no_exception, open_page, screenshot, wait_idle
from test_browser import PAGES, row_for, table_rows

from divclip import theory
from divclip.app.intervals import format_bound

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def query_of(page) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlparse(page.url).query).items()}


def wait_query(page, key: str, value: str) -> None:
    page.wait_for_function(f"() => new URLSearchParams(window.location.search).get({key!r}) === {value!r}")
    wait_idle(page)


# ------------------------------------------------------------------------------------ the proof
def test_proof_next_and_previous_step_through_the_lecture(page, app_url, artifacts):
    open_page(page, app_url, "proof", {"measure": "kl3"})
    assert_no_exception(page)
    step = page.locator(".st-key-proof-step")
    assert step.locator("h4").inner_text().startswith("1. Definition and non-negativity")
    assert step.locator(".katex").count() >= 3  # the prose's maths is rendered, not raw TeX
    assert "\\" not in step.locator('[data-testid="stMarkdownContainer"] p').first.inner_text().replace("\\\\", "")
    page.get_by_role("button", name="Next").click()
    wait_query(page, "step", "2")
    assert step.locator("h4").inner_text().startswith("2. Minimum at")
    page.get_by_role("button", name="Next").click()
    wait_query(page, "step", "3")
    text = step.inner_text()
    assert "Lambert-W form" in text and "e^{" not in text and "W_{-1}" not in text
    assert "Check passed" in text and "symbolic" in text and "numeric" in text
    screenshot(page, artifacts / "proof-lecture-step3.png")
    page.get_by_role("button", name="Previous").click()
    wait_query(page, "step", "2")
    # The step is in the address: a reload (or a shared link) opens the same step.
    open_page(page, app_url, "proof", {"measure": "kl3", "step": "10"})  # 8 derivation steps, the sign of A
    assert "The numbers at" in step.inner_text() and page.get_by_role("button", name="Next").is_disabled()
    rows = table_rows(page)
    assert "30 digits" in rows[0]["quantity"] and len(rows[0]["l_δ"].replace(".", "").lstrip("0")) == 30


def test_proof_all_steps_view_and_markdown_download(page, app_url, artifacts):
    open_page(page, app_url, "proof", {"measure": "hellinger", "view": "all"})
    assert_no_exception(page)
    titles = page.locator("h4").all_inner_texts()
    assert len(titles) == 8  # hellinger's 7 derivation steps and the sign of A
    body = page.locator('[data-testid="stMain"]').inner_text()
    assert "SymPy assumptions said False" not in body and body.count("Check passed") == 8
    assert body.index("7. Gradient rule") < body.index("The numbers at")  # the numbers after the derivation
    with page.expect_download() as info:
        page.get_by_role("button", name="All steps as Markdown").click()
    text = open(info.value.path(), encoding="utf-8").read()
    assert info.value.suggested_filename == "divclip_proof_hellinger.md"
    assert text.count("\n## ") == 9 and text.count("**Check passed (") == 8
    screenshot(page, artifacts / "proof-all-hellinger.png")


# ------------------------------------------------------------------------------- clip explorer
def test_explorer_takes_typed_values_and_figures_download_in_both_formats(page, app_url):
    open_page(page, app_url, "", {"eps_low": "0.235", "eps_high": "0.275", "measures": "ratio,kl3"})
    assert_no_exception(page)
    low = page.get_by_label("ε_low (ratio clip, lower side)", exact=True)
    high = page.get_by_label("ε_high (ratio clip, upper side)", exact=True)
    assert low.input_value() == "0.235" and high.input_value() == "0.275"
    ratio = row_for(table_rows(page), "ratio")
    assert (ratio["l"], ratio["u"]) == ("0.765000", "1.275000")
    low.fill("3e-4")
    low.press("Enter")
    wait_query(page, "eps_low", "0.0003")
    assert row_for(table_rows(page), "ratio")["l"] == "0.999700"
    thumbs = page.locator('[data-testid="stSliderThumbValue"]').all_inner_texts()
    assert "0.0003" in thumbs and "0.275" in thumbs, thumbs  # the sliders show the typed values too
    delta = page.get_by_label("δ (divergence budget)", exact=True)
    delta.fill("0.05")
    delta.press("Enter")
    wait_query(page, "delta", "0.05")
    lo, hi = theory.kl3_bounds(0.05)
    assert (row_for(table_rows(page), "kl3")["l"], row_for(table_rows(page), "kl3")["u"]) == (
        format_bound(lo),
        format_bound(hi),
    )
    page.get_by_role("button", name="Match δ to ε_high under KL3").click()
    page.wait_for_function("() => !window.location.search.includes('delta=0.05&')")
    wait_idle(page)
    assert row_for(table_rows(page), "kl3")["u"] == "1.275000"

    # On the same page: the sidebar's format choice sets what the camera button saves, PNG and then SVG.
    for fmt in ("PNG", "SVG"):
        page.locator('[data-testid="stSidebar"]').get_by_role("radio", name=fmt, exact=True).click()
        wait_idle(page)
        chart = page.locator('[data-testid="stPlotlyChart"]').first
        chart.hover()
        with page.expect_download() as info:
            chart.locator('.modebar-btn[data-title^="Download plot"]').click()
        assert info.value.suggested_filename == f"divclip_divergence_curves.{fmt.lower()}"
        head = open(info.value.path(), "rb").read(64)
        assert head.startswith(b"\x89PNG") if fmt == "PNG" else b"<svg" in head, (fmt, head)
        page.mouse.move(0, 0)  # off the chart: the next hover shows a freshly drawn toolbar


def test_explorer_link_opens_this_measures_proof(page, app_url):
    open_page(page, app_url, "", {"delta": "0.04", "measures": "chi2,ratio"})
    page.get_by_role("link", name=re.compile(r"The proof for χ²")).click()
    page.wait_for_url(re.compile(r"/proof\?"))
    wait_idle(page)
    assert query_of(page)["measure"] == "chi2" and query_of(page)["delta"] == "0.04"
    assert page.locator("h1").first.inner_text().startswith("The proof")
    open_page(page, app_url, "proof", {"measure": "chi2", "delta": "0.04", "step": "9"})  # the numbers
    page.get_by_role("link", name=re.compile(r"Sanity-check a config")).click()
    page.wait_for_url(re.compile(r"/sanity_check\?"))
    wait_idle(page)
    assert page.get_by_label("ε_low override", exact=True).input_value() == "0.2"  # χ² at δ = 0.04: 1 ∓ √δ


# ------------------------------------------------------------------------------- sanity check
def test_sanity_example_button_shows_a_report(page, app_url, artifacts):
    open_page(page, app_url, "sanity_check")
    page.get_by_role("button", name="verl DAPO config + rollouts").click()
    wait_idle(page)
    assert_no_exception(page)
    assert page.locator('[data-testid="stPlotlyChart"] .main-svg').count() >= 4
    assert "Rollouts:" in page.locator('[data-testid="stMain"]').inner_text()
    screenshot(page, artifacts / "sanity-example.png")


# ------------------------------------------------------------------------------------- layout
def _overlaps(a: dict | None, b: dict | None) -> bool:
    if not a or not b:
        return False
    return not (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )


def assert_toolbars_clear_of_titles(page) -> None:
    for chart in page.locator('[data-testid="stPlotlyChart"]').all():
        chart.scroll_into_view_if_needed()
        title, bar = chart.locator(".gtitle"), chart.locator(".modebar")
        if title.count() and bar.count():
            boxes = title.first.bounding_box(), bar.first.bounding_box()
            assert not _overlaps(*boxes), (title.first.text_content(), boxes)


def assert_phone_explorer_controls_reachable_and_tables_scroll(phone) -> None:
    """On the clip explorer at 390 px: δ's control is in the page (not behind the sidebar), a preset button is
    visible and works, and the table, wider than the screen, scrolls sideways inside a box with every column."""
    box = phone.get_by_label("δ (divergence budget)", exact=True).bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390  # in the page, not behind the sidebar
    preset = phone.get_by_role("button", name="DAPO", exact=True)
    assert preset.is_visible()
    preset.click()
    wait_query(phone, "eps_high", "0.28")
    assert_no_exception(phone)
    # The table is wider than the screen: a box inside it scrolls sideways, every column is still there.
    scrolled = phone.evaluate("""() => {
        const t = document.querySelector('[data-testid="stTable"]');
        const box = [t, ...t.querySelectorAll('div')].find(e => e.scrollWidth > e.clientWidth
                                                            && getComputedStyle(e).overflowX === 'auto');
        if (!box) return null;
        box.scrollLeft = box.scrollWidth;
        return [box.scrollLeft, box.getBoundingClientRect().right];
    }""")
    assert scrolled and scrolled[0] > 0 and scrolled[1] <= 390, scrolled
    headers = table_rows(phone)[0].keys()
    assert {"method", "l", "u", "ε_high − ε_low"} <= set(headers)
    assert_toolbars_clear_of_titles(phone)


@pytest.mark.slow
@pytest.mark.parametrize("width", [1400, 390])
def test_every_page_at_lecture_and_phone_width(browser, app_url, artifacts, width):
    """Every page in app/main.py's router (a new page is visited without editing this) renders its title with
    no traceback, toolbars clear of titles and nothing wider than the screen; one screenshot per page and width.
    At 390 px the clip explorer's load also carries the phone user's checks (controls reachable, tables scroll)."""
    context = browser.new_context(viewport={"width": width, "height": 900}, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(90_000)
    try:
        for path, title in PAGES.items():
            open_page(page, app_url, path)  # the toy arena: its first screen (its own tests drive a run)
            assert page.locator("h1").first.inner_text().strip().startswith(title), path
            assert_no_exception(page)
            assert_toolbars_clear_of_titles(page)
            overflow = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollWidth")
            assert overflow <= width + 1, (path, overflow)  # nothing pushes the page sideways
            screenshot(page, artifacts / f"page-{path or 'clip_explorer'}-{width}.png")
            if path == "" and width == 390:  # the phone user's explorer, on this page load
                assert_phone_explorer_controls_reachable_and_tables_scroll(page)
    finally:
        context.close()
