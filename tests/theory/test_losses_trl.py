"""Every TRL 1.16 loss_type × importance_sampling_level is a divclip method: `policy_loss` returns TRL's loss bit for
bit and its gradient to the last ulp, against `GRPOTrainer._compute_loss` run in process (tests/theory/trl_helpers.py).

The method each TRL setting runs (`trl_helpers.trl_method`) is read from the GRPOConfig's own fields; divclip.engines'
TRL reader must give the same (tests of `from_engine`). TRL never clamps log r, so every method here is '/noclamp'.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("trl")

from trl_helpers import (  # noqa: E402
    CLIPPED,
    COPIED,
    VESPO_FIELDS,
    _f32,
    grpo_config,
    trainer_for,
    trl_loss,
    trl_method,
)

from divclip.theory.forms import get_form  # noqa: E402
from divclip.theory.loss_metrics import agg_loss  # noqa: E402
from divclip.theory.losses import ClipSpec, policy_loss, policy_terms  # noqa: E402

LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
LEVELS = ("token", "sequence")
# Two GRPOConfigs per loss type: TRL's defaults (epsilon_high None, no delta; cispo's cap is then epsilon = 0.2),
# and every clip knob set (delta above 1 + epsilon_high, where TRL's two-sided clip is divclip's dual clip).
CUSTOM = {
    "epsilon": 0.15,
    "epsilon_high": 0.28,
    "delta": 1.6,
    "sapo_temperature_pos": 0.7,
    "sapo_temperature_neg": 1.3,
    "vespo_k_pos": 1.5,
    "vespo_lambda_pos": 2.5,
    "vespo_k_neg": 2.2,
    "vespo_lambda_neg": 0.3,
    "max_completion_length": 64,
}


def batch(dtype, seed=0, b=12, t=9, extreme=()):
    """(log_prob, old, advantages (B,), mask): old probabilities from 1e-3 to 1, log r ~ N(0, 0.5²) so that both
    bounds bind, sequences of every length including empty ones, advantages of both signs and 0. `extreme` holds
    (log r, A) pairs put on the first token of sequences 1, 2, ... (kept by the mask)."""
    g = torch.Generator().manual_seed(seed)
    old = torch.empty(b, t, dtype=dtype).uniform_(np.log(1e-3), 0.0, generator=g)
    log_prob = old + 0.5 * torch.randn(b, t, generator=g, dtype=dtype)
    lengths = torch.randint(0, t + 1, (b,), generator=g)
    lengths[:3] = torch.tensor([0, t, 1])  # an empty sequence, a full one, a single token
    mask = (torch.arange(t)[None] < lengths[:, None]).to(dtype)  # (B, T)
    adv = torch.randn(b, generator=g, dtype=dtype)
    adv[4] = 0.0
    for i, (x, a) in enumerate(extreme):
        log_prob[1 + i, 0], adv[1 + i] = old[1 + i, 0] + x, a
        mask[1 + i, 0] = 1.0
    return log_prob, old, adv, mask


def ours(spec, agg, scale, log_prob, old, adv, mask):
    lp = log_prob.detach().clone().requires_grad_(True)
    loss, _ = policy_loss(lp, old, adv[:, None].expand_as(lp), mask, spec, agg, loss_scale_factor=scale, metrics=False)
    loss.backward()
    return loss.detach(), lp.grad


def assert_same(trl, mine, dtype, bitwise=True):
    """The loss bit for bit (sapo: to the last ulp, see below), the gradient to a few ulps of its largest entry."""
    (loss, grad), (my_loss, my_grad) = trl, mine
    ulp = torch.finfo(dtype).eps
    if bitwise:
        assert torch.equal(my_loss, loss), (my_loss.item(), loss.item())
    else:
        torch.testing.assert_close(my_loss, loss, rtol=2 * ulp, atol=0.0)
    torch.testing.assert_close(my_grad, grad, rtol=4 * ulp, atol=4 * ulp * float(grad.abs().max()))


def _config(loss_type, level, custom):
    return grpo_config(loss_type=loss_type, importance_sampling_level=level, **(CUSTOM if custom else {}))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("custom", [False, True], ids=["defaults", "custom"])
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_policy_loss_is_trl_loss(loss_type, level, custom, dtype):
    args = _config(loss_type, level, custom)
    log_prob, old, adv, mask = batch(dtype, seed=LOSS_TYPES.index(loss_type))
    num_items = float(mask.sum()) + 11  # the generation batch holds more tokens than this micro-batch
    trl = trl_loss(trainer_for(args), log_prob, old, adv, mask, num_items)
    spec, agg, scale = trl_method(args, log_prob.shape[0], num_items)
    # sapo's gate: TRL computes σ·4/τ, verl (and divclip) σ·(4/τ); the two roundings differ in the last bit
    assert_same(trl, ours(spec, agg, scale, log_prob, old, adv, mask), dtype, bitwise=loss_type != "sapo")
    assert float(trl[0]) != 0.0 and bool(trl[1].abs().sum() > 0)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_extreme_log_ratios_are_trl_unclamped(loss_type, level):
    """|log r| = 25 and 40: TRL exponentiates the raw log-ratio; '/noclamp' does the same, bit for bit. verl's ±20
    clamp (divclip's default) gives another loss wherever r enters unclipped: for the clip loss types at A < 0 and
    log r = 25, −A·e²⁵ = 7.2e10·|A| against −A·e²⁰ = 4.9e8·|A| (cispo and sapo see r only through a cap or a gate
    that saturates; VESPO clamps log r itself)."""
    args = grpo_config(
        loss_type=loss_type, importance_sampling_level=level, **{k: v for k, v in CUSTOM.items() if k != "delta"}
    )  # no dual clip: −A·r is the loss
    extreme = ((25.0, -1.0), (-25.0, 1.0), (40.0, -0.5), (-40.0, 0.7), (25.0, 1.0), (-40.0, -1.0))
    log_prob, old, adv, mask = batch(torch.float32, seed=3, extreme=extreme)
    num_items = float(mask.sum())
    trl = trl_loss(trainer_for(args), log_prob, old, adv, mask, num_items)
    spec, agg, scale = trl_method(args, log_prob.shape[0], num_items)
    assert_same(trl, ours(spec, agg, scale, log_prob, old, adv, mask), torch.float32, bitwise=loss_type != "sapo")
    fields = {f: getattr(spec, f) for f in spec.__dataclass_fields__}
    clamped = ClipSpec(**{**fields, "params": {**dict(spec.params), "clamp_log_ratio": True}})
    if loss_type in CLIPPED and level == "token":
        clamped_loss = ours(clamped, agg, scale, log_prob, old, adv, mask)[0]
        assert float(trl[0]) > 1e9 and float(clamped_loss) < float(trl[0]) / 100


def test_dual_clip_is_trl_delta_when_delta_is_above_the_clip():
    """TRL's `delta` clamps r in the unclipped term for every token: for A < 0 that caps the loss at −A·δ (the dual
    clip), for A > 0 it changes nothing while δ >= 1 + epsilon_high. Shown on ratios beyond δ, both signs of A."""
    args = grpo_config(loss_type="bnpo", epsilon=0.2, epsilon_high=0.28, delta=1.5)
    log_prob, old, adv, mask = batch(torch.float64, seed=5, extreme=((1.0, -1.0), (2.0, -0.5), (0.6, 1.0), (3.0, 2.0)))
    trl = trl_loss(trainer_for(args), log_prob, old, adv, mask, float(mask.sum()))
    spec, agg, scale = trl_method(args, log_prob.shape[0], float(mask.sum()))
    assert spec.param("dual_clip_c", None) == 1.5
    mine = ours(spec, agg, scale, log_prob, old, adv, mask)
    assert_same(trl, mine, torch.float64)
    no_delta = ours(
        ClipSpec("ratio", eps_low=0.2, eps_high=0.28, params={"clamp_log_ratio": False}),
        agg,
        scale,
        log_prob,
        old,
        adv,
        mask,
    )
    assert not torch.equal(no_delta[0], trl[0])  # the cap binds on this batch


def test_trainer_stub_holds_what_grpotrainer_init_sets(tmp_path):
    """The attributes `trainer_for` copies are those a real GRPOTrainer.__init__ sets from the same GRPOConfig."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from divclip.trainer.tiny import ARITH_ALPHABET, char_tokenizer, tiny_gpt2

    tok = char_tokenizer(ARITH_ALPHABET)
    model = tiny_gpt2(
        len(tok), n_layer=1, n_embd=8, n_head=1, seed=0, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id
    )
    fields = dict(
        CUSTOM,
        loss_type="cispo",
        importance_sampling_level="sequence",
        per_device_train_batch_size=4,
        num_generations=4,
    )
    args = GRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, **fields)
    real = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["1+1="] * 4}),
        processing_class=tok,
    )
    stub = trainer_for(args)
    for attr, _ in (*COPIED, ("epsilon_high", None), ("aux_loss_enabled", None), ("_entropy_bonus_enabled", None)):
        assert getattr(stub, attr) == getattr(real, attr), attr
    assert real.accelerator.num_processes == 1


