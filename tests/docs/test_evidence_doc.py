"""docs/evidence.md quotes what its command prints: the committed results file's table verbatim, and the command
in the doc is the one whose grid the results file records."""

import re
import shlex
from pathlib import Path

from divclip.app.study_figures import RESULTS, load_results
from divclip.cli import build_parser
from divclip.cli.study import study_from_args
from divclip.theory.spec import parse_method
from divclip.trainer.study import summary_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "evidence.md"


def test_the_doc_holds_the_results_table_verbatim():
    assert summary_table(load_results(RESULTS)) in DOC.read_text()


def test_the_docs_command_is_the_recorded_grid():
    text = DOC.read_text()
    (command,) = re.findall(r"^nice -n \d+ (divclip study .*)$", text, flags=re.M)
    args = build_parser().parse_args(shlex.split(command)[1:])
    study = study_from_args(args)
    recorded = dict(load_results(RESULTS)["study"])
    now = study.to_dict()
    # a method string is the same method when it parses to the same spec (the catalogue now spells atlas names out:
    # 'grpo' -> 'ratio:0.2:0.2'); everything else is compared as recorded
    strings, recorded_strings = now.pop("method_strings"), recorded.pop("method_strings")
    assert now == recorded
    assert list(strings) == list(recorded_strings)
    assert {m: parse_method(s) for m, s in strings.items()} == {m: parse_method(s) for m, s in recorded_strings.items()}
