"""Summaries, claims and figures from an `ArenaResult`: the `divclip toy` report and the app's arena page.

Per method, over seeds, at the last step: the exact expected reward (mean ± 95 % t-interval), its
across-seed variance (95 % bootstrap interval over seeds), steps until the across-seed mean first reaches
R0 + 0.9·(R* - R0) (R0 the initial expected reward, R* the best final mean of any method), pass@k and entropy.

The claims compare each method with a baseline (GRPO when present) in the paper's direction (ATR-GRPO:
lower variance across runs, faster convergence, higher reward, more exploration). Seeds are paired across
methods (same seed, same random stream: see `divclip.toy_envs.rng`), so differences also get a paired 95 % interval;
"CIs overlap" compares the two methods' own intervals, the cruder test the paper's readers would apply.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from divclip.theory.methods import METHODS
from divclip.theory.spec import is_adaptive, parse_method
from divclip.toy_envs.base import PASS_AT_K
from divclip.toy_envs.result import METRIC_DOCS, ArenaResult

FIGURE_METRICS = (
    "expected_reward",
    "pass@8",
    "entropy",
    "prob_correct",
    "kl_exact",
    "clipfrac_low",
    "clipfrac_high",
    "grad_norm",
    "delta",
)
_BOOTSTRAP = 2000
_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


@dataclass(frozen=True)
class MethodSummary:
    method: str
    n_seeds: int
    final_mean: float
    final_ci: float  # half-width of the 95 % t-interval of the mean
    final_var: float  # across-seed variance (ddof = 1)
    var_ci: tuple[float, float]  # 95 % bootstrap interval of that variance
    steps_to_90: int | None  # None: the mean curve never reached the threshold
    pass_at_k: dict  # k -> (mean, ci half-width) at the last step
    final_entropy: float
    mean_clipfrac: float  # over all steps and seeds


@dataclass(frozen=True)
class Claim:
    method: str
    text: str  # "ATR-GRPO has lower across-seed variance than GRPO"
    holds: bool | None  # None: undecidable (e.g. neither method reached the threshold)
    detail: str


def _t_half(x: np.ndarray) -> float:
    n = x.shape[0]
    if n < 2:
        return math.nan
    return float(stats.t.ppf(0.975, n - 1) * x.std(ddof=1) / math.sqrt(n))


def _var(x: np.ndarray) -> float:
    return float(x.var(ddof=1)) if x.shape[0] > 1 else math.nan


def _boot_idx(n: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, n, size=(_BOOTSTRAP, n))  # fixed: reports are reproducible


def _var_ci(x: np.ndarray) -> tuple[float, float]:
    if x.shape[0] < 2:
        return math.nan, math.nan
    v = x[_boot_idx(x.shape[0])].var(axis=1, ddof=1)
    return float(np.quantile(v, 0.025)), float(np.quantile(v, 0.975))


def target_reward(result: ArenaResult, metric: str = "expected_reward") -> float:
    """R* for the 90 % threshold: the environment's best achievable expected reward, known exactly for every
    toy environment. Only where it is unknown (NaN, or another metric) the best final across-seed mean of any
    method stands in, and then "converged" only means "as far as the best method got"."""
    if metric == "expected_reward" and math.isfinite(result.best_reward):
        return float(result.best_reward)
    return float(result.metrics[metric][:, :, -1].mean(1).max())


def threshold_90(result: ArenaResult, metric: str = "expected_reward") -> float:
    """R0 + 0.9·(R* - R0): R0 the mean at step 1, R* the best achievable (`target_reward`). Taking R* as the best
    final mean of the run instead let a 60-step run whose methods reached 3 % of the optimum "converge"."""
    x = result.metrics[metric]
    r0 = float(x[:, :, 0].mean())
    return r0 + 0.9 * (target_reward(result, metric) - r0)


def convergence_note(result: ArenaResult) -> str | None:
    """A sentence when no method's across-seed mean reached the 90 % threshold (None when one did)."""
    x = result.metrics["expected_reward"]
    r0, target = float(x[:, :, 0].mean()), target_reward(result)
    finals = x[:, :, -1].mean(1)
    if (x.mean(1) >= threshold_90(result)).any():
        return None
    best = int(finals.argmax())
    share = (float(finals[best]) - r0) / (target - r0) if target != r0 else math.nan
    return (
        f"No method converged in {result.steps_done} steps: the best final mean, {finals[best]:.4g} "
        f"({_name(result.methods[best])}), is {share:.0%} of the way from R0 = {r0:.4g} to the best achievable "
        f"R* = {target:.4g}, short of the 90 % threshold; which method converges faster cannot be read from "
        "this run (run more steps)."
    )


