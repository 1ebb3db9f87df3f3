"""docs/engines.md "Each engine's own loss, exactly" is what tests/engines/parity_report.py prints from the parity
tests' PARITY_ROWS, and every parity test module has rows."""

from pathlib import Path

import parity_report

DOC = Path(__file__).parents[2] / "docs" / "engines.md"


def test_the_docs_block_is_the_reports_output():
    text = DOC.read_text()
    start, end = text.index(parity_report.START), text.index(parity_report.END) + len(parity_report.END)
    assert text[start:end] == parity_report.block(), "run: .venv/bin/python tests/engines/parity_report.py"


def test_every_parity_module_has_rows_with_a_known_status():
    found = parity_report.rows()
    assert {"areal", "skyrl"} <= {r[0] for r in found}
    assert {r[2] for r in found if r[0] in ("areal", "skyrl")} <= set(parity_report.STATUSES)
    assert all(r[1] and r[2] for r in found)
    assert len(parity_report.modules()) >= 2
