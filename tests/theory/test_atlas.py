"""The one frame (divclip.theory.atlas): w(q, r, A) equals autograd through `policy_loss` for every form.

The reference is the torch loss itself: a batch of one-token sequences (so a token's ratio is also its
sequence's), log π = log q + log r as the leaf, 'token-sum' aggregation so that ∂loss/∂log π of each token is
∂ℓ/∂log π of its own per-token loss, and w = −(∂ℓ/∂log π)/A. Every declared token-level form is checked at its
`Form.example` spec (a form without one fails `test_every_token_level_form_has_an_example`), plus the spec
variants in VARIANTS (a table other forms may extend) that reach the branches of each form.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from divclip.theory import ClipSpec, gradient_weight, interval, kl3_bounds, parse_method  # noqa: E402
from divclip.theory.atlas import Q_GRID  # noqa: E402
from divclip.theory.forms import FORMS, Form, declare_form  # noqa: E402
from divclip.theory.losses import policy_loss  # noqa: E402

VARIANTS = {
    # mode: extra method strings beyond the form's example, one per branch of its weight
    "clip": [
        "dapo",
        "grpo/dual=3",
        "kl3:0.02",
        "binary_kl:0.05",
        "binary_tv:0.2",
        "binary_kl:0.05/dual=3",
        "kl3:0.023144&binary_tv:0.2",
        "kl3@clipfrac=0.1",
        "ratio:1:4",
        "grpo/noclamp",
        "kl3:0.02/noclamp",
    ],
    "gated": [
        "binary_tv:0.2/gated/noclamp",
        "binary_kl:0.05/gated/noclamp/tis=5",
        "dppo_tv",
        "ratio:0.2:0.28/gated",
        "binary_kl:0.05/gated",
        "binary_tv:0.2/gated/tis=5",
        "kl3:0.02/gated/delta_high=0.05",
        "binary_kl:0.02/gated/delta_high=0.08",
        "binary_tv:0.1/gated/delta_high=0.3",
        "binary_kl:0.02/gated/delta_high=0.08/gate=verl",
        "binary_tv:0.1/gated/delta_high=0.3/gate=verl",
    ],
    "cispo": ["kl3:0.05/cispo", "binary_kl:0.05/cispo", "binary_tv:0.2/cispo", "ratio:1:4/cispo"],
    "sapo": ["sapo/tau=0.5:2"],
}
Q_TEST = (1e-12, 1e-4, 1e-3, 0.01, 0.05, 0.2, 0.5, 0.8, 0.95, 0.99)
R_TEST = np.concatenate([np.logspace(-2.5, 2.5, 41), [1.0, math.exp(-25.0), math.exp(25.0)]])  # not 0.8, 1.2: ends
SIGNS_A = (1.5, -0.8)


def _autograd_weight(spec, q, r, adv) -> np.ndarray:
    """−(∂ℓ/∂log π)/A per token, from `policy_loss` (float64, one token per sequence, token-sum)."""
    old = torch.tensor(np.log(q), dtype=torch.float64).reshape(-1, 1)  # (N, 1)
    log_prob = (old + torch.tensor(np.log(r), dtype=torch.float64).reshape(-1, 1)).requires_grad_(True)
    a = torch.tensor(adv, dtype=torch.float64).reshape(-1, 1)
    loss, _ = policy_loss(log_prob, old, a, torch.ones_like(old), spec, "token-sum", metrics=False)
    (grad,) = torch.autograd.grad(loss, log_prob)
    return (-grad / a).reshape(-1).numpy()


def _ends(spec, q) -> list[np.ndarray]:
    """The finite, positive ends of the spec's intervals at each q (both signs), as arrays like q."""
    out = []
    for sign in (1, -1):
        for end in interval(spec, q, sign) or ():
            out.append(np.where((end > 0) & np.isfinite(end), end, np.nan))
    return out


def _grid(spec):
    """Feasible (q·r < 1) points of Q_TEST × R_TEST × SIGNS_A and points 0.1% inside and outside each interval
    end, none within 1e-7 of an end (where the side a token falls on is a rounding decision)."""
    q, r, adv = (x.ravel() for x in np.meshgrid(Q_TEST, R_TEST, SIGNS_A, indexing="ij"))
    for end in _ends(spec, np.asarray(Q_TEST)):
        for factor in (0.999, 1.001):
            ok = np.isfinite(end)
            for a in SIGNS_A:
                q, r = np.concatenate([q, np.asarray(Q_TEST)[ok]]), np.concatenate([r, end[ok] * factor])
                adv = np.concatenate([adv, np.full(int(ok.sum()), a)])
    keep = q * r < 1.0
    with np.errstate(invalid="ignore"):
        for end in _ends(spec, q):
            keep &= ~(np.abs(np.log(r) - np.log(end)) < 1e-7)
    return q[keep], r[keep], adv[keep]


