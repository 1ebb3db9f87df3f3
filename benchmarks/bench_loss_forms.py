"""divclip's verl forms (gpg, dro, clip_cov, kl_cov, geo_mean, bypass_mode REINFORCE) against verl 0.9.1's own
registered functions, forward + backward, in the same run.

    python benchmarks/bench_loss_forms.py [--batch 256] [--length 8192] [--repeats 7] [--plugin]

Inputs are `bench_loss.make_inputs` (float32, GRPO advantages, response lengths uniform in [T/8, T]). Each
row is one verl loss_mode with its settings: divclip's spec is read from those settings with
`divclip.engines.from_engine("verl", ...)`, verl's function is `core_algos.get_policy_loss_fn(mode)`.
Time: one call plus `loss.backward()` on a fresh leaf, the sides interleaved, `repeats` rounds after a
warm-up; divclip runs with metrics=True (all its diagnostics), with the diagnostics verl's function returns for
that row (metrics=names: verl's actor/pg_clipfrac, pg_clipfrac_lower and ppo_kl are divclip's clipfrac,
dual_clipfrac and ppo_kl; gpg returns none, so divclip's list is empty and it still reads the loss to check it is
finite; verl's rollout_corr/* metrics have no divclip counterpart here) and with metrics=False. On a
shared machine wall-clock time measures the neighbours, so by default torch runs one thread and the table
shows the CPU time of that thread (`time.thread_time`), fastest of the rounds; `--wall --threads N` times
wall-clock instead. `--plugin` prints another table instead: divclip's verl plug-in modes (atr_kl3, divclip_kl3),
called through verl's registry with the metrics they return, against verl's vanilla at the bounds they equal.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_loss import make_inputs, verl_config  # noqa: E402

from divclip.engines import from_engine  # noqa: E402
from divclip.theory.losses import policy_loss  # noqa: E402

A = "actor_rollout_ref.actor."
PL = A + "policy_loss."
RC = "algorithm.rollout_correction."
DAPO = {A + "clip_ratio_low": 0.2, A + "clip_ratio_high": 0.28}

ROWS = [  # (name, verl settings)
    ("gpg", {PL + "loss_mode": "gpg"}),
    ("cispo (0.2/0.28)", {PL + "loss_mode": "cispo", **DAPO}),
    ("dro (β = 0.05)", {PL + "loss_mode": "dro", PL + "dro_beta": 0.05}),
    ("clip_cov (defaults, 0.2/0.28)", {PL + "loss_mode": "clip_cov", **DAPO}),
    ("kl_cov (defaults)", {PL + "loss_mode": "kl_cov"}),
    ("geo_mean (0.4/0.4)", {PL + "loss_mode": "geo_mean", A + "clip_ratio_low": 0.4, A + "clip_ratio_high": 0.4}),
    ("bypass ppo_clip (0.2/0.28, c = 3)", {RC + "bypass_mode": True, RC + "rollout_is": "token", **DAPO}),
    (
        "bypass reinforce, token TIS 2",
        {RC + "bypass_mode": True, RC + "loss_type": "reinforce", RC + "rollout_is": "token"},
    ),
    (
        "bypass reinforce, sequence TIS 2",
        {RC + "bypass_mode": True, RC + "loss_type": "reinforce", RC + "rollout_is": "sequence"},
    ),
]


VERL_METRICS = {"actor/pg_clipfrac": "clipfrac", "actor/pg_clipfrac_lower": "dual_clipfrac", "actor/ppo_kl": "ppo_kl"}
"""verl's policy-loss metric names -> the divclip diagnostic that costs the same pass."""


def verl_fn(settings: dict, agg: str, with_metrics: bool = False):
    """verl's registered function for `settings` and the ActorConfig it reads (bypass as verl's trainer sets it);
    with_metrics: the function returns (loss, verl's metrics dict)."""
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.trainer.ppo import core_algos as ca
    from verl.workers.config.actor import PolicyLossConfig

    actor, loss, correction = {}, {}, {}
    for key, value in settings.items():
        for prefix, into in ((PL, loss), (A, actor), (RC, correction)):
            if key.startswith(prefix):
                into[key[len(prefix) :]] = value
                break
    if correction.pop("bypass_mode", False):
        loss["loss_mode"] = "bypass_mode"
        loss["rollout_correction"] = RolloutCorrectionConfig(bypass_mode=True, **correction)
    config = verl_config(policy_loss=PolicyLossConfig(**loss), loss_agg_mode=agg, **actor)
    fn = ca.get_policy_loss_fn(config.policy_loss.loss_mode)
    if with_metrics:
        return lambda lp, x: fn(x["old"], lp, x["adv"], x["mask"], agg, config)
    return lambda lp, x: fn(x["old"], lp, x["adv"], x["mask"], agg, config)[0]


def verl_metric_names(settings: dict, agg: str, inputs) -> list[str]:
    """The divclip diagnostics matching the metrics verl's function returns for `settings` (one call)."""
    _, out = verl_fn(settings, agg, with_metrics=True)(inputs["log_prob"].detach(), inputs)
    return [VERL_METRICS[k] for k in out if k in VERL_METRICS]


def divclip_fn(settings: dict, agg: str, metrics=True):
    spec = from_engine("verl", settings)
    return lambda lp, x: policy_loss(lp, x["old"], x["adv"], x["mask"], spec, agg, metrics=metrics)[0]


