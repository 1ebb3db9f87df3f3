"""AReaL 1.0.4's rejection sampling and M2PO as divclip corrections, against AReaL's own code in process.

AReaL's functions are loaded from the installed files unchanged (tests/engines/areal_helpers.py):
`apply_rejection_sampling` and `ppo_actor_loss_fn` (areal/utils/functional/functional.py), the dataclass
`RejectionSamplingConfig` (areal/api/cli_args.py, its own validation included) and `_apply_m2po_masking`
(areal/trainer/ppo/actor.py). `read_correction("areal", settings)` then `rollout_correction` must give AReaL's
behaviour weight bit for bit on float32 inputs (AReaL computes in float32), its loss mask, its
filtered_fraction, M2PO's mask, and with `policy_loss` AReaL's loss and gradient.
"""

import itertools
import sys
from pathlib import Path

import pytest
import torch

from divclip.engines import read_correction, translate, write_correction
from divclip.engines.correction import AREAL_RS, CORRECTION_KEYS
from divclip.theory.correction import Correction, Filter, parse_correction
from divclip.theory.correction_apply import rollout_correction
from divclip.theory.losses import policy_loss

sys.path.insert(0, str(Path(__file__).parent))

import areal_helpers  # noqa: E402

DECOUPLED = {"actor.use_decoupled_loss": True}


@pytest.fixture(scope="module")
def areal():
    return areal_helpers.load()


def batch(seed=0, b=12, t=30, scale=0.3, dtype=torch.float32, spikes=True):
    """(prox, behave, mask): π_prox/π_behave log-probs with a drift, some |log ρ| up to 30, an empty row."""
    g = torch.Generator().manual_seed(seed)
    prox = torch.log_softmax(2.0 * torch.randn(b, t, 6, generator=g, dtype=torch.float64), -1)[..., 0]
    noise = scale * torch.randn(b, t, generator=g, dtype=torch.float64)
    if spikes:
        noise += (
            (torch.rand(b, t, generator=g, dtype=torch.float64) < 0.03)
            * 30.0
            * torch.randn(b, t, generator=g, dtype=torch.float64).clamp(-1, 1)
        )
    behave = prox + noise
    lengths = torch.randint(1, t + 1, (b, 1), generator=g)
    mask = torch.arange(t)[None, :] < lengths
    mask[1] = False  # a row without a valid token
    return prox.to(dtype), behave.to(dtype), mask


def settings_of(level, metric, action, agg, lower, upper):
    out = {**DECOUPLED, AREAL_RS + "level": level, AREAL_RS + "metric": metric, AREAL_RS + "action": action}
    out[AREAL_RS + "upper"] = upper
    out[AREAL_RS + "lower"] = lower
    if level == "sequence":
        out[AREAL_RS + "agg"] = agg
    return out


BOUNDS = {  # (lower, upper) per metric: a band that keeps some and drops some of batch()'s tokens
    "ratio": [(None, 1.3), (0.8, 1.3), (None, 40.0)],
    "kl_k1": [(None, 0.1), (-0.15, 0.1), (-0.5, 2.0)],
    "kl_k2": [(None, 0.02), (0.001, 0.05)],
    "kl_k3": [(None, 0.02), (0.001, 0.3)],
}
CASES = [
    (level, metric, action, agg, lower, upper)
    for level, metric, action in itertools.product(("token", "sequence"), BOUNDS, ("mask", "clamp"))
    if action == "mask" or metric == "ratio"
    for agg in (("sum", "mean", "max") if level == "sequence" else ("mean",))
    for lower, upper in BOUNDS[metric]
]


def config(areal, level, metric, action, agg, lower, upper):
    return areal.RejectionSamplingConfig(level=level, action=action, metric=metric, agg=agg, upper=upper, lower=lower)


