"""`rollout_correction` against verl 0.9.1's own `compute_rollout_correction_and_rejection_mask`, in process.

For every rollout_is level and threshold form (TIS cap, IcePop band 'lo_hi'), batch normalisation on and off,
and every rollout_rs option with its threshold forms (k1 as 'lo_hi' and as a bare number, k2/k3 upper bounds),
alone and comma-combined: kept tokens identical, weights to 1e-12 in float64 (1e-6 in float32), and the metrics
in `METRIC_NAMES_VERL` equal to verl's under verl's names.
"""

import importlib.util
import itertools

import pytest
import torch

from divclip.theory.correction import RS_OPTIONS, Correction, Rejection, parse_correction
from divclip.theory.correction_apply import METRIC_NAMES_VERL, rollout_correction

pytestmark = pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="verl is not installed")


@pytest.fixture(scope="module")
def rc():
    return pytest.importorskip("verl.trainer.ppo.rollout_corr_helper")


def batch(dtype=torch.float64, seed=0, b=16, t=48, drift=0.05):
    """A bf16-like mismatch: π_rollout = π_old + noise, some heavier-tailed tokens, ragged lengths, one empty row."""
    g = torch.Generator().manual_seed(seed)
    old = torch.log_softmax(2.0 * torch.randn(b, t, 8, generator=g, dtype=torch.float64), -1)[..., 0]
    noise = drift * torch.randn(b, t, generator=g, dtype=torch.float64)
    noise += (torch.rand(b, t, generator=g, dtype=torch.float64) < 0.05) * torch.randn(
        b, t, generator=g, dtype=torch.float64
    )
    rollout = old + noise
    lengths = torch.randint(1, t + 1, (b, 1), generator=g)
    mask = (torch.arange(t)[None, :] < lengths).to(torch.float64)
    mask[1] = 0.0
    return old.to(dtype), rollout.to(dtype), mask.to(dtype)


def verl_call(rc, old, rollout, mask, **kw):
    proto, keep, metrics = rc.compute_rollout_correction_and_rejection_mask(old, rollout, mask, **kw)
    return (None if proto is None else proto.batch["rollout_is_weights"]), keep, metrics


def compare(rc, c: Correction, verl_kw: dict, dtype=torch.float64, **batch_kw):
    old, rollout, mask = batch(dtype, **batch_kw)
    w_ref, keep_ref, m_ref = verl_call(rc, old, rollout, mask, **verl_kw)
    w, keep, m = rollout_correction(old, rollout, mask, c)
    assert torch.equal(keep, keep_ref)
    assert keep.dtype == mask.dtype
    if w_ref is None:
        assert w is None
    else:
        tol = 1e-12 if dtype == torch.float64 else 1e-6
        scale = max(1.0, float(w_ref.abs().max()))
        assert float((w - w_ref).abs().max()) <= tol * scale
    checked = 0
    for ours, theirs in METRIC_NAMES_VERL.items():
        if ours in m:
            assert theirs in m_ref, (ours, theirs)
            assert m[ours] == pytest.approx(m_ref[theirs], rel=1e-9, abs=1e-12), (ours, theirs)
            checked += 1
    assert checked >= 3  # at least the three mismatch diagnostics
    return w, keep, m


