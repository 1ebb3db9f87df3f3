"""The token explainer's words against theory: the loss is PPO's max(−A·r, −A·clip(r)) at the spec's bounds, the
weight is the atlas's w and equals autograd through theory's loss, and the rule names the bound theory's flags
say acted. Needs `divclip.theory.gradient_weight` (the atlas); skipped where it has not landed."""

from __future__ import annotations

import math

import pytest

from divclip import theory
from divclip.app.token_terms import example_token, explain_token, theory_terms
from divclip.theory.spec import parse_methods

pytest.importorskip("divclip.theory.atlas", reason="divclip.theory.gradient_weight comes with the atlas")

METHODS = "grpo,dapo,atr,dppo_kl,grpo/dual=3"


def by_method(q, r, adv, methods=METHODS):
    return {t.method: t for t in explain_token(parse_methods(methods), q, r, adv)}


@pytest.mark.parametrize(
    ("r", "adv", "zero", "words"),
    [
        (1.3, 1.0, True, "above the upper bound 1.2"),
        (0.7, -1.0, True, "below the lower bound 0.8"),
        (1.1, 2.0, False, "inside"),
        (0.7, 1.0, False, "moved against its advantage"),
        (1.3, 0.0, True, "A = 0"),
    ],
)
def test_grpo_token(r, adv, zero, words):
    term = by_method(0.1, r, adv)["grpo"]
    clipped = min(max(r, 0.8), 1.2)
    assert term.loss == pytest.approx(max(-adv * r, -adv * clipped), abs=1e-15)  # PPO, docs/theory.md §1
    assert term.zero is zero and words in term.rule
    # w = 0 where a bound clipped the token, else the importance weight r (A = 0: w is r, the gradient −A·w is 0)
    assert term.weight == (0.0 if zero and adv != 0 else pytest.approx(r, rel=1e-12))


def test_weight_is_autograd_through_theorys_loss():
    import torch

    for q, r, adv in [(0.1, 1.3, 1.0), (0.01, 0.5, -2.0), (0.5, 1.01, 0.3), (0.1, 4.0, -1.0)]:
        for text, term in by_method(q, r, adv).items():
            spec = parse_methods(text)[text]
            old = torch.tensor([[math.log(q)]], dtype=torch.float64)
            lp = (old + math.log(r)).requires_grad_(True)
            loss = theory.policy_terms(
                lp, old, torch.tensor([[adv]], dtype=torch.float64), torch.ones_like(old), spec
            ).loss
            (grad,) = torch.autograd.grad(loss.sum(), lp)
            assert term.gradient == pytest.approx(float(grad), abs=1e-12), (text, q, r, adv)


def test_dual_clip_and_per_token_bounds_are_named():
    terms = by_method(0.1, 4.0, -1.0)
    assert terms["grpo/dual=3"].zero and "dual clip" in terms["grpo/dual=3"].rule
    assert not terms["grpo"].zero  # without the dual clip the token pulls back
    lo, hi = theory.get_measure("binary_kl").bounds(0.05, 0.001)
    assert by_method(0.001, 3.0, 1.0)["dppo_kl"].bounds == (lo, hi)
    assert theory_terms(parse_methods("atr")["atr"], 0.1, 1.3, 1.0).clipped is not None


def test_example_token_from_the_shipped_rollouts():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "app" / "examples" / "rollouts_example.jsonl"
    token = example_token(path.name, path.read_bytes())
    assert token is not None and 0 < token["q"] <= 1 and token["r"] > 0


def test_a_token_with_log_r_1000_is_reported_not_a_traceback():
    """Issue 36: log r = 1000 (log-probabilities 0 and -1000, both valid) raised OverflowError in math.exp."""
    import io

    import numpy as np

    buf = io.BytesIO()
    np.savez(
        buf,
        old_log_prob=np.array([[-1000.0, -0.1]]),
        log_prob=np.array([[0.0, -0.1]]),
        advantages=np.array([[1.0, 1.0]]),
        response_mask=np.array([[1.0, 1.0]]),
    )
    token = example_token("r.npz", buf.getvalue())
    assert (token["i"], token["t"], token["log_r"]) == (0, 0, 1000.0)
    assert token["r"] == math.inf and token["q"] == 0.0 and token["adv"] == 1.0


def test_the_log_ratio_clamp_is_named_and_noclamp_keeps_the_gradient():
    """Issue 35: at r = e^25 with A < 0 (a token that rose against its advantage) verl's clamp zeroes the gradient
    and slime, TRL and OpenRLHF's gspo ('/noclamp') keep it, w = r: the explainer says which."""
    got = by_method(1e-12, math.exp(25.0), -1.0, "grpo,grpo/noclamp")
    assert got["grpo"].zero and "log-ratio clamp" in got["grpo"].rule and "25 > 20" in got["grpo"].rule
    assert not got["grpo/noclamp"].zero and got["grpo/noclamp"].weight == pytest.approx(math.exp(25.0), rel=1e-12)
    assert "clamp" not in got["grpo/noclamp"].rule
