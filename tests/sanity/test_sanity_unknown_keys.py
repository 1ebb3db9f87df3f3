"""Issue 26.2/26.3: a key the engine does not know is a warning naming the nearest known key; a config key
written without '=' is a warning, not a caption; a value aliased into billions of items is shown bounded."""

from __future__ import annotations

import json

import pytest
from sanity_helpers import sanity_page

from divclip.cli import main
from divclip.sanity import ConfigError, build_report

A = "actor_rollout_ref.actor."


def unknown(report):
    return [w for w in report["warnings"] if w["code"] == "unknown_key"]


def test_misspelled_verl_override_is_a_warning_naming_the_nearest_key_in_the_cli_json(capsys):
    assert main(["check", f"{A}clip_ratio_hgh=0.5", f"{A}ppo_epochs=2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    [w] = unknown(report)
    assert w["key"] == f"{A}clip_ratio_hgh" and f"did you mean '{A}clip_ratio_high'" in w["message"]
    assert "_generated_ppo_trainer.yaml" in w["source"]
    assert report["config"]["unknown_keys"] == [{"key": f"{A}clip_ratio_hgh", "nearest": f"{A}clip_ratio_high"}]


def test_any_verl_key_of_verls_own_config_is_known_not_only_the_ones_divclip_reads():
    report = build_report(
        None,
        overrides=[
            f"{A}optim.lr=1e-6",
            "trainer.total_epochs=3",
            f"{A}ppo_epochs=2",
            "+trainer.my_own_key=1",
            "actor_rollout_ref.model.override_config.x=1",
        ],
    )
    assert unknown(report) == []  # +key= adds on purpose; override_config is an open mapping in verl's config


def test_misspelled_yaml_and_trl_keys(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("actor_rollout_ref:\n  actor:\n    clip_ratio_low: 0.2\n    ppo_epoch: 2\n")
    [w] = unknown(build_report(f))
    assert w["key"] == f"{A}ppo_epoch" and f"'{A}ppo_epochs'" in w["message"]
    g = tmp_path / "args.json"
    g.write_text('{"epsilon": 0.2, "num_iteration": 2, "output_dir": "x"}')
    [w] = unknown(build_report(g))
    assert w["key"] == "num_iteration" and "'num_iterations'" in w["message"] and "GRPOConfig" in w["source"]


def test_trl_flags_are_read_with_either_spelling_and_unknown_flags_warned(tmp_path):
    f = tmp_path / "train.sh"
    f.write_text("accelerate launch train_grpo.py --num-iterations 2 --epsilon_high 0.28 --epsilonn 0.1\n")
    report = build_report(f)
    c = report["config"]
    assert c["framework"] == "trl" and c["kind"] == "flags" and c["epochs"] == 2 and c["budget_high"] == 0.28
    [w] = unknown(report)
    assert w["key"] == "epsilonn" and "'epsilon'" in w["message"]


def test_an_override_line_without_equals_is_a_warning_with_its_line(tmp_path):
    f = tmp_path / "run.sh"
    f.write_text(
        "python3 -m verl.trainer.main_ppo \\\n"
        f"    {A}ppo_epochs=2 \\\n"
        f"    {A}clip_ratio_high 0.28 \\\n"
        "    data.train_batch_size=512\n"
    )
    report = build_report(f)
    [w] = [w for w in report["warnings"] if w["code"] == "override_without_equals"]
    assert w["key"] == f"{A}clip_ratio_high" and f"{A}clip_ratio_high={0.28}" in w["message"]
    assert w["message"].startswith("line 1:")  # the logical line the continuation starts on
    assert report["config"]["keys"][f"{A}clip_ratio_high"]["origin"] == "default"  # really not read
    assert not any("verl.trainer.main_ppo" in x["message"] for x in report["warnings"])  # a module, not a key


@pytest.mark.slow
def test_the_page_shows_both_warnings():
    at = sanity_page(120).run()
    at.text_area(key="sanity_overrides").input(f"{A}clip_ratio_hgh=0.5 {A}ppo_epochs=2 {A}clip_ratio_low 0.1")
    at.run()
    assert not at.exception and not at.error
    shown = " ".join(w.value for w in at.warning)
    assert "unknown_key" in shown and f"{A}clip_ratio_high" in shown and "override_without_equals" in shown


def _alias_bomb(leaf_key: str) -> bytes:
    """31 YAML aliases doubling a list of 100 kB 15 times: 3 GB as a repr, a few kB as text."""
    lines = ['a0: &a0 ["' + "x" * 1000 + '"' + ', "y"' * 99 + "]"]
    for i in range(1, 16):
        lines.append(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]")
    lines.append(f"{leaf_key}: *a15")
    return ("\n".join(lines) + "\n").encode()


def test_an_aliased_huge_value_is_refused_with_a_bounded_one_line_message():
    with pytest.raises(ConfigError) as exc:
        build_report(_alias_bomb("actor_rollout_ref.actor.clip_ratio"), config_name="bomb.yaml")
    message = str(exc.value)
    assert "clip_ratio must be a finite number" in message and "(list)" in message
    assert len(message) < 400 and "\n" not in message


def test_an_aliased_huge_value_under_an_unknown_key_gives_a_small_report(capsys, tmp_path):
    f = tmp_path / "bomb.yaml"
    f.write_bytes(_alias_bomb("trainer.extra") + b"actor_rollout_ref:\n  actor:\n    ppo_epochs: 2\n")
    assert main(["check", str(f), "--json"]) == 0
    out = capsys.readouterr().out
    assert len(out) < 100_000
    assert {w["key"] for w in unknown(json.loads(out))} >= {"trainer.extra", "a0", "a15"}
