"""TRL scripts read as TRL runs them (issue 31 items 2-3): the trainer a script builds its config for (GMPO, RLOO,
async GRPO) with that class's own defaults and fields, TrlParser scripts through the launch commands of their
docstring, and the settings beside the clip named. Defaults and fields are the installed TRL's own dataclasses."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from divclip.engines import trl as trl_engine
from divclip.sanity import build_report
from divclip.theory.spec import parse_method

trl = pytest.importorskip("trl")


def _classes():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trl.experimental warns on import
        from trl.experimental.async_grpo import AsyncGRPOConfig
        from trl.experimental.gmpo import GMPOConfig
    return {
        "GRPOConfig": trl.GRPOConfig,
        "GMPOConfig": GMPOConfig,
        "RLOOConfig": trl.RLOOConfig,
        "AsyncGRPOConfig": AsyncGRPOConfig,
        "ScriptArguments": trl.ScriptArguments,
        "ModelConfig": trl.ModelConfig,
        "DatasetMixtureConfig": trl.DatasetMixtureConfig,
    }


def _defaults(cls) -> dict:
    return {f.name: f.default for f in dataclasses.fields(cls)}


def test_each_trainers_defaults_are_its_installed_config_class():
    classes = _classes()
    for name, trainer in trl_engine.TRAINERS.items():
        if name == "DivClipGRPOConfig":
            continue
        installed = _defaults(classes[name])
        for key, value in trl_engine.TRAINER_DEFAULTS[trainer].items():
            assert installed[key] == value, (name, key)
        # every other default the reader uses is GRPOConfig's, and the class agrees where it has the field
        for key, spec in trl_engine.KEYS.items():
            if key in installed and key not in trl_engine.TRAINER_DEFAULTS[trainer]:
                assert installed[key] == spec.default, (name, key)


def test_the_trainer_fields_snapshot_is_the_installed_classes():
    classes = _classes()
    for name in ("RLOOConfig", "AsyncGRPOConfig"):
        assert trl_engine.trainer_fields(trl_engine.TRAINERS[name]) == {
            f.name for f in dataclasses.fields(classes[name])
        }
    gmpo = {f.name for f in dataclasses.fields(classes["GMPOConfig"])}
    grpo = {f.name for f in dataclasses.fields(classes["GRPOConfig"])}
    assert gmpo == grpo and trl_engine.trainer_fields("gmpo") >= grpo
    for name in trl_engine.PARSER_CLASSES:
        assert trl_engine.parser_fields([name]) == {f.name for f in dataclasses.fields(classes[name])}


def _report(text: str, name: str = "train.py") -> dict:
    return build_report(text.encode(), config_name=name)


def test_a_gmpo_config_is_read_as_gmpos_geometric_mean_with_its_log_space_widths():
    report = _report("from trl.experimental.gmpo import GMPOConfig\nargs = GMPOConfig(beta=0.0)\n")
    c = report["config"]
    eps = _defaults(_classes()["GMPOConfig"])["epsilon"]
    assert parse_method(c["method"]) == parse_method(f"ratio/geo_mean/gmpo_eps_low={eps!r}/gmpo_eps_high={eps!r}")
    assert c["loss_mode"] == "gmpo" and c["group_size"] == _defaults(_classes()["GMPOConfig"])["num_generations"]
    assert any("GMPOTrainer" in n and "log-space" in n for n in report["notes"])


def test_an_rloo_config_is_rloo_not_modelled_and_said():
    report = _report(
        "from trl import RLOOConfig\nargs = RLOOConfig(steps_per_generation=8, gradient_accumulation_steps=2)\n"
    )
    c = report["config"]
    installed = _defaults(trl.RLOOConfig)
    assert c["method"] is None and c["loss_mode"] == "rloo" and c["group_size"] == installed["num_generations"]
    assert c["updates_per_batch"] == 4 and c["on_policy"] is False
    assert any("RLOOTrainer" in n and "not modelled" in n for n in report["notes"])
    assert any(f"beta = {installed['beta']:g}" in n and "reward" in n for n in report["notes"])
    # a GRPOConfig-only field is one RLOOConfig refuses
    bad = _report("from trl import RLOOConfig\nargs = RLOOConfig(loss_type='dapo')\n")
    assert [w["key"] for w in bad["warnings"] if w["code"] == "unknown_key"] == ["loss_type"]


def test_async_grpo_is_off_policy_from_the_first_update():
    text = "from trl.experimental.async_grpo import AsyncGRPOConfig\nconfig = AsyncGRPOConfig(epsilon=0.2)\n"
    c = _report(text)["config"]
    staleness = _defaults(_classes()["AsyncGRPOConfig"])["max_staleness"]
    assert c["on_policy"] is False and f"max_staleness = {staleness}" in c["on_policy_reason"]
    assert c["method"] == "ratio:0.2:0.2/noclamp"


TRLPARSER = '''"""
pip install math_verify