def steps_to(curve: np.ndarray, threshold: float) -> int | None:
    hit = np.nonzero(curve >= threshold)[0]
    return int(hit[0]) + 1 if hit.size else None


def summarize(result: ArenaResult, metric: str = "expected_reward") -> list[MethodSummary]:
    thr = threshold_90(result, metric)
    out = []
    for i, m in enumerate(result.methods):
        final = result.metrics[metric][i, :, -1]  # (seeds,)
        pk = {
            k: (float(result.metrics[f"pass@{k}"][i, :, -1].mean()), _t_half(result.metrics[f"pass@{k}"][i, :, -1]))
            for k in PASS_AT_K
        }
        out.append(
            MethodSummary(
                m,
                final.shape[0],
                float(final.mean()),
                _t_half(final),
                _var(final),
                _var_ci(final),
                steps_to(result.metrics[metric][i].mean(0), thr),
                pk,
                float(result.metrics["entropy"][i, :, -1].mean()),
                float(result.metrics["clipfrac"][i].mean()),
            )
        )
    return out


def _name(method: str) -> str:
    """A preset's label from the method catalogue ('atr' -> 'ATR-GRPO'), else the method string itself."""
    entry = METHODS.get(method)
    return entry.label if entry is not None and entry.preset else method


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> str:
    if any(math.isnan(v) for v in (*a, *b)):
        return "CIs undefined with one seed"
    return "95 % CIs overlap" if a[0] <= b[1] and b[0] <= a[1] else "95 % CIs do not overlap"


def _paired_t(x: np.ndarray, y: np.ndarray):
    """(mean of x - y over paired seeds, its 95 % t half-width, whether the interval excludes 0); the half-width is
    NaN with fewer than two seeds."""
    d = x - y
    h = _t_half(d)
    return d.mean(), h, (not math.isnan(h)) and abs(d.mean()) > h and _greater(abs(d.mean()), 0.0)


