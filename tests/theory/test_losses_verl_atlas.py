"""Every verl 0.9.1 policy loss is a divclip method: value and gradient against verl's own registered function.

Each case is a set of verl's own flat settings (dotted keys as in a verl config) and the divclip spec they
mean. The verl side builds its ActorConfig from the settings and calls `core_algos.get_policy_loss_fn(mode)`
in this process; the divclip side calls `policy_loss` with the spec; both see the same tensors (one fully
masked sequence included) and the same loss_agg_mode, in float32 and float64.

Exactness: the loss value is bit-equal (divclip performs verl's floating-point operations in verl's order).
The gradient is bit-equal where divclip differentiates verl's own expression; where it attaches the
closed-form gradient (clip, clip_cov, dro, geo_mean, sapo) the products are taken in another order, so the
gradients agree to |Δ| <= 1e-6 (float32) / 1e-12 (float64) of the largest magnitude.

Two forms ignore loss_agg_mode in verl, and divclip reproduces both under every mode: `sapo` (always
seq-mean-token-mean; the spec read from verl carries sapo_seq_mean=1, while a plain sapo, TRL's, honours the
mode, asserted below) and `geo_mean` (the mean over sequences; divclip's geo_mean aggregates itself).
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, field

import pytest
import torch
from test_losses_verl import DTYPES, TOL, batch, close

from divclip.engines import from_engine
from divclip.theory.forms import FORMS, get_form
from divclip.theory.loss_metrics import kl_penalty
from divclip.theory.losses import LOSS_AGG_MODES, ClipSpec, policy_loss

pytestmark = pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="verl is not installed")

A = "actor_rollout_ref.actor."
PL = A + "policy_loss."
RC = "algorithm.rollout_correction."


@pytest.fixture(scope="module")
def ca():
    return pytest.importorskip("verl.trainer.ppo.core_algos")


def verl_setup(settings: dict, agg: str):
    """(loss_mode, ActorConfig) from flat verl keys, as verl's trainer builds them: `algorithm.rollout_correction`
    with bypass_mode=True becomes policy_loss.rollout_correction and loss_mode 'bypass_mode'
    (`rollout_corr_helper.apply_bypass_mode`)."""
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.workers.config.actor import ActorConfig, PolicyLossConfig

    actor, loss, correction = {}, {}, {}
    for key, value in settings.items():
        for prefix, into in ((PL, loss), (A, actor), (RC, correction)):
            if key.startswith(prefix):
                into[key[len(prefix) :]] = value
                break
        else:
            raise AssertionError(f"unexpected verl key {key!r}")
    if correction.pop("bypass_mode", False):
        loss["loss_mode"] = "bypass_mode"
        loss["rollout_correction"] = RolloutCorrectionConfig(bypass_mode=True, **correction)
    config = ActorConfig(
        strategy="fsdp",
        rollout_n=4,
        ppo_micro_batch_size_per_gpu=1,
        loss_agg_mode=agg,
        policy_loss=PolicyLossConfig(**loss),
        **actor,
    )
    return config.policy_loss.loss_mode, config


@dataclass
class Case:
    id: str
    settings: dict
    spec: ClipSpec
    metrics: dict = field(default_factory=dict)
    """{verl metric name (without 'actor/'): fn(divclip metrics) -> the same number}"""
    nontrivial: object = None
    """fn(divclip metrics) -> bool: the batch exercised what the case is about"""
    noise: float = 0.5
    seed: int = 0
    exact_grad: bool = True


def _ratio(lo, hi, **kw):
    return ClipSpec("ratio", eps_low=lo, eps_high=hi, **kw)


PPO_KL = {"ppo_kl": lambda m: m["ppo_kl"]}
CLIP = {"pg_clipfrac": lambda m: m["clipfrac"], **PPO_KL}
DAPO_KEYS = {A + "clip_ratio_low": 0.2, A + "clip_ratio_high": 0.28}

CASES = [
    Case(
        "vanilla_dual_clip",
        {PL + "loss_mode": "vanilla", **DAPO_KEYS, A + "clip_ratio_c": 3.0},
        _ratio(0.2, 0.28, params={"dual_clip_c": 3.0}),
        {**CLIP, "pg_clipfrac_lower": lambda m: m["dual_clipfrac"]},
        lambda m: m["clipfrac"] > 0.05 and m["dual_clipfrac"] > 0,
        noise=1.0,
        exact_grad=False,
    ),
    Case(
        "vanilla_no_dual_clip",
        {PL + "loss_mode": "vanilla", **DAPO_KEYS, A + "clip_ratio_c": math.inf},
        _ratio(0.2, 0.28),
        {**CLIP, "pg_clipfrac_lower": lambda m: 0.0},
        lambda m: m["clipfrac"] > 0.05,
        noise=1.0,
        exact_grad=False,
    ),
    Case(
        "dppo_tv",
        {
            PL + "loss_mode": "dppo_tv",
            A + "clip_ratio": 0.2,
            A + "clip_ratio_low": 0.2,
            A + "clip_ratio_high": 0.2,
            A + "clip_ratio_c": 20.0,
        },
        ClipSpec("binary_tv", delta=0.2, form="gated", params={"gate": "verl", "tis_cap": 20.0}),  # verl's gate
        CLIP,
        lambda m: m["clipfrac"] > 0.02,
        noise=0.8,
        seed=1,
    ),
    Case(
        "dppo_kl",
        {
            PL + "loss_mode": "dppo_kl",
            A + "clip_ratio": 0.05,
            A + "clip_ratio_low": 0.05,
            A + "clip_ratio_high": 0.05,
            A + "clip_ratio_c": 20.0,
        },
        ClipSpec(
            "binary_kl", delta=0.05, form="gated", params={"gate": "verl", "tis_cap": 20.0}
        ),  # verl's gate arithmetic
        CLIP,
        lambda m: m["clipfrac"] > 0.02,
        noise=0.8,
        seed=1,
    ),
    Case(
        "gspo",
        {PL + "loss_mode": "gspo", A + "clip_ratio_low": 3e-4, A + "clip_ratio_high": 4e-4},
        _ratio(3e-4, 4e-4, level="sequence"),
        CLIP,
        lambda m: 0 < m["clipfrac"] < 1,
        noise=0.002,
        seed=4,
        exact_grad=False,
    ),
    Case(
        "sapo",
        {PL + "loss_mode": "sapo", A + "tau_pos": 1.0, A + "tau_neg": 1.05},
        ClipSpec(form="sapo", params={"sapo_seq_mean": True}),
        PPO_KL,
        noise=0.6,
        seed=6,
        exact_grad=False,
    ),
    Case(
        "cispo",
        {PL + "loss_mode": "cispo", **DAPO_KEYS},
        _ratio(0.2, 0.28, form="cispo"),
        CLIP,
        lambda m: m["clipfrac"] > 0.02,
        noise=0.6,
        seed=5,
    ),
    Case("gpg", {PL + "loss_mode": "gpg"}, ClipSpec(form="gpg")),
    Case(
        "dro",
        {PL + "loss_mode": "dro", PL + "dro_beta": 0.1},
        ClipSpec(form="dro", params={"dro_beta": 0.1}),
        PPO_KL,
        exact_grad=False,
    ),
    Case(
        "clip_cov_default",
        {PL + "loss_mode": "clip_cov", **DAPO_KEYS},
        _ratio(0.2, 0.28, form="clip_cov"),
        {"pg_clipfrac": lambda m: m["clipfrac_low_part1"] + m["clipfrac_high_part1"], **PPO_KL},
        lambda m: m["clipfrac_low_part1"] + m["clipfrac_high_part1"] > 0,
        exact_grad=False,
    ),
    Case(
        "clip_cov_wide",
        {
            PL + "loss_mode": "clip_cov",
            **DAPO_KEYS,
            PL + "clip_cov_ratio": 0.02,
            PL + "clip_cov_lb": 0.0,
            PL + "clip_cov_ub": 5.0,
        },
        _ratio(
            0.2, 0.28, form="clip_cov", params={"clip_cov_ratio": 0.02, "clip_cov_lb": 0.0}
        ),  # ub 5.0 is the default
        {"pg_clipfrac": lambda m: m["clipfrac_low_part1"] + m["clipfrac_high_part1"], **PPO_KL},
        lambda m: m["clipfrac_low_part1"] + m["clipfrac_high_part1"] > 0.01,
        exact_grad=False,
    ),
    Case("kl_cov_default", {PL + "loss_mode": "kl_cov"}, ClipSpec(form="kl_cov")),
    Case(
        "kl_cov_wide",
        {PL + "loss_mode": "kl_cov", PL + "kl_cov_ratio": 0.05, PL + "ppo_kl_coef": 0.3},
        ClipSpec(form="kl_cov", params={"kl_cov_ratio": 0.05, "kl_cov_coef": 0.3}),
    ),
    Case(
        "geo_mean",
        {PL + "loss_mode": "geo_mean", A + "clip_ratio_low": 0.2, A + "clip_ratio_high": 0.3},
        ClipSpec(form="geo_mean", params={"gmpo_eps_low": 0.2, "gmpo_eps_high": 0.3}),
        {
            "pg_clipfrac": lambda m: m["clipfrac_high_part0"],
            "pg_clipfrac_lower": lambda m: m["clipfrac_low_part0"],
            **PPO_KL,
        },
        lambda m: m["clipfrac"] > 0.05,
        exact_grad=False,
    ),
    *(
        Case(
            f"bypass_ppo_clip_{level}",
            {
                RC + "bypass_mode": True,
                RC + "loss_type": "ppo_clip",
                RC + "rollout_is": level,
                **DAPO_KEYS,
                A + "clip_ratio_c": 3.0,
            },
            _ratio(0.2, 0.28, params={"dual_clip_c": 3.0}),
            {**CLIP, "pg_clipfrac_lower": lambda m: m["dual_clipfrac"]},
            lambda m: m["clipfrac"] > 0.05,
            noise=1.0,
            exact_grad=False,
        )
        for level in ("token", "sequence")
    ),
    Case(
        "bypass_reinforce_no_is",
        {RC + "bypass_mode": True, RC + "loss_type": "reinforce", RC + "rollout_is": None},
        ClipSpec(form="gpg"),
        PPO_KL,
    ),
    *(
        Case(
            f"bypass_reinforce_{level}_{name}",
            {
                RC + "bypass_mode": True,
                RC + "loss_type": "reinforce",
                RC + "rollout_is": level,
                RC + "rollout_is_threshold": threshold,
                RC + "rollout_is_batch_normalize": normalize,
            },
            ClipSpec(form="reinforce_is" if level == "token" else "reinforce_seq_is", params=params),
            PPO_KL,
            lambda m: m["clipfrac"] > 0.02,
            noise=0.2 if level == "sequence" else 0.5,
        )
        for level in ("token", "sequence")
        for name, threshold, normalize, params in (  # the spec names the parameters that differ from the defaults
            ("tis", 1.5, False, {"rollout_is_threshold": 1.5}),
            ("icepop", "0.7_1.5", False, {"rollout_is_threshold": 1.5, "rollout_is_threshold_lower": 0.7}),
            ("tis_normalized", 1.5, True, {"rollout_is_threshold": 1.5, "rollout_is_batch_normalize": True}),
        )
    ),
]


def run(fn, leaf_from, *args):
    leaf = leaf_from.clone().requires_grad_()
    loss, metrics = fn(leaf, *args)
    loss.backward()
    return loss.detach(), leaf.grad, metrics


def both(ca, case, agg, dtype, seed=0):
    """((loss, grad, metrics) of divclip's spec read from the case's verl settings, the same of verl)."""
    old, lp, adv, mask = batch(dtype, seed=case.seed, noise=case.noise)
    spec = from_engine("verl", case.settings)
    loss_mode, config = verl_setup(case.settings, agg)
    verl_fn = ca.get_policy_loss_fn(loss_mode)
    torch.manual_seed(seed)  # Clip-Cov draws from the default generator: the same state on both sides
    ours = run(lambda leaf: policy_loss(leaf, old, adv, mask, spec, agg), lp)
    torch.manual_seed(seed)
    theirs = run(lambda leaf: verl_fn(old, leaf, adv, mask, agg, config), lp)
    return ours, theirs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("agg", LOSS_AGG_MODES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_verl_loss_is_verl_in_value_gradient_and_metrics(ca, case, agg, dtype):
    (loss, grad, m), (v_loss, v_grad, vm) = both(ca, case, agg, dtype)
    assert torch.equal(loss, v_loss), (float(loss), float(v_loss))
    assert torch.equal(grad, v_grad) if case.exact_grad else close(grad, v_grad, dtype)
    assert float(grad.abs().max()) > 0
    if case.nontrivial is not None:
        assert case.nontrivial(m), m
    for name, ours in case.metrics.items():
        assert ours(m) == pytest.approx(vm["actor/" + name], rel=TOL[dtype], abs=TOL[dtype]), name


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_verl_settings_read_as_the_documented_spec(case):
    """`divclip.engines.from_engine` reads verl's own keys (defaults from verl's generated config) as the spec."""
    assert from_engine("verl", case.settings) == case.spec


def test_every_verl_loss_mode_is_covered(ca):
    """Each of verl's registered policy losses has a case here, and each verl form a torch implementation."""
    # verl's own registrations: divclip's verl plug-in adds atr_kl3 / divclip_* to the same registry when another
    # test file of this worker has imported it
    verl_modes = {m for m, fn in ca.POLICY_LOSS_REGISTRY.items() if fn.__module__.startswith("verl.")}
    assert len(verl_modes) == 12
    covered = {verl_setup(case.settings, "token-mean")[0] for case in CASES}
    assert verl_modes == covered
    for mode in ("gpg", "dro", "clip_cov", "kl_cov", "geo_mean", "reinforce_is", "reinforce_seq_is"):
        assert mode in FORMS and any(s.startswith("verl:") for s in get_form(mode).sources)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("agg", LOSS_AGG_MODES)
