"""divclip's policy loss against verl 0.9.1's own loss functions and against the memory floor, forward + backward.

    python benchmarks/bench_loss.py [--batch 256] [--length 8192] [--repeats 15] [--no-memory] [--no-compile]
                                    [--device cpu|cuda] [--peak-gbs GB/S]

Inputs (float32, built once): old_log_prob is the log-probability of a token sampled from a softmax over 32
logits (most sampled tokens are likely, a tail is rare), log_prob = old_log_prob + N(0, 0.05²), response lengths
uniform in [T/8, T], GRPO advantages from Bernoulli rewards in groups of 8, zero on padding (as verl feeds them).

Time: one call of the loss plus `loss.backward()` on a fresh leaf; the cases run round-robin, `repeats` times
after a warm-up, and the table shows each case's median; the ratio compares each divclip case with the verl
function it reproduces. torch.set_num_threads is left at its default.

Floor: the second table times, for the main forms, verl's function, divclip eager and divclip compiled
(`torch.compile(fullgraph=True)` of `policy_loss(..., metrics=False)`, forward and backward) against the least any
loss can cost: one read of the four (B, T) inputs and one write of the (B, T) gradient, timed as a plain
`dst.copy_(src)` that moves the same number of bytes (2.5·B·T floats read, as many written). Each form's cases
and the copy run in one rotation, and every timed call follows a read of a buffer four times the floor's bytes
and at least 256 MiB (`sweep`), so that each starts from memory, not from a cache the call before it warmed:
the floor is a memory floor, the same for the copy and the loss. "x floor" is the median over rounds of a call's
time over the copy's time in the same round (a slow spell of a shared machine then weighs on both sides of a ratio
alike); GB/s is the floor's bytes over each case's time, so a fused loss reaches the copy's GB/s at ratio 1.
A last table repeats each compiled form and the copy back to back without the sweep, each call meeting the caches
its own twin left (on a CPU whose last-level cache holds much of the copy's bytes, the copy is then faster than
memory; the loss, with more bytes in flight, less so). On CUDA the table also gives the device's peak bandwidth
(from the driver's memory clock and bus width, or --peak-gbs) and each case's share of it. Without a GPU,
--device cuda stops with an error.

Memory: peak *extra resident memory* of one forward + backward (Linux only): in one fresh subprocess whose glibc
maps every block >= 64 KiB separately (MALLOC_MMAP_THRESHOLD_=65536, so freed tensors leave the resident set at
once), each case runs once to warm up, then VmHWM is reset (/proc/self/clear_refs) and the table shows VmHWM after
one more call minus VmRSS before it: the high-water mark of the temporaries and the gradient, in MiB. On CUDA:
torch.cuda.max_memory_allocated during the call minus the memory allocated before it.
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
    return {"old": old, "log_prob": log_prob, "adv": adv, "mask": mask, "rewards": rewards}


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
        (
            "divclip ratio 0.2/0.28, dual clip 3",
            lambda: ours(ClipSpec("ratio", eps_low=0.2, eps_high=0.28, params={"dual_clip_c": 3.0})),
            "verl vanilla",
        ),
        (
            "divclip KL3 δ=0.023144, dual clip 3",
            lambda: ours(ClipSpec("kl3", delta=ATR_DELTA, params={"dual_clip_c": 3.0})),
            "verl vanilla",
        ),
        ("divclip KL3 δ=0.023144 (preset atr)", lambda: ours("atr"), "verl vanilla"),
        (
            "verl dppo_kl (δ=0.05, TIS 20)",
            lambda: verl(
                ca.compute_policy_loss_dppo_kl,
                clip_ratio=0.05,
                clip_ratio_low=0.05,
                clip_ratio_high=0.05,
                clip_ratio_c=20.0,
            ),
            None,
        ),
        ("divclip binary KL gated (preset dppo_kl)", lambda: ours("dppo_kl"), "verl dppo_kl"),
        ("divclip binary KL clip, exact bounds", lambda: ours(ClipSpec("binary_kl", delta=0.05)), "verl dppo_kl"),
        (
            "verl dppo_tv (δ=0.2, TIS 20)",
            lambda: verl(ca.compute_policy_loss_dppo_tv, clip_ratio=0.2, clip_ratio_c=20.0),
            None,
        ),
        ("divclip binary TV gated (preset dppo_tv)", lambda: ours("dppo_tv"), "verl dppo_tv"),
        (
            "verl gspo (3e-4/4e-4)",
            lambda: verl(ca.compute_policy_loss_gspo, clip_ratio_low=3e-4, clip_ratio_high=4e-4),
            None,
        ),
        ("divclip gspo", lambda: ours("gspo"), "verl gspo"),
        ("verl cispo (0.2/0.28)", lambda: verl(ca.compute_policy_loss_cispo, **dapo), None),
        (
            "divclip cispo 0.2/0.28",
            lambda: ours(ClipSpec("ratio", eps_low=0.2, eps_high=0.28, form="cispo")),
            "verl cispo",
        ),
        ("verl sapo", lambda: verl(ca.compute_policy_loss_sapo, agg="seq-mean-token-mean"), None),
        ("divclip sapo", lambda: ours("sapo", "seq-mean-token-mean"), "verl sapo"),
    ]


def _sync(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step(fn, inputs):
    lp = inputs["log_prob"].detach().requires_grad_()
    _sync(lp.device)
    t0 = time.perf_counter()
    fn(lp, inputs).backward()
    _sync(lp.device)
    return time.perf_counter() - t0


# ------------------------------------------------------------------------------------------ memory floor
# (name, divclip spec, the verl case it reproduces): the forms timed against the floor, eager and compiled.
FLOOR_CASES = [
    ("KL3 clip (atr)", "atr", "verl vanilla"),
    ("KL3 gated", ClipSpec("kl3", delta=ATR_DELTA, form="gated"), "verl vanilla"),
    (
        "ratio clip, dual clip 3",
        ClipSpec("ratio", eps_low=0.2, eps_high=0.28, params={"dual_clip_c": 3.0}),
        "verl vanilla",
    ),
    ("binary KL gated (dppo_kl)", "dppo_kl", "verl dppo_kl"),
    ("binary KL clip, exact bounds", ClipSpec("binary_kl", delta=0.05), "verl dppo_kl"),
    ("gspo", "gspo", "verl gspo"),
    ("cispo", ClipSpec("ratio", eps_low=0.2, eps_high=0.28, form="cispo"), "verl cispo"),
    ("sapo", "sapo", "verl sapo"),
]


def floor_bytes(inputs) -> int:
    """One read of log_prob, old_log_prob, advantages, mask and one write of the gradient."""
    return (
        sum(inputs[k].numel() * inputs[k].element_size() for k in ("log_prob", "old", "adv", "mask"))
        + inputs["log_prob"].numel() * inputs["log_prob"].element_size()
    )


def floor_copy(inputs):
    """fn() -> a plain `dst.copy_(src)` moving floor_bytes (half read, half written), on the inputs' device."""
    n = floor_bytes(inputs) // 2 // 4
    src = torch.rand(n, device=inputs["log_prob"].device)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def make_sweep(inputs):
    """fn() that reads a buffer of max(4 x floor bytes, 256 MiB) on the inputs' device: run before a timed call, it
    evicts whatever the call before left in the caches (clean lines, so no write-back falls into the timed call)."""
    n = max(4 * floor_bytes(inputs), 256 * 2**20) // 4
    buf = torch.ones(n, device=inputs["log_prob"].device)
    return lambda: buf.sum()


