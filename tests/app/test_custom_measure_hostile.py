"""The Custom measure page answers a runaway formula from a shared link with one error, not a hang."""

import re

import pytest
from apptest_helpers import PAGES_DIR, rendered, start_page


@pytest.mark.slow  # the core refusal of this formula: tests/theory/test_formula_hostile.py
def test_a_power_tower_in_a_shared_link_is_an_error_not_a_hang():
    at = rendered(start_page(PAGES_DIR / "custom_measure.py", {"formula": "(r-1)**2+0**9**9**9"}))
    errors = [re.sub(r"\\(.)", r"\1", e.value) for e in at.error]  # the page escapes markdown in messages
    assert len(errors) == 1 and "the exponent '9 ** 9' = 3.8742e+08 is too large" in errors[0]
    assert not at.get("plotly_chart")
