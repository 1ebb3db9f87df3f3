"""`divclip check` on the engines' own example scripts and configs, each against a truth read from the engine's code.

The corpus and its manifest are tests/fixtures/engines/corpus/ (corpus.json: repo, commit, path and truth per
file); tests/engines/corpus_report.py reads every file and prints the counts docs/engines.md quotes. A file the readers
get wrong today is in KNOWN_GAPS with the issue item that fixes it, and its test is a strict xfail: a fix that lands
turns it into an XPASS failure, and the entry comes out of KNOWN_GAPS. The truth is never changed to fit a reader.
"""

import dataclasses
import functools
import json
import re
from pathlib import Path

import pytest
from corpus_report import (
    CORPUS,
    ENGINES,
    MANIFEST,
    NOT_MODELLED,
    OUTCOMES,
    compare,
    counts,
    load_manifest,
    read_entry,
    render,
)

from divclip.theory.spec import parse_method

ENTRIES = load_manifest()
DOC = Path(__file__).parents[2] / "docs" / "engines.md"
TRUTH_FIELDS = {
    "engine",
    "loss_mode",
    "method",
    "form",
    "eps_low",
    "eps_high",
    "dual_clip_c",
    "agg",
    "group_size",
    "updates_per_batch",
    "on_policy",
    "beside",
}

KNOWN_GAPS: dict = {}  # none now: SkyRL's token_mean_legacy is read as token-mean-legacy since issue 31 item 4
# truths divclip's method grammar cannot write yet (the reader must learn them, not the truth change): none now,
# ε_low = 0 and ε_low >= 1 are ratio clips since issue 31 item 4
UNWRITABLE_TODAY: set = set()


def _param(entry):
    marks = []
    if entry["file"] in KNOWN_GAPS:
        marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[entry["file"]]))
    return pytest.param(entry, id=entry["file"], marks=marks)


@functools.cache
def _outcome(file: str):
    return read_entry(next(e for e in ENTRIES if e["file"] == file))


@pytest.mark.parametrize("entry", [_param(e) for e in ENTRIES])
def test_corpus_file_is_read_as_the_engine_runs_it(entry):
    got = _outcome(entry["file"])
    assert got.outcome == "right", got.line()


def test_an_on_policy_run_is_told_so_once_by_its_engines_own_warning():
    """The engine's read says it with the key to change (SkyRL's update_epochs_per_batch, AReaL's
    ppo_n_minibatches, ...); the generic check stands back then, where both used to print it. TRL's GMPO clips
    log r, so an on-policy GMPO run is told too (its form is no ratio clip's, which the generic check skips)."""
    said = {e["file"]: [k for c, k in _outcome(e["file"]).warnings if c == "on_policy_clip_inert"] for e in ENTRIES}
    assert all(len(keys) <= 1 for keys in said.values()), {f: k for f, k in said.items() if len(k) > 1}
    engines = ("areal", "skyrl", "slime", "openrlhf")
    on_policy = [e for e in ENTRIES if e["truth"].get("on_policy") and e["truth"]["engine"] in engines]
    assert len(on_policy) >= 25 and {e["truth"]["engine"] for e in on_policy} == set(engines)
    for e in on_policy:
        assert len(said[e["file"]]) == 1 and said[e["file"]][0], (e["file"], said[e["file"]])
    assert said["trl/paper_index__L145-152.py"] == ["num_iterations"]  # GMPOConfig, num_iterations = 1


def test_docs_quote_the_counts_the_report_prints():
    table = render(counts([_outcome(e["file"]) for e in ENTRIES]))
    section = DOC.read_text().split("## Tested on the engines' own examples")[1]
    quoted = section.split("prints, today:")[1].split("```")[1].strip("\n").splitlines()
    assert quoted == table, "docs/engines.md: rerun tests/engines/corpus_report.py and paste its table"
    assert f"holds {len(ENTRIES)} launch scripts" in section


def test_the_corpus_is_a_spread_of_every_engine():
    assert len(ENTRIES) >= 100
    per_engine = {e: sum(x["truth"]["engine"] == e for x in ENTRIES) for e in ENGINES}
    assert all(n >= 8 for n in per_engine.values()), per_engine
    methods = {x["truth"].get("method") or x["truth"].get("form") for x in ENTRIES}
    assert len(methods) >= 15, methods  # not 100 copies of one GRPO script
    assert sum(x["truth"].get("method") == NOT_MODELLED for x in ENTRIES) >= 3