def _cases():
    for mode, form in FORMS.items():
        if form.weight is None or not form.token_level or not form.example:
            continue
        for method in [form.example, *VARIANTS.get(mode, [])]:
            yield pytest.param(mode, method, id=f"{mode}:{method}")


def test_every_token_level_form_has_an_example():
    missing = [name for name, form in FORMS.items() if form.token_level and not form.example]
    assert not missing, f"token-level forms without Form.example (set one so the atlas checks them): {missing}"
    wrong = [name for name, form in FORMS.items() if form.example and parse_method(form.example).form != name]
    assert not wrong, f"Form.example is not a spec of its own form: {wrong}"
    no_weight = [name for name, form in FORMS.items() if form.token_level and form.weight is None]
    assert not no_weight, f"token-level forms without a numpy weight (Form.weight): {no_weight}"


@pytest.mark.parametrize("mode, method", list(_cases()))
def test_weight_equals_autograd_through_policy_loss(mode, method):
    spec = parse_method(method)
    assert spec.form == mode
    q, r, adv = _grid(spec)
    assert len(q) > 300
    expected = _autograd_weight(spec, q, r, adv)
    got = gradient_weight(spec, q, r, adv)
    bad = ~np.isclose(got, expected, rtol=1e-9, atol=1e-12)  # torch forms σ(1 − σ) with cancellation
    assert not bad.any(), (
        f"{method}: {int(bad.sum())} of {len(q)} points differ, e.g. q={q[bad][:3]}, "
        f"r={r[bad][:3]}, A={adv[bad][:3]}: w={got[bad][:3]}, autograd={expected[bad][:3]}"
    )
    assert (got == 0).any() or FORMS[mode].family != "hard clip"  # the grid reaches the clipped region
    assert (got != 0).any()


def test_sequence_level_gspo_weight_is_the_sequence_ratios():
    """GSPO: r in w(q, r, A) is the sequence's s = exp(mean log r_t); every token of the sequence gets it."""
    spec = parse_method("gspo")
    rng = np.random.default_rng(0)
    log_r = rng.normal(0.0, 4e-4, size=(64, 3))  # (B, T) around the 3e-4/4e-4 widths
    q = rng.uniform(0.05, 0.9, size=(64, 3))
    adv = np.repeat(rng.choice([-1.0, 1.0], size=(64, 1)), 3, axis=1)  # one advantage per sequence
    old = torch.tensor(np.log(q))
    lp = (old + torch.tensor(log_r)).requires_grad_(True)
    a = torch.tensor(adv)
    loss, _ = policy_loss(lp, old, a, torch.ones_like(old), spec, "token-sum", metrics=False)
    (grad,) = torch.autograd.grad(loss, lp)
    s = np.exp(log_r.mean(axis=1, keepdims=True))  # (B, 1)
    w = gradient_weight(spec, q, s, adv)
    np.testing.assert_allclose(-grad.numpy() / adv, w, rtol=1e-9, atol=0)
    assert 0 < (w == 0).mean() < 1  # some sequences clipped, some kept


@pytest.mark.parametrize("mode, method", list(_cases()))
def test_interval_matches_the_weight(mode, method):
    """w != 0 inside the keep interval, w = 0 just outside each finite end (for A of that sign)."""
    spec = parse_method(method)
    if interval(spec, 0.5, 1) is None:
        pytest.skip(f"{method}: no interval")
    q = np.asarray(Q_GRID)
    for sign in (1, -1):
        lo, hi = interval(spec, q, sign)
        assert np.all(lo < hi) and np.all(lo <= 1.0) and np.all(hi >= 1.0)
        inside = np.sqrt(np.maximum(lo, 1e-6) * np.minimum(hi, 1e6))  # the geometric middle
        assert np.all(gradient_weight(spec, q, inside, sign) != 0)
        for r, ok in ((lo * 0.99, lo > 0), (hi * 1.01, np.isfinite(hi))):
            assert np.all(gradient_weight(spec, q[ok], r[ok], sign) == 0), (sign, r[ok])


