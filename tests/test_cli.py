"""The divclip command line: outputs equal the library's numbers; bad input exits non-zero with a message."""

import json
import math
import shutil
import subprocess
import sys

import pytest

from divclip.cli import main
from divclip.theory import delta_for_eps, get_measure, kl3_bounds


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_bounds_json_has_the_documented_keys_and_values(capsys):
    code, out, _ = run(capsys, "bounds", "--measure", "kl3", "--eps-low", "0.2", "--json")
    assert code == 0
    data = json.loads(out)
    assert set(data) == {"measure", "delta", "p", "lo", "hi", "eps_low", "eps_high"}
    assert data["delta"] == delta_for_eps("kl3", eps_low=0.2)
    assert (data["lo"], data["hi"]) == kl3_bounds(data["delta"])
    assert data["eps_high"] == pytest.approx(0.23084, abs=1e-5)


@pytest.mark.parametrize("delta", ["1e-300", "1e-10", "745", "1e4", "1e300"])
def test_bounds_json_is_strict_json_with_null_for_an_overflowing_bound(capsys, delta):
    """KL3-reverse's upper bound 1/l_δ overflows for δ > 708.8: --json prints null there, never NaN/Infinity."""
    for measure in ("kl3", "kl3_reverse"):
        code, out, _ = run(capsys, "bounds", "--measure", measure, "--delta", delta, "--json")
        assert code == 0
        assert "NaN" not in out and "Infinity" not in out
        data = json.loads(out)
        lo, hi = get_measure(measure).bounds(float(delta))
        assert data["lo"] == lo and data["hi"] == (hi if math.isfinite(hi) else None)
        assert (data["hi"] is None) == (measure == "kl3_reverse" and float(delta) > 708.8)
        assert data["eps_low"] == pytest.approx(1 - lo, rel=1e-9, abs=1e-15)


def test_bounds_binary_kl_with_p(capsys):
    code, out, _ = run(capsys, "bounds", "--measure", "binary_kl", "--delta", "0.02", "--p", "0.01", "--json")
    assert code == 0
    data = json.loads(out)
    assert (data["lo"], data["hi"]) == get_measure("binary_kl").bounds(0.02, 0.01)


def test_bounds_text_and_eps_high(capsys):
    code, out, _ = run(capsys, "bounds", "--measure", "kl3", "--eps-high", "0.28")
    assert code == 0
    delta = delta_for_eps("kl3", eps_high=0.28)
    assert f"{delta:.10g}" in out


def test_measures_table_lists_every_measure(capsys):
    code, out, _ = run(capsys, "measures")
    assert code == 0
    from divclip.theory import MEASURES

    for name in MEASURES:
        assert name in out
    code, out, _ = run(capsys, "measures", "--json")
    assert {row["name"] for row in json.loads(out)} == set(MEASURES)


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["bounds", "--measure", "kl4", "--delta", "0.1"], "measure must be one of"),
        (["bounds", "--measure", "kl3", "--delta", "-1"], "delta must be a finite number > 0, got -1.0"),
        (["bounds", "--measure", "kl3", "--delta", "0"], "delta must be a finite number > 0"),
        (["bounds", "--measure", "binary_kl", "--delta", "0.1"], "p is required"),
        (["bounds", "--measure", "binary_kl", "--delta", "0.1", "--p", "1.5"], "open interval (0, 1), got 1.5"),
        (["bounds", "--measure", "kl3"], "exactly one of --delta"),
        (["bounds", "--measure", "kl3", "--eps-low", "1.2"], "eps_low must lie in (0, 1)"),
    ],
)
def test_bad_input_exits_2_with_a_named_message(capsys, argv, needle):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert needle in err


@pytest.mark.parametrize("value", ["nan", "inf", "abc"])
def test_non_finite_numbers_are_refused_by_the_parser(capsys, value):
    with pytest.raises(SystemExit) as exc:
        main(["bounds", "--measure", "kl3", "--delta", value])
    assert exc.value.code == 2
    assert "--delta must be" in capsys.readouterr().err


