"""AReaL 1.0.4's own loss, exactly (issue 35): `policy_loss` on the spec `divclip.engines.areal.read` gives, with the
advantages AReaL's loss uses (`areal.loss_advantages`: the row mean at importance_sampling_level sequence) and its
token mean, equals AReaL's `ppo_actor_loss_fn` / `sapo_loss_fn` (the installed files, run in process:
tests/engines/areal_helpers.py) in value and gradient, float64 to 1e-12 relative and float32 to AReaL's own
rounding, on every input kind of tests/engines/parity_inputs.py (|log r| up to 30, token and per-row advantages,
empty rows, an empty batch). What divclip does not model is named by the read, and tested to matter.

PARITY_ROWS, one (engine, setting, status, note) per case, is what tests/engines/parity_report.py turns into the
table of docs/engines.md ("Each engine's own loss, exactly"); every row is a test below.
"""

import pytest
import torch
from areal_helpers import functional, m2po
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

from divclip import engines
from divclip.engines import areal
from divclip.theory.losses import policy_loss

F = functional()
A = "actor."

# (name, AReaL settings, note); all exact
EXACT = [
    ("PPO clip (defaults: eps_clip 0.2)", {}, "r = exp(log r) unclamped: the spec has clamp_log_ratio=False"),
    ("clip-higher eps_clip_higher", {A + "eps_clip": 0.2, A + "eps_clip_higher": 0.28}, ""),
    ("eps_clip 0 (lower bound 1)", {A + "eps_clip": 0.0, A + "eps_clip_higher": 0.28}, ""),
    ("eps_clip >= 1 (no lower bound)", {A + "eps_clip": 1.2}, ""),
    ("dual clip c_clip", {A + "c_clip": 3.0}, "verl's dual clip: AReaL's min(loss, c·|A|) binds for A < 0 only"),
    (
        "importance_sampling_level sequence (GSPO)",
        {A + "importance_sampling_level": "sequence", A + "eps_clip": 3e-4, A + "eps_clip_higher": 4e-4},
        "with A replaced by its row mean (areal.loss_advantages) and a token mean; log s unclamped",
    ),
    (
        "sequence level with c_clip",
        {A + "importance_sampling_level": "sequence", A + "eps_clip": 0.2, A + "c_clip": 3.0},
        "as above",
    ),
    ("use_sapo_loss", {A + "use_sapo_loss": True}, "r unclamped"),
    (
        "use_sapo_loss, sapo_tau_pos/neg",
        {A + "use_sapo_loss": True, A + "sapo_tau_pos": 2.0, A + "sapo_tau_neg": 3.0},
        "",
    ),
    (
        "use_sapo_loss at sequence level",
        {A + "use_sapo_loss": True, A + "importance_sampling_level": "sequence"},
        "the gate of the sequence ratio, A its row mean (areal.loss_advantages)",
    ),
]

PARITY_ROWS = [("areal", name, "exact", note) for name, _, note in EXACT] + [
    (
        "areal",
        "m2_threshold (M2PO), use_decoupled_loss",
        "exact",
        "read as the rollout correction m2po= (rollout_log_prob = π_behave); no effect without the decoupled loss",
    ),
    (
        "areal",
        "use_decoupled_loss + rejection_sampling",
        "exact",
        "read as the rollout correction's filter: tests/engines/test_correction_areal.py",
    ),
]

LOW = [c for c in EXACT if c[0] in ("PPO clip (defaults: eps_clip 0.2)", "dual clip c_clip", "use_sapo_loss")]
LOW += [c for c in EXACT if c[0] == "importance_sampling_level sequence (GSPO)"]
LOW_NOTE = (
    "divclip computes in float32 (bf16/fp16 in, a float32 loss out), AReaL in the input dtype: equal to "
    "ppo_actor_loss_fn / sapo_loss_fn on the same {dtype} values run in float64 to float32 rounding (the gradient "
    "to one {dtype} ulp), and to their own {dtype} run to its rounding (parity_inputs.assert_low_precision)"
)
LOW_ROWS, LOW_PARITY = low_precision_rows(
    "areal",
    "PPO clip, dual clip, SAPO, sequence level",
    LOW_NOTE,
    "AReaL's unclamped fp16 ratio overflows (e^30 > 65504): its loss is inf",
    "AReaL",
)
PARITY_ROWS += LOW_PARITY