def step(fn, inputs, clock) -> float:
    lp = inputs["log_prob"].detach().requires_grad_()
    t0 = clock()
    fn(lp, inputs).backward()
    return clock() - t0


def time_rows(inputs, repeats: int, clock, agg: str = "token-mean"):
    """{name: [verl, divclip, divclip with verl's metrics, divclip metrics=False] as lists of seconds}, the four
    interleaved."""
    made = [
        (
            name,
            (
                verl_fn(s, agg),
                divclip_fn(s, agg),
                divclip_fn(s, agg, metrics=verl_metric_names(s, agg, inputs)),
                divclip_fn(s, agg, metrics=False),
            ),
        )
        for name, s in ROWS
    ]
    return interleaved(dict(made), inputs, repeats, clock)


def interleaved(made: dict, inputs, repeats: int, clock) -> dict:
    """{name: one list of seconds per fn of made[name]}: every fn once as a warm-up, then `repeats` rounds in which
    each row's fns run in turn, so that a slow spell weighs on all sides alike."""
    times = {name: tuple([] for _ in fns) for name, fns in made.items()}
    for fns in made.values():  # warm-up
        for fn in fns:
            step(fn, inputs, clock)
    for _ in range(repeats):
        for name, fns in made.items():
            for fn, out in zip(fns, times[name]):
                torch.manual_seed(0)  # Clip-Cov's draw: the same tokens on both sides
                out.append(step(fn, inputs, clock))
    return times


def plugin_rows(inputs, repeats: int, clock, agg: str = "token-mean"):
    """{name: (verl vanilla's seconds, the divclip plug-in's seconds)}: the plug-in modes of
    `divclip.trainer.integrations.verl` against verl's own vanilla at the bounds they equal (tests/trainer/
    test_trainer_verl.py), both called as verl calls them, metrics and all, interleaved."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.workers.config.actor import PolicyLossConfig

    import divclip.trainer.integrations.verl as plugin

    _, upper, delta = plugin.atr_kl3_bounds(0.2)
    vanilla = verl_config(clip_ratio_low=0.2, clip_ratio_high=upper - 1.0)
    modes = {
        "atr_kl3 (ε_low 0.2)": verl_config(
            policy_loss=PolicyLossConfig(loss_mode="atr_kl3"), clip_ratio_low=0.2, clip_ratio_high=upper - 1.0
        ),
        f"divclip_kl3 (δ {delta:.6f})": verl_config(
            policy_loss=PolicyLossConfig(loss_mode="divclip_kl3"), clip_ratio_low=delta, clip_ratio_high=delta
        ),
    }

    def fn(config):
        loss_fn = get_policy_loss_fn(config.policy_loss.loss_mode)
        return lambda lp, x: loss_fn(x["old"], lp, x["adv"], x["mask"], agg, config)[0]

    return interleaved({name: (fn(vanilla), fn(config)) for name, config in modes.items()}, inputs, repeats, clock)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--length", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: CPU time is per thread)")
    ap.add_argument("--wall", action="store_true", help="wall-clock time instead of the thread's CPU time")
    ap.add_argument("--rows", help="comma-separated row names to run (default: all), e.g. 'gpg,cispo'")
    ap.add_argument(
        "--plugin", action="store_true", help="instead: divclip's verl plug-in modes against verl's vanilla"
    )
    args = ap.parse_args()
    if args.rows:
        wanted = args.rows.split(",")
        ROWS[:] = [row for row in ROWS if row[0].split(" ")[0] in wanted]
    torch.set_num_threads(args.threads)
    clock = time.perf_counter if args.wall else time.thread_time
    inputs = make_inputs(args.batch, args.length)
    n_tok = int(inputs["mask"].sum())
    times = (plugin_rows if args.plugin else time_rows)(inputs, args.repeats, clock)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"forward+backward, ({args.batch}, {args.length}) float32 = {args.batch * args.length:,} tokens "
        f"({n_tok:,} unmasked), token-mean, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{os.cpu_count()} CPUs, load average {load}, {'wall-clock' if args.wall else 'thread CPU'} time, "
        f"fastest of {args.repeats}"
    )
    if args.plugin:
        print("| plug-in loss_mode (its metrics) | verl vanilla ms (its metrics) | plug-in ms | plug-in / vanilla |")
        print("|---|---|---|---|")
        for name, (theirs, ours) in times.items():
            v, d = min(theirs), min(ours)
            print(
                f"| {name} | {v * 1e3:.1f} (median {statistics.median(theirs) * 1e3:.0f}) | {d * 1e3:.1f} (median "
                f"{statistics.median(ours) * 1e3:.0f}) | {d / v:.2f}x |"
            )
        return
    print(
        "| verl loss_mode | verl ms | divclip ms | divclip / verl | divclip, verl's metrics ms | / verl "
        "| divclip metrics=False ms | / verl |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, (theirs, ours, same, bare) in times.items():
        v, d, m, b = min(theirs), min(ours), min(same), min(bare)
        print(
            f"| {name} | {v * 1e3:.1f} (median {statistics.median(theirs) * 1e3:.0f}) | {d * 1e3:.1f} (median "
            f"{statistics.median(ours) * 1e3:.0f}) | {d / v:.2f}x | {m * 1e3:.1f} | {m / v:.2f}x | {b * 1e3:.1f} "
            f"| {b / v:.2f}x |"
        )


if __name__ == "__main__":
    main()