def test_sapo_ignores_loss_agg_mode_in_verl_only(ca, agg, dtype):
    """verl's sapo returns its seq-mean-token-mean loss under every loss_agg_mode, and so does the spec read from
    verl's settings (sapo_seq_mean=1), value and gradient; a plain sapo (TRL's, the method string) honours the
    mode, so it differs from verl under every mode but seq-mean-token-mean."""
    case = next(c for c in CASES if c.id == "sapo")
    old, lp, adv, mask = batch(dtype, seed=case.seed, noise=case.noise)
    mode, config = verl_setup(case.settings, agg)
    verl_loss, verl_grad, _ = run(lambda leaf: ca.get_policy_loss_fn(mode)(old, leaf, adv, mask, agg, config), lp)
    spec = from_engine("verl", case.settings)
    assert spec.param("sapo_seq_mean") == 1.0
    loss, grad, _ = run(lambda leaf: policy_loss(leaf, old, adv, mask, spec, agg), lp)
    assert torch.equal(loss, verl_loss) and close(grad, verl_grad, dtype)
    for plain in (ClipSpec(form="sapo"), from_engine("trl", {"loss_type": "sapo"})):
        honoured, _ = policy_loss(lp, old, adv, mask, plain, agg)
        assert torch.equal(honoured, verl_loss) == (agg == "seq-mean-token-mean"), (agg, plain)


