"""Asynchronous schedules judged as the engines run them (issue 31 item 3): SkyRL's fully async trainer and AReaL's
approximated proximal policy make the clipped ratio differ from 1 at the first update; the references are the
engines' own code (SkyRL's config dataclass, AReaL's `should_compute_prox_logp` and `ProxLogpMethod`, loaded in
process from the installed files without importing AReaL's package, which pulls its GPU stack)."""

from __future__ import annotations

import ast
import importlib.util
import sys
import types

import pytest

from divclip.engines import areal, skyrl
from divclip.engines.source import installed_file

A = "trainer.algorithm."


def test_skyrl_fully_async_is_off_policy_with_its_staleness_named():
    from skyrl_helpers import load

    load()  # SkyRL's package as its own tests load it (skyrl_helpers: the Tinker backend's import on 3.11)
    from skyrl.train.config import SkyRLTrainConfig

    cfg = SkyRLTrainConfig().trainer.fully_async
    base = {A + "policy_loss_type": "regular", "trainer.train_batch_size": 256, "trainer.policy_mini_batch_size": 256}
    sync = skyrl.read(base)
    assert sync.on_policy and sync.updates_per_batch == 1
    s = skyrl.read({**base, "trainer.fully_async.enabled": True})
    assert not s.on_policy and s.updates_per_batch == 1
    assert f"max_staleness_steps = {cfg.max_staleness_steps}" in s.on_policy_reason
    s = skyrl.read({**base, "trainer.fully_async.enabled": True, "trainer.fully_async.max_staleness_steps": 0})
    assert not s.on_policy and "max_staleness_steps = 0" in s.on_policy_reason  # rollout log-probs even so


@pytest.fixture(scope="module")
def areal_prox(tmp_path_factory):
    """AReaL's ProxLogpMethod (utils/constants.py) and PPOActorConfig.should_compute_prox_logp (api/cli_args.py),
    the installed code itself, run on a plain object."""
    spec = importlib.util.spec_from_file_location("_areal_constants", installed_file("areal", "utils/constants.py"))
    constants = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(constants)
    tree = ast.parse(installed_file("areal", "api/cli_args.py").read_text())
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "PPOActorConfig")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "should_compute_prox_logp")
    namespace: dict = {}
    stubs = {"areal": types.ModuleType("areal"), "areal.utils": types.ModuleType("areal.utils")}
    saved = {k: sys.modules.get(k) for k in (*stubs, "areal.utils.constants")}
    sys.modules.update(stubs)
    sys.modules["areal.utils.constants"] = constants
    exec(compile(ast.Module([fn], []), "cli_args.py", "exec"), namespace)
    yield constants, namespace["should_compute_prox_logp"]
    for k, v in saved.items():
        if v is None:
            sys.modules.pop(k, None)
        else:
            sys.modules[k] = v


def test_areals_prox_logp_methods_are_the_keys_choices(areal_prox):
    constants, _ = areal_prox
    key = areal.PROX_KEYS["actor.prox_logp_method"]
    assert set(key.choices) == set(constants.PROX_LOGP_METHODS_ALL)
    assert key.default == constants.PROX_LOGP_METHOD_RECOMPUTE


@pytest.mark.parametrize("decoupled", [True, False])
@pytest.mark.parametrize("recompute", [True, False])
@pytest.mark.parametrize("method", ["recompute", "loglinear", "metrics"])
def test_one_minibatch_is_on_policy_exactly_when_areal_recomputes_the_anchor(areal_prox, decoupled, recompute, method):
    _, should_compute = areal_prox
    config = types.SimpleNamespace(use_decoupled_loss=decoupled, recompute_logprob=recompute, prox_logp_method=method)
    s = areal.read(
        {
            "actor.ppo_n_minibatches": 1,
            "actor.use_decoupled_loss": decoupled,
            "actor.recompute_logprob": recompute,
            "actor.prox_logp_method": method,
        }
    )
    assert s.on_policy == should_compute(config)
    if decoupled and method == "loglinear":
        assert "approximated" in s.on_policy_reason
