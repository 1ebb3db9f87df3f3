"""`divclip check --rollouts F` with the inference engine's log-probs: the "corrections" section and its warnings.

References: closed forms (the length trap: ρ_seq = exp(d·L), L = log C / d), numpy on the file's arrays, and
verl 0.9.1's own metrics on the shipped example (app/examples/rollouts_mismatch.jsonl, a bf16-vs-float32 mismatch).
"""

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from sanity_helpers import npz_bytes

from divclip.cli import main
from divclip.sanity import build_report
from divclip.sanity.errors import SanityInputError

EXAMPLE = Path(__file__).resolve().parents[2] / "app" / "examples" / "rollouts_mismatch.jsonl"
VERL = "algorithm.rollout_correction."


def drifting(tmp_path, drift=0.012, b=8, t=100, noise=0.0, seed=0, equal=False):
    """Sequences of t tokens whose log ρ = drift (+ noise) per token: the issue's length trap at 0.012 x 100."""
    g = np.random.default_rng(seed)
    old = np.log(g.uniform(0.05, 0.5, (b, t)))
    lr = drift + noise * g.standard_normal((b, t))
    rollout = old if equal else old - lr
    path = tmp_path / "drift.npz"
    arrays = dict(old_log_prob=old, rollout_log_prob=rollout, advantages=g.standard_normal((b, t)))
    path.write_bytes(npz_bytes(**arrays, response_mask=np.ones((b, t))))
    return path


def codes(report):
    return [w["code"] for w in report["warnings"]]


def test_sequence_length_trap_of_the_issue(tmp_path):
    """d = 0.012 over 100 tokens: ρ_seq = e^1.2 ≈ 3.32 > 3, so TRL's default sequence_mask masks every answer."""
    report = build_report(rollouts=drifting(tmp_path), corrections="is=sequence:mask=3.0/noclamp,is=sequence:tis=3.0")
    masked, capped = report["corrections"]["corrections"]
    assert report["corrections"]["mismatch"]["drift_mean_log_rho"] == pytest.approx(0.012, rel=1e-9)
    assert masked["kept_token_fraction"] == 0.0 and masked["kept_seq_fraction"] == 0.0
    assert masked["crossing_length"]["is_cap"] == pytest.approx(math.log(3.0) / 0.012, rel=1e-9)  # 91.55
    assert capped["weight"]["max"] == 3.0 and capped["kept_token_fraction"] == 1.0  # TIS caps, keeps
    assert "correction_masks_everything" in codes(report) and "correction_length_trap" in codes(report)
    assert any("92 tokens" in w["message"] for w in report["warnings"] if w["code"] == "correction_length_trap")


def test_numbers_match_numpy_on_the_file(tmp_path):
    path = drifting(tmp_path, drift=0.0, noise=0.05, b=16, t=30, seed=3)
    report = build_report(rollouts=path, corrections="is=token:tis=1.05,rs=token_k3:0.0003", max_masked=0.9)
    data = np.load(path)
    rho = np.exp(data["old_log_prob"] - data["rollout_log_prob"])
    tis, rs = report["corrections"]["corrections"]
    w = np.minimum(rho, 1.05)
    assert tis["weight"]["min"] == pytest.approx(w.min(), rel=1e-12)
    assert tis["weight"]["mean"] == pytest.approx(w.mean(), rel=1e-12)
    assert tis["weight"]["ess"] == pytest.approx(1 / np.mean((w / (w.mean() + 1e-8)) ** 2), rel=1e-9)
    k3 = rho - 1 - np.log(rho)
    assert rs["kept_token_fraction"] == pytest.approx((k3 <= 0.0003).mean(), abs=0)
    assert rs["kept_seq_fraction"] == pytest.approx((k3 <= 0.0003).all(-1).mean(), abs=0)
    mis = report["corrections"]["mismatch"]
    assert mis["k3"]["q90"] == pytest.approx(np.quantile(k3, 0.9), rel=1e-9)
    assert mis["k1"]["mean"] == pytest.approx(-np.log(rho).mean(), rel=1e-9, abs=1e-15)
    assert "correction_masks_most" not in codes(report)  # below the stated 90 %
    assert "correction_masks_most" in codes(build_report(rollouts=path, corrections="rs=token_k3:0.0003"))


def test_anchor_mistake_is_named(tmp_path):
    report = build_report(rollouts=drifting(tmp_path, equal=True), corrections="is=token")
    assert "correction_anchor" in codes(report)


def test_double_counting_in_bypass_mode(tmp_path):
    overrides = [f"{VERL}bypass_mode=true", f"{VERL}rollout_is=token", "actor_rollout_ref.actor.ppo_epochs=2"]
    report = build_report(rollouts=drifting(tmp_path, drift=0.001, noise=0.02), overrides=overrides)
    labels = [e["label"] for e in report["corrections"]["corrections"]]
    assert labels == ["config (verl)"]
    assert report["corrections"]["corrections"][0]["correction"] == "is=token:tis=2.0/bypass"
    assert "correction_double_counting" in codes(report)


def test_config_correction_is_checked_beside_the_given_ones(tmp_path):
    overrides = [f"{VERL}rollout_rs=seq_mean_k1", f"{VERL}rollout_rs_threshold=0.999_1.001"]
    report = build_report(rollouts=drifting(tmp_path, noise=0.01), overrides=overrides, corrections="is=token")
    labels = [e["label"] for e in report["corrections"]["corrections"]]
    assert labels == ["config (verl)", "is=token"]