# ------------------------------------------------------------------------------------ Clip-Cov's pick
def _picked(case, dtype, agg="token-sum", seed=0, ca=None):
    """The tokens Clip-Cov removed on each side: gradient 0 although the ratio clip kept them."""
    (_, grad, _), (_, v_grad, _) = both(ca, case, agg, dtype, seed=seed)
    return grad == 0, v_grad == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_clip_cov_draws_verls_tokens_and_leaves_the_generator_where_verl_does(ca, dtype):
    case = next(c for c in CASES if c.id == "clip_cov_wide")  # ~8 of many candidates: the draw matters
    old, lp, adv, mask = batch(dtype, seed=case.seed, noise=case.noise)
    mode, config = verl_setup(case.settings, "token-mean")
    states, zero_grads = [], []
    for side in ("ours", "verl"):
        torch.manual_seed(123)
        leaf = lp.clone().requires_grad_()
        if side == "ours":
            loss, _ = policy_loss(leaf, old, adv, mask, case.spec, "token-mean")
        else:
            loss, _ = ca.get_policy_loss_fn(mode)(old, leaf, adv, mask, "token-mean", config)
        loss.backward()
        states.append(torch.get_rng_state())
        zero_grads.append(leaf.grad == 0)
    assert torch.equal(zero_grads[0], zero_grads[1])
    assert torch.equal(states[0], states[1])  # one randperm(K) each, nothing else drawn
    other = _picked(case, dtype, seed=7, ca=ca)[1]  # another seed, another draw: the test can see one
    assert not torch.equal(other, zero_grads[1])


