"""README.md and docs/theory.md §8 list every method of the atlas, with its family and source: the table between
their `atlas:methods` markers is exactly `divclip atlas --markdown` (the catalogue), so it cannot drift. After
adding a method or a form, paste the output of `divclip atlas --markdown` between the markers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from divclip.cli.atlas import markdown_table
from divclip.theory.atlas import catalogue

ROOT = Path(__file__).resolve().parents[2]
MARKED = re.compile(r"<!-- atlas:methods:start -->\n(.*?)<!-- atlas:methods:end -->", re.S)


@pytest.fixture(scope="module")
def expected() -> str:
    return markdown_table(catalogue(with_nearest=False))


@pytest.mark.parametrize("doc", ["README.md", "docs/theory.md"])
def test_the_method_table_is_the_catalogue(doc, expected):
    found = MARKED.findall((ROOT / doc).read_text())
    assert len(found) == 1, f"{doc} must hold one table between <!-- atlas:methods:start/end --> markers"
    assert found[0] == expected, (
        f"{doc}'s method table differs from the catalogue: paste the output of "
        "`divclip atlas --markdown` between its atlas:methods markers"
    )


def test_the_table_names_every_method_with_family_and_source(expected):
    rows = catalogue(with_nearest=False)
    lines = expected.splitlines()[2:]
    assert len(lines) == len(rows) >= 14
    for row, line in zip(rows, lines):
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        assert cells[0] == f"`{row['name']}`" and cells[1] == row["family"] and cells[2] == ", ".join(row["sources"])