def _var_ratio_ci(x: np.ndarray, y: np.ndarray):
    """(var(x)/var(y), bootstrap 95 % interval lo, hi, whether it excludes 1), seeds resampled jointly; None when
    there are fewer than two seeds or y does not vary."""
    if x.shape[0] < 2 or y.var() == 0:
        return None
    idx = _boot_idx(x.shape[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = x[idx].var(axis=1, ddof=1) / y[idx].var(axis=1, ddof=1)
    lo, hi = np.nanquantile(ratio, [0.025, 0.975])
    return x.var(ddof=1) / y.var(ddof=1), lo, hi, hi < 1 or lo > 1


def _paired(x: np.ndarray, y: np.ndarray, what: str = "paired difference") -> str:
    """Mean of x - y over paired seeds with its 95 % t-interval, and whether that interval excludes 0."""
    mean, h, sig = _paired_t(x, y)
    if math.isnan(h):
        return ""
    return f"; {what} {mean:+.4g} ± {h:.2g}, {'significant' if sig else 'not significant'}"


def _var_ratio(x: np.ndarray, y: np.ndarray) -> str:
    """var(x)/var(y) with a paired bootstrap 95 % interval (seeds resampled jointly)."""
    ci = _var_ratio_ci(x, y)
    if ci is None:
        return ""
    ratio, lo, hi, sig = ci
    return f"; variance ratio {ratio:.3f} [{lo:.3f}, {hi:.3f}], {'significant' if sig else 'not significant'}"


def seed_steps_to(result: ArenaResult, threshold: float, metric: str = "expected_reward") -> np.ndarray:
    """(methods, seeds): first step each seed's curve reaches `threshold`, censored at steps + 1."""
    x = result.metrics[metric] >= threshold
    first = x.argmax(-1) + 1
    return np.where(x.any(-1), first, result.steps_done + 1).astype(np.float64)


def claims(result: ArenaResult, baseline: str | None = None) -> list[Claim]:
    """The paper's four directions, for every method against `baseline` (default: grpo, else the first)."""
    if baseline is None:
        baseline = "grpo" if "grpo" in result.methods else result.methods[0]
    if baseline not in result.methods:
        raise ValueError(f"baseline must be one of the run's methods {result.methods}, got {baseline!r}")
    summ = {s.method: s for s in summarize(result)}
    b, bn = summ[baseline], _name(baseline)
    ib = result.methods.index(baseline)
    final = result.metrics["expected_reward"][:, :, -1]
    p16 = result.metrics["pass@16"][:, :, -1]
    seed_steps = seed_steps_to(result, threshold_90(result))
    out = []
    for i, m in enumerate(result.methods):
        if m == baseline:
            continue
        s, n = summ[m], _name(m)
        out.append(
            Claim(
                m,
                f"{n} has lower across-seed variance of the final reward than {bn}",
                _greater(b.final_var, s.final_var),
                f"{s.final_var:.3g} vs {b.final_var:.3g}; {_overlap(s.var_ci, b.var_ci)}"
                f"{_var_ratio(final[i], final[ib])}",
            )
        )
        out.append(_convergence_claim(result, i, ib, seed_steps, s, b))
        ci_s = (s.final_mean - s.final_ci, s.final_mean + s.final_ci)
        ci_b = (b.final_mean - b.final_ci, b.final_mean + b.final_ci)
        out.append(
            Claim(
                m,
                f"{n} reaches a higher final expected reward than {bn}",
                _greater(s.final_mean, b.final_mean),
                f"{s.final_mean:.4g} vs {b.final_mean:.4g}; {_overlap(ci_s, ci_b)}{_paired(final[i], final[ib])}",
            )
        )
        ps, pb = s.pass_at_k[16], b.pass_at_k[16]
        overlap = _overlap((ps[0] - ps[1], ps[0] + ps[1]), (pb[0] - pb[1], pb[0] + pb[1]))
        out.append(
            Claim(
                m,
                f"{n} explores more (higher final pass@16) than {bn}",
                _greater(ps[0], pb[0]),
                f"{ps[0]:.4g} vs {pb[0]:.4g}; {overlap}"
                f"{_paired(p16[i], p16[ib])}; final entropy {s.final_entropy:.3g} vs {b.final_entropy:.3g}",
            )
        )
    return out


def _convergence_claim(result, i: int, ib: int, seed_steps: np.ndarray, s, b) -> Claim:
    """Faster = fewer steps for a seed to reach the 90 % threshold, paired by seed (never = steps + 1)."""
    n, bn = _name(s.method), _name(b.method)
    never = result.steps_done + 1
    x, y = seed_steps[i], seed_steps[ib]
    curve = f"across-seed mean curve {_steps(s.steps_to_90)} vs {_steps(b.steps_to_90)}"
    if (x == never).all() and (y == never).all():
        return Claim(
            s.method,
            f"{n} converges faster than {bn}",
            None,
            f"no seed of either method reaches the 90 % threshold in {result.steps_done} steps",
        )
    if s.steps_to_90 is None and b.steps_to_90 is None:  # some seeds got there, neither method did
        return Claim(
            s.method,
            f"{n} converges faster than {bn}",
            None,
            f"neither method's across-seed mean reaches the 90 % threshold in {result.steps_done} steps "
            f"(per-seed steps {x.mean():.1f} vs {y.mean():.1f}, never counting as {never})",
        )
    return Claim(
        s.method,
        f"{n} converges faster than {bn}",
        _greater(y.mean(), x.mean()),
        f"per-seed steps to the 90 % threshold {x.mean():.1f} vs {y.mean():.1f} (never counts as "
        f"{never}){_paired(x, y)}; {curve}",
    )


def _greater(a: float, b: float) -> bool:
    """a > b beyond float noise: numbers equal to 1e-9 are a tie, which is not 'higher'."""
    return bool(a - b > 1e-9 * max(1.0, abs(a), abs(b)))


def _steps(s: int | None) -> str:
    return "never" if s is None else str(s)


def verdict(claim) -> str:
    """'yes' or 'no' only when the test (paired t-interval or bootstrap) excludes no effect; a difference the test
    cannot tell from none, whichever way its point estimate leans, is 'no detectable difference' (never 'yes':
    a variance ratio of 1.000 [0.991, 1.022] is a tie). The arena page and `claims.md` both say it this way."""
    if claim.holds is None:
        return "undecided"
    if "not significant" in claim.detail:
        return "no detectable difference"
    return "yes" if claim.holds else "no"


_yes = verdict  # the name claims.md's writer used


# ---------------------------------------------------------------------------------------- markdown
def _table_rows(summaries: list[MethodSummary]) -> tuple[list[str], list[list[str]]]:
    head = [
        "method",
        "final E[R] (mean ± 95 % CI)",
        "across-seed var [95 % CI]",
        "steps to 90 %",
        *(f"pass@{k}" for k in PASS_AT_K),
        "final entropy",
        "clipfrac",
    ]
    rows = []
    for s in summaries:
        rows.append(
            [
                s.method,
                f"{s.final_mean:.4f} ± {s.final_ci:.4f}",
                f"{s.final_var:.3g} [{s.var_ci[0]:.3g}, {s.var_ci[1]:.3g}]",
                _steps(s.steps_to_90),
                *(f"{s.pass_at_k[k][0]:.3f}" for k in PASS_AT_K),
                f"{s.final_entropy:.3f}",
                f"{s.mean_clipfrac:.4f}",
            ]
        )
    return head, rows


def claims_markdown(result: ArenaResult, command: str | None = None, baseline: str | None = None) -> str:
    """A markdown section: setup, the per-method table and the yes/no claims."""
    summ = summarize(result)
    head, rows = _table_rows(summ)
    cfg = result.config
    lines = [f"### {result.env}: {', '.join(result.methods)}", ""]
    if command:
        lines += ["```", command, "```", ""]
    lines += [
        f"Environment `{_env_line(result)}`; {len(result.seeds)} seeds ({_seed_range(result.seeds)}), "
        f"{result.steps_done} steps{' (stopped early)' if result.stopped else ''}, "
        f"group {cfg.get('group_size')}, "
        f"{cfg.get('prompts_per_step')} prompts/step, {cfg.get('ppo_epochs')} PPO epochs, "
        f"lr {cfg.get('lr')}, {cfg.get('loss_agg_mode')}, policy {cfg.get('policy')}. "
        f"Best achievable expected reward: {result.best_reward:.4g}.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    thr = threshold_90(result)
    lines += [
        "",
        f"Final = exact expected reward at the last step. Steps to 90 %: first step where the across-seed "
        f"mean reaches R0 + 0.9·(R* − R0) = {thr:.4g} (R* the best achievable). pass@k exact, mean over seeds. "
        f"Variance interval: "
        f"bootstrap over seeds. Paired differences: seed s of every method draws the same random stream, "
        f"so differences are taken seed by seed (± = 95 % t-interval; significant = it excludes 0).",
        "",
    ]
    lines += [
        "#### Paired differences",
        "",
        paired_table(result, baseline),
        "#### Entropy trajectory",
        "",
        entropy_trajectory_table(result),
    ]
    dt = delta_table(result)
    if dt:
        lines += ["#### Adaptive δ", "", dt]
    cl = claims(result, baseline)
    if cl:
        lines.append("Does the paper's direction hold here?")
        lines.append("")
        note = convergence_note(result)
        if note:
            lines += [note, ""]
        lines += [f"- {c.text}: **{_yes(c)}** ({c.detail})" for c in cl]
    return "\n".join(lines) + "\n"


def _paired_cell(x: np.ndarray, y: np.ndarray, fmt: str = "+.3g") -> str:
    """'mean(x - y) ± 95 % t half-width', starred when the interval excludes 0 (paired by seed)."""
    mean, h, sig = _paired_t(x, y)
    if math.isnan(h):
        return f"{mean:{fmt}}"
    return f"{mean:{fmt}} ± {h:.2g}{' *' if sig else ''}"


def _ratio_cell(x: np.ndarray, y: np.ndarray) -> str:
    ci = _var_ratio_ci(x, y)
    if ci is None:
        return "–"
    ratio, lo, hi, sig = ci
    return f"{ratio:.3g} [{lo:.3g}, {hi:.3g}]{' *' if sig else ''}"


def paired_table(result: ArenaResult, baseline: str | None = None) -> str:
    """Every method against `baseline`, seed by seed: differences in final reward, pass@k, mean entropy over
    the run and at its last step, steps to the 90 % threshold, and the across-seed variance ratio (paired
    bootstrap). ± is the 95 % t-interval of the paired difference; * marks an interval that excludes 0 (1 for
    the ratio)."""
    if baseline is None:
        baseline = "grpo" if "grpo" in result.methods else result.methods[0]
    ib = result.methods.index(baseline)
    x = result.metrics
    thr = threshold_90(result)
    steps = seed_steps_to(result, thr)
    head = [
        "method",
        "Δ final E[R]",
        *(f"Δ pass@{k}" for k in PASS_AT_K),
        "var ratio [95 %]",
        "Δ entropy (mean over steps)",
        "Δ final entropy",
        "Δ steps to 90 %",
    ]
    lines = [
        f"Paired by seed against **{baseline}** (method − {baseline}; ± = 95 % t-interval; * = excludes 0, "
        f"or 1 for the variance ratio; never reaching the threshold counts as {result.steps_done + 1} steps):",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for i, m in enumerate(result.methods):
        if i == ib:
            continue
        row = [m, _paired_cell(x["expected_reward"][i, :, -1], x["expected_reward"][ib, :, -1])]
        row += [_paired_cell(x[f"pass@{k}"][i, :, -1], x[f"pass@{k}"][ib, :, -1]) for k in PASS_AT_K]
        row.append(_ratio_cell(x["expected_reward"][i, :, -1], x["expected_reward"][ib, :, -1]))
        row.append(_paired_cell(x["entropy"][i].mean(-1), x["entropy"][ib].mean(-1)))
        row.append(_paired_cell(x["entropy"][i, :, -1], x["entropy"][ib, :, -1]))
        row.append(_paired_cell(steps[i], steps[ib], "+.1f"))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def entropy_trajectory_table(result: ArenaResult, points: int = 5) -> str:
    """Across-seed mean entropy at evenly spaced steps, per method (the trajectory, not just its end)."""
    T = result.steps_done
    at = sorted({max(1, round(T * j / (points - 1))) for j in range(points)} | {1})
    lines = ["| method | " + " | ".join(f"entropy @ {t}" for t in at) + " |", "|" + "---|" * (len(at) + 1)]
    for i, m in enumerate(result.methods):
        e = result.metrics["entropy"][i]
        lines.append(f"| {m} | " + " | ".join(f"{e[:, t - 1].mean():.4g}" for t in at) + " |")
    return "\n".join(lines) + "\n"


def delta_table(result: ArenaResult) -> str:
    """Adaptive methods: δ (across-seed mean) at step 1, a quarter, half way and the end, and the controlled
    signal over the last quarter of steps against its target. Empty when no method adapts δ."""
    rows = []
    T = result.steps_done
    for i, m in enumerate(result.methods):
        spec = result.specs.get(m, m)
        try:
            spec = parse_method(spec) if isinstance(spec, str) else spec
        except ValueError:
            continue
        if not is_adaptive(spec):
            continue
        d = result.metrics["delta"][i]
        sig = spec.signal
        sig_x = result.metrics[sig][i]
        if sig == "kl3":  # the CSV's kl3 is per response; the controller reads the per-token mean
            sig_x = sig_x / max(1, int(result.env_config.get("length", 1) or 1))
        q = max(1, T // 4)
        half = d[:, max(0, T // 2 - 1)].mean()
        rows.append(
            f"| {m} | {d[:, 0].mean():.4g} | {d[:, q - 1].mean():.4g} | {half:.4g}"
            f" | {d[:, -1].mean():.4g} [{np.quantile(d[:, -1], 0.025):.3g}, {np.quantile(d[:, -1], 0.975):.3g}]"
            f" | {sig}: {sig_x[:, :q].mean():.4g} → {sig_x[:, -q:].mean():.4g} (target {spec.target:g}) |"
        )
    if not rows:
        return ""
    head = (
        f"| method | δ @ 1 | δ @ {max(1, T // 4)} | δ @ {max(1, T // 2)} | δ @ {T} [middle 95 % of seeds] | "
        "signal, first → last quarter |"
    )
    return "\n".join([head, "|---|---|---|---|---|---|", *rows]) + "\n"


def _env_line(result: ArenaResult) -> str:
    cfg = {k: v for k, v in result.env_config.items() if k != "means"}
    return f"{result.env}(" + ", ".join(f"{k}={v}" for k, v in cfg.items()) + ")"


def _seed_range(seeds: list[int]) -> str:
    if seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}..{seeds[-1]}"
    return ", ".join(map(str, seeds[:8])) + (" …" if len(seeds) > 8 else "")


# ------------------------------------------------------------------------------------------ figures
def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _add_band(fig, result: ArenaResult, metric: str, row=None, col=None, legend=True):
    import plotly.graph_objects as go

    mean, lo, hi = result.band(metric)
    x = np.arange(1, result.steps_done + 1)
    where = {} if row is None else {"row": row, "col": col}
    for i, m in enumerate(result.methods):
        c = _COLORS[i % len(_COLORS)]
        fig.add_trace(
            go.Scatter(
                x=np.concatenate([x, x[::-1]]),
                y=np.concatenate([hi[i], lo[i][::-1]]),
                fill="toself",
                fillcolor=_rgba(c, 0.18),
                line={"width": 0},
                hoverinfo="skip",
                legendgroup=m,
                showlegend=False,
                name=f"{m} 95 % of seeds",
            ),
            **where,
        )
        fig.add_trace(
            go.Scatter(
                x=x, y=mean[i], mode="lines", line={"color": c, "width": 2}, name=m, legendgroup=m, showlegend=legend
            ),
            **where,
        )


def metric_figure(result: ArenaResult, metric: str):
    """One metric: across-seed mean per method with the band holding the middle 95 % of seeds."""
    import plotly.graph_objects as go

    if metric not in result.metrics:
        raise ValueError(f"metric must be one of {sorted(result.metrics)}, got {metric!r}")
    fig = go.Figure()
    _add_band(fig, result, metric)
    fig.update_layout(
        title=f"{metric} — mean over {len(result.seeds)} seeds, band: middle 95 % of seeds",
        xaxis_title="step",
        yaxis_title=metric,
        template="plotly_white",
    )
    return fig


def report_figure(result: ArenaResult, metrics=FIGURE_METRICS):
    """A grid of `metric_figure`s sharing one legend."""
    from plotly.subplots import make_subplots

    metrics = [m for m in metrics if m in result.metrics]
    cols = 2
    rows = math.ceil(len(metrics) / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=metrics, vertical_spacing=0.08 / max(1, rows / 4))
    for j, metric in enumerate(metrics):
        _add_band(fig, result, metric, row=j // cols + 1, col=j % cols + 1, legend=j == 0)
    fig.update_layout(
        height=320 * rows,
        template="plotly_white",
        title=f"{result.env}: mean over {len(result.seeds)} seeds (band: middle 95 % of seeds)",
    )
    fig.update_xaxes(title_text="step")
    return fig


def report_html(result: ArenaResult, command: str | None = None) -> str:
    """A self-contained page (plotly.js inlined, works offline): the claims table, then the charts."""
    import plotly.io as pio

    summ = summarize(result)
    head, rows = _table_rows(summ)
    esc = html.escape
    table = (
        "<table><tr>"
        + "".join(f"<th>{esc(h)}</th>" for h in head)
        + "</tr>"
        + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
        + "</table>"
    )
    items = "".join(f"<li>{esc(c.text)}: <b>{_yes(c)}</b> ({esc(c.detail)})</li>" for c in claims(result))
    docs = "".join(f"<li><code>{esc(k)}</code>: {esc(v)}</li>" for k, v in METRIC_DOCS.items())
    fig = pio.to_html(report_figure(result), include_plotlyjs=True, full_html=False)
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>divclip toy: {esc(result.env)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}</style></head><body>"
        f"<h1>divclip toy arena: {esc(result.env)}</h1>"
        + (f"<pre>{esc(command)}</pre>" if command else "")
        + f"<p>{esc(_env_line(result))}; seeds {esc(_seed_range(result.seeds))}; "
        f"config {esc(str(result.config))}</p>"
        + table
        + f"<h2>Does the paper's direction hold?</h2><ul>{items}</ul>"
        + fig
        + f"<h2>Metrics</h2><ul>{docs}</ul></body></html>"
    )


def write_report(result: ArenaResult, out_dir, command: str | None = None, baseline: str | None = None) -> dict:
    """Write metrics.csv, report.html and claims.md into `out_dir` (created); returns {kind: path}."""
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "metrics.csv", "html": out / "report.html", "markdown": out / "claims.md"}
    result.to_csv(paths["csv"])
    paths["html"].write_text(report_html(result, command), encoding="utf-8")
    paths["markdown"].write_text(claims_markdown(result, command, baseline), encoding="utf-8")
    return paths
