"""Published loss forms without engine code (divclip.theory.forms: dcpo, gppo, cegppo, aspo, topr, bapo; §7).

For each method: (1) the numbers its paper states, pinned; (2) `policy_loss`'s loss and gradient against a
reference written in this file straight from the paper's equation (plain torch autograd, stop-gradients as
`.detach()`); (3) the Form's numpy weight against autograd through `policy_loss` on a grid of (q, r, sign A);
(4) bad parameters refused by name. Dual-clip PPO (arXiv:1912.09729 eq. 5) is form 'clip' with `dual_clip_c`.
"""

import math

import numpy as np
import pytest
import torch

from divclip.theory import parse_method
from divclip.theory.forms import FORMS, PUBLISHED_METHODS, get_form
from divclip.theory.forms.bapo import bapo_path
from divclip.theory.forms.dcpo import dcpo_bounds
from divclip.theory.losses import LOSS_AGG_MODES, policy_loss

GRID_Q = (0.001, 0.01, 0.1, 0.5, 0.9, 0.99)
GRID_R = np.exp(np.linspace(np.log(0.02), np.log(50.0), 57))  # log-spaced, no point on a round bound
TOKEN_LEVEL = {  # method -> a spec string exercising its parameters
    "dcpo": "ratio:0.16:0.2/dcpo",
    "dcpo_rmax": "ratio:0.16:0.2/dcpo/dcpo_r_max=3",
    "gppo": "ratio:0.2:0.28/gppo",
    "gppo_kl3": "kl3:0.02/gppo",
    "cegppo": "ratio:0.2:0.2/cegppo",
    "cegppo_zero": "ratio:0.2:0.2/cegppo/cegppo_beta1=0/cegppo_beta2=0.5",
    "aspo": "ratio:0.2:0.2/aspo",
    "aspo_c10": "ratio:0.2:0.28/aspo/aspo_dual_c=10",
}


def _one_token_batch(q, r, adv):
    """(log π, log π_old, A, mask) of one-token sequences, one per (q, r, A) entry, float64."""
    q, r, adv = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (q, r, adv)))
    old = torch.tensor(np.log(q).reshape(-1, 1))
    lp = (old + torch.tensor(np.log(r).reshape(-1, 1))).requires_grad_()
    a = torch.tensor(adv.reshape(-1, 1))
    return lp, old, a, torch.ones_like(a)


def _autograd_weight(method, q, r, adv):
    """w from autograd through policy_loss: token-sum over one-token sequences, ∂loss/∂log π = −A·w."""
    lp, old, a, mask = _one_token_batch(q, r, adv)
    loss, _ = policy_loss(lp, old, a, mask, method, "token-sum", metrics=False)
    loss.backward()
    return (-lp.grad / a).numpy().reshape(np.broadcast(q, r, adv).shape)


def _random_batch(seed, b=6, t=20, noise=0.6):
    g = torch.Generator().manual_seed(seed)
    old = torch.log_softmax(2.0 * torch.randn(b, t, 6, generator=g, dtype=torch.float64), -1)[..., 0]
    lp = old + noise * torch.randn(b, t, generator=g, dtype=torch.float64)
    adv = torch.randn(b, 1, generator=g, dtype=torch.float64).expand(b, t).clone()
    adv[0] = 0.0  # a constant-reward group
    mask = (torch.rand(b, t, generator=g) > 0.2).double()
    mask[1] = 0.0  # a fully masked sequence
    return lp, old, adv, mask


def _agg(loss_mat, mask, mode):
    """verl's aggregation written out (docs/theory.md §4), for the references."""
    if mode == "token-mean":
        return (loss_mat * mask).sum() / mask.sum()
    if mode == "token-sum":
        return (loss_mat * mask).sum()
    seq_tokens = mask.sum(-1)
    seqs = seq_tokens > 0
    if mode == "seq-mean-token-mean":
        return ((loss_mat * mask).sum(-1)[seqs] / (seq_tokens[seqs] + 1e-8)).mean()  # verl's +1e-8
    seq = (loss_mat * mask).sum(-1)[seqs].mean()
    return seq / loss_mat.shape[-1] if mode == "seq-mean-token-sum-norm" else seq