# ------------------------------------------------------------------------------------------------ defaults
def test_keys_default_to_areals_config(areal):
    from divclip.engines.source import dataclass_fields, installed_file, nested_keys

    shipped = areal.RejectionSamplingConfig()
    for key, spec in CORRECTION_KEYS["areal"].items():
        if key.startswith(AREAL_RS):
            assert spec.default == getattr(shipped, key.removeprefix(AREAL_RS)), key
    fields = nested_keys(dataclass_fields(installed_file("areal", "api/cli_args.py").read_text()), "GRPOConfig")
    for key in ("actor.use_decoupled_loss", "actor.m2_threshold"):
        assert CORRECTION_KEYS["areal"][key].default == fields[key].default, key
    # rejection_sampling itself defaults to None: on with any of its keys, read with the dataclass's defaults
    assert read_correction("areal", DECOUPLED) is None
    assert read_correction("areal", {**DECOUPLED, "actor.rejection_sampling": None}) is None
    assert read_correction("areal", {**DECOUPLED, AREAL_RS + "upper": 5.0}) == parse_correction(
        "filter=token:ratio:mask:5.0"
    )


def test_without_the_decoupled_loss_areal_applies_neither():
    """AReaL ignores rejection_sampling without use_decoupled_loss (PPOActorConfig's warning), and M2PO's
    (log π_old − log π_prox)² is 0 there: compute_advantages sets prox_logp = old_logp (actor.py)."""
    assert read_correction("areal", {AREAL_RS + "level": "sequence", "actor.m2_threshold": 0.04}) is None


# ------------------------------------------------------------------------------------ the filter, exactly
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_filter_equals_apply_rejection_sampling(areal, case):
    prox, behave, mask = batch()
    c = read_correction("areal", settings_of(*case))
    assert c.filter is not None and c.active
    theirs = areal.apply_rejection_sampling(prox, behave, mask, None, config(areal, *case))
    w, keep, m = rollout_correction(prox, behave, mask.float(), c)
    assert torch.equal(w, theirs.behave_imp_weight)  # bit for bit: the same float32 operations
    assert torch.equal(keep, mask.float())  # a filtered token stays in AReaL's denominator (loss_mask_count)
    assert torch.equal(mask & (w > 0), theirs.loss_mask.bool())
    assert m["filter_fraction"] == theirs.filtered_fraction
    kept = int((theirs.loss_mask.bool() & (theirs.behave_imp_weight > 0)).sum())
    assert m["kept_token_fraction"] == kept / int(mask.sum())
    wide = case[-1] == 40.0 or case[-2:] == (-0.5, 2.0)  # bands for the spikes, which may keep all
    assert kept < int(mask.sum()) or case[2] == "clamp" or wide  # the band bites: this test could fail


@pytest.mark.parametrize("case", CASES[::3], ids=lambda c: "-".join(map(str, c)))
def test_filter_in_float64_is_areals_to_float32_rounding(areal, case):
    prox, behave, mask = batch(seed=3, dtype=torch.float64, spikes=False)
    c = read_correction("areal", settings_of(*case))
    theirs = areal.apply_rejection_sampling(prox, behave, mask, None, config(areal, *case))
    w, _, _ = rollout_correction(prox, behave, mask.float(), c)
    assert w.dtype == torch.float64
    same = (w > 0) == (theirs.behave_imp_weight > 0)
    assert float(same[mask].float().mean()) > 0.99  # a float32 boundary may fall either way
    both = same & mask
    torch.testing.assert_close(w[both], theirs.behave_imp_weight[both].double(), rtol=1e-6, atol=0)


REFUSED = [
    ("token", "ratio", "mask", "mean", None, 1.0),  # ratio: upper must be > 1
    ("token", "ratio", "mask", "mean", 0.0, 2.0),  # ratio: lower must be > 0
    ("token", "ratio", "mask", "mean", -0.5, 2.0),
    ("token", "kl_k2", "mask", "mean", None, 0.0),  # k2/k3: upper > 0
    ("sequence", "kl_k3", "mask", "sum", None, -1.0),
    ("token", "kl_k1", "clamp", "mean", None, 0.1),  # clamp: ratio only
    ("token", "ratio", "mask", "mean", 3.0, 2.0),  # lower > upper
    ("sequence", "kl_k1", "mask", "max", -1.0, -0.5),  # accepted: k1 bounds may be negative
]


