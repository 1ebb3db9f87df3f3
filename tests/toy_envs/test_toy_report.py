"""Summaries and claims against numbers computed by hand on a synthetic result; CSV and HTML outputs."""

import math
import re

import numpy as np
import pytest
from scipy import stats

from divclip.toy_envs import run_arena
from divclip.toy_envs.report import claims, claims_markdown, metric_figure, report_html, summarize, write_report
from divclip.toy_envs.result import METRICS, ArenaResult


def synthetic(final_sd=(0.10, 0.02), speed=(10.0, 5.0), seeds=8, steps=60, best_reward=0.85) -> ArenaResult:
    """Two methods whose curves rise as 1 - exp(-t/speed) to seed-dependent plateaus (known answers)."""
    rng = np.random.default_rng(0)
    t = np.arange(1, steps + 1)
    metrics = {k: np.zeros((2, seeds, steps)) for k in METRICS}
    for i in range(2):
        plateau = 0.8 + final_sd[i] * rng.standard_normal(seeds)
        metrics["expected_reward"][i] = plateau[:, None] * (1 - np.exp(-(t - 1) / speed[i]))[None, :]
        for k in (1, 4, 8, 16):
            metrics[f"pass@{k}"][i] = 1 - (1 - metrics["expected_reward"][i]) ** k
        metrics["entropy"][i] = 1.0 - 0.5 * i
        metrics["clipfrac"][i] = 0.01 * (i + 1)
    return ArenaResult(
        "bandit",
        {"arms": 4},
        ["grpo", "atr"],
        {},
        list(range(seeds)),
        metrics,
        {"group_size": 4},
        steps,
        best_reward=best_reward,
    )


def test_summary_numbers_equal_hand_computed_ones():
    res = synthetic()
    s = {x.method: x for x in summarize(res)}
    for i, m in enumerate(res.methods):
        final = res.metrics["expected_reward"][i, :, -1]
        lo, hi = stats.t.interval(0.95, len(final) - 1, loc=final.mean(), scale=stats.sem(final))
        assert s[m].final_mean == pytest.approx(final.mean())
        assert s[m].final_ci == pytest.approx((hi - lo) / 2)
        assert s[m].final_var == pytest.approx(final.var(ddof=1))
        assert s[m].var_ci[0] < s[m].final_var < s[m].var_ci[1]
        assert s[m].pass_at_k[16][0] == pytest.approx(res.metrics["pass@16"][i, :, -1].mean())
        assert s[m].mean_clipfrac == pytest.approx(0.01 * (i + 1))
    # threshold R0 + 0.9 (R* - R0) with R0 = 0 and R* the best achievable: first step the mean curve reaches it
    for i, m in enumerate(res.methods):
        curve = res.metrics["expected_reward"][i].mean(0)
        assert s[m].steps_to_90 == int(np.argmax(curve >= 0.9 * res.best_reward)) + 1
    assert s["atr"].steps_to_90 < s["grpo"].steps_to_90


def test_claims_follow_the_numbers():
    res = synthetic()
    by_text = {c.text.split(" than")[0]: c for c in claims(res)}
    var = by_text["ATR-GRPO has lower across-seed variance of the final reward"]
    assert var.holds is True and "95 % CIs" in var.detail and "variance ratio" in var.detail
    assert by_text["ATR-GRPO converges faster"].holds is True
    p16 = res.metrics["pass@16"][:, :, -1].mean(1)  # both 1 - 4e-11: a tie, not an improvement
    assert by_text["ATR-GRPO explores more (higher final pass@16)"].holds == bool(p16[1] - p16[0] > 1e-9)
    assert "paired difference" in by_text["ATR-GRPO converges faster"].detail
    flipped = synthetic(final_sd=(0.02, 0.10), speed=(5.0, 10.0))
    by_text = {c.text.split(" than")[0]: c for c in claims(flipped)}
    assert by_text["ATR-GRPO has lower across-seed variance of the final reward"].holds is False
    assert by_text["ATR-GRPO converges faster"].holds is False
    with pytest.raises(ValueError, match="baseline"):
        claims(res, baseline="dapo")


def test_markdown_table_has_one_row_per_method_and_plain_answers():
    md = claims_markdown(synthetic(), command="divclip toy --env bandit")
    first_table = md.split("#### Paired differences")[0]  # the per-method table; paired tables follow
    rows = [line for line in first_table.splitlines() if line.startswith("| ")]
    assert len(rows) == 3 and rows[1].startswith("| grpo") and rows[2].startswith("| atr")
    assert "divclip toy --env bandit" in md
    answers = [line for line in md.splitlines() if line.startswith("- ")]
    answer = re.compile(r"\*\*(yes|no detectable difference|no|undecided)\*\*")
    assert len(answers) == 4 and all(answer.search(a) for a in answers)


