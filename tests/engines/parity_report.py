"""The table of docs/engines.md "Each engine's own loss, exactly", generated from the parity tests.

Every `tests/engines/test_parity_*.py` keeps a `PARITY_ROWS` list of (engine, setting, status[, note]) tuples, one per
case its tests check against the engine's own loss code run in process. This script imports those modules, collects
the rows and prints one markdown table per engine; tests/engines/test_engines_parity_doc.py holds the block of
docs/engines.md between `<!-- parity-report -->` and `<!-- /parity-report -->` to this output. Statuses:

  exact         value and gradient equal to the engine's: float64 to 1e-12 relative, float32 to the engine's own
                rounding (or, where the engine computes in float32 whatever the input, to that rounding: the note
                says so); bf16 / fp16 inputs: to float32 rounding of the engine's code run in float64 on the same
                input values (divclip computes in float32), and to the engine's own rounding in that dtype
                (parity_inputs.assert_low_precision)
  gradient      the gradient is the engine's, the loss value is not (named by the read)
  named         the engine computes it differently; the read's warning or note says how
  as correction the engine's mask or weight beside the clip is read as a rollout correction (read_correction),
                tested against the engine's own code in tests/engines/test_correction_<engine>.py
  not modelled  divclip gives no spec for it; the read says why

    .venv/bin/python tests/engines/parity_report.py            # the markdown block
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
START, END = "<!-- parity-report -->", "<!-- /parity-report -->"
STATUSES = ("exact", "gradient", "named", "as correction", "not modelled")
TITLES = {"verl": "verl", "trl": "TRL", "openrlhf": "OpenRLHF", "areal": "AReaL", "skyrl": "SkyRL", "slime": "slime"}


def modules() -> list[str]:
    """The parity test modules' names, sorted."""
    return sorted(p.stem for p in HERE.glob("test_parity_*.py"))


def rows() -> list[tuple[str, str, str, str]]:
    """Every module's PARITY_ROWS as (engine, setting, status, note), in module order."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))  # the test modules import their helpers (skyrl_helpers, parity_inputs) bare
    out = []
    for name in modules():
        found = getattr(importlib.import_module(name), "PARITY_ROWS", None)
        if not found:
            raise ValueError(f"tests/engines/{name}.py has no PARITY_ROWS: each parity test module lists its cases")
        for row in found:
            if len(row) not in (3, 4) or not all(isinstance(c, str) for c in row):
                raise ValueError(f"{name}.PARITY_ROWS: a row is (engine, setting, status[, note]) strings, got {row!r}")
            out.append((*row, "") if len(row) == 3 else tuple(row))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(found) -> list[str]:
    """One markdown table per engine (in TITLES order), with its version and counts per status."""
    from divclip.engines import get_engine

    lines = []
    engines = [e for e in TITLES if any(r[0] == e for r in found)]
    engines += sorted({r[0] for r in found} - set(engines))
    for engine in engines:
        mine = [r for r in found if r[0] == engine]
        statuses = [s for s in STATUSES if any(r[2] == s for r in mine)]
        statuses += sorted({r[2] for r in mine} - set(STATUSES))  # a module's own words, after the known ones
        counts = ", ".join(f"{sum(r[2] == s for r in mine)} {s}" for s in statuses)
        module = get_engine(engine)
        lines += [f"**{TITLES.get(engine, engine)} {module.VERSION}** ({counts})", ""]
        lines += ["| setting | status | note |", "| --- | --- | --- |"]
        lines += [f"| {_cell(setting)} | {status} | {_cell(note)} |" for _, setting, status, note in mine]
        lines.append("")
    return lines[:-1]


def block() -> str:
    """The docs block, markers included."""
    return "\n".join([START, *render(rows()), END])


def main() -> int:
    print(block())
    return 0


if __name__ == "__main__":
    sys.exit(main())
