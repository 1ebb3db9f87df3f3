"""divclip's policy loss against verl 0.9.1's own loss functions, forward + backward, on CPU.

    python benchmarks/bench_loss.py [--batch 256] [--length 8192] [--repeats 15] [--no-memory]

Inputs (float32, built once): old_log_prob is the log-probability of a token sampled from a softmax over 32
logits (most sampled tokens are likely, a tail is rare), log_prob = old_log_prob + N(0, 0.05²), response lengths
uniform in [T/8, T], GRPO advantages from Bernoulli rewards in groups of 8, zero on padding (as verl feeds them).

Time: one call of the loss plus `loss.backward()` on a fresh leaf; the cases run round-robin, `repeats` times
after a warm-up, and the table shows each case's median; the ratio compares each divclip case with the verl
function it reproduces. torch.set_num_threads is left at its default.

Memory: peak *extra resident memory* of one forward + backward (Linux only): in one fresh subprocess whose glibc
maps every block >= 64 KiB separately (MALLOC_MMAP_THRESHOLD_=65536, so freed tensors leave the resident set at
once), each case runs once to warm up, then VmHWM is reset (/proc/self/clear_refs) and the table shows VmHWM after
one more call minus VmRSS before it: the high-water mark of the temporaries and the gradient, in MiB.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from divclip.theory.advantages import group_advantages
from divclip.theory.losses import ClipSpec, policy_loss, preset

ATR_DELTA = preset("atr").delta


def make_inputs(batch: int, length: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(batch, length, 32, generator=g)
    logp_all = torch.log_softmax(logits, dim=-1)
    gumbel = -torch.log(-torch.log(torch.rand(batch, length, 32, generator=g).clamp_(1e-20, 1.0)))
    token = (logits + gumbel).argmax(dim=-1, keepdim=True)  # a sample from the softmax
    old = logp_all.gather(-1, token).squeeze(-1).contiguous()  # (B, T)
    del logits, logp_all, gumbel
    log_prob = old + 0.05 * torch.randn(batch, length, generator=g)
    lengths = torch.randint(length // 8, length + 1, (batch, 1), generator=g)
    mask = (torch.arange(length)[None, :] < lengths).float()  # (B, T)
    rewards = (torch.rand(batch, generator=g) < 0.5).float()
    adv = group_advantages(rewards, group_size=8).unsqueeze(-1) * mask  # (B, T)
    return {"old": old, "log_prob": log_prob, "adv": adv, "mask": mask}


def verl_config(**kw):
    from verl.workers.config.actor import ActorConfig

    return ActorConfig(strategy="fsdp", rollout_n=8, ppo_micro_batch_size_per_gpu=1, **kw)


def cases():
    """(name, make_fn, verl baseline name or None); make_fn() -> fn(log_prob, inputs) -> loss."""
    from verl.trainer.ppo import core_algos as ca

    def verl(fn, agg="token-mean", **cfg):
        config = verl_config(**cfg)
        return lambda lp, x: fn(x["old"], lp, x["adv"], x["mask"], agg, config)[0]

    def ours(spec, agg="token-mean"):
        return lambda lp, x: policy_loss(lp, x["old"], x["adv"], x["mask"], spec, agg)[0]

    dapo = dict(clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    return [
        ("verl vanilla (ratio 0.2/0.28, dual clip 3)", lambda: verl(ca.compute_policy_loss_vanilla, **dapo), None),
        ("divclip ratio 0.2/0.28, dual clip 3", lambda: ours(ClipSpec("ratio", eps_low=0.2, eps_high=0.28,
                                                                      dual_clip_c=3.0)), "verl vanilla"),
        ("divclip KL3 δ=0.023144, dual clip 3", lambda: ours(ClipSpec("kl3", delta=ATR_DELTA, dual_clip_c=3.0)),
         "verl vanilla"),
        ("divclip KL3 δ=0.023144 (preset atr)", lambda: ours("atr"), "verl vanilla"),
        ("verl dppo_kl (δ=0.05, TIS 20)", lambda: verl(ca.compute_policy_loss_dppo_kl, clip_ratio=0.05,
                                                        clip_ratio_low=0.05, clip_ratio_high=0.05,
                                                        clip_ratio_c=20.0), None),
        ("divclip binary KL gated (preset dppo_kl)", lambda: ours("dppo_kl"), "verl dppo_kl"),
        ("divclip binary KL clip, exact bounds", lambda: ours(ClipSpec("binary_kl", delta=0.05)), "verl dppo_kl"),
        ("verl dppo_tv (δ=0.2, TIS 20)", lambda: verl(ca.compute_policy_loss_dppo_tv, clip_ratio=0.2,
                                                       clip_ratio_c=20.0), None),
        ("divclip binary TV gated (preset dppo_tv)", lambda: ours("dppo_tv"), "verl dppo_tv"),
        ("verl gspo (3e-4/4e-4)", lambda: verl(ca.compute_policy_loss_gspo, clip_ratio_low=3e-4,
                                               clip_ratio_high=4e-4), None),
        ("divclip gspo", lambda: ours("gspo"), "verl gspo"),
        ("verl cispo (0.2/0.28)", lambda: verl(ca.compute_policy_loss_cispo, **dapo), None),
        ("divclip cispo 0.2/0.28", lambda: ours(ClipSpec("ratio", eps_low=0.2, eps_high=0.28, mode="cispo")),
         "verl cispo"),
        ("verl sapo", lambda: verl(ca.compute_policy_loss_sapo, agg="seq-mean-token-mean"), None),
        ("divclip sapo", lambda: ours("sapo", "seq-mean-token-mean"), "verl sapo"),
    ]


def step(fn, inputs):
    lp = inputs["log_prob"].detach().requires_grad_()
    t0 = time.perf_counter()
    fn(lp, inputs).backward()
    return time.perf_counter() - t0


def nan_check_cost(inputs, repeats: int) -> float:
    """ms for `torch.isnan(x).any()` on each of the four (B, T) float inputs: the per-input validation that
    policy_loss replaces by one isfinite test of the scalar loss (any NaN, even under the mask, reaches it)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        [bool(torch.isnan(inputs[k]).any()) for k in ("log_prob", "old", "adv", "mask")]
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def time_cases(inputs, repeats: int):
    made = [(name, make(), base) for name, make, base in cases()]
    times = {name: [] for name, _, _ in made}
    for _ in range(2):  # warm-up
        for _name, fn, _ in made:
            step(fn, inputs)
    for _ in range(repeats):
        for name, fn, _ in made:
            times[name].append(step(fn, inputs))
    return {name: statistics.median(t) for name, t in times.items()}


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith(field + ":")).split()[1])