def _check_against(method, reference, seed=0, noise=0.6):
    """policy_loss(method) equals the reference per-token loss (autograd) for every aggregation: value and
    gradient, float64."""
    lp, old, adv, mask = _random_batch(seed, noise=noise)
    for mode in LOSS_AGG_MODES:
        x = lp.clone().requires_grad_()
        loss, _ = policy_loss(x, old, adv, mask, method, mode)
        loss.backward()
        y = lp.clone().requires_grad_()
        ref = _agg(reference(y, old, adv, mask), mask, mode)
        ref.backward()
        assert loss.item() == pytest.approx(ref.item(), rel=1e-12, abs=1e-12), mode
        torch.testing.assert_close(x.grad, y.grad, rtol=1e-11, atol=1e-13)
        assert y.grad.abs().sum() > 0


# ------------------------------------------------------------------------------------ dual-clip PPO
def test_dual_clip_cites_eq5_and_matches_it():
    """Ye et al. (arXiv:1912.09729 eq. 5, ε = 0.2, c = 3 in their experiments): for A < 0 the objective is
    max(min(r·A, clip(r, 1−ε, 1+ε)·A), c·A)."""
    assert "arXiv:1912.09729 eq. 5" in get_form("clip").sources

    def eq5(lp, old, adv, mask):
        r = torch.exp(lp - old)
        j = torch.minimum(r * adv, torch.clamp(r, 0.8, 1.2) * adv)
        return -torch.where(adv < 0, torch.maximum(j, 3.0 * adv), j)

    _check_against("ratio:0.2:0.2/dual=3", eq5)
    # A = −1: r = 5 hits the cap (loss c = 3, no gradient); r = 2 is below it (loss r, weight r)
    w = _autograd_weight("ratio:0.2:0.2/dual=3", 0.5, [5.0, 2.0, 0.5], -1.0)
    np.testing.assert_allclose(w, [0.0, 2.0, 0.0], atol=1e-15)
    lp, old, a, mask = _one_token_batch(0.5, [5.0, 2.0], -1.0)
    loss, _ = policy_loss(lp, old, a, mask, "ratio:0.2:0.2/dual=3", "token-sum")
    assert loss.item() == pytest.approx(3.0 + 2.0, rel=1e-12)


# ---------------------------------------------------------------------------------------------- DCPO
def test_dcpo_bounds_pin_the_papers_numbers():
    """arXiv:2509.02333 eq. 4 at ε_low = 0.16, ε_high = 0.2 (App. A.9): the bounds meet GRPO's at (1/(1+ε), 1+ε)
    and (1, 1−ε) (App. A.6, eq. 28); Fig. 4's marked points (0.1, 2.0), (0.01, 5.0), (4·ε_low, 0.5); the hard
    ceiling r_max = 10 for q up to about 2e-3 (Fig. 4c); the README table of github.com/lime-RL/DCPO: at
    q = 0.9 the lowest new probability is 0.69, at q = 0.01 the range is [0.005, 0.05]."""
    eps = dict(eps_low=0.16, eps_high=0.2, r_max=10.0)
    lo, hi = dcpo_bounds([1 / 1.2, 1.0, 0.1, 0.01, 0.64, 0.5, 0.002], **eps)
    assert hi[0] == pytest.approx(1.2, rel=1e-14) and lo[1] == pytest.approx(0.8, rel=1e-14)
    assert hi[2] == pytest.approx(2.0, rel=1e-14) and hi[3] == pytest.approx(5.0, rel=1e-14)
    assert lo[4] == 0.5 and lo[5] == 0.5  # q <= 4·ε_low: the square root's argument is clipped at 0
    assert hi[6] == 10.0
    q_cap = 4 * 0.2 / (19.0**2 - 1)  # ½ + ½√(1 + 0.8/q) = 10
    _, uncapped = dcpo_bounds([q_cap * 0.999, q_cap * 1.001], 0.16, 0.2, 1e9)
    assert uncapped[0] > 10.0 > uncapped[1] and q_cap == pytest.approx(2e-3, rel=0.15)
    lo, hi = dcpo_bounds([0.9, 0.01], **eps)
    assert round(0.9 * lo[0], 2) == 0.69
    assert 0.01 * lo[1] == pytest.approx(0.005, rel=1e-14) and 0.01 * hi[1] == pytest.approx(0.05, rel=1e-14)
    assert (
        PUBLISHED_METHODS["dcpo"] == "ratio:0.16:0.2/dcpo"
        and parse_method("ratio:0.16:0.2/dcpo").param("dcpo_r_max") == 10.0
    )


