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


# ------------------------------------------------------------------------------------------------ atlas
TICKS = """(sel) => [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
    .map(c => [...c.querySelectorAll(sel)].map(t => t.textContent))"""


def test_atlas_reads_at_a_glance(page, app_url):
    page.set_viewport_size({"width": 1280, "height": 800})
    open_page(page, app_url, "atlas", {"methods": "grpo,dapo", "q": "0.9"})
    assert_no_exception(page)
    assert layout_problems(page) == []  # no label over another ("ratio r" over the left panel), none cut
    cross, heat = page.evaluate(TICKS, 'g[class^="x"][class$="tick"] text')
    assert "0.5" in cross and "5" in cross and not any(c in "".join(cross + heat) for c in "µnp")
    assert heat.count("0.001") == 4  # every heatmap panel's q axis is labelled
    ys = page.evaluate(TICKS, 'g[class^="y"][class$="tick"] text')[1]
    assert ys[:7] == ["0.1", "0.2", "0.5", "1", "2", "5", "10"]
    main = page.locator('[data-testid="stMain"]')
    assert "r ≤ 1/q = 1.111 < 1.2: the upper clip cannot bind" in main.inner_text()
    texts = page.evaluate(TICKS, "text")  # every svg text of each chart
    assert sum("not a probability" in t for t in texts[0]) == 1  # the cross-section's shaded band
    assert texts[1].count("q·r > 1") == 4  # each heatmap panel names its blank corner


# ------------------------------------------------------------------------------------------------ sanity
def test_a_method_typo_on_the_sanity_page_keeps_the_report(page, app_url):
    page.set_viewport_size({"width": 1280, "height": 800})
    open_page(page, app_url, "sanity_check")
    page.get_by_role("button", name="verl DAPO config + rollouts").click()
    wait_idle(page)
    page.locator("summary").filter(has_text="Options").click()
    box = page.get_by_label("Compare methods on the rollouts (atlas names or method strings)", exact=True)
    box.fill("grpo,dapoo")
    box.press("Enter")
    wait_idle(page)
    assert_no_exception(page)
    headings = page.locator('[data-testid="stHeading"]').all_inner_texts()
    assert {"Config: verl vanilla", "Rollouts: 1282 tokens"} <= set(headings), headings
    (error,) = [a for a in page.locator('[data-testid="stAlert"]').all_inner_texts() if "dapoo" in a]
    assert "did you mean 'dapo'?" in error and "--methods" not in error and len(error) < 400
    headers = page.evaluate(
        "() => [...document.querySelectorAll('[data-testid=stDataFrame] [role=columnheader]')].map(d => d.innerText)"
    )
    assert "clipfrac_high" in headers and "problem" not in headers  # no column of grey Nones
    assert layout_problems(page) == []  # the histogram's bound labels no longer overlap


# ------------------------------------------------------------------------------------------------ token
def test_token_explainer_says_a_sequence_method_takes_the_token_as_a_sequence(page, app_url):
    open_page(page, app_url, "token_explainer", {"methods": "gspo,grpo", "q": "0.1", "r": "1.3", "adv": "1"})
    assert_no_exception(page)
    gspo = page.locator(".st-key-token-term-gspo").inner_text()
    assert "taken as a one-token sequence, so s = r = 1.3" in gspo
    assert "one-token sequence" not in page.locator(".st-key-token-term-grpo").inner_text()
    open_page(page, app_url, "token_explainer", {"methods": "grpo,atrr"})
    (error,) = page.locator('[data-testid="stAlert"]').all_inner_texts()
    assert "did you mean 'atr'?" in error and len(error) < 400