IS_CASES = [
    ("token", 2.0),
    ("token", 1.05),
    ("sequence", 2.0),
    ("sequence", 5.0),
    ("token", "0.5_5.0"),
    ("token", "0.97_1.02"),
    ("sequence", "0.5_2.0"),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize(("level", "threshold"), IS_CASES)
def test_importance_weights_equal_verl(rc, level, threshold, normalize, dtype):
    if isinstance(threshold, str):
        lo, hi = map(float, threshold.split("_"))
        c = Correction(is_level=level, is_mode="mask", is_floor=lo, is_cap=hi, batch_normalize=normalize)
    else:
        c = Correction(is_level=level, is_cap=threshold, batch_normalize=normalize)
    kw = dict(rollout_is=level, rollout_is_threshold=threshold, rollout_is_batch_normalize=normalize)
    w, keep, m = compare(rc, c, kw, dtype)
    assert float(w.max()) > 0 and m["is_ess"] > 0  # never an all-zero comparison


def _threshold(option, seed):
    """A threshold that keeps some and drops some of `batch()` (k1 as 'lo_hi'; a bare number for seed 1)."""
    estimator, pooled = option.rsplit("_", 1)[1], option.split("_")[1]
    if estimator == "k1":
        scale = {"token": 0.06, "sum": 0.8, "mean": 0.03}[pooled if option.startswith("seq") else "token"]
        lo, hi = torch.exp(torch.tensor([-scale, scale])).tolist()
        return hi if seed == 1 else f"{lo!r}_{hi!r}"
    base = {"token": 0.002, "sum": 0.3, "mean": 0.004, "max": 0.05}
    return base["token" if option.startswith("token") else pooled] * (1.0 if estimator == "k2" else 1.1)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("option", RS_OPTIONS)
def test_each_rejection_option_equals_verl(rc, option, seed):
    thr = _threshold(option, seed)
    c = parse_correction(f"rs={option}:{thr}")
    w, keep, m = compare(rc, c, dict(rollout_is=None, rollout_rs=option, rollout_rs_threshold=thr), seed=seed)
    old, rollout, mask = batch(seed=seed)
    kept, valid = int(keep.sum()), int(mask.sum())
    assert 0 < kept < valid, (option, thr, kept, valid)  # the threshold really cuts
    assert 0.0 < m["rs_masked_fraction"] < 1.0


COMBOS = [
    ("token_k1,seq_mean_k3", "0.9_1.1,0.004"),
    ("seq_sum_k1,token_k3,seq_max_k2", "0.5_2.0,0.002,0.05"),
    ("token_k2,seq_mean_k2", "0.003"),  # one threshold shared by both options (verl broadcasts it)
]


@pytest.mark.parametrize(("options", "thresholds"), COMBOS)
@pytest.mark.parametrize(("level", "threshold"), [("token", 2.0), ("sequence", "0.5_5.0")])
def test_combined_rejection_and_weights_equal_verl(rc, options, thresholds, level, threshold):
    opts, thrs = options.split(","), thresholds.split(",")
    thrs = thrs * len(opts) if len(thrs) == 1 else thrs
    band = f"tis={threshold}" if not isinstance(threshold, str) else f"mask={threshold}"
    text = "/".join([f"is={level}:{band}"] + [f"rs={o}:{t}" for o, t in zip(opts, thrs, strict=True)])
    c = parse_correction(text)
    kw = dict(rollout_is=level, rollout_is_threshold=threshold, rollout_rs=options, rollout_rs_threshold=thresholds)
    w, keep, m = compare(rc, c, kw)
    single = [rollout_correction(*batch(), Correction(rejections=(r,)))[1] for r in c.rejections]
    assert torch.equal(keep, torch.stack(single).prod(0))  # AND of the rules
    assert any(not torch.equal(keep, s) for s in single)  # the combination differs from each single rule


def test_default_config_is_verls_sequence_tis(rc):
    """verl's RolloutCorrectionConfig default: rollout_is='sequence' at 2.0, no rejection."""
    from verl.trainer.config.algorithm import RolloutCorrectionConfig

    cfg = RolloutCorrectionConfig()
    c = Correction(is_level=cfg.rollout_is, is_cap=float(cfg.rollout_is_threshold))
    compare(rc, c, dict(rollout_is=cfg.rollout_is, rollout_is_threshold=cfg.rollout_is_threshold))


def test_extreme_log_ratios_stay_finite(rc):
    old, rollout, mask = batch()
    rollout = rollout.clone()
    rollout[0, :5] = old[0, :5] - 80.0  # ρ = e^80: clamped to e^20 before the cap
    rollout[2, :3] = old[2, :3] + 80.0
    c = parse_correction("is=sequence:tis=3.0/rs=token_k3:0.01/rs=seq_mean_k1:0.9_1.1")
    kw = dict(rollout_is="sequence", rollout_is_threshold=3.0, rollout_rs="token_k3,seq_mean_k1")
    kw["rollout_rs_threshold"] = "0.01,0.9_1.1"
    w_ref, keep_ref, _ = verl_call(rc, old, rollout, mask, **kw)
    w, keep, m = rollout_correction(old, rollout, mask, c)
    assert torch.isfinite(w).all() and all(torch.isfinite(torch.tensor(v)) for v in m.values())
    assert torch.equal(keep, keep_ref) and torch.allclose(w, w_ref, rtol=1e-12, atol=0)


def test_bf16_inputs_compute_in_float32(rc):
    old, rollout, mask = batch(torch.float32)
    c = parse_correction("is=token:tis=2.0/rs=token_k2:0.003")
    w, keep, _ = rollout_correction(old.bfloat16(), rollout.bfloat16(), mask, c)
    assert w.dtype == torch.float32 and keep.dtype == mask.dtype
    assert torch.isfinite(w).all()


@pytest.mark.parametrize("option", ["token_k3", "seq_max_k3"])
def test_threshold_that_masks_every_token_is_reported_not_raised(rc, option):
    old, rollout, mask = batch()
    w, keep, m = rollout_correction(old, rollout, mask, f"rs={option}:1e-12")
    assert int(keep.sum()) == 0 and m["kept_token_fraction"] == 0.0 and m["rs_masked_fraction"] == pytest.approx(1)


def test_bad_inputs_name_the_argument():
    old, rollout, mask = batch()
    with pytest.raises(ValueError, match="rollout_log_prob has shape"):
        rollout_correction(old, rollout[:, :3], mask, "is=token")
    with pytest.raises(ValueError, match="no valid token"):
        rollout_correction(old, rollout, torch.zeros_like(mask), "is=token")
    bad = rollout.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="rollout_log_prob contains NaN"):
        rollout_correction(old, bad, mask, "is=token")
    with pytest.raises(ValueError, match="pass advantages"):
        rollout_correction(old, rollout, mask, "opsm=0.5")
    with pytest.raises(ValueError, match="rs= takes one of"):
        rollout_correction(old, rollout, mask, "rs=seq_max_k1:2")


