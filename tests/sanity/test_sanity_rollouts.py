"""Rollout reports: the predicted clip fractions and their breakdown against an independent numpy reference."""

import numpy as np
import pytest
import torch
from sanity_helpers import FIXTURES, jsonl_bytes, npz_bytes, parquet_bytes, random_batch, safetensors_bytes

from divclip.sanity import Limits, RolloutOptions, analyse_rollouts, build_report, load_rollouts
from divclip.sanity.errors import SanityInputError
from divclip.sanity.rollouts import DEFAULT_SIGMA, SIGNS
from divclip.theory import MEASURES
from divclip.theory.losses import ClipSpec

FRACTIONS = ("clipfrac", "clipfrac_low", "clipfrac_high", "dual_clipfrac")


def spec_of(entry, section):
    b = entry["budget"]
    common = {"params": {"dual_clip_c": section["dual_clip_c"]}, "level": section["level"]}
    if entry["measure"] == "ratio":
        return ClipSpec("ratio", eps_low=b["eps_low"], eps_high=b["eps_high"], **common)
    return ClipSpec(entry["measure"], delta=b["delta"], **common)


def reference_flags(entry, section, arrays):
    """Low/high clip flags from first principles in float64 numpy, independent of divclip's loss code: the
    ratio (token r = exp(clip(log r, ±20)), or GSPO's exp(min(masked mean log r, 10)) per sequence), the
    interval [lo, hi] from the budget the report states (per token at p = π_old for p-dependent measures), and
    the gradient rule: A < 0 and r < lo clips low, A > 0 and r > hi clips high. Also flags the tokens within
    1e-5 (relative) of a bound, where the float32 loss may round either way."""
    lp, old = arrays["log_prob"].astype(np.float64), arrays["old_log_prob"].astype(np.float64)
    adv, inside = arrays["advantages"].astype(np.float64), arrays["response_mask"] > 0
    log_r = lp - old
    if section["level"] == "sequence":
        mean = (log_r * inside).sum(-1) / np.maximum(inside.sum(-1), 1)
        r = np.broadcast_to(np.exp(np.minimum(mean, 10.0))[:, None], log_r.shape)
    else:
        r = np.exp(np.clip(log_r, -20.0, 20.0))
    m, b = MEASURES[entry["measure"]], entry["budget"]
    eps = np.finfo(arrays["log_prob"].dtype).eps
    if entry["measure"] == "ratio":
        lo, hi = 1.0 - min(b["eps_low"], 1.0), 1.0 + b["eps_high"]
    else:
        p = np.minimum(np.exp(old), 1.0 - eps) if m.p_dependent else None
        lo, hi = m.bounds(b["delta"], p)
    low, high = inside & (adv < 0) & (r < lo), inside & (adv > 0) & (r > hi)
    tol = 8 * eps  # r and p = π_old are rounded to the file's dtype in the loss
    near = inside & ((np.abs(r - lo) <= tol * np.abs(lo)) | (np.abs(r - hi) <= tol * hi))
    return low, high, near


def assert_matches_reference(section, arrays):
    """Headline fractions and the (p bucket, sign) breakdown agree with `reference_flags` token for token,
    up to the tokens that sit on a bound; returns how many measures were checked."""
    n, checked = section["n_tokens"], 0
    p_old = np.exp(arrays["old_log_prob"].astype(np.float64))
    for entry in section["measures"]:
        if entry["problem"]:
            continue
        low, high, near = reference_flags(entry, section, arrays)
        # Not vacuous: tokens clip well away from any bound. Ties are the float32 tokens with p = π_old within
        # 1e-6 of 1, whose whole binary-KL interval is narrower than float32's resolution of r.
        assert ((low | high) & ~near).sum() > 0 and near.sum() <= 0.2 * n, entry["measure"]
        for side, ref in (("low", low), ("high", high)):
            got = round(entry[f"clipfrac_{side}"] * n)
            assert abs(got - int(ref.sum())) <= int(near.sum()), (entry["measure"], side, got, int(ref.sum()))
            rows = entry["buckets"]
            for row in rows:
                lo_p, hi_p = (float(x) for x in row["p_bucket"].strip("[)]").split(", "))
                upper = p_old <= hi_p if row["p_bucket"].endswith("]") else p_old < hi_p
                sign = {
                    "A<0": arrays["advantages"] < 0,
                    "A=0": arrays["advantages"] == 0,
                    "A>0": arrays["advantages"] > 0,
                }[row["sign"]]
                cell = (p_old >= lo_p) & upper & sign
                assert abs(row[f"clipped_{side}"] - int((ref & cell).sum())) <= int((near & cell).sum()), (
                    entry["measure"],
                    side,
                    row,
                )
        assert entry["clipfrac"] == pytest.approx(entry["clipfrac_low"] + entry["clipfrac_high"], rel=1e-6)
        checked += 1
    return checked


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_predicted_fractions_match_an_independent_reference(tmp_path, dtype):
    arrays = random_batch(seed=1, dtype=dtype)
    path = tmp_path / "batch.npz"
    path.write_bytes(npz_bytes(**arrays))
    report = build_report(
        rollouts=path,
        overrides=["actor_rollout_ref.actor.clip_ratio_high=0.28", "actor_rollout_ref.actor.ppo_mini_batch_size=64"],
    )
    section = report["rollouts"]
    assert section["ratios"]["source"] == "file" and section["dual_clip_c"] == 3.0
    assert assert_matches_reference(section, arrays) == len(MEASURES)
    kl3 = next(e for e in section["measures"] if e["measure"] == "kl3")
    assert kl3["clipfrac"] > 0  # the batch is off-policy enough to clip: the test is not vacuous
    assert kl3["interval"][1] == pytest.approx(1.2308, abs=1e-4)


