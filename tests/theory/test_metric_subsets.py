"""policy_loss(metrics=names) computes only the diagnostics named, and each is the value metrics=True gives, bit
for bit; the loss and its gradient do not depend on the choice; an empty choice still checks the loss is finite.
The reference is policy_loss(metrics=True) itself, whose values tests/theory/test_losses.py::
test_metrics_against_numpy holds to numpy."""

from __future__ import annotations

import itertools

import pytest
import torch

from divclip.theory.loss_metrics import METRIC_NAMES
from divclip.theory.losses import ClipSpec, policy_loss

SPECS = [
    "grpo",
    "atr",
    "dppo_kl",
    "gspo",
    "sapo",
    ClipSpec("ratio", eps_low=0.2, eps_high=0.28, form="cispo"),
    ClipSpec("ratio", form="gpg"),
    ClipSpec("ratio", eps_low=0.2, eps_high=0.28, params={"dual_clip_c": 1.5}),
    ClipSpec("binary_kl", delta=0.05),
    "kl3:0.02&ratio:0.2",
]
SUBSETS = (
    [()]
    + [(n,) for n in METRIC_NAMES]
    + [
        ("ratio_min", "clipfrac"),
        ("kl3", "ratio_mean"),
        ("ppo_kl", "dual_clipfrac", "ratio_max"),
        ("clipfrac_high", "clipfrac_low"),
        METRIC_NAMES[::-1],
    ]
)


def batch(dtype=torch.float64, seed=3, empty_rows=()):
    g = torch.Generator().manual_seed(seed)
    b, t = 8, 24
    logits = torch.randn(b, t, 16, generator=g, dtype=dtype)
    old = torch.log_softmax(logits, -1)[..., 0]
    lp = old + 0.4 * torch.randn(b, t, generator=g, dtype=dtype)
    lp = torch.minimum(lp, torch.zeros((), dtype=dtype))  # log-probabilities
    adv = torch.randn(b, 1, generator=g, dtype=dtype).expand(b, t).clone()
    mask = (torch.rand(b, t, generator=g) < 0.8).to(dtype)
    for i in empty_rows:
        mask[i] = 0
    return lp, old, adv, mask


def run(spec, metrics, inputs):
    lp, old, adv, mask = inputs
    leaf = lp.clone().requires_grad_()
    loss, out = policy_loss(leaf, old, adv, mask, spec, metrics=metrics)
    loss.backward()
    return loss.detach(), leaf.grad, out


@pytest.mark.parametrize("spec", SPECS, ids=str)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_a_subset_is_the_same_numbers_as_the_whole(spec, dtype):
    inputs = batch(dtype, empty_rows=(2,))
    loss, grad, whole = run(spec, True, inputs)
    assert set(METRIC_NAMES) <= set(whole)
    for names in SUBSETS:
        got_loss, got_grad, got = run(spec, list(names), inputs)
        assert set(got) == set(names), names
        for k in names:
            assert got[k] == whole[k], (names, k)  # bit for bit
        assert torch.equal(got_loss, loss) and torch.equal(got_grad, grad)


def test_the_empty_mask_gives_ratio_one_in_a_subset_too():
    lp, old, adv, mask = batch()
    mask = torch.zeros_like(mask)
    for names in (("ratio_mean",), ("ratio_max", "kl3"), METRIC_NAMES):
        _, _, out = run("grpo", set(names), (lp, old, adv, mask))
        assert {k: out[k] for k in names if k.startswith("ratio")} == {k: 1.0 for k in names if k.startswith("ratio")}
        assert all(out[k] == 0.0 for k in names if not k.startswith("ratio"))


def test_an_empty_choice_still_raises_on_a_non_finite_loss():
    lp, old, adv, mask = batch()
    lp[1, 3] = float("nan")
    with pytest.raises(ValueError, match="log_prob contains NaN at 1 positions"):
        policy_loss(lp, old, adv, mask, "grpo", metrics=())
    loss, out = policy_loss(lp, old, adv, mask, "grpo", metrics=False)  # no host read, no check
    assert out == {} and torch.isnan(loss)


@pytest.mark.parametrize(
    "bad,match",
    [
        (["clipfrac", "pg_clipfrac"], r"metrics names \['pg_clipfrac'\] are not diagnostics of policy_loss"),
        ("clipfrac", r"metrics must be True or False, got 'clipfrac'"),
        (1, r"metrics must be True or False, got 1"),
    ],
)
def test_bad_metric_choices_are_refused_by_name(bad, match):
    lp, old, adv, mask = batch()
    with pytest.raises(ValueError, match=match):
        policy_loss(lp, old, adv, mask, "grpo", metrics=bad)


def test_every_pair_of_names_reads_as_its_two_values():
    inputs = batch(seed=11)
    _, _, whole = run("atr", True, inputs)
    for pair in itertools.combinations(METRIC_NAMES, 2):
        _, _, got = run("atr", pair, inputs)
        assert got == {k: whole[k] for k in pair}