# ------------------------------------------------------------------------------------ known values
def test_closed_form_values():
    assert gradient_weight("grpo", 0.3, [0.7, 0.9, 1.1, 1.3], 1.0).tolist() == [0.7, 0.9, 1.1, 0.0]
    assert gradient_weight("grpo", 0.3, [0.7, 0.9, 1.1, 1.3], -1.0).tolist() == [0.0, 0.9, 1.1, 1.3]
    assert gradient_weight("grpo/dual=3", 0.3, [2.9, 3.1], -1.0).tolist() == [2.9, 0.0]
    assert gradient_weight("ratio:0.2:0.2/cispo", 0.3, [0.5, 1.0, 2.0], 1.0).tolist() == [0.8, 1.0, 1.2]
    assert [b.tolist() for b in interval("ratio:0.2:0.2/cispo", 0.3, -1)] == [0.0, np.inf]  # never zeroes
    assert gradient_weight("sapo", 0.5, 1.0, 1.0) == 1.0  # the gate's slope is 1 at r = 1
    # SAPO: w = r·4σ(1 − σ), σ = σ(τ(r − 1)), τ = 1.05 for A < 0
    s = 1.0 / (1.0 + math.exp(-1.05 * 0.5))
    assert gradient_weight("sapo", 0.5, 1.5, -1.0) == pytest.approx(1.5 * 4 * s * (1 - s), rel=1e-15)
    # DPPO-TV at q = 0.5, δ = 0.2: |q(r − 1)| <= δ <=> r in [0.6, 1.4]; the TIS cap 20 truncates, never zeroes
    lo, hi = interval("dppo_tv", 0.5, -1)
    assert lo == pytest.approx(0.6, rel=1e-15) and hi == np.inf
    assert interval("dppo_tv", 0.5, 1)[1] == pytest.approx(1.4, rel=1e-15)
    assert gradient_weight("binary_tv:0.2/gated/tis=5", 0.01, 10.0, -1.0) == 5.0
    assert interval("kl3:0.02", [0.1, 0.9], 1)[1] == pytest.approx(2 * [kl3_bounds(0.02)[1]], rel=1e-15)
    assert interval("sapo", 0.5, 1) is None


def test_shapes_broadcast():
    w = gradient_weight("dapo", np.array([[0.1], [0.5]]), np.array([0.9, 1.1, 1.5]), 1.0)
    assert w.shape == (2, 3) and w.dtype == np.float64
    assert gradient_weight("dapo", 0.1, 1.1, 1.0).shape == ()
    lo, hi = interval(ClipSpec("binary_kl", delta=0.05), np.array([[0.1, 0.5]]), -1)
    assert lo.shape == hi.shape == (1, 2)


# ------------------------------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    "args, match",
    [
        (("grpo", 0.0, 1.0, 1.0), r"q \(the old probability\) must lie in \(0, 1\]"),
        (("grpo", 1.5, 1.0, 1.0), r"q .* got 1\.5"),
        (("grpo", 0.5, -1.0, 1.0), r"r \(the ratio\) must lie in \[0, inf\]"),
        (("grpo", 0.5, np.nan, 1.0), r"r \(the ratio\)"),
        (("grpo", 0.5, 1.0, np.inf), r"adv \(the advantage\)"),
        (("grpo", [0.1, 0.2], [1.0, 1.1, 1.2], 1.0), "must broadcast together"),
        (("grpo", "x", 1.0, 1.0), "q .* must be a number"),
        (("nope", 0.5, 1.0, 1.0), "unknown method 'nope'"),
    ],
)
def test_bad_input_is_named(args, match):
    with pytest.raises(ValueError, match=match):
        gradient_weight(*args)


@pytest.mark.parametrize("sign", [0, 2, True, -0.5])
def test_bad_sign_is_named(sign):
    with pytest.raises(ValueError, match="sign must be"):
        interval("grpo", 0.5, sign)


def test_a_form_without_a_weight_says_why():
    from divclip.theory import forms

    note = "which tokens are clipped depends on the batch's covariance (demo)"
    declare_form(Form("demo_batch", "batch-selective", "demo", ("test:demo",), token_level=False, weight_note=note))
    try:
        with pytest.raises(ValueError, match=r"demo_batch.*batch-selective.*no per-token gradient weight.*covariance"):
            gradient_weight("grpo/demo_batch", 0.5, 1.0, 1.0)
    finally:
        forms._FORMS.pop("demo_batch")