def timed(fn, sweep, device) -> float:
    """Seconds of one fn() started from swept caches."""
    sweep()
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def floor_fns(spec, agg):
    def eager(lp, x):
        return policy_loss(lp, x["old"], x["adv"], x["mask"], spec, agg, metrics=False)[0]

    torch._dynamo.reset()  # each case gets the recompile budget to itself
    return eager, torch.compile(eager, fullgraph=True)


def time_floor_cases(inputs, repeats: int, compile_: bool):
    """{name: {"floor", "verl", "eager", "compiled": s or None, "compile": s or None}}: medians of one rotation per
    form (the floor copy, verl's function, divclip eager, divclip compiled), each call after a sweep."""
    device = inputs["log_prob"].device
    sweep, copy = make_sweep(inputs), floor_copy(inputs)
    verl_fns = {name.split(" (")[0]: make for name, make, base in cases() if base is None}
    out = {}
    for name, spec, base in FLOOR_CASES:
        agg = "seq-mean-token-mean" if spec == "sapo" else "token-mean"
        eager, compiled = floor_fns(spec, agg)
        row = {"compiled": None, "compile": None}
        fns = {"floor": copy, "verl": _stepper(verl_fns[base](), inputs), "eager": _stepper(eager, inputs)}
        if compile_:
            t0 = time.perf_counter()
            step(compiled, inputs)  # compiles forward and backward
            row["compile"] = time.perf_counter() - t0
            fns["compiled"] = _stepper(compiled, inputs)
        times = {k: [] for k in fns}
        for _ in range(2):
            for fn in fns.values():
                fn()
        for _ in range(repeats):
            for k, fn in fns.items():
                times[k].append(timed(fn, sweep, device))
        row.update({k: statistics.median(t) for k, t in times.items()})
        # x floor: the median over rounds of each call's time over the copy's in the same round, so that a slow
        # spell of the machine (a neighbour's load) weighs on both sides of a ratio alike
        row["ratio"] = {k: statistics.median(a / f for a, f in zip(t, times["floor"])) for k, t in times.items()}
        if compile_:  # the same pair back to back, no sweep: each call meets the caches its twin left
            row["warm_floor"], row["warm_compiled"] = (
                back_to_back(fns[k], repeats, device) for k in ("floor", "compiled")
            )
        out[name] = row
    return out