def test_dcpo_loss_is_eq8_with_eq4_bounds():
    def eq8(lp, old, adv, mask):
        r, q = torch.exp(lp - old), torch.exp(old)
        lo = 0.5 + 0.5 * torch.sqrt(torch.clamp(1 - 4 * 0.16 / q, min=0.0))
        hi = torch.clamp(0.5 + 0.5 * torch.sqrt(1 + 4 * 0.2 / q), max=10.0)
        j = torch.minimum(r * adv, torch.minimum(torch.maximum(r, lo), hi) * adv)
        return -torch.where(adv < 0, torch.maximum(j, 10.0 * adv), j)  # App. A.6: r_max = 10 for A < 0 too

    lp, old, adv, mask = _random_batch(4, noise=1.6)
    r = torch.exp(lp - old)
    assert ((r > 10) & (adv < 0) & (mask > 0)).any() and ((r < 0.5) & (adv < 0) & (mask > 0)).any()
    _check_against("ratio:0.16:0.2/dcpo", eq8, seed=4, noise=1.6)


# ------------------------------------------------------------------------------------ GPPO, CE-GPPO
def _eq8_cegppo(beta1, beta2, lo=0.8, hi=1.2):
    """arXiv:2509.20712 eq. 8, the loss −ℓ."""

    def ref(lp, old, adv, mask):
        d = torch.exp(lp - old)
        left = beta1 * lo / d.detach() * d * adv
        right = beta2 * hi / d.detach() * d * adv
        ell = torch.where((d < lo) & (adv < 0), left, torch.where((d > hi) & (adv > 0), right, d * adv))
        return -ell

    return ref


@pytest.mark.parametrize(
    "method, betas",
    [
        ("ratio:0.2:0.2/cegppo", (0.75, 1.0)),
        ("ratio:0.2:0.2/cegppo/cegppo_beta1=0.5", (0.5, 1.0)),
        ("ratio:0.2:0.2/gppo", (1.0, 1.0)),
    ],
)
def test_cegppo_and_gppo_are_eq8(method, betas):
    _check_against(method, _eq8_cegppo(*betas))


def test_cegppo_pins_eq10_and_its_ppo_limit():
    """eq. 10 at the paper's ε = 0.2, β1 = 0.75, β2 = 1: F = β1·(1−ε) = 0.6 below 0.8 for A < 0, β2·(1+ε) = 1.2
    above 1.2 for A > 0, δ otherwise; "when β1 = β2 = 0, CE-GPPO is equivalent to PPO" (§3.2): the same
    gradient (eq. 8's value of a clipped token is then 0 instead of PPO's constant −A·lo or −A·hi)."""
    w = _autograd_weight("ratio:0.2:0.2/cegppo", 0.3, [0.5, 2.0, 0.5, 2.0], [-1.0, 1.0, 1.0, -1.0])
    np.testing.assert_allclose(w, [0.6, 1.2, 0.5, 2.0], rtol=1e-13)
    lp, old, adv, mask = _random_batch(3)
    out = []
    for method in ("ratio:0.2:0.2/cegppo/cegppo_beta1=0/cegppo_beta2=0", "grpo"):
        x = lp.clone().requires_grad_()
        loss, metrics = policy_loss(x, old, adv, mask, method)
        loss.backward()
        out.append(x.grad)
    torch.testing.assert_close(out[0], out[1], rtol=1e-13, atol=1e-15)
    assert metrics["clipfrac_low"] > 0 and metrics["clipfrac_high"] > 0  # both sides clip in this batch


