"""Every verl 0.9.1 dppo setting as a divclip spec, against verl's own `compute_policy_loss_dppo_kl/tv` called in
process (issue 31 item 4).

- clip_ratio_low != clip_ratio_high: the gated form's `delta_high` (δ_high for the upper side);
- a spec read from verl (`gate=verl`) decides with verl's arithmetic: its decisions are verl's bit for bit in float32
  and float64, on tokens placed within an ulp of the root D = δ, where divclip's exact gate (`gate=exact`) decides
  thousands of them differently, and on inputs that are not log-probabilities (torch.randn, log π > 0);
- `from_engine('verl', ...)` reads those settings as that spec and `to_engine` writes them back.

Exactness as in tests/theory/test_losses_verl.py: losses and gradients `torch.equal` to verl's.
"""

import importlib.util

import numpy as np
import pytest
import torch
from test_losses_verl import TOL, actor_config, batch, run_ours, run_verl

from divclip.theory.losses import ClipSpec, policy_terms
from divclip.theory.measures import get_measure

pytestmark = pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="verl is not installed")

DTYPES = [torch.float32, torch.float64]
# (measure, verl function, δ_low, δ_high): the upper budget four or three times the lower
TWO_BUDGETS = [
    ("binary_kl", "compute_policy_loss_dppo_kl", 0.02, 0.08),
    ("binary_tv", "compute_policy_loss_dppo_tv", 0.1, 0.3),
]
IDS = [m for m, *_ in TWO_BUDGETS]


@pytest.fixture(scope="module")
def ca():
    return pytest.importorskip("verl.trainer.ppo.core_algos")


def gated(measure, low, high, gate, cap=20.0):
    return ClipSpec(measure, delta=low, form="gated", params={"delta_high": high, "gate": gate, "tis_cap": cap})


def verl_config(low, high, cap=20.0):
    return actor_config(clip_ratio=low, clip_ratio_low=low, clip_ratio_high=high, clip_ratio_c=cap)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("measure, verl_fn, low, high", TWO_BUDGETS, ids=IDS)
@pytest.mark.parametrize("gate", ["exact", "verl"])
def test_two_budgets_are_verl_dppo(ca, dtype, measure, verl_fn, low, high, gate):
    """δ_low != δ_high, both gates: loss and gradient bit-equal to verl's (no token of this batch sits within
    verl's 1e-8 of a root); with gate=verl the clipfrac is verl's pg_clipfrac itself, A = 0 tokens included."""
    old, lp, adv, mask = batch(dtype, seed=2, noise=1.2, adv_zero=True)
    adv[:, 1::3] = 0.0  # tokens on which verl's pg_clipfrac counts the negative side's mask
    loss, grad, m = run_ours(old, lp, adv, mask, gated(measure, low, high, gate), "token-mean")
    v_loss, v_grad, vm = run_verl(getattr(ca, verl_fn), old, lp, adv, mask, verl_config(low, high), "token-mean")
    assert torch.equal(loss, v_loss) and torch.equal(grad, v_grad)
    assert m["clipfrac_high"] > 0.01 and m["clipfrac_low"] > 0.01  # both budgets bind
    if gate == "verl":
        assert m["clipfrac"] == pytest.approx(vm["actor/pg_clipfrac"], rel=TOL[dtype], abs=0)
    else:
        assert vm["actor/pg_clipfrac"] > m["clipfrac"]  # divclip's own count leaves A = 0 tokens out
    # the two budgets matter: one δ on both sides (either of them) is another loss
    for one in (low, high):
        _, g_one, _ = run_ours(old, lp, adv, mask, gated(measure, one, None, gate), "token-mean")
        assert not torch.equal(g_one, v_grad)


def near_root(measure, low, high, dtype, n=2000):
    """One-token rows placed at the roots of D = δ: for p = π_old on a log grid, log π is the float nearest
    log(p·hi(p)) (A = +1, hi at δ_high) or log(p·lo(p)) (A = −1, lo at δ_low), and each of its two neighbours:
    every token within an ulp of that float, on one side of the root or the other."""
    p = np.logspace(-5, np.log10(0.995), n)
    m = get_measure(measure)
    lo, hi = m.bounds(low, p)[0], m.bounds(high, p)[1]
    up, down = p * hi < 1, p * lo > 0
    q = np.concatenate([(p * hi)[up], (p * lo)[down]])
    old = torch.tensor(np.log(np.concatenate([p[up], p[down]]))).to(dtype)
    adv = torch.tensor(np.concatenate([np.ones(int(up.sum())), -np.ones(int(down.sum()))])).to(dtype)
    lp = torch.tensor(np.log(q)).to(dtype)
    lps = [torch.nextafter(lp, torch.full_like(lp, -np.inf)), lp, torch.nextafter(lp, torch.full_like(lp, np.inf))]
    return old.repeat(3)[:, None], torch.cat(lps)[:, None], adv.repeat(3)[:, None]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("measure, verl_fn, low, high", TWO_BUDGETS, ids=IDS)
