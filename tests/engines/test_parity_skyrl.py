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
    assert_low_precision,
    assert_same,
    batch,
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
    ("regular", {A + "policy_loss_type": "regular"}, FLOAT32_EXP, "float64: to SkyRL's float32 exp (named)"),
    (
        "regular, eps_clip_low/high 0.2/0.28",
        {A + "eps_clip_low": 0.2, A + "eps_clip_high": 0.28},
        FLOAT32_EXP,
        "float64: to SkyRL's float32 exp (named)",
    ),
    (
        "dual_clip",
        {A + "policy_loss_type": "dual_clip"},
        FLOAT32_EXP,
        "clip_ratio_c 3; float64: to SkyRL's float32 exp (named)",
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
        FLOAT32_EXP,
        "float64: to SkyRL's float32 exp (named)",
    ),
    (
        "cispo 0.5 / 1.0",
        {A + "policy_loss_type": "cispo", A + "cispo.cispo_eps_clip_low": 0.5, A + "cispo.cispo_eps_clip_high": 1.0},
        FLOAT32_EXP,
        "float64: to SkyRL's float32 exp (named)",
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
    ("off_policy_correction token TIS", {OPC + "tis_ratio_type": "token"}, FLOAT32_EXP),
    ("off_policy_correction sequence TIS", {OPC + "tis_ratio_type": "sequence"}, FLOAT32_EXP),
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
        FLOAT32_EXP,
    ),
]