# ---------------------------------------------------------------------------------------------- ASPO
def _aspo_reference(c, lo=0.8, hi=1.2):
    """arXiv:2510.06062 §6: A > 0: r̂ = π_old·π/sg(π²) (eq. 3), gradient masked above hi (Step 1; the value
    there is the clamp's, 1/hi), soft dual clip −A·sg(c)·log π where 1/r > c (Step 3); A < 0: GRPO's
    −A·max(r, lo) (min(r·A, clip(r)·A)), soft dual clip where r > c."""

    def ref(lp, old, adv, mask):
        pi, pi_old = torch.exp(lp), torch.exp(old)
        r = pi / pi_old
        r_hat = pi_old * pi / (pi**2).detach()
        pos = torch.where(r > hi, (1.0 / hi) * torch.ones_like(r), r_hat)
        pos = torch.where(r < 1.0 / c, c * lp, pos)
        neg = torch.where(r > c, c * lp, torch.maximum(r, torch.full_like(r, lo)))
        return -adv * torch.where(adv > 0, pos, torch.where(adv < 0, neg, r))

    return ref


@pytest.mark.parametrize("c", [3.0, 1.5])
def test_aspo_is_section6(c):
    method = f"ratio:0.2:0.2/aspo/aspo_dual_c={c}"
    _check_against(method, _aspo_reference(c), seed=1)
    lp, old, adv, mask = _random_batch(1)
    _, metrics = policy_loss(lp, old, adv, mask, method)
    assert metrics["dual_clipfrac"] > 0 and metrics["clipfrac_low"] > 0 and metrics["clipfrac_high"] > 0


def test_aspo_pins_the_section_5_2_example():
    """§5.2: old probability 0.9, current 0.1 gives GRPO the weight 1/9; ASPO flips it to 9, which the soft
    dual clip caps at c (3 in the authors' code), keeping the gradient."""
    assert _autograd_weight("grpo", 0.9, 0.1 / 0.9, 1.0) == pytest.approx(1 / 9, rel=1e-13)
    assert _autograd_weight("ratio:0.2:0.2/aspo", 0.9, 0.1 / 0.9, 1.0) == pytest.approx(3.0, rel=1e-13)
    assert _autograd_weight("ratio:0.2:0.2/aspo/aspo_dual_c=10", 0.9, 0.1 / 0.9, 1.0) == pytest.approx(9.0, rel=1e-13)


# ---------------------------------------------------------------------------------------------- TOPR
def _topr_reference(a_pos=1.0, b_pos=1.0, a_neg=0.0, b_neg=1.0):
    """arXiv:2503.14286 §3: −sg(w)·A·log π, w = the sequence ratio π(τ)/μ(τ) truncated to [a, b] by the sign of A."""

    def ref(lp, old, adv, mask):
        seq = torch.exp(((lp - old) * mask).sum(-1, keepdim=True)).detach()
        w = torch.where(adv >= 0, torch.clamp(seq, a_pos, b_pos), torch.clamp(seq, a_neg, b_neg))
        return -w * adv * lp

    return ref


@pytest.mark.parametrize(
    "method, limits", [("ratio/topr", ()), ("ratio/topr/topr_pos_high=2/topr_neg_low=0.5", (1.0, 2.0, 0.5, 1.0))]
)
def test_topr_is_section3(method, limits):
    _check_against(method, _topr_reference(*limits), seed=2)


