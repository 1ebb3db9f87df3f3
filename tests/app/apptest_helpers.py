"""Shared helpers of the AppTest page tests: start a page file with URL query parameters, and the
no-exception check that every interaction goes through."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

PAGES_DIR = Path(__file__).resolve().parents[2] / "app" / "views"
TIMEOUT = 120  # shared 2-core machine; a page's first run imports torch


def slow_after(n: int, cases) -> list:
    """`cases` for parametrize with all but the first `n` marked slow: each page rerun costs about a second on
    a 2-core machine, so the fast loop (-m "not slow") runs a representative few and the full suite all."""
    return [
        case if i < n else pytest.param(*(case if isinstance(case, tuple) else (case,)), marks=pytest.mark.slow)
        for i, case in enumerate(cases)
    ]


def start_page(page: Path, query: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(page), default_timeout=TIMEOUT)
    at.query_params.update(query or {})
    return at.run()


def rendered(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at