PARITY_ROWS = (
    [("skyrl", f"policy_loss_type {name}", "exact", note) for name, _, _, note in LOSSES]
    + [("skyrl", f"loss_reduction {name}", "exact", "skyrl.aggregation") for name, _, _ in REDUCTIONS]
    + [
        (
            "skyrl",
            name,
            "exact",
            "read_correction" + ("; float64: to SkyRL's float32 exp of the weight" if tol > 1e-12 else ""),
        )
        for name, _, tol in CORRECTIONS
    ]
    + [
        (
            "skyrl",
            "policy_loss_type dppo",
            "gradient",
            "value −r·A·mask, divclip's −A·sg(r)·log π; the clamp at |log r| = 20 zeroes SkyRL's gradient (named)",
        ),
        ("skyrl", "dppo delta_low != delta_high", "gradient", "the gated form's delta_high; as dppo above"),
        ("skyrl", "policy_loss_type divclip_method", "exact", "divclip's plug-in"),
        (
            "skyrl",
            "rollout_is, cross_entropy, importance_sampling",
            "not modelled",
            "named; rollout_is is ratio/gpg with a bypass correction (tests/engines/test_skyrl_rollout_is.py)",
        ),
        ("skyrl", "outlier_token_is_threshold_low/high", "not modelled", "a warning names it"),
        ("skyrl", "sequence_mean read as seq-mean-token-mean", "named", "verl's skips empty rows"),
        ("skyrl", "token_mean_legacy read as token-mean", "named", "equal only for equal micro-batch tokens"),
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
    if rollout is not None:
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
@pytest.mark.parametrize("settings", [c[1] for c in REDUCTIONS], ids=[c[0] for c in REDUCTIONS])
def test_every_loss_reduction_is_skyrls(settings, kind, dtype):
    """SkyRL's pre-scaling per mini-batch (empty rows, micro-batches, max_seq_len, prompts) is skyrl.aggregation's."""
    settings = {**settings, A + "policy_loss_type": "sapo"}  # a loss without the float32 exp: 1e-12 in float64
    _check(settings, kind, dtype)


@DTYPES
@pytest.mark.parametrize("settings,rtol64", [c[1:] for c in CORRECTIONS], ids=[c[0] for c in CORRECTIONS])
def test_off_policy_correction_is_skyrls(settings, rtol64, dtype):
    settings = {**settings, A + "policy_loss_type": "sapo"}
    ours, theirs = _check(settings, "token", dtype, rtol64, rollout=True)
    plain = _pair({A + "policy_loss_type": "sapo"}, "token", dtype)[1]
    assert not torch.isclose(theirs[0], plain[0], rtol=1e-6)  # the correction changed SkyRL's loss


def test_the_float32_exp_is_named_and_is_all_that_differs_in_float64():
    """SkyRL's safe_exp_delta rounds the ratio to float32 in a float64 run: divclip's float64 loss is off it by that
    rounding and no more, and the read says so."""
    settings = {A + "policy_loss_type": "regular"}
    ours, theirs = _pair(settings, "token", torch.float64)
    assert not torch.allclose(ours[1], theirs[1], rtol=1e-12, atol=0)  # the rounding is there
    assert torch.allclose(ours[1], theirs[1], rtol=FLOAT32_EXP, atol=0)  # and no more
    for loss in skyrl.SAFE_EXP_LOSSES:
        notes = skyrl.read({A + "policy_loss_type": loss}).notes
        assert loss == "rollout_is" or any("in float32 whatever the input dtype" in n for n in notes), loss


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


def test_dppo_has_skyrls_gradient_where_log_r_is_within_20_and_the_read_names_the_rest():
    for dppo_type, low, high in (("binary_tv", 0.2, 0.2), ("binary_kl", 0.05, 0.05), ("binary_tv", 0.1, 0.3)):
        settings = {
            A + "policy_loss_type": "dppo",
            A + "dppo.dppo_type": dppo_type,
            A + "dppo.delta_low": low,
            A + "dppo.delta_high": high,
        }
        for dtype in (torch.float64, torch.float32):
            lp, old, adv, mask = batch("token", dtype)
            ours, theirs = _pair(settings, "token", dtype)
            inside = (lp - old).abs() <= 20
            tol = FLOAT32_EXP if dtype == torch.float64 else 1e-5
            torch.testing.assert_close(ours[1][inside], theirs[1][inside], rtol=tol, atol=0)
            assert bool((theirs[1][~inside] == 0).all()) and bool((ours[1][~inside & (mask > 0)] != 0).any())
            assert not torch.isclose(ours[0], theirs[0], rtol=1e-3)  # −A·sg(r)·log π is not −r·A
        notes = " ".join(skyrl.read(settings).notes)
        assert "−r·A·mask with r differentiable" in notes and "beyond |log r| = 20" in notes


def test_dppo_with_two_deltas_is_the_gated_forms_delta_high():
    r = skyrl.read({A + "policy_loss_type": "dppo", A + "dppo.delta_low": 0.1, A + "dppo.delta_high": 0.2})
    assert r.spec is not None and (r.spec.delta, r.spec.param("delta_high")) == (0.1, 0.2)


def test_divclip_method_through_skyrls_dispatch_is_policy_loss():
    from divclip.trainer.integrations import skyrl as plugin

    method = plugin.register("kl3:0.05")
    settings = {A + "policy_loss_type": skyrl.METHOD_MODE, skyrl.METHOD_ENV: method}
    for dtype in (torch.float64, torch.float32):
        _check(settings, "token", dtype)


def test_unmodelled_losses_and_the_outlier_mask_are_named():
    for loss in ("rollout_is", "cross_entropy", "importance_sampling"):
        r = skyrl.read({A + "policy_loss_type": loss})
        assert r.spec is None and any("reported, not modelled" in n for n in r.notes), loss
    from divclip.sanity.report import build_report

    report = build_report(
        config=b"{}", config_name="x.yaml", overrides=[OPC + "outlier_token_is_threshold_high=100"], framework="skyrl"
    )
    assert any("outlier_token_is_threshold" in w["message"] for w in report["warnings"])


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
        + [f"loss_reduction {c[0]}" for c in REDUCTIONS]
        + [c[0] for c in CORRECTIONS]
    )
    assert [row[1] for row in PARITY_ROWS[: len(tested)]] == tested
    assert len({row[1] for row in PARITY_ROWS}) == len(PARITY_ROWS)


# ----------------------------------------------------------------------------------------------- bf16 / fp16
LOW = [c for c in LOSSES if c[0] in ("regular", "dual_clip", "gspo", "cispo (defaults 0 / 5)", "sapo")]
LOW_ROWS = (
    "bf16 inputs, |log r| to 30 (regular, dual_clip, gspo, cispo, sapo; token_mean)",
    "fp16 inputs, |log r| <= 3 (the same settings)",
)
LOW_NOTE = (
    "divclip computes in float32 (bf16/fp16 in, a float32 loss out); SkyRL's ratio is float32 (safe_exp_delta), "
    "the rest of its loss and its advantage pre-scaling in the input dtype (divclip scales A by "
    "skyrl.aggregation in float32): equal to SkyRL's run on the same {dtype} values in float64 to float32 "
    "rounding (the gradient to one {dtype} ulp), and to its own {dtype} run to its rounding "
    "(parity_inputs.assert_low_precision)"
)
PARITY_ROWS += [
    ("skyrl", LOW_ROWS[0], "exact", LOW_NOTE.format(dtype="bf16")),
    ("skyrl", LOW_ROWS[1], "exact", LOW_NOTE.format(dtype="fp16")),
]


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
