"""docs/engines.md: every row of its settings table names a setting of that engine's module at the version the
module reads, every engine has rows, and every example it lists is a fixture the tests read."""

import re
from pathlib import Path

import pytest

from divclip.engines import ENGINES, get_engine

ROOT = Path(__file__).parents[2]
DOC = (ROOT / "docs" / "engines.md").read_text()
NAMES = {"verl": "verl", "TRL": "trl", "OpenRLHF": "openrlhf", "AReaL": "areal", "SkyRL": "skyrl", "slime": "slime"}


def _rows():
    table = DOC.split("## The settings, engine by engine")[1].split("## Pitfalls")[0]
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] in NAMES:
            yield NAMES[cells[0]], cells[1], cells[4]


def test_every_row_is_a_setting_of_its_engine_at_its_version():
    rows = list(_rows())
    assert {engine for engine, _, _ in rows} == set(ENGINES)
    for engine, setting, version in rows:
        module = get_engine(engine)
        assert version == module.VERSION, (engine, setting)
        keys = set(module.KEYS)
        for name in re.findall(r"`([^`]+)`", setting):
            name = name.split(" ")[0]
            stem = name.split("{")[0].removesuffix("*")  # `x.{a,b}` and `x.*` name a group of keys
            found = [
                k
                for k in keys
                if k == name
                or k.endswith("." + name)
                or k.endswith(name.lstrip("-"))
                or stem != name
                and k.startswith(stem)
            ]
            assert found, (engine, name)


@pytest.mark.parametrize("engine", ["openrlhf", "areal", "skyrl", "slime"])
def test_every_example_listed_is_a_fixture_naming_its_source(engine):
    folder = ROOT / "tests" / "fixtures" / "engines" / engine
    examples = [p for p in folder.iterdir() if "excerpt" not in p.name]
    assert examples
    for path in examples:
        head = path.read_text().splitlines()[0]
        assert head.startswith("# Source: github.com/") and "commit" in path.read_text().split("\n\n")[0]
        assert Path(re.search(r"github\.com/\S+, (\S+)", head).group(1)).name == path.name
        assert path.name in DOC
