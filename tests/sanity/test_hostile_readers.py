"""Hostile inputs to the config readers, third round (issue 36): each reads what the engine would receive, or
gives one clear line naming the input, or a warning naming what was not read; never a silent default."""

from __future__ import annotations

import textwrap

import pytest

from divclip.engines.config import read_config
from divclip.sanity import build_report
from divclip.sanity.errors import ConfigError
from divclip.sanity.settings import clip_settings

TRL = "from trl import GRPOConfig\n"


def _py(body: str) -> bytes:
    return (TRL + textwrap.dedent(body)).encode()


def _values(data: bytes, name: str = "c.py") -> dict:
    return read_config(data, name=name).values


def _not_read(data: bytes, name: str = "c.py") -> list[str]:
    report = build_report(data, config_name=name)
    return [w["message"] for w in report["warnings"] if w["code"] == "setting_not_read"]


# --------------------------------------------------------------------------------------------- Python
@pytest.mark.parametrize(
    "body, epsilon",
    [
        ("EPS = 0.3\nc = GRPOConfig(epsilon=EPS)\n", 0.3),
        ("c = GRPOConfig(epsilon=0.1 + 0.2)\n", 0.1 + 0.2),
        ("c = GRPOConfig(epsilon=2 * 0.15 / 1)\n", 2 * 0.15 / 1),
        ("c = GRPOConfig(**{'epsilon': 0.3})\n", 0.3),
        ("c = GRPOConfig(**dict(epsilon=0.3))\n", 0.3),
        ("d = dict(epsilon=0.3)\nc = GRPOConfig(output_dir=..., **d)\n", 0.3),
    ],
)
def test_a_value_python_computes_from_literals_is_read(body, epsilon):
    """Issue 36: these fell back to the default (ε = 0.2) in silence."""
    assert _values(_py(body))["epsilon"] == epsilon


def test_float_nan_is_read_and_named_by_typing():
    with pytest.raises(ConfigError, match=r"epsilon must be a finite number > 0.*got nan"):
        clip_settings(read_config(_py("c = GRPOConfig(epsilon=float('nan'), loss_type='dapo')\n"), name="c.py"))


@pytest.mark.parametrize(
    "body, named",
    [
        ("c = GRPOConfig(loss_type='dapo', epsilon=compute())\n", "epsilon=compute()"),
        ("c = GRPOConfig(loss_type='dapo', epsilon=args.eps)\n", "epsilon=args.eps"),
        ("EPS = 0.3\nEPS = 0.4\nc = GRPOConfig(loss_type='dapo', epsilon=EPS)\n", "epsilon=EPS"),
        ("c = GRPOConfig(loss_type='dapo', epsilon=2 ** 0.5)\n", "epsilon=2 ** 0.5"),
        ("c = GRPOConfig(loss_type='dapo', **kwargs)\n", "**kwargs in GRPOConfig(...)"),
    ],
)
def test_a_value_that_needs_running_code_is_named_in_a_warning(body, named):
    messages = _not_read(_py(body))
    assert messages == [
        f"line {2 + body.count(chr(10)) - 1}: {named} is not a literal: divclip does not run code, "
        "so it did not read it"
    ]


def test_a_file_whose_only_setting_needs_code_says_so():
    with pytest.raises(
        ConfigError, match=r"no settings divclip can read: line 2: epsilon=compute\(\) is not a literal"
    ):
        read_config(_py("c = GRPOConfig(epsilon=compute())\n"), name="c.py")


def test_keyword_arguments_of_other_calls_are_not_settings():
    """Issue 36: torch.nn.HuberLoss(delta=2.0) became TRL's delta (a dual clip c = 2); a nested dict(epsilon=1e-8)
    gave ε_low = 1e-8."""
    body = """
        import torch
        loss = torch.nn.HuberLoss(delta=2.0)
        opt = make_optimizer(lr=1e-6, **dict(epsilon=1e-8))
        c = GRPOConfig(epsilon=0.25, model_init_kwargs=dict(dtype="bfloat16"))
    """
    raw = read_config(_py(body), name="c.py")
    assert raw.values == {"epsilon": 0.25, "model_init_kwargs": {"dtype": "bfloat16"}}
    assert "HuberLoss(...) (its keyword arguments are not settings)" in raw.ignored_tokens
    s = clip_settings(raw)
    assert (s.budget_low, s.dual_clip_c) == (0.25, None)


