"""The visual regression check (issue 34 item 4): every page's default state, the states the issue found broken,
and every presenter step of the KL3 lecture, rendered in headless chromium at 1280×800, break no layout fact of
`layout_check.layout_problems` (no formula, button label, chip, code line, table or plotly text cut or overlapping;
each presenter step within the viewport). Facts rather than reference pictures: fonts differ across machines.
The PNGs land in test-artifacts/layout/ for a human to look at; `python tests/app/layout_check.py` renders the
same pictures on demand (README, "Checking the layout")."""

from __future__ import annotations

import pytest
from layout_check import PAGES, PRESENTER_STEPS, render_all

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_no_page_breaks_a_layout_fact_at_1280x800(browser, app_url, artifacts):
    found = render_all(browser, app_url, artifacts / "layout")
    assert set(found) == set(PAGES) | {f"presenter-{s}" for s in range(1, PRESENTER_STEPS + 1)}
    broken = {name: problems for name, problems in found.items() if problems}
    assert broken == {}, broken


def test_the_layout_facts_catch_what_they_should(browser, app_url):
    """The check itself: a formula wider than its column, a cut button label and two overlapping chart labels,
    planted in a page, are each reported."""
    from browser_helpers import open_page
    from layout_check import layout_problems

    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    try:
        open_page(page, app_url, "custom_measure")
        assert layout_problems(page) == []
        page.evaluate(
            """() => {
            const k = document.querySelector('.katex-display') || document.querySelector('.katex');
            const box = k.closest('[data-testid="stMarkdownContainer"]') || k.parentElement;
            const wide = document.createElement('div');
            wide.className = 'katex-display';
            wide.style.cssText = 'overflow:hidden;width:100px';
            wide.innerHTML = '<span class="katex"><span class="katex-mathml"><math><semantics>'
                + '<annotation>planted</annotation></semantics></math></span>'
                + '<span style="display:inline-block;width:400px">x</span></span>';
            box.appendChild(wide);
            const btn = document.querySelector('[data-testid="stMain"] button');
            btn.style.width = '30px'; btn.style.overflow = 'hidden';
            const t = [...document.querySelectorAll('.js-plotly-plot text')].filter(t => t.textContent.trim());
            if (t.length > 1) {
                for (const a of ['x', 'y', 'transform']) t[1].setAttribute(a, t[0].getAttribute(a) || '');
            }
        }"""
        )
        problems = " | ".join(layout_problems(page))
        assert "formula wider than its box: planted" in problems
        assert "button label cut" in problems and "overlaps" in problems
    finally:
        context.close()
