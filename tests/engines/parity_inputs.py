"""Inputs and comparisons shared by the engine parity tests (tests/engines/test_parity_*.py).

`batch(kind, dtype)` is one (B, T) batch of log π, log π_old, A and a 0/1 mask with what issue 35 asks of every
comparison: log-ratios up to |log r| = 30 both ways (a token at p = e^-30 that rose to 0.9, one that fell to
e^-31), tokens clipped on both sides, A = 0 tokens, an empty row, and advantages that vary per token ("token") or
are one value per row ("row": GRPO's, with one constant-reward row of zeros); "empty" has no loss token at all.

`value_and_grad(fn, lp)` differentiates a loss with respect to log π. `assert_same(ours, theirs, dtype, engine64)`
holds divclip's (value, gradient) to the engine's: float64 to 1e-12 relative per entry, float32 to the engine's own
rounding (no further from the engine's float32 numbers than those are from the engine's float64 ones, plus a few
ulps of the largest entry).

`inputs(advantages, dtype)` and `TOL` are the OpenRLHF and slime tests' batch (with rollout log-probs) and tolerances.
"""

from __future__ import annotations

import math

import torch

KINDS = ("token", "row", "empty")
B, T = 6, 10


def batch(kind: str, dtype=torch.float64, seed: int = 0):
    """(log π, log π_old, A, mask) of one kind, in `dtype` (built in float64, then rounded once)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3.0 - 0.05  # p in (e^-3.05, e^-0.05)
    step = 0.6 * torch.randn(B, T, generator=g, dtype=torch.float64)
    lp = (old + step).clamp(max=-1e-3)
    # |log r| = 30 both ways, each clipped and not: (0, 1) rose e^30 against A < 0 (kept without a dual clip: the
    # exploded token), (1, 5) rose e^30 with A > 0 (clipped), (2, 2) fell e^-30 against A > 0 (kept), (3, 6) fell
    # e^-30 with A < 0 (clipped); (3, 4): r = 5 with A < 0, past a dual clip's c = 3
    extreme = {(0, 1): (-30.1, -0.1), (1, 5): (-30.2, -0.2), (2, 2): (-1.0, -31.0), (3, 6): (-0.5, -30.5)}
    extreme[(3, 4)] = (math.log(0.1), math.log(0.5))
    for (i, t), (o, n) in extreme.items():
        old[i, t], lp[i, t] = o, n
    mask = (torch.rand(B, T, generator=g) > 0.2).to(torch.float64)
    mask[:, 0] = 1.0
    for i, t in extreme:
        mask[i, t] = 1.0
    mask[4] = 0.0  # an empty row
    signs = {0: -1.3, 1: 0.9, 2: 0.7, 3: -1.1}  # the extreme tokens' advantages (per row for kind "row")
    if kind == "row":
        adv = torch.randn(B, 1, generator=g, dtype=torch.float64).expand(B, T).clone()
        for i, a in signs.items():
            adv[i] = a
        adv[5] = 0.0  # a constant-reward group's row
    else:
        adv = torch.randn(B, T, generator=g, dtype=torch.float64)
        for i, t in extreme:
            adv[i, t] = signs[i]
        adv[1, :3] = 0.0
    if kind == "empty":
        mask.zero_()
    return tuple(t.to(dtype) for t in (lp, old, adv, mask))


def value_and_grad(fn, lp):
    """(loss, ∂loss/∂log π) of `fn(log π)`, both detached."""
    leaf = lp.detach().clone().requires_grad_(True)
    out = fn(leaf)
    out.backward()
    grad = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
    return out.detach(), grad


def _bad(ours, theirs, tol):
    return torch.nonzero(~((ours - theirs).abs() <= tol)).tolist()[:5]


def assert_same(ours, theirs, dtype, engine64=None, rtol64: float = 1e-12):
    """ours, theirs: (value, gradient) in `dtype`; engine64: the engine's (value, gradient) in float64 (float32 only).

    float64: |ours − theirs| <= rtol64·|theirs| per entry (1e-300 absolute: an exact 0 must be 0). float32: per entry
    within 2·|theirs32 − theirs64| + 8 ulps of the tensor's largest entry, the engine's own rounding."""
    for name, a, b, ref in zip(("value", "gradient"), ours, theirs, engine64 or (None, None)):
        a, b = a.to(torch.float64), b.to(torch.float64)
        assert bool(torch.isfinite(b).all()), f"the engine's {name} is not finite"
        if dtype == torch.float64:
            tol = rtol64 * b.abs() + 1e-300
        else:
            eps = torch.finfo(torch.float32).eps
            tol = 2.0 * (b - ref.to(torch.float64)).abs() + 8 * eps * b.abs().max()
        assert bool(((a - b).abs() <= tol).all()), (
            f"{name} differs from the engine's at {_bad(a, b, tol)}: ours {a.reshape(-1)[:4].tolist()}..., theirs "
            f"{b.reshape(-1)[:4].tolist()}...; max |diff| {float((a - b).abs().max()):.3g}"
        )


TOL = {torch.float64: 1e-12, torch.float32: 2e-5}
"""Relative tolerance of a parity: float64 to 1e-12; float32 to float32 rounding (the engine and divclip sum the
same terms in another order, over values up to e^20·|A|)."""


def inputs(advantages: str, dtype, seed: int = 0):
    """(log π leaf, log π_old, A, bool mask, log π_rollout), (6, 9): rows of 9, 5, 0 (empty), 7, 1 and 9 tokens;
    |log r| up to 30 on some tokens, row 5's mean log r 12 (> GSPO's clamp 10), the rest ~ N(0, 0.3²)."""
    g = torch.Generator().manual_seed(seed)
    rows, width = 6, 9
    lengths = torch.tensor([9, 5, 0, 7, 1, 9])
    mask = torch.arange(width)[None, :] < lengths[:, None]
    log_r = 0.3 * torch.randn(rows, width, generator=g, dtype=torch.float64)
    log_r[0, 2], log_r[0, 5], log_r[3, 1], log_r[3, 4], log_r[1, 0] = 30.0, -30.0, 25.0, -22.0, -0.25
    log_r[5] = 12.0 + 0.5 * torch.randn(width, generator=g, dtype=torch.float64)
    lp = -torch.rand(rows, width, generator=g, dtype=torch.float64) * 3 - 0.05
    old = lp - log_r
    rollout = old - 0.4 * torch.randn(rows, width, generator=g, dtype=torch.float64)
    rollout[0, 3] = old[0, 3] + 25.0
    if advantages == "token":
        adv = torch.randn(rows, width, generator=g, dtype=torch.float64)
    else:
        adv = torch.randn(rows, 1, generator=g, dtype=torch.float64).expand(rows, width).clone()
    cast = [t.to(dtype) for t in (lp, old, adv, rollout)]
    return cast[0].requires_grad_(True), cast[1], cast[2], mask, cast[3]


LOW_DTYPES = (torch.bfloat16, torch.float16)
LOW_IDS = ("bf16", "fp16")
MODERATE = 3.0
"""|log r| and |log ρ| bound of the fp16 rows' inputs (`moderate`): e^3·|A| stays far below fp16's 65504, as an
fp16 run keeps its ratios; the bf16 rows keep |log r| up to 30 (bf16 has float32's range)."""


def low_precision_rows(engine: str, settings: str, note: str, overflow: str, reference: str):
    """(the two exact rows' settings, the three PARITY_ROWS of an engine's bf16 / fp16 tests): bf16 with |log r| to
    30 over `settings`, fp16 with |log r| <= 3 (`note` formatted with dtype), and the named fp16 overflow at
    |log r| to 30 (`overflow`: what the engine's fp16 run does; `reference`: whose float64 value divclip's is)."""
    names = (f"bf16 inputs, |log r| to 30 ({settings})", "fp16 inputs, |log r| <= 3 (the same settings)")
    rows = [
        (engine, names[0], "exact", note.format(dtype="bf16")),
        (engine, names[1], "exact", note.format(dtype="fp16")),
        (
            engine,
            "fp16 inputs with |log r| to 30",
            "named",
            f"{overflow}; divclip's is finite (float32 inside) and {reference}'s float64 value on the same inputs; "
            "its gradient, cast to fp16 at the leaf, is inf exactly where the float64 gradient is beyond 65504 "
            "(parity_inputs.assert_fp16_overflow_is_the_engines)",
        ),
    ]
    return names, rows


def moderate(lp, old, rollout=None, bound: float = MODERATE):
    """(log π, rollout) with log r = log π − log π_old (and log π_old − log π_rollout) clamped to ±bound."""
    lp = old + (lp.detach() - old).clamp(-bound, bound)
    return lp, None if rollout is None else old - (old - rollout).clamp(-bound, bound)


def low_precision_runs(ours_fn, theirs_fn, lp, others, dtype):
    """(ours, theirs_low, theirs32, theirs64), each (value, gradient in log π): the float64 inputs `lp`, `others`
    rounded once to `dtype` (bf16/fp16) as the engine receives them; divclip and the engine on those tensors, and
    the engine again on the same values upcast to float32 and float64 (bool masks unchanged)."""

    def cast(t, to):
        return t.to(to) if isinstance(t, torch.Tensor) and t.is_floating_point() else t

    low = [cast(t, dtype) for t in others]
    lp_low = cast(lp.detach(), dtype)
    ours = value_and_grad(lambda x: ours_fn(x, *low), lp_low)
    theirs_low = value_and_grad(lambda x: theirs_fn(x, *low), lp_low)
    up = {}
    for to in (torch.float32, torch.float64):
        args = [cast(t, to) for t in low]
        up[to] = value_and_grad(lambda x, args=args: theirs_fn(x, *args), lp_low.to(to))
    return ours, theirs_low, up[torch.float32], up[torch.float64]


def assert_low_precision(ours, theirs_low, theirs32, theirs64, dtype):
    """divclip on bf16/fp16 inputs (computed in float32, its gradient cast back to the input dtype) against the
    engine on the same input values. Per entry, with eps32 float32's epsilon and eps the input dtype's:

    * finite, value and gradient;
    * equal to the engine's code run exactly (float64) on those values, to float32 rounding: |ours − theirs64| <=
      2·|theirs32 − theirs64| + 8·eps32·max|theirs64| (the float32 rule of `assert_same`), plus, for the gradient,
      eps·|theirs64| + the dtype's smallest subnormal (the cast of divclip's float32 gradient to the input dtype
      rounds it by at most half an ulp, and an ulp of x is at most eps·|x|);
    * equal to the engine's own run in that dtype to its rounding: |ours − theirs_low| <= 2·|theirs_low − theirs64|
      plus the same allowance (the engine's error in its dtype is what it is: an exp of a bf16 log-ratio is off by
      up to |log r|·2^-8 relative, 12% at |log r| = 30)."""
    eps32 = torch.finfo(torch.float32).eps
    info = torch.finfo(dtype)
    for name, a, low, b32, b64 in zip(("value", "gradient"), ours, theirs_low, theirs32, theirs64):
        assert bool(torch.isfinite(a).all()), f"divclip's {name} is not finite on {dtype} inputs"
        assert bool(torch.isfinite(low).all()), f"the engine's {name} is not finite on {dtype} inputs"
        a, low, b32, b64 = (t.to(torch.float64) for t in (a, low, b32, b64))
        allowance = 8 * eps32 * b64.abs().max()
        if name == "gradient":
            allowance = allowance + info.eps * b64.abs() + info.smallest_normal * info.eps
        for ref, spread, what in ((b64, b32, "exactly (float64)"), (low, low, f"in {dtype}")):
            tol = 2.0 * (spread - b64).abs() + allowance
            assert bool(((a - ref).abs() <= tol).all()), (
                f"{name} on {dtype} inputs differs from the engine's run {what} at {_bad(a, ref, tol)}: ours "
                f"{a.reshape(-1)[:4].tolist()}..., theirs {ref.reshape(-1)[:4].tolist()}...; max |diff| "
                f"{float((a - ref).abs().max()):.3g}"
            )


def assert_fp16_overflow_is_the_engines(ours, theirs_low, theirs32, theirs64):
    """fp16 inputs with |log r| to 30 (the runs of `low_precision_runs`): the engine's fp16 loss overflows (inf or
    NaN); divclip's value is finite and the engine's float64 value on the same inputs to float32 rounding; its
    gradient, cast to fp16 at the leaf, is non-finite exactly where the engine's float64 gradient is beyond fp16's
    largest number (65504), and the engine's float64 gradient to float32 rounding and one fp16 ulp elsewhere."""
    assert not bool(torch.isfinite(theirs_low[0])), "the engine's fp16 loss is finite: no overflow to name"
    eps32, info = torch.finfo(torch.float32).eps, torch.finfo(torch.float16)
    value, ref = float(ours[0]), float(theirs64[0])
    assert math.isfinite(value) and abs(value - ref) <= 2 * abs(float(theirs32[0]) - ref) + 8 * eps32 * abs(ref)
    grad, ref = ours[1].to(torch.float64), theirs64[1]
    beyond = ref.abs() > info.max
    assert torch.equal(~torch.isfinite(grad), beyond)
    tol = (
        2 * (theirs32[1] - ref).abs()
        + 8 * eps32 * ref[~beyond].abs().max()
        + info.eps * ref.abs()
        + info.tiny * info.eps
    )
    assert bool(((grad - ref).abs() <= tol)[~beyond].all())