Runs on the trainer's own data (it's quick):

```
accelerate launch \\
    --config_file examples/accelerate_configs/deepspeed_zero3.yaml \\
    examples/scripts/gspo.py \\
    --model_name_or_path Qwen/Qwen3-0.6B \\
    --importance_sampling_level sequence \\
    --epsilon 3e-4 \\
    --epsilon_high 4e-4 \\
    --my_reward_weight 2.0 \\
    --steps_per_generation 8 \\
    --gradient_accumulation_steps 2
```

python examples/scripts/gspo.py --epsilon 0.2 --num_generations 2
"""
from dataclasses import dataclass
from trl import GRPOConfig, ModelConfig, ScriptArguments, TrlParser


@dataclass
class MyArguments(ScriptArguments):
    my_reward_weight: float = 1.0


if __name__ == "__main__":
    types = (MyArguments, GRPOConfig, ModelConfig)
    parser = TrlParser(types)
    script_args, training_args, model_args = parser.parse_args_and_config()
'''


def test_a_trlparser_script_is_read_through_the_first_command_of_its_docstring():
    report = _report(TRLPARSER)
    c = report["config"]
    assert c["framework"] == "trl" and c["updates_per_batch"] == 4
    assert parse_method(c["method"]) == parse_method("ratio:3e-4:4e-4/seq/noclamp")
    # the script's own dataclass field and ModelConfig's are its parser's: no unknown-key warning
    assert not [w for w in report["warnings"] if w["code"] == "unknown_key"]
    rows = report["launches"]
    assert [r["summary"] for r in rows] == [True, False] and rows[1]["group_size"] == 2
    assert not [w for w in report["warnings"] if w["code"] == "several_launches"]  # examples, not two runs
    assert any("TrlParser((MyArguments, GRPOConfig, ModelConfig, ScriptArguments))" in n for n in report["notes"])
    typo = _report(TRLPARSER.replace("--epsilon_high", "--epsilon_hihg"))
    assert [w["key"] for w in typo["warnings"] if w["code"] == "unknown_key"] == ["epsilon_hihg"]


def test_a_trlparser_script_without_a_command_reads_the_defaults_and_says_so():
    text = TRLPARSER.split('"""', 2)[2]
    report = _report(text)
    assert report["config"]["method"] == "ratio:0.2:0.2/noclamp" and report["launches"] == []
    assert any("shows no launch command: read with the classes' defaults" in n for n in report["notes"])


def test_a_grpo_config_with_only_fields_the_clip_does_not_read_is_trls():
    text = "from trl import GRPOConfig\nargs = GRPOConfig(multi_objective_aggregation='normalize_then_sum')\n"
    assert _report(text)["config"]["framework"] == "trl"


def test_settings_beside_the_clip_are_named():
    text = "from trl import GRPOConfig\nargs = GRPOConfig(mask_truncated_completions=True, use_vllm=True)\n"
    notes = " ".join(_report(text)["notes"])
    assert "mask_truncated_completions = True" in notes and "left out of the loss" in notes
    assert "vLLM importance-sampling correction" in notes
