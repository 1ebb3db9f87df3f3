"""Shared helpers of the headless-chromium tests: wait until a Streamlit page has settled, full-page
screenshots, opening a page by URL path and query, the no-traceback check and the toy arena's step axes."""

from __future__ import annotations

import time
from urllib.parse import urlencode

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


# The toy arena's four step axes' ranges, once Plotly has laid its chart out (None before).
X_RANGES = """() => {
    const plot = document.querySelector('[data-testid="stPlotlyChart"] .js-plotly-plot');
    return plot && plot._fullLayout ? ['xaxis', 'xaxis2', 'xaxis3', 'xaxis4'].map(a => plot._fullLayout[a].range)
                                    : null;
}"""


def wait_idle(page, timeout: float = 120.0, allow_running: bool = False) -> None:
    """Until the script has finished (no "Running..." status), nothing is stale, every plotly chart has
    drawn, and the page has looked the same for three polls in a row (the browser renders the elements
    after the script reports it is done, slowly on a busy machine)."""
    page.wait_for_selector("h1", timeout=timeout * 1000)
    deadline = time.monotonic() + timeout
    last, stable = None, 0
    while time.monotonic() < deadline:
        snap = page.evaluate(_SNAPSHOT)
        # allow_running: a page whose fragment keeps polling (the toy arena while it trains) never shows
        # "not busy"; there only the rendered state has to settle.
        idle = (
            snap["state"] == "notRunning"
            and (allow_running or not snap["busy"])
            and not snap["stale"]
            and not snap["loading"]
            and snap["drawn"] == snap["charts"]
            and snap["elements"] > 0
        )
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


def assert_no_exception(page) -> None:
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.first.inner_text()
