"""The study's statistics against scipy (bootstrap, permutation test, t-test power) and closed forms."""

import math

import numpy as np
import pytest
from scipy import integrate, stats

from divclip.trainer import study_stats as st


def paired_sample(n, effect, seed, sd=1.0):
    rng = np.random.default_rng(seed)
    base = rng.normal(0.5, 0.2, n)
    return base + effect + rng.normal(0, sd, n), base


def test_bootstrap_interval_matches_scipy_percentile_bootstrap():
    x, y = paired_sample(12, 0.3, seed=1)
    ours = st.paired_bootstrap_ci(x, y, level=0.9, n_resamples=100_000, seed=3)
    ref = stats.bootstrap(
        (x, y),
        lambda a, b, axis=-1: np.mean(a - b, axis=axis),
        paired=True,
        vectorized=True,
        method="percentile",
        confidence_level=0.9,
        n_resamples=100_000,
        rng=np.random.default_rng(4),
    ).confidence_interval
    # two Monte Carlo estimates of the same quantiles: they agree to a small fraction of the spread
    spread = np.std(x - y) / math.sqrt(len(x))
    assert abs(ours[0] - ref.low) < 0.03 * spread and abs(ours[1] - ref.high) < 0.03 * spread


def test_bootstrap_interval_approaches_the_normal_interval_for_many_pairs():
    x, y = paired_sample(2000, 0.1, seed=2)
    lo, hi = st.paired_bootstrap_ci(x, y, level=0.95, n_resamples=20_000)
    d = x - y
    half = stats.norm.ppf(0.975) * d.std(ddof=1) / math.sqrt(len(d))
    assert lo == pytest.approx(d.mean() - half, abs=0.05 * half)
    assert hi == pytest.approx(d.mean() + half, abs=0.05 * half)


@pytest.mark.parametrize("n, effect", [(5, 0.5), (10, 0.4), (10, 0.0), (13, 1.0)])
def test_sign_flip_pvalue_equals_scipys_exact_permutation_test(n, effect):
    x, y = paired_sample(n, effect, seed=n)
    ref = stats.permutation_test(
        (x, y),
        lambda a, b, axis=-1: np.mean(a - b, axis=axis),
        permutation_type="samples",
        n_resamples=np.inf,
        alternative="two-sided",
        vectorized=True,
    ).pvalue
    assert st.sign_flip_pvalue(x, y) == pytest.approx(ref, rel=1e-9)


def test_sign_flip_pvalue_closed_forms():
    # every difference positive: only the all-plus and all-minus patterns are as extreme, p = 2 / 2^n
    assert st.sign_flip_pvalue(np.arange(1.0, 9.0), np.zeros(8)) == pytest.approx(2 / 2**8)
    assert st.sign_flip_pvalue(np.ones(6), np.ones(6)) == 1.0  # identical runs: nothing to detect
    # many pairs: the permutation test agrees with the paired t-test (both test the mean difference)
    x, y = paired_sample(40, 0.25, seed=5)
    assert st.sign_flip_pvalue(x, y, n_random=200_000) == pytest.approx(stats.ttest_rel(x, y).pvalue, abs=0.01)


def test_holm_against_the_step_down_by_hand():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, max(0.04·1, 0.06) = 0.06
    assert st.holm(p).tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert st.holm([0.5, 0.9]).tolist() == pytest.approx([1.0, 1.0])


def test_min_detectable_effect_has_the_asked_power():
    n, sd, alpha = 10, 0.05, 0.05 / 3
    mde = st.min_detectable_effect(sd, n, alpha, power=0.8)
    rng = np.random.default_rng(0)
    d = rng.normal(mde, sd, size=(20_000, n))  # 20000 studies whose true paired effect is the MDE
    rejected = stats.ttest_1samp(d, 0.0, axis=1).pvalue < alpha
    assert rejected.mean() == pytest.approx(0.8, abs=0.015)
    # many pairs: the normal-approximation closed form (z_{1-α/2} + z_{power}) σ / √n
    closed = (stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(0.8)) * sd / math.sqrt(5000)
    assert st.min_detectable_effect(sd, 5000, alpha) == pytest.approx(closed, rel=1e-3)
    assert math.isnan(st.min_detectable_effect(sd, 1))