def test_every_file_names_its_source_and_is_listed_once():
    files = [e["file"] for e in ENTRIES]
    assert len(files) == len(set(files))
    on_disk = {p.relative_to(CORPUS).as_posix() for p in CORPUS.rglob("*") if p.is_file() and p != MANIFEST}
    assert on_disk == set(files)
    for e in ENTRIES:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", e["repo"]) and re.fullmatch(r"[0-9a-f]{40}", e["commit"]), e
        assert e["file"].split("/")[0] == e["truth"]["engine"]
        if "lines" in e:  # one code block of a document, its lines verbatim
            start, end = map(int, e["lines"].split("-"))
            name = f"{Path(e['path']).stem}__L{start - 1}-{end + 1}.py"
        else:
            name = e["path"].split("/", 1)[1] if e["path"].startswith(("examples/", "scripts/")) else e["path"]
        assert e["file"].split("/", 1)[1] == name.replace("/", "__")
        text = (CORPUS / e["file"]).read_text(encoding="utf-8")
        assert 0 < len(text) < 20_000


def test_every_truth_is_whole_and_writable():
    about = json.loads(MANIFEST.read_text())
    assert set(about["truth_from"]) == set(ENGINES) == set(about["versions"])
    assert {e["repo"] for e in ENTRIES} <= set(about["licences"])
    assert all(text.startswith("Apache-2.0") for text in about["licences"].values())
    for e in ENTRIES:
        truth = e["truth"]
        assert set(truth) <= TRUTH_FIELDS and ("method" in truth or "form" in truth), e["file"]
        method = truth.get("method")
        if method not in (None, NOT_MODELLED) and method not in UNWRITABLE_TODAY:
            parse_method(method)  # a typo in a truth would pass silently as a misread
        assert isinstance(truth.get("beside", []), list)


def test_known_gaps_name_corpus_files_and_an_issue_item():
    files = {e["file"] for e in ENTRIES}
    assert set(KNOWN_GAPS) <= files
    assert all(re.search(r"items? \d|a new gap", why) for why in KNOWN_GAPS.values())
    unwritable = {e["file"] for e in ENTRIES if e["truth"].get("method") in UNWRITABLE_TODAY}
    assert unwritable <= set(KNOWN_GAPS)


def _right_entry():
    return next(e for e in ENTRIES if e["file"] == "verl/dapo__test_dapo_7b_math.sh")


def _read_config(entry):
    from divclip.sanity.report import build_report

    report = build_report(config=CORPUS / entry["file"])
    return report["config"]


def test_compare_flags_each_field_the_reader_gets_wrong():
    entry = _right_entry()
    config = _read_config(entry)
    assert compare(entry["truth"], config, "") == ([], [])
    for key, bad in [
        ("framework", "trl"),
        ("method", "ratio:0.2:0.2/dual=10.0"),
        ("budget_high", 0.2),
        ("dual_clip_c", None),
        ("loss_agg_mode", "seq-mean-token-mean"),
        ("group_size", 8),
        ("updates_per_batch", 4),
        ("on_policy", True),
    ]:
        wrong, _ = compare(entry["truth"], {**config, key: bad}, "")
        assert len(wrong) >= 1, key
    _, unnamed = compare({**entry["truth"], "beside": ["use-tis", "kl_loss_coef"]}, config, "the kl_loss_coef is")
    assert unnamed == ["use-tis"]


def test_compare_reads_not_modelled_and_form_defaults():
    truth = {"method": NOT_MODELLED}
    assert compare(truth, {"method": None}, "") == ([], [])
    assert compare(truth, {"method": "grpo"}, "")[0]
    # a form's parameter at its default is the same method whether written or not
    spelled = "ratio/reinforce_seq_is/rollout_is_threshold=2/rollout_is_batch_normalize=1"
    assert compare({"method": spelled}, {"method": "ratio/reinforce_seq_is/rollout_is_batch_normalize=1"}, "")[0] == []
    assert compare({"method": spelled}, {"method": "ratio/reinforce_seq_is"}, "")[0]


def test_outcomes_sort_refusals_and_crashes(monkeypatch):
    import corpus_report

    from divclip.sanity.errors import ConfigError

    entry = _right_entry()
    for exc, outcome in [(ConfigError("no keys"), "refused"), (KeyError("clip_cov"), "crashed")]:

        def boom(*_, exc=exc, **__):
            raise exc

        monkeypatch.setattr("divclip.sanity.report.build_report", boom)
        got = corpus_report.read_entry(entry)
        assert got.outcome == outcome and got.error


def test_counts_add_up_to_the_corpus():
    fake = [
        dataclasses.replace(read_entry(_right_entry()), engine=e, outcome=o, unknown_keys=2)
        for e, o in zip(ENGINES * 2, OUTCOMES * 3, strict=False)
    ]
    table = counts(fake)
    assert sum(table["all"][o] for o in OUTCOMES) == len(fake) and table["all"]["unknown_keys"] == 2 * len(fake)
    assert all(table["all"][o] == sum(table[e][o] for e in ENGINES) for o in OUTCOMES)
    lines = render(table)
    assert lines[0].split()[: len(OUTCOMES) + 2] == ["engine", *OUTCOMES, "files"]
    assert lines[-1].split()[-2:] == [str(len(fake)), str(2 * len(fake))]