def test_every_rs_option_is_verls(rc):
    assert set(RS_OPTIONS) == rc.SUPPORTED_ROLLOUT_RS_OPTIONS


@pytest.mark.parametrize("option", RS_OPTIONS)
def test_rejection_rule_round_trips(option):
    r = Rejection(option, 1.1, 0.9) if option.endswith("k1") else Rejection(option, 0.01)
    for is_part in ("", "is=token:tis=2.0/", "is=sequence:mask=0.5_inf/"):
        c = parse_correction(f"{is_part}rs={r.option}:{r.threshold}/norm")
        assert parse_correction(str(c)) == c
        assert c.rejections == (r,)


def test_combinations_round_trip():
    parts = ["is=token:tis=1.5", "is=sequence:mask=0.5_5.0", "rs=token_k3:0.01", "rs=seq_mean_k1:0.999_1.001"]
    parts += ["norm", "opsm=0.5", "noclamp", "bypass"]
    for n in (1, 2, 3):
        for combo in itertools.combinations(parts, n):
            if sum(p.startswith("is=") for p in combo) > 1:
                continue
            c = parse_correction("/".join(combo))
            assert parse_correction(str(c)) == c, combo


def test_a_mask_that_zeroes_every_weight_gives_ess_zero():
    old, rollout, mask = batch()
    w, keep, m = rollout_correction(old, rollout, mask, "is=token:mask=50_60")
    assert float(w.abs().max()) == 0 and m["is_ess"] == 0.0 and m["kept_token_fraction"] == 0.0


def test_the_package_name_is_the_function_whatever_was_imported_first():
    import subprocess
    import sys

    code = (
        "from divclip.theory.correction_apply import METRIC_NAMES_VERL\n"
        "import divclip.theory as t, sys\n"
        "assert callable(t.rollout_correction) and t.rollout_correction.__name__ == 'rollout_correction'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
