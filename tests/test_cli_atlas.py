"""`divclip atlas`: the catalogue of every clip objective, in process through `divclip.cli.main` (and once as a
real subprocess). Engine coverage is read from the installed verl and TRL sources themselves: every policy loss
verl registers and every TRL loss_type must be a source of some atlas row."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from divclip.cli import main
from divclip.theory import gradient_weight, interval
from divclip.theory.atlas import Q_GRID
from divclip.theory.forms import FAMILIES, FORMS

# Engine modes whose forms other branches declare (forms_verl, forms_trl): allowed to be missing until those
# land; empty this set once they have (a mode listed here that is covered is fine, a missing one not listed fails).
PENDING = {
    "verl:gpg",
    "verl:clip_cov",
    "verl:kl_cov",
    "verl:geo_mean",
    "verl:dro",
    "verl:bypass_mode",
    "trl:luspo",
    "trl:vespo",
}


def run_main(capsys, argv):
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def _strict_json(text: str):
    def refuse(name):
        raise AssertionError(f"non-strict JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def listing():
    """The full `divclip atlas --json` document (built once: it fits every method's nearest budget)."""
    from divclip.cli.atlas import _jsonable
    from divclip.theory.atlas import catalogue

    return _strict_json(json.dumps(_jsonable({"methods": catalogue()}), allow_nan=False))


def _package_file(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None:
        pytest.skip(f"{package} is not installed")
    return Path(spec.submodule_search_locations[0], *parts)


def engine_modes() -> set[str]:
    """verl's registered policy losses and TRL's loss types, read from the installed packages' sources."""
    verl = _package_file("verl", "trainer", "ppo", "core_algos.py").read_text()
    modes = {f"verl:{m}" for m in re.findall(r'@register_policy_loss\("(\w+)"\)', verl)}
    trl = _package_file("trl", "trainer", "grpo_config.py").read_text()
    supported = re.search(r"Supported values are (.*?)\. ", trl.replace('"\n            "', ""), re.S).group(1)
    modes |= {f"trl:{m}" for m in re.findall(r"'(\w+)'", supported)}
    return modes


def test_engine_modes_are_read_from_the_engines():
    modes = engine_modes()
    assert len([m for m in modes if m.startswith("verl:")]) >= 12 and "verl:bypass_mode" in modes
    assert {f"trl:{m}" for m in ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")} <= modes


def test_every_engine_mode_is_in_the_atlas(listing):
    covered = {s for row in listing["methods"] for s in row["sources"]}
    missing = engine_modes() - covered - PENDING
    assert not missing, f"engine modes with no atlas row (add a Method or a Form source): {sorted(missing)}"


def test_every_row_is_complete(listing):
    rows = listing["methods"]
    names = [r["name"] for r in rows]
    assert len(names) == len(set(names))
    assert {"grpo", "dapo", "gspo", "sapo", "cispo", "dppo_kl", "dppo_tv", "verl:vanilla", "trl:dr_grpo"} <= set(names)
    for row in rows:
        assert row["family"] in FAMILIES and row["sources"] and row["form"] in FORMS, row["name"]
        if row["intervals"] is not None:
            assert row["intervals"]["q"] == list(Q_GRID)
            assert len(row["intervals"]["A>0"]) == len(row["intervals"]["A<0"]) == len(Q_GRID)
            never_binds = all(hi is None for _, hi in row["intervals"]["A>0"])  # ∞ is null in JSON
            assert never_binds or (row["nearest"]["distance"] >= 0 and row["nearest"]["measure"])
        else:
            assert row["nearest"] is None and row["weight_note"]
    for form in FORMS:  # every declared form is reachable: as a row, or through a named method using it
        assert any(row["form"] == form for row in rows), form


def test_intervals_and_weights_are_the_frames(capsys):
    code, out, _ = run_main(capsys, ["atlas", "--methods", "grpo,dppo_tv", "--at", "0.01,1.5", "--json"])
    assert code == 0
    doc = _strict_json(out)
    grpo, tv = doc["methods"]
    assert grpo["intervals"]["A>0"][1] == [0.0, 1.2] and grpo["intervals"]["A<0"][1] == [0.8, None]
    lo, hi = interval("dppo_tv", list(Q_GRID), 1)
    assert tv["intervals"]["A>0"] == [[a, b] for a, b in zip(lo.tolist(), hi.tolist())]
    assert tv["intervals"]["A>0"][3][1] == pytest.approx(1.0 + 0.2 / 0.5)  # binary TV: 1 + δ/q
    assert grpo["weights"] == [{"q": 0.01, "r": 1.5, "feasible": True, "A>0": 0.0, "A<0": 1.5}]
    assert tv["weights"][0]["A>0"] == float(gradient_weight("dppo_tv", 0.01, 1.5, 1.0)) == 1.5
    assert tv["nearest"]["measure"] == "binary_tv" and tv["nearest"]["equal"]
    assert {"name": "eps_low", "value": 0.2, "default": None, "doc": "lower clip width"} in grpo["parameters"]


def test_text_answers_the_newcomers_question(capsys):
    """'What does it do to a token with q = 0.01 and A > 0, next to GRPO?' in the text output."""
    code, out, _ = run_main(capsys, ["atlas", "--methods", "dapo,grpo", "--at", "0.01,1.25"])
    assert code == 0
    lines = out.splitlines()
    dapo_pos = next(line for line in lines if line.startswith("dapo") and "A>0" in line)
    grpo_pos = next(line for line in lines if line.startswith("grpo") and "A>0" in line)
    assert "[0, 1.28]" in dapo_pos and "[0, 1.2]" in grpo_pos
    w = next(line for line in lines if line.startswith("grpo") and "1.25" in line)
    assert w.split()[3:5] == ["0", "1.25"]  # clipped for A > 0, kept for A < 0
    assert "ratio ε=0.2 (equal)" in out and "kl3_reverse" in out
    assert "hard clip" in out and "arXiv:2503.14476" in out


def test_dcpo_next_to_grpo(capsys):
    if "dcpo" not in FORMS:
        pytest.skip("DCPO's form (forms_published) is not merged into this branch yet")
    code, out, _ = run_main(capsys, ["atlas", "--methods", "dcpo,grpo", "--at", "0.01,1.5"])
    assert code == 0
    lo, hi = interval("dcpo", 0.01, 1)
    line = next(x for x in out.splitlines() if x.startswith("dcpo") and "A>0" in x)
    assert f"{float(hi):.5g}" in line


def test_sequence_and_no_interval_rows_say_why(capsys):
    code, out, _ = run_main(capsys, ["atlas", "--methods", "sapo,gspo", "--at", "0.5,1.0"])
    assert code == 0
    assert "sapo: w = r·4σ(1 − σ)" in out and "none (no interval)" in out
    assert "sequence-level" in out


@pytest.mark.parametrize(
    "argv, match",
    [
        (["atlas", "--methods", "nope"], "method 'nope' is neither a named method"),
        (["atlas", "--methods", ","], "--methods must name at least one method"),
        (["atlas", "--at", "0,1"], "--at must be Q,R"),
        (["atlas", "--at", "0.5"], "--at must be Q,R"),
        (["atlas", "--methods", "grpo", "--at", "0.5,-1"], "--at must be Q,R"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, match):
    code, out, err = run_main(capsys, argv)
    assert code == 2 and out == ""
    assert err.startswith("divclip: error:") and match in err and err.count("\n") == 1


def test_subprocess_json():
    proc = subprocess.run(
        [sys.executable, "-m", "divclip.cli", "atlas", "--methods", "dapo,kl3:0.05", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    doc = _strict_json(proc.stdout)
    assert [m["name"] for m in doc["methods"]] == ["dapo", "kl3:0.05"]
    assert doc["methods"][1]["nearest"]["measure"] == "kl3" and doc["methods"][1]["nearest"]["equal"]


def test_a_token_with_q_times_r_above_one_is_marked_and_warned(capsys):
    """Issue 34: `--at 0.9,1.5` is q·r = 1.35, not a probability: the row says so and stderr warns; the keep
    interval at q = 0.9 marks GRPO's upper bound 1.2 > 1/0.9 as one that cannot bind."""
    assert main(["atlas", "--methods", "grpo", "--at", "0.9,1.5", "--at", "0.01,1.5"]) == 0
    out, err = capsys.readouterr()
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith("grpo ") and "1.5" in line}
    assert rows["0.9"].rstrip().endswith("q·r > 1") and "q·r" not in rows["0.01"]
    assert "--at 0.9,1.5: q·r = 1.35 > 1" in err and "0.01" not in err
    (pos,) = [line for line in out.splitlines() if line.startswith("grpo") and "A>0" in line]
    assert pos.count("[0, 1.2]*") == 2 and pos.count("[0, 1.2] ") == 4  # q = 0.9 and 0.99 only (1/q < 1.2)
    assert "the upper clip cannot bind" in out
    main(["atlas", "--methods", "grpo", "--json", "--at", "0.9,1.5"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["methods"][0]["weights"][0]["feasible"] is False


def test_a_method_typo_gets_one_short_line_with_the_nearest_name(capsys):
    for argv, near in (
        (["atlas", "--methods", "grpo,dapoo"], "'dapo'"),
        (["toy", "--methods", "grpo,atrr", "--out", "unused"], "'atr'"),
    ):
        code, _, err = run_main(capsys, argv)
        err = err.strip()
        assert code != 0
        assert f"did you mean {near}?" in err and len(err) < 400 and "\n" not in err, err