def test_variance_ratio_pitman_morgan_closed_form():
    rng = np.random.default_rng(7)
    y = rng.normal(0, 1, 15)
    x = 0.6 * y + rng.normal(0, 0.5, 15)
    out = st.variance_ratio(x, y)
    F = np.var(x, ddof=1) / np.var(y, ddof=1)
    r = stats.pearsonr(x, y).statistic
    n = len(x)
    t = (F - 1) * math.sqrt(n - 2) / (2 * math.sqrt(F * (1 - r**2)))  # Pitman (1939), Morgan (1939)
    assert out["ratio"] == pytest.approx(F)
    assert out["p"] == pytest.approx(2 * stats.t.sf(abs(t), n - 2), rel=1e-9)
    assert out["ci_low"] < F < out["ci_high"]


def test_curve_summaries():
    steps = np.array([0, 10, 20, 40])
    acc = np.array([0.5, 0.7, 0.9, 0.8])
    assert st.area_under_curve(steps, acc) == pytest.approx(integrate.trapezoid(acc, steps) / 40)
    # gain 0.4, 90 % of it = 0.86: first reached at step 20
    assert st.steps_to_fraction(steps, acc, 0.9) == 20
    assert st.steps_to_fraction(steps, np.array([0.5, 0.4, 0.5, 0.3]), 0.9) == 0  # never above its start


def test_run_metrics_from_rows():
    rows = [
        {"step": 0, "eval/accuracy": 0.2, "eval/pass@4": 0.5},
        {"step": 1, "policy/entropy": 1.0, "clip/clipfrac": 0.1, "clip/clipfrac_low": 0.04, "reward/mean": 0.3},
        {
            "step": 2,
            "policy/entropy": 0.5,
            "clip/clipfrac": 0.2,
            "clip/clipfrac_low": 0.06,
            "reward/mean": 0.5,
            "eval/accuracy": 0.6,
            "eval/pass@4": 0.9,
            "eval/pass@1_sampled": 0.55,
        },
    ]
    m = st.run_metrics(rows)
    assert m["final_accuracy"] == 0.6 and m["final_pass_at_k"] == 0.9
    assert m["auc"] == pytest.approx(0.4) and m["steps_to_90"] == 2
    assert m["entropy_mean"] == pytest.approx(0.75) and m["entropy_final"] == 0.5
    assert m["clipfrac"] == pytest.approx(0.15) and m["clipfrac_low"] == pytest.approx(0.05)
    assert math.isnan(m["dual_clipfrac"]) and set(m) == set(st.RUN_METRICS)
    with pytest.raises(ValueError, match="no eval/accuracy"):
        st.run_metrics([{"step": 0}])


def test_compare_to_baseline_verdicts_and_levels():
    rng = np.random.default_rng(11)
    base = rng.normal(0.5, 0.05, 10)
    values = {
        "grpo": base,
        "same": base + rng.normal(0, 0.01, 10),
        "better": base + 0.1 + rng.normal(0, 0.01, 10),
    }
    rows = {r["method"]: r for r in st.compare_to_baseline(values, "grpo", alpha=0.05)}
    assert rows["better"]["verdict"] == "higher" and rows["better"]["ci_low"] > 0
    assert rows["same"]["verdict"] == st.NO_DIFFERENCE
    assert rows["same"]["ci_level"] == pytest.approx(1 - 0.05 / 2)
    ps = [rows["same"]["p"], rows["better"]["p"]]
    assert [rows["same"]["p_holm"], rows["better"]["p_holm"]] == pytest.approx(st.holm(ps).tolist())
    with pytest.raises(ValueError, match="baseline must be one of"):
        st.compare_to_baseline(values, "dapo")
    with pytest.raises(ValueError, match="finite"):
        st.compare_to_baseline({"grpo": base, "x": np.full(10, np.nan)}, "grpo")


def test_ratio_interval_matches_scipys_paired_bootstrap():
    x, y = paired_sample(10, 0.2, seed=9, sd=0.1)
    x, y = x + 2, y + 2  # means well away from 0
    ours = st.paired_ratio_ci(x, y, level=0.95, n_resamples=100_000, seed=1)
    ref = stats.bootstrap(
        (x, y),
        lambda a, b, axis=-1: np.mean(a, axis=axis) / np.mean(b, axis=axis),
        paired=True,
        vectorized=True,
        method="percentile",
        n_resamples=100_000,
        rng=np.random.default_rng(2),
    ).confidence_interval
    assert ours == pytest.approx((ref.low, ref.high), abs=2e-3)
