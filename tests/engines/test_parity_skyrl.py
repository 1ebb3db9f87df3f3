"""SkyRL 0.3.0's own loss, exactly (issue 35): for every policy_loss_type, loss_reduction and off-policy option,
`policy_loss` on the spec `divclip.engines.skyrl.read` gives, on SkyRL's pre-scaled advantages
(`skyrl.aggregation`: A times the factor SkyRL's `apply_loss_reduction_to_advantages_minibatch` divides by) and
summed over tokens as SkyRL sums, equals the installed `PolicyLossRegistry` function SkyRL's worker calls (loaded
in process: tests/engines/skyrl_helpers.py) in value and gradient, float64 to 1e-12 relative and float32 to SkyRL's
own rounding, on every input kind of tests/engines/parity_inputs.py (|log r| up to 30, token and per-row
advantages, empty rows, an empty batch). Where SkyRL computes differently, the read names it, and the test shows
the difference is real and no larger than named.

PARITY_ROWS, one (engine, setting, status, note) per case, is what tests/engines/parity_report.py turns into the
table of docs/engines.md ("Each engine's own loss, exactly"); every row is a test below.
"""

import functools

import pytest
import torch
from omegaconf import OmegaConf
from parity_inputs import (
    KINDS,
    LOW_DTYPES,
    LOW_IDS,
    assert_fp16_overflow_is_the_engines,
    assert_low_precision,
    assert_same,
    batch,
    low_precision_rows,
    low_precision_runs,
    moderate,
    value_and_grad,
)
from skyrl_helpers import load

from divclip import engines
from divclip.engines import skyrl
from divclip.theory.losses import policy_loss

ppo_utils, AlgorithmConfig = load()
A = "trainer.algorithm."
OPC = A + "off_policy_correction."
FLOAT32_EXP = 4e-6
"""float64 inputs: SkyRL's ratio is exp in float32 of log r rounded to float32 (safe_exp_delta), so it is off
divclip's float64 ratio by up to |log r|·2^-24 + 2^-24 relative: 2e-6 at |log r| = 30."""