# ------------------------------------------------------------------------------------------ the forms
def test_new_forms_are_declared_with_sources():
    assert get_form("cispo_cap").family == "truncated IS" and "trl:cispo" in get_form("cispo_cap").sources
    assert get_form("luspo").sources == ("arXiv:2602.05261", "trl:luspo")
    assert get_form("vespo").sources == ("arXiv:2602.10693", "trl:vespo")
    for name in ("luspo", "vespo"):
        assert get_form(name).family == "sequence-level" and not get_form(name).token_level
        assert get_form(name).weight_note
    args = grpo_config()
    for name in VESPO_FIELDS:  # the Form's defaults are TRL's GRPOConfig defaults
        assert get_form("vespo").param(name).default == getattr(args, name)


@pytest.mark.parametrize("adv_sign", [1.0, -1.0])
def test_cispo_cap_weight_is_autograd(adv_sign):
    """cispo_cap's numpy weight w (∂ℓ/∂log π = −A·w) equals autograd through policy_terms on a (q, r) grid."""
    spec = ClipSpec(form="cispo_cap", params={"cispo_cap": 1.7, "clamp_log_ratio": False})
    q = np.array([1e-3, 0.01, 0.1, 0.5, 0.9, 0.99])[:, None]
    r = np.array([0.05, 0.5, 1.0, 1.69, 1.7, 1.71, 4.0, 1e3])[None, :]
    old = torch.tensor(np.log(q), dtype=torch.float64).expand(6, 8)
    lp = (old + torch.tensor(np.log(r))).requires_grad_(True)
    adv = torch.full_like(old, adv_sign)
    loss = policy_terms(lp, old, adv, torch.ones_like(old), spec).loss
    (grad,) = torch.autograd.grad(loss.sum(), lp)
    w = get_form("cispo_cap").weight(spec, q, r, adv_sign)
    np.testing.assert_allclose(-grad.numpy() / adv_sign, w, rtol=1e-12)
    assert w.shape == (6, 8) and w.max() == 1.7


