"""The engine arithmetic a method string carries, as the atlas shows it (`divclip.theory.atlas.arithmetic`): each
number against autograd through `policy_loss` on the spec and on verl's arithmetic, and against closed forms
(e^25, 1 + δ/q, the row's mean of −A·s); `divclip atlas` prints it in text and JSON (docs/engines.md)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from divclip.cli import main  # noqa: E402
from divclip.theory import gradient_weight, parse_method  # noqa: E402
from divclip.theory.atlas import EXAMPLE_LOG_R, EXAMPLE_Q, Q_GRID, arithmetic, verl_arithmetic  # noqa: E402
from divclip.theory.losses import policy_loss  # noqa: E402


def _autograd(spec, log_q, log_r, adv, agg="token-sum") -> np.ndarray:
    """∂loss/∂log π per token of one row (float64), log π = log q + log r the leaf."""
    old = torch.tensor([log_q], dtype=torch.float64)
    lp = (old + torch.tensor([log_r], dtype=torch.float64)).requires_grad_(True)
    a = torch.tensor([adv], dtype=torch.float64)
    loss, _ = policy_loss(lp, old, a, torch.ones_like(old), spec, agg, metrics=False)
    (grad,) = torch.autograd.grad(loss, lp)
    return grad.numpy().ravel()


def _w_autograd(spec, log_r, adv) -> float:
    return float(-_autograd(spec, [math.log(EXAMPLE_Q)], [log_r], [adv])[0] / adv)


@pytest.mark.parametrize("method", ["grpo/noclamp", "dapo/noclamp", "gspo/noclamp", "binary_tv:0.2/gated/noclamp"])
def test_noclamp_numbers_are_autograd_with_and_without_the_clamp(method):
    (entry,) = [a for a in arithmetic(method) if a["option"] == "noclamp"]
    ex = entry["example"]
    assert ex["q"] == EXAMPLE_Q and ex["log_r"] == [EXAMPLE_LOG_R, -EXAMPLE_LOG_R]
    spec, verl = parse_method(method), verl_arithmetic(method)
    assert (
        not spec.param("clamp_log_ratio")
        and verl.param("clamp_log_ratio")
        and verl.form == spec.form
        and verl.level == spec.level
    )
    for i, log_r in enumerate(ex["log_r"]):
        for key, adv in (("A>0", 1.0), ("A<0", -1.0)):
            assert ex[key][i] == pytest.approx(_w_autograd(spec, log_r, adv), rel=1e-12, abs=1e-300)
            assert ex[f"verl {key}"][i] == pytest.approx(_w_autograd(verl, log_r, adv), rel=1e-12, abs=1e-300)


def test_the_gradient_at_log_r_25_with_and_without_verls_clamp():
    """A < 0 at log r = 25 is inside a PPO clip (r > 1 + ε, moved against A): unclamped w = e^25; verl's clamp at
    20 zeroes it. The gated form keeps its gradient under the clamp, at the weight e^20 instead of e^25."""
    e25, e20 = math.exp(25.0), math.exp(20.0)
    ex = arithmetic("grpo/noclamp")[0]["example"]
    assert ex["A<0"][0] == pytest.approx(e25, rel=1e-14) and ex["verl A<0"][0] == 0.0
    assert ex["A>0"][0] == 0.0 == ex["verl A>0"][0]  # r far above 1 + ε: clipped either way
    assert ex["A>0"][1] == pytest.approx(math.exp(-25.0), rel=1e-14) and ex["verl A>0"][1] == 0.0
    gated = arithmetic("binary_tv:0.2/gated/noclamp")[0]
    assert "does not zero" in gated["verl"]
    # binary TV at q = 1e-12: |p − q| = q·|r − 1| < 0.2 at log r = ±25, so every side keeps the token
    assert gated["example"]["A>0"][0] == pytest.approx(e25, rel=1e-14)
    assert gated["example"]["verl A>0"][0] == pytest.approx(e20, rel=1e-14)
    # the numpy weight itself (the atlas's w), against the same closed form
    assert float(gradient_weight("binary_tv:0.2/gated/noclamp", 1e-12, e25, 1.0)) == pytest.approx(e25, rel=1e-14)
    assert float(gradient_weight("binary_tv:0.2/gated", 1e-12, e25, 1.0)) == pytest.approx(e20, rel=1e-14)


def test_seq_grad_mean_gives_each_token_the_rows_mean():
    (entry,) = [a for a in arithmetic("gspo/seq_grad_mean=1") if a["option"] == "seq_grad_mean=1"]
    ex = entry["example"]
    adv = ex["A"]
    spec, verl = parse_method("gspo/seq_grad_mean=1"), verl_arithmetic("gspo/seq_grad_mean=1")
    assert verl.param("seq_grad_mean") == 0.0
    log_q = [math.log(0.3), math.log(0.6)]
    got = _autograd(spec, log_q, [0.0, 0.0], adv)  # s = 1, inside 1 ± 3e-4/4e-4: both tokens kept
    mine = _autograd(verl, log_q, [0.0, 0.0], adv)
    np.testing.assert_allclose(ex["gradient"], got, rtol=0, atol=1e-15)
    np.testing.assert_allclose(ex["verl gradient"], mine, rtol=0, atol=1e-15)
    s = ex["s"]
    np.testing.assert_allclose(got, [-s * np.mean(adv)] * 2, atol=1e-15)  # the row's mean of −A·s
    np.testing.assert_allclose(mine, [-a * s for a in adv], atol=1e-15)  # each token its own −A·s
    assert not np.allclose(got, mine)


def test_delta_high_shows_the_two_widths():
    (entry,) = arithmetic("binary_tv:0.1/gated/delta_high=0.3")
    ex = entry["example"]
    q = np.asarray(Q_GRID)
    assert ex["q"] == list(Q_GRID)
    np.testing.assert_allclose(ex["hi"], 1.0 + 0.3 / q, rtol=1e-14)  # binary TV: p − q <= δ_high
    np.testing.assert_allclose(ex["hi at δ"], 1.0 + 0.1 / q, rtol=1e-14)
    assert "δ_high = 0.3" in entry["text"] and "δ = 0.1" in entry["text"]
    assert verl_arithmetic("binary_tv:0.1/gated/delta_high=0.3").param("delta_high") == 0.3  # verl's dppo too


@pytest.mark.parametrize("measure", ["binary_tv:0.2", "binary_kl:0.05"])
def test_the_ratio_surrogate_zeroes_w_beyond_the_clamp_where_verls_keeps_e20(measure):
    """SkyRL's dppo (surrogate=ratio): −A·r through the ±20 clamp, so at log r = ±25 (kept by the gate at
    q = 1e-12) w = 0 by autograd, where verl's −A·sg(r)·log π keeps w = e^{±20}; with /noclamp w = e^{±25}."""
    method = f"{measure}/gated/surrogate=ratio"
    (entry,) = [a for a in arithmetic(method) if a["option"] == "surrogate=ratio"]
    ex = entry["example"]
    spec, verl = parse_method(method), verl_arithmetic(method)
    assert verl.param("surrogate") == "logp" and spec.param("surrogate") == "ratio"
    for i, log_r in enumerate(ex["log_r"]):
        for key, adv in (("A>0", 1.0), ("A<0", -1.0)):
            assert ex[key][i] == pytest.approx(_w_autograd(spec, log_r, adv), rel=1e-12, abs=1e-300)
            assert ex[f"verl {key}"][i] == pytest.approx(_w_autograd(verl, log_r, adv), rel=1e-12, abs=1e-300)
    assert ex["A>0"] == [0.0, 0.0] and ex["A<0"] == [0.0, 0.0]
    if measure.startswith("binary_tv"):  # binary KL gates the A > 0 token out (D ≈ 1.8 > 0.05)
        assert ex["verl A>0"][0] == pytest.approx(math.exp(20.0), rel=1e-14)
    assert ex["verl A<0"][1] == pytest.approx(math.exp(-20.0), rel=1e-14)
    raw = parse_method(method + "/noclamp")
    assert _w_autograd(raw, -25.0, -1.0) == pytest.approx(math.exp(-25.0), rel=1e-12)
    assert float(gradient_weight(raw, EXAMPLE_Q, math.exp(-25.0), -1.0)) == pytest.approx(math.exp(-25.0), rel=1e-12)