def test_clip_cov_without_host_reads_picks_every_candidate_when_verl_does(ca):
    """The compile path (`_pick_without_sync`) draws other keys than verl's randperm; when ⌊ρ·N⌋ covers every
    candidate both take them all, and otherwise it takes the same number, all of them candidates."""
    from divclip.theory.forms.clip_cov import _pick_like_verl, _pick_without_sync

    g = torch.Generator().manual_seed(3)
    mask = (torch.rand(16, 50, generator=g) < 0.8).double()
    candidates = (torch.rand(16, 50, generator=g) < 0.05) & (mask > 0)
    k = int(candidates.sum())
    everything = _pick_without_sync(candidates, mask, rho=1.0)
    assert torch.equal(everything, candidates) and torch.equal(_pick_like_verl(candidates, mask, rho=1.0), candidates)
    rho = 3.5 / float(mask.sum())  # ⌊ρ·N⌋ = 3 < K
    some = _pick_without_sync(candidates, mask, rho=rho)
    assert k > 3 and int(some.sum()) == 3 and bool((some <= candidates).all())
    assert int(_pick_like_verl(candidates, mask, rho=rho).sum()) == 3


# ----------------------------------------------------------------------------------- rollout IS weights
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case_id", ["gpg", "dro", "clip_cov_wide", "kl_cov_wide", "geo_mean"])
def test_rollout_is_weights_enter_like_verl(ca, case_id, dtype):
    """Decoupled mode's IS weights: per token for the token forms; geo_mean takes their per-sequence geometric
    mean, as verl does."""
    case = next(c for c in CASES if c.id == case_id)
    old, lp, adv, mask = batch(dtype, seed=case.seed, noise=case.noise)
    w = torch.rand(old.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(dtype) + 0.5
    mode, config = verl_setup(case.settings, "seq-mean-token-mean")
    torch.manual_seed(0)
    ours = run(
        lambda leaf: policy_loss(leaf, old, adv, mask, case.spec, "seq-mean-token-mean", rollout_is_weights=w), lp
    )
    torch.manual_seed(0)
    theirs = run(
        lambda leaf: ca.get_policy_loss_fn(mode)(
            old, leaf, adv, mask, "seq-mean-token-mean", config, rollout_is_weights=w
        ),
        lp,
    )
    assert torch.equal(ours[0], theirs[0])
    assert close(ours[1], theirs[1], dtype)


# ---------------------------------------------------------------------------- kl_penalty (issue 26 §6)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("estimator", ["abs", "abs+", "k1+", "kl+", "k2+", "mse+", "k3+", "low_var_kl+"])
def test_kl_penalty_straight_through_and_abs_are_verls(ca, dtype, estimator):
    g = torch.Generator().manual_seed(9)
    lp = (torch.randn(6, 30, generator=g, dtype=torch.float64) * 3).to(dtype)
    ref = (torch.randn(6, 30, generator=g, dtype=torch.float64) * 3).to(dtype)
    lp[0, 0], ref[0, 0] = -30.0, 0.0  # verl's ±20 / ±10 clamps
    ours_leaf, verl_leaf = lp.clone().requires_grad_(), lp.clone().requires_grad_()
    ours, theirs = kl_penalty(ours_leaf, ref, estimator), ca.kl_penalty(verl_leaf, ref, estimator)
    assert torch.equal(ours.detach(), theirs.detach())
    weights = torch.linspace(-1.0, 2.0, lp.numel(), dtype=dtype).reshape(lp.shape)
    (ours * weights).sum().backward()
    (theirs * weights).sum().backward()
    assert torch.equal(ours_leaf.grad, verl_leaf.grad)
    if estimator.endswith("+"):  # straight through: k2's gradient, not the estimator's own
        assert torch.equal(ours_leaf.grad, (weights * (lp - ref)).to(dtype))


def test_kl_penalty_refuses_unknown_names():
    with pytest.raises(ValueError, match=r"abs\+"):
        kl_penalty(torch.zeros(2), torch.zeros(2), "full")


# ------------------------------------------------------------------- the DPPO-TV gate at δ (issue 26 §6)
def tv_boundary_batch(dtype, delta, n=4000, seed=0):
    """Tokens whose q − p = exp(log q) − exp(log p) lies within a few ulps of ±δ (A's sign picks the side)."""
    g = torch.Generator().manual_seed(seed)
    sign = torch.where(torch.rand(n, generator=g, dtype=torch.float64) < 0.5, 1.0, -1.0).double()
    p = torch.rand(n, generator=g, dtype=torch.float64) * (1 - delta - 0.01) + 0.005
    p = torch.where(sign < 0, p + delta, p)
    old = torch.log(p).to(dtype)
    lp = torch.log(old.double().exp() + sign * delta).to(dtype)
    steps = torch.randint(-3, 4, (n,), generator=g)  # then 0..3 ulps of log q either way
    for _ in range(3):
        lp = torch.where(steps > 0, torch.nextafter(lp, torch.full_like(lp, math.inf)), lp)
        lp = torch.where(steps < 0, torch.nextafter(lp, torch.full_like(lp, -math.inf)), lp)
        steps = steps - steps.sign()
    return old[None], lp[None], sign.to(dtype)[None], torch.ones(1, n, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dppo_tv_gate_decides_tokens_at_delta_as_verl(ca, dtype):
    delta = 0.2
    old, lp, adv, mask = tv_boundary_batch(dtype, delta)
    moved = (lp.exp() - old.exp()) * adv  # q − p in A's direction, as verl computes it
    assert int((moved == delta).sum()) > 10 and int((moved > delta).sum()) > 100 and int((moved < delta).sum()) > 100
    case = next(c for c in CASES if c.id == "dppo_tv")
    mode, config = verl_setup(case.settings, "token-sum")
    loss, grad, _ = run(lambda leaf: policy_loss(leaf, old, adv, mask, case.spec, "token-sum"), lp)
    v_loss, v_grad, _ = run(lambda leaf: ca.get_policy_loss_fn(mode)(old, leaf, adv, mask, "token-sum", config), lp)
    assert torch.equal(grad == 0, v_grad == 0)  # the same verdict on every token
    assert torch.equal(loss, v_loss) and torch.equal(grad, v_grad)


# ----------------------------------------------------------------------- divclip -> verl keys -> verl
WRITTEN = [
    "ratio/gpg",
    "ratio/dro/dro_beta=0.1",
    "ratio:0.2:0.28/clip_cov/clip_cov_ratio=0.02/clip_cov_lb=0",
    "ratio/kl_cov/kl_cov_ratio=0.05/kl_cov_coef=0.3",
    "ratio/geo_mean/gmpo_eps_low=0.2/gmpo_eps_high=0.3",
    "ratio/reinforce_is/rollout_is_threshold=1.5/rollout_is_threshold_lower=0.7",
    "ratio/reinforce_seq_is/rollout_is_threshold=1.5/rollout_is_batch_normalize=1",
]


@pytest.mark.parametrize("method", WRITTEN)
def test_written_verl_keys_run_the_same_loss_in_verl(ca, method):
    """`to_engine(spec, "verl")` writes keys that verl runs as the same loss, and that read back as the spec."""
    from divclip.engines import to_engine
    from divclip.theory.spec import parse_method

    spec = parse_method(method)
    settings = {k: v for k, v in to_engine(spec, "verl").items() if k != A + "loss_agg_mode"}
    assert from_engine("verl", settings) == spec
    old, lp, adv, mask = batch(torch.float64, noise=0.3)
    mode, config = verl_setup(settings, "seq-mean-token-mean")
    torch.manual_seed(0)
    ours, _ = policy_loss(lp, old, adv, mask, spec, "seq-mean-token-mean")
    torch.manual_seed(0)
    theirs, _ = ca.get_policy_loss_fn(mode)(old, lp, adv, mask, "seq-mean-token-mean", config)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("method", WRITTEN)
def test_verl_forms_are_finite_on_empty_masks_and_extreme_ratios(method):
    """An all-empty mask gives 0 with a zero gradient; log-ratios of ±30 give a finite loss and gradient."""
    from divclip.theory.spec import parse_method

    spec = parse_method(method)
    old, lp, adv, mask = batch(torch.float32, noise=0.3)
    loss, grad, _ = run(lambda leaf: policy_loss(leaf, old, adv, torch.zeros_like(mask), spec), lp)
    assert float(loss) == 0.0 and not bool(grad.any())
    far = lp + torch.where(torch.rand(lp.shape, generator=torch.Generator().manual_seed(2)) < 0.5, -30.0, 30.0)
    loss, grad, m = run(lambda leaf: policy_loss(leaf, old, adv, mask, spec), far)
    assert math.isfinite(float(loss)) and bool(torch.isfinite(grad).all()) and math.isfinite(m["ppo_kl"])


@pytest.mark.slow
@pytest.mark.parametrize("method", WRITTEN)
def test_verl_forms_trace_without_graph_breaks(method):
    """torch.compile(fullgraph=True) traces every verl form (no host read); Clip-Cov then takes its sync-free
    draw, of the same size as verl's; the others give the eager numbers."""
    from divclip.theory.forms.clip_cov import _batch_covariance
    from divclip.theory.spec import parse_method

    spec = parse_method(method)
    old, lp, adv, mask = batch(torch.float32, noise=0.3)
    form = FORMS[spec.form].loss

    def loss_of(leaf):
        return form(leaf, old, adv, mask, spec).loss.sum()

    torch._dynamo.reset()
    compiled = torch.compile(loss_of, fullgraph=True, backend="eager")
    (c_loss, c_grad, _), (e_loss, e_grad, _) = (run(lambda leaf, f=f: (f(leaf), {}), lp) for f in (compiled, loss_of))
    if spec.form != "clip_cov":
        assert torch.equal(c_loss, e_loss) and torch.equal(c_grad, e_grad)
        return
    cov = _batch_covariance(lp, adv, mask)
    ratio = (lp - old).exp()
    kept_by_ratio = (-adv * torch.clamp(ratio, 0.8, 1.28)) <= (-adv * ratio)
    candidates = (cov > 0.0) & (cov < 5.0) & (mask > 0) & kept_by_ratio & (adv != 0)
    expected = min(max(int(0.02 * float(mask.sum())), 1), int(candidates.sum()))
    assert int(((c_grad == 0) & candidates).sum()) == int(((e_grad == 0) & candidates).sum()) == expected


@pytest.mark.parametrize(
    "method",
    [
        "ratio/gpg",
        "ratio/dro/dro_beta=0.1",
        "ratio/reinforce_is/rollout_is_threshold=1.5",
        "ratio/reinforce_is/rollout_is_threshold=1.5/rollout_is_threshold_lower=0.7",
    ],
)
def test_token_level_verl_forms_weight_is_autograd(method):
    """The Form's numpy w(q, r, A) is the per-token gradient: ∂ℓ/∂log π = −A·w (docs/theory.md §1)."""
    import numpy as np

    from divclip.theory.losses import policy_terms
    from divclip.theory.spec import parse_method

    spec = parse_method(method)
    q, r, a = np.meshgrid([0.001, 0.1, 0.5, 0.9], [0.5, 0.69, 0.95, 1.0, 1.3, 2.0], [-1.5, 0.7], indexing="ij")
    old = torch.tensor(np.log(q).reshape(1, -1))
    leaf = torch.tensor(np.log(q * r).reshape(1, -1), requires_grad=True)
    adv = torch.tensor(a.reshape(1, -1))
    policy_terms(leaf, old, adv, torch.ones_like(adv), spec).loss.sum().backward()
    w = get_form(spec.form).weight(spec, q, r, a).reshape(1, -1)
    assert np.allclose(leaf.grad.numpy(), -a.reshape(1, -1) * w, rtol=1e-12, atol=1e-15)