def test_topr_pins_the_canonical_limits():
    """§3: a⁺ = b⁺ = 1 (positives get the SFT update whatever their ratio), a⁻ = 0, b⁻ = 1 (negatives get
    truncated IS, min(π(τ)/μ(τ), 1)). A three-token sequence's ratio is the product of its token ratios."""
    old = torch.log(torch.tensor([[0.5, 0.2, 0.7], [0.5, 0.2, 0.7]], dtype=torch.float64))
    for steps, seq_ratio in (([0.3, -0.1, 0.2], math.exp(0.4)), ([-0.5, 0.1, -0.2], math.exp(-0.6))):
        lp = (old + torch.tensor([steps, steps], dtype=torch.float64)).requires_grad_()
        adv = torch.tensor([[1.0] * 3, [-1.0] * 3], dtype=torch.float64)
        loss, _ = policy_loss(lp, old, adv, torch.ones_like(adv), "ratio/topr", "token-sum")
        loss.backward()
        w = -lp.grad / adv
        torch.testing.assert_close(w[0], torch.ones(3, dtype=torch.float64), rtol=1e-14, atol=0)
        torch.testing.assert_close(w[1], torch.full((3,), min(seq_ratio, 1.0), dtype=torch.float64), rtol=1e-13, atol=0)


# ---------------------------------------------------------------------------------------------- BAPO
def _algorithm1(ratio, adv, mask, rho0=0.4, a_low=0.6, b_low=0.9, a_high=1.2, b_high=3.0, d1=0.05, d2=0.02):
    """Algorithm 1 of arXiv:2510.18927 as written (plain Python floats), ρ from eq. 8's terms."""
    r, a, m = (x.flatten().tolist() for x in (ratio, adv, mask))

    def rho(c_low, c_high):
        p = sum(ai * min(ri, c_high) for ri, ai, mi in zip(r, a, m) if mi and ai > 0)
        n = sum(-ai * max(ri, c_low) for ri, ai, mi in zip(r, a, m) if mi and ai < 0)
        return 1.0 if p + n == 0 else p / (p + n)

    c_low, c_high = a_low, a_high
    while rho(c_low, c_high) < rho0 and c_low + d2 <= b_low + 1e-9:
        if c_high + d1 <= b_high + 1e-9:
            c_high = round(c_high + d1, 12)
        else:
            c_low = round(c_low + d2, 12)
    return c_low, c_high


def test_bapo_pins_section_5_1_and_algorithm_1_path():
    form = get_form("bapo")
    assert {p.name: p.default for p in form.params} == {
        "bapo_rho0": 0.4,
        "bapo_low_start": 0.6,
        "bapo_low_max": 0.9,
        "bapo_high_start": 1.2,
        "bapo_high_max": 3.0,
        "bapo_high_step": 0.05,
        "bapo_low_step": 0.02,
    }
    path = bapo_path(parse_method("ratio/bapo"))
    assert path[0] == (0.6, 1.2) and path[36] == (0.6, 3.0) and path[-1] == (0.9, 3.0) and len(path) == 52
    # the loop cannot start when c_low + δ2 > b⁻: the bounds stay (a⁻, a⁺)
    assert bapo_path(parse_method("ratio/bapo/bapo_low_max=0.61")) == [(0.6, 1.2)]


def _bapo_loss(lp, old, adv, method="ratio/bapo"):
    lp = lp.clone().requires_grad_()
    loss, _ = policy_loss(lp, old, adv, torch.ones_like(adv), method, "token-sum")
    loss.backward()
    return loss.item(), lp.grad


