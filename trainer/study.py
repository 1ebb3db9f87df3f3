"""A study: every method of a grid trained side by side on the same tasks and seeds, then compared over seeds.

    from divclip.trainer.study import Study, run_study
    summary = run_study(Study(methods=("grpo", "atr"), seeds=range(10), tasks=("tiny-arith-offpolicy",),
                              output_dir="runs/study"))

Layout of `output_dir` (every run directory is what `divclip train` writes):
  warm/<task>/seed<k>/          the warm start of (task, seed), shared by every method (its checkpoint step 0)
  runs/<task>/<method>/seed<k>/ one RL run: metrics.jsonl, metrics.csv, checkpoints/
  study.json                    the grid as asked;  summary.json  every number the table shows
A run whose metrics.jsonl already reaches its last step is skipped; a partial run resumes from its newest
checkpoint (the trainer's own resume). Runs go to local processes (`workers`) or to a Ray cluster (`ray_address`).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from divclip.theory.atlas import find_method
from divclip.theory.methods import METHODS
from divclip.trainer import study_stats as st

# The issue's grid, as atlas names (`divclip atlas`): label -> atlas method name.
DEFAULT_METHODS = (
    "grpo",
    "dapo",
    "atr",
    "dual_clip",
    "dppo_kl",
    "dppo_tv",
    "cispo",
    "sapo",
    "gspo",
    "verl:geo_mean",
    "verl:clip_cov",
    "verl:kl_cov",
)
LABELS = {name: METHODS[name].label for name in DEFAULT_METHODS}
"""Each default method's label: the catalogue's (`divclip.theory.methods`)."""
SUMMARY_METRICS = ("final_accuracy", "final_pass_at_k", "auc", "steps_to_90", "entropy_mean")
"""The run metrics compared with the baseline (clip fractions are reported, not tested)."""


def method_string(name: str) -> str:
    """The method string of an atlas name ('verl:geo_mean' -> 'ratio/geo_mean/...') or of a method string."""
    found = find_method(name)
    return found.name if found.preset else found.method  # a preset's name is its method string


def slug(name: str) -> str:
    """A directory name for a method: 'verl:geo_mean' -> 'verl-geo_mean', 'kl3:0.02/cispo' -> 'kl3-0.02-cispo'."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", name).strip("-") or "method"


@dataclass(frozen=True)
class Study:
    """The grid: methods x seeds x tasks, and where and how to run it."""

    methods: tuple[str, ...] = DEFAULT_METHODS
    """Atlas names or method strings; the first is the baseline every other method is compared with."""
    seeds: tuple[int, ...] = tuple(range(10))
    """Seeds; seed k gives every method the same warm start, held-out split and prompts."""
    tasks: tuple[str, ...] = ("tiny-arith-offpolicy",)
    """`divclip.trainer.config.TRAIN_PRESETS` names."""
    output_dir: str = "runs/study"
    overrides: dict = field(default_factory=dict)
    """TrainerConfig fields applied on top of every task's preset (e.g. {"steps": 50})."""
    workers: int = 1
    """Local processes running runs at once (1 runs them in this process)."""
    ray_address: str | None = None
    """Run on a Ray cluster at this address ('auto', 'ray://host:10001', or 'local' for a new local one)."""
    alpha: float = 0.05
    """Family-wise error rate of the comparisons with the baseline (per task and metric)."""
    progress: bool = True

    def __post_init__(self):
        from divclip.trainer.config import TRAIN_PRESETS, TrainerConfig, from_preset

        for name in ("methods", "seeds", "tasks"):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                raise ValueError(f"Study.{name} must be a sequence, got {value!r}")
            object.__setattr__(self, name, tuple(value))
            if not getattr(self, name):
                raise ValueError(f"Study.{name} must not be empty")
            if len(set(getattr(self, name))) != len(getattr(self, name)):
                raise ValueError(f"Study.{name} has duplicates: {list(getattr(self, name))}")
        for m in self.methods:
            try:
                method_string(m)
            except ValueError as exc:
                raise ValueError(f"Study.methods: {exc}") from None
        if len({slug(m) for m in self.methods}) != len(self.methods):
            raise ValueError(f"Study.methods {list(self.methods)} map to the same directory names")
        for t in self.tasks:
            if t not in TRAIN_PRESETS:
                raise ValueError(f"Study.tasks must be presets {sorted(TRAIN_PRESETS)}, got {t!r}")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or not 1 <= self.workers <= 256:
            raise ValueError(f"Study.workers must be an integer in [1, 256], got {self.workers!r}")
        if not (isinstance(self.alpha, float) and 0 < self.alpha < 1):
            raise ValueError(f"Study.alpha must be a number in (0, 1), got {self.alpha!r}")
        fields = set(TrainerConfig.__dataclass_fields__)
        reserved = {"method", "seed", "output_dir", "warm_start_from", "progress", "task"}
        bad = sorted(set(self.overrides) - fields | set(self.overrides) & reserved)
        if bad:
            raise ValueError(f"Study.overrides has fields {bad} that are unknown or set by the study itself")
        for t in self.tasks:  # every config of the grid is valid before any run starts
            from_preset(t, **self.overrides, method=method_string(self.methods[0]), seed=self.seeds[0])

    @property
    def baseline(self) -> str:
        return self.methods[0]

    def warm_dir(self, task: str, seed: int) -> Path:
        return Path(self.output_dir) / "warm" / task / f"seed{seed}"

    def run_dir(self, task: str, method: str, seed: int) -> Path:
        return Path(self.output_dir) / "runs" / task / slug(method) / f"seed{seed}"

    def warm_config(self, task: str, seed: int) -> dict:
        from divclip.trainer.config import from_preset

        cfg = from_preset(task, **self.overrides, seed=seed, output_dir=str(self.warm_dir(task, seed)))
        return cfg.replace(progress=False).to_dict()

    def run_config(self, task: str, method: str, seed: int) -> dict:
        from divclip.trainer.config import from_preset

        warm = self.warm_dir(task, seed) / "checkpoints" / "step-000000"
        cfg = from_preset(
            task,
            **self.overrides,
            method=method_string(method),
            seed=seed,
            output_dir=str(self.run_dir(task, method, seed)),
        )
        # warm_start_from is checked for existence when the config is built, so it is added as a plain value
        return {**cfg.replace(progress=False).to_dict(), "warm_start_from": str(warm)}

    def to_dict(self) -> dict:
        return {
            "methods": list(self.methods),
            "method_strings": {m: method_string(m) for m in self.methods},
            "seeds": list(self.seeds),
            "tasks": list(self.tasks),
            "overrides": dict(self.overrides),
            "alpha": self.alpha,
        }