def _theirs(settings, lp, old, adv, mask):
    """AReaL's grpo_loss_fn call for these settings (areal/trainer/ppo/actor.py), π_prox = π_old (recomputed)."""
    g = {**{k: v.default for k, v in areal.KEYS.items()}, **settings}
    if g[A + "use_sapo_loss"]:
        return F.sapo_loss_fn(
            logprobs=lp,
            old_logprobs=old,
            advantages=adv,
            tau_pos=g[A + "sapo_tau_pos"],
            tau_neg=g[A + "sapo_tau_neg"],
            loss_mask=mask.bool(),
            importance_sampling_level=g[A + "importance_sampling_level"],
        )[0]
    return F.ppo_actor_loss_fn(
        logprobs=lp,
        proximal_logprobs=old,
        old_logprobs=old,
        advantages=adv,
        eps_clip=g[A + "eps_clip"],
        loss_mask=mask.bool(),
        eps_clip_higher=g[A + "eps_clip_higher"],
        c_clip=g[A + "c_clip"],
        importance_sampling_level=g[A + "importance_sampling_level"],
    )[0]


def _ours(settings, lp, old, adv, mask):
    r = areal.read(settings)
    assert r.spec is not None and r.loss_agg_mode == "token-mean"
    adv = areal.loss_advantages(settings, adv, mask)
    return policy_loss(lp, old, adv, mask, r.spec, r.loss_agg_mode, metrics=False)[0]


def _pair(settings, kind, dtype):
    lp, old, adv, mask = batch(kind, dtype)
    ours = value_and_grad(lambda x: _ours(settings, x, old, adv, mask), lp)
    theirs = value_and_grad(lambda x: _theirs(settings, x, old, adv, mask), lp)
    return ours, theirs


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("settings", [c[1] for c in EXACT], ids=[c[0] for c in EXACT])
def test_policy_loss_is_areals_loss(settings, kind, dtype):
    ours, theirs = _pair(settings, kind, dtype)
    engine64 = None if dtype == torch.float64 else _pair(settings, kind, torch.float64)[1]
    assert_same(ours, theirs, dtype, engine64)
    if kind != "empty":
        assert int(torch.count_nonzero(theirs[1])) >= 5  # the batch exercises the loss
    else:
        assert float(theirs[0]) == 0.0 and not bool(theirs[1].any())


def test_the_batch_reaches_every_branch_of_areals_clip():
    """Not vacuous: AReaL's own clip masks see tokens clipped, dual-clipped and at |log r| = 30, unclamped."""
    lp, old, adv, mask = batch("token")
    _, stat = F.ppo_actor_loss_fn(
        logprobs=lp,
        proximal_logprobs=old,
        old_logprobs=old,
        advantages=adv,
        eps_clip=0.2,
        loss_mask=mask.bool(),
        c_clip=3.0,
    )
    assert int(stat["clip_mask"].sum()) > 3 and int(stat["dual_clip_mask"].sum()) >= 1
    assert float(stat["importance_weight"].max()) > 1e12  # e^30: no clamp at e^20