def test_vespo_weight_is_the_gamma_kernel():
    """φ(W) = e^λ·W^k·e^(−λW): 1 at W = 1, peaked at W = k/λ, by the sign of A; the loss's gradient is −A·φ."""
    spec = ClipSpec(form="vespo")  # k, λ = 2, 3 for A >= 0 and 3, 2 for A < 0
    log_w = np.log(np.array([1.0, 2 / 3, 1.5]))  # W = 1 and the two peaks k/λ
    t = 3
    old = torch.zeros(3, t, dtype=torch.float64) - 1.0
    lp = old.clone()
    lp[:, 0] += torch.tensor(log_w)  # the sequence weight is the product of token ratios: all on one token
    for sign, (k, lam) in ((1.0, (2.0, 3.0)), (-1.0, (3.0, 2.0))):
        leaf = lp.clone().requires_grad_(True)
        adv = torch.full_like(old, sign)
        loss = policy_terms(leaf, old, adv, torch.ones_like(old), spec).loss
        (grad,) = torch.autograd.grad(loss.sum(), leaf)
        w = np.exp(log_w)
        phi = np.exp(lam) * w**k * np.exp(-lam * w)
        np.testing.assert_allclose(-grad.numpy() / sign, np.repeat(phi[:, None], t, 1), rtol=1e-12)
        assert phi[0] == pytest.approx(1.0)


# ------------------------------------------------------------------------------------- aggregation
def test_trl_aggregations_count_empty_sequences():
    """TRL's grpo / luspo means run over every sequence of the batch (an empty one adds 0), where verl's seq-mean
    modes skip empty sequences; token-sum-norm divides by the given constant (default B·T)."""
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    assert float(agg_loss(loss, mask, "seq-mean-token-mean-all")) == pytest.approx((1.5 + 0 + 8) / 3)
    assert float(agg_loss(loss, mask, "seq-mean-token-mean")) == pytest.approx((1.5 + 8) / 2)
    assert float(agg_loss(loss, mask, "seq-mean-token-sum-all")) == pytest.approx((3 + 0 + 24) / 3)
    assert float(agg_loss(loss, mask, "token-sum-norm")) == pytest.approx(27 / 9)
    assert float(agg_loss(loss, mask, "token-sum-norm", loss_scale_factor=4.0)) == pytest.approx(27 / 4)
    for mode in ("seq-mean-token-mean-all", "seq-mean-token-sum-all", "token-sum-norm"):
        assert float(agg_loss(loss, torch.zeros_like(mask), mode)) == 0.0
        assert float(agg_loss(loss[:0], mask[:0], mode)) == 0.0  # no sequence at all: 0, not NaN