@pytest.mark.parametrize("case", REFUSED, ids=lambda c: "-".join(map(str, c)))
def test_refuses_what_areal_refuses(areal, case):
    try:
        config(areal, *case)
    except ValueError:
        with pytest.raises(ValueError, match=r"actor\.rejection_sampling\.\*: Filter\."):
            read_correction("areal", settings_of(*case))
    else:
        assert read_correction("areal", settings_of(*case)).filter.upper == case[5]


def test_token_agg_is_ignored_as_areal_ignores_it(areal):
    """AReaL warns that agg is ignored at token level; the same correction is read whatever agg says."""
    with pytest.warns(UserWarning, match="ignored"):
        areal.RejectionSamplingConfig(level="token", agg="max", upper=2.0)
    s = {**DECOUPLED, AREAL_RS + "agg": "max", AREAL_RS + "upper": 2.0}
    assert read_correction("areal", s) == read_correction("areal", {**DECOUPLED, AREAL_RS + "upper": 2.0})


# ------------------------------------------------------------------------------------------------ M2PO
@pytest.mark.parametrize("threshold", [1e-9, 0.01, 0.05, 0.5, 1e6])
def test_m2po_equals_areals_mask(areal, threshold):
    prox, behave, mask = batch(seed=5, spikes=False)
    c = read_correction("areal", {**DECOUPLED, "actor.m2_threshold": threshold})
    assert c == Correction(m2po=threshold)
    theirs = areal.apply_m2po_masking(behave, prox, mask, threshold)  # (old_logp = π_behave, prox_logp)
    w, keep, m = rollout_correction(prox, behave, mask.float(), c)
    assert w is None
    assert torch.equal(keep.bool(), theirs)
    dropped = int((mask & ~theirs).sum())
    assert m["m2po_masked_fraction"] == dropped / int(mask.sum())
    if threshold == 1e-9:  # nothing's mean is below it: AReaL keeps one token
        assert int(theirs.sum()) == 1
    if threshold == 1e6:
        assert dropped == 0


def test_m2po_then_filter_as_grpo_loss_fn_orders_them(areal):
    """grpo_loss_fn masks with M2PO first and hands that mask to the filter (and to the loss's denominator)."""
    prox, behave, mask = batch(seed=6)
    case = ("sequence", "ratio", "mask", "mean", 0.9, 1.2)
    c = read_correction("areal", {**settings_of(*case), "actor.m2_threshold": 0.05})
    assert str(c) == "filter=sequence:ratio:mean:mask:0.9_1.2/m2po=0.05"
    m2 = areal.apply_m2po_masking(behave, prox, mask, 0.05)
    theirs = areal.apply_rejection_sampling(prox, behave, m2, None, config(areal, *case))
    w, keep, _ = rollout_correction(prox, behave, mask.float(), c)
    assert torch.equal(keep.bool(), m2)
    assert torch.equal(w, theirs.behave_imp_weight)


