"""slime (snapshot 624b824a): KEYS against the excerpt of slime's own arguments.py at that commit, reads of its
launch script (the repository's own run-qwen3-4B.sh), writes and round trips."""

from pathlib import Path

import pytest

from divclip.engines import slime
from divclip.engines.launch import parse_launch
from divclip.engines.source import argparse_flags
from divclip.theory.spec import parse_method

FIXTURES = Path(__file__).parents[1] / "fixtures" / "engines" / "slime"
TYPES = {"float": "float", "int": "int", "str": "str", "bool": None}


def test_keys_types_and_defaults_are_slimes_at_the_pinned_commit():
    excerpt = (FIXTURES / "arguments_excerpt.txt").read_text()
    assert slime.COMMIT in excerpt.splitlines()[0]
    flags = argparse_flags(excerpt)
    assert set(flags) == set(slime.KEYS)
    for flag, key in slime.KEYS.items():
        found = flags[flag]
        assert found.type == TYPES[key.kind], flag
        assert found.default == key.default or (found.default is None and key.nullable), flag
        if found.choices is not None:
            assert set(found.choices) == set(key.choices), flag
        assert flag in slime.known_flags()


def test_repository_example_reads_as_dapo_clip_with_one_step():
    r = slime.read(parse_launch((FIXTURES / "run-qwen3-4B.sh").read_text()))
    assert r.spec == parse_method("dapo/noclamp") and r.loss_agg_mode == "seq-mean-token-mean"  # slime: no clamp
    assert (r.updates_per_batch, r.on_policy, r.group_size) == (1, True, 8)  # 32 × 8 samples / 256: one step
    assert [a.code for a in r.advice] == ["on_policy_clip_inert"] and slime.COMMIT in r.advice[0].source
    assert r.unknown_keys == []


def test_estimator_picks_the_loss_and_rollout_logprobs_break_on_policy():
    base = {"--rollout-batch-size": "32", "--n-samples-per-prompt": "8", "--global-batch-size": "64"}
    r = slime.read({**base, "--advantage-estimator": "gspo", "--eps-clip": "3e-4", "--eps-clip-high": "4e-4"})
    assert r.spec == parse_method("gspo/noclamp/seq_grad_mean=1") and r.updates_per_batch == 4 and not r.on_policy
    r = slime.read({**base, "--advantage-estimator": "cispo", "--eps-clip": "0.2", "--eps-clip-high": "4"})
    assert r.spec == parse_method("ratio:0.2:4/cispo/noclamp")
    assert "cispo_lower_bound_active" in {a.code for a in r.advice}
    r = slime.read({**base, "--global-batch-size": "256", "--use-rollout-logprobs": True, "--use-tis": True})
    assert not r.on_policy and "mismatch" in r.on_policy_reason
    assert "is_correction_threshold" in {a.code for a in r.advice}
    r = slime.read({"--eps-clip-c": "3", "--calculate-per-token-loss": True})
    assert r.spec == parse_method("grpo/dual=3/noclamp") and r.loss_agg_mode == "token-mean"
    assert r.updates_per_batch != r.updates_per_batch  # NaN: no batch sizes, steps unknown
    assert slime.read({"--loss-type": "sft_loss"}).spec is None


def test_typos_of_clip_flags_are_named_and_megatron_flags_are_not():
    r = slime.read({"--eps-clip-hgh": "0.28", "--recompute-num-layers": "1", "--tensor-model-parallel-size": "2"})
    assert r.unknown_keys == [("--eps-clip-hgh", "--eps-clip-high")]


@pytest.mark.parametrize("method", ["grpo", "dapo", "atr", "gspo", "dapo/dual=3", "ratio:1.0:4.0/cispo"])
def test_write_then_read_back_through_the_launch_text(method):
    spec = parse_method(method)
    w = slime.write(spec)
    back = slime.read(parse_launch(w.text()))
    assert back.spec.ratio_bounds() == pytest.approx(spec.ratio_bounds(), rel=1e-12)
    assert (back.spec.level, back.spec.param("dual_clip_c", None), back.spec.form) == (
        spec.level,
        spec.param("dual_clip_c", None),
        spec.form,
    )
    assert back.loss_agg_mode == ("token-mean" if method == "dapo" else "seq-mean-token-mean")


@pytest.mark.parametrize(
    "method,missing", [("binary_tv:0.2", "no single ratio clip"), ("sapo", "'sapo'"), ("dppo_tv", "'gated'")]
)
def test_what_slime_cannot_express_is_named(method, missing):
    with pytest.raises(ValueError, match=missing):
        slime.write(parse_method(method))


def test_a_custom_pg_loss_reducer_is_named_not_loaded():
    """issue 35: `--custom-pg-loss-reducer-function-path` replaced slime's reducer with "Warnings: none"."""
    r = slime.read({"--custom-pg-loss-reducer-function-path": "my_pkg.reducers:token_sum"})
    (found,) = [a for a in r.advice if a.code == "custom_reducer_not_modelled"]
    assert "my_pkg.reducers:token_sum" in found.message and "never loads or runs it" in found.message
    assert found.key == "--custom-pg-loss-reducer-function-path" and slime.COMMIT[:8] in found.source
    assert "custom_reducer_not_modelled" not in {a.code for a in slime.read({}).advice}