# ------------------------------------------------------------------------------------------ the spec
@pytest.mark.parametrize(
    "text",
    [
        "ratio:0.2:0.28/noclamp",
        "ratio:0.2:0.28/seq/noclamp/dual=1.5",
        "sapo/seq/noclamp",
        "ratio/cispo_cap/seq/noclamp/cispo_cap=5",
        "ratio:0.2:0.2/luspo/seq/noclamp/dual=3",
        "ratio/vespo/vespo_k_pos=1.5",
    ],
)
def test_trl_methods_round_trip_as_strings(text):
    from divclip.theory.spec import method_string, parse_method, spec_label

    spec = parse_method(text)
    assert parse_method(method_string(spec)) == spec
    assert ("noclamp" in spec_label(spec)) == ("noclamp" in text) and ("seq" in spec_label(spec)) == ("/seq" in text)


@pytest.mark.parametrize(
    "fields, match",
    [
        (dict(form="gated", measure="kl3", delta=0.1, level="sequence"), r"level='sequence' \(GSPO\) needs a form in"),
        (dict(form="cispo_cap", params={"dual_clip_c": 3.0}), r"dual_clip_c applies to form='clip' only \(and 'luspo'"),
        (dict(params={"clamp_log_ratio": 0}), r"clamp_log_ratio must be True or False, got 0"),
        (dict(form="cispo_cap", params={"cispo_cap": 0.0}), r"cispo_cap.*> 0, got 0"),
        (dict(form="vespo", params={"vespo_lambda_neg": -1.0}), r"vespo_lambda_neg.*> 0"),
    ],
)
def test_bad_trl_specs_are_refused_by_name(fields, match):
    fields = {"eps_low": 0.2, "eps_high": 0.2, **fields} if fields.get("form", "clip") == "clip" else fields
    with pytest.raises(ValueError, match=match):
        ClipSpec(**fields)


# ---------------------------------------------------------------------- from TRL's own settings
@pytest.mark.parametrize("custom", [False, True], ids=["defaults", "custom"])
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_from_engine_reaches_the_trl_loss(loss_type, level, custom):
    """`from_engine('trl', GRPOConfig fields)` is the method TRL runs, and with the TRL engine's EXACT_AGGREGATION
    and loss_scale_factor, policy_loss is TRL's loss (float32: bit for bit but sapo's last ulp)."""
    from divclip import engines
    from divclip.engines import trl as trl_engine

    settings = {"loss_type": loss_type, "importance_sampling_level": level, **(CUSTOM if custom else {})}
    spec = engines.from_engine("trl", settings)
    log_prob, old, adv, mask = batch(torch.float32, seed=11 + LOSS_TYPES.index(loss_type))
    num_items = float(mask.sum()) + 5
    want, _, _ = trl_method(_config(loss_type, level, custom), log_prob.shape[0], num_items)
    # TRL's sapo temperatures and VESPO's k, λ are float32 values (trl_method): the method itself holds the user's
    f32 = (
        {"tau_pos": _f32(spec.param("tau_pos")), "tau_neg": _f32(spec.param("tau_neg"))} if loss_type == "sapo" else {}
    )
    fields = {f: getattr(spec, f) for f in spec.__dataclass_fields__}
    params = {k: _f32(v) if loss_type == "vespo" else v for k, v in spec.params}
    rounded = ClipSpec(**{**fields, "params": {**params, **f32}})
    if loss_type == "vespo":
        assert [rounded.param(k) for k in VESPO_FIELDS] == [want.param(k) for k in VESPO_FIELDS]
    else:
        assert rounded == want
    agg = trl_engine.EXACT_AGGREGATION[loss_type]
    scale = trl_engine.loss_scale_factor(settings, batch_size=log_prob.shape[0], num_items_in_batch=num_items)
    trl = trl_loss(trainer_for(_config(loss_type, level, custom)), log_prob, old, adv, mask, num_items)
    assert_same(trl, ours(spec, agg, scale, log_prob, old, adv, mask), torch.float32, bitwise=loss_type != "sapo")


