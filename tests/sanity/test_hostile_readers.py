"""Hostile inputs to the config readers, third round (issue 36): each reads what the engine would receive, or
gives one clear line naming the input, or a warning naming what was not read; never a silent default."""

from __future__ import annotations

import textwrap

import pytest

from divclip.sanity import build_report
from divclip.sanity.config import read_config
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
    from divclip.sanity.pyconfig import MAX_PYTHON_BYTES

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