# ------------------------------------------------------------------------------------------ one job
def read_history(run_dir) -> list[dict]:
    """The rows of run_dir/metrics.jsonl ([] when there is none)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def is_complete(run_dir, steps: int) -> bool:
    rows = read_history(run_dir)
    return bool(rows) and rows[-1].get("step") == steps and rows[-1].get("eval/accuracy") is not None


def run_job(job: dict) -> dict:
    """Run one job {"kind": "warm" | "run", "config": TrainerConfig fields}; returns {"kind", "dir", "seconds",
    "skipped"}. Top-level and plain-data in and out, so local processes and Ray workers can both call it."""
    cfg_dict = dict(job["config"])
    cfg_dict["adam_betas"] = tuple(cfg_dict["adam_betas"])
    out = cfg_dict["output_dir"]
    start = time.perf_counter()
    if job["kind"] == "run" and is_complete(out, cfg_dict["steps"]):
        return {"kind": "run", "dir": out, "seconds": 0.0, "skipped": True}
    if job["kind"] == "warm" and (Path(out) / "checkpoints" / "step-000000" / "MANIFEST.json").is_file():
        return {"kind": "warm", "dir": out, "seconds": 0.0, "skipped": True}
    from divclip.trainer.config import TrainerConfig
    from divclip.trainer.grpo import GRPOTrainer

    trainer = GRPOTrainer(TrainerConfig(**cfg_dict))
    if job["kind"] == "warm":
        trainer.prepare()
    else:
        trainer.train()
    return {"kind": job["kind"], "dir": out, "seconds": time.perf_counter() - start, "skipped": False}


def _dispatch(jobs: list[dict], study: Study, bar) -> list[dict]:
    """Run `jobs` (independent of each other) in this process, in local processes or on Ray; results in order."""
    if not jobs:
        return []
    if study.ray_address is not None:
        return _dispatch_ray(jobs, study, bar)
    if study.workers == 1:
        results = []
        for job in jobs:
            results.append(run_job(job))
            bar.done(results[-1])
        return results
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    results: list = [None] * len(jobs)
    with ProcessPoolExecutor(study.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(run_job, job): i for i, job in enumerate(jobs)}
        for fut in as_completed(futures):
            results[futures[fut]] = fut.result()
            bar.done(results[futures[fut]])
    return results


def _dispatch_ray(jobs: list[dict], study: Study, bar) -> list[dict]:
    import ray

    if not ray.is_initialized():
        address = None if study.ray_address == "local" else study.ray_address
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(num_cpus=1)(run_job)
    refs = [remote.remote(job) for job in jobs]
    index = {ref: i for i, ref in enumerate(refs)}
    results: list = [None] * len(jobs)
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        for ref in ready:
            results[index[ref]] = ray.get(ref)
            bar.done(results[index[ref]])
    return results


class _Bar:
    """A tqdm bar over jobs (warm starts and runs) on stderr; silent when disabled."""

    def __init__(self, total: int, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc="study", unit="run", file=sys.stderr, dynamic_ncols=True)

    def done(self, result: dict):
        if self.bar is not None:
            where = "/".join(Path(result["dir"]).parts[-3:])
            took = "skipped" if result["skipped"] else f"{result['seconds']:.0f}s"
            self.bar.set_postfix_str(f"{where} {took}")
            self.bar.update(1)

    def close(self):
        if self.bar is not None:
            self.bar.close()


# ------------------------------------------------------------------------------------------ the study
def run_study(study: Study) -> dict:
    """Warm starts, then every run (skipping finished ones), then `summarize`; writes study.json and
    summary.json into output_dir and returns the summary."""
    out = Path(study.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "study.json").write_text(json.dumps(study.to_dict(), indent=1) + "\n", encoding="utf-8")
    warm = [{"kind": "warm", "config": study.warm_config(t, s)} for t in study.tasks for s in study.seeds]
    runs = [
        {"kind": "run", "config": study.run_config(t, m, s)}
        for t in study.tasks
        for s in study.seeds
        for m in study.methods
    ]
    start = time.perf_counter()
    bar = _Bar(len(warm) + len(runs), study.progress)
    try:
        if study.workers == 1 and study.ray_address is None:
            # one at a time, seed by seed: a study stopped early has complete seeds to summarise
            per_task_seed = len(study.methods)
            order = [[w, *runs[i * per_task_seed : (i + 1) * per_task_seed]] for i, w in enumerate(warm)]
            results = _dispatch([job for group in order for job in group], study, bar)
        else:
            results = _dispatch(warm, study, bar) + _dispatch(runs, study, bar)
    finally:
        bar.close()
    summary = summarize(study)
    ran = [r for r in results if not r["skipped"] and r["kind"] == "run"]
    summary["cost"] = {
        "earlier_invocations": _earlier_costs(out / "summary.json"),
        "wall_s": time.perf_counter() - start,
        "runs_trained": len(ran),
        "runs_skipped": sum(r["skipped"] for r in results if r["kind"] == "run"),
        "seconds_per_run": float(np.mean([r["seconds"] for r in ran])) if ran else None,
        "warm_starts_trained": sum(not r["skipped"] for r in results if r["kind"] == "warm"),
    }
    write_summary(summary, out / "summary.json")
    return summary


def _earlier_costs(path: Path) -> list[dict]:
    """The cost records of the earlier invocations that wrote `path` (a rerun keeps the first run's wall time)."""
    try:
        cost = json.loads(path.read_text(encoding="utf-8")).get("cost") or {}
    except (OSError, ValueError, AttributeError):
        return []
    earlier = cost.pop("earlier_invocations", []) if isinstance(cost, dict) else []
    return [*earlier, cost] if cost else list(earlier)


def total_wall_s(summary: dict) -> float:
    """Wall time of every invocation of the study that wrote `summary` (the first plus any reruns)."""
    cost = summary.get("cost") or {}
    return sum(c.get("wall_s") or 0.0 for c in [*cost.get("earlier_invocations", []), cost])


def _finite_or_none(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _clean(obj):
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, (np.floating, np.integer)):
        return _finite_or_none(obj.item())
    return _finite_or_none(obj)


def write_summary(summary: dict, path):
    Path(path).write_text(json.dumps(_clean(summary), indent=1) + "\n", encoding="utf-8")


def _curves(histories: list[list[dict]]) -> dict:
    """Held-out accuracy per eval step: mean over seeds, the band mean ± one standard deviation, and every
    seed's curve (`per_seed`, the seeds in the study's order)."""
    curves = [dict(zip(*st.eval_curve(h))) for h in histories]
    steps = sorted(set.intersection(*(set(c) for c in curves)))
    acc = np.array([[c[s] for s in steps] for c in curves])  # (seeds, eval points)
    mean, sd = acc.mean(axis=0), acc.std(axis=0, ddof=1) if len(acc) > 1 else np.zeros(len(steps))
    return {
        "steps": steps,
        "mean": mean.tolist(),
        "lo": (mean - sd).tolist(),
        "hi": (mean + sd).tolist(),
        "per_seed": acc.tolist(),
    }


def summarize(study: Study) -> dict:
    """Every number of the study from the runs' metrics.jsonl: per run, per method over seeds, the paired
    comparisons with the baseline, the variance ratios and the learning curves. Only seeds every method of a task
    has finished enter a task's comparisons."""
    summary = {"study": study.to_dict(), "tasks": {}, "runs": []}
    for task in study.tasks:
        steps = json.loads(json.dumps(study.run_config(task, study.baseline, study.seeds[0])))["steps"]
        per = {m: {} for m in study.methods}
        for m in study.methods:
            for s in study.seeds:
                d = study.run_dir(task, m, s)
                if is_complete(d, steps):
                    hist = read_history(d)
                    metrics = st.run_metrics(hist)
                    per[m][s] = (hist, metrics)
                    summary["runs"].append({"task": task, "method": m, "seed": s, "dir": str(d), **metrics})
        seeds = [s for s in study.seeds if all(s in per[m] for m in study.methods)]
        summary["tasks"][task] = _task_summary(study, per, seeds, steps)
    return summary


def _task_summary(study: Study, per: dict, seeds: list[int], steps: int) -> dict:
    methods = {}
    for m in study.methods:
        vals = {k: [per[m][s][1][k] for s in seeds] for k in st.RUN_METRICS}
        methods[m] = {
            "label": LABELS.get(m, m),
            "method_string": method_string(m),
            "n_seeds": len(seeds),
            **{k: {"mean": _nanmean(v), "std": _nanstd(v), "values": v} for k, v in vals.items()},
            "curve": _curves([per[m][s][0] for s in seeds]) if seeds else None,
        }
    comparisons, variance = {}, {}
    base = study.baseline
    for metric in SUMMARY_METRICS:
        values = {m: np.array(methods[m][metric]["values"], dtype=float) for m in study.methods}
        if seeds and all(np.all(np.isfinite(v)) for v in values.values()):
            comparisons[metric] = st.compare_to_baseline(values, base, study.alpha)
    acc = {m: np.array(methods[m]["final_accuracy"]["values"], dtype=float) for m in study.methods}
    for m in study.methods:
        if m != base and seeds:
            variance[m] = st.variance_ratio(acc[m], acc[base])
    return {
        "claims": {m: paper_claims(methods, comparisons, variance, m, base, study.alpha) for m in variance},
        "seeds": seeds,
        "steps": steps,
        "baseline": base,
        "baseline_clipfrac": methods[base]["clipfrac"]["mean"],
        "methods": methods,
        "comparisons": comparisons,
        "variance_ratio": variance,
    }


# The seed paper's three claims for ATR-GRPO against GRPO (at 1.7B/8B), each as the number this study measures.
PAPER_CLAIMS = {
    "variance": ("variance over seeds of the final accuracy, ratio to GRPO's", 0.8),
    "convergence": ("mean steps to 90 % of the gain, ratio to GRPO's", 0.85),
    "accuracy": ("final held-out accuracy, difference to GRPO in points", 8.0),
}


def _claim_verdict(lo, hi, claimed, null) -> str:
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "not measurable at this n"
    inside_null = lo <= null <= hi
    inside_claim = lo <= claimed <= hi
    if inside_null and not inside_claim:
        return "no difference detectable; the claimed effect lies outside the interval"
    if inside_null:
        return "no difference detectable; the interval also holds the claimed effect (too few seeds to tell)"
    if inside_claim:
        return "an effect is detected and the claimed size lies in its interval"
    return "an effect is detected but the claimed size lies outside its interval"


def paper_claims(methods, comparisons, variance, method, base, alpha) -> dict:
    """The paper's three claims (`PAPER_CLAIMS`) for `method` against `base`, each with its estimate, a
    (1 − α) paired bootstrap interval and a plain verdict. Informative for any method; the paper's are ATR's."""
    x = np.array(methods[method]["final_accuracy"]["values"], dtype=float)
    y = np.array(methods[base]["final_accuracy"]["values"], dtype=float)
    sx = np.array(methods[method]["steps_to_90"]["values"], dtype=float)
    sy = np.array(methods[base]["steps_to_90"]["values"], dtype=float)
    level = 1 - alpha
    v = variance[method]
    lo, hi = st.paired_bootstrap_ci(x * 100, y * 100, level)
    rlo, rhi = st.paired_ratio_ci(sx, sy, level)
    out = {
        "variance": {"estimate": v["ratio"], "ci_low": v["ci_low"], "ci_high": v["ci_high"], "p": v["p"]},
        "convergence": {
            "estimate": float(sx.mean() / sy.mean()) if len(sy) and sy.mean() else math.nan,
            "ci_low": rlo,
            "ci_high": rhi,
        },
        "accuracy": {"estimate": float((x - y).mean() * 100) if len(x) else math.nan, "ci_low": lo, "ci_high": hi},
    }
    for key, (what, claimed) in PAPER_CLAIMS.items():
        null = 0.0 if key == "accuracy" else 1.0
        out[key].update(what=what, claimed=claimed, ci_level=level)
        out[key]["verdict"] = _claim_verdict(out[key]["ci_low"], out[key]["ci_high"], claimed, null)
    return out


def _nanmean(v) -> float:
    a = np.asarray(v, dtype=float)
    return float(np.mean(a)) if len(a) and np.all(np.isfinite(a)) else math.nan


def _nanstd(v) -> float:
    a = np.asarray(v, dtype=float)
    return float(np.std(a, ddof=1)) if len(a) > 1 and np.all(np.isfinite(a)) else math.nan


# ------------------------------------------------------------------------------------------ the table
def _fmt(v, spec=".3f") -> str:
    return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def summary_table(summary: dict) -> str:
    """Markdown: per task, each method's means over seeds, then each comparison with the baseline."""
    lines = []
    for task, ts in summary["tasks"].items():
        base = ts["baseline"]
        lines += [
            f"## {task}: {len(ts['seeds'])} seeds, {ts['steps']} RL steps; baseline {base} clips "
            f"{_fmt(ts['baseline_clipfrac'] * 100 if ts['baseline_clipfrac'] is not None else None, '.1f')} % "
            "of tokens",
            "",
            "| method | final acc | sd | pass@k | AUC | steps to 90 % | entropy | clip low | clip high |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in ts["methods"].values():
            lines.append(
                f"| {row['label']} | {_fmt(row['final_accuracy']['mean'])} | {_fmt(row['final_accuracy']['std'])} | "
                f"{_fmt(row['final_pass_at_k']['mean'])} | {_fmt(row['auc']['mean'])} | "
                f"{_fmt(row['steps_to_90']['mean'], '.1f')} | {_fmt(row['entropy_mean']['mean'])} | "
                f"{_fmt(row['clipfrac_low']['mean'], '.4f')} | {_fmt(row['clipfrac_high']['mean'], '.4f')} |"
            )
        curves = {row["label"]: row["curve"] for row in ts["methods"].values() if row.get("curve")}
        if curves:
            labels = list(curves)
            lines += [
                "",
                "Held-out accuracy over training, mean ± sd over seeds:",
                "",
                "| step | " + " | ".join(labels) + " |",
                "|---|" + "---|" * len(labels),
            ]
            for i, step in enumerate(curves[labels[0]]["steps"]):
                cells = []
                for label in labels:
                    c = curves[label]
                    cells.append(f"{_fmt(c['mean'][i])} ± {_fmt((c['hi'][i] - c['lo'][i]) / 2)}")
                lines.append(f"| {step:g} | " + " | ".join(cells) + " |")
        lines += [
            "",
            f"Paired differences against {ts['methods'][base]['label']} (same seeds), bootstrap interval at the "
            "Bonferroni level, sign-flip p Holm-adjusted, MDE = smallest effect detectable (80 % power):",
            "",
            "| metric | method | diff | interval | p (Holm) | MDE | verdict |",
            "|---|---|---|---|---|---|---|",
        ]
        for metric, rows in ts["comparisons"].items():
            for r in rows:
                lines.append(
                    f"| {metric} | {ts['methods'][r['method']]['label']} | {_fmt(r['diff'], '+.3f')} | "
                    f"[{_fmt(r['ci_low'], '+.3f')}, {_fmt(r['ci_high'], '+.3f')}] | {_fmt(r['p_holm'])} | "
                    f"{_fmt(r['mde'])} | {r['verdict']} |"
                )
        for m, claims in ts.get("claims", {}).items():
            lines += [
                "",
                f"The paper's three claims (made for ATR-GRPO), measured for {ts['methods'][m]['label']} against "
                f"{ts['methods'][base]['label']} (95 % paired bootstrap intervals):",
                "",
            ]
            for c in claims.values():
                lines.append(
                    f"* {c['what']}: {_fmt(c['estimate'], '.3f')} [{_fmt(c['ci_low'], '.3f')}, "
                    f"{_fmt(c['ci_high'], '.3f')}] (paper: {c['claimed']:g}) — {c['verdict']}"
                )
        lines.append("")
    return "\n".join(lines)


__all__ = [
    "DEFAULT_METHODS",
    "LABELS",
    "Study",
    "method_string",
    "run_job",
    "run_study",
    "summarize",
    "summary_table",
    "total_wall_s",
]
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one tokenizer thread per run process
