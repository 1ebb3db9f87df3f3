"""divclip's form of every TRL 1.16 loss_type against TRL's own loss computation, forward + backward, on CPU.

    python benchmarks/bench_loss_trl.py [--batch 256] [--length 8192] [--repeats 7] [--levels token,sequence]

TRL's side is `GRPOTrainer._compute_loss(model, inputs)` itself (its ratio, clip, aggregation and the clip metrics it
always logs), on a trainer holding a GRPOConfig's attributes and a model stub whose forward returns the (B, P + T)
log-probs leaf (tests/theory/trl_helpers.py: the same harness the parity tests use); `loss.backward()` reaches the
leaf. divclip's side is `policy_loss(..., spec, loss_agg_mode, loss_scale_factor)` with the method
`divclip.engines.from_engine('trl', settings)` reads and the TRL engine's EXACT_AGGREGATION / loss_scale_factor
(tests/theory/test_losses_trl.py holds them exact against TRL), once with its diagnostics
(metrics=True, as TRL's loss always computes its own) and once without. Inputs are built once, outside the timing:
float32, old log-probs of tokens sampled from a softmax over 32 logits, log_prob = old + N(0, 0.05²), response
lengths uniform in [T/8, T], advantages of Bernoulli rewards normalised in groups of 8 (TRL's (B,) vector; divclip
takes it as (B, T)). The cases run round-robin, `repeats` times after a warm-up; the table shows the fastest round
and the median. On a shared machine wall-clock time measures the neighbours, so by default torch runs one thread
and the table shows the CPU time of that thread (`time.thread_time`); `--wall --threads N` times wall-clock instead.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "theory"))
import bench_loss  # noqa: E402  (this script's folder is on sys.path)
from trl_helpers import PROMPT, GivenLogProbs, grpo_config, trainer_for, trl_inputs  # noqa: E402

from divclip import engines  # noqa: E402
from divclip.engines import trl as trl_engine  # noqa: E402
from divclip.theory.losses import policy_loss  # noqa: E402

LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")


def make_inputs(batch: int, length: int, seed: int = 0):
    """`bench_loss.make_inputs` (the same tensors), with TRL's (B,) advantages from the same rewards, normalised as
    TRL does ((r - mean) / (std + 1e-4) per group of 8), and their (B, T) masked copy for divclip."""
    x = bench_loss.make_inputs(batch, length, seed)
    rewards = x["rewards"].view(-1, 8)
    adv = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)).reshape(-1)  # (B,)
    mask = x["mask"]
    return {"old": x["old"], "log_prob": x["log_prob"], "adv": adv, "mask": mask, "adv_bt": adv[:, None] * mask}


CLOCK = [time.thread_time]  # main() sets it: the thread's CPU time, or wall-clock with --wall


def trl_case(settings: dict, x: dict):
    """fn() -> seconds for TRL's `_compute_loss` + backward on a fresh leaf."""
    trainer = trainer_for(grpo_config(**settings))
    inputs = trl_inputs(x["old"], x["adv"], x["mask"], float(x["mask"].sum()))
    pad = torch.zeros(x["old"].shape[0], PROMPT)
    full = torch.cat([pad, x["log_prob"]], dim=1)  # (B, P + T): what the fused LM head returns

    def run():
        leaf = full.detach().requires_grad_()
        model = GivenLogProbs(leaf, prefixed=True)
        trainer.model = model
        t0 = CLOCK[0]()
        trainer._compute_loss(model, inputs).backward()
        return CLOCK[0]() - t0

    return run


def divclip_case(settings: dict, x: dict, metrics: bool):
    """The method `divclip.engines.from_engine('trl', settings)` reads, with the TRL engine's exact aggregation."""
    spec = engines.from_engine("trl", settings)
    agg = trl_engine.EXACT_AGGREGATION[settings["loss_type"]]
    scale = trl_engine.loss_scale_factor(
        settings, batch_size=x["old"].shape[0], num_items_in_batch=float(x["mask"].sum())
    )

    def run():
        leaf = x["log_prob"].detach().requires_grad_()
        t0 = CLOCK[0]()
        policy_loss(leaf, x["old"], x["adv_bt"], x["mask"], spec, agg, loss_scale_factor=scale, metrics=metrics)[
            0
        ].backward()
        return CLOCK[0]() - t0

    return run, spec, agg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--length", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--levels", default="token,sequence")
    ap.add_argument("--loss-types", default=",".join(LOSS_TYPES))
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: CPU time is per thread)")
    ap.add_argument("--wall", action="store_true", help="wall-clock time instead of the thread's CPU time")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    CLOCK[0] = time.perf_counter if a.wall else time.thread_time
    x = make_inputs(a.batch, a.length)
    rows = []
    for level in a.levels.split(","):
        for loss_type in a.loss_types.split(","):
            settings = {
                "loss_type": loss_type,
                "importance_sampling_level": level,
                "epsilon_high": 0.28,
                "max_completion_length": a.length,
            }
            trl_run = trl_case(settings, x)
            ours_m, spec, agg = divclip_case(settings, x, True)
            ours_f, _, _ = divclip_case(settings, x, False)
            rows.append((loss_type, level, spec, agg, (trl_run, ours_m, ours_f)))
    times = {id(fn): [] for *_, fns in rows for fn in fns}
    for rep in range(a.repeats + 1):  # the first pass warms up
        for *_, fns in rows:
            for fn in fns:
                t = fn()
                if rep:
                    times[id(fn)].append(t)
    load = " / ".join(f"{v:.1f}" for v in os.getloadavg())
    print(
        f"forward+backward, ({a.batch}, {a.length}) float32, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {os.cpu_count()} CPUs, load average {load}, "
        f"{'wall-clock' if a.wall else 'thread CPU'} time, fastest of {a.repeats} (median in brackets)"
    )
    print(
        "| TRL loss_type | level | divclip method, aggregation | TRL ms | divclip ms | vs TRL | "
        "divclip ms, metrics=False | vs TRL |"
    )
    print("|---|---|---|---|---|---|---|---|")
    from divclip.theory.spec import method_string

    for loss_type, level, spec, agg, fns in rows:
        trl_ms, m_ms, f_ms = (min(times[id(fn)]) * 1e3 for fn in fns)
        trl_med, m_med, f_med = (statistics.median(times[id(fn)]) * 1e3 for fn in fns)
        print(
            f"| {loss_type} | {level} | `{method_string(spec)}`, {agg} | {trl_ms:.1f} ({trl_med:.0f}) | "
            f"{m_ms:.1f} ({m_med:.0f}) | {m_ms / trl_ms:.2f}x | {f_ms:.1f} ({f_med:.0f}) | {f_ms / trl_ms:.2f}x |"
        )


if __name__ == "__main__":
    main()