# (name, SkyRL settings, float64 tolerance, note)
LOSSES = [
    ("regular", {A + "policy_loss_type": "regular"}, 1e-12, "exp_dtype=float32 (SkyRL's float32 exp)"),
    (
        "regular, eps_clip_low/high 0.2/0.28",
        {A + "eps_clip_low": 0.2, A + "eps_clip_high": 0.28},
        1e-12,
        "exp_dtype=float32 (SkyRL's float32 exp)",
    ),
    (
        "dual_clip",
        {A + "policy_loss_type": "dual_clip"},
        1e-12,
        "clip_ratio_c 3; exp_dtype=float32",
    ),
    (
        "gspo",
        {A + "policy_loss_type": "gspo", A + "eps_clip_low": 3e-4, A + "eps_clip_high": 4e-4},
        1e-12,
        "log s clamped at 10, as divclip",
    ),
    (
        "cispo (defaults 0 / 5)",
        {A + "policy_loss_type": "cispo"},
        1e-12,
        "exp_dtype=float32 (SkyRL's float32 exp)",
    ),
    (
        "cispo 0.5 / 1.0",
        {A + "policy_loss_type": "cispo", A + "cispo.cispo_eps_clip_low": 0.5, A + "cispo.cispo_eps_clip_high": 1.0},
        1e-12,
        "exp_dtype=float32 (SkyRL's float32 exp)",
    ),
    ("sapo", {A + "policy_loss_type": "sapo"}, 1e-12, ""),
    (
        "sapo tau 2 / 3",
        {A + "policy_loss_type": "sapo", A + "sapo.tau_pos": 2.0, A + "sapo.tau_neg": 3.0},
        1e-12,
        "",
    ),
    ("clip_cov", {A + "policy_loss_type": "clip_cov"}, 1e-12, "on the pre-scaled advantages (named)"),
    (
        "clip_cov, a window that picks tokens",
        {
            A + "policy_loss_type": "clip_cov",
            A + "clip_cov.clip_ratio": 0.2,
            A + "clip_cov.clip_cov_lb": -1e-3,
            A + "clip_cov.clip_cov_ub": 1e-2,
        },
        1e-12,
        "its random pick drawn as SkyRL draws it",
    ),
    ("kl_cov", {A + "policy_loss_type": "kl_cov"}, 1e-12, "penalty as a token sum (named)"),
    (
        "importance_sampling",
        {A + "policy_loss_type": "importance_sampling"},
        1e-12,
        "form importance_sampling /noclamp (plain exp in the input dtype)",
    ),
    (
        "dppo (binary_tv 0.2)",
        {A + "policy_loss_type": "dppo"},
        1e-12,
        "gated surrogate 'ratio', gate 'verl'; exp_dtype=float32",
    ),
    (
        "dppo binary_kl 0.05",
        {
            A + "policy_loss_type": "dppo",
            A + "dppo.dppo_type": "binary_kl",
            A + "dppo.delta_low": 0.05,
            A + "dppo.delta_high": 0.05,
        },
        1e-12,
        "gated surrogate 'ratio', gate 'verl'; exp_dtype=float32",
    ),
    (
        "dppo delta_low 0.1 != delta_high 0.3",
        {A + "policy_loss_type": "dppo", A + "dppo.delta_low": 0.1, A + "dppo.delta_high": 0.3},
        1e-12,
        "the gated form's delta_high; exp_dtype=float32",
    ),
    (
        "dppo binary_kl delta_low 0.02 != delta_high 0.1",
        {
            A + "policy_loss_type": "dppo",
            A + "dppo.dppo_type": "binary_kl",
            A + "dppo.delta_low": 0.02,
            A + "dppo.delta_high": 0.1,
        },
        1e-12,
        "the gated form's delta_high; exp_dtype=float32",
    ),
]
ROLLOUT_LOSSES = [  # (name, settings, float64 tolerance, note): losses that read the rollout log-probs
    (
        "rollout_is (eps_clip 0.2 / 0.2)",
        {A + "policy_loss_type": "rollout_is"},
        1e-12,
        "ratio/gpg with read_correction's bypass IcePop band (its exp_dtype=float32: SkyRL's safe_exp_delta)",
    ),
    (
        "rollout_is eps_clip 0.5 / 1.0",
        {A + "policy_loss_type": "rollout_is", A + "eps_clip_low": 0.5, A + "eps_clip_high": 1.0},
        1e-12,
        "ratio/gpg with read_correction's bypass IcePop band (its exp_dtype=float32: SkyRL's safe_exp_delta)",
    ),
    (
        "dppo against the rollout log-probs",
        {A + "policy_loss_type": "dppo"},
        1e-12,
        "SkyRL's behaviour policy is π_rollout: divclip's old_log_prob must be it (named)",
    ),
]
REDUCTIONS = [
    ("token_mean", {}, "token-mean"),
    ("sequence_mean", {A + "loss_reduction": "sequence_mean"}, None),
    (
        "seq_mean_token_sum_norm, max_seq_len 16",
        {A + "loss_reduction": "seq_mean_token_sum_norm", A + "max_seq_len": 16},
        None,
    ),
    (
        "token_mean_legacy, micro-batches of 2",
        {A + "loss_reduction": "token_mean_legacy", "trainer.micro_train_batch_size_per_gpu": 2},
        None,
    ),
    (
        "token_mean_legacy, one whole micro-batch of 4",
        {A + "loss_reduction": "token_mean_legacy", "trainer.micro_train_batch_size_per_gpu": 4},
        None,
    ),
    (
        "prompt_mean, 3 responses per prompt",
        {A + "loss_reduction": "prompt_mean", "generator.n_samples_per_prompt": 3},
        None,
    ),
]
CORRECTIONS = [  # (name, settings, float64 tolerance): SkyRL's TIS weight is safe_exp_delta too (float32)
    ("off_policy_correction token TIS", {OPC + "tis_ratio_type": "token"}, 1e-12),
    ("off_policy_correction sequence TIS", {OPC + "tis_ratio_type": "sequence"}, 1e-12),
    (
        "off_policy_correction geometric sequence mask",
        {OPC + "sequence_mask_metric": "geometric", OPC + "geo_mask_high": 1.1, OPC + "geo_mask_low": 0.9},
        1e-12,
    ),
    ("off_policy_correction product sequence mask", {OPC + "sequence_mask_metric": "product"}, 1e-12),
    (
        "off_policy_correction token mask + token TIS",
        {
            OPC + "tis_ratio_type": "token",
            OPC + "token_mask_is_threshold_low": 0.7,
            OPC + "token_mask_is_threshold_high": 1.5,
        },
        1e-12,
    ),
    (
        "off_policy_correction outlier_token_is_threshold_low/high 0.7 / 1.5",
        {OPC + "outlier_token_is_threshold_low": 0.7, OPC + "outlier_token_is_threshold_high": 1.5},
        1e-12,
    ),
    (
        "off_policy_correction outlier_token_is_threshold_high 1.5 alone",
        {OPC + "outlier_token_is_threshold_high": 1.5},
        1e-12,
    ),
    (
        "off_policy_correction outlier_token_is_threshold_low 0.6 alone",
        {OPC + "outlier_token_is_threshold_low": 0.6},
        1e-12,
    ),
    (
        "off_policy_correction outlier mask + token TIS + geometric sequence mask",
        {
            OPC + "outlier_token_is_threshold_high": 1.55,
            OPC + "tis_ratio_type": "token",
            OPC + "sequence_mask_metric": "geometric",
            OPC + "geo_mask_high": 1.2,
            OPC + "geo_mask_low": 0.8,
        },
        1e-12,
    ),
]