def back_to_back(fn, repeats: int, device) -> float:
    """Median seconds of fn() repeated back to back, without a sweep."""
    fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _stepper(fn, inputs):
    """fn() -> one loss call and its backward on a fresh leaf (what `step` times)."""

    def run():
        lp = inputs["log_prob"].detach().requires_grad_()
        fn(lp, inputs).backward()

    return run


def peak_bandwidth(device: torch.device, given: float | None) -> float | None:
    """GB/s: --peak-gbs, else on CUDA 2 (DDR) x memory clock x bus width from the driver (None if it gives 0)."""
    if given is not None or device.type != "cuda":
        return given
    props = torch.cuda.get_device_properties(device)
    clock_khz, bus_bits = getattr(props, "memory_clock_rate", 0), getattr(props, "memory_bus_width", 0)
    return 2.0 * clock_khz * 1e3 * bus_bits / 8 / 1e9 if clock_khz and bus_bits else None


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


def cuda_peak_memory(inputs):
    """MiB: the most memory allocated during one forward + backward, beyond what was allocated before it."""
    out = {}
    for name, make, _ in cases():
        fn = make()
        step(fn, inputs)
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step(fn, inputs)
        out[name] = (torch.cuda.max_memory_allocated() - before) / 2**20
    return out


def peak_memory(inputs):
    """Run `memory_child` in a fresh interpreter whose glibc maps every block >= 64 KiB on its own, so that a
    freed tensor leaves the resident set at once and VmHWM tracks the live tensors (not allocator caching)."""
    if not os.path.exists("/proc/self/clear_refs"):
        return {}
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "inputs.pt")
        torch.save(inputs, path)
        res = subprocess.run(
            [sys.executable, __file__, "--memory-child", path], capture_output=True, text=True, check=True, env=env
        )
    return json.loads(res.stdout.strip().splitlines()[-1])


def _fail(message: str):
    print(f"divclip: error: {message}", file=sys.stderr)
    sys.exit(2)


def device_of(text: str) -> torch.device:
    """The --device argument: 'cpu' or 'cuda[:N]', with CUDA actually present; else one error line, exit 2."""
    try:
        device = torch.device(text)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        _fail(f"--device must be 'cpu' or 'cuda[:N]', got {text!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        _fail(
            f"--device {text}: no CUDA device is available to torch {torch.__version__} "
            f"(built with CUDA {torch.version.cuda}); run on a machine with a GPU and a CUDA build of torch"
        )
    return device