def test_what_the_read_carries_matters():
    """The two facts the read carries beyond verl's loss each change the numbers: verl's ±20 clamp of log r (the
    default spec) is not AReaL's, and at sequence level the raw token advantages are not what AReaL clips."""
    lp, old, adv, mask = batch("token")
    settings = {}
    clamped = areal.read(settings).spec.__class__(eps_low=0.2, eps_high=0.2)  # verl's clamp, AReaL's widths
    theirs = value_and_grad(lambda x: _theirs(settings, x, old, adv, mask), lp)
    verl_like = value_and_grad(lambda x: policy_loss(x, old, adv, mask, clamped, metrics=False)[0], lp)
    assert not torch.allclose(verl_like[1], theirs[1], rtol=1e-6)  # the token at log r = -30 keeps its gradient
    seq = {A + "importance_sampling_level": "sequence", A + "eps_clip": 0.2}
    spec = areal.read(seq).spec
    raw = policy_loss(lp, old, adv, mask, spec, metrics=False)[0]
    assert not torch.isclose(raw, _theirs(seq, lp, old, adv, mask), rtol=1e-6)
    assert any("replaces each token's advantage by its sequence's mean" in n for n in areal.read(seq).notes)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_m2po_is_areals_through_the_rollout_correction(dtype):
    """M2PO (actor.m2_threshold with use_decoupled_loss): AReaL's own mask of the batch's largest second moments
    (log π_behave − log π_prox)² (areal/trainer/ppo/actor.py, before ppo_actor_loss_fn) is the correction the read
    gives; without the decoupled loss π_prox = π_old and the read says it has no effect."""
    settings = {A + "use_decoupled_loss": True, A + "m2_threshold": 0.04}
    r, correction = areal.read(settings), engines.read_correction("areal", settings)
    assert correction is not None and correction.m2po == 0.04

    def pair(dt):
        lp, prox, adv, mask = batch("token", dt)
        noise = torch.randn(prox.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
        behave = prox + (0.4 * noise).to(dt)
        kept = m2po()._apply_m2po_masking(behave, prox, mask.bool(), 0.04)
        assert 0 < int(kept.sum()) < int(mask.sum())  # the mask drops tokens
        theirs = value_and_grad(
            lambda x: F.ppo_actor_loss_fn(
                logprobs=x, proximal_logprobs=prox, old_logprobs=behave, advantages=adv, eps_clip=0.2, loss_mask=kept
            )[0],
            lp,
        )
        ours = value_and_grad(
            lambda x: policy_loss(
                x,
                prox,
                adv,
                mask,
                r.spec,
                r.loss_agg_mode,
                metrics=False,
                rollout_log_prob=behave,
                correction=correction,
            )[0],
            lp,
        )
        return ours, theirs

    ours, theirs = pair(dtype)
    assert_same(ours, theirs, dtype, None if dtype == torch.float64 else pair(torch.float64)[1])
    assert not torch.isclose(theirs[0], _theirs({}, *batch("token", dtype)), rtol=1e-3)  # M2PO changed the loss
    off = areal.read({A + "m2_threshold": 0.04})
    assert engines.read_correction("areal", {A + "m2_threshold": 0.04}) is None
    assert any("has no effect without use_decoupled_loss" in n for n in off.notes)


def _low_runs(settings, dtype, bound=None):
    lp, old, adv, mask = batch("token", torch.float64)
    if bound:
        lp, _ = moderate(lp, old)
    return low_precision_runs(
        lambda x, *a: _ours(settings, x, *a), lambda x, *a: _theirs(settings, x, *a), lp, (old, adv, mask), dtype
    )


@pytest.mark.parametrize("dtype", LOW_DTYPES, ids=LOW_IDS)
@pytest.mark.parametrize("settings", [c[1] for c in LOW], ids=[c[0] for c in LOW])
def test_low_precision_inputs_are_areals_own_loss(settings, dtype):
    """log π, log π_old and A in bf16 (|log r| to 30) or fp16 (|log r| <= 3: `moderate`), as a bf16 / fp16 actor
    hands them to AReaL's loss (parity_inputs.assert_low_precision states the tolerance)."""
    assert_low_precision(*_low_runs(settings, dtype, bound=dtype == torch.float16), dtype)


def test_fp16_with_extreme_log_ratios_overflows_in_areal_not_in_divclip():
    assert_fp16_overflow_is_the_engines(*_low_runs({}, torch.float16))


def test_every_row_is_tested():
    names = {c[0] for c in EXACT}
    assert [row[1] for row in PARITY_ROWS[: len(EXACT)]] == [c[0] for c in EXACT] and len(names) == len(EXACT)
    assert len({row[1] for row in PARITY_ROWS}) == len(PARITY_ROWS)
