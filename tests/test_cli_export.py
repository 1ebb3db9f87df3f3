"""`divclip export`: the documented pipe into `divclip check`, every format, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from divclip.cli import main
from divclip.theory.spec import PRESETS

ATR_HI = 1.230842209784259


def cli(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "divclip.cli", *args], input=stdin, capture_output=True, text=True, timeout=120
    )


def test_export_atr_for_verl_checks_back_to_the_kl3_bounds_through_a_pipe_and_a_file(tmp_path, capsys):
    assert main(["export", "--method", "atr", "--engine", "verl"]) == 0
    text = capsys.readouterr().out
    assert "loss_mode=atr_kl3" in text and "VERL_USE_EXTERNAL_MODULES=divclip.trainer.integrations.verl" in text
    for target, stdin in (("/dev/stdin", text), ("-", text)):
        out = cli("check", target, "--json", stdin=stdin)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["config"]["ratio_bounds"] == [0.8, ATR_HI]
    f = tmp_path / "f"
    f.write_text(text)
    assert main(["check", str(f), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["config"]["ratio_bounds"] == [0.8, ATR_HI] and report["warnings"] == []


def test_pasting_two_blocks_leaves_only_the_second_in_force(capsys):
    """The issue's failure: DAPO then ATR (or DPPO then KL3) pasted together; now the last block wins whole."""
    blocks = []
    for method in ("dapo", "atr", "dppo_tv", "kl3:0.01"):
        assert main(["export", "--method", method, "--engine", "verl"]) == 0
        blocks.append(capsys.readouterr().out)
    for first, second in ((blocks[0], blocks[1]), (blocks[2], blocks[3])):
        tokens = [
            t
            for block in (first, second)
            for t in block.replace("\\\n", " ").split()
            if t.startswith("actor_rollout_ref.")
        ]
        merged = dict(t.split("=", 1) for t in tokens)  # hydra: the last override of a key wins
        alone = dict(t.split("=", 1) for t in second.replace("\\\n", " ").split() if t.startswith("actor_rollout_ref."))
        assert merged == alone


@pytest.mark.parametrize("method", sorted(PRESETS))
@pytest.mark.parametrize(
    "engine, fmt",
    [
        ("verl", "overrides"),
        ("verl", "yaml"),
        ("verl", "python"),
        ("trl", "python"),
        ("trl", "yaml"),
        ("trl", "overrides"),
    ],
)
def test_every_preset_exports_or_says_why_not(capsys, method, engine, fmt):
    code = main(["export", "--method", method, "--engine", engine, "--format", fmt])
    out, err = capsys.readouterr()
    if engine == "trl" and method.startswith("dppo"):
        assert code == 2 and out == "" and err.count("\n") == 1 and "TRL has no 'gated' loss form" in err
        return
    assert code == 0 and err == ""
    assert out.startswith(f"# {method} — ")
    if fmt == "yaml":
        tree = yaml.safe_load(out)
        assert isinstance(tree, dict) and tree
    if fmt == "python":
        compile(out, "<export>", "exec")  # valid Python (never executed here)
        if engine == "trl":
            assert "num_iterations" in out  # the on-policy warning travels with the settings


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--method", "js", "--engine", "verl"], "unknown method"),
        (["--method", "atr", "--engine", "vllm"], "invalid choice: 'vllm'"),
        (["--method", "atr", "--engine", "verl", "--format", "toml"], "invalid choice: 'toml'"),
        (["--method", "kl3/seq", "--engine", "verl"], ""),
    ],
)
def test_bad_arguments_exit_2_with_one_line(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        code = main(["export", *argv])
        raise SystemExit(code)
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and out == "" and err.count("\n") == 1 and message in err


@pytest.mark.parametrize("method", ["kl3:0.023144&binary_tv:0.05", "kl3@clipfrac=0.1:gain=0.5"])
def test_export_intersections_and_adaptive_delta_as_divclip_method_and_clip_method(method, capsys):
    """verl: loss_mode=divclip_method with the method string shell-quoted in DIVCLIP_METHOD (it parses back to
    the same spec); TRL: DivClipGRPOConfig(clip_method=...)."""
    import shlex

    from divclip.app.export import method_export
    from divclip.theory.spec import parse_method

    spec = parse_method(method)
    text = method_export(spec, "verl").text("overrides")
    words = shlex.split(text.replace("\\\n", " "), comments=True)
    env = dict(w.split("=", 1) for w in words if w.startswith("DIVCLIP_METHOD="))
    assert parse_method(env["DIVCLIP_METHOD"]) == spec
    assert "actor_rollout_ref.actor.policy_loss.loss_mode=divclip_method" in words
    trl = method_export(spec, "trl")
    assert trl.config_class == "DivClipGRPOConfig" and parse_method(trl.settings["clip_method"]) == spec
    assert main(["export", "--method", method, "--engine", "trl"]) == 0
    assert f"clip_method={trl.settings['clip_method']!r}" in capsys.readouterr().out


def test_export_refuses_an_entropy_target_for_verl(capsys):
    assert main(["export", "--method", "kl3@entropy=1", "--engine", "verl"]) == 2
    assert "verl does not hand the policy loss the entropy" in capsys.readouterr().err