def test_bapo_hand_computed_bounds():
    """A positive token (A = 0.5, r = 5) against a negative one (A = −1, r = 1): ρ = 0.5·c/(0.5·c + 1) first
    reaches 0.4 at c_high = 1.35 (1.3 gives 0.394), so the positive token is clipped at 1.35: the loss is
    −0.5·1.35 + 1 = 0.325 and its gradient 0. With negatives only, ρ = 0 never reaches ρ0: the path ends at
    (0.9, 3.0), so a negative token at r = 0.85 is clipped at c_low = 0.9."""
    old = torch.log(torch.tensor([[0.2], [0.3]], dtype=torch.float64))
    lp = old + torch.log(torch.tensor([[5.0], [1.0]], dtype=torch.float64))
    adv = torch.tensor([[0.5], [-1.0]], dtype=torch.float64)
    loss, grad = _bapo_loss(lp, old, adv)
    assert loss == pytest.approx(-0.5 * 1.35 + 1.0, rel=1e-13) and grad[0, 0] == 0.0 and grad[1, 0] == 1.0
    assert _algorithm1(torch.exp(lp - old), adv, torch.ones_like(adv)) == (0.6, 1.35)
    lp_neg = old + math.log(0.85)
    loss, grad = _bapo_loss(lp_neg, old, torch.full_like(adv, -1.0))
    assert loss == pytest.approx(2 * 0.9, rel=1e-13) and torch.all(grad == 0)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_bapo_equals_algorithm_1_then_ppo(seed):
    def ref(y, old, adv, mask):
        r = torch.exp(y - old)
        c_low, c_high = _algorithm1(r.detach(), adv, mask)
        return -torch.minimum(r * adv, torch.clamp(r, c_low, c_high) * adv)

    _check_against("ratio/bapo", ref, seed=seed, noise=0.8)


def test_bapo_batch_without_advantage_keeps_the_start_bounds():
    old = torch.log(torch.full((2, 3), 0.4, dtype=torch.float64))
    lp = old + 0.5
    loss, grad = _bapo_loss(lp, old, torch.zeros(2, 3, dtype=torch.float64))
    assert loss == 0.0 and torch.all(grad == 0)


# --------------------------------------------------------------------------------------- one frame (w)
@pytest.mark.parametrize("name", sorted(TOKEN_LEVEL))
def test_numpy_weight_equals_autograd_on_the_grid(name):
    method = TOKEN_LEVEL[name]
    spec = parse_method(method)
    form = get_form(spec.form)
    q, r, adv = np.meshgrid(GRID_Q, GRID_R, [1.0, -1.0, 0.7, -2.5], indexing="ij")
    expected = form.weight(spec, q, r, adv)
    np.testing.assert_allclose(_autograd_weight(method, q, r, adv), expected, rtol=1e-11, atol=1e-14)
    for sign in (1, -1):  # the interval is where w ≠ 0 for A of that sign
        lo, hi = form.interval(spec, np.asarray(GRID_Q)[:, None], sign)
        inside = (GRID_R[None, :] >= lo) & (GRID_R[None, :] <= hi)
        w = form.weight(spec, np.asarray(GRID_Q)[:, None], GRID_R[None, :], float(sign))
        np.testing.assert_array_equal(w != 0, inside)
        assert inside.any()


def test_topr_weight_is_in_the_sequence_ratio():
    """TOPR is not token level; for one-token sequences its w(q, r, A), r the sequence ratio, is autograd's."""
    spec = parse_method("ratio/topr/topr_neg_low=0.3/topr_pos_low=0.5")
    form = get_form("topr")
    assert not form.token_level and "sequence ratio" in form.weight_note
    q, r, adv = np.meshgrid(GRID_Q, GRID_R, [1.0, -1.0], indexing="ij")
    np.testing.assert_allclose(_autograd_weight(spec, q, r, adv), form.weight(spec, q, r, adv), rtol=1e-12)


def test_bapo_is_batch_selective_and_says_what_w_means():
    form = get_form("bapo")
    assert form.family == "batch-selective" and not form.token_level and form.weight is None
    assert "batch" in form.weight_note