@pytest.mark.parametrize(
    "body, match",
    [
        (
            "a = GRPOConfig(epsilon=0.2)\nb = GRPOConfig(epsilon=0.3)\n",
            r"calls GRPOConfig\(\.\.\.\) twice \(lines 2 and 3\)",
        ),
        ("c = GRPOConfig(epsilon=0.2, epsilon=0.3)\n", r"gives GRPOConfig\(\.\.\.\) the keyword 'epsilon' twice"),
        ("d = dict(epsilon=0.2)\nc = GRPOConfig(epsilon=0.3, **d)\n", r"sets 'epsilon' twice \(lines 2 and 3\)"),
        ("c = GRPOConfig(epsilon=" + "9" * 5000 + ")\n", r"is not valid Python: Exceeds the limit \(4300 digits\)"),
    ],
)
def test_what_python_or_the_run_would_refuse_is_refused(body, match):
    with pytest.raises(ConfigError, match=match):
        read_config(_py(body), name="c.py")


def test_a_python_config_is_capped_before_parsing():
    from divclip.engines.pyconfig import MAX_PYTHON_BYTES

    data = b"x = [" + b"1," * (MAX_PYTHON_BYTES // 2) + b"]\n"
    with pytest.raises(ConfigError, match=rf"over the {MAX_PYTHON_BYTES}-byte limit for a Python config"):
        read_config(data, name="c.py")


def test_the_exported_snippets_still_read():
    from divclip import engines

    for method in ("dapo", "atr", "kl3@clipfrac=0.1"):
        for engine in ("trl", "verl"):
            text = engines.write(method, engine).text("python").encode()
            assert _not_read(text, "stdin") == []
            assert build_report(text, config_name="stdin")["config"]["framework"] == engine


# ---------------------------------------------------------------------------------------------- shell
V = "actor_rollout_ref.actor."
VERL = "python3 -m verl.trainer.main_ppo"


def test_a_hash_inside_a_word_is_no_comment():
    """Issue 36: `--save /ckpt/run#1 --eps-clip 0.3` dropped the rest of the line (ε read 0.2)."""
    values = _values(b"python3 train.py --save /ckpt/run#1 --eps-clip 0.3 # a comment --eps-clip 0.9\n", "run.sh")
    assert values == {"--save": "/ckpt/run#1", "--eps-clip": 0.3}
    assert (
        clip_settings(
            read_config(b"python3 train.py --save /ckpt/run#1 --eps-clip 0.3\n", name="r.sh"), "slime"
        ).budget_low
        == 0.3
    )


@pytest.mark.parametrize(
    "script",
    [
        f"{VERL} {V}clip_ratio_high=0.28\ncat <<EOF\n{V}clip_ratio_high=0.9\nEOF\n",
        f"cat <<'EOF' > overrides.txt\n{V}clip_ratio_high=0.9\nEOF\n{VERL} {V}clip_ratio_high=0.28\n",
        f"cat <<-END\n\t{V}clip_ratio_high=0.9\n\tEND\n{VERL} {V}clip_ratio_high=0.28\n",
    ],
)
def test_a_heredoc_body_is_data_not_settings(script):
    """Issue 36: a heredoc holding clip_ratio_high=0.9 after the command beat the real value."""
    data = script.encode()
    assert _values(data, "run.sh") == {f"{V}clip_ratio_high": 0.28}
    [message] = _not_read(data, "run.sh")
    assert "the heredoc body (lines " in message and "is data the command reads, not settings" in message


def test_only_the_array_that_reaches_the_command_is_read():
    """Issue 36: arrays never expanded were still read, the last definition winning."""
    script = (
        b"CLIP=( --eps-clip 0.3 )\n"
        b"UNUSED=( --eps-clip-high 0.9 )\n"
        b'python3 train.py "${CLIP[@]}" --advantage-estimator grpo\n'
        b"CLIP=( --eps-clip 0.1 )\n"
    )
    assert _values(script, "run.sh") == {"--eps-clip": 0.3, "--advantage-estimator": "grpo"}
    assert _not_read(script, "run.sh") == [
        "line 2: the array UNUSED never reaches a command (no ${UNUSED[@]}): its words were not read"
    ]


@pytest.mark.parametrize(
    "script, values",
    [
        ('EPS=0.3\npython3 train.py --eps-clip "$EPS"\n', {"--eps-clip": 0.3}),
        ("python3 train.py --eps-clip ${EPS:-0.25}\n", {"--eps-clip": 0.25}),
        (
            "python3 train.py --eps-clip ${EPS:=0.25} --eps-clip-high $EPS\n",
            {"--eps-clip": 0.25, "--eps-clip-high": 0.25},
        ),
        (
            'FLAGS="--eps-clip 0.3 --eps-clip-high 0.4"\npython3 train.py $FLAGS\n',
            {"--eps-clip": 0.3, "--eps-clip-high": 0.4},
        ),
        (
            "A=( --eps-clip 0.3 )\nA+=( --eps-clip-high 0.4 )\npython3 train.py ${A[@]}\n",
            {"--eps-clip": 0.3, "--eps-clip-high": 0.4},
        ),
        ("python3 train.py --eps-clip '$EPS' 2>&1 | tee log.txt\n", {"--eps-clip": "$EPS"}),
    ],
)
def test_words_and_expansions_are_the_shells(script, values):
    got = _values(script.encode(), "run.sh")
    assert {k: v for k, v in got.items() if k.startswith("--")} == values


def test_a_dashed_flag_in_a_verl_command_is_named():
    """Issue 36: `--foo 3` in a verl (hydra) command was taken in silence; hydra's argparse refuses it."""
    report = build_report(f"{VERL} {V}clip_ratio_high=0.28 --foo 3 --config-name=ppo\n".encode(), config_name="r.sh")
    unknown = [w for w in report["warnings"] if w["code"] == "unknown_key"]
    assert [w["key"] for w in unknown] == ["--foo"] and "verl would refuse it" in unknown[0]["message"]


@pytest.mark.parametrize(
    "script, match",
    [
        ("python3 train.py --eps-clip '0.3\n", r"line 1\): no closing quotation \(\'\)"),
        ('python3 train.py --eps-clip "0.3\n', r'line 1\): no closing quotation \("\)'),
        ("A=( --eps-clip 0.3\n", r"line 1\): an array '\(' is never closed"),
        ("python3 train.py --eps-clip ${EPS:-0.3\n", r"line 1\): no closing '\}' in \$\{\.\.\.\}"),
        ("x=" + "${A:-" * 40 + "1" + "}" * 40 + "\n", r"line 1\): \$\{\.\.\.\} nested more than 32 deep"),
    ],
)
def test_a_script_the_shell_cannot_split_is_named(script, match):
    with pytest.raises(ConfigError, match=r"config 'r\.sh' cannot be split into shell words \(" + match):
        read_config(script.encode(), name="r.sh")


# ---------------------------------------------------------------------------------------------- Unicode
def test_a_file_name_that_is_not_utf8_prints_in_every_output(tmp_path):
    """Issue 36: a non-UTF-8 file name ended in "'utf-8' codec can't encode", naming nothing (a strict UTF-8
    stdout, as under an en_US.UTF-8 locale)."""
    import os
    import subprocess
    import sys

    path = tmp_path / os.fsdecode(b"c\xff.json")
    path.write_bytes(b'{"loss_type": "dapo", "epsilon": 0.2}')
    empty = tmp_path / os.fsdecode(b"e\xff.json")
    empty.write_bytes(b"")
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}
    for argv, code in [
        (["check", str(path)], 0),
        (["check", str(path), "--json"], 0),
        (["translate", str(path), "--to", "verl"], 0),
        (["check", str(empty)], 2),
    ]:
        run = subprocess.run([sys.executable, "-m", "divclip.cli", *argv], capture_output=True, text=True, env=env)
        assert run.returncode == code and "codec" not in run.stderr and "Traceback" not in run.stderr, argv
        assert "\\xff.json" in run.stdout + run.stderr, argv  # the byte shown, escaped as each output escapes


def test_the_display_name_shows_the_bytes():
    import os

    from divclip.engines.files import display_name

    assert display_name(os.fsdecode(b"run\xff\xfe.sh")) == "run\\xff\\xfe.sh"
    assert display_name("plain-é.yaml") == "plain-é.yaml" and display_name("x\ud800") == "x\\ud800"


def test_the_cli_names_unprintable_output_instead_of_the_codec(monkeypatch, capsys):
    import io
    import sys

    from divclip.cli import main

    strict = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    monkeypatch.setattr(sys, "stdout", strict)
    assert main(["export", "--method", "grpo", "--engine", "verl"]) == 0
    monkeypatch.setattr("divclip.engines.base.describe", lambda spec: "odd \udcff label")
    assert main(["export", "--method", "grpo", "--engine", "verl"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("divclip: error: cannot print ") and "\\udcff" in err and "codec" not in err
