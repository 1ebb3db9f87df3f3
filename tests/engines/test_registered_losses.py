"""A loss name none of the engine's: refused where the engine itself refuses it (a launch of its own entry point, a
bare config), read as not modelled where the launched program registers it (verl-recipe's gvpo main registers
"gvpo", SkyRL's custom_policy_loss example "reinforce") or a module verl's plug-in variable names may. Also a recipe
config that leaves `algorithm.adv_estimator` null (verl-recipe's sppo/spin trainers form their own advantages)."""

from __future__ import annotations

import pytest

from divclip.engines import get_engine
from divclip.sanity import build_report
from divclip.sanity.errors import SanityInputError

V = "actor_rollout_ref.actor."
GVPO = f"python3 -m {{entry}} {V}policy_loss.loss_mode=gvpo {V}clip_ratio_high=0.28 actor_rollout_ref.rollout.n=4\n"
SKYRL = "uv run -m {entry} trainer.algorithm.policy_loss_type=reinforce trainer.algorithm.eps_clip_high=0.28\n"


def _warned(report) -> list:
    return [w for w in report["warnings"] if w["code"] == "loss_registered_elsewhere"]


@pytest.mark.parametrize(
    "script, key, registrar",
    [
        (GVPO.format(entry="recipe.gvpo.gvpo_main_ppo"), f"{V}policy_loss.loss_mode", "recipe.gvpo.gvpo_main_ppo"),
        (
            "export VERL_USE_EXTERNAL_MODULES=my_pkg.losses\n" + GVPO.format(entry="verl.trainer.main_ppo"),
            f"{V}policy_loss.loss_mode",
            "one of the modules VERL_USE_EXTERNAL_MODULES names (my_pkg.losses)",
        ),
        (
            SKYRL.format(entry="examples.train.algorithms.custom_policy_loss.main_custom_policy_loss"),
            "trainer.algorithm.policy_loss_type",
            "examples.train.algorithms.custom_policy_loss.main_custom_policy_loss",
        ),
    ],
)
def test_a_loss_the_launched_program_registers_is_read_as_not_modelled(script, key, registrar):
    report = build_report(script.encode(), config_name="run.sh")
    config = report["config"]
    assert config["loss_mode"] in ("gvpo", "reinforce") and config["method"] is None
    assert config["keys"][key] == {"value": config["loss_mode"], "origin": "set"}
    (warning,) = _warned(report)
    assert warning["key"] == key and registrar in warning["message"] and "does not model" in warning["message"]
    assert "analysis" in warning["message"] and report["budget"] is not None  # the rest of the run is still read
    assert config["group_size"] in (4, 5)


@pytest.mark.parametrize(
    "script, key",
    [
        (GVPO.format(entry="verl.trainer.main_ppo"), f"{V}policy_loss.loss_mode"),  # verl's own main refuses it
        (f"{V}policy_loss.loss_mode=gvpo\n", f"{V}policy_loss.loss_mode"),  # a bare override list: nothing registers
        (SKYRL.format(entry="skyrl.train.entrypoints.main_base"), "trainer.algorithm.policy_loss_type"),
    ],
)
def test_a_loss_nothing_registers_is_refused_naming_the_key_and_the_engines_losses(script, key):
    with pytest.raises(SanityInputError, match=rf"{key} must be one of \['(vanilla|regular)'"):
        build_report(script.encode(), config_name="run.sh")


def test_a_registered_loss_that_is_a_typo_says_the_nearest():
    report = build_report(GVPO.format(entry="recipe.x.main").replace("=gvpo", "=vanila").encode(), config_name="r.sh")
    assert "(if 'vanila' is a typo, the nearest is 'vanilla')" in _warned(report)[0]["message"]


def test_a_null_advantage_estimator_is_read():
    read = get_engine("verl").read({"algorithm.adv_estimator": None, f"{V}clip_ratio_high": 0.28})
    assert read.kl["adv_estimator"] is None and read.keys["algorithm.adv_estimator"]["origin"] == "set"
    with pytest.raises(ValueError, match="algorithm.adv_estimator must be a string"):
        get_engine("verl").read({"algorithm.adv_estimator": 3})