def test_csv_round_trip_and_self_contained_html(tmp_path):
    res = run_arena("bandit", "grpo,atr", seeds=2, steps=6, group_size=4, prompts_per_step=1, ppo_epochs=2)
    paths = write_report(res, tmp_path / "out", command="divclip toy --env bandit")
    back = ArenaResult.from_csv(paths["csv"])
    assert back.methods == res.methods and back.seeds == res.seeds and back.steps_done == 6
    for k in METRICS:
        np.testing.assert_allclose(back.metrics[k], res.metrics[k], rtol=1e-8, atol=1e-12)
    header = paths["csv"].read_text().splitlines()[0].split(",")
    assert header[:3] == ["method", "seed", "step"] and "pass@16" in header
    page = paths["html"].read_text()
    assert not re.search(r"<script[^>]*\bsrc=", page) and len(page) > 1_000_000  # plotly.js inlined: offline
    assert "Does the paper" in page and "divclip toy --env bandit" in page
    assert paths["markdown"].read_text().startswith("### bandit")


def test_metric_figure_has_a_band_and_a_mean_per_method():
    res = synthetic()
    fig = metric_figure(res, "expected_reward")
    assert len(fig.data) == 4
    mean = [tr for tr in fig.data if tr.mode == "lines"]
    np.testing.assert_allclose(mean[1].y, res.metrics["expected_reward"][1].mean(0))
    with pytest.raises(ValueError, match="metric"):
        metric_figure(res, "reward")


def test_single_seed_summary_has_undefined_intervals_not_errors():
    res = synthetic(seeds=1)
    s = summarize(res)[0]
    assert math.isnan(s.final_ci) and math.isnan(s.final_var)
    assert "undefined" in claims(res)[0].detail
    assert report_html(res)


def test_ties_are_not_improvements():
    res = synthetic()
    res.metrics["expected_reward"][1] = res.metrics["expected_reward"][0] + 1e-13  # atr = grpo up to float noise
    for k in (1, 4, 8, 16):
        res.metrics[f"pass@{k}"][1] = res.metrics[f"pass@{k}"][0]
    by_text = {c.text.split(" than")[0]: c for c in claims(res)}
    assert by_text["ATR-GRPO reaches a higher final expected reward"].holds is False
    assert by_text["ATR-GRPO explores more (higher final pass@16)"].holds is False
    assert by_text["ATR-GRPO converges faster"].holds is False


def test_a_direction_without_significance_is_not_a_plain_yes():
    from divclip.toy_envs.report import Claim, _yes

    assert _yes(Claim("atr", "x", True, "0.9 vs 0.8; paired difference +0.1 ± 0.01, significant")) == "yes"
    assert _yes(Claim("atr", "x", True, "0.9 vs 0.89; paired difference +0.01 ± 0.05, not significant")) == (
        "no detectable difference"
    )
    assert _yes(Claim("atr", "x", False, "significant")) == "no"
    assert _yes(Claim("atr", "x", None, "")) == "undecided"
    # issue 34: a tie (variance ratio 1.000 [0.991, 1.022]) was a "yes" on the arena page
    tie = Claim("dapo", "x", True, "0.0004 vs 0.0004; variance ratio 1.000 [0.991, 1.022], not significant")
    assert _yes(tie) == "no detectable difference"
    assert _yes(Claim("atr", "x", False, "paired difference -0.01 ± 0.05, not significant")) == (
        "no detectable difference"
    )


def test_readme_claims_tables_are_the_docs_sections_verbatim():
    """README shows two environments' claims; they must stay the generated text in docs/toy_claims.md."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    readme, docs = (root / "README.md").read_text(), (root / "docs" / "toy_claims.md").read_text()
    shown = re.findall(r"<details><summary><b>(\w+)</b>[^\n]*</summary>\n\n(.*?)\n\n</details>", readme, re.S)
    assert [name for name, _ in shown] == ["sparse", "bandit"]
    for name, body in shown:
        assert f"## {name}: grpo, dapo, atr\n\n{body}\n" in docs, name
        assert f"divclip toy --env {name} " in body and "Does the paper's direction hold here?" in body


def test_no_method_converged_is_said_and_no_convergence_claim_is_made():
    """A short run reaching 3 % of the best achievable reward: the 90 % threshold is taken of R* (1), not of the
    best final mean (which made 'DAPO converges faster than GRPO: yes' out of a run where nothing converged)."""
    from divclip.toy_envs.report import convergence_note, threshold_90

    res = synthetic(steps=60, best_reward=1.0)
    res.metrics["expected_reward"] *= 0.033 / 0.8  # plateaus near 0.033
    assert threshold_90(res) == pytest.approx(0.9 * 1.0 + 0.1 * res.metrics["expected_reward"][:, :, 0].mean())
    note = convergence_note(res)
    assert note.startswith("No method converged in 60 steps: the best final mean, 0.03")
    assert "of the way from R0 = 0 to the best achievable R* = 1" in note
    text = claims_markdown(res)
    assert note in text
    assert "converges faster than GRPO: **undecided** (no seed of either method reaches the 90 % threshold" in text


def test_a_converged_run_has_no_such_note():
    from divclip.toy_envs.report import convergence_note

    assert convergence_note(synthetic(steps=60)) is None