# ------------------------------------------------------------------------------------------------ the loss
@pytest.mark.parametrize("case", [CASES[0], CASES[5], CASES[-1], ("sequence", "ratio", "clamp", "max", 0.8, 1.3)])
@pytest.mark.parametrize("m2", [None, 0.05])
def test_policy_loss_with_the_correction_is_ppo_actor_loss_fn(areal, case, m2):
    """policy_loss(log π_θ, π_prox, A, mask, AReaL's clip, rollout_log_prob=π_behave, correction=read) is AReaL's
    decoupled loss: value and gradient (token mean over AReaL's loss_mask_count)."""
    prox, behave, mask = batch(seed=7, spikes=False)
    g = torch.Generator().manual_seed(8)
    lp = (prox + 0.1 * torch.randn(prox.shape, generator=g)).requires_grad_(True)
    adv = torch.randn(prox.shape, generator=g)
    settings = {**settings_of(*case), "actor.m2_threshold": m2}
    c = read_correction("areal", settings)
    loss_mask = mask if m2 is None else areal.apply_m2po_masking(behave, prox, mask, m2)  # grpo_loss_fn's order
    theirs, _ = areal.ppo_actor_loss_fn(lp, prox, behave, adv, 0.2, loss_mask, rejection_sampling=config(areal, *case))
    (g_theirs,) = torch.autograd.grad(theirs, lp)
    mine, out = policy_loss(
        lp, prox, adv, mask.float(), "ratio:0.2", "token-mean", rollout_log_prob=behave, correction=c
    )
    (g_mine,) = torch.autograd.grad(mine, lp)
    torch.testing.assert_close(mine, theirs, rtol=2e-6, atol=1e-7)
    torch.testing.assert_close(g_mine, g_theirs, rtol=2e-5, atol=1e-9)
    assert out["rollout_corr/filter_fraction"] >= 0