# ------------------------------------------------------------------------------------ validation, robustness
@pytest.mark.parametrize(
    "method, match",
    [
        ("kl3/dcpo", r"'dcpo'.*measure='kl3'"),
        ("ratio:0.16:0.2/dcpo/dcpo_r_max=1", r"dcpo_r_max.*> 1"),
        ("binary_kl:0.05/gppo", r"'gppo'.*measure='binary_kl'"),
        ("binary_tv:0.2/cegppo", r"'cegppo'.*measure='binary_tv'"),
        ("binary_tv:0.2/aspo", r"'aspo'.*measure='binary_tv'"),
        ("ratio:0.2:0.2/cegppo/cegppo_beta1=-0.1", r"cegppo_beta1.*>= 0"),
        ("ratio:0.2:0.2/aspo/aspo_dual_c=0.5", r"aspo_dual_c.*> 1"),
        ("ratio/topr/topr_neg_low=2", r"topr_neg_low <= topr_neg_high"),
        ("ratio/topr/topr_pos_low=-1", r"topr_pos_low.*>= 0"),
        ("ratio/bapo/bapo_low_start=0.95", r"bapo_low_start <= bapo_low_max"),
        ("ratio/bapo/bapo_high_start=0.9", r"1 <= bapo_high_start"),
        ("ratio/bapo/bapo_rho0=1.5", r"bapo_rho0.*<= 1"),
        ("ratio/bapo/bapo_low_step=1e-7", r"bapo_low_step=1e-07.*at most 10000"),
        ("ratio:0.2:0.2/topr", r"takes no clip budget"),
        ("ratio:0.2:0.2/gppo/dual=3", r"dual_clip_c applies to form='clip'"),
    ],
)
def test_bad_parameters_are_refused_by_name(method, match):
    with pytest.raises(ValueError, match=match):
        parse_method(method)


@pytest.mark.parametrize("name", sorted(PUBLISHED_METHODS))
def test_published_methods_are_finite_on_hostile_inputs(name):
    """log ratios of ±50 (past verl's ±20 clamp), q near 0 and 1, an empty mask, bf16 inputs."""
    old = torch.tensor([[-30.0, -1e-9, -2.0, -0.7], [-5.0, -0.1, -3.0, -1.0]], dtype=torch.float64)
    lp = old + torch.tensor([[50.0, -50.0, 0.0, 3.0], [-50.0, 40.0, -8.0, 1e-3]], dtype=torch.float64)
    adv = torch.tensor([[1.0], [-1.0]], dtype=torch.float64).expand(2, 4)
    for dtype, mask in (
        (torch.float64, torch.ones(2, 4)),
        (torch.bfloat16, torch.ones(2, 4)),
        (torch.float32, torch.zeros(2, 4)),
    ):
        x = lp.to(dtype).detach().requires_grad_()
        loss, metrics = policy_loss(x, old.to(dtype), adv.to(dtype), mask, PUBLISHED_METHODS[name])
        loss.backward()
        assert math.isfinite(loss.item()) and torch.isfinite(x.grad).all()
        assert all(math.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize("name", sorted(PUBLISHED_METHODS))
def test_modes_never_sync_to_the_host(name, monkeypatch):
    """The loss forms themselves read no tensor value into Python (item, bool, float, int, tolist)."""
    lp, old, adv, mask = _random_batch(5)
    spec = parse_method(PUBLISHED_METHODS[name])

    def refuse(*_args, **_kwargs):
        raise AssertionError("host sync inside a loss form")

    for attr in ("item", "tolist", "__bool__", "__float__", "__int__", "__index__"):
        monkeypatch.setattr(torch.Tensor, attr, refuse)
    terms = FORMS[spec.form].loss(lp.clone().requires_grad_(), old, adv, mask, spec)
    monkeypatch.undo()
    assert torch.isfinite(terms.loss).all()