def test_console_script_is_installed():
    exe = shutil.which("divclip") or str(__import__("pathlib").Path(sys.executable).with_name("divclip"))
    proc = subprocess.run(
        [exe, "bounds", "--measure", "kl3", "--delta", "0.02", "--json"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hi"] == kl3_bounds(0.02)[1]


def test_derive_prints_every_step_with_a_passed_check(capsys):
    from divclip.theory import symbolic

    code, out, _ = run(capsys, "derive", "kl3", "--format", "markdown")
    assert code == 0
    steps = symbolic.derivation("kl3")
    for step in steps:
        assert step.title in out
    assert out.count("check (symbolic): PASSED") + out.count("check (numeric): PASSED") == len(steps)
    assert "check (numeric)" in out and "check (symbolic)" in out  # each check says which kind it is
    assert "FAILED" not in out


def test_derive_unknown_measure_exits_2(capsys):
    code, _, err = run(capsys, "derive", "binary_kl")
    assert code == 2
    assert "binary_kl" in err and "kl3" in err


def test_every_subcommand_module_registers_the_same_way():
    from divclip.cli import SUBCOMMANDS, build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction))
    names = [m.__name__.rsplit(".", 1)[1] for m in SUBCOMMANDS]
    assert list(sub.choices) == names
    for module in SUBCOMMANDS:
        assert sub.choices[module.__name__.rsplit(".", 1)[1]].get_default("run") is module.run


def test_the_parser_loads_no_torch_and_lists_every_subcommand():
    code = (
        "import sys; from divclip.cli import build_parser; print(build_parser().format_help()); "
        "print('torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-1] == "False"
    for name in ("measures", "bounds", "derive", "realloc", "check", "export", "toy", "train"):
        assert name in proc.stdout


@pytest.mark.parametrize(
    "argv, needle",
    [
        (
            ["bounds", "--measure", "kl3", "--delta", "nan"],
            "argument --delta: --delta must be a finite number, got 'nan'",
        ),
        (["check", "--engine", "jax"], "argument --engine/--framework: invalid choice: 'jax'"),
        (["check", "--framework", "jax"], "argument --engine/--framework: invalid choice: 'jax'"),
        (["nope"], "argument command: invalid choice: 'nope'"),
        ([], "the following arguments are required: command"),
    ],
)
def test_argument_errors_are_one_line_exit_2(capsys, argv, needle):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.count("\n") == 1 and err.startswith("divclip: error: ") and needle in err


def test_realloc_help_shows_the_library_defaults(capsys):
    from divclip.theory.reallocation import DEFAULT_EPOCHS, DEFAULT_LR, MAX_ACTIONS
    from divclip.theory.softmax_dynamics import MAX_EPOCHS

    with pytest.raises(SystemExit) as exc:
        main(["realloc", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert exc.value.code == 0
    assert f"PPO epochs on one batch ({DEFAULT_EPOCHS}; at most {MAX_EPOCHS})" in out
    assert f"on the logits ({DEFAULT_LR};" in out and f"(2 to {MAX_ACTIONS} actions)" in out
    assert "bucket edges (0,0.2,0.5,1)" in out and "'kl3'" in out and "'atr'" in out


@pytest.mark.slow
def test_python_dash_m_entry_points_are_the_same_cli():
    for module in ("divclip.cli", "divclip.trainer"):
        proc = subprocess.run(
            [sys.executable, "-m", module, "bounds", "--measure", "kl3", "--delta", "0.02", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["hi"] == kl3_bounds(0.02)[1]
    proc = subprocess.run(
        [sys.executable, "-m", "divclip.trainer", "train", "--group-size", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("divclip: error: TrainerConfig.group_size")


def test_realloc_form_flag_and_its_old_name(capsys):
    """`--form` picks the loss form of a bare measure; `--mode`, its old name, is kept for one release and gives the
    same run; both are the method string 'kl3:0.05/cispo', read by the parser instead of the flags."""
    base = ["realloc", "--probs", "0.3,0.7", "--adv=1,-1", "--json"]
    outs = []
    for extra in (
        ["--measure", "kl3", "--delta", "0.05", "--form", "cispo"],
        ["--measure", "kl3", "--delta", "0.05", "--mode", "cispo"],
        ["--measure", "kl3:0.05/cispo"],
    ):
        code, out, _ = run(capsys, *base, *extra)
        assert code == 0
        outs.append(json.loads(out))
    assert outs[0] == outs[1] == outs[2]
    assert outs[0]["spec"] == "kl3 δ=0.05 cispo"
    code, out, _ = run(capsys, *base, "--measure", "kl3", "--delta", "0.05")
    assert json.loads(out)["spec"] == "kl3 δ=0.05" and json.loads(out) != outs[0]