# ------------------------------------------------------------------------------------- written and read back
@pytest.mark.parametrize("case", CASES[::2], ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("m2", [None, 0.04])
def test_round_trip_is_exact_and_areal_takes_the_written_keys(areal, case, m2):
    c = read_correction("areal", {**settings_of(*case), "actor.m2_threshold": m2})
    out, cannot = write_correction(c, "areal")
    assert cannot == [] and out["actor.use_decoupled_loss"] is True
    assert read_correction("areal", out) == c
    assert parse_correction(str(c)) == c
    written = {k.removeprefix(AREAL_RS): v for k, v in out.items() if k.startswith(AREAL_RS)}
    made = areal.RejectionSamplingConfig(**written)  # AReaL accepts what divclip writes, and reads it the same
    want = config(areal, *case)
    assert (made.level, made.action, made.metric, made.upper, made.lower) == (
        want.level,
        want.action,
        want.metric,
        want.upper,
        want.lower,
    )


def test_m2po_alone_is_written_without_a_filter():
    out, cannot = write_correction("m2po=0.04", "areal")
    assert cannot == [] and out["actor.rejection_sampling"] is None and out["actor.m2_threshold"] == 0.04
    assert read_correction("areal", out) == parse_correction("m2po=0.04")
    off = {"actor.rejection_sampling": None, "actor.m2_threshold": None}
    assert write_correction(Correction(), "areal") == (off, [])


@pytest.mark.parametrize("engine", ["trl", "openrlhf"])
@pytest.mark.parametrize("band", ["mask:5.0", "mask:0.8_1.3", "clamp:0.8_1.3"])
def test_a_token_ratio_filter_is_the_targets_token_weight(areal, engine, band):
    """Written to an engine with an unclamped token weight it is that weight, with the same numbers."""
    c = parse_correction(f"filter=token:ratio:{band}")
    out, cannot = write_correction(c, engine)
    assert cannot == []
    extra = {"use_vllm": True} if engine == "trl" else {}
    there = read_correction(engine, {**out, **extra})
    prox, behave, mask = batch(seed=9)
    w_there, keep_there, _ = rollout_correction(prox, behave, mask.float(), there)
    w_here, keep_here, _ = rollout_correction(prox, behave, mask.float(), c)
    assert torch.equal(w_there, w_here) and torch.equal(keep_there, keep_here)


@pytest.mark.parametrize("engine", ["verl", "trl", "skyrl", "slime", "openrlhf"])
def test_what_the_others_cannot_say_is_named(engine):
    c = parse_correction("filter=sequence:ratio:mean:mask:0.5_2.0/m2po=0.04")
    out, cannot = write_correction(c, engine)
    assert any("AReaL filter sequence:ratio:mean:mask:0.5_2.0" in why for why in cannot)
    assert any("M2PO" in why for why in cannot)


def test_translate_from_areal_names_the_filter():
    settings = {**settings_of("sequence", "kl_k3", "mask", "max", None, 0.5), "actor.m2_threshold": 0.04}
    _, diffs = translate(settings, "areal", "verl")
    whys = [d.nearest for d in diffs if "rollout correction" in d.what]
    assert any("kl_k3" in w for w in whys) and any("M2PO" in w for w in whys)


def test_filter_and_an_is_weight_would_count_twice():
    with pytest.raises(ValueError, match="count twice"):
        Correction(is_level="token", filter=Filter())
    with pytest.raises(ValueError, match="filter= is token:METRIC"):
        parse_correction("filter=token:ratio:mean:mask:2.0")
    with pytest.raises(ValueError, match="Filter.metric must be one of"):
        parse_correction("filter=token:k3:mask:2.0")
    with pytest.raises(ValueError, match="m2po must be a finite number > 0"):
        Correction(m2po=0.0)
    assert parse_correction("filter=sequence:kl_k1:sum:mask:-0.2_0.1").filter.lower == -0.2


@pytest.mark.parametrize("case", CASES[::4], ids=lambda c: "-".join(map(str, c)))
def test_the_pitfall_says_what_is_read(case):
    """AReaL's is_correction_threshold advice names the filter divclip reads and that translate carries it."""
    from divclip.engines import areal as areal_engine

    settings = settings_of(*case)
    (advice,) = [a for a in areal_engine.read(settings).advice if a.code == "is_correction_threshold"]
    c = read_correction("areal", settings)
    assert c is not None and "read_correction" in advice.message and "translate carries" in advice.message
    level, metric, action, _, lower, upper = case
    assert f"{level}-level {action}" in advice.message and f"{upper:g}" in advice.message
    if action == "mask":
        assert metric in advice.message and "denominator" in advice.message
    geometric = level == "sequence" and metric == "ratio"
    assert ("geometric mean" in advice.message) == geometric


def test_with_gspo_a_mask_filter_also_shrinks_areals_sequence_means_and_the_read_says_so(areal):
    """AReaL's GSPO ratio and per-sequence advantage average over the filter's kept tokens: divclip's loss
    (equal without the filter) then differs, and the read names it."""
    from divclip.engines import areal as areal_engine

    prox, behave, mask = batch(seed=7, spikes=False)
    g = torch.Generator().manual_seed(8)
    lp = prox + 0.1 * torch.randn(prox.shape, generator=g)
    adv = torch.randn(prox.shape, generator=g)
    case = ("token", "ratio", "mask", "mean", 0.8, 1.3)
    gspo = {"actor.importance_sampling_level": "sequence", "actor.eps_clip": 0.2}
    read = areal_engine.read({**gspo, **settings_of(*case)})
    assert any("GSPO ratio and its per-sequence advantage" in n for n in read.notes)
    assert not any(
        "GSPO ratio" in n for n in areal_engine.read({**gspo, **settings_of(*case[:2], "clamp", *case[3:])}).notes
    )
    adv_seq = areal_engine.loss_advantages(gspo, adv, mask)
    c = read_correction("areal", settings_of(*case))
    plain = areal.ppo_actor_loss_fn(lp, prox, behave, adv, 0.2, mask, importance_sampling_level="sequence")[0]
    assert float(policy_loss(lp, prox, adv_seq, mask.float(), read.spec, "token-mean")[0]) == pytest.approx(
        float(plain), rel=1e-6
    )
    theirs = areal.ppo_actor_loss_fn(
        lp, prox, behave, adv, 0.2, mask, rejection_sampling=config(areal, *case), importance_sampling_level="sequence"
    )[0]
    mine = policy_loss(lp, prox, adv_seq, mask.float(), read.spec, "token-mean", rollout_log_prob=behave, correction=c)
    assert float(mine[0]) != pytest.approx(float(theirs), rel=1e-3)
