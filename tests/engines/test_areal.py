"""AReaL 1.0.4: keys and defaults from the installed package's config dataclasses (read with ast), reads of its
YAML (the repository's own gsm8k_grpo.yaml), writes and round trips."""

import dataclasses
from pathlib import Path

import pytest

from divclip.engines import areal
from divclip.engines.config import parse_config_text, read_config
from divclip.engines.source import dataclass_fields, installed_file, nested_keys
from divclip.theory.spec import parse_method

FIXTURES = Path(__file__).parents[1] / "fixtures" / "engines" / "areal"


@pytest.fixture(scope="module")
def fields():
    return nested_keys(dataclass_fields(installed_file("areal", "api/cli_args.py").read_text()), "GRPOConfig")


def test_known_keys_snapshot_is_the_installed_config(fields):
    assert set(fields) == set(areal.known_keys())


def test_keys_and_defaults_are_the_installed_packages(fields):
    for key, k in areal.KEYS.items():
        f = fields[key]
        assert f.has_default and f.default == k.default, key
        assert f.annotation.split(" |")[0] == k.kind, key
        assert ("None" in f.annotation) == k.nullable, key
        if f.choices is not None:
            assert set(f.choices) == set(k.choices), key


def test_loss_function_keywords_are_the_installed_ones():
    """grpo_loss_fn passes exactly these actor fields to ppo_actor_loss_fn / sapo_loss_fn."""
    source = installed_file("areal", "trainer/ppo/actor.py").read_text()
    for name in (
        "eps_clip",
        "eps_clip_higher",
        "c_clip",
        "rejection_sampling",
        "importance_sampling_level",
        "use_sapo_loss",
        "sapo_tau_pos",
        "sapo_tau_neg",
        "use_decoupled_loss",
        "ppo_n_minibatches",
    ):
        assert f"self.config.{name}" in source, name


def test_repository_example_reads_as_an_on_policy_clip():
    r = areal.read(read_config(FIXTURES / "gsm8k_grpo.yaml").values)
    assert r.spec == parse_method("ratio:0.4/noclamp") and r.group_size == 4  # AReaL does not clamp log r
    assert (r.updates_per_batch, r.on_policy) == (1, True)  # one mini-batch against the recomputed π_prox
    assert {a.code for a in r.advice} == {"on_policy_clip_inert", "is_correction_threshold"}
    assert all(a.source.startswith("areal 1.0.4") for a in r.advice)
    assert r.unknown_keys == []


def test_inference_logprobs_sapo_sequence_and_typos():
    r = areal.read({"actor.ppo_n_minibatches": 1, "actor.c_clip": 3})
    assert r.spec == parse_method("grpo/dual=3/noclamp") and not r.on_policy
    assert [a.code for a in r.advice] == ["clip_on_inference_logprobs"]
    r = areal.read({"actor.use_sapo_loss": True, "actor.sapo_tau_neg": 2.0, "actor.eps_clip_high": 0.3})
    assert r.spec == parse_method("sapo/tau=1:2/noclamp") and r.unknown_keys == [
        ("actor.eps_clip_high", "actor.eps_clip_higher")
    ]
    r = areal.read(
        {"actor.importance_sampling_level": "sequence", "actor.eps_clip": "3e-4", "actor.eps_clip_higher": "4e-4"}
    )
    assert r.spec == parse_method("gspo/noclamp") and "sequence level" in str(r.differences[0])
    r = areal.read({"actor.rejection_sampling.upper": 2.0})
    assert "ignored_key" in {a.code for a in r.advice}


@pytest.mark.parametrize("method", ["grpo", "dapo", "atr", "gspo", "dapo/dual=3", "sapo"])
@pytest.mark.parametrize("fmt", areal.FORMATS)
def test_write_then_read_back_through_the_text(method, fmt):
    spec = parse_method(method)
    w = areal.write(spec)
    back = areal.read(parse_config_text(w.text(fmt), f"x.{'yaml' if fmt == 'yaml' else 'txt'}").values)
    assert back.unknown_keys == []
    if spec.form == "sapo":
        assert back.spec == dataclasses.replace(
            spec, params={**dict(spec.params), "clamp_log_ratio": False}
        )  # AReaL does not clamp log r
    else:
        assert back.spec.ratio_bounds() == pytest.approx(spec.ratio_bounds(), rel=1e-12)
        assert (back.spec.level, back.spec.param("dual_clip_c", None)) == (spec.level, spec.param("dual_clip_c", None))
    assert any("aggregation" in str(d) for d in w.differences) == (method in ("grpo", "gspo"))


@pytest.mark.parametrize(
    "method,missing",
    [("binary_kl:0.05", "no single ratio clip"), ("dppo_kl", "'gated'"), ("ratio:0.2:0.28/cispo", "'cispo'")],
)
def test_what_areal_cannot_express_is_named(method, missing):
    with pytest.raises(ValueError, match=missing):
        areal.write(parse_method(method))


def test_m2po_is_read_as_the_correction_and_eps_clip_zero_is_read():
    """AReaL's M2PO recipe (eps_clip 0 with m2_threshold) was refused as a width error (issue 31 item 4); its
    second-moment mask (areal/trainer/ppo/actor.py _apply_m2po_masking) is the rollout correction m2po= (with
    use_decoupled_loss; without it π_prox = π_old and the mask does nothing), and the clip is read beside it."""
    recipe = {"actor.eps_clip": 0.0, "actor.eps_clip_higher": 0.28, "actor.use_decoupled_loss": True}
    r = areal.read({**recipe, "actor.m2_threshold": 0.04})
    assert r.spec is not None and r.spec == areal.read(recipe).spec  # the clip, read as without M2PO
    assert (areal.read({"actor.eps_clip": 0.0}).budget_low, areal.read({"actor.eps_clip": 0.0}).budget_high) == (0, 0)
    assert any(n.startswith("actor.m2_threshold = 0.04: M2PO drops") and "m2po=0.04" in n for n in r.notes)
    r = areal.read({"actor.eps_clip": 0.0, "actor.m2_threshold": 0.04})
    assert any("has no effect without use_decoupled_loss" in n for n in r.notes)
    assert areal.read({"actor.eps_clip": 0.0, "actor.eps_clip_higher": 0.28}).spec == parse_method(
        "ratio:0:0.28/noclamp"
    )
    with pytest.raises(ValueError, match=r"actor.eps_clip must be a number >= 0 .* got -0.1"):
        areal.read({"actor.eps_clip": -0.1})