def memory_child(path: str) -> None:
    """Peak resident growth of one forward + backward per case (Linux: VmHWM after resetting it)."""
    inputs = torch.load(path)
    out = {}
    for name, make, _ in cases():
        fn = make()
        step(fn, inputs)  # warm-up: lazy initialisation is not part of the peak
        gc.collect()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current VmRSS
        before = _status_kib("VmRSS")
        step(fn, inputs)
        out[name] = (_status_kib("VmHWM") - before) / 1024.0
    print(json.dumps(out))


def peak_memory(inputs):
    """Run `memory_child` in a fresh interpreter whose glibc maps every block >= 64 KiB on its own, so that a
    freed tensor leaves the resident set at once and VmHWM tracks the live tensors (not allocator caching)."""
    if not os.path.exists("/proc/self/clear_refs"):
        return {}
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "inputs.pt")
        torch.save(inputs, path)
        res = subprocess.run([sys.executable, __file__, "--memory-child", path], capture_output=True, text=True,
                             check=True, env=env)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--length", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        memory_child(args.memory_child)
        return
    inputs = make_inputs(args.batch, args.length)
    n_tok = int(inputs["mask"].sum())
    times = time_cases(inputs, args.repeats)
    memory = {} if args.no_memory else peak_memory(inputs)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"forward+backward, ({args.batch}, {args.length}) float32 = {args.batch * args.length:,} tokens "
          f"({n_tok:,} unmasked), torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{os.cpu_count()} CPUs, load average {load}, median of {args.repeats}")
    print("| case | ms | vs verl | peak extra RSS (MiB) |")
    print("|---|---|---|---|")
    verl_time = {}
    for name, _, base in cases():
        t = times[name] * 1e3
        if base is None:
            verl_time[name.split(" (")[0]] = t
            ratio = "1.00x (baseline)"
        else:
            ratio = f"{t / verl_time[base]:.2f}x {base}"
        mem = f"{memory[name]:.0f}" if name in memory else "-"
        print(f"| {name} | {t:.1f} | {ratio} | {mem} |")
    print(f"per-input NaN check (torch.isnan(x).any() on 4 inputs), not done by divclip: "
          f"{nan_check_cost(inputs, args.repeats):.1f} ms")


if __name__ == "__main__":
    main()