def test_verl_gate_decides_as_verl_within_an_ulp_of_the_root(ca, dtype, measure, verl_fn, low, high):
    old, lp, adv = near_root(measure, low, high, dtype)
    mask = torch.ones_like(old)
    _, v_grad, _ = run_verl(getattr(ca, verl_fn), old, lp, adv, mask, verl_config(low, high), "token-sum")
    verl_kept = v_grad != 0  # A = ±1 and w = min(r, c) > 0: the gradient is 0 exactly where verl's mask is
    assert 0.2 < float(verl_kept.double().mean()) < 0.8  # the tokens straddle the roots
    spec = gated(measure, low, high, "verl")
    _, grad, _ = run_ours(old, lp, adv, mask, spec, "token-sum")
    assert torch.equal(grad, v_grad)
    clipped = policy_terms(lp, old, adv, mask, spec).clipped
    assert torch.equal(clipped == 0, verl_kept)  # every decision, token by token
    exact = policy_terms(lp, old, adv, mask, gated(measure, low, high, "exact")).clipped
    differ = int(((exact == 0) != verl_kept).sum())
    if measure == "binary_kl":  # the exact D (no +1e-8, no ratio rounding) decides many of them otherwise
        assert differ > 0.05 * len(old)
    else:  # binary TV: the exact gate already decides on verl's q − p
        assert differ == 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("measure, verl_fn, low, high", TWO_BUDGETS, ids=IDS)
def test_verl_gate_matches_verl_on_randn_log_probs(ca, dtype, measure, verl_fn, low, high):
    """Inputs as a unit test draws them, old_log_prob and log_prob from torch.randn: half the "probabilities" are
    above 1, where the exact binary KL is NaN (counted as outside the budget). gate=verl runs verl's arithmetic, so
    the loss, gradient and clipfrac are verl's there too (docs/theory.md §4.1)."""
    g = torch.Generator().manual_seed(5)
    old, lp, adv = (torch.randn(8, 32, generator=g, dtype=torch.float64).to(dtype) for _ in range(3))
    mask = (torch.rand(8, 32, generator=g) > 0.2).to(dtype)
    assert (old > 0).any() and (lp > 0).any()
    loss, grad, m = run_ours(old, lp, adv, mask, gated(measure, low, high, "verl"), "token-mean")
    v_loss, v_grad, vm = run_verl(getattr(ca, verl_fn), old, lp, adv, mask, verl_config(low, high), "token-mean")
    assert torch.equal(loss, v_loss) and torch.equal(grad, v_grad)
    assert m["clipfrac"] == pytest.approx(vm["actor/pg_clipfrac"], rel=TOL[dtype], abs=0)
    assert 0.05 < m["clipfrac"] < 0.95
    if measure == "binary_kl":  # the exact gate reads those tokens otherwise (D is NaN where q or p > 1)
        _, g_exact, _ = run_ours(old, lp, adv, mask, gated(measure, low, high, "exact"), "token-mean")
        assert not torch.equal(g_exact, v_grad)


READ = [(f"dppo_{m[7:]}", m, f, lo, hi) for m, f, lo, hi in TWO_BUDGETS]  # (verl loss_mode, ...)


@pytest.mark.parametrize("mode, measure, verl_fn, low, high", READ, ids=IDS)
def test_read_from_verl_is_verls_loss_and_writes_back(ca, mode, measure, verl_fn, low, high):
    """A DAPO-style recipe switched to DPPO (clip_ratio_low 0.02 / clip_ratio_high 0.08 as δ): read, it is the gated
    spec with delta_high and verl's gate, whose loss is verl's; written back, the same keys."""
    from divclip import engines

    a = "actor_rollout_ref.actor."
    settings = {
        f"{a}policy_loss.loss_mode": mode,
        f"{a}clip_ratio_low": low,
        f"{a}clip_ratio_high": high,
        f"{a}clip_ratio_c": 10.0,
    }
    spec = engines.from_engine("verl", settings)
    assert spec == gated(measure, low, high, "verl", cap=10.0)
    old, lp, adv, mask = batch(torch.float32, seed=4, noise=0.8, adv_zero=True)
    loss, grad, m = run_ours(old, lp, adv, mask, spec, "token-mean")
    v_loss, v_grad, vm = run_verl(getattr(ca, verl_fn), old, lp, adv, mask, verl_config(low, high, 10.0), "token-mean")
    assert torch.equal(loss, v_loss) and torch.equal(grad, v_grad) and m["clipfrac"] > 0.02
    out = engines.to_engine(spec, "verl")
    assert {k: out[k] for k in settings} == settings
    assert engines.from_engine("verl", out) == spec