def test_the_numpy_clamps_are_the_torch_ones():
    from divclip.theory.forms import _kernels as loss_modes
    from divclip.theory.forms import _numpy as form_weights

    assert form_weights.LOG_RATIO_CLAMP == loss_modes.LOG_RATIO_CLAMP
    assert form_weights.SEQ_LOG_RATIO_MAX == loss_modes.SEQ_LOG_RATIO_MAX


def test_the_frame_does_not_import_torch():
    code = (
        "import sys\nfrom divclip.theory import gradient_weight, interval\n"
        "from divclip.theory.atlas import catalogue\n"
        "gradient_weight('dppo_kl', 0.01, 2.0, 1.0); interval('binary_kl:0.05', 0.1, -1); catalogue(['dapo'])\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------------------------- nearest budget
def _brute_distance(lo_m, hi_m, lo, hi):
    clamp = lambda x: np.log(np.clip(x, 1e-3, 1e3))  # noqa: E731
    return np.maximum(np.abs(clamp(hi_m) - clamp(hi)), np.abs(clamp(lo_m) - clamp(lo))).max(axis=-1)


@pytest.mark.parametrize("measure", ["ratio", "kl3", "binary_tv"])
def test_nearest_budget_fit_is_the_brute_force_minimax(measure):
    """DAPO's [0.8, 1.28] against a measure: the fitted δ's distance equals the minimum over a dense δ grid."""
    from divclip.theory.measures import MEASURES
    from divclip.theory.nearest_budget import fit_measure

    q = np.asarray(Q_GRID)
    lo, hi = np.full(6, 0.8), np.full(6, 1.28)
    fit = fit_measure(MEASURES[measure], q, lo, hi)
    deltas = np.logspace(-4, 0.5, 20001)
    m = MEASURES[measure]
    blo, bhi = m.bounds(deltas[:, None], q[None, :]) if m.p_dependent else m.bounds(deltas[:, None])
    blo, bhi = np.broadcast_to(blo, (len(deltas), 6)), np.broadcast_to(bhi, (len(deltas), 6))
    brute = _brute_distance(lo, hi, blo, bhi)
    assert fit["distance"] == pytest.approx(brute.min(), abs=2e-4)
    assert fit["distance"] <= brute.min() + 1e-9
    assert not fit["equal"]
    if measure == "ratio":  # closed form: |ln(1 − δ) − ln 0.8| = |ln(1 + δ) − ln 1.28| at the optimum
        assert fit["distance_A>0"] == pytest.approx(fit["distance_A<0"], abs=1e-8)


@pytest.mark.parametrize(
    "method, measure, delta",
    [
        ("grpo", "ratio", 0.2),
        ("dppo_kl", "binary_kl", 0.05),
        ("dppo_tv", "binary_tv", 0.2),
        ("atr", "kl3", 0.023143551314209754),
        ("kl3_reverse:0.03", "kl3_reverse", 0.03),
    ],
)
def test_a_method_that_is_a_budget_is_found_equal(method, measure, delta):
    from divclip.theory.atlas import catalogue

    (row,) = catalogue([method])
    near = row["nearest"]
    assert near["equal"] and near["distance"] <= 1e-9
    assert near["measure"] == measure and near["delta"] == pytest.approx(delta, rel=1e-6)


def test_a_method_without_interval_has_no_nearest_budget():
    from divclip.theory.atlas import catalogue

    sapo, cispo = catalogue(["sapo", "cispo"])
    assert sapo["intervals"] is None and sapo["nearest"] is None and "gate" in sapo["weight_note"]
    assert cispo["intervals"]["A>0"][0] == [0.0, np.inf] and cispo["nearest"] is None  # keeps every gradient


def test_the_atlas_refuses_a_list_of_3000_methods_before_any_row():
    """Issue 36: `divclip atlas --methods` with 3000 methods fitted 3000 nearest budgets first."""
    from divclip.theory.atlas import MAX_METHODS, catalogue

    with pytest.raises(ValueError, match=rf"at most {MAX_METHODS} methods, got 3000"):
        catalogue(",".join([f"kl3:0.0{i % 9 + 1}" for i in range(3000)]))
    with pytest.raises(ValueError, match=rf"at most {MAX_METHODS} methods, got {MAX_METHODS + 1}"):
        catalogue(["grpo"] * (MAX_METHODS + 1))
    assert [r["name"] for r in catalogue("grpo,dapo", with_nearest=False)] == ["grpo", "dapo"]