PARITY_ROWS = (
    [("skyrl", f"policy_loss_type {name}", "exact", note) for name, _, _, note in LOSSES]
    + [("skyrl", f"policy_loss_type {name}", "exact", note) for name, _, _, note in ROLLOUT_LOSSES]
    + [("skyrl", f"loss_reduction {name}", "exact", "skyrl.aggregation") for name, _, _ in REDUCTIONS]
    + [
        (
            "skyrl",
            name,
            "exact",
            "read_correction"
            + ("; float64: to SkyRL's float32 exp of the weight" if tol > 1e-12 else "")
            + ("; the weight's exp_dtype=float32 (SkyRL's safe_exp_delta)" if "tis_ratio_type" in str(cfg) else ""),
        )
        for name, cfg, tol in CORRECTIONS
    ]
    + [
        ("skyrl", "policy_loss_type divclip_method", "exact", "divclip's plug-in"),
        (
            "skyrl",
            "policy_loss_type cross_entropy",
            "named",
            "SFT Σ −log π·mask: no spec; policy_loss on ratio/gpg with A = 1 is its loss (tested)",
        ),
        (
            "skyrl",
            "off_policy_correction with importance_sampling / cross_entropy",
            "named",
            "SkyRL applies none: read_correction gives None, a warning names the keys",
        ),
        ("skyrl", "sequence_mean read as seq-mean-token-mean", "named", "verl's skips empty rows"),
        (
            "skyrl",
            "token_mean_legacy read as token-mean-legacy",
            "exact",
            "policy_loss's token-mean-legacy, loss_scale_factor = micro_train_batch_size_per_gpu (named)",
        ),
        ("skyrl", "zero_variance_filter", "named", "constant-reward prompts become empty rows"),
        ("skyrl", "advantage_batch_normalize", "named", "A whitened over the batch before the loss"),
    ]
)


def _config(settings):
    """SkyRL's AlgorithmConfig of flat `trainer.algorithm.*` settings."""
    tree: dict = {}
    for key, value in settings.items():
        if not key.startswith(A):
            continue
        node = tree
        *path, leaf = key[len(A) :].split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return AlgorithmConfig.from_dict_config(OmegaConf.create(tree))


def _prescaled(settings, adv, mask):
    """SkyRL's own pre-scaling (ppo_utils), as trainer.py calls it for one mini-batch."""
    g = {**{k: v.default for k, v in skyrl.KEYS.items()}, **settings}
    reduction = g[A + "loss_reduction"]
    n = g["generator.n_samples_per_prompt"]
    bounds = [(i, i + n) for i in range(0, adv.shape[0], n)] if reduction == "prompt_mean" else None
    return ppo_utils.apply_loss_reduction_to_advantages_minibatch(
        adv, mask, reduction, g["trainer.micro_train_batch_size_per_gpu"], settings.get(A + "max_seq_len"), bounds
    )


def _theirs(settings, lp, old, adv, mask, rollout=None):
    fn = ppo_utils.PolicyLossRegistry.get(settings.get(A + "policy_loss_type", "regular"))
    torch.manual_seed(7)  # clip_cov's randperm
    return fn(
        lp, old, _prescaled(settings, adv, mask), config=_config(settings), loss_mask=mask, rollout_logprobs=rollout
    )[0]


def _ours(settings, lp, old, adv, mask, rollout=None):
    r = skyrl.read(settings)
    assert r.spec is not None, r.notes
    scaled = adv * skyrl.aggregation(settings, mask).to(adv.dtype)
    kw = {}
    if rollout is not None and r.loss_mode == "dppo":  # SkyRL's dppo anchors its ratio and mask at π_rollout
        assert r.ratio_anchor == "rollout"
        old = rollout
    elif rollout is not None:
        kw = dict(rollout_log_prob=rollout, correction=engines.read_correction("skyrl", settings))
    torch.manual_seed(7)
    return policy_loss(lp, old, scaled, mask, r.spec, "token-sum", metrics=False, **kw)[0]


def _pair(settings, kind, dtype, rollout=False):
    lp, old, adv, mask = batch(kind, dtype)
    ro = None
    if rollout:
        ro = old + 0.3 * torch.randn(old.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64).to(
            dtype
        )
    ours = value_and_grad(lambda x: _ours(settings, x, old, adv, mask, ro), lp)
    theirs = value_and_grad(lambda x: _theirs(settings, x, old, adv, mask, ro), lp)
    return ours, theirs


