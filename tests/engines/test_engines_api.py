"""The package-level interface of divclip.engines: from_engine / to_engine / translate, unknown keys, errors."""

from __future__ import annotations

import dataclasses

import pytest

from divclip import engines
from divclip.theory.spec import PRESETS, parse_method

A = "actor_rollout_ref.actor."


def test_engine_names_and_modules():
    assert engines.ENGINES == ("verl", "trl", "openrlhf", "areal", "skyrl", "slime")
    for name in ("verl", "trl"):
        module = engines.get_engine(name)
        assert module.NAME == name and module.VERSION and module.DEFAULTS_FROM and module.KEYS and module.FORMATS
    with pytest.raises(ValueError, match="engine must be one of"):
        engines.get_engine("vllm")


def test_from_engine_reads_dapo_with_verls_default_dual_clip():
    spec = engines.from_engine("verl", {A + "clip_ratio_high": 0.28})
    assert spec == parse_method("dapo/dual=3")  # verl's vanilla always dual-clips at clip_ratio_c = 3.0


@pytest.mark.parametrize("engine", ["verl", "trl"])
@pytest.mark.parametrize("method", ["grpo", "dapo", "gspo", "sapo", "binary_kl:0.05", "dapo/dual=3"])
def test_from_engine_of_to_engine_is_the_same_spec(engine, method):
    spec = parse_method(method)
    if engine == "trl":  # TRL exponentiates the raw log-ratio: what it runs is the method without verl's ±20 clamp
        spec = dataclasses.replace(spec, params={**dict(spec.params), "clamp_log_ratio": False})
    back = engines.from_engine(engine, engines.to_engine(spec, engine))
    if engine == "verl" and spec.form == "sapo":  # verl's sapo aggregates seq-mean-token-mean whatever it is told:
        spec = dataclasses.replace(spec, params={"sapo_seq_mean": True})  # the spec read back says so
        assert engines.to_engine(spec, engine) == engines.to_engine(parse_method(method), engine)
    assert back == spec


def test_verl_unknown_key_names_the_nearest_known_key():
    read = engines.read("verl", {A + "clip_ratio_hgh": 0.5, A + "clip_ratio_low": 0.2})
    assert read.unknown_keys == [(A + "clip_ratio_hgh", A + "clip_ratio_high")]


def test_trl_cannot_express_a_dppo_mask():
    with pytest.raises(ValueError, match="TRL has no 'gated' loss form"):
        engines.to_engine(PRESETS["dppo_kl"], "trl")


def test_translate_verl_dapo_to_trl_and_back_is_the_identity_on_the_clip_and_aggregation():
    verl = {A + "clip_ratio_low": 0.2, A + "clip_ratio_high": 0.28, A + "loss_agg_mode": "seq-mean-token-mean"}
    trl, diffs = engines.translate(verl, "verl", "trl")
    assert trl["loss_type"] == "grpo" and trl["delta"] == 3.0
    # the clip and aggregation carry over; what TRL's defaults change in the batch structure is named
    assert [d.what for d in diffs] == [
        "group size (responses per prompt) 1 in the verl config",
        "optimizer updates per rollout batch 4 in the verl config",
    ]
    assert [d.nearest.split(";")[0] for d in diffs] == ["trl's default gives 8", "trl's default gives 1"]
    back, _ = engines.translate(trl, "trl", "verl")
    assert engines.read("verl", back).spec == engines.read("verl", verl).spec
    assert back[A + "loss_agg_mode"] == "seq-mean-token-mean"
