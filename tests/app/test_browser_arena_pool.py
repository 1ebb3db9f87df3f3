"""End to end in headless Debian chromium, two visitors (two browser contexts, two Streamlit sessions) on a server
whose arena pool has one worker: a run redraws while it trains with its step axis fixed, a second arena page
loads meanwhile, the second run waits in the queue with its position shown, Stop takes it out, closing the first
tab frees the worker for it, and Stop ends it mid-run. The server is fresh: its first page request, a deep link,
also checks that a cold server runs it through the router. Screenshots land in test-artifacts/ (the arena's layout at
390 px: test_browser_ui.py's every-page test).
"""

from __future__ import annotations

import re
import time
from urllib.parse import urlencode

import pytest
from browser_helpers import X_RANGES, assert_no_exception, screenshot, wait_idle
from test_browser import assert_router_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LONG = {"env": "sparse", "methods": "grpo,atr", "seeds": 4, "steps": 5000}  # minutes: only ever stopped


def x_ranges(page) -> list:
    """The four step axes' ranges once Plotly has laid the chart out (a redraw can be mid-way at any instant)."""
    return page.wait_for_function(X_RANGES, timeout=30_000).json_value()


def visitor(browser, width: int = 1400):
    context = browser.new_context(viewport={"width": width, "height": 1000}, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(120_000)
    return context, page


def open_arena(page, url: str, query: dict) -> None:
    page.goto(f"{url}/toy_arena?{urlencode(query, safe=',')}")
    wait_idle(page, allow_running=True)


def progress(page) -> str:
    bar = page.locator('[data-testid="stProgress"]')
    bar.first.wait_for()
    return bar.first.inner_text().strip()


def training_step(page, above: int = 0, timeout_ms: int = 120_000) -> int:
    """Wait until the progress bar reads 'Training: step s of …' with s > above; returns s."""
    page.wait_for_function(
        """(above) => { const b = document.querySelector('[data-testid="stProgress"]');
                        const m = b && b.innerText.match(/Training: step (\\d+) of/);
                        return m && Number(m[1]) > above; }""",
        arg=above,
        timeout=timeout_ms,
    )
    return int(re.search(r"step (\d+) of", progress(page)).group(1))


def test_queue_stop_and_closed_tab_with_one_worker(browser, one_worker_app_url, artifacts):
    first_ctx, first = visitor(browser)
    second_ctx, second = visitor(browser)
    try:
        # The server's first page request is this deep link: it runs through app/main.py's router.
        open_arena(first, one_worker_app_url, LONG)
        assert_router_page(first, "toy_arena")
        first.get_by_role("button", name="Run").click()

        # The page redraws while the run trains: three different progress texts.
        seen: list[str] = []
        deadline = time.monotonic() + 120
        while len(set(seen)) < 3 and time.monotonic() < deadline:
            bar = first.locator('[data-testid="stProgress"]')
            text = bar.first.inner_text().strip() if bar.count() else None
            if text and not text.startswith(("Queued", "Starting")):  # until the dispatcher hands it the worker
                seen.append(text)
            first.wait_for_timeout(200)
        assert len(set(seen)) >= 3, seen
        assert all(re.match(r"Training: step \d+ of 5000 · [\d.]+ s", t) for t in seen), seen
        step = training_step(first)

        # The step axis spans the run from the first redraw on and does not move as steps arrive.
        first.locator('[data-testid="stPlotlyChart"] .main-svg').first.wait_for()
        before = x_ranges(first)
        training_step(first, above=step + 10)
        after = x_ranges(first)
        assert before == after == [[0, 5000]] * 4, (before, after)
        screenshot(first, artifacts / "arena-running.png")

        # A second arena page loads while the run trains, and its run waits for the only worker.
        open_arena(second, one_worker_app_url, {**LONG, "methods": "dapo"})
        assert second.locator("h1").first.inner_text().strip() == "Toy arena"
        assert_no_exception(second)
        second.get_by_role("button", name="Run").click()
        second.get_by_text(re.compile(r"^Queued: position 1 of 1 · 1 of 1 worker\(s\) busy")).wait_for()
        assert second.locator('[data-testid="stPlotlyChart"]').count() == 0
        screenshot(second, artifacts / "arena-pool-queued.png")

        # Stop takes it out of the queue; the first run trains on.
        second.get_by_role("button", name="Stop").click()
        second.get_by_text(re.compile(r"^Stopped before it started, after \d+ s in the queue\.")).wait_for()
        assert second.get_by_role("button", name="Stop").is_disabled()
        assert training_step(first, above=step + 10) > step

        # Queued again; closing the first visitor's tab frees the worker for it.
        second.get_by_role("button", name="Run").click()
        second.get_by_text(re.compile(r"^Queued: position 1 of 1")).wait_for()
        first_ctx.close()
        training_step(second)
        assert_no_exception(second)

        # Stop ends a training run mid-way.
        second.get_by_role("button", name="Stop").click()
        stopped = second.get_by_text(re.compile(r"^Stopped at step \d+ of 5000 after [\d.]+ s\."))
        stopped.wait_for()
        wait_idle(second, allow_running=True)
        assert_no_exception(second)
        done = int(re.search(r"step (\d+)", stopped.inner_text()).group(1))
        assert 0 < done < 5000
        assert second.get_by_role("button", name="Stop").is_disabled()
        # issue 34: the stopped run's axes span the steps it did, not the 5000 it was asked for
        for _ in range(40):  # the last redraw may still be on its way
            if x_ranges(second) == [[0, done]] * 4:
                break
            second.wait_for_timeout(250)
        assert x_ranges(second) == [[0, done]] * 4
        screenshot(second, artifacts / "arena-stopped.png")
    finally:
        second_ctx.close()
        if not first.is_closed():
            first_ctx.close()