def _check(settings, kind, dtype, rtol64=1e-12, rollout=False):
    ours, theirs = _pair(settings, kind, dtype, rollout)
    engine64 = None if dtype == torch.float64 else _pair(settings, kind, torch.float64, rollout)[1]
    assert_same(ours, theirs, dtype, engine64, rtol64=rtol64)
    if kind == "empty":
        assert float(theirs[0]) == 0.0 and not bool(theirs[1].any())
    else:
        assert int(torch.count_nonzero(theirs[1])) >= 5  # the batch exercises the loss
    return ours, theirs


DTYPES = pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])


@DTYPES
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("settings,rtol64", [c[1:3] for c in LOSSES], ids=[c[0] for c in LOSSES])
def test_policy_loss_is_skyrls_loss(settings, rtol64, kind, dtype):
    _check(settings, kind, dtype, rtol64)


@DTYPES
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("settings,rtol64", [c[1:3] for c in ROLLOUT_LOSSES], ids=[c[0] for c in ROLLOUT_LOSSES])
def test_rollout_losses_are_skyrls_loss(settings, rtol64, kind, dtype):
    """rollout_is (and dppo, whose behaviour policy is π_rollout when the generator returns it) with the rollout
    log-probs: policy_loss on the read's spec, with read_correction's correction for rollout_is and π_rollout as
    old_log_prob for dppo, is SkyRL's loss."""
    _check(settings, kind, dtype, rtol64, rollout=True)


@DTYPES
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("settings", [c[1] for c in REDUCTIONS], ids=[c[0] for c in REDUCTIONS])
def test_every_loss_reduction_is_skyrls(settings, kind, dtype):
    """SkyRL's pre-scaling per mini-batch (empty rows, micro-batches, max_seq_len, prompts) is skyrl.aggregation's."""
    settings = {**settings, A + "policy_loss_type": "sapo"}  # a loss without the float32 exp: 1e-12 in float64
    _check(settings, kind, dtype)


@DTYPES
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("micro", [1, 2, 4, 5, 6, 7])
def test_token_mean_legacy_is_policy_losss_token_mean_legacy(micro, kind, dtype):
    """SkyRL's token_mean_legacy, read as token-mean-legacy, is policy_loss's token-mean-legacy with
    loss_scale_factor = micro_train_batch_size_per_gpu on the raw advantages (no pre-scaling): on 6 rows, micro 4
    and 5 leave rows past the last whole micro-batch unweighted, micro 7 leaves none whole (the loss 0)."""
    settings = {
        A + "policy_loss_type": "sapo",
        A + "loss_reduction": "token_mean_legacy",
        "trainer.micro_train_batch_size_per_gpu": micro,
    }
    r = skyrl.read(settings)
    assert r.loss_agg_mode == "token-mean-legacy"
    assert f"loss_scale_factor = {micro}" in _said(r)

    def ours(x, old, adv, mask):
        return policy_loss(x, old, adv, mask, r.spec, r.loss_agg_mode, loss_scale_factor=micro, metrics=False)[0]

    def pair(dt):
        lp, old, adv, mask = batch(kind, dt)
        return (
            value_and_grad(lambda x: ours(x, old, adv, mask), lp),
            value_and_grad(lambda x: _theirs(settings, x, old, adv, mask), lp),
        )

    pairs = {dt: pair(dt) for dt in {dtype, torch.float64}}
    assert_same(*pairs[dtype], dtype, None if dtype == torch.float64 else pairs[torch.float64][1])
    if micro == 7 or kind == "empty":
        assert float(pairs[dtype][1][0]) == 0.0
    elif micro in (4, 5):  # the rows past the last whole micro-batch have no gradient, in SkyRL and here
        assert not bool(pairs[dtype][0][1][micro:].any()) and bool(pairs[dtype][0][1][:micro].any())


def test_token_mean_legacy_refuses_a_micro_batch_that_is_not_a_row_count():
    lp, old, adv, mask = batch("token")
    for bad in (0, 2.5, True, -1):
        with pytest.raises(ValueError, match=r"loss_scale_factor must be None or a whole number >= 1 for token-mean"):
            policy_loss(lp, old, adv, mask, "grpo", "token-mean-legacy", loss_scale_factor=bad)
    # None: one micro-batch of every row, verl's token-mean
    a = policy_loss(lp, old, adv, mask, "grpo", "token-mean-legacy", metrics=False)[0]
    b = policy_loss(lp, old, adv, mask, "grpo", "token-mean", metrics=False)[0]
    assert torch.isclose(a, b, rtol=1e-12, atol=0)


@DTYPES
@pytest.mark.parametrize("settings,rtol64", [c[1:] for c in CORRECTIONS], ids=[c[0] for c in CORRECTIONS])
def test_off_policy_correction_is_skyrls(settings, rtol64, dtype):
    settings = {**settings, A + "policy_loss_type": "sapo"}
    ours, theirs = _check(settings, "token", dtype, rtol64, rollout=True)
    plain = _pair({A + "policy_loss_type": "sapo"}, "token", dtype)[1]
    assert not torch.isclose(theirs[0], plain[0], rtol=1e-6)  # the correction changed SkyRL's loss


