"""The arena's output: metrics per (method, seed, step), with CSV in/out and across-seed summaries.

Step t (1-based) describes one iteration: the policy π_{t-1} that drew the rollouts (its exact expected
reward, pass@k, entropy, probability of a correct answer; `reward_mean` is the batch's Monte Carlo estimate
of the same expected reward) and the update π_{t-1} -> π_t (exact KL and its k3 estimate, clip fractions and
gradient norm averaged over the PPO epochs).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field

import numpy as np

from divclip.toy_envs.base import PASS_AT_K

POLICY_METRICS = ("reward_mean", "expected_reward", *(f"pass@{k}" for k in PASS_AT_K), "prob_correct", "entropy")
UPDATE_METRICS = ("kl_exact", "kl3", "clipfrac", "clipfrac_low", "clipfrac_high", "clipfrac_dual", "grad_norm", "delta")
METRICS = POLICY_METRICS + UPDATE_METRICS

METRIC_DOCS = {
    "reward_mean": "mean sampled reward of the step's batch (Monte Carlo estimate of expected_reward)",
    "expected_reward": "exact expected reward of the rollout policy",
    **{f"pass@{k}": f"exact probability that {k} independent answers include a correct one" for k in PASS_AT_K},
    "prob_correct": "exact probability of a correct answer (mean over prompts)",
    "entropy": "exact mean per-token entropy (nats)",
    "kl_exact": "exact KL(π_old ‖ π_new) per response across the step's update",
    "kl3": "k3 estimate of the same KL from the batch: Σ_tokens (r - 1 - log r)",
    "clipfrac": "fraction of tokens whose gradient the loss zeroed (all causes), mean over epochs",
    "clipfrac_low": "clipped with A < 0 and r < 1 (the lower bound)",
    "clipfrac_high": "clipped with A > 0 and r > 1 (the upper bound)",
    "clipfrac_dual": "clipped with A < 0 and r > 1 (dual clip)",
    "grad_norm": "L2 norm of this seed's policy gradient, mean over epochs",
    "delta": "the budget δ the step's loss used: the spec's δ for a fixed measure, the controller's for an "
    "adaptive one ('kl3@clipfrac=0.1'); NaN where there is no single δ (ratio clips, sapo, intersections)",
}


@dataclass
class ArenaResult:
    env: str
    env_config: dict
    methods: list[str]
    specs: dict  # label -> ClipSpec (or its repr after a CSV round trip)
    seeds: list[int]
    metrics: dict[str, np.ndarray]  # name -> (methods, seeds, steps_done)
    config: dict = field(default_factory=dict)
    total_steps: int = 0
    stopped: bool = False
    loss_info: dict[str, np.ndarray] = field(default_factory=dict)  # policy_loss's own metrics, (methods, steps)
    best_reward: float = float("nan")  # the environment's known optimum of expected_reward

    @property
    def steps_done(self) -> int:
        return next(iter(self.metrics.values())).shape[-1]

    @property
    def finished(self) -> bool:
        return self.steps_done >= self.total_steps and not self.stopped

    def curve(self, metric: str, method: str) -> np.ndarray:
        """(seeds, steps) for one method."""
        return self.metrics[metric][self.methods.index(method)]

    def band(self, metric: str, level: float = 0.95):
        """Across-seed mean and the central `level` band of seeds, each (methods, steps)."""
        x = self.metrics[metric]
        a = (1.0 - level) / 2.0
        return x.mean(1), np.quantile(x, a, axis=1), np.quantile(x, 1.0 - a, axis=1)

    # -- CSV (long format: one row per method, seed, step) -----------------------------------------
    def to_csv(self, path) -> None:
        S, T = len(self.seeds), self.steps_done
        seed_col = np.repeat(np.asarray(self.seeds, dtype=np.float64), T)  # (S·T,)
        step_col = np.tile(np.arange(1, T + 1, dtype=np.float64), S)
        fmt = ",".join(["%d", "%d"] + ["%.9g"] * len(METRICS))
        with open(path, "w", newline="") as fh:
            fh.write(",".join(["method", "seed", "step", *METRICS]) + "\n")
            for m, name in enumerate(self.methods):
                body = np.column_stack([seed_col, step_col, *(self.metrics[k][m].reshape(-1) for k in METRICS)])
                np.savetxt(fh, body, fmt=name.replace("%", "%%") + "," + fmt)

    @classmethod
    def from_csv(cls, path, env: str = "", env_config: dict | None = None) -> ArenaResult:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
        methods = list(dict.fromkeys(r["method"] for r in rows))
        seeds = sorted({int(r["seed"]) for r in rows})
        steps = max(int(r["step"]) for r in rows)
        metrics = {k: np.full((len(methods), len(seeds), steps), np.nan) for k in METRICS}
        mi, si = {m: i for i, m in enumerate(methods)}, {s: i for i, s in enumerate(seeds)}
        for r in rows:
            ix = (mi[r["method"]], si[int(r["seed"])], int(r["step"]) - 1)
            for k in METRICS:
                metrics[k][ix] = float(r[k]) if k in r else np.nan  # CSVs written before a metric existed
        return cls(env, env_config or {}, methods, {m: m for m in methods}, seeds, metrics, total_steps=steps)