def test_the_ratio_surrogate_is_refused_with_a_tis_cap():
    with pytest.raises(ValueError, match=r"tis_cap.*surrogate 'ratio'"):
        parse_method("binary_tv:0.2/gated/surrogate=ratio/tis=2")
    with pytest.raises(ValueError, match=r"surrogate must be one of \['logp', 'ratio'\], got 'r'"):
        parse_method("binary_tv:0.2/gated/surrogate=r")


def test_skyrls_float32_exp_is_shown_and_verls_arithmetic_drops_it():
    """exp_dtype=float32 (SkyRL's safe_exp_delta): named, its w within float32 rounding of verl's (the same numpy
    weight: the rounding is the torch loss's), and verl_arithmetic takes exp in the input dtype."""
    (entry,) = arithmetic("grpo/exp_dtype=float32")
    assert entry["option"] == "exp_dtype=float32" and "safe_exp_delta" in entry["text"]
    assert verl_arithmetic("grpo/exp_dtype=float32") == parse_method("grpo")
    spec = parse_method("grpo/exp_dtype=float32")
    for log_r in (-0.15, 0.1, 0.3):
        w32, w = _w_autograd(spec, log_r, 1.0), _w_autograd(parse_method("grpo"), log_r, 1.0)
        assert w32 != w or log_r == 0.3  # rounded as float32 (0 where clipped)
        assert w32 == pytest.approx(w, rel=2e-7)