@pytest.mark.parametrize("loss", ["regular", "dual_clip", "cispo", "dppo"])
def test_the_float32_exp_is_the_specs_exp_dtype_and_all_that_differs_without_it(loss):
    """SkyRL's safe_exp_delta rounds the ratio (and the gradient through it) to float32 in a float64 run: the read's
    exp_dtype=float32 makes divclip's float64 loss SkyRL's to 1e-12 (the parity rows), and the same spec with the
    input dtype's exp is off by that rounding and no more."""
    import dataclasses

    settings = {A + "policy_loss_type": loss}
    r = skyrl.read(settings)
    assert r.spec.param("exp_dtype") == "float32"
    assert any("exp_dtype=float32 does the same" in n for n in r.notes)
    plain = dataclasses.replace(r.spec, params=tuple((k, v) for k, v in r.spec.params if k != "exp_dtype"))
    lp, old, adv, mask = batch("token")
    scaled = adv * skyrl.aggregation(settings, mask)
    ours = value_and_grad(lambda x: policy_loss(x, old, scaled, mask, plain, "token-sum", metrics=False)[0], lp)
    theirs = value_and_grad(lambda x: _theirs(settings, x, old, adv, mask), lp)
    assert not torch.allclose(ours[1], theirs[1], rtol=1e-12, atol=0)  # the rounding is there
    assert torch.allclose(ours[1], theirs[1], rtol=FLOAT32_EXP, atol=0)  # and no more
    for name in skyrl.SAFE_EXP_LOSSES:
        notes = skyrl.read({A + "policy_loss_type": name}).notes
        assert any("in float32 whatever the input dtype" in n for n in notes), name


def test_the_batch_reaches_every_branch_of_skyrls_clip():
    lp, old, adv, mask = batch("token")
    _, m = policy_loss(lp, old, adv, mask, skyrl.read({A + "policy_loss_type": "dual_clip"}).spec, "token-sum")
    assert m["clipfrac_low"] > 0 and m["clipfrac_high"] > 0 and m["dual_clipfrac"] > 0


def _said(read) -> str:
    """Everything the read tells: its notes and its warnings' messages."""
    return " ".join([*read.notes, *(a.message for a in read.advice)])


def _raw_advantages(settings, lp, old, adv, mask):
    """policy_loss on the read's spec and loss_agg_mode with A as it is (not SkyRL's pre-scaled A)."""
    r = skyrl.read(settings)
    torch.manual_seed(7)
    return policy_loss(lp, old, adv, mask, r.spec, r.loss_agg_mode, metrics=False)[0]


def test_covariance_forms_on_raw_advantages_are_not_skyrls_and_the_read_says_so():
    """Clip-Cov's window and KL-Cov's penalty see SkyRL's pre-scaled advantages: on the raw ones, under the
    loss_agg_mode the read gives (token-mean), divclip's loss is another number; the read names both."""
    lp, old, adv, mask = batch("token")
    for loss, phrase in (("clip_cov", "select another set of tokens"), ("kl_cov", "token sum")):
        settings = {A + "policy_loss_type": loss}
        if loss == "clip_cov":
            settings.update(
                {A + "clip_cov.clip_ratio": 0.2, A + "clip_cov.clip_cov_lb": -1e-3, A + "clip_cov.clip_cov_ub": 1e-2}
            )
        raw = value_and_grad(functools.partial(_raw_advantages, settings, old=old, adv=adv, mask=mask), lp)
        theirs = value_and_grad(functools.partial(_theirs, settings, old=old, adv=adv, mask=mask), lp)
        assert not torch.allclose(raw[1], theirs[1], rtol=1e-3), loss
        assert phrase in _said(skyrl.read(settings)), loss


def test_dppo_logp_surrogate_is_not_skyrls_value_and_the_read_names_it():
    """verl's dppo surrogate −A·sg(r)·log π has SkyRL's gradient within |log r| <= 20 but another value, and keeps
    −A·e^±20 beyond, where SkyRL's clamp zeroes it: the read's surrogate 'ratio' is what makes the two equal."""
    from divclip.theory.spec import ClipSpec

    settings = {A + "policy_loss_type": "dppo"}
    r = skyrl.read(settings)
    assert r.spec.param("surrogate") == "ratio"
    lp, old, adv, mask = batch("token")
    logp = ClipSpec(r.spec.measure, delta=r.spec.delta, form="gated", params={"gate": "verl"})
    scaled = adv * skyrl.aggregation(settings, mask)  # SkyRL's pre-scaled advantages (token_mean: A / N)
    ours = value_and_grad(lambda x: policy_loss(x, old, scaled, mask, logp, "token-sum", metrics=False)[0], lp)
    theirs = value_and_grad(lambda x: _theirs(settings, x, old, adv, mask), lp)
    inside = (lp - old).abs() <= 20
    torch.testing.assert_close(ours[1][inside], theirs[1][inside], rtol=FLOAT32_EXP, atol=0)
    assert bool((theirs[1][~inside] == 0).all()) and bool((ours[1][~inside & (mask > 0)] != 0).any())
    assert not torch.isclose(ours[0], theirs[0], rtol=1e-3)  # −A·sg(r)·log π is not −r·A
    notes = " ".join(r.notes)
    assert "−r·A·mask with r differentiable" in notes and "surrogate 'ratio'" in notes


