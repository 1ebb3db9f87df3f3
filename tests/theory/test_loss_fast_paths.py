"""The policy loss's fast paths give the numbers of the code they shortcut (theory/forms/clip.py, theory/losses.py).

* `_interval_clip_mode` (token level, one p-free interval: PPO, GRPO, DAPO, KL3, with or without dual clip, with or
  without verl's log-ratio clamp) and `_sequence_clip_mode` (GSPO) against `_general_clip_mode`, the path that
  handles every spec: the loss value, the gradient, the ratio, the log-ratio and each 0/1 flag are equal.
* `masked_sum_closed_form`: for every registered form whose terms carry a closed-form gradient, `policy_loss`
  (which then saves mask·grad for the backward) gives the same loss and bit for bit the same gradient as autograd
  through the plain masked sum of the per-token loss, for each token-level aggregation.

"Equal" is torch.equal: the same values, where +0 and -0 count as equal (a kept-gradient select writes +0 where a
multiply by a 0/1 flag wrote the sign of -A·r).
"""

from __future__ import annotations

import pytest
import torch
from test_loss_nosync import SPECS, make_inputs

from divclip.theory.forms import FORMS
from divclip.theory.forms import clip as clip_form
from divclip.theory.loss_metrics import aggregate, masked_sum_finite
from divclip.theory.losses import policy_loss, policy_terms
from divclip.theory.spec import parse_method

INTERVAL_SPECS = [
    "grpo",
    "ratio:0.2:0.28",
    "atr",
    "kl3:0.02",
    "kl3:0.02/dual=3",
    "ratio:0.2:0.28/dual=3",
    "kl3_reverse:0.05",
    "ratio:0.2:0.28/noclamp",
    "kl3:0.05/dual=3/noclamp",
    "ratio:0.9:900",
]
SEQUENCE_SPECS = ["gspo", "kl3:0.001/seq", "ratio:0.003:0.004/seq/noclamp"]
FIELDS = ("log_ratio", "ratio", "clipped", "clipped_low", "dual")


def _inputs(dtype, seed=0):
    lp, old, adv, mask = make_inputs(dtype=dtype, shape=(8, 64), seed=seed)
    adv[1, :10] = 0.0  # A = 0 tokens
    adv[2] = adv[2, :1].expand(64)  # one advantage per sequence, as GRPO feeds it
    lp[3, :5] = old[3, :5]  # r = 1 exactly
    return lp, old, adv, mask.to(dtype)


def _assert_terms_equal(fast, ref, where):
    assert torch.equal(fast.loss.detach(), ref.loss.detach()), f"{where}: loss"
    assert torch.equal(fast.grad, ref.grad), f"{where}: gradient"
    for name in FIELDS:
        a, b = getattr(fast, name), getattr(ref, name)
        assert (a is None) == (b is None), f"{where}: {name} present in one path only"
        if a is not None:
            assert torch.equal(a, b), f"{where}: {name}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("method", INTERVAL_SPECS)
def test_interval_fast_path_equals_the_general_clip(method, dtype):
    spec = parse_method(method)
    assert spec.form == "clip" and spec.level == "token" and not spec.p_dependent
    for seed in range(3):
        lp, old, adv, mask = _inputs(dtype, seed)
        fast = clip_form._interval_clip_mode(lp, old, adv, spec)
        ref = clip_form._general_clip_mode(lp, old, adv, mask, spec)
        _assert_terms_equal(fast, ref, f"{method} {dtype} seed {seed}")
        assert float(fast.clipped.sum()) > 0, "the inputs must clip some tokens"  # the test exercises the clip


