"""How `divclip check` reads the engines' own example scripts: every file of the corpus against its truth.

The corpus (tests/fixtures/engines/corpus/) holds launch scripts and configs copied verbatim from the six engines'
repositories; corpus.json gives, per file, its repository, commit and path, and the truth read from the engine's code
(the loss as a divclip method string or "not modelled", the clip widths, aggregation, group size, updates per rollout
batch, on-policy, and the settings beside the clip that change the loss). `read_entry` runs `divclip check`'s reader
(`divclip.sanity.build_report`) on one file and sorts the outcome into one of

  right     every truth field read as the engine has it, and every setting beside the clip named
  silent    the fields right, but a setting beside the clip that changes the loss not named in the report
  misread   the report gives a value the engine does not use (the fields that differ are listed)
  refused   a clear error (a SanityInputError) for a file the engine accepts
  crashed   any other exception

Run it to print the counts per engine (the command docs/engines.md quotes):

    .venv/bin/python tests/engines/corpus_report.py            # counts per engine
    .venv/bin/python tests/engines/corpus_report.py --files    # and one line per file that is not read right
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "corpus"
MANIFEST = CORPUS / "corpus.json"
OUTCOMES = ("right", "silent", "misread", "refused", "crashed")
ENGINES = ("verl", "trl", "openrlhf", "skyrl", "areal", "slime")
NOT_MODELLED = "not modelled"


@dataclass
class Outcome:
    """What the reader made of one corpus file."""

    file: str
    engine: str
    outcome: str  # one of OUTCOMES
    wrong: list = field(default_factory=list)  # ["field: truth X, read Y", ...] (misread)
    unnamed: list = field(default_factory=list)  # settings beside the clip the report does not mention (silent)
    error: str = ""  # the message of a refusal or crash
    unknown_keys: int = 0  # unknown-key warnings in the report (an engine's own example sets only keys it accepts)
    warnings: list = field(default_factory=list)  # [(code, key)] of every warning, in the report's order

    def line(self) -> str:
        detail = "; ".join(self.wrong) or ", ".join(self.unnamed) or self.error
        return f"{self.outcome:8s} {self.file}: {detail}"


def load_manifest() -> list[dict]:
    return json.loads(MANIFEST.read_text())["entries"]


def _spec(text):
    """The ClipSpec of a method string, or None where divclip's grammar cannot say it (then strings compare)."""
    from divclip.theory.spec import parse_method

    try:
        return parse_method(text)
    except ValueError:
        return None


def _same_method(truth: str, read: str | None) -> bool:
    if truth == NOT_MODELLED:
        return read is None
    if read is None:
        return False
    want, got = _spec(truth), _spec(read)
    if want is None or got is None:
        return truth == read
    # clamp_log_ratio (verl clamps log r to ±20 before exp, TRL does not) is outside the corpus truth
    return want.__class__ is got.__class__ and _fields(want) == _fields(got)


def _fields(spec) -> dict:
    """A spec's fields with its loss form's parameters filled in from their defaults (unset = default)."""
    from dataclasses import asdict

    from divclip.theory.forms import get_form

    out = asdict(spec)
    try:
        defaults = {p.name: p.default for p in get_form(spec.form).params}
    except (ValueError, KeyError, AttributeError):
        defaults = {}
    out["params"] = {**defaults, **dict(spec.params or ())}
    out["params"].pop("clamp_log_ratio", None)
    out["params"].pop("exp_dtype", None)  # SkyRL's float32 exp: arithmetic outside the corpus truth, as the clamp
    return out


def _mode(read: str | None) -> str | None:
    spec = _spec(read) if read is not None else None
    return None if spec is None else spec.form


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)


def _norm(text: str) -> str:
    """Lower case, with '-', '.' and spaces as '_': `--use-tis`, `use_tis` and "use tis" name one setting."""
    return re.sub(r"[-.\s]+", "_", text.lower())


