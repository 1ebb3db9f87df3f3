"""Across OpenRLHF, AReaL, SkyRL and slime: a verl GRPO recipe translates to each with the same clip or a named
difference, translate A -> B -> A is the identity on what both express, and detection picks the engine."""

import pytest

from divclip.engines import detect_engine, from_engine, get_engine, to_engine, translate
from divclip.engines.config import parse_config_text
from divclip.engines.launch import parse_launch
from divclip.theory.spec import parse_method

MINE = ("openrlhf", "areal", "skyrl", "slime")
VERL_GRPO = {
    "algorithm.adv_estimator": "grpo",
    "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-mean",
    "actor_rollout_ref.actor.clip_ratio_low": 0.2,
    "actor_rollout_ref.actor.clip_ratio_high": 0.2,
}


@pytest.mark.parametrize("engine", MINE)
def test_a_verl_grpo_recipe_translates_with_the_same_clip_or_a_named_difference(engine):
    source = from_engine("verl", VERL_GRPO)  # verl's vanilla: the dual clip at c = 3 is on by default
    settings, diffs = translate(VERL_GRPO, "verl", engine)
    back = from_engine(engine, settings)
    assert (
        back.ratio_bounds() == source.ratio_bounds()
        and back.param("dual_clip_c", None) == source.param("dual_clip_c", None) == 3.0
    )
    agg = get_engine(engine).read(settings).loss_agg_mode
    assert agg == "seq-mean-token-mean" or any("aggregation seq-mean-token-mean" in str(d) for d in diffs)


@pytest.mark.parametrize("engine", MINE)
@pytest.mark.parametrize("method", ["grpo", "dapo/dual=3", "atr", "gspo"])
def test_translate_there_and_back_is_the_identity_on_the_clip(engine, method):
    spec = parse_method(method)
    verl = to_engine(spec, "verl")
    there, _ = translate(verl, "verl", engine)
    back, _ = translate(there, engine, "verl")
    a, b = from_engine("verl", verl), from_engine("verl", back)
    assert b.ratio_bounds() == pytest.approx(a.ratio_bounds(), rel=1e-12)
    assert (b.level, b.param("dual_clip_c", None), b.form) == (a.level, a.param("dual_clip_c", None), a.form)


@pytest.mark.parametrize("engine", MINE)
def test_every_format_written_is_detected_and_read_back(engine):
    module = get_engine(engine)
    w = module.write(parse_method("dapo/dual=3"))
    for fmt in module.FORMATS:
        text = w.text(fmt)
        values = (
            parse_launch(text)
            if fmt == "launch"
            else parse_config_text(text, "x.yaml" if fmt == "yaml" else "x.txt").values
        )
        assert detect_engine(values) == engine, fmt
        assert module.read(values).spec.ratio_bounds() == parse_method("dapo").ratio_bounds()