def test_without_rollout_log_prob_the_corrections_are_a_note(tmp_path):
    path = tmp_path / "plain.npz"
    path.write_bytes(
        npz_bytes(old_log_prob=-np.ones((2, 3)), advantages=np.ones((2, 3)), response_mask=np.ones((2, 3)))
    )
    report = build_report(rollouts=path, corrections="is=token")
    assert report["corrections"] is None and any("no rollout_log_prob" in n for n in report["notes"])


def test_bad_requests_are_named(tmp_path):
    with pytest.raises(SanityInputError, match="give --rollouts"):
        build_report(overrides=["algorithm.adv_estimator=grpo"], corrections="is=token")
    with pytest.raises(SanityInputError, match="unknown part"):
        build_report(rollouts=drifting(tmp_path), corrections="is=token,tis=3")
    with pytest.raises(SanityInputError, match="max_masked"):
        build_report(rollouts=drifting(tmp_path), max_masked=0.0)


@pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="verl is not installed")
def test_shipped_example_against_verl(capsys):
    """The shipped bf16-vs-float32 file: divclip's numbers are verl's on the same tensors."""
    import torch
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    from divclip.sanity.loaders import load_rollouts

    assert main(["check", "--rollouts", str(EXAMPLE), "--corrections", "is=sequence:tis=2.0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    entry = report["corrections"]["corrections"][0]
    data = load_rollouts(EXAMPLE)
    t = [torch.from_numpy(a.astype(np.float64)) for a in (data.old_log_prob, data.rollout_log_prob, data.response_mask)]
    _, keep, m = compute_rollout_correction_and_rejection_mask(*t, rollout_is="sequence", rollout_is_threshold=2.0)
    assert entry["weight"]["ess"] == pytest.approx(m["rollout_corr/rollout_is_eff_sample_size"], rel=1e-9)
    assert report["corrections"]["mismatch"]["k3"]["mean"] == pytest.approx(m["rollout_corr/k3_kl"], rel=1e-9)
    # a real precision mismatch: small but nonzero on every sequence, symmetric about 0
    mis = report["corrections"]["mismatch"]
    assert 1e-3 < mis["std_log_rho"] < 0.1 and abs(mis["drift_mean_log_rho"]) < mis["std_log_rho"]
    assert mis["tokens"] == int(data.response_mask.sum()) > 1000


def test_text_output_has_the_corrections_table(capsys, tmp_path):
    assert main(["check", "--rollouts", str(drifting(tmp_path)), "--corrections", "is=sequence:mask=3.0"]) == 0
    out = capsys.readouterr().out
    assert "Rollout corrections on" in out and "is=sequence:mask=3.0" in out and "[correction_masks_everything]" in out


@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="trl is not installed")
def test_trl_default_that_differs_from_its_docstring(tmp_path):
    import inspect

    from trl import GRPOConfig

    doc = inspect.getdoc(GRPOConfig)
    if '"token_truncate"`: Token-level truncated IS (default)' not in doc:
        pytest.skip("this TRL's docstring no longer calls token_truncate the default")
    assert GRPOConfig.__dataclass_fields__["vllm_importance_sampling_mode"].default == "sequence_mask"
    config = tmp_path / "grpo.json"
    config.write_text(json.dumps({"use_vllm": True, "loss_type": "dapo", "num_iterations": 2}))
    report = build_report(config)
    assert report["config"]["correction"] == "is=sequence:mask=3.0/noclamp"
    assert any(n.startswith("[correction_default_differs]") for n in report["notes"])
    config.write_text(json.dumps({"use_vllm": True, "vllm_importance_sampling_mode": "token_truncate"}))
    report = build_report(config)
    assert report["config"]["correction"] == "is=token:tis=3.0/noclamp"
    assert not any("correction_default_differs" in n for n in report["notes"])
    config.write_text(json.dumps({"loss_type": "dapo", "num_iterations": 2}))
    assert build_report(config)["config"]["correction"] is None  # no vLLM, no correction


def test_areal_sequence_filter_on_the_sum_has_the_same_length_trap(tmp_path):
    """AReaL's filter=sequence:ratio:sum bounds Π ρ_t = exp(d·L): at d = 0.012 it leaves [0.5, 3] at
    L = log 3 / 0.012 and masks every 100-token answer; its kl_k2 sum crosses δ at δ / (d²/2) tokens."""
    report = build_report(
        rollouts=drifting(tmp_path),
        corrections="filter=sequence:ratio:sum:mask:0.5_3.0,filter=sequence:kl_k2:sum:mask:0.005,"
        "filter=sequence:ratio:mean:mask:0.5_3.0",
    )
    ratio, k2, mean = report["corrections"]["corrections"]
    assert ratio["crossing_length"]["filter"] == pytest.approx(math.log(3.0) / 0.012, rel=1e-9)
    assert ratio["kept_token_fraction"] == 0.0
    assert k2["crossing_length"]["filter"] == pytest.approx(0.005 / (0.012**2 / 2), rel=1e-9)  # 69.4 tokens
    assert k2["kept_token_fraction"] == 0.0
    assert mean["crossing_length"] == {} and mean["kept_token_fraction"] == 1.0  # the geometric mean: no trap
    assert mean["weight"]["max"] == pytest.approx(math.exp(0.012), rel=1e-9)