def print_floor_table(inputs, repeats, compile_, device, peak):
    results = time_floor_cases(inputs, repeats, compile_)
    floor_s = statistics.median(row["floor"] for row in results.values())
    nbytes = floor_bytes(inputs)
    gbs = lambda t: nbytes / t / 1e9  # noqa: E731
    share = (lambda t: f" | {100 * gbs(t) / peak:.1f}%") if peak else (lambda t: "")
    head = " | % of peak" if peak else ""
    peak_text = f"{peak:.0f} GB/s" if peak else "unknown (pass --peak-gbs)"
    print()
    print(
        f"against the memory floor: {nbytes / 2**20:.0f} MiB (4 inputs read, gradient written), plain copy "
        f"{floor_s * 1e3:.2f} ms = {gbs(floor_s):.1f} GB/s (median of its rounds; x floor: the median over rounds "
        f"of time / the copy's time in the same round); every timed call after a sweep of the caches"
        + (f"; device peak {peak_text}" if device.type == "cuda" else "")
    )
    print(f"| case | ms | x floor | GB/s{head} |")
    print("|---|---|---|---|" + ("---|" if peak else ""))
    print(f"| floor: copy of the same bytes | {floor_s * 1e3:.2f} | 1.00x | {gbs(floor_s):.1f}{share(floor_s)} |")
    for name, _, base in FLOOR_CASES:
        row = results[name]
        rows = [(f"{base} (verl's own)", "verl"), (f"divclip {name}, eager", "eager")]
        if row["compiled"] is not None:
            rows.append((f"divclip {name}, compiled (compile {row['compile']:.0f} s)", "compiled"))
        for label, key in rows:
            t = row[key]
            print(f"| {label} | {t * 1e3:.2f} | {row['ratio'][key]:.1f}x | {gbs(t):.1f}{share(t)} |")
    if compile_:
        print()
        print(
            "back to back, no sweep (each call meets the caches the same call left; a CPU's last-level cache may "
            "hold much of the copy's bytes):"
        )
        print("| case | copy ms | compiled ms | x copy |")
        print("|---|---|---|---|")
        for name, _, _ in FLOOR_CASES:
            row = results[name]
            print(
                f"| {name} | {row['warm_floor'] * 1e3:.2f} | {row['warm_compiled'] * 1e3:.2f} | "
                f"{row['warm_compiled'] / row['warm_floor']:.1f}x |"
            )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--length", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--no-compile", action="store_true", help="skip the compiled column of the floor table")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument(
        "--peak-gbs", type=float, help="the device's peak memory bandwidth, GB/s (CUDA: else from the driver)"
    )
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        memory_child(args.memory_child)
        return
    if args.batch < 8 or args.batch % 8:
        _fail(f"--batch must be a positive multiple of 8 (GRPO groups of 8 responses), got {args.batch}")
    if args.length < 8 or args.repeats < 1:
        _fail(f"--length must be at least 8 and --repeats at least 1, got {args.length} and {args.repeats}")
    device = device_of(args.device)
    inputs = {k: v.to(device) for k, v in make_inputs(args.batch, args.length).items()}
    n_tok = int(inputs["mask"].sum())
    times = time_cases(inputs, args.repeats)
    if args.no_memory:
        memory = {}
    else:
        memory = cuda_peak_memory(inputs) if device.type == "cuda" else peak_memory(inputs)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    where = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"CPU, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs"
    )
    print(
        f"forward+backward, ({args.batch}, {args.length}) float32 = {args.batch * args.length:,} tokens "
        f"({n_tok:,} unmasked), torch {torch.__version__}, {where}, load average {load}, "
        f"median of {args.repeats}"
    )
    print(f"| case | ms | vs verl | peak extra {'GPU memory' if device.type == 'cuda' else 'RSS'} (MiB) |")
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
    print(
        f"per-input NaN check (torch.isnan(x).any() on 4 inputs), not done by divclip: "
        f"{nan_check_cost(inputs, args.repeats):.1f} ms"
    )
    print_floor_table(inputs, args.repeats, not args.no_compile, device, peak_bandwidth(device, args.peak_gbs))


if __name__ == "__main__":
    main()
