"""What a browser walk through the explorer, the proof and the custom measure found (issue 25, item 5), one
page load per page: each check collects its finding, and the test reports all of them at once.

Explorer: an all-measure view at a GSPO-size δ (labels, significant digits, CSV budget, links not cut off),
then a typed ε_low out of range, then every measure cleared. Proof: a step out of range, the numbers step's
branches and series label. Custom measure: a δ the formula refuses, said without numpy's repr.
"""

from __future__ import annotations

import csv
import io
import re

import pytest
from browser_helpers import assert_no_exception, open_page, wait_idle
from test_browser import row_for, table_rows

from divclip import theory
from divclip.app.presets import EPS_MAX

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ALL = ",".join(theory.MEASURES)
GSPO_SIZE_DELTA = 4.5e-8  # KL3's δ for a GSPO-size clip: ε_high − ε_low = 4δ/3 ≈ 6e-8


def alerts(page) -> str:
    return " ".join(page.locator('[data-testid="stAlert"]').all_inner_texts())


def cut_off_links(page) -> list[str]:
    """The page links whose label is wider than the box that shows it (Streamlit cuts it with an ellipsis)."""
    return page.evaluate("""() => [...document.querySelectorAll('[data-testid="stPageLink"] p')]
        .filter(p => { const box = p.closest('a').lastElementChild; return box.scrollWidth > box.clientWidth + 1; })
        .map(p => p.innerText)""")


def explorer_findings_all_measures(page) -> list[str]:
    found = []
    rows = table_rows(page)
    kl3 = row_for(rows, "kl3")
    if kl3["method"] == "ATR-GRPO":
        found.append(f"a KL3 row at δ = {GSPO_SIZE_DELTA:g} is labelled ATR-GRPO (its δ is 0.0231)")
    gap = theory.equivalent_ratio_clip("kl3", GSPO_SIZE_DELTA)
    shown = kl3["ε_high − ε_low"]
    try:
        ok = float(shown) == pytest.approx(gap[1] - gap[0], rel=1e-4)
    except ValueError:
        ok = False
    if not ok:
        found.append(f"ε_high − ε_low of KL3 shows {shown!r}, not {gap[1] - gap[0]:.4g} to 4 significant digits")
    with page.expect_download() as info:
        page.get_by_role("button", name="Table as CSV").click()
    parsed = list(csv.DictReader(io.StringIO(open(info.value.path(), encoding="utf-8").read())))
    budget = [r for r in parsed if r["measure"] == "ratio"][0]["budget"]
    if not ("0.2" in budget and "0.28" in budget):
        found.append(f"the CSV's ratio row has budget {budget!r}, the screen ε = 0.2 / 0.28")
    if cut := cut_off_links(page):
        found.append(f"{len(cut)} 'continue' links are cut off: {cut}")
    return found


def explorer_findings_eps_out_of_range(page) -> list[str]:
    low = page.get_by_label("ε_low (ratio clip, lower side)", exact=True)
    low.fill("5")
    low.press("Enter")
    page.wait_for_timeout(500)
    wait_idle(page)
    found = []
    if low.get_attribute("aria-invalid") == "true" or low.input_value() != f"{EPS_MAX:g}":
        found.append(
            f"typed ε_low = 5 left the box at {low.input_value()!r} (invalid: "
            f"{low.get_attribute('aria-invalid')}), not clamped to {EPS_MAX:g}"
        )
    if not re.search(r"ε_low = 5 is outside .*using 0\.9", alerts(page)):
        found.append(f"typed ε_low = 5 said nothing: alerts {alerts(page)!r}")
    ratio = row_for(table_rows(page), "ratio")
    if ratio["l"] != f"{1 - EPS_MAX:.6f}":
        found.append(f"the ratio row keeps l = {ratio['l']} after ε_low = 5 (expected the clamped {1 - EPS_MAX:g})")
    return found


def explorer_findings_no_measure(page) -> list[str]:
    # the measures box is the page's first multiselect (the export's engine picker comes later)
    page.locator('[data-testid="stMultiSelect"]').first.get_by_role("button", name="Clear all").click()
    page.wait_for_function("() => !new URLSearchParams(window.location.search).get('measures')")
    wait_idle(page)
    found = []
    exceptions = page.locator('[data-testid="stException"]')
    if exceptions.count():
        found.append(f"clearing every measure raised: {exceptions.first.inner_text()[:200]}")
    if "Choose at least one measure" not in alerts(page):
        found.append("clearing every measure does not ask for one")
    return found


def test_explorer_walk_findings_are_fixed(page, app_url):
    """Before the fix all six were found (KeyError: None, red box, ATR-GRPO label, 0.000000, empty CSV budget,
    cut-off links)."""
    open_page(
        page, app_url, "", {"measures": ALL, "delta": f"{GSPO_SIZE_DELTA:g}", "eps_low": "0.2", "eps_high": "0.28"}
    )
    assert_no_exception(page)
    found = explorer_findings_all_measures(page)
    found += explorer_findings_eps_out_of_range(page)
    found += explorer_findings_no_measure(page)
    assert not found, "\n".join(found)


def test_proof_walk_findings_are_fixed(page, app_url):
    """?step=99 names the step it shows; the numbers step names both Lambert-W branches and its series variable."""
    open_page(page, app_url, "proof", {"measure": "kl3", "step": "99"})
    assert_no_exception(page)
    found = []
    progress = re.search(r"Step (\d+) of (\d+)", page.locator('[data-testid="stMain"]').inner_text())
    assert progress, "no progress line"
    shown, total = progress.groups()
    if shown != total or f"using {shown}." not in alerts(page):
        found.append(f"step=99 shows step {shown} of {total} but warns {alerts(page)!r}")
    tex = " ".join(page.locator(".st-key-proof-step annotation").evaluate_all("els => els.map(e => e.textContent)"))
    lower = re.search(r"l_\\delta = ([^,]*)", tex)
    if not lower or not re.search(r"W_\{?0\}?", lower.group(1)):
        found.append(f"the closed form of l_δ does not name the branch W_0: {lower and lower.group(1)!r}")
    rows = table_rows(page)
    series = [r["quantity"] for r in rows if r["quantity"].startswith("series")]
    if not series or "t = s" in series[0] or "s = √(2δ)" not in series[0]:
        found.append(f"the series row is labelled {series}")
    assert not found, "\n".join(found)


def test_custom_measure_error_says_the_number_plainly(page, app_url):
    """Before the fix: '… got np.float64(0.5)'."""
    open_page(page, app_url, "custom_measure", {"formula": "(r - 1)**2 / (1 + (r - 1)**2)", "delta": "0.5"})
    assert_no_exception(page)
    text = alerts(page)
    assert "delta must be below" in text and "np.float64" not in text and text.rstrip().endswith("got 0.5"), text
