"""Issue 34 in headless chromium: a lecture that runs without a stumble (each step's reveal closed, every step
on one screen with its answer open, distinct questions, a figure of its own per claim, formulas that fit their
column at 1280×800 and 1024×768), and the defects the walk found on the other pages. One server for the module
(conftest's session fixture)."""

from __future__ import annotations

import pytest
from browser_helpers import assert_no_exception, open_page, wait_idle
from layout_check import layout_problems, page_height, presenter_steps

pytestmark = [pytest.mark.browser, pytest.mark.slow]

OPEN_DETAILS = "() => [...document.querySelectorAll('.st-key-proof-step details')].filter(d => d.open).length"
FIGURE_TITLES = """() => [...document.querySelectorAll('.st-key-proof-step .js-plotly-plot')]
    .map(p => p._fullLayout && p._fullLayout.title && p._fullLayout.title.text)"""


def context_page(browser, width: int, height: int):
    context = browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(90_000)
    return context, page


def formula_problems(page) -> list[str]:
    return [p for p in layout_problems(page) if p.startswith("formula")]


def test_presenter_steps_open_closed_fit_the_screen_and_ask_their_own_question(browser, app_url):
    context, page = context_page(browser, 1280, 800)
    questions, figures = {}, {}
    try:
        for step, _ in presenter_steps(page, app_url):
            assert_no_exception(page)
            scope = page.locator(".st-key-proof-step")
            # the previous step's open Reveal (and "How it was checked") must not carry over
            assert page.evaluate(OPEN_DETAILS) == 0, step
            scope.locator("summary").filter(has_text="Reveal").click()
            page.wait_for_function(OPEN_DETAILS.replace("=> [", "=> 1 <= ["))
            page.wait_for_timeout(400)
            scroll, visible = page_height(page)
            assert scroll <= visible + 1, (step, scroll, visible)  # the answer open, still one screen
            text = scope.inner_text()
            questions[step] = text[text.index("Predict:") :].split("\n")[0]
            figures[step] = page.evaluate(FIGURE_TITLES)
            scope.locator("summary").first.click()  # "How it was checked" open too, before Next
    finally:
        context.close()
    assert len(set(questions.values())) == len(questions), questions
    # the convexity step, the Lambert-W step and the W-branch step each draw a figure of their own
    roots = figures[1][0]
    assert all(figures[s][0] != roots for s in (2, 3, 5)), figures
    assert len({figures[s][0] for s in range(1, 10)}) >= 7, figures


@pytest.mark.parametrize("width,height", [(1280, 800), (1024, 768)])
def test_every_formula_fits_its_column(browser, app_url, width, height):
    context, page = context_page(browser, width, height)
    try:
        for measure in ("kl3", "chi2"):
            open_page(page, app_url, "proof", {"measure": measure, "view": "all"})
            assert formula_problems(page) == [], (measure, width)
        open_page(page, app_url, "proof", {"measure": "kl3", "presenter": "1", "step": "9"})
        assert formula_problems(page) == []
        # the theorem's both halves are on screen: the loss and the gradient
        theorem = page.locator(".st-key-proof-step .katex-display annotation").first.text_content()
        display = page.locator(".st-key-proof-step .katex-display").first
        box, col = display.bounding_box(), page.locator(".st-key-proof-step [data-testid='stColumn']").first
        assert "nabla" in theorem and box["x"] + box["width"] <= col.bounding_box()["x"] + col.bounding_box()["width"]
        page.get_by_role("button", name="Previous").click()
        page.wait_for_function("() => new URLSearchParams(location.search).get('step') === '8'")
        wait_idle(page)
        assert formula_problems(page) == []
    finally:
        context.close()
