"""`divclip check --rollouts FILE --methods ...` (divclip.sanity.compare): atlas methods on the user's tokens.

References are independent of the numpy weights: clip fractions are `policy_loss`'s own, the |gradient| removed
is Σ|∂loss/∂log π| from autograd through `policy_loss` ('token-sum', so each token's derivative is −A·w), and the
entropy side is worked out by hand on a four-token batch."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sanity_helpers import npz_bytes, random_batch, sanity_page

from divclip.cli import main
from divclip.sanity.compare import compare_bucket_rows, compare_methods, compare_rows
from divclip.sanity.errors import SanityInputError
from divclip.sanity.loaders import load_rollouts
from divclip.sanity.report import report_from_uploads

torch = pytest.importorskip("torch")
BATCH = random_batch(seed=5, sigma=0.25, dtype=np.float64)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("cmp") / "batch.npz"
    path.write_bytes(npz_bytes(**BATCH))
    return load_rollouts(str(path))


@pytest.fixture(scope="module")
def section(data):
    return compare_methods(data, "grpo,dapo,dppo_kl,cispo,sapo,gspo,bapo")


def _torch(name):
    return torch.tensor(BATCH[name], dtype=torch.float64)


def _autograd(method):
    """(policy_loss metrics, Σ|∂loss/∂log π| over the mask) with token-sum aggregation."""
    from divclip.theory.atlas import find_method
    from divclip.theory.losses import policy_loss

    lp = _torch("log_prob").requires_grad_(True)
    loss, metrics = policy_loss(
        lp,
        _torch("old_log_prob"),
        _torch("advantages"),
        _torch("response_mask"),
        find_method(method).method,
        "token-sum",
    )
    (grad,) = torch.autograd.grad(loss, lp)
    return metrics, float((grad.abs() * _torch("response_mask")).sum())


def _entry(section, name):
    return next(m for m in section["methods"] if m["method"] == name)


def _full_gradient(sequence: bool = False) -> float:
    log_r = BATCH["log_prob"] - BATCH["old_log_prob"]
    mask = BATCH["response_mask"]
    if sequence:
        log_r = np.repeat((log_r * mask).sum(-1, keepdims=True) / mask.sum(-1, keepdims=True), mask.shape[1], 1)
    return float((np.abs(BATCH["advantages"] * np.exp(log_r)) * mask).sum())


@pytest.mark.parametrize("method", ["grpo", "dapo", "dppo_kl"])
def test_clip_fraction_is_the_losss(section, method):
    metrics, _ = _autograd(method)
    entry = _entry(section, method)
    assert entry["clipfrac"] == pytest.approx(metrics["clipfrac"], rel=1e-6, abs=1e-9)
    assert 0 < entry["clipfrac"] < 0.5


@pytest.mark.parametrize("method, sequence", [("grpo", False), ("cispo", False), ("sapo", False), ("gspo", True)])
def test_gradient_removed_is_autograds(section, method, sequence):
    _, kept = _autograd(method)
    assert _entry(section, method)["removed"] == pytest.approx(1.0 - kept / _full_gradient(sequence), abs=1e-9)


def test_buckets_add_up(section):
    grpo = _entry(section, "grpo")
    mask, adv = BATCH["response_mask"] > 0, BATCH["advantages"]
    assert sum(b["tokens"] for b in grpo["buckets"]) == int((mask & (adv != 0)).sum())
    clipped = sum(round(b["clipfrac"] * b["tokens"]) for b in grpo["buckets"])
    assert clipped == round(grpo["clipfrac"] * mask.sum())
    e = grpo["entropy"]
    assert e["would_raise"]["tokens"] + e["would_lower"]["tokens"] == clipped
    assert e["would_raise"]["share_of_clipped"] + e["would_lower"]["share_of_clipped"] == pytest.approx(1.0)


def test_batch_selective_and_truncated_methods(section):
    assert "batch-selective" in _entry(section, "bapo")["problem"] and "clipfrac" not in _entry(section, "bapo")
    cispo = _entry(section, "cispo")
    assert cispo["clipfrac"] == 0.0 and cispo["entropy"]["would_raise"]["tokens"] == 0  # caps, never zeroes
    rows = compare_rows(section)
    assert [r["method"] for r in rows] == ["grpo", "dapo", "dppo_kl", "cispo", "sapo", "gspo", "bapo"]
    assert {r["method"] for r in compare_bucket_rows(section)} == {"grpo", "dapo", "dppo_kl", "cispo", "sapo", "gspo"}


def test_entropy_side_by_hand(tmp_path):
    """Four tokens, GRPO: q = (0.01, 0.01, 0.6, 0.6), A = (+1, -1, +1, -1), r = 1.5 (A > 0) or 0.5 (A < 0), so
    every token is clipped. mean log q = ½(ln 0.01 + ln 0.6), mean A = 0: the rare A > 0 token and the likely
    A < 0 token have (log q − mean)(A − mean) < 0, would have raised entropy; the other two would have lowered it."""
    q = np.array([[0.01, 0.01, 0.6, 0.6]])
    adv = np.array([[1.0, -1.0, 1.0, -1.0]])
    r = np.where(adv > 0, 1.5, 0.5)
    path = tmp_path / "four.npz"
    path.write_bytes(
        npz_bytes(old_log_prob=np.log(q), log_prob=np.log(q * r), advantages=adv, response_mask=np.ones_like(q))
    )
    (grpo,) = compare_methods(load_rollouts(str(path)), "grpo")["methods"]
    assert grpo["clipfrac"] == 1.0 and grpo["removed"] == 1.0
    assert grpo["entropy"]["would_raise"]["tokens"] == 2 and grpo["entropy"]["would_lower"]["tokens"] == 2
    # |A·r| of the raising pair (tokens 0 and 3): 1.5 + 0.5 of a total 1.5 + 0.5 + 1.5 + 0.5
    assert grpo["entropy"]["would_raise"]["removed"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    "methods, match",
    [("", "must name 1 to 8"), ("grpo,nope", "method 'nope' is neither"), (",".join(["grpo"] * 9), "must name 1 to 8")],
)
def test_bad_methods_are_named(data, methods, match):
    with pytest.raises(SanityInputError, match=match):
        compare_methods(data, methods)


def test_cli_text_json_and_errors(tmp_path, capsys):
    path = tmp_path / "batch.npz"
    path.write_bytes(npz_bytes(**BATCH))
    assert main(["check", "--rollouts", str(path), "--methods", "dapo,grpo,bapo"]) == 0
    out = capsys.readouterr().out
    assert "Methods on these tokens" in out and "arXiv 2505.22617" in out and "bapo: form 'bapo'" in out
    assert main(["check", "--rollouts", str(path), "--methods", "dapo", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["compare"]["methods"][0]["method"] == "dapo" and len(doc["compare"]["methods"][0]["buckets"]) == 14
    assert main(["check", "actor_rollout_ref.actor.clip_ratio=0.2", "--methods", "dapo"]) == 2
    assert "give --rollouts FILE too" in capsys.readouterr().err
    assert main(["check", "--rollouts", str(path), "--methods", "nope"]) == 2
    assert "divclip: error: --methods: method 'nope'" in capsys.readouterr().err


def test_report_and_page():
    rollouts = ("batch.npz", npz_bytes(**BATCH))
    report = report_from_uploads(rollouts=rollouts, methods="grpo,dppo_tv")
    assert [m["method"] for m in report["compare"]["methods"]] == ["grpo", "dppo_tv"]
    at = sanity_page(120).run()
    at.file_uploader(key="sanity_rollouts").set_value((*rollouts, "application/octet-stream"))
    at.text_input(key="sanity_methods").input("grpo,dppo_tv")
    at.run()
    assert not at.exception and not at.error
    assert any("Methods on these tokens" in h.value for h in at.subheader)
    shown = at.dataframe[-2].value
    assert list(shown["method"]) == ["grpo", "dppo_tv"]
