"""The statistics of a study, from the runs' own metrics.jsonl rows (pure numpy/scipy; no torch).

Per run (`run_metrics`): the final held-out accuracy and pass@k, the area under the learning curve, the steps to
90 % of the run's gain, the entropy over training and the clip fractions by side. Across seeds, each method is
compared with the baseline on the SAME seeds (same warm start, same prompts at every step), so every comparison
is paired (`compare_to_baseline`):

* the mean paired difference d̄ = mean_s (x_s − y_s) with a percentile bootstrap interval over seeds, at the
  Bonferroni level 1 − α/m for m comparisons (so all m intervals hold at once with probability ≥ 1 − α);
* an exact sign-flip permutation test of d̄ = 0 (all 2^n sign patterns for n ≤ 16 seeds), its p-values
  adjusted for the m comparisons by Holm's step-down method; the verdict is "higher"/"lower" when the adjusted
  p < α, otherwise "no difference detectable";
* the smallest effect a paired t-test at level α/m detects with 80 % power at this n and this spread of the
  differences (`min_detectable_effect`, from the noncentral t distribution).

Variances over seeds (`variance_ratio`): var(x)/var(y) with a paired bootstrap interval and the Pitman-Morgan test
(paired samples have equal variances exactly when x + y and x − y are uncorrelated).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy import stats

NO_DIFFERENCE = "no difference detectable"
EXACT_SIGN_FLIP_MAX_N = 16
"""Up to this many seeds the sign-flip test enumerates all 2^n sign patterns; above, 20000 random ones."""
RUN_METRICS = (
    "final_accuracy",
    "final_pass_at_k",
    "auc",
    "steps_to_90",
    "entropy_mean",
    "entropy_final",
    "clipfrac",
    "clipfrac_low",
    "clipfrac_high",
    "dual_clipfrac",
    "reward_mean",
)
"""What `run_metrics` returns for every run (NaN where the run's log has no such number)."""


# ------------------------------------------------------------------------------------------ one run
def eval_curve(history: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(steps, held-out accuracy) of the rows that carry eval/accuracy, in step order."""
    rows = [(r["step"], r["eval/accuracy"]) for r in history if r.get("eval/accuracy") is not None]
    if not rows:
        raise ValueError("the run's history has no eval/accuracy row (eval_size=0?); a study needs held-out accuracy")
    steps, acc = np.asarray(rows, dtype=float).T
    return steps, acc


def area_under_curve(steps: np.ndarray, values: np.ndarray) -> float:
    """Trapezoid area under values(step) divided by the step span: the curve's mean height (in [0, 1] for an
    accuracy); a single point is its own value."""
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    if len(steps) == 1 or steps[-1] == steps[0]:
        return float(values[-1])
    area = np.sum(np.diff(steps) * (values[1:] + values[:-1]) / 2)
    return float(area / (steps[-1] - steps[0]))


def steps_to_fraction(steps: np.ndarray, values: np.ndarray, fraction: float = 0.9) -> float:
    """First step at which values reach start + fraction·(best − start), the run's own gain; 0 when the run
    never rises above its start (it is there from the outset)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    values = np.asarray(values, dtype=float)
    target = values[0] + fraction * (values.max() - values[0])
    return float(np.asarray(steps, dtype=float)[np.argmax(values >= target - 1e-12)])


def _mean_of(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return float(np.mean(vals)) if vals else math.nan


def run_metrics(history: list[dict]) -> dict:
    """The `RUN_METRICS` of one run from its metrics rows (row 0 the warm start, then one row per RL step)."""
    steps, acc = eval_curve(history)
    rl = [r for r in history if r.get("step", 0) > 0]
    last = history[-1]
    pass_keys = sorted(k for k in last if k.startswith("eval/pass@") and k != "eval/pass@1_sampled")
    out = {
        "final_accuracy": float(acc[-1]),
        "final_pass_at_k": float(last[pass_keys[0]]) if pass_keys and last[pass_keys[0]] is not None else math.nan,
        "auc": area_under_curve(steps, acc),
        "steps_to_90": steps_to_fraction(steps, acc, 0.9),
        "entropy_mean": _mean_of(rl, "policy/entropy"),
        "entropy_final": float(rl[-1]["policy/entropy"])
        if rl and rl[-1].get("policy/entropy") is not None
        else math.nan,
        "clipfrac": _mean_of(rl, "clip/clipfrac"),
        "clipfrac_low": _mean_of(rl, "clip/clipfrac_low"),
        "clipfrac_high": _mean_of(rl, "clip/clipfrac_high"),
        "dual_clipfrac": _mean_of(rl, "clip/dual_clipfrac"),
        "reward_mean": _mean_of(rl, "reward/mean"),
    }
    return out


# ------------------------------------------------------------------------------------------ paired tests
def _paired(x, y) -> np.ndarray:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired samples must be two 1-D arrays of one length, got shapes {x.shape} and {y.shape}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("paired samples must be finite (a run without that metric cannot be compared)")
    return x - y


def paired_bootstrap_ci(x, y, level: float = 0.95, n_resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(x − y), resampling the seeds (the pairs) with replacement."""
    d = _paired(x, y)
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if len(d) < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(n_resamples, len(d)))].mean(axis=1)  # (n_resamples,)
    tail = (1 - level) / 2
    lo, hi = np.quantile(means, [tail, 1 - tail])
    return float(lo), float(hi)


def sign_flip_pvalue(x, y, n_random: int = 20_000, seed: int = 0) -> float:
    """Two-sided p-value of the paired permutation test of mean(x − y) = 0: under the null each difference's sign
    is a coin flip. Exact (all 2^n patterns) for n ≤ EXACT_SIGN_FLIP_MAX_N."""
    d = _paired(x, y)
    n = len(d)
    if n == 0 or np.all(d == 0):
        return 1.0
    if n <= EXACT_SIGN_FLIP_MAX_N:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))  # (2^n, n)
    else:
        signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(n_random, n))
        signs[0] = 1.0  # the observed pattern is one of them
    null = np.abs(signs @ d) / n
    observed = abs(d.mean())
    return float(np.mean(null >= observed * (1 - 1e-12)))


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error ≤ α when rejecting adjusted p < α)."""
    p = np.asarray(pvalues, dtype=float)
    m = len(p)
    order = np.argsort(p)
    adjusted = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(adjusted, 1.0)
    return out


def min_detectable_effect(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest true mean difference a two-sided paired t-test at level `alpha` detects with probability `power`
    from n pairs whose differences have standard deviation `sd` (noncentral t, df = n − 1). NaN for n < 2 or sd = 0."""
    if n < 2 or not math.isfinite(sd):
        return math.nan
    if sd == 0:  # identical differences: no spread to size an effect against
        return math.nan
    df = n - 1
    crit = stats.t.ppf(1 - alpha / 2, df)

    def power_at(effect):
        nc = effect * math.sqrt(n) / sd
        if df > 1000:  # scipy's nct is NaN there; the t statistic is normal to ~1e-3
            return stats.norm.sf(crit - nc) + stats.norm.cdf(-crit - nc) - power
        return stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc) - power

    from scipy.optimize import brentq

    hi = sd
    while power_at(hi) < 0:
        hi *= 2
    return float(brentq(power_at, 0.0, hi, xtol=1e-12 * sd))


def variance_ratio(x, y, level: float = 0.95, n_resamples: int = 10_000, seed: int = 0) -> dict:
    """var(x)/var(y) over paired seeds: the ratio, a paired percentile-bootstrap interval and the Pitman-Morgan
    two-sided p-value (t test of corr(x + y, x − y) = 0 with n − 2 degrees of freedom)."""
    _paired(x, y)
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(x)
    vx, vy = np.var(x, ddof=1) if n > 1 else math.nan, np.var(y, ddof=1) if n > 1 else math.nan
    ratio = vx / vy if n > 1 and vy > 0 else math.nan
    out = {"ratio": float(ratio), "ci_low": math.nan, "ci_high": math.nan, "p": math.nan}
    if n < 3 or vy == 0:
        return out
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_resamples, n))
    bx, by = np.var(x[idx], axis=1, ddof=1), np.var(y[idx], axis=1, ddof=1)
    ok = by > 0
    tail = (1 - level) / 2
    lo, hi = np.quantile(bx[ok] / by[ok], [tail, 1 - tail])
    s, d = x + y, x - y
    if np.std(s) > 0 and np.std(d) > 0:
        r = np.corrcoef(s, d)[0, 1]
        t = r * math.sqrt((n - 2) / max(1e-300, 1 - r * r))
        out["p"] = float(2 * stats.t.sf(abs(t), n - 2))
    out.update(ci_low=float(lo), ci_high=float(hi))
    return out


def paired_ratio_ci(x, y, level: float = 0.95, n_resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(x)/mean(y), resampling the pairs (NaN where a resample's mean(y)
    is 0 everywhere)."""
    _paired(x, y)
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 2:
        return math.nan, math.nan
    idx = np.random.default_rng(seed).integers(0, len(x), size=(n_resamples, len(x)))
    mx, my = x[idx].mean(axis=1), y[idx].mean(axis=1)
    ok = my != 0
    if not ok.any():
        return math.nan, math.nan
    tail = (1 - level) / 2
    lo, hi = np.quantile(mx[ok] / my[ok], [tail, 1 - tail])
    return float(lo), float(hi)


def compare_to_baseline(
    values: dict[str, np.ndarray], baseline: str, alpha: float = 0.05, n_resamples: int = 10_000, seed: int = 0
) -> list[dict]:
    """One row per method other than `baseline`: mean paired difference, its Bonferroni-level bootstrap interval,
    the sign-flip p-value and its Holm adjustment, the minimal detectable effect at α/m, and the verdict.
    `values[method]` holds one number per seed, the seeds in the same order for every method."""
    if baseline not in values:
        raise ValueError(f"baseline must be one of the methods {sorted(values)}, got {baseline!r}")
    others = [m for m in values if m != baseline]
    if not others:
        return []
    m = len(others)
    level = 1 - alpha / m
    y = np.asarray(values[baseline], dtype=float)
    rows = []
    for method in others:
        x = np.asarray(values[method], dtype=float)
        d = _paired(x, y)
        lo, hi = paired_bootstrap_ci(x, y, level, n_resamples, seed)
        sd = float(np.std(d, ddof=1)) if len(d) > 1 else math.nan
        rows.append(
            {
                "method": method,
                "n": len(d),
                "mean": float(x.mean()),
                "baseline_mean": float(y.mean()),
                "diff": float(d.mean()),
                "ci_level": level,
                "ci_low": lo,
                "ci_high": hi,
                "p": sign_flip_pvalue(x, y, seed=seed),
                "sd_diff": sd,
                "mde": min_detectable_effect(sd, len(d), alpha / m),
            }
        )
    for row, p_adj in zip(rows, holm([r["p"] for r in rows])):
        row["p_holm"] = float(p_adj)
        row["verdict"] = NO_DIFFERENCE if p_adj >= alpha else ("higher" if row["diff"] > 0 else "lower")
    return rows


__all__ = [
    "NO_DIFFERENCE",
    "RUN_METRICS",
    "area_under_curve",
    "compare_to_baseline",
    "eval_curve",
    "holm",
    "min_detectable_effect",
    "paired_bootstrap_ci",
    "paired_ratio_ci",
    "run_metrics",
    "sign_flip_pvalue",
    "steps_to_fraction",
    "variance_ratio",
]