def compare(truth: dict, config: dict, said: str) -> tuple[list, list]:
    """The truth fields the report gets wrong, and the settings beside the clip it does not name."""
    read = {
        "engine": config.get("framework"),
        "loss_mode": config.get("loss_mode"),
        "method": config.get("method"),
        "form": _mode(config.get("method")),
        "eps_low": config.get("budget_low"),
        "eps_high": config.get("budget_high"),
        "dual_clip_c": config.get("dual_clip_c"),
        "agg": config.get("loss_agg_mode"),
        "group_size": config.get("group_size"),
        "updates_per_batch": config.get("updates_per_batch"),
        "on_policy": config.get("on_policy"),
    }
    wrong = []
    for key, want in truth.items():
        if key == "beside":
            continue
        got = read[key]
        if key == "method":
            ok = _same_method(want, got)
        elif key in ("eps_low", "eps_high", "dual_clip_c", "updates_per_batch"):
            ok = _close(want, got)
        elif key == "agg" and want is not None and got is not None:
            # one name spelled either way: the truth keeps SkyRL's token_mean_legacy, divclip says token-mean-legacy
            ok = _norm(want) == _norm(got)
        else:
            ok = want == got
        if not ok:
            wrong.append(f"{key}: truth {want!r}, read {got!r}")
    unnamed = [name for name in truth.get("beside", []) if _norm(name) not in said]
    return wrong, unnamed


def read_entry(entry: dict) -> Outcome:
    """`divclip check FILE` on one corpus file, sorted into an outcome against the file's truth."""
    from divclip.sanity.errors import SanityInputError
    from divclip.sanity.report import build_report

    engine = entry["truth"]["engine"]
    path = CORPUS / entry["file"]
    try:
        report = build_report(config=path)
    except SanityInputError as exc:
        return Outcome(entry["file"], engine, "refused", error=str(exc).splitlines()[0][:200])
    except Exception as exc:  # noqa: BLE001 - a crash is what this counts
        return Outcome(entry["file"], engine, "crashed", error=f"{type(exc).__name__}: {exc}"[:200])
    # an unknown-key warning names a key divclip did not read: it does not say what the setting does to the loss
    told = [w["message"] for w in report["warnings"] if w["code"] != "unknown_key"]
    said = _norm(" ".join([*report["notes"], *told]))
    wrong, unnamed = compare(entry["truth"], report["config"], said)
    outcome = "misread" if wrong else "silent" if unnamed else "right"
    unknown = sum(w["code"] == "unknown_key" for w in report["warnings"])
    found = [(w["code"], w.get("key")) for w in report["warnings"]]
    return Outcome(entry["file"], engine, outcome, wrong, unnamed, unknown_keys=unknown, warnings=found)


def counts(outcomes) -> dict:
    """{engine: {outcome: n, ..., "unknown_keys": n}} and an "all" row."""
    table = {e: dict.fromkeys((*OUTCOMES, "unknown_keys"), 0) for e in (*ENGINES, "all")}
    for o in outcomes:
        for row in (table[o.engine], table["all"]):
            row[o.outcome] += 1
            row["unknown_keys"] += o.unknown_keys
    return table


def render(table: dict) -> list[str]:
    """The counts as a text table: files per outcome, the files, and the unknown-key warnings they drew."""
    head = f"{'engine':10s}" + "".join(f"{c:>9s}" for c in (*OUTCOMES, "files")) + f"{'unknown-key warnings':>22s}"
    lines = [head]
    for engine, row in table.items():
        n = sum(row[c] for c in OUTCOMES)
        cells = "".join(f"{row[c]:9d}" for c in OUTCOMES)
        lines.append(f"{engine:10s}{cells}{n:9d}{row['unknown_keys']:22d}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", action="store_true", help="also one line per file not read right")
    args = parser.parse_args(argv)
    outcomes = [read_entry(e) for e in load_manifest()]
    if args.files:
        for o in outcomes:
            if o.outcome != "right":
                print(o.line())
        print()
    print("\n".join(render(counts(outcomes))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
