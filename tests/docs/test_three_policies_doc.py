"""docs/theory.md §10 quotes what its two commands print: the atlas table and the check of the shipped example."""

import re
from pathlib import Path

import pytest

from divclip.cli import main

ROOT = Path(__file__).resolve().parents[2]
SECTION = (ROOT / "docs" / "theory.md").read_text().split("## 10. The three policies")[1]


def command(name: str) -> list[str]:
    """The argv of the `divclip NAME ...` command the section quotes (backticks, possibly over two lines)."""
    text = " ".join(SECTION.split())
    found = re.search(rf"`divclip {name} ([^`]+)`", text)
    assert found, name
    return [name, *(a.strip('"') for a in re.findall(r'"[^"]*"|\S+', found.group(1)))]


def test_atlas_table_is_what_atlas_prints(capsys):
    assert main(command("atlas")) == 0
    printed = [line.split() for line in capsys.readouterr().out.splitlines()[3:]]
    rows = [line for line in SECTION.splitlines() if line.startswith("| is=") or line.startswith("| rs=")]
    assert len(rows) == len(printed) == 4
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        joined = " ".join(" ".join(c.split()) for c in cells)
        assert joined.split() in printed, row


def test_check_lines_are_what_check_prints(capsys):
    assert main(command("check")) == 0
    out = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    quoted = SECTION.split("prints:\n\n", 1)[1].split("\n\n")[0].splitlines()
    assert len(quoted) == 6
    for line in quoted:
        assert " ".join(line.split()) in out, line


def test_the_length_trap_numbers():
    import math

    assert f"{math.exp(1.2):.2f}" == "3.32" and round(math.log(3) / 0.012) == 92
    assert "≈ 3.32" in SECTION and "≈ 92" in SECTION


@pytest.mark.parametrize("code", ["masks_everything", "masks_most", "length_trap", "anchor", "double_counting"])
def test_every_warning_is_named(code):
    from divclip.sanity.corrections import SOURCES

    assert f"correction_{code}" in SOURCES and f"`correction_{code}`" in SECTION


def test_areal_table_is_what_atlas_prints(capsys):
    """The second atlas command of §10 (AReaL's filter and M2PO) and its table."""
    text = " ".join(SECTION.split())
    found = re.findall(r'`divclip atlas --correction "([^"]+)"`', text)
    assert len(found) == 2
    assert main(["atlas", "--correction", found[1]]) == 0
    printed = [line.split() for line in capsys.readouterr().out.splitlines()[3:]]
    rows = [line for line in SECTION.splitlines() if line.startswith("| filter=") or line.startswith("| m2po=")]
    assert len(rows) == len(printed) == 2
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert " ".join(cells).split() in printed, row
    assert "[1/u_0.5, 1/l_0.5]" in SECTION and "[0.30171, 2.35768]" in SECTION  # AReaL's k3 is of 1/ρ