PER_TOKEN_SPECS = ["binary_kl:0.05", "binary_tv:0.2", "binary_kl:0.05/dual=3", "binary_kl:0.02/noclamp"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("method", PER_TOKEN_SPECS)
@pytest.mark.parametrize("host", [True, False])
def test_per_token_fast_path_equals_the_general_clip(method, dtype, host, monkeypatch):
    """The fast path with a p-dependent measure's per-token roots (issue 31 item 7), on the CPU's host solve and on
    the sync-free every-token solve an accelerator runs."""
    import divclip.theory.forms._kernels as kernels

    if not host:
        monkeypatch.setattr(kernels, "HOST_COMPACTION_DEVICES", ())
    spec = parse_method(method)
    for seed in range(3):
        lp, old, adv, mask = _inputs(dtype, seed)
        fast = clip_form._interval_clip_mode(lp, old, adv, spec)
        ref = clip_form._general_clip_mode(lp, old, adv, mask, spec)
        _assert_terms_equal(fast, ref, f"{method} {dtype} seed {seed}")
        assert float(fast.clipped.sum()) > 0, "the inputs must clip some tokens"


@pytest.mark.parametrize("method", SEQUENCE_SPECS)
def test_sequence_fast_path_equals_the_general_clip(method):
    spec = parse_method(method)
    lp, old, adv, mask = _inputs(torch.float64)
    adv = adv[:, :1].expand_as(adv).contiguous()  # sequence level: one advantage per sequence
    fast = clip_form._sequence_clip_mode(lp, old, adv, mask, spec)
    ref = clip_form._general_clip_mode(lp, old, adv, mask, spec)
    _assert_terms_equal(fast, ref, method)


def test_the_clip_mode_takes_the_fast_paths(monkeypatch):
    """The dispatch: a p-free token spec never reaches the general path (else the tests above test dead code)."""

    def fail(*args):
        raise AssertionError("general path taken")

    monkeypatch.setattr(clip_form, "_general_clip_mode", fail)
    lp, old, adv, mask = _inputs(torch.float32)
    for method in INTERVAL_SPECS + ["gspo"]:
        policy_loss(lp, old, adv, mask, method, metrics=False)
    with pytest.raises(AssertionError, match="general path"):
        policy_loss(lp, old, adv, mask, "kl3:0.05&binary_kl:0.02", metrics=False)


def _closed_form_specs():
    """SPECS whose terms carry a closed-form gradient and that aggregate by loss_agg_mode (not geo_mean's own)."""
    lp, old, adv, mask = _inputs(torch.float32)
    out = []
    for method in SPECS:
        spec, terms = parse_method(method), policy_terms(lp, old, adv, mask, method)
        own = FORMS[spec.form].aggregate
        if terms.grad is not None and (own is None or own(terms, mask, None, spec) is None):
            out.append(method)
    assert {"clip", "gated", "cispo", "sapo", "gpg", "dro", "clip_cov", "dcpo", "aspo"} <= {
        parse_method(s).form for s in out
    }
    return out


@pytest.mark.parametrize("agg", ["token-mean", "token-sum", "token-sum-norm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("method", _closed_form_specs())
def test_closed_form_masked_sum_equals_autograd_through_the_terms(method, dtype, agg):
    lp, old, adv, mask = _inputs(dtype)
    leaf = lp.clone().requires_grad_()
    torch.manual_seed(0)  # Clip-Cov draws its tokens at random, as verl: the same draw both times
    terms = policy_terms(leaf, old, adv, mask, method)
    ref = aggregate(terms.loss, mask, agg, None, masked_sum_finite)  # autograd through the per-token loss
    ref.backward()
    leaf2 = lp.clone().requires_grad_()
    torch.manual_seed(0)
    loss, _ = policy_loss(leaf2, old, adv, mask, method, agg, metrics=False)
    loss.backward()
    assert torch.equal(loss.detach(), ref.detach())
    assert torch.equal(leaf2.grad, leaf.grad)
    assert float(leaf2.grad.abs().sum()) > 0


def _saved_by_graph(loss):
    """Every tensor the backward graph of `loss` holds: custom Functions' saved_tensors, built-ins' _saved_*."""
    seen, stack, out = set(), [loss.grad_fn], []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        held = list(getattr(node, "saved_tensors", ()) or ())
        held += [getattr(node, a) for a in dir(node) if a.startswith("_saved_")]
        out += [t for t in held if isinstance(t, torch.Tensor)]
        stack += [fn for fn, _ in node.next_functions]
    return out


def test_the_closed_form_sum_saves_one_tensor():
    """What makes it faster: the backward holds mask·grad only, not the mask and the gradient apart (autograd
    through the plain masked sum holds both)."""
    lp, old, adv, mask = _inputs(torch.float32)
    loss, _ = policy_loss(lp.clone().requires_grad_(), old, adv, mask, "atr", metrics=False)
    big = [t for t in _saved_by_graph(loss) if t.shape == lp.shape]
    assert len(big) == 1, [tuple(t.shape) for t in big]
    assert torch.equal(big[0], policy_terms(lp, old, adv, mask, "atr").grad * mask)
    terms = policy_terms(lp.clone().requires_grad_(), old, adv, mask, "atr")
    plain = aggregate(terms.loss, mask, "token-mean", None, masked_sum_finite)
    assert len([t for t in _saved_by_graph(plain) if t.shape == lp.shape]) == 2  # the detector sees both there


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("method", ["sapo/seq", "sapo/seq/noclamp", "sapo/seq/tau=0.5:2"])
def test_sapo_sequence_path_equals_the_token_path(method, dtype):
    """`_sapo_sequence` (the gate once per sequence, (B, 1)) against `_sapo_token` on the (B, T) expansion of s."""
    from divclip.theory.forms import sapo

    spec = parse_method(method)
    lp, old, adv, mask = _inputs(dtype)
    terms = policy_terms(lp, old, adv, mask, spec)
    s = terms.ratio[:, :1]  # (B, 1): the sequence ratio's column (terms.ratio is its stride-0 view)
    in_range = None if method.endswith("noclamp") else (s.log() <= 10.0).to(dtype)
    pos, rest = (adv > 0).to(dtype), (adv <= 0).to(dtype)
    with torch.no_grad():
        value, grad = sapo._sapo_sequence(spec, s, in_range, pos, rest)
        ref_value, ref_grad = sapo._sapo_token(
            spec, s.expand_as(adv).contiguous(), None if in_range is None else in_range.expand_as(adv), pos, rest
        )
    assert torch.equal(value, ref_value)
    torch.testing.assert_close(grad, ref_grad, rtol=4 * torch.finfo(dtype).eps, atol=0.0)
    assert float(grad.abs().sum()) > 0


@pytest.mark.parametrize("method", ["gspo", "sapo/seq", "ratio/gpg", "grpo"])
def test_clip_stats_fast_paths_equal_the_plain_sums(method):
    """`clip_stats` on a one-per-sequence (stride-0) ratio or on ratio None (the token ratio, exp(log_ratio))
    against the same terms with the ratio materialised as a plain (B, T) tensor."""
    from divclip.theory.loss_metrics import clip_stats

    lp, old, adv, mask = _inputs(torch.float64)
    terms = policy_terms(lp, old, adv, mask, method)
    plain = terms._replace(ratio=terms.ratio.contiguous().clone())
    assert plain.ratio.stride(-1) == 1
    fast = terms if terms.ratio.stride(-1) == 0 else terms._replace(ratio=None)
    if fast.ratio is None:
        torch.testing.assert_close(plain.ratio, terms.log_ratio.exp(), rtol=0.0, atol=0.0)
    got, want = clip_stats(fast, mask), clip_stats(plain, mask)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)
    assert float(want[6]) > 0  # ratio_mean