def test_sequence_level_fractions_match_an_independent_reference(tmp_path):
    arrays = random_batch(seed=2, sigma=0.02)
    path = tmp_path / "batch.npz"
    path.write_bytes(npz_bytes(**arrays))
    report = build_report(FIXTURES / "verl_gspo_ok.yaml", path)
    section = report["rollouts"]
    assert section["level"] == "sequence"
    skipped = {e["measure"] for e in section["measures"] if e["problem"]}
    assert skipped == {m.name for m in MEASURES.values() if m.p_dependent}
    assert assert_matches_reference(section, arrays) == len(MEASURES) - len(skipped)
    assert max(e["clipfrac"] for e in section["measures"] if not e["problem"]) > 0


def test_breakdown_adds_up_and_is_by_bucket_and_sign(tmp_path):
    arrays = random_batch(seed=3)
    section = analyse_rollouts(load_rollouts(npz_bytes(**arrays), "b.npz"), RolloutOptions(eps_high=0.28))
    n = section["n_tokens"]
    assert n == int(arrays["response_mask"].sum())
    assert sum(section["advantage_signs"].values()) == n and section["advantage_signs"]["A=0"] > 0
    for e in section["measures"]:
        rows = e["buckets"]
        assert {r["sign"] for r in rows} == set(SIGNS) and sum(r["tokens"] for r in rows) == n
        assert all(r["clipped_low"] == 0 for r in rows if r["sign"] != "A<0")  # the lower bound binds for A < 0
        assert all(r["clipped_high"] == 0 for r in rows if r["sign"] != "A>0")
        assert sum(r["clipped_low"] for r in rows) == round(e["clipfrac_low"] * n)


def test_sweep_at_the_configured_budget_matches_the_headline():
    from divclip.sanity.rollouts import _sweep

    arrays = random_batch(seed=4, dtype=np.float64)
    section = analyse_rollouts(load_rollouts(npz_bytes(**arrays), "b.npz"))
    inside = arrays["response_mask"] > 0
    ratio = np.exp(np.clip(arrays["log_prob"] - arrays["old_log_prob"], -20, 20))
    n = section["n_tokens"]
    for e in section["measures"]:
        series = section["sweep"]["measures"][e["measure"]]
        assert all(np.diff(series["clipfrac"]) <= 1e-12)  # a larger budget never clips more
        budget = e["budget"].get("delta", e["budget"].get("eps_low"))  # ratio: ε 0.2/0.2 is symmetric
        at = _sweep(
            spec_of(e, section),
            ratio,
            np.exp(arrays["old_log_prob"]),
            arrays["advantages"],
            inside,
            np.array([budget]),
            n,
        )
        assert round(at["clipfrac_low"][0] * n) == round(e["clipfrac_low"] * n), e["measure"]
        assert round(at["clipfrac_high"][0] * n) == round(e["clipfrac_high"] * n), e["measure"]


