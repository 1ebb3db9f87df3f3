"""End to end in headless Debian chromium: every page renders, links reproduce the view, bad input warns.

Screenshots land in test-artifacts/ for a human to look at.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

import theory
from app.intervals import format_bound

pytestmark = pytest.mark.browser


def _router_pages() -> dict[str, str]:
    """URL path -> title of every page in app/main.py's router, so a new page is visited without editing this."""
    source = (Path(__file__).resolve().parents[2] / "app" / "main.py").read_text()
    pages = {}
    for file, title, rest in re.findall(r'st\.Page\("pages/(\w+)\.py", title="([^"]+)"([^)]*)\)', source):
        pages["" if "default=True" in rest else file] = title
    return pages


PAGES = _router_pages()


_SNAPSHOT = """() => {
    const app = document.querySelector('[data-testid="stApp"]');
    const status = document.querySelector('[data-testid="stStatusWidget"]');
    const charts = [...document.querySelectorAll('[data-testid="stPlotlyChart"]')];
    return {
        state: app && app.getAttribute('data-test-script-state'),
        busy: !!(status && /Running/i.test(status.innerText)),
        elements: document.querySelectorAll('[data-testid="stElementContainer"]').length,
        stale: document.querySelectorAll('[data-stale="true"]').length,
        // element code is loaded lazily (plotly's bundle takes seconds on a busy machine): skeletons until then
        loading: document.querySelectorAll('[data-testid^="stSkeleton"]').length,
        empty: [...document.querySelectorAll('[data-testid="stElementContainer"]')]
                 .filter(e => e.childElementCount === 0).length,
        charts: charts.length,
        drawn: charts.filter(c => c.querySelector('.main-svg')).length,
    };
}"""


def wait_idle(page, timeout: float = 120.0) -> None:
    """Until the script has finished (no "Running..." status), nothing is stale, every plotly chart has
    drawn, and the page has looked the same for three polls in a row (the browser renders the elements
    after the script reports it is done, slowly on a busy machine)."""
    page.wait_for_selector("h1", timeout=timeout * 1000)
    deadline = time.monotonic() + timeout
    last, stable = None, 0
    while time.monotonic() < deadline:
        snap = page.evaluate(_SNAPSHOT)
        idle = (snap["state"] == "notRunning" and not snap["busy"] and not snap["stale"] and not snap["loading"]
                and snap["drawn"] == snap["charts"] and snap["elements"] > 0)
        stable = stable + 1 if idle and snap == last else 0
        if stable >= 2:
            return
        last = snap
        page.wait_for_timeout(300)
    raise AssertionError(f"page did not settle within {timeout:.0f} s: {last}")


def screenshot(page, path) -> None:
    """The whole page: Streamlit scrolls inside its main block, so grow the viewport to its height first."""
    height = page.evaluate(
        """() => Math.max(...[...document.querySelectorAll('[data-testid="stMain"], [data-testid="stSidebar"] > div')]
                            .map(e => e.scrollHeight), window.innerHeight)"""
    )
    page.mouse.move(0, 0)  # no tooltip in the picture
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": min(int(height) + 40, 12000)})
    page.wait_for_timeout(600)  # plotly relayouts on resize
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size(size)


def open_page(page, app_url: str, path: str = "", query: dict | None = None) -> None:
    url = f"{app_url}/{path}" + (f"?{urlencode(query, safe=',')}" if query else "")
    page.goto(url)
    wait_idle(page)


def table_rows(page) -> list[dict[str, str]]:
    """The first st.table on the page as a list of {column: cell text}."""
    table = page.locator('[data-testid="stTable"] table').first
    headers = [h.strip() for h in table.locator("thead th").all_inner_texts()]
    rows = []
    for tr in table.locator("tbody tr").all():
        cells = [c.strip() for c in tr.locator("th, td").all_inner_texts()]
        rows.append(dict(zip(headers[-len(cells):], cells)))
    return rows


def row_for(rows, measure: str) -> dict[str, str]:
    matches = [r for r in rows if r.get("measure") == measure]
    assert matches, f"no row for {measure} in {rows}"
    return matches[0]


def assert_no_exception(page) -> None:
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.first.inner_text()


def test_every_page_renders(page, app_url, artifacts):
    for path, title in PAGES.items():
        open_page(page, app_url, path)
        assert page.locator("h1").first.inner_text().strip().startswith(title)
        assert_no_exception(page)
        screenshot(page, artifacts / f"page-{path or 'clip_explorer'}.png")


def test_explorer_link_reproduces_theory_bounds(page, app_url, artifacts):
    query = {"delta": "0.05", "eps_low": "0.2", "eps_high": "0.28", "p": "0.01",
             "measures": "kl3,ratio,binary_kl"}
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
    screenshot(page, artifacts / "explorer-from-url.png")


def test_preset_button_updates_url_and_table(page, app_url, artifacts):
    open_page(page, app_url, "", {"measures": "kl3"})
    page.locator('[data-testid="stSidebar"]').get_by_role("button", name="DAPO", exact=True).click()
    wait_idle(page)
    page.wait_for_function("() => window.location.search.includes('eps_high=0.28')")
    written = parse_qs(urlparse(page.url).query)
    assert written["measures"] == ["ratio,kl3"] and written["eps_low"] == ["0.2"]
    rows = table_rows(page)
    assert (row_for(rows, "ratio")["l"], row_for(rows, "ratio")["u"]) == ("0.800000", "1.280000")
    delta = float(written["delta"][0])
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
    open_page(page, app_url, "proof", {"measure": "chi2", "delta": "0.04"})
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
    screenshot(page, artifacts / "custom-hellinger.png")
