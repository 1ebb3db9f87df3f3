"""End to end in headless Debian chromium: every page renders, links reproduce the view, bad input warns.

Screenshots land in test-artifacts/ for a human to look at.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from browser_helpers import assert_no_exception, open_page, screenshot, wait_idle

from divclip import theory
from divclip.app.intervals import format_bound

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _router_pages() -> dict[str, str]:
    """URL path -> title of every page in app/main.py's router, so a new page is visited without editing this."""
    source = (Path(__file__).resolve().parents[2] / "app" / "main.py").read_text()
    pages = {}
    for file, title, rest in re.findall(r'st\.Page\("views/(\w+)\.py", title="([^"]+)"([^)]*)\)', source):
        pages["" if "default=True" in rest else file] = title
    return pages


PAGES = _router_pages()


def table_rows(page) -> list[dict[str, str]]:
    """The first st.table on the page as a list of {column: cell text}."""
    table = page.locator('[data-testid="stTable"] table').first
    headers = [h.strip() for h in table.locator("thead th").all_inner_texts()]
    rows = []
    for tr in table.locator("tbody tr").all():
        cells = [c.strip() for c in tr.locator("th, td").all_inner_texts()]
        rows.append(dict(zip(headers[-len(cells) :], cells)))
    return rows


def row_for(rows, measure: str) -> dict[str, str]:
    matches = [r for r in rows if r.get("measure") == measure]
    assert matches, f"no row for {measure} in {rows}"
    return matches[0]


# Every page in the router renders with its title and no traceback at 1400 px and 390 px:
# test_browser_ui.py::test_every_page_at_lecture_and_phone_width (one pass per width, one screenshot per page each).
# A deep link as a cold server's first request gets the router: test_browser_arena_pool.py (assert_router_page).


def assert_router_page(page, path: str) -> None:
    """The page at `path` was run through app/main.py's router: its title, and the router's page titles in the
    sidebar (not the file names). Called on a fresh server's first page request, a deep link (the one-worker
    server of test_browser_arena_pool.py, whose first request is /toy_arena?...).

    Regression: with the page files in app/pages/, Streamlit's legacy multipage mode claimed a cold server
    whose first request was e.g. /reallocation, ran the file without the router (no wide layout, file
    names in the sidebar) and kept doing so for every later visitor.
    """
    assert path in PAGES and path, path  # a non-default page
    nav = page.locator('[data-testid="stSidebarNav"]').first.inner_text()
    lines = {line.strip() for line in nav.splitlines()}  # titles, and the icons' ligature names
    assert set(PAGES.values()) <= lines and "main" not in lines, nav
    assert page.locator("h1").first.inner_text().strip().startswith(PAGES[path])


def test_explorer_link_reproduces_theory_bounds_and_preset_button_updates_both(page, app_url, artifacts):
    """A link's parameters give theory's bounds and are written back to the address bar; then a preset button
    (one page load for both) rewrites the address and the table."""
    query = {"delta": "0.05", "eps_low": "0.2", "eps_high": "0.28", "p": "0.01", "measures": "kl3,ratio,binary_kl"}
    open_page(page, app_url, "", query)
    assert_no_exception(page)
    rows = table_rows(page)
    lo, hi = theory.kl3_bounds(0.05)
    assert row_for(rows, "kl3")["l"] == format_bound(lo)
    assert row_for(rows, "kl3")["u"] == format_bound(hi)
    blo, bhi = theory.get_measure("binary_kl").bounds(0.05, p=0.01)
    assert (row_for(rows, "binary_kl")["l"], row_for(rows, "binary_kl")["u"]) == (format_bound(blo), format_bound(bhi))
    assert (row_for(rows, "ratio")["l"], row_for(rows, "ratio")["u"]) == ("0.800000", "1.280000")
    # The page writes its whole state back into the address bar.
    written = parse_qs(urlparse(page.url).query)
    assert float(written["delta"][0]) == 0.05 and written["measures"] == ["kl3,ratio,binary_kl"]

    # The DAPO preset sets its own measures (the link had three) and δ, and writes them to the address bar.
    page.locator(".st-key-explorer-controls").get_by_role("button", name="DAPO", exact=True).click()
    page.wait_for_function("() => new URLSearchParams(window.location.search).get('measures') === 'ratio,kl3'")
    wait_idle(page)
    written = parse_qs(urlparse(page.url).query)
    assert written["measures"] == ["ratio,kl3"] and written["eps_low"] == ["0.2"] and written["eps_high"] == ["0.28"]
    rows = table_rows(page)
    assert [r["measure"] for r in rows] == ["ratio", "kl3"], rows
    assert (row_for(rows, "ratio")["l"], row_for(rows, "ratio")["u"]) == ("0.800000", "1.280000")
    delta = float(written["delta"][0])
    assert delta != 0.05  # the preset's own δ, not the link's
    assert row_for(rows, "kl3")["u"] == format_bound(theory.kl3_bounds(delta)[1])
    screenshot(page, artifacts / "explorer-preset-dapo.png")


def test_bad_url_parameters_warn_without_traceback(page, app_url, artifacts):
    open_page(page, app_url, "", {"delta": "abc", "measures": "foo", "p": "-1"})
    assert_no_exception(page)
    alerts = " ".join(page.locator('[data-testid="stAlert"]').all_inner_texts())
    assert "delta='abc' is not a number" in alerts
    assert "'foo'" in alerts and "p=-1 is outside" in alerts
    screenshot(page, artifacts / "explorer-bad-url.png")


def test_proof_page_shows_every_check_passed(page, app_url, artifacts):
    open_page(page, app_url, "proof", {"measure": "chi2", "delta": "0.04", "view": "all"})
    assert_no_exception(page)
    steps = page.locator("h4").all_inner_texts()
    passed = page.get_by_text(re.compile(r"^Check passed")).count()
    assert len(steps) >= 5 and passed == len(steps), (steps, passed)
    rows = table_rows(page)
    lo, hi = theory.get_measure("chi2").bounds(0.04)
    assert rows[1]["l_δ"] == f"{lo:.15g}" and rows[1]["u_δ"] == f"{hi:.15g}"
    screenshot(page, artifacts / "proof-chi2.png")


def test_custom_formula_error_is_a_message(page, app_url, artifacts):
    open_page(page, app_url, "custom_measure", {"formula": "r**", "delta": "0.02"})
    assert_no_exception(page)
    assert "not a valid expression" in " ".join(page.locator('[data-testid="stAlert"]').all_inner_texts())
    screenshot(page, artifacts / "custom-bad-formula.png")
    open_page(page, app_url, "custom_measure", {"formula": "(sqrt(r) - 1)**2", "delta": "0.04"})
    metrics = page.locator('[data-testid="stMetricValue"]').all_inner_texts()
    assert metrics[:2] == ["0.640000", "1.440000"]
