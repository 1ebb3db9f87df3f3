"""`divclip study`: a tiny grid end to end, every summary number recomputed from the runs' own metrics.jsonl,
resuming, the shared warm start, and clear errors before any work."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from divclip.cli import main
from divclip.trainer import study_stats as st
from divclip.trainer.grpo import GRPOTrainer
from divclip.trainer.study import (
    Study,
    method_string,
    read_history,
    run_study,
    slug,
    summarize,
    summary_table,
    total_wall_s,
)

# conftest.TINY's run (1-digit sums, a 1-layer model) with pass@2, on the off-policy preset's loop
GRID = dict(
    arith_digits=1,
    eval_size=8,
    eval_every=2,
    pass_k=2,
    tiny_n_layer=1,
    tiny_n_embd=32,
    tiny_n_head=2,
    sft_steps=5,
    sft_batch_size=16,
    steps=3,
    prompts_per_step=4,
    group_size=4,
    max_new_tokens=3,
    ppo_epochs=2,
    minibatches=2,
    lr=1e-3,
)


def tiny_study(tmp_path, **kw):
    return Study(
        **{
            "methods": ("grpo", "atr"),
            "seeds": (0, 1),
            "tasks": ("tiny-arith-offpolicy",),
            "output_dir": str(tmp_path / "study"),
            "overrides": GRID,
            "progress": False,
            **kw,
        }
    )


def rows_of(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def close(a, b):
    return (a is None and (b is None or math.isnan(b))) or a == pytest.approx(b, rel=1e-12, abs=1e-15)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("study")
    study = tiny_study(tmp)
    return study, run_study(study)


@pytest.mark.slow
def test_output_structure(finished):
    study, summary = finished
    out = study.output_dir
    for seed in study.seeds:
        assert (tmp := study.warm_dir("tiny-arith-offpolicy", seed) / "checkpoints" / "step-000000").is_dir(), tmp
        for m in study.methods:
            d = study.run_dir("tiny-arith-offpolicy", m, seed)
            assert {"metrics.jsonl", "metrics.csv", "checkpoints"} <= {p.name for p in d.iterdir()}
            assert d.parent.name == slug(m)
    saved = json.loads((Path(out) / "summary.json").read_text())
    assert set(saved) == {"study", "tasks", "runs", "cost"}
    task = saved["tasks"]["tiny-arith-offpolicy"]
    assert task["seeds"] == [0, 1] and task["baseline"] == "grpo" and set(task["methods"]) == {"grpo", "atr"}
    assert [r["method"] for r in task["comparisons"]["final_accuracy"]] == ["atr"]
    assert saved["cost"]["runs_trained"] == 4 and saved["cost"]["warm_starts_trained"] == 2
    assert len(saved["runs"]) == 4


@pytest.mark.slow
def test_every_summary_number_recomputes_from_the_logs(finished):
    study, _ = finished
    saved = json.loads((Path(study.output_dir) / "summary.json").read_text())
    task = saved["tasks"]["tiny-arith-offpolicy"]
    logs = {
        (m, s): rows_of(study.run_dir("tiny-arith-offpolicy", m, s) / "metrics.jsonl")
        for m in study.methods
        for s in study.seeds
    }
    # the runs share their warm start: row 0 of every method is the same for a seed
    for s in study.seeds:
        assert logs[("grpo", s)][0] == logs[("atr", s)][0]
    for m in study.methods:
        rows = [logs[(m, s)] for s in study.seeds]
        final = [r[-1]["eval/accuracy"] for r in rows]  # the last row is the last RL step, evaluated
        assert all(r[-1]["step"] == GRID["steps"] for r in rows)
        got = task["methods"][m]
        assert got["final_accuracy"]["values"] == final
        assert close(got["final_accuracy"]["mean"], np.mean(final))
        assert close(got["final_accuracy"]["std"], np.std(final, ddof=1))
        assert got["final_pass_at_k"]["values"] == [r[-1]["eval/pass@2"] for r in rows]
        for key, col in [
            ("clipfrac", "clip/clipfrac"),
            ("clipfrac_low", "clip/clipfrac_low"),
            ("clipfrac_high", "clip/clipfrac_high"),
            ("entropy_mean", "policy/entropy"),
        ]:
            expect = [np.mean([row[col] for row in r[1:]]) for r in rows]
            assert all(close(a, b) for a, b in zip(got[key]["values"], expect)), key
        for r, auc in zip(rows, got["auc"]["values"]):
            steps = [row["step"] for row in r if "eval/accuracy" in row]
            acc = [row["eval/accuracy"] for row in r if "eval/accuracy" in row]
            assert close(auc, np.trapezoid(acc, steps) / (steps[-1] - steps[0]))
        curve = got["curve"]
        assert curve["steps"] == [row["step"] for row in rows[0] if "eval/accuracy" in row]
        assert close(curve["mean"][-1], np.mean(final))
    base = task["methods"]["grpo"]
    assert close(task["baseline_clipfrac"], base["clipfrac"]["mean"])
    for metric, comparisons in task["comparisons"].items():
        values = {m: np.array(task["methods"][m][metric]["values"]) for m in study.methods}
        again = st.compare_to_baseline(values, "grpo", study.alpha)
        for a, b in zip(comparisons, again):
            assert a["verdict"] == b["verdict"]
            assert all(close(a[k], b[k]) for k in ("diff", "ci_low", "ci_high", "p", "p_holm", "mde")), metric
    claims = task["claims"]["atr"]
    diff_points = 100 * (
        np.array(task["methods"]["atr"]["final_accuracy"]["values"]) - np.array(base["final_accuracy"]["values"])
    )
    assert close(claims["accuracy"]["estimate"], diff_points.mean())
    assert close(claims["variance"]["estimate"], task["variance_ratio"]["atr"]["ratio"])
    assert {c["claimed"] for c in claims.values()} == {0.8, 0.85, 8.0}
    for run in saved["runs"]:
        recomputed = st.run_metrics(logs[(run["method"], run["seed"])])
        assert all(close(run[k], recomputed[k]) for k in st.RUN_METRICS)


@pytest.mark.slow
def test_rerun_skips_finished_runs_and_longer_runs_resume(finished, tmp_path):
    study, summary = finished
    again = run_study(study)
    assert again["cost"]["runs_trained"] == 0 and again["cost"]["runs_skipped"] == 4
    (first,) = again["cost"]["earlier_invocations"]  # the rerun keeps the first invocation's cost
    assert first["runs_trained"] == 4 and total_wall_s(again) == first["wall_s"] + again["cost"]["wall_s"]
    assert json.dumps(again["tasks"], sort_keys=True) == json.dumps(summary["tasks"], sort_keys=True)
    before = read_history(study.run_dir("tiny-arith-offpolicy", "atr", 1))
    longer = Study(**{**study.__dict__, "overrides": {**GRID, "steps": 4}})
    summary4 = run_study(longer)  # each run continues from its step-3 checkpoint
    assert summary4["cost"]["runs_trained"] == 4 and summary4["cost"]["warm_starts_trained"] == 0
    after = read_history(study.run_dir("tiny-arith-offpolicy", "atr", 1))
    assert len(after) == len(before) + 1 and after[1]["clip/clipfrac"] == before[1]["clip/clipfrac"]


@pytest.mark.slow
def test_shared_warm_start_equals_running_it_in_the_run(tiny_config, without_timing, tmp_path):
    warm = tiny_config(output_dir=str(tmp_path / "warm"), pass_k=2, method="grpo")
    GRPOTrainer(warm).prepare()
    shared = GRPOTrainer(
        tiny_config(method="atr", pass_k=2, warm_start_from=str(tmp_path / "warm/checkpoints/step-000000"))
    ).train()
    inline = GRPOTrainer(tiny_config(method="atr", pass_k=2)).train()
    assert without_timing(shared.history) == without_timing(inline.history)
    with pytest.raises(ValueError, match=r"warm_start_from=.*other settings: seed=3 \(warm start: 0\)"):
        GRPOTrainer(
            tiny_config(seed=3, pass_k=2, warm_start_from=str(tmp_path / "warm/checkpoints/step-000000"))
        ).train()


@pytest.mark.slow
def test_ray_dispatch_on_a_local_cluster(tmp_path):
    ray = pytest.importorskip("ray")
    study = tiny_study(tmp_path, methods=("grpo",), seeds=(0,), ray_address="local")
    try:
        summary = run_study(study)
    finally:
        ray.shutdown()
    assert summary["cost"]["runs_trained"] == 1
    assert read_history(study.run_dir("tiny-arith-offpolicy", "grpo", 0))[-1]["step"] == GRID["steps"]


def test_default_grid_resolves_every_atlas_name():
    strings = {m: method_string(m) for m in Study(overrides=GRID).methods}
    assert len(strings) == 12 and strings["verl:geo_mean"].startswith("ratio/geo_mean")
    assert strings["verl:clip_cov"] == "ratio:0.2:0.2/clip_cov" and strings["dual_clip"] == "grpo/dual=3"


def test_summary_of_nothing_yet(tmp_path):
    summary = summarize(tiny_study(tmp_path))
    assert summary["runs"] == [] and summary["tasks"]["tiny-arith-offpolicy"]["seeds"] == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--methods", "grpo,ppo9"], "Study.methods: method 'ppo9'"),
        (["--seeds", "ten"], "--seeds must be a count"),
        (["--tasks", "tiny-go"], "Study.tasks must be presets"),
        (["--set", "steps"], "--set must be FIELD=VALUE"),
        (["--set", "epochs=3"], "unknown or set by the study itself"),
        (["--set", "seed=3"], "unknown or set by the study itself"),
        (["--set", "steps=0"], "TrainerConfig.steps must be an integer in [1, 1000000], got 0"),
        (["--workers", "0"], "Study.workers must be an integer in [1, 256], got 0"),
        (["--methods", "grpo,grpo"], "Study.methods has duplicates"),
    ],
)
def test_bad_arguments_fail_before_any_work(argv, message, capsys, tmp_path):
    assert main(["study", "--output-dir", str(tmp_path / "s"), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "lo, hi, verdict",
    [
        (-1.0, 2.0, "the claimed effect lies outside"),
        (-1.0, 9.0, "too few seeds to tell"),
        (5.0, 9.0, "claimed size lies in its interval"),
        (1.0, 3.0, "claimed size lies outside its interval"),
        (math.nan, 3.0, "not measurable"),
    ],
)
def test_claim_verdicts(lo, hi, verdict):
    from divclip.trainer.study import _claim_verdict

    assert verdict in _claim_verdict(lo, hi, claimed=8.0, null=0.0)


@pytest.mark.slow
def test_local_processes_give_the_sequential_runs(finished, tmp_path):
    """--workers 2 (spawned processes) trains the same runs as one process: same seeds, same numbers."""
    study, _ = finished
    parallel = tiny_study(tmp_path, workers=2)
    summary = run_study(parallel)
    assert summary["cost"]["runs_trained"] == 4
    for m in study.methods:
        for s in study.seeds:
            a = read_history(study.run_dir("tiny-arith-offpolicy", m, s))
            b = read_history(parallel.run_dir("tiny-arith-offpolicy", m, s))
            strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/"))} for r in rows]  # noqa: E731
            assert strip(a[: len(b)]) == strip(b)


@pytest.mark.slow
def test_harder_presets_with_stale_rollouts_run_and_summarize(tmp_path):
    """The mult and Countdown presets (their staleness included) through the whole study: 2 methods x 2 seeds."""
    from divclip.trainer.config import TRAIN_PRESETS

    tasks = ("tiny-mult-offpolicy", "tiny-countdown-offpolicy")
    study = tiny_study(tmp_path, tasks=tasks)
    summary = run_study(study)
    assert summary["cost"]["runs_trained"] == 8 and summary["cost"]["warm_starts_trained"] == 4
    table = summary_table(summary)
    for task in tasks:
        k = TRAIN_PRESETS[task].get("staleness", 0)
        assert study.run_config(task, "grpo", 0)["staleness"] == k
        ts = summary["tasks"][task]
        clip = []
        for s in study.seeds:
            rows = rows_of(study.run_dir(task, "grpo", s) / "metrics.jsonl")
            assert [r.get("rollout/policy_lag") for r in rows[1:]] == (
                [min(k, step - 1) for step in range(1, GRID["steps"] + 1)] if k else [None] * GRID["steps"]
            )
            clip.append(np.mean([r["clip/clipfrac"] for r in rows[1:]]))
        assert close(ts["baseline_clipfrac"], np.mean(clip))
        assert f"## {task}: 2 seeds, {GRID['steps']} RL steps; baseline grpo clips" in table