def test_from_engine_refuses_a_delta_inside_the_clip():
    from divclip import engines

    with pytest.raises(ValueError, match=r"delta = 1.1 is below 1 \+ epsilon_high = 1.28"):
        engines.from_engine("trl", {"loss_type": "grpo", "epsilon_high": 0.28, "delta": 1.1})
    assert engines.from_engine("trl", {"loss_type": "luspo", "delta": 1.5}).param("dual_clip_c", None) == 1.5


# ------------------------------------------------------------------------------------ numerics, syncs
TRL_METHODS = [
    "ratio:0.2:0.28/noclamp/dual=3",
    "ratio:0.2:0.28/seq/noclamp",
    "ratio/cispo_cap/noclamp/cispo_cap=5",
    "ratio/cispo_cap/seq/noclamp/cispo_cap=0.2",
    "sapo/noclamp",
    "sapo/seq/noclamp",
    "ratio:0.2:0.28/luspo/seq/noclamp",
    "ratio/vespo",
]


@pytest.mark.parametrize("method", TRL_METHODS)
def test_trl_forms_never_sync_to_the_host(method, monkeypatch):
    """The forms read no tensor value into Python (item, bool, float, int, tolist): no device->host sync."""
    from divclip.theory.forms import FORMS
    from divclip.theory.spec import parse_method

    log_prob, old, adv, mask = batch(torch.float32, seed=2, extreme=((30.0, -1.0), (-30.0, 1.0)))
    spec = parse_method(method)

    def refuse(*_args, **_kwargs):
        raise AssertionError("host sync inside a loss form")

    for attr in ("item", "tolist", "__bool__", "__float__", "__int__", "__index__"):
        monkeypatch.setattr(torch.Tensor, attr, refuse)
    terms = FORMS[spec.form].loss(
        log_prob.clone().requires_grad_(), old, adv[:, None].expand_as(old).contiguous(), mask, spec
    )
    monkeypatch.undo()
    assert torch.isfinite(terms.loss).all()


@pytest.mark.parametrize("method", TRL_METHODS)
def test_trl_forms_are_finite_on_hostile_inputs(method):
    """log ratios of ±50, q near 0 and 1, an empty mask, bf16 inputs: loss, gradient and metrics finite."""
    old = torch.tensor([[-30.0, -1e-9, -2.0, -0.7], [-5.0, -0.1, -3.0, -1.0]], dtype=torch.float64)
    lp = old + torch.tensor([[50.0, -50.0, 0.0, 3.0], [-50.0, 40.0, -8.0, 1e-3]], dtype=torch.float64)
    adv = torch.tensor([[1.0], [-1.0]], dtype=torch.float64).expand(2, 4)
    for dtype, mask in (
        (torch.float64, torch.ones(2, 4)),
        (torch.bfloat16, torch.ones(2, 4)),
        (torch.float32, torch.zeros(2, 4)),
    ):
        for agg in ("token-mean", "seq-mean-token-mean-all", "seq-mean-token-sum-all", "token-sum-norm"):
            x = lp.to(dtype).detach().requires_grad_()
            loss, metrics = policy_loss(x, old.to(dtype), adv.to(dtype), mask, method, agg)
            loss.backward()
            assert torch.isfinite(loss) and torch.isfinite(x.grad).all()
            assert all(np.isfinite(v) for v in metrics.values()), metrics


def test_cispo_cap_above_1_is_two_sided_cispo_at_lower_width_1():
    """How verl and slime write TRL's cispo: cispo at ε_low = 1 (bound 0) and ε_high = c − 1 is the same loss, bit
    for bit; a cap at or below 1, or the sequence ratio, has no such form."""
    from divclip.theory.forms.cispo_cap import cispo_cap_as_cispo

    log_prob, old, adv, mask = batch(torch.float64, seed=9, extreme=((3.0, 1.0), (-2.0, -1.0)))
    for cap in (1.3, 5.0, 7.77):
        spec = ClipSpec(form="cispo_cap", params={"cispo_cap": cap, "clamp_log_ratio": False})
        two_sided = cispo_cap_as_cispo(spec)
        assert two_sided.ratio_bounds() == (0.0, cap) and two_sided.form == "cispo"
        assert_same(
            ours(spec, "token-mean", None, log_prob, old, adv, mask),
            ours(two_sided, "token-mean", None, log_prob, old, adv, mask),
            torch.float64,
        )
    for bad in (dict(params={"cispo_cap": 0.2}), dict(params={"cispo_cap": 5.0}, level="sequence")):
        with pytest.raises(ValueError, match="has no two-sided cispo form"):
            cispo_cap_as_cispo(ClipSpec(form="cispo_cap", **bad))
