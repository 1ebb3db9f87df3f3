"""Layout facts of a rendered page, and a script that renders every page's default state and every presenter step
to PNG in headless chromium.

The check asserts facts, not pixels (fonts differ across machines): no formula, button label or code line wider
than its box, no plotly text (titles, tick labels, legend entries, annotations) overlapping another, nothing
taller than the viewport in presenter mode. `layout_problems(page)` returns them as short strings; the test is
tests/app/test_browser_layout.py.

Run as a script (from the repository root) to refresh the pictures a human looks at:

    .venv/bin/python tests/app/layout_check.py [--out test-artifacts/layout] [--width 1280 --height 800]

It starts its own streamlit server, writes one PNG per page and per presenter step and prints each picture's
layout problems (none on a clean tree).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from browser_helpers import open_page, wait_idle  # noqa: E402

# Every page in its default state: URL path and query.
PAGES = {
    "clip_explorer": ("", {}),
    "proof": ("proof", {"measure": "kl3"}),
    "proof_all": ("proof", {"measure": "kl3", "view": "all"}),
    "reallocation": ("reallocation", {}),
    "toy_arena": ("toy_arena", {}),
    "custom_measure": ("custom_measure", {}),
    "sanity_check": ("sanity_check", {}),
    "token_explainer": ("token_explainer", {}),
    "atlas": ("atlas", {}),
    "study": ("study", {}),
    "atlas_engines": (
        "atlas",
        {"methods": "grpo/noclamp,gspo/noclamp/seq_grad_mean=1,binary_tv:0.1/gated/delta_high=0.3"},
    ),
    # the engine arithmetic a method string carries (issue 35): /noclamp, GSPO's seq_grad_mean, DPPO's two widths
    "token_explainer_engines": (
        "token_explainer",
        {"methods": "grpo/noclamp,gspo/noclamp/seq_grad_mean=1,binary_tv:0.1/gated/delta_high=0.3"},
    ),
    # the states issue 34 found broken: a long formula (DPPO-Binary-KL) beside the interval chart, five chips
    "clip_explorer_binary_kl": ("", {"measures": "kl3,ratio,binary_kl,chi2"}),
    "reallocation_five_specs": ("reallocation", {"specs": "grpo,dapo,atr,dppo_kl,dppo_tv"}),
    "atlas_q_0.9": ("atlas", {"q": "0.9"}),
    # the third policy (issue 32): four corrections of four kinds, long sequences; the explorer's overlay
    "clip_explorer_correction": ("", {"correction": "is=sequence:tis=2.0/rs=token_k3:0.0231436", "L": "100"}),
    "atlas_corrections": (
        "atlas",
        {"corrections": "is=sequence:mask=3.0/noclamp, rs=token_k3:0.01, filter=sequence:ratio:sum:mask:0.5_2.0"},
    ),
    "atlas_corrections_more": (
        "atlas",
        {
            "corrections": "is=token:tis=2.0, rs=seq_max_k3:0.5/opsm=0.001, filter=token:kl_k3:mask:0.05, m2po=0.04",
            "L": "300",
        },
    ),
    # OpenRLHF's gates (issue 35): a sequence ratio gate keeping token weights, binary KL / TV gates at π_rollout 0.5
    "atlas_corrections_openrlhf": (
        "atlas",
        {
            "corrections": "filter=sequence:ratio:mean:mask:0.5_5.0:token, filter=token:binary_kl:mask:0.0_0.05, "
            "filter=sequence:binary_tv:mean:mask:0.0_0.1"
        },
    ),
}
PRESENTER_STEPS = 10  # the KL3 lecture: 8 derivation steps, the sign of A, the numbers

_LAYOUT_FACTS = """() => {
    const out = [];
    const main = document.querySelector('[data-testid="stMain"]') || document.body;
    const visible = (e) => { const b = e.getBoundingClientRect(); return b.width > 0 && b.height > 0; };
    const label = (e) => {
        const tex = e.querySelector && e.querySelector('annotation');
        const text = tex ? tex.textContent : (e.innerText || e.textContent || '');
        return Array.from(text.trim().replace(/\\s+/g, ' ')).slice(0, 60).join('');
    };
    // a formula wider than its box: cut, or hidden behind a scrollbar the reader never sees
    for (const k of main.querySelectorAll('.katex-display')) {
        if (visible(k) && k.scrollWidth > k.clientWidth + 4) out.push(`formula wider than its box: ${label(k)}`);
    }
    for (const k of main.querySelectorAll('.katex')) {
        if (!visible(k) || k.closest('.katex-display')) continue;
        const box = k.closest('td, th, [data-testid="stMarkdownContainer"]');
        if (box && k.getBoundingClientRect().right > box.getBoundingClientRect().right + 1)
            out.push(`formula wider than its box: ${label(k)}`);
    }
    // a button whose label is cut ("Match δ to ε_low unde…")
    for (const btn of main.querySelectorAll('button')) {
        if (!visible(btn)) continue;
        const cut = [btn, ...btn.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1
                        && ['hidden', 'clip'].includes(getComputedStyle(e).overflowX));
        if (cut) out.push(`button label cut: ${label(btn)}`);
    }
    // a multiselect chip cut ("dppo_t…") at its box's edge
    for (const box of main.querySelectorAll('[data-testid="stMultiSelectTagsContainer"]')) {
        const edge = box.getBoundingClientRect().right;
        for (const chip of box.querySelectorAll(':scope > span > span')) {
            const cut = [...chip.querySelectorAll('span')].some(e => e.scrollWidth > e.clientWidth + 1);
            if (visible(chip) && (cut || chip.getBoundingClientRect().right > edge + 1))
                out.push(`chip cut: ${label(chip)}`);
        }
    }
    // a code line wrapped mid-word
    for (const code of main.querySelectorAll('[data-testid="stCode"] code')) {
        if (getComputedStyle(code).whiteSpace.startsWith('pre-wrap') && code.scrollHeight > 0) {
            const lines = code.innerText.split('\\n').length;
            const lh = parseFloat(getComputedStyle(code).lineHeight) || 20;
            if (code.getBoundingClientRect().height > (lines + 0.5) * lh) out.push(`code wraps: ${label(code)}`);
        }
    }
    // an st.table cell cut at the page's edge (the table itself, or the scroller st.table wraps it in, hiding
    // the last column behind a sideways scroll)
    for (const t of main.querySelectorAll('[data-testid="stTable"]')) {
        const table = t.querySelector('table') || t;
        if (visible(t) && Math.max(t.scrollWidth, table.scrollWidth) > t.clientWidth + 1)
            out.push(`table wider than its box: ${label(t)}`);
    }
    // an st.dataframe whose columns run past its box (its last column cut at the page's edge)
    for (const grid of main.querySelectorAll('[data-testid="stDataFrame"] .dvn-scroller')) {
        if (visible(grid) && grid.scrollWidth > grid.clientWidth + 1)
            out.push(`dataframe wider than its box: ${label(grid.closest('[data-testid="stDataFrame"]'))}`);
    }
    // plotly: any two text boxes of one chart overlapping
    for (const chart of main.querySelectorAll('.js-plotly-plot')) {
        if (!visible(chart)) continue;
        const texts = [...chart.querySelectorAll('text')].filter(t => visible(t) && label(t)
                        && getComputedStyle(t).opacity !== '0' && !t.closest('.hovertext, .hoverlayer'));
        const boxes = texts.map(t => [t, t.getBoundingClientRect()]);
        const title = (chart.querySelector('.gtitle') || {}).textContent || '';
        const frame = chart.getBoundingClientRect();
        for (const [t, b] of texts.map(t => [t, t.getBoundingClientRect()])) {
            if (b.left < frame.left - 1 || b.right > frame.right + 1)
                out.push(`chart "${title.slice(0, 40)}": "${label(t)}" runs out of the chart`);
        }
        for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
            const [a, p] = boxes[i], [b, q] = boxes[j];
            const ox = Math.min(p.right, q.right) - Math.max(p.left, q.left);
            const oy = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
            if (ox > 2 && oy > 2) out.push(`chart "${title.slice(0, 40)}": "${label(a)}" overlaps "${label(b)}"`);
        }
    }
    return out;
}"""


def layout_problems(page) -> list[str]:
    """Every layout fact the page breaks, one short line each (empty on a clean page)."""
    return list(dict.fromkeys(page.evaluate(_LAYOUT_FACTS)))


def page_height(page) -> tuple[int, int]:
    """(scroll height, visible height) of the main block: equal when nothing needs scrolling."""
    return tuple(
        page.evaluate(
            """() => { const m = document.querySelector('[data-testid="stMain"]');
                       return [m.scrollHeight, m.clientHeight]; }"""
        )
    )


def presenter_steps(page, app_url: str, measure: str = "kl3"):
    """Open the presenter lecture and yield (step, page) at each step, pressing Next in between."""
    open_page(page, app_url, "proof", {"measure": measure, "presenter": "1"})
    for step in range(1, PRESENTER_STEPS + 1):
        if step > 1:
            page.get_by_role("button", name="Next").click()
            page.wait_for_function(f"() => new URLSearchParams(location.search).get('step') === '{step}'")
            wait_idle(page)
        yield step, page


def render_all(
    browser, app_url: str, out: Path, width: int = 1280, height: int = 800, only=None
) -> dict[str, list[str]]:
    """Every page's default state and every presenter step as PNG under `out`; returns picture -> problems."""
    from browser_helpers import screenshot

    out.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(90_000)
    found = {}
    try:
        for name, (path, query) in PAGES.items():
            if only and name not in only:
                continue
            open_page(page, app_url, path, query)
            found[name] = layout_problems(page)
            screenshot(page, out / f"{name}-{width}.png")
        for step, _ in presenter_steps(page, app_url) if not only or "presenter" in only else ():
            problems = layout_problems(page)
            scroll, visible = page_height(page)
            if scroll > visible + 1:
                problems.append(f"presenter step {step} is {scroll} px tall, the viewport {visible} px")
            found[f"presenter-{step}"] = problems
            page.screenshot(path=str(out / f"presenter-step{step}-{width}.png"))
    finally:
        context.close()
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE.parents[1] / "test-artifacts" / "layout")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=800)
    parser.add_argument("--only", nargs="*", help="page names (keys of PAGES, or 'presenter') to render")
    args = parser.parse_args(argv)
    from conftest import CHROMIUM, CHROMIUM_ARGS, serve_app
    from playwright.sync_api import sync_playwright

    with serve_app("streamlit-server-layout.log") as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        found = render_all(browser, url, args.out, args.width, args.height, args.only)
        browser.close()
    for name, problems in found.items():
        print(f"{name}: {'ok' if not problems else ''}")
        for p in problems:
            print(f"    {p}")
    print(f"pictures in {args.out}")
    return 1 if any(found.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
