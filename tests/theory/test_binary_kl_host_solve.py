"""The CPU's host solve of binary-KL clip bounds (theory/forms/_kernels.py: `_binary_kl_candidates`,
`binary_kl_clip_signed`, the custom op a compiled loss calls whole), against independent references:

* the candidates, a fused χ² test with an exp-free bound p̄ >= π_old, are a superset of the tokens whose D > δ, D
  from `_divergence` on every token, on tokens placed within a few ulps of the roots, far outside the ±20 log-ratio
  clamp, at π_θ = 1 and above 1;
* the clipped ratio is the reference's: the decision `~(D <= δ) & moved` of every token and the exact roots of
  the numpy reference solver (`Measure.bounds`, within 4 ulps in float64: equal once rounded to float32);
* the clip form's folded call: |signed| the ratio of each token's loss, the sign bit exactly where its gradient is
  dropped (clipped, outside the clamp, NaN);
* the numpy run of `binary_kl_root_nosync` (what the op solves with) is within 4 ulps of mpmath on the edge cases
  of tests/theory/test_binary_kl_exact.py;
* compiled (`torch.compile(fullgraph=True)`) the clip and cispo losses with exact binary-KL bounds equal eager."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_binary_kl_exact import EDGE, check_pair
from test_loss_nosync import compiled_agrees, make_inputs

import divclip.theory.forms._kernels as K
from divclip.theory.loss_bounds import binary_kl_root_nosync
from divclip.theory.measures import get_measure
from divclip.theory.spec import ClipSpec

DTYPES = [torch.float32, torch.float64]


def hard_inputs(dtype, delta=0.05, n=3000, seed=0):
    """(log π, log π_old, A), one row: random tokens; at the floats nearest the roots hi(p), lo(p) of D = δ and
    an ulp either side; log-ratios of ±25 (beyond verl's clamp); π_θ = 1 and π_θ > 1 (log π > 0)."""
    g = np.random.default_rng(seed)
    p = 10.0 ** g.uniform(-6, math.log10(0.999), n)
    lo, hi = get_measure("binary_kl").bounds(delta, p)
    q_root = np.concatenate([p * hi, (p * lo)[lo > 0]])
    p_root = np.concatenate([p, p[lo > 0]])
    lp_root = torch.tensor(np.log(q_root)).to(dtype)
    near = [lp_root, *[torch.nextafter(lp_root, torch.full_like(lp_root, s)) for s in (-math.inf, math.inf)]]
    old_near = torch.tensor(np.log(p_root)).to(dtype).repeat(len(near))
    lp_near = torch.cat(near)
    old_rand = torch.tensor(np.log(g.uniform(1e-6, 1.0, n))).to(dtype)
    lp_rand = (old_rand + torch.tensor(g.normal(0.0, 0.8, n)).to(dtype)).clamp(max=0.0)
    old_x = torch.tensor([-30.0, -0.1, -45.0, -1.0, math.log(0.5), -0.3], dtype=dtype)
    lp_x = torch.tensor([-5.0, -45.0, -20.0, 0.0, 0.2, 0.0], dtype=dtype)  # |log r| 25; π_θ = 1; log π > 0
    old = torch.cat([old_near, old_rand, old_x])[None]
    lp = torch.cat([lp_near, lp_rand, lp_x])[None]
    adv = torch.tensor(g.choice([-1.0, 1.0], old.shape[1])).to(dtype)[None]
    return lp, old, adv


def reference_clip(spec, ratio, old, lp, moved):
    """where(~(D <= δ) & moved, root, r): D from `_divergence` on every token, the roots from the numpy reference
    solver in float64, rounded to the ratio's dtype."""
    divergence, p = K._divergence(spec, ratio, old, lp)
    which = ~(divergence <= spec.delta) & moved
    p = torch.where(torch.isnan(p), 0.5, p)  # a NaN log π_old: never moved, so its root is not read
    lo, hi = get_measure("binary_kl").bounds(spec.delta, p.double().numpy())
    root = torch.where(ratio > 1, torch.from_numpy(np.asarray(hi)), torch.from_numpy(np.asarray(lo)))
    return torch.where(which, root.to(ratio.dtype), ratio), which


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("delta", [0.05, 0.002, 0.5])
def test_the_candidates_hold_every_token_past_the_budget(dtype, delta):
    lp, old, adv = hard_inputs(dtype, delta)
    spec = ClipSpec("binary_kl", delta=delta)
    ratio = (lp - old).clamp(-20, 20).exp()
    divergence, _ = K._divergence(spec, ratio, old, lp)
    outside = ~(divergence <= delta)
    candidates = K._binary_kl_candidates(spec, ratio, old)
    assert int(outside.sum()) > 1000
    assert not (outside & ~candidates).any()  # a superset
    near_one = (divergence < delta / 4) & ((lp - old).abs() < 0.5)  # χ² ≈ 2D < δ there: left out
    assert int(near_one.sum()) > 100 and float(candidates[near_one].double().mean()) < 0.05  # and a filter


@pytest.mark.parametrize("density", [0.0, 0.004, 0.3, 1.0])
def test_the_flag_scan_is_flatnonzero(density):
    """`_flagged` (the op's scan, eight flags per 64-bit word) finds numpy's flatnonzero, in order, for bool and
    0/1 uint8 flags, lengths that are and are not a multiple of 8 (the tail read byte by byte), runs of set flags."""
    g = np.random.default_rng(7)
    for n in (0, 1, 7, 8, 9, 63, 64, 1001, 4096 + 5):
        flags = g.random(n) < density
        flags[n // 2 : n // 2 + min(n // 4, 20)] = density > 0  # a run of set flags across word borders
        want = np.flatnonzero(flags)
        for given in (flags, flags.astype(np.uint8)):
            got = K._flagged(given)
            assert got.dtype.kind == "i" and np.array_equal(got, want), (n, density, given.dtype)
    assert K._flagged(np.ones(4096 + 5, np.uint8)).size == 4096 + 5


@pytest.mark.parametrize("compiled", [False, True])
def test_the_flags_are_the_candidates(compiled):
    """`_signed_candidates` hands the op r with its sign bit set on the candidates and one byte per token that is 1
    exactly there, eager (the bool test viewed as bytes) and compiled (stored through float, see its docstring)."""
    lp, old, _ = hard_inputs(torch.float32)
    spec = ClipSpec("binary_kl", delta=0.05)
    ratio = (lp - old).clamp(-20, 20).exp()
    fn = torch.compile(K._signed_candidates, fullgraph=True) if compiled else K._signed_candidates
    signed, flags = fn(spec, ratio, old)
    candidates = K._binary_kl_candidates(spec, ratio, old)
    assert flags.dtype == torch.uint8 and int(candidates.sum()) > 1000
    assert torch.equal(flags, candidates.to(torch.uint8))
    assert torch.equal(signed.abs(), ratio) and torch.equal(torch.signbit(signed), candidates)
    assert signed.is_contiguous()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_log_prob", [True, False])
def test_the_host_solve_is_the_exact_decision_and_root(dtype, with_log_prob):
    """The clip form's call (D from the log-probabilities, moved tokens) and cispo's (D from r, every token)."""
    lp, old, adv = hard_inputs(dtype)
    spec = ClipSpec("binary_kl", delta=0.05)
    ratio = (lp - old).clamp(-20, 20).exp()
    moved = (ratio - 1.0) * adv > 0 if with_log_prob else torch.ones_like(ratio, dtype=torch.bool)
    lp_d = lp if with_log_prob else None
    got = K._per_token_clip(spec, ratio, old, adv if with_log_prob else None, ratio, lp_d, ratio_from=lp)
    want, which = reference_clip(spec, ratio, old, lp_d, moved)
    assert int(which.sum()) > 1000
    if dtype == torch.float32:  # within 4 ulps in float64, so the same float32
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=4 * 2.0**-52, atol=0.0)
    assert not ((got != ratio) & ~which).any()  # only tokens past the budget move


def test_the_numpy_sync_free_roots_are_exact_to_4_ulps():
    """The op solves with `binary_kl_root_nosync(..., xp=np)`: the same 4-ulp check as its torch run."""
    pairs = EDGE + [(d, p) for d in (1e-12, 1e-3, 0.05, 1.0, 1e3) for p in (1e-12, 1e-3, 0.3, 1 - 1e-3, 1 - 1e-12)]
    for delta, p in pairs:
        with np.errstate(all="ignore"):
            lo, hi = binary_kl_root_nosync(delta, np.array([p, p]), np.array([False, True]), xp=np).tolist()
        check_pair(delta, p, lo, hi)


def test_the_host_solve_is_off_where_the_cpu_is_not_a_compaction_device(monkeypatch):
    """With no host-compaction device the loss takes the sync-free every-token solve instead (what an accelerator
    runs), and the two agree (tests/theory/test_loss_nosync.py holds that path to 4 ulps)."""
    calls = []
    real = K.binary_kl_clip_signed
    monkeypatch.setattr(K, "binary_kl_clip_signed", lambda *a: calls.append(1) or real(*a))
    lp, old, adv, mask = make_inputs(shape=(8, 64), seed=2)
    spec = ClipSpec("binary_kl", delta=0.05)
    ratio = (lp - old).clamp(-20, 20).exp()
    host = K._per_token_clip(spec, ratio, old, adv, ratio, lp, ratio_from=lp)
    monkeypatch.setattr(K, "HOST_COMPACTION_DEVICES", ())
    nosync = K._per_token_clip(spec, ratio, old, adv, ratio, lp, ratio_from=lp)
    assert len(calls) == 1 and int((host != ratio).sum()) > 10
    torch.testing.assert_close(nosync, host, rtol=1e-6, atol=0.0)


@pytest.mark.parametrize("method", ["binary_kl:0.05", "binary_kl:0.05/cispo"])
def test_compiled_host_solve_matches_eager(method):
    compiled_agrees(method)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("clamp", [True, False])
def test_the_folded_clip_is_the_clip_forms_decision(dtype, clamp):
    """The clip form's fast path (`folded_binary_kl_clip`, the op with fold=True): |signed| is the ratio of each
    token's loss (the reference's root where clipping makes −A·clip(r) strictly larger than −A·r, r elsewhere) and
    the sign bit is set exactly where the gradient is dropped: clipped, or outside verl's ±20 clamp (with clamp),
    a NaN among them. Tokens added: a NaN log-probability, and with clamp=False a ratio that underflows to 0."""
    lp, old, adv = hard_inputs(dtype)
    lp = torch.cat([lp, torch.tensor([[math.nan, -1000.0, -0.5]], dtype=dtype)], dim=1)
    old = torch.cat([old, torch.tensor([[-0.5, -0.2, math.nan]], dtype=dtype)], dim=1)
    adv = torch.cat([adv, torch.tensor([[1.0, -1.0, 1.0]], dtype=dtype)], dim=1)
    spec = ClipSpec("binary_kl", delta=0.05, params={"clamp_log_ratio": clamp})
    raw = lp - old
    ratio = (raw.clamp(-20, 20) if clamp else raw).exp()
    signed = K.folded_binary_kl_clip(spec, ratio, old, lp, adv)
    want, which = reference_clip(spec, ratio, old, lp, (ratio - 1.0) * adv > 0)
    clipped = -(adv * want) > -(adv * ratio)
    want_ratio = torch.where(clipped, want, ratio)
    dropped = clipped | (~(raw.abs() <= 20) if clamp else torch.zeros_like(clipped))
    assert int(clipped.sum()) > 1000 and int((dropped & ~clipped).sum()) >= (3 if clamp else 0)
    if dtype == torch.float32:  # within 4 ulps in float64, so the same float32
        torch.testing.assert_close(signed.abs(), want_ratio, rtol=0.0, atol=0.0, equal_nan=True)
        assert torch.equal(torch.signbit(signed), dropped)
    else:  # a token within 4 ulps of its root may decide the strict comparison either way
        near = (want_ratio - ratio).abs() <= 4 * 2.0**-52 * ratio.abs()
        torch.testing.assert_close(signed.abs(), want_ratio, rtol=4 * 2.0**-52, atol=0.0, equal_nan=True)
        assert torch.equal(torch.signbit(signed) | near, dropped | near)
    if not clamp:
        # r underflowed to 0 (-0.0 once signed): found by its sign bit, lifted to lo(p), its gradient dropped
        assert float(ratio[0, -2]) == 0.0 and bool(clipped[0, -2]) and float(signed[0, -2]) < 0.0


def test_the_bounds_mode_leaves_every_other_token_as_it_was():
    """fold=False (cispo's and the general clip's call): only tokens past the budget change, to −bound; every other
    candidate keeps its −r, so |signed| is the clipped ratio."""
    lp, old, adv = hard_inputs(torch.float32)
    spec = ClipSpec("binary_kl", delta=0.05)
    ratio = (lp - old).clamp(-20, 20).exp()
    signed, flags = K._signed_candidates(spec, ratio, old)
    before = signed.clone()
    K.binary_kl_clip_signed(signed, flags, old, lp, None, 0.05, True, True, False)
    want, which = reference_clip(spec, ratio, old, lp, torch.ones_like(ratio, dtype=torch.bool))
    assert torch.equal(signed[~which], before[~which]) and bool((signed[which] <= 0).all())
    assert torch.equal(signed.abs(), want)


def test_the_folded_clip_with_candidates_but_none_moved():
    """Candidates whose A moves none of them outwards (A = 0): no root is solved, every ratio stays r, and only the
    tokens outside the clamp keep their sign (found by hypothesis: the op once failed on an empty selection)."""
    lp, old, _ = hard_inputs(torch.float32)
    spec = ClipSpec("binary_kl", delta=0.05)
    raw = lp - old
    ratio = raw.clamp(-20, 20).exp()
    signed = K.folded_binary_kl_clip(spec, ratio, old, lp, torch.zeros_like(lp))
    assert int(K._binary_kl_candidates(spec, ratio, old).sum()) > 1000
    assert torch.equal(signed.abs(), ratio) and torch.equal(torch.signbit(signed), ~(raw.abs() <= 20))


def test_the_folded_op_needs_the_advantages():
    lp, old, _ = hard_inputs(torch.float32)
    signed, flags = K._signed_candidates(ClipSpec("binary_kl", delta=0.05), (lp - old).clamp(-20, 20).exp(), old)
    with pytest.raises(ValueError, match="fold=True .* pass advantages"):
        K.binary_kl_clip_signed(signed, flags, old, lp, None, 0.05, True, True, True)