def test_verls_own_arithmetic_shows_nothing():
    for method in ("grpo", "dapo", "gspo", "dppo_kl", "sapo", "kl3:0.02&binary_tv:0.2"):
        assert arithmetic(method) == [], method
    assert [a["option"] for a in arithmetic("binary_kl:0.02/gated/delta_high=0.08/gate=verl")] == [
        "delta_high=0.08",
        "gate=verl",
    ]


def _run(capsys, argv):
    assert main(argv) == 0
    return capsys.readouterr().out


def test_cli_text_and_json_say_the_difference(capsys):
    methods = "grpo/noclamp,gspo/noclamp/seq_grad_mean=1,binary_tv:0.1/gated/delta_high=0.3/gate=verl,grpo"
    at = f"{EXAMPLE_Q!r},{math.exp(EXAMPLE_LOG_R)!r}"
    text = _run(capsys, ["atlas", "--methods", methods, "--at", at])
    assert "Engine arithmetic" in text
    for needle in ("grpo/noclamp: noclamp, where |log r| > 20", "log s > 10", "seq_grad_mean=1, where", "δ_high = 0.3"):
        assert needle in text, needle
    assert "verl w (A<0)" in text
    doc = json.loads(_run(capsys, ["atlas", "--methods", methods, "--at", at, "--json"]))
    rows = {r["name"]: r for r in doc["methods"]}
    assert rows["grpo"]["arithmetic"] == [] and "verl" not in rows["grpo"]["weights"][0]
    assert [a["option"] for a in rows["gspo/noclamp/seq_grad_mean=1"]["arithmetic"]] == ["noclamp", "seq_grad_mean=1"]
    w = rows["grpo/noclamp"]["weights"][0]
    assert w["A<0"] == pytest.approx(math.exp(25.0), rel=1e-12) and w["verl"]["A<0"] == 0.0
    assert w["A<0"] == pytest.approx(_w_autograd(parse_method("grpo/noclamp"), 25.0, -1.0), rel=1e-12)