def test_noise_model_is_stated_seeded_and_used_without_log_prob():
    arrays = random_batch(seed=5, log_prob=False)
    r = load_rollouts(npz_bytes(**arrays), "b.npz")
    a = analyse_rollouts(r)
    assert a["ratios"]["source"] == "noise model" and a["ratios"]["sigma"] == DEFAULT_SIGMA
    assert "PREDICTED" in a["ratios"]["text"] and "N(0, σ²)" in a["ratios"]["text"]
    b = analyse_rollouts(r, RolloutOptions(seed=0))
    assert [e["clipfrac"] for e in a["measures"]] == [e["clipfrac"] for e in b["measures"]]
    wide = analyse_rollouts(r, RolloutOptions(sigma=0.3))
    kl3 = {s["measure"]: s["clipfrac"] for s in wide["measures"]}["kl3"]
    assert kl3 > {s["measure"]: s["clipfrac"] for s in a["measures"]}["kl3"]


def test_sigma_defaults_from_the_file_when_log_prob_is_present():
    arrays = random_batch(seed=6)
    a = analyse_rollouts(load_rollouts(npz_bytes(**arrays), "b.npz"))
    lr = (arrays["log_prob"].astype(np.float64) - arrays["old_log_prob"])[arrays["response_mask"] > 0]
    assert a["ratios"]["sigma_file"] == pytest.approx(float(np.std(lr)))
    forced = analyse_rollouts(load_rollouts(npz_bytes(**arrays), "b.npz"), RolloutOptions(sigma=0.1))
    assert forced["ratios"]["source"] == "noise model" and forced["ratios"]["sigma_file"] == a["ratios"]["sigma_file"]


def test_on_policy_file_warns():
    arrays = random_batch(seed=7)
    arrays["log_prob"] = arrays["old_log_prob"].copy()
    report = build_report(rollouts=npz_bytes(**arrays), rollouts_name="b.npz")
    assert [w["code"] for w in report["warnings"]] == ["rollouts_on_policy"]
    assert all(e["clipfrac"] == 0 for e in report["rollouts"]["measures"] if not e["problem"])


def test_every_format_gives_the_same_report():
    arrays = random_batch(seed=8, dtype=np.float64)
    mask = arrays["response_mask"] > 0
    rows = [{k: v[i][mask[i]].tolist() for k, v in arrays.items() if k != "response_mask"} for i in range(len(mask))]
    for row, adv in zip(rows, arrays["advantages"][:, 0]):
        row["advantages"] = float(adv)  # one advantage per sequence, broadcast by the loader
    columns = {k: [r[k] for r in rows] for k in rows[0]}
    sources = {
        "b.npz": npz_bytes(**arrays),
        "b.safetensors": safetensors_bytes(**arrays),
        "b.jsonl": jsonl_bytes(rows),
        "b.parquet": parquet_bytes(columns),
    }
    reports = {name: analyse_rollouts(load_rollouts(data, name)) for name, data in sources.items()}
    reference = [(e["measure"], e["clipfrac_low"], e["clipfrac_high"]) for e in reports["b.npz"]["measures"]]
    for name, rep in reports.items():
        assert [(e["measure"], e["clipfrac_low"], e["clipfrac_high"]) for e in rep["measures"]] == reference, name


def test_ragged_jsonl_fixture_pads_with_mask_zero():
    r = load_rollouts(FIXTURES / "rollouts_ragged.jsonl")
    assert r.shape == (3, 4) and r.n_tokens == 9
    assert r.response_mask.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    assert r.advantages[:, 0].tolist() == [1.0, -0.5, 0.0] and r.old_log_prob[1, 3] == 0


def test_bf16_safetensors_is_read_as_float32():
    arrays = {k: torch.as_tensor(v).to(torch.bfloat16) for k, v in random_batch(seed=9).items()}
    from safetensors.torch import save

    r = load_rollouts(save(arrays), "b.safetensors")
    assert r.old_log_prob.dtype == np.float32
    inside = arrays["response_mask"].float().numpy() > 0
    assert r.old_log_prob[inside].tolist() == arrays["old_log_prob"].float().numpy()[inside].tolist()
    assert (r.old_log_prob[~inside] == 0).all()  # padding is zeroed, never checked


def test_limits_are_checked_before_reading(tmp_path):
    data = npz_bytes(**random_batch(seed=10))
    with pytest.raises(SanityInputError, match="over the 1000-byte limit"):
        load_rollouts(data, "b.npz", Limits(max_bytes=1000))
    with pytest.raises(SanityInputError, match="over the 100-token limit"):
        load_rollouts(data, "b.npz", Limits(max_tokens=100))
    with pytest.raises(ValueError, match="max_bytes must be an integer"):
        Limits(max_bytes=0)