def test_dppo_with_two_deltas_is_the_gated_forms_delta_high():
    r = skyrl.read({A + "policy_loss_type": "dppo", A + "dppo.delta_low": 0.1, A + "dppo.delta_high": 0.2})
    assert r.spec is not None and (r.spec.delta, r.spec.param("delta_high")) == (0.1, 0.2)
    assert skyrl.write(r.spec).settings[A + "policy_loss_type"] == "dppo"
    assert not [d for d in skyrl.write(r.spec).differences if "surrogate" in d.what]


def test_divclip_method_through_skyrls_dispatch_is_policy_loss():
    from divclip.trainer.integrations import skyrl as plugin

    method = plugin.register("kl3:0.05")
    settings = {A + "policy_loss_type": skyrl.METHOD_MODE, skyrl.METHOD_ENV: method}
    for dtype in (torch.float64, torch.float32):
        _check(settings, "token", dtype)


def test_cross_entropy_is_gpg_at_a_equal_1_and_the_read_says_so():
    """SkyRL's cross_entropy (SFT) ignores A and π_old: Σ −log π·mask, which is policy_loss on ratio/gpg with A = 1
    (token-sum), value and gradient, in float64 to 1e-12 and float32 to SkyRL's rounding; the read gives no spec
    and says so."""
    settings = {A + "policy_loss_type": "cross_entropy"}
    r = skyrl.read(settings)
    assert r.spec is None and any("A = 1 on every token" in n for n in r.notes)
    for kind in KINDS:
        for dtype in (torch.float64, torch.float32):
            lp, old, adv, mask = batch(kind, dtype)
            ones = torch.ones_like(adv)

            def ours(x, old=old, ones=ones, mask=mask):
                return policy_loss(x, old, ones, mask, "ratio/gpg", "token-sum", metrics=False)[0]

            mine = value_and_grad(ours, lp)
            theirs = value_and_grad(lambda x, old=old, adv=adv, mask=mask: _theirs(settings, x, old, adv, mask), lp)
            ref = None
            if dtype != torch.float64:
                lp64, old64, adv64, mask64 = batch(kind, torch.float64)
                ref = value_and_grad(functools.partial(_theirs, settings, old=old64, adv=adv64, mask=mask64), lp64)
            assert_same(mine, theirs, dtype, ref)
            if kind != "empty":
                assert int(torch.count_nonzero(theirs[1])) >= 5


@pytest.mark.parametrize("loss", ["importance_sampling", "cross_entropy"])
def test_losses_that_apply_no_correction_read_none_and_warn(loss):
    """SkyRL's importance_sampling and cross_entropy call no apply_off_policy_correction: its loss with a TIS
    setting and rollout log-probs is its loss without; divclip reads no correction and warns."""
    settings = {A + "policy_loss_type": loss, OPC + "tis_ratio_type": "token"}
    lp, old, adv, mask = batch("token")
    ro = old + 0.3
    with_ro = _theirs(settings, lp, old, adv, mask, ro)
    assert torch.equal(with_ro, _theirs(settings, lp, old, adv, mask))
    assert engines.read_correction("skyrl", settings) is None
    r = skyrl.read(settings)
    assert any(a.code == "ignored_key" and "never applies it" in a.message for a in r.advice)


