"""The token explainer says the engine arithmetic a method string carries (/noclamp, GSPO's seq_grad_mean, the gated
form's delta_high), with this token's numbers: w against autograd through theory's loss on the spec and on verl's
arithmetic, bounds against the closed form of binary TV (1 − δ/q, 1 + δ_high/q)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from divclip import theory  # noqa: E402
from divclip.app.token_terms import explain_token  # noqa: E402
from divclip.theory.atlas import verl_arithmetic  # noqa: E402
from divclip.theory.spec import parse_methods  # noqa: E402

METHODS = "grpo/noclamp,gspo/noclamp/seq_grad_mean=1,binary_tv:0.1/gated/delta_high=0.3,grpo"


def _grad(spec, q, log_r, adv) -> float:
    old = torch.tensor([[math.log(q)]], dtype=torch.float64)
    lp = (old + log_r).requires_grad_(True)
    loss = theory.policy_terms(lp, old, torch.tensor([[adv]], dtype=torch.float64), torch.ones_like(old), spec).loss
    (g,) = torch.autograd.grad(loss.sum(), lp)
    return float(g)


def _terms(q, r, adv):
    return {t.method: t for t in explain_token(parse_methods(METHODS), q, r, adv)}


def test_noclamp_beyond_verls_clamp_says_both_weights():
    q, log_r, adv = 1e-12, 25.0, -1.0
    terms = _terms(q, math.exp(log_r), adv)
    spec = parse_methods("grpo/noclamp")["grpo/noclamp"]
    term = terms["grpo/noclamp"]
    assert term.gradient == pytest.approx(_grad(spec, q, log_r, adv), rel=1e-12)
    assert term.gradient == pytest.approx(math.exp(25.0), rel=1e-12)  # −A·r with r = e^25, unclamped
    assert _grad(verl_arithmetic(spec), q, log_r, adv) == 0.0  # verl's clamp zeroes it
    (line,) = term.arithmetic
    assert "/noclamp" in line and f"w = {math.exp(25.0):.6g}, under verl's clamp w = 0" in line
    assert terms["grpo"].arithmetic == () and terms["grpo"].zero


def test_noclamp_inside_the_clamp_says_where_they_part():
    (line,) = _terms(0.1, 1.3, 1.0)["grpo/noclamp"].arithmetic
    assert "the two agree; they part at |log r| > 20" in line and f"{math.exp(25.0):.6g}" in line


def test_seq_grad_mean_and_two_widths_are_said():
    q, r, adv = 0.1, 1.3, 1.0
    terms = _terms(q, r, adv)
    gspo = terms["gspo/noclamp/seq_grad_mean=1"].arithmetic
    assert len(gspo) == 2 and "row's mean of A·[kept]" in gspo[1] and "(+0, +0), verl (-1, +1)" in gspo[1]
    dppo = terms["binary_tv:0.1/gated/delta_high=0.3"]
    lo, hi = 1.0 - 0.1 / q, 1.0 + 0.3 / q  # binary TV: |p − q| <= δ, δ_high on the upper side
    assert dppo.bounds == pytest.approx((max(lo, 0.0), hi), rel=1e-14)
    (line,) = dppo.arithmetic
    assert f"u = {hi:.6g} at δ_high = 0.3" in line and f"one δ would put u at {1.0 + 0.1 / q:.6g}" in line


def test_atlas_page_lists_the_engine_arithmetic():
    """The Atlas page, through AppTest: a line per option each method string carries, none for verl's own."""
    import re
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from divclip.theory.atlas import arithmetic

    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app" / "main.py"), default_timeout=120)
    at.query_params.update({"methods": "grpo/noclamp,gspo/noclamp/seq_grad_mean=1,grpo"})
    at.switch_page("views/atlas.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    (block,) = [m.value for m in at.markdown if "Engine arithmetic the method strings carry" in m.value]
    lines = [re.sub(r"\\(.)", r"\1", x) for x in block.splitlines()[1:]]
    expected = [(m, a) for m in ("grpo/noclamp", "gspo/noclamp/seq_grad_mean=1", "grpo") for a in arithmetic(m)]
    assert len(lines) == len(expected) == 3
    for line, (method, a) in zip(lines, expected):
        assert line.startswith(f"- `{method}`, **{a['option']}**") and a["where"] in line


def test_skyrls_dppo_surrogate_and_float32_exp_are_said_with_this_tokens_weights():
    """SkyRL's dppo (surrogate=ratio, exp_dtype=float32): at log r = 25 (kept by binary TV at q = 1e-12, A > 0) its
    w is 0 by autograd through the clamp, verl's surrogate keeps e^20; the float32 exp gets its own line."""
    method = "binary_tv:0.2/gated/gate=verl/surrogate=ratio/exp_dtype=float32"
    spec = parse_methods(method)[method]
    q, log_r, adv = 1e-12, 25.0, 1.0
    (term,) = explain_token({method: spec}, q, math.exp(log_r), adv)
    assert term.gradient == _grad(spec, q, log_r, adv) == 0.0
    assert _grad(verl_arithmetic(spec), q, log_r, adv) == pytest.approx(-math.exp(20.0), rel=1e-12)
    lines = {line.split(":")[0]: line for line in term.arithmetic}
    said = lines["Engine arithmetic, surrogate=ratio"]
    assert "w = 0, under verl's surrogate w = " + f"{math.exp(20.0):.6g}" in said
    assert "safe_exp_delta" in lines["Engine arithmetic, exp_dtype=float32"]
    assert term.loss_text.startswith("ℓ = −A·r (r differentiable)")  # SkyRL's value, not −A·sg(r)·log π
    q, r = 0.3, 1.1  # inside the gate: ℓ = −A·r, checked against theory's loss on the spec
    (term,) = explain_token({method: spec}, q, r, adv)
    assert term.loss == pytest.approx(-adv * r, rel=1e-6) and f"ℓ = {-adv * r:.6g} for this token" in term.loss_text
