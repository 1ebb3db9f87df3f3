"""The policy loss on an accelerator's terms (theory/losses.py `policy_loss`): metrics=False reads nothing on the
host, the call compiles whole (`torch.compile(fullgraph=True)`) and agrees with eager, metrics=True reads the
host once; the sync-free binary-KL bounds (theory/loss_bounds.py) are as exact as the numpy solver's.

Coverage follows the registry: every form in FORMS runs with the specs `example_specs(mode)` gives, so a loss
form registered later (theory/forms_*.py) is tested here without editing this file when one of the method
strings 'kl3:0.05/FORM', 'binary_kl:0.05/FORM', 'binary_tv:0.2/FORM', 'ratio:0.2:0.28/FORM', 'kl3/FORM'
parses for it (the first three that do). A form that needs other parameters adds its method strings to
EXAMPLE_SPECS; a mode with no example at all fails `test_every_registered_mode_has_an_example`, which names it.

Host reads are caught two ways: on the meta device (tensors without data, where `.item()`, `bool(t)`,
`float(t)`, `.tolist()` and `nonzero` raise), and on CPU tensors under a dispatch mode that fails on
`_local_scalar_dense` (behind `.item()`, `bool`, `float`, `int`) and on ops whose output shape depends on the
data. The CPU-only compaction of the p-dependent bounds (`forms._kernels.HOST_COMPACTION_DEVICES`) is switched off
for the CPU checks, so they run the code an accelerator runs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_binary_kl_exact import EDGE, check_pair
from torch.utils._python_dispatch import TorchDispatchMode

import divclip.theory.forms._kernels as loss_modes
from divclip.theory.bounds import binary_kl_bounds_array
from divclip.theory.forms import FORMS
from divclip.theory.loss_bounds import NEWTON_STEPS, binary_kl_root_nosync
from divclip.theory.losses import policy_loss, policy_terms
from divclip.theory.spec import parse_method

# Method strings for a mode none of the default strings below can express (a new form's author adds its own).
EXAMPLE_SPECS: dict[str, list[str]] = {}
DEFAULT_BASES = ("kl3:0.05", "binary_kl:0.05", "binary_tv:0.2", "ratio:0.2:0.28", "kl3")
# Beyond one spec per mode and measure: sequence level, dual clip, intersections, the presets.
EXTRA_SPECS = [
    "gspo",
    "kl3:0.02/dual=3",
    "kl3:0.05&binary_kl:0.02",
    "kl3:0.02/dual=3&binary_tv:0.2/dual=3",
    "binary_kl:0.05&binary_tv:0.1",
    "ratio:0.2:0.28/dual=3",
    "dppo_kl",
    "dppo_tv",
    "binary_kl:0.02/gated/delta_high=0.08/gate=verl",  # verl's dppo arithmetic, two budgets
    "binary_tv:0.1/gated/delta_high=0.3/gate=verl",
    "binary_tv:0.1/gated/delta_high=0.3/gate=verl/surrogate=ratio",  # SkyRL's dppo: −A·r, r differentiable
    "binary_kl:0.02/gated/surrogate=ratio/noclamp",
    "grpo/dual=3/exp_dtype=float32",  # SkyRL's float32 exp (regular, dual_clip, cispo, dppo)
    "ratio:0:5/cispo/exp_dtype=float32",
    "binary_tv:0.2/gated/gate=verl/surrogate=ratio/exp_dtype=float32",
    "kl3:0.02/gated/delta_high=0.05",
    "sapo",
    "grpo",
]


def make_inputs(device="cpu", dtype=torch.float32, shape=(6, 40), seed=0):
    """Log-probs of likely and rare tokens, some ratios far outside the ±20 log-ratio clamp, both signs of A,
    padding: every branch of every form (clipped both ways, dual clip, clamp) has tokens."""
    g = torch.Generator().manual_seed(seed)
    old = torch.log(torch.rand(shape, generator=g, dtype=torch.float64).clamp_(1e-6, 1.0))
    lp = (old + 0.6 * torch.randn(shape, generator=g, dtype=torch.float64)).clamp_(max=0.0)
    old[0, 0], lp[0, 0] = -30.0, -1.0  # log r = 29: a rare token that became likely
    lp[0, 1:3] = old[0, 1:3] - 25.0  # log r = -25
    adv = torch.randn(shape, generator=g, dtype=torch.float64)
    mask = (torch.rand(shape, generator=g) < 0.85).to(dtype)
    mask[:, 0] = 1.0
    return [t.to(device=device, dtype=dtype) for t in (lp, old, adv)] + [mask.to(device)]


def example_specs(mode: str) -> list[str]:
    """Method strings that run `mode`: EXAMPLE_SPECS[mode] if listed, else those of 'BASE/FORM' that parse."""
    if mode in EXAMPLE_SPECS:
        return list(EXAMPLE_SPECS[mode])
    out = []
    for base in DEFAULT_BASES:
        try:  # the grammar and the mode itself accept it (a mode may refuse e.g. p-dependent measures)
            policy_loss(*make_inputs(shape=(1, 2)), parse_method(f"{base}/{mode}"), metrics=False)
        except ValueError:
            continue
        out.append(f"{base}/{mode}")
    return out[:3]  # bare 'kl3/FORM' only where budgeted strings do not parse (sapo-like forms)


# Modes that read the host in eager on purpose, with the reason; their eager no-host-read tests are expected to
# fail (strict: a mode that stops reading must leave this list). They still must compile whole (slow test).
KNOWN_HOST_READS = {
    "clip_cov": "eager draws verl's random pick (randperm over a data-dependent count) for bit parity with verl; "
    "compiled it picks without a host read (theory/forms/clip_cov.py)",
}


def all_specs() -> list[str]:
    return [s for mode in FORMS for s in example_specs(mode)] + EXTRA_SPECS


SPECS = all_specs()


def eager_specs():
    """SPECS, with the forms of KNOWN_HOST_READS as strict expected failures."""
    out = []
    for spec in SPECS:
        reason = KNOWN_HOST_READS.get(parse_method(spec).form)
        out.append(pytest.param(spec, marks=pytest.mark.xfail(strict=True, reason=reason)) if reason else spec)
    return out


@pytest.fixture
def no_host_compaction(monkeypatch):
    monkeypatch.setattr(loss_modes, "HOST_COMPACTION_DEVICES", ())


class NoHostRead(TorchDispatchMode):
    """Fails on every op that reads a tensor on the host or whose output shape depends on tensor values."""

    FORBIDDEN = {
        "_local_scalar_dense",
        "nonzero",
        "nonzero_static",
        "masked_select",
        "unique",
        "_unique",
        "_unique2",
        "unique_consecutive",
        "unique_dim",
        "equal",
        "is_nonzero",
        "item",
        "binary_kl_clip_signed",  # divclip's CPU host solve of binary-KL bounds: nonzero inside one op
    }

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        bool_index = name == "index" and any(t is not None and t.dtype == torch.bool for t in args[1])
        if name in self.FORBIDDEN or bool_index:
            raise AssertionError(f"host read: aten.{name}")
        return func(*args, **(kwargs or {}))


def run(spec, inputs, **kw):
    lp, old, adv, mask = inputs
    lp = lp.detach().requires_grad_()
    loss, metrics = policy_loss(lp, old, adv, mask, parse_method(spec), **kw)
    loss.backward()
    return loss, lp.grad, metrics


# ---------------------------------------------------------------------------------------------- coverage
def test_every_registered_mode_has_an_example():
    missing = [mode for mode in FORMS if not example_specs(mode)]
    assert not missing, f"add method strings for these loss modes to EXAMPLE_SPECS: {missing}"
    assert {parse_method(s).form for s in SPECS} >= set(FORMS)


# ------------------------------------------------------------------------------------------- no host read
@pytest.mark.parametrize("spec", eager_specs())
def test_no_host_read_on_meta(spec):
    loss, grad, metrics = run(spec, make_inputs("meta"), metrics=False)
    assert loss.device.type == "meta" and loss.shape == () and grad.shape == (6, 40) and metrics == {}


@pytest.mark.parametrize("spec", eager_specs())
def test_no_host_read_on_cpu(spec, no_host_compaction):
    inputs = make_inputs()
    with NoHostRead():
        loss, grad, _ = run(spec, inputs, metrics=False)
    ref_loss, ref_grad, _ = run(spec, inputs)  # metrics=True, outside the mode: the same numbers
    assert torch.equal(loss, ref_loss) and torch.equal(grad, ref_grad)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()


def test_the_detectors_catch_host_reads(monkeypatch):
    with pytest.raises(AssertionError, match="_local_scalar_dense"), NoHostRead():
        torch.ones(3).sum().item()
    with pytest.raises(AssertionError, match="host read"), NoHostRead():
        torch.ones(3)[torch.ones(3) > 0]
    with pytest.raises(AssertionError, match="host read"), NoHostRead():  # the CPU compaction does read
        run("binary_kl:0.05", make_inputs(), metrics=False)
    monkeypatch.setattr(loss_modes, "HOST_COMPACTION_DEVICES", ("cpu", "meta"))
    with pytest.raises((RuntimeError, NotImplementedError)):
        run("binary_kl:0.05", make_inputs("meta"), metrics=False)


@pytest.mark.parametrize(
    "spec",
    [
        "binary_kl:0.05",
        "binary_kl:0.05/cispo",
        "binary_tv:0.2",
        "binary_tv:0.2/cispo",
        "kl3:0.05&binary_kl:0.02",
        "binary_kl:0.05&binary_tv:0.1",
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sync_free_bounds_agree_with_host_compaction(spec, dtype, monkeypatch):
    inputs = make_inputs(dtype=dtype, shape=(16, 64), seed=1)
    loss, grad, metrics = run(spec, inputs)
    assert metrics["clipfrac"] > 0.05  # the bounds are used
    monkeypatch.setattr(loss_modes, "HOST_COMPACTION_DEVICES", ())
    loss_nosync, grad_nosync, metrics_nosync = run(spec, inputs)
    rtol = 1e-6 if dtype == torch.float32 else 1e-14
    torch.testing.assert_close(loss_nosync, loss, rtol=rtol, atol=0.0)
    torch.testing.assert_close(grad_nosync, grad, rtol=rtol, atol=0.0)
    assert metrics_nosync["clipfrac"] == metrics["clipfrac"]


# ---------------------------------------------------------------------------------- one transfer, metrics
@pytest.mark.parametrize("spec", eager_specs())
def test_metrics_read_the_host_once(spec, no_host_compaction, monkeypatch):
    inputs, calls = make_inputs(), []
    tolist = torch.Tensor.tolist

    def counted(self):
        calls.append(self.shape)
        return tolist(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counted)
    with NoHostRead():
        _, _, metrics = run(spec, inputs)
    assert len(calls) == 1, calls
    assert 0.0 <= metrics["clipfrac"] <= 1.0 and math.isfinite(metrics["kl3"])


def test_intersection_part_metrics_match_their_flags():
    inputs = make_inputs(shape=(16, 64), seed=2)
    spec = parse_method("kl3:0.05&binary_kl:0.02")
    _, _, metrics = run("kl3:0.05&binary_kl:0.02", inputs)
    terms = FORMS["clip"].loss(inputs[0], *inputs[1:], spec)
    mask = inputs[3]
    for i, (low, high) in enumerate(terms.by_part):
        assert metrics[f"clipfrac_low_part{i}"] == pytest.approx(float((low * mask).sum() / mask.sum()), rel=1e-6)
        assert metrics[f"clipfrac_high_part{i}"] == pytest.approx(float((high * mask).sum() / mask.sum()), rel=1e-6)
    assert metrics["clipfrac_low_part1"] > 0 and metrics["clipfrac_high_part1"] > 0


# ---------------------------------------------------------------------------------------- non-finite input
@pytest.mark.parametrize("spec", ["atr", "dppo_kl", "sapo", "gspo", "binary_kl:0.05/cispo"])
@pytest.mark.parametrize("name,index", [("log_prob", 0), ("old_log_prob", 1), ("advantages", 2)])
def test_a_nan_input_makes_the_loss_nan_without_a_host_read(spec, name, index, no_host_compaction):
    inputs = make_inputs()
    inputs[3][2, 5] = 0.0
    inputs[index][2, 5] = math.nan  # under the mask
    with NoHostRead():
        loss, _, _ = run(spec, inputs, metrics=False)
    assert torch.isnan(loss)
    with pytest.raises(ValueError, match=f"{name} contains NaN"):
        run(spec, inputs)


def test_infinite_advantages_make_the_loss_non_finite():
    inputs = make_inputs()
    inputs[2][1, 1] = math.inf
    loss, _, _ = run("atr", inputs, metrics=False)
    assert not torch.isfinite(loss)
    with pytest.raises(ValueError, match="advantages contains ±inf"):
        run("atr", inputs)


# ------------------------------------------------------------------------------------------ torch.compile
def compiled_agrees(spec: str, dtype=torch.float32):
    torch._dynamo.reset()  # a fresh cache per spec: the compiled function below is the same code each time
    parsed = parse_method(spec)

    def loss_fn(lp, old, adv, mask):
        return policy_loss(lp, old, adv, mask, parsed, metrics=False)[0]

    compiled = torch.compile(loss_fn, fullgraph=True)
    lp, old, adv, mask = make_inputs(dtype=dtype, shape=(16, 64), seed=3)
    out = []
    for fn in (loss_fn, compiled):
        x = lp.detach().requires_grad_()
        loss = fn(x, old, adv, mask)
        loss.backward()
        out.append((loss.detach(), x.grad))
    (loss, grad), (loss_c, grad_c) = out
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    # Relative to the loss, or to the mean size of the per-token terms it averages where those cancel (gpg,
    # vespo: there eager float32 itself is ~1e-6 off the float64 loss, and only the summation order differs).
    terms = policy_terms(lp, old, adv, mask, parsed).loss.detach()
    scale = max(abs(float(loss)), float((terms.abs() * mask).sum() / mask.sum()))
    assert abs(float(loss_c) - float(loss)) <= tol * scale
    assert float((grad_c - grad).abs().max()) <= tol * float(grad.abs().max())


def test_compiled_clip_loss_matches_eager():
    compiled_agrees("atr")


@pytest.mark.slow
@pytest.mark.parametrize("spec", sorted(set(SPECS) - {"binary_kl:0.05&binary_tv:0.1"}))
def test_every_form_compiles_whole_and_matches_eager(spec):
    compiled_agrees(spec)


# ------------------------------------------------------------------------------- sync-free binary-KL roots
def test_sync_free_roots_are_exact_to_4_ulps():
    """The 4-ulp claim of the numpy solver (tests/theory/test_binary_kl_exact.py), checked against mpmath on its
    edge cases and on a grid of the domain."""
    pairs = EDGE + [
        (d, p)
        for d in (1e-12, 1e-6, 1e-3, 0.05, 1.0, 10.0, 1e3)
        for p in (1e-12, 1e-6, 1e-3, 0.05, 0.3, 0.7, 1 - 1e-3, 1 - 1e-6, 1 - 1e-12)
    ]
    for delta, p in pairs:
        pt = torch.tensor([p, p], dtype=torch.float64)
        lo, hi = binary_kl_root_nosync(delta, pt, torch.tensor([False, True])).tolist()
        check_pair(delta, p, lo, hi)


def test_sync_free_roots_converge_a_step_early():
    """On a 151 × 400 log grid of [1e-12, 1e3] × [1e-12, 1 - 1e-12], one step fewer than NEWTON_STEPS already
    gives roots within 4 ulps of the numpy solver (the last step is margin), and so does NEWTON_STEPS."""
    deltas = np.logspace(-12, 3, 151)
    tail = np.logspace(-12, math.log10(0.5), 200)
    ps = np.concatenate([tail, 1.0 - tail])
    d, p = (a.ravel() for a in np.meshgrid(deltas, ps))
    with np.errstate(all="ignore"):  # the numpy solver's bracketing steps may divide by 0 on the way
        lo_ref, hi_ref = binary_kl_bounds_array(d, p)
    for up, ref in ((False, lo_ref), (True, hi_ref)):
        for delta in deltas:
            sel = d == delta
            pt, ulp = torch.tensor(p[sel]), np.maximum(np.spacing(ref[sel]), 2.0**-1074)
            for steps in (NEWTON_STEPS - 1, NEWTON_STEPS):
                r = binary_kl_root_nosync(float(delta), pt, torch.full(pt.shape, up), steps).numpy()
                assert np.all(np.abs(r - ref[sel]) <= 4 * ulp), (delta, up, steps)