def test_rollout_is_with_an_off_policy_correction_names_the_correction_it_cannot_hold():
    """SkyRL then weights by π_θ/π_rollout (its band) and by π_old/π_rollout (the correction) at once: one divclip
    correction holds one of the two, so the read's method (ratio/gpg, the corpus truth) comes with a note that the
    second one is not in it, and it does change SkyRL's loss."""
    settings = {A + "policy_loss_type": "rollout_is", OPC + "sequence_mask_metric": "geometric"}
    r = skyrl.read(settings)
    assert r.spec == skyrl.read({A + "policy_loss_type": "rollout_is"}).spec
    assert any("rollout_is with an off_policy_correction" in n and "without that correction" in n for n in r.notes)
    lp, old, adv, mask = batch("token")
    ro = old + 0.3 * torch.randn(old.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    both = _theirs(settings, lp, old, adv, mask, ro)
    alone = _theirs({A + "policy_loss_type": "rollout_is"}, lp, old, adv, mask, ro)
    assert not torch.isclose(both, alone, rtol=1e-6)  # the correction changes SkyRL's rollout_is loss


def test_every_loss_type_is_read():
    """Every policy_loss_type of SkyRL's registry has a reader (none is 'reported, not modelled')."""
    registry = set(ppo_utils.PolicyLossRegistry.list_available())
    assert registry <= set(skyrl.LOSS_TYPES), registry - set(skyrl.LOSS_TYPES)
    for loss in skyrl.LOSS_TYPES:
        if loss == skyrl.METHOD_MODE:
            continue
        notes = skyrl.read({A + "policy_loss_type": loss}).notes
        assert not any("reported, not modelled" in n for n in notes), loss


def test_the_verl_names_of_the_reductions_are_exact_or_warned():
    """token_mean is verl's token-mean exactly; sequence_mean with an empty row and token_mean_legacy with unequal
    micro-batches are not verl's aggregation the read names, and each draws the warning that says so."""
    lp, old, adv, mask = batch("token")
    for name, settings, verl_name in REDUCTIONS:
        settings = {**settings, A + "policy_loss_type": "sapo"}
        r = skyrl.read(settings)
        theirs = _theirs(settings, lp, old, adv, mask)
        if verl_name is not None:
            assert r.loss_agg_mode == verl_name
            ours = policy_loss(lp, old, adv, mask, r.spec, r.loss_agg_mode, metrics=False)[0]
            assert torch.isclose(ours, theirs, rtol=1e-12, atol=0), name
        elif r.loss_agg_mode is not None and "legacy, one whole" not in name:
            ours = policy_loss(lp, old, adv, mask, r.spec, r.loss_agg_mode, metrics=False)[0]
            assert not torch.isclose(ours, theirs, rtol=1e-6), name
            assert "skyrl_reduction_differs" in {a.code for a in r.advice}, name
        else:
            assert r.loss_agg_mode is None or "skyrl_reduction_differs" in {a.code for a in r.advice}, name


def test_batch_facts_beside_the_loss_are_named():
    """zero_variance_filter empties rows (whose weight skyrl.aggregation then gives, as for any empty row) and
    advantage_batch_normalize rescales A: each changes the loss, and each is named."""
    said = _said(skyrl.read({A + "zero_variance_filter": True, A + "advantage_batch_normalize": True}))
    assert "zero_variance_filter = true" in said and "advantage_batch_normalize = true" in said
    assert "zero_variance_filter" not in _said(skyrl.read({}))
    r = skyrl.read({A + "loss_reduction": "prompt_mean"})
    assert r.loss_agg_mode is None and "skyrl_loss_differs" in {a.code for a in r.advice}


def test_aggregation_refuses_what_skyrl_refuses():
    mask = torch.ones(2, 3)
    with pytest.raises(ValueError, match=r"max_seq_len must be a whole number > 0 .* got None"):
        skyrl.aggregation({A + "loss_reduction": "seq_mean_token_sum_norm"}, mask)
    with pytest.raises(ValueError, match=r"loss_mask must be a \(batch, length\) torch.Tensor"):
        skyrl.aggregation({}, [1, 2])


def test_every_row_is_tested():
    tested = (
        [f"policy_loss_type {c[0]}" for c in LOSSES]
        + [f"policy_loss_type {c[0]}" for c in ROLLOUT_LOSSES]
        + [f"loss_reduction {c[0]}" for c in REDUCTIONS]
        + [c[0] for c in CORRECTIONS]
    )
    assert [row[1] for row in PARITY_ROWS[: len(tested)]] == tested
    assert len({row[1] for row in PARITY_ROWS}) == len(PARITY_ROWS)


@pytest.mark.parametrize("low,high", [(0.7, 1.5), (None, 1.5), (0.6, None), (None, 1.55)])
def test_the_outlier_mask_is_skyrls_compute_outlier_token_mask(low, high):
    """SkyRL drops a whole sequence for one token whose π_old/π_rollout leaves [low, high] (an unset side open):
    divclip's rule seq_any_k1 keeps exactly the rows SkyRL's own function keeps, and on this batch some rows go."""
    from divclip.theory.correction_apply import rollout_correction

    opc_utils = __import__("skyrl.backends.skyrl_train.utils.off_policy_correction_utils", fromlist=["x"])
    settings = {OPC + "outlier_token_is_threshold_low": low, OPC + "outlier_token_is_threshold_high": high}
    _, old, _, mask = batch("token")
    ro = old + 0.3 * torch.randn(old.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    theirs, _ = opc_utils.compute_outlier_token_mask(old, ro, mask, _config(settings).off_policy_correction)
    c = engines.read_correction("skyrl", settings)
    assert [r.option for r in c.rejections] == ["seq_any_k1"]
    _, keep, _ = rollout_correction(old, ro, mask, c)
    valid = mask.sum(-1) > 0
    ours_rows = (keep.sum(-1) == mask.sum(-1))[valid]
    assert ours_rows.tolist() == theirs.squeeze(-1).bool()[valid].tolist()
    assert 0 < int(ours_rows.sum()) < int(valid.sum())  # the mask bites, and keeps some
    written, cannot = engines.write_correction(c, "skyrl")
    assert not cannot and written[OPC + "outlier_token_is_threshold_low"] == (
        None if low is None else pytest.approx(low)
    )
    assert written[OPC + "outlier_token_is_threshold_high"] == (None if high is None else pytest.approx(high))
    _, verl_cannot = engines.write_correction(c, "verl")
    assert any("seq_any_k1" in x for x in verl_cannot)


def test_the_outlier_band_is_refused_when_skyrl_could_not_mean_it():
    with pytest.raises(ValueError, match=r"outlier_token_is_threshold_low/high must be > 0 with low <= high"):
        engines.read_correction(
            "skyrl", {OPC + "outlier_token_is_threshold_low": 2.0, OPC + "outlier_token_is_threshold_high": 1.5}
        )


# ----------------------------------------------------------------------------------------------- bf16 / fp16
LOW = [c for c in LOSSES if c[0] in ("regular", "dual_clip", "gspo", "cispo (defaults 0 / 5)", "sapo")]
LOW_NOTE = (
    "divclip computes in float32 (bf16/fp16 in, a float32 loss out); SkyRL's ratio is float32 (safe_exp_delta), "
    "the rest of its loss and its advantage pre-scaling in the input dtype (divclip scales A by "
    "skyrl.aggregation in float32): equal to SkyRL's run on the same {dtype} values in float64 to float32 "
    "rounding (the gradient to one {dtype} ulp), and to its own {dtype} run to its rounding "
    "(parity_inputs.assert_low_precision)"
)
LOW_ROWS, LOW_PARITY = low_precision_rows(
    "skyrl",
    "regular, dual_clip, gspo, cispo, sapo; token_mean",
    LOW_NOTE,
    "SkyRL's float32 ratio times fp16 advantages overflows fp16 (e^30 > 65504): its loss is inf",
    "SkyRL",
)
PARITY_ROWS += LOW_PARITY


def _ours_low(settings, lp, old, adv, mask):
    """`_ours` with the pre-scaling in float32 (divclip's compute dtype) for bf16 / fp16 advantages."""
    r = skyrl.read(settings)
    scaled = adv.to(torch.float32) * skyrl.aggregation(settings, mask).to(torch.float32)
    return policy_loss(lp, old, scaled, mask, r.spec, "token-sum", metrics=False)[0]


@pytest.mark.parametrize("dtype", LOW_DTYPES, ids=LOW_IDS)
@pytest.mark.parametrize("settings", [c[1] for c in LOW], ids=[c[0] for c in LOW])
def test_low_precision_inputs_are_skyrls_own_loss(settings, dtype):
    """log π, log π_old, A and the mask in bf16 (|log r| to 30) or fp16 (|log r| <= 3: `moderate`), as a bf16 /
    fp16 worker hands them to SkyRL's loss (parity_inputs.assert_low_precision states the tolerance)."""
    lp, old, adv, mask = batch("token", torch.float64)
    if dtype == torch.float16:
        lp, _ = moderate(lp, old)
    runs = low_precision_runs(
        lambda x, *a: _ours_low(settings, x, *a),
        lambda x, *a: _theirs(settings, x, *a),
        lp,
        (old, adv, mask),
        dtype,
    )
    assert_low_precision(*runs, dtype)


def test_fp16_with_extreme_log_ratios_overflows_in_skyrl_not_in_divclip():
    lp, old, adv, mask = batch("token", torch.float64)
    runs = low_precision_runs(
        lambda x, *a: _ours_low({}, x, *a), lambda x, *a: _theirs({}, x, *a), lp, (old, adv, mask), torch.float16
    )
    assert_fp16_overflow_is_the_engines(*runs)


def test_the_float32_exp_keeps_the_methods_recipe():
    """SkyRL's regular reads as grpo/exp_dtype=float32: written to another engine it is still GRPO's recipe (the
    float32 exp is rounding, not another method)."""
    from divclip.theory.spec import parse_method

    spec = skyrl.read({A + "policy_loss_type": "regular"}).spec
    assert spec == parse_method("grpo/exp_dtype=float32")
    for engine in ("verl", "trl"):
        assert engines.to_engine(spec, engine) == engines.to_engine(parse_method("grpo"), engine), engine
